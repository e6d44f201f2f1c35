//! Group commit through the write-ahead log: one committer at a time owns every write to the
//! store's files.
//!
//! Requests queue up. The committer takes all that are waiting, appends their ops to the log
//! as one record and syncs it (the only sync a commit waits for), hands the ops to the redb
//! file's side (`unapplied`: they wait there and are applied many commits at a time, unsynced),
//! brings memory up to date (each request's `after` step, under the index lock), and then
//! answers each. Under load many requests share one sync; alone, a request waits for exactly
//! one. Now and then a checkpoint applies what waits, makes the redb file durable (`redb`'s own
//! commit and sync) and the log starts over (see `wal`).
//!
//! Who commits: a request that finds no commit under way, when the last commit carried a single
//! request, commits itself, on its own thread, once its caller has released the index lock
//! ([`wait`]): alone, a request costs no hand-over to another thread and back, which on a small
//! machine is much of its time. When requests are waiting after that commit, or a checkpoint is
//! due, or the last commit carried several requests (they come concurrently: a request's thread
//! blocked in a sync would hold up the others it serves), the writer thread commits, and keeps
//! committing while requests keep coming. Exactly one committer runs at a time (the queue's
//! `leader`), so commits keep their order.
//!
//! Order: requests are applied in the order they were submitted. Callers submit while holding
//! the index lock, so the disk sees changes in the same order as memory.
//!
//! Memory after a commit: whatever must happen in memory once a change is written (a new job
//! becomes takeable, a completed job leaves memory for disk) is the request's `after` step, run
//! by the committer before the answer. It happens even if the caller has stopped waiting (its
//! request was cancelled): a written change is never left half done in memory. A request that
//! was to commit itself and is dropped without [`wait`] (cancelled, or submitted not to be
//! waited for) hands its commit to the writer thread: a drop may happen under the index lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redb::Database;
use tenax_core::store::{CommitObserver, Signals, StoreError};
use tokio::sync::{oneshot, watch};

use super::Inner;
use super::ops::{CountDeltas, Op};
use super::unapplied::{APPLY_AFTER_OPS, Unapplied};
use super::wal::Wal;

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
    pub fn add(&mut self, other: Wake) {
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
    /// Its place in the order of submission, from 1.
    seq: u64,
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

/// What the committer works with.
pub struct Parts {
    pub db: Arc<Database>,
    pub wal: Wal,
    /// Sync each commit's record before answering; else at most [`RELAXED_SYNC_INTERVAL`] later.
    pub sync: bool,
    pub memory: Arc<Mutex<Inner>>,
    pub signals: Arc<Signals>,
    /// Where each commit is reported, for the metrics.
    pub commits: Option<Arc<dyn CommitObserver>>,
}

/// Who commits now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leader {
    /// Nobody: the next request commits itself.
    None,
    /// A request, on its own thread.
    Request,
    /// The writer thread.
    Thread,
}

/// Requests waiting to be committed.
struct Queue {
    requests: Vec<Request>,
    ops: usize,
    leader: Leader,
    /// Requests in the last commit taken: more than one means requests come concurrently, and
    /// the writer thread commits the next round, so that no request's thread (a runtime
    /// thread that serves other connections) blocks in a sync while others are waiting.
    last_batch: usize,
    /// No more requests: the writer thread finishes what is queued and stops.
    closed: bool,
    /// Requests queued so far; the last one's `seq`.
    submitted: u64,
}

/// What every committer and submitter shares.
struct Shared {
    queue: Mutex<Queue>,
    /// Tells the writer thread to take over (or to stop).
    wake: Condvar,
    /// The committer's state: held by whoever leads.
    work: Mutex<Loop>,
    /// Set once a commit has failed: nothing is written after that (the state on disk and in
    /// memory may differ), every request is refused, and the operator restarts the server.
    failed: Arc<AtomicBool>,
    /// The `seq` of the last request answered (written, or refused by a failed store).
    /// Requests are answered in the order they were submitted.
    answered: Arc<watch::Sender<u64>>,
}

pub struct Writer {
    shared: Arc<Shared>,
    /// Commits logged but not yet in the redb file; reads settle them first.
    unapplied: Arc<Unapplied>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("failed", &self.has_failed())
            .finish_non_exhaustive()
    }
}

impl Writer {
    pub fn start(parts: Parts) -> Self {
        let failed = Arc::new(AtomicBool::new(false));
        let unapplied = Arc::new(Unapplied::new(parts.db.clone(), failed.clone()));
        let answered = Arc::new(watch::Sender::new(0));
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                requests: Vec::new(),
                ops: 0,
                leader: Leader::None,
                last_batch: 0,
                closed: false,
                submitted: 0,
            }),
            wake: Condvar::new(),
            work: Mutex::new(Loop::new(
                parts,
                unapplied.clone(),
                failed.clone(),
                answered.clone(),
            )),
            failed,
            answered,
        });
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tenax-writer".into())
            .spawn(move || run_thread(&thread_shared))
            .ok();
        if thread.is_none() {
            shared.failed.store(true, Ordering::SeqCst);
        }
        Self {
            shared,
            unapplied,
            thread: Mutex::new(thread),
        }
    }

    /// Before a read of the redb file: applies the commits that wait to be, so that the read
    /// sees every acknowledged write. Never takes the index lock (a caller may hold it).
    pub fn settle(&self) -> Result<(), StoreError> {
        self.unapplied.settle()
    }

    /// [`Writer::settle`] for a read of job bodies alone.
    pub fn settle_bodies(&self) -> Result<(), StoreError> {
        self.unapplied.settle_bodies()
    }

    /// Queues `ops` for the next commit. Call while holding the index lock; [`wait`] for the
    /// answer after releasing it.
    pub fn submit(&self, ops: Vec<Op>) -> Receiver {
        self.send(ops, None)
    }

    /// Queues `ops`, and `after` to run once they are written (or have failed), before the
    /// answer. Call while holding the index lock (which `after` will take again, later).
    pub fn submit_then(&self, ops: Vec<Op>, after: After) -> Receiver {
        self.send(ops, Some(after))
    }

    fn send(&self, ops: Vec<Op>, after: Option<After>) -> Receiver {
        let (done, answer) = oneshot::channel();
        let mut queue = self.shared.queue.lock();
        let request = Request {
            seq: queue.submitted + 1,
            ops,
            after,
            done,
        };
        if queue.closed || self.shared.failed.load(Ordering::SeqCst) {
            drop(queue);
            // The caller holds the index lock: its after step cleans up nothing here (the store
            // refuses every write from now on).
            let _ = request.done.send(Err(StoreError::Failed));
            return Receiver { answer, lead: None };
        }
        queue.submitted = request.seq;
        queue.ops += request.ops.len();
        queue.requests.push(request);
        let lead = match queue.leader {
            Leader::None if queue.last_batch <= 1 => {
                queue.leader = Leader::Request;
                Some(Lead(Some(self.shared.clone())))
            }
            Leader::None => {
                queue.leader = Leader::Thread;
                self.shared.wake.notify_one();
                None
            }
            Leader::Request | Leader::Thread => None,
        };
        Receiver { answer, lead }
    }

    pub fn has_failed(&self) -> bool {
        self.shared.failed.load(Ordering::SeqCst)
    }

    /// Where the order of submission stands: pass it to [`Writer::caught_up`]. Taken under the
    /// index lock with a read of memory, it stands for every change that memory shows.
    pub fn submitted(&self) -> u64 {
        self.shared.queue.lock().submitted
    }

    /// Waits until every request submitted up to `submitted` has been answered, so that a read
    /// of the file then sees what memory showed when `submitted` was taken (memory changes as
    /// a request is submitted; the file, once it is written). Call without the index lock.
    pub async fn caught_up(&self, submitted: u64) {
        let mut answered = self.shared.answered.subscribe();
        // The sender lives as long as `shared`, which `self` holds.
        let _ = answered.wait_for(|&seq| seq >= submitted).await;
    }

    /// Stops the writer thread after it has committed everything queued before, and
    /// checkpointed; later writes are refused.
    pub fn shutdown(&self) {
        self.shared.queue.lock().closed = true;
        self.shared.wake.notify_all();
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

/// The answer to a submitted write, and the duty to commit it when no commit was under way.
#[derive(Debug)]
pub struct Receiver {
    answer: oneshot::Receiver<Result<(), StoreError>>,
    lead: Option<Lead>,
}

/// A request's duty to commit: done by [`wait`], or, if the request is dropped first, on drop.
struct Lead(Option<Arc<Shared>>);

impl std::fmt::Debug for Lead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lead")
    }
}

impl Lead {
    fn run(&mut self) {
        if let Some(shared) = self.0.take() {
            lead(&shared);
        }
    }
}

impl Drop for Lead {
    /// A duty not done by [`wait`] (the request was cancelled, or dropped unanswered) goes to
    /// the writer thread. It is never done here: the receiver may be dropped under the index
    /// lock, which a commit takes.
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.queue.lock().leader = Leader::Thread;
            shared.wake.notify_one();
        }
    }
}

/// Waits for a submitted write: commits it first if it is this request's turn to (call after
/// releasing the index lock).
pub async fn wait(mut receiver: Receiver) -> Result<(), StoreError> {
    if let Some(mut lead) = receiver.lead.take() {
        lead.run();
    }
    receiver.answer.await.unwrap_or(Err(StoreError::Failed))
}

/// Takes what is queued, up to a commit's worth.
fn take_batch(queue: &mut Queue) -> Vec<Request> {
    if queue.ops <= MAX_OPS_PER_COMMIT {
        queue.ops = 0;
        if !queue.requests.is_empty() {
            queue.last_batch = queue.requests.len();
        }
        return std::mem::take(&mut queue.requests);
    }
    let mut ops = 0;
    let mut n = 0;
    for request in &queue.requests {
        if n > 0 && ops + request.ops.len() > MAX_OPS_PER_COMMIT {
            break;
        }
        ops += request.ops.len();
        n += 1;
    }
    queue.ops -= ops;
    queue.last_batch = n;
    queue.requests.drain(..n).collect()
}

/// A request's commit: what is queued, once; then the writer thread takes over if more came, or
/// a checkpoint is due (it may take long, and a request's thread serves other requests).
fn lead(shared: &Shared) {
    let mut work = shared.work.lock();
    let batch = take_batch(&mut shared.queue.lock());
    if !batch.is_empty() {
        work.commit(batch);
    }
    let due = work.checkpoint_due() || work.apply_due();
    drop(work);
    let mut queue = shared.queue.lock();
    if queue.requests.is_empty() && !due {
        queue.leader = Leader::None;
    } else {
        queue.leader = Leader::Thread;
        shared.wake.notify_one();
    }
}

/// The writer thread: commits while it leads, syncs and checkpoints when idle, and at the end.
fn run_thread(shared: &Shared) {
    loop {
        let mut idle = false;
        {
            let mut queue = shared.queue.lock();
            loop {
                if queue.leader == Leader::Thread {
                    break;
                }
                if queue.closed && queue.leader == Leader::None {
                    queue.leader = Leader::Thread;
                    drop(queue);
                    let mut work = shared.work.lock();
                    loop {
                        let batch = take_batch(&mut shared.queue.lock());
                        if batch.is_empty() {
                            break;
                        }
                        work.commit(batch);
                    }
                    work.finish();
                    return;
                }
                let timed_out = shared
                    .wake
                    .wait_for(&mut queue, RELAXED_SYNC_INTERVAL)
                    .timed_out();
                if timed_out && queue.leader == Leader::None {
                    queue.leader = Leader::Thread;
                    idle = true;
                    break;
                }
            }
        }
        let mut work = shared.work.lock();
        if idle {
            work.idle();
        }
        loop {
            let batch = take_batch(&mut shared.queue.lock());
            if !batch.is_empty() {
                work.commit(batch);
            }
            if work.checkpoint_due() {
                work.checkpoint();
            } else if work.apply_due() {
                work.apply();
            }
            let mut queue = shared.queue.lock();
            if queue.requests.is_empty() {
                queue.leader = Leader::None;
                break;
            }
        }
    }
}

/// The writer thread's state.
struct Loop {
    parts: Parts,
    unapplied: Arc<Unapplied>,
    failed: Arc<AtomicBool>,
    /// The commit record being built, kept to reuse its allocation.
    record: Vec<u8>,
    /// A record written but not yet synced (relaxed mode).
    unsynced: bool,
    last_sync: Instant,
    /// Commits since the last checkpoint, and when it was.
    commits: u32,
    checkpointed: Instant,
    /// See [`Shared::answered`].
    answered: Arc<watch::Sender<u64>>,
}

impl Loop {
    fn new(
        parts: Parts,
        unapplied: Arc<Unapplied>,
        failed: Arc<AtomicBool>,
        answered: Arc<watch::Sender<u64>>,
    ) -> Self {
        Self {
            parts,
            unapplied,
            failed,
            record: Vec::new(),
            unsynced: false,
            last_sync: Instant::now(),
            commits: 0,
            checkpointed: Instant::now(),
            answered,
        }
    }

    /// At the end: checkpoint what is pending, so the next open has no log to apply.
    fn finish(&mut self) {
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

    fn apply_due(&self) -> bool {
        self.unapplied.len() >= APPLY_AFTER_OPS
    }

    /// Applies the commits that wait to the redb file.
    fn apply(&mut self) {
        if self.failed.load(Ordering::SeqCst) {
            return;
        }
        if let Err(error) = self.unapplied.apply() {
            self.fail(&StoreError::storage(
                "applying commits to the store file",
                error,
            ));
        }
    }

    fn checkpoint_due(&self) -> bool {
        self.parts.wal.used() >= CHECKPOINT_BYTES
            || self.commits >= CHECKPOINT_COMMITS
            || (self.commits > 0 && self.checkpointed.elapsed() >= CHECKPOINT_INTERVAL)
    }

    /// Writes a batch of requests as one commit and answers them.
    fn commit(&mut self, batch: Vec<Request>) {
        let Some(last) = batch.last().map(|request| request.seq) else {
            return;
        };
        if self.failed.load(Ordering::SeqCst) {
            {
                let mut memory = self.parts.memory.lock();
                for request in batch {
                    if let Some(after) = request.after {
                        after(&mut memory, false);
                    }
                    let _ = request.done.send(Err(StoreError::Failed));
                }
            }
            self.answered_up_to(last);
            return;
        }
        let mut requests = Vec::with_capacity(batch.len());
        let mut all_ops = Vec::with_capacity(batch.len());
        for request in batch {
            all_ops.push(request.ops);
            requests.push((request.after, request.done));
        }
        let started = Instant::now();
        let result = self.write(all_ops);
        if let (Some(commits), Ok(_)) = (&self.parts.commits, &result) {
            commits.committed(requests.len(), started.elapsed());
        }
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
        self.answered_up_to(last);
    }

    /// Requests up to `seq` are answered (they are taken in the order they were submitted).
    fn answered_up_to(&self, seq: u64) {
        self.answered.send_if_modified(|answered| {
            let later = seq > *answered;
            *answered = (*answered).max(seq);
            later
        });
    }

    /// Applies the ops to the redb file, logs them as one record and syncs it, and commits.
    /// Returns how the commit changed the completed counts.
    fn write(&mut self, batches: Vec<Vec<Op>>) -> Result<CountDeltas, StoreError> {
        self.record.clear();
        for op in batches.iter().flatten() {
            op.encode(&mut self.record);
        }
        // Requests with no ops: nothing to make durable, and a log record is never empty.
        if self.record.is_empty() {
            return Ok(CountDeltas::new());
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

    /// Logs the batches' ops as one record, synced (unless relaxed), and hands them to the
    /// redb file's side: they wait there if they can, else they are applied now, with what
    /// waits before them. Returns how the commit changed the completed counts.
    fn write_logged(&mut self, batches: Vec<Vec<Op>>) -> Result<CountDeltas, StoreError> {
        let ops: Vec<Op> = batches.into_iter().flatten().collect();
        let lsn = self.parts.wal.next_lsn();
        let result = if ops.iter().all(Op::can_wait) {
            self.log()?;
            let mut deltas = CountDeltas::new();
            for op in &ops {
                op.add_known_delta(&mut deltas);
            }
            self.unapplied.defer(ops, lsn);
            Ok(deltas)
        } else {
            let unapplied = self.unapplied.clone();
            unapplied.apply_with(ops, lsn, || self.log())
        };
        self.commits += 1;
        result
    }

    /// Appends the commit's record to the log and syncs it (in relaxed mode, at most
    /// [`RELAXED_SYNC_INTERVAL`] after the last sync). In sync mode a record is synced before
    /// the next one is appended: the log relies on it to tell a crash's torn tail (only the
    /// last record) from damage (`wal`, invariant 1).
    fn log(&mut self) -> Result<(), StoreError> {
        let log = |e: std::io::Error| StoreError::storage("writing the write-ahead log", e);
        self.parts.wal.append(&self.record).map_err(log)?;
        if self.parts.sync || self.last_sync.elapsed() >= RELAXED_SYNC_INTERVAL {
            self.parts.wal.sync().map_err(log)?;
            self.unsynced = false;
            self.last_sync = Instant::now();
        } else {
            self.unsynced = true;
        }
        Ok(())
    }

    /// Makes the redb file durable as it stands (every commit so far), and starts the log over.
    fn checkpoint(&mut self) {
        match self.unapplied.checkpoint() {
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

#[cfg(test)]
mod tests {
    use tenax_core::store::QueueStore as _;

    use super::*;
    use crate::disk::SimulatedDisk;
    use crate::{EmbeddedOptions, EmbeddedStore};

    fn put_queue(name: &str) -> Op {
        Op::PutQueue {
            name: name.to_owned(),
            config: tenax_core::store::to_json_bytes(&tenax_core::model::QueueConfig::default()),
        }
    }

    /// A write submitted under the index lock and never waited for is committed by the writer
    /// thread, and dropping its receiver there does not take the lock again (it did once: a
    /// store deadlocked on its own lock).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_not_waited_for_is_committed_without_the_callers_lock() {
        let disk = SimulatedDisk::new();
        let store = EmbeddedStore::open_simulated(&disk, &EmbeddedOptions::default(), 100)
            .expect("it opens");
        {
            let _inner = store.inner.lock();
            drop(store.writer.submit(vec![put_queue("detached")]));
        }
        // A waited write after it is committed after it, in order.
        let receiver = {
            let _inner = store.inner.lock();
            store.writer.submit(vec![put_queue("waited")])
        };
        wait(receiver).await.expect("committed");
        store.writer.shutdown();
        drop(store);
        let reopened = EmbeddedStore::open_simulated(&disk, &EmbeddedOptions::default(), 200)
            .expect("it opens again");
        let names: Vec<String> = reopened
            .queues()
            .await
            .expect("queues")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names, ["detached", "waited"]);
    }

    /// A commit of requests without ops writes no record, answers them, and leaves the log
    /// numbering as it was: the next write is there after a reopen.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_without_ops_writes_nothing() {
        let disk = SimulatedDisk::new();
        let store = EmbeddedStore::open_simulated(&disk, &EmbeddedOptions::default(), 100)
            .expect("it opens");
        let receiver = {
            let _inner = store.inner.lock();
            store.writer.submit(Vec::new())
        };
        wait(receiver).await.expect("answered");
        let receiver = {
            let _inner = store.inner.lock();
            store.writer.submit(vec![put_queue("after")])
        };
        wait(receiver).await.expect("committed");
        let reopened = EmbeddedStore::open_simulated(
            &disk.reboot(|_, _| false),
            &EmbeddedOptions::default(),
            200,
        )
        .expect("it opens again");
        let names: Vec<String> = reopened
            .queues()
            .await
            .expect("queues")
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names, ["after"]);
        store.writer.shutdown();
    }
}
