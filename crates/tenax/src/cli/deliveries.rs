//! `tenax deliveries`: a subscription's deliveries, one delivery with its attempts, and replay
//! of dead deliveries (one, or a subscription's since a time).
//!
//! Invariants:
//! - Every command is one request to the API (`/api/subscriptions/{id}/deliveries`,
//!   `/api/deliveries/{id}`, `.../replay`); `--format json` prints its answer unchanged.
//! - A replay starts the retries again from 1 unless `--keep-attempts` says otherwise, as the
//!   API does.

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::CliError;
use super::client::{Client, block_on};
use super::policy::policy_json;
use super::subscriptions::{Output, or, print, text};

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
    /// scheduled, ready, in_flight, completed or dead.
    #[arg(long, short)]
    pub status: Option<String>,
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
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
    #[arg(long, requires = "subscription")]
    pub since: Option<String>,
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
                let view = Client::new(&output.server)?
                    .get(&format!("/api/deliveries/{id}"))
                    .await?;
                print(&view, output.format, delivery_table)
            }
            DeliveriesCommand::Replay(args) => replay(&args).await,
        }
    })
}

async fn list(args: &ListArgs) -> Result<(), CliError> {
    let mut query = vec![format!("limit={}", args.limit)];
    if let Some(status) = &args.status {
        query.push(format!("status={status}"));
    }
    if let Some(after) = args.after {
        query.push(format!("after={after}"));
    }
    let page = Client::new(&args.output.server)?
        .get(&format!(
            "/api/subscriptions/{}/deliveries?{}",
            args.subscription,
            query.join("&")
        ))
        .await?;
    print(&page, args.output.format, list_table)?;
    if let Some(next) = page["next_after"].as_u64() {
        eprintln!("more: --after {next}");
    }
    Ok(())
}

async fn replay(args: &ReplayArgs) -> Result<(), CliError> {
    let mut body = json!({ "reset_attempts": !args.keep_attempts });
    if let Some(policy) = &args.policy {
        body["policy"] = policy_json(policy)?;
    }
    let path = match (args.id, args.subscription) {
        (Some(id), _) => format!("/api/deliveries/{id}/replay"),
        (None, Some(subscription)) => {
            if let Some(since) = &args.since {
                // Milliseconds go as a number, anything else as the RFC 3339 text.
                body["since"] = since
                    .parse::<u64>()
                    .map_or_else(|_| json!(since), |ms| json!(ms));
            }
            format!("/api/subscriptions/{subscription}/replay")
        }
        (None, None) => {
            return Err(CliError::Invalid(
                "name a delivery id, or --subscription".into(),
            ));
        }
    };
    let answer = Client::new(&args.output.server)?.post(&path, &body).await?;
    print(&answer, args.output.format, |answer| {
        let ids = answer["replayed"].as_array().map_or(0, Vec::len);
        format!("replayed {ids} deliveries: {}\n", answer["replayed"])
    })
}

fn list_table(page: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>10}  {:>10}  {:<10} {:>8}  {:<24}  dead reason",
        "id", "message", "status", "failures", "run at"
    );
    for d in page["deliveries"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:>10}  {:>10}  {:<10} {:>8}  {:<24}  {}",
            d["id"].to_string(),
            d["message_id"].to_string(),
            text(&d["status"]),
            d["failures"].to_string(),
            text(&d["run_at"]),
            or(&d["dead_reason"], ""),
        );
    }
    out
}

fn delivery_table(d: &Value) -> String {
    let mut out = String::new();
    for (key, value) in [
        ("id", d["id"].to_string()),
        ("subscription", d["subscription"].to_string()),
        (
            "message",
            format!(
                "{} ({} on {})",
                d["message_id"],
                or(&d["type"], ""),
                or(&d["queue"], "")
            ),
        ),
        ("status", or(&d["status"], "")),
        ("failures", d["failures"].to_string()),
        ("run at", or(&d["run_at"], "")),
        ("created", or(&d["created_at"], "")),
        ("finished", or(&d["finished_at"], "-")),
        ("dead reason", or(&d["dead_reason"], "-")),
        ("policy", or(&d["policy"], "the subscription's")),
    ] {
        let _ = writeln!(out, "{key:<13} {value}");
    }
    let _ = writeln!(
        out,
        "\n{:>7}  {:<24}  {:<10} {:>8}  outcome",
        "attempt", "at", "result", "latency"
    );
    for a in d["attempts"].as_array().into_iter().flatten() {
        let outcome = match (a["status"].as_u64(), a["error"].as_str()) {
            (Some(status), _) => format!("HTTP {status}"),
            (None, Some(error)) => error.to_owned(),
            (None, None) => String::new(),
        };
        let retry_after = a["retry_after_ms"]
            .as_u64()
            .map(|ms| format!(" (Retry-After {})", tenax_policy::format_duration(ms)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:>7}  {:<24}  {:<10} {:>6}ms  {outcome}{retry_after}",
            a["attempt"].to_string(),
            text(&a["at"]),
            text(&a["result"]),
            a["latency_ms"].to_string(),
        );
    }
    out
}
