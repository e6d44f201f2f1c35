//! Schema migrations: numbered SQL embedded in the binary, applied in order under an advisory
//! lock, so that nodes starting together do not race. A database whose schema is newer than
//! this binary knows is refused, and left as it is.
//!
//! A number may be left free for a change made at the same time elsewhere (12, while 13 is
//! written). A database migrated past a free number records it in `tenax_schema_skipped`, and
//! the first binary that has that migration applies it then, after the later ones: two changes
//! numbered so must not depend on each other's order (each adds its own columns and tables,
//! and makes the `SELECT *` view again). A database that holds a migration this binary does not
//! know, below its newest, is refused as newer.

use tenax_core::store::StoreError;
use tokio_postgres::Client;

use super::fault;
use super::statements::{batch, statements};

/// The migrations, by increasing number (the file's); a number may be free (the module's
/// doc). Never edit one that has shipped; add the next.
const MIGRATIONS: &[(u64, &str)] = &[
    (1, include_str!("migrations/0001_jobs.sql")),
    (2, include_str!("migrations/0002_servers.sql")),
    (3, include_str!("migrations/0003_facts.sql")),
    (4, include_str!("migrations/0004_dead.sql")),
    (5, include_str!("migrations/0005_triggers.sql")),
    (6, include_str!("migrations/0006_limits_and_schedules.sql")),
    (7, include_str!("migrations/0007_endpoints.sql")),
    (8, include_str!("migrations/0008_secrets.sql")),
    (9, include_str!("migrations/0009_cluster.sql")),
    (10, include_str!("migrations/0010_encrypted_queues.sql")),
    (11, include_str!("migrations/0011_results.sql")),
    (12, include_str!("migrations/0012_cancellation.sql")),
    (13, include_str!("migrations/0013_dependencies.sql")),
    (14, include_str!("migrations/0014_batches.sql")),
    (15, include_str!("migrations/0015_take_cost.sql")),
    (16, include_str!("migrations/0016_pools.sql")),
    (17, include_str!("migrations/0017_live_pools.sql")),
    (18, include_str!("migrations/0018_moves.sql")),
];

/// The schema version this binary writes and reads: its newest migration's number.
pub const VERSION: u64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// The migrations of `known` (this binary's numbers, increasing) to apply, in order, to a
/// database at version `found` that passed over the numbers `skipped`: the later ones, and the
/// ones passed over. Refuses a database newer than `known`, or one that holds a migration
/// `known` lacks.
fn plan(known: &[u64], found: u64, skipped: &[u64]) -> Result<Vec<u64>, StoreError> {
    let newest = known.last().copied().unwrap_or(0);
    if found > newest {
        return Err(StoreError::NewerFormat {
            found,
            supported: newest,
        });
    }
    if let Some(unknown) = (1..=found).find(|n| !known.contains(n) && !skipped.contains(n)) {
        return Err(StoreError::Refused(format!(
            "the PostgreSQL schema holds migration {unknown}, which this version of Tenax does \
             not have (it has up to {newest} without it): run the version that made it"
        )));
    }
    Ok(known
        .iter()
        .copied()
        .filter(|n| *n > found || skipped.contains(n))
        .collect())
}

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
        .batch_execute(&batch([
            CREATE_SCHEMA_TABLE.text(),
            START_AT_ZERO.text(),
            CREATE_SKIPPED_TABLE.text(),
        ]))
        .await
        .map_err(fault(what))?;
    let found = version(client).await?;
    let skipped: Vec<u64> = client
        .query(READ_SKIPPED.text(), &[])
        .await
        .map_err(fault(what))?
        .iter()
        .map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0))
        .collect();
    let known: Vec<u64> = MIGRATIONS.iter().map(|(n, _)| *n).collect();
    let due = plan(&known, found, &skipped)?;
    let mut at = found;
    for (n, sql) in MIGRATIONS.iter().filter(|(n, _)| due.contains(n)) {
        let tx = client.transaction().await.map_err(fault(what))?;
        tx.batch_execute(sql).await.map_err(fault(what))?;
        let number = i64::try_from(*n).unwrap_or(i64::MAX);
        if skipped.contains(n) {
            tx.execute(UNSKIP.text(), &[&number])
                .await
                .map_err(fault(what))?;
        }
        if *n > at + 1 {
            // The free numbers passed over, for the binary that has them.
            let from = i64::try_from(at + 1).unwrap_or(i64::MAX);
            tx.execute(SKIP.text(), &[&from, &number])
                .await
                .map_err(fault(what))?;
        }
        if *n > at {
            tx.execute(WRITE_VERSION.text(), &[&number])
                .await
                .map_err(fault(what))?;
            at = *n;
        }
        tx.commit().await.map_err(fault(what))?;
        tracing::info!(version = n, "PostgreSQL schema migrated");
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
    /// Numbers below the version whose migration was not applied (the module's doc).
    CREATE_SKIPPED_TABLE = "CREATE TABLE IF NOT EXISTS tenax_schema_skipped (
        version bigint PRIMARY KEY)";
    READ_SKIPPED = "SELECT version FROM tenax_schema_skipped";
    /// Records the numbers from `$1` to before `$2` as not applied.
    SKIP = "INSERT INTO tenax_schema_skipped (version)
        SELECT generate_series($1::bigint, $2::bigint - 1) ON CONFLICT DO NOTHING";
    UNSKIP = "DELETE FROM tenax_schema_skipped WHERE version = $1";
    READ_VERSION = "SELECT version FROM tenax_schema";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_number_is_applied_later_by_the_binary_that_has_it() {
        let without = [1, 2, 3, 5];
        let with = [1, 2, 3, 4, 5];
        // Fresh, or from before the free number: everything this binary has, in order.
        assert_eq!(plan(&without, 0, &[]), Ok(vec![1, 2, 3, 5]));
        assert_eq!(plan(&without, 3, &[]), Ok(vec![5]));
        // Migrated past 4 (which is recorded as skipped): the binary that has 4 applies it.
        assert_eq!(plan(&with, 5, &[4]), Ok(vec![4]));
        assert_eq!(plan(&without, 5, &[4]), Ok(vec![]));
        // A database that holds 4 is refused by a binary without it; a newer one by both.
        assert!(matches!(
            plan(&without, 4, &[]),
            Err(StoreError::Refused(_))
        ));
        assert_eq!(
            plan(&with, 6, &[]),
            Err(StoreError::NewerFormat {
                found: 6,
                supported: 5
            })
        );
        // The shipped list is increasing.
        assert!(MIGRATIONS.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
