//! The types that cross the storage seam.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tenax_policy::RetryPolicy;

use crate::clock::UnixMs;
use crate::model::{
    ClaimId, EndpointState, ErrorEntry, Job, JobId, JobState, LeaseToken, NewJob, Schedule, Status,
    StoredPolicy, Subscription, SubscriptionId, Trigger,
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
    #[error("{}", duplicate_message(queue, key, holder))]
    Duplicate {
        index: usize,
        queue: String,
        key: String,
        holder: KeyHolder,
    },
    #[error("subscription {0} does not exist")]
    NoSubscription(SubscriptionId),
    /// A queue's settings or subscriptions changed after the enqueue read them from a cache
    /// (see [`FactsSeen`]); nothing was stored.
    #[error("a queue's settings or subscriptions changed during the enqueue")]
    FactsChanged,
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
#[error("storage error while {what}: {}", crate::http::chain(&**source))]
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

/// A job to add.
#[derive(Debug, Clone)]
pub struct Insert {
    pub job: NewJob,
    /// The index, in the same request, of the job this one is made for (a delivery's message).
    /// Stored only if that job is stored; its id becomes this job's `parent`.
    pub parent: Option<usize>,
    /// The subscription this job delivers for. Stored only if the subscription still exists.
    pub owner: Option<SubscriptionId>,
}

impl Insert {
    /// A job of its own: no parent, no owner.
    pub fn new(job: NewJob) -> Self {
        Self {
            job,
            parent: None,
            owner: None,
        }
    }
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
    pub lease_token: LeaseToken,
    pub lease_expires_at_ms: UnixMs,
    pub created_at_ms: UnixMs,
    /// When the job is deleted whatever its status, if ever.
    pub expires_at_ms: Option<UnixMs>,
    /// The job it was made for (a delivery's message).
    pub parent: Option<JobId>,
    /// The trace context it was enqueued with.
    pub traceparent: Option<String>,
    /// What started this run: its schedule, a replay, or an operator's run-now.
    pub trigger: Trigger,
    /// When it became ready (was due): the wait before this take started then.
    pub ready_at_ms: UnixMs,
}

/// What a backend knows of a leased job at no extra cost, reported when its lease ends, for
/// the metrics (by queue and type; run and end-to-end times) and the spans (the job's trace).
///
/// A backend shared by several servers must report it ([`StoreProperties::shared`]): the lease
/// may have been handed out by another server. A backend used by one process may leave it out;
/// the engine then knows it from the take, which happened in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFacts {
    pub queue: String,
    pub kind: String,
    pub created_at_ms: UnixMs,
    pub taken_at_ms: UnixMs,
    /// The trace context the job was enqueued with.
    pub traceparent: Option<String>,
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

/// A worker's hold on a job: its id, and the lease token it was given when it took the job.
/// Only the current lease's holder may heartbeat, complete or fail a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub id: JobId,
    pub lease: LeaseToken,
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

/// A job looked at for a conditional delete: what it was, and whether it was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub id: JobId,
    /// `None`: there is no such job.
    pub peek: Option<JobPeek>,
    pub deleted: bool,
}

/// What a finished delivery attempt did to its delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    Delivered,
    Failed(Transition),
}

/// A quick look at a job: its queue and state, without its body.
///
/// Invariant: a peek is a snapshot under the store's serialisation; the job may change right
/// after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPeek {
    pub queue: Arc<str>,
    pub status: Status,
    /// Earlier runs that failed or whose lease expired.
    pub failures: u32,
    /// When the job is deleted whatever its status, if ever (a claim may have moved it later).
    pub expires_at_ms: Option<UnixMs>,
    /// While in flight: the claim (or stream) holding the lease, if any.
    pub claim: Option<ClaimId>,
    /// While in flight: when the lease ends.
    pub lease_expires_at_ms: Option<UnixMs>,
}

impl JobPeek {
    /// Whether the job is live at `now_ms`: unfinished, and its expiry has not come. Only live
    /// jobs are messages to Zaqar's API.
    pub fn is_live(&self, now_ms: UnixMs) -> bool {
        !self.status.is_finished() && self.expires_at_ms.is_none_or(|at| at > now_ms)
    }

    /// The claim holding the job at `now_ms`: its lease has not ended.
    pub fn claim_at(&self, now_ms: UnixMs) -> Option<ClaimId> {
        let leased = self.status == Status::InFlight
            && self.lease_expires_at_ms.is_some_and(|at| at > now_ms);
        self.claim.filter(|_| leased)
    }
}

/// Which jobs an operation applies to.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Exactly these jobs (if given, the filter narrows them further).
    pub ids: Option<Vec<JobId>>,
    pub filter: JobFilter,
}

/// Which jobs a listing, count or selection keeps. Every condition given must hold.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub queue: Option<String>,
    pub status: Option<Status>,
    pub kind: Option<String>,
    /// Only jobs that finished (completed or died) at or after this time.
    pub finished_since_ms: Option<UnixMs>,
    /// Only unfinished jobs whose expiry has not come at this time (Zaqar's live messages).
    pub live_at_ms: Option<UnixMs>,
    /// Leave out scheduled jobs (Zaqar's delayed messages).
    pub not_scheduled: bool,
    /// Only jobs a claim (or streaming take) holds (`true`), or that none holds (`false`), at
    /// the given time: Zaqar's claimed and free messages.
    pub claimed_at: Option<(bool, UnixMs)>,
    /// Leave out jobs enqueued by this origin (a Zaqar client's own messages).
    pub not_origin: Option<String>,
}

impl JobFilter {
    /// Jobs of `queue`.
    pub fn queue(queue: impl Into<String>) -> Self {
        Self {
            queue: Some(queue.into()),
            ..Self::default()
        }
    }
}

/// Which way a listing runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest (lowest id) first.
    #[default]
    Ascending,
    /// Newest first.
    Descending,
}

/// One page of a listing: up to `limit` jobs past `after` (in the page's order).
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub after: Option<JobId>,
    pub limit: usize,
    pub order: Order,
}

impl Page {
    /// The first `limit` jobs after `after`, oldest first.
    pub fn after(after: Option<JobId>, limit: usize) -> Self {
        Self {
            after,
            limit,
            order: Order::Ascending,
        }
    }
}

/// What a bounded search found: the jobs that matched, and how far it looked.
#[derive(Debug, Clone, Default)]
pub struct Searched {
    pub jobs: Vec<Job>,
    /// The last job looked at, whether it matched or not: the next search continues after it.
    /// `None` when nothing was looked at.
    pub looked_to: Option<JobId>,
    /// How many jobs were looked at.
    pub looked_at: usize,
    /// No job matching the filter lies past `looked_to`: the search is complete.
    pub exhausted: bool,
}

/// Text to find in jobs: case-insensitive, in a job's payload (its JSON text as stored) or in
/// one of its errors (the message, or the detail's JSON text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextQuery {
    /// The text, lower-cased.
    pub lower: String,
    /// The text as JSON writes it inside a string, lower-cased: how it appears in the JSON text
    /// of an error's detail.
    pub escaped: String,
}

impl TextQuery {
    pub fn new(text: &str) -> Self {
        let lower = text.to_lowercase();
        let quoted = serde_json::to_string(&lower).unwrap_or_default();
        let escaped = quoted
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .unwrap_or(&lower)
            .to_owned();
        Self { lower, escaped }
    }

    /// Whether `job` holds the text.
    pub fn matches(&self, payload: &str, errors: &[ErrorEntry]) -> bool {
        payload.to_lowercase().contains(&self.lower)
            || errors.iter().any(|error| {
                error.message.to_lowercase().contains(&self.lower)
                    || error.detail.as_ref().is_some_and(|detail| {
                        detail.to_string().to_lowercase().contains(&self.escaped)
                    })
            })
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
    /// A new policy for the replayed jobs.
    pub policy: Option<StoredPolicy>,
    /// Forget earlier failures: the replayed job starts again from retry 1.
    pub reset_attempts: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct QueueCounts {
    pub queue: String,
    pub scheduled: u64,
    pub ready: u64,
    pub in_flight: u64,
    pub completed: u64,
    pub dead: u64,
}

impl QueueCounts {
    /// Counts of `queue` in the order of [`Status::ALL`].
    pub fn from_slots(queue: impl Into<String>, slots: [u64; 5]) -> Self {
        Self {
            queue: queue.into(),
            scheduled: slots[0],
            ready: slots[1],
            in_flight: slots[2],
            completed: slots[3],
            dead: slots[4],
        }
    }
}

/// A queue's backlog at one moment, for the metrics: its jobs by status (completed jobs are
/// left out: counting them would read every job kept for retention). When its first job in line
/// became ready is [`crate::store::JobReads::ready_since`]'s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    pub queue: String,
    pub scheduled: u64,
    pub ready: u64,
    pub in_flight: u64,
    pub dead: u64,
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

/// A queue's settings. Queues exist implicitly when a job names them; a config is stored only
/// once set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// The queue's default policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<StoredPolicy>,
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
    /// At most this many of the queue's jobs in flight at once, across every worker and
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// At most this many of the queue's jobs started in any period (see [`RateLimit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateLimit>,
}

impl QueueConfig {
    /// Whether takes must count before handing out the queue's jobs.
    pub fn is_limited(&self) -> bool {
        self.concurrency.is_some() || self.rate.is_some()
    }
}

/// At most `limit` jobs of a queue start (are taken or popped) in any `period_ms`.
///
/// How it is counted, by every backend alike: starts are kept in buckets a sixtieth of the
/// period wide (at least 1 ms); a take counts every bucket that overlaps the last period, so
/// never more than `limit` start in any period, and a start may wait up to a bucket longer than
/// a count of each start's exact time would make it ([`RateLimit::bucket_ms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    pub limit: u32,
    pub period_ms: u64,
}

impl RateLimit {
    /// The width of the buckets starts are counted in.
    pub fn bucket_ms(&self) -> u64 {
        (self.period_ms / 60).max(1)
    }

    /// The bucket a start at `at_ms` is counted in: its start.
    pub fn bucket_of(&self, at_ms: UnixMs) -> UnixMs {
        let width = self.bucket_ms();
        at_ms / width * width
    }

    /// Whether a bucket `[start, start + width)` still counts at `now_ms`: it overlaps the last
    /// period, `(now - period, now]`.
    pub fn counts(&self, start_ms: UnixMs, width_ms: u64, now_ms: UnixMs) -> bool {
        start_ms.saturating_add(width_ms) > now_ms.saturating_sub(self.period_ms)
    }

    /// Buckets that end at or before this are forgotten at `now_ms`: two periods back, not
    /// one. Takes of a queue are serialised, but each reads its clock before it waits for its
    /// turn, so a take may count from a period older than the last take's: the last take must
    /// leave every bucket of that period in place. Exact while no take waits longer than a
    /// period for its turn (and, on PostgreSQL, the servers' clocks agree within one); past
    /// that, a take may count fewer starts than were made in its period, never stall.
    pub fn forget_before(&self, now_ms: UnixMs) -> UnixMs {
        now_ms.saturating_sub(self.period_ms.saturating_mul(2))
    }

    /// Whether a bucket `[start, start + width)` is still kept at `now_ms`
    /// ([`RateLimit::forget_before`]).
    pub fn kept(&self, start_ms: UnixMs, width_ms: u64, now_ms: UnixMs) -> bool {
        start_ms.saturating_add(width_ms) > self.forget_before(now_ms)
    }

    /// When a bucket stops counting: room it holds is free again then.
    pub fn frees_at(&self, start_ms: UnixMs, width_ms: u64) -> UnixMs {
        start_ms
            .saturating_add(width_ms)
            .saturating_add(self.period_ms)
    }
}

/// A bucket of starts of a rate-limited queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartBucket {
    pub start_ms: UnixMs,
    pub width_ms: u64,
    pub count: u64,
}

/// How much of a queue's limits is used: what its stats show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitUse {
    /// Jobs started in the current period, as the rate limit counts them (0 without one).
    pub started: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn peek(status: Status, expires: Option<u64>, lease: Option<u64>) -> JobPeek {
        JobPeek {
            queue: Arc::from("p:q"),
            status,
            failures: 0,
            expires_at_ms: expires,
            claim: lease.map(|_| ClaimId(7)),
            lease_expires_at_ms: lease,
        }
    }

    #[test]
    fn liveness_and_claims_follow_time() {
        assert!(peek(Status::Ready, Some(2_000), None).is_live(1_000));
        assert!(!peek(Status::Ready, Some(1_000), None).is_live(1_000));
        assert!(!peek(Status::Dead, None, None).is_live(1_000));
        assert!(!peek(Status::Completed, None, None).is_live(1_000));
        let claimed = peek(Status::InFlight, None, Some(5_000));
        assert_eq!(claimed.claim_at(4_999), Some(ClaimId(7)));
        assert_eq!(claimed.claim_at(5_000), None);
    }
}
