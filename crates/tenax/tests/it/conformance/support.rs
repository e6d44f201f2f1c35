//! What the cases share: the [`Backend`] trait and the two backends, the helpers that build
//! jobs, take and acknowledge them and check a reopened store ([`reopen`]), and the
//! [`conformance_suite!`] macro that makes the tests.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redb::{ReadableDatabase, TableDefinition};
use serde_json::json;
use serde_json::value::RawValue;
use tempfile::TempDir;
use tenax_core::auth::{Role, TokenRecord};
use tenax_core::model::subscription::{DELIVERY_KIND, delivery_queue};
use tenax_core::model::{
    Ack, Attempt, AttemptResult, ClaimId, Enqueued, ErrorEntry, Job, JobFilter, JobId, JobTemplate,
    Missed, NewJob, OnDuplicate, Overlap, Page, QueueCounts, Schedule, Status, StoredPolicy,
    Subscription, SubscriptionId, TakenJob, TickCounts,
};
use tenax_core::secrets::{Keyring, SECRETS_KEY_FILE};
use tenax_core::store::{
    DecideContext, FactsSeen, Insert, Store, StoreError, StoreProperties, TakeRequest, Transition,
};
use tenax_embedded::EmbeddedOptions;
use tenax_embedded::EmbeddedStore;
use tenax_policy::{RetryPolicy, Shape};
use tenax_postgres::{Database, PostgresOptions, PostgresStore};
use tokio::sync::Notify;

/// Every case starts at this time (ms since the epoch).
pub(crate) const T0: u64 = 1_800_000_000_000;
pub(crate) const SECOND: u64 = 1_000;

// --- backends --------------------------------------------------------------------------------

/// One backend at one location. `open` gives a store on the data the last closed store there
/// left behind (empty the first time).
pub(crate) trait Backend {
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

    /// Why `case` does not hold on this backend, by design (and where what holds instead is
    /// checked): the case is then skipped, saying so.
    fn skips(&self, case: &str) -> Option<&'static str> {
        let _ = case;
        None
    }
}

/// The embedded store in a temporary directory.
pub(crate) struct Embedded {
    dir: TempDir,
    options: EmbeddedOptions,
}

impl Embedded {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("tenax-store-")
                .tempdir()
                .expect("a temporary directory"),
            options: EmbeddedOptions::default(),
        }
    }

    /// Commits are acknowledged before they are synced.
    pub(crate) fn unsynced() -> Self {
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

    /// Format 3, no key recorded nor key file (nor the payload data key it seals), and
    /// `stale` in the log's unused tail, where an earlier release's records of the same
    /// subscriptions would linger.
    async fn as_before_sealing(&self, stale: &[u8]) {
        self.stamp_format(3).await;
        self.with_file(|db| {
            let tx = db.begin_write().expect("a write");
            tx.open_table(TableDefinition::<&str, u64>::new("meta"))
                .expect("the meta table")
                .remove("secrets_key")
                .expect("removed");
            tx.delete_table(TableDefinition::<&str, &[u8]>::new("payload_key"))
                .expect("the payload data key's table removed");
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

// --- PostgreSQL ------------------------------------------------------------------------------

use crate::common::postgres as postgres_server;

/// PostgreSQL: a fresh database on the test server.
pub(crate) struct Postgres {
    url: Option<String>,
    /// What every server of the database would hold: the key file given to each.
    keys: Arc<Keyring>,
}

impl Postgres {
    pub(crate) async fn new() -> Self {
        Self {
            keys: Arc::new(Keyring::generate("cluster.key").expect("a key")),
            url: postgres_server::fresh_database().await,
        }
    }

    pub(crate) fn url(&self) -> &str {
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
            PostgresStore::open(&options, &tenax_core::clock::Clock::manual(now_ms)).await?,
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

    /// Schema 7, before `tenax_secrets_key` (and what later versions added). (Old row versions
    /// are PostgreSQL's to keep: the table is rewritten after sealing what was in clear, which
    /// a dump cannot show.)
    async fn as_before_sealing(&self, _stale: &[u8]) {
        self.connect()
            .await
            .batch_execute(
                "DROP FUNCTION tenax_ready_head(text, bigint, bigint);
                 DROP INDEX tenax_jobs_in_flight;
                 CREATE INDEX tenax_jobs_in_flight ON tenax_jobs (claim_id) WHERE status = 2;
                 DROP TRIGGER tenax_batch_member_finished ON tenax_jobs;
                 DROP TRIGGER tenax_batch_member_replayed ON tenax_finished;
                 DROP FUNCTION tenax_batch_member_finished(), tenax_batch_member_replayed(),
                     tenax_batch_settle(bigint, bigint),
                     tenax_batch_callback(tenax_batches, text, bigint);
                 DROP TABLE tenax_batches; DROP SEQUENCE tenax_batch_ids;
                 DROP TABLE tenax_payload_key; DROP VIEW tenax_all_jobs;
                 DROP INDEX tenax_finished_cancelled;
                 ALTER TABLE tenax_jobs DROP COLUMN payload_sealed, DROP COLUMN result,
                     DROP COLUMN cancel_requested, DROP COLUMN after_ids,
                     DROP COLUMN on_parent_dead, DROP COLUMN pending, DROP COLUMN has_children,
                     DROP COLUMN batch_id;
                 ALTER TABLE tenax_finished DROP COLUMN payload_sealed, DROP COLUMN result,
                     DROP COLUMN cancel_requested, DROP COLUMN after_ids,
                     DROP COLUMN on_parent_dead, DROP COLUMN pending, DROP COLUMN has_children,
                     DROP COLUMN batch_id;
                 DROP TABLE tenax_edges;
                 CREATE VIEW tenax_all_jobs AS
                     SELECT * FROM tenax_jobs UNION ALL SELECT * FROM tenax_finished;
                 DROP TABLE tenax_activity; ALTER TABLE tenax_servers DROP COLUMN about, DROP COLUMN pools_seen;
                 DROP TABLE tenax_pools, tenax_flavors, tenax_placements, tenax_stripes,
                     tenax_catalogue;
                 DROP TABLE tenax_moved, tenax_forwards, tenax_moves;
                 DROP FUNCTION tenax_refuse_moved_queue(), tenax_refuse_moved_name(),
                     tenax_refuse_moved_schedule(),
                     tenax_refuse_moved(text);
                 DROP TABLE tenax_secrets_key; UPDATE tenax_schema SET version = 7",
            )
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

/// A pooled deployment (`tenax-pools`): a catalogue and two pools, three fresh databases on
/// the test server; queues are placed on the two pools by their names, so the cases' queues
/// spread over both. What the backend's own hooks read and write is the catalogue's.
pub(crate) struct Pooled {
    /// The catalogue's database, as a single database before its pools are registered.
    pub(crate) catalogue: Postgres,
    pools: [Option<String>; 2],
}

impl Pooled {
    pub(crate) async fn new() -> Self {
        Self {
            catalogue: Postgres::new().await,
            pools: [
                postgres_server::fresh_database().await,
                postgres_server::fresh_database().await,
            ],
        }
    }

    /// Every database of the deployment, the catalogue first.
    fn databases(&self) -> Vec<Postgres> {
        std::iter::once(self.catalogue.url.clone())
            .chain(self.pools.iter().cloned())
            .map(|url| Postgres {
                url,
                keys: self.catalogue.keys.clone(),
            })
            .collect()
    }

    /// The database that holds subscription `id`.
    async fn holding(&self, id: SubscriptionId) -> Postgres {
        let wanted = i64::try_from(id.0).expect("an id");
        for database in self.databases() {
            let held = database
                .connect()
                .await
                .query(
                    "SELECT 1 FROM tenax_subscriptions WHERE id = $1",
                    &[&wanted],
                )
                .await
                .expect("looked for");
            if !held.is_empty() {
                return database;
            }
        }
        panic!("no database holds subscription {id}");
    }

    /// Registers the pools in the catalogue, once.
    async fn register(&self, keys: &Arc<Keyring>, now_ms: u64) -> Result<(), StoreError> {
        let database = Database::new(self.catalogue.url(), None).expect("the catalogue's URL");
        let options = PostgresOptions::new(database, keys.clone());
        let catalogue =
            PostgresStore::open(&options, &tenax_core::clock::Clock::manual(now_ms)).await?;
        if catalogue.pools().await?.is_empty() {
            for (at, uri) in self.pools.iter().enumerate() {
                let new = tenax_core::model::pool::PoolSpec {
                    name: format!("pool-{}", at + 1),
                    uri: uri.clone().expect("a database"),
                    weight: 1,
                    flavor: None,
                    options: serde_json::Map::new(),
                };
                let clock = tenax_core::clock::Clock::manual(now_ms);
                tenax_pools::admin::register(&catalogue, &options, new, &clock).await?;
            }
        }
        tenax_core::store::StoreLifecycle::close(&catalogue).await;
        Ok(())
    }
}

impl Backend for Pooled {
    async fn try_open(&self, now_ms: u64) -> Result<Arc<dyn Store>, StoreError> {
        self.try_open_with(self.catalogue.keys.clone(), now_ms)
            .await
    }

    async fn try_open_with(
        &self,
        keys: Arc<Keyring>,
        now_ms: u64,
    ) -> Result<Arc<dyn Store>, StoreError> {
        self.register(&keys, now_ms).await?;
        let database = Database::new(self.catalogue.url(), None).expect("the catalogue's URL");
        let options = PostgresOptions::new(database, keys);
        let store =
            tenax_pools::PooledStore::open(&options, &tenax_core::clock::Clock::manual(now_ms))
                .await?;
        Ok(store)
    }

    fn keys(&self) -> Arc<Keyring> {
        self.catalogue.keys()
    }

    async fn dump(&self) -> Vec<u8> {
        let mut all = Vec::new();
        for database in self.databases() {
            all.extend(database.dump().await);
        }
        all
    }

    async fn raw_subscription(&self, id: SubscriptionId) -> String {
        self.holding(id).await.raw_subscription(id).await
    }

    async fn set_raw_subscription(&self, id: SubscriptionId, raw: &str) {
        self.holding(id).await.set_raw_subscription(id, raw).await;
    }

    async fn as_before_sealing(&self, stale: &[u8]) {
        for database in self.databases() {
            database.as_before_sealing(stale).await;
        }
    }

    async fn format(&self) -> u64 {
        self.catalogue.format().await
    }

    async fn stamp_format(&self, version: u64) {
        self.catalogue.stamp_format(version).await;
    }

    fn missing(&self) -> bool {
        self.catalogue.missing() || self.pools.iter().any(Option::is_none)
    }

    fn skips(&self, case: &str) -> Option<&'static str> {
        match case {
            "a_job_waits_for_every_parent"
            | "every_end_of_a_parent_settles_its_children"
            | "pop_takes_and_deletes_ready_jobs" => Some(
                "its jobs (or the jobs they wait for) are in queues placed on two pools, which \
                 one transaction cannot span: refused (pools::what_one_transaction_cannot_span_is_refused)",
            ),
            "imported_records_keep_their_ids_and_state"
            | "imported_waiting_jobs_wait_as_they_did" => Some(
                "`tenax copy` into a pooled deployment is refused (pools::imports_are_refused)",
            ),
            "secrets_kept_in_clear_before_are_sealed_at_open" => Some(
                "the database as schema 7 left it has no placements: a pooled deployment \
                 starts at schema 16",
            ),
            _ => None,
        }
    }
}

impl Pooled {
    /// The number of the pool `queue` is placed on, if it is placed.
    pub(crate) async fn placement(&self, queue: &str) -> Option<u8> {
        self.catalogue
            .connect()
            .await
            .query(
                "SELECT pool FROM tenax_placements WHERE queue = $1",
                &[&queue],
            )
            .await
            .expect("the placement")
            .first()
            .map(|row| u8::try_from(row.get::<_, i16>(0)).expect("a number"))
    }

    /// How many jobs (unfinished and finished) the database of pool `number` holds.
    pub(crate) async fn jobs_in(&self, number: u8) -> i64 {
        self.databases()[usize::from(number)]
            .connect()
            .await
            .query_one(
                "SELECT (SELECT count(*) FROM tenax_jobs) + (SELECT count(*) FROM tenax_finished)",
                &[],
            )
            .await
            .expect("the count")
            .get(0)
    }
}

// --- helpers ---------------------------------------------------------------------------------

/// A job for `queue`, ready at [`T0`]; adjust with the [`Build`] methods.
pub(crate) fn job(queue: &str) -> Insert {
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
            payload_sealed: false,
            after: Vec::new(),
            on_parent_dead: Default::default(),
            batch: None,
        },
        parent: None,
        owner: None,
        after: Vec::new(),
    }
}

pub(crate) trait Build {
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
pub(crate) fn delivery(subscription: SubscriptionId, parent: usize) -> Insert {
    let mut insert = job(&delivery_queue(subscription)).kind(DELIVERY_KIND);
    insert.parent = Some(parent);
    insert.owner = Some(subscription);
    insert
}

/// A subscription of `queue` to `endpoint` (its id is the store's to assign). Built from JSON,
/// so that fields added later take their defaults.
pub(crate) fn subscription(queue: &str, endpoint: &str) -> Subscription {
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
pub(crate) fn zaqar_subscription(queue: &str, endpoint: &str) -> Subscription {
    let mut subscription = subscription(queue, endpoint);
    subscription.format = tenax_core::model::EnvelopeFormat::Zaqar;
    assert_eq!(subscription.unique_endpoint(), Some(endpoint));
    subscription
}

/// One POST of a delivery.
pub(crate) fn attempt(n: u32, at_ms: u64, result: AttemptResult, status: u16) -> Attempt {
    Attempt {
        attempt: n,
        trigger: tenax_core::model::Trigger::Scheduled,
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
pub(crate) fn token(name: &str, role: Role) -> TokenRecord {
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
pub(crate) async fn fires<T>(signal: &Notify, what: &str, action: impl Future<Output = T>) -> T {
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
pub(crate) fn after_restart(properties: StoreProperties, status: Status) -> Status {
    if status == Status::InFlight && !properties.durable_leases {
        Status::Ready
    } else {
        status
    }
}

/// Closes a store and lets go of it, so that its data can be opened again.
pub(crate) async fn close(store: Arc<dyn Store>) {
    store.close().await;
}

/// The policy of the job's queue, as a decision sees it.
pub(crate) fn queue_policy_of(ctx: &DecideContext<'_>) -> Option<RetryPolicy> {
    ctx.queue_config
        .and_then(|c| c.policy.as_ref())
        .map(|p| (**p.policy()).clone())
}

pub(crate) fn fixed(delay_ms: u64) -> RetryPolicy {
    RetryPolicy::new(Shape::Fixed { delay_ms })
}

/// The subscribers of `queue`, as an enqueue reads them.
pub(crate) async fn subscribers(
    store: &Arc<dyn Store>,
    queue: &str,
) -> Result<Vec<SubscriptionId>, StoreError> {
    store
        .queue_facts(queue)
        .await
        .map(|f| f.subscribers.clone())
}

/// The facts version an enqueue made now would have read.
pub(crate) async fn current(store: &Arc<dyn Store>) -> FactsSeen {
    current_of(store, "q").await
}

/// The facts version an enqueue into `queue` made now would have read (a pooled store's
/// versions are those of the queue's pool).
pub(crate) async fn current_of(store: &Arc<dyn Store>, queue: &str) -> FactsSeen {
    store.queue_facts(queue).await.expect("facts read").seen
}

/// Inserts jobs of their own (no parent, no owner): one result each.
pub(crate) async fn insert(
    store: &Arc<dyn Store>,
    jobs: Vec<Insert>,
    on_duplicate: OnDuplicate,
    now_ms: u64,
) -> Result<Vec<Enqueued>, StoreError> {
    let count = jobs.len();
    // The facts of what is inserted (a pooled store's versions are those of its pools), read
    // again once if the insert says they are old, as the engine does (the seam allows it of
    // a store with cached facts: another insert may have placed a new queue meanwhile).
    let queue = jobs
        .first()
        .map_or("q", |first| first.job.queue.as_str())
        .to_owned();
    let inserted = match store
        .insert_jobs(
            jobs.clone(),
            on_duplicate,
            current_of(store, &queue).await,
            now_ms,
        )
        .await
    {
        Err(StoreError::FactsChanged) if store.properties().cached_facts => {
            let seen = current_of(store, &queue).await;
            store.insert_jobs(jobs, on_duplicate, seen, now_ms).await
        }
        other => other,
    };
    let results: Vec<Enqueued> = inserted?.into_iter().flatten().collect();
    assert_eq!(results.len(), count, "one result per job of its own");
    Ok(results)
}

pub(crate) async fn enqueue(store: &Arc<dyn Store>, jobs: Vec<Insert>, now_ms: u64) -> Vec<JobId> {
    insert(store, jobs, OnDuplicate::Refuse, now_ms)
        .await
        .expect("enqueued")
        .iter()
        .map(|e| e.id)
        .collect()
}

pub(crate) async fn take_on(
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
pub(crate) async fn take(
    store: &Arc<dyn Store>,
    queues: &[&str],
    max: usize,
    now_ms: u64,
) -> Vec<TakenJob> {
    take_on(store, queues, max, 30 * SECOND, None, now_ms).await
}

pub(crate) fn taken_ids(jobs: &[TakenJob]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

/// `complete_jobs` without what the backend reports of each lease, which
/// `backlog_and_lease_facts_are_reported` checks.
pub(crate) trait CompletePlain {
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
        let results = self.complete_jobs(acks, &[], retain, now_ms).await?;
        Ok(results.into_iter().map(|r| r.map(drop)).collect())
    }
}

pub(crate) fn ack(job: &TakenJob) -> Ack {
    Ack {
        id: job.id,
        lease: job.lease_token,
    }
}

pub(crate) async fn get(store: &Arc<dyn Store>, id: JobId) -> Job {
    store
        .get_job(id)
        .await
        .expect("readable")
        .unwrap_or_else(|| panic!("job {id} exists"))
}

pub(crate) async fn status(store: &Arc<dyn Store>, id: JobId) -> Option<Status> {
    store
        .get_job(id)
        .await
        .expect("readable")
        .map(|j| j.state.status)
}

pub(crate) async fn list(
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

pub(crate) fn error_entry(ctx: &DecideContext<'_>, now_ms: u64, message: &str) -> ErrorEntry {
    ErrorEntry {
        attempt: ctx.state.failures + 1,
        at_ms: now_ms,
        message: message.to_owned(),
        detail: None,
    }
}

/// A decision: retry `delay_ms` after `now_ms`, recording `message`.
pub(crate) fn retry(
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
pub(crate) fn dead(
    now_ms: u64,
    message: &str,
) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
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
pub(crate) fn again(
    now_ms: u64,
    message: &str,
) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
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
pub(crate) async fn kill(store: &Arc<dyn Store>, queue: &str, ids: &[JobId], now_ms: u64) {
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
/// every subscription and every token; and the activity per minute where the backend keeps it
/// ([`StoreProperties::durable_activity`]).
pub(crate) async fn snapshot(store: &Arc<dyn Store>, now_ms: u64) -> serde_json::Value {
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
    // The activity per minute, where the backend keeps it across a restart.
    let activity: Vec<(u64, tenax_core::model::activity::Counts)> = if properties.durable_activity {
        store
            .activity(0, u64::MAX)
            .await
            .expect("activity")
            .into_iter()
            .map(|m| (m.at_ms, m.counts))
            .collect()
    } else {
        Vec::new()
    };
    json!({
        "activity": activity,
        "jobs": jobs,
        "attempts": attempts,
        "queues": queues,
        "subscriptions": subscriptions,
        "tokens": tokens,
        "schedules": schedules,
    })
}

/// The counts `jobs` imply, sorted by queue; queues without jobs left out.
pub(crate) fn counts_of(jobs: &[Job]) -> Vec<QueueCounts> {
    let mut by_queue: std::collections::BTreeMap<&str, tenax_core::model::StatusSlots> =
        Default::default();
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
            |(
                queue,
                [
                    scheduled,
                    ready,
                    in_flight,
                    completed,
                    dead,
                    cancelled,
                    waiting,
                ],
            )| QueueCounts {
                queue: queue.to_owned(),
                scheduled,
                ready,
                in_flight,
                completed,
                dead,
                cancelled,
                waiting,
            },
        )
        .collect()
}

/// Closes the store, reopens it at `now_ms`, and checks that nothing acknowledged changed (see
/// [`snapshot`]), that the backend declares the same properties, and that the counts match the
/// jobs. Returns the reopened store.
pub(crate) async fn reopen(
    backend: &impl Backend,
    store: Arc<dyn Store>,
    now_ms: u64,
) -> Arc<dyn Store> {
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

/// A schedule `name` of a job in `queue` every minute, its first tick a minute after [`T0`].
pub(crate) fn schedule(name: &str, queue: &str) -> Schedule {
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

// --- the tests, every case on every backend --------------------------------------------------

/// The tests: for each backend, a module named after it with one `#[tokio::test]` per case,
/// named after the case (`embedded::due_jobs_are_promoted`), wherever the case's family file
/// is. Each backend is `name: <an expression giving a fresh Backend>`, evaluated once per
/// test; each family is `file: [its cases]`. A test whose backend is missing (no PostgreSQL
/// server, and none required) passes without running, as the harness has said on stderr.
macro_rules! conformance_suite {
    (
        backends: { $($module:ident: $backend:expr),+ $(,)? },
        cases: $cases:tt $(,)?
    ) => {
        $($crate::conformance::support::conformance_suite!(@backend $module, $backend, $cases);)+
    };
    (
        @backend $module:ident, $backend:expr,
        { $($family:ident: [$($case:ident),+ $(,)?]),+ $(,)? }
    ) => {
        mod $module {
            use super::*;

            $($(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let backend = $backend;
                    if backend.missing() {
                        return;
                    }
                    if let Some(why) = backend.skips(stringify!($case)) {
                        eprintln!("skipped on this backend: {why}");
                        return;
                    }
                    $crate::conformance::$family::$case(&backend).await;
                }
            )+)+
        }
    };
}

pub(crate) use conformance_suite;
