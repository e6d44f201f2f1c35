//! The embedded store's side of secrets at rest (`tenax_core::store::sealed`): which keys open it,
//! sealing at open what is not sealed with the sealing key, and scrubbing the files of what an
//! earlier release wrote in clear.
//!
//! Invariants, once [`EmbeddedStore::open`](super::EmbeddedStore::open) returns:
//! - every subscription in `tenax.redb` is sealed with the key ring's sealing key, and `meta`'s
//!   `secrets_key` is that key's id; a store whose recorded key the key ring lacks is refused
//!   (a wrong key file), as is a subscription sealed with a key it lacks, before anything is
//!   sent or signed;
//! - without a key ring from the operator, the key is the data directory's `secrets.key`, made
//!   (mode 0600, synced) before the first value is sealed with it; a store that records a key
//!   but has lost that file is refused, never given a new key;
//! - after an open that sealed subscriptions an earlier release kept in clear, neither file
//!   holds them in clear any more: the log starts empty and `tenax.redb` is written anew,
//!   which leaves behind the free pages that held them (`scrub_pending` in `meta` says a
//!   scrub is owed until the new file is in place, so a crash midway scrubs at the next open).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase};
use tenax_core::model::SubscriptionId;
use tenax_core::secrets::{KeyId, Keyring, PayloadKey, files};
use tenax_core::store::StoreError;
use tenax_core::store::sealed::{payload_key_from_stored, payload_key_to_stored, to_stored};

use super::disk::{FileLog, LogFile};
use super::tables::{
    META, PAYLOAD_KEY, PAYLOAD_KEY_ROW, SCRUB_PENDING, SECRETS_KEY, SUBSCRIPTIONS,
};
use super::wal::Wal;
use super::{EmbeddedOptions, Inner, fault};

/// Where the keys come from.
#[derive(Debug)]
pub(super) enum KeySource {
    /// The operator's (`--secrets-key-file`), or a test's.
    Given(Arc<Keyring>),
    /// The key file in the data directory, made at the first open.
    File(PathBuf),
    /// The key file of a simulated disk, made at the first open.
    Simulated(Box<dyn LogFile>),
}

/// The key recorded as the store's, if any.
fn recorded_key(db: &Database) -> Result<Option<KeyId>, StoreError> {
    let what = "reading the store's secrets key";
    let tx = db.begin_read().map_err(fault(what))?;
    let meta = tx.open_table(META).map_err(fault(what))?;
    Ok(meta
        .get(SECRETS_KEY)
        .map_err(fault(what))?
        .map(|v| KeyId(v.value())))
}

/// The keys that open the store: the source's, which must hold the key the store records.
pub(super) fn keys(db: &Database, source: KeySource) -> Result<Arc<Keyring>, StoreError> {
    let recorded = recorded_key(db)?;
    let keys = match source {
        KeySource::Given(keys) => keys,
        KeySource::File(path) => Arc::new(key_file(&path, recorded)?),
        KeySource::Simulated(file) => Arc::new(simulated_key_file(&*file, recorded)?),
    };
    if let Some(recorded) = recorded.filter(|r| !keys.holds(*r)) {
        return Err(StoreError::Secrets(format!(
            "the store's webhook secrets are sealed with key {recorded}, which the secrets key \
             file {} does not hold (it holds {}): start with the key file the store was sealed \
             with (--secrets-key-file, or secrets.key in the data directory)",
            keys.source(),
            keys.ids()
        )));
    }
    Ok(keys)
}

/// The data directory's key file: read, or made if the store has never sealed anything.
fn key_file(path: &Path, recorded: Option<KeyId>) -> Result<Keyring, StoreError> {
    if path.exists() {
        files::warn_if_loose(path, "the secrets key file");
        return Keyring::read_file(path).map_err(StoreError::Secrets);
    }
    if let Some(recorded) = recorded {
        return Err(missing(&path.display().to_string(), recorded));
    }
    let keys = Keyring::generate(path.display().to_string())
        .map_err(|e| StoreError::storage("making a secrets key", e))?;
    keys.write_file(path)
        .map_err(|e| StoreError::storage(format!("writing {}", path.display()), e))?;
    tracing::info!(
        path = %path.display(),
        key = %keys.current().id(),
        "made the secrets key that seals webhook secrets and header values in the store \
         (mode 0600): back it up apart from the data (docs/operations.md#backups)"
    );
    Ok(keys)
}

/// A simulated disk's key file, as [`key_file`] does a real one.
fn simulated_key_file(file: &dyn LogFile, recorded: Option<KeyId>) -> Result<Keyring, StoreError> {
    let io = |e| StoreError::storage("the simulated secrets key file", e);
    let size = usize::try_from(file.size().map_err(io)?).unwrap_or(usize::MAX);
    if size > 0 {
        let mut text = vec![0u8; size];
        file.read_at(0, &mut text).map_err(io)?;
        return Keyring::parse(&String::from_utf8_lossy(&text), "secrets.key")
            .map_err(StoreError::Secrets);
    }
    if let Some(recorded) = recorded {
        return Err(missing("secrets.key", recorded));
    }
    let keys = Keyring::generate("secrets.key")
        .map_err(|e| StoreError::storage("making a secrets key", e))?;
    file.write_at(0, keys.to_text().as_bytes()).map_err(io)?;
    file.sync().map_err(io)?;
    Ok(keys)
}

fn missing(path: &str, recorded: KeyId) -> StoreError {
    StoreError::Secrets(format!(
        "the store's webhook secrets are sealed with key {recorded}, but its key file {path} is \
         missing: restore it from its backup (docs/operations.md#backups), or give the key file \
         with --secrets-key-file"
    ))
}

/// Seals with the sealing key every subscription of `stale` (kept in clear, or sealed with
/// another key), and records the sealing key as the store's, in one durable commit. When any
/// was in clear and `scrub` says the files can be written anew, marks a scrub as owed.
/// Returns how many were in clear.
pub(super) fn seal_at_rest(
    db: &Database,
    inner: &Inner,
    stale: &[(SubscriptionId, Option<KeyId>)],
    keys: &Keyring,
    scrub: bool,
) -> Result<usize, StoreError> {
    let current = keys.current().id();
    if recorded_key(db)? == Some(current) && stale.is_empty() {
        return Ok(0);
    }
    let what = "sealing the subscriptions' secrets";
    let tx = db.begin_write().map_err(fault(what))?;
    let mut clear = 0;
    {
        let mut table = tx.open_table(SUBSCRIPTIONS).map_err(fault(what))?;
        for (id, sealed_with) in stale {
            let Some(subscription) = inner.subscriptions.get(id) else {
                continue;
            };
            clear += usize::from(sealed_with.is_none());
            table
                .insert(id.0, to_stored(subscription, keys)?.as_slice())
                .map_err(fault(what))?;
        }
        let mut meta = tx.open_table(META).map_err(fault(what))?;
        meta.insert(SECRETS_KEY, current.0).map_err(fault(what))?;
        if clear > 0 && scrub {
            meta.insert(SCRUB_PENDING, 1).map_err(fault(what))?;
        }
    }
    tx.commit().map_err(fault(what))?;
    if !stale.is_empty() {
        tracing::info!(
            subscriptions = stale.len(),
            in_clear = clear,
            key = %current,
            "sealed the subscriptions' secrets with the secrets key"
        );
    }
    Ok(clear)
}

/// The store's payload data key: made (and kept sealed by the sealing key) at the first open,
/// and sealed again with the sealing key when the key ring's sealing key changed (a rotation
/// re-seals the data key, never the payloads). One process opens the store, so no other can
/// make a second key meanwhile.
pub(super) fn payload_key(db: &Database, keys: &Keyring) -> Result<PayloadKey, StoreError> {
    let what = "reading the payload data key";
    let stored = {
        let tx = db.begin_read().map_err(fault(what))?;
        match tx.open_table(PAYLOAD_KEY) {
            Ok(table) => table
                .get(PAYLOAD_KEY_ROW)
                .map_err(fault(what))?
                .map(|v| v.value().to_vec()),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(fault(what)(e)),
        }
    };
    let key = match stored {
        Some(bytes) => {
            let (key, sealed_with) = payload_key_from_stored(&bytes, keys)?;
            if sealed_with == keys.current().id() {
                return Ok(key);
            }
            key
        }
        None => PayloadKey::generate()
            .map_err(|e| StoreError::storage("making the payload data key", e))?,
    };
    let what = "storing the payload data key";
    let tx = db.begin_write().map_err(fault(what))?;
    tx.open_table(PAYLOAD_KEY)
        .map_err(fault(what))?
        .insert(
            PAYLOAD_KEY_ROW,
            payload_key_to_stored(&key, keys)?.as_slice(),
        )
        .map_err(fault(what))?;
    tx.commit().map_err(fault(what))?;
    Ok(key)
}

/// Whether a scrub is owed (see the module's invariants).
pub(super) fn scrub_pending(db: &Database) -> Result<bool, StoreError> {
    let what = "reading the store's meta table";
    let tx = db.begin_read().map_err(fault(what))?;
    let meta = tx.open_table(META).map_err(fault(what))?;
    Ok(meta.get(SCRUB_PENDING).map_err(fault(what))?.is_some())
}

/// Writes the store in `dir` anew, without what its free pages and its log's old records
/// hold. First the log is made again in place (`Wal::make` writes every page over, zeros and
/// empty page headers) and the old file names it; then every table is copied into a new file,
/// which replaces `tenax.redb`. Every commit is in `db` already (the log's records are applied
/// at open), so the log has nothing to lose. A crash at any point leaves a store that opens:
/// before the log is named, the old one is still named (its records all applied); after, the
/// old file still owes the scrub, and does it again at the next open. The new file is made
/// 0600. Returns the store and its log, reopened.
pub(super) fn scrub(
    db: Database,
    wal: Wal,
    dir: &Path,
    options: &EmbeddedOptions,
) -> Result<(Database, Wal), StoreError> {
    let what = "writing the store anew without what was kept in clear";
    let path = dir.join(crate::FILE_NAME);
    let log_path = dir.join("tenax.wal");
    drop(wal);
    let (applied, _) = super::recover::log_position(&db)?;
    let log = FileLog::open(&log_path)
        .map_err(|e| StoreError::storage(format!("opening {}", log_path.display()), e))?;
    let wal = Wal::make(Box::new(log), options.log_bytes, applied)
        .map_err(|e| StoreError::storage(format!("making {} again", log_path.display()), e))?;
    super::recover::name_log(&db, wal.id())?;

    let partial = dir.join(".tenax.redb.partial");
    match std::fs::remove_file(&partial) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(StoreError::storage(what, error));
        }
        _ => {}
    }
    let fresh = super::open_file(&partial, options)?;
    super::copy::copy_tables(
        &db.begin_read().map_err(fault(what))?,
        &fresh,
        "copying the store into its new file",
    )?;
    drop(fresh);
    drop(db);
    std::fs::rename(&partial, &path).map_err(|e| StoreError::storage(what, e))?;
    files::sync_parent(&path).map_err(|e| StoreError::storage(what, e))?;
    let db = super::open_file(&path, options)?;
    tracing::info!(
        path = %path.display(),
        "wrote the store anew: no copy of the secrets an earlier release kept in clear is left \
         in tenax.redb or tenax.wal"
    );
    Ok((db, wal))
}
