//! `tenax copy`: every record of one stopped store into another: a data directory into a
//! PostgreSQL database when one server is outgrown, or a database into a data directory
//! (docs/operations.md, "Moving between stores"). Works on the data itself, not through a
//! running server.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use tenax_core::secrets::Keyring;

use super::CliError;
use crate::offline::{self, Data};

#[derive(Debug, Args)]
pub struct CopyArgs {
    /// Where the data is: a data directory, or a PostgreSQL URL (`postgres://…`). No server may
    /// be using it.
    #[arg(long)]
    pub from: String,
    /// Where it goes: a data directory (made if missing), or a PostgreSQL URL (its schema is
    /// made). It must hold nothing, and no server may be using it.
    #[arg(long)]
    pub to: String,
    /// The key file that opens the source's secrets. Default: `secrets.key` in a source data
    /// directory; required for a source database.
    #[arg(long)]
    pub from_secrets_key_file: Option<PathBuf>,
    /// The key file that seals the target's secrets: the one its servers will use. Default:
    /// `secrets.key` in a target data directory (made if missing); required for a database.
    #[arg(long)]
    pub to_secrets_key_file: Option<PathBuf>,
    /// A PEM file of CA certificates that a database's TLS certificate must be signed by.
    #[arg(long, env = "TENAX_DATABASE_CA_FILE")]
    pub database_ca_file: Option<PathBuf>,
    /// Add to a target that already holds records (ids are kept: one it holds stops the copy).
    #[arg(long)]
    pub into_non_empty: bool,
}

pub fn run(args: CopyArgs) -> Result<(), CliError> {
    let ca = args.database_ca_file.as_deref();
    let from = place("--from", &args.from, ca)?;
    let to = place("--to", &args.to, ca)?;
    let from_keys = keys(
        "--from-secrets-key-file",
        args.from_secrets_key_file.as_deref(),
    )?;
    let to_keys = keys("--to-secrets-key-file", args.to_secrets_key_file.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let started = std::time::Instant::now();
    let copied = runtime.block_on(offline::copy_store(
        &from,
        from_keys,
        &to,
        to_keys,
        args.into_non_empty,
    ))?;
    print!("{}", copied.render());
    if !copied.matches() {
        return Err(CliError::Failed(anyhow::anyhow!(
            "the counts differ between the source and the target (MISMATCH above): do not \
             start servers on the target; report it"
        )));
    }
    println!(
        "counts match on both sides; took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A data directory, or a database when `text` is a PostgreSQL URL.
fn place(flag: &str, text: &str, ca_file: Option<&Path>) -> Result<Data, CliError> {
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return Data::database(text, ca_file)
            .map_err(|e| CliError::Invalid(format!("{flag}: {e}")));
    }
    if text.is_empty() {
        return Err(CliError::Invalid(format!(
            "{flag}: give a data directory or a postgres:// URL"
        )));
    }
    Ok(Data::embedded(Path::new(text)))
}

fn keys(flag: &str, path: Option<&Path>) -> Result<Option<Arc<Keyring>>, CliError> {
    path.map(|path| {
        Keyring::read_file(path)
            .map(Arc::new)
            .map_err(|e| CliError::Invalid(format!("{flag}: {e}")))
    })
    .transpose()
}
