//! `tenax secrets`: the key that seals webhook secrets, header values and Zaqar options at rest
//! (docs/security.md). These commands work on the data itself, not through a running server.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use tenax_core::secrets::key::Key;
use tenax_core::secrets::{Keyring, SECRETS_KEY_FILE};

use super::CliError;
use crate::offline::Data;

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Write a new key file (mode 0600), for --secrets-key-file. Refuses to replace a file.
    GenerateKey(GenerateArgs),
    /// Seal every stored secret with a new key, and leave the key file holding it alone. Runs
    /// on stopped servers' data: the embedded store's data directory, or a PostgreSQL database
    /// no server is using (for a running cluster, see docs/security.md).
    RotateKey(RotateArgs),
}

#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Where to write the key file.
    pub path: PathBuf,
}

#[derive(Debug, Args)]
pub struct RotateArgs {
    /// Directory of the embedded store.
    #[arg(long, env = "TENAX_DATA_DIR", default_value = "./tenax-data")]
    pub data_dir: PathBuf,
    /// The PostgreSQL database instead of the embedded store.
    #[arg(long, env = "TENAX_DATABASE_URL")]
    pub database_url: Option<String>,
    /// A PEM file of CA certificates that the database's TLS certificate must be signed by.
    #[arg(long, env = "TENAX_DATABASE_CA_FILE", requires = "database_url")]
    pub database_ca_file: Option<PathBuf>,
    /// The key file the servers use (rewritten in place). Default: `secrets.key` in the data
    /// directory; required with --database-url.
    #[arg(long, env = "TENAX_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// The new key: the first key of this file (`tenax secrets generate-key` makes one).
    /// Without it, a new key is made.
    #[arg(long)]
    pub new_key_file: Option<PathBuf>,
}

pub fn run(command: SecretsCommand) -> Result<(), CliError> {
    match command {
        SecretsCommand::GenerateKey(args) => generate(&args.path),
        SecretsCommand::RotateKey(args) => rotate(&args),
    }
}

fn generate(path: &Path) -> Result<(), CliError> {
    if path.exists() {
        return Err(CliError::Invalid(format!(
            "{} exists: a key file is never replaced by a new key (the secrets it sealed would \
             be lost); choose another path",
            path.display()
        )));
    }
    let keys = Keyring::generate(path.display().to_string()).context("making a key")?;
    keys.write_file(path)
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "wrote key {} to {} (mode 0600); keep a copy apart from the data",
        keys.current().id(),
        path.display()
    );
    Ok(())
}

/// Rotation, in an order a crash at any point survives: the key file first holds both keys
/// (so whatever is sealed, with either, opens), then every secret is sealed with the new key
/// (each subscription one commit), then the key file holds the new key alone. Run again after
/// a crash, it finishes the job.
fn rotate(args: &RotateArgs) -> Result<(), CliError> {
    let data = match &args.database_url {
        Some(url) => {
            Data::database(url, args.database_ca_file.as_deref()).map_err(CliError::Invalid)?
        }
        None => Data::embedded(&args.data_dir),
    };
    let key_path = match &args.secrets_key_file {
        Some(path) => path.clone(),
        None if data.is_database() => {
            return Err(CliError::Invalid(
                "--secrets-key-file: required with --database-url: the key file the servers use"
                    .into(),
            ));
        }
        None => args.data_dir.join(SECRETS_KEY_FILE),
    };
    let old = Keyring::read_file(&key_path).map_err(CliError::Invalid)?;
    let new = match &args.new_key_file {
        Some(path) => Keyring::read_file(path)
            .map_err(|e| CliError::Invalid(format!("--new-key-file: {e}")))?
            .current()
            .clone(),
        None => Key::generate().context("making a key")?,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        // Nothing is written while a server holds the data.
        data.ensure_unused().await?;
        let both = old.sealing_with(new.clone());
        both.write_file(&key_path)
            .with_context(|| format!("writing {}", key_path.display()))?;
        let both = Arc::new(both);
        let sealed = data.reseal(both.clone()).await?;
        both.current_only()
            .write_file(&key_path)
            .with_context(|| format!("writing {}", key_path.display()))?;
        let what = match sealed {
            Some(sealed) => format!("{sealed} subscription(s)' secrets"),
            None => "every subscription's secrets".into(),
        };
        println!(
            "sealed {what} with key {}; {} holds it alone{}",
            new.id(),
            key_path.display(),
            if data.is_database() {
                ": copy it to every server before starting them"
            } else {
                ""
            }
        );
        Ok(())
    })
}
