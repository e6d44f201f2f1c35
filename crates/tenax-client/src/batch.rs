//! Batches (`docs/workflows.md#batches`): jobs counted together, with callback jobs enqueued
//! once every one has finished (`on_complete`) or only when every one completed
//! (`on_success`). What a request carries ([`NewBatch`], [`Callback`]) and what the server
//! answers ([`Batch`], [`BatchJobs`]).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Enqueued;
use crate::request::NewJob;
use crate::schedule::ScheduledJob;
use crate::time::{rfc3339, rfc3339_opt};

/// A callback job: an enqueue's fields but those that say when or dedupe. Its payload, as the
/// worker gets it, is `{"batch": {"id", "total", "completed", "dead", "deleted", "succeeded",
/// ...}, "payload": <this payload>}`.
///
/// ```
/// use tenax_client::Callback;
///
/// let report = Callback::new("reports", "import.report")
///     .payload(&serde_json::json!({"to": "ops"}))
///     .priority(5)
///     .retry_limit(3);
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct Callback {
    queue: String,
    #[serde(rename = "type")]
    kind: String,
    payload: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_limit: Option<u32>,
}

impl Callback {
    /// A job of `kind` on `queue`, with a `null` payload until [`Callback::payload`] gives one.
    pub fn new(queue: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            kind: kind.into(),
            payload: Value::Null,
            priority: None,
            policy: None,
            retry_limit: None,
        }
    }

    /// The callback's own payload (`null` when it cannot be written as JSON).
    pub fn payload(mut self, payload: &impl Serialize) -> Self {
        self.payload = serde_json::to_value(payload).unwrap_or(Value::Null);
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Its retry policy, in any spelling the server reads.
    pub fn policy(mut self, policy: Value) -> Self {
        self.policy = Some(policy);
        self
    }

    pub fn retry_limit(mut self, limit: u32) -> Self {
        self.retry_limit = Some(limit);
        self
    }
}

/// A batch to make ([`Client::create_batch`](crate::Client::create_batch)): its callbacks (at
/// least one) and its first jobs. Closed as it is made, unless [`NewBatch::open`].
///
/// ```
/// use tenax_client::{Callback, NewBatch, NewJob};
///
/// let batch = NewBatch::new()
///     .description("import 2026-11-27")
///     .on_complete(Callback::new("reports", "import.report"))
///     .on_success(Callback::new("reports", "import.publish"))
///     .jobs((1..=3).map(|n| NewJob::new("import", "row").payload(n)));
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct NewBatch<P = ()> {
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_complete: Option<Callback>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_success: Option<Callback>,
    jobs: Vec<NewJob<P>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    open: bool,
}

impl<P> Default for NewBatch<P> {
    fn default() -> Self {
        Self {
            description: None,
            on_complete: None,
            on_success: None,
            jobs: Vec::new(),
            open: false,
        }
    }
}

impl<P: Serialize> NewBatch<P> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Enqueued once every job has finished, whatever the outcome.
    pub fn on_complete(mut self, callback: Callback) -> Self {
        self.on_complete = Some(callback);
        self
    }

    /// Enqueued once every job has finished, only if every one completed.
    pub fn on_success(mut self, callback: Callback) -> Self {
        self.on_success = Some(callback);
        self
    }

    pub fn job(mut self, job: NewJob<P>) -> Self {
        self.jobs.push(job);
        self
    }

    pub fn jobs(mut self, jobs: impl IntoIterator<Item = NewJob<P>>) -> Self {
        self.jobs.extend(jobs);
        self
    }

    /// Keep it open for more jobs ([`Client::add_to_batch`](crate::Client::add_to_batch))
    /// until it is closed: an open batch never fires.
    pub fn open(mut self) -> Self {
        self.open = true;
        self
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct AddJobs<'a, P> {
    pub jobs: &'a [NewJob<P>],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub close: bool,
}

/// Where a batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchState {
    /// Jobs may be added.
    Open,
    /// No more jobs; the callbacks go once the pending ones finish.
    Closed,
    /// Every job finished, and the callbacks were enqueued.
    Finished,
    /// A state this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

api_names!(BatchState {
    Open => "open",
    Closed => "closed",
    Finished => "finished",
    Unknown => "unknown",
});

/// A batch's jobs by how far they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchCounts {
    pub total: u64,
    pub pending: u64,
    pub completed: u64,
    pub dead: u64,
    /// Deleted (or expired) before they finished.
    pub deleted: u64,
    /// Cancelled before they finished.
    #[serde(default)]
    pub cancelled: u64,
}

/// A batch as the server shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Batch {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub state: BatchState,
    pub counts: BatchCounts,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<ScheduledJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<ScheduledJob>,
    /// The callbacks' jobs, once enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete_job: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success_job: Option<u64>,
    /// The queues of its jobs and callbacks.
    #[serde(default)]
    pub queues: Vec<String>,
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    #[serde(default, with = "rfc3339_opt")]
    pub finished_at: Option<SystemTime>,
}

/// A batch and the jobs a request added to it, in request order.
#[derive(Debug, Clone, Deserialize)]
#[non_exhaustive]
pub struct BatchJobs {
    pub batch: Batch,
    pub jobs: Vec<Enqueued>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct BatchList {
    pub batches: Vec<Batch>,
}
