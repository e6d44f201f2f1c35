//! Backups of a running store, and restoring one (`tenax backup`, `tenax restore`,
//! `POST /api/admin/backup`; docs/operations.md, "Backups").
//!
//! A backup is a directory of two files: `tenax.redb`, a copy of every table
//! ([`crate::copy`]) as one read transaction sees them, and `backup.json`
//! ([`BackupManifest`]). The read transaction begins once every acknowledged commit is applied
//! to the file ([`EmbeddedStore::read_tx`]): the copy holds every commit up to the log's record
//! `wal_lsn` and none after. redb's read transactions do not block its writer, so writes go on
//! during the copy; only the settle before it waits for the commits in flight.
//!
//! Invariants:
//! - a backup directory never holds the secrets key: it is kept apart on purpose
//!   (docs/security.md);
//! - [`restore`] writes nothing into the target before the backup checks (its manifest, its
//!   file's size and SHA-256, formats this version reads), and leaves a data directory that
//!   [`EmbeddedStore::open`] opens as it is: the file, and a new empty log it names.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest as _, Sha256};
use tenax_core::clock::{UnixMs, rfc3339};
use tenax_core::model::backup::{BackupManifest, BackupMoment, MANIFEST_FILE, MANIFEST_FORMAT};
use tenax_core::secrets::{SECRETS_KEY_FILE, files};
use tenax_core::store::StoreError;

use super::disk::FileLog;
use super::tables::{FORMAT_VERSION, FORMAT_VERSION_KEY, META, WAL_LSN};
use super::wal::Wal;
use super::{EmbeddedOptions, EmbeddedStore, FILE_NAME, copy, fault, open_file, recover};

/// The prefix of the directories the server writes a backup into, in its data directory,
/// before it sends it; removed once sent, and at the next open if a crash left one.
const IN_PROGRESS: &str = ".backup-";

impl EmbeddedStore {
    /// Writes a backup of the store into `into` (a directory that does not exist, or is empty),
    /// the moment's wall time being `now_ms`. Writes go on meanwhile.
    pub fn write_backup(&self, into: &Path, now_ms: UnixMs) -> Result<BackupManifest, StoreError> {
        let what = "writing a backup";
        files::private_dir(into)
            .map_err(|e| StoreError::storage(format!("making {}", into.display()), e))?;
        let settling = Instant::now();
        let tx = self.read_tx(what)?;
        let settled = settling.elapsed();
        let copying = Instant::now();
        let (wal_lsn, store_format) = {
            let meta = tx.open_table(META).map_err(fault(what))?;
            let get = |key: &str| -> Result<u64, StoreError> {
                Ok(meta.get(key).map_err(fault(what))?.map_or(0, |v| v.value()))
            };
            (get(WAL_LSN)?, get(FORMAT_VERSION_KEY)?)
        };
        let path = into.join(FILE_NAME);
        let copy = open_file(&path, &EmbeddedOptions::default())?;
        copy::copy_tables(&tx, &copy, "copying the store into a backup")?;
        drop(tx);
        let rows = {
            let read = redb::ReadableDatabase::begin_read(&copy).map_err(fault(what))?;
            copy::row_counts(&read)?
        };
        drop(copy);
        let (bytes, sha256) = digest(&path)?;
        let manifest = BackupManifest {
            manifest_format: MANIFEST_FORMAT,
            store_format,
            tenax_version: env!("CARGO_PKG_VERSION").to_owned(),
            moment: BackupMoment {
                wal_lsn,
                taken_at_ms: now_ms,
                taken_at: rfc3339(now_ms),
            },
            file: FILE_NAME.to_owned(),
            bytes,
            sha256,
            rows,
        };
        let text = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| StoreError::storage("writing the backup's manifest", e))?;
        let manifest_path = into.join(MANIFEST_FILE);
        let written = (|| {
            let mut file = files::open_private(&manifest_path, "the backup's manifest")?;
            file.set_len(0)?;
            file.write_all(&text)?;
            file.sync_all()?;
            files::sync_parent(&manifest_path)
        })();
        written
            .map_err(|e| StoreError::storage(format!("writing {}", manifest_path.display()), e))?;
        tracing::info!(
            into = %into.display(),
            wal_lsn,
            bytes,
            jobs = manifest.rows.get("jobs").copied().unwrap_or(0),
            settle = ?settled,
            copy = ?copying.elapsed(),
            "wrote a backup of the store"
        );
        Ok(manifest)
    }

    /// Writes a backup into a new directory in the data directory (on the store's own file
    /// system), and answers where. `None` for a store on a simulated disk.
    pub(super) fn backup_in_place(
        &self,
        now_ms: UnixMs,
    ) -> Option<Result<(PathBuf, BackupManifest), StoreError>> {
        let dir = self.dir.as_ref()?;
        let into = dir.join(format!(
            "{IN_PROGRESS}{now_ms}-{:016x}",
            rand::random::<u64>()
        ));
        Some(match self.write_backup(&into, now_ms) {
            Ok(manifest) => Ok((into, manifest)),
            Err(error) => {
                let _ = std::fs::remove_dir_all(&into);
                Err(error)
            }
        })
    }

    /// How many rows each table holds, by table name (as a backup's manifest counts them).
    pub fn row_counts(&self) -> Result<std::collections::BTreeMap<String, u64>, StoreError> {
        copy::row_counts(&self.read_tx("counting the store's rows")?)
    }
}

/// Removes the backups a crash left in the data directory before they were sent.
pub(super) fn remove_unsent(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(IN_PROGRESS) {
            let path = entry.path();
            match std::fs::remove_dir_all(&path) {
                Ok(()) => tracing::info!(path = %path.display(), "removed an unsent backup"),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "cannot remove an unsent backup");
                }
            }
        }
    }
}

/// The size and SHA-256 (lowercase hex) of the file at `path`.
fn digest(path: &Path) -> Result<(u64, String), StoreError> {
    let failed = |e| StoreError::storage(format!("reading {}", path.display()), e);
    let mut file = std::fs::File::open(path).map_err(failed)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(failed)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    Ok((bytes, hex))
}

/// Reads the manifest of the backup in `from` and checks the backup against it: a format this
/// version reads, the file's size and SHA-256. Refusals are [`StoreError::Refused`], naming
/// what is wrong.
pub fn check(from: &Path) -> Result<BackupManifest, StoreError> {
    let manifest_path = from.join(MANIFEST_FILE);
    let text = std::fs::read(&manifest_path).map_err(|e| {
        StoreError::Refused(format!(
            "{} is not a Tenax backup: reading {}: {e}",
            from.display(),
            manifest_path.display()
        ))
    })?;
    let manifest: BackupManifest = serde_json::from_slice(&text).map_err(|e| {
        StoreError::Refused(format!(
            "{} is not a backup manifest this version reads: {e}",
            manifest_path.display()
        ))
    })?;
    if manifest.manifest_format > MANIFEST_FORMAT || manifest.store_format > FORMAT_VERSION {
        return Err(StoreError::Refused(format!(
            "the backup in {} was made by Tenax {} (store format {}, manifest format {}), newer \
             than this one (store format {FORMAT_VERSION}, manifest format {MANIFEST_FORMAT}): \
             restore it with that version or a later one",
            from.display(),
            manifest.tenax_version,
            manifest.store_format,
            manifest.manifest_format,
        )));
    }
    if manifest.file != FILE_NAME {
        return Err(StoreError::Refused(format!(
            "{} names the file {:?}; a backup's file is {FILE_NAME}",
            manifest_path.display(),
            manifest.file
        )));
    }
    let file = from.join(FILE_NAME);
    let (bytes, sha256) = digest(&file).map_err(|e| {
        StoreError::Refused(format!(
            "the backup in {} is incomplete: {e}",
            from.display()
        ))
    })?;
    if bytes != manifest.bytes || sha256 != manifest.sha256 {
        return Err(StoreError::Refused(format!(
            "{} is not the file the backup's manifest describes: it has {bytes} bytes and \
             SHA-256 {sha256}, the manifest says {} bytes and {} (damaged or changed since the \
             backup was made)",
            file.display(),
            manifest.bytes,
            manifest.sha256
        )));
    }
    Ok(manifest)
}

/// Whether `dir` may be restored into: it does not exist, or holds nothing but the secrets key.
pub fn is_free_for_restore(dir: &Path) -> Result<(), StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::storage(format!("reading {}", dir.display()), e)),
    };
    let others: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != SECRETS_KEY_FILE)
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    Err(StoreError::Refused(format!(
        "{} is not empty (it holds {}): restore into a new directory; a restore never writes \
         over a store",
        dir.display(),
        others.join(", ")
    )))
}

/// Restores the backup in `from` into the data directory `dir` (see [`is_free_for_restore`]):
/// checks it ([`check`]), copies its file in and makes the new, empty log the file names.
/// Answers the backup's manifest. Opening the store is the caller's: it needs the secrets key.
pub fn restore(from: &Path, dir: &Path) -> Result<BackupManifest, StoreError> {
    let manifest = check(from)?;
    is_free_for_restore(dir)?;
    files::private_dir(dir)
        .map_err(|e| StoreError::storage(format!("making {}", dir.display()), e))?;
    let path = dir.join(FILE_NAME);
    let partial = dir.join(".tenax.redb.restoring");
    let copied = (|| {
        let mut source = std::fs::File::open(from.join(FILE_NAME))?;
        let mut target = files::open_private(&partial, "the store's file")?;
        target.set_len(0)?;
        std::io::copy(&mut source, &mut target)?;
        target.sync_all()?;
        std::fs::rename(&partial, &path)?;
        files::sync_parent(&path)
    })();
    copied.map_err(|e| {
        StoreError::storage(format!("copying the backup into {}", path.display()), e)
    })?;
    let db = open_file(&path, &EmbeddedOptions::default())?;
    let (applied, _) = recover::log_position(&db)?;
    let log_path = dir.join("tenax.wal");
    let log = FileLog::open(&log_path)
        .map_err(|e| StoreError::storage(format!("opening {}", log_path.display()), e))?;
    let wal = Wal::make(Box::new(log), EmbeddedOptions::default().log_bytes, applied)
        .map_err(|e| StoreError::storage(format!("making {}", log_path.display()), e))?;
    recover::name_log(&db, wal.id())?;
    files::sync_parent(&log_path)
        .map_err(|e| StoreError::storage(format!("syncing {}", dir.display()), e))?;
    Ok(manifest)
}

/// Removes what [`restore`] wrote into `dir` (after the store it made did not open).
pub fn undo_restore(dir: &Path) {
    for name in [FILE_NAME, "tenax.wal", ".tenax.redb.restoring"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::put_bodies;

    #[test]
    fn a_backup_names_the_store_file_as_the_store_does() {
        assert_eq!(tenax_core::model::backup::STORE_FILE, FILE_NAME);
    }

    /// A backup holds every commit acknowledged before it, is refused once changed, and
    /// restores into a directory the store opens as it is, with the rows it counted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_backup_restores_into_a_store_that_opens_with_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live");
        let store = EmbeddedStore::open(&live, &EmbeddedOptions::default(), 100).expect("opens");
        put_bodies(&store, 1..501).await;
        // A batch: its table is copied and counted with the others.
        let batch = tenax_core::model::Batch::new(
            tenax_core::model::BatchId(1),
            tenax_core::model::NewBatch {
                description: None,
                on_complete: None,
                on_success: None,
                queues: Vec::new(),
            },
            100,
        );
        let receiver = store.writer.submit(vec![crate::ops::Op::PutBatch {
            id: batch.id,
            record: tenax_core::store::to_json_bytes(&batch),
        }]);
        crate::writer::wait(receiver).await.expect("written");
        let (into, manifest) = store
            .backup_in_place(200)
            .expect("a data directory")
            .unwrap();
        assert!(into.starts_with(&live));
        assert_eq!(manifest.rows["jobs"], 500);
        assert_eq!(manifest.rows["batches"], 1);
        assert_eq!(manifest.moment.taken_at_ms, 200);
        assert!(manifest.moment.wal_lsn > 0);
        // Later commits are the store's, not the backup's.
        put_bodies(&store, 501..601).await;
        assert_eq!(check(&into).unwrap(), manifest);

        let restored = dir.path().join("restored");
        std::fs::create_dir(&restored).unwrap();
        std::fs::copy(live.join(SECRETS_KEY_FILE), restored.join(SECRETS_KEY_FILE)).unwrap();
        assert_eq!(restore(&into, &restored).unwrap(), manifest);
        let opened =
            EmbeddedStore::open(&restored, &EmbeddedOptions::default(), 300).expect("opens");
        let rows = opened.row_counts().unwrap();
        assert_eq!(rows["jobs"], 500);
        for (table, n) in &manifest.rows {
            if table != "meta" {
                assert_eq!(rows[table], *n, "{table}");
            }
        }
        opened.writer.shutdown();
        assert!(
            is_free_for_restore(&restored).is_err(),
            "a restore never writes over a store"
        );

        // One byte changed: refused, naming the checksum.
        let file = into.join(FILE_NAME);
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[4096] ^= 1;
        std::fs::write(&file, bytes).unwrap();
        let refused = check(&into).unwrap_err().to_string();
        assert!(refused.contains("SHA-256"), "{refused}");

        // A crash that left a backup unsent: the next open removes it.
        store.writer.shutdown();
        drop(store);
        EmbeddedStore::open(&live, &EmbeddedOptions::default(), 400)
            .expect("opens")
            .writer
            .shutdown();
        assert!(!into.exists());
    }
}
