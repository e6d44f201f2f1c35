//! A runner's admission decision: from what it sees of its subscription and endpoint, whether
//! to take deliveries now, how many, and if not, what to wait for.
//!
//! The rules, in the order they are applied (the first that holds decides):
//! 1. A disabled subscription takes nothing until it changes.
//! 2. Its own bound (`max_concurrency`, this server's [`share`]; at most [`BATCH`] at once):
//!    when its requests fill it, it waits for one of them to end.
//! 3. The endpoint's gate ([`backpressure::gate`]): while a pause or an open breaker holds, it
//!    waits until the gate's time or a change; once the breaker's cool-down is over, it takes
//!    one delivery, the probe.
//! 4. The endpoint's bound (shared by the endpoint's subscriptions): with no permit free, it
//!    waits for one; otherwise it takes no more than are free.
//! 5. The throttle (`throttle_per_second`, this server's share): no more than its tokens allow;
//!    with none, it waits for the next one.
//!
//! What is taken then passes the retry budget ([`admit_taken`]): a retry over it is held back
//! unsent; the probe goes whatever the budget.
//!
//! Pure: no I/O and no waiting. The runner gathers the state (reading the store, counting
//! permits) and carries out the decision (claiming the probe, acquiring permits, taking,
//! sending, holding, waiting); time is a parameter. The throttle counts in the runner's own
//! real time (rates are per real second, whatever the engine's clock says); the gate and the
//! retry budget count in the engine's.

use std::num::NonZeroU32;

use tenax_core::clock::UnixMs;
use tenax_core::model::Subscription;

use super::backpressure::Gate;
use super::budget::BudgetBook;
use super::share;
use super::throttle::Throttle;

/// Most deliveries one runner takes in one go.
pub const BATCH: usize = 64;

/// The subscription's switch and limits, each set for the whole cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub enabled: bool,
    pub max_concurrency: Option<u32>,
    pub throttle_per_second: Option<u32>,
}

impl Limits {
    pub fn of(subscription: &Subscription) -> Self {
        Self {
            enabled: subscription.enabled,
            max_concurrency: subscription.max_concurrency,
            throttle_per_second: subscription.throttle_per_second,
        }
    }
}

/// What a runner sees when it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub limits: Limits,
    /// Servers sharing the store now: each keeps its [`share`] of every limit.
    pub servers: usize,
    /// The runner's requests on their way.
    pub in_flight: usize,
    /// The endpoint's pause and breaker as stored, at the engine's time now.
    pub gate: Gate,
    /// Permits of the endpoint's bound the runner holds or could take at once.
    pub free_permits: usize,
}

/// What the runner does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Take at most `up_to` ready deliveries (at least one): `probe`, the endpoint's breaker
    /// probe (then `up_to` is 1), which the runner must claim before it takes.
    Take {
        up_to: usize,
        probe: bool,
    },
    Wait(Wait),
}

/// What the runner waits for before it looks again (or for the server to stop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The subscription is disabled: a change of it.
    Change,
    /// Its own bound is full: one of its requests to end.
    RequestEnd,
    /// The endpoint's pause or breaker holds: the engine's time `until_ms`, or a change of the
    /// endpoint's state or of the subscription.
    Endpoint { until_ms: UnixMs },
    /// The endpoint's bound is full: a permit, which the runner keeps for its next look.
    Permit,
    /// The throttle has no token: `for_ms` of real time, when the next one comes.
    Token { for_ms: u64 },
    /// Nothing was ready: a delivery becoming ready, or a change of the subscription.
    Ready,
}

/// What becomes of a delivery taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budgeted {
    Send,
    /// Over the retry budget: put back unsent until `until_ms` (the engine's time).
    Hold {
        until_ms: UnixMs,
    },
}

/// One runner's admission: the rules, and the throttle's bucket they keep between decisions.
#[derive(Debug, Default)]
pub struct Admission {
    /// `None` while the subscription has no throttle.
    throttle: Option<Throttle>,
}

impl Admission {
    /// The decision on `seen` at `throttle_ms` (the runner's real time, in ms). A `Take` has
    /// used throttle tokens for all it allows: what goes untaken is given back
    /// ([`Admission::give_back`], [`Admission::took`]).
    pub fn admit(&mut self, seen: &Seen, throttle_ms: u64) -> Decision {
        if !seen.limits.enabled {
            return Decision::Wait(Wait::Change);
        }
        let room = own_room(seen.limits.max_concurrency, seen.servers, seen.in_flight);
        if room == 0 {
            return Decision::Wait(Wait::RequestEnd);
        }
        let (room, probe) = match seen.gate {
            Gate::Send => (room, false),
            Gate::Wait { until_ms, .. } => return Decision::Wait(Wait::Endpoint { until_ms }),
            Gate::Probe => (1, true),
        };
        let room = room.min(seen.free_permits);
        if room == 0 {
            return Decision::Wait(Wait::Permit);
        }
        let rate = seen
            .limits
            .throttle_per_second
            .map(|rate| share(rate, seen.servers));
        match self.tokens(rate, room, throttle_ms) {
            Ok(up_to) => Decision::Take { up_to, probe },
            Err(wait) => Decision::Wait(wait),
        }
    }

    /// Up to `want` of the throttle's tokens at `now_ms`, at this server's `rate` (none or 0:
    /// unthrottled); with none, how long until the next.
    fn tokens(&mut self, rate: Option<u32>, want: usize, now_ms: u64) -> Result<usize, Wait> {
        let Some(rate) = rate.and_then(NonZeroU32::new) else {
            self.throttle = None;
            return Ok(want);
        };
        let bucket = self
            .throttle
            .get_or_insert_with(|| Throttle::new(rate, now_ms));
        if bucket.rate() != rate {
            bucket.set_rate(rate, now_ms);
        }
        match bucket.take(want, now_ms) {
            0 => Err(Wait::Token {
                for_ms: bucket.next_token_at(now_ms).saturating_sub(now_ms).max(1),
            }),
            granted => Ok(granted),
        }
    }

    /// Gives back `unused` throttle tokens of a `Take`: permits another runner took first, a
    /// probe another claimed.
    pub fn give_back(&mut self, unused: usize) {
        if let Some(bucket) = self.throttle.as_mut() {
            bucket.give_back(unused);
        }
    }

    /// `taken` deliveries were ready of the `asked` the runner had tokens for: the rest of the
    /// tokens go back. None ready: wait for one.
    pub fn took(&mut self, asked: usize, taken: usize) -> Option<Wait> {
        self.give_back(asked.saturating_sub(taken));
        (taken == 0).then_some(Wait::Ready)
    }
}

/// Room under the subscription's own bound, this server's share of `max_concurrency` (none:
/// unbounded), with `in_flight` requests on their way; at most [`BATCH`].
fn own_room(max_concurrency: Option<u32>, servers: usize, in_flight: usize) -> usize {
    let bound = max_concurrency.map_or(usize::MAX, |n| {
        usize::try_from(share(n, servers)).unwrap_or(usize::MAX)
    });
    bound.saturating_sub(in_flight).min(BATCH)
}

/// What becomes of each delivery of `subscription` taken at `now_ms`, told by whether it is a
/// retry ([`super::budget::is_retry`]), in the order taken: a retry over the retry budget is
/// held, unless it is the breaker's `probe` (which must go for the endpoint to be known well
/// again). Each one sent is counted in the budget's window.
pub fn admit_taken(
    budgets: &BudgetBook,
    subscription: &Subscription,
    servers: usize,
    probe: bool,
    retries: impl IntoIterator<Item = bool>,
    now_ms: UnixMs,
) -> Vec<Budgeted> {
    retries
        .into_iter()
        .map(
            |retry| match budgets.admit(subscription, retry, servers, now_ms) {
                Err(until_ms) if !probe => Budgeted::Hold { until_ms },
                _ => Budgeted::Send,
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use tenax_core::model::RetryBudget;

    use super::*;
    use crate::delivery::backpressure::Hold;

    const OPEN: Limits = Limits {
        enabled: true,
        max_concurrency: None,
        throttle_per_second: None,
    };

    /// An enabled, unbounded, unthrottled subscription on one server, nothing in flight, its
    /// endpoint open with 10 permits free.
    const CLEAR: Seen = Seen {
        limits: OPEN,
        servers: 1,
        in_flight: 0,
        gate: Gate::Send,
        free_permits: 10,
    };

    fn take(up_to: usize) -> Decision {
        Decision::Take {
            up_to,
            probe: false,
        }
    }

    fn wait(wait: Wait) -> Decision {
        Decision::Wait(wait)
    }

    fn bounded(max_concurrency: u32) -> Limits {
        Limits {
            max_concurrency: Some(max_concurrency),
            ..OPEN
        }
    }

    fn throttled(per_second: u32) -> Limits {
        Limits {
            throttle_per_second: Some(per_second),
            ..OPEN
        }
    }

    const PAUSED: Gate = Gate::Wait {
        until_ms: 5_000,
        why: Hold::Paused,
    };

    #[test]
    fn each_rule_decides_in_its_turn() {
        let disabled = Limits {
            enabled: false,
            ..OPEN
        };
        let cases: [(&str, Seen, Decision); 15] = [
            ("all clear: what the permits allow", CLEAR, take(10)),
            (
                "disabled: a change, whatever else holds",
                Seen {
                    limits: disabled,
                    gate: PAUSED,
                    free_permits: 0,
                    ..CLEAR
                },
                wait(Wait::Change),
            ),
            (
                "own bound full: a request to end",
                Seen {
                    limits: bounded(2),
                    in_flight: 2,
                    ..CLEAR
                },
                wait(Wait::RequestEnd),
            ),
            (
                "own bound over full (its share shrank): a request to end",
                Seen {
                    limits: bounded(4),
                    servers: 2,
                    in_flight: 3,
                    ..CLEAR
                },
                wait(Wait::RequestEnd),
            ),
            (
                "own bound, this server's share of it",
                Seen {
                    limits: bounded(5),
                    servers: 2,
                    in_flight: 1,
                    ..CLEAR
                },
                take(2),
            ),
            (
                "own bound before the gate",
                Seen {
                    limits: bounded(1),
                    in_flight: 1,
                    gate: PAUSED,
                    ..CLEAR
                },
                wait(Wait::RequestEnd),
            ),
            (
                "a pause: its end or a change",
                Seen {
                    gate: PAUSED,
                    ..CLEAR
                },
                wait(Wait::Endpoint { until_ms: 5_000 }),
            ),
            (
                "an open breaker: its end or a change",
                Seen {
                    gate: Gate::Wait {
                        until_ms: 7_000,
                        why: Hold::Open,
                    },
                    ..CLEAR
                },
                wait(Wait::Endpoint { until_ms: 7_000 }),
            ),
            (
                "the gate before the endpoint's bound",
                Seen {
                    gate: PAUSED,
                    free_permits: 0,
                    ..CLEAR
                },
                wait(Wait::Endpoint { until_ms: 5_000 }),
            ),
            (
                "the probe: one alone",
                Seen {
                    gate: Gate::Probe,
                    ..CLEAR
                },
                Decision::Take {
                    up_to: 1,
                    probe: true,
                },
            ),
            (
                "the probe under a full bound: a permit first",
                Seen {
                    gate: Gate::Probe,
                    free_permits: 0,
                    ..CLEAR
                },
                wait(Wait::Permit),
            ),
            (
                "endpoint's bound full: a permit",
                Seen {
                    free_permits: 0,
                    ..CLEAR
                },
                wait(Wait::Permit),
            ),
            (
                "no more than the endpoint's free permits",
                Seen {
                    limits: bounded(8),
                    free_permits: 3,
                    ..CLEAR
                },
                take(3),
            ),
            (
                "at most a batch",
                Seen {
                    free_permits: 1_000,
                    ..CLEAR
                },
                take(BATCH),
            ),
            (
                "a throttle's burst",
                Seen {
                    limits: throttled(4),
                    ..CLEAR
                },
                take(4),
            ),
        ];
        for (what, seen, expected) in cases {
            assert_eq!(Admission::default().admit(&seen, 0), expected, "{what}");
        }
    }

    #[test]
    fn the_throttle_grants_this_servers_share_then_waits_for_the_next_token() {
        let mut admission = Admission::default();
        // 10 per second on two servers: 5 here, a token every 200 ms.
        let seen = Seen {
            limits: throttled(10),
            servers: 2,
            ..CLEAR
        };
        assert_eq!(admission.admit(&seen, 0), take(5));
        assert_eq!(admission.admit(&seen, 0), wait(Wait::Token { for_ms: 200 }));
        assert_eq!(
            admission.admit(&seen, 150),
            wait(Wait::Token { for_ms: 50 })
        );
        assert_eq!(admission.admit(&seen, 200), take(1));
    }

    #[test]
    fn a_wait_before_the_throttle_uses_no_token() {
        let mut admission = Admission::default();
        let throttled = |gate, free_permits| Seen {
            limits: throttled(2),
            gate,
            free_permits,
            ..CLEAR
        };
        assert_eq!(
            admission.admit(&throttled(PAUSED, 10), 0),
            wait(Wait::Endpoint { until_ms: 5_000 })
        );
        assert_eq!(
            admission.admit(&throttled(Gate::Send, 0), 0),
            wait(Wait::Permit)
        );
        assert_eq!(admission.admit(&throttled(Gate::Send, 10), 0), take(2));
    }

    #[test]
    fn tokens_not_used_go_back() {
        let mut admission = Admission::default();
        let seen = Seen {
            limits: throttled(5),
            ..CLEAR
        };
        assert_eq!(admission.admit(&seen, 0), take(5));
        // Two permits went to another runner, two deliveries of the three were ready.
        admission.give_back(2);
        assert_eq!(admission.took(3, 2), None);
        assert_eq!(admission.admit(&seen, 0), take(3));
        assert_eq!(admission.took(3, 0), Some(Wait::Ready), "none ready");
        assert_eq!(admission.admit(&seen, 0), take(3));
    }

    #[test]
    fn unthrottled_none_ready_waits_for_one() {
        let mut admission = Admission::default();
        assert_eq!(admission.took(10, 0), Some(Wait::Ready));
        assert_eq!(admission.took(10, 1), None);
    }

    #[test]
    fn a_changed_rate_counts_from_the_change_and_zero_is_no_throttle() {
        let mut admission = Admission::default();
        let at = |per_second| Seen {
            limits: throttled(per_second),
            ..CLEAR
        };
        assert_eq!(admission.admit(&at(2), 0), take(2));
        // 500 ms at 2 per second is one token; from then on 20 per second.
        assert_eq!(admission.admit(&at(20), 500), take(1));
        assert_eq!(admission.admit(&at(20), 550), take(1));
        assert_eq!(admission.admit(&at(0), 550), take(10), "0: unthrottled");
        // The throttle set again starts with a full bucket.
        assert_eq!(admission.admit(&at(3), 550), take(3));
    }

    fn budgeted(retry_budget: Option<RetryBudget>) -> Subscription {
        Subscription {
            retry_budget,
            ..Subscription::new("q".into(), 0)
        }
    }

    /// No retry beyond the floor.
    const FLOOR_ONLY: RetryBudget = RetryBudget {
        percent: 1,
        window_ms: 10_000,
        min_retries: 2,
    };

    #[test]
    fn retries_over_the_budget_are_held_and_first_attempts_go() {
        let budgets = BudgetBook::default();
        let subscription = budgeted(Some(FLOOR_ONLY));
        let taken = [false, true, true, true, false];
        let hold = Budgeted::Hold { until_ms: 11_000 };
        assert_eq!(
            admit_taken(&budgets, &subscription, 1, false, taken, 100),
            [
                Budgeted::Send,
                Budgeted::Send,
                Budgeted::Send,
                hold,
                Budgeted::Send
            ]
        );
        // Only those sent were counted.
        let used = budgets.used(&subscription, 100).unwrap();
        assert_eq!((used.attempts, used.retries), (4, 2));
    }

    #[test]
    fn the_floor_is_this_servers_share() {
        let budgets = BudgetBook::default();
        let subscription = budgeted(Some(FLOOR_ONLY));
        assert_eq!(
            admit_taken(&budgets, &subscription, 2, false, [true, true], 0),
            [Budgeted::Send, Budgeted::Hold { until_ms: 11_000 }]
        );
    }

    #[test]
    fn the_probe_goes_whatever_the_budget() {
        let budgets = BudgetBook::default();
        let subscription = budgeted(Some(FLOOR_ONLY));
        admit_taken(&budgets, &subscription, 1, false, [true, true], 0);
        assert_eq!(
            admit_taken(&budgets, &subscription, 1, true, [true], 0),
            [Budgeted::Send]
        );
        assert_eq!(
            admit_taken(&budgets, &subscription, 1, false, [true], 0),
            [Budgeted::Hold { until_ms: 11_000 }]
        );
    }

    #[test]
    fn without_a_budget_everything_goes() {
        let budgets = BudgetBook::default();
        assert_eq!(
            admit_taken(&budgets, &budgeted(None), 1, false, [true; 3], 0),
            [Budgeted::Send; 3]
        );
    }
}
