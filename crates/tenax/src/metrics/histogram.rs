//! A histogram of fixed buckets whose observations are atomic increments, encoded by
//! `prometheus-client` like its own. The crate's histogram takes a lock on every observation;
//! this one is on the hot path of every take and completion, where the brief for metrics allows
//! no more than atomic increments.
//!
//! Invariant: the count and the `+Inf` bucket are the sum of the buckets as read at encoding,
//! so a scrape never shows a count that disagrees with its buckets (an observation made during
//! the scrape may be in the buckets and not yet in the sum, which Prometheus tolerates).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A histogram handle: clones share the same buckets.
#[derive(Debug, Clone)]
pub struct Histogram {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Upper bounds, increasing; the `+Inf` bucket is implied.
    bounds: &'static [f64],
    /// One per bound, and one past the last (`+Inf`); not cumulative.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observations, as the bits of an `f64`.
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (increasing).
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Self {
            inner: Arc::new(Inner {
                bounds,
                buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                sum: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    pub fn observe(&self, value: f64) {
        let value = if value.is_finite() { value } else { 0.0 };
        let at = self.inner.bounds.partition_point(|bound| *bound < value);
        self.inner.buckets[at].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .inner
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + value).to_bits())
            });
    }

    /// Observes `ms` milliseconds, in seconds.
    #[allow(clippy::cast_precision_loss)]
    pub fn observe_ms(&self, ms: u64) {
        self.observe(ms as f64 / 1_000.0);
    }

    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe(elapsed.as_secs_f64());
    }

    /// (sum, count, buckets) as read now: each bucket's own count (not cumulative, which is
    /// how `prometheus-client`'s encoders take them), the last one's bound `+Inf`.
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut count = 0;
        let mut buckets = Vec::with_capacity(self.inner.buckets.len());
        for (at, bucket) in self.inner.buckets.iter().enumerate() {
            let n = bucket.load(Ordering::Relaxed);
            count += n;
            let bound = self.inner.bounds.get(at).copied().unwrap_or(f64::INFINITY);
            buckets.push((bound, n));
        }
        let sum = f64::from_bits(self.inner.sum.load(Ordering::Relaxed));
        (sum, count, buckets)
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// Seconds, for how long jobs wait and run: 1 ms to a day.
pub const JOB_SECONDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3_600.0,
    21_600.0, 86_400.0,
];

/// Seconds, for an HTTP request served: 0.5 ms to 30 s (long polls wait up to their `wait`).
pub const REQUEST_SECONDS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Seconds, for a webhook request: 5 ms to 30 s.
pub const WEBHOOK_SECONDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0,
];

/// Seconds, for a store commit: 0.1 ms to 1 s.
pub const COMMIT_SECONDS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Requests sharing one commit: 1 to 65 536.
pub const COMMIT_REQUESTS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1_024.0, 4_096.0, 16_384.0, 65_536.0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new(&[1.0, 2.0, 5.0]);
        for v in [0.5, 1.0, 1.5, 2.0, 4.0, 7.0, f64::NAN] {
            h.observe(v);
        }
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 7);
        assert!((sum - 16.0).abs() < 1e-9, "{sum}");
        // <= 1: 0.5, 1.0 and NaN (as 0); (1, 2]: 1.5, 2.0; (2, 5]: 4.0; above: 7.0.
        assert_eq!(
            buckets,
            vec![(1.0, 3), (2.0, 2), (5.0, 1), (f64::INFINITY, 1)]
        );
    }

    #[test]
    fn encodes_as_a_prometheus_histogram() {
        let mut registry = prometheus_client::registry::Registry::default();
        let h = Histogram::new(&[0.1, 1.0]);
        registry.register_with_unit(
            "wait",
            "How long",
            prometheus_client::registry::Unit::Seconds,
            h.clone(),
        );
        h.observe_ms(50);
        h.observe_ms(3_000);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("wait_seconds_bucket{le=\"0.1\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("wait_seconds_bucket{le=\"1\"} 1\n"), "{text}");
        assert!(
            text.contains("wait_seconds_bucket{le=\"+Inf\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("wait_seconds_count 2\n"), "{text}");
    }
}
