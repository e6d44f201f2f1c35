//! A histogram of fixed buckets whose observations are atomic additions, encoded by
//! `prometheus-client` like its own. The crate's histogram takes a lock on every observation;
//! this one is on the hot path of every take and completion.
//!
//! Observations are whole units (microseconds for durations, ones for counts), so the sum is an
//! integer added atomically, never a compare-and-swap loop. A batch of observations (a take or a
//! completion of many jobs) is tallied locally ([`Tally`]) and added with one atomic addition
//! per bucket it touched: a counter shared by every worker's requests is a cache line the cores
//! pass back and forth, so fewer additions are what keeps a batch cheap.
//!
//! Invariant: the count is the sum of the buckets as read at encoding, so a scrape never shows a
//! count that disagrees with its buckets (an observation made during the scrape may be in the
//! buckets and not yet in the sum, which Prometheus tolerates).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// The most buckets a histogram has, `+Inf` included.
const MOST_BUCKETS: usize = 24;

/// A histogram handle: clones share the same buckets.
#[derive(Debug, Clone)]
pub struct Histogram {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Upper bounds as exposed, increasing; the `+Inf` bucket is implied.
    bounds: &'static [f64],
    /// The same bounds in units.
    limits: Box<[u64]>,
    /// Units per exposed unit: 1 000 000 for seconds observed in microseconds, 1 for counts.
    per_unit: f64,
    /// One per bound, and one past the last (`+Inf`); not cumulative.
    buckets: Box<[AtomicU64]>,
    /// The sum of the observations, in units.
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram of durations, observed in microseconds, exposed in seconds (`bounds`).
    pub fn seconds(bounds: &'static [f64]) -> Self {
        Self::new(bounds, 1_000_000.0)
    }

    /// A histogram of counts (`bounds`).
    pub fn counts(bounds: &'static [f64]) -> Self {
        Self::new(bounds, 1.0)
    }

    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn new(bounds: &'static [f64], per_unit: f64) -> Self {
        assert!(bounds.len() < MOST_BUCKETS, "too many buckets");
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Self {
            inner: Arc::new(Inner {
                bounds,
                limits: bounds
                    .iter()
                    .map(|b| (b * per_unit).round() as u64)
                    .collect(),
                per_unit,
                buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                sum: AtomicU64::new(0),
            }),
        }
    }

    fn bucket(&self, units: u64) -> usize {
        self.inner.limits.partition_point(|limit| *limit < units)
    }

    /// One observation, in units (microseconds, or ones).
    pub fn observe_units(&self, units: u64) {
        self.inner.buckets[self.bucket(units)].fetch_add(1, Ordering::Relaxed);
        self.inner.sum.fetch_add(units, Ordering::Relaxed);
    }

    /// `ms` milliseconds, in a histogram of [`Histogram::seconds`].
    pub fn observe_ms(&self, ms: u64) {
        self.observe_units(ms.saturating_mul(1_000));
    }

    /// A duration, in a histogram of [`Histogram::seconds`].
    pub fn observe_duration(&self, elapsed: Duration) {
        self.observe_units(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    /// (sum, count, buckets) as read now: each bucket's own count (not cumulative, which is
    /// how `prometheus-client`'s encoders take them), the last one's bound `+Inf`.
    #[allow(clippy::cast_precision_loss)]
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut count = 0;
        let mut buckets = Vec::with_capacity(self.inner.buckets.len());
        for (at, bucket) in self.inner.buckets.iter().enumerate() {
            let n = bucket.load(Ordering::Relaxed);
            count += n;
            let bound = self.inner.bounds.get(at).copied().unwrap_or(f64::INFINITY);
            buckets.push((bound, n));
        }
        let sum = self.inner.sum.load(Ordering::Relaxed) as f64 / self.inner.per_unit;
        (sum, count, buckets)
    }
}

/// Observations of one histogram tallied locally, added to it by [`Tally::flush`] (and when
/// dropped).
#[derive(Debug)]
pub struct Tally {
    histogram: Histogram,
    buckets: [u64; MOST_BUCKETS],
    sum: u64,
}

impl Tally {
    pub fn new(histogram: &Histogram) -> Self {
        Self {
            histogram: histogram.clone(),
            buckets: [0; MOST_BUCKETS],
            sum: 0,
        }
    }

    pub fn observe_ms(&mut self, ms: u64) {
        let units = ms.saturating_mul(1_000);
        self.buckets[self.histogram.bucket(units)] += 1;
        self.sum = self.sum.saturating_add(units);
    }

    /// Adds what was tallied to the histogram: one atomic addition per bucket touched.
    pub fn flush(&mut self) {
        let inner = &self.histogram.inner;
        for (bucket, n) in inner.buckets.iter().zip(&mut self.buckets) {
            if *n > 0 {
                bucket.fetch_add(std::mem::take(n), Ordering::Relaxed);
            }
        }
        if self.sum > 0 {
            inner
                .sum
                .fetch_add(std::mem::take(&mut self.sum), Ordering::Relaxed);
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.flush();
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
        let h = Histogram::counts(&[1.0, 2.0, 5.0]);
        for v in [0, 1, 1, 2, 2, 4, 7] {
            h.observe_units(v);
        }
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 7);
        assert!((sum - 17.0).abs() < 1e-9, "{sum}");
        // <= 1: 0, 1, 1; (1, 2]: 2, 2; (2, 5]: 4; above: 7.
        assert_eq!(
            buckets,
            vec![(1.0, 3), (2.0, 2), (5.0, 1), (f64::INFINITY, 1)]
        );
    }

    #[test]
    fn a_tally_adds_what_single_observations_would() {
        let one = Histogram::seconds(JOB_SECONDS);
        let tallied = Histogram::seconds(JOB_SECONDS);
        let mut tally = Tally::new(&tallied);
        for ms in [0, 3, 3, 700, 12_000, 90_000_000] {
            one.observe_ms(ms);
            tally.observe_ms(ms);
        }
        drop(tally);
        assert_eq!(one.snapshot(), tallied.snapshot());
        let (sum, count, _) = one.snapshot();
        assert_eq!(count, 6);
        assert!((sum - 90_012.706).abs() < 1e-6, "{sum}");
    }

    #[test]
    fn encodes_as_a_prometheus_histogram() {
        let mut registry = prometheus_client::registry::Registry::default();
        let h = Histogram::seconds(&[0.1, 1.0]);
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
        assert!(text.contains("wait_seconds_sum 3.05\n"), "{text}");
        assert!(text.contains("wait_seconds_count 2\n"), "{text}");
    }
}
