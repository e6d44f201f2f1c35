//! Schema migrations: versioned SQL embedded in the binary, applied in order under an advisory
//! lock, so that nodes starting together do not race. A database whose schema is newer than
//! this binary knows is refused, and left as it is.

use tenax_core::store::StoreError;
use tokio_postgres::Client;

use super::fault;
use super::statements::{batch, statements};

/// The migrations, in order: version `n` is `MIGRATIONS[n - 1]`. Never edit one that has
/// shipped; add the next.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_jobs.sql"),
    include_str!("migrations/0002_servers.sql"),
    include_str!("migrations/0003_facts.sql"),
    include_str!("migrations/0004_dead.sql"),
    include_str!("migrations/0005_triggers.sql"),
    include_str!("migrations/0006_limits_and_schedules.sql"),
    include_str!("migrations/0007_endpoints.sql"),
    include_str!("migrations/0008_secrets.sql"),
    include_str!("migrations/0009_cluster.sql"),
    include_str!("migrations/0010_encrypted_queues.sql"),
    include_str!("migrations/0011_results.sql"),
    include_str!("migrations/0014_batches.sql"),
];

/// The schema version this binary writes and reads.
pub const VERSION: u64 = MIGRATIONS.len() as u64;

/// The advisory lock held while migrating ("tenax-mg").
const MIGRATION_LOCK: i64 = 0x7465_6e61_782d_6d67;

/// Brings the schema up to [`VERSION`]; returns the version found before. Refuses a newer one.
pub async fn migrate(client: &mut Client) -> Result<u64, StoreError> {
    let what = "migrating the PostgreSQL schema";
    client
        .execute(ADVISORY_LOCK.text(), &[&MIGRATION_LOCK])
        .await
        .map_err(fault(what))?;
    let migrated = migrate_locked(client).await;
    // The lock goes with the session too, should this fail.
    let unlocked = client
        .execute(ADVISORY_UNLOCK.text(), &[&MIGRATION_LOCK])
        .await
        .map_err(fault(what));
    let found = migrated?;
    unlocked?;
    Ok(found)
}

async fn migrate_locked(client: &mut Client) -> Result<u64, StoreError> {
    let what = "migrating the PostgreSQL schema";
    client
        .batch_execute(&batch([CREATE_SCHEMA_TABLE.text(), START_AT_ZERO.text()]))
        .await
        .map_err(fault(what))?;
    let found = version(client).await?;
    if found > VERSION {
        return Err(StoreError::NewerFormat {
            found,
            supported: VERSION,
        });
    }
    for (at, sql) in (found..VERSION).zip(&MIGRATIONS[usize::try_from(found).unwrap_or(0)..]) {
        let tx = client.transaction().await.map_err(fault(what))?;
        tx.batch_execute(sql).await.map_err(fault(what))?;
        let to = i64::try_from(at + 1).unwrap_or(i64::MAX);
        tx.execute(WRITE_VERSION.text(), &[&to])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        tracing::info!(version = at + 1, "PostgreSQL schema migrated");
    }
    Ok(found)
}

/// The schema version of the database (0: none yet).
pub async fn version(client: &Client) -> Result<u64, StoreError> {
    let row = client
        .query_opt(READ_VERSION.text(), &[])
        .await
        .map_err(fault("reading the schema version"))?;
    let version: i64 = row.map_or(0, |r| r.get(0));
    Ok(u64::try_from(version).unwrap_or(0))
}

statements! {
    /// Held by the session that migrates (or seals): `$1` is the lock.
    pub(super) ADVISORY_LOCK = "SELECT pg_advisory_lock($1)";
    pub(super) ADVISORY_UNLOCK = "SELECT pg_advisory_unlock($1)";
    CREATE_SCHEMA_TABLE = "CREATE TABLE IF NOT EXISTS tenax_schema (version bigint NOT NULL)";
    START_AT_ZERO = "INSERT INTO tenax_schema (version)
                 SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM tenax_schema)";
    WRITE_VERSION = "UPDATE tenax_schema SET version = $1";
    READ_VERSION = "SELECT version FROM tenax_schema";
}
