//! `tenax migrate`: brings a PostgreSQL database's schema up to this version of Tenax, and
//! says what it found. `tenax serve --database-url` does the same at start; this is for
//! deployments that migrate as a step of their own, before starting the servers.

use anyhow::Context as _;
use clap::Args;
use tokio_postgres::NoTls;

use super::CliError;
use crate::store::postgres::schema;

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The database: a `postgres://` URL or a libpq connection string.
    #[arg(long, env = "TENAX_DATABASE_URL")]
    pub database_url: String,
}

pub fn run(args: MigrateArgs) -> Result<(), CliError> {
    let config: tokio_postgres::Config = args.database_url.parse().map_err(|e| {
        CliError::Invalid(format!(
            "--database-url: not a PostgreSQL connection URL or string ({e})"
        ))
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let found = runtime.block_on(async {
        let (mut client, connection) = config
            .connect(NoTls)
            .await
            .context("connecting to PostgreSQL")?;
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
