//! Test signals: what the delivery runners decide and when their requests are answered, told
//! to whoever listens, so that a test waits for the event it expects instead of sleeping for a
//! time it guesses.
//!
//! A server started by [`crate::server::run`] has no listener: its runners send nothing, and
//! signals cost nothing but a check. Tests start the server with [`Signals::listened`]
//! ([`crate::server::run_with_signals`]) and [`Signals::listen`] before they act, so that no
//! event after the act is missed.

use tenax_core::clock::UnixMs;
use tenax_core::model::SubscriptionId;
use tokio::sync::broadcast;

use super::admission::Wait;

/// Events kept for a listener that falls behind; past that it misses the oldest, and its
/// next receive says so.
const BACKLOG: usize = 4_096;

/// Something the runner of `subscription` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    pub subscription: SubscriptionId,
    pub event: Event,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The runner begins to wait for what its admission named: until then it takes nothing.
    Waits(Wait),
    /// A request of the runner's got its answer (or failed) at the engine's time `at_ms`, the
    /// time the attempt's outcome counts from. What the answer changes (the endpoint's state,
    /// the subscription's health, the attempt's own commit) is stored after this.
    Answered { at_ms: UnixMs },
}

/// Where the runners send their signals: nowhere ([`Signals::default`]), or to the
/// listeners of a [`Signals::listened`].
#[derive(Debug, Clone, Default)]
pub struct Signals(Option<broadcast::Sender<Signal>>);

impl Signals {
    /// Signals that can be listened to.
    pub fn listened() -> Self {
        Self(Some(broadcast::channel(BACKLOG).0))
    }

    /// A listener of the signals sent from now on; `None` for signals that are not listened.
    pub fn listen(&self) -> Option<broadcast::Receiver<Signal>> {
        self.0.as_ref().map(broadcast::Sender::subscribe)
    }

    pub(super) fn send(&self, subscription: SubscriptionId, event: Event) {
        if let Some(sender) = &self.0 {
            // An error only says that nobody listens now: nobody waits for the event.
            let _ = sender.send(Signal {
                subscription,
                event,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_hears_what_is_sent_after_it_began() {
        let signals = Signals::listened();
        let id = SubscriptionId(7);
        signals.send(id, Event::Waits(Wait::Ready));
        let mut listener = signals.listen().unwrap();
        signals.send(id, Event::Waits(Wait::Change));
        assert_eq!(
            listener.try_recv().unwrap(),
            Signal {
                subscription: id,
                event: Event::Waits(Wait::Change)
            }
        );
        assert!(listener.try_recv().is_err());
    }

    #[test]
    fn a_listener_hears_every_runner_and_every_event_in_the_order_sent() {
        let signals = Signals::listened();
        let mut listener = signals.listen().unwrap();
        let sent = [
            Signal {
                subscription: SubscriptionId(1),
                event: Event::Answered { at_ms: 1_000 },
            },
            Signal {
                subscription: SubscriptionId(2),
                event: Event::Waits(Wait::Ready),
            },
            Signal {
                subscription: SubscriptionId(1),
                event: Event::Waits(Wait::Endpoint { until_ms: 3_000 }),
            },
        ];
        for signal in sent {
            signals.send(signal.subscription, signal.event);
        }
        for signal in sent {
            assert_eq!(listener.try_recv().unwrap(), signal);
        }
        assert!(listener.try_recv().is_err());
    }

    #[test]
    fn signals_not_listened_have_no_listener() {
        let signals = Signals::default();
        assert!(signals.listen().is_none());
        signals.send(SubscriptionId(1), Event::Waits(Wait::Ready));
    }
}
