//! Group commit: one thread owns every write to the redb file. Requests queue on a channel; the
//! thread takes all that are waiting, applies them in one write transaction, commits once (one
//! fsync), and then answers each. Under load many requests share one sync; alone, a request
//! waits for exactly one.
//!
//! Order: requests are applied in the order they were submitted. Callers submit while holding
//! the index lock, so the disk sees changes in the same order as memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableTable};
use tokio::sync::oneshot;

use super::tables::{
    ATTEMPTS, ERRORS, JOBS, META, NEXT_ID, NEXT_SUBSCRIPTION_ID, NEXT_TOKEN_ID, POLICIES, QUEUES,
    STATES, SUBSCRIPTIONS, TOKENS,
};
use crate::model::{JobId, SubscriptionId};
use crate::store::{CommitObserver, StoreError};

/// One change to the file.
#[derive(Debug)]
pub enum Op {
    PutBody {
        id: JobId,
        body: Vec<u8>,
    },
    PutState {
        id: JobId,
        state: Vec<u8>,
    },
    PutPolicy {
        id: JobId,
        policy: Vec<u8>,
    },
    PutError {
        id: JobId,
        attempt: u32,
        entry: Vec<u8>,
    },
    /// Removes a job: body, state, policy and errors.
    DeleteJob {
        id: JobId,
    },
    PutQueue {
        name: String,
        config: Vec<u8>,
    },
    SetNextId(JobId),
    DeleteQueue {
        name: String,
    },
    PutSubscription {
        id: SubscriptionId,
        subscription: Vec<u8>,
    },
    /// Removes a subscription's record (its deliveries are removed by `DeleteJob`s).
    DeleteSubscription {
        id: SubscriptionId,
        next_id: SubscriptionId,
    },
    /// Appends to a delivery's attempt log.
    PutAttempt {
        id: JobId,
        entry: Vec<u8>,
    },
    PutToken {
        id: u64,
        record: Vec<u8>,
    },
    DeleteToken {
        id: u64,
    },
}

struct Request {
    ops: Vec<Op>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// Most operations one transaction takes before it commits, so that a flood of requests still
/// gets answers at a steady pace.
const MAX_OPS_PER_COMMIT: usize = 64 * 1024;

/// In relaxed mode, the longest a commit stays unsynced.
const RELAXED_SYNC_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct Writer {
    /// `None` once shut down.
    requests: parking_lot::Mutex<Option<mpsc::Sender<Request>>>,
    /// Set once a commit has failed: nothing is written after that (the state on disk and in
    /// memory may differ), every request is refused, and the operator restarts the server.
    failed: Arc<AtomicBool>,
    thread: parking_lot::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Writer {
    pub fn start(db: Arc<Database>, sync: bool, commits: Option<Arc<dyn CommitObserver>>) -> Self {
        let (requests, receiver) = mpsc::channel();
        let failed = Arc::new(AtomicBool::new(false));
        let flag = failed.clone();
        let thread = std::thread::Builder::new()
            .name("tenax-writer".into())
            .spawn(move || run(&db, &receiver, sync, &flag, commits.as_deref()))
            .ok();
        if thread.is_none() {
            failed.store(true, Ordering::SeqCst);
        }
        Self {
            requests: parking_lot::Mutex::new(Some(requests)),
            failed,
            thread: parking_lot::Mutex::new(thread),
        }
    }

    /// Queues `ops` for the next commit. Call while holding the index lock; await the receiver
    /// after releasing it.
    pub fn submit(&self, ops: Vec<Op>) -> oneshot::Receiver<Result<(), StoreError>> {
        let (done, receiver) = oneshot::channel();
        if self.failed.load(Ordering::SeqCst) {
            let _ = done.send(Err(StoreError::Failed));
            return receiver;
        }
        let request = Request { ops, done };
        let refused = match &*self.requests.lock() {
            Some(requests) => requests.send(request).err().map(|e| e.0),
            None => Some(request),
        };
        if let Some(request) = refused {
            let _ = request.done.send(Err(StoreError::Failed));
        }
        receiver
    }

    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Stops the thread after it has committed (and synced) everything queued before; later
    /// writes are refused.
    pub fn shutdown(&self) {
        drop(self.requests.lock().take());
        let thread = self.thread.lock().take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    /// However the store goes away, the writer commits and syncs what it holds first.
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The answer to a submitted write.
pub type Receiver = oneshot::Receiver<Result<(), StoreError>>;

/// Waits for a submitted write.
pub async fn wait(receiver: oneshot::Receiver<Result<(), StoreError>>) -> Result<(), StoreError> {
    receiver.await.unwrap_or(Err(StoreError::Failed))
}

fn run(
    db: &Database,
    receiver: &mpsc::Receiver<Request>,
    sync: bool,
    failed: &AtomicBool,
    commits: Option<&dyn CommitObserver>,
) {
    let mut last_sync = Instant::now();
    let mut unsynced = false;
    loop {
        let first = match receiver.recv_timeout(RELAXED_SYNC_INTERVAL) {
            Ok(request) => request,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if unsynced && commit(db, Vec::new(), true).is_ok() {
                    unsynced = false;
                    last_sync = Instant::now();
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = vec![first];
        let mut ops = batch[0].ops.len();
        while ops < MAX_OPS_PER_COMMIT {
            match receiver.try_recv() {
                Ok(request) => {
                    ops += request.ops.len();
                    batch.push(request);
                }
                Err(_) => break,
            }
        }
        if failed.load(Ordering::SeqCst) {
            for request in batch {
                let _ = request.done.send(Err(StoreError::Failed));
            }
            continue;
        }
        let durable = sync || last_sync.elapsed() >= RELAXED_SYNC_INTERVAL;
        let (dones, all_ops): (Vec<_>, Vec<_>) = batch.into_iter().map(|r| (r.done, r.ops)).unzip();
        let started = Instant::now();
        let result = commit(db, all_ops, durable);
        if let (Some(commits), Ok(())) = (commits, &result) {
            commits.committed(dones.len(), started.elapsed());
        }
        match &result {
            Ok(()) if durable => {
                unsynced = false;
                last_sync = Instant::now();
            }
            Ok(()) => unsynced = true,
            Err(error) => {
                tracing::error!(%error, "storage commit failed; refusing further writes");
                failed.store(true, Ordering::SeqCst);
            }
        }
        for done in dones {
            let _ = done.send(result.clone());
        }
    }
    if unsynced {
        let _ = commit(db, Vec::new(), true);
    }
}

fn commit(db: &Database, batches: Vec<Vec<Op>>, durable: bool) -> Result<(), StoreError> {
    let storage = |e: redb::Error| StoreError::storage("committing", e);
    let mut tx = db.begin_write().map_err(|e| storage(e.into()))?;
    let durability = if durable {
        Durability::Immediate
    } else {
        Durability::None
    };
    tx.set_durability(durability)
        .map_err(|e| storage(e.into()))?;
    {
        let mut jobs = tx.open_table(JOBS).map_err(|e| storage(e.into()))?;
        let mut states = tx.open_table(STATES).map_err(|e| storage(e.into()))?;
        let mut policies = tx.open_table(POLICIES).map_err(|e| storage(e.into()))?;
        let mut errors = tx.open_table(ERRORS).map_err(|e| storage(e.into()))?;
        let mut queues = tx.open_table(QUEUES).map_err(|e| storage(e.into()))?;
        let mut meta = tx.open_table(META).map_err(|e| storage(e.into()))?;
        let mut subscriptions = tx
            .open_table(SUBSCRIPTIONS)
            .map_err(|e| storage(e.into()))?;
        let mut attempts = tx.open_table(ATTEMPTS).map_err(|e| storage(e.into()))?;
        let mut tokens = tx.open_table(TOKENS).map_err(|e| storage(e.into()))?;
        for op in batches.into_iter().flatten() {
            // The tables hold ids as plain integers.
            let result = match op {
                Op::PutBody { id, body } => jobs.insert(id.0, body.as_slice()).map(drop),
                Op::PutState { id, state } => states.insert(id.0, state.as_slice()).map(drop),
                Op::PutPolicy { id, policy } => policies.insert(id.0, policy.as_slice()).map(drop),
                Op::PutError {
                    id: JobId(id),
                    attempt,
                    entry,
                } => {
                    // After the job's last entry, never over it: a replay with reset attempts
                    // numbers failures from 1 again, and the earlier history is kept.
                    let last = errors
                        .range((id, 0)..=(id, u32::MAX))
                        .and_then(|mut rows| rows.next_back().transpose())
                        .map(|row| row.map(|(key, _)| key.value().1));
                    last.and_then(|last| {
                        let key = last.map_or(attempt, |last| attempt.max(last.saturating_add(1)));
                        errors.insert((id, key), entry.as_slice()).map(drop)
                    })
                }
                Op::DeleteJob { id: JobId(id) } => jobs
                    .remove(id)
                    .and_then(|_| states.remove(id))
                    .and_then(|_| policies.remove(id))
                    .and_then(|_| errors.retain_in((id, 0)..=(id, u32::MAX), |_, _| false))
                    .and_then(|()| attempts.retain_in((id, 0)..=(id, u32::MAX), |_, _| false)),
                Op::PutQueue { name, config } => {
                    queues.insert(name.as_str(), config.as_slice()).map(drop)
                }
                Op::DeleteQueue { name } => queues.remove(name.as_str()).map(drop),
                Op::SetNextId(next) => raise(&mut meta, NEXT_ID, next.0),
                Op::PutSubscription {
                    id: SubscriptionId(id),
                    subscription,
                } => raise(&mut meta, NEXT_SUBSCRIPTION_ID, id.saturating_add(1))
                    .and_then(|()| subscriptions.insert(id, subscription.as_slice()).map(drop)),
                Op::DeleteSubscription {
                    id: SubscriptionId(id),
                    next_id,
                } => {
                    // The counter is kept past the deleted id, so ids are never reused.
                    raise(&mut meta, NEXT_SUBSCRIPTION_ID, next_id.0)
                        .and_then(|()| subscriptions.remove(id).map(drop))
                }
                Op::PutToken { id, record } => {
                    raise(&mut meta, NEXT_TOKEN_ID, id.saturating_add(1))
                        .and_then(|()| tokens.insert(id, record.as_slice()).map(drop))
                }
                // The counter stays past the deleted id: ids are never reused.
                Op::DeleteToken { id } => tokens.remove(id).map(drop),
                Op::PutAttempt {
                    id: JobId(id),
                    entry,
                } => {
                    let last = attempts
                        .range((id, 0)..=(id, u32::MAX))
                        .and_then(|mut rows| rows.next_back().transpose())
                        .map(|row| row.map(|(key, _)| key.value().1));
                    last.and_then(|last| {
                        let n = last.map_or(1, |last| last.saturating_add(1));
                        attempts.insert((id, n), entry.as_slice()).map(drop)
                    })
                }
            };
            result.map_err(|e| storage(e.into()))?;
        }
    }
    tx.commit().map_err(|e| storage(e.into()))
}

/// Raises a counter in `meta` to `value`; never lowers it.
fn raise(
    meta: &mut redb::Table<'_, &'static str, u64>,
    name: &str,
    value: u64,
) -> Result<(), redb::StorageError> {
    let current = meta.get(name)?.map_or(0, |v| v.value());
    if current < value {
        meta.insert(name, value)?;
    }
    Ok(())
}
