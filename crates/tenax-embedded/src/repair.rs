//! `tenax repair`: the way on from a damaged write-ahead log, which the store refuses to open
//! (`wal`). Only ever run by hand: the store never repairs on its own.
//!
//! What it does, in this order (a crash at any step leaves a directory it can run on again):
//!
//! 1. reads the log as an open would; an intact log is left alone;
//! 2. copies the damaged log aside (`tenax.wal.damaged-<UTC time>`), synced;
//! 3. applies, in one durable commit, every record it can read in order from the redb file's
//!    last checkpoint up to the damage, and raises `wal_lsn` past every number the log shows
//!    was written;
//! 4. makes a new, empty log (written beside the old one, then renamed over it), and records
//!    its identity in the redb file.
//!
//! Records that can be read *after* the damage are not applied: they follow a record whose
//! changes are lost, and applying them without it could leave a job half changed (a completion
//! of a job whose enqueue is lost, a counter behind an id already used). They are reported
//! instead, with what they did, and stay in the copy.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase};
use tenax_core::model::JobId;
use tenax_core::store::StoreError;

use super::disk::FileLog;
use super::ops::Op;
use super::recover::{self, log_position};
use super::tables::JOBS;
use super::wal::scan::{End, FileDamage, Found, Scan, Why};
use super::wal::{self, Wal};
use super::{check_format, fault};

/// What `tenax repair` found and did.
#[derive(Debug)]
pub struct Report {
    pub log: PathBuf,
    /// What is wrong with the log, in words; `None`: it is intact, and nothing was done.
    pub damage: Option<String>,
    /// Where the damaged log was copied (`None`: there was no file to copy).
    pub copy: Option<PathBuf>,
    /// The records applied from the log: their numbers, first and last.
    pub applied: Option<(u64, u64)>,
    pub lost: Lost,
}

/// What is lost: the records from the first one that cannot be applied on.
#[derive(Debug, Default)]
pub struct Lost {
    /// The first record lost.
    pub from: u64,
    /// The last record the log shows was written (`from - 1`: it shows none).
    pub through: u64,
    /// Why more records than the log shows may be lost (`None`: the log shows where it ended).
    pub unsure: Option<&'static str>,
    /// Whether the records lost were never acknowledged: a crash's torn tail (sync mode), or
    /// records that relaxed durability had not synced.
    pub unsynced: bool,
    /// Lost records that can still be read (in the copy), in order.
    pub readable: Vec<LostRecord>,
    /// What the readable lost records did.
    pub ops: LostOps,
}

impl Lost {
    /// How many records are lost, when the log can say.
    pub fn count(&self) -> Option<u64> {
        self.unsure
            .is_none()
            .then(|| (self.through + 1).saturating_sub(self.from))
    }

    /// The numbers of the records lost, as far as the log shows, that cannot be read at all.
    pub fn unreadable(&self) -> Vec<u64> {
        let readable: BTreeSet<u64> = self.readable.iter().map(|r| r.lsn).collect();
        (self.from..=self.through)
            .filter(|n| !readable.contains(n))
            .collect()
    }
}

/// A lost record that can be read: its number and where it is in the damaged log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostRecord {
    pub lsn: u64,
    pub offset: u64,
    pub end: u64,
}

/// What the readable lost records changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LostOps {
    /// Jobs they enqueued, which the store does not have: lost entirely.
    pub enqueued: BTreeSet<JobId>,
    /// Jobs they completed: the store still has them as they were before (they run again).
    pub completed: BTreeSet<JobId>,
    /// Other jobs they changed (state, errors, policy, deletion, a move).
    pub changed: BTreeSet<JobId>,
    /// Changes to queues, subscriptions, tokens, schedules, endpoints and rate limits.
    pub other: usize,
}

/// Repairs the log of the store in `dir` (see the module doc). Fails if the store is in use.
pub fn repair(dir: &Path) -> Result<Report, StoreError> {
    let redb_path = dir.join(crate::FILE_NAME);
    let log_path = dir.join("tenax.wal");
    let db = Database::builder().open(&redb_path).map_err(|e| {
        let what = match e {
            redb::DatabaseError::DatabaseAlreadyOpen => format!(
                "opening {} (another process, a running server, has it open: stop it first)",
                redb_path.display()
            ),
            _ => format!("opening {}", redb_path.display()),
        };
        StoreError::storage(what, e)
    })?;
    check_format(&db)?;
    let (applied, id) = log_position(&db)?;
    let io = |what: &str| {
        let what = format!("{what} {}", log_path.display());
        move |e: std::io::Error| StoreError::storage(what, e)
    };
    let exists = std::fs::symlink_metadata(&log_path).is_ok();
    let bytes = if exists {
        std::fs::read(&log_path).map_err(io("reading"))?
    } else {
        Vec::new()
    };
    let reading = wal::read_bytes(&bytes, id, applied);
    let scan = reading.scan;
    let mut report = Report {
        log: log_path.clone(),
        damage: wal::describe_damage(&scan, applied),
        copy: None,
        applied: None,
        lost: Lost::default(),
    };
    if report.damage.is_none() {
        return Ok(report);
    }
    if exists {
        let copy = copy_aside(&log_path, &bytes)?;
        report.copy = Some(copy);
    }
    let settled = [applied, scan.written]
        .into_iter()
        .chain(scan.records.iter().map(|r| r.lsn))
        .chain(scan.after.iter().map(|r| r.lsn))
        .max()
        .unwrap_or(applied);
    let name = log_path.display().to_string();
    recover::apply(&db, &scan.records, settled, &name)?;
    report.applied = scan
        .records
        .first()
        .zip(scan.records.last())
        .map(|(first, last)| (first.lsn, last.lsn));
    report.lost = lost(&db, &scan, applied, settled)?;
    // The new log beside the old one, then in its place: a crash in between leaves the old
    // log (whose records are applied now) or the new one, never half of either.
    let new_path = dir.join("tenax.wal.new");
    let _ = std::fs::remove_file(&new_path);
    let file = FileLog::open(&new_path).map_err(io("making the new log beside"))?;
    // As large as the old one (the server grows it at open if it wants it larger).
    let size = if bytes.len() >= 2 * 4096 {
        bytes.len() as u64
    } else {
        wal::CAPACITY
    };
    let wal = Wal::make(Box::new(file), size, settled).map_err(io("making the new log beside"))?;
    std::fs::rename(&new_path, &log_path).map_err(io("putting the new log in place of"))?;
    sync_dir(dir)?;
    recover::name_log(&db, wal.id())?;
    Ok(report)
}

/// Copies the damaged log to `tenax.wal.damaged-<UTC time>` beside it, synced.
fn copy_aside(log_path: &Path, bytes: &[u8]) -> Result<PathBuf, StoreError> {
    use std::io::Write as _;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let dir = log_path.parent().unwrap_or(Path::new("."));
    let mut n = 1;
    let (path, mut file) = loop {
        let name = if n == 1 {
            format!("tenax.wal.damaged-{stamp}")
        } else {
            format!("tenax.wal.damaged-{stamp}-{n}")
        };
        let path = dir.join(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => break (path, file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 100 => n += 1,
            Err(e) => {
                return Err(StoreError::storage(
                    format!("copying the damaged log to {}", path.display()),
                    e,
                ));
            }
        }
    };
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| {
            StoreError::storage(format!("copying the damaged log to {}", path.display()), e)
        })?;
    sync_dir(dir)?;
    Ok(path)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::storage(format!("syncing {}", dir.display()), e))
}

/// What the repair loses: the records from the end of those applied, through the last the log
/// shows was written.
fn lost(db: &Database, scan: &Scan, applied: u64, settled: u64) -> Result<Lost, StoreError> {
    let from = scan.records.last().map_or(applied, |r| r.lsn) + 1;
    let clean = matches!(scan.end, End::Clean { .. });
    let unsure = match scan.file {
        Some(FileDamage::Missing) => Some("the log is gone"),
        Some(FileDamage::OtherLog { .. }) => Some("the log in its place is another store's"),
        Some(FileDamage::Behind { .. }) => Some("the log in its place is an older copy"),
        Some(FileDamage::Cut { .. }) if !clean => Some("the log was cut short"),
        _ if matches!(
            scan.end,
            End::Damaged {
                why: Why::PastEnd,
                ..
            }
        ) =>
        {
            Some("the log was cut short")
        }
        _ if !scan.unreadable_pages.is_empty() && !clean => {
            Some("a page whose header does not check may have held more")
        }
        _ => None,
    };
    // What the log shows: nothing past the records applied, when it is not this store's.
    let through = match scan.file {
        Some(FileDamage::Missing | FileDamage::OtherLog { .. } | FileDamage::Behind { .. }) => {
            from - 1
        }
        _ => settled.max(from - 1),
    };
    let readable: Vec<&Found> = scan.after.iter().filter(|r| r.lsn >= from).collect();
    Ok(Lost {
        from,
        through,
        unsure,
        unsynced: matches!(scan.end, End::Torn { .. }) && unsure.is_none(),
        readable: readable
            .iter()
            .map(|r| LostRecord {
                lsn: r.lsn,
                offset: r.offset,
                end: r.end,
            })
            .collect(),
        ops: lost_ops(db, &readable)?,
    })
}

/// What `records` did, by the jobs they touched; a job they enqueued is one that the store
/// does not have.
fn lost_ops(db: &Database, records: &[&Found]) -> Result<LostOps, StoreError> {
    let what = "reading the jobs the lost records touched";
    let tx = db.begin_read().map_err(fault(what))?;
    let jobs = tx.open_table(JOBS).map_err(fault(what))?;
    let mut ops = LostOps::default();
    let mut bodies: BTreeSet<JobId> = BTreeSet::new();
    let mut touched: BTreeSet<JobId> = BTreeSet::new();
    for record in records {
        // A record that checks but does not decode is counted as one change of unknown kind.
        let Ok(decoded) = Op::decode_all(&record.payload) else {
            ops.other += 1;
            continue;
        };
        for op in decoded {
            match op {
                Op::PutBody { id, .. } => {
                    bodies.insert(id);
                }
                Op::Complete { id, .. } => {
                    ops.completed.insert(id);
                }
                // The id counter moves with the enqueues.
                Op::SetNextId(_) => {}
                Op::PutState { id, .. }
                | Op::PutPolicy { id, .. }
                | Op::PutError { id, .. }
                | Op::DeleteJob { id }
                | Op::PutAttempt { id, .. } => {
                    touched.insert(id);
                }
                _ => ops.other += 1,
            }
        }
    }
    for id in bodies {
        if jobs.get(id.0).map_err(fault(what))?.is_some() {
            touched.insert(id);
        } else {
            ops.enqueued.insert(id);
        }
    }
    ops.changed = touched
        .into_iter()
        .filter(|id| !ops.enqueued.contains(id) && !ops.completed.contains(id))
        .collect();
    ops.completed.retain(|id| !ops.enqueued.contains(id));
    Ok(ops)
}
