//! Group commit through the write-ahead log: one thread owns every write to the store's files.
//!
//! Requests queue on a channel. The thread takes all that are waiting, applies their ops to the
//! redb file in one transaction, appends them to the log as one record and syncs it (the only
//! sync a commit waits for), commits the transaction without syncing, brings memory up to date
//! (each request's `after` step, under the index lock), and then answers each request. Under
//! load many requests share one sync; alone, a request waits for exactly one. Now and then a
//! checkpoint makes the redb file durable (`redb`'s own commit and sync) and the log starts over
//! (see `wal`).
//!
//! Order: requests are applied in the order they were submitted. Callers submit while holding
//! the index lock, so the disk sees changes in the same order as memory.
//!
//! Memory after a commit: whatever must happen in memory once a change is written (a new job
//! becomes takeable, a completed job leaves memory for disk) is the request's `after` step, run
//! here, before the answer. It happens even if the caller has stopped waiting (its request was
//! cancelled): a written change is never left half done in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redb::{Database, Durability};
use tokio::sync::oneshot;

use super::Inner;
use super::ops::{CountDeltas, Op, Tables};
use super::wal::Wal;
use crate::store::{Signals, StoreError};

/// What a request does in memory once its ops are written (`written`) or have failed: runs
/// under the index lock, and says whom to wake.
pub type After = Box<dyn FnOnce(&mut Inner, bool) -> Wake + Send>;

/// Wake-ups a change calls for, fired once the index lock is released.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wake {
    pub ready: bool,
    pub schedule: bool,
    pub released: bool,
}

impl Wake {
    fn add(&mut self, other: Wake) {
        self.ready |= other.ready;
        self.schedule |= other.schedule;
        self.released |= other.released;
    }

    fn fire(self, signals: &Signals) {
        if self.ready {
            signals.ready.notify_waiters();
        }
        if self.schedule {
            signals.schedule.notify_waiters();
        }
        if self.released {
            signals.released.notify_waiters();
        }
    }
}

struct Request {
    ops: Vec<Op>,
    after: Option<After>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// Most operations one commit takes, so that a flood of requests still gets answers at a steady
/// pace.
const MAX_OPS_PER_COMMIT: usize = 64 * 1024;

/// In relaxed mode, the longest a commit stays unsynced.
const RELAXED_SYNC_INTERVAL: Duration = Duration::from_millis(500);

/// When a checkpoint is due: after this many bytes of log, or commits, or this long, whichever
/// comes first. Frequent and small, so that none makes a request wait long (a checkpoint writes
/// what the commits since the last one changed, and syncs the redb file).
const CHECKPOINT_BYTES: u64 = 4 * 1024 * 1024;
const CHECKPOINT_COMMITS: u32 = 2_000;
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// What the writer thread works with.
pub struct Parts {
    pub db: Arc<Database>,
    pub wal: Wal,
    /// Sync each commit's record before answering; else at most [`RELAXED_SYNC_INTERVAL`] later.
    pub sync: bool,
    pub memory: Arc<Mutex<Inner>>,
    pub signals: Arc<Signals>,
}

#[derive(Debug)]
pub struct Writer {
    /// `None` once shut down.
    requests: Mutex<Option<mpsc::Sender<Request>>>,
    /// Set once a commit has failed: nothing is written after that (the state on disk and in
    /// memory may differ), every request is refused, and the operator restarts the server.
    failed: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Writer {
    pub fn start(parts: Parts) -> Self {
        let (requests, receiver) = mpsc::channel();
        let failed = Arc::new(AtomicBool::new(false));
        let flag = failed.clone();
        let thread = std::thread::Builder::new()
            .name("tenax-writer".into())
            .spawn(move || Loop::new(parts, flag).run(&receiver))
            .ok();
        if thread.is_none() {
            failed.store(true, Ordering::SeqCst);
        }
        Self {
            requests: Mutex::new(Some(requests)),
            failed,
            thread: Mutex::new(thread),
        }
    }

    /// Queues `ops` for the next commit. Call while holding the index lock; await the receiver
    /// after releasing it.
    pub fn submit(&self, ops: Vec<Op>) -> Receiver {
        self.send(ops, None)
    }

    /// Queues `ops`, and `after` to run once they are written (or have failed), before the
    /// answer. Call while holding the index lock (which `after` will take again, later).
    pub fn submit_then(&self, ops: Vec<Op>, after: After) -> Receiver {
        self.send(ops, Some(after))
    }

    fn send(&self, ops: Vec<Op>, after: Option<After>) -> Receiver {
        let (done, receiver) = oneshot::channel();
        let request = Request { ops, after, done };
        if self.failed.load(Ordering::SeqCst) {
            refuse(request, None);
            return receiver;
        }
        let refused = match &*self.requests.lock() {
            Some(requests) => requests.send(request).err().map(|e| e.0),
            None => Some(request),
        };
        if let Some(request) = refused {
            refuse(request, None);
        }
        receiver
    }

    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Stops the thread after it has committed everything queued before, and checkpointed;
    /// later writes are refused.
    pub fn shutdown(&self) {
        drop(self.requests.lock().take());
        let thread = self.thread.lock().take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    /// However the store goes away, the writer commits and checkpoints what it holds first.
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Answers a request that was not written. Its `after` step runs when memory is at hand (the
/// thread has it; a caller that was refused before queueing has it locked already and cleans
/// up itself).
fn refuse(request: Request, memory: Option<&mut Inner>) {
    if let (Some(after), Some(memory)) = (request.after, memory) {
        after(memory, false);
    }
    let _ = request.done.send(Err(StoreError::Failed));
}

/// The answer to a submitted write.
pub type Receiver = oneshot::Receiver<Result<(), StoreError>>;

/// Waits for a submitted write.
pub async fn wait(receiver: Receiver) -> Result<(), StoreError> {
    receiver.await.unwrap_or(Err(StoreError::Failed))
}

/// The writer thread's state.
struct Loop {
    parts: Parts,
    failed: Arc<AtomicBool>,
    /// The commit record being built, kept to reuse its allocation.
    record: Vec<u8>,
    /// A record written but not yet synced (relaxed mode).
    unsynced: bool,
    last_sync: Instant,
    /// Commits since the last checkpoint, and when it was.
    commits: u32,
    checkpointed: Instant,
}

impl Loop {
    fn new(parts: Parts, failed: Arc<AtomicBool>) -> Self {
        Self {
            parts,
            failed,
            record: Vec::new(),
            unsynced: false,
            last_sync: Instant::now(),
            commits: 0,
            checkpointed: Instant::now(),
        }
    }

    fn run(mut self, receiver: &mpsc::Receiver<Request>) {
        loop {
            let first = match receiver.recv_timeout(RELAXED_SYNC_INTERVAL) {
                Ok(request) => request,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.idle();
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
            if self.failed.load(Ordering::SeqCst) {
                let mut memory = self.parts.memory.lock();
                for request in batch {
                    refuse(request, Some(&mut memory));
                }
                continue;
            }
            self.commit(batch);
            if self.checkpoint_due() {
                self.checkpoint();
            }
        }
        if self.commits > 0 && !self.failed.load(Ordering::SeqCst) {
            self.checkpoint();
        }
    }

    /// With nothing to do: sync what relaxed mode left unsynced, and checkpoint what is pending.
    fn idle(&mut self) {
        if self.failed.load(Ordering::SeqCst) {
            return;
        }
        if self.unsynced {
            if let Err(error) = self.parts.wal.sync() {
                self.fail(&StoreError::storage("syncing the write-ahead log", error));
                return;
            }
            self.unsynced = false;
            self.last_sync = Instant::now();
        }
        if self.commits > 0 {
            self.checkpoint();
        }
    }

    fn checkpoint_due(&self) -> bool {
        self.parts.wal.used() >= CHECKPOINT_BYTES
            || self.commits >= CHECKPOINT_COMMITS
            || (self.commits > 0 && self.checkpointed.elapsed() >= CHECKPOINT_INTERVAL)
    }

    /// Writes a batch of requests as one commit and answers them.
    fn commit(&mut self, batch: Vec<Request>) {
        let mut requests = Vec::with_capacity(batch.len());
        let mut all_ops = Vec::with_capacity(batch.len());
        for request in batch {
            all_ops.push(request.ops);
            requests.push((request.after, request.done));
        }
        let result = self.write(all_ops);
        let written = result.is_ok();
        let mut wake = Wake::default();
        {
            let mut memory = self.parts.memory.lock();
            if let Ok(deltas) = &result {
                add_counts(&mut memory, deltas);
            }
            for (after, _) in &mut requests {
                if let Some(after) = after.take() {
                    wake.add(after(&mut memory, written));
                }
            }
        }
        wake.fire(&self.parts.signals);
        let answer = result.map(drop);
        for (_, done) in requests {
            let _ = done.send(answer.clone());
        }
    }

    /// Applies the ops to the redb file, logs them as one record and syncs it, and commits.
    /// Returns how the commit changed the completed counts.
    fn write(&mut self, batches: Vec<Vec<Op>>) -> Result<CountDeltas, StoreError> {
        self.record.clear();
        for op in batches.iter().flatten() {
            op.encode(&mut self.record);
        }
        if !self.parts.wal.fits(self.record.len()) && self.parts.wal.used() > 0 {
            self.checkpoint();
        }
        if self.failed.load(Ordering::SeqCst) {
            return Err(StoreError::Failed);
        }
        let result = self.write_logged(batches);
        if let Err(error) = &result {
            self.fail(error);
        }
        result
    }

    fn write_logged(&mut self, batches: Vec<Vec<Op>>) -> Result<CountDeltas, StoreError> {
        let storage = |e: redb::Error| StoreError::storage("committing", e);
        let mut deltas = CountDeltas::new();
        let mut tx = self.parts.db.begin_write().map_err(|e| storage(e.into()))?;
        // Durable through the log: the redb file is made durable by checkpoints.
        tx.set_durability(Durability::None)
            .map_err(|e| storage(e.into()))?;
        {
            let mut tables = Tables::open(&tx).map_err(storage)?;
            for op in batches.into_iter().flatten() {
                tables.apply(op, &mut deltas).map_err(storage)?;
            }
            tables.add_counts(&deltas).map_err(storage)?;
            tables
                .set_log_position(self.parts.wal.next_lsn())
                .map_err(storage)?;
        }
        // The record goes to the log, and is synced, before the transaction is committed: the
        // commit is acknowledged only once it is durable, and a crash in between leaves a log
        // record that the next open applies again.
        let log = |e: std::io::Error| StoreError::storage("writing the write-ahead log", e);
        self.parts.wal.append(&self.record).map_err(log)?;
        if self.parts.sync || self.last_sync.elapsed() >= RELAXED_SYNC_INTERVAL {
            self.parts.wal.sync().map_err(log)?;
            self.unsynced = false;
            self.last_sync = Instant::now();
        } else {
            self.unsynced = true;
        }
        tx.commit().map_err(|e| storage(e.into()))?;
        self.commits += 1;
        Ok(deltas)
    }

    /// Makes the redb file durable as it stands (every commit so far), and starts the log over.
    fn checkpoint(&mut self) {
        let result = (|| -> Result<(), redb::Error> {
            let mut tx = self.parts.db.begin_write()?;
            tx.set_durability(Durability::Immediate)?;
            tx.commit()?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.parts.wal.reset();
                self.commits = 0;
                self.checkpointed = Instant::now();
                // The checkpoint made every unsynced record's changes durable too.
                self.unsynced = false;
                self.last_sync = Instant::now();
            }
            Err(error) => self.fail(&StoreError::storage("checkpointing the store", error)),
        }
    }

    fn fail(&self, error: &StoreError) {
        if !self.failed.swap(true, Ordering::SeqCst) {
            tracing::error!(%error, "storage commit failed; refusing further writes");
        }
    }
}

/// Applies a commit's changes of the completed counts to memory's copy.
fn add_counts(memory: &mut Inner, deltas: &CountDeltas) {
    for (queue, delta) in deltas {
        let count = memory.completed.entry(queue.to_string()).or_default();
        *count = count.saturating_add_signed(*delta);
        if *count == 0 {
            memory.completed.remove(&**queue);
        }
    }
}
