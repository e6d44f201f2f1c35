//! The worker's counters.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of a worker since it started; they only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Jobs the stream handed to this worker.
    pub received: u64,
    /// Handlers that returned `Ok`.
    pub succeeded: u64,
    /// Failures the server recorded (handler errors, panics, unknown types, bad payloads).
    pub failed: u64,
    /// Completions the server confirmed.
    pub completed: u64,
    /// Batch completion requests sent (`POST /api/jobs/complete`).
    pub ack_requests: u64,
    /// Lease extensions the server confirmed.
    pub heartbeats: u64,
    /// Jobs whose lease this worker lost (expired, or its stream closed): their result was not
    /// kept.
    pub lost: u64,
    /// Handlers still running at the shutdown deadline: stopped, their jobs given back.
    pub abandoned: u64,
    /// Jobs received but not started before shutdown: given back to the queue.
    pub returned: u64,
    /// Times the job stream could not be opened or broke, and was opened again.
    pub stream_errors: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub received: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    pub completed: AtomicU64,
    pub ack_requests: AtomicU64,
    pub heartbeats: AtomicU64,
    pub lost: AtomicU64,
    pub abandoned: AtomicU64,
    pub returned: AtomicU64,
    pub stream_errors: AtomicU64,
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub fn snapshot(&self) -> WorkerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerStats {
            received: get(&self.received),
            succeeded: get(&self.succeeded),
            failed: get(&self.failed),
            completed: get(&self.completed),
            ack_requests: get(&self.ack_requests),
            heartbeats: get(&self.heartbeats),
            lost: get(&self.lost),
            abandoned: get(&self.abandoned),
            returned: get(&self.returned),
            stream_errors: get(&self.stream_errors),
        }
    }
}
