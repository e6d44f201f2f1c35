//! The storage seam: what a backend must do, as a few families of operations shaped like the
//! job state machine's transitions. [`Store`] is all of them; the engine holds one as
//! `Arc<dyn Store>` and is the only caller.
//!
//! Rules for every backend:
//! - Every operation can fail: a shared database can always lose its connection.
//! - An operation is atomic: it happens entirely or not at all, and concurrent operations on
//!   one job (or one queue's settings, or one subscription) are serialised. Operations that need
//!   a decision (a failure's next state, a settings change) take a closure from the engine and
//!   call it under that serialisation (a lock in the embedded store, a row lock in a database);
//!   the closures only compute, and a backend may call one more than once.
//! - The backend stores and indexes; it decides nothing about retries, fan-out or dead-letter
//!   moves. Where it enforces something, it is integrity: unique keys, a child stored only with
//!   its parent, a delivery only while its subscription exists, an endpoint unique per queue
//!   where the subscription asks for it.
//! - Wake-ups come from the backend ([`Signals`]), so that a backend shared by several servers
//!   can wake all of them (PostgreSQL's LISTEN/NOTIFY); the embedded store wakes its own
//!   process.
//! - What a backend promises beyond this is in its [`StoreProperties`], which the conformance
//!   suite (`crates/tenax/tests/it/conformance/`, one file per family of this seam) reads.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use super::types::*;
use crate::auth::TokenRecord;
use crate::clock::UnixMs;
use crate::model::activity::Minute;
use crate::model::pool::{Flavor, Moved, Pool, PoolError, PoolSpec};
use crate::model::{
    Ack, Attempt, Backlog, Batch, BatchId, Cancelled, Checked, ClaimId, EndpointState, Enqueued,
    Job, JobFilter, JobId, JobPeek, JobResult, LimitUse, LiveServer, OnDuplicate, Page,
    QueueConfig, QueueCounts, Replay, Replayed, Schedule, Searched, Selection, Subscription,
    SubscriptionId, TextQuery,
};

/// Adding jobs.
#[async_trait]
pub trait JobInserts {
    /// What an enqueue needs of `queue`: its settings and subscribers, read at one moment.
    /// Asked on every enqueue, so cheap; a backend may answer from a cache (see [`FactsSeen`]).
    async fn queue_facts(&self, queue: &str) -> Result<Arc<QueueFacts>, StoreError>;

    /// Adds jobs atomically: all are stored, or none (a duplicate unique key refuses the whole
    /// request unless `on_duplicate` says to answer with the holder). One result per insert, in
    /// order; `None` for a child whose parent was not created, or a delivery whose subscription
    /// no longer exists: those are not stored. A new job is visible (takeable) only once it is
    /// durable. `seen` is the oldest version of the [`QueueFacts`] the jobs were made from:
    /// when a backend that caches them has a newer one, it stores nothing and answers
    /// [`StoreError::FactsChanged`].
    async fn insert_jobs(
        &self,
        jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Vec<Option<Enqueued>>, StoreError>;
}

/// Leases: the worker's side of a job.
#[async_trait]
pub trait JobLeases {
    /// Leases up to `request.max` ready jobs of the unpaused queues, highest priority first,
    /// then oldest, within each queue's limits ([`QueueConfig::concurrency`], counting the
    /// queue's jobs in flight across every server; [`QueueConfig::rate`], counting its starts
    /// as [`RateLimit`](crate::model::RateLimit) says, and recording these). Says what the limits held back.
    async fn take_jobs(
        &self,
        request: &TakeRequest<'_>,
        now_ms: UnixMs,
    ) -> Result<Taken, StoreError>;

    /// Extends a lease to `now + lease_ms`, but never past `max_attempt_ms` after the take.
    /// Returns the new end of the lease, and whether the lease is marked cancelled
    /// ([`JobCuration::cancel_jobs`]): how a worker learns that it should stop.
    async fn extend_lease(
        &self,
        ack: Ack,
        lease_ms: u64,
        max_attempt_ms: u64,
        now_ms: UnixMs,
    ) -> Result<Extended, StoreError>;

    /// Completes in-flight jobs whose leases are valid: one durable commit, one result per job,
    /// with what the backend knows of each lease ([`LeaseFacts`]). A completed job is kept (for
    /// its retention) when `retain`, else deleted; a kept job keeps its worker's result
    /// (`JobState::result`), given in `results`: either empty (no job has one, the common case,
    /// which costs nothing per job) or one per ack, in order. The results are stored as they
    /// are: the engine has sealed those of encrypted jobs.
    async fn complete_jobs(
        &self,
        acks: &[Ack],
        results: &[Option<JobResult>],
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Vec<Result<Option<LeaseFacts>, StoreError>>, StoreError>;

    /// Records a failure of an in-flight job; `decide` gives its next state.
    async fn fail_job(
        &self,
        ack: Ack,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Transition, StoreError>;

    /// Ends an attempt of an in-flight delivery and logs `attempt` in the same commit: a
    /// delivered one completes, a failed one goes by `decide`.
    async fn finish_delivery(
        &self,
        ack: Ack,
        attempt: &Attempt,
        retain: bool,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Finished, StoreError>;

    /// Takes up to `max` ready jobs of the unpaused `queues` and deletes them, atomically:
    /// nobody else can take them in between. Returns them as they were. They count as started
    /// for a queue's rate limit; never in flight, they leave its concurrency alone.
    async fn pop_jobs(
        &self,
        queues: &[String],
        max: usize,
        now_ms: UnixMs,
    ) -> Result<Vec<Job>, StoreError>;
}

/// Claims: leases taken together under one id ([`TakeRequest::claim`]).
#[async_trait]
pub trait ClaimStore {
    /// The claim's record and the jobs it holds in flight, in id order.
    async fn claim(&self, id: ClaimId) -> Result<Claim, StoreError>;

    /// Renews every lease of a claim to `now + lease_ms`, keeps its jobs alive until at least
    /// `keep_until_ms`, and replaces its record. Returns how many jobs it holds.
    async fn extend_claim(
        &self,
        id: ClaimId,
        lease_ms: u64,
        keep_until_ms: Option<UnixMs>,
        record: Option<ClaimRecord>,
        now_ms: UnixMs,
    ) -> Result<usize, StoreError>;

    /// Ends a claim as if its leases had expired now: `decide` gives each job's next state.
    /// Its record goes. Returns how many jobs it held.
    async fn end_claim(
        &self,
        id: ClaimId,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError>;

    /// Returns a claim's (a closed stream's) jobs to ready without counting an attempt: the
    /// worker never reported on them. Its record goes. Returns how many.
    async fn release_claim(&self, id: ClaimId) -> Result<usize, StoreError>;
}

/// Background transitions, run by the maintenance loop of the server that leads.
#[async_trait]
pub trait JobUpkeep {
    /// Scheduled jobs that are due become ready; returns how many.
    async fn promote_due(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError>;

    /// Jobs whose leases have ended go by `decide`; returns how many. Also forgets the records
    /// of claims that are over (their lease and grace have passed).
    async fn expire_leases(
        &self,
        now_ms: UnixMs,
        max: usize,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError>;

    /// The ended leases of `queue` alone go by `decide`, as [`JobUpkeep::expire_leases`] does,
    /// for an operation that must see the queue as its time shows it (a Zaqar claim or pop:
    /// a message whose claim expired is free at once). Leases of the queue that another server
    /// or task is ending right now are waited for, not skipped: once this returns, no job of
    /// the queue is held on a lease that ended by `now_ms`. Returns how many this call ended.
    async fn expire_leases_of(
        &self,
        queue: &str,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError>;

    /// Deletes jobs past their expiry, whatever their status; returns how many.
    async fn expire_jobs(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError>;

    /// Deletes completed jobs finished before `completed_before` and dead or cancelled ones
    /// before `dead_before`, at most `max`; returns how many.
    async fn purge_finished(
        &self,
        completed_before: UnixMs,
        dead_before: UnixMs,
        max: usize,
    ) -> Result<usize, StoreError>;

    /// The earliest time upkeep has work: a scheduled job due, a lease or a job expiring, a
    /// schedule's next tick.
    async fn next_wakeup(&self) -> Result<Option<UnixMs>, StoreError>;
}

/// Operators' changes to many jobs at once.
#[async_trait]
pub trait JobCuration {
    /// Dead jobs back to ready, unless their unique key is held by an unfinished job.
    async fn replay_jobs(&self, replay: &Replay, now_ms: UnixMs) -> Result<Replayed, StoreError>;

    /// Scheduled jobs among `ids` become ready now, their next run marked as an operator's
    /// ([`Trigger::Manual`](crate::model::Trigger)). Returns those that did, in id order; jobs
    /// in other states, or gone, are left as they are.
    async fn run_now(&self, ids: &[JobId], now_ms: UnixMs) -> Result<Vec<JobId>, StoreError>;

    /// Cancels the jobs matching `selection`, each looked at and changed atomically: a
    /// scheduled or ready job becomes cancelled at once (its state
    /// [`JobState::cancelled`](crate::model::JobState::cancelled) at `now_ms` for `reason`,
    /// its unique key free again); the lease of a job in flight is marked cancelled, and every
    /// later decision on that lease sees [`DecideContext::cancel_requested`] (a marked lease
    /// that fails or expires ends cancelled; a completion still completes). A backend keeps the
    /// mark where every server that acts on the lease sees it. Finished jobs are left alone.
    ///
    /// Every transition into `cancelled` goes through one function of each backend, in the
    /// commit that makes it (named in its documentation): the place where later work that
    /// must follow a cancellation (dependent jobs, batch counters) hooks in.
    async fn cancel_jobs(
        &self,
        selection: &Selection,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<Cancelled, StoreError>;

    /// Deletes jobs matching `selection`, whatever their state; returns their ids.
    /// Deletes the selected jobs; `now_ms` is when jobs that waited for them are cancelled.
    async fn delete_jobs(
        &self,
        selection: &Selection,
        now_ms: UnixMs,
    ) -> Result<Vec<JobId>, StoreError>;

    /// Deletes those of `ids` that `check` accepts, each looked at and deleted atomically (no
    /// one can take or change it in between). One result per id, in order.
    async fn delete_checked(
        &self,
        ids: &[JobId],
        check: &DeleteCheck<'_>,
        now_ms: UnixMs,
    ) -> Result<Vec<Checked>, StoreError>;
}

/// Reading jobs.
#[async_trait]
pub trait JobReads {
    async fn get_job(&self, id: JobId) -> Result<Option<Job>, StoreError>;

    /// A page of the jobs matching `filter`, in id order (or reversed).
    async fn list_jobs(&self, filter: &JobFilter, page: Page) -> Result<Vec<Job>, StoreError>;

    /// How many jobs match `filter`.
    async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, StoreError>;

    /// How many jobs match `filter`, counting no further than `max`: the count and whether
    /// more match. A backend whose counts cost a scan of the matching jobs stops at `max`.
    async fn count_jobs_upto(
        &self,
        filter: &JobFilter,
        max: u64,
    ) -> Result<(u64, bool), StoreError> {
        let count = self.count_jobs(filter).await?;
        Ok((count.min(max), count > max))
    }

    /// For each id, a quick look at the job, or `None` if there is no such job.
    async fn peek_jobs(&self, ids: &[JobId]) -> Result<Vec<Option<JobPeek>>, StoreError>;

    /// Counts by status of every queue that has jobs, by name.
    async fn counts(&self) -> Result<Vec<QueueCounts>, StoreError>;

    /// Counts by status of one queue (zeros if it has no jobs).
    async fn queue_counts(&self, queue: &str) -> Result<QueueCounts, StoreError>;

    /// A delivery's attempts, oldest first.
    async fn attempts(&self, id: JobId) -> Result<Vec<Attempt>, StoreError>;

    /// Every queue's backlog ([`Backlog`]), in no order; queues without unfinished or dead jobs
    /// may be left out. Asked by every scrape of the metrics: it must not read every job of a
    /// large store, or say how costly it is in the backend's documentation (the metrics then
    /// count again only once the last count is 20 times as old as it took).
    async fn backlog(&self) -> Result<Vec<Backlog>, StoreError>;

    /// Finds jobs matching `filter` that hold `text`, with bounded work: looks at no more than
    /// `budget` jobs matching `filter`, in the page's order past `page.after`, and stops once
    /// `page.limit` are found. Says how far it looked, so that the next search goes on from
    /// there.
    async fn search_jobs(
        &self,
        filter: &JobFilter,
        text: &TextQuery,
        page: Page,
        budget: usize,
    ) -> Result<Searched, StoreError>;

    /// For each queue, when the job a take would hand out next became ready; `None` when none
    /// is ready. In the order of `queues`. Read by the metrics (each queue's oldest ready job's
    /// age) and the dashboard: one step per queue, whatever the backlog.
    async fn ready_since(&self, queues: &[String]) -> Result<Vec<Option<UnixMs>>, StoreError>;

    /// The jobs that wait (or waited) for any of `parents`, as `(parent, child)` pairs in
    /// that order: the edges of a workflow seen from its parents (a child names its own
    /// parents, [`NewJob::after`](crate::model::NewJob::after)). An edge is kept while the
    /// parent is stored; a child that is gone is left out.
    async fn children(&self, parents: &[JobId]) -> Result<Vec<(JobId, JobId)>, StoreError>;
}

/// Batches: jobs counted together, with callbacks enqueued once every one has finished
/// (`crate::model::batch`). Every backend counts a member in the commit that finishes it,
/// whatever finishes it, and enqueues the callbacks in the commit that finishes the batch.
#[async_trait]
pub trait BatchStore {
    /// Adds jobs to a batch, atomically with the batch's change: to a new batch (`to`:
    /// [`BatchTarget::New`], its id assigned) or to an open one (else
    /// [`StoreError::NoBatch`], [`StoreError::BatchClosed`]). The inserts without a parent
    /// are the members (their deliveries are not); each is stored as a member of the batch.
    /// A duplicate unique key refuses the whole request. With `close`, the batch closes in the
    /// same commit: when no member is pending then, it finishes at once. Returns the batch as
    /// stored after, and one result per insert as [`JobInserts::insert_jobs`] does.
    async fn add_to_batch(
        &self,
        to: BatchTarget,
        jobs: Vec<Insert>,
        close: bool,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<(Batch, Vec<Option<Enqueued>>), StoreError>;

    /// Closes a batch (a closed or finished one is left as it is): when no member is pending,
    /// it finishes in the same commit. Returns it as stored after.
    async fn close_batch(&self, id: BatchId, now_ms: UnixMs) -> Result<Batch, StoreError>;

    async fn batch(&self, id: BatchId) -> Result<Option<Batch>, StoreError>;

    /// A page of batches in id order: up to `limit` past `after`.
    async fn batches(&self, after: Option<BatchId>, limit: usize)
    -> Result<Vec<Batch>, StoreError>;

    /// Deletes a batch's record (its jobs stay, and are members of nothing from then on: they
    /// still show its id); false if there was none.
    async fn delete_batch(&self, id: BatchId) -> Result<bool, StoreError>;

    /// Stores a batch as it is, with its id (`tenax copy`); ids assigned later are past it.
    /// Its members come with their jobs ([`StoreImport::import_jobs`], whose bodies name the
    /// batch). [`StoreError::Refused`] if the id is taken.
    async fn import_batch(&self, batch: Batch) -> Result<(), StoreError>;
}

/// Queue settings.
#[async_trait]
pub trait QueueStore {
    async fn queue(&self, name: &str) -> Result<Option<QueueConfig>, StoreError>;

    /// Every queue with settings or jobs, by name.
    async fn queues(&self) -> Result<Vec<(String, QueueConfig)>, StoreError>;

    /// Changes a queue's settings atomically by `change`; returns them as stored after.
    async fn update_queue(
        &self,
        name: &str,
        change: &ChangeQueue<'_>,
    ) -> Result<Option<QueueConfig>, StoreError>;

    /// Deletes a queue's settings and every job in it (its subscriptions stay); returns how
    /// many jobs went.
    async fn delete_queue(&self, name: &str, now_ms: UnixMs) -> Result<usize, StoreError>;

    /// How much of a queue's limits is used at `now_ms`, as takes count it.
    async fn limit_use(&self, name: &str, now_ms: UnixMs) -> Result<LimitUse, StoreError>;
}

/// Schedules: named timetables whose ticks enqueue jobs (`crate::model::schedule`).
#[async_trait]
pub trait ScheduleStore {
    async fn schedule(&self, name: &str) -> Result<Option<Schedule>, StoreError>;

    /// Every schedule, by name.
    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError>;

    /// Changes (or makes) a schedule atomically by `change`; returns it as stored after.
    async fn update_schedule(
        &self,
        name: &str,
        change: &ChangeSchedule<'_>,
    ) -> Result<Option<Schedule>, StoreError>;

    /// Deletes a schedule (the jobs it made stay); false if there was none.
    async fn delete_schedule(&self, name: &str) -> Result<bool, StoreError>;

    /// Unpaused schedules whose next tick is at or before `now_ms`, earliest first, at most
    /// `max`.
    async fn due_schedules(&self, now_ms: UnixMs, max: usize) -> Result<Vec<Schedule>, StoreError>;

    /// Records the handling of ticks: stores `schedule` (its state after them) and adds `jobs`
    /// (a tick's job and its deliveries), in one commit, if the stored schedule's revision is
    /// still `expected_revision`; else stores nothing and answers `None` (another server, or a
    /// change, got there first). The stored schedule's `last_job` is the first created job,
    /// when one is. The inserts are as [`JobInserts::insert_jobs`]'s, refused alike when
    /// `seen` is old.
    async fn record_tick(
        &self,
        schedule: &Schedule,
        expected_revision: u64,
        jobs: Vec<Insert>,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Option<Vec<Option<Enqueued>>>, StoreError>;
}

/// Webhook subscriptions.
#[async_trait]
pub trait SubscriptionStore {
    /// Stores a new subscription (its id is assigned) and returns it with `true`; or, when
    /// another subscription of the queue holds its [`Subscription::unique_endpoint`], stores
    /// nothing and returns that one with `false`.
    async fn insert_subscription(
        &self,
        subscription: Subscription,
    ) -> Result<(Subscription, bool), StoreError>;

    /// Changes a subscription atomically by `change`; returns it as stored after.
    /// [`StoreError::NoSubscription`] if there is none; [`StoreError::EndpointTaken`] if the
    /// change would give it an endpoint another one of its queue holds.
    async fn update_subscription(
        &self,
        id: SubscriptionId,
        change: &ChangeSubscription<'_>,
    ) -> Result<Subscription, StoreError>;

    /// Deletes a subscription and its deliveries (with their attempts); returns how many
    /// deliveries went.
    async fn delete_subscription(&self, id: SubscriptionId) -> Result<usize, StoreError>;

    async fn subscription(&self, id: SubscriptionId) -> Result<Option<Subscription>, StoreError>;

    /// Subscriptions of `queue` (all when `None`), in id order.
    async fn subscriptions(&self, queue: Option<&str>) -> Result<Vec<Subscription>, StoreError>;
}

/// Webhook endpoints' delivery state (a pause, a circuit breaker), shared by every
/// subscription pointing at the endpoint and by every server.
#[async_trait]
pub trait EndpointStore {
    /// Every endpoint that has a state, by origin.
    async fn endpoints(&self) -> Result<Vec<EndpointState>, StoreError>;

    async fn endpoint(&self, origin: &str) -> Result<Option<EndpointState>, StoreError>;

    /// Changes an endpoint's state atomically by `change` (made if it had none); returns it as
    /// stored after. A change wakes every server's delivery runners
    /// ([`Signals::endpoints`]).
    async fn update_endpoint(
        &self,
        origin: &str,
        change: &ChangeEndpoint<'_>,
    ) -> Result<Option<EndpointState>, StoreError>;
}

/// API tokens (stored hashed).
#[async_trait]
pub trait TokenStore {
    /// Stores a new token (id 0; its id is assigned), or replaces the stored token of the
    /// record's id. A token deleted meanwhile is not stored again: a late write (its last use,
    /// from any server) must not bring back a revoked token. Returns the record.
    async fn put_token(&self, record: TokenRecord) -> Result<TokenRecord, StoreError>;

    /// Deletes a token; false if there was none.
    async fn delete_token(&self, id: u64) -> Result<bool, StoreError>;

    /// Every token, by id.
    async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;
}

/// The cluster's activity per minute ([`crate::model::activity`]): every server adds what it
/// counted, so that a minute holds the sums of all of them.
#[async_trait]
pub trait ActivityStore {
    /// Adds each minute's counts to what the backend holds for that minute (none yet: zeros),
    /// in one commit. The minutes are distinct, oldest first, each named by its start. Counts
    /// of a minute older than the backend keeps may be dropped.
    async fn add_activity(&self, minutes: &[Minute]) -> Result<(), StoreError>;

    /// The minutes from the one starting at `from_ms` to the one starting at `to_ms` (both
    /// included) that hold counts, oldest first: the sums of every addition.
    async fn activity(&self, from_ms: UnixMs, to_ms: UnixMs) -> Result<Vec<Minute>, StoreError>;

    /// Forgets the minutes that started before `before_ms`; returns how many it held. Run by
    /// the maintenance of the server that leads.
    async fn purge_activity(&self, before_ms: UnixMs) -> Result<usize, StoreError>;
}

/// The live servers (those [`StoreLifecycle::servers`] counts), and what each says of itself.
#[async_trait]
pub trait ServerStore {
    /// How this server describes itself: the backend calls `describe` each time it writes this
    /// server's row (every second on a shared store) or answers for it, so it must be cheap.
    /// Given once, when the engine is made; until then the server says nothing.
    fn describe_server(&self, describe: DescribeServer);

    /// Every live server, this one included, by id, with what each last wrote of itself.
    async fn live_servers(&self, now_ms: UnixMs) -> Result<Vec<LiveServer>, StoreError>;
}

/// Moving a whole store into another (`tenax copy`): records stored as they are, with their
/// ids, into a store no server uses. What has no id of its own (queue settings, schedules,
/// endpoints' states, activity) moves through the ordinary families.
#[async_trait]
pub trait StoreImport {
    /// Stores `jobs` as they are: ids, states, errors and (deliveries) attempts, a finished
    /// job among the finished. All or none. The jobs come in ascending id order, each past
    /// every id the store has assigned (else [`StoreError::Refused`] names the first that is
    /// not); ids assigned later are past all of them.
    async fn import_jobs(&self, jobs: Vec<ImportedJob>) -> Result<(), StoreError>;

    /// Stores a subscription with its id (its deliveries' queue is named by it); ids assigned
    /// later are past it. [`StoreError::Refused`] if the id is taken.
    async fn import_subscription(&self, subscription: Subscription) -> Result<(), StoreError>;

    /// Stores a token with its id (a token's text names it); ids assigned later are past it.
    /// [`StoreError::Refused`] if the id is taken.
    async fn import_token(&self, record: TokenRecord) -> Result<(), StoreError>;
}

/// The deployment's pools and flavors (docs/postgres.md, "Pools"). Only a pooled PostgreSQL
/// deployment has them; a store of one database keeps these defaults: it lists none, and
/// refuses to register any ([`PoolError::NotPooled`]).
#[async_trait]
pub trait PoolStore {
    /// Every pool, by name.
    async fn pools(&self) -> Result<Vec<Pool>, StoreError> {
        Ok(Vec::new())
    }

    /// Registers a pool, or changes the one of its name; true if it is new. Its database is
    /// reached (made, if the server it names has none of that name) and its schema made
    /// before it is stored.
    async fn put_pool(&self, _spec: PoolSpec) -> Result<bool, StoreError> {
        Err(StoreError::Pool(PoolError::NotPooled))
    }

    /// Forgets a pool; false if there was none. Refused while it holds queues, and for the
    /// last pool of a flavor.
    async fn delete_pool(&self, _name: &str) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Every flavor, by name.
    async fn flavors(&self) -> Result<Vec<Flavor>, StoreError> {
        Ok(Vec::new())
    }

    /// Stores a flavor whose pools are exactly `flavor.pools` (each must exist; pools it had
    /// and are not named leave it); true if it is new.
    async fn put_flavor(&self, _flavor: Flavor) -> Result<bool, StoreError> {
        Err(StoreError::Pool(PoolError::NotPooled))
    }

    /// Forgets a flavor (its pools stay, of no flavor); false if there was none.
    async fn delete_flavor(&self, _name: &str) -> Result<bool, StoreError> {
        Ok(false)
    }

    /// Moves `queues` (placed on one pool) to pool `to` with everything they hold: jobs with
    /// their ids, leases, claims, settings, subscriptions and their deliveries. Their writes
    /// wait (unavailable) while they move. A move that stopped short is finished by asking
    /// for it again.
    async fn move_queues(&self, _queues: Vec<String>, _to: &str) -> Result<Moved, StoreError> {
        Err(StoreError::Pool(PoolError::NotPooled))
    }
}

/// Where a backend reports its commits, for the metrics: handed to it at open.
pub trait CommitObserver: Send + Sync + std::fmt::Debug {
    /// A commit carrying `requests` requests (more than one when they shared it: group
    /// commit) took `elapsed`, its sync included when it synced.
    fn committed(&self, requests: usize, elapsed: std::time::Duration);
}

/// What a backend promises beyond the seam's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreProperties {
    /// Leases (and claims) survive a restart of the server. The embedded store keeps them in
    /// memory: a restart returns every in-flight job to ready, which at-least-once allows. A
    /// shared database keeps them, since other servers go on running.
    pub durable_leases: bool,
    /// Several servers may use the backend at once. Limits a server keeps in its own memory
    /// (an endpoint's concurrency, a subscription's throttle) then apply per server, so the
    /// cluster's limit is the sum (see `docs/architecture.md`).
    pub shared: bool,
    /// [`JobInserts::queue_facts`] may answer from a cache, so an insert may be refused with
    /// [`StoreError::FactsChanged`] and must then be made again from fresh facts.
    pub cached_facts: bool,
    /// The activity per minute ([`ActivityStore`]) survives a restart. The embedded store, of
    /// one server, keeps it in memory, as it keeps the count of what its server did; a shared
    /// database keeps it, since it is the sum of every server's.
    pub durable_activity: bool,
}

/// Wake-ups, fired by the backend whenever what they announce may have happened, by any
/// server using it. A waiter registers (`notified()` then `enable()`) before it looks, so that
/// nothing is missed in between.
#[derive(Debug, Default)]
pub struct Signals {
    /// Jobs may have become ready (enqueue, promotion, retry, replay, release, resume).
    pub ready: Notify,
    /// The earliest scheduled time may have moved earlier.
    pub schedule: Notify,
    /// A subscription was created, changed or deleted.
    pub subscriptions: Notify,
    /// Leased jobs were acknowledged (completed, failed, a delivery's attempt ended), deleted,
    /// or their leases (or claims) ended: a stream holding as many jobs as it may has room
    /// again, and a job someone waits for may have finished (every way into `completed` or
    /// `dead` passes here: [`Engine::job_when_finished`](crate::engine::Engine) relies on it).
    pub released: Notify,
    /// API tokens were made, changed or revoked: token books load them again.
    pub tokens: Notify,
    /// An endpoint's delivery state (pause, circuit breaker) changed.
    pub endpoints: Notify,
    /// The pools or flavors of a pooled deployment changed: its servers load them again.
    pub pools: Notify,
}

/// The backend as a whole.
#[async_trait]
pub trait StoreLifecycle {
    fn properties(&self) -> StoreProperties;

    fn signals(&self) -> &Signals;

    /// The store's payload data key (`crate::secrets::payload_key`), opened when the store
    /// was: what the engine seals and opens the payloads of encrypted queues with.
    fn payload_key(&self) -> &crate::secrets::PayloadKey;

    /// How many servers use the backend now (at least 1): a limit set for the whole cluster
    /// is shared among them. Known from memory, so cheap; may lag a change by seconds.
    fn servers(&self) -> usize;

    /// Asks to lead: true while this server holds the leadership under which the maintenance
    /// loop runs (promotions, lease expiry, retention), so that one server does it at a time.
    /// The embedded store always grants it.
    async fn lead(&self) -> Result<bool, StoreError>;

    /// Writes a backup of the store, a consistent copy as of `now_ms` taken while writes go
    /// on, into a new directory on the store's own file system, and answers where and what it
    /// holds; the caller removes the directory. Blocks for as long as the copy takes. `None`:
    /// this backend is backed up with its own tools (PostgreSQL: docs/postgres.md).
    fn backup(
        &self,
        now_ms: crate::clock::UnixMs,
    ) -> Option<Result<(std::path::PathBuf, crate::model::backup::BackupManifest), StoreError>>
    {
        let _ = now_ms;
        None
    }

    /// Writes out what is pending and stops background work. Nothing may be called after.
    async fn close(&self);
}

/// A whole backend.
pub trait Store:
    JobInserts
    + JobLeases
    + ClaimStore
    + JobUpkeep
    + JobCuration
    + JobReads
    + BatchStore
    + QueueStore
    + ScheduleStore
    + SubscriptionStore
    + EndpointStore
    + TokenStore
    + ActivityStore
    + ServerStore
    + StoreImport
    + PoolStore
    + StoreLifecycle
    + Send
    + Sync
    + std::fmt::Debug
{
}

impl<T> Store for T where
    T: JobInserts
        + JobLeases
        + ClaimStore
        + JobUpkeep
        + JobCuration
        + JobReads
        + BatchStore
        + QueueStore
        + ScheduleStore
        + SubscriptionStore
        + EndpointStore
        + TokenStore
        + ActivityStore
        + ServerStore
        + StoreImport
        + PoolStore
        + StoreLifecycle
        + Send
        + Sync
        + std::fmt::Debug
{
}
