//! Jitter: the random layer over a shape's delay, so that many jobs that failed together do not
//! retry together.

use crate::random::RandomSource;

/// How a delay `d` (already capped) is spread. Every draw stays inside [`Jitter::band`].
#[derive(Debug, Clone, PartialEq)]
pub enum Jitter {
    /// Exactly `d`.
    None,
    /// Uniform in `[0, d]`.
    Full,
    /// `d/2` plus uniform in `[0, d/2]`.
    Equal,
    /// Uniform in `[d, 3·previous]` (previous = the delay actually used before this one, or `d`
    /// for the first retry), never above the cap: the spread grows with each retry.
    Decorrelated,
    /// `d` ± `percent` %, uniformly: `percent` in `0..=100`.
    Proportional { percent: f64 },
    /// The polynomial's `U·J·r`: `d` plus uniform in `[0, amount·r]`.
    Additive { amount_ms: u64 },
}

impl Jitter {
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Full => "full",
            Self::Equal => "equal",
            Self::Decorrelated => "decorrelated",
            Self::Proportional { .. } => "proportional",
            Self::Additive { .. } => "additive",
        }
    }

    /// The lowest and highest delay this jitter can give for retry `r` with delay `d`.
    /// `previous_high` is the highest delay the previous retry could have had (for decorrelated
    /// jitter), `ceiling` the cap that bounds every result. Values are unrounded milliseconds.
    pub fn band(&self, d: f64, r: u32, previous_high: Option<f64>, ceiling: f64) -> (f64, f64) {
        let (low, high) = self.spread(d, r, previous_high);
        (low.clamp(0.0, ceiling), high.clamp(0.0, ceiling))
    }

    /// One draw for retry `r`: `previous` is the delay actually used before (decorrelated only).
    /// The draw is uniform over the uncapped spread, then capped: like `min(cap, jittered)` in
    /// every library, draws above the cap land on it.
    pub fn apply(
        &self,
        d: f64,
        r: u32,
        previous: Option<f64>,
        ceiling: f64,
        random: &mut dyn RandomSource,
    ) -> f64 {
        let (low, high) = self.spread(d, r, previous);
        let u = random.unit().clamp(0.0, 1.0);
        // Every jitter kind is a uniform draw over its spread; the kinds differ only in it.
        let drawn = if high > low {
            low + (high - low) * u
        } else {
            low
        };
        drawn.clamp(low.max(0.0), high.max(0.0)).clamp(0.0, ceiling)
    }

    /// The uncapped interval a draw comes from.
    fn spread(&self, d: f64, r: u32, previous: Option<f64>) -> (f64, f64) {
        match self {
            Self::None => (d, d),
            Self::Full => (0.0, d),
            Self::Equal => (d / 2.0, d),
            Self::Decorrelated => (d, decorrelated_high(d, previous)),
            Self::Proportional { percent } => {
                let spread = d * percent / 100.0;
                (d - spread, d + spread)
            }
            Self::Additive { amount_ms } => (d, d + additive_span(*amount_ms, r)),
        }
    }
}

fn decorrelated_high(d: f64, previous: Option<f64>) -> f64 {
    (3.0 * previous.unwrap_or(d)).max(d)
}

fn additive_span(amount_ms: u64, r: u32) -> f64 {
    crate::phased::to_f64(amount_ms) * f64::from(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::FixedRandom;

    const CEILING: f64 = 1e12;

    fn draw(jitter: &Jitter, u: f64) -> f64 {
        jitter.apply(1_000.0, 2, None, CEILING, &mut FixedRandom(u))
    }

    #[test]
    fn bands_of_every_kind() {
        assert_eq!(
            Jitter::None.band(1_000.0, 2, None, CEILING),
            (1_000.0, 1_000.0)
        );
        assert_eq!(Jitter::Full.band(1_000.0, 2, None, CEILING), (0.0, 1_000.0));
        assert_eq!(
            Jitter::Equal.band(1_000.0, 2, None, CEILING),
            (500.0, 1_000.0)
        );
        assert_eq!(
            Jitter::Decorrelated.band(1_000.0, 2, None, CEILING),
            (1_000.0, 3_000.0)
        );
        assert_eq!(
            Jitter::Decorrelated.band(1_000.0, 2, Some(5_000.0), 9_000.0),
            (1_000.0, 9_000.0)
        );
        assert_eq!(
            Jitter::Proportional { percent: 10.0 }.band(1_000.0, 2, None, CEILING),
            (900.0, 1_100.0)
        );
        assert_eq!(
            Jitter::Additive { amount_ms: 30 }.band(1_000.0, 2, None, CEILING),
            (1_000.0, 1_060.0)
        );
    }

    #[test]
    fn draws_span_the_band() {
        assert_eq!(draw(&Jitter::Full, 0.0), 0.0);
        assert_eq!(draw(&Jitter::Full, 0.5), 500.0);
        assert_eq!(draw(&Jitter::Equal, 0.5), 750.0);
        assert_eq!(draw(&Jitter::None, 0.9), 1_000.0);
        assert_eq!(draw(&Jitter::Additive { amount_ms: 30 }, 0.5), 1_030.0);
    }
}
