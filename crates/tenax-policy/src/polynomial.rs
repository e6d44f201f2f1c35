//! The polynomial policy of Sidekiq and Zizq: `d(r) = B + r^E seconds (+ U·J·r jitter)`.
//!
//! The jitter term is the additive jitter layer ([`crate::Jitter::Additive`]); this module holds
//! the deterministic part only.

use crate::phased::to_f64;

/// Defaults (docs/policies.md, "The polynomial policy"): retry limit 25, base 15 s, exponent 4,
/// jitter 30 s.
pub const DEFAULT_RETRY_LIMIT: u32 = 25;
pub const DEFAULT_BASE_MS: u64 = 15_000;
pub const DEFAULT_EXPONENT: f64 = 4.0;
pub const DEFAULT_JITTER_MS: u64 = 30_000;

/// `base + r^exponent` seconds. The exponent is finite and non-negative (validated).
#[derive(Debug, Clone, PartialEq)]
pub struct Polynomial {
    pub base_ms: u64,
    pub exponent: f64,
}

impl Default for Polynomial {
    fn default() -> Self {
        Self {
            base_ms: DEFAULT_BASE_MS,
            exponent: DEFAULT_EXPONENT,
        }
    }
}

impl Polynomial {
    /// The delay before retry `r`, in milliseconds, not yet rounded or clamped. `r^E` may be
    /// +∞ for a huge exponent; the caller's clamp turns that into the ceiling, never into 0.
    pub fn delay_ms(&self, r: u32) -> f64 {
        to_f64(self.base_ms) + f64::from(r).powf(self.exponent) * 1_000.0
    }
}
