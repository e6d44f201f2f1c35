//! `tenax pools`: the pools of a pooled deployment (docs/postgres.md, "Pools"), kept in the
//! catalogue's database. These commands work on the catalogue itself, not through a server;
//! servers read the pools when they start.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use super::CliError;
use crate::offline::pools::{self, Catalogue, Registration};

#[derive(Debug, Subcommand)]
pub enum PoolsCommand {
    /// Every pool: its name, number, weight, flavor, database and how many queues it holds.
    List(CatalogueArgs),
    /// Register a database as a pool, or change a pool (its weight, flavor, database): its
    /// schema is made, and new queues are placed on it by weight once every server has loaded
    /// it (within seconds; servers need no restart).
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

fn catalogue(args: &CatalogueArgs) -> Catalogue<'_> {
    Catalogue {
        url: &args.database_url,
        ca_file: args.database_ca_file.as_deref(),
        secrets_key_file: &args.secrets_key_file,
    }
}

async fn list(args: &CatalogueArgs) -> Result<(), CliError> {
    let listed = pools::list(catalogue(args)).await?;
    if listed.is_empty() {
        println!("no pools: every queue is in the catalogue's database");
        return Ok(());
    }
    println!("NAME  NUMBER  WEIGHT  FLAVOR  QUEUES  DATABASE");
    for pool in listed {
        println!(
            "{}  {}  {}  {}  {}  {}",
            pool.name,
            pool.number,
            pool.weight,
            pool.flavor.as_deref().unwrap_or("-"),
            pool.queues,
            pool.database
        );
    }
    Ok(())
}

async fn add(args: AddArgs) -> Result<(), CliError> {
    let registration = Registration {
        name: args.name.clone(),
        uri: args.uri.clone(),
        weight: args.weight,
        flavor: args.flavor.clone(),
        options: args.options.clone(),
    };
    let pool = pools::add(catalogue(&args.catalogue), registration).await?;
    println!(
        "pool {} (number {}, weight {}) registered; servers place new queues on it once each \
         has loaded it (within seconds)",
        pool.name, pool.number, pool.weight
    );
    Ok(())
}

async fn remove(args: &RemoveArgs) -> Result<(), CliError> {
    if pools::remove(catalogue(&args.catalogue), &args.name).await? {
        println!("pool {} removed", args.name);
        Ok(())
    } else {
        Err(CliError::Invalid(format!("name: no pool {:?}", args.name)))
    }
}
