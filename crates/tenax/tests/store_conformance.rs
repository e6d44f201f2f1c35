//! The conformance suite of the storage seam ([`tenax::store::Store`]): what every backend must
//! do, written once against the seam and run against each backend.
//!
//! Each case is an `async fn` taking a [`Backend`]: a place where a store can be opened, closed
//! and opened again on the same data (for the embedded store, a directory). Each case checks
//! its transitions, then closes the store, reopens it and checks that the state survived. What
//! a restart does to leases is the backend's declared property
//! ([`StoreProperties::durable_leases`]): without it, jobs in flight come back ready; with it,
//! they are still leased to the same holders.
//!
//! Each backend is one line at the bottom: `conformance_suite!(name, <a fresh Backend>)`. The
//! PostgreSQL cases use a fresh database each on the test server (`tests/common/postgres.rs`).
//!
//! Coverage: every operation of the seam (`src/store/seam.rs`), and the case(s) that check it.
//!
//! | family              | operation              | cases                                                                                   |
//! |---------------------|------------------------|-----------------------------------------------------------------------------------------|
//! | `JobInserts`        | `insert_jobs`          | `enqueue_is_atomic_and_ids_increase`, `unique_keys_refuse_or_return_the_holder`, `deliveries_are_stored_with_their_message_and_subscription` |
//! | `JobLeases`         | `take_jobs`            | `take_is_by_priority_then_age_and_leases`, `claims_are_renewed_ended_and_forgotten`, `deliveries_are_taken_finished_and_logged`; limits: `concurrency_limits_hold_takes_back`, `rate_limits_hold_takes_back_across_restarts`, `a_take_with_an_older_clock_counts_the_starts_of_its_period` |
//! |                     | `extend_lease`         | `expired_leases_go_to_the_decision`                                                     |
//! |                     | `complete_jobs`        | `complete_needs_the_current_lease`, `backlog_and_lease_facts_are_reported`, `lease_tokens_are_unpredictable_and_exact` |
//! |                     | `fail_job`             | `fail_asks_the_decision_and_records_it`, `acknowledgements_after_a_leases_end_are_refused` |
//! |                     | `finish_delivery`      | `deliveries_are_taken_finished_and_logged`                                              |
//! |                     | `pop_jobs`             | `pop_takes_and_deletes_ready_jobs`, `rate_limits_hold_takes_back_across_restarts`, `takes_and_pops_skip_jobs_past_their_expiry` |
//! | `ClaimStore`        | `claim`                | `claims_are_renewed_ended_and_forgotten`, `a_closed_stream_releases_its_jobs`           |
//! |                     | `extend_claim`         | `claims_are_renewed_ended_and_forgotten`                                                |
//! |                     | `end_claim`            | `claims_are_renewed_ended_and_forgotten`                                                |
//! |                     | `release_claim`        | `a_closed_stream_releases_its_jobs`                                                     |
//! | `JobUpkeep`         | `promote_due`          | `due_jobs_are_promoted`                                                                 |
//! |                     | `expire_leases`        | `expired_leases_go_to_the_decision`, `claims_are_renewed_ended_and_forgotten`           |
//! |                     | `expire_leases_of`     | `a_queues_expiry_waits_for_a_lease_being_ended`                                         |
//! |                     | `expire_jobs`          | `expired_jobs_are_deleted_whatever_their_status`                                        |
//! |                     | `purge_finished`       | `finished_jobs_are_purged_after_retention`                                              |
//! |                     | `next_wakeup`          | `due_jobs_are_promoted`, `expired_leases_go_to_the_decision`, `expired_jobs_are_deleted_whatever_their_status`, `schedules_are_stored_changed_and_deleted` |
//! | `JobCuration`       | `replay_jobs`          | `dead_jobs_are_replayed`, `replay_respects_unique_keys`                                 |
//! |                     | `run_now`              | `runs_now_and_replays_mark_the_next_run`                                                |
//! |                     | `delete_jobs`          | `jobs_are_deleted_by_selection`                                                         |
//! |                     | `delete_checked`       | `peeks_and_checked_deletes_see_the_current_state`                                       |
//! | `JobReads`          | `get_job`              | (most cases)                                                                            |
//! |                     | `list_jobs`            | `list_filters_and_pages`, `list_filters_for_messages_and_counts_agree`, `listings_page_both_ways_by_queue_type_and_status` |
//! |                     | `count_jobs`           | `list_filters_for_messages_and_counts_agree`                                            |
//! |                     | `count_jobs_upto`      | `listings_page_both_ways_by_queue_type_and_status`                                      |
//! |                     | `peek_jobs`            | `peeks_and_checked_deletes_see_the_current_state`                                       |
//! |                     | `counts`               | `counts_per_queue_and_status`, every reopen                                             |
//! |                     | `queue_counts`         | `list_filters_for_messages_and_counts_agree`, `queues_are_deleted_with_their_jobs`      |
//! |                     | `attempts`             | `deliveries_are_taken_finished_and_logged`, every reopen                                |
//! |                     | `backlog`              | `backlog_and_lease_facts_are_reported`                                                  |
//! |                     | `search_jobs`          | `searches_are_bounded_and_go_on`                                                        |
//! |                     | `ready_since`          | `heads_of_queues_tell_how_long_they_waited`                                             |
//! | `QueueStore`        | `queue`, `queues`      | `queue_configs_are_kept`, `queues_are_deleted_with_their_jobs`                          |
//! |                     | `update_queue`         | `queue_configs_are_kept`, `queues_are_deleted_with_their_jobs`                          |
//! |                     | `delete_queue`         | `queues_are_deleted_with_their_jobs`, `rate_limits_hold_takes_back_across_restarts`      |
//! |                     | `limit_use`            | `rate_limits_hold_takes_back_across_restarts`                                           |
//! | `ScheduleStore`     | `schedule`, `schedules`, `update_schedule`, `delete_schedule`, `due_schedules` | `schedules_are_stored_changed_and_deleted`, every reopen |
//! |                     | `record_tick`          | `a_tick_is_recorded_once_with_its_job`                                                  |
//! | `SubscriptionStore` | `insert_subscription`  | `subscriptions_are_stored_changed_and_deleted`, `unique_endpoints_are_held_per_queue`   |
//! |                     | `update_subscription`  | `subscriptions_are_stored_changed_and_deleted`, `unique_endpoints_are_held_per_queue`   |
//! |                     | `delete_subscription`  | `subscriptions_are_stored_changed_and_deleted`, `deliveries_are_taken_finished_and_logged` |
//! |                     | `subscription`, `subscriptions`, `subscribers` | `subscriptions_are_stored_changed_and_deleted`, every reopen    |
//! | `TokenStore`        | `put_token`, `delete_token`, `tokens` | `tokens_are_stored_by_id`, every reopen                                  |
//! | `EndpointStore`     | `endpoints`, `endpoint`, `update_endpoint` | `endpoint_states_change_atomically_and_are_kept`                    |
//! | `StoreLifecycle`    | `properties`           | `leases_across_a_restart_follow_the_declared_property`, every reopen; `embedded_properties` |
//! |                     | `signals`              | `signals_announce_what_may_have_changed` (ready, schedule, subscriptions, released)     |
//! |                     | `lead`                 | `a_lone_server_leads`                                                                   |
//! |                     | `close`                | `close_keeps_everything_acknowledged`, every reopen                                     |
//! | (opening)           | format refusal         | `newer_formats_are_refused`                                                             |
//! | (secrets at rest)   | sealing, keys, rotation, upgrade | `secrets_are_sealed_at_rest`, `a_wrong_secrets_key_is_refused_and_changes_nothing`, `a_key_rotation_loses_nothing_wherever_it_stops`, `secrets_kept_in_clear_before_are_sealed_at_open` |
//! | (every family)      | atomicity: operations on one job are serialised | `racing_operations_on_a_job_are_serialised`                    |

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redb::{ReadableDatabase, TableDefinition};
use serde_json::json;
use serde_json::value::RawValue;
use tempfile::TempDir;
use tenax::auth::{Role, TokenRecord};
use tenax::model::subscription::{DELIVERY_KIND, delivery_queue};
use tenax::model::{
    Ack, Attempt, AttemptResult, BreakerState, Checked, ClaimId, DeadLetter, EndpointState,
    Enqueued, ErrorEntry, Job, JobFilter, JobId, JobPeek, JobTemplate, KeyHolder, LeaseToken,
    LimitUse, MAX_EXACT_INTEGER, Missed, NewJob, NotReplayed, OnDuplicate, Order, Overlap, Page,
    Pause, QueueConfig, QueueCounts, RateLimit, Replay, Replayed, Schedule, Searched, Selection,
    Status, StoredPolicy, Subscription, SubscriptionId, TakenJob, TextQuery, TickCounts, Trigger,
};
use tenax::secrets::key::Key;
use tenax::secrets::{Keyring, SECRETS_KEY_FILE};
use tenax::store::embedded::EmbeddedOptions;
use tenax::store::postgres::{Database, PostgresOptions, PostgresStore};
use tenax::store::{
    Claim, ClaimRecord, ClaimedJob, DecideContext, EmbeddedStore, FactsSeen, Finished, Insert,
    LeaseFacts, Store, StoreError, StoreProperties, TakeRequest, Taken, Transition,
};
use tenax_policy::{RetryPolicy, Shape};
use tokio::sync::Notify;

/// Every case starts at this time (ms since the epoch).
const T0: u64 = 1_800_000_000_000;
const SECOND: u64 = 1_000;

// --- backends --------------------------------------------------------------------------------

/// One backend at one location. `open` gives a store on the data the last closed store there
/// left behind (empty the first time).
trait Backend {
    /// Opens the store, or says why it cannot.
    async fn try_open(&self, now_ms: u64) -> Result<Arc<dyn Store>, StoreError>;

    async fn open(&self, now_ms: u64) -> Arc<dyn Store> {
        self.try_open(now_ms).await.expect("the store opens")
    }

    /// The storage format the data is stamped with (the store is closed).
    async fn format(&self) -> u64;

    /// Stamps the data with storage format `version`, as another version of Tenax would have
    /// written it (the store is closed).
    async fn stamp_format(&self, version: u64);

    /// Opens the store with `keys` as its secrets keys, instead of those [`Backend::open`]
    /// uses.
    async fn try_open_with(
        &self,
        keys: Arc<Keyring>,
        now_ms: u64,
    ) -> Result<Arc<dyn Store>, StoreError>;

    /// The secrets keys [`Backend::open`] uses (once it has opened the store).
    fn keys(&self) -> Arc<Keyring>;

    /// Everything the backend keeps, as a copy of its files or a dump of its database shows it
    /// (the store is closed).
    async fn dump(&self) -> Vec<u8>;

    /// Subscription `id` as stored (the store is closed).
    async fn raw_subscription(&self, id: SubscriptionId) -> String;

    /// Stores `raw` as subscription `id`, as another version of Tenax, or a crash in the
    /// middle of something, would have left it (the store is closed).
    async fn set_raw_subscription(&self, id: SubscriptionId, raw: &str);

    /// Makes the data look as a release before secrets were sealed left it: no key recorded
    /// (nor made, where the backend makes its own), the format before sealing, and `stale` in
    /// the places where old copies of records linger (the store is closed).
    async fn as_before_sealing(&self, stale: &[u8]);

    /// There is no such backend here (no PostgreSQL server); the case is skipped, as the
    /// harness has said.
    fn missing(&self) -> bool {
        false
    }
}

/// The embedded store in a temporary directory.
struct Embedded {
    dir: TempDir,
    options: EmbeddedOptions,
}

impl Embedded {
    fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("tenax-store-")
                .tempdir()
                .expect("a temporary directory"),
            options: EmbeddedOptions::default(),
        }
    }

    /// Commits are acknowledged before they are synced.
    fn unsynced() -> Self {
        Self {
            options: EmbeddedOptions {
                sync: false,
                ..EmbeddedOptions::default()
            },
            ..Self::new()
        }
    }

    /// Opens the store's file directly, to read or change it as another version would.
    async fn with_file<T: Send + 'static>(
        &self,
        work: impl FnOnce(&redb::Database) -> T + Send + 'static,
    ) -> T {
        let path = self.dir.path().join("tenax.redb");
        tokio::task::spawn_blocking(move || {
            let db = redb::Database::open(&path).expect("the file opens");
            work(&db)
        })
        .await
        .expect("the task")
    }

    /// The embedded store's file and its `meta` table (see `src/store/embedded/tables.rs`).
    fn meta(
        &self,
    ) -> (
        std::path::PathBuf,
        TableDefinition<'static, &'static str, u64>,
    ) {
        (
            self.dir.path().join("tenax.redb"),
            TableDefinition::new("meta"),
        )
    }
}

impl Backend for Embedded {
    async fn try_open(&self, now_ms: u64) -> Result<Arc<dyn Store>, StoreError> {
        let (dir, options) = (self.dir.path().to_owned(), self.options.clone());
        let store =
            tokio::task::spawn_blocking(move || EmbeddedStore::open(&dir, &options, now_ms))
                .await
                .expect("the open task")?;
        Ok(Arc::new(store))
    }

    async fn format(&self) -> u64 {
        let (path, meta) = self.meta();
        tokio::task::spawn_blocking(move || {
            let db = redb::Database::open(&path).expect("the file opens");
            let tx = db.begin_read().expect("a read");
            let table = tx.open_table(meta).expect("the meta table");
            table
                .get("format_version")
                .expect("readable")
                .expect("the file is stamped")
                .value()
        })
        .await
        .expect("the task")
    }

    async fn stamp_format(&self, version: u64) {
        let (path, meta) = self.meta();
        tokio::task::spawn_blocking(move || {
            let db = redb::Database::open(&path).expect("the file opens");
            let tx = db.begin_write().expect("a write");
            {
                let mut table = tx.open_table(meta).expect("the meta table");
                table.insert("format_version", version).expect("stamped");
            }
            tx.commit().expect("committed");
        })
        .await
        .expect("the task");
    }

    async fn try_open_with(
        &self,
        keys: Arc<Keyring>,
        now_ms: u64,
    ) -> Result<Arc<dyn Store>, StoreError> {
        let options = EmbeddedOptions {
            secrets: Some(keys),
            ..self.options.clone()
        };
        let dir = self.dir.path().to_owned();
        let store =
            tokio::task::spawn_blocking(move || EmbeddedStore::open(&dir, &options, now_ms))
                .await
                .expect("the open task")?;
        Ok(Arc::new(store))
    }

    /// The data directory's key file, made at the first open.
    fn keys(&self) -> Arc<Keyring> {
        let path = self.dir.path().join(SECRETS_KEY_FILE);
        Arc::new(Keyring::read_file(&path).expect("the data directory's key file"))
    }

    /// The store's files, as a copy of the data directory holds them (but the key file).
    async fn dump(&self) -> Vec<u8> {
        let mut all = Vec::new();
        for name in ["tenax.redb", "tenax.wal"] {
            all.extend(std::fs::read(self.dir.path().join(name)).expect("a store file"));
        }
        all
    }

    async fn raw_subscription(&self, id: SubscriptionId) -> String {
        self.with_file(move |db| {
            let tx = db.begin_read().expect("a read");
            let table = tx.open_table(SUBSCRIPTIONS).expect("the table");
            let row = table.get(id.0).expect("read").expect("the subscription");
            String::from_utf8(row.value().to_vec()).expect("JSON")
        })
        .await
    }

    async fn set_raw_subscription(&self, id: SubscriptionId, raw: &str) {
        let raw = raw.to_owned();
        self.with_file(move |db| {
            let tx = db.begin_write().expect("a write");
            tx.open_table(SUBSCRIPTIONS)
                .expect("the table")
                .insert(id.0, raw.as_bytes())
                .expect("stored");
            tx.commit().expect("committed");
        })
        .await;
    }

    /// Format 3, no key recorded nor key file, and `stale` in the log's unused tail, where an
    /// earlier release's records of the same subscriptions would linger.
    async fn as_before_sealing(&self, stale: &[u8]) {
        self.stamp_format(3).await;
        self.with_file(|db| {
            let tx = db.begin_write().expect("a write");
            tx.open_table(TableDefinition::<&str, u64>::new("meta"))
                .expect("the meta table")
                .remove("secrets_key")
                .expect("removed");
            tx.commit().expect("committed");
        })
        .await;
        std::fs::remove_file(self.dir.path().join(SECRETS_KEY_FILE)).expect("no key file");
        let log = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir.path().join("tenax.wal"))
            .expect("the log");
        std::os::unix::fs::FileExt::write_all_at(&log, stale, 8 * 1024 * 1024).expect("written");
    }
}

/// The embedded store's subscriptions (see `src/store/embedded/tables.rs`).
const SUBSCRIPTIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("subscriptions");

// --- helpers ---------------------------------------------------------------------------------

/// A job for `queue`, ready at [`T0`]; adjust with the [`Build`] methods.
fn job(queue: &str) -> Insert {
    Insert {
        job: NewJob {
            queue: queue.to_owned(),
            kind: "work".to_owned(),
            payload: RawValue::from_string("null".to_owned()).expect("JSON"),
            priority: 0,
            run_at_ms: T0,
            policy: None,
            unique_key: None,
            created_at_ms: T0,
            expires_at_ms: None,
            origin: None,
            parent: None,
            traceparent: None,
        },
        parent: None,
        owner: None,
    }
}

trait Build {
    fn priority(self, priority: i32) -> Self;
    fn at(self, run_at_ms: u64) -> Self;
    fn key(self, key: &str) -> Self;
    fn kind(self, kind: &str) -> Self;
    fn payload(self, json: serde_json::Value) -> Self;
    fn policy(self, policy: RetryPolicy) -> Self;
    fn origin(self, origin: &str) -> Self;
    fn expires(self, at_ms: u64) -> Self;
}

impl Build for Insert {
    fn priority(mut self, priority: i32) -> Self {
        self.job.priority = priority;
        self
    }
    fn at(mut self, run_at_ms: u64) -> Self {
        self.job.run_at_ms = run_at_ms;
        self
    }
    fn key(mut self, key: &str) -> Self {
        self.job.unique_key = Some(key.to_owned());
        self
    }
    fn kind(mut self, kind: &str) -> Self {
        self.job.kind = kind.to_owned();
        self
    }
    fn payload(mut self, json: serde_json::Value) -> Self {
        self.job.payload = RawValue::from_string(json.to_string()).expect("JSON");
        self
    }
    fn policy(mut self, policy: RetryPolicy) -> Self {
        self.job.policy = Some(StoredPolicy::new(policy));
        self
    }
    fn origin(mut self, origin: &str) -> Self {
        self.job.origin = Some(origin.to_owned());
        self
    }
    fn expires(mut self, at_ms: u64) -> Self {
        self.job.expires_at_ms = Some(at_ms);
        self
    }
}

/// The delivery to `subscription` of the message at index `parent` of the same insert.
fn delivery(subscription: SubscriptionId, parent: usize) -> Insert {
    let mut insert = job(&delivery_queue(subscription)).kind(DELIVERY_KIND);
    insert.parent = Some(parent);
    insert.owner = Some(subscription);
    insert
}

/// A subscription of `queue` to `endpoint` (its id is the store's to assign). Built from JSON,
/// so that fields added later take their defaults.
fn subscription(queue: &str, endpoint: &str) -> Subscription {
    serde_json::from_value(json!({
        "id": 0,
        "queue": queue,
        "endpoint": endpoint,
        "content_type": "application/json",
        "secret": "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
        "headers": {"X-Team": "billing"},
        "enabled": true,
        "created_at_ms": T0,
        "updated_at_ms": T0,
    }))
    .expect("a subscription")
}

/// A subscription whose endpoint must be unique in its queue (Zaqar's).
fn zaqar_subscription(queue: &str, endpoint: &str) -> Subscription {
    let mut subscription = subscription(queue, endpoint);
    subscription.format = tenax::model::EnvelopeFormat::Zaqar;
    assert_eq!(subscription.unique_endpoint(), Some(endpoint));
    subscription
}

/// One POST of a delivery.
fn attempt(n: u32, at_ms: u64, result: AttemptResult, status: u16) -> Attempt {
    Attempt {
        attempt: n,
        trigger: tenax::model::Trigger::Scheduled,
        at_ms,
        latency_ms: 12,
        result,
        status: Some(status),
        error: None,
        response: Some(format!("HTTP {status}")),
        retry_after_ms: None,
    }
}

/// A new token record (id 0: the store assigns one).
fn token(name: &str, role: Role) -> TokenRecord {
    TokenRecord {
        id: 0,
        name: name.to_owned(),
        hash: format!("{:0>64}", name.len()),
        role,
        queues: vec!["orders-*".to_owned()],
        projects: Vec::new(),
        created_at_ms: T0,
        last_used_at_ms: None,
    }
}

/// Runs `action` with a waiter registered on `signal` beforehand, and checks that the signal
/// fired (a backend may deliver it asynchronously: it has a few seconds).
async fn fires<T>(signal: &Notify, what: &str, action: impl Future<Output = T>) -> T {
    let notified = signal.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    let output = action.await;
    tokio::time::timeout(Duration::from_secs(5), notified)
        .await
        .unwrap_or_else(|_| panic!("{what} fired no signal"));
    output
}

/// What a job's status is after a restart, by the backend's declared properties.
fn after_restart(properties: StoreProperties, status: Status) -> Status {
    if status == Status::InFlight && !properties.durable_leases {
        Status::Ready
    } else {
        status
    }
}

/// Closes a store and lets go of it, so that its data can be opened again.
async fn close(store: Arc<dyn Store>) {
    store.close().await;
}

/// The policy of the job's queue, as a decision sees it.
fn queue_policy_of(ctx: &DecideContext<'_>) -> Option<RetryPolicy> {
    ctx.queue_config
        .and_then(|c| c.policy.as_ref())
        .map(|p| (**p.policy()).clone())
}

fn fixed(delay_ms: u64) -> RetryPolicy {
    RetryPolicy::new(Shape::Fixed { delay_ms })
}

/// The subscribers of `queue`, as an enqueue reads them.
async fn subscribers(
    store: &Arc<dyn Store>,
    queue: &str,
) -> Result<Vec<SubscriptionId>, StoreError> {
    store
        .queue_facts(queue)
        .await
        .map(|f| f.subscribers.clone())
}

/// The facts version an enqueue made now would have read.
async fn current(store: &Arc<dyn Store>) -> FactsSeen {
    store.queue_facts("q").await.expect("facts read").seen
}

/// Inserts jobs of their own (no parent, no owner): one result each.
async fn insert(
    store: &Arc<dyn Store>,
    jobs: Vec<Insert>,
    on_duplicate: OnDuplicate,
    now_ms: u64,
) -> Result<Vec<Enqueued>, StoreError> {
    let count = jobs.len();
    let results: Vec<Enqueued> = store
        .insert_jobs(jobs, on_duplicate, current(store).await, now_ms)
        .await?
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(results.len(), count, "one result per job of its own");
    Ok(results)
}

async fn enqueue(store: &Arc<dyn Store>, jobs: Vec<Insert>, now_ms: u64) -> Vec<JobId> {
    insert(store, jobs, OnDuplicate::Refuse, now_ms)
        .await
        .expect("enqueued")
        .iter()
        .map(|e| e.id)
        .collect()
}

async fn take_on(
    store: &Arc<dyn Store>,
    queues: &[&str],
    max: usize,
    lease_ms: u64,
    stream: Option<ClaimId>,
    now_ms: u64,
) -> Vec<TakenJob> {
    let queues: Vec<String> = queues.iter().map(|q| (*q).to_owned()).collect();
    let request = TakeRequest {
        claim: stream,
        ..TakeRequest::new(&queues, max, lease_ms)
    };
    store.take_jobs(&request, now_ms).await.expect("take").jobs
}

/// Takes up to `max` jobs with a 30 s lease.
async fn take(store: &Arc<dyn Store>, queues: &[&str], max: usize, now_ms: u64) -> Vec<TakenJob> {
    take_on(store, queues, max, 30 * SECOND, None, now_ms).await
}

fn taken_ids(jobs: &[TakenJob]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

/// `complete_jobs` without what the backend reports of each lease, which
/// `backlog_and_lease_facts_are_reported` checks.
trait CompletePlain {
    async fn complete_plain(
        &self,
        acks: &[Ack],
        retain: bool,
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError>;
}

impl CompletePlain for Arc<dyn Store> {
    async fn complete_plain(
        &self,
        acks: &[Ack],
        retain: bool,
        now_ms: u64,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let results = self.complete_jobs(acks, retain, now_ms).await?;
        Ok(results.into_iter().map(|r| r.map(drop)).collect())
    }
}

fn ack(job: &TakenJob) -> Ack {
    Ack {
        id: job.id,
        lease: job.lease_token,
    }
}

async fn get(store: &Arc<dyn Store>, id: JobId) -> Job {
    store
        .get_job(id)
        .await
        .expect("readable")
        .unwrap_or_else(|| panic!("job {id} exists"))
}

async fn status(store: &Arc<dyn Store>, id: JobId) -> Option<Status> {
    store
        .get_job(id)
        .await
        .expect("readable")
        .map(|j| j.state.status)
}

async fn list(
    store: &Arc<dyn Store>,
    filter: JobFilter,
    after: Option<JobId>,
    limit: usize,
) -> Vec<JobId> {
    store
        .list_jobs(&filter, Page::after(after, limit))
        .await
        .expect("list")
        .iter()
        .map(|j| j.id)
        .collect()
}

fn error_entry(ctx: &DecideContext<'_>, now_ms: u64, message: &str) -> ErrorEntry {
    ErrorEntry {
        attempt: ctx.state.failures + 1,
        at_ms: now_ms,
        message: message.to_owned(),
        detail: None,
    }
}

/// A decision: retry `delay_ms` after `now_ms`, recording `message`.
fn retry(
    now_ms: u64,
    delay_ms: u64,
    message: &str,
) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let message = message.to_owned();
    move |ctx| {
        let mut state = ctx.state.clone();
        state.status = Status::Scheduled;
        state.run_at_ms = now_ms + delay_ms;
        state.failures += 1;
        state.first_failure_at_ms.get_or_insert(now_ms);
        state.last_delay_ms = Some(delay_ms);
        Transition {
            state,
            error: Some(error_entry(ctx, now_ms, &message)),
            moved_to: None,
        }
    }
}

/// A decision: dead at `now_ms`, recording `message`.
fn dead(now_ms: u64, message: &str) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let message = message.to_owned();
    move |ctx| {
        let mut state = ctx.state.clone();
        state.status = Status::Dead;
        state.failures += 1;
        state.finished_at_ms = Some(now_ms);
        state.dead_reason = Some(message.clone());
        Transition {
            state,
            error: Some(error_entry(ctx, now_ms, &message)),
            moved_to: None,
        }
    }
}

/// A decision: ready again at once (as after a lost lease), recording `message`.
fn again(now_ms: u64, message: &str) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let message = message.to_owned();
    move |ctx| {
        let mut state = ctx.state.clone();
        state.status = Status::Ready;
        state.run_at_ms = now_ms;
        state.failures += 1;
        Transition {
            state,
            error: Some(error_entry(ctx, now_ms, &message)),
            moved_to: None,
        }
    }
}

/// Takes `ids` (the next jobs to take from `queue`) and fails them to dead.
async fn kill(store: &Arc<dyn Store>, queue: &str, ids: &[JobId], now_ms: u64) {
    let taken = take(store, &[queue], ids.len(), now_ms).await;
    assert_eq!(taken_ids(&taken), ids);
    for job in &taken {
        store
            .fail_job(ack(job), now_ms, &dead(now_ms, "fatal"))
            .await
            .expect("failed");
    }
}

/// Everything a store holds, as a reopened store at `now_ms` must give it back: every job with
/// its errors and policy (jobs in flight are ready unless the backend keeps leases, and
/// scheduled jobs that are due are ready), every delivery's attempts, every queue's settings,
/// every subscription and every token.
async fn snapshot(store: &Arc<dyn Store>, now_ms: u64) -> serde_json::Value {
    let properties = store.properties();
    let jobs: Vec<Job> = store
        .list_jobs(&JobFilter::default(), Page::after(None, 1_000_000))
        .await
        .expect("list")
        .into_iter()
        .map(|mut job| {
            let state = &mut job.state;
            let due = state.status == Status::Scheduled && state.run_at_ms <= now_ms;
            state.status = if due {
                Status::Ready
            } else {
                after_restart(properties, state.status)
            };
            job
        })
        .collect();
    let mut attempts = Vec::new();
    for job in &jobs {
        let logged = store.attempts(job.id).await.expect("attempts");
        if !logged.is_empty() {
            attempts.push((job.id, logged));
        }
    }
    let queues = store.queues().await.expect("queues");
    let subscriptions = store.subscriptions(None).await.expect("subscriptions");
    let tokens = store.tokens().await.expect("tokens");
    let schedules = store.schedules().await.expect("schedules");
    json!({
        "jobs": jobs,
        "attempts": attempts,
        "queues": queues,
        "subscriptions": subscriptions,
        "tokens": tokens,
        "schedules": schedules,
    })
}

/// The counts `jobs` imply, sorted by queue; queues without jobs left out.
fn counts_of(jobs: &[Job]) -> Vec<QueueCounts> {
    let mut by_queue: std::collections::BTreeMap<&str, [u64; 5]> = Default::default();
    for job in jobs {
        let slot = Status::ALL
            .iter()
            .position(|s| *s == job.state.status)
            .expect("a status");
        by_queue.entry(&job.spec.queue).or_default()[slot] += 1;
    }
    by_queue
        .into_iter()
        .map(
            |(queue, [scheduled, ready, in_flight, completed, dead])| QueueCounts {
                queue: queue.to_owned(),
                scheduled,
                ready,
                in_flight,
                completed,
                dead,
            },
        )
        .collect()
}

/// Closes the store, reopens it at `now_ms`, and checks that nothing acknowledged changed (see
/// [`snapshot`]), that the backend declares the same properties, and that the counts match the
/// jobs. Returns the reopened store.
async fn reopen(backend: &impl Backend, store: Arc<dyn Store>, now_ms: u64) -> Arc<dyn Store> {
    let before = snapshot(&store, now_ms).await;
    let properties = store.properties();
    close(store).await;
    let store = backend.open(now_ms).await;
    assert_eq!(
        store.properties(),
        properties,
        "the same backend, the same promises"
    );
    let after = snapshot(&store, now_ms).await;
    assert_eq!(after, before, "the state survived closing and reopening");
    let jobs = store
        .list_jobs(&JobFilter::default(), Page::after(None, 1_000_000))
        .await
        .expect("list");
    assert_eq!(
        store.counts().await.expect("counts"),
        counts_of(&jobs),
        "counts match the jobs"
    );
    store
}

// --- cases -----------------------------------------------------------------------------------

async fn enqueue_is_atomic_and_ids_increase(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let first = insert(
        &store,
        vec![
            job("q").payload(json!({"n": 1})),
            job("q").priority(3),
            job("q").at(T0 + SECOND),
        ],
        OnDuplicate::Refuse,
        T0,
    )
    .await
    .expect("enqueued");
    let ids: Vec<JobId> = first.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(
        first
            .iter()
            .map(|e| (e.created, e.status, e.run_at_ms))
            .collect::<Vec<_>>(),
        [
            (true, Status::Ready, T0),
            (true, Status::Ready, T0),
            (true, Status::Scheduled, T0 + SECOND)
        ]
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(shown.spec.payload.get(), r#"{"n":1}"#);
    assert_eq!(
        (shown.spec.queue.as_str(), shown.spec.kind.as_str()),
        ("q", "work")
    );
    assert_eq!(shown.spec.created_at_ms, T0);
    assert!(shown.errors.is_empty());

    let keyed = enqueue(&store, vec![job("q").key("k")], T0).await;
    // A refused batch stores nothing, not even its valid jobs.
    let refused = insert(
        &store,
        vec![job("q"), job("q").key("k")],
        OnDuplicate::Refuse,
        T0,
    )
    .await;
    assert_eq!(
        refused.expect_err("refused"),
        StoreError::Duplicate {
            index: 1,
            queue: "q".into(),
            key: "k".into(),
            holder: KeyHolder::Job(keyed[0])
        }
    );
    let all = list(&store, JobFilter::default(), None, 100).await;
    assert_eq!(all, [ids.clone(), keyed.clone()].concat());
    let next = enqueue(&store, vec![job("q")], T0).await;
    assert!(next[0] > keyed[0]);

    // The trace context is kept with the job, read back, and handed to its taker.
    const TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let mut traced = job("traced");
    traced.job.traceparent = Some(TRACE.to_owned());
    let traced = enqueue(&store, vec![traced], T0).await[0];
    assert_eq!(
        get(&store, traced).await.spec.traceparent.as_deref(),
        Some(TRACE)
    );

    let store = reopen(backend, store, T0).await;
    // Ids are never reused, across restarts too.
    let after = enqueue(&store, vec![job("q")], T0).await;
    assert!(after[0] > next[0]);
    assert_eq!(
        get(&store, traced).await.spec.traceparent.as_deref(),
        Some(TRACE)
    );
    let taken = take(&store, &["traced"], 1, T0).await;
    assert_eq!(taken[0].traceparent.as_deref(), Some(TRACE));
    close(store).await;
}

async fn unique_keys_refuse_or_return_the_holder(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let held = enqueue(&store, vec![job("q1").key("k")], T0).await[0];
    // Keys are per queue.
    enqueue(&store, vec![job("q2").key("k")], T0).await;
    let existing = insert(&store, vec![job("q1").key("k")], OnDuplicate::Existing, T0)
        .await
        .expect("answered");
    assert_eq!(
        existing,
        [Enqueued {
            id: held,
            created: false,
            status: Status::Ready,
            run_at_ms: T0
        }]
    );
    // Within one batch, the second holder of a key is the first.
    let batch = insert(
        &store,
        vec![job("q1").key("m"), job("q1").key("m")],
        OnDuplicate::Existing,
        T0,
    )
    .await
    .expect("answered");
    assert_eq!(batch[1].id, batch[0].id);
    assert_eq!((batch[0].created, batch[1].created), (true, false));
    let refused = insert(
        &store,
        vec![job("q1").key("n"), job("q1").key("n")],
        OnDuplicate::Refuse,
        T0,
    )
    .await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Duplicate {
                index: 1,
                holder: KeyHolder::Earlier(0),
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(list(&store, JobFilter::default(), None, 100).await.len(), 3);

    // A finished job (completed or dead) frees its key; an in-flight one holds it.
    let taken = take(&store, &["q1"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [held]);
    let refused = insert(&store, vec![job("q1").key("k")], OnDuplicate::Refuse, T0).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(existing), .. }) if existing == held)
    );
    let done = store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    assert_eq!(done, [Ok(())]);
    let renewed = enqueue(&store, vec![job("q1").key("k")], T0).await[0];
    assert!(renewed > held);
    kill(&store, "q1", &[batch[0].id], T0).await;
    enqueue(&store, vec![job("q1").key("m")], T0).await;

    let store = reopen(backend, store, T0).await;
    for (queue, key) in [("q1", "k"), ("q1", "m"), ("q2", "k")] {
        let refused = insert(&store, vec![job(queue).key(key)], OnDuplicate::Refuse, T0).await;
        assert!(
            matches!(refused, Err(StoreError::Duplicate { .. })),
            "{queue}/{key} is still held after reopening: {refused:?}"
        );
    }
    close(store).await;
}

async fn take_is_by_priority_then_age_and_leases(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("a"),
            job("b").priority(5),
            job("a").priority(5),
            job("c").priority(9),
            job("b"),
            job("a").priority(-1),
            job("a").priority(9).at(T0 + SECOND),
        ],
        T0,
    )
    .await;
    store
        .update_queue("c", &|_| {
            Some(QueueConfig {
                policy: None,
                paused: true,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("paused");

    let first = take_on(&store, &["a", "b", "c"], 2, 10 * SECOND, None, T0).await;
    assert_eq!(taken_ids(&first), [ids[1], ids[2]]);
    let rest = take_on(
        &store,
        &["a", "b", "c", "nobody"],
        10,
        20 * SECOND,
        None,
        T0 + 5,
    )
    .await;
    assert_eq!(
        taken_ids(&rest),
        [ids[0], ids[4], ids[5]],
        "paused and scheduled jobs stay"
    );
    assert!(take(&store, &["a", "b"], 10, T0).await.is_empty());
    for job in &first {
        assert_eq!(
            (job.attempt, job.lease_expires_at_ms),
            (1, T0 + 10 * SECOND)
        );
    }
    assert!(
        rest.iter()
            .all(|j| j.lease_expires_at_ms == T0 + 5 + 20 * SECOND)
    );
    let mut tokens: Vec<LeaseToken> = first.iter().chain(&rest).map(|j| j.lease_token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 5, "every lease has its own token");
    let b = &first[0];
    assert_eq!(
        (b.queue.as_str(), b.kind.as_str(), b.priority),
        ("b", "work", 5)
    );
    assert_eq!(status(&store, ids[1]).await, Some(Status::InFlight));
    let counts = store.counts().await.expect("counts");
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.queue.as_str(), c.in_flight))
            .collect::<Vec<_>>(),
        [("a", 3), ("b", 2), ("c", 0)]
    );

    // Reopened without durable leases, the in-flight jobs are ready again, in the same order;
    // with them, they are still held.
    let store = reopen(backend, store, T0 + 10).await;
    let again = take(&store, &["a", "b"], 10, T0 + 10).await;
    if store.properties().durable_leases {
        assert!(again.is_empty(), "{:?}", taken_ids(&again));
    } else {
        assert_eq!(taken_ids(&again), [ids[1], ids[2], ids[0], ids[4], ids[5]]);
        assert!(
            again.iter().all(|j| j.attempt == 1),
            "a restart is not an attempt"
        );
    }
    close(store).await;
}

async fn complete_needs_the_current_lease(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let taken = take(&store, &["q"], 5, T0).await;
    let [a, b, c, d, e] = [&taken[0], &taken[1], &taken[2], &taken[3], &taken[4]];
    let wrong = Ack {
        id: b.id,
        lease: c.lease_token,
    };
    let guessed = Ack {
        id: c.id,
        lease: LeaseToken(0),
    };
    let results = store
        .complete_plain(&[ack(a), wrong, guessed, ack(c), ack(d)], true, T0 + 7)
        .await
        .expect("one commit");
    assert_eq!(
        results,
        [
            Ok(()),
            Err(StoreError::LeaseLost { id: b.id }),
            Err(StoreError::LeaseLost { id: c.id }),
            Ok(()),
            Ok(())
        ]
    );
    let shown = get(&store, a.id).await;
    assert_eq!(
        (shown.state.status, shown.state.finished_at_ms),
        (Status::Completed, Some(T0 + 7))
    );
    assert_eq!(status(&store, b.id).await, Some(Status::InFlight));
    let results = store
        .complete_plain(
            &[
                ack(a),
                Ack {
                    id: JobId(999_999),
                    lease: LeaseToken(1),
                },
            ],
            true,
            T0,
        )
        .await
        .expect("one commit");
    assert_eq!(
        results,
        [
            Err(StoreError::NotInFlight {
                id: a.id,
                status: Status::Completed
            }),
            Err(StoreError::NotFound(JobId(999_999)))
        ]
    );
    // Without retention, a completed job is gone.
    let results = store
        .complete_plain(&[ack(b)], false, T0)
        .await
        .expect("one commit");
    assert_eq!(results, [Ok(())]);
    assert!(store.get_job(b.id).await.expect("readable").is_none());
    assert_eq!(ids.len(), 5);

    let store = reopen(backend, store, T0 + 10).await;
    let properties = store.properties();
    for (id, want) in [
        (a.id, Some(Status::Completed)),
        (b.id, None),
        (c.id, Some(Status::Completed)),
        (d.id, Some(Status::Completed)),
        (e.id, Some(after_restart(properties, Status::InFlight))),
    ] {
        assert_eq!(status(&store, id).await, want, "job {id}");
    }
    let again = taken_ids(&take(&store, &["q"], 5, T0 + 10).await);
    if properties.durable_leases {
        assert!(again.is_empty());
    } else {
        assert_eq!(again, [e.id]);
    }
    close(store).await;
}

/// What a decision closure was shown.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    id: JobId,
    queue: String,
    failures: u32,
    job_policy: Option<RetryPolicy>,
    queue_policy: Option<RetryPolicy>,
}

async fn fail_asks_the_decision_and_records_it(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let queue_policy = fixed(5 * SECOND);
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                policy: Some(StoredPolicy::new(queue_policy.clone())),
                paused: false,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("configured");
    let job_policy = fixed(60 * SECOND);
    let ids = enqueue(
        &store,
        vec![job("q").policy(job_policy.clone()), job("q"), job("other")],
        T0,
    )
    .await;
    let taken = take(&store, &["q", "other"], 3, T0).await;
    assert_eq!(taken_ids(&taken), ids);

    let seen = Mutex::new(Vec::new());
    let watch = |inner: &(dyn Fn(&DecideContext<'_>) -> Transition + Send + Sync),
                 ctx: &DecideContext<'_>| {
        seen.lock().expect("not poisoned").push(Seen {
            id: ctx.id,
            queue: ctx.queue.to_owned(),
            failures: ctx.state.failures,
            job_policy: ctx.job_policy.cloned(),
            queue_policy: queue_policy_of(ctx),
        });
        inner(ctx)
    };
    let now = T0 + 100;

    // A retry: scheduled, one failure, one error entry.
    let decide = retry(now, 60 * SECOND, "boom");
    let transition = store
        .fail_job(ack(&taken[0]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        (transition.state.status, transition.state.run_at_ms),
        (Status::Scheduled, now + 60 * SECOND)
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(shown.state, transition.state);
    assert_eq!(shown.errors, [transition.error.clone().expect("an error")]);
    assert_eq!(shown.errors[0].attempt, 1);

    // Dead.
    let decide = dead(now, "fatal");
    store
        .fail_job(ack(&taken[1]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.finished_at_ms,
            shown.state.dead_reason.as_deref()
        ),
        (Status::Dead, Some(now), Some("fatal"))
    );

    // A retry that is already due is ready at once, and the answer says so.
    let decide = retry(now, 0, "again");
    let transition = store
        .fail_job(ack(&taken[2]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    assert_eq!(transition.state.status, Status::Ready);
    assert_eq!(status(&store, ids[2]).await, Some(Status::Ready));

    assert_eq!(
        *seen.lock().expect("not poisoned"),
        [
            Seen {
                id: ids[0],
                queue: "q".into(),
                failures: 0,
                job_policy: Some(job_policy),
                queue_policy: Some(queue_policy.clone())
            },
            Seen {
                id: ids[1],
                queue: "q".into(),
                failures: 0,
                job_policy: None,
                queue_policy: Some(queue_policy)
            },
            Seen {
                id: ids[2],
                queue: "other".into(),
                failures: 0,
                job_policy: None,
                queue_policy: None
            },
        ]
    );

    // No decision without the lease.
    let calls = seen.lock().expect("not poisoned").len();
    let decide = retry(now, 1, "never");
    let watched = |ctx: &DecideContext<'_>| watch(&decide, ctx);
    let again_taken = take(&store, &["other"], 1, now).await;
    let stale = Ack {
        id: ids[2],
        lease: taken[2].lease_token,
    };
    assert_eq!(
        store.fail_job(stale, now, &watched).await,
        Err(StoreError::LeaseLost { id: ids[2] })
    );
    assert_eq!(
        store.fail_job(ack(&taken[1]), now, &watched).await,
        Err(StoreError::NotInFlight {
            id: ids[1],
            status: Status::Dead
        })
    );
    assert_eq!(
        store
            .fail_job(
                Ack {
                    id: JobId(424_242),
                    lease: LeaseToken(1)
                },
                now,
                &watched
            )
            .await,
        Err(StoreError::NotFound(JobId(424_242)))
    );
    assert_eq!(seen.lock().expect("not poisoned").len(), calls);
    // The errors list grows one entry per failure, oldest first.
    store
        .fail_job(
            ack(&again_taken[0]),
            now + 1,
            &retry(now + 1, 60 * SECOND, "twice"),
        )
        .await
        .expect("failed");
    let messages: Vec<String> = get(&store, ids[2])
        .await
        .errors
        .into_iter()
        .map(|e| format!("{}:{}", e.attempt, e.message))
        .collect();
    assert_eq!(messages, ["1:again", "2:twice"]);

    // Reopened: the schedule, the dead job, the errors, and both policies as decisions see them.
    let store = reopen(backend, store, now + 1).await;
    let due = store
        .promote_due(now + 60 * SECOND, 100)
        .await
        .expect("promote");
    assert_eq!(due, 1, "the first job's retry");
    let retried = take(&store, &["q"], 1, now + 60 * SECOND).await;
    assert_eq!((taken_ids(&retried), retried[0].attempt), (vec![ids[0]], 2));
    let seen = Mutex::new(None);
    store
        .fail_job(ack(&retried[0]), now, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") =
                Some((ctx.job_policy.cloned(), queue_policy_of(ctx)));
            retry(now, 1, "x")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some((Some(fixed(60 * SECOND)), Some(fixed(5 * SECOND))))
    );
    close(store).await;
}

async fn expired_leases_go_to_the_decision(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 3], T0).await;
    let short = take_on(&store, &["q"], 1, 10 * SECOND, None, T0).await;
    let long = take_on(&store, &["q"], 2, 20 * SECOND, None, T0).await;
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 10 * SECOND)
    );

    let expiry = T0 + 10 * SECOND;
    assert_eq!(
        store
            .expire_leases(expiry - 1, 100, &again(expiry - 1, "lost"))
            .await,
        Ok(0)
    );
    assert_eq!(
        store
            .expire_leases(expiry, 100, &again(expiry, "lost"))
            .await,
        Ok(1)
    );
    let shown = get(&store, short[0].id).await;
    assert_eq!(
        (shown.state.status, shown.state.failures),
        (Status::Ready, 1)
    );
    assert_eq!(shown.errors.len(), 1);
    // Its old lease is gone.
    let results = store
        .complete_plain(&[ack(&short[0])], true, expiry)
        .await
        .expect("commit");
    assert!(matches!(results[0], Err(StoreError::NotInFlight { .. })));

    // A heartbeat moves a lease, never past the longest an attempt may be held (from the
    // take); a stale token cannot.
    const DAY: u64 = 86_400 * SECOND;
    let beat = store
        .extend_lease(ack(&long[0]), 30 * SECOND, DAY, T0 + 15 * SECOND)
        .await;
    assert_eq!(beat, Ok(T0 + 45 * SECOND));
    let capped = store
        .extend_lease(ack(&long[0]), 30 * SECOND, 40 * SECOND, T0 + 16 * SECOND)
        .await;
    assert_eq!(capped, Ok(T0 + 40 * SECOND));
    let stale = Ack {
        id: long[1].id,
        lease: long[0].lease_token,
    };
    assert_eq!(
        store.extend_lease(stale, 30 * SECOND, DAY, T0).await,
        Err(StoreError::LeaseLost { id: long[1].id })
    );
    let at = T0 + 20 * SECOND;
    assert_eq!(
        store.expire_leases(at, 100, &dead(at, "lease lost")).await,
        Ok(1)
    );
    assert_eq!(status(&store, long[1].id).await, Some(Status::Dead));
    assert_eq!(status(&store, long[0].id).await, Some(Status::InFlight));
    // At most `max` per call.
    let at = T0 + 45 * SECOND;
    assert_eq!(store.expire_leases(at, 0, &again(at, "lost")).await, Ok(0));
    assert_eq!(store.expire_leases(at, 1, &again(at, "lost")).await, Ok(1));
    assert_eq!(store.next_wakeup().await.expect("next wakeup"), None);
    assert_eq!(ids.len(), 3);

    let store = reopen(backend, store, at).await;
    let shown = get(&store, long[1].id).await;
    assert_eq!(
        (shown.state.status, shown.errors.len()),
        (Status::Dead, 1),
        "the dead job and its error survived"
    );
    close(store).await;
}

/// A queue's own expiry (a Zaqar claim's or pop's, which must see a message free as soon as
/// its claim's time is up) ends only that queue's leases; and a lease another task is ending
/// at that moment is waited for, not skipped and not ended twice, so the take right after
/// finds the job ready.
async fn a_queues_expiry_waits_for_a_lease_being_ended(backend: &impl Backend) {
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q"), job("r")], T0).await;
    let q = take_on(&store, &["q"], 1, 10 * SECOND, None, T0).await;
    let r = take_on(&store, &["r"], 1, 10 * SECOND, None, T0).await;
    let at = T0 + 10 * SECOND;
    let lost = again(at, "lost");
    assert_eq!(store.expire_leases_of("q", at - 1, &lost).await, Ok(0));
    assert_eq!(store.expire_leases_of("none", at, &lost).await, Ok(0));
    assert_eq!(store.expire_leases_of("q", at, &lost).await, Ok(1));
    assert_eq!(status(&store, q[0].id).await, Some(Status::Ready));
    assert_eq!(status(&store, r[0].id).await, Some(Status::InFlight));

    // The maintenance loop ends r's lease, slowly: its decision takes 300 ms, during which it
    // holds the job (a row lock; the index lock).
    // (A notification, not a poll of a flag with a timer: the timer's driver may be the
    // runtime thread the decision blocks.)
    let deciding = Arc::new(Notify::new());
    let slow = tokio::spawn({
        let (store, deciding) = (store.clone(), deciding.clone());
        async move {
            let lost = again(at, "lost");
            let slow = move |ctx: &DecideContext<'_>| {
                deciding.notify_one();
                std::thread::sleep(Duration::from_millis(300));
                lost(ctx)
            };
            store.expire_leases(at, 100, &slow).await
        }
    });
    deciding.notified().await;
    assert_eq!(
        store.expire_leases_of("r", at, &lost).await,
        Ok(0),
        "the lease being ended is ended once, by the one ending it"
    );
    let shown = get(&store, r[0].id).await;
    assert_eq!(
        (shown.state.status, shown.state.failures),
        (Status::Ready, 1),
        "once the queue's expiry returns, the job is ready, the attempt counted once"
    );
    assert_eq!(slow.await.expect("the slow expiry"), Ok(1));
    let again_taken = take_on(&store, &["r"], 1, 10 * SECOND, None, at).await;
    assert_eq!(again_taken[0].id, r[0].id);
    close(store).await;
}

/// Lease tokens are drawn, not counted: a worker cannot tell another's from its own, whether
/// the jobs were taken one by one or together, and every token is exact in a JavaScript
/// client (at most 2^53 - 1).
async fn lease_tokens_are_unpredictable_and_exact(backend: &impl Backend) {
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q"); 60], T0).await;
    let mut tokens: Vec<u64> = Vec::new();
    for _ in 0..20 {
        tokens.extend(
            take(&store, &["q"], 1, T0)
                .await
                .iter()
                .map(|j| j.lease_token.0),
        );
    }
    let batch = take(&store, &["q"], 40, T0).await;
    tokens.extend(batch.iter().map(|j| j.lease_token.0));
    assert_eq!(tokens.len(), 60);
    assert!(
        tokens.iter().all(|&t| (1..=MAX_EXACT_INTEGER).contains(&t)),
        "{tokens:?}"
    );
    let distinct: std::collections::HashSet<u64> = tokens.iter().copied().collect();
    assert_eq!(distinct.len(), tokens.len(), "{tokens:?}");
    // No token is a small step from another: neither consecutive takes nor jobs of one take
    // (ids in a row) have tokens in a row.
    let mut sorted = tokens.clone();
    sorted.sort_unstable();
    assert!(
        sorted.windows(2).all(|w| w[1] - w[0] > 1_000),
        "tokens close together: {sorted:?}"
    );
    // A neighbour's token is refused.
    let (a, b) = (&batch[0], &batch[1]);
    let guessed = Ack {
        id: b.id,
        lease: LeaseToken(a.lease_token.0 + 1),
    };
    let results = store
        .complete_plain(&[guessed], true, T0)
        .await
        .expect("complete");
    assert!(
        matches!(results[0], Err(StoreError::LeaseLost { .. })),
        "{results:?}"
    );
    close(store).await;
}

/// A lease ends at its expiry by the server's time, whether or not the maintenance loop has
/// ended it yet: from then on its worker's heartbeat, completion and failure are refused as
/// those of a lease taken over, and the job stays in flight for the expiry to decide.
async fn acknowledgements_after_a_leases_end_are_refused(backend: &impl Backend) {
    const DAY: u64 = 86_400 * SECOND;
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q"); 4], T0).await;
    let taken = take(&store, &["q"], 4, T0).await;
    let end = taken[0].lease_expires_at_ms;
    assert_eq!(end, T0 + 30 * SECOND);
    // Just before the end: a heartbeat holds the first a while longer.
    let extended = store
        .extend_lease(ack(&taken[0]), 30 * SECOND, DAY, end - 1)
        .await
        .expect("in time");
    assert_eq!(extended, end - 1 + 30 * SECOND);
    // At the end and after it, each of the others is refused.
    let lost = |job: &TakenJob| StoreError::LeaseLost { id: job.id };
    assert_eq!(
        store
            .extend_lease(ack(&taken[1]), 30 * SECOND, DAY, end)
            .await,
        Err(lost(&taken[1]))
    );
    let results = store
        .complete_plain(&[ack(&taken[2]), ack(&taken[0])], true, end + 1)
        .await
        .expect("one commit");
    assert_eq!(results, [Err(lost(&taken[2])), Ok(())]);
    assert_eq!(
        store
            .fail_job(ack(&taken[3]), end, &retry(end, SECOND, "late"))
            .await
            .map(drop),
        Err(lost(&taken[3]))
    );
    for job in &taken[1..] {
        assert_eq!(status(&store, job.id).await, Some(Status::InFlight));
    }
    close(store).await;
}

/// A job past its expiry is gone, for a take or a pop as for a read, even before the
/// maintenance loop has deleted it.
async fn takes_and_pops_skip_jobs_past_their_expiry(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let at = T0 + 5 * SECOND;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(at).priority(9),
            job("q"),
            job("q").expires(at + SECOND).priority(5),
            job("r").expires(at).priority(9),
            job("r"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["q"], 10, at).await;
    assert_eq!(taken_ids(&taken), [ids[2], ids[1]]);
    let queues = ["r".to_owned()];
    let popped = store.pop_jobs(&queues, 10, at).await.expect("pop");
    assert_eq!(popped.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[4]]);
    // Limited queues take their own (counted) path: it skips them too.
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                concurrency: Some(10),
                ..QueueConfig::default()
            })
        })
        .await
        .expect("limited");
    let late = enqueue(&store, vec![job("q").expires(at + SECOND)], T0).await[0];
    assert!(take(&store, &["q"], 10, at + SECOND).await.is_empty());
    assert_eq!(store.expire_jobs(at + SECOND, 100).await, Ok(4));
    assert_eq!(status(&store, late).await, None);
    close(store).await;
}

async fn due_jobs_are_promoted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").at(T0 + SECOND),
            job("q").at(T0 + 2 * SECOND),
            job("q").at(T0 + 2 * SECOND),
            job("q").at(T0 + 3 * SECOND),
        ],
        T0,
    )
    .await;
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + SECOND)
    );
    assert_eq!(
        store
            .promote_due(T0 + SECOND - 1, 100)
            .await
            .expect("promote"),
        0
    );
    assert!(take(&store, &["q"], 10, T0 + SECOND - 1).await.is_empty());
    assert_eq!(
        store.promote_due(T0 + SECOND, 100).await.expect("promote"),
        1
    );
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 2 * SECOND)
    );
    assert_eq!(status(&store, ids[0]).await, Some(Status::Ready));
    // At most `max` at a time.
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        1
    );
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        1
    );
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        0
    );
    let counts = store.counts().await.expect("counts");
    assert_eq!((counts[0].ready, counts[0].scheduled), (3, 1));

    // Reopened before the last one is due: it waits; after, it is ready.
    let store = reopen(backend, store, T0 + 2 * SECOND).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Scheduled));
    close(store).await;
    let store = backend.open(T0 + 3 * SECOND).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    assert_eq!(
        taken_ids(&take(&store, &["q"], 10, T0 + 3 * SECOND).await),
        ids
    );
    close(store).await;
}

async fn a_closed_stream_releases_its_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let seven = take_on(&store, &["q"], 2, 30 * SECOND, Some(ClaimId(7)), T0).await;
    let eight = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(8)), T0).await;
    let plain = take_on(&store, &["q"], 1, 30 * SECOND, None, T0).await;
    let nine = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(9)), T0).await;
    assert_eq!(
        (
            store.claim(ClaimId(7)).await.expect("claim").jobs.len(),
            store.claim(ClaimId(8)).await.expect("claim").jobs.len()
        ),
        (2, 1)
    );
    // An acknowledged job no longer counts against its stream.
    store
        .complete_plain(&[ack(&nine[0])], true, T0)
        .await
        .expect("completed");
    assert_eq!(store.claim(ClaimId(9)).await.expect("claim").jobs.len(), 0);

    assert_eq!(store.release_claim(ClaimId(7)).await.expect("release"), 2);
    assert_eq!(store.claim(ClaimId(7)).await.expect("claim").jobs.len(), 0);
    for job in &seven {
        let shown = get(&store, job.id).await;
        assert_eq!(
            (shown.state.status, shown.state.failures, shown.errors.len()),
            (Status::Ready, 0, 0),
            "released without an attempt"
        );
    }
    assert_eq!(status(&store, eight[0].id).await, Some(Status::InFlight));
    assert_eq!(status(&store, plain[0].id).await, Some(Status::InFlight));
    assert_eq!(
        store.release_claim(ClaimId(12_345)).await.expect("release"),
        0
    );
    assert_eq!(
        taken_ids(&take(&store, &["q"], 5, T0).await),
        taken_ids(&seven)
    );
    assert_eq!(ids.len(), 5);

    let store = reopen(backend, store, T0).await;
    let held = usize::from(store.properties().durable_leases);
    assert_eq!(
        store.claim(ClaimId(8)).await.expect("claim").jobs.len(),
        held
    );
    assert_eq!(status(&store, nine[0].id).await, Some(Status::Completed));
    close(store).await;
}

async fn dead_jobs_are_replayed(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![job("q"), job("q").kind("other"), job("r"), job("q")],
        T0,
    )
    .await;
    kill(&store, "q", &ids[..2], T0).await;
    kill(&store, "r", &ids[2..3], T0).await;
    let ready = ids[3];
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ready]);

    // By id: only dead jobs are replayed; failures are kept without a reset.
    let replayed = store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(vec![ids[0], ready]),
                    filter: JobFilter::default(),
                },
                policy: None,
                reset_attempts: false,
            },
            T0 + 5,
        )
        .await
        .expect("replayed");
    assert_eq!(
        replayed,
        Replayed {
            ids: vec![ids[0]],
            skipped: vec![(ready, NotReplayed::NotDead(Status::InFlight))],
        }
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.failures,
            shown.state.run_at_ms
        ),
        (Status::Ready, 1, T0 + 5)
    );
    assert_eq!(
        (shown.state.finished_at_ms, shown.state.dead_reason.clone()),
        (None, None)
    );
    assert_eq!(shown.errors.len(), 1, "the history is kept");
    assert_eq!(status(&store, ready).await, Some(Status::InFlight));

    // By filter, with a new policy and a fresh attempt count.
    let policy = fixed(90 * SECOND);
    let replayed = store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: None,
                    filter: JobFilter {
                        queue: Some("q".into()),
                        status: Some(Status::Dead),
                        kind: Some("other".into()),
                        ..JobFilter::default()
                    },
                },
                policy: Some(StoredPolicy::new(policy.clone())),
                reset_attempts: true,
            },
            T0 + 6,
        )
        .await
        .expect("replayed");
    assert_eq!(replayed.ids, [ids[1]]);
    assert!(replayed.skipped.is_empty());
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.failures,
            shown.state.first_failure_at_ms,
            shown.state.last_delay_ms
        ),
        (0, None, None)
    );
    assert_eq!(shown.spec.policy, Some(StoredPolicy::new(policy.clone())));
    assert_eq!(
        status(&store, ids[2]).await,
        Some(Status::Dead),
        "other queue"
    );

    // The replayed job fails again: the decision sees the new policy and attempt 1, and the
    // new error is added to the history, not written over it.
    let taken = take(&store, &["q"], 10, T0 + 7).await;
    let again = taken.iter().find(|t| t.id == ids[1]).expect("taken");
    assert_eq!(again.attempt, 1);
    let seen = Mutex::new(None);
    store
        .fail_job(ack(again), T0 + 7, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") = ctx.job_policy.cloned();
            dead(T0 + 7, "again")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some(policy.clone())
    );
    let errors: Vec<(u32, String)> = get(&store, ids[1])
        .await
        .errors
        .into_iter()
        .map(|e| (e.attempt, e.message))
        .collect();
    assert_eq!(errors, [(1, "fatal".to_owned()), (1, "again".to_owned())]);

    let store = reopen(backend, store, T0 + 8).await;
    assert_eq!(
        get(&store, ids[1]).await.spec.policy,
        Some(StoredPolicy::new(policy.clone()))
    );
    close(store).await;
}

/// A replay never makes two unfinished jobs share a unique key: a dead job whose key an
/// unfinished job holds stays dead and is reported; once the key is free it is replayed and
/// holds the key again.
async fn replay_respects_unique_keys(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let old = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    kill(&store, "q", &[old], T0).await;
    let new = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    let by_id = |ids: Vec<JobId>| Replay {
        selection: Selection {
            ids: Some(ids),
            filter: JobFilter {
                status: Some(Status::Dead),
                ..JobFilter::default()
            },
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = store
        .replay_jobs(&by_id(vec![old]), T0 + 1)
        .await
        .expect("answered");
    assert_eq!(
        replayed,
        Replayed {
            ids: vec![],
            skipped: vec![(
                old,
                NotReplayed::KeyHeld {
                    key: "k".into(),
                    holder: new
                }
            )],
        }
    );
    assert_eq!(status(&store, old).await, Some(Status::Dead));
    // By filter too.
    let all_dead = Replay {
        selection: Selection {
            ids: None,
            filter: JobFilter {
                status: Some(Status::Dead),
                ..JobFilter::default()
            },
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = store
        .replay_jobs(&all_dead, T0 + 1)
        .await
        .expect("answered");
    assert!(replayed.ids.is_empty());
    assert_eq!(replayed.skipped.len(), 1);
    // Two dead jobs with one key: only the first comes back.
    kill(&store, "q", &[new], T0 + 2).await;
    let replayed = store
        .replay_jobs(&by_id(vec![old, new, JobId(999_999)]), T0 + 3)
        .await
        .expect("answered");
    assert_eq!(replayed.ids, [old]);
    assert_eq!(
        replayed.skipped,
        [
            (
                new,
                NotReplayed::KeyHeld {
                    key: "k".into(),
                    holder: old
                }
            ),
            (JobId(999_999), NotReplayed::NotFound),
        ]
    );
    let refused = insert(&store, vec![job("q").key("k")], OnDuplicate::Refuse, T0 + 3).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(h), .. }) if h == old),
        "{refused:?}"
    );
    let store = reopen(backend, store, T0 + 4).await;
    let refused = insert(&store, vec![job("q").key("k")], OnDuplicate::Refuse, T0 + 4).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(h), .. }) if h == old),
        "{refused:?}"
    );
    close(store).await;
}

async fn jobs_are_deleted_by_selection(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").key("k"),
            job("q").kind("x"),
            job("q").kind("x"),
            job("r").kind("x"),
            job("q"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);

    // By id (an in-flight job too), ignoring ids that do not exist.
    let deleted = store
        .delete_jobs(&Selection {
            ids: Some(vec![ids[0], JobId(777_777)]),
            filter: JobFilter::default(),
        })
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[0]]);
    assert!(store.get_job(ids[0]).await.expect("readable").is_none());
    let results = store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[0]))]);
    // Its unique key is free.
    enqueue(&store, vec![job("q").key("k")], T0).await;

    // By filter: queue and type.
    let deleted = store
        .delete_jobs(&Selection {
            ids: None,
            filter: JobFilter {
                queue: Some("q".into()),
                status: None,
                kind: Some("x".into()),
                ..JobFilter::default()
            },
        })
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[1], ids[2]]);
    // Ids narrowed by the filter.
    let deleted = store
        .delete_jobs(&Selection {
            ids: Some(vec![ids[3], ids[4]]),
            filter: JobFilter {
                queue: Some("r".into()),
                status: Some(Status::Ready),
                kind: None,
                ..JobFilter::default()
            },
        })
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[3]]);
    let left = list(&store, JobFilter::default(), None, 100).await;
    assert_eq!(left.len(), 2);
    assert_eq!(left[0], ids[4]);

    let store = reopen(backend, store, T0).await;
    for id in &ids[..4] {
        assert!(
            store.get_job(*id).await.expect("readable").is_none(),
            "job {id}"
        );
    }
    close(store).await;
}

async fn finished_jobs_are_purged_after_retention(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let taken = take(&store, &["q"], 5, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0 + 1_000)
        .await
        .expect("done");
    store
        .complete_plain(&[ack(&taken[1])], true, T0 + 5_000)
        .await
        .expect("done");
    store
        .fail_job(ack(&taken[2]), T0 + 1_000, &dead(T0 + 1_000, "x"))
        .await
        .expect("dead");
    store
        .fail_job(ack(&taken[3]), T0 + 5_000, &dead(T0 + 5_000, "x"))
        .await
        .expect("dead");

    // Completed and dead jobs have their own cut-offs; unfinished jobs are never purged.
    assert_eq!(store.purge_finished(T0 + 999, T0 + 999, 100).await, Ok(0));
    assert_eq!(store.purge_finished(T0 + 2_000, T0, 100).await, Ok(1));
    assert_eq!(status(&store, ids[0]).await, None);
    assert_eq!(status(&store, ids[2]).await, Some(Status::Dead));
    assert_eq!(
        store.purge_finished(T0 + 2_000, T0 + 2_000, 100).await,
        Ok(1)
    );
    assert_eq!(status(&store, ids[2]).await, None);
    // At most `max` at a time.
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 1).await, Ok(1));
    let store = reopen(backend, store, T0).await;
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 1).await, Ok(1));
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 100).await, Ok(0));
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[4]]
    );
    assert_eq!(
        status(&store, ids[4]).await,
        Some(after_restart(store.properties(), Status::InFlight))
    );
    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[4]]
    );
    close(store).await;
}

async fn list_filters_and_pages(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("a").kind("x"),
            job("b").kind("y"),
            job("a").kind("y").at(T0 + SECOND),
            job("a").kind("x"),
            job("b").kind("x"),
            job("a").kind("x"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["b"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[1]]);
    let filter = |queue: Option<&str>, status: Option<Status>, kind: Option<&str>| JobFilter {
        queue: queue.map(str::to_owned),
        status,
        kind: kind.map(str::to_owned),
        ..JobFilter::default()
    };
    let pick = |indexes: &[usize]| indexes.iter().map(|i| ids[*i]).collect::<Vec<_>>();

    assert_eq!(list(&store, filter(None, None, None), None, 100).await, ids);
    assert_eq!(
        list(&store, filter(Some("a"), None, None), None, 100).await,
        pick(&[0, 2, 3, 5])
    );
    assert_eq!(
        list(
            &store,
            filter(None, Some(Status::Scheduled), None),
            None,
            100
        )
        .await,
        pick(&[2])
    );
    assert_eq!(
        list(
            &store,
            filter(None, Some(Status::InFlight), None),
            None,
            100
        )
        .await,
        pick(&[1])
    );
    assert_eq!(
        list(&store, filter(None, None, Some("x")), None, 100).await,
        pick(&[0, 3, 4, 5])
    );
    assert_eq!(
        list(
            &store,
            filter(Some("a"), Some(Status::Ready), Some("x")),
            None,
            100
        )
        .await,
        pick(&[0, 3, 5])
    );
    assert!(
        list(&store, filter(Some("zzz"), None, None), None, 100)
            .await
            .is_empty()
    );
    // Pages in id order, after a given id; a type filter pages by matching jobs.
    assert_eq!(
        list(&store, filter(None, None, None), None, 2).await,
        pick(&[0, 1])
    );
    assert_eq!(
        list(&store, filter(None, None, None), Some(ids[1]), 2).await,
        pick(&[2, 3])
    );
    assert_eq!(
        list(&store, filter(None, None, None), Some(ids[3]), 2).await,
        pick(&[4, 5])
    );
    assert!(
        list(&store, filter(None, None, None), Some(ids[5]), 2)
            .await
            .is_empty()
    );
    assert_eq!(
        list(&store, filter(None, None, Some("x")), Some(ids[0]), 2).await,
        pick(&[3, 4])
    );

    let store = reopen(backend, store, T0).await;
    let ready = if store.properties().durable_leases {
        pick(&[0, 3, 4, 5])
    } else {
        pick(&[0, 1, 3, 4, 5])
    };
    assert_eq!(
        list(&store, filter(None, Some(Status::Ready), None), None, 100).await,
        ready
    );
    close(store).await;
}

/// What the metrics read: each queue's backlog (unfinished and dead jobs by status) and when the
/// ready job first in line became ready (the heads the dashboard reads too), when a taken job
/// became ready, and what a lease was when it ends, which a shared backend must report (the
/// lease may be another server's).
async fn backlog_and_lease_facts_are_reported(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert!(store.backlog().await.expect("backlog").is_empty());
    enqueue(
        &store,
        vec![
            job("a").kind("mail").at(T0 - 5 * SECOND),
            job("a").kind("mail").at(T0 - 2 * SECOND),
            job("a").priority(5),
            job("a").at(T0 + SECOND),
            job("a"),
            job("b").at(T0 + SECOND),
        ],
        T0,
    )
    .await;
    let by_queue = |store: &Arc<dyn Store>| {
        let store = store.clone();
        async move {
            let mut backlog = store.backlog().await.expect("backlog");
            backlog.sort_by(|x, y| x.queue.cmp(&y.queue));
            backlog
        }
    };
    let backlog = by_queue(&store).await;
    let a = &backlog[0];
    assert_eq!(a.queue, "a");
    assert_eq!((a.scheduled, a.ready, a.in_flight, a.dead), (1, 4, 0, 0));
    let b = &backlog[1];
    assert_eq!((b.queue.as_str(), b.scheduled, b.ready), ("b", 1, 0));
    // First in line is the priority-5 job, ready since its enqueue; b has none ready.
    let queues = ["a".to_owned(), "b".to_owned()];
    let heads = || store.ready_since(&queues);
    assert_eq!(heads().await.expect("heads"), [Some(T0), None]);

    let taken = take(&store, &["a"], 3, T0 + 100).await;
    let ready_at: Vec<u64> = taken.iter().map(|t| t.ready_at_ms).collect();
    assert_eq!(ready_at, [T0, T0 - 5 * SECOND, T0 - 2 * SECOND]);
    let backlog = by_queue(&store).await;
    assert_eq!((backlog[0].ready, backlog[0].in_flight), (1, 3));
    assert_eq!(heads().await.expect("heads"), [Some(T0), None]);

    let done = store
        .complete_jobs(&[ack(&taken[1])], true, T0 + 300)
        .await
        .expect("commit");
    let shared = store.properties().shared;
    match &done[..] {
        [Ok(Some(facts))] => assert_eq!(
            facts,
            &LeaseFacts {
                queue: "a".into(),
                kind: "mail".into(),
                created_at_ms: T0,
                taken_at_ms: T0 + 100,
                traceparent: None,
            }
        ),
        [Ok(None)] => assert!(!shared, "a shared backend must report what a lease was"),
        other => panic!("{other:?}"),
    }
    let seen = Mutex::new(None);
    let dying = dead(T0 + 400, "fatal");
    store
        .fail_job(ack(&taken[2]), T0 + 400, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("lock") = Some(ctx.lease.clone());
            dying(ctx)
        })
        .await
        .expect("dead");
    match seen.into_inner().expect("lock").expect("decided") {
        Some(facts) => {
            assert_eq!((facts.queue.as_str(), facts.kind.as_str()), ("a", "mail"));
            assert_eq!(facts.taken_at_ms, T0 + 100);
        }
        None => assert!(!shared, "a shared backend must report what a lease was"),
    }
    let backlog = by_queue(&store).await;
    let a = &backlog[0];
    assert_eq!((a.scheduled, a.ready, a.in_flight, a.dead), (1, 1, 1, 1));
    close(store).await;
}

/// Newest first, by any mix of queue, type and status, with counts that agree: what the
/// dashboard's job pages ask.
async fn listings_page_both_ways_by_queue_type_and_status(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut jobs = Vec::new();
    for n in 0..30 {
        let queue = if n % 3 == 0 { "a" } else { "b" };
        let kind = if n % 2 == 0 { "even" } else { "odd" };
        jobs.push(job(queue).kind(kind));
    }
    let ids = enqueue(&store, jobs, T0).await;
    kill(&store, "a", &[ids[0], ids[3]], T0).await;
    let filter = |queue: Option<&str>, status: Option<Status>, kind: Option<&str>| JobFilter {
        queue: queue.map(str::to_owned),
        status,
        kind: kind.map(str::to_owned),
        ..JobFilter::default()
    };
    let newest = |filter: JobFilter, after: Option<JobId>, limit: usize| {
        let store = store.clone();
        async move {
            let page = Page {
                after,
                limit,
                order: Order::Descending,
            };
            let jobs = store.list_jobs(&filter, page).await.expect("list");
            jobs.iter().map(|j| j.id).collect::<Vec<_>>()
        }
    };
    let expected = |keep: &dyn Fn(usize) -> bool| -> Vec<JobId> {
        (0..30).rev().filter(|n| keep(*n)).map(|n| ids[n]).collect()
    };
    let b_odd = expected(&|n| n % 3 != 0 && n % 2 == 1);
    assert_eq!(
        newest(filter(Some("b"), None, Some("odd")), None, 100).await,
        b_odd
    );
    // Page by page from the cursor, newest first.
    let first = newest(filter(Some("b"), None, Some("odd")), None, 4).await;
    assert_eq!(first, b_odd[..4]);
    let second = newest(
        filter(Some("b"), None, Some("odd")),
        first.last().copied(),
        4,
    )
    .await;
    assert_eq!(second, b_odd[4..8]);
    let dead = filter(None, Some(Status::Dead), None);
    assert_eq!(newest(dead.clone(), None, 10).await, [ids[3], ids[0]]);
    let a_even_ready = filter(Some("a"), Some(Status::Ready), Some("even"));
    assert_eq!(
        newest(a_even_ready.clone(), None, 100).await,
        expected(&|n| n % 3 == 0 && n % 2 == 0 && n != 0)
    );
    // Counting up to a bound: the count and whether more match.
    let b_odd_filter = filter(Some("b"), None, Some("odd"));
    let n = b_odd.len() as u64;
    assert_eq!(
        store
            .count_jobs_upto(&b_odd_filter, n)
            .await
            .expect("count"),
        (n, false)
    );
    assert_eq!(
        store
            .count_jobs_upto(&b_odd_filter, 3)
            .await
            .expect("count"),
        (3, true)
    );
    assert_eq!(
        store.count_jobs_upto(&dead, 100).await.expect("count"),
        (2, false)
    );
    assert_eq!(store.count_jobs(&dead).await.expect("count"), 2);
    assert_eq!(
        store
            .count_jobs(&filter(Some("b"), None, Some("odd")))
            .await
            .expect("count"),
        b_odd.len() as u64
    );
    assert_eq!(
        store
            .count_jobs(&filter(None, None, Some("never")))
            .await
            .expect("count"),
        0
    );
    assert!(
        newest(filter(None, None, Some("never")), None, 10)
            .await
            .is_empty()
    );

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.count_jobs(&dead).await.expect("count"), 2);
    assert_eq!(
        store.count_jobs(&a_even_ready).await.expect("count"),
        expected(&|n| n % 3 == 0 && n % 2 == 0 && n != 0).len() as u64
    );
    close(store).await;
}

/// A search looks at no more than its budget, says where it stopped, and goes on from there;
/// it finds text in payloads and in errors, whatever the case.
async fn searches_are_bounded_and_go_on(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut jobs = Vec::new();
    for n in 0..20 {
        let payload = if n % 5 == 0 {
            json!({"customer": format!("ACME-{n}")})
        } else {
            json!({"customer": format!("other-{n}")})
        };
        jobs.push(job(if n < 10 { "q" } else { "r" }).payload(payload));
    }
    let ids = enqueue(&store, jobs, T0).await;
    // A failure whose message holds the text: found by its error.
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);
    store
        .fail_job(
            ack(&taken[0]),
            T0,
            &retry(T0, SECOND, "Gateway said \"acme down\""),
        )
        .await
        .expect("failed");
    let text = TextQuery::new("acme");
    let newest = |after: Option<JobId>| Page {
        after,
        limit: 100,
        order: Order::Descending,
    };
    let found = |s: &Searched| s.jobs.iter().map(|j| j.id).collect::<Vec<_>>();

    // Everything at once.
    let all = store
        .search_jobs(&JobFilter::default(), &text, newest(None), 1_000)
        .await
        .expect("searched");
    assert_eq!(found(&all), [ids[15], ids[10], ids[5], ids[0]]);
    assert!(all.exhausted);
    assert_eq!(all.looked_at, 20);

    // A budget of 7: looks at ids 19..=13, finds 15, and says where it stopped.
    let part = store
        .search_jobs(&JobFilter::default(), &text, newest(None), 7)
        .await
        .expect("searched");
    assert_eq!(found(&part), [ids[15]]);
    assert_eq!(
        (part.looked_at, part.looked_to, part.exhausted),
        (7, Some(ids[13]), false)
    );
    let rest = store
        .search_jobs(&JobFilter::default(), &text, newest(part.looked_to), 7)
        .await
        .expect("searched");
    assert_eq!(found(&rest), [ids[10]]);
    assert_eq!(rest.looked_to, Some(ids[6]));
    let last = store
        .search_jobs(&JobFilter::default(), &text, newest(rest.looked_to), 7)
        .await
        .expect("searched");
    assert_eq!(found(&last), [ids[5], ids[0]]);
    assert!(last.exhausted);

    // A full page stops the search at its last match.
    let page = Page {
        after: None,
        limit: 2,
        order: Order::Descending,
    };
    let two = store
        .search_jobs(&JobFilter::default(), &text, page, 1_000)
        .await
        .expect("searched");
    assert_eq!(found(&two), [ids[15], ids[10]]);
    assert_eq!((two.looked_to, two.exhausted), (Some(ids[10]), false));

    // With a filter; and text only in an error (its message, quotes and all).
    let in_q = store
        .search_jobs(&JobFilter::queue("q"), &text, newest(None), 1_000)
        .await
        .expect("searched");
    assert_eq!(found(&in_q), [ids[5], ids[0]]);
    let quoted = store
        .search_jobs(
            &JobFilter::default(),
            &TextQuery::new("\"ACME DOWN\""),
            newest(None),
            1_000,
        )
        .await
        .expect("searched");
    assert_eq!(found(&quoted), [ids[0]]);
    let none = store
        .search_jobs(
            &JobFilter::default(),
            &TextQuery::new("customer\"x"),
            newest(None),
            1_000,
        )
        .await
        .expect("searched");
    assert!(none.jobs.is_empty() && none.exhausted);
    close(store).await;
}

/// Run-now makes scheduled jobs ready at once, and their next run says an operator asked for
/// it; a replayed job's next run says it was replayed. Both survive a restart.
async fn runs_now_and_replays_mark_the_next_run(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").at(T0 + 60 * SECOND),
            job("q").at(T0 + 60 * SECOND),
            job("q"),
        ],
        T0,
    )
    .await;
    let ran = store
        .run_now(&[ids[1], ids[2], JobId(999_999)], T0 + 5)
        .await
        .expect("ran");
    assert_eq!(ran, [ids[1]], "only a scheduled job runs now");
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.run_at_ms,
            shown.state.trigger
        ),
        (Status::Ready, T0 + 5, Trigger::Manual)
    );
    assert_eq!(get(&store, ids[0]).await.state.status, Status::Scheduled);
    assert_eq!(get(&store, ids[2]).await.state.trigger, Trigger::Scheduled);

    let store = reopen(backend, store, T0 + 10).await;
    assert_eq!(get(&store, ids[1]).await.state.trigger, Trigger::Manual);
    let taken = take(&store, &["q"], 2, T0 + 10).await;
    let triggers: Vec<(JobId, Trigger)> = taken.iter().map(|t| (t.id, t.trigger)).collect();
    assert_eq!(
        triggers,
        [(ids[1], Trigger::Manual), (ids[2], Trigger::Scheduled)]
    );
    let dead = taken.iter().find(|t| t.id == ids[2]).expect("taken");
    store
        .fail_job(ack(dead), T0 + 10, &dead_now(T0 + 10))
        .await
        .expect("failed");
    store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(vec![ids[2]]),
                    filter: JobFilter::default(),
                },
                policy: None,
                reset_attempts: false,
            },
            T0 + 20,
        )
        .await
        .expect("replayed");
    assert_eq!(get(&store, ids[2]).await.state.trigger, Trigger::Replay);
    let store = reopen(backend, store, T0 + 20).await;
    let taken = take(&store, &["q"], 5, T0 + 20).await;
    let replayed = taken.iter().find(|t| t.id == ids[2]).expect("taken again");
    assert_eq!(replayed.trigger, Trigger::Replay);
    close(store).await;
}

/// A decision: dead at `now_ms`, its state cleared of any trigger as the engine's are.
fn dead_now(now_ms: u64) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let kill = dead(now_ms, "fatal");
    move |ctx| {
        let mut transition = kill(ctx);
        transition.state.trigger = Trigger::Scheduled;
        transition
    }
}

/// The head of each queue (the job a take hands out next) and when it became ready.
async fn heads_of_queues_tell_how_long_they_waited(backend: &impl Backend) {
    let store = backend.open(T0).await;
    enqueue(&store, vec![job("q")], T0).await;
    let later = job("q").priority(5).at(T0 + 100);
    enqueue(&store, vec![later, job("r").at(T0 + SECOND)], T0 + 100).await;
    let queues = ["q".to_owned(), "r".to_owned(), "none".to_owned()];
    // The head is the high-priority job, ready since T0 + 100; r has nothing ready.
    assert_eq!(
        store.ready_since(&queues).await.expect("heads"),
        [Some(T0 + 100), None, None]
    );
    assert!(store.ready_since(&[]).await.expect("heads").is_empty());
    close(store).await;
}

async fn counts_per_queue_and_status(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert!(store.counts().await.expect("counts").is_empty());
    let ids = enqueue(
        &store,
        vec![
            job("b"),
            job("a").at(T0 + SECOND),
            job("a"),
            job("a"),
            job("a"),
            job("c"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["a"], 3, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("done");
    store
        .fail_job(ack(&taken[1]), T0, &dead(T0, "x"))
        .await
        .expect("dead");
    store
        .delete_jobs(&Selection {
            ids: Some(vec![ids[5]]),
            filter: JobFilter::default(),
        })
        .await
        .expect("deleted");
    let counts =
        |queue: &str, [scheduled, ready, in_flight, completed, dead]: [u64; 5]| QueueCounts {
            queue: queue.to_owned(),
            scheduled,
            ready,
            in_flight,
            completed,
            dead,
        };
    // Sorted by queue; a queue with no jobs left is not listed.
    assert_eq!(
        store.counts().await.expect("counts"),
        [counts("a", [1, 0, 1, 1, 1]), counts("b", [0, 1, 0, 0, 0])]
    );

    // The scheduled job is due by now; the one in flight is ready unless leases are durable.
    let store = reopen(backend, store, T0 + SECOND).await;
    let a = if store.properties().durable_leases {
        counts("a", [0, 1, 1, 1, 1])
    } else {
        counts("a", [0, 2, 0, 1, 1])
    };
    assert_eq!(
        store.counts().await.expect("counts"),
        [a, counts("b", [0, 1, 0, 0, 0])]
    );
    close(store).await;
}

async fn queue_configs_are_kept(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.queue("x").await.expect("queue"), None);
    assert!(store.queues().await.expect("queues").is_empty());
    let paused = QueueConfig {
        policy: None,
        paused: true,
        ..QueueConfig::default()
    };
    store
        .update_queue("x", &|_| Some(paused.clone()))
        .await
        .expect("put");
    assert_eq!(store.queue("x").await.expect("queue"), Some(paused.clone()));
    enqueue(&store, vec![job("jobs-only")], T0).await;
    // Queues with settings, and queues that only have jobs (with default settings).
    assert_eq!(
        store.queues().await.expect("queues"),
        [
            ("jobs-only".to_owned(), QueueConfig::default()),
            ("x".to_owned(), paused)
        ]
    );
    let policy = fixed(7 * SECOND);
    let configured = QueueConfig {
        policy: Some(StoredPolicy::new(policy.clone())),
        paused: false,
        ..QueueConfig::default()
    };
    store
        .update_queue("x", &|_| Some(configured.clone()))
        .await
        .expect("put");
    assert_eq!(
        store.queue("x").await.expect("queue"),
        Some(configured.clone())
    );
    store
        .update_queue("y", &|_| Some(QueueConfig::default()))
        .await
        .expect("put");

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.queue("x").await.expect("queue"), Some(configured));
    assert_eq!(
        store.queue("y").await.expect("queue"),
        Some(QueueConfig::default())
    );
    // The queue policy reaches decisions after a reopen.
    let id = enqueue(&store, vec![job("x")], T0).await[0];
    let taken = take(&store, &["x"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [id]);
    let seen = Mutex::new(None);
    store
        .fail_job(ack(&taken[0]), T0, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") = queue_policy_of(ctx);
            dead(T0, "x")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(seen.into_inner().expect("not poisoned"), Some(policy));
    close(store).await;
}

/// What a restart does to leases is the backend's declared property. Without durable leases,
/// every job in flight is ready again: a restart is not an attempt, the old lease tokens are
/// refused, and claims hold nothing. With them, the jobs are still leased to the same tokens
/// and claims until the same time, and their holders complete them.
async fn leases_across_a_restart_follow_the_declared_property(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let properties = store.properties();
    let ids = enqueue(
        &store,
        vec![
            job("q").priority(2),
            job("q").priority(1),
            job("q"),
            job("q").priority(-1),
        ],
        T0,
    )
    .await;
    let plain = take_on(&store, &["q"], 1, 30 * SECOND, None, T0).await;
    let streamed = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(5)), T0).await;
    // The third fails once and is taken again: its second attempt is in flight.
    let failing = take(&store, &["q"], 1, T0).await;
    store
        .fail_job(ack(&failing[0]), T0, &retry(T0, 0, "boom"))
        .await
        .expect("failed");
    let retried = take_on(&store, &["q"], 1, 40 * SECOND, None, T0 + 1).await;
    let in_flight = [&plain[0], &streamed[0], &retried[0]];
    assert_eq!(
        in_flight
            .iter()
            .map(|j| (j.id, j.attempt))
            .collect::<Vec<_>>(),
        [(ids[0], 1), (ids[1], 1), (ids[2], 2)]
    );
    let acks: Vec<Ack> = in_flight.iter().map(|j| ack(j)).collect();

    let now = T0 + SECOND;
    let store = reopen(backend, store, now).await;
    let peeks = store.peek_jobs(&ids[..3]).await.expect("peeks");
    if properties.durable_leases {
        for (job, peek) in in_flight.iter().zip(&peeks) {
            let peek = peek.as_ref().expect("the job");
            assert_eq!(
                (peek.status, peek.lease_expires_at_ms),
                (Status::InFlight, Some(job.lease_expires_at_ms)),
                "job {}",
                job.id
            );
        }
        assert_eq!(peeks[1].as_ref().and_then(|p| p.claim), Some(ClaimId(5)));
        let claimed: Vec<JobId> = store
            .claim(ClaimId(5))
            .await
            .expect("claim")
            .jobs
            .iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(claimed, [ids[1]]);
        assert_eq!(taken_ids(&take(&store, &["q"], 10, now).await), [ids[3]]);
        let results = store
            .complete_plain(&acks, true, now)
            .await
            .expect("commit");
        assert_eq!(
            results,
            [Ok(()), Ok(()), Ok(())],
            "the holders still hold them"
        );
    } else {
        let seen: Vec<(Status, u32, Option<ClaimId>, Option<u64>)> = peeks
            .iter()
            .map(|p| {
                let p = p.as_ref().expect("the job");
                (p.status, p.failures, p.claim, p.lease_expires_at_ms)
            })
            .collect();
        assert_eq!(
            seen,
            [
                (Status::Ready, 0, None, None),
                (Status::Ready, 0, None, None),
                (Status::Ready, 1, None, None)
            ],
            "ready again, and a restart is not an attempt"
        );
        assert!(
            store
                .claim(ClaimId(5))
                .await
                .expect("claim")
                .jobs
                .is_empty()
        );
        let results = store
            .complete_plain(&acks, true, now)
            .await
            .expect("commit");
        assert_eq!(
            results,
            ids[..3]
                .iter()
                .map(|id| Err(StoreError::NotInFlight {
                    id: *id,
                    status: Status::Ready
                }))
                .collect::<Vec<_>>(),
            "the old leases are gone"
        );
        let again = take(&store, &["q"], 10, now).await;
        assert_eq!(taken_ids(&again), ids);
        assert_eq!(
            again.iter().map(|j| j.attempt).collect::<Vec<_>>(),
            [1, 1, 2, 1]
        );
        assert!(
            again
                .iter()
                .all(|j| acks.iter().all(|a| a.lease != j.lease_token)),
            "new leases have new tokens"
        );
    }
    close(store).await;
}

/// A claim: leases taken together under one id, with a record of their terms. Renewed, its
/// leases move and its jobs live at least as long as asked; ended, each job goes by the
/// decision; over, its record is forgotten by the upkeep that expires leases.
async fn claims_are_renewed_ended_and_forgotten(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(T0 + 12 * SECOND),
            job("q"),
            job("q"),
            job("q"),
        ],
        T0,
    )
    .await;
    let queues = vec!["q".to_owned()];
    let record = ClaimRecord {
        queue: "q".into(),
        lease_ms: 10 * SECOND,
        grace_ms: 5 * SECOND,
        renewed_at_ms: T0,
    };
    let claim = ClaimId(41);
    let request = TakeRequest {
        claim: Some(claim),
        record: Some(record.clone()),
        keep_until_ms: Some(T0 + 15 * SECOND),
        ..TakeRequest::new(&queues, 2, 10 * SECOND)
    };
    let taken = store.take_jobs(&request, T0).await.expect("taken").jobs;
    assert_eq!(taken_ids(&taken), ids[..2]);
    // A job with an expiry lives at least as long as the claim keeps it; one without has none.
    assert_eq!(
        taken.iter().map(|j| j.expires_at_ms).collect::<Vec<_>>(),
        [Some(T0 + 15 * SECOND), None]
    );
    let held = |id: JobId, until: u64, failures: u32| ClaimedJob {
        id,
        lease_expires_at_ms: until,
        failures,
    };
    assert_eq!(
        store.claim(claim).await,
        Ok(Claim {
            record: Some(record.clone()),
            jobs: vec![
                held(ids[0], T0 + 10 * SECOND, 0),
                held(ids[1], T0 + 10 * SECOND, 0)
            ],
        })
    );
    // A claim that takes nothing records nothing.
    let nobody = vec!["nobody".to_owned()];
    let empty = TakeRequest {
        claim: Some(ClaimId(42)),
        record: Some(record.clone()),
        ..TakeRequest::new(&nobody, 5, 10 * SECOND)
    };
    assert!(
        store
            .take_jobs(&empty, T0)
            .await
            .expect("take")
            .jobs
            .is_empty()
    );
    assert_eq!(store.claim(ClaimId(42)).await, Ok(Claim::default()));

    // Renewed: every lease moves, the jobs live at least until asked, the record is replaced.
    let renewed = ClaimRecord {
        lease_ms: 20 * SECOND,
        grace_ms: 10 * SECOND,
        renewed_at_ms: T0 + 5 * SECOND,
        ..record.clone()
    };
    let extended = store
        .extend_claim(
            claim,
            20 * SECOND,
            Some(T0 + 40 * SECOND),
            Some(renewed.clone()),
            T0 + 5 * SECOND,
        )
        .await;
    assert_eq!(extended, Ok(2));
    assert_eq!(
        store.claim(claim).await,
        Ok(Claim {
            record: Some(renewed.clone()),
            jobs: vec![
                held(ids[0], T0 + 25 * SECOND, 0),
                held(ids[1], T0 + 25 * SECOND, 0)
            ],
        })
    );
    let peeks = store.peek_jobs(&ids[..2]).await.expect("peeks");
    assert_eq!(
        peeks
            .iter()
            .map(|p| p.as_ref().map(|p| (p.expires_at_ms, p.claim)))
            .collect::<Vec<_>>(),
        [
            Some((Some(T0 + 40 * SECOND), Some(claim))),
            Some((None, Some(claim)))
        ]
    );
    // The old end of the leases has no effect any more.
    let at = T0 + 10 * SECOND;
    assert_eq!(
        store.expire_leases(at, 100, &again(at, "lost")).await,
        Ok(0)
    );
    assert_eq!(
        store
            .extend_claim(ClaimId(43), 20 * SECOND, None, None, T0)
            .await,
        Ok(0),
        "a claim that holds nothing renews nothing"
    );

    // A job completed under the claim leaves it.
    let done = store
        .complete_plain(&[ack(&taken[1])], true, T0 + 6 * SECOND)
        .await
        .expect("commit");
    assert_eq!(done, [Ok(())]);
    assert_eq!(
        store.claim(claim).await.expect("claim").jobs,
        [held(ids[0], T0 + 25 * SECOND, 0)]
    );

    // Ended: each job it holds goes by the decision, as if its lease had expired now; the record
    // goes.
    let now = T0 + 7 * SECOND;
    let seen = Mutex::new(Vec::new());
    let ended = store
        .end_claim(claim, now, &|ctx: &DecideContext<'_>| {
            seen.lock().expect("not poisoned").push(ctx.id);
            again(now, "claim deleted")(ctx)
        })
        .await;
    assert_eq!(ended, Ok(1));
    assert_eq!(*seen.lock().expect("not poisoned"), [ids[0]]);
    let shown = get(&store, ids[0]).await;
    assert_eq!(
        (shown.state.status, shown.state.failures, shown.errors.len()),
        (Status::Ready, 1, 1)
    );
    assert_eq!(shown.errors[0].message, "claim deleted");
    assert_eq!(store.claim(claim).await, Ok(Claim::default()));
    let stale = store
        .complete_plain(&[ack(&taken[0])], true, now)
        .await
        .expect("commit");
    assert_eq!(
        stale,
        [Err(StoreError::NotInFlight {
            id: ids[0],
            status: Status::Ready
        })]
    );
    let calls = Mutex::new(0);
    let ended = store
        .end_claim(ClaimId(44), now, &|ctx: &DecideContext<'_>| {
            *calls.lock().expect("not poisoned") += 1;
            dead(now, "never")(ctx)
        })
        .await;
    assert_eq!(ended, Ok(0));
    assert_eq!(*calls.lock().expect("not poisoned"), 0);

    // A claim's record stays while its lease and grace last, even once it holds no job, and is
    // forgotten after, by the upkeep that expires leases.
    let brief = ClaimRecord {
        lease_ms: SECOND,
        grace_ms: SECOND,
        renewed_at_ms: now,
        ..record.clone()
    };
    let short = TakeRequest {
        claim: Some(ClaimId(45)),
        record: Some(brief.clone()),
        ..TakeRequest::new(&queues, 1, SECOND)
    };
    let briefly = store.take_jobs(&short, now).await.expect("taken").jobs;
    assert_eq!(taken_ids(&briefly), [ids[0]]);
    store
        .complete_plain(&[ack(&briefly[0])], true, now)
        .await
        .expect("commit");
    let over = now + 2 * SECOND;
    assert_eq!(
        store
            .expire_leases(over - 1, 100, &again(over - 1, "lost"))
            .await,
        Ok(0)
    );
    assert_eq!(
        store.claim(ClaimId(45)).await,
        Ok(Claim {
            record: Some(brief),
            jobs: vec![]
        })
    );
    let later = over + SECOND;
    assert_eq!(
        store.expire_leases(later, 100, &again(later, "lost")).await,
        Ok(0)
    );
    assert_eq!(store.claim(ClaimId(45)).await, Ok(Claim::default()));

    // A claim in flight across a restart: kept only by a backend whose leases are durable.
    let lasting = ClaimRecord {
        lease_ms: 60 * SECOND,
        grace_ms: 0,
        renewed_at_ms: later,
        ..record.clone()
    };
    let request = TakeRequest {
        claim: Some(ClaimId(46)),
        record: Some(lasting.clone()),
        ..TakeRequest::new(&queues, 1, 60 * SECOND)
    };
    let kept = store.take_jobs(&request, later).await.expect("taken").jobs;
    assert_eq!(taken_ids(&kept), [ids[2]]);
    // The time a claim kept a job alive to is part of the claim, so it lasts as claims do.
    // (Closed and opened by hand: `reopen` cannot know a job's expiry before its claim.)
    let durable = store.properties().durable_leases;
    close(store).await;
    let store = backend.open(later).await;
    let (want, expiry) = if durable {
        let claim = Claim {
            record: Some(lasting),
            jobs: vec![held(ids[2], later + 60 * SECOND, 0)],
        };
        (claim, T0 + 40 * SECOND)
    } else {
        (Claim::default(), T0 + 12 * SECOND)
    };
    assert_eq!(store.claim(ClaimId(46)).await, Ok(want));
    let shown = get(&store, ids[0]).await;
    assert_eq!(
        (shown.state.status, shown.spec.expires_at_ms),
        (Status::Completed, Some(expiry))
    );
    close(store).await;
}

/// Pop: the ready jobs a take would lease, deleted instead and returned as they were.
async fn pop_takes_and_deletes_ready_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    store
        .update_queue("paused", &|_| {
            Some(QueueConfig {
                paused: true,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("paused");
    let flying = enqueue(&store, vec![job("q").priority(20)], T0).await[0];
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [flying]);
    let ids = enqueue(
        &store,
        vec![
            job("q").payload(json!({"n": 0})),
            job("q").priority(5).key("k").payload(json!({"n": 1})),
            job("q").at(T0 + SECOND).priority(9),
            job("r").priority(1),
            job("paused").priority(9),
            job("q"),
        ],
        T0,
    )
    .await;
    let queues: Vec<String> = ["q", "r", "paused"].map(str::to_owned).to_vec();
    assert!(
        store
            .pop_jobs(&queues, 0, T0)
            .await
            .expect("pop")
            .is_empty()
    );
    let popped = store.pop_jobs(&queues, 2, T0).await.expect("pop");
    assert_eq!(
        popped.iter().map(|j| j.id).collect::<Vec<_>>(),
        [ids[1], ids[3]],
        "by priority, then age"
    );
    let first = &popped[0];
    assert_eq!(
        (
            first.spec.queue.as_str(),
            first.spec.payload.get(),
            first.spec.unique_key.as_deref(),
            first.state.status
        ),
        ("q", r#"{"n":1}"#, Some("k"), Status::Ready),
        "as it was"
    );
    assert!(store.get_job(ids[1]).await.expect("readable").is_none());
    assert!(store.get_job(ids[3]).await.expect("readable").is_none());
    // Its unique key is free.
    let keyed = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    // Never a scheduled, in-flight or paused job.
    let rest = store.pop_jobs(&queues, 10, T0).await.expect("pop");
    assert_eq!(
        rest.iter().map(|j| j.id).collect::<Vec<_>>(),
        [ids[0], ids[5], keyed]
    );
    assert!(
        store
            .pop_jobs(&queues, 10, T0)
            .await
            .expect("pop")
            .is_empty()
    );
    assert_eq!(status(&store, flying).await, Some(Status::InFlight));
    assert_eq!(status(&store, ids[2]).await, Some(Status::Scheduled));
    assert_eq!(status(&store, ids[4]).await, Some(Status::Ready));

    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [flying, ids[2], ids[4]]
    );
    close(store).await;
}

/// Peeks show a job's queue and state without its body; a checked delete judges each job as it
/// is under the store's serialisation, and deletes only what the check accepts.
async fn peeks_and_checked_deletes_see_the_current_state(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(T0 + 60 * SECOND),
            job("q"),
            job("q"),
            job("r").at(T0 + 5 * SECOND),
            job("q"),
        ],
        T0,
    )
    .await;
    let claimed = take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(3)), T0).await;
    let plain = take_on(&store, &["q"], 1, 20 * SECOND, None, T0).await;
    assert_eq!(
        taken_ids(&[claimed.clone(), plain.clone()].concat()),
        ids[..2]
    );
    kill(&store, "q", &[ids[2]], T0).await;
    let missing = JobId(999_999);
    let peek = |queue: &str,
                status: Status,
                failures: u32,
                expires: Option<u64>,
                claim: Option<ClaimId>,
                lease: Option<u64>| {
        Some(JobPeek {
            queue: Arc::from(queue),
            status,
            failures,
            expires_at_ms: expires,
            claim,
            lease_expires_at_ms: lease,
        })
    };
    let want = [
        peek(
            "q",
            Status::InFlight,
            0,
            Some(T0 + 60 * SECOND),
            Some(ClaimId(3)),
            Some(T0 + 30 * SECOND),
        ),
        peek("q", Status::InFlight, 0, None, None, Some(T0 + 20 * SECOND)),
        peek("q", Status::Dead, 1, None, None, None),
        peek("r", Status::Scheduled, 0, None, None, None),
        peek("q", Status::Ready, 0, None, None, None),
        None,
    ];
    let peeks = store
        .peek_jobs(&[ids[0], ids[1], ids[2], ids[3], ids[4], missing, ids[0]])
        .await
        .expect("peeks");
    assert_eq!(peeks[..6], want);
    assert_eq!(peeks[6], want[0], "one answer per id, repeats too");
    assert!(store.peek_jobs(&[]).await.expect("peeks").is_empty());

    // Deletes what no lease holds: the check sees each job as it is, and is not asked about a
    // job that does not exist.
    let seen = Mutex::new(Vec::new());
    let checked = store
        .delete_checked(
            &[ids[0], ids[1], ids[2], missing, ids[4]],
            &|peek: &JobPeek| {
                seen.lock().expect("not poisoned").push(peek.status);
                peek.status != Status::InFlight
            },
        )
        .await
        .expect("checked");
    let check = |id: JobId, peek: &Option<JobPeek>, deleted: bool| Checked {
        id,
        peek: peek.clone(),
        deleted,
    };
    assert_eq!(
        checked,
        [
            check(ids[0], &want[0], false),
            check(ids[1], &want[1], false),
            check(ids[2], &want[2], true),
            check(missing, &None, false),
            check(ids[4], &want[4], true),
        ]
    );
    assert_eq!(
        *seen.lock().expect("not poisoned"),
        [
            Status::InFlight,
            Status::InFlight,
            Status::Dead,
            Status::Ready
        ]
    );
    assert_eq!(
        store.peek_jobs(&[ids[2], ids[4]]).await.expect("peeks"),
        [None, None]
    );
    // A job held by a claim, deleted under that claim: gone from the claim too.
    let checked = store
        .delete_checked(&[ids[0], ids[1]], &|peek: &JobPeek| {
            peek.claim == Some(ClaimId(3))
        })
        .await
        .expect("checked");
    assert_eq!(
        checked.iter().map(|c| c.deleted).collect::<Vec<_>>(),
        [true, false]
    );
    assert!(
        store
            .claim(ClaimId(3))
            .await
            .expect("claim")
            .jobs
            .is_empty()
    );
    let results = store
        .complete_plain(&[ack(&claimed[0]), ack(&plain[0])], true, T0)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[0])), Ok(())]);

    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[1], ids[3]]
    );
    close(store).await;
}

/// The conditions messages are listed by (finished since, live, not scheduled, claimed or
/// free, not one's own), newest first too; and counts agree with listings.
async fn list_filters_for_messages_and_counts_agree(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let completed = enqueue(&store, vec![job("q")], T0).await[0];
    let taken = take(&store, &["q"], 1, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0 + SECOND)
        .await
        .expect("completed");
    let died = enqueue(&store, vec![job("q")], T0).await[0];
    kill(&store, "q", &[died], T0 + 2 * SECOND).await;
    let claimed = enqueue(&store, vec![job("q")], T0).await[0];
    take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(9)), T0).await;
    let leased = enqueue(&store, vec![job("q")], T0).await[0];
    take(&store, &["q"], 1, T0).await;
    let rest = enqueue(
        &store,
        vec![
            job("q").origin("c1"),
            job("q").origin("c2").expires(T0 + 5 * SECOND),
            job("q").at(T0 + 10 * SECOND),
            job("r"),
        ],
        T0,
    )
    .await;
    let [own, expiring, scheduled, other] = [rest[0], rest[1], rest[2], rest[3]];
    let all = [
        completed, died, claimed, leased, own, expiring, scheduled, other,
    ];
    let now = T0 + 3 * SECOND;

    let check = async |filter: JobFilter, want: &[JobId]| {
        assert_eq!(
            list(&store, filter.clone(), None, 100).await,
            want,
            "{filter:?}"
        );
        assert_eq!(
            store.count_jobs(&filter).await,
            Ok(want.len() as u64),
            "{filter:?}"
        );
    };
    check(JobFilter::default(), &all).await;
    let since = |at: u64| JobFilter {
        finished_since_ms: Some(at),
        ..JobFilter::default()
    };
    check(since(T0 + SECOND), &[completed, died]).await;
    check(since(T0 + SECOND + 1), &[died]).await;
    let live = |at: u64| JobFilter {
        live_at_ms: Some(at),
        ..JobFilter::default()
    };
    check(
        live(now),
        &[claimed, leased, own, expiring, scheduled, other],
    )
    .await;
    check(
        live(T0 + 5 * SECOND),
        &[claimed, leased, own, scheduled, other],
    )
    .await;
    let not_scheduled = JobFilter {
        not_scheduled: true,
        ..JobFilter::default()
    };
    check(
        not_scheduled,
        &[completed, died, claimed, leased, own, expiring, other],
    )
    .await;
    let claimed_at = |held: bool, at: u64| JobFilter {
        claimed_at: Some((held, at)),
        ..JobFilter::default()
    };
    check(claimed_at(true, now), &[claimed]).await;
    check(
        claimed_at(false, now),
        &[completed, died, leased, own, expiring, scheduled, other],
    )
    .await;
    check(claimed_at(true, T0 + 30 * SECOND), &[]).await;
    let not_mine = JobFilter {
        not_origin: Some("c1".into()),
        ..JobFilter::default()
    };
    check(
        not_mine,
        &[completed, died, claimed, leased, expiring, scheduled, other],
    )
    .await;
    // Zaqar's free messages of a queue that are not one's own: every condition at once.
    let free = JobFilter {
        queue: Some("q".into()),
        live_at_ms: Some(now),
        not_scheduled: true,
        claimed_at: Some((false, now)),
        not_origin: Some("c1".into()),
        ..JobFilter::default()
    };
    check(free, &[leased, expiring]).await;

    // Newest first, paged backwards.
    let newest = |after: Option<JobId>, limit: usize| Page {
        after,
        limit,
        order: Order::Descending,
    };
    let page = store
        .list_jobs(&JobFilter::default(), newest(None, 3))
        .await
        .expect("list");
    assert_eq!(
        page.iter().map(|j| j.id).collect::<Vec<_>>(),
        [other, scheduled, expiring]
    );
    let page = store
        .list_jobs(&JobFilter::queue("q"), newest(Some(expiring), 2))
        .await
        .expect("list");
    assert_eq!(page.iter().map(|j| j.id).collect::<Vec<_>>(), [own, leased]);

    // One queue's counts, and a queue without jobs (zeros, under its name).
    let counts =
        |queue: &str, [scheduled, ready, in_flight, completed, dead]: [u64; 5]| QueueCounts {
            queue: queue.to_owned(),
            scheduled,
            ready,
            in_flight,
            completed,
            dead,
        };
    assert_eq!(
        store.queue_counts("q").await,
        Ok(counts("q", [1, 2, 2, 1, 1]))
    );
    assert_eq!(
        store.queue_counts("r").await,
        Ok(counts("r", [0, 1, 0, 0, 0]))
    );
    assert_eq!(
        store.queue_counts("nobody").await,
        Ok(counts("nobody", [0; 5]))
    );
    assert_eq!(
        store.counts().await,
        Ok(vec![
            counts("q", [1, 2, 2, 1, 1]),
            counts("r", [0, 1, 0, 0, 0])
        ])
    );
    let store = reopen(backend, store, now).await;
    assert_eq!(
        store.count_jobs(&JobFilter::default()).await,
        Ok(all.len() as u64)
    );
    close(store).await;
}

/// Jobs past their expiry are deleted whatever their status, at most `max` at a time, and the
/// next expiry is when upkeep next has work.
async fn expired_jobs_are_deleted_whatever_their_status(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.next_wakeup().await, Ok(None), "nothing to do");
    let at = T0 + 5 * SECOND;
    let completed = enqueue(&store, vec![job("q").expires(at)], T0).await[0];
    let taken = take(&store, &["q"], 1, T0).await;
    store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    let died = enqueue(&store, vec![job("q").expires(at)], T0).await[0];
    kill(&store, "q", &[died], T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").expires(at).key("k"),
            job("q").expires(at).at(T0 + 60 * SECOND),
            job("q").expires(at).priority(1),
            job("q"),
            job("q").expires(at + SECOND),
        ],
        T0,
    )
    .await;
    let flying = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&flying), [ids[2]]);
    // The earliest of a scheduled job (T0 + 60 s), a lease (T0 + 30 s) and an expiry (T0 + 5 s).
    assert_eq!(store.next_wakeup().await, Ok(Some(at)));

    assert_eq!(store.expire_jobs(at - 1, 100).await, Ok(0));
    assert_eq!(store.expire_jobs(at, 2).await, Ok(2), "at most `max`");
    assert_eq!(store.expire_jobs(at, 100).await, Ok(3));
    assert_eq!(store.expire_jobs(at, 100).await, Ok(0));
    for id in [completed, died, ids[0], ids[1], ids[2]] {
        assert!(
            store.get_job(id).await.expect("readable").is_none(),
            "job {id}"
        );
    }
    let results = store
        .complete_plain(&[ack(&flying[0])], true, at)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[2]))]);
    // Its key is free; the lease went with the job.
    let keyed = enqueue(&store, vec![job("q").key("k")], at).await[0];
    assert_eq!(store.next_wakeup().await, Ok(Some(at + SECOND)));

    let store = reopen(backend, store, at).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[3], ids[4], keyed]
    );
    assert_eq!(store.next_wakeup().await, Ok(Some(at + SECOND)));
    assert_eq!(store.expire_jobs(at + SECOND, 100).await, Ok(1));
    assert_eq!(store.next_wakeup().await, Ok(None));
    close(store).await;
}

/// Subscriptions: stored with an assigned id, listed by queue, changed atomically, deleted.
async fn subscriptions_are_stored_changed_and_deleted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.subscriptions(None).await, Ok(vec![]));
    let insert = async |queue: &str, endpoint: &str| {
        let (stored, created) = store
            .insert_subscription(subscription(queue, endpoint))
            .await
            .expect("stored");
        assert!(created, "{endpoint}");
        stored
    };
    let a = insert("q", "https://a.example/").await;
    let b = insert("r", "https://b.example/").await;
    let c = insert("q", "https://c.example/").await;
    assert!(a.id < b.id && b.id < c.id, "ids increase");
    // Stored as given, with its id.
    let mut given = subscription("q", "https://a.example/");
    given.id = a.id;
    assert_eq!(a, given);
    assert_eq!(store.subscription(a.id).await, Ok(Some(a.clone())));
    assert_eq!(
        store.subscriptions(None).await,
        Ok(vec![a.clone(), b.clone(), c.clone()])
    );
    assert_eq!(
        store.subscriptions(Some("q")).await,
        Ok(vec![a.clone(), c.clone()])
    );
    assert_eq!(store.subscriptions(Some("nobody")).await, Ok(vec![]));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![a.id, c.id]));
    assert_eq!(subscribers(&store, "nobody").await, Ok(vec![]));

    // Changed: the change sees the stored subscription, and what it returns is stored.
    let seen = Mutex::new(Vec::new());
    let changed = store
        .update_subscription(a.id, &|current: &Subscription| {
            seen.lock().expect("not poisoned").push(current.clone());
            let mut next = current.clone();
            next.enabled = false;
            next.disabled_reason = Some("failing for a day".into());
            next.health.failing_since_ms = Some(T0 + 1);
            next.updated_at_ms = T0 + 2;
            Some(next)
        })
        .await
        .expect("changed");
    assert!(
        seen.lock().expect("not poisoned").iter().all(|s| *s == a),
        "the change saw the stored subscription"
    );
    assert_eq!(
        (
            changed.id,
            changed.enabled,
            changed.health.failing_since_ms,
            changed.endpoint.as_str()
        ),
        (a.id, false, Some(T0 + 1), "https://a.example/")
    );
    assert_eq!(store.subscription(a.id).await, Ok(Some(changed.clone())));
    // A change that declines leaves it, and answers with it as stored.
    assert_eq!(
        store.update_subscription(a.id, &|_| None).await,
        Ok(changed.clone())
    );

    // Deleted (with its deliveries: none here); then there is none to change or delete.
    assert_eq!(store.delete_subscription(c.id).await, Ok(0));
    assert_eq!(store.subscription(c.id).await, Ok(None));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![a.id]));
    assert_eq!(
        store.delete_subscription(c.id).await,
        Err(StoreError::NoSubscription(c.id))
    );
    assert_eq!(
        store
            .update_subscription(c.id, &|s: &Subscription| Some(s.clone()))
            .await,
        Err(StoreError::NoSubscription(c.id))
    );

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(changed)));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![a.id]));
    assert_eq!(subscribers(&store, "r").await, Ok(vec![b.id]));
    // Ids are never reused, across restarts too.
    let (d, _) = store
        .insert_subscription(subscription("q", "https://d.example/"))
        .await
        .expect("stored");
    assert!(d.id > c.id);
    close(store).await;
}

/// A subscription that asks for it holds its endpoint in its queue: another one asking for the
/// same is answered with the holder, and a change onto a held endpoint is refused.
async fn unique_endpoints_are_held_per_queue(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let url = "https://hooks.example/a";
    let insert = async |subscription: Subscription| {
        store
            .insert_subscription(subscription)
            .await
            .expect("answered")
    };
    let (holder, created) = insert(zaqar_subscription("q", url)).await;
    assert!(created);
    let answered = insert(zaqar_subscription("q", url)).await;
    assert_eq!(
        answered,
        (holder.clone(), false),
        "the holder, nothing stored"
    );
    assert_eq!(subscribers(&store, "q").await, Ok(vec![holder.id]));
    // Other queues, and subscriptions that do not ask for it, may have the endpoint too.
    let (elsewhere, created) = insert(zaqar_subscription("r", url)).await;
    assert!(created);
    let (plain, created) = insert(subscription("q", url)).await;
    assert!(created);
    assert_eq!(
        subscribers(&store, "q").await,
        Ok(vec![holder.id, plain.id])
    );

    // A change onto a held endpoint is refused, and changes nothing.
    let (second, _) = insert(zaqar_subscription("q", "https://hooks.example/b")).await;
    let onto = |endpoint: &'static str| {
        move |current: &Subscription| {
            let mut next = current.clone();
            next.endpoint = endpoint.to_owned();
            Some(next)
        }
    };
    let taken = StoreError::EndpointTaken {
        queue: "q".into(),
        endpoint: url.into(),
        holder: holder.id,
    };
    assert_eq!(
        store.update_subscription(second.id, &onto(url)).await,
        Err(taken.clone())
    );
    assert_eq!(
        store.subscription(second.id).await,
        Ok(Some(second.clone()))
    );
    // So is turning a subscription that did not ask for it into one that does.
    let zaqar = |current: &Subscription| {
        let mut next = current.clone();
        next.format = tenax::model::EnvelopeFormat::Zaqar;
        Some(next)
    };
    assert_eq!(
        store.update_subscription(plain.id, &zaqar).await,
        Err(taken.clone())
    );
    // The holder keeps its endpoint through a change.
    let disable = |current: &Subscription| {
        let mut next = current.clone();
        next.enabled = false;
        Some(next)
    };
    let kept = store.update_subscription(holder.id, &disable).await;
    assert_eq!(
        kept.map(|s| (s.enabled, s.endpoint)),
        Ok((false, url.to_owned()))
    );
    // A holder that moves frees its endpoint; so does one deleted.
    store
        .update_subscription(holder.id, &onto("https://hooks.example/c"))
        .await
        .expect("moved");
    let (taker, created) = insert(zaqar_subscription("q", url)).await;
    assert!(created, "the endpoint was freed by the move");
    assert_eq!(store.delete_subscription(taker.id).await, Ok(0));
    let (newest, created) = insert(zaqar_subscription("q", url)).await;
    assert!(created, "the endpoint was freed by the delete");
    assert!(newest.id > taker.id);
    assert!(elsewhere.id < newest.id);

    // Held across a restart.
    let store = reopen(backend, store, T0).await;
    let answered = store
        .insert_subscription(zaqar_subscription("q", url))
        .await
        .expect("answered");
    assert_eq!((answered.0.id, answered.1), (newest.id, false));
    assert_eq!(
        store
            .update_subscription(second.id, &onto("https://hooks.example/c"))
            .await,
        Err(StoreError::EndpointTaken {
            queue: "q".into(),
            endpoint: "https://hooks.example/c".into(),
            holder: holder.id,
        })
    );
    close(store).await;
}

/// A delivery is stored only with its message (whose id becomes its parent) and only while its
/// subscription exists; the rest of the insert is stored all the same.
async fn deliveries_are_stored_with_their_message_and_subscription(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("stored");
    let (gone, _) = store
        .insert_subscription(subscription("q", "https://gone.example/"))
        .await
        .expect("stored");
    assert_eq!(store.delete_subscription(gone.id).await, Ok(0));
    let results = store
        .insert_jobs(
            vec![
                job("q").key("k"),
                job("q").at(T0 + SECOND),
                delivery(sub.id, 0),
                delivery(gone.id, 0),
                delivery(sub.id, 1).at(T0 + SECOND),
            ],
            OnDuplicate::Refuse,
            current(&store).await,
            T0,
        )
        .await
        .expect("stored");
    assert_eq!(results.len(), 5, "one result per insert");
    assert!(
        results[3].is_none(),
        "no delivery for a deleted subscription"
    );
    let [m0, m1, d0, d1] = [0, 1, 2, 4].map(|i| results[i].clone().expect("stored"));
    assert_eq!(
        [&m0, &m1, &d0, &d1].map(|e| (e.created, e.status)),
        [
            (true, Status::Ready),
            (true, Status::Scheduled),
            (true, Status::Ready),
            (true, Status::Scheduled)
        ]
    );
    for (delivery, message) in [(d0.id, m0.id), (d1.id, m1.id)] {
        let shown = get(&store, delivery).await;
        assert_eq!(
            (shown.spec.parent, shown.spec.queue, shown.spec.kind),
            (
                Some(message),
                delivery_queue(sub.id),
                DELIVERY_KIND.to_owned()
            )
        );
    }
    assert_eq!(get(&store, m0.id).await.spec.parent, None);

    // The child of a message that was not created (its key is held) is not stored either.
    let results = store
        .insert_jobs(
            vec![job("q").key("k"), delivery(sub.id, 0)],
            OnDuplicate::Existing,
            current(&store).await,
            T0,
        )
        .await
        .expect("answered");
    assert_eq!(
        results,
        [
            Some(Enqueued {
                id: m0.id,
                created: false,
                status: Status::Ready,
                run_at_ms: T0
            }),
            None
        ]
    );
    // A refused insert stores nothing, deliveries included.
    let refused = store
        .insert_jobs(
            vec![job("q"), delivery(sub.id, 0), job("q").key("k")],
            OnDuplicate::Refuse,
            current(&store).await,
            T0,
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { index: 2, .. })),
        "{refused:?}"
    );
    let deliveries = JobFilter::queue(delivery_queue(sub.id));
    assert_eq!(store.count_jobs(&deliveries).await, Ok(2));
    assert_eq!(store.count_jobs(&JobFilter::default()).await, Ok(4));

    let store = reopen(backend, store, T0).await;
    assert_eq!(get(&store, d1.id).await.spec.parent, Some(m1.id));
    close(store).await;
}

/// Deliveries: taken for their subscription while it is enabled; each attempt ends them and is
/// logged in the same commit, a delivered one completing, a failed one going by the decision
/// (which sees the subscription and its queue's settings); deleted with their subscription,
/// attempts and all.
async fn deliveries_are_taken_finished_and_logged(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let queue_policy = fixed(9 * SECOND);
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                policy: Some(StoredPolicy::new(queue_policy.clone())),
                ..QueueConfig::default()
            })
        })
        .await
        .expect("configured");
    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("stored");
    let results = store
        .insert_jobs(
            vec![
                job("q"),
                job("q"),
                job("q"),
                delivery(sub.id, 0),
                delivery(sub.id, 1),
                delivery(sub.id, 2),
            ],
            OnDuplicate::Refuse,
            current(&store).await,
            T0,
        )
        .await
        .expect("stored");
    let ids: Vec<JobId> = results
        .iter()
        .map(|r| r.as_ref().expect("stored").id)
        .collect();
    let (messages, deliveries) = ids.split_at(3);
    let queues = vec![delivery_queue(sub.id)];
    let for_sub = |max: usize| TakeRequest {
        subscription: Some(sub.id),
        ..TakeRequest::new(&queues, max, 30 * SECOND)
    };
    let enabled = |on: bool| {
        move |current: &Subscription| {
            let mut next = current.clone();
            next.enabled = on;
            Some(next)
        }
    };

    // Nothing while the subscription is disabled.
    store
        .update_subscription(sub.id, &enabled(false))
        .await
        .expect("disabled");
    assert!(
        store
            .take_jobs(&for_sub(10), T0)
            .await
            .expect("take")
            .jobs
            .is_empty()
    );
    store
        .update_subscription(sub.id, &enabled(true))
        .await
        .expect("enabled");
    let taken = store.take_jobs(&for_sub(10), T0).await.expect("take").jobs;
    assert_eq!(taken_ids(&taken), deliveries);
    assert_eq!(
        (taken[0].parent, taken[0].kind.as_str()),
        (Some(messages[0]), DELIVERY_KIND)
    );

    // Delivered: completed, without a decision, and the attempt logged.
    let calls = Mutex::new(0);
    let never = |ctx: &DecideContext<'_>| {
        *calls.lock().expect("not poisoned") += 1;
        dead(T0, "never")(ctx)
    };
    let delivered = attempt(1, T0 + 1, AttemptResult::Delivered, 200);
    assert_eq!(
        store
            .finish_delivery(ack(&taken[0]), &delivered, true, T0 + 1, &never)
            .await,
        Ok(Finished::Delivered)
    );
    let shown = get(&store, deliveries[0]).await;
    assert_eq!(
        (shown.state.status, shown.state.finished_at_ms),
        (Status::Completed, Some(T0 + 1))
    );
    assert_eq!(
        store.attempts(deliveries[0]).await,
        Ok(vec![delivered.clone()])
    );

    // Failed: the decision sees the subscription and its queue's settings.
    let failed = attempt(1, T0 + 2, AttemptResult::Retryable, 503);
    let seen = Mutex::new(None);
    let finished = store
        .finish_delivery(
            ack(&taken[1]),
            &failed,
            true,
            T0 + 2,
            &|ctx: &DecideContext<'_>| {
                *seen.lock().expect("not poisoned") = ctx.owner.map(|(s, q)| {
                    let policy = q.and_then(|q| q.policy.as_ref());
                    (s.id, policy.map(|p| (**p.policy()).clone()))
                });
                retry(T0 + 2, 5 * SECOND, "HTTP 503")(ctx)
            },
        )
        .await
        .expect("finished");
    let Finished::Failed(transition) = finished else {
        panic!("a failed attempt fails: {finished:?}");
    };
    assert_eq!(
        (transition.state.status, transition.state.run_at_ms),
        (Status::Scheduled, T0 + 2 + 5 * SECOND)
    );
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some((sub.id, Some(queue_policy)))
    );
    let shown = get(&store, deliveries[1]).await;
    assert_eq!(shown.state, transition.state);
    assert_eq!(shown.errors, [transition.error.clone().expect("an error")]);
    assert_eq!(
        store.attempts(deliveries[1]).await,
        Ok(vec![failed.clone()])
    );

    // Permanent: dead by the decision.
    let permanent = attempt(1, T0 + 3, AttemptResult::Permanent, 404);
    let finished = store
        .finish_delivery(
            ack(&taken[2]),
            &permanent,
            true,
            T0 + 3,
            &dead(T0 + 3, "HTTP 404"),
        )
        .await
        .expect("finished");
    assert!(
        matches!(&finished, Finished::Failed(t) if t.state.status == Status::Dead),
        "{finished:?}"
    );
    assert_eq!(status(&store, deliveries[2]).await, Some(Status::Dead));

    // Without the lease: refused, and nothing logged.
    assert_eq!(
        store
            .finish_delivery(ack(&taken[0]), &delivered, true, T0 + 4, &never)
            .await,
        Err(StoreError::NotInFlight {
            id: deliveries[0],
            status: Status::Completed
        })
    );
    assert_eq!(store.attempts(deliveries[0]).await.map(|a| a.len()), Ok(1));
    assert_eq!(*calls.lock().expect("not poisoned"), 0);

    // Retried: the next attempt is added after the first.
    let due = T0 + 2 + 5 * SECOND;
    assert_eq!(store.promote_due(due, 10).await, Ok(1));
    let again = store.take_jobs(&for_sub(10), due).await.expect("take").jobs;
    assert_eq!(
        (taken_ids(&again), again[0].attempt),
        (vec![deliveries[1]], 2)
    );
    let second = attempt(2, due, AttemptResult::Retryable, 500);
    store
        .finish_delivery(
            ack(&again[0]),
            &second,
            true,
            due,
            &retry(due, 0, "HTTP 500"),
        )
        .await
        .expect("finished");
    assert_eq!(
        store.attempts(deliveries[1]).await,
        Ok(vec![failed, second])
    );
    assert_eq!(store.attempts(messages[0]).await, Ok(vec![]));

    let store = reopen(backend, store, due).await;
    assert_eq!(store.attempts(deliveries[1]).await.map(|a| a.len()), Ok(2));
    // Deleting the subscription deletes its deliveries with their attempts; messages stay.
    assert_eq!(store.delete_subscription(sub.id).await, Ok(3));
    for id in deliveries {
        assert!(
            store.get_job(*id).await.expect("readable").is_none(),
            "job {id}"
        );
        assert_eq!(store.attempts(*id).await, Ok(vec![]), "job {id}");
    }
    for id in messages {
        assert_eq!(status(&store, *id).await, Some(Status::Ready));
    }
    assert!(
        store
            .take_jobs(&for_sub(10), due)
            .await
            .expect("take")
            .jobs
            .is_empty()
    );
    let orphan = store
        .insert_jobs(
            vec![job("q"), delivery(sub.id, 0)],
            OnDuplicate::Refuse,
            current(&store).await,
            due,
        )
        .await
        .expect("stored");
    assert!(orphan[0].is_some() && orphan[1].is_none());
    let store = reopen(backend, store, due).await;
    assert_eq!(store.count_jobs(&JobFilter::queue(&queues[0])).await, Ok(0));
    close(store).await;
}

/// API tokens: stored with an assigned id, replaced by id, deleted once.
async fn tokens_are_stored_by_id(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.tokens().await, Ok(vec![]));
    let first = store
        .put_token(token("ci", Role::Worker))
        .await
        .expect("stored");
    let second = store
        .put_token(token("admin", Role::Admin))
        .await
        .expect("stored");
    assert!(first.id > 0 && first.id < second.id, "{first:?} {second:?}");
    assert_eq!(
        first,
        TokenRecord {
            id: first.id,
            ..token("ci", Role::Worker)
        }
    );
    assert_eq!(
        store.tokens().await,
        Ok(vec![first.clone(), second.clone()])
    );
    let used = TokenRecord {
        last_used_at_ms: Some(T0 + 5),
        ..first.clone()
    };
    assert_eq!(store.put_token(used.clone()).await, Ok(used.clone()));
    assert_eq!(store.tokens().await, Ok(vec![used.clone(), second.clone()]));
    assert_eq!(store.delete_token(second.id).await, Ok(true));
    assert_eq!(store.delete_token(second.id).await, Ok(false));
    assert_eq!(store.delete_token(987_654).await, Ok(false));
    assert_eq!(store.tokens().await, Ok(vec![used.clone()]));
    // A late write of the revoked token (its last use) does not bring it back.
    let late = TokenRecord {
        last_used_at_ms: Some(T0 + 9),
        ..second.clone()
    };
    store.put_token(late).await.expect("a late write");
    assert_eq!(store.tokens().await, Ok(vec![used.clone()]));

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.tokens().await, Ok(vec![used]));
    let third = store
        .put_token(token("later", Role::Reader))
        .await
        .expect("stored");
    assert!(third.id > second.id, "ids are never reused");
    close(store).await;
}

/// Endpoint states are made by their first change, changed through a closure that sees the
/// stored state (concurrent changes all hold, the first ones included), listed by origin,
/// announced, and kept across a restart.
async fn endpoint_states_change_atomically_and_are_kept(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, b) = ("https://a.example", "http://b.example:8080");
    assert_eq!(store.endpoints().await, Ok(vec![]));
    assert_eq!(store.endpoint(a).await, Ok(None));
    assert_eq!(
        store.update_endpoint(a, &|_| None).await,
        Ok(None),
        "no change"
    );
    // Many servers' first changes at once: each sees what the one before stored.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .update_endpoint(a, &|current| {
                        let mut state = current.cloned().unwrap_or_else(|| EndpointState {
                            origin: String::new(),
                            pause: None,
                            breaker: Default::default(),
                            updated_at_ms: T0,
                        });
                        state.breaker.trips += 1;
                        Some(state)
                    })
                    .await
            })
        })
        .collect();
    for racer in racers {
        racer.await.expect("a racer").expect("stored");
    }
    let stored = store.endpoint(a).await.expect("read").expect("made");
    assert_eq!(stored.breaker.trips, 8, "every change counted once");
    assert_eq!(stored.origin, a, "the store keeps it under its origin");
    let paused = EndpointState {
        origin: b.to_owned(),
        pause: Some(Pause {
            until_ms: T0 + 30 * SECOND,
            status: 429,
            subscription: SubscriptionId(3),
            at_ms: T0,
        }),
        breaker: tenax::model::Breaker {
            state: BreakerState::Open,
            until_ms: Some(T0 + 60 * SECOND),
            opened_at_ms: Some(T0),
            trips: 2,
            probe: None,
            reason: Some("the endpoint answered HTTP 502".into()),
            epoch: 4,
        },
        updated_at_ms: T0,
    };
    let changed = fires(
        &store.signals().endpoints,
        "an endpoint's change",
        store.update_endpoint(b, &|_| Some(paused.clone())),
    )
    .await;
    assert_eq!(changed, Ok(Some(paused.clone())));
    assert_eq!(
        store
            .update_endpoint(b, &|current| {
                assert_eq!(current, Some(&paused), "the change sees the stored state");
                None
            })
            .await,
        Ok(Some(paused.clone())),
        "left as it is"
    );
    let listed = store.endpoints().await.expect("listed");
    assert_eq!(
        listed.iter().map(|s| s.origin.as_str()).collect::<Vec<_>>(),
        [b, a],
        "by origin, byte by byte"
    );

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.endpoint(b).await, Ok(Some(paused)));
    assert_eq!(store.endpoints().await, Ok(listed));
    close(store).await;
}

/// Queue settings are changed through a closure that sees the stored ones; a queue is deleted
/// with its settings and every job in it, and keeps its subscriptions.
async fn queues_are_deleted_with_their_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let mut metadata = serde_json::Map::new();
    metadata.insert("team".into(), json!("billing"));
    let config = QueueConfig {
        policy: Some(StoredPolicy::new(fixed(3 * SECOND))),
        paused: false,
        disable_overrides: true,
        message_ttl_ms: Some(60 * SECOND),
        metadata: Some(metadata),
        dead_letter: Some(DeadLetter {
            queue: "q-dead".into(),
            max_claims: 3,
            ttl_ms: Some(90 * SECOND),
        }),
        concurrency: Some(7),
        rate: Some(RateLimit {
            limit: 100,
            period_ms: 60 * SECOND,
        }),
    };
    // A change that declines stores nothing.
    assert_eq!(store.update_queue("q", &|_| None).await, Ok(None));
    assert_eq!(store.queue("q").await, Ok(None));
    let seen = Mutex::new(Vec::new());
    let put = |current: Option<&QueueConfig>| {
        seen.lock().expect("not poisoned").push(current.cloned());
        Some(config.clone())
    };
    assert_eq!(
        store.update_queue("q", &put).await,
        Ok(Some(config.clone()))
    );
    assert_eq!(
        store.update_queue("q", &put).await,
        Ok(Some(config.clone()))
    );
    let seen = seen.into_inner().expect("not poisoned");
    assert_eq!(seen.first(), Some(&None));
    assert_eq!(seen.last(), Some(&Some(config.clone())));
    assert_eq!(
        store.update_queue("q", &|_| None).await,
        Ok(Some(config.clone())),
        "a change that declines answers with the stored settings"
    );

    let ids = enqueue(
        &store,
        vec![
            job("q").key("k"),
            job("q").at(T0 + SECOND),
            job("q"),
            job("r"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);
    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("stored");
    let counts =
        |queue: &str, [scheduled, ready, in_flight, completed, dead]: [u64; 5]| QueueCounts {
            queue: queue.to_owned(),
            scheduled,
            ready,
            in_flight,
            completed,
            dead,
        };
    assert_eq!(
        store.queue_counts("q").await,
        Ok(counts("q", [1, 1, 1, 0, 0]))
    );

    assert_eq!(store.delete_queue("q").await, Ok(3));
    assert_eq!(store.queue("q").await, Ok(None));
    assert_eq!(store.queue_counts("q").await, Ok(counts("q", [0; 5])));
    assert_eq!(
        store.queues().await,
        Ok(vec![("r".to_owned(), QueueConfig::default())])
    );
    for id in &ids[..3] {
        assert!(
            store.get_job(*id).await.expect("readable").is_none(),
            "job {id}"
        );
    }
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![sub.id]));
    let results = store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[0]))]);
    assert_eq!(store.delete_queue("nothing").await, Ok(0));
    // Its keys are free; a new job makes the queue exist again, with default settings.
    let keyed = enqueue(&store, vec![job("q").key("k")], T0).await[0];

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.queue("q").await, Ok(None));
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[3], keyed]
    );
    assert_eq!(subscribers(&store, "q").await, Ok(vec![sub.id]));
    close(store).await;
}

/// The signals announce what may have happened: jobs ready (enqueue, promotion, retry, replay,
/// release, an ended lease or claim, a resumed queue), an earlier schedule, a subscription
/// created, changed or deleted. A waiter registered before the change is woken.
async fn signals_announce_what_may_have_changed(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let signals = store.signals();
    let (ready, schedule) = (&signals.ready, &signals.schedule);
    let now = T0 + SECOND;

    let ids = fires(ready, "a ready job", enqueue(&store, vec![job("q")], T0)).await;
    let later = fires(
        schedule,
        "a scheduled job",
        enqueue(&store, vec![job("q").at(now)], T0),
    )
    .await;
    let promoted = fires(ready, "a promotion", store.promote_due(now, 10)).await;
    assert_eq!(promoted, Ok(1));
    let taken = take(&store, &["q"], 2, now).await;
    assert_eq!(taken_ids(&taken), [ids[0], later[0]]);
    fires(
        schedule,
        "a scheduled retry",
        store.fail_job(ack(&taken[0]), now, &retry(now, 5 * SECOND, "x")),
    )
    .await
    .expect("failed");
    fires(
        ready,
        "a retry due at once",
        store.fail_job(ack(&taken[1]), now, &retry(now, 0, "x")),
    )
    .await
    .expect("failed");
    let moving = later[0];
    take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(6)), now).await;
    let released = fires(ready, "a release", store.release_claim(ClaimId(6))).await;
    assert_eq!(released, Ok(1));
    take_on(&store, &["q"], 1, SECOND, None, now).await;
    let at = now + SECOND;
    let expired = fires(
        ready,
        "an expired lease",
        store.expire_leases(at, 10, &again(at, "lost")),
    )
    .await;
    assert_eq!(expired, Ok(1));
    take_on(&store, &["q"], 1, 30 * SECOND, Some(ClaimId(7)), at).await;
    let ended = fires(
        ready,
        "an ended claim",
        store.end_claim(ClaimId(7), at, &again(at, "deleted")),
    )
    .await;
    assert_eq!(ended, Ok(1));
    kill(&store, "q", &[moving], at).await;
    let replay = Replay {
        selection: Selection {
            ids: Some(vec![moving]),
            filter: JobFilter::default(),
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = fires(ready, "a replay", store.replay_jobs(&replay, at)).await;
    assert_eq!(replayed.map(|r| r.ids), Ok(vec![moving]));
    let paused = |paused: bool| {
        move |_: Option<&QueueConfig>| {
            Some(QueueConfig {
                paused,
                ..QueueConfig::default()
            })
        }
    };
    store
        .update_queue("q", &paused(true))
        .await
        .expect("paused");
    fires(
        ready,
        "a resumed queue",
        store.update_queue("q", &paused(false)),
    )
    .await
    .expect("resumed");

    // Acknowledgements release room (a full stream waits for them).
    let released = &signals.released;
    enqueue(&store, vec![job("acks"), job("acks")], at).await;
    let held = take(&store, &["acks"], 2, at).await;
    let done = fires(
        released,
        "a completion",
        store.complete_plain(&[ack(&held[0])], true, at),
    )
    .await
    .expect("completed");
    assert_eq!(done, [Ok(())]);
    fires(
        released,
        "a failure",
        store.fail_job(ack(&held[1]), at, &retry(at, 5 * SECOND, "x")),
    )
    .await
    .expect("failed");
    let doomed = enqueue(&store, vec![job("acks")], at).await;
    take(&store, &["acks"], 1, at).await;
    let selection = Selection {
        ids: Some(doomed.clone()),
        filter: JobFilter::default(),
    };
    let deleted = fires(released, "a deletion", store.delete_jobs(&selection)).await;
    assert_eq!(deleted, Ok(doomed));

    let subscriptions = &signals.subscriptions;
    let (sub, _) = fires(
        subscriptions,
        "a new subscription",
        store.insert_subscription(subscription("q", "https://a.example/")),
    )
    .await
    .expect("stored");
    let disable = |current: &Subscription| {
        let mut next = current.clone();
        next.enabled = false;
        Some(next)
    };
    fires(
        subscriptions,
        "a changed subscription",
        store.update_subscription(sub.id, &disable),
    )
    .await
    .expect("changed");
    fires(
        subscriptions,
        "a deleted subscription",
        store.delete_subscription(sub.id),
    )
    .await
    .expect("deleted");
    close(store).await;
}

/// A server alone on the backend is granted the lead for upkeep, and keeps it.
async fn a_lone_server_leads(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.lead().await, Ok(true));
    assert_eq!(store.lead().await, Ok(true), "and keeps it");
    let store = reopen(backend, store, T0).await;
    assert_eq!(store.lead().await, Ok(true), "after a restart too");
    close(store).await;
}

/// Everything acknowledged before `close` is there when the data is opened again, written just
/// before closing too: jobs in every state with their errors and policies, queue settings,
/// subscriptions, a delivery's attempts and tokens (`reopen` compares them all).
async fn close_keeps_everything_acknowledged(backend: &impl Backend) {
    let store = backend.open(T0).await;
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                policy: Some(StoredPolicy::new(fixed(SECOND))),
                ..QueueConfig::default()
            })
        })
        .await
        .expect("configured");
    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("stored");
    let results = store
        .insert_jobs(
            vec![
                job("q").priority(9).policy(fixed(7 * SECOND)),
                job("q").priority(8),
                job("q").priority(7),
                job("q").at(T0 + 60 * SECOND),
                job("r").key("k").payload(json!({"x": [1, 2]})),
                delivery(sub.id, 0),
            ],
            OnDuplicate::Refuse,
            current(&store).await,
            T0,
        )
        .await
        .expect("stored");
    let ids: Vec<JobId> = results
        .iter()
        .map(|r| r.as_ref().expect("stored").id)
        .collect();
    let taken = take(&store, &["q"], 3, T0).await;
    assert_eq!(taken_ids(&taken), ids[..3]);
    store
        .complete_plain(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    store
        .fail_job(ack(&taken[1]), T0, &retry(T0, 30 * SECOND, "boom"))
        .await
        .expect("failed");
    store
        .fail_job(ack(&taken[2]), T0, &dead(T0, "fatal"))
        .await
        .expect("dead");
    let queues = vec![delivery_queue(sub.id)];
    let request = TakeRequest {
        subscription: Some(sub.id),
        ..TakeRequest::new(&queues, 1, 30 * SECOND)
    };
    let delivering = store.take_jobs(&request, T0).await.expect("take").jobs;
    let logged = attempt(1, T0, AttemptResult::Retryable, 500);
    store
        .finish_delivery(
            ack(&delivering[0]),
            &logged,
            true,
            T0,
            &retry(T0, 10 * SECOND, "HTTP 500"),
        )
        .await
        .expect("finished");
    let record = store
        .put_token(token("ci", Role::Producer))
        .await
        .expect("stored");
    let store = reopen(backend, store, T0).await;
    let statuses: Vec<Option<Status>> = {
        let mut all = Vec::new();
        for id in &ids {
            all.push(status(&store, *id).await);
        }
        all
    };
    assert_eq!(
        statuses,
        [
            Some(Status::Completed),
            Some(Status::Scheduled),
            Some(Status::Dead),
            Some(Status::Scheduled),
            Some(Status::Ready),
            Some(Status::Scheduled)
        ]
    );
    assert_eq!(get(&store, ids[1]).await.errors.len(), 1);
    assert_eq!(store.attempts(ids[5]).await, Ok(vec![logged]));
    assert_eq!(store.tokens().await, Ok(vec![record]));
    assert_eq!(subscribers(&store, "q").await, Ok(vec![sub.id]));
    let next = enqueue(&store, vec![job("q")], T0).await[0];
    assert!(next > ids[5], "ids are never reused");
    close(store).await;
}

/// Data written by a newer Tenax, in a newer format, is refused rather than misread; refusing
/// it changes nothing.
async fn newer_formats_are_refused(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let id = enqueue(&store, vec![job("q")], T0).await[0];
    close(store).await;
    let current = backend.format().await;
    backend.stamp_format(current + 1).await;
    let refused = backend
        .try_open(T0)
        .await
        .expect_err("a newer format is refused");
    assert_eq!(
        refused,
        StoreError::NewerFormat {
            found: current + 1,
            supported: current
        }
    );
    assert!(refused.is_internal());
    assert_eq!(backend.format().await, current + 1, "left as it was");
    // Stamped back, it opens with its data.
    backend.stamp_format(current).await;
    let store = backend.open(T0).await;
    assert_eq!(status(&store, id).await, Some(Status::Ready));
    close(store).await;
}

/// Operations on one job are serialised: takes racing each other lease every job exactly
/// once, and of acks racing on one lease exactly one wins.
async fn racing_operations_on_a_job_are_serialised(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 120], T0).await;
    let takers: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let taken = take(&store, &["q"], 7, T0).await;
                    if taken.is_empty() {
                        break mine;
                    }
                    mine.extend(taken);
                }
            })
        })
        .collect();
    let mut all: Vec<TakenJob> = Vec::new();
    for taker in takers {
        all.extend(taker.await.expect("a taker"));
    }
    let mut leased = taken_ids(&all);
    leased.sort_unstable();
    assert_eq!(leased, ids, "every job leased exactly once");

    let contested = &all[0];
    let racers: Vec<_> = (0..6)
        .map(|i| {
            let (store, ack) = (store.clone(), ack(contested));
            tokio::spawn(async move {
                if i % 2 == 0 {
                    let mut results = store
                        .complete_plain(&[ack], true, T0)
                        .await
                        .expect("commit");
                    (Status::Completed, results.remove(0))
                } else {
                    let failed = store.fail_job(ack, T0, &dead(T0, "fatal")).await;
                    (Status::Dead, failed.map(drop))
                }
            })
        })
        .collect();
    let mut winners = Vec::new();
    for racer in racers {
        match racer.await.expect("a racer") {
            (status, Ok(())) => winners.push(status),
            (_, Err(StoreError::NotInFlight { id, status })) => {
                assert_eq!(id, contested.id);
                assert!(status.is_finished(), "{status:?}");
            }
            (_, Err(error)) => panic!("unexpected: {error:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one ack wins: {winners:?}");
    let shown = get(&store, contested.id).await;
    assert_eq!(shown.state.status, winners[0]);
    assert_eq!(shown.errors.len(), usize::from(winners[0] == Status::Dead));
    let store = reopen(backend, store, T0).await;
    close(store).await;
}

/// Many small enqueues at once (which a backend may commit together): each is answered with
/// its own jobs, ids increase within each, no id is given twice, and every job is stored with
/// its own payload, byte for byte.
async fn concurrent_small_enqueues_keep_their_own_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let requests: Vec<_> = (0..40u64)
        .map(|r| {
            let store = store.clone();
            tokio::spawn(async move {
                let jobs: Vec<Insert> = (0..=(r % 3))
                    .map(|j| job("q").payload(json!({"r": r, "j": j, "text": "a\u{0}b ✓"})))
                    .collect();
                let ids = enqueue(&store, jobs, T0).await;
                (r, ids)
            })
        })
        .collect();
    let mut all = Vec::new();
    for request in requests {
        let (r, ids) = request.await.expect("a request");
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        for (j, id) in ids.iter().enumerate() {
            let shown = get(&store, *id).await;
            assert_eq!(
                shown.spec.payload.get(),
                json!({"r": r, "j": j, "text": "a\u{0}b ✓"}).to_string()
            );
        }
        all.extend(ids);
    }
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "no id given twice");
    assert_eq!(count, (0..40usize).map(|r| r % 3 + 1).sum::<usize>());
    let store = reopen(backend, store, T0).await;
    close(store).await;
}

/// What an enqueue reads of a queue (its settings and subscribers) is never older than a
/// change made before the insert: a backend that caches them refuses an insert made on older
/// ones and stores nothing of it (small enqueues committed together included), and reads fresh
/// ones after; a backend that reads them live takes it. Every kind of change counts.
async fn inserts_are_never_made_on_facts_older_than_a_change(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let cached = store.properties().cached_facts;
    let ready = |store: Arc<dyn Store>| async move {
        store.queue_counts("q").await.expect("counted").ready
    };
    // Jobs of the queue stored so far.
    let stored = std::cell::Cell::new(0u64);
    // Inserts made on `old` facts: one alone (a unique key), and several small ones at once.
    let try_old = |old: FactsSeen, round: usize| {
        let store = store.clone();
        async move {
            let alone = store
                .insert_jobs(
                    vec![job("q").key(&format!("k{round}"))],
                    OnDuplicate::Refuse,
                    old,
                    T0,
                )
                .await
                .map(|_| ());
            let small: Vec<_> = (0..6)
                .map(|_| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        store
                            .insert_jobs(vec![job("q")], OnDuplicate::Refuse, old, T0)
                            .await
                            .map(|_| ())
                    })
                })
                .collect();
            let mut results = vec![alone];
            for one in small {
                results.push(one.await.expect("an insert"));
            }
            results
        }
    };
    let check = async |old: FactsSeen, round: usize, what: &str| {
        let results = try_old(old, round).await;
        if cached {
            assert!(
                results.iter().all(|r| *r == Err(StoreError::FactsChanged)),
                "{what}: {results:?}"
            );
        } else {
            assert!(results.iter().all(Result::is_ok), "{what}: {results:?}");
            stored.set(stored.get() + results.len() as u64);
        }
        assert_eq!(
            ready(store.clone()).await,
            stored.get(),
            "{what}: stored only when taken"
        );
        let fresh = store.queue_facts("q").await.expect("facts read");
        // Made on fresh facts, it is taken: several at once, one of them on old facts.
        let current = try_old(fresh.seen, round + 100).await;
        assert!(current.iter().all(Result::is_ok), "{what}: {current:?}");
        stored.set(stored.get() + current.len() as u64);
        fresh
    };

    let first = store.queue_facts("q").await.expect("facts read");
    assert_eq!((&first.config, &first.subscribers), (&None, &vec![]));
    let settings = QueueConfig {
        message_ttl_ms: Some(60 * SECOND),
        ..QueueConfig::default()
    };
    store
        .update_queue("q", &|_| Some(settings.clone()))
        .await
        .expect("settings stored");
    let facts = check(first.seen, 1, "settings changed").await;
    assert_eq!(facts.config, Some(settings.clone()));

    let (sub, _) = store
        .insert_subscription(subscription("q", "https://a.example/"))
        .await
        .expect("subscribed");
    let facts = check(facts.seen, 2, "subscription made").await;
    assert_eq!(facts.subscribers, vec![sub.id]);

    // A subscription moved to another queue leaves this one.
    store
        .update_subscription(sub.id, &|current: &Subscription| {
            let mut moved = current.clone();
            moved.queue = "elsewhere".into();
            Some(moved)
        })
        .await
        .expect("moved");
    let facts = check(facts.seen, 3, "subscription moved").await;
    assert_eq!(facts.subscribers, vec![]);
    assert_eq!(subscribers(&store, "elsewhere").await, Ok(vec![sub.id]));

    let (other, _) = store
        .insert_subscription(subscription("q", "https://b.example/"))
        .await
        .expect("subscribed");
    let facts = store.queue_facts("q").await.expect("facts read");
    store.delete_subscription(other.id).await.expect("deleted");
    let facts = check(facts.seen, 4, "subscription deleted").await;
    assert_eq!(facts.subscribers, vec![]);

    // A change that leaves the queue's subscribers as they are keeps the facts good.
    store
        .update_subscription(sub.id, &|current: &Subscription| {
            let mut off = current.clone();
            off.enabled = false;
            Some(off)
        })
        .await
        .expect("disabled");
    let kept = try_old(facts.seen, 5).await;
    assert!(kept.iter().all(Result::is_ok), "{kept:?}");
    stored.set(stored.get() + kept.len() as u64);
    assert_eq!(ready(store.clone()).await, stored.get());

    // Deleting the queue deletes its settings (and its jobs).
    store.delete_queue("q").await.expect("deleted");
    stored.set(0);
    let facts = check(facts.seen, 6, "queue deleted").await;
    assert_eq!(facts.config, None);
    close(store).await;
}

// --- per-queue limits ------------------------------------------------------------------------

async fn limit_queue(
    store: &Arc<dyn Store>,
    queue: &str,
    concurrency: Option<u32>,
    rate: Option<RateLimit>,
) {
    store
        .update_queue(queue, &|current| {
            let mut config = current.cloned().unwrap_or_default();
            config.concurrency = concurrency;
            config.rate = rate;
            Some(config)
        })
        .await
        .expect("limited");
}

async fn take_held(store: &Arc<dyn Store>, queues: &[&str], max: usize, now_ms: u64) -> Taken {
    let queues: Vec<String> = queues.iter().map(|q| (*q).to_owned()).collect();
    store
        .take_jobs(&TakeRequest::new(&queues, max, 30 * SECOND), now_ms)
        .await
        .expect("take")
}

/// A concurrency limit counts the queue's jobs in flight: a take hands out no more than the
/// room left, in the usual order, says it was held back, and room comes back as jobs leave
/// flight (completed, failed, lease expired). Other queues of the same take are not held.
async fn concurrency_limits_hold_takes_back(backend: &impl Backend) {
    let store = backend.open(T0).await;
    limit_queue(&store, "lim", Some(2), None).await;
    let limited = enqueue(&store, (0..5).map(|i| job("lim").priority(i)).collect(), T0).await;
    let free = enqueue(&store, vec![job("free"), job("free")], T0).await;
    let first = take(&store, &["lim", "free"], 10, T0).await;
    assert_eq!(
        taken_ids(&first),
        [limited[4], limited[3], free[0], free[1]],
        "two of the limited queue, the best two, and the rest"
    );
    let held = take_held(&store, &["lim"], 10, T0).await;
    assert!(held.jobs.is_empty());
    assert!(held.held.in_flight, "{:?}", held.held);
    assert_eq!(held.held.until_ms, None);
    // Completing one makes room for one.
    store
        .complete_jobs(&[ack(&first[0])], true, T0)
        .await
        .expect("completed");
    let second = take(&store, &["lim"], 10, T0).await;
    assert_eq!(taken_ids(&second), [limited[2]]);
    // A failure makes room too.
    store
        .fail_job(ack(&first[1]), T0, &retry(T0, 60 * SECOND, "later"))
        .await
        .expect("failed");
    let third = take(&store, &["lim"], 10, T0).await;
    assert_eq!(taken_ids(&third), [limited[1]]);
    assert!(take(&store, &["lim"], 10, T0).await.is_empty());
    // So does a lease that ran out.
    let expired = T0 + 31 * SECOND;
    store
        .expire_leases(expired, 100, &again(expired, "lost"))
        .await
        .expect("expired");
    let fourth = take(&store, &["lim"], 1, expired).await;
    assert_eq!(fourth.len(), 1);
    // A limit removed holds nothing.
    limit_queue(&store, "lim", None, None).await;
    let rest = take(&store, &["lim"], 10, expired).await;
    assert!(!rest.is_empty());
    let store = reopen(backend, store, expired).await;
    close(store).await;
}

/// Takes of a rate-limited queue are serialised (by the index lock, or on PostgreSQL by a lock
/// of the queue's row), but each read its clock before it waited: a take whose clock is older
/// than the last one's still counts every start of its own period, so the take before it must
/// not have forgotten them.
async fn a_take_with_an_older_clock_counts_the_starts_of_its_period(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let rate = RateLimit {
        limit: 3,
        period_ms: SECOND,
    };
    limit_queue(&store, "rated", None, Some(rate)).await;
    enqueue(&store, (0..10).map(|_| job("rated")).collect(), T0).await;
    assert_eq!(take(&store, &["rated"], 2, T0).await.len(), 2);
    // At 1.5 s the two starts at 0 are more than a period old: room for 2 more, 1 taken.
    assert_eq!(take(&store, &["rated"], 1, T0 + 1_500).await.len(), 1);
    // A take whose clock read 0.9 s: its period, (-0.1 s, 0.9 s], holds the two starts at 0,
    // and it counts the one at 1.5 s as well: no room.
    assert!(take(&store, &["rated"], 10, T0 + 900).await.is_empty());
    close(store).await;
}

/// A rate limit counts starts in buckets of a sixtieth of its period: a take hands out no more
/// than the period leaves, says until when it is held, and the starts survive a restart.
async fn rate_limits_hold_takes_back_across_restarts(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let rate = RateLimit {
        limit: 3,
        period_ms: 60 * SECOND,
    };
    limit_queue(&store, "rated", None, Some(rate)).await;
    let ids = enqueue(&store, (0..10).map(|_| job("rated")).collect(), T0).await;
    assert_eq!(taken_ids(&take(&store, &["rated"], 10, T0).await), ids[..3]);
    assert_eq!(
        store.limit_use("rated", T0).await,
        Ok(LimitUse { started: 3 })
    );
    let held = take_held(&store, &["rated"], 10, T0 + SECOND).await;
    assert!(held.jobs.is_empty());
    // The bucket [T0, T0 + 1 s) counts until its end is a period old.
    assert_eq!(held.held.until_ms, Some(T0 + 61 * SECOND));
    assert!(!held.held.in_flight);
    assert!(
        take(&store, &["rated"], 10, T0 + 61 * SECOND - 1)
            .await
            .is_empty()
    );
    // Pops count as starts too.
    let later = T0 + 61 * SECOND;
    let popped = store
        .pop_jobs(&["rated".to_owned()], 1, later)
        .await
        .expect("pop");
    assert_eq!(popped.len(), 1);
    assert_eq!(take(&store, &["rated"], 10, later).await.len(), 2);
    assert_eq!(
        store.limit_use("rated", later).await,
        Ok(LimitUse { started: 3 })
    );

    // The starts survive: still none to hand out after a restart.
    let store = reopen(backend, store, later).await;
    assert!(
        take(&store, &["rated"], 10, later + SECOND)
            .await
            .is_empty()
    );
    assert_eq!(
        store.limit_use("rated", later + SECOND).await,
        Ok(LimitUse { started: 3 })
    );
    let next = later + 61 * SECOND;
    assert_eq!(take(&store, &["rated"], 10, next).await.len(), 3);
    // Concurrency and rate together: the smaller room holds.
    limit_queue(&store, "both", Some(1), Some(rate)).await;
    enqueue(&store, (0..3).map(|_| job("both")).collect(), next).await;
    assert_eq!(take(&store, &["both"], 10, next).await.len(), 1);
    let held = take_held(&store, &["both"], 10, next).await;
    assert!(held.held.in_flight && held.jobs.is_empty());
    // A deleted queue forgets its starts.
    store.delete_queue("rated").await.expect("deleted");
    assert_eq!(
        store.limit_use("rated", next).await,
        Ok(LimitUse::default())
    );
    close(store).await;
}

// --- schedules -------------------------------------------------------------------------------

fn schedule(name: &str, queue: &str) -> Schedule {
    Schedule {
        name: name.to_owned(),
        cron: "* * * * *".to_owned(),
        timezone: "UTC".to_owned(),
        job: JobTemplate {
            queue: queue.to_owned(),
            kind: "tick".to_owned(),
            payload: RawValue::from_string(r#"{"n": 1}"#.to_owned()).expect("JSON"),
            priority: 3,
            policy: Some(StoredPolicy::new(fixed(SECOND))),
            retry_limit: Some(2),
        },
        missed: Missed::RunOnce,
        overlap: Overlap::Skip,
        paused: false,
        revision: 1,
        through_ms: T0,
        next_tick_ms: Some(T0 + 60 * SECOND),
        last_tick_ms: None,
        last_job: None,
        counts: TickCounts::default(),
        created_at_ms: T0,
        updated_at_ms: T0,
    }
}

fn same(a: &Schedule, b: &Schedule) -> bool {
    serde_json::to_value(a).expect("JSON") == serde_json::to_value(b).expect("JSON")
}

/// Schedules are made, changed atomically, found when due, and deleted; they survive a
/// restart.
async fn schedules_are_stored_changed_and_deleted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(
        store.schedule("a").await.expect("read").map(|s| s.name),
        None
    );
    let a = schedule("a", "q");
    let stored = store
        .update_schedule("a", &|current| {
            assert!(current.is_none());
            Some(a.clone())
        })
        .await
        .expect("made")
        .expect("stored");
    assert!(same(&stored, &a));
    let mut b = schedule("b", "q");
    b.next_tick_ms = Some(T0 + 10 * SECOND);
    store
        .update_schedule("b", &|_| Some(b.clone()))
        .await
        .expect("made");
    let mut paused = schedule("c", "q");
    paused.paused = true;
    paused.next_tick_ms = Some(T0);
    store
        .update_schedule("c", &|_| Some(paused.clone()))
        .await
        .expect("made");
    let names = |list: Vec<Schedule>| list.into_iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(
        names(store.schedules().await.expect("list")),
        ["a", "b", "c"]
    );
    // The maintenance loop wakes for the earliest tick of an unpaused schedule.
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 10 * SECOND)
    );
    // Due: unpaused, next tick at or before now, earliest first.
    assert_eq!(
        names(
            store
                .due_schedules(T0 + 59 * SECOND, 10)
                .await
                .expect("due")
        ),
        ["b"]
    );
    assert_eq!(
        names(
            store
                .due_schedules(T0 + 60 * SECOND, 10)
                .await
                .expect("due")
        ),
        ["b", "a"]
    );
    assert_eq!(
        names(store.due_schedules(T0 + 60 * SECOND, 1).await.expect("due")),
        ["b"]
    );
    // A change sees the stored schedule; `None` leaves it.
    let unchanged = store
        .update_schedule("a", &|current| {
            assert_eq!(current.map(|s| s.revision), Some(1));
            None
        })
        .await
        .expect("read");
    assert!(same(&unchanged.expect("there"), &a));
    let mut changed = a.clone();
    changed.cron = "*/5 * * * *".to_owned();
    changed.revision = 2;
    store
        .update_schedule("a", &|_| Some(changed.clone()))
        .await
        .expect("changed");
    let store = reopen(backend, store, T0).await;
    assert!(same(
        &store.schedule("a").await.expect("read").expect("there"),
        &changed
    ));
    assert!(store.delete_schedule("a").await.expect("deleted"));
    assert!(!store.delete_schedule("a").await.expect("deleted"));
    assert_eq!(names(store.schedules().await.expect("list")), ["b", "c"]);
    let store = reopen(backend, store, T0).await;
    close(store).await;
}

/// A tick's record and its job are stored together, only while the schedule is at the
/// revision the engine read: a second record of the same tick (another server, a restart)
/// stores neither, whoever loses a race.
async fn a_tick_is_recorded_once_with_its_job(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let first = schedule("s", "ticks");
    store
        .update_schedule("s", &|_| Some(first.clone()))
        .await
        .expect("made");
    let tick = T0 + 60 * SECOND;
    let mut next = first.clone();
    next.revision = 2;
    next.through_ms = tick;
    next.next_tick_ms = Some(tick + 60 * SECOND);
    next.last_tick_ms = Some(tick);
    next.counts.enqueued = 1;
    let jobs = || vec![job("ticks").at(tick).kind("tick")];
    let seen = current(&store).await;
    let recorded = store
        .record_tick(&next, 1, jobs(), seen, tick)
        .await
        .expect("recorded")
        .expect("at the revision read");
    let made = recorded[0].as_ref().expect("a job").id;
    let stored = store.schedule("s").await.expect("read").expect("there");
    assert_eq!(stored.revision, 2);
    assert_eq!(stored.last_job, Some(made));
    assert_eq!(stored.through_ms, tick);
    // The same tick again: nothing stored.
    let again = store
        .record_tick(&next, 1, jobs(), seen, tick)
        .await
        .expect("answered");
    assert!(again.is_none());
    let count = |store: Arc<dyn Store>| async move {
        store
            .count_jobs(&JobFilter::queue("ticks"))
            .await
            .expect("count")
    };
    assert_eq!(count(store.clone()).await, 1);
    // Two servers racing for the next tick: one wins.
    let mut third = next.clone();
    third.revision = 3;
    let (a, b) = tokio::join!(
        store.record_tick(&third, 2, jobs(), seen, tick),
        store.record_tick(&third, 2, jobs(), seen, tick),
    );
    let won = [a.expect("answered"), b.expect("answered")]
        .into_iter()
        .filter(Option::is_some)
        .count();
    assert_eq!(won, 1);
    assert_eq!(count(store.clone()).await, 2);
    // A record without a job moves the schedule on alone; a deleted schedule records nothing.
    let mut skipped = third.clone();
    skipped.revision = 4;
    skipped.counts.overlapped = 1;
    assert!(
        store
            .record_tick(&skipped, 3, Vec::new(), seen, tick)
            .await
            .expect("answered")
            .is_some()
    );
    // Stored as given: with no job made, `last_job` is what the engine carried forward.
    let kept = store.schedule("s").await.expect("read").expect("there");
    assert!(same(&kept, &skipped));
    let store = reopen(backend, store, tick).await;
    assert_eq!(count(store.clone()).await, 2);
    assert!(store.delete_schedule("s").await.expect("deleted"));
    let mut gone = skipped.clone();
    gone.revision = 5;
    assert!(
        store
            .record_tick(&gone, 4, jobs(), seen, tick)
            .await
            .expect("answered")
            .is_none()
    );
    assert_eq!(count(store.clone()).await, 2);
    close(store).await;
}

// --- secrets at rest -------------------------------------------------------------------------

/// What a subscription must never show at rest: its secrets, header values and options.
const AT_REST: [&str; 6] = [
    "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
    "whsec_b2xkc2VjcmV0b2xkc2VjcmV0b2xkc2VjcmV0",
    "Bearer hunter2",
    "billing",
    "zaqar-option-key",
    "second-header-value",
];

/// A subscription holding every kind of secret.
fn secret_subscription(endpoint: &str) -> Subscription {
    let mut s = subscription("q", endpoint);
    s.previous_secret = Some("whsec_b2xkc2VjcmV0b2xkc2VjcmV0b2xkc2VjcmV0".into());
    s.previous_secret_until_ms = Some(T0 + 60 * SECOND);
    s.headers
        .insert("Authorization".into(), "Bearer hunter2".into());
    s.options = Some(json!({"post_headers": {"X-Api-Key": "zaqar-option-key"}}));
    s
}

/// Which of [`AT_REST`] `dump` holds.
fn revealed(dump: &[u8]) -> Vec<&'static str> {
    AT_REST
        .into_iter()
        .filter(|secret| {
            dump.windows(secret.len())
                .any(|window| window == secret.as_bytes())
        })
        .collect()
}

/// The key a stored subscription names as the one that sealed it.
fn sealed_with(raw: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(raw).expect("stored JSON");
    value["sealed"]["key"].as_str().map(str::to_owned)
}

/// Secrets, previous secrets, header values and Zaqar options are sealed on their way to
/// storage: a copy of the files or a dump of the database holds none of them in clear, while
/// what the backend indexes (queue, endpoint) stays readable. They come back whole.
async fn secrets_are_sealed_at_rest(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    let changed = store
        .update_subscription(a.id, &|current| {
            let mut changed = current.clone();
            changed
                .headers
                .insert("X-Second".into(), "second-header-value".into());
            Some(changed)
        })
        .await
        .expect("changed");
    assert_eq!(changed.headers["X-Second"], "second-header-value");
    let (zaqar, _) = store
        .insert_subscription({
            let mut s = secret_subscription("https://z.example/");
            s.format = tenax::model::EnvelopeFormat::Zaqar;
            s
        })
        .await
        .expect("stored");
    close(store).await;
    let dump = backend.dump().await;
    assert_eq!(revealed(&dump), Vec::<&str>::new());
    let shows = |text: &str| dump.windows(text.len()).any(|w| w == text.as_bytes());
    assert!(shows("https://a.example/") && shows("https://z.example/"));
    let current = backend.keys().current().id().to_string();
    assert_eq!(
        sealed_with(&backend.raw_subscription(a.id).await),
        Some(current)
    );

    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(changed)));
    let read = store
        .subscription(zaqar.id)
        .await
        .expect("read")
        .expect("there");
    assert_eq!(read.secret, zaqar.secret);
    assert_eq!(read.options, zaqar.options);
    // The one the unique endpoint is held by.
    let (holder, created) = store
        .insert_subscription({
            let mut s = subscription("q", "https://z.example/");
            s.format = tenax::model::EnvelopeFormat::Zaqar;
            s
        })
        .await
        .expect("answered");
    assert!(!created);
    assert_eq!(holder, read);
    close(store).await;
}

/// A store is opened only with the key it is sealed with, even while it holds no
/// subscription: another key is refused by name, before anything is read with it, and the
/// refusal changes nothing.
async fn a_wrong_secrets_key_is_refused_and_changes_nothing(backend: &impl Backend) {
    close(backend.open(T0).await).await;
    let right = backend.keys();
    let wrong = Arc::new(Keyring::generate("/etc/tenax/wrong.key").expect("a key"));
    let refused = |error: StoreError| {
        let StoreError::Secrets(message) = &error else {
            panic!("refused for its key: {error:?}");
        };
        assert!(
            message.contains(&right.current().id().to_string())
                && message.contains("/etc/tenax/wrong.key")
                && message.contains(&wrong.current().id().to_string()),
            "{message}"
        );
        assert!(error.is_internal());
    };
    refused(
        backend
            .try_open_with(wrong.clone(), T0)
            .await
            .expect_err("an empty store sealed with another key"),
    );

    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    close(store).await;
    let raw = backend.raw_subscription(a.id).await;
    refused(
        backend
            .try_open_with(wrong.clone(), T0)
            .await
            .expect_err("a store sealed with another key"),
    );
    assert_eq!(backend.raw_subscription(a.id).await, raw, "left as it was");
    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(a)));
    close(store).await;
}

/// A rotation holds both keys while it seals everything again with the new one: wherever it
/// stops (some subscriptions sealed with each key), both keys open everything and finish it;
/// the new key alone opens the store only once nothing is sealed with the old one, and the old
/// key alone never again.
async fn a_key_rotation_loses_nothing_wherever_it_stops(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    let (b, _) = store
        .insert_subscription(subscription("q", "https://b.example/"))
        .await
        .expect("stored");
    close(store).await;
    let old = backend.keys();
    let b_sealed_with_old = backend.raw_subscription(b.id).await;

    let new = Key::generate().expect("a key");
    let new_id = new.id().to_string();
    let both = Arc::new(old.sealing_with(new));
    let new_alone = Arc::new(both.current_only().named("/etc/tenax/new.key"));
    let store = backend
        .try_open_with(both.clone(), T0)
        .await
        .expect("opens");
    assert_eq!(store.subscription(a.id).await, Ok(Some(a.clone())));
    close(store).await;
    for id in [a.id, b.id] {
        assert_eq!(
            sealed_with(&backend.raw_subscription(id).await).as_deref(),
            Some(new_id.as_str())
        );
    }

    // Stopped half-way: b still sealed with the old key.
    backend.set_raw_subscription(b.id, &b_sealed_with_old).await;
    let error = backend
        .try_open_with(new_alone.clone(), T0)
        .await
        .expect_err("b does not open with the new key alone");
    assert!(
        matches!(&error, StoreError::Secrets(m)
            if m.contains(&format!("subscription {}", b.id))
                && m.contains(&old.current().id().to_string())),
        "{error:?}"
    );
    let store = backend.try_open_with(both, T0).await.expect("opens");
    assert_eq!(store.subscription(b.id).await, Ok(Some(b.clone())));
    close(store).await;

    let store = backend
        .try_open_with(new_alone, T0)
        .await
        .expect("the new key alone opens it now");
    assert_eq!(store.subscription(a.id).await, Ok(Some(a)));
    assert_eq!(store.subscription(b.id).await, Ok(Some(b)));
    close(store).await;
    let error = backend
        .try_open_with(old.clone(), T0)
        .await
        .expect_err("the old key alone");
    assert!(matches!(error, StoreError::Secrets(_)), "{error:?}");
}

/// Subscriptions an earlier release kept in clear (with no key recorded) read as they were,
/// and are sealed at the first open; afterwards neither the files nor a dump show them, not
/// even where old copies of records linger.
async fn secrets_kept_in_clear_before_are_sealed_at_open(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let (a, _) = store
        .insert_subscription(secret_subscription("https://a.example/"))
        .await
        .expect("stored");
    let (b, _) = store
        .insert_subscription(subscription("r", "https://b.example/"))
        .await
        .expect("stored");
    close(store).await;
    let clear = |s: &Subscription| serde_json::to_string(s).expect("JSON");
    backend.set_raw_subscription(a.id, &clear(&a)).await;
    backend.set_raw_subscription(b.id, &clear(&b)).await;
    backend.as_before_sealing(clear(&a).as_bytes()).await;
    assert_eq!(revealed(&backend.dump().await), AT_REST[..5].to_vec());

    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(a.clone())));
    assert_eq!(store.subscriptions(Some("r")).await, Ok(vec![b.clone()]));
    close(store).await;
    assert_eq!(revealed(&backend.dump().await), Vec::<&str>::new());
    let key = backend.keys().current().id().to_string();
    for id in [a.id, b.id] {
        assert_eq!(
            sealed_with(&backend.raw_subscription(id).await).as_deref(),
            Some(key.as_str())
        );
    }
    // The files are as this version writes them: it opens them again as they are.
    let store = backend.open(T0).await;
    assert_eq!(store.subscription(a.id).await, Ok(Some(a)));
    close(store).await;
}

#[path = "common/postgres.rs"]
mod postgres_server;

/// PostgreSQL: a fresh database on the test server.
struct Postgres {
    url: Option<String>,
    /// What every server of the database would hold: the key file given to each.
    keys: Arc<Keyring>,
}

impl Postgres {
    async fn new() -> Self {
        Self {
            keys: Arc::new(Keyring::generate("cluster.key").expect("a key")),
            url: postgres_server::fresh_database().await,
        }
    }

    fn url(&self) -> &str {
        self.url.as_deref().expect("a test PostgreSQL")
    }

    async fn connect(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(self.url(), tokio_postgres::NoTls)
            .await
            .expect("connected to the test PostgreSQL");
        tokio::spawn(connection);
        client
    }
}

impl Backend for Postgres {
    async fn try_open(&self, now_ms: u64) -> Result<Arc<dyn Store>, StoreError> {
        self.try_open_with(self.keys.clone(), now_ms).await
    }

    async fn try_open_with(
        &self,
        keys: Arc<Keyring>,
        now_ms: u64,
    ) -> Result<Arc<dyn Store>, StoreError> {
        let database = Database::new(self.url(), None).expect("the test database's URL");
        let options = PostgresOptions::new(database, keys);
        Ok(Arc::new(
            PostgresStore::open(&options, &tenax::clock::Clock::manual(now_ms)).await?,
        ))
    }

    fn keys(&self) -> Arc<Keyring> {
        self.keys.clone()
    }

    /// Every row of every table of Tenax's, as text: what `pg_dump` would write of the data.
    async fn dump(&self) -> Vec<u8> {
        let client = self.connect().await;
        let tables = client
            .query(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'tenax%' ORDER BY 1",
                &[],
            )
            .await
            .expect("the tables");
        assert!(tables.len() > 5, "the dump sees the tables");
        let mut all = String::new();
        for table in tables {
            let name: String = table.get(0);
            for row in client
                .query(&format!("SELECT t::text FROM {name} t"), &[])
                .await
                .expect("the rows")
            {
                all.push_str(row.get::<_, &str>(0));
                all.push('\n');
            }
        }
        all.into_bytes()
    }

    async fn raw_subscription(&self, id: SubscriptionId) -> String {
        let id = i64::try_from(id.0).expect("an id");
        self.connect()
            .await
            .query_one("SELECT body FROM tenax_subscriptions WHERE id = $1", &[&id])
            .await
            .expect("the subscription")
            .get(0)
    }

    async fn set_raw_subscription(&self, id: SubscriptionId, raw: &str) {
        let id = i64::try_from(id.0).expect("an id");
        let changed = self
            .connect()
            .await
            .execute(
                "UPDATE tenax_subscriptions SET body = $2 WHERE id = $1",
                &[&id, &raw],
            )
            .await
            .expect("stored");
        assert_eq!(changed, 1);
    }

    /// Schema 7, before `tenax_secrets_key`. (Old row versions are PostgreSQL's to keep: the
    /// table is rewritten after sealing what was in clear, which a dump cannot show.)
    async fn as_before_sealing(&self, _stale: &[u8]) {
        self.connect()
            .await
            .batch_execute("DROP TABLE tenax_secrets_key; UPDATE tenax_schema SET version = 7")
            .await
            .expect("as schema 7 left it");
    }

    async fn format(&self) -> u64 {
        let row = self
            .connect()
            .await
            .query_one("SELECT version FROM tenax_schema", &[])
            .await
            .expect("the schema version");
        u64::try_from(row.get::<_, i64>(0)).expect("a version")
    }

    async fn stamp_format(&self, version: u64) {
        let version = i64::try_from(version).expect("a version");
        self.connect()
            .await
            .execute("UPDATE tenax_schema SET version = $1", &[&version])
            .await
            .expect("stamped");
    }

    fn missing(&self) -> bool {
        self.url.is_none()
    }
}

// --- the suite, once per backend -------------------------------------------------------------

/// One `#[tokio::test]` per case, in a module named after the backend; `$backend` is an
/// expression giving a fresh [`Backend`] for each test.
macro_rules! conformance_suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            conformance_suite!(@cases $backend;
                enqueue_is_atomic_and_ids_increase,
                unique_keys_refuse_or_return_the_holder,
                take_is_by_priority_then_age_and_leases,
                complete_needs_the_current_lease,
                fail_asks_the_decision_and_records_it,
                expired_leases_go_to_the_decision,
                a_queues_expiry_waits_for_a_lease_being_ended,
                takes_and_pops_skip_jobs_past_their_expiry,
                lease_tokens_are_unpredictable_and_exact,
                acknowledgements_after_a_leases_end_are_refused,
                due_jobs_are_promoted,
                a_closed_stream_releases_its_jobs,
                dead_jobs_are_replayed,
                replay_respects_unique_keys,
                jobs_are_deleted_by_selection,
                finished_jobs_are_purged_after_retention,
                list_filters_and_pages,
                listings_page_both_ways_by_queue_type_and_status,
                searches_are_bounded_and_go_on,
                runs_now_and_replays_mark_the_next_run,
                heads_of_queues_tell_how_long_they_waited,
                counts_per_queue_and_status,
                backlog_and_lease_facts_are_reported,
                queue_configs_are_kept,
                leases_across_a_restart_follow_the_declared_property,
                claims_are_renewed_ended_and_forgotten,
                pop_takes_and_deletes_ready_jobs,
                peeks_and_checked_deletes_see_the_current_state,
                list_filters_for_messages_and_counts_agree,
                expired_jobs_are_deleted_whatever_their_status,
                subscriptions_are_stored_changed_and_deleted,
                unique_endpoints_are_held_per_queue,
                deliveries_are_stored_with_their_message_and_subscription,
                deliveries_are_taken_finished_and_logged,
                tokens_are_stored_by_id,
                endpoint_states_change_atomically_and_are_kept,
                queues_are_deleted_with_their_jobs,
                signals_announce_what_may_have_changed,
                a_lone_server_leads,
                close_keeps_everything_acknowledged,
                newer_formats_are_refused,
                racing_operations_on_a_job_are_serialised,
                concurrent_small_enqueues_keep_their_own_jobs,
                inserts_are_never_made_on_facts_older_than_a_change,
                concurrency_limits_hold_takes_back,
                rate_limits_hold_takes_back_across_restarts,
                a_take_with_an_older_clock_counts_the_starts_of_its_period,
                schedules_are_stored_changed_and_deleted,
                a_tick_is_recorded_once_with_its_job,
                secrets_are_sealed_at_rest,
                a_wrong_secrets_key_is_refused_and_changes_nothing,
                a_key_rotation_loses_nothing_wherever_it_stops,
                secrets_kept_in_clear_before_are_sealed_at_open,
            );
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend = $backend;
                if backend.missing() {
                    return;
                }
                super::$case(&backend).await;
            }
        )+
    };
}

conformance_suite!(embedded, Embedded::new());
conformance_suite!(postgres, Postgres::new().await);

// --- what only the embedded store promises ------------------------------------------------

/// The embedded store keeps leases in memory, one process uses it, and enqueues read their
/// queue's facts live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_properties() {
    let backend = Embedded::new();
    let store = backend.open(T0).await;
    assert_eq!(
        store.properties(),
        StoreProperties {
            durable_leases: false,
            shared: false,
            cached_facts: false,
        }
    );
    close(store).await;
}

/// PostgreSQL keeps leases in the database, any number of servers share it, and each caches
/// what enqueues need of queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_properties() {
    let backend = Postgres::new().await;
    if backend.missing() {
        return;
    }
    let store = backend.open(T0).await;
    assert_eq!(
        store.properties(),
        StoreProperties {
            durable_leases: true,
            shared: true,
            cached_facts: true,
        }
    );
    close(store).await;
}

/// Servers given different keys that open an empty database at the same moment cannot both
/// record theirs: they take turns, and the second is refused before it seals anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_servers_opening_together_with_different_keys_are_refused_but_one() {
    let backend = Postgres::new().await;
    if backend.missing() {
        return;
    }
    let other = Arc::new(Keyring::generate("other.key").expect("a key"));
    let (one, two) = tokio::join!(
        backend.try_open_with(backend.keys(), T0),
        backend.try_open_with(other, T0)
    );
    let (opened, refused) = match (one, two) {
        (Ok(store), Err(error)) | (Err(error), Ok(store)) => (store, error),
        (one, two) => panic!("one opens, one is refused: {one:?} {two:?}"),
    };
    assert!(matches!(refused, StoreError::Secrets(_)), "{refused:?}");
    close(opened).await;
}

/// Without a sync per commit, `close` still writes out everything acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_unsynced_close_keeps_everything_acknowledged() {
    close_keeps_everything_acknowledged(&Embedded::unsynced()).await;
}
