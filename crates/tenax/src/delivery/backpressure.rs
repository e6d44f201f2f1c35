//! Endpoint backpressure: when deliveries to an endpoint (an origin, shared by every
//! subscription pointing there) may go, and how an attempt's answer changes that.
//!
//! - A **pause**: a 429 or 503 with `Retry-After` holds every delivery to the endpoint until
//!   the advised time (at most [`MAX_RETRY_AFTER_MS`], as `outcome` clamps it).
//! - A **circuit breaker**: a run of failures opens it for a cool-down; then one probe
//!   delivery may go (half-open); its success closes the breaker, its failure opens it again
//!   for twice as long (up to the most).
//!
//! Deliveries held back are not taken, so they use no attempt. The state is stored
//! ([`EndpointState`]) and changed by atomic store changes that call these functions, so it
//! holds for every server of a cluster; only the run of failures that opens the breaker is
//! counted by each server (`super::endpoints`).
//!
//! Pure: time is a parameter, every change returns the new state (`None`: leave it as it is).

use tenax_core::clock::UnixMs;
use tenax_core::model::{Attempt, AttemptResult, Breaker, BreakerState, EndpointState, Pause};

pub use super::outcome::MAX_RETRY_AFTER_MS;

/// A pause is not stored again for an answer that asks for at most this much longer than the
/// pause already holds (`Retry-After` counts in whole seconds): a burst of such answers
/// writes once.
pub const PAUSE_SLACK_MS: u64 = 1_000;

/// The circuit breaker's settings (`--delivery-breaker-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Failures in a row (as one server sees them) that open it; 0: no breaker.
    pub failures: u32,
    /// The first cool-down; each opening after a failed probe doubles it.
    pub cooldown_ms: u64,
    /// The longest cool-down.
    pub max_cooldown_ms: u64,
    /// How long a probe may be on its way before it counts as lost and another may go (its
    /// server stopped): the delivery timeout and a margin.
    pub probe_ms: u64,
}

/// Whether deliveries to an endpoint may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Send,
    /// None before `until_ms`, unless the state changes meanwhile.
    Wait {
        until_ms: UnixMs,
        why: Hold,
    },
    /// The breaker's cool-down is over: one probe may go, sent by whoever claims it first.
    Probe,
}

/// Why deliveries wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    Paused,
    Open,
    /// Another delivery is the probe.
    Probing,
}

pub fn gate(state: Option<&EndpointState>, now_ms: UnixMs) -> Gate {
    let Some(state) = state else {
        return Gate::Send;
    };
    if let Some(pause) = state.pause.filter(|p| p.until_ms > now_ms) {
        return Gate::Wait {
            until_ms: pause.until_ms,
            why: Hold::Paused,
        };
    }
    let until = state.breaker.until_ms.unwrap_or(0);
    match state.breaker.state {
        BreakerState::Closed => Gate::Send,
        BreakerState::Open if until > now_ms => Gate::Wait {
            until_ms: until,
            why: Hold::Open,
        },
        BreakerState::HalfOpen if until > now_ms => Gate::Wait {
            until_ms: until,
            why: Hold::Probing,
        },
        BreakerState::Open | BreakerState::HalfOpen => Gate::Probe,
    }
}

/// What an attempt's answer says about the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It failed as an unwell endpoint fails: no answer (refused, reset, timed out, TLS), a
    /// 5xx, 408, or 429 without `Retry-After`. Why, in words.
    Failed(String),
    /// It answered, whatever the status: it is up.
    Answered,
    /// It answered 429 or 503 with `Retry-After`: up, and asking for a pause.
    Asked { pause_ms: u64 },
    /// Nothing was sent (the delivery was refused before its request: no endpoint verdict).
    Unsent,
}

/// The verdict of `attempt`. Independent of a subscription's `retryable_statuses`, which say
/// what to do with a delivery, not how its endpoint is.
pub fn verdict(attempt: &Attempt) -> Verdict {
    match (attempt.status, attempt.retry_after_ms) {
        (Some(429 | 503), Some(pause_ms)) => Verdict::Asked { pause_ms },
        (Some(status), _) if status >= 500 || status == 408 || status == 429 => {
            Verdict::Failed(format!("the endpoint answered HTTP {status}"))
        }
        (Some(_), _) => Verdict::Answered,
        (None, _) if attempt.result == AttemptResult::Retryable => Verdict::Failed(
            attempt
                .error
                .clone()
                .unwrap_or_else(|| "the request failed".into()),
        ),
        (None, _) => Verdict::Unsent,
    }
}

/// The cool-down of the `trips`th opening in a row: the first cool-down, doubled for each
/// opening before, at most the most.
pub fn cooldown(settings: &BreakerSettings, trips: u32) -> u64 {
    let doublings = trips.saturating_sub(1).min(63);
    settings
        .cooldown_ms
        .saturating_mul(1u64 << doublings)
        .min(settings.max_cooldown_ms.max(settings.cooldown_ms))
}

fn fresh(origin: &str, now_ms: UnixMs) -> EndpointState {
    EndpointState {
        origin: origin.to_owned(),
        pause: None,
        breaker: Breaker::default(),
        updated_at_ms: now_ms,
    }
}

/// The endpoint asked for `pause`: held until its end, unless a pause already holds about as
/// long ([`PAUSE_SLACK_MS`]) or it is over already.
pub fn paused(
    current: Option<&EndpointState>,
    origin: &str,
    pause: Pause,
) -> Option<EndpointState> {
    if pause.until_ms <= pause.at_ms {
        return None;
    }
    let holding = current
        .and_then(|s| s.pause)
        .filter(|p| p.until_ms > pause.at_ms);
    if holding.is_some_and(|p| pause.until_ms <= p.until_ms.saturating_add(PAUSE_SLACK_MS)) {
        return None;
    }
    let mut state = current
        .cloned()
        .unwrap_or_else(|| fresh(origin, pause.at_ms));
    state.pause = Some(pause);
    state.updated_at_ms = pause.at_ms;
    Some(state)
}

/// A server saw the breaker's threshold of failures in a row, counted while the breaker was
/// closed at `epoch`: it opens, unless it has changed since (another server opened it first).
pub fn tripped(
    current: Option<&EndpointState>,
    origin: &str,
    epoch: u64,
    reason: &str,
    now_ms: UnixMs,
    settings: &BreakerSettings,
) -> Option<EndpointState> {
    let state = current.cloned().unwrap_or_else(|| fresh(origin, now_ms));
    if state.breaker.state != BreakerState::Closed || state.breaker.epoch != epoch {
        return None;
    }
    Some(opened(state, reason, now_ms, settings))
}

fn opened(
    mut state: EndpointState,
    reason: &str,
    now_ms: UnixMs,
    settings: &BreakerSettings,
) -> EndpointState {
    let trips = state.breaker.trips.saturating_add(1);
    state.breaker = Breaker {
        state: BreakerState::Open,
        until_ms: Some(now_ms.saturating_add(cooldown(settings, trips))),
        opened_at_ms: Some(now_ms),
        trips,
        probe: None,
        reason: Some(reason.to_owned()),
        epoch: state.breaker.epoch.wrapping_add(1),
    };
    state.updated_at_ms = now_ms;
    state
}

/// Claims the probe `probe` when one may go: the cool-down is over (or the last probe is
/// lost), and no pause holds.
pub fn probe_claimed(
    current: Option<&EndpointState>,
    probe: u64,
    now_ms: UnixMs,
    settings: &BreakerSettings,
) -> Option<EndpointState> {
    let mut state = current?.clone();
    if gate(Some(&state), now_ms) != Gate::Probe {
        return None;
    }
    state.breaker.state = BreakerState::HalfOpen;
    state.breaker.until_ms = Some(now_ms.saturating_add(settings.probe_ms));
    state.breaker.probe = Some(probe);
    state.breaker.epoch = state.breaker.epoch.wrapping_add(1);
    state.updated_at_ms = now_ms;
    Some(state)
}

/// How a probe ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeEnd {
    /// The endpoint answered: the breaker closes.
    Answered,
    /// It failed: the breaker opens again, for longer.
    Failed(String),
    /// Nothing was sent after all (no delivery was ready, or it could not be sent): another
    /// probe may go at once.
    Unsent,
}

/// Probe `probe` ended; nothing changes unless it is still the breaker's probe.
pub fn probe_ended(
    current: Option<&EndpointState>,
    probe: u64,
    end: &ProbeEnd,
    now_ms: UnixMs,
    settings: &BreakerSettings,
) -> Option<EndpointState> {
    let mut state = current?.clone();
    if state.breaker.state != BreakerState::HalfOpen || state.breaker.probe != Some(probe) {
        return None;
    }
    match end {
        ProbeEnd::Failed(reason) => return Some(opened(state, reason, now_ms, settings)),
        ProbeEnd::Answered => {
            state.breaker = Breaker {
                epoch: state.breaker.epoch.wrapping_add(1),
                reason: state.breaker.reason.take(),
                opened_at_ms: state.breaker.opened_at_ms,
                ..Breaker::default()
            };
        }
        ProbeEnd::Unsent => {
            state.breaker.state = BreakerState::Open;
            state.breaker.until_ms = Some(now_ms);
            state.breaker.probe = None;
            state.breaker.epoch = state.breaker.epoch.wrapping_add(1);
        }
    }
    state.updated_at_ms = now_ms;
    Some(state)
}

#[cfg(test)]
mod tests {
    use tenax_core::model::SubscriptionId;

    use super::*;

    const SETTINGS: BreakerSettings = BreakerSettings {
        failures: 5,
        cooldown_ms: 30_000,
        max_cooldown_ms: 100_000,
        probe_ms: 20_000,
    };
    const ORIGIN: &str = "https://hooks.example.com";

    fn attempt(status: Option<u16>, retry_after_ms: Option<u64>) -> Attempt {
        Attempt {
            attempt: 1,
            trigger: Default::default(),
            at_ms: 0,
            latency_ms: 1,
            result: match status {
                Some(200..=299) => AttemptResult::Delivered,
                _ => AttemptResult::Retryable,
            },
            status,
            error: status
                .is_none()
                .then(|| "could not connect: refused".to_owned()),
            response: None,
            retry_after_ms,
        }
    }

    fn pause(at_ms: u64, until_ms: u64) -> Pause {
        Pause {
            until_ms,
            status: 429,
            subscription: SubscriptionId(1),
            at_ms,
        }
    }

    #[test]
    fn an_answer_is_judged_by_what_it_says_of_the_endpoint() {
        assert_eq!(verdict(&attempt(Some(204), None)), Verdict::Answered);
        assert_eq!(verdict(&attempt(Some(404), None)), Verdict::Answered);
        assert_eq!(verdict(&attempt(Some(409), None)), Verdict::Answered);
        for status in [500, 502, 503, 599, 408, 429] {
            assert!(
                matches!(verdict(&attempt(Some(status), None)), Verdict::Failed(r) if r.contains(&status.to_string())),
                "{status}"
            );
        }
        assert_eq!(
            verdict(&attempt(Some(429), Some(5_000))),
            Verdict::Asked { pause_ms: 5_000 }
        );
        assert_eq!(
            verdict(&attempt(Some(503), Some(0))),
            Verdict::Asked { pause_ms: 0 }
        );
        assert!(
            matches!(verdict(&attempt(None, None)), Verdict::Failed(r) if r.contains("refused"))
        );
        let mut refused = attempt(None, None);
        refused.result = AttemptResult::Permanent;
        assert_eq!(verdict(&refused), Verdict::Unsent);
    }

    #[test]
    fn a_pause_holds_every_delivery_until_its_end() {
        let state = paused(None, ORIGIN, pause(1_000, 31_000)).unwrap();
        assert_eq!(state.origin, ORIGIN);
        assert_eq!(
            gate(Some(&state), 1_000),
            Gate::Wait {
                until_ms: 31_000,
                why: Hold::Paused
            }
        );
        assert_eq!(gate(Some(&state), 30_999), gate(Some(&state), 1_000));
        assert_eq!(gate(Some(&state), 31_000), Gate::Send);
        assert_eq!(gate(None, 0), Gate::Send);
    }

    #[test]
    fn a_pause_only_grows_and_a_burst_writes_once() {
        let state = paused(None, ORIGIN, pause(1_000, 31_000)).unwrap();
        assert_eq!(paused(Some(&state), ORIGIN, pause(1_200, 31_200)), None);
        assert_eq!(paused(Some(&state), ORIGIN, pause(1_200, 10_000)), None);
        let longer = paused(Some(&state), ORIGIN, pause(2_000, 62_000)).unwrap();
        assert_eq!(longer.pause.unwrap().until_ms, 62_000);
        assert_eq!(
            paused(None, ORIGIN, pause(5_000, 5_000)),
            None,
            "Retry-After: 0"
        );
        // Once it is over, a short one holds again.
        let again = paused(Some(&longer), ORIGIN, pause(62_000, 63_000)).unwrap();
        assert_eq!(again.pause.unwrap().until_ms, 63_000);
    }

    #[test]
    fn the_breaker_opens_then_probes_once_and_closes_on_an_answer() {
        let open = tripped(None, ORIGIN, 0, "HTTP 500", 1_000, &SETTINGS).unwrap();
        assert_eq!(open.breaker.state, BreakerState::Open);
        assert_eq!(open.breaker.trips, 1);
        assert_eq!(open.breaker.reason.as_deref(), Some("HTTP 500"));
        assert_eq!(
            gate(Some(&open), 30_999),
            Gate::Wait {
                until_ms: 31_000,
                why: Hold::Open
            }
        );
        assert_eq!(probe_claimed(Some(&open), 7, 30_999, &SETTINGS), None);
        assert_eq!(gate(Some(&open), 31_000), Gate::Probe);
        let probing = probe_claimed(Some(&open), 7, 31_000, &SETTINGS).unwrap();
        assert_eq!(probing.breaker.state, BreakerState::HalfOpen);
        // Exactly one probe: a second claim finds it taken.
        assert_eq!(probe_claimed(Some(&probing), 8, 31_000, &SETTINGS), None);
        assert_eq!(
            gate(Some(&probing), 31_000),
            Gate::Wait {
                until_ms: 51_000,
                why: Hold::Probing
            }
        );
        // Another probe's end changes nothing.
        assert_eq!(
            probe_ended(Some(&probing), 8, &ProbeEnd::Answered, 31_500, &SETTINGS),
            None
        );
        let closed =
            probe_ended(Some(&probing), 7, &ProbeEnd::Answered, 31_500, &SETTINGS).unwrap();
        assert_eq!(closed.breaker.state, BreakerState::Closed);
        assert_eq!(closed.breaker.trips, 0);
        assert_eq!(gate(Some(&closed), 31_500), Gate::Send);
        assert!(closed.breaker.epoch > probing.breaker.epoch);
    }

    #[test]
    fn a_failed_probe_opens_it_again_for_twice_as_long_up_to_the_most() {
        let mut state = tripped(None, ORIGIN, 0, "HTTP 500", 0, &SETTINGS).unwrap();
        let mut cooldowns = Vec::new();
        for probe in 1..=4 {
            let mut now = state.breaker.until_ms.unwrap();
            let probing = probe_claimed(Some(&state), probe, now, &SETTINGS).unwrap();
            now += 100;
            state = probe_ended(
                Some(&probing),
                probe,
                &ProbeEnd::Failed("timed out".into()),
                now,
                &SETTINGS,
            )
            .unwrap();
            assert_eq!(state.breaker.state, BreakerState::Open);
            cooldowns.push(state.breaker.until_ms.unwrap() - now);
        }
        assert_eq!(cooldowns, [60_000, 100_000, 100_000, 100_000]);
        assert_eq!(state.breaker.trips, 5);
        assert_eq!(state.breaker.reason.as_deref(), Some("timed out"));
    }

    #[test]
    fn an_unsent_probe_lets_another_go_at_once() {
        let open = tripped(None, ORIGIN, 0, "HTTP 500", 0, &SETTINGS).unwrap();
        let probing = probe_claimed(Some(&open), 1, 30_000, &SETTINGS).unwrap();
        let again = probe_ended(Some(&probing), 1, &ProbeEnd::Unsent, 30_010, &SETTINGS).unwrap();
        assert_eq!(gate(Some(&again), 30_010), Gate::Probe);
        assert_eq!(again.breaker.trips, 1, "not a failure");
    }

    #[test]
    fn a_lost_probe_lets_another_go_after_its_time() {
        let open = tripped(None, ORIGIN, 0, "HTTP 500", 0, &SETTINGS).unwrap();
        let probing = probe_claimed(Some(&open), 1, 30_000, &SETTINGS).unwrap();
        assert_eq!(probe_claimed(Some(&probing), 2, 49_999, &SETTINGS), None);
        let second = probe_claimed(Some(&probing), 2, 50_000, &SETTINGS).unwrap();
        assert_eq!(second.breaker.probe, Some(2));
        // The first probe's late end is no longer the breaker's business.
        assert_eq!(
            probe_ended(Some(&second), 1, &ProbeEnd::Answered, 50_001, &SETTINGS),
            None
        );
    }

    #[test]
    fn a_run_counted_before_a_change_does_not_trip_it() {
        let open = tripped(None, ORIGIN, 0, "HTTP 500", 0, &SETTINGS).unwrap();
        assert_eq!(
            tripped(Some(&open), ORIGIN, 0, "HTTP 500", 10, &SETTINGS),
            None,
            "already open"
        );
        let probing = probe_claimed(Some(&open), 1, 30_000, &SETTINGS).unwrap();
        let closed =
            probe_ended(Some(&probing), 1, &ProbeEnd::Answered, 30_001, &SETTINGS).unwrap();
        assert_eq!(
            tripped(
                Some(&closed),
                ORIGIN,
                open.breaker.epoch,
                "HTTP 500",
                30_002,
                &SETTINGS
            ),
            None,
            "a run from before the opening"
        );
        let again = tripped(
            Some(&closed),
            ORIGIN,
            closed.breaker.epoch,
            "HTTP 502",
            30_002,
            &SETTINGS,
        )
        .unwrap();
        assert_eq!(
            again.breaker.trips, 1,
            "closed by a probe: the cool-down starts over"
        );
    }

    #[test]
    fn no_probe_while_a_pause_holds() {
        let open = tripped(None, ORIGIN, 0, "HTTP 500", 0, &SETTINGS).unwrap();
        let held = paused(Some(&open), ORIGIN, pause(1_000, 60_000)).unwrap();
        assert_eq!(probe_claimed(Some(&held), 1, 30_000, &SETTINGS), None);
        assert_eq!(
            gate(Some(&held), 30_000),
            Gate::Wait {
                until_ms: 60_000,
                why: Hold::Paused
            }
        );
        assert_eq!(gate(Some(&held), 60_000), Gate::Probe);
    }

    #[test]
    fn cooldowns_saturate() {
        let settings = BreakerSettings {
            max_cooldown_ms: u64::MAX,
            ..SETTINGS
        };
        assert_eq!(cooldown(&settings, 0), 30_000);
        assert_eq!(cooldown(&settings, 1), 30_000);
        assert_eq!(cooldown(&settings, 3), 120_000);
        assert_eq!(cooldown(&settings, u32::MAX), u64::MAX);
    }
}
