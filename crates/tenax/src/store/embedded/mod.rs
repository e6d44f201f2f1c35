//! The embedded store: one redb file for durability, in-memory indexes for the hot path.
//!
//! Every operation takes the index lock, changes memory, submits its writes to the group-commit
//! writer (still under the lock, so the disk sees changes in memory's order), releases the lock
//! and waits for the commit. Only new jobs wait to become visible until their commit is durable:
//! a worker can never run a job whose enqueue was not acknowledged.
//!
//! Files: `keys` of the layout are in [`tables`]; one file per operation family.

mod claims;
mod dead;
mod enqueue;
pub mod index;
mod leases;
mod maintenance;
mod peek;
mod queues;
mod read;
mod subscriptions;
mod tables;
mod tokens;
mod writer;

pub use self::subscriptions::Finished;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use redb::{Database, ReadableDatabase, ReadableTable};
use tenax_policy::RetryPolicy;
use tenax_policy::spelling::native;
use tokio::sync::Notify;

use self::index::{Entry, Index};
use self::tables::{
    ATTEMPTS, ERRORS, JOBS, META, NEXT_ID, NEXT_SUBSCRIPTION_ID, NEXT_TOKEN_ID, POLICIES, QUEUES,
    STATES, SUBSCRIPTIONS, StoredBody, TOKENS,
};
use self::writer::Writer;
use super::{QueueConfig, StoreError, from_json_bytes};
use crate::clock::UnixMs;
use crate::model::{JobId, JobState, Subscription, SubscriptionId};

/// Options of the embedded store.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Acknowledge only after fsync (group commit). Off: commits are synced at most 500 ms later.
    pub sync: bool,
    /// redb's page cache.
    pub cache_bytes: usize,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        Self {
            sync: true,
            cache_bytes: 32 * 1024 * 1024,
        }
    }
}

#[derive(Debug)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    inner: Mutex<Inner>,
    writer: Writer,
    /// Woken when jobs may have become ready.
    ready: Notify,
    /// Woken when the earliest scheduled time may have moved earlier.
    schedule: Notify,
    /// Source of lease tokens; starts from the clock at open so tokens differ across restarts.
    lease_tokens: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    index: Index,
    queues: HashMap<String, QueueEntry>,
    /// The next job id to assign.
    next_id: JobId,
    /// Unique keys of jobs whose enqueue is not yet durable: (queue, key) → id.
    pending_unique: HashMap<(String, String), JobId>,
    subscriptions: HashMap<SubscriptionId, SubscriptionEntry>,
    /// Queue name → its subscriptions, in id order. Only queues with subscriptions are keys.
    subscribed: HashMap<String, Vec<SubscriptionId>>,
    next_subscription_id: SubscriptionId,
    /// API tokens by id (hashed: see `crate::auth::token`).
    tokens: std::collections::BTreeMap<u64, crate::auth::TokenRecord>,
    next_token_id: u64,
}

#[derive(Debug, Clone)]
struct SubscriptionEntry {
    subscription: Subscription,
    /// `subscription.policy`, parsed.
    policy: Option<Arc<RetryPolicy>>,
}

#[derive(Debug, Clone)]
struct QueueEntry {
    config: QueueConfig,
    policy: Option<Arc<RetryPolicy>>,
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir` and rebuilds the indexes.
    pub fn open(dir: &Path, options: &EmbeddedOptions, now_ms: UnixMs) -> Result<Self, StoreError> {
        let storage = |e: &dyn std::fmt::Display| StoreError::Storage(e.to_string());
        std::fs::create_dir_all(dir)
            .map_err(|e| storage(&format!("creating {}: {e}", dir.display())))?;
        let path = dir.join("tenax.redb");
        let db = Database::builder()
            .set_cache_size(options.cache_bytes)
            .create(&path)
            .map_err(|e| storage(&format!("opening {}: {e}", path.display())))?;
        {
            let tx = db.begin_write().map_err(|e| storage(&e))?;
            tx.open_table(JOBS).map_err(|e| storage(&e))?;
            tx.open_table(STATES).map_err(|e| storage(&e))?;
            tx.open_table(POLICIES).map_err(|e| storage(&e))?;
            tx.open_table(ERRORS).map_err(|e| storage(&e))?;
            tx.open_table(QUEUES).map_err(|e| storage(&e))?;
            tx.open_table(META).map_err(|e| storage(&e))?;
            tx.open_table(SUBSCRIPTIONS).map_err(|e| storage(&e))?;
            tx.open_table(ATTEMPTS).map_err(|e| storage(&e))?;
            tx.open_table(TOKENS).map_err(|e| storage(&e))?;
            tx.commit().map_err(|e| storage(&e))?;
        }
        let inner = rebuild(&db, now_ms)?;
        let db = Arc::new(db);
        let writer = Writer::start(db.clone(), options.sync);
        Ok(Self {
            db,
            inner: Mutex::new(inner),
            writer,
            ready: Notify::new(),
            schedule: Notify::new(),
            lease_tokens: AtomicU64::new(now_ms.wrapping_mul(1_000)),
        })
    }

    pub fn ready_signal(&self) -> &Notify {
        &self.ready
    }

    pub fn schedule_signal(&self) -> &Notify {
        &self.schedule
    }

    pub fn next_wakeup(&self) -> Option<UnixMs> {
        let inner = self.inner.lock();
        [
            inner.index.next_due(),
            inner.index.next_expiry(),
            inner.index.next_job_expiry(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn close(self) {
        self.writer.shutdown();
    }

    fn read_body(&self, ids: &[JobId]) -> Result<Vec<Option<StoredBody>>, StoreError> {
        let storage = |e: &dyn std::fmt::Display| StoreError::Storage(e.to_string());
        let tx = self.db.begin_read().map_err(|e| storage(&e))?;
        let jobs = tx.open_table(JOBS).map_err(|e| storage(&e))?;
        ids.iter()
            .map(|id| match jobs.get(*id).map_err(|e| storage(&e))? {
                Some(bytes) => from_json_bytes("job body", bytes.value()).map(Some),
                None => Ok(None),
            })
            .collect()
    }
}

/// Rebuilds memory from disk: every job's entry, queue settings and the id counter.
fn rebuild(db: &Database, now_ms: UnixMs) -> Result<Inner, StoreError> {
    let storage = |e: &dyn std::fmt::Display| StoreError::Storage(e.to_string());
    let tx = db.begin_read().map_err(|e| storage(&e))?;
    let jobs = tx.open_table(JOBS).map_err(|e| storage(&e))?;
    let states = tx.open_table(STATES).map_err(|e| storage(&e))?;
    let policies = tx.open_table(POLICIES).map_err(|e| storage(&e))?;
    let queues = tx.open_table(QUEUES).map_err(|e| storage(&e))?;
    let meta = tx.open_table(META).map_err(|e| storage(&e))?;
    let subscriptions = tx.open_table(SUBSCRIPTIONS).map_err(|e| storage(&e))?;

    let mut inner = Inner::default();
    let mut max_id = 0;
    let mut loaded = 0usize;
    for row in states.iter().map_err(|e| storage(&e))? {
        let (id, state) = row.map_err(|e| storage(&e))?;
        let id = id.value();
        let state: JobState = from_json_bytes("job state", state.value())?;
        let Some(body) = jobs.get(id).map_err(|e| storage(&e))? else {
            return Err(StoreError::Corrupt(format!(
                "job {id} has a state but no body"
            )));
        };
        let body: StoredBody = from_json_bytes("job body", body.value())?;
        let policy = match policies.get(id).map_err(|e| storage(&e))? {
            Some(bytes) => {
                let value: serde_json::Value = from_json_bytes("job policy", bytes.value())?;
                let policy = native::parse(&value)
                    .map_err(|e| StoreError::Corrupt(format!("job {id} policy: {e}")))?;
                Some(Arc::new(policy))
            }
            None => None,
        };
        let entry = Entry {
            queue: inner.index.intern(&body.queue),
            priority: body.priority,
            unique_key: body.unique_key.map(String::into_boxed_str),
            state,
            lease: None,
            policy,
            expires_at_ms: body.expires_at_ms,
        };
        inner.index.insert(id, entry, now_ms);
        max_id = max_id.max(id);
        loaded += 1;
    }
    for row in queues.iter().map_err(|e| storage(&e))? {
        let (name, config) = row.map_err(|e| storage(&e))?;
        let config: QueueConfig = from_json_bytes("queue config", config.value())?;
        let policy = queue_policy(&config)?;
        inner
            .queues
            .insert(name.value().to_owned(), QueueEntry { config, policy });
    }
    let stored_next = meta
        .get(NEXT_ID)
        .map_err(|e| storage(&e))?
        .map_or(0, |v| v.value());
    inner.next_id = stored_next.max(max_id + 1).max(1);
    let mut max_subscription = 0;
    for row in subscriptions.iter().map_err(|e| storage(&e))? {
        let (id, record) = row.map_err(|e| storage(&e))?;
        let subscription: Subscription = from_json_bytes("subscription", record.value())?;
        let what = format!("subscription {}", id.value());
        let policy = subscriptions::parse_policy(&what, subscription.policy.as_ref())?;
        max_subscription = max_subscription.max(id.value());
        subscriptions::install(&mut inner, subscription, policy);
    }
    let stored_next = meta
        .get(NEXT_SUBSCRIPTION_ID)
        .map_err(|e| storage(&e))?
        .map_or(0, |v| v.value());
    inner.next_subscription_id = stored_next.max(max_subscription + 1).max(1);
    let tokens = tx.open_table(TOKENS).map_err(|e| storage(&e))?;
    let mut max_token = 0;
    for row in tokens.iter().map_err(|e| storage(&e))? {
        let (id, record) = row.map_err(|e| storage(&e))?;
        let record: crate::auth::TokenRecord = from_json_bytes("token", record.value())?;
        max_token = max_token.max(id.value());
        inner.tokens.insert(id.value(), record);
    }
    let stored_next = meta
        .get(NEXT_TOKEN_ID)
        .map_err(|e| storage(&e))?
        .map_or(0, |v| v.value());
    inner.next_token_id = stored_next.max(max_token + 1).max(1);
    tracing::info!(
        jobs = loaded,
        queues = inner.queues.len(),
        subscriptions = inner.subscriptions.len(),
        "embedded store opened"
    );
    Ok(inner)
}

fn queue_policy(config: &QueueConfig) -> Result<Option<Arc<RetryPolicy>>, StoreError> {
    config
        .policy
        .as_ref()
        .map(|value| {
            native::parse(value)
                .map(Arc::new)
                .map_err(|e| StoreError::Corrupt(format!("queue policy: {e}")))
        })
        .transpose()
}
