//! The pools of a pooled deployment (`tenax pools`), worked on in the catalogue's database
//! itself: the rules are `tenax_pools::admin`'s; this opens the catalogue and says what it did.

use std::path::Path;
use std::sync::Arc;

use tenax_core::clock::Clock;
use tenax_core::secrets::Keyring;
use tenax_core::store::{StoreError, StoreLifecycle};
use tenax_pools::admin::{self, NewPool};
use tenax_postgres::catalogue::PoolRecord;
use tenax_postgres::{Database, PostgresOptions, PostgresStore};

use super::OfflineError;

/// The catalogue: its database (the servers' --database-url) and the servers' key file.
#[derive(Debug, Clone, Copy)]
pub struct Catalogue<'a> {
    pub url: &'a str,
    pub ca_file: Option<&'a Path>,
    pub secrets_key_file: &'a Path,
}

/// A pool as `tenax pools` shows it.
#[derive(Debug, Clone)]
pub struct Pool {
    pub name: String,
    pub number: u8,
    pub weight: u32,
    pub flavor: Option<String>,
    /// How many queues are placed on it.
    pub queues: usize,
    /// Its database, in words (no password).
    pub database: String,
}

/// A pool to register, or the new terms of a registered one.
#[derive(Debug, Clone)]
pub struct Registration {
    pub name: String,
    pub uri: String,
    pub weight: u32,
    pub flavor: Option<String>,
    pub options: String,
}

/// Every pool, by name.
pub async fn list(catalogue: Catalogue<'_>) -> Result<Vec<Pool>, OfflineError> {
    let (store, _) = open(catalogue).await?;
    let listed = admin::list(&store).await;
    store.close().await;
    Ok(listed
        .map_err(refusal("listing the pools"))?
        .into_iter()
        .map(|item| shown(&item.pool, item.queues))
        .collect())
}

/// Registers a pool (or changes one); answers it as registered.
pub async fn add(catalogue: Catalogue<'_>, pool: Registration) -> Result<Pool, OfflineError> {
    let (store, options) = open(catalogue).await?;
    let new = NewPool {
        name: pool.name,
        uri: pool.uri,
        weight: pool.weight,
        flavor: pool.flavor,
        options: pool.options,
    };
    let registered = admin::register(&store, &options, new, &Clock::System).await;
    store.close().await;
    let record = registered.map_err(refusal("registering the pool"))?;
    Ok(shown(&record, 0))
}

/// Forgets pool `name`; false if there was none.
pub async fn remove(catalogue: Catalogue<'_>, name: &str) -> Result<bool, OfflineError> {
    let (store, _) = open(catalogue).await?;
    let removed = admin::remove(&store, name).await;
    store.close().await;
    removed.map_err(refusal("removing the pool"))
}

fn shown(pool: &PoolRecord, queues: usize) -> Pool {
    Pool {
        name: pool.name.clone(),
        number: pool.number,
        weight: pool.weight,
        flavor: pool.flavor.clone(),
        queues,
        database: Database::new(&pool.uri, None).map_or_else(
            |_| "(not a database URL)".to_owned(),
            |d| d.said().to_owned(),
        ),
    }
}

/// The catalogue's store, and the options its pools are opened with.
async fn open(catalogue: Catalogue<'_>) -> Result<(PostgresStore, PostgresOptions), OfflineError> {
    let keys = Keyring::read_file(catalogue.secrets_key_file)
        .map(Arc::new)
        .map_err(|e| OfflineError::Invalid(format!("--secrets-key-file: {e}")))?;
    let database =
        Database::new(catalogue.url, catalogue.ca_file).map_err(OfflineError::Invalid)?;
    let mut options = PostgresOptions::new(database, keys);
    options.pool_size = 2;
    options.ca_file = catalogue.ca_file.map(Path::to_path_buf);
    let store = PostgresStore::open(&options, &Clock::System)
        .await
        .map_err(refusal("opening the catalogue"))?;
    Ok((store, options))
}

/// A refusal (its message names the field) is the user's to mend; anything else failed.
fn refusal(what: &'static str) -> impl FnOnce(StoreError) -> OfflineError {
    move |error| match error {
        StoreError::Refused(message) | StoreError::Secrets(message) => {
            OfflineError::Invalid(message)
        }
        error => OfflineError::Failed(anyhow::Error::new(error).context(what)),
    }
}
