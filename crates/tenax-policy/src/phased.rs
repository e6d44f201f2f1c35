//! The phased delivery policy of Zaqar and AWS SNS: immediate, pre-backoff, backoff and
//! post-backoff phases, with four backoff functions between MIN and MAX.

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;

/// The curve of the backoff phase. Every function equals MIN at i = 1 and MAX at i = N and never
/// decreases in between (see `policies.md` and `docs/policies.md` for why linear and exponential
/// differ from the Zaqar specification's literal text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackoffFunction {
    Linear,
    Arithmetic,
    Geometric,
    Exponential,
}

impl BackoffFunction {
    pub const ALL: [BackoffFunction; 4] = [
        Self::Linear,
        Self::Arithmetic,
        Self::Geometric,
        Self::Exponential,
    ];

    /// Parses a function name, case-insensitively (SNS writes `"LINEAR"` as well as `"linear"`).
    pub fn parse(field: &str, name: &str) -> Result<Self, PolicyError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "linear" => Ok(Self::Linear),
            "arithmetic" => Ok(Self::Arithmetic),
            "geometric" => Ok(Self::Geometric),
            "exponential" => Ok(Self::Exponential),
            _ => Err(PolicyError::new(
                field,
                format!(
                    "unknown backoff function \"{name}\" (use linear, arithmetic, geometric or exponential)"
                ),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Linear => "linear",
            Self::Arithmetic => "arithmetic",
            Self::Geometric => "geometric",
            Self::Exponential => "exponential",
        }
    }

    /// f(i) for the backoff phase, i in 1..=n, in the units of `min` and `max`.
    ///
    /// Callers guarantee `0 <= min <= max`, `1 <= i <= n`; geometric also needs `min > 0`
    /// (validation refuses it otherwise; here it degrades to linear rather than divide by zero).
    pub fn value(self, i: u32, n: u32, min: f64, max: f64) -> f64 {
        if n <= 1 || max <= min {
            return min;
        }
        let i = f64::from(i.clamp(1, n));
        let n = f64::from(n);
        let delta = max - min;
        let value = match self {
            Self::Linear => min + delta * (i - 1.0) / (n - 1.0),
            // i(i−1)/(N(N−1)) written as a product of two ratios in [0, 1] so that it cannot
            // overflow for any u32 N.
            Self::Arithmetic => min + delta * (i / n) * ((i - 1.0) / (n - 1.0)),
            Self::Geometric if min > 0.0 => min * (max / min).powf((i - 1.0) / (n - 1.0)),
            Self::Geometric => min + delta * (i - 1.0) / (n - 1.0),
            // (2^(i−1) − 1)/(2^(N−1) − 1) rewritten as 2^(i−N)·(1 − 2^(1−i))/(1 − 2^(1−N)):
            // every power has a non-positive exponent, so nothing overflows; 2^(i−N) underflows
            // to 0 for i far below N, which is the correct limit.
            Self::Exponential => {
                min + delta * (i - n).exp2() * (1.0 - (1.0 - i).exp2()) / (1.0 - (1.0 - n).exp2())
            }
        };
        value.clamp(min, max)
    }
}

/// The four-phase policy. Delays are milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phased {
    pub min_delay_ms: u64,
    pub max_delay_ms: u64,
    /// R: all retries, of all four phases.
    pub num_retries: u32,
    /// a: retries with no delay.
    pub num_no_delay_retries: u32,
    /// b: retries at MIN before the backoff phase.
    pub num_min_delay_retries: u32,
    /// c: retries at MAX after the backoff phase.
    pub num_max_delay_retries: u32,
    pub function: BackoffFunction,
}

impl Phased {
    /// The SNS defaults: 20 s, 20 s, 3 retries, no phases, linear.
    pub fn sns_default() -> Self {
        Self {
            min_delay_ms: 20_000,
            max_delay_ms: 20_000,
            num_retries: 3,
            num_no_delay_retries: 0,
            num_min_delay_retries: 0,
            num_max_delay_retries: 0,
            function: BackoffFunction::Linear,
        }
    }

    /// N: the number of retries in the backoff phase (validation guarantees a + b + c ≤ R).
    pub fn backoff_retries(&self) -> u32 {
        self.num_retries
            .saturating_sub(self.num_no_delay_retries)
            .saturating_sub(self.num_min_delay_retries)
            .saturating_sub(self.num_max_delay_retries)
    }

    /// The delay before retry `r` (r ≥ 1), in milliseconds, not yet rounded. Retries past R (only
    /// reachable with an explicit larger retry limit) repeat the delay of retry R.
    pub fn delay_ms(&self, r: u32) -> f64 {
        let a = self.num_no_delay_retries;
        let b = self.num_min_delay_retries;
        let n = self.backoff_retries();
        let min = to_f64(self.min_delay_ms);
        let max = to_f64(self.max_delay_ms);
        if r <= a {
            0.0
        } else if r <= a.saturating_add(b) {
            min
        } else if r <= a.saturating_add(b).saturating_add(n) {
            self.function.value(r - a - b, n, min, max)
        } else if r <= self.num_retries {
            max
        } else if self.num_retries > 0 {
            self.delay_ms(self.num_retries)
        } else {
            max
        }
    }

    /// Checks the rules of docs/policies.md, "The phased policy". `limit` is the largest R this
    /// spelling allows.
    pub fn validate(&self, names: &PhasedNames, limit: u32) -> Result<(), PolicyError> {
        if self.max_delay_ms < self.min_delay_ms {
            return Err(PolicyError::new(
                names.max_delay,
                format!(
                    "must be greater than or equal to {} ({} ms), got {} ms",
                    names.min_delay, self.min_delay_ms, self.max_delay_ms
                ),
            ));
        }
        if self.function == BackoffFunction::Geometric && self.min_delay_ms < 1_000 {
            return Err(PolicyError::new(
                names.min_delay,
                format!(
                    "must be at least 1 second for the geometric function, got {} ms",
                    self.min_delay_ms
                ),
            ));
        }
        if self.num_retries > limit {
            return Err(PolicyError::new(
                names.num_retries,
                format!("must be at most {limit}, got {}", self.num_retries),
            ));
        }
        let phases = u64::from(self.num_no_delay_retries)
            + u64::from(self.num_min_delay_retries)
            + u64::from(self.num_max_delay_retries);
        if phases > u64::from(self.num_retries) {
            return Err(PolicyError::new(
                names.num_retries,
                format!(
                    "must be at least {} + {} + {} = {phases} (the retries of the other phases), got {}",
                    names.num_no_delay_retries,
                    names.num_min_delay_retries,
                    names.num_max_delay_retries,
                    self.num_retries
                ),
            ));
        }
        Ok(())
    }
}

/// How the fields of a phased policy are spelled in the input, for error messages.
#[derive(Debug, Clone, Copy)]
pub struct PhasedNames {
    pub min_delay: &'static str,
    pub max_delay: &'static str,
    pub num_retries: &'static str,
    pub num_no_delay_retries: &'static str,
    pub num_min_delay_retries: &'static str,
    pub num_max_delay_retries: &'static str,
    pub function: &'static str,
}

pub(crate) fn to_f64(ms: u64) -> f64 {
    // Delays are at most MAX_DELAY_MS < 2^53, so this is exact for every validated value.
    #[allow(clippy::cast_precision_loss)]
    let value = ms as f64;
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::clamp_ms;

    /// The golden table of docs/policies.md, "The phased policy": MIN 5 s, MAX 260 s, N 10, in
    /// milliseconds.
    const GOLDEN: [[u64; 4]; 10] = [
        [5_000, 5_000, 5_000, 5_000],
        [33_333, 10_667, 7_756, 5_499],
        [61_667, 22_000, 12_031, 6_497],
        [90_000, 39_000, 18_663, 8_493],
        [118_333, 61_667, 28_949, 12_485],
        [146_667, 90_000, 44_906, 20_470],
        [175_000, 124_000, 69_658, 36_438],
        [203_333, 163_667, 108_054, 68_376],
        [231_667, 209_000, 167_612, 132_250],
        [260_000, 260_000, 260_000, 260_000],
    ];

    #[test]
    fn golden_table_5_260_10() {
        for (row, want) in GOLDEN.iter().enumerate() {
            let i = u32::try_from(row + 1).unwrap_or(u32::MAX);
            for (function, want) in BackoffFunction::ALL.iter().zip(want) {
                let got = clamp_ms(function.value(i, 10, 5_000.0, 260_000.0));
                assert_eq!(got, *want, "{} at i = {i}", function.name());
            }
        }
    }

    #[test]
    fn aws_documented_linear_example() {
        // AWS: 3 retries from 20 s to 40 s come at 20, 30, 40.
        let p = Phased {
            min_delay_ms: 20_000,
            max_delay_ms: 40_000,
            ..Phased::sns_default()
        };
        let delays: Vec<u64> = (1..=3).map(|r| clamp_ms(p.delay_ms(r))).collect();
        assert_eq!(delays, [20_000, 30_000, 40_000]);
    }

    #[test]
    fn phases_come_in_order() {
        let p = Phased {
            min_delay_ms: 5_000,
            max_delay_ms: 30_000,
            num_retries: 14,
            num_no_delay_retries: 3,
            num_min_delay_retries: 3,
            num_max_delay_retries: 3,
            function: BackoffFunction::Linear,
        };
        let delays: Vec<u64> = (1..=15).map(|r| clamp_ms(p.delay_ms(r))).collect();
        assert_eq!(
            delays,
            [
                0, 0, 0, 5_000, 5_000, 5_000, 5_000, 11_250, 17_500, 23_750, 30_000, 30_000,
                30_000, 30_000, 30_000
            ]
        );
    }

    #[test]
    fn special_cases() {
        for f in BackoffFunction::ALL {
            assert_eq!(f.value(1, 1, 5.0, 9.0), 5.0, "N = 1 gives MIN");
            assert_eq!(f.value(3, 7, 5.0, 5.0), 5.0, "MIN = MAX gives a constant");
            assert_eq!(
                f.value(1_000_000, 1_000_000, 1.0, 2.0),
                2.0,
                "huge N ends at MAX"
            );
            let mid = f.value(500_000, 1_000_000, 1.0, 2.0);
            assert!(mid.is_finite() && (1.0..=2.0).contains(&mid));
        }
        // N = 0: only fixed phases.
        let p = Phased {
            num_retries: 2,
            num_no_delay_retries: 1,
            num_min_delay_retries: 1,
            ..Phased::sns_default()
        };
        assert_eq!(p.backoff_retries(), 0);
        assert_eq!(p.delay_ms(1), 0.0);
        assert_eq!(p.delay_ms(2), 20_000.0);
    }
}
