//! `tenax backup`: a consistent copy of the embedded store, taken while the server serves
//! (`POST /api/admin/backup`), or from a stopped server's data directory (`--data-dir`).
//! Writes `tenax.redb` and `backup.json` into a new directory, and checks the file against the
//! manifest (docs/operations.md, "Backups").

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use anyhow::Context as _;
use bytes::Bytes;
use clap::Args;
use tenax_core::model::backup::{BackupManifest, MANIFEST_FILE, STORE_FILE};
use tenax_core::secrets::Keyring;

use super::CliError;
use super::client::{Server, ServerArgs, block_on};
use crate::offline;

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The directory to write the backup into: it must not exist, or be empty.
    #[arg(long)]
    pub to: PathBuf,
    /// Back up the embedded store in this data directory, whose server is stopped, instead of
    /// asking the running server at --url.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// With --data-dir: the key file that opens its sealed values. Default: `secrets.key` in
    /// the data directory.
    #[arg(long, requires = "data_dir")]
    pub secrets_key_file: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
}

pub fn run(args: BackupArgs) -> Result<(), CliError> {
    let to = &args.to;
    offline::ensure_empty(to, false).map_err(|e| match CliError::from(e) {
        CliError::Invalid(message) => CliError::Invalid(format!("--to: {message}")),
        other => other,
    })?;
    let manifest = match &args.data_dir {
        Some(dir) => {
            let keys = match &args.secrets_key_file {
                Some(path) => Some(std::sync::Arc::new(
                    Keyring::read_file(path)
                        .map_err(|e| CliError::Invalid(format!("--secrets-key-file: {e}")))?,
                )),
                None => None,
            };
            block_on(async { Ok(offline::backup_stopped(dir, to, keys).await?) })?
        }
        None => {
            let server = Server::connect(&args.server)?;
            let created = !to.exists();
            let received = receive(&server, to).and_then(|()| Ok(offline::check_backup(to)?));
            if received.is_err() {
                for name in [STORE_FILE, MANIFEST_FILE] {
                    let _ = std::fs::remove_file(to.join(name));
                }
                if created {
                    let _ = std::fs::remove_dir(to);
                }
            }
            received?
        }
    };
    print!("{}", describe(&manifest, to));
    Ok(())
}

/// What a backup holds, in words.
fn describe(manifest: &BackupManifest, to: &Path) -> String {
    let rows = |table: &str| manifest.rows.get(table).copied().unwrap_or(0);
    format!(
        "Backed up into {}: every commit up to record {} of the write-ahead log, taken at {}.\n\
         {} bytes, SHA-256 {} (checked).\n\
         Jobs: {} ({} completed); subscriptions: {}; tokens: {}; schedules: {}.\n\
         The secrets key is not in the backup: keep the server's key file (secrets.key in its \
         data directory, or its --secrets-key-file) apart, to restore with.\n",
        to.display(),
        manifest.moment.wal_lsn,
        manifest.moment.taken_at,
        manifest.bytes,
        manifest.sha256,
        rows("jobs"),
        rows("completed"),
        rows("subscriptions"),
        rows("tokens"),
        rows("schedules"),
    )
}

/// Receives the server's backup and unpacks it into `to` as it arrives.
fn receive(server: &Server, to: &Path) -> Result<(), CliError> {
    tenax_core::secrets::files::private_dir(to)
        .with_context(|| format!("making {}", to.display()))?;
    block_on(async {
        let mut backup = server.ask(server.backup()).await?;
        let (sender, receiver) = mpsc::sync_channel::<Bytes>(8);
        let into = to.to_owned();
        let unpacker = std::thread::spawn(move || {
            unpack(
                Chunks {
                    receiver,
                    current: Bytes::new(),
                },
                &into,
            )
        });
        let mut failed = None;
        loop {
            match backup.chunk().await {
                Ok(Some(chunk)) => {
                    if sender.send(chunk).is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    failed = Some(server.error(error));
                    break;
                }
            }
        }
        drop(sender);
        let unpacked = unpacker
            .join()
            .map_err(|_| anyhow::anyhow!("unpacking the backup panicked"))?;
        if let Some(error) = failed {
            return Err(error);
        }
        unpacked.with_context(|| format!("unpacking the backup into {}", to.display()))?;
        Ok(())
    })
}

/// Unpacks the archive's two files into `to`; refuses any other entry.
fn unpack(reader: impl Read, to: &Path) -> anyhow::Result<()> {
    let mut archive = tar::Archive::new(reader);
    let mut found = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let name = path.to_str().unwrap_or_default().to_owned();
        anyhow::ensure!(
            [STORE_FILE, MANIFEST_FILE].contains(&name.as_str()) && !found.contains(&name),
            "the archive holds {}, which a backup does not",
            path.display()
        );
        entry.unpack(to.join(&name))?;
        found.push(name);
    }
    anyhow::ensure!(
        found.len() == 2,
        "the archive ended before it held both {STORE_FILE} and {MANIFEST_FILE}"
    );
    Ok(())
}

/// The archive's bytes, as they arrive.
struct Chunks {
    receiver: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.recv() {
                Ok(chunk) => self.current = chunk,
                // The sender is gone: the end, or a failure the caller reports.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}
