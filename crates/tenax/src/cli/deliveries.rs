//! `tenax deliveries`: a subscription's deliveries, one delivery with its attempts, and replay
//! of dead deliveries (one, or a subscription's since a time).
//!
//! Invariants:
//! - Every command is one request to the API (`/api/subscriptions/{id}/deliveries`,
//!   `/api/deliveries/{id}`, `.../replay`); `--format json` prints its answer.
//! - A replay starts the retries again from 1 unless `--keep-attempts` says otherwise, as the
//!   API does.

use std::fmt::Write as _;
use std::time::SystemTime;

use clap::{Args, Subcommand};
use tenax_client::{Delivery, DeliveryFilter, DeliveryPage, ReplayDeliveries};

use super::client::{Server, block_on};
use super::output::{Output, print, print_list};
use super::policy::policy_json;
use super::terminal::safe;
use super::{CliError, output, parse};

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// List a subscription's deliveries (100 per page; --after continues).
    List(ListArgs),
    /// Show a delivery with every attempt.
    Show {
        id: u64,
        #[command(flatten)]
        output: Output,
    },
    /// Make dead deliveries ready again: one by id, or a subscription's.
    Replay(ReplayArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// The subscription's id.
    pub subscription: u64,
    #[arg(long, short, value_enum)]
    pub status: Option<parse::Status>,
    /// Deliveries per page, 1 to 1000.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    #[arg(long)]
    pub after: Option<u64>,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The dead delivery to replay.
    #[arg(
        required_unless_present = "subscription",
        conflicts_with = "subscription"
    )]
    pub id: Option<u64>,
    /// Replay every dead delivery of this subscription instead.
    #[arg(long)]
    pub subscription: Option<u64>,
    /// Only deliveries that died at or after this time (RFC 3339 or ms since 1970).
    #[arg(long, requires = "subscription", value_parser = parse::time)]
    pub since: Option<SystemTime>,
    /// A new policy for the replayed deliveries (any spelling, or @file).
    #[arg(long)]
    pub policy: Option<String>,
    /// Continue the failure count instead of starting the retries again from 1.
    #[arg(long)]
    pub keep_attempts: bool,
    #[command(flatten)]
    pub output: Output,
}

pub fn run(command: DeliveriesCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            DeliveriesCommand::List(args) => list(&args).await,
            DeliveriesCommand::Show { id, output } => {
                let server = Server::connect(&output.server)?;
                let delivery = server.ask(server.get_delivery(id)).await?;
                print(&delivery, output.format, delivery_table)
            }
            DeliveriesCommand::Replay(args) => replay(&args).await,
        }
    })
}

async fn list(args: &ListArgs) -> Result<(), CliError> {
    let mut filter = DeliveryFilter::new().limit(args.limit);
    if let Some(status) = args.status {
        filter = filter.status(status.into());
    }
    if let Some(after) = args.after {
        filter = filter.after(after);
    }
    let server = Server::connect(&args.output.server)?;
    let page = server
        .ask(server.list_deliveries(args.subscription, &filter))
        .await?;
    print(&page, args.output.format, list_table)?;
    if let Some(next) = page.next_after {
        eprintln!("more: --after {next}");
    }
    Ok(())
}

async fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    let mut replay = ReplayDeliveries::new().reset_attempts(!args.keep_attempts);
    if let Some(policy) = &args.policy {
        replay = replay.policy(policy_json(policy)?);
    }
    let server = Server::connect(&args.output.server)?;
    let replayed = match (args.id, args.subscription) {
        (Some(id), _) => server.ask(server.replay_delivery(id, &replay)).await?,
        (None, Some(subscription)) => {
            if let Some(since) = args.since {
                replay = replay.since(since);
            }
            server
                .ask(server.replay_subscription(subscription, &replay))
                .await?
        }
        (None, None) => {
            return Err(CliError::Invalid(
                "name a delivery id, or --subscription".into(),
            ));
        }
    };
    print_list("replayed", &replayed, args.output.format, |ids| {
        format!("replayed {} deliveries: {}\n", ids.len(), output::ids(ids))
    })
}

fn list_table(page: &DeliveryPage) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>10}  {:>10}  {:<10} {:>8}  {:<24}  dead reason",
        "id", "message", "status", "failures", "run at"
    );
    for d in &page.deliveries {
        let _ = writeln!(
            out,
            "{:>10}  {:>10}  {:<10} {:>8}  {:<24}  {}",
            d.id,
            d.message_id,
            d.status,
            d.failures,
            output::time(d.run_at),
            output::or(d.dead_reason.as_deref(), ""),
        );
    }
    out
}

fn delivery_table(d: &Delivery) -> String {
    let mut out = String::new();
    for (key, value) in [
        ("id", d.id.to_string()),
        ("subscription", d.subscription.to_string()),
        (
            "message",
            format!("{} ({} on {})", d.message_id, safe(&d.kind), safe(&d.queue)),
        ),
        ("status", d.status.to_string()),
        ("failures", d.failures.to_string()),
        ("run at", output::time(d.run_at)),
        ("created", output::time(d.created_at)),
        ("finished", output::time_or(d.finished_at, "-")),
        ("dead reason", output::or(d.dead_reason.as_deref(), "-")),
        (
            "policy",
            output::or(d.policy.as_ref(), "the subscription's"),
        ),
    ] {
        let _ = writeln!(out, "{key:<13} {value}");
    }
    let _ = writeln!(
        out,
        "\n{:>7}  {:<24}  {:<10} {:>8}  outcome",
        "attempt", "at", "result", "latency"
    );
    for a in d.attempts.iter().flatten() {
        let outcome = match (a.status, &a.error) {
            (Some(status), _) => format!("HTTP {status}"),
            (None, Some(error)) => safe(error).into_owned(),
            (None, None) => String::new(),
        };
        let retry_after = a
            .retry_after_ms
            .map(|ms| format!(" (Retry-After {})", tenax_policy::format_duration(ms)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:>7}  {:<24}  {:<10} {:>6}ms  {outcome}{retry_after}",
            a.attempt,
            output::time(a.at),
            a.result,
            a.latency_ms,
        );
    }
    out
}
