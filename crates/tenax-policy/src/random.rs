//! The random source behind jitter: injectable, and reproducible from a seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Where jitter draws come from. Production seeds a [`SeededRandom`] from the job id and the
/// attempt, so that a preview, a test and a replay see the same draw; tests may pass a fixed
/// sequence.
pub trait RandomSource {
    /// A uniform draw in `[0, 1)`.
    fn unit(&mut self) -> f64;
}

/// A ChaCha8 stream: portable and stable across platforms and crate versions, unlike `StdRng`.
#[derive(Debug, Clone)]
pub struct SeededRandom(ChaCha8Rng);

impl SeededRandom {
    pub fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// The stream for retry `retry` of the job (or delivery) with id `key`.
    pub fn for_retry(key: &str, retry: u32) -> Self {
        Self::new(seed_for(key, retry))
    }
}

impl RandomSource for SeededRandom {
    fn unit(&mut self) -> f64 {
        self.0.random::<f64>()
    }
}

/// A fixed value for every draw (clamped into `[0, 1)`): the extremes of a jitter band in tests
/// and previews.
#[derive(Debug, Clone, Copy)]
pub struct FixedRandom(pub f64);

impl RandomSource for FixedRandom {
    fn unit(&mut self) -> f64 {
        if self.0.is_nan() {
            0.0
        } else {
            self.0.clamp(0.0, 1.0 - f64::EPSILON)
        }
    }
}

/// A stable 64-bit seed from a key and a retry number (FNV-1a over the key's bytes, then the
/// retry's). Stable across runs, machines and versions, which `std`'s hashers do not promise.
pub fn seed_for(key: &str, retry: u32) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    key.bytes()
        .chain(retry.to_le_bytes())
        .fold(OFFSET, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(PRIME)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_draws_repeat_and_differ_by_retry() {
        let a: Vec<f64> = (0..4)
            .map(|_| SeededRandom::for_retry("job-1", 3).unit())
            .collect();
        assert!(
            a.windows(2).all(|w| w[0] == w[1]),
            "same key and retry, same draw"
        );
        let b = SeededRandom::for_retry("job-1", 4).unit();
        assert_ne!(a[0], b);
        assert!((0.0..1.0).contains(&a[0]));
    }
}
