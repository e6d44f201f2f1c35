//! Registering and forgetting pools: the rules, shared by the CLI (`tenax pools`) and any API
//! that manages pools. Servers read the pools when they start.

use tenax_core::clock::Clock;
use tenax_core::store::{StoreError, StoreLifecycle};
use tenax_postgres::catalogue::{PoolRecord, STRIPES, Stripes};
use tenax_postgres::{Database, PostgresOptions, PostgresStore};

/// A pool to register (or to change: its number stays).
#[derive(Debug, Clone)]
pub struct NewPool {
    pub name: String,
    pub uri: String,
    pub weight: u32,
    pub flavor: Option<String>,
    /// A JSON object.
    pub options: String,
}

/// A pool as listed: its record, and how many queues it holds.
#[derive(Debug, Clone)]
pub struct ListedPool {
    pub pool: PoolRecord,
    pub queues: usize,
}

/// Checks a pool's name: 1 to 64 letters, digits, `_` or `-` (as Zaqar's).
pub fn check_name(name: &str) -> Result<(), StoreError> {
    let fits = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if fits {
        Ok(())
    } else {
        Err(StoreError::Refused(format!(
            "name: {name:?} is not a pool name (1 to 64 letters, digits, '_' or '-')"
        )))
    }
}

/// Registers `new` in the catalogue `catalogue` (opened with `options`): its database is
/// reached and its schema made or migrated, it gets the lowest free number (or keeps its own),
/// and the ids of it and of the catalogue are striped by pool from then on.
pub async fn register(
    catalogue: &PostgresStore,
    options: &PostgresOptions,
    new: NewPool,
    clock: &Clock,
) -> Result<PoolRecord, StoreError> {
    check_name(&new.name)?;
    if let Some(flavor) = &new.flavor {
        check_name(flavor).map_err(|_| {
            StoreError::Refused(format!(
                "flavor: {flavor:?} is not a flavor name (1 to 64 letters, digits, '_' or '-')"
            ))
        })?;
    }
    if !is_json_object(&new.options) {
        return Err(StoreError::Refused(
            "options: must be a JSON object".to_owned(),
        ));
    }
    let database = Database::new(&new.uri, options.ca_file.as_deref())
        .map_err(|e| StoreError::Refused(e.replace("--database-url", "uri")))?;
    let pools = catalogue.pools().await?;
    if pools.iter().any(|p| p.uri == new.uri && p.name != new.name) {
        return Err(StoreError::Refused(
            "uri: another pool has this database already".to_owned(),
        ));
    }
    let existing = pools.iter().find(|p| p.name == new.name);
    let number = match existing {
        Some(existing) => existing.number,
        None => (1..u8::try_from(STRIPES).unwrap_or(64))
            .find(|n| pools.iter().all(|p| p.number != *n))
            .ok_or_else(|| {
                StoreError::Refused(format!(
                    "name: a catalogue holds at most {} pools",
                    STRIPES - 1
                ))
            })?,
    };
    // Reached, its schema made, its ids striped, before any server can place a queue there.
    let pool_options = PostgresOptions {
        database,
        pool_size: 2,
        signals: None,
        ..options.clone()
    };
    let store = PostgresStore::open(&pool_options, clock).await?;
    let ready = async {
        if existing.is_none() {
            starts_empty(&store).await?;
        }
        // The catalogue's ids from before stay its own; the pool's begin past them.
        let since = catalogue.stripe_ids(0, &Stripes::default()).await?;
        store.stripe_ids(number, &since).await
    }
    .await;
    store.close().await;
    ready?;
    let record = PoolRecord {
        name: new.name,
        number,
        uri: new.uri,
        weight: new.weight,
        flavor: new.flavor,
        options: new.options,
    };
    catalogue.put_pool(&record).await?;
    Ok(record)
}

/// Forgets pool `name`; refused while a queue is placed on it. False if there was none.
pub async fn remove(catalogue: &PostgresStore, name: &str) -> Result<bool, StoreError> {
    let Some(pool) = catalogue
        .pools()
        .await?
        .into_iter()
        .find(|p| p.name == name)
    else {
        return Ok(false);
    };
    let held = catalogue
        .placements()
        .await?
        .into_iter()
        .filter(|(_, number)| *number == pool.number)
        .count();
    if held > 0 {
        return Err(StoreError::Refused(format!(
            "name: pool {name:?} holds {held} queue(s); move them to other pools first \
             (`tenax queues move`)"
        )));
    }
    catalogue.delete_pool(name).await
}

/// Every pool, by name, with how many queues each holds.
pub async fn list(catalogue: &PostgresStore) -> Result<Vec<ListedPool>, StoreError> {
    let placements = catalogue.placements().await?;
    Ok(catalogue
        .pools()
        .await?
        .into_iter()
        .map(|pool| ListedPool {
            queues: placements.iter().filter(|(_, n)| *n == pool.number).count(),
            pool,
        })
        .collect())
}

/// Refuses a database that holds queues already: their jobs' ids would not name the pool, and
/// no queue is placed on them.
async fn starts_empty(store: &PostgresStore) -> Result<(), StoreError> {
    use tenax_core::store::{JobReads, QueueStore, SubscriptionStore};
    let held = store.queues().await?.len()
        + store.counts().await?.len()
        + store.subscriptions(None).await?.len();
    if held > 0 {
        return Err(StoreError::Refused(
            "uri: the database holds queues already; a pool starts empty (`tenax copy` \
             moves a store into the catalogue's database instead)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Whether `text` is a JSON object.
fn is_json_object(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|value| value.is_object())
}
