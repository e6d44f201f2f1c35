//! `tenax restore`: a backup (`tenax backup`) made into a new data directory that
//! `tenax serve` opens as it is. Checks the backup, opens the restored store with the secrets
//! key to prove it, and says what it holds (docs/operations.md, "Backups").

use std::path::PathBuf;

use clap::Args;
use tenax_core::model::Status;

use super::CliError;
use super::client::block_on;
use crate::offline;

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup's directory (`tenax backup --to`).
    #[arg(long)]
    pub from: PathBuf,
    /// The new data directory: it must not exist, or hold nothing but the secrets key.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The key file that sealed the backed-up server's secrets (a backup holds no key).
    /// Default: `secrets.key` in the new data directory, where `tenax serve` looks for it.
    #[arg(long)]
    pub secrets_key_file: Option<PathBuf>,
}

pub fn run(args: RestoreArgs) -> Result<(), CliError> {
    let restored = block_on(async {
        Ok(offline::restore(&args.from, &args.data_dir, args.secrets_key_file.as_deref()).await?)
    })?;
    let moment = &restored.manifest.moment;
    let jobs: Vec<String> = Status::ALL
        .iter()
        .zip(restored.jobs)
        .map(|(status, n)| format!("{n} {}", status.name()))
        .collect();
    let serve = match &args.secrets_key_file {
        Some(key) => format!(
            "tenax serve --data-dir {} --secrets-key-file {}",
            args.data_dir.display(),
            key.display()
        ),
        None => format!("tenax serve --data-dir {}", args.data_dir.display()),
    };
    println!(
        "Restored {} into {}: every commit up to record {} of the write-ahead log, taken at {} \
         by Tenax {}.\n\
         Jobs: {}.\n\
         Subscriptions: {}; tokens: {}; schedules: {}.\n\
         Its sealed values open with {}. Start it with: {serve}",
        args.from.display(),
        args.data_dir.display(),
        moment.wal_lsn,
        moment.taken_at,
        restored.manifest.tenax_version,
        jobs.join(", "),
        restored.subscriptions,
        restored.tokens,
        restored.schedules,
        restored.key_file.display(),
    );
    Ok(())
}
