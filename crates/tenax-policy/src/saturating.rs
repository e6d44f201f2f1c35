//! Saturating curves, from the article "A function for scheduling retries in a job queue": they
//! rise quickly, then level off below a cap, so a job keeps being tried at a steady pace.

use std::f64::consts::{E, FRAC_2_PI};

use crate::duration::HOUR_MS;
use crate::phased::to_f64;

/// `cap · (2/π) · atan(n^power / scale)`, n = failures so far. Defaults from the article:
/// cap 24 h, power 3, scale 15.
#[derive(Debug, Clone, PartialEq)]
pub struct Arctan {
    pub cap_ms: u64,
    pub power: f64,
    pub scale: f64,
}

impl Default for Arctan {
    fn default() -> Self {
        Self {
            cap_ms: 24 * HOUR_MS,
            power: 3.0,
            scale: 15.0,
        }
    }
}

impl Arctan {
    /// Never above `cap_ms`: atan < π/2 for every finite argument, and atan(+∞) = π/2 exactly
    /// gives the cap itself.
    pub fn delay_ms(&self, n: u32) -> f64 {
        let x = f64::from(n).powf(self.power) / self.scale;
        (to_f64(self.cap_ms) * FRAC_2_PI * x.atan()).min(to_f64(self.cap_ms))
    }
}

/// The logistic (sigmoid) curve `cap / (1 + e^(−steepness·(n − midpoint)))`: slow at first,
/// steepest at the midpoint retry, then levelling off at the cap. Defaults: cap 24 h,
/// midpoint 6, steepness 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Logistic {
    pub cap_ms: u64,
    pub midpoint: f64,
    pub steepness: f64,
}

impl Default for Logistic {
    fn default() -> Self {
        Self {
            cap_ms: 24 * HOUR_MS,
            midpoint: 6.0,
            steepness: 1.0,
        }
    }
}

impl Logistic {
    pub fn delay_ms(&self, n: u32) -> f64 {
        // exp of a large positive number is +∞, and cap / ∞ = 0: the correct limit, not NaN.
        let denominator = 1.0 + (-self.steepness * (f64::from(n) - self.midpoint)).exp();
        (to_f64(self.cap_ms) / denominator).min(to_f64(self.cap_ms))
    }
}

/// The sequence `(1 + 1/n)^n`, which rises from 2 toward e, scaled so that it approaches the cap:
/// `cap · (1 + 1/n)^n / e`. It starts at 2/e ≈ 73.6 % of the cap and creeps up: the gentlest of
/// the saturating curves. Default cap: 1 h.
#[derive(Debug, Clone, PartialEq)]
pub struct Euler {
    pub cap_ms: u64,
}

impl Default for Euler {
    fn default() -> Self {
        Self { cap_ms: HOUR_MS }
    }
}

impl Euler {
    pub fn delay_ms(&self, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        // exp(n·ln(1 + 1/n)) is accurate for large n where (1 + 1/n) itself rounds to 1.
        let sequence = (n * (1.0 / n).ln_1p()).exp();
        (to_f64(self.cap_ms) * sequence / E).min(to_f64(self.cap_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arctan_golden_hours() {
        // docs/policies.md, "Saturating policies": hours for n = 0..11.
        let golden = [
            0.0, 1.017, 7.486, 16.252, 20.483, 22.175, 22.941, 23.332, 23.553, 23.686, 23.771,
            23.828,
        ];
        let curve = Arctan::default();
        for (n, want) in (0u32..).zip(golden) {
            let hours = curve.delay_ms(n) / to_f64(HOUR_MS);
            assert!(
                (hours - want).abs() < 0.0005,
                "n = {n}: {hours} h, want {want} h"
            );
        }
        assert!(
            (curve.delay_ms(1) / 60_000.0 - 61.0).abs() < 0.1,
            "f(1) ≈ 61 min"
        );
    }

    #[test]
    fn saturating_curves_stay_below_cap() {
        let arctan = Arctan {
            cap_ms: 1_000,
            power: 1_000.0,
            scale: 1e-300,
        };
        let logistic = Logistic {
            cap_ms: 1_000,
            midpoint: 0.0,
            steepness: 1e300,
        };
        let euler = Euler { cap_ms: 1_000 };
        for n in [0, 1, 2, 10, 1_000, u32::MAX] {
            for d in [arctan.delay_ms(n), logistic.delay_ms(n), euler.delay_ms(n)] {
                assert!(
                    d.is_finite() && (0.0..=1_000.0).contains(&d),
                    "n = {n}: {d}"
                );
            }
        }
    }

    #[test]
    fn euler_rises_toward_the_cap() {
        let euler = Euler { cap_ms: 1_000_000 };
        assert!((euler.delay_ms(1) - 1e6 * 2.0 / E).abs() < 1e-6);
        assert!((euler.delay_ms(2) - 1e6 * 2.25 / E).abs() < 1e-6);
        let mut previous = 0.0;
        for n in 1..200 {
            let d = euler.delay_ms(n);
            assert!(d > previous);
            previous = d;
        }
    }
}
