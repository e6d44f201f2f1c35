//! The shapes most libraries offer: fixed, an explicit list, "initial·factor^(r−1) capped", and
//! the doubling-then-linear curve of a cloud task queue.

use crate::phased::to_f64;

/// `initial · factor^(r−1)`, capped at `max`.
#[derive(Debug, Clone, PartialEq)]
pub struct Exponential {
    pub initial_ms: u64,
    pub factor: f64,
    pub max_ms: u64,
}

impl Exponential {
    pub fn delay_ms(&self, r: u32) -> f64 {
        // 0 · factor^(r−1) is 0 for every r; computed, it is 0 · ∞ = NaN once the power
        // overflows, and min() would turn that NaN into the cap.
        if self.initial_ms == 0 {
            return 0.0;
        }
        let grown = to_f64(self.initial_ms) * self.factor.powf(f64::from(r.max(1) - 1));
        // powf of a factor > 1 saturates to +∞, which min() turns into the cap; a factor of 0
        // with r = 1 is 0^0 = 1, the initial delay, as intended.
        grown.min(to_f64(self.max_ms))
    }
}

/// Cloud Tasks' shape: start at `min_backoff`, double `max_doublings` times, then grow linearly
/// by `min_backoff · 2^max_doublings` per retry, never above `max_backoff`.
/// With 10 s / 300 s / 3: 10, 20, 40, 80, 160, 240, 300, 300, ...
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoublingThenLinear {
    pub min_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub max_doublings: u32,
}

impl Default for DoublingThenLinear {
    /// Cloud Tasks' defaults: 100 ms, 1 h, 16 doublings.
    fn default() -> Self {
        Self {
            min_backoff_ms: 100,
            max_backoff_ms: 3_600_000,
            max_doublings: 16,
        }
    }
}

impl DoublingThenLinear {
    pub fn delay_ms(&self, r: u32) -> f64 {
        // 0 doubled is 0; computed, 0 · 2^1024 is 0 · ∞ = NaN, which min() would turn into the
        // maximum.
        if self.min_backoff_ms == 0 {
            return 0.0;
        }
        let min = to_f64(self.min_backoff_ms);
        let doublings = r.max(1) - 1;
        let delay = if doublings <= self.max_doublings {
            min * f64::from(doublings).exp2()
        } else {
            let step = min * f64::from(self.max_doublings).exp2();
            step * (1.0 + f64::from(doublings - self.max_doublings))
        };
        delay.min(to_f64(self.max_backoff_ms))
    }
}

/// An explicit list of delays. With `repeat_last`, retries past the end repeat the last delay;
/// without it, the list is the whole schedule and its length is the retry limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayList {
    pub delays_ms: Vec<u64>,
    pub repeat_last: bool,
}

impl DelayList {
    pub fn delay_ms(&self, r: u32) -> f64 {
        let index = usize::try_from(r.max(1) - 1).unwrap_or(usize::MAX);
        let delay = self
            .delays_ms
            .get(index)
            .or(self.delays_ms.last())
            .copied()
            .unwrap_or(0);
        to_f64(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_tasks_documented_example() {
        let curve = DoublingThenLinear {
            min_backoff_ms: 10_000,
            max_backoff_ms: 300_000,
            max_doublings: 3,
        };
        let delays: Vec<f64> = (1..=8).map(|r| curve.delay_ms(r) / 1_000.0).collect();
        assert_eq!(delays, [10.0, 20.0, 40.0, 80.0, 160.0, 240.0, 300.0, 300.0]);
    }

    #[test]
    fn exponential_is_capped_and_never_overflows() {
        let curve = Exponential {
            initial_ms: 1_000,
            factor: 2.0,
            max_ms: 60_000,
        };
        let delays: Vec<f64> = (1..=8).map(|r| curve.delay_ms(r)).collect();
        assert_eq!(delays, [1e3, 2e3, 4e3, 8e3, 16e3, 32e3, 60e3, 60e3]);
        let huge = Exponential {
            initial_ms: 1,
            factor: 1e300,
            max_ms: 5,
        };
        assert_eq!(huge.delay_ms(u32::MAX), 5.0);
    }

    /// Found writing the fuzz properties (a later retry never waits less): 0 · factor^(r−1) was 0 · ∞ = NaN once the power overflowed
    /// (r ≥ 1 026 for a factor of 2), and `NaN.min(max)` is `max`: a zero delay jumped to the
    /// maximum, 100 years by default.
    #[test]
    fn exponential_from_zero_stays_zero() {
        let curve = Exponential {
            initial_ms: 0,
            factor: 2.0,
            max_ms: 3_155_760_000_000,
        };
        for r in [1, 2, 1_025, 1_026, 100_000, u32::MAX] {
            assert_eq!(curve.delay_ms(r), 0.0, "r = {r}");
        }
    }

    /// Found with the one above: the same 0 · ∞ with a minimum backoff of 0 and more than 1 024
    /// doublings.
    #[test]
    fn doubling_from_zero_stays_zero() {
        let curve = DoublingThenLinear {
            min_backoff_ms: 0,
            max_backoff_ms: 3_600_000,
            max_doublings: u32::MAX,
        };
        for r in [1, 2, 1_025, 1_026, 100_000, u32::MAX] {
            assert_eq!(curve.delay_ms(r), 0.0, "r = {r}");
        }
    }

    #[test]
    fn list_repeats_or_ends() {
        let list = DelayList {
            delays_ms: vec![1, 5, 60],
            repeat_last: true,
        };
        assert_eq!(
            [list.delay_ms(1), list.delay_ms(3), list.delay_ms(9)],
            [1.0, 60.0, 60.0]
        );
    }
}
