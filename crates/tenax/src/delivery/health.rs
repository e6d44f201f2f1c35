//! Each subscription's endpoint health: how its recent attempts went. Counters live in memory
//! (they restart empty); the marks that automatic disabling needs (`failing_since`, last
//! success) are stored with the subscription, written only when they change state.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use serde::Serialize;
use tenax_core::clock::{UnixMs, rfc3339};
use tenax_core::model::{BreakerState, EndpointState, HealthMarks, Subscription, SubscriptionId};

/// How many recent attempts the failure rate is computed over.
const RECENT: usize = 100;

/// A subscription's health as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct HealthView {
    /// False while the endpoint's last attempt failed.
    pub healthy: bool,
    pub consecutive_failures: u32,
    /// Attempts the failure rate is computed over: the last 100 since the server started.
    pub recent_attempts: u32,
    pub recent_failure_rate: f64,
    pub last_success_at: Option<String>,
    pub last_failure_at: Option<String>,
    /// When the current run of failures began.
    pub failing_since: Option<String>,
    /// The endpoint's pause and circuit breaker, shared by every subscription pointing there.
    pub endpoint: EndpointView,
    /// The retry budget's use in its window on this server; `null` without a budget.
    pub retry_budget: Option<BudgetView>,
}

/// An endpoint's backpressure as the API shows it: the pause and the circuit breaker are
/// stored, so every server shows (and obeys) the same; `breaker_failures` is this server's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct EndpointView {
    /// The origin (scheme, host and port) the state is kept by.
    pub origin: String,
    /// While the endpoint's pause holds: until when.
    pub paused_until: Option<String>,
    /// The status of the answer that asked for the pause (429 or 503).
    pub paused_by_status: Option<u16>,
    pub breaker: BreakerState,
    /// Open: when a probe may go. Half-open: when the probe on its way counts as lost.
    pub breaker_until: Option<String>,
    /// When the breaker last opened.
    pub breaker_opened_at: Option<String>,
    /// Openings since a probe last closed it: each cool-down is twice the one before.
    pub breaker_trips: u32,
    /// The failure that opened it last.
    pub breaker_reason: Option<String>,
    /// Failed requests to the endpoint in a row, as this server counts them toward opening.
    pub breaker_failures: u32,
}

impl EndpointView {
    /// The view of `origin`'s stored state at `now_ms` (a pause that is over is not shown).
    pub fn of(origin: String, state: Option<&EndpointState>, now_ms: UnixMs) -> Self {
        let Some(state) = state else {
            return Self {
                origin,
                ..Self::default()
            };
        };
        let pause = state.pause.filter(|p| p.until_ms > now_ms);
        let breaker = &state.breaker;
        Self {
            origin,
            paused_until: pause.map(|p| rfc3339(p.until_ms)),
            paused_by_status: pause.map(|p| p.status),
            breaker: breaker.state,
            breaker_until: match breaker.state {
                BreakerState::Closed => None,
                BreakerState::Open | BreakerState::HalfOpen => breaker.until_ms.map(rfc3339),
            },
            breaker_opened_at: breaker.opened_at_ms.map(rfc3339),
            breaker_trips: breaker.trips,
            breaker_reason: breaker.reason.clone(),
            breaker_failures: 0,
        }
    }
}

/// A retry budget's use: attempts and retries sent in its window by this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BudgetView {
    pub attempts: u64,
    pub retries: u64,
}

#[derive(Debug)]
struct Health {
    /// The durable marks as they are now (seeded from the stored subscription).
    marks: HealthMarks,
    consecutive_failures: u32,
    /// true = failed, newest last.
    recent: VecDeque<bool>,
    last_failure_at_ms: Option<UnixMs>,
}

/// What recording an attempt means for the stored subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Unchanged,
    /// Store these marks.
    Marks(HealthMarks),
    /// Store these marks and disable the subscription, for this reason.
    Disable(HealthMarks, String),
}

#[derive(Debug, Default)]
pub struct HealthBook {
    subscriptions: Mutex<HashMap<SubscriptionId, Health>>,
}

impl HealthBook {
    /// Records an attempt of `subscription` at `now_ms`. `disable_after_ms` (0: never) is how
    /// long the endpoint may fail without a success before the subscription is disabled.
    pub fn record(
        &self,
        subscription: &Subscription,
        failed: bool,
        now_ms: UnixMs,
        disable_after_ms: u64,
    ) -> Verdict {
        let mut all = self.subscriptions.lock();
        let fresh = || Health {
            marks: subscription.health,
            consecutive_failures: 0,
            recent: VecDeque::new(),
            last_failure_at_ms: None,
        };
        let health = all.entry(subscription.id).or_insert_with(fresh);
        // Enabling a subscription clears its stored failure period (the API does, so that the
        // period auto-disabling measures starts again). A subscription changed after the
        // book's failure period began, whose stored marks no longer hold that period, was
        // re-enabled: the book starts afresh too, or the next failure would disable it again
        // at once.
        if health.marks.failing_since_ms.is_some_and(|since| {
            subscription.health.failing_since_ms.is_none() && subscription.updated_at_ms > since
        }) {
            *health = fresh();
        }
        health.recent.push_back(failed);
        if health.recent.len() > RECENT {
            health.recent.pop_front();
        }
        if !failed {
            health.consecutive_failures = 0;
            let was_failing = health.marks.failing_since_ms.is_some();
            let first_success = health.marks.last_success_at_ms.is_none();
            health.marks = HealthMarks {
                last_success_at_ms: Some(now_ms),
                failing_since_ms: None,
            };
            return if was_failing || first_success {
                Verdict::Marks(health.marks)
            } else {
                Verdict::Unchanged
            };
        }
        health.consecutive_failures = health.consecutive_failures.saturating_add(1);
        health.last_failure_at_ms = Some(now_ms);
        let Some(since) = health.marks.failing_since_ms else {
            health.marks.failing_since_ms = Some(now_ms);
            return Verdict::Marks(health.marks);
        };
        let failing_for = now_ms.saturating_sub(since);
        if disable_after_ms > 0 && failing_for >= disable_after_ms && subscription.enabled {
            let reason = format!(
                "disabled automatically: the endpoint failed every attempt for {} (since {})",
                tenax_policy::format_duration(failing_for),
                rfc3339(since)
            );
            return Verdict::Disable(health.marks, reason);
        }
        Verdict::Unchanged
    }

    pub fn view(&self, subscription: &Subscription) -> HealthView {
        let all = self.subscriptions.lock();
        let health = all.get(&subscription.id);
        let marks = health.map_or(subscription.health, |h| h.marks);
        let recent = health.map_or(0, |h| h.recent.len());
        let failed = health.map_or(0, |h| h.recent.iter().filter(|f| **f).count());
        let as_f64 = |n: usize| f64::from(u32::try_from(n).unwrap_or(u32::MAX));
        let rate = if recent == 0 {
            0.0
        } else {
            as_f64(failed) / as_f64(recent)
        };
        HealthView {
            healthy: marks.failing_since_ms.is_none(),
            consecutive_failures: health.map_or(0, |h| h.consecutive_failures),
            recent_attempts: u32::try_from(recent).unwrap_or(u32::MAX),
            recent_failure_rate: rate,
            last_success_at: marks.last_success_at_ms.map(rfc3339),
            last_failure_at: health.and_then(|h| h.last_failure_at_ms).map(rfc3339),
            failing_since: marks.failing_since_ms.map(rfc3339),
            endpoint: EndpointView::default(),
            retry_budget: None,
        }
    }

    /// Forgets a subscription's counters (it was deleted, or re-enabled: a fresh start).
    pub fn forget(&self, id: SubscriptionId) {
        self.subscriptions.lock().remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscription() -> Subscription {
        serde_json::from_value(serde_json::json!({
            "id": 1, "queue": "q", "endpoint": "https://example.com/", "content_type": "x",
            "secret": "s", "enabled": true, "created_at_ms": 0, "updated_at_ms": 0,
        }))
        .unwrap()
    }

    #[test]
    fn marks_change_only_at_transitions_and_long_failure_disables() {
        let book = HealthBook::default();
        let sub = subscription();
        let first = book.record(&sub, false, 1_000, 10_000);
        assert!(matches!(first, Verdict::Marks(m) if m.last_success_at_ms == Some(1_000)));
        assert_eq!(book.record(&sub, false, 2_000, 10_000), Verdict::Unchanged);
        let failing = book.record(&sub, true, 3_000, 10_000);
        assert!(matches!(failing, Verdict::Marks(m) if m.failing_since_ms == Some(3_000)));
        assert_eq!(book.record(&sub, true, 12_999, 10_000), Verdict::Unchanged);
        assert!(matches!(
            book.record(&sub, true, 13_000, 10_000),
            Verdict::Disable(..)
        ));
        let view = book.view(&sub);
        assert!(!view.healthy);
        assert_eq!(view.consecutive_failures, 3);
        assert!((view.recent_failure_rate - 0.6).abs() < 1e-9);
        assert!(
            matches!(book.record(&sub, false, 14_000, 10_000), Verdict::Marks(m) if m.failing_since_ms.is_none())
        );
        assert!(book.view(&sub).healthy);
    }

    #[test]
    fn re_enabling_starts_a_new_failure_period() {
        let book = HealthBook::default();
        let mut sub = subscription();
        assert!(matches!(
            book.record(&sub, true, 1_000, 500),
            Verdict::Marks(_)
        ));
        let Verdict::Disable(marks, _) = book.record(&sub, true, 2_000, 500) else {
            panic!("failing for 1 s disables");
        };
        // What the store holds once disabled, then re-enabled through the API at 5 s.
        sub.health = marks;
        sub.enabled = true;
        sub.health.failing_since_ms = None;
        sub.updated_at_ms = 5_000;
        let failing = book.record(&sub, true, 6_000, 500);
        assert!(
            matches!(failing, Verdict::Marks(m) if m.failing_since_ms == Some(6_000)),
            "{failing:?}"
        );
        assert_eq!(book.view(&sub).consecutive_failures, 1);
        // A stale copy from before the failure period began changes nothing.
        let mut stale = subscription();
        stale.updated_at_ms = 5_500;
        assert_eq!(book.record(&stale, true, 6_200, 500), Verdict::Unchanged);
        assert!(matches!(
            book.record(&sub, true, 6_500, 500),
            Verdict::Disable(..)
        ));
    }

    #[test]
    fn never_disables_with_zero() {
        let book = HealthBook::default();
        let sub = subscription();
        book.record(&sub, true, 0, 0);
        assert_eq!(book.record(&sub, true, u64::MAX, 0), Verdict::Unchanged);
    }
}
