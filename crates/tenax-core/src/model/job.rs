//! A job: immutable content fixed at enqueue, and mutable state changed by each transition.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{ClaimId, JobId, OnParentDead, StoredPolicy, Trigger};
use crate::clock::UnixMs;

/// A job's lifecycle (docs/api.md): `scheduled → ready → in_flight → completed`, with retries
/// (`in_flight → scheduled`), death, replay (`dead → ready`, `cancelled → ready`), lease
/// expiry (`in_flight → ready`) and cancellation (`scheduled`, `ready` or a marked
/// `in_flight` → `cancelled`); a job that waits for others starts `waiting` and becomes ready
/// (or scheduled) when the last of them completes ([`crate::model::dependency`]).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Scheduled,
    Ready,
    InFlight,
    Completed,
    Dead,
    /// Stopped by an operator before it finished (`POST /api/jobs/{id}/cancel`): never runs
    /// again unless replayed. Kept and purged as dead jobs are.
    Cancelled,
    /// Held until every job it waits for ([`NewJob::after`]) has completed.
    Waiting,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Self::Scheduled,
        Self::Ready,
        Self::InFlight,
        Self::Completed,
        Self::Dead,
        Self::Cancelled,
        Self::Waiting,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Ready => "ready",
            Self::InFlight => "in_flight",
            Self::Completed => "completed",
            Self::Dead => "dead",
            Self::Cancelled => "cancelled",
            Self::Waiting => "waiting",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == text)
    }

    /// Finished jobs are kept only for their retention period.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Dead | Self::Cancelled)
    }

    /// Dead or cancelled: finished without completing, kept for the dead jobs' retention, and
    /// replayable.
    pub fn is_given_up(self) -> bool {
        matches!(self, Self::Dead | Self::Cancelled)
    }
}

/// A job as the engine hands it to the store for enqueue: everything but the id.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewJob {
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub payload: Box<RawValue>,
    /// Higher runs first.
    pub priority: i32,
    /// When the job becomes ready; `<= now` means ready at once.
    pub run_at_ms: UnixMs,
    /// The job's own policy, if it has one (stored as canonical native JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<StoredPolicy>,
    /// Deduplication key within the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    pub created_at_ms: UnixMs,
    /// The job is deleted at this time, whatever its status (a Zaqar message's TTL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<UnixMs>,
    /// Who enqueued it (a Zaqar `Client-ID`), for listings that leave out one's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The job this one was made for: a delivery's message. Set by the store, from the index
    /// of the parent in the same enqueue ([`Insert::parent`](crate::store::Insert::parent)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<JobId>,
    /// The W3C trace context the job was enqueued with (`traceparent`), handed to its workers
    /// and sent with its webhook deliveries, so that one trace covers producer, queue and
    /// worker. Checked by [`check_traceparent`](crate::model::check_traceparent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The payload is sealed (an encrypted queue's: the engine sealed it with the store's data
    /// key, and `payload` holds the sealed text as a JSON string). Kept in the job's record,
    /// never in the payload, so no payload can pass for a sealed one; only the engine sees it
    /// set, since it opens every payload it reads before handing the job on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub payload_sealed: bool,
    /// The jobs this one waits for (its parents in a workflow): it runs once every one of
    /// them has completed. Fixed at enqueue, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    /// What it does when one of them will not complete.
    #[serde(default, skip_serializing_if = "OnParentDead::is_default")]
    pub on_parent_dead: OnParentDead,
    /// The batch the job is a member of (`crate::model::batch`). Set by the store as it adds
    /// the job to the batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<crate::model::BatchId>,
}

/// One failure, as recorded on the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorEntry {
    /// The attempt (run) that failed, from 1.
    pub attempt: u32,
    pub at_ms: UnixMs,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// The mutable part of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobState {
    pub status: Status,
    /// Scheduled: when it becomes ready. Ready: when it became ready. Otherwise informational.
    pub run_at_ms: UnixMs,
    /// Runs that ended in a failure or a lost lease: the `r` the policy is asked about.
    pub failures: u32,
    /// When the first failure happened (the retry window starts here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure_at_ms: Option<UnixMs>,
    /// The delay actually used before the current retry (decorrelated jitter grows from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delay_ms: Option<u64>,
    /// When the job completed or died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<UnixMs>,
    /// Why it died, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<String>,
    /// What makes its next run happen, when not its schedule: set by a replay or a run-now,
    /// carried to the worker that takes it (a delivery's attempt records it), and back to
    /// scheduled at the next transition out of flight.
    #[serde(default, skip_serializing_if = "Trigger::is_scheduled")]
    pub trigger: Trigger,
    /// What the worker that completed it answered with, if anything: set only by a completion,
    /// kept with the completed job for its retention. Sealed when the job's payload is
    /// ([`NewJob::payload_sealed`]): an encrypted queue's results are as secret as its payloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<JobResult>,
}

/// A completed job's result: any JSON value, kept as the worker sent it, byte for byte.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobResult(pub Box<RawValue>);

impl JobResult {
    /// The result's JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for JobResult {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl JobState {
    pub fn new(run_at_ms: UnixMs, now_ms: UnixMs) -> Self {
        let status = if run_at_ms > now_ms {
            Status::Scheduled
        } else {
            Status::Ready
        };
        Self {
            status,
            run_at_ms,
            failures: 0,
            first_failure_at_ms: None,
            last_delay_ms: None,
            finished_at_ms: None,
            dead_reason: None,
            trigger: Trigger::Scheduled,
            result: None,
        }
    }
}

/// A whole job: id, content and state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub id: JobId,
    #[serde(flatten)]
    pub spec: NewJob,
    #[serde(flatten)]
    pub state: JobState,
    /// One entry per failed attempt, oldest first.
    pub errors: Vec<ErrorEntry>,
    /// While in flight: who holds the lease, and until when. Not part of the job's record.
    #[serde(skip)]
    pub held: Option<Held>,
}

/// The lease on an in-flight job, as readers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The claim (or streaming take) holding it, if any.
    pub claim: Option<ClaimId>,
    pub lease_expires_at_ms: UnixMs,
}
