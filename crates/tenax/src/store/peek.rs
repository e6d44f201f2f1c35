//! Memory-only looks at jobs: what the indexes know (queue, status, expiry, the claim holding a
//! job) without reading a job's body from disk. For callers that decide per job on a hot path
//! (the Zaqar API checks a message's queue and claim before deleting it) or that scan a whole
//! queue (listings and stats read only the bodies they show).
//!
//! Invariant: a peek is a snapshot under the store's lock; the job may change right after.

use std::sync::Arc;

use super::Store;
use crate::clock::UnixMs;
use crate::model::{JobId, Status};

/// What memory holds of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPeek {
    pub queue: Arc<str>,
    pub status: Status,
    /// Earlier runs that failed or whose lease expired.
    pub failures: u32,
    /// When the job is deleted whatever its status, if ever (a claim may have moved it later).
    pub expires_at_ms: Option<UnixMs>,
    /// While in flight: the claim (or stream) holding the lease, if any.
    pub claim: Option<u64>,
    /// While in flight: when the lease ends.
    pub lease_expires_at_ms: Option<UnixMs>,
}

impl Store {
    /// For each id, what memory holds of the job, or `None` if there is no such job.
    pub async fn peek(&self, ids: &[JobId]) -> Vec<Option<JobPeek>> {
        match self {
            Store::Embedded(s) => s.peek(ids),
        }
    }

    /// Every job of `queue` (any status), in id order.
    pub async fn peek_queue(&self, queue: &str) -> Vec<(JobId, JobPeek)> {
        match self {
            Store::Embedded(s) => s.peek_queue(queue),
        }
    }
}
