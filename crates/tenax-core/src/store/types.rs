//! The seam's own mechanics: its error, the records a backend keeps for inserts, leases and
//! claims, and the closures through which the engine decides. The domain types its operations
//! speak in live in [`crate::model`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tenax_policy::RetryPolicy;

use crate::clock::UnixMs;
use crate::model::{
    After, Attempt, ClaimId, EndpointState, ErrorEntry, Job, JobId, JobPeek, JobState, KeyHolder,
    NewJob, QueueConfig, Schedule, ServerAbout, Status, Subscription, SubscriptionId, TakenJob,
};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("job {0} does not exist")]
    NotFound(JobId),
    #[error("job {id} is {}, not in flight", status.name())]
    NotInFlight { id: JobId, status: Status },
    #[error("job {id}: this lease is no longer valid (it expired, or the job was taken again)")]
    LeaseLost { id: JobId },
    /// The job at `index` of an enqueue request names a unique key that is already held.
    #[error("{}", holder.refusal(queue, key))]
    Duplicate {
        index: usize,
        queue: String,
        key: String,
        holder: KeyHolder,
    },
    #[error("subscription {0} does not exist")]
    NoSubscription(SubscriptionId),
    /// The job at `index` of an enqueue request waits for a job that does not exist
    /// (`position` in its `after`).
    #[error("job {id} does not exist")]
    UnknownParent {
        index: usize,
        position: usize,
        id: JobId,
    },
    #[error("batch {0} does not exist")]
    NoBatch(crate::model::BatchId),
    /// Jobs may be added to an open batch only.
    #[error("batch {0} is closed: no more jobs may be added to it")]
    BatchClosed(crate::model::BatchId),
    /// A queue's settings or subscriptions changed after the enqueue read them from a cache
    /// (see [`FactsSeen`]); nothing was stored.
    #[error("a queue's settings or subscriptions changed during the enqueue")]
    FactsChanged,
    /// What one transaction would change is on several databases of a pooled deployment
    /// (queues placed on different pools); nothing was stored. The message says what.
    #[error("{0}")]
    AcrossPools(String),
    /// A change of the pools or flavors was refused; nothing changed.
    #[error(transparent)]
    Pool(crate::model::pool::PoolError),
    /// Another subscription of the queue has the endpoint, which must be unique there
    /// ([`Subscription::unique_endpoint`]).
    #[error("subscription {holder} of queue {queue:?} already has endpoint {endpoint:?}")]
    EndpointTaken {
        queue: String,
        endpoint: String,
        holder: SubscriptionId,
    },
    /// The backend failed (I/O, a lost connection). The source is kept for the log; clients see
    /// only that something went wrong on the server.
    #[error(transparent)]
    Storage(StorageFault),
    /// The backend cannot be reached just now (a shared database restarting or failing over).
    /// The operation happened entirely or not at all; it did not happen unless the connection
    /// broke while committing.
    #[error("storage is unavailable just now: {0}")]
    Unavailable(StorageFault),
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// The backend refuses this server for a reason that waiting cannot mend and the operator
    /// must (a database that does not exist, a role it does not accept); the message says what
    /// to do.
    #[error("{0}")]
    Refused(String),
    /// Stored secrets do not open with the keys this server holds (a wrong or missing key
    /// file), or a key is needed and none was given (`crate::secrets`, docs/security.md).
    #[error("{0}")]
    Secrets(String),
    #[error("storage has failed and refuses writes; restart the server")]
    Failed,
    /// The data was written by a newer Tenax, in a format this one does not know.
    #[error(
        "the data is in storage format {found}, newer than the {supported} this version of Tenax \
         reads; run the newer version, or restore a backup made by this one"
    )]
    NewerFormat { found: u64, supported: u64 },
}

impl StoreError {
    /// A backend failure while doing `what`, keeping `source` for the log.
    pub fn storage(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Storage(StorageFault {
            what: what.into(),
            source: Arc::new(source),
        })
    }

    /// The backend cannot be reached while doing `what`; `source` is kept for the log.
    pub fn unavailable(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Unavailable(StorageFault {
            what: what.into(),
            source: Arc::new(source),
        })
    }

    /// Whether the server, not the request, is at fault.
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            Self::Storage(_)
                | Self::Unavailable(_)
                | Self::Corrupt(_)
                | Self::Secrets(_)
                | Self::Failed
                | Self::NewerFormat { .. }
        )
    }
}

/// A backend failure: what was being done, and the error underneath with its causes (a
/// database driver's error often says only its kind, and its cause what happened).
#[derive(Debug, Clone, thiserror::Error)]
#[error("storage error while {what}: {}", crate::errors::chain(&**source))]
pub struct StorageFault {
    pub what: String,
    #[source]
    pub source: Arc<dyn std::error::Error + Send + Sync>,
}

/// Two faults are alike when they say the same (the sources themselves cannot be compared).
impl PartialEq for StorageFault {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

/// Which batch [`BatchStore::add_to_batch`](super::BatchStore::add_to_batch) adds to.
#[derive(Debug, Clone)]
pub enum BatchTarget {
    /// A new one, made with this.
    New(Box<crate::model::NewBatch>),
    /// An open one.
    Existing(crate::model::BatchId),
}

/// A job to add.
#[derive(Debug, Clone)]
pub struct Insert {
    pub job: NewJob,
    /// The index, in the same request, of the job this one is made for (a delivery's message).
    /// Stored only if that job is stored; its id becomes this job's `parent`.
    pub parent: Option<usize>,
    /// The subscription this job delivers for. Stored only if the subscription still exists.
    pub owner: Option<SubscriptionId>,
    /// The jobs it waits for: stored ones, or earlier inserts of the same request. The store
    /// writes their ids into [`NewJob::after`], in this order, and the job starts `waiting`
    /// unless every one of them has completed already ([`crate::model::dependency`]).
    pub after: Vec<After>,
}

impl Insert {
    /// A job of its own: no parent, no owner.
    pub fn new(job: NewJob) -> Self {
        Self {
            job,
            parent: None,
            owner: None,
            after: Vec::new(),
        }
    }
}

/// A request for leases.
#[derive(Debug, Clone)]
pub struct TakeRequest<'a> {
    pub queues: &'a [String],
    pub max: usize,
    pub lease_ms: u64,
    /// The claim (or streaming take) the leases are held under: its jobs can be found, renewed
    /// and released together.
    pub claim: Option<ClaimId>,
    /// The claim's terms, recorded with it if anything was taken (a Zaqar claim).
    pub record: Option<ClaimRecord>,
    /// Taken jobs that would expire before this time live at least until it (a Zaqar claim
    /// keeps its messages alive for its TTL and grace).
    pub keep_until_ms: Option<UnixMs>,
    /// Take for this subscription's deliveries: nothing while it is disabled or gone.
    pub subscription: Option<SubscriptionId>,
}

impl<'a> TakeRequest<'a> {
    /// Up to `max` jobs of `queues`, leased for `lease_ms`, under no claim.
    pub fn new(queues: &'a [String], max: usize, lease_ms: u64) -> Self {
        Self {
            queues,
            max,
            lease_ms,
            claim: None,
            record: None,
            keep_until_ms: None,
            subscription: None,
        }
    }
}

/// What a backend knows of a leased job at no extra cost, reported when its lease ends, for
/// the metrics (by queue and type; run and end-to-end times) and the spans (the job's trace).
///
/// A backend shared by several servers must report it
/// ([`StoreProperties::shared`](super::StoreProperties::shared)): the lease may have been
/// handed out by another server. A backend used by one process may leave it out; the engine
/// then knows it from the take, which happened in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFacts {
    pub queue: String,
    pub kind: String,
    pub created_at_ms: UnixMs,
    pub taken_at_ms: UnixMs,
    /// The trace context the job was enqueued with.
    pub traceparent: Option<String>,
}

/// A lease extended by a heartbeat ([`super::JobLeases::extend_lease`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extended {
    /// The lease's new end.
    pub expires_at_ms: UnixMs,
    /// The lease is marked cancelled: its worker should stop.
    pub cancel_requested: bool,
}

/// A job held by a claim (or stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimedJob {
    pub id: JobId,
    pub lease_expires_at_ms: UnixMs,
    /// Earlier runs that failed or whose lease expired.
    pub failures: u32,
}

/// What a claim was made with, as its API shows it again (a Zaqar claim's ttl, grace and age).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRecord {
    /// The queue the claim took its jobs from.
    pub queue: String,
    pub lease_ms: u64,
    pub grace_ms: u64,
    /// When the claim was made or last renewed.
    pub renewed_at_ms: UnixMs,
}

impl ClaimRecord {
    /// After this time the claim and its grace are over: the record is of no more use.
    pub fn over_at_ms(&self) -> UnixMs {
        self.renewed_at_ms
            .saturating_add(self.lease_ms)
            .saturating_add(self.grace_ms)
    }
}

/// A claim as stored: its record (if it has one) and the jobs it holds, in id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claim {
    pub record: Option<ClaimRecord>,
    pub jobs: Vec<ClaimedJob>,
}

/// What the engine's decision closure sees of a job, and of the settings around it.
#[derive(Debug)]
pub struct DecideContext<'a> {
    pub id: JobId,
    pub queue: &'a str,
    pub state: &'a JobState,
    /// When the job is deleted whatever its status, if ever.
    pub expires_at_ms: Option<UnixMs>,
    pub job_policy: Option<&'a RetryPolicy>,
    /// The settings of the job's queue, if it has any.
    pub queue_config: Option<&'a QueueConfig>,
    /// For a delivery: its subscription, and the settings of the subscription's queue.
    pub owner: Option<(&'a Subscription, Option<&'a QueueConfig>)>,
    /// What the backend knows of the lease that ends (see [`LeaseFacts`]).
    pub lease: Option<LeaseFacts>,
    /// The lease that ends was marked cancelled ([`JobCuration::cancel_jobs`]): whatever
    /// ends it but a completion finishes the job as cancelled.
    ///
    /// [`JobCuration::cancel_jobs`]: crate::store::JobCuration::cancel_jobs
    pub cancel_requested: bool,
}

/// A job's next state after a failure or lost lease, and the error to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub state: JobState,
    pub error: Option<ErrorEntry>,
    /// The job moves to another queue (a dead-letter queue), with this expiry.
    pub moved_to: Option<MoveTo>,
}

/// Where a job moves, and its expiry there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTo {
    pub queue: String,
    pub expires_at_ms: Option<UnixMs>,
}

/// The engine's decision: from a job's context to its next state.
pub type Decide<'a> = dyn Fn(&DecideContext<'_>) -> Transition + Send + Sync + 'a;

/// A change to a queue's settings: from the stored ones (`None`: none yet) to the new ones, or
/// `None` to leave them as they are. Called under the store's serialisation (perhaps more than
/// once, by a backend that retries), so it must only compute.
pub type ChangeQueue<'a> = dyn Fn(Option<&QueueConfig>) -> Option<QueueConfig> + Send + Sync + 'a;

/// A change to a schedule: from the stored one (`None`: none yet) to the new one, or `None` to
/// leave things as they are. Called under the store's serialisation, like [`ChangeQueue`].
pub type ChangeSchedule<'a> = dyn Fn(Option<&Schedule>) -> Option<Schedule> + Send + Sync + 'a;

/// A change to a subscription: from the stored one to the new one, or `None` to leave it.
/// Called under the store's serialisation, like [`ChangeQueue`].
pub type ChangeSubscription<'a> = dyn Fn(&Subscription) -> Option<Subscription> + Send + Sync + 'a;

/// Called under the store's serialisation with an endpoint's stored state (`None`: it has
/// none); returns the new one, or `None` to leave it as it is.
pub type ChangeEndpoint<'a> =
    dyn Fn(Option<&EndpointState>) -> Option<EndpointState> + Send + Sync + 'a;

/// Whether to delete a job, seeing it as it is under the store's serialisation.
pub type DeleteCheck<'a> = dyn Fn(&JobPeek) -> bool + Send + Sync + 'a;

/// What this server says of itself, asked by the backend whenever it writes or answers for this
/// server's row ([`super::ServerStore::describe_server`]).
pub type DescribeServer = Arc<dyn Fn() -> ServerAbout + Send + Sync>;

/// What a finished delivery attempt did to its delivery.
#[derive(Debug, Clone, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one is returned per delivery attempt and never stored: boxing would only add an allocation"
)]
pub enum Finished {
    Delivered,
    Failed(Transition),
}

/// What an enqueue needs of a queue, read at one moment: its settings and its subscribers (every
/// job gets a delivery per subscriber), with the version they were read at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueFacts {
    pub config: Option<QueueConfig>,
    /// The queue's subscriptions, in id order.
    pub subscribers: Vec<SubscriptionId>,
    pub seen: FactsSeen,
}

/// A version of every queue's settings and subscribers together, which each change of them
/// advances. A backend may answer [`QueueFacts`] from a cache; it then refuses an insert made on
/// facts older than the stored version ([`StoreError::FactsChanged`]), and the engine reads them
/// again. So an enqueue never misses a subscription made before it began, on any server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct FactsSeen(pub u64);

/// A bucket of starts of a rate-limited queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartBucket {
    pub start_ms: UnixMs,
    pub width_ms: u64,
    pub count: u64,
}

/// Why a take handed out less than it could have: its queues' limits. A waiting taker looks
/// again when room may have appeared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitHold {
    /// A concurrency limit is reached: room appears when one of the queue's jobs leaves
    /// flight ([`Signals::released`](super::Signals::released)).
    pub in_flight: bool,
    /// A rate limit is used up until this time, at the earliest.
    pub until_ms: Option<UnixMs>,
}

impl LimitHold {
    /// Both holds together.
    pub fn and(self, other: LimitHold) -> LimitHold {
        LimitHold {
            in_flight: self.in_flight || other.in_flight,
            until_ms: match (self.until_ms, other.until_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    pub fn is_held(&self) -> bool {
        self.in_flight || self.until_ms.is_some()
    }
}

/// What a take handed out, and what its queues' limits held back.
#[derive(Debug, Clone, Default)]
pub struct Taken {
    pub jobs: Vec<TakenJob>,
    /// Set when a limited queue had no room for more.
    pub held: LimitHold,
}

/// A job as [`StoreImport::import_jobs`](super::StoreImport::import_jobs) stores it: at rest.
#[derive(Debug, Clone)]
pub struct ImportedJob {
    pub job: Job,
    /// A delivery's attempts, oldest first (none for other jobs).
    pub attempts: Vec<Attempt>,
}

impl ImportedJob {
    /// `job` at rest, as a restart of the embedded store leaves it: an in-flight job is ready
    /// again (its lease is not carried over; at-least-once allows the repeat).
    pub fn at_rest(mut job: Job, attempts: Vec<Attempt>) -> Self {
        if job.state.status == Status::InFlight {
            job.state.status = Status::Ready;
        }
        job.held = None;
        Self { job, attempts }
    }
}
