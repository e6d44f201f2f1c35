//! The command line: one file per command group, each with its own arguments and `run`.

mod backup;
pub mod bench;
mod client;
mod copy;
mod deliveries;
mod enqueue;
mod error;
mod health;
mod jobs;
mod jobs_ndjson;
mod listen;
mod migrate;
mod output;
mod parse;
pub mod policy;
mod pools;
mod queues;
mod repair;
mod restore;
mod schedules;
mod secrets;
pub mod serve;
mod subscription_view;
mod subscriptions;
pub mod terminal;
mod tokens;
mod work;

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
    /// Run the server (embedded store in --data-dir, or PostgreSQL with --database-url).
    Serve(Box<crate::config::ServeArgs>),
    /// Create or migrate the PostgreSQL schema (`serve` also does it at start).
    Migrate(migrate::MigrateArgs),
    /// Preview and plot retry policies.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Measure a running server: enqueue, take+complete, promotion and memory scenarios.
    Bench(bench::BenchArgs),
    /// Enqueue a job, or many from an NDJSON file.
    Enqueue(Box<enqueue::EnqueueArgs>),
    /// List, show, export and import jobs.
    #[command(subcommand)]
    Jobs(jobs::JobsCommand),
    /// List and replay dead jobs.
    #[command(subcommand)]
    Dead(jobs::DeadCommand),
    /// Job counts per queue and status.
    Stats(client::ServerArgs),
    /// Whether a server answers `/healthz`: prints `ok` and exits 0, else exits 1 (for health
    /// checks without curl, as the container image's).
    Health(client::ServerArgs),
    /// Queues: list (without a subcommand too), show, set limits, pause, resume.
    Queues(queues::QueuesArgs),
    /// Periodic jobs: set, list, show, ticks, preview, pause, resume, run, delete.
    #[command(subcommand)]
    Schedules(schedules::SchedulesCommand),
    /// Webhook subscriptions: create, list, show, update, delete.
    #[command(subcommand)]
    Subscriptions(subscriptions::SubscriptionsCommand),
    /// Webhook deliveries: list, show with attempts, replay the dead.
    #[command(subcommand)]
    Deliveries(deliveries::DeliveriesCommand),
    /// API tokens: create, list, revoke.
    #[command(subcommand)]
    Tokens(tokens::TokensCommand),
    /// The key that seals webhook secrets at rest: generate one, rotate it.
    #[command(subcommand)]
    Secrets(secrets::SecretsCommand),
    /// Run a program for each job of some queues: payload on stdin, exit status as outcome.
    Work(Box<work::WorkArgs>),
    /// Receive webhooks on 127.0.0.1 for trying subscriptions out: print each delivery, check
    /// its signature, answer with a chosen status.
    Listen(listen::ListenArgs),
    /// Pools of a pooled deployment: several PostgreSQL databases that hold the queues, kept in
    /// the catalogue (the servers' --database-url): list, add, remove.
    #[command(subcommand)]
    Pools(pools::PoolsCommand),
    /// Copy every record of a stopped store into another: a data directory into a PostgreSQL
    /// database (to run several servers), or back. Ids are kept; counts are checked on both
    /// sides.
    Copy(copy::CopyArgs),
    /// Recover from a damaged write-ahead log: keep a copy, apply what can be read, say what is
    /// lost (the server refuses to start on a damaged log, and never repairs on its own).
    Repair(repair::RepairArgs),
    /// Back up the embedded store while the server serves (or from a stopped server's
    /// --data-dir): a consistent copy and its manifest, checked, in a new directory.
    Backup(Box<backup::BackupArgs>),
    /// Restore a backup into a new data directory: check it, open it with the secrets key,
    /// and say what it holds.
    Restore(restore::RestoreArgs),
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Migrate(args) => migrate::run(args),
        Command::Policy(command) => policy::run(command),
        Command::Bench(args) => bench::run(args),
        Command::Enqueue(args) => enqueue::run(*args),
        Command::Jobs(command) => jobs::run_jobs(command),
        Command::Dead(command) => jobs::run_dead(command),
        Command::Stats(server) => jobs::run_stats(server),
        Command::Health(server) => health::run(server),
        Command::Queues(command) => queues::run(command),
        Command::Schedules(command) => schedules::run(command),
        Command::Subscriptions(command) => subscriptions::run(command),
        Command::Deliveries(command) => deliveries::run(command),
        Command::Tokens(command) => tokens::run(command),
        Command::Secrets(command) => secrets::run(command),
        Command::Work(args) => work::run(*args),
        Command::Listen(args) => listen::run(args),
        Command::Pools(command) => pools::run(command),
        Command::Copy(args) => copy::run(args),
        Command::Repair(args) => repair::run(args),
        Command::Backup(args) => backup::run(*args),
        Command::Restore(args) => restore::run(args),
    }
}
