//! Cancelling jobs: what a cancellation did (docs/workflows.md#cancellation).
//!
//! A scheduled or ready job is cancelled at once: its status becomes
//! [`Status::Cancelled`](crate::model::Status::Cancelled). A job in flight cannot be taken from
//! its worker: its lease is marked instead, the worker learns it on its next heartbeat, and the
//! lease's end decides: a failure or an expiry finishes the job as cancelled, a completion
//! completes it. Finished jobs are left as they are.

use crate::clock::UnixMs;
use crate::model::{JobId, JobState, Status, Trigger};

/// What a cancellation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cancelled {
    /// Jobs that were scheduled or ready and are now cancelled, in id order.
    pub cancelled: Vec<JobId>,
    /// Jobs in flight whose leases are now marked cancelled (or already were), in id order.
    pub marked: Vec<JobId>,
}

impl Cancelled {
    /// Whether job `id` was cancelled or marked: `None` if neither (finished, or not
    /// selected).
    pub fn outcome(&self, id: JobId) -> Option<CancelOutcome> {
        if self.cancelled.binary_search(&id).is_ok() {
            Some(CancelOutcome::Cancelled)
        } else if self.marked.binary_search(&id).is_ok() {
            Some(CancelOutcome::Marked)
        } else {
            None
        }
    }
}

/// What a cancellation did to one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It is cancelled.
    Cancelled,
    /// It is in flight, its lease marked: its worker learns it on its next heartbeat.
    Marked,
}

impl CancelOutcome {
    pub fn name(self) -> &'static str {
        match self {
            Self::Cancelled => "cancelled",
            Self::Marked => "marked",
        }
    }
}

/// The reason a cancelled job records (in `dead_reason`) when an operator cancelled it.
pub const CANCELLED_BY_REQUEST: &str = "cancelled by request";

/// The reason recorded when a job's worker stopped (failed, or let its lease end) after its
/// lease was marked cancelled.
pub const CANCELLED_IN_FLIGHT: &str = "cancelled by request while in flight";

impl JobState {
    /// This state, cancelled at `now_ms` for `reason`: finished, its next run (if a replay or
    /// run-now asked for one) forgotten. Its failures and error history stay as they were.
    #[must_use]
    pub fn cancelled(&self, now_ms: UnixMs, reason: &str) -> Self {
        Self {
            status: Status::Cancelled,
            finished_at_ms: Some(now_ms),
            dead_reason: Some(reason.to_owned()),
            trigger: Trigger::Scheduled,
            result: None,
            ..self.clone()
        }
    }
}
