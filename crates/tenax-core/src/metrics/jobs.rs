//! The job metrics: counters of transitions by queue and type, and histograms of waiting, run
//! and end-to-end time by queue. The engine counts them where it decides the transitions
//! (`crate::engine::observe`); this module holds the series.
//!
//! Hot-path rule: a caller resolves a [`JobSeries`] once per run of jobs of one queue and type
//! (a cached handle), and each event is then an atomic increment on it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::histogram::{Histogram, JOB_SECONDS};
use super::labels::Bounded;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub queue: String,
    pub r#type: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    pub queue: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn job_seconds() -> Histogram {
    Histogram::seconds(JOB_SECONDS)
}

/// The series of one queue and type: a handle per counter and histogram.
#[derive(Debug)]
pub struct JobSeries {
    /// Its place in [`JobMetrics::by_index`], for a record that keeps a number, not a handle.
    pub index: u32,
    pub enqueued: Counter,
    pub completed: Counter,
    pub failed: Counter,
    pub retried: Counter,
    pub snoozed: Counter,
    pub dead: Counter,
    /// Attempts whose leases were marked cancelled that ended in a failure or an expiry.
    pub cancelled: Counter,
    pub lease_expired: Counter,
    /// By queue: from ready to taken.
    pub waiting: Histogram,
    /// By queue: from taken to completed or failed.
    pub running: Histogram,
    /// By queue: from enqueued to completed.
    pub end_to_end: Histogram,
}

/// An admitted queue and type.
type SeriesKey = (Arc<str>, Arc<str>);

#[derive(Debug)]
pub struct JobMetrics {
    queues: Bounded,
    types: Bounded,
    enqueued: Family<JobLabels, Counter>,
    completed: Family<JobLabels, Counter>,
    failed: Family<JobLabels, Counter>,
    retried: Family<JobLabels, Counter>,
    snoozed: Family<JobLabels, Counter>,
    dead: Family<JobLabels, Counter>,
    cancelled: Family<JobLabels, Counter>,
    lease_expired: Family<JobLabels, Counter>,
    waiting: Histograms<QueueLabel>,
    running: Histograms<QueueLabel>,
    end_to_end: Histograms<QueueLabel>,
    /// Resolved series by admitted (queue, type): bounded, since both are.
    series: RwLock<HashMap<SeriesKey, Arc<JobSeries>>>,
    /// The same series by index, in the order they were made.
    table: RwLock<Vec<Arc<JobSeries>>>,
}

impl JobMetrics {
    /// Registers the families in `registry`; at most `label_limit` queues and as many types
    /// get series of their own.
    pub fn new(registry: &mut Registry, label_limit: usize) -> Self {
        let histograms =
            || Histograms::<QueueLabel>::new_with_constructor(job_seconds as fn() -> Histogram);
        let metrics = Self {
            queues: Bounded::new(label_limit),
            types: Bounded::new(label_limit),
            enqueued: Family::default(),
            completed: Family::default(),
            failed: Family::default(),
            retried: Family::default(),
            snoozed: Family::default(),
            dead: Family::default(),
            cancelled: Family::default(),
            lease_expired: Family::default(),
            waiting: histograms(),
            running: histograms(),
            end_to_end: histograms(),
            series: RwLock::new(HashMap::new()),
            table: RwLock::new(Vec::new()),
        };
        let counters = [
            (
                "tenax_jobs_enqueued",
                "Jobs enqueued (created; a duplicate answered with the existing job is not counted)",
                &metrics.enqueued,
            ),
            (
                "tenax_jobs_completed",
                "Jobs completed by their workers",
                &metrics.completed,
            ),
            (
                "tenax_jobs_failed",
                "Failed attempts: failures reported by workers and leases that expired",
                &metrics.failed,
            ),
            (
                "tenax_jobs_retried",
                "Failed attempts after which the job's policy scheduled a retry",
                &metrics.retried,
            ),
            (
                "tenax_jobs_snoozed",
                "Jobs snoozed by their workers (not a failure)",
                &metrics.snoozed,
            ),
            (
                "tenax_jobs_dead",
                "Jobs that died: no retry left, or a failure marked not retryable",
                &metrics.dead,
            ),
            (
                "tenax_jobs_cancelled_in_flight",
                "Jobs in flight whose leases were marked cancelled, ended cancelled by a failure or an expiry (each also counted as failed)",
                &metrics.cancelled,
            ),
            (
                "tenax_jobs_lease_expired",
                "Leases that expired before the worker completed, failed or heartbeat (each also counted as failed)",
                &metrics.lease_expired,
            ),
        ];
        for (name, help, family) in counters {
            registry.register(name, help, family.clone());
        }
        let histograms = [
            (
                "tenax_job_wait",
                "Time from a job being ready (due) to its take",
                &metrics.waiting,
            ),
            (
                "tenax_job_run",
                "Time from a job's take to its completion or failure",
                &metrics.running,
            ),
            (
                "tenax_job_end_to_end",
                "Time from a job's enqueue to its completion",
                &metrics.end_to_end,
            ),
        ];
        for (name, help, family) in histograms {
            registry.register_with_unit(name, help, Unit::Seconds, family.clone());
        }
        metrics
    }

    /// The label value `queue` is counted under.
    pub fn queue_label(&self, queue: &str) -> Arc<str> {
        self.queues.admit(queue)
    }

    /// The series of jobs of `queue` and `kind`.
    pub fn series(&self, queue: &str, kind: &str) -> Arc<JobSeries> {
        let queue = self.queues.admit(queue);
        let kind = self.types.admit(kind);
        if let Some(series) = self.series.read().get(&(queue.clone(), kind.clone())) {
            return series.clone();
        }
        let labels = JobLabels {
            queue: queue.to_string(),
            r#type: kind.to_string(),
        };
        let by_queue = QueueLabel {
            queue: queue.to_string(),
        };
        let mut series = self.series.write();
        if let Some(made) = series.get(&(queue.clone(), kind.clone())) {
            return made.clone();
        }
        let mut table = self.table.write();
        let made = Arc::new(JobSeries {
            index: u32::try_from(table.len()).unwrap_or(u32::MAX),
            enqueued: self.enqueued.get_or_create_owned(&labels),
            completed: self.completed.get_or_create_owned(&labels),
            failed: self.failed.get_or_create_owned(&labels),
            retried: self.retried.get_or_create_owned(&labels),
            snoozed: self.snoozed.get_or_create_owned(&labels),
            dead: self.dead.get_or_create_owned(&labels),
            cancelled: self.cancelled.get_or_create_owned(&labels),
            lease_expired: self.lease_expired.get_or_create_owned(&labels),
            waiting: self.waiting.get_or_create_owned(&by_queue),
            running: self.running.get_or_create_owned(&by_queue),
            end_to_end: self.end_to_end.get_or_create_owned(&by_queue),
        });
        table.push(made.clone());
        series.insert((queue, kind), made.clone());
        made
    }

    /// The series of index `index` ([`JobSeries::index`]).
    pub fn by_index(&self, index: u32) -> Option<Arc<JobSeries>> {
        self.table.read().get(index as usize).cloned()
    }
}

/// A cache of the last series resolved, for a loop over jobs that are mostly of one queue and
/// type (a batch): one lookup per run instead of one per job.
#[derive(Debug, Default)]
pub struct LastSeries {
    last: Option<(String, String, Arc<JobSeries>)>,
}

impl LastSeries {
    pub fn get(&mut self, metrics: &JobMetrics, queue: &str, kind: &str) -> &Arc<JobSeries> {
        let last = match self.last.take() {
            Some(last) if last.0 == queue && last.1 == kind => last,
            _ => (
                queue.to_owned(),
                kind.to_owned(),
                metrics.series(queue, kind),
            ),
        };
        &self.last.insert(last).2
    }
}
