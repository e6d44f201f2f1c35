//! Each subscription's endpoint health: how its recent attempts went. Counters live in memory
//! (they restart empty); the marks that automatic disabling needs (`failing_since`, last
//! success) are stored with the subscription, written only when they change state.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use serde::Serialize;

use crate::clock::{UnixMs, rfc3339};
use crate::model::{HealthMarks, Subscription, SubscriptionId};

/// How many recent attempts the failure rate is computed over.
const RECENT: usize = 100;

/// A subscription's health as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HealthView {
    /// False while the endpoint's last attempt failed.
    pub healthy: bool,
    pub consecutive_failures: u32,
    /// Failed attempts among the last `recent_attempts` (at most 100 since the server started).
    pub recent_attempts: u32,
    pub recent_failure_rate: f64,
    pub last_success_at: Option<String>,
    pub last_failure_at: Option<String>,
    /// When the current run of failures began.
    pub failing_since: Option<String>,
}

#[derive(Debug, Default)]
struct Health {
    consecutive_failures: u32,
    /// true = failed, newest last.
    recent: VecDeque<bool>,
    last_success_at_ms: Option<UnixMs>,
    last_failure_at_ms: Option<UnixMs>,
}

/// What recording an attempt changed in the durable marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarksChange {
    Unchanged,
    /// The stored marks should become these.
    Changed(HealthMarks),
}

#[derive(Debug, Default)]
pub struct HealthBook {
    subscriptions: Mutex<HashMap<SubscriptionId, Health>>,
}

impl HealthBook {
    /// Records an attempt of `subscription` at `now_ms`.
    pub fn record(&self, subscription: &Subscription, failed: bool, now_ms: UnixMs) -> MarksChange {
        let mut all = self.subscriptions.lock();
        let health = all.entry(subscription.id).or_default();
        health.recent.push_back(failed);
        if health.recent.len() > RECENT {
            health.recent.pop_front();
        }
        let marks = subscription.health;
        if failed {
            health.consecutive_failures = health.consecutive_failures.saturating_add(1);
            health.last_failure_at_ms = Some(now_ms);
            if marks.failing_since_ms.is_none() {
                return MarksChange::Changed(HealthMarks {
                    failing_since_ms: Some(now_ms),
                    ..marks
                });
            }
        } else {
            health.consecutive_failures = 0;
            health.last_success_at_ms = Some(now_ms);
            if marks.failing_since_ms.is_some() || marks.last_success_at_ms.is_none() {
                return MarksChange::Changed(HealthMarks {
                    failing_since_ms: None,
                    last_success_at_ms: Some(now_ms),
                });
            }
        }
        MarksChange::Unchanged
    }

    pub fn view(&self, subscription: &Subscription) -> HealthView {
        let all = self.subscriptions.lock();
        let health = all.get(&subscription.id);
        let marks = subscription.health;
        let recent = health.map_or(0, |h| h.recent.len());
        let failed = health.map_or(0, |h| h.recent.iter().filter(|f| **f).count());
        let rate = if recent == 0 {
            0.0
        } else {
            // Both are at most 100: exact in f64.
            f64::from(u32::try_from(failed).unwrap_or(u32::MAX))
                / f64::from(u32::try_from(recent).unwrap_or(u32::MAX))
        };
        let last_success = health
            .and_then(|h| h.last_success_at_ms)
            .or(marks.last_success_at_ms);
        HealthView {
            healthy: marks.failing_since_ms.is_none(),
            consecutive_failures: health.map_or(0, |h| h.consecutive_failures),
            recent_attempts: u32::try_from(recent).unwrap_or(u32::MAX),
            recent_failure_rate: rate,
            last_success_at: last_success.map(rfc3339),
            last_failure_at: health.and_then(|h| h.last_failure_at_ms).map(rfc3339),
            failing_since: marks.failing_since_ms.map(rfc3339),
        }
    }

    pub fn forget(&self, id: SubscriptionId) {
        self.subscriptions.lock().remove(&id);
    }
}
