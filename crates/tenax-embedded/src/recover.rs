//! Bringing the redb file up to date with its write-ahead log at open: the log is read
//! (`wal::read`), refused if damaged, and its records past the file's last checkpoint are
//! applied in one durable commit, which also raises `wal_lsn` past every number the log shows
//! was written (`wal`, invariant 2). A log that is not the store's own in the current format
//! (a new store, a log of format 1) is then made again, and the redb file records its identity.
//!
//! Order, so that a crash at any point leaves a store that opens: records applied and
//! `wal_lsn` raised (durable) before the log is made again; the new log synced before the
//! redb file names it (`wal_id`); a log made but not named has no records, and is made again.

use std::path::Path;

use redb::{Database, ReadableDatabase, TableError};
use tenax_core::store::StoreError;

use super::disk::LogFile;
use super::fault;
use super::ops::{CountDeltas, Op, Tables};
use super::tables::{META, WAL_ID, WAL_LSN};
use super::wal::scan::{End, Found};
use super::wal::{self, Wal};

/// What the redb file says of its log: the last record applied (0: none), and the log's
/// identity (`None`: it has never named one, being new or older than format 4).
pub fn log_position(db: &Database) -> Result<(u64, Option<u64>), StoreError> {
    let what = "reading the write-ahead log's position";
    let tx = db.begin_read().map_err(fault(what))?;
    let meta = match tx.open_table(META) {
        Ok(meta) => meta,
        // A file just made has no tables yet.
        Err(TableError::TableDoesNotExist(_)) => return Ok((0, None)),
        Err(error) => return Err(fault(what)(error)),
    };
    let get = |key: &str| -> Result<Option<u64>, StoreError> {
        Ok(meta.get(key).map_err(fault(what))?.map(|v| v.value()))
    };
    Ok((get(WAL_LSN)?.unwrap_or(0), get(WAL_ID)?))
}

/// Whether the redb file has logged commits in a log, so that a missing one has lost them.
pub fn expects_log(db: &Database) -> Result<bool, StoreError> {
    let (applied, id) = log_position(db)?;
    Ok(id.is_some() || applied > 0)
}

/// The log's name in messages, and the data directory `tenax repair` is to be given.
#[derive(Debug, Clone)]
pub struct Place<'a> {
    pub log: String,
    pub dir: Option<&'a Path>,
}

/// Applies the log's records past the redb file's last checkpoint, refusing a damaged log, and
/// returns the log ready for the next record.
pub fn recover(
    db: &Database,
    log: Box<dyn LogFile>,
    place: &Place<'_>,
    log_bytes: u64,
) -> Result<Wal, StoreError> {
    let (applied, id) = log_position(db)?;
    let reading = wal::read(&*log, id, applied)
        .map_err(|e| StoreError::storage(format!("reading {}", place.log), e))?;
    let scan = &reading.scan;
    if let Some(damage) = wal::describe_damage(scan, applied) {
        let repair = match place.dir {
            Some(dir) => format!("tenax repair --data-dir {}", dir.display()),
            None => "tenax repair --data-dir <the data directory>".to_owned(),
        };
        return Err(StoreError::Corrupt(format!(
            "{} is damaged: {damage}. The store refuses to start rather than go on without \
             what the log held. `{repair}` keeps a copy of the damaged log, applies every record \
             it can, and says exactly what is lost",
            place.log
        )));
    }
    if let End::Torn { lsn, offset } = scan.end {
        tracing::info!(
            record = lsn,
            offset,
            "the write-ahead log's last record was cut by a crash before it was synced \
             (never acknowledged): dropped"
        );
        if !scan.after.is_empty() {
            tracing::warn!(
                records = scan.after.len(),
                "records written after it, acknowledged in relaxed durability but never \
                 synced, are dropped with it"
            );
        }
    }
    let settled = applied.max(scan.written);
    apply(db, &scan.records, settled, &place.log)?;
    if !scan.records.is_empty() {
        tracing::info!(
            records = scan.records.len(),
            "applied the write-ahead log's commits that the store file had not checkpointed"
        );
    }
    let io = |e: std::io::Error| StoreError::storage(format!("making {}", place.log), e);
    match id {
        Some(id) if reading.current => {
            Wal::resume(log, id, settled, log_bytes, &scan.unreadable_pages).map_err(io)
        }
        _ => {
            let wal = Wal::make(log, log_bytes, settled).map_err(io)?;
            name_log(db, wal.id())?;
            Ok(wal)
        }
    }
}

/// Applies `records` (in order, each one more than the last) in one durable commit, and sets
/// the last record applied to `settled`, at least the last of them. Nothing to do when there
/// are none and nothing to raise.
pub fn apply(db: &Database, records: &[Found], settled: u64, log: &str) -> Result<(), StoreError> {
    let what = "applying the write-ahead log";
    let (applied, _) = log_position(db)?;
    if records.is_empty() && settled <= applied {
        return Ok(());
    }
    let mut ops = Vec::new();
    for record in records {
        ops.extend(Op::decode_all(&record.payload).map_err(|e| {
            StoreError::Corrupt(format!(
                "{log}: record {} at byte {} checks, but its ops do not read: {e}",
                record.lsn, record.offset
            ))
        })?);
    }
    let tx = db.begin_write().map_err(fault(what))?;
    {
        let mut tables = Tables::open(&tx);
        let mut deltas = CountDeltas::new();
        tables.apply_all(ops, &mut deltas).map_err(fault(what))?;
        tables.add_counts(&deltas).map_err(fault(what))?;
        let last = records.last().map_or(0, |r| r.lsn);
        tables
            .set_log_position(settled.max(last).max(applied))
            .map_err(fault(what))?;
    }
    tx.commit().map_err(fault(what))
}

/// Records in the redb file, durably, that log `id` is its log.
pub fn name_log(db: &Database, id: u64) -> Result<(), StoreError> {
    let what = "recording the write-ahead log's identity";
    let tx = db.begin_write().map_err(fault(what))?;
    tx.open_table(META)
        .map_err(fault(what))?
        .insert(WAL_ID, id)
        .map_err(fault(what))?;
    tx.commit().map_err(fault(what))
}
