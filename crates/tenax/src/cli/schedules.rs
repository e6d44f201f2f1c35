//! `tenax schedules`: periodic jobs. Make or replace a schedule, list, show, pause, resume and
//! delete them, see a schedule's next ticks, and preview any expression's ticks (locally,
//! without a server, by the same timetable code the server runs).
//!
//! Invariants:
//! - Every command but `preview` is one request to the API (`/api/schedules/...`); the server
//!   checks every field and its error names the field.
//! - `--format json` prints the server's answer unchanged; the table is a reading of it.

use std::fmt::Write as _;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use tenax_core::clock::{parse_rfc3339, rfc3339};
use tenax_core::model::timetable::Timetable;

use super::CliError;
use super::client::{Client, ServerArgs, block_on};
use super::policy::{Format, policy_json};
use super::subscriptions::{Output, or, print};
use super::terminal::safe;

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Make a schedule, or replace the one of this name.
    Set(Box<SetArgs>),
    /// List every schedule.
    List {
        #[command(flatten)]
        output: Output,
    },
    /// Show a schedule: its definition, next tick and what its ticks did.
    Show {
        name: String,
        #[command(flatten)]
        output: Output,
    },
    /// A schedule's next ticks.
    Ticks {
        name: String,
        /// How many (1 to 1000).
        #[arg(long, default_value_t = 10)]
        count: usize,
        #[command(flatten)]
        output: Output,
    },
    /// The next ticks of an expression in a time zone, computed here: check it before
    /// trusting it.
    Preview(PreviewArgs),
    /// Pause a schedule: its ticks enqueue nothing until it is resumed.
    Pause {
        name: String,
        #[command(flatten)]
        output: Output,
    },
    /// Resume a paused schedule from its next tick.
    Resume {
        name: String,
        #[command(flatten)]
        output: Output,
    },
    /// Delete a schedule; the jobs it made stay.
    Delete {
        name: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// What missed ticks do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MissedArg {
    Skip,
    RunOnce,
}

/// What a tick does while the previous tick's job is unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OverlapArg {
    Allow,
    Skip,
}

#[derive(Debug, Args)]
pub struct SetArgs {
    pub name: String,
    /// Five fields (minute hour day-of-month month day-of-week), six (a leading second), or
    /// @hourly, @daily, @weekly, @monthly, @yearly.
    #[arg(long)]
    pub cron: String,
    /// The IANA time zone the expression is read in.
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    /// The queue each tick's job goes to.
    #[arg(long, short)]
    pub queue: String,
    /// The job's type.
    #[arg(long = "type", short = 't', default_value = "")]
    pub kind: String,
    /// The job's payload: JSON, or @path to a file holding it.
    #[arg(long)]
    pub payload: Option<String>,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// The job's retry policy: JSON in any spelling, or @path.
    #[arg(long)]
    pub policy: Option<String>,
    /// A retry limit over the policy the job would otherwise have.
    #[arg(long)]
    pub retry_limit: Option<u32>,
    /// Ticks no server handled within a minute of their time: skip them, or run them once.
    #[arg(long, value_enum, default_value_t = MissedArg::Skip)]
    pub missed: MissedArg,
    /// A tick while the previous tick's job is unfinished: allow it, or skip it.
    #[arg(long, value_enum, default_value_t = OverlapArg::Allow)]
    pub overlap: OverlapArg,
    /// Make it paused.
    #[arg(long)]
    pub paused: bool,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct PreviewArgs {
    #[arg(long)]
    pub cron: String,
    #[arg(long, default_value = "UTC")]
    pub timezone: String,
    /// How many ticks.
    #[arg(long, default_value_t = 10)]
    pub count: usize,
    /// The ticks after this time (RFC 3339; default: now).
    #[arg(long)]
    pub after: Option<String>,
    /// Print a table, or JSON.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

pub fn run(command: SchedulesCommand) -> Result<(), CliError> {
    if let SchedulesCommand::Preview(args) = &command {
        return preview(args);
    }
    block_on(async move {
        match command {
            SchedulesCommand::Set(args) => set(&args).await,
            SchedulesCommand::List { output } => {
                let list = Client::new(&output.server)?.get("/api/schedules").await?;
                print(&list, output.format, list_table)
            }
            SchedulesCommand::Show { name, output } => {
                let view = Client::new(&output.server)?
                    .get(&format!("/api/schedules/{name}"))
                    .await?;
                print(&view, output.format, schedule_table)
            }
            SchedulesCommand::Ticks {
                name,
                count,
                output,
            } => {
                let ticks = Client::new(&output.server)?
                    .get(&format!("/api/schedules/{name}/ticks?count={count}"))
                    .await?;
                print(&ticks, output.format, ticks_table)
            }
            SchedulesCommand::Pause { name, output } => {
                let view = Client::new(&output.server)?
                    .post(&format!("/api/schedules/{name}/pause"), &json!({}))
                    .await?;
                print(&view, output.format, schedule_table)
            }
            SchedulesCommand::Resume { name, output } => {
                let view = Client::new(&output.server)?
                    .post(&format!("/api/schedules/{name}/resume"), &json!({}))
                    .await?;
                print(&view, output.format, schedule_table)
            }
            SchedulesCommand::Delete { name, server } => {
                Client::new(&server)?
                    .delete(&format!("/api/schedules/{name}"))
                    .await?;
                println!("deleted schedule {}; the jobs it made stay", safe(&name));
                Ok(())
            }
            SchedulesCommand::Preview(_) => Ok(()),
        }
    })
}

async fn set(args: &SetArgs) -> Result<(), CliError> {
    let mut job = json!({"queue": args.queue, "type": args.kind, "priority": args.priority});
    if let Some(payload) = &args.payload {
        job["payload"] = json_argument("--payload", payload)?;
    }
    if let Some(policy) = &args.policy {
        job["policy"] = policy_json(policy)?;
    }
    if let Some(limit) = args.retry_limit {
        job["retry_limit"] = json!(limit);
    }
    let body = json!({
        "cron": args.cron,
        "timezone": args.timezone,
        "job": job,
        "missed": match args.missed {
            MissedArg::Skip => "skip",
            MissedArg::RunOnce => "run_once",
        },
        "overlap": match args.overlap {
            OverlapArg::Allow => "allow",
            OverlapArg::Skip => "skip",
        },
        "paused": args.paused,
    });
    let view = Client::new(&args.output.server)?
        .put(&format!("/api/schedules/{}", args.name), &body)
        .await?;
    print(&view, args.output.format, schedule_table)
}

/// JSON given on the command line, or `@path` to a file holding it.
fn json_argument(flag: &str, argument: &str) -> Result<Value, CliError> {
    let text = match argument.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| CliError::Invalid(format!("{flag}: cannot read {path}: {e}")))?,
        None => argument.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| CliError::Invalid(format!("{flag}: not JSON: {e}")))
}

fn preview(args: &PreviewArgs) -> Result<(), CliError> {
    let timetable = Timetable::new(&args.cron, &args.timezone)
        .map_err(|e| CliError::Invalid(format!("--{}: {}", e.field, e.rule)))?;
    if !(1..=1_000).contains(&args.count) {
        return Err(CliError::Invalid(format!(
            "--count: must be 1 to 1000, got {}",
            args.count
        )));
    }
    let after = match &args.after {
        Some(text) => parse_rfc3339(text).ok_or_else(|| {
            CliError::Invalid(format!(
                "--after: must be an RFC 3339 time such as 2027-03-28T00:00:00Z, got {text:?}"
            ))
        })?,
        None => tenax_core::clock::Clock::System.now_ms(),
    };
    let ticks: Vec<Value> = timetable
        .ticks_after(after, args.count)
        .into_iter()
        .map(|t| {
            let mut tick = json!({"at": rfc3339(t.at_ms), "local": t.local});
            if t.shifted {
                tick["shifted"] = json!(true);
            }
            tick
        })
        .collect();
    let answer = json!({
        "cron": args.cron.trim(),
        "timezone": args.timezone.trim(),
        "description": timetable.describe(),
        "ticks": ticks,
    });
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        ),
        Format::Table => print!("{}", ticks_table(&answer)),
    }
    Ok(())
}

/// A table cell: the value's text, safe for a terminal, or `-`.
fn text(value: &Value) -> String {
    or(value, "-")
}

fn list_table(list: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:<18} {:<16} {:<20} {:<6} {:>9} {:>7}",
        "NAME", "CRON", "TIMEZONE", "QUEUE", "PAUSED", "ENQUEUED", "MISSED"
    );
    for s in list["schedules"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:<24} {:<18} {:<16} {:<20} {:<6} {:>9} {:>7}",
            text(&s["name"]),
            text(&s["cron"]),
            text(&s["timezone"]),
            text(&s["job"]["queue"]),
            text(&s["paused"]),
            text(&s["counts"]["enqueued"]),
            text(&s["counts"]["missed"]),
        );
    }
    out
}

fn schedule_table(s: &Value) -> String {
    let mut out = String::new();
    let rows = [
        ("name", &s["name"]),
        ("cron", &s["cron"]),
        ("timezone", &s["timezone"]),
        ("description", &s["description"]),
        ("queue", &s["job"]["queue"]),
        ("type", &s["job"]["type"]),
        ("missed", &s["missed"]),
        ("overlap", &s["overlap"]),
        ("paused", &s["paused"]),
        ("next tick", &s["next_tick"]),
        ("last tick", &s["last_tick"]),
        ("last job", &s["last_job"]),
        ("enqueued", &s["counts"]["enqueued"]),
        ("missed ticks", &s["counts"]["missed"]),
        ("overlapped", &s["counts"]["overlapped"]),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "{label:<13} {}", text(value));
    }
    out
}

fn ticks_table(ticks: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}): {}",
        text(&ticks["cron"]),
        text(&ticks["timezone"]),
        text(&ticks["description"])
    );
    let _ = writeln!(out, "{:<26} {:<27}", "UTC", "LOCAL");
    for tick in ticks["ticks"].as_array().into_iter().flatten() {
        let note = if tick["shifted"] == json!(true) {
            "  (its wall time does not exist that day: the first instant after the gap)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<26} {:<27}{note}",
            text(&tick["at"]),
            text(&tick["local"])
        );
    }
    out
}
