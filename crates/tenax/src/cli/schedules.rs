//! `tenax schedules`: periodic jobs. Make or replace a schedule, list, show, pause, resume and
//! delete them, see a schedule's next ticks, and preview any expression's ticks (locally,
//! without a server, by the same timetable code the server runs).
//!
//! Invariants:
//! - Every command but `preview` is one request to the API (`/api/schedules/...`); the server
//!   checks every field and its error names the field.
//! - `--format json` prints the server's answer (`preview`: what the server would answer); the
//!   table is a reading of it.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use serde_json::Value;
use tenax_client::{Missed, NewSchedule, Overlap, Schedule};
use tenax_core::clock::parse_rfc3339;
use tenax_core::model::timetable::Timetable;

use super::client::{Server, ServerArgs, block_on};
use super::output::{Output, print, print_list};
use super::policy::{Format, policy_json};
use super::terminal::safe;
use super::{CliError, output, parse};

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
        count: u32,
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
    /// Run a schedule now: its job is enqueued at once, outside the timetable.
    Run {
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

impl From<MissedArg> for Missed {
    fn from(missed: MissedArg) -> Self {
        match missed {
            MissedArg::Skip => Self::Skip,
            MissedArg::RunOnce => Self::RunOnce,
        }
    }
}

/// What a tick does while the previous tick's job is unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OverlapArg {
    Allow,
    Skip,
}

impl From<OverlapArg> for Overlap {
    fn from(overlap: OverlapArg) -> Self {
        match overlap {
            OverlapArg::Allow => Self::Allow,
            OverlapArg::Skip => Self::Skip,
        }
    }
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
                let server = Server::connect(&output.server)?;
                let schedules = server.ask(server.list_schedules()).await?;
                print_list("schedules", &schedules, output.format, list_table)
            }
            SchedulesCommand::Show { name, output } => {
                let server = Server::connect(&output.server)?;
                let schedule = server.ask(server.get_schedule(&name)).await?;
                print(&schedule, output.format, schedule_table)
            }
            SchedulesCommand::Ticks {
                name,
                count,
                output,
            } => {
                let server = Server::connect(&output.server)?;
                let ticks = server
                    .ask(server.schedule_ticks(&name, Some(count)))
                    .await?;
                print(&ticks, output.format, |t| {
                    let rows = t.ticks.iter().map(|t| (t.at, t.local.as_str(), t.shifted));
                    ticks_table(&t.cron, &t.timezone, &t.description, rows)
                })
            }
            SchedulesCommand::Pause { name, output } => {
                let server = Server::connect(&output.server)?;
                let schedule = server.ask(server.pause_schedule(&name)).await?;
                print(&schedule, output.format, schedule_table)
            }
            SchedulesCommand::Resume { name, output } => {
                let server = Server::connect(&output.server)?;
                let schedule = server.ask(server.resume_schedule(&name)).await?;
                print(&schedule, output.format, schedule_table)
            }
            SchedulesCommand::Run { name, output } => {
                let server = Server::connect(&output.server)?;
                let schedule = server.ask(server.run_schedule(&name)).await?;
                print(&schedule, output.format, schedule_table)
            }
            SchedulesCommand::Delete { name, server } => {
                let server = Server::connect(&server)?;
                server.ask(server.delete_schedule(&name)).await?;
                println!("deleted schedule {}; the jobs it made stay", safe(&name));
                Ok(())
            }
            SchedulesCommand::Preview(_) => Ok(()),
        }
    })
}

async fn set(args: &SetArgs) -> Result<(), CliError> {
    let payload = match &args.payload {
        Some(payload) => parse::json_argument("--payload", payload)?,
        None => Value::Null,
    };
    let mut schedule = NewSchedule::new(&args.cron, &args.queue, &args.kind)
        .payload(payload)
        .timezone(&args.timezone)
        .priority(args.priority)
        .missed(args.missed.into())
        .overlap(args.overlap.into())
        .paused(args.paused);
    if let Some(policy) = &args.policy {
        schedule = schedule.policy(policy_json(policy)?);
    }
    if let Some(limit) = args.retry_limit {
        schedule = schedule.retry_limit(limit);
    }
    let server = Server::connect(&args.output.server)?;
    let made = server
        .ask(server.put_schedule(&args.name, &schedule))
        .await?;
    print(&made, args.output.format, schedule_table)
}

/// The ticks of an expression computed here, as the server's `POST /api/schedules/preview`
/// would answer them.
#[derive(Debug, Serialize)]
struct Preview {
    cron: String,
    timezone: String,
    description: String,
    ticks: Vec<PreviewTick>,
}

#[derive(Debug, Serialize)]
struct PreviewTick {
    #[serde(serialize_with = "api_time")]
    at: SystemTime,
    local: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    shifted: bool,
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
    let answer = Preview {
        cron: args.cron.trim().to_owned(),
        timezone: args.timezone.trim().to_owned(),
        description: timetable.describe(),
        ticks: timetable
            .ticks_after(after, args.count)
            .into_iter()
            .map(|t| PreviewTick {
                at: UNIX_EPOCH + Duration::from_millis(t.at_ms),
                local: t.local,
                shifted: t.shifted,
            })
            .collect(),
    };
    print(&answer, args.format, |p| {
        let rows = p.ticks.iter().map(|t| (t.at, t.local.as_str(), t.shifted));
        ticks_table(&p.cron, &p.timezone, &p.description, rows)
    })
}

/// A time as the API writes it: RFC 3339 UTC with milliseconds.
fn api_time<S: serde::Serializer>(at: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_rfc3339_millis(*at))
}

fn list_table(schedules: &[Schedule]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<24} {:<18} {:<16} {:<20} {:<6} {:>9} {:>7}",
        "NAME", "CRON", "TIMEZONE", "QUEUE", "PAUSED", "ENQUEUED", "MISSED"
    );
    for s in schedules {
        let _ = writeln!(
            out,
            "{:<24} {:<18} {:<16} {:<20} {:<6} {:>9} {:>7}",
            safe(&s.name),
            safe(&s.cron),
            safe(&s.timezone),
            safe(&s.job.queue),
            s.paused,
            s.counts.enqueued,
            s.counts.missed,
        );
    }
    out
}

fn schedule_table(s: &Schedule) -> String {
    let mut out = String::new();
    let rows = [
        ("name", safe(&s.name).into_owned()),
        ("cron", safe(&s.cron).into_owned()),
        ("timezone", safe(&s.timezone).into_owned()),
        ("description", safe(&s.description).into_owned()),
        ("queue", safe(&s.job.queue).into_owned()),
        ("type", safe(&s.job.kind).into_owned()),
        ("missed", s.missed.to_string()),
        ("overlap", s.overlap.to_string()),
        ("paused", s.paused.to_string()),
        ("next tick", output::time_or(s.next_tick, "-")),
        ("last tick", output::time_or(s.last_tick, "-")),
        ("last job", output::or(s.last_job, "-")),
        ("enqueued", s.counts.enqueued.to_string()),
        ("missed ticks", s.counts.missed.to_string()),
        ("overlapped", s.counts.overlapped.to_string()),
    ];
    for (label, value) in rows {
        let _ = writeln!(out, "{label:<13} {value}");
    }
    out
}

/// `ticks`: each tick's time, its wall time, and whether a daylight-saving gap moved it.
fn ticks_table<'a>(
    cron: &str,
    timezone: &str,
    description: &str,
    ticks: impl Iterator<Item = (SystemTime, &'a str, bool)>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}): {}",
        safe(cron),
        safe(timezone),
        safe(description)
    );
    let _ = writeln!(out, "{:<26} {:<27}", "UTC", "LOCAL");
    for (at, local, shifted) in ticks {
        let note = if shifted {
            "  (its wall time does not exist that day: the first instant after the gap)"
        } else {
            ""
        };
        let _ = writeln!(out, "{:<26} {:<27}{note}", output::time(at), safe(local));
    }
    out
}
