//! What an enqueue asks about a held unique key, and what it answers for each job.

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
