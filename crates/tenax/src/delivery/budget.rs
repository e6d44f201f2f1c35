//! A subscription's retry budget ([`RetryBudget`]): within any window, the retries it sends
//! may be at most a share of all its attempts, or a few whatever the share, so that a failing
//! endpoint cannot turn a burst of messages into a storm of retries. A retry over the budget
//! waits (it is put back without using an attempt) until the window has moved on.
//!
//! Attempts are counted as they are sent, in [`BUCKETS`] buckets per window: the window moves
//! a bucket at a time. Each server counts what it sends, in memory: the share holds for the
//! cluster as it holds for each server (sums of shares are the share of the sum), and each
//! server allows its share of `min_retries` (`super::share`).
//!
//! The window is pure (time is a parameter); [`BudgetBook`] keeps one per subscription.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use tenax_core::clock::UnixMs;
use tenax_core::model::{RetryBudget, Subscription, SubscriptionId, Trigger};

/// Buckets per window.
pub const BUCKETS: u64 = 10;

/// What one subscription sent recently.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Oldest first; each covers one bucket length from its start.
    buckets: VecDeque<Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    start_ms: UnixMs,
    attempts: u64,
    retries: u64,
}

/// Attempts and retries in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    pub attempts: u64,
    pub retries: u64,
}

fn bucket_ms(budget: &RetryBudget) -> u64 {
    (budget.window_ms / BUCKETS).max(1)
}

impl Window {
    /// Forgets buckets that have left the window at `now_ms`.
    fn expire(&mut self, budget: &RetryBudget, now_ms: UnixMs) {
        let length = bucket_ms(budget);
        while self.buckets.front().is_some_and(|b| {
            b.start_ms
                .saturating_add(length)
                .saturating_add(budget.window_ms)
                <= now_ms
        }) {
            self.buckets.pop_front();
        }
    }

    /// What was sent in the window at `now_ms`.
    pub fn used(&mut self, budget: &RetryBudget, now_ms: UnixMs) -> Used {
        self.expire(budget, now_ms);
        let (attempts, retries) = self
            .buckets
            .iter()
            .fold((0, 0), |(a, r), b| (a + b.attempts, r + b.retries));
        Used { attempts, retries }
    }

    /// Whether one more retry fits at `now_ms`, with `min_retries` allowed whatever the
    /// share; if not, the earliest time the window will have moved on enough to ask again.
    pub fn allows_retry(
        &mut self,
        budget: &RetryBudget,
        min_retries: u32,
        now_ms: UnixMs,
    ) -> Result<(), UnixMs> {
        let used = self.used(budget, now_ms);
        let within_floor = used.retries < u64::from(min_retries);
        // The retry counts as one of the attempts it is a share of.
        let within_share = (used.retries + 1).saturating_mul(100)
            <= u64::from(budget.percent).saturating_mul(used.attempts + 1);
        if within_floor || within_share {
            return Ok(());
        }
        // The oldest bucket leaves first; until then nothing sent is forgotten.
        let length = bucket_ms(budget);
        let leaves = self.buckets.front().map_or(now_ms, |b| {
            b.start_ms
                .saturating_add(length)
                .saturating_add(budget.window_ms)
        });
        Err(leaves.max(now_ms.saturating_add(1)))
    }

    /// Counts an attempt sent at `now_ms` (`retry`: not its delivery's first).
    pub fn record(&mut self, budget: &RetryBudget, retry: bool, now_ms: UnixMs) {
        self.expire(budget, now_ms);
        let length = bucket_ms(budget);
        let start = now_ms - now_ms % length;
        if self.buckets.back().is_none_or(|b| b.start_ms < start) {
            self.buckets.push_back(Bucket {
                start_ms: start,
                attempts: 0,
                retries: 0,
            });
        }
        // A clock that stepped back counts in the newest bucket.
        if let Some(bucket) = self.buckets.back_mut() {
            bucket.attempts += 1;
            bucket.retries += u64::from(retry);
        }
    }
}

/// Each subscription's window on this server.
#[derive(Debug, Default)]
pub struct BudgetBook {
    windows: Mutex<HashMap<SubscriptionId, Window>>,
}

/// Whether a run of a delivery is a retry the budget counts: a later attempt that its policy
/// scheduled. An operator's replay of a dead delivery or run-now is not: it is a decision
/// about that one delivery, made by a person, and is never held back by the budget.
pub fn is_retry(attempt: u32, trigger: Trigger) -> bool {
    attempt > 1 && trigger == Trigger::Scheduled
}

impl BudgetBook {
    /// Whether a delivery of `subscription` may be sent at `now_ms` (`retry`: see
    /// [`is_retry`]), with `servers` sharing the floor; counts it if so. If not, when to ask
    /// again.
    pub fn admit(
        &self,
        subscription: &Subscription,
        retry: bool,
        servers: usize,
        now_ms: UnixMs,
    ) -> Result<(), UnixMs> {
        let Some(budget) = &subscription.retry_budget else {
            return Ok(());
        };
        let mut windows = self.windows.lock();
        let window = windows.entry(subscription.id).or_default();
        if retry {
            window.allows_retry(budget, super::share(budget.min_retries, servers), now_ms)?;
        }
        window.record(budget, retry, now_ms);
        Ok(())
    }

    /// What `subscription` sent in its window on this server.
    pub fn used(&self, subscription: &Subscription, now_ms: UnixMs) -> Option<Used> {
        let budget = subscription.retry_budget.as_ref()?;
        let mut windows = self.windows.lock();
        Some(windows.get_mut(&subscription.id).map_or(
            Used {
                attempts: 0,
                retries: 0,
            },
            |w| w.used(budget, now_ms),
        ))
    }

    pub fn forget(&self, id: SubscriptionId) {
        self.windows.lock().remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_later_attempts_the_policy_scheduled_are_retries() {
        assert!(!is_retry(1, Trigger::Scheduled), "a first attempt");
        assert!(is_retry(2, Trigger::Scheduled), "a retry by the policy");
        assert!(
            !is_retry(4, Trigger::Replay),
            "an operator's replay of a dead delivery"
        );
        assert!(!is_retry(3, Trigger::Manual), "an operator's run-now");
    }

    const BUDGET: RetryBudget = RetryBudget {
        percent: 20,
        window_ms: 10_000,
        min_retries: 0,
    };

    #[test]
    fn retries_are_at_most_their_share_of_the_attempts() {
        let mut window = Window::default();
        for _ in 0..8 {
            window.record(&BUDGET, false, 100);
        }
        // 8 first attempts: one retry is 1 of 9 attempts (11 %), two are 2 of 10 (20 %).
        assert_eq!(window.allows_retry(&BUDGET, 0, 100), Ok(()));
        window.record(&BUDGET, true, 100);
        assert_eq!(window.allows_retry(&BUDGET, 0, 100), Ok(()));
        window.record(&BUDGET, true, 100);
        // A third would be 3 of 11 (27 %): it waits until the bucket of 100 leaves.
        assert_eq!(window.allows_retry(&BUDGET, 0, 200), Err(11_000));
        assert_eq!(
            window.used(&BUDGET, 200),
            Used {
                attempts: 10,
                retries: 2
            }
        );
        // Four more first attempts make room for one more retry: 3 of 15.
        for _ in 0..3 {
            window.record(&BUDGET, false, 300);
        }
        assert_eq!(window.allows_retry(&BUDGET, 0, 300), Err(11_000));
        window.record(&BUDGET, false, 300);
        assert_eq!(window.allows_retry(&BUDGET, 0, 300), Ok(()));
    }

    #[test]
    fn the_floor_lets_a_quiet_subscription_retry() {
        let mut window = Window::default();
        assert_eq!(
            window.allows_retry(&BUDGET, 0, 0),
            Err(1),
            "no floor, no attempts"
        );
        assert_eq!(window.allows_retry(&BUDGET, 2, 0), Ok(()));
        window.record(&BUDGET, true, 0);
        assert_eq!(window.allows_retry(&BUDGET, 2, 0), Ok(()));
        window.record(&BUDGET, true, 0);
        assert_eq!(window.allows_retry(&BUDGET, 2, 0), Err(11_000));
    }

    #[test]
    fn the_window_slides_a_bucket_at_a_time() {
        let mut window = Window::default();
        window.record(&BUDGET, true, 500);
        window.record(&BUDGET, true, 1_500);
        assert_eq!(window.allows_retry(&BUDGET, 2, 2_000), Err(11_000));
        assert_eq!(window.used(&BUDGET, 10_999).retries, 2);
        // The bucket of [0, 1000) has left the window at 11 000.
        assert_eq!(window.used(&BUDGET, 11_000).retries, 1);
        assert_eq!(window.allows_retry(&BUDGET, 2, 11_000), Ok(()));
        assert_eq!(window.used(&BUDGET, 12_000).retries, 0);
    }

    #[test]
    fn a_storm_of_retries_goes_out_at_the_budgets_pace() {
        // A burst of 1000 messages to a failing endpoint, each to be retried at once.
        let budget = RetryBudget {
            percent: 20,
            window_ms: 1_000,
            min_retries: 5,
        };
        let mut window = Window::default();
        for _ in 0..1_000 {
            window.record(&budget, false, 0);
        }
        let mut sent_at = Vec::new();
        for now in 0..10_000 {
            while sent_at.len() < 1_000 && window.allows_retry(&budget, 5, now).is_ok() {
                window.record(&budget, true, now);
                sent_at.push(now);
            }
        }
        // With the burst: 250 retries are 20 % of 1250 attempts.
        assert_eq!(sent_at.iter().filter(|at| **at == 0).count(), 250);
        // Then, with nothing else sent, the floor: 5 per window (counted in tenths, so a
        // window may reach a tenth further back).
        let later = sent_at.iter().filter(|at| **at > 0).count();
        assert!(
            (5 * 8..=5 * 10).contains(&later),
            "{later} retries after the burst"
        );
    }
}
