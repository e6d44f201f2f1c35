//! What an enqueue asks about a held unique key, who holds one it was refused, and what it
//! answers for each job.

use serde::{Deserialize, Serialize};

use crate::clock::UnixMs;
use crate::model::{JobId, Status};

/// What to do when a job's unique key is already held by an unfinished job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDuplicate {
    /// Refuse the whole request (409).
    #[default]
    Refuse,
    /// Answer with the existing job instead.
    Existing,
}

/// The result of enqueueing one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub id: JobId,
    /// False when an existing job was returned for a duplicate unique key.
    pub created: bool,
    pub status: Status,
    pub run_at_ms: UnixMs,
}

/// Who holds a unique key that an enqueue asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHolder {
    /// A stored, unfinished job.
    Job(JobId),
    /// An earlier job of the same request (at this index), which was therefore not stored.
    Earlier(usize),
}

impl KeyHolder {
    /// Why an enqueue of `key` in `queue` was refused, in words.
    pub fn refusal(&self, queue: &str, key: &str) -> String {
        match self {
            KeyHolder::Job(id) => format!(
                "queue {queue:?} already has an unfinished job with unique key {key:?} (job {id})"
            ),
            KeyHolder::Earlier(index) => format!(
                "repeats unique key {key:?} of jobs[{index}] in queue {queue:?}; a queue holds one \
             unfinished job per key"
            ),
        }
    }
}
