//! The shape of a policy: which curve gives the delay before retry r, before jitter and cap.

use crate::phased::{Phased, to_f64};
use crate::polynomial::Polynomial;
use crate::saturating::{Arctan, Euler, Logistic};
use crate::simple::{DelayList, DoublingThenLinear, Exponential};

/// Every curve Tenax knows. Parameters are validated by the spellings before a `Shape` exists.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// The Zaqar / AWS SNS four-phase policy.
    Phased(Phased),
    /// `base + r^exponent` seconds (Sidekiq, Zizq).
    Polynomial(Polynomial),
    /// `cap·(2/π)·atan(n^power/scale)`.
    Arctan(Arctan),
    /// `cap / (1 + e^(−steepness·(n − midpoint)))`.
    Logistic(Logistic),
    /// `cap·(1 + 1/n)^n / e`.
    Euler(Euler),
    /// The same delay every time.
    Fixed { delay_ms: u64 },
    /// An explicit list of delays.
    List(DelayList),
    /// `initial·factor^(r−1)`, capped at `max`.
    Exponential(Exponential),
    /// Doubling, then linear, then flat (Cloud Tasks).
    DoublingThenLinear(DoublingThenLinear),
}

impl Shape {
    /// The name used as `"type"` in the native spelling.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Phased(_) => "phased",
            Self::Polynomial(_) => "polynomial",
            Self::Arctan(_) => "arctan",
            Self::Logistic(_) => "logistic",
            Self::Euler(_) => "euler",
            Self::Fixed { .. } => "fixed",
            Self::List(_) => "list",
            Self::Exponential(_) => "exponential",
            Self::DoublingThenLinear(_) => "doubling",
        }
    }

    /// The delay before retry `r` (r ≥ 1) in milliseconds, unrounded; may be +∞ for extreme
    /// parameters, never NaN or negative. Callers clamp.
    pub fn delay_ms(&self, r: u32) -> f64 {
        let r = r.max(1);
        let delay = match self {
            Self::Phased(p) => p.delay_ms(r),
            Self::Polynomial(p) => p.delay_ms(r),
            Self::Arctan(a) => a.delay_ms(r),
            Self::Logistic(l) => l.delay_ms(r),
            Self::Euler(e) => e.delay_ms(r),
            Self::Fixed { delay_ms } => to_f64(*delay_ms),
            Self::List(l) => l.delay_ms(r),
            Self::Exponential(e) => e.delay_ms(r),
            Self::DoublingThenLinear(d) => d.delay_ms(r),
        };
        if delay.is_nan() { 0.0 } else { delay.max(0.0) }
    }

    /// The retry limit the shape itself implies, if any: a phased policy's `num_retries`, or a
    /// list that is the whole schedule.
    pub fn natural_retry_limit(&self) -> Option<u32> {
        match self {
            Self::Phased(p) => Some(p.num_retries),
            Self::List(l) if !l.repeat_last => {
                Some(u32::try_from(l.delays_ms.len()).unwrap_or(u32::MAX))
            }
            _ => None,
        }
    }
}
