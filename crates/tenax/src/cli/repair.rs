//! `tenax repair`: the way on from a damaged write-ahead log, which `tenax serve` refuses to
//! start on. Keeps a copy of the damaged log, applies every record it can, makes a new log, and
//! says exactly what is lost ([`offline::repair_log`]). `serve` never does this.

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::offline;

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// The embedded store's data directory (stop the server that uses it first).
    #[arg(long, env = "TENAX_DATA_DIR")]
    pub data_dir: PathBuf,
}

pub fn run(args: RepairArgs) -> Result<(), CliError> {
    let dir = &args.data_dir;
    if !dir.join("tenax.redb").is_file() {
        return Err(CliError::Invalid(format!(
            "--data-dir: {} holds no embedded store (no tenax.redb)",
            dir.display()
        )));
    }
    print!("{}", offline::repair_log(dir)?);
    Ok(())
}
