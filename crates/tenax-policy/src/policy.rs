//! [`RetryPolicy`]: a shape with its layers (jitter, cap, stop conditions), and the one entry
//! point the engine calls after a failure.

use crate::decision::{DeadReason, Decision, Failure, Outcome};
use crate::duration::{MAX_DELAY_MS, clamp_ms};
use crate::jitter::Jitter;
use crate::phased::to_f64;
use crate::polynomial;
use crate::random::RandomSource;
use crate::shape::Shape;

/// The most retries any policy may allow. Bounds previews and keeps `u32` arithmetic far from
/// overflow; 100 000 retries of even one second each span more than a day.
pub const MAX_RETRY_LIMIT: u32 = 100_000;

/// The retry limit of a shape that implies none, when no window is given either.
pub const DEFAULT_RETRY_LIMIT: u32 = polynomial::DEFAULT_RETRY_LIMIT;

/// One normalised policy, whatever spelling it came from.
///
/// Invariants (upheld by the spellings' validation): `retry_limit <= MAX_RETRY_LIMIT`; every
/// duration `<= MAX_DELAY_MS`.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub shape: Shape,
    pub jitter: Jitter,
    /// The longest single delay, applied after jitter.
    pub cap_ms: Option<u64>,
    /// Retries allowed: failure number `retry_limit + 1` is dead.
    pub retry_limit: u32,
    /// The latest a retry may start, measured from the first failure.
    pub max_window_ms: Option<u64>,
}

impl Default for RetryPolicy {
    /// The polynomial policy with its defaults: 25 retries, 15 s + r^4 s + U·30 s·r.
    fn default() -> Self {
        Self {
            shape: Shape::Polynomial(polynomial::Polynomial::default()),
            jitter: Jitter::Additive {
                amount_ms: polynomial::DEFAULT_JITTER_MS,
            },
            cap_ms: None,
            retry_limit: polynomial::DEFAULT_RETRY_LIMIT,
            max_window_ms: None,
        }
    }
}

impl RetryPolicy {
    /// A policy of `shape` with no jitter, no cap, no window, and the shape's own retry limit
    /// (or [`DEFAULT_RETRY_LIMIT`]).
    pub fn new(shape: Shape) -> Self {
        let retry_limit = shape.natural_retry_limit().unwrap_or(DEFAULT_RETRY_LIMIT);
        Self {
            shape,
            jitter: Jitter::None,
            cap_ms: None,
            retry_limit,
            max_window_ms: None,
        }
    }

    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    pub fn with_cap(mut self, cap_ms: u64) -> Self {
        self.cap_ms = Some(cap_ms.min(MAX_DELAY_MS));
        self
    }

    pub fn with_retry_limit(mut self, limit: u32) -> Self {
        self.retry_limit = limit.min(MAX_RETRY_LIMIT);
        self
    }

    pub fn with_max_window(mut self, window_ms: u64) -> Self {
        self.max_window_ms = Some(window_ms.min(MAX_DELAY_MS));
        self
    }

    /// The bound of every single delay: the cap if there is one, else the 100-year ceiling.
    fn ceiling_ms(&self) -> f64 {
        to_f64(self.cap_ms.unwrap_or(MAX_DELAY_MS).min(MAX_DELAY_MS))
    }

    /// The delay before retry `r` without jitter, capped, in whole milliseconds.
    pub fn delay_ms(&self, r: u32) -> u64 {
        clamp_ms(self.shape.delay_ms(r).min(self.ceiling_ms()))
    }

    /// The lowest and highest delay jitter allows for retry `r`, given the highest delay the
    /// previous retry could have had (only decorrelated jitter looks at it).
    pub fn jitter_band_ms(&self, r: u32, previous_high_ms: Option<u64>) -> (u64, u64) {
        let d = to_f64(self.delay_ms(r));
        let (low, high) = self
            .jitter
            .band(d, r, previous_high_ms.map(to_f64), self.ceiling_ms());
        (clamp_ms(low), clamp_ms(high))
    }

    /// The delay before retry `r` with one jitter draw.
    pub fn jittered_delay_ms(
        &self,
        r: u32,
        previous_ms: Option<u64>,
        random: &mut dyn RandomSource,
    ) -> u64 {
        let d = to_f64(self.delay_ms(r));
        let drawn = self
            .jitter
            .apply(d, r, previous_ms.map(to_f64), self.ceiling_ms(), random);
        clamp_ms(drawn)
    }

    /// The engine's question: the job failed for the `failure.failure`-th time at
    /// `failure.at_ms`; retry when, or dead?
    ///
    /// Order of the rules: a snooze is always granted (it uses no attempt); "not retryable" is
    /// dead; past the retry limit is dead; otherwise the delay is the worker's explicit one or the
    /// policy's (with jitter), and a retry that would start after the window is dead.
    pub fn decide(&self, failure: &Failure, random: &mut dyn RandomSource) -> Decision {
        let retry = failure.failure.max(1);
        let delay_ms = match failure.outcome {
            Outcome::Snooze { delay_ms } => {
                let delay_ms = delay_ms.min(MAX_DELAY_MS);
                return Decision::Snooze {
                    at_ms: failure.at_ms.saturating_add(delay_ms),
                    delay_ms,
                };
            }
            Outcome::NotRetryable => {
                return Decision::Dead {
                    reason: DeadReason::NotRetryable,
                };
            }
            _ if retry > self.retry_limit => {
                return Decision::Dead {
                    reason: DeadReason::RetryLimit {
                        limit: self.retry_limit,
                    },
                };
            }
            Outcome::RetryAt { at_ms } => at_ms.saturating_sub(failure.at_ms).min(MAX_DELAY_MS),
            Outcome::RetryIn { delay_ms } => delay_ms.min(MAX_DELAY_MS),
            Outcome::Retry => self.jittered_delay_ms(retry, failure.previous_delay_ms, random),
        };
        let at_ms = failure.at_ms.saturating_add(delay_ms);
        if let Some(max_window_ms) = self.max_window_ms {
            let first = failure.first_failure_at_ms.min(failure.at_ms);
            if at_ms - first > max_window_ms {
                return Decision::Dead {
                    reason: DeadReason::Window { max_window_ms },
                };
            }
        }
        Decision::Retry {
            retry,
            at_ms,
            delay_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::{DAY_MS, SECOND_MS};
    use crate::random::{FixedRandom, SeededRandom};

    fn fail(failure: u32, at_ms: u64, outcome: Outcome) -> Failure {
        Failure {
            failure,
            at_ms,
            first_failure_at_ms: 1_000,
            previous_delay_ms: None,
            outcome,
        }
    }

    #[test]
    fn default_polynomial_window_is_about_25_days() {
        let policy = RetryPolicy::default();
        let plain: u64 = (1..=25).map(|r| policy.delay_ms(r)).sum();
        // Σ (15 + r^4) s for r = 1..25 = 2 154 020 s = 24.93 days.
        assert_eq!(plain, 2_154_020 * SECOND_MS);
        assert!((to_f64(plain) / to_f64(DAY_MS) - 24.93).abs() < 0.005);
        for seed in 0..50 {
            let mut random = SeededRandom::new(seed);
            let jittered: u64 = (1..=25)
                .map(|r| policy.jittered_delay_ms(r, None, &mut random))
                .sum();
            let days = to_f64(jittered) / to_f64(DAY_MS);
            assert!((24.0..26.0).contains(&days), "seed {seed}: {days} days");
        }
    }

    #[test]
    fn decide_follows_the_policy_then_dies_at_the_limit() {
        let policy = RetryPolicy::default().with_jitter(Jitter::None);
        let got = policy.decide(&fail(1, 10_000, Outcome::Retry), &mut FixedRandom(0.0));
        assert_eq!(
            got,
            Decision::Retry {
                retry: 1,
                at_ms: 26_000,
                delay_ms: 16_000
            }
        );
        let got = policy.decide(&fail(25, 10_000, Outcome::Retry), &mut FixedRandom(0.0));
        assert_eq!(
            got,
            Decision::Retry {
                retry: 25,
                at_ms: 10_000 + 390_640_000,
                delay_ms: 390_640_000
            }
        );
        let got = policy.decide(&fail(26, 10_000, Outcome::Retry), &mut FixedRandom(0.0));
        assert_eq!(
            got,
            Decision::Dead {
                reason: DeadReason::RetryLimit { limit: 25 }
            }
        );
    }

    #[test]
    fn outcomes_a_failure_can_carry() {
        let policy = RetryPolicy::default();
        let random = &mut FixedRandom(0.5);
        assert_eq!(
            policy.decide(&fail(3, 5_000, Outcome::NotRetryable), random),
            Decision::Dead {
                reason: DeadReason::NotRetryable
            }
        );
        assert_eq!(
            policy.decide(&fail(3, 5_000, Outcome::RetryIn { delay_ms: 7 }), random),
            Decision::Retry {
                retry: 3,
                at_ms: 5_007,
                delay_ms: 7
            }
        );
        assert_eq!(
            policy.decide(&fail(3, 5_000, Outcome::RetryAt { at_ms: 4_000 }), random),
            Decision::Retry {
                retry: 3,
                at_ms: 5_000,
                delay_ms: 0
            },
            "a time in the past means now"
        );
        // An explicit time still obeys the limit.
        assert_eq!(
            policy.decide(&fail(26, 5_000, Outcome::RetryAt { at_ms: 9_000 }), random),
            Decision::Dead {
                reason: DeadReason::RetryLimit { limit: 25 }
            }
        );
        // A snooze uses no attempt, so the limit does not apply.
        assert_eq!(
            policy.decide(
                &fail(26, 5_000, Outcome::Snooze { delay_ms: 60_000 }),
                random
            ),
            Decision::Snooze {
                at_ms: 65_000,
                delay_ms: 60_000
            }
        );
    }

    #[test]
    fn window_and_limit_first_reached_wins() {
        let policy = RetryPolicy::new(Shape::Fixed { delay_ms: 10_000 })
            .with_retry_limit(5)
            .with_max_window(25_000);
        let random = &mut FixedRandom(0.0);
        // First failure at 1 000: retries at 11 000, 21 000 fit; the third would start at 31 000,
        // 30 s after the first failure.
        let got = policy.decide(&fail(2, 11_000, Outcome::Retry), random);
        assert_eq!(
            got,
            Decision::Retry {
                retry: 2,
                at_ms: 21_000,
                delay_ms: 10_000
            }
        );
        let got = policy.decide(&fail(3, 21_000, Outcome::Retry), random);
        assert_eq!(
            got,
            Decision::Dead {
                reason: DeadReason::Window {
                    max_window_ms: 25_000
                }
            }
        );
        // With a long window the limit wins.
        let policy = policy.with_max_window(DAY_MS);
        let got = policy.decide(&fail(6, 51_000, Outcome::Retry), random);
        assert_eq!(
            got,
            Decision::Dead {
                reason: DeadReason::RetryLimit { limit: 5 }
            }
        );
    }

    #[test]
    fn cap_applies_after_jitter() {
        let policy = RetryPolicy::new(Shape::Fixed { delay_ms: 10_000 })
            .with_jitter(Jitter::Proportional { percent: 50.0 })
            .with_cap(12_000);
        assert_eq!(policy.jitter_band_ms(1, None), (5_000, 12_000));
        assert_eq!(
            policy.jittered_delay_ms(1, None, &mut FixedRandom(0.999)),
            12_000
        );
    }
}
