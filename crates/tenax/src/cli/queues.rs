//! `tenax queues`: list and show queues with their counts and limits; set limits; pause and
//! resume; move to another pool.
//!
//! Invariants:
//! - Every command is one request to the API (`/api/queues/...`); the server checks every field
//!   and its error names the field.
//! - `--format json` prints the server's answer; the table is a reading of it.

use std::fmt::Write as _;
use std::time::Duration;

use clap::{Args, Subcommand};
use tenax_client::{MovedQueues, Queue, QueueUpdate};

use super::client::{Server, block_on};
use super::output::{Output, print, print_list};
use super::terminal::safe;
use super::{CliError, parse};

/// `tenax queues`: a subcommand, or none for the list.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct QueuesArgs {
    #[command(subcommand)]
    pub command: Option<QueuesCommand>,
    /// Without a subcommand, what `list` takes.
    #[command(flatten)]
    pub list: Output,
}

#[derive(Debug, Subcommand)]
pub enum QueuesCommand {
    /// Every queue with settings or jobs.
    List {
        #[command(flatten)]
        output: Output,
    },
    /// A queue: its settings, limits and counts.
    Show {
        name: String,
        #[command(flatten)]
        output: Output,
    },
    /// Set a queue's limits; what is not named keeps its value.
    Set(SetArgs),
    /// Pause a queue: it accepts jobs but hands none out.
    Pause {
        name: String,
        /// Make the queue if it has never existed (without it, a misspelt name is refused).
        #[arg(long)]
        create: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Resume a paused queue.
    Resume {
        name: String,
        #[command(flatten)]
        output: Output,
    },
    /// Move a queue to another pool of a pooled deployment, with everything it holds (jobs
    /// keep their ids). Its writes are refused (503) while it moves; a move that stopped short
    /// is finished by running it again. An admin token that is not scoped.
    Move {
        name: String,
        /// The pool to move to.
        #[arg(long)]
        to: String,
        /// A queue that moves with it (repeat for more): its dead-letter queue, or a queue
        /// whose jobs wait for its jobs or share batches with them.
        #[arg(long = "with", value_name = "QUEUE")]
        with: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(Debug, Args)]
pub struct SetArgs {
    pub name: String,
    /// At most this many of the queue's jobs in flight at once, across every worker and server.
    #[arg(long, conflicts_with = "no_concurrency")]
    pub concurrency: Option<u32>,
    /// Remove the concurrency limit.
    #[arg(long)]
    pub no_concurrency: bool,
    /// At most LIMIT jobs started in any PERIOD, as LIMIT/PERIOD: "100/1m", "5/1s", "1000/1d".
    #[arg(long, value_parser = parse_rate, conflicts_with = "no_rate")]
    pub rate: Option<(u32, Duration)>,
    /// Remove the rate limit.
    #[arg(long)]
    pub no_rate: bool,
    /// Make the queue if it has never existed (without it, a misspelt name is refused).
    #[arg(long)]
    pub create: bool,
    /// On a pooled deployment, place the queue on one of this flavor's pools when it is first
    /// written to (a queue placed elsewhere refuses it).
    #[arg(long)]
    pub flavor: Option<String>,
    #[command(flatten)]
    pub output: Output,
}

/// `LIMIT/PERIOD`: the period is milliseconds or a duration such as "1m".
fn parse_rate(text: &str) -> Result<(u32, Duration), String> {
    let (limit, period) = text
        .split_once('/')
        .ok_or_else(|| format!("must be LIMIT/PERIOD such as 100/1m, got {text:?}"))?;
    let limit = limit
        .trim()
        .parse()
        .map_err(|_| format!("the limit must be a whole number, got {limit:?}"))?;
    let period = parse::duration(period).map_err(|rule| format!("the period {rule}"))?;
    Ok((limit, period))
}

pub fn run(args: QueuesArgs) -> Result<(), CliError> {
    let command = args
        .command
        .unwrap_or(QueuesCommand::List { output: args.list });
    block_on(async move {
        match command {
            QueuesCommand::List { output } => {
                let server = Server::connect(&output.server)?;
                let queues = server.ask(server.list_queues()).await?;
                print_list("queues", &queues, output.format, list_table)
            }
            QueuesCommand::Show { name, output } => {
                let server = Server::connect(&output.server)?;
                let queue = server.ask(server.get_queue(&name)).await?;
                print(&queue, output.format, queue_table)
            }
            QueuesCommand::Set(args) => {
                let mut update = QueueUpdate::new();
                if let Some(limit) = args.concurrency {
                    update = update.concurrency(limit);
                }
                if args.no_concurrency {
                    update = update.remove_concurrency();
                }
                if let Some((limit, period)) = args.rate {
                    update = update.rate(limit, period);
                }
                if args.no_rate {
                    update = update.remove_rate();
                }
                if args.create {
                    update = update.create();
                }
                if let Some(flavor) = args.flavor {
                    update = update.flavor(flavor);
                }
                let server = Server::connect(&args.output.server)?;
                let queue = server.ask(server.update_queue(&args.name, &update)).await?;
                print(&queue, args.output.format, queue_table)
            }
            QueuesCommand::Pause {
                name,
                create,
                output,
            } => {
                let server = Server::connect(&output.server)?;
                let queue = if create {
                    let update = QueueUpdate::new().paused(true).create();
                    server.ask(server.update_queue(&name, &update)).await?
                } else {
                    server.ask(server.pause_queue(&name)).await?
                };
                print(&queue, output.format, queue_table)
            }
            QueuesCommand::Resume { name, output } => {
                let server = Server::connect(&output.server)?;
                let queue = server.ask(server.resume_queue(&name)).await?;
                print(&queue, output.format, queue_table)
            }
            QueuesCommand::Move {
                name,
                to,
                with,
                output,
            } => {
                let server = Server::connect(&output.server)?;
                let moved = server.ask(server.move_queue(&name, &to, &with)).await?;
                print(&moved, output.format, moved_table)
            }
        }
    })
}

fn moved_table(moved: &MovedQueues) -> String {
    let queues = moved
        .queues
        .iter()
        .map(|q| safe(q))
        .collect::<Vec<_>>()
        .join(", ");
    match &moved.from {
        Some(from) => format!(
            "moved {queues} from pool {} to pool {}: {} jobs, {} subscriptions\n",
            if from.is_empty() {
                "(catalogue)".to_owned()
            } else {
                safe(from).into_owned()
            },
            safe(&moved.to),
            moved.jobs,
            moved.subscriptions
        ),
        None => format!("{queues}: on pool {} (nothing to move)\n", safe(&moved.to)),
    }
}

/// "in flight / limit", or the count alone without a limit.
fn flight(q: &Queue) -> String {
    match q.concurrency {
        Some(limit) => format!("{}/{limit}", q.counts.in_flight),
        None => q.counts.in_flight.to_string(),
    }
}

/// "used/limit per period", or "-".
fn rate(q: &Queue) -> String {
    match &q.rate {
        Some(rate) => format!(
            "{}/{} per {}",
            rate.used,
            rate.limit,
            tenax_policy::format_duration(rate.period_ms)
        ),
        None => "-".to_owned(),
    }
}

fn list_table(queues: &[Queue]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<32} {:<6} {:>9} {:>9} {:>11} {:>9} {:>6}  RATE",
        "QUEUE", "PAUSED", "SCHEDULED", "READY", "IN FLIGHT", "COMPLETED", "DEAD"
    );
    for q in queues {
        let _ = writeln!(
            out,
            "{:<32} {:<6} {:>9} {:>9} {:>11} {:>9} {:>6}  {}",
            safe(&q.name),
            q.paused,
            q.counts.scheduled,
            q.counts.ready,
            flight(q),
            q.counts.completed,
            q.counts.dead,
            rate(q),
        );
    }
    out
}

fn queue_table(q: &Queue) -> String {
    let mut out = String::new();
    let rows = [
        ("name", safe(&q.name).into_owned()),
        ("paused", q.paused.to_string()),
        ("in flight", flight(q)),
        ("rate", rate(q)),
        ("scheduled", q.counts.scheduled.to_string()),
        ("ready", q.counts.ready.to_string()),
        ("completed", q.counts.completed.to_string()),
        ("dead", q.counts.dead.to_string()),
        ("cancelled", q.counts.cancelled.to_string()),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "{label:<10} {value}");
    }
    out
}
