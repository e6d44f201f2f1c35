//! `tenax migrate`: brings a PostgreSQL database's schema up to this version of Tenax, and
//! says what it found. `tenax serve --database-url` does the same at start; this is for
//! deployments that migrate as a step of their own, before starting the servers.

use anyhow::Context as _;
use clap::Args;

use super::CliError;
use crate::offline;

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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let migrated = runtime.block_on(offline::migrate(
        &args.database_url,
        args.database_ca_file.as_deref(),
    ))?;
    if migrated.found == migrated.current {
        println!(
            "the schema is at version {}, the current one: nothing to do",
            migrated.found
        );
    } else {
        println!(
            "migrated the schema from version {} to {}",
            migrated.found, migrated.current
        );
    }
    Ok(())
}
