//! `tenax migrate`: brings a PostgreSQL database's schema up to this version of Tenax, and
//! says what it found. `tenax serve --database-url` does the same at start; this is for
//! deployments that migrate as a step of their own, before starting the servers.

use super::CliError;
use crate::store::postgres::{Database, schema};
use anyhow::Context as _;
use clap::Args;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The database: a `postgres://` URL or a libpq connection string.
    #[arg(long, env = "TENAX_DATABASE_URL")]
    pub database_url: String,
    /// A PEM file of CA certificates that the database's TLS certificate must be signed by
    /// (libpq's `sslrootcert`, which the URL may name instead).
    #[arg(long, env = "TENAX_DATABASE_CA_FILE")]
    pub database_ca_file: Option<std::path::PathBuf>,
}

pub fn run(args: MigrateArgs) -> Result<(), CliError> {
    let database = Database::new(&args.database_url, args.database_ca_file.as_deref())
        .map_err(CliError::Invalid)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let found = runtime.block_on(async {
        let (mut client, connection) = database
            .connect()
            .await
            .with_context(|| format!("connecting to PostgreSQL {}", database.said()))?;
        let driver = tokio::spawn(connection);
        let found = schema::migrate(&mut client).await;
        drop(client);
        let _ = driver.await;
        found.context("migrating the schema")
    })?;
    if found == schema::VERSION {
        println!("the schema is at version {found}, the current one: nothing to do");
    } else {
        println!(
            "migrated the schema from version {found} to {}",
            schema::VERSION
        );
    }
    Ok(())
}
