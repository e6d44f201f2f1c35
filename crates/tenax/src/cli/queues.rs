//! `tenax queues`: list and show queues with their counts and limits; set limits; pause and
//! resume.
//!
//! Invariants:
//! - Every command is one request to the API (`/api/queues/...`); the server checks every field
//!   and its error names the field.
//! - `--format json` prints the server's answer unchanged; the table is a reading of it.

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::CliError;
use super::client::{Client, block_on};
use super::subscriptions::{Output, or, print};

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
        #[command(flatten)]
        output: Output,
    },
    /// Resume a paused queue.
    Resume {
        name: String,
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
    pub rate: Option<(u32, String)>,
    /// Remove the rate limit.
    #[arg(long)]
    pub no_rate: bool,
    #[command(flatten)]
    pub output: Output,
}

/// `LIMIT/PERIOD`: the period is left for the server to read (ms or "1m").
fn parse_rate(text: &str) -> Result<(u32, String), String> {
    let (limit, period) = text
        .split_once('/')
        .ok_or_else(|| format!("must be LIMIT/PERIOD such as 100/1m, got {text:?}"))?;
    let limit = limit
        .trim()
        .parse()
        .map_err(|_| format!("the limit must be a whole number, got {limit:?}"))?;
    Ok((limit, period.trim().to_owned()))
}

pub fn run(command: QueuesCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            QueuesCommand::List { output } => {
                let list = Client::new(&output.server)?.get("/api/queues").await?;
                print(&list, output.format, list_table)
            }
            QueuesCommand::Show { name, output } => {
                let view = Client::new(&output.server)?
                    .get(&format!("/api/queues/{name}"))
                    .await?;
                print(&view, output.format, queue_table)
            }
            QueuesCommand::Set(args) => {
                let mut body = json!({});
                if let Some(n) = args.concurrency {
                    body["concurrency"] = json!(n);
                }
                if args.no_concurrency {
                    body["concurrency"] = Value::Null;
                }
                if let Some((limit, period)) = &args.rate {
                    let period = period
                        .parse::<u64>()
                        .map_or_else(|_| json!(period), |ms| json!(ms));
                    body["rate"] = json!({"limit": limit, "period": period});
                }
                if args.no_rate {
                    body["rate"] = Value::Null;
                }
                let view = Client::new(&args.output.server)?
                    .put(&format!("/api/queues/{}", args.name), &body)
                    .await?;
                print(&view, args.output.format, queue_table)
            }
            QueuesCommand::Pause { name, output } => {
                let view = Client::new(&output.server)?
                    .post(&format!("/api/queues/{name}/pause"), &json!({}))
                    .await?;
                print(&view, output.format, queue_table)
            }
            QueuesCommand::Resume { name, output } => {
                let view = Client::new(&output.server)?
                    .post(&format!("/api/queues/{name}/resume"), &json!({}))
                    .await?;
                print(&view, output.format, queue_table)
            }
        }
    })
}

/// A table cell: the value's text, safe for a terminal, or `-`.
fn text(value: &Value) -> String {
    or(value, "-")
}

/// "in flight / limit", or the count alone without a limit.
fn flight(q: &Value) -> String {
    match q.get("concurrency") {
        Some(limit) => format!("{}/{}", text(&q["counts"]["in_flight"]), text(limit)),
        None => text(&q["counts"]["in_flight"]),
    }
}

/// "used/limit per period", or "-".
fn rate(q: &Value) -> String {
    match q.get("rate") {
        Some(rate) => format!(
            "{}/{} per {}",
            text(&rate["used"]),
            text(&rate["limit"]),
            tenax_policy::format_duration(rate["period_ms"].as_u64().unwrap_or(0))
        ),
        None => "-".to_owned(),
    }
}

fn list_table(list: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<32} {:<6} {:>9} {:>9} {:>11} {:>9} {:>6}  RATE",
        "QUEUE", "PAUSED", "SCHEDULED", "READY", "IN FLIGHT", "COMPLETED", "DEAD"
    );
    for q in list["queues"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<32} {:<6} {:>9} {:>9} {:>11} {:>9} {:>6}  {}",
            text(&q["name"]),
            text(&q["paused"]),
            text(&q["counts"]["scheduled"]),
            text(&q["counts"]["ready"]),
            flight(q),
            text(&q["counts"]["completed"]),
            text(&q["counts"]["dead"]),
            rate(q),
        );
    }
    out
}

fn queue_table(q: &Value) -> String {
    let mut out = String::new();
    let rows = [
        ("name", text(&q["name"])),
        ("paused", text(&q["paused"])),
        ("in flight", flight(q)),
        ("rate", rate(q)),
        ("scheduled", text(&q["counts"]["scheduled"])),
        ("ready", text(&q["counts"]["ready"])),
        ("completed", text(&q["counts"]["completed"])),
        ("dead", text(&q["counts"]["dead"])),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "{label:<10} {value}");
    }
    out
}
