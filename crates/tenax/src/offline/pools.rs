//! The pools of a pooled deployment (`tenax pools`), worked on in the catalogue's database
//! itself: the rules are `tenax_pools::admin`'s; this opens the catalogue and says what it did.

use std::path::Path;
use std::sync::Arc;

use tenax_core::clock::Clock;
use tenax_core::model::pool::PoolSpec;
use tenax_core::secrets::Keyring;
use tenax_core::store::{StoreError, StoreLifecycle};
use tenax_pools::admin;
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
        .map(shown)
        .collect())
}

/// Registers a pool (or changes one); answers it as registered.
pub async fn add(catalogue: Catalogue<'_>, pool: Registration) -> Result<Pool, OfflineError> {
    let options = match serde_json::from_str(&pool.options) {
        Ok(serde_json::Value::Object(options)) => options,
        _ => {
            return Err(OfflineError::Invalid(
                "options: must be a JSON object".to_owned(),
            ));
        }
    };
    let (store, options_of_store) = open(catalogue).await?;
    let spec = PoolSpec {
        name: pool.name.clone(),
        uri: pool.uri,
        weight: pool.weight,
        flavor: pool.flavor,
        options,
    };
    let registered = async {
        admin::register(&store, &options_of_store, spec, &Clock::System).await?;
        admin::list(&store).await
    }
    .await;
    store.close().await;
    registered
        .map_err(refusal("registering the pool"))?
        .into_iter()
        .find(|p| p.spec.name == pool.name)
        .map(shown)
        .ok_or_else(|| OfflineError::Invalid(format!("name: no pool {:?}", pool.name)))
}

/// Forgets pool `name`; false if there was none.
pub async fn remove(catalogue: Catalogue<'_>, name: &str) -> Result<bool, OfflineError> {
    let (store, _) = open(catalogue).await?;
    let removed = admin::remove(&store, name).await;
    store.close().await;
    removed.map_err(refusal("removing the pool"))
}

fn shown(pool: tenax_core::model::pool::Pool) -> Pool {
    Pool {
        database: Database::new(&pool.spec.uri, None).map_or_else(
            |_| "(not a database URL)".to_owned(),
            |d| d.said().to_owned(),
        ),
        name: pool.spec.name,
        number: pool.number,
        weight: pool.spec.weight,
        flavor: pool.spec.flavor,
        queues: pool.queues,
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
        StoreError::Pool(refusal) => OfflineError::Invalid(refusal.to_string()),
        error => OfflineError::Failed(anyhow::Error::new(error).context(what)),
    }
}
