//! The command line: one file per command group, each with its own arguments and `run`.

mod error;
pub mod policy;
pub mod serve;

use clap::{Parser, Subcommand};

pub use error::CliError;

/// Tenax: a durable job queue and webhook delivery server with first-class retry policies.
#[derive(Debug, Parser)]
#[command(name = "tenax", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (embedded store in --data-dir).
    Serve(Box<crate::config::ServeArgs>),
    /// Preview and plot retry policies.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Policy(command) => policy::run(command),
    }
}
