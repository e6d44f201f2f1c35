//! The embedded store: a redb file and a write-ahead log for durability, in-memory indexes for
//! the hot path.
//!
//! Every operation takes the index lock, changes memory, submits its writes to the group-commit
//! writer (still under the lock, so the disk sees changes in memory's order), releases the lock
//! and waits for the commit. Only new jobs wait to become visible until their commit is durable:
//! a worker can never run a job whose enqueue was not acknowledged.
//!
//! Durability contract: jobs, their states, errors and attempts, queue settings, subscriptions,
//! endpoint states and tokens are durable once acknowledged: the commit's record is synced in
//! the write-ahead log (`wal`), and the redb file follows, many commits at a time
//! (`unapplied`), settled before any read of it. Leases and claims live in memory only: a
//! restart returns every in-flight job to ready (at least once), which is what
//! [`StoreProperties::durable_leases`] `false` declares. So does the activity per minute, which
//! counts what the one server did from its start ([`StoreProperties::durable_activity`]
//! `false`). One process uses the store
//! ([`StoreProperties::shared`] `false`), so leadership is always granted and the signals wake
//! that process.
//!
//! Memory holds what can change; completed jobs are on disk only (`history`), so memory follows
//! the backlog, not the retention.
//!
//! Files: the layout is in [`tables`] and `wal`; one file per family of the seam. `recover`
//! brings the redb file up to date with the log at open, and refuses a damaged log; [`repair`]
//! is `tenax repair`. The storage itself can be a [`disk::SimulatedDisk`], for tests of the
//! disk contract.

mod activity;
pub mod backup;
mod batches;
mod cancel;
mod claims;
mod copy;
mod curation;
mod dependencies;
pub mod disk;
mod endpoints;
mod enqueue;
mod history;
mod import;
pub mod index;
mod leases;
mod limits;
mod ops;
mod queues;
mod read;
mod recover;
pub mod repair;
mod schedules;
mod sealing;
mod servers;
mod sorted;
mod subscriptions;
mod tables;
mod tokens;
mod unapplied;
mod upgrade;
mod upkeep;
pub mod vacancy;
mod wal;
mod writer;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable};
use tenax_core::auth::TokenRecord;
use tenax_core::clock::UnixMs;
use tenax_core::model::activity::MinuteRing;
use tenax_core::model::backup::BackupManifest;
use tenax_core::model::{
    Batch, BatchId, BatchState, ClaimId, EndpointState, JobId, JobIdMap, JobState, OnParentDead,
    QueueConfig, Schedule, Status, StoredPolicy, Subscription, SubscriptionId,
};
use tenax_core::secrets::{KeyId, Keyring, PayloadKey, SECRETS_KEY_FILE, files};
use tenax_core::store::sealed::from_stored;
use tenax_core::store::{
    ClaimRecord, CommitObserver, Signals, StartBucket, StoreError, StoreLifecycle, StoreProperties,
    from_json_bytes,
};

use self::disk::{FileLog, LogFile, SimulatedDisk};
use self::index::{Entry, Index};
use self::sealing::KeySource;
use self::tables::{
    ATTEMPTS, BATCHES, CHILDREN, COMPLETED, COMPLETED_AT, COMPLETED_COUNTS, COMPLETED_EXPIRING,
    ENDPOINTS, ERRORS, FORMAT_VERSION, FORMAT_VERSION_KEY, JOBS, META, NEXT_BATCH_ID, NEXT_ID,
    NEXT_SUBSCRIPTION_ID, NEXT_TOKEN_ID, POLICIES, QUEUES, SCHEDULES, STARTS, STATES,
    SUBSCRIPTIONS, StoredBody, TOKENS,
};
use self::writer::Writer;

/// The redb file in a data directory.
pub const FILE_NAME: &str = "tenax.redb";

/// Options of the embedded store.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Acknowledge only after fsync (group commit). Off: commits are synced at most 500 ms later.
    pub sync: bool,
    /// redb's page cache.
    pub cache_bytes: usize,
    /// The size the write-ahead log is made with.
    pub log_bytes: u64,
    /// Where each commit is reported, for the metrics.
    pub commits: Option<Arc<dyn CommitObserver>>,
    /// The keys that seal the subscriptions' secrets (`--secrets-key-file`). `None`: the data
    /// directory's `secrets.key`, made at the first open (`sealing`).
    pub secrets: Option<Arc<Keyring>>,
}

/// The page cache's size unless `--cache-mb` says otherwise, in MiB (docs/benchmarks.md, "Memory:
/// the page cache and what the allocator keeps": at 16 a take misses the cache for bodies).
pub const DEFAULT_CACHE_MB: usize = 24;

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            sync: true,
            cache_bytes: DEFAULT_CACHE_MB * 1024 * 1024,
            log_bytes: wal::CAPACITY,
            commits: None,
            secrets: None,
        }
    }
}

#[derive(Debug)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    /// Taken by requests, and by the writer to bring memory up to date after a commit.
    inner: Arc<Mutex<Inner>>,
    writer: Writer,
    signals: Arc<Signals>,
    /// Seal the subscriptions' secrets on their way to disk (memory holds them opened).
    keys: Arc<Keyring>,
    /// The data key of encrypted queues' payloads, opened at start (`sealing::payload_key`).
    payload_key: PayloadKey,
    /// The activity per minute, in memory: one server counts it, from its start (`activity`).
    activity: Mutex<MinuteRing>,
    /// The one server using the store (`servers`).
    server: servers::ThisServer,
    /// The data directory (`None`: a simulated disk), where a backup is written before it is
    /// sent (`backup`).
    dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Default)]
struct Inner {
    index: Index,
    queues: HashMap<String, QueueConfig>,
    /// The next job id to assign.
    next_id: JobId,
    /// Unique keys of jobs whose enqueue is not yet durable: (queue, key) → id.
    pending_unique: HashMap<(String, String), JobId>,
    subscriptions: HashMap<SubscriptionId, Subscription>,
    /// Queue name → its subscriptions, in id order. Only queues with subscriptions are keys.
    subscribed: HashMap<String, Vec<SubscriptionId>>,
    /// (queue, endpoint) → the subscription holding it, for subscriptions whose endpoint is
    /// unique in their queue ([`Subscription::unique_endpoint`]).
    endpoints: HashMap<(String, String), SubscriptionId>,
    next_subscription_id: SubscriptionId,
    /// Webhook endpoints' delivery states, by origin.
    endpoint_states: HashMap<String, EndpointState>,
    /// API tokens by id (hashed: see `tenax_core::auth::token`).
    tokens: BTreeMap<u64, TokenRecord>,
    next_token_id: u64,
    /// Records of claims that have one, in memory like the leases they describe.
    claims: HashMap<ClaimId, ClaimRecord>,
    /// Completed jobs per queue, on disk (the index counts the other states). Changed by the
    /// writer only, with the commit that changes them.
    completed: HashMap<String, u64>,
    /// Recent starts of rate-limited queues, oldest bucket first (`limits`); written through.
    starts: HashMap<String, VecDeque<StartBucket>>,
    /// Schedules by name, written through.
    schedules: BTreeMap<String, Schedule>,
    /// Batches by id, written through.
    batches: BTreeMap<BatchId, Batch>,
    /// The members of batches that are in memory (unfinished or dead: a dead one may be
    /// replayed), to their batch (`batches`). Looked up by every completion and deletion:
    /// keyed by the ids' own cheap hash.
    members: JobIdMap<BatchId>,
    next_batch_id: BatchId,
    /// What ended members staged for the commit that ends them (`batches`).
    staged: batches::StagedBatches,
}

/// A redb failure while doing `what`, with its source kept.
fn fault<E: std::error::Error + Send + Sync + 'static>(
    what: &'static str,
) -> impl FnOnce(E) -> StoreError {
    move |error| StoreError::storage(what, error)
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir` and rebuilds the indexes. Refuses data in a newer
    /// format than this version writes, and keys that do not open its secrets. The directory is
    /// made 0700 and the files 0600 (`tenax_core::secrets::files`).
    pub fn open(dir: &Path, options: &EmbeddedOptions, now_ms: UnixMs) -> Result<Self, StoreError> {
        files::private_dir(dir).map_err(|e| {
            StoreError::storage(format!("creating the data directory {}", dir.display()), e)
        })?;
        let db = open_file(&dir.join(FILE_NAME), options)?;
        backup::remove_unsent(dir);
        let log_path = dir.join("tenax.wal");
        let place = recover::Place {
            log: log_path.display().to_string(),
            dir: Some(dir),
        };
        // A missing log is not made anew when the redb file has logged commits in one: they
        // would be lost without a word (`wal`).
        let exists = std::fs::symlink_metadata(&log_path).is_ok();
        if !exists && recover::expects_log(&db)? {
            let (applied, _) = recover::log_position(&db)?;
            return Err(StoreError::Corrupt(format!(
                "{} is missing: the store file (tenax.redb) has logged its commits in it, and \
                 everything logged after its last checkpoint (record {applied}) is gone, from \
                 byte 0 on; how many records that was cannot be known. The store refuses to \
                 start rather than go on without them. `tenax repair --data-dir {}` makes a \
                 new log and says what is lost",
                place.log,
                dir.display()
            )));
        }
        let log = FileLog::open(&log_path)
            .map_err(|e| StoreError::storage(format!("opening {}", log_path.display()), e))?;
        let keys = match &options.secrets {
            Some(keys) => KeySource::Given(keys.clone()),
            None => KeySource::File(dir.join(SECRETS_KEY_FILE)),
        };
        // The log file, if it was just made, is in the directory for good before the redb
        // file names it.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StoreError::storage(format!("syncing {}", dir.display()), e))?;
        Self::start(db, Box::new(log), &place, options, keys, now_ms)
    }

    /// Opens (or creates) the store on a simulated disk (its files `tenax.redb` and
    /// `tenax.wal`): for tests of what survives a power cut.
    pub fn open_simulated(
        disk: &SimulatedDisk,
        options: &EmbeddedOptions,
        now_ms: UnixMs,
    ) -> Result<Self, StoreError> {
        let db = Database::builder()
            .set_cache_size(options.cache_bytes)
            .create_with_backend(disk.file(FILE_NAME))
            .map_err(|e| StoreError::storage("opening the simulated store", e))?;
        let keys = match &options.secrets {
            Some(keys) => KeySource::Given(keys.clone()),
            None => KeySource::Simulated(Box::new(disk.file(SECRETS_KEY_FILE))),
        };
        let place = recover::Place {
            log: "tenax.wal (simulated)".to_owned(),
            dir: None,
        };
        Self::start(
            db,
            Box::new(disk.file("tenax.wal")),
            &place,
            options,
            keys,
            now_ms,
        )
    }

    /// Brings the file up to date (format, then the log's records past its last checkpoint),
    /// rebuilds memory, seals what is not sealed with the sealing key, and starts the writer.
    /// `dir` is the data directory of real files, which a scrub can write anew (`sealing`).
    fn start(
        db: Database,
        log: Box<dyn LogFile>,
        place: &recover::Place<'_>,
        options: &EmbeddedOptions,
        keys: KeySource,
        now_ms: UnixMs,
    ) -> Result<Self, StoreError> {
        check_format(&db)?;
        let wal = recover::recover(&db, log, place, options.log_bytes)?;
        let keys = sealing::keys(&db, keys)?;
        let (inner, stale) = rebuild(&db, &keys, now_ms)?;
        sealing::seal_at_rest(&db, &inner, &stale, &keys, place.dir.is_some())?;
        let payload_key = sealing::payload_key(&db, &keys)?;
        let (db, wal) = match place.dir {
            Some(dir) if sealing::scrub_pending(&db)? => sealing::scrub(db, wal, dir, options)?,
            _ => (db, wal),
        };
        let inner = Arc::new(Mutex::new(inner));
        let db = Arc::new(db);
        let signals = Arc::new(Signals::default());
        let writer = Writer::start(writer::Parts {
            db: db.clone(),
            wal,
            sync: options.sync,
            memory: inner.clone(),
            signals: signals.clone(),
            commits: options.commits.clone(),
        });
        Ok(Self {
            db,
            inner,
            writer,
            signals,
            keys,
            payload_key,
            activity: Mutex::default(),
            server: servers::ThisServer::new(),
            dir: place.dir.map(Path::to_owned),
        })
    }

    /// A read transaction on the file, once every acknowledged commit is applied to it
    /// (`unapplied`). Every read of the file after open goes through here.
    fn read_tx(&self, what: &'static str) -> Result<ReadTransaction, StoreError> {
        self.writer.settle()?;
        self.db.begin_read().map_err(fault(what))
    }

    /// The bodies of `ids`, in their order (`None` where a job is gone).
    fn read_body(&self, ids: &[JobId]) -> Result<Vec<Option<StoredBody>>, StoreError> {
        self.read_body_in(&self.read_tx("reading job bodies")?, ids)
    }

    /// [`EmbeddedStore::read_body`] for a read that wants nothing from the file but bodies (a
    /// take's: the rest of a taken job is in memory), which waits only for a commit that
    /// writes bodies.
    fn read_body_alone(&self, ids: &[JobId]) -> Result<Vec<Option<StoredBody>>, StoreError> {
        let what = "reading job bodies";
        self.writer.settle_bodies()?;
        self.read_body_in(&self.db.begin_read().map_err(fault(what))?, ids)
    }

    fn read_body_in(
        &self,
        tx: &ReadTransaction,
        ids: &[JobId],
    ) -> Result<Vec<Option<StoredBody>>, StoreError> {
        let what = "reading job bodies";
        let jobs = tx.open_table(JOBS).map_err(fault(what))?;
        let parse = |bytes: &[u8]| from_json_bytes("job body", bytes);
        let Some(span) = dense_span(ids) else {
            return ids
                .iter()
                .map(|id| match jobs.get(id.0).map_err(fault(what))? {
                    Some(bytes) => parse(bytes.value()).map(Some),
                    None => Ok(None),
                })
                .collect();
        };
        // Neighbouring ids (a take of the oldest jobs): one walk through their rows instead of
        // a descent from the root for each.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_unstable_by_key(|&i| ids[i]);
        let mut bodies: Vec<Option<StoredBody>> = ids.iter().map(|_| None).collect();
        let mut wanted = order.iter().peekable();
        for row in jobs.range(span).map_err(fault(what))? {
            let (key, bytes) = row.map_err(fault(what))?;
            let id = JobId(key.value());
            while wanted.next_if(|&&i| ids[i] < id).is_some() {}
            while let Some(&i) = wanted.next_if(|&&i| ids[i] == id) {
                bodies[i] = Some(parse(bytes.value())?);
            }
        }
        Ok(bodies)
    }
}

/// The range from the least to the greatest of `ids` when a walk through it visits at most
/// twice as many rows as there are ids (ids are never reused, so the range holds at most its
/// width of rows), and there are enough of them for a walk to pay.
fn dense_span(ids: &[JobId]) -> Option<std::ops::RangeInclusive<u64>> {
    const FEWEST: usize = 8;
    if ids.len() < FEWEST {
        return None;
    }
    let least = ids.iter().min()?.0;
    let greatest = ids.iter().max()?.0;
    let width = greatest - least;
    (width < 2 * ids.len() as u64).then_some(least..=greatest)
}

/// One data directory is no pooled deployment: no pools, and none registered (they need
/// PostgreSQL).
impl tenax_core::store::PoolStore for EmbeddedStore {}

#[async_trait]
impl StoreLifecycle for EmbeddedStore {
    fn properties(&self) -> StoreProperties {
        StoreProperties {
            durable_leases: false,
            shared: false,
            cached_facts: false,
            durable_activity: false,
        }
    }

    fn signals(&self) -> &Signals {
        &self.signals
    }

    fn payload_key(&self) -> &PayloadKey {
        &self.payload_key
    }

    /// One process uses the embedded store.
    fn servers(&self) -> usize {
        1
    }

    async fn lead(&self) -> Result<bool, StoreError> {
        Ok(true)
    }

    fn backup(&self, now_ms: UnixMs) -> Option<Result<(PathBuf, BackupManifest), StoreError>> {
        self.backup_in_place(now_ms)
    }

    async fn close(&self) {
        self.writer.shutdown();
    }
}

/// Opens (or creates, mode 0600) the store's redb file.
fn open_file(path: &Path, options: &EmbeddedOptions) -> Result<Database, StoreError> {
    let opening = || format!("opening {}", path.display());
    let file = files::open_private(path, "the store's file")
        .map_err(|e| StoreError::storage(opening(), e))?;
    let backend =
        redb::backends::FileBackend::new(file).map_err(|e| StoreError::storage(opening(), e))?;
    Database::builder()
        .set_cache_size(options.cache_bytes)
        .create_with_backend(backend)
        .map_err(|e| StoreError::storage(opening(), e))
}

/// Creates the tables of a new file, brings an older format up to this one and stamps it;
/// refuses a newer format.
pub(crate) fn check_format(db: &Database) -> Result<(), StoreError> {
    let what = "preparing the tables";
    let tx = db.begin_write().map_err(fault(what))?;
    let found = {
        tx.open_table(JOBS).map_err(fault(what))?;
        tx.open_table(STATES).map_err(fault(what))?;
        tx.open_table(POLICIES).map_err(fault(what))?;
        tx.open_table(ERRORS).map_err(fault(what))?;
        tx.open_table(QUEUES).map_err(fault(what))?;
        tx.open_table(SUBSCRIPTIONS).map_err(fault(what))?;
        tx.open_table(ATTEMPTS).map_err(fault(what))?;
        tx.open_table(TOKENS).map_err(fault(what))?;
        tx.open_table(ENDPOINTS).map_err(fault(what))?;
        tx.open_table(COMPLETED).map_err(fault(what))?;
        tx.open_table(COMPLETED_AT).map_err(fault(what))?;
        tx.open_table(COMPLETED_EXPIRING).map_err(fault(what))?;
        tx.open_table(CHILDREN).map_err(fault(what))?;
        tx.open_table(COMPLETED_COUNTS).map_err(fault(what))?;
        tx.open_table(SCHEDULES).map_err(fault(what))?;
        tx.open_table(STARTS).map_err(fault(what))?;
        tx.open_table(BATCHES).map_err(fault(what))?;
        let meta = tx.open_table(META).map_err(fault(what))?;
        // A file written before formats were stamped is format 1 (so is a new one: it is
        // empty, and upgrading it changes nothing).
        meta.get(FORMAT_VERSION_KEY)
            .map_err(fault(what))?
            .map_or(1, |v| v.value())
    };
    tx.commit().map_err(fault(what))?;
    if found > FORMAT_VERSION {
        return Err(StoreError::NewerFormat {
            found,
            supported: FORMAT_VERSION,
        });
    }
    if found < 2 {
        upgrade::completed_out_of_states(db)?;
    }
    // Format 3 only adds tables, made above: there is nothing to move. Format 4 changes the
    // log (`wal`), which `recover` reads in the old format and makes again, and seals the
    // subscriptions' secrets, which every open does (`sealing`). Formats 5 and 6 add what an
    // older Tenax cannot read (sealed payloads; cancelled jobs): nothing to move either.
    if found < FORMAT_VERSION {
        let tx = db.begin_write().map_err(fault(what))?;
        tx.open_table(META)
            .map_err(fault(what))?
            .insert(FORMAT_VERSION_KEY, FORMAT_VERSION)
            .map_err(fault(what))?;
        tx.commit().map_err(fault(what))?;
    }
    Ok(())
}

/// A subscription whose secrets are not sealed with the sealing key, and the key they are
/// sealed with (`None`: kept in clear).
type Stale = (SubscriptionId, Option<KeyId>);

/// Rebuilds memory from disk: every job's entry, queue settings, subscriptions (opened with
/// `keys`), tokens and the id counters. Also returns the subscriptions not sealed with the
/// sealing key.
fn rebuild(
    db: &Database,
    keys: &Keyring,
    now_ms: UnixMs,
) -> Result<(Inner, Vec<Stale>), StoreError> {
    let what = "loading the store";
    let tx = db.begin_read().map_err(fault(what))?;
    let jobs = tx.open_table(JOBS).map_err(fault(what))?;
    let states = tx.open_table(STATES).map_err(fault(what))?;
    let policies = tx.open_table(POLICIES).map_err(fault(what))?;
    let queues = tx.open_table(QUEUES).map_err(fault(what))?;
    let meta = tx.open_table(META).map_err(fault(what))?;
    let subscriptions = tx.open_table(SUBSCRIPTIONS).map_err(fault(what))?;
    let counter = |name: &str| -> Result<u64, StoreError> {
        Ok(meta
            .get(name)
            .map_err(fault(what))?
            .map_or(0, |v| v.value()))
    };

    let mut inner = Inner::default();
    let batches = tx.open_table(BATCHES).map_err(fault(what))?;
    let mut max_batch = 0;
    for row in batches.iter().map_err(fault(what))? {
        let (id, record) = row.map_err(fault(what))?;
        let batch: Batch = from_json_bytes("batch", record.value())?;
        max_batch = max_batch.max(id.value());
        inner.batches.insert(batch.id, batch);
    }
    inner.next_batch_id = BatchId(counter(NEXT_BATCH_ID)?.max(max_batch + 1).max(1));
    let mut max_id = JobId(0);
    let mut loaded = 0usize;
    let mut waiting: Vec<(JobId, Vec<JobId>, OnParentDead)> = Vec::new();
    let mut cancelled: Vec<dependencies::Cancelled> = Vec::new();
    for row in states.iter().map_err(fault(what))? {
        let (id, state) = row.map_err(fault(what))?;
        let id = JobId(id.value());
        let state: JobState = from_json_bytes("job state", state.value())?;
        let Some(body) = jobs.get(id.0).map_err(fault(what))? else {
            return Err(StoreError::Corrupt(format!(
                "job {id} has a state but no body"
            )));
        };
        let body: StoredBody = from_json_bytes("job body", body.value())?;
        if state.status == Status::Waiting {
            waiting.push((id, body.after.clone(), body.on_parent_dead));
        }
        if state.status == Status::Cancelled && !body.after.is_empty() {
            cancelled.push((
                id,
                body.after.clone(),
                body.on_parent_dead,
                state.dead_reason.clone(),
            ));
        }
        let policy = match policies.get(id.0).map_err(fault(what))? {
            Some(bytes) => {
                let policy: StoredPolicy = from_json_bytes("job policy", bytes.value())?;
                Some(policy.policy().clone())
            }
            None => None,
        };
        // Members of a batch that is still counting: `batches::finished` counts them.
        if let Some(batch) = body.batch.filter(|b| {
            inner
                .batches
                .get(b)
                .is_some_and(|b| b.state != BatchState::Finished)
        }) {
            inner.members.insert(id, batch);
        }
        let queue = inner.index.intern(&body.queue);
        let kind = inner.index.intern_kind(&body.kind);
        let entry = Entry::new(
            queue,
            kind,
            body.priority,
            body.unique_key.map(String::into_boxed_str),
            &state,
            policy,
            body.expires_at_ms,
        );
        inner.index.insert(id, entry, now_ms);
        max_id = max_id.max(id);
        loaded += 1;
    }
    dependencies::rebuild_cancelled(&mut inner.index, cancelled);
    dependencies::rebuild(
        &mut inner.index,
        waiting,
        |id| Ok(jobs.get(id.0).map_err(fault(what))?.is_some()),
        now_ms,
    )?;
    for row in queues.iter().map_err(fault(what))? {
        let (name, config) = row.map_err(fault(what))?;
        let config: QueueConfig = from_json_bytes("queue config", config.value())?;
        inner.queues.insert(name.value().to_owned(), config);
    }
    inner.next_id = JobId(counter(NEXT_ID)?.max(max_id.0 + 1).max(1));
    let mut max_subscription = 0;
    let mut stale = Vec::new();
    for row in subscriptions.iter().map_err(fault(what))? {
        let (id, record) = row.map_err(fault(what))?;
        let opened = from_stored(record.value(), keys)?;
        if opened.sealed_with != Some(keys.current().id()) {
            stale.push((opened.subscription.id, opened.sealed_with));
        }
        max_subscription = max_subscription.max(id.value());
        subscriptions::install(&mut inner, opened.subscription);
    }
    inner.next_subscription_id = SubscriptionId(
        counter(NEXT_SUBSCRIPTION_ID)?
            .max(max_subscription + 1)
            .max(1),
    );
    let tokens = tx.open_table(TOKENS).map_err(fault(what))?;
    let mut max_token = 0;
    for row in tokens.iter().map_err(fault(what))? {
        let (id, record) = row.map_err(fault(what))?;
        let record: TokenRecord = from_json_bytes("token", record.value())?;
        max_token = max_token.max(id.value());
        inner.tokens.insert(id.value(), record);
    }
    inner.next_token_id = counter(NEXT_TOKEN_ID)?.max(max_token + 1).max(1);
    let endpoints = tx.open_table(ENDPOINTS).map_err(fault(what))?;
    for row in endpoints.iter().map_err(fault(what))? {
        let (origin, state) = row.map_err(fault(what))?;
        let state: EndpointState = from_json_bytes("endpoint state", state.value())?;
        inner
            .endpoint_states
            .insert(origin.value().to_owned(), state);
    }
    let schedules = tx.open_table(SCHEDULES).map_err(fault(what))?;
    for row in schedules.iter().map_err(fault(what))? {
        let (name, record) = row.map_err(fault(what))?;
        let schedule: Schedule = from_json_bytes("schedule", record.value())?;
        inner.schedules.insert(name.value().to_owned(), schedule);
    }
    let starts = tx.open_table(STARTS).map_err(fault(what))?;
    for row in starts.iter().map_err(fault(what))? {
        let (key, value) = row.map_err(fault(what))?;
        let ((queue, start_ms), (width_ms, count)) = (key.value(), value.value());
        // Rows come in key order: each queue's buckets oldest first.
        inner
            .starts
            .entry(queue.to_owned())
            .or_default()
            .push_back(StartBucket {
                start_ms,
                width_ms,
                count,
            });
    }
    let completed = tx.open_table(COMPLETED_COUNTS).map_err(fault(what))?;
    for row in completed.iter().map_err(fault(what))? {
        let (queue, count) = row.map_err(fault(what))?;
        inner
            .completed
            .insert(queue.value().to_owned(), count.value());
    }
    tracing::info!(
        jobs = loaded,
        queues = inner.queues.len(),
        subscriptions = inner.subscriptions.len(),
        secrets_key = %keys.current().id(),
        "embedded store opened"
    );
    Ok((inner, stale))
}

/// Writes, in one commit, a body for each of the jobs `ids` (each in queue `q<id>`).
#[cfg(test)]
async fn put_bodies(store: &EmbeddedStore, ids: impl IntoIterator<Item = u64>) {
    let ops = ids
        .into_iter()
        .map(|id| ops::Op::PutBody {
            id: JobId(id),
            body: format!(
                r#"{{"queue":"q{id}","type":"t","payload":{id},"priority":0,"created_at_ms":1}}"#
            )
            .into_bytes(),
        })
        .collect();
    let receiver = {
        let _inner = store.inner.lock();
        store.writer.submit(ops)
    };
    writer::wait(receiver).await.expect("written");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies read by one walk (many neighbouring ids) are the bodies read one by one: in the
    /// order asked, repeated where asked twice, `None` where a job is not there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bodies_read_by_a_walk_are_those_read_one_by_one() {
        let disk = SimulatedDisk::new();
        let store =
            EmbeddedStore::open_simulated(&disk, &EmbeddedOptions::default(), 100).expect("opens");
        // Jobs 1 to 40, without 7 and 20.
        put_bodies(&store, (1..=40).filter(|id| ![7, 20].contains(id))).await;
        let ids: Vec<JobId> = [30, 3, 7, 4, 5, 6, 8, 30, 9, 10, 11, 12, 2, 20, 29]
            .into_iter()
            .map(JobId)
            .collect();
        assert!(dense_span(&ids).is_some(), "the walk is what is tested");
        let queues = |bodies: Vec<Option<StoredBody>>| -> Vec<Option<String>> {
            bodies.into_iter().map(|b| b.map(|b| b.queue)).collect()
        };
        let walked = queues(store.read_body(&ids).expect("read"));
        let one_by_one: Vec<Option<String>> = ids
            .iter()
            .flat_map(|id| queues(store.read_body(&[*id]).expect("read")))
            .collect();
        assert_eq!(walked, one_by_one);
        assert_eq!(walked[0].as_deref(), Some("q30"));
        assert_eq!(walked[7].as_deref(), Some("q30"));
        assert_eq!(walked[2], None);
        assert_eq!(walked[13], None);
        assert_eq!(walked[14].as_deref(), Some("q29"));
        assert!(dense_span(&[JobId(1), JobId(500)]).is_none());
    }
}
