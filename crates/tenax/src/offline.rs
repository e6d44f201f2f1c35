//! Work on the data of stopped servers, for the command line: repairing the embedded store's
//! log (`tenax repair`), migrating a PostgreSQL schema (`tenax migrate`), sealing every stored
//! secret with a new key (`tenax secrets rotate-key`), backing up a stopped embedded store and
//! restoring a backup (`tenax backup --data-dir`, `tenax restore`). No engine runs; these reach the stores'
//! own tools behind plain inputs and answers, so the command line names no store type.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
pub use copy::{Copied, Tally};
use tenax_core::model::JobId;
use tenax_core::model::StatusSlots;
use tenax_core::model::backup::BackupManifest;
use tenax_core::secrets::{Keyring, SECRETS_KEY_FILE};
use tenax_core::store::{
    JobReads as _, ScheduleStore as _, Store, StoreError, StoreLifecycle as _,
    SubscriptionStore as _, TokenStore as _,
};
use tenax_embedded::backup;
use tenax_embedded::repair::{self, Lost, Report};
use tenax_embedded::{EmbeddedOptions, EmbeddedStore};
use tenax_postgres::{Database, PostgresOptions, PostgresStore, schema, sealing};

mod copy;
pub mod pools;

/// Why offline work did not happen.
#[derive(Debug)]
pub enum OfflineError {
    /// What was given cannot be used as it is (data a server is using, a directory without a
    /// store); the message says why.
    Invalid(String),
    /// The work could not be done (I/O, the database).
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for OfflineError {
    fn from(error: anyhow::Error) -> Self {
        Self::Failed(error)
    }
}

/// The data of stopped servers: an embedded store's data directory, or a PostgreSQL database.
#[derive(Debug)]
pub struct Data(Place);

#[derive(Debug)]
enum Place {
    Embedded(PathBuf),
    Postgres(Database),
}

impl Data {
    /// The embedded store in `dir`.
    pub fn embedded(dir: &Path) -> Self {
        Self(Place::Embedded(dir.to_owned()))
    }

    /// The PostgreSQL database at `url` (a `postgres://` URL or a libpq connection string),
    /// whose TLS certificate `ca_file` signs if given; the rule it breaks if it cannot be used.
    pub fn database(url: &str, ca_file: Option<&Path>) -> Result<Self, String> {
        Ok(Self(Place::Postgres(Database::new(url, ca_file)?)))
    }

    /// Whether this is a database (which servers share) rather than a data directory.
    pub fn is_database(&self) -> bool {
        matches!(self.0, Place::Postgres(_))
    }

    /// Refuses data a server is using: nothing may be written under it.
    pub async fn ensure_unused(&self) -> Result<(), OfflineError> {
        match &self.0 {
            Place::Embedded(dir) => embedded_is_free(dir),
            Place::Postgres(database) => {
                let using = sealing::servers_using(database)
                    .await
                    .context("looking for servers using the database")?;
                if using > 0 {
                    return Err(OfflineError::Invalid(format!(
                        "{using} server(s) are using the database: stop them first, or rotate \
                         the key across the running cluster as docs/security.md says"
                    )));
                }
                Ok(())
            }
        }
    }

    /// Refuses data a server is using, as [`Data::ensure_unused`], but accepts a data
    /// directory that holds no store yet (a target, which opening makes).
    pub async fn ensure_unused_or_new(&self) -> Result<(), OfflineError> {
        if let Place::Embedded(dir) = &self.0 {
            if !dir.join("tenax.redb").exists() {
                return Ok(());
            }
        }
        self.ensure_unused().await
    }

    /// Opens the store for offline work, its secrets opened by `keys`: required for a
    /// database; a data directory without them uses its own `secrets.key` (made if new).
    async fn open(&self, keys: Option<Arc<Keyring>>) -> Result<Arc<dyn Store>, OfflineError> {
        let clock = tenax_core::clock::Clock::System;
        match &self.0 {
            Place::Embedded(dir) => {
                let store = open_embedded(dir, keys)
                    .await
                    .map_err(offline_error(format!(
                        "opening the store in {}",
                        dir.display()
                    )))?;
                Ok(Arc::new(store))
            }
            Place::Postgres(database) => {
                let keys = keys.ok_or_else(|| {
                    OfflineError::Invalid(format!(
                        "a secrets key file is required for the database {}: the one its \
                         servers use (--secrets-key-file)",
                        database.said()
                    ))
                })?;
                let options = PostgresOptions::new(database.clone(), keys);
                let store = PostgresStore::open(&options, &clock)
                    .await
                    .map_err(offline_error(format!(
                        "opening the database {}",
                        database.said()
                    )))?;
                Ok(Arc::new(store))
            }
        }
    }

    /// Seals every stored secret with the sealing key of `keys` (each subscription one
    /// commit). Answers how many subscriptions a data directory holds; a database's are not
    /// counted (`None`).
    pub async fn reseal(&self, keys: Arc<Keyring>) -> Result<Option<usize>, OfflineError> {
        match &self.0 {
            Place::Embedded(dir) => Ok(Some(reseal_embedded(dir, keys).await?)),
            Place::Postgres(database) => {
                sealing::reseal(database, &keys)
                    .await
                    .context("sealing the secrets with the new key")?;
                Ok(None)
            }
        }
    }
}

/// Copies every record of the stopped store `from` (its secrets opened by `from_keys`) into
/// `to` (sealed by `to_keys`), which must hold nothing unless `into_non_empty`, and counts both
/// sides (`copy`).
pub async fn copy_store(
    from: &Data,
    from_keys: Option<Arc<Keyring>>,
    to: &Data,
    to_keys: Option<Arc<Keyring>>,
    into_non_empty: bool,
) -> Result<Copied, OfflineError> {
    from.ensure_unused().await?;
    to.ensure_unused_or_new().await?;
    let source = from.open(from_keys).await?;
    let target = match to.open(to_keys).await {
        Ok(target) => target,
        Err(error) => {
            source.close().await;
            return Err(error);
        }
    };
    let copied = async {
        if !into_non_empty {
            copy::ensure_empty(&*target).await?;
        }
        copy::copy(&*source, &*target)
            .await
            .map_err(OfflineError::Failed)
    }
    .await;
    source.close().await;
    target.close().await;
    copied
}

/// Brings the schema of the PostgreSQL database at `url` (its TLS certificate signed by
/// `ca_file`, if given) up to this version of Tenax: the version it found, and this one.
pub async fn migrate(url: &str, ca_file: Option<&Path>) -> Result<Migrated, OfflineError> {
    let database = Database::new(url, ca_file).map_err(OfflineError::Invalid)?;
    let (mut client, connection) = database
        .connect()
        .await
        .with_context(|| format!("connecting to PostgreSQL {}", database.said()))?;
    let driver = tokio::spawn(connection);
    let found = schema::migrate(&mut client).await;
    drop(client);
    let _ = driver.await;
    Ok(Migrated {
        found: found.context("migrating the schema")?,
        current: schema::VERSION,
    })
}

/// What a schema migration found, and the version it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    pub found: u64,
    pub current: u64,
}

/// A store error of offline work: a refusal whose message says what to do is
/// [`OfflineError::Invalid`], anything else a failure of `what`.
fn offline_error(what: String) -> impl FnOnce(StoreError) -> OfflineError {
    move |error| match error {
        StoreError::Refused(message) | StoreError::Secrets(message) => {
            OfflineError::Invalid(message)
        }
        error @ StoreError::NewerFormat { .. } => OfflineError::Invalid(error.to_string()),
        error => OfflineError::Failed(anyhow::Error::new(error).context(what)),
    }
}

/// Opens the embedded store in `dir` with `keys` (`None`: the directory's `secrets.key`).
async fn open_embedded(
    dir: &Path,
    keys: Option<Arc<Keyring>>,
) -> Result<EmbeddedStore, StoreError> {
    let options = EmbeddedOptions {
        secrets: keys,
        ..EmbeddedOptions::default()
    };
    let now_ms = tenax_core::clock::Clock::System.now_ms();
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || EmbeddedStore::open(&dir, &options, now_ms))
        .await
        .map_err(|e| StoreError::storage("opening the store", e))?
}

/// Writes a backup of the stopped embedded store in `dir` into `to` (which must not hold
/// anything), opening it with `keys` (`None`: its `secrets.key`).
pub async fn backup_stopped(
    dir: &Path,
    to: &Path,
    keys: Option<Arc<Keyring>>,
) -> Result<BackupManifest, OfflineError> {
    embedded_is_free(dir)?;
    backup::is_free_for_restore(to)
        .and_then(|()| refuse_key_file(to))
        .map_err(offline_error(format!("checking {}", to.display())))?;
    let store = open_embedded(dir, keys)
        .await
        .map_err(offline_error(format!(
            "opening the store in {}",
            dir.display()
        )))?;
    let now_ms = tenax_core::clock::Clock::System.now_ms();
    let written = store.write_backup(to, now_ms);
    store.close().await;
    written.map_err(offline_error(format!(
        "writing a backup into {}",
        to.display()
    )))
}

/// A backup directory never takes a secrets key: it is kept apart.
fn refuse_key_file(to: &Path) -> Result<(), StoreError> {
    if to.join(SECRETS_KEY_FILE).exists() {
        return Err(StoreError::Refused(format!(
            "{} holds a secrets key: a backup is written into an empty directory, and the key \
             is kept apart from it (docs/security.md)",
            to.display()
        )));
    }
    Ok(())
}

/// Checks the backup in `dir` against its manifest (its file's size and SHA-256, formats this
/// version reads), and answers the manifest.
pub fn check_backup(dir: &Path) -> Result<BackupManifest, OfflineError> {
    backup::check(dir).map_err(offline_error(format!(
        "checking the backup in {}",
        dir.display()
    )))
}

/// Whether `dir` may receive a backup or a restore: absent, or holding nothing but a secrets
/// key (restore) or nothing at all (backup).
pub fn ensure_empty(dir: &Path, key_allowed: bool) -> Result<(), OfflineError> {
    backup::is_free_for_restore(dir)
        .and_then(|()| {
            if key_allowed {
                Ok(())
            } else {
                refuse_key_file(dir)
            }
        })
        .map_err(offline_error(format!("checking {}", dir.display())))
}

/// What a restore restored.
#[derive(Debug)]
pub struct Restored {
    pub manifest: BackupManifest,
    /// The key file that opened the backup's sealed values.
    pub key_file: PathBuf,
    /// Jobs by status: scheduled, ready, in flight, completed, dead.
    pub jobs: StatusSlots,
    pub subscriptions: usize,
    pub tokens: usize,
    pub schedules: usize,
}

/// Restores the backup in `from` into the new data directory `to`: checks it, copies it in
/// with a new log, opens it with the secrets key (`key_file`, or `to`'s `secrets.key`), and
/// compares its rows with the manifest's. A store that does not open is removed again, and
/// `to` left as it was found.
pub async fn restore(
    from: &Path,
    to: &Path,
    key_file: Option<&Path>,
) -> Result<Restored, OfflineError> {
    let default_key = to.join(SECRETS_KEY_FILE);
    let key_path = key_file.unwrap_or(&default_key).to_owned();
    check_backup(from)?;
    ensure_empty(to, true)?;
    if !key_path.is_file() {
        return Err(OfflineError::Invalid(format!(
            "the secrets key file {} does not exist: a backup holds no secrets key (it is kept \
             apart, docs/security.md). Copy the key file the backed-up server used (secrets.key \
             in its data directory, or its --secrets-key-file) to {}, or name it with \
             --secrets-key-file",
            key_path.display(),
            default_key.display()
        )));
    }
    let keys = match key_file {
        Some(path) => {
            Some(Arc::new(Keyring::read_file(path).map_err(|e| {
                OfflineError::Invalid(format!("--secrets-key-file: {e}"))
            })?))
        }
        None => None,
    };
    let manifest = backup::restore(from, to)
        .map_err(offline_error(format!("restoring into {}", to.display())))?;
    let opened = open_and_count(to, keys, &manifest).await;
    if opened.is_err() {
        backup::undo_restore(to);
    }
    let (jobs, subscriptions, tokens, schedules) = opened.map_err(|error| match error {
        OfflineError::Invalid(message) => OfflineError::Invalid(format!(
            "the restored store does not open with the secrets key file {}: {message}",
            key_path.display()
        )),
        other => other,
    })?;
    Ok(Restored {
        manifest,
        key_file: key_path,
        jobs,
        subscriptions,
        tokens,
        schedules,
    })
}

type Counted = (StatusSlots, usize, usize, usize);

/// Opens the restored store, compares its rows with the manifest's, and counts what it holds.
async fn open_and_count(
    dir: &Path,
    keys: Option<Arc<Keyring>>,
    manifest: &BackupManifest,
) -> Result<Counted, OfflineError> {
    let store = open_embedded(dir, keys)
        .await
        .map_err(offline_error(format!(
            "opening the restored store in {}",
            dir.display()
        )))?;
    let counted = async {
        let rows = store.row_counts()?;
        // `meta` is the store's own bookkeeping, which opening changes (the new log's name).
        let differ: Vec<String> = manifest
            .rows
            .iter()
            .filter(|(table, _)| table.as_str() != "meta")
            .filter(|(table, want)| rows.get(*table).copied().unwrap_or(0) != **want)
            .map(|(table, want)| {
                format!(
                    "{table}: {} rows, the manifest says {want}",
                    rows.get(table).copied().unwrap_or(0)
                )
            })
            .collect();
        if !differ.is_empty() {
            return Err(StoreError::Corrupt(format!(
                "the restored store differs from the backup's manifest ({})",
                differ.join("; ")
            )));
        }
        let mut jobs = StatusSlots::default();
        for queue in store.counts().await? {
            for (slot, n) in jobs.iter_mut().zip(queue.slots()) {
                *slot += n;
            }
        }
        Ok((
            jobs,
            store.subscriptions(None).await?.len(),
            store.tokens().await?.len(),
            store.schedules().await?.len(),
        ))
    }
    .await;
    store.close().await;
    counted.map_err(offline_error(format!(
        "checking the restored store in {}",
        dir.display()
    )))
}

/// Refuses a data directory without a store, or whose store a server has open.
fn embedded_is_free(dir: &Path) -> Result<(), OfflineError> {
    use tenax_embedded::vacancy::{Occupied, check_free};
    check_free(dir).map_err(|occupied| match occupied {
        Occupied::NoStore(_) => {
            OfflineError::Invalid(format!("{occupied}: give --data-dir, or --database-url"))
        }
        Occupied::InUse(_) => OfflineError::Invalid(format!("{occupied}: stop it first")),
        Occupied::Unreadable { .. } => OfflineError::Failed(anyhow::Error::new(occupied)),
    })
}

/// Opens the embedded store with `keys`, which seals everything with the sealing key, and
/// closes it. Returns how many subscriptions it holds.
async fn reseal_embedded(dir: &Path, keys: Arc<Keyring>) -> anyhow::Result<usize> {
    let store = open_embedded(dir, Some(keys))
        .await
        .with_context(|| format!("opening the store in {}", dir.display()))?;
    let count = store.subscriptions(None).await.map(|all| all.len());
    store.close().await;
    count.context("counting the subscriptions")
}

/// Repairs the embedded store's log in `dir` (`tenax_embedded::repair`): keeps a copy
/// of the damaged log, applies every record it can, makes a new log. Answers what it did, in
/// words.
pub fn repair_log(dir: &Path) -> anyhow::Result<String> {
    let report =
        repair::repair(dir).with_context(|| format!("repairing the store in {}", dir.display()))?;
    Ok(render(&report))
}

/// A repair's report, in words: what was wrong, where the copy is, what was applied, what is lost.
fn render(report: &Report) -> String {
    let mut out = String::new();
    let log = report.log.display();
    let Some(damage) = &report.damage else {
        let _ = writeln!(
            out,
            "{log} is intact: nothing to repair (tenax serve opens the store as it is)."
        );
        return out;
    };
    let _ = writeln!(out, "{log} is damaged: {damage}.");
    match &report.copy {
        Some(copy) => {
            let _ = writeln!(out, "The damaged log is kept as {}.", copy.display());
        }
        None => {
            let _ = writeln!(out, "There was no log file to keep a copy of.");
        }
    }
    match report.applied {
        Some((first, last)) => {
            let _ = writeln!(
                out,
                "Applied {}, which the store file had not checkpointed.",
                records(first, last)
            );
        }
        None => {
            let _ = writeln!(
                out,
                "No record past the store file's last checkpoint could be applied."
            );
        }
    }
    lost(&mut out, &report.lost);
    let _ = writeln!(out, "The store has a new, empty log; tenax serve opens it.");
    out
}

fn lost(out: &mut String, lost: &Lost) {
    let shown = (lost.through + 1).saturating_sub(lost.from);
    match (lost.unsure, shown) {
        (None, 0) => {
            let _ = writeln!(out, "Lost: nothing.");
            return;
        }
        (None, _) => {
            let _ = writeln!(out, "Lost: {}.", records(lost.from, lost.through));
        }
        (Some(why), 0) => {
            let _ = writeln!(
                out,
                "Lost: every record logged after record {}; how many cannot be known: {why}.",
                lost.from.saturating_sub(1)
            );
            return;
        }
        (Some(why), _) => {
            let _ = writeln!(
                out,
                "Lost: {}, and maybe more: {why}.",
                records(lost.from, lost.through)
            );
        }
    }
    if lost.unsynced {
        let _ = writeln!(
            out,
            "  A crash cut {} before it was synced: never acknowledged in sync durability.",
            if shown == 1 { "it" } else { "them" }
        );
    }
    let unreadable = lost.unreadable();
    if !unreadable.is_empty() {
        let _ = writeln!(
            out,
            "  Cannot be read: {} ({}).",
            ranges(&unreadable),
            plural(unreadable.len(), "record")
        );
    }
    if let (Some(first), Some(last)) = (lost.readable.first(), lost.readable.last()) {
        let numbers: Vec<u64> = lost.readable.iter().map(|r| r.lsn).collect();
        let _ = writeln!(
            out,
            "  Can be read, from byte {} to byte {} of the copy, but not applied: they follow a \
             lost record: {} ({}).",
            first.offset,
            last.end,
            ranges(&numbers),
            plural(numbers.len(), "record")
        );
        let ops = &lost.ops;
        let ids = |set: &std::collections::BTreeSet<JobId>| {
            let ids: Vec<u64> = set.iter().map(|id| id.0).collect();
            if ids.is_empty() {
                String::new()
            } else {
                format!(" (ids {})", ranges(&ids))
            }
        };
        let _ = writeln!(
            out,
            "  What those did: {} enqueued, which the store does not have{}; {} completed, \
             which will run again{}; {} otherwise changed{}; {} to queues, subscriptions, \
             tokens, schedules, endpoints or rate limits.",
            plural(ops.enqueued.len(), "job"),
            ids(&ops.enqueued),
            plural(ops.completed.len(), "job"),
            ids(&ops.completed),
            plural(ops.changed.len(), "job"),
            ids(&ops.changed),
            plural(ops.other, "change"),
        );
    }
}

fn records(first: u64, last: u64) -> String {
    if first == last {
        format!("record {first}")
    } else {
        format!("records {first} to {last} ({})", last - first + 1)
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Sorted numbers as ranges, the first few: "3, 5 to 9, 12".
fn ranges(numbers: &[u64]) -> String {
    const SHOWN: usize = 8;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == n => *last = n,
            _ => runs.push((n, n)),
        }
    }
    let mut text: Vec<String> = runs
        .iter()
        .take(SHOWN)
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a} to {b}")
            }
        })
        .collect();
    if runs.len() > SHOWN {
        text.push("…".to_owned());
    }
    text.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_ranges() {
        assert_eq!(ranges(&[3, 5, 6, 7, 9]), "3, 5 to 7, 9");
        assert_eq!(ranges(&[]), "");
        let many: Vec<u64> = (0..40).map(|n| n * 2).collect();
        assert!(ranges(&many).ends_with(", …"));
    }
}
