//! The redb file's side of the commits: a commit is durable once its record is synced in the
//! log (`wal`); its ops then wait here, and are applied to the redb file many commits at a time.
//!
//! Why: a redb transaction costs a fixed amount whatever it carries (opening tables, checksums,
//! copying every changed page to the page cache), which for one job is more than the job's own
//! rows; applied together, in key order (`sorted`), many commits' ops cost a fraction of that.
//! Measured side by side with one job per request: enqueue +21 % on one connection and +14 to
//! 21 % on eight, take-one-then-complete +15 % with one worker and +34 % with eight.
//!
//! When the waiting ops are applied: before anything reads the file ([`Unapplied::settle`],
//! which every read of the file at run time calls), once [`APPLY_AFTER_OPS`] wait (by the writer
//! thread), at every checkpoint (which makes the file durable so that the log can start over),
//! and before a commit that cannot wait ([`Op::can_wait`]).
//!
//! Invariants:
//! - every redb write transaction is made under this lock, so the file applies the log's
//!   records in their order, and `wal_lsn` in `meta` is the last record applied;
//! - nothing holding this lock takes the index lock, so a read may settle while holding it;
//! - what memory shows was acknowledged, so it is in the log: a crash loses nothing waiting
//!   here (the next open applies the log's records past `wal_lsn`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use redb::{Database, Durability, WriteTransaction};
use tenax_core::store::StoreError;

use super::ops::{CountDeltas, Op, Tables};

/// How many ops may wait before the writer thread applies them: at about a microsecond each,
/// a few milliseconds of work, and a few megabytes of memory at most.
pub const APPLY_AFTER_OPS: usize = 4096;

pub struct Unapplied {
    waiting: Mutex<Waiting>,
    /// Whether ops are waiting: read without the lock, so that a read finds out cheaply that it
    /// has nothing to wait for.
    any: AtomicBool,
    /// Whether a waiting op writes a job's body: a read of bodies alone (a take's) need not
    /// wait for anything else.
    bodies: AtomicBool,
    /// The writer's: set once a write to the file has failed.
    failed: Arc<AtomicBool>,
}

struct Waiting {
    db: Arc<Database>,
    ops: Vec<Op>,
    /// The log number of the last record whose ops are in `ops`.
    last_lsn: u64,
}

impl Unapplied {
    pub fn new(db: Arc<Database>, failed: Arc<AtomicBool>) -> Self {
        Self {
            waiting: Mutex::new(Waiting {
                db,
                ops: Vec::new(),
                last_lsn: 0,
            }),
            any: AtomicBool::new(false),
            bodies: AtomicBool::new(false),
            failed,
        }
    }

    /// The ops of record `lsn`, synced in the log, wait to be applied. Returns how many wait.
    pub fn defer(&self, ops: Vec<Op>, lsn: u64) -> usize {
        let mut waiting = self.waiting.lock();
        if ops.iter().any(|op| matches!(op, Op::PutBody { .. })) {
            self.bodies.store(true, Ordering::SeqCst);
        }
        waiting.ops.extend(ops);
        waiting.last_lsn = lsn;
        self.any.store(true, Ordering::SeqCst);
        waiting.ops.len()
    }

    /// Applies the waiting ops, then `ops` of record `lsn`, which `log` appends to the log and
    /// syncs before the transaction is committed. Returns how `ops` changed the completed
    /// counts.
    pub fn apply_with(
        &self,
        ops: Vec<Op>,
        lsn: u64,
        log: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<CountDeltas, StoreError> {
        let storage = |e: redb::Error| StoreError::storage("committing", e);
        let mut waiting = self.waiting.lock();
        self.apply_waiting(&mut waiting, Durability::None)
            .map_err(storage)?;
        let (tx, deltas) = write(&waiting.db, ops, lsn, Durability::None).map_err(storage)?;
        // The record is in the log, synced, before the transaction is committed: a crash in
        // between leaves a record that the next open applies again.
        log()?;
        tx.commit().map_err(|e| storage(e.into()))?;
        Ok(deltas)
    }

    /// How many ops wait.
    pub fn len(&self) -> usize {
        self.waiting.lock().ops.len()
    }

    /// Applies the waiting ops (not synced: the log holds them).
    pub fn apply(&self) -> Result<(), redb::Error> {
        self.apply_waiting(&mut self.waiting.lock(), Durability::None)
    }

    /// Applies the waiting ops and makes the file durable as it then stands: every record
    /// logged so far is in it, and the log may start over.
    pub fn checkpoint(&self) -> Result<(), redb::Error> {
        let mut waiting = self.waiting.lock();
        if !waiting.ops.is_empty() {
            return self.apply_waiting(&mut waiting, Durability::Immediate);
        }
        let mut tx = waiting.db.begin_write()?;
        tx.set_durability(Durability::Immediate)?;
        tx.commit()?;
        Ok(())
    }

    /// Before a read of job bodies alone: applies what waits if any of it writes a body.
    pub fn settle_bodies(&self) -> Result<(), StoreError> {
        if !self.bodies.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.settle()
    }

    /// Before a read of the file: applies what waits, so the read sees every acknowledged
    /// write.
    pub fn settle(&self) -> Result<(), StoreError> {
        if !self.any.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut waiting = self.waiting.lock();
        if waiting.ops.is_empty() {
            return Ok(());
        }
        if self.failed.load(Ordering::SeqCst) {
            return Err(StoreError::Failed);
        }
        self.apply_waiting(&mut waiting, Durability::None)
            .map_err(|error| {
                let error = StoreError::storage("applying commits to the store file", error);
                if !self.failed.swap(true, Ordering::SeqCst) {
                    tracing::error!(%error, "storage commit failed; refusing further writes");
                }
                error
            })
    }

    fn apply_waiting(
        &self,
        waiting: &mut Waiting,
        durability: Durability,
    ) -> Result<(), redb::Error> {
        if waiting.ops.is_empty() {
            return Ok(());
        }
        let (tx, _) = write(
            &waiting.db,
            waiting.ops.drain(..),
            waiting.last_lsn,
            durability,
        )?;
        tx.commit()?;
        self.any.store(false, Ordering::SeqCst);
        self.bodies.store(false, Ordering::SeqCst);
        Ok(())
    }
}

/// A write transaction with `ops` of the log's records up to `lsn` applied to the file, the
/// completed counts and the log position with them, not yet committed; and how `ops` changed
/// the counts.
fn write(
    db: &Database,
    ops: impl IntoIterator<Item = Op>,
    lsn: u64,
    durability: Durability,
) -> Result<(WriteTransaction, CountDeltas), redb::Error> {
    let mut tx = db.begin_write()?;
    tx.set_durability(durability)?;
    let mut deltas = CountDeltas::new();
    {
        let mut tables = Tables::open(&tx);
        tables.apply_all(ops, &mut deltas)?;
        tables.add_counts(&deltas)?;
        tables.set_log_position(lsn)?;
    }
    Ok((tx, deltas))
}
