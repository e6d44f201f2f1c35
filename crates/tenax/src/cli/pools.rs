//! `tenax pools`: the pools of a pooled deployment (docs/postgres.md, "Pools"), kept in the
//! catalogue's database. These commands work on the catalogue itself, not through a server;
//! servers read the pools when they start.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use tenax_core::clock::Clock;
use tenax_core::secrets::Keyring;
use tenax_core::store::{StoreError, StoreLifecycle};
use tenax_pools::admin::{self, NewPool};
use tenax_postgres::{Database, PostgresOptions, PostgresStore};

use super::CliError;

#[derive(Debug, Subcommand)]
pub enum PoolsCommand {
    /// Every pool: its name, number, weight, flavor, database and how many queues it holds.
    List(CatalogueArgs),
    /// Register a database as a pool, or change a pool (its weight, flavor, database): its
    /// schema is made, and new queues are placed on it by weight once servers restart.
    Add(AddArgs),
    /// Forget a pool that holds no queue.
    Remove(RemoveArgs),
}

/// The catalogue: the database the servers' --database-url names.
#[derive(Debug, Args)]
pub struct CatalogueArgs {
    /// The catalogue's database: a `postgres://` URL or a libpq connection string.
    #[arg(long, env = "TENAX_DATABASE_URL")]
    pub database_url: String,
    /// A PEM file of CA certificates that the databases' TLS certificates must be signed by.
    #[arg(long, env = "TENAX_DATABASE_CA_FILE")]
    pub database_ca_file: Option<PathBuf>,
    /// The key file the servers use (--secrets-key-file): it seals the pools' URIs.
    #[arg(long, env = "TENAX_SECRETS_KEY_FILE")]
    pub secrets_key_file: PathBuf,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The pool's name: 1 to 64 letters, digits, `_` or `-`.
    pub name: String,
    /// The pool's database: a `postgres://` URL of another database or server.
    #[arg(long)]
    pub uri: String,
    /// New queues are placed on pools in proportion to their weights (0: none).
    #[arg(long, default_value_t = 100)]
    pub weight: u32,
    /// The flavor (group of pools) the pool belongs to.
    #[arg(long)]
    pub flavor: Option<String>,
    /// Options kept with the pool: a JSON object.
    #[arg(long, default_value = "{}")]
    pub options: String,
    #[command(flatten)]
    pub catalogue: CatalogueArgs,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The pool's name.
    pub name: String,
    #[command(flatten)]
    pub catalogue: CatalogueArgs,
}

pub fn run(command: PoolsCommand) -> Result<(), CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        match command {
            PoolsCommand::List(args) => list(&args).await,
            PoolsCommand::Add(args) => add(args).await,
            PoolsCommand::Remove(args) => remove(&args).await,
        }
    })
}

/// The catalogue's store, and the options pools are opened with.
async fn open(args: &CatalogueArgs) -> Result<(PostgresStore, PostgresOptions), CliError> {
    let keys = Keyring::read_file(&args.secrets_key_file)
        .map(Arc::new)
        .map_err(|e| CliError::Invalid(format!("--secrets-key-file: {e}")))?;
    let database = Database::new(&args.database_url, args.database_ca_file.as_deref())
        .map_err(CliError::Invalid)?;
    let mut options = PostgresOptions::new(database, keys);
    options.pool_size = 2;
    options.ca_file.clone_from(&args.database_ca_file);
    let store = PostgresStore::open(&options, &Clock::System)
        .await
        .map_err(|e| failed("opening the catalogue", e))?;
    Ok((store, options))
}

/// A refusal names its field; anything else failed.
fn failed(what: &str, error: StoreError) -> CliError {
    match error {
        StoreError::Refused(message) | StoreError::Secrets(message) => CliError::Invalid(message),
        error => CliError::Failed(anyhow::Error::new(error).context(what.to_owned())),
    }
}

async fn list(args: &CatalogueArgs) -> Result<(), CliError> {
    let (catalogue, _) = open(args).await?;
    let listed = admin::list(&catalogue).await;
    catalogue.close().await;
    let listed = listed.map_err(|e| failed("listing the pools", e))?;
    if listed.is_empty() {
        println!("no pools: every queue is in the catalogue's database");
        return Ok(());
    }
    println!("NAME  NUMBER  WEIGHT  FLAVOR  QUEUES  DATABASE");
    for item in listed {
        let pool = &item.pool;
        let said = Database::new(&pool.uri, None)
            .map(|d| d.said().to_owned())
            .unwrap_or_else(|_| "(not a database URL)".to_owned());
        println!(
            "{}  {}  {}  {}  {}  {}",
            pool.name,
            pool.number,
            pool.weight,
            pool.flavor.as_deref().unwrap_or("-"),
            item.queues,
            said
        );
    }
    Ok(())
}

async fn add(args: AddArgs) -> Result<(), CliError> {
    let (catalogue, options) = open(&args.catalogue).await?;
    let new = NewPool {
        name: args.name,
        uri: args.uri,
        weight: args.weight,
        flavor: args.flavor,
        options: args.options,
    };
    let registered = admin::register(&catalogue, &options, new, &Clock::System).await;
    catalogue.close().await;
    let pool = registered.map_err(|e| failed("registering the pool", e))?;
    println!(
        "pool {} (number {}, weight {}) registered; servers place new queues on it once they \
         restart",
        pool.name, pool.number, pool.weight
    );
    Ok(())
}

async fn remove(args: &RemoveArgs) -> Result<(), CliError> {
    let (catalogue, _) = open(&args.catalogue).await?;
    let removed = admin::remove(&catalogue, &args.name).await;
    catalogue.close().await;
    if removed.map_err(|e| failed("removing the pool", e))? {
        println!("pool {} removed", args.name);
        Ok(())
    } else {
        Err(CliError::Invalid(format!("name: no pool {:?}", args.name)))
    }
}
