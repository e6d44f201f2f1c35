//! The types that cross the storage seam.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tenax_policy::RetryPolicy;

use crate::clock::UnixMs;
use crate::model::{ErrorEntry, JobId, JobState, NewJob, Status};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("job {0} does not exist")]
    NotFound(JobId),
    #[error("job {id} is {}, not in flight", status.name())]
    NotInFlight { id: JobId, status: Status },
    #[error("job {id}: this lease is no longer valid (it expired, or the job was taken again)")]
    LeaseLost { id: JobId },
    /// The job at `index` of an enqueue request names a unique key that is already held.
    #[error("{}", duplicate_message(queue, key, holder))]
    Duplicate {
        index: usize,
        queue: String,
        key: String,
        holder: KeyHolder,
    },
    #[error("subscription {0} does not exist")]
    NoSubscription(crate::model::SubscriptionId),
    #[error("storage error: {0}")]
    Storage(String),
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    #[error("storage has failed and refuses writes; restart the server")]
    Failed,
}

/// Who holds a unique key that an enqueue asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHolder {
    /// A stored, unfinished job.
    Job(JobId),
    /// An earlier job of the same request (at this index), which was therefore not stored.
    Earlier(usize),
}

fn duplicate_message(queue: &str, key: &str, holder: &KeyHolder) -> String {
    match holder {
        KeyHolder::Job(id) => format!(
            "queue {queue:?} already has an unfinished job with unique key {key:?} (job {id})"
        ),
        KeyHolder::Earlier(index) => format!(
            "repeats unique key {key:?} of jobs[{index}] in queue {queue:?}; a queue holds one \
             unfinished job per key"
        ),
    }
}

/// A job to add, with its own policy already parsed (the canonical JSON is in `job.policy`).
#[derive(Debug, Clone)]
pub struct Insert {
    pub job: NewJob,
    pub policy: Option<Arc<RetryPolicy>>,
}

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

#[derive(Debug, Clone)]
pub struct TakeRequest<'a> {
    pub queues: &'a [String],
    pub max: usize,
    pub lease_ms: u64,
    /// The streaming connection or claim taking, if any: its jobs can be found, extended and
    /// released together.
    pub stream: Option<u64>,
    /// Taken jobs that would expire before this time live at least until it (a Zaqar claim
    /// keeps its messages alive for its TTL and grace). Memory only, like the lease.
    pub keep_until_ms: Option<UnixMs>,
}

/// A leased job, as handed to a worker.
#[derive(Debug, Clone)]
pub struct TakenJob {
    pub id: JobId,
    pub queue: String,
    pub kind: String,
    pub payload: Box<RawValue>,
    pub priority: i32,
    /// This run's number: previous failures + 1.
    pub attempt: u32,
    pub lease_token: u64,
    pub lease_expires_at_ms: UnixMs,
    pub created_at_ms: UnixMs,
}

/// A job held by a claim (or stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimedJob {
    pub id: JobId,
    pub claim: u64,
    pub lease_expires_at_ms: UnixMs,
    /// Earlier runs that failed or whose lease expired.
    pub failures: u32,
}

/// A worker's claim on a job: its id, and the lease token it was given when it took the job.
/// Only the current lease's holder may heartbeat, complete or fail a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub id: JobId,
    pub lease: u64,
}

/// What the engine's decision closure sees.
#[derive(Debug)]
pub struct DecideContext<'a> {
    pub id: JobId,
    pub queue: &'a str,
    pub state: &'a JobState,
    pub job_policy: Option<&'a RetryPolicy>,
    pub queue_policy: Option<&'a RetryPolicy>,
}

/// A job's next state after a failure or lost lease, and the error to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub state: JobState,
    pub error: Option<ErrorEntry>,
}

/// The engine's decision: from a job's context to its next state.
pub type Decide<'a> = dyn Fn(&DecideContext<'_>) -> Transition + Send + Sync + 'a;

/// Which jobs an operation applies to.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Exactly these jobs (if given, the filter narrows them further).
    pub ids: Option<Vec<JobId>>,
    pub filter: JobFilter,
}

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub queue: Option<String>,
    pub status: Option<Status>,
    pub kind: Option<String>,
    /// Only jobs that finished (completed or died) at or after this time.
    pub finished_since_ms: Option<UnixMs>,
}

impl JobFilter {
    /// Whether a job in `state` passes the `finished_since_ms` filter.
    pub fn finished_since(&self, state: &JobState) -> bool {
        self.finished_since_ms
            .is_none_or(|since| state.finished_at_ms.is_some_and(|at| at >= since))
    }
}

/// What a replay did: the jobs it made ready, and why it left others as they were.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    pub ids: Vec<JobId>,
    /// Jobs the selection named by id that were not replayed, and every selected dead job that
    /// could not be, in id order.
    pub skipped: Vec<(JobId, NotReplayed)>,
}

/// Why a job was not replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReplayed {
    /// There is no such job (never was, or purged).
    NotFound,
    /// It is not dead.
    NotDead(Status),
    /// It does not match the selection's queue or type.
    NotSelected,
    /// Its unique key is held by another unfinished job of its queue: replaying it would make
    /// two unfinished jobs share the key.
    KeyHeld { key: String, holder: JobId },
}

impl NotReplayed {
    /// The reason in words.
    pub fn describe(&self) -> String {
        match self {
            Self::NotFound => "there is no such job".into(),
            Self::NotDead(status) => format!("it is {}, not dead", status.name()),
            Self::NotSelected => "it does not match the queue or type of the selection".into(),
            Self::KeyHeld { key, holder } => {
                format!("its unique key {key:?} is held by unfinished job {holder} of its queue")
            }
        }
    }
}

/// Dead jobs back to ready.
#[derive(Debug, Clone, Default)]
pub struct Replay {
    pub selection: Selection,
    /// A new policy for the replayed jobs (canonical JSON, parsed).
    pub policy: Option<(serde_json::Value, Arc<RetryPolicy>)>,
    /// Forget earlier failures: the replayed job starts again from retry 1.
    pub reset_attempts: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct QueueCounts {
    pub queue: String,
    pub scheduled: u64,
    pub ready: u64,
    pub in_flight: u64,
    pub completed: u64,
    pub dead: u64,
}

/// A queue's settings. Queues exist implicitly when a job names them; a config is stored only
/// once set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// The queue's default policy, canonical native JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<serde_json::Value>,
    /// A paused queue keeps accepting jobs but hands none out.
    #[serde(default)]
    pub paused: bool,
    /// The queue's policy applies to every subscription's deliveries, whatever the
    /// subscription's own (SNS `disableSubscriptionOverrides`, Zaqar
    /// `ignore_subscription_override`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_overrides: bool,
    /// New jobs of the queue are deleted this long after their enqueue, whatever their status,
    /// unless they name their own expiry: what a queue that only feeds webhooks needs, so that
    /// messages no worker takes do not pile up (Zaqar's `_default_message_ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_ttl_ms: Option<u64>,
    /// Free-form metadata (Zaqar's queue metadata), kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Where jobs go whose leases expired too often (Zaqar's dead-letter queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
}

/// A dead-letter queue: a job whose lease has expired `max_claims` times moves there, ready,
/// with a fresh count (and the new expiry, if given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub queue: String,
    pub max_claims: u32,
    /// The moved job's time to live; without it the job keeps its expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}
