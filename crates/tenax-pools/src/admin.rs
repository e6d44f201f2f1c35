//! Registering, changing and forgetting pools and flavors: the rules, shared by the servers'
//! APIs (through [`crate::PooledStore`]'s `PoolStore`) and the CLI (`tenax pools`), which works
//! on the catalogue's database directly. Servers load the catalogue again when it changes.

use tenax_core::clock::Clock;
use tenax_core::model::pool::{self, Flavor, MAX_POOLS, Pool, PoolError, PoolSpec};
use tenax_core::store::{StoreError, StoreLifecycle};
use tenax_postgres::catalogue::{FlavorRecord, PoolRecord, Stripes};
use tenax_postgres::{Database, PostgresOptions, PostgresStore};

/// Registers pool `spec` in the catalogue `catalogue` (opened with `options`), or changes the
/// one of its name; true if it is new. A new database is reached (made, when its server has
/// none of that name), its schema made, and it must hold nothing yet; it gets the lowest free
/// number, and the ids of it and of the catalogue are striped by pool from then on.
pub async fn register(
    catalogue: &PostgresStore,
    options: &PostgresOptions,
    spec: PoolSpec,
    clock: &Clock,
) -> Result<bool, StoreError> {
    check_name("name", &spec.name)?;
    let flavor = spec.flavor.clone().filter(|f| !f.is_empty());
    if let Some(flavor) = &flavor {
        check_name("flavor", flavor)?;
    }
    let database = Database::new(&spec.uri, options.ca_file.as_deref()).map_err(|e| {
        refused(PoolError::Invalid {
            field: "uri",
            rule: e.replace("--database-url: ", ""),
        })
    })?;
    let state = catalogue.catalogue_state().await?;
    if let Some(other) = state
        .pools
        .iter()
        .find(|p| p.uri == spec.uri && p.name != spec.name)
    {
        return Err(refused(PoolError::UriTaken(other.name.clone())));
    }
    let existing = state.pools.iter().find(|p| p.name == spec.name);
    let renamed = existing.is_none_or(|p| p.uri != spec.uri);
    let number = match existing {
        Some(existing) => {
            let queues = queues_on(catalogue, existing.number).await?;
            if renamed && queues > 0 {
                return Err(refused(PoolError::HoldsQueues {
                    name: spec.name,
                    queues,
                }));
            }
            existing.number
        }
        None => (1..=u8::try_from(MAX_POOLS).unwrap_or(63))
            .find(|n| state.pools.iter().all(|p| p.number != *n))
            .ok_or_else(|| {
                refused(PoolError::Invalid {
                    field: "name",
                    rule: format!("a deployment has at most {MAX_POOLS} pools"),
                })
            })?,
    };
    if renamed {
        prepare(catalogue, options, database, number, clock).await?;
    }
    let record = PoolRecord {
        name: spec.name,
        number,
        uri: spec.uri,
        weight: spec.weight,
        flavor,
        options: serde_json::Value::Object(spec.options).to_string(),
        ready: false,
    };
    catalogue.put_pool(&record, renamed).await?;
    Ok(existing.is_none())
}

/// Readies a pool's database before any server can place a queue there: reached (made if its
/// server has none of that name), its schema made, empty, its ids striped past the
/// catalogue's.
async fn prepare(
    catalogue: &PostgresStore,
    options: &PostgresOptions,
    database: Database,
    number: u8,
    clock: &Clock,
) -> Result<(), StoreError> {
    let unreachable = |error: &dyn std::error::Error| {
        refused(PoolError::Unreachable(tenax_core::errors::chain(error)))
    };
    database
        .create_if_missing()
        .await
        .map_err(|e| unreachable(&e))?;
    let pool_options = PostgresOptions {
        database,
        pool_size: 2,
        signals: None,
        ..options.clone()
    };
    let store = PostgresStore::open(&pool_options, clock)
        .await
        .map_err(|e| unreachable(&e))?;
    let ready = async {
        starts_empty(&store).await?;
        // The catalogue's ids from before stay its own; the pool's begin past them.
        let since = catalogue.stripe_ids(0, &Stripes::default()).await?;
        store.stripe_ids(number, &since).await
    }
    .await;
    store.close().await;
    ready.map(|_| ())
}

/// Forgets pool `name`; false if there was none. Refused while a queue is placed on it, and for
/// the last pool of a flavor.
pub async fn remove(catalogue: &PostgresStore, name: &str) -> Result<bool, StoreError> {
    let pools = catalogue.pools().await?;
    let Some(pool) = pools.iter().find(|p| p.name == name) else {
        return Ok(false);
    };
    let queues = queues_on(catalogue, pool.number).await?;
    if queues > 0 {
        return Err(refused(PoolError::HoldsQueues {
            name: name.to_owned(),
            queues,
        }));
    }
    // Ids of jobs moved out of it route to it first (their remainder names it), and it
    // forwards them.
    if catalogue
        .moved_from()
        .await?
        .iter()
        .any(|m| m.source == pool.number)
    {
        return Err(refused(PoolError::Forwards(name.to_owned())));
    }
    if let Some(flavor) = &pool.flavor {
        let last = pools
            .iter()
            .all(|p| p.name == name || p.flavor.as_ref() != Some(flavor));
        let exists = catalogue.flavors().await?.iter().any(|f| &f.name == flavor);
        if last && exists {
            return Err(refused(PoolError::LastOfFlavor {
                pool: name.to_owned(),
                flavor: flavor.clone(),
            }));
        }
    }
    catalogue.delete_pool(name).await
}

/// Every pool, by name, with how many queues each holds.
pub async fn list(catalogue: &PostgresStore) -> Result<Vec<Pool>, StoreError> {
    let placements = catalogue.placements().await?;
    catalogue
        .pools()
        .await?
        .into_iter()
        .map(|pool| {
            let queues = placements.iter().filter(|(_, n)| *n == pool.number).count();
            Ok(Pool {
                ready: pool.ready,
                number: pool.number,
                spec: spec_of(pool)?,
                queues,
            })
        })
        .collect()
}

/// Every flavor, by name, with its pools.
pub async fn flavors(catalogue: &PostgresStore) -> Result<Vec<Flavor>, StoreError> {
    let pools = catalogue.pools().await?;
    catalogue
        .flavors()
        .await?
        .into_iter()
        .map(|flavor| {
            let capabilities = object("a flavor's capabilities", &flavor.capabilities)?;
            Ok(Flavor {
                pools: pools
                    .iter()
                    .filter(|p| p.flavor.as_deref() == Some(flavor.name.as_str()))
                    .map(|p| p.name.clone())
                    .collect(),
                name: flavor.name,
                capabilities,
            })
        })
        .collect()
}

/// Stores `flavor` with exactly its pools, each of which must exist; true if it is new.
pub async fn put_flavor(catalogue: &PostgresStore, flavor: Flavor) -> Result<bool, StoreError> {
    check_name("name", &flavor.name)?;
    let pools = catalogue.pools().await?;
    if let Some(missing) = flavor
        .pools
        .iter()
        .find(|name| pools.iter().all(|p| &&p.name != name))
    {
        return Err(refused(PoolError::NoPool(missing.clone())));
    }
    let record = FlavorRecord {
        name: flavor.name,
        capabilities: serde_json::Value::Object(flavor.capabilities).to_string(),
    };
    catalogue.put_flavor(&record, &flavor.pools).await
}

/// The registered pool `pool` as the API shows it.
fn spec_of(pool: PoolRecord) -> Result<PoolSpec, StoreError> {
    Ok(PoolSpec {
        options: object("a pool's options", &pool.options)?,
        name: pool.name,
        uri: pool.uri,
        weight: pool.weight,
        flavor: pool.flavor,
    })
}

/// How many queues are placed on pool `number`.
async fn queues_on(catalogue: &PostgresStore, number: u8) -> Result<usize, StoreError> {
    Ok(catalogue
        .placements()
        .await?
        .into_iter()
        .filter(|(_, n)| *n == number)
        .count())
}

/// Refuses a database that holds queues already: their jobs' ids would not name the pool, and
/// no queue is placed on them.
async fn starts_empty(store: &PostgresStore) -> Result<(), StoreError> {
    use tenax_core::store::{JobReads, QueueStore, SubscriptionStore};
    let held = store.queues().await?.len()
        + store.counts().await?.len()
        + store.subscriptions(None).await?.len();
    if held > 0 {
        return Err(refused(PoolError::Invalid {
            field: "uri",
            rule: "the database holds queues already; a pool starts empty (`tenax copy` moves \
                   a store into the catalogue's database instead)"
                .to_owned(),
        }));
    }
    Ok(())
}

fn check_name(field: &'static str, name: &str) -> Result<(), StoreError> {
    pool::check_name(field, name).map_err(refused)
}

/// A JSON object the catalogue keeps as text.
fn object(
    what: &str,
    text: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, StoreError> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        _ => Err(StoreError::Corrupt(format!("{what} is not a JSON object"))),
    }
}

fn refused(error: PoolError) -> StoreError {
    StoreError::Pool(error)
}
