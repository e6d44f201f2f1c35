//! `tenax subscriptions`: subscribe webhook endpoints to queues, and list, show, change and
//! delete subscriptions.
//!
//! Invariants:
//! - Every command is one request to the API (`/api/queues/{queue}/subscriptions`,
//!   `/api/subscriptions/...`); the server checks every field and its error names the field.
//! - `--format json` prints the server's answer unchanged; the table is a reading of it.

use std::fmt::Write as _;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use tenax_policy::format_duration;
use tenax_policy::spelling::native;

use super::CliError;
use super::client::{Client, ServerArgs, block_on};
use super::policy::{Format, describe, policy_json};

#[derive(Debug, Subcommand)]
pub enum SubscriptionsCommand {
    /// Subscribe an endpoint to a queue: every message enqueued on it is POSTed there.
    Create(Box<CreateArgs>),
    /// List subscriptions, of one queue or of all.
    List {
        /// Only this queue's.
        queue: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Show a subscription: its settings, effective policy, health and deliveries.
    Show {
        id: u64,
        #[command(flatten)]
        output: Output,
    },
    /// Change a subscription; what is not named keeps its value.
    Update(Box<UpdateArgs>),
    /// Delete a subscription, and its deliveries with it.
    Delete {
        id: u64,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Replace the signing secret; the old one keeps signing beside it for the overlap.
    RotateSecret {
        id: u64,
        /// The new secret (whsec_ and base64); a new one is generated when left out.
        #[arg(long)]
        secret: Option<String>,
        /// How long the old secret keeps signing too ("24h" by default; 0 ends it now).
        #[arg(long)]
        overlap: Option<String>,
        #[command(flatten)]
        output: Output,
    },
}

/// Where the server is, and how to print its answer.
#[derive(Debug, Args)]
pub struct Output {
    #[command(flatten)]
    pub server: ServerArgs,
    /// Print a table, or the server's JSON answer.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// The body webhooks POST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Envelope {
    /// Tenax's envelope (docs/webhooks.md).
    Tenax,
    /// Zaqar's notification body.
    Zaqar,
}

/// The settings `create` and `update` share.
#[derive(Debug, Args)]
pub struct Settings {
    /// The delivery policy: JSON in any spelling (native, AWS SNS DeliveryPolicy, Zaqar
    /// _retry_policy), or @path to a file holding it.
    #[arg(long)]
    pub policy: Option<String>,
    /// At most this many deliveries start per second (more wait).
    #[arg(long)]
    pub throttle: Option<u32>,
    /// The signing secret, whsec_ and base64; a new subscription without one gets one. Shown
    /// once, by `create`; change it with `rotate-secret`.
    #[arg(long)]
    pub secret: Option<String>,
    /// An extra request header, NAME=VALUE; repeat for more. On update, replaces every header.
    #[arg(long = "header", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// The request's Content-Type (default application/json).
    #[arg(long)]
    pub content_type: Option<String>,
    /// The body POSTed: Tenax's envelope or Zaqar's notification.
    #[arg(long, value_enum)]
    pub envelope: Option<Envelope>,
    /// Non-2xx statuses to retry, comma-separated, instead of every 5xx, 408 and 429.
    #[arg(long, value_delimiter = ',')]
    pub retryable_statuses: Vec<u16>,
    /// At most this many requests of this subscription at once.
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    /// Disable the subscription after its endpoint failed this long without a success
    /// ("3d"; 0: never).
    #[arg(long)]
    pub auto_disable_after: Option<String>,
    /// Cap retries: PERCENT,WINDOW[,MIN_RETRIES] ("20,1m": within any minute, retries are at
    /// most 20 % of the attempts, or 10 whatever the share). Retries over it wait.
    #[arg(long, value_parser = parse_retry_budget)]
    pub retry_budget: Option<Value>,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The queue whose messages are delivered.
    pub queue: String,
    /// The http or https URL messages are POSTed to.
    pub endpoint: String,
    #[command(flatten)]
    pub settings: Settings,
    /// Create it disabled: deliveries wait until it is enabled.
    #[arg(long)]
    pub disabled: bool,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    pub id: u64,
    /// A new endpoint URL.
    #[arg(long)]
    pub endpoint: Option<String>,
    #[command(flatten)]
    pub settings: Settings,
    /// Remove the subscription's own policy (its queue's, or the server's, then applies).
    #[arg(long, conflicts_with = "policy")]
    pub no_policy: bool,
    /// Remove the retry budget: retries are not capped.
    #[arg(long, conflicts_with = "retry_budget")]
    pub no_retry_budget: bool,
    /// Enable it: pending deliveries resume.
    #[arg(long, conflicts_with = "disable")]
    pub enable: bool,
    /// Disable it: deliveries wait.
    #[arg(long)]
    pub disable: bool,
    #[command(flatten)]
    pub output: Output,
}

/// `PERCENT,WINDOW[,MIN_RETRIES]` as the API's `retry_budget` object (the server checks it).
fn parse_retry_budget(text: &str) -> Result<Value, String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let (percent, window, min) = match parts.as_slice() {
        [percent, window] => (percent, window, None),
        [percent, window, min] => (percent, window, Some(min)),
        _ => {
            return Err(format!(
                "must be PERCENT,WINDOW[,MIN_RETRIES], got {text:?}"
            ));
        }
    };
    let percent: u32 = percent
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("the percent must be a whole number, got {percent:?}"))?;
    let mut budget = json!({"percent": percent, "window": window});
    if let Some(min) = min {
        let min: u32 = min
            .parse()
            .map_err(|_| format!("MIN_RETRIES must be a whole number, got {min:?}"))?;
        budget["min_retries"] = json!(min);
    }
    Ok(budget)
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("must be NAME=VALUE, got {text:?}")),
    }
}

/// The request fields `settings` gives.
fn settings_body(settings: &Settings) -> Result<Value, CliError> {
    let mut body = json!({});
    if let Some(policy) = &settings.policy {
        body["policy"] = policy_json(policy)?;
    }
    if let Some(rate) = settings.throttle {
        body["throttle_per_second"] = json!(rate);
    }
    if let Some(secret) = &settings.secret {
        body["secret"] = json!(secret);
    }
    if !settings.headers.is_empty() {
        let headers: serde_json::Map<String, Value> = settings
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), json!(value)))
            .collect();
        body["headers"] = Value::Object(headers);
    }
    if let Some(content_type) = &settings.content_type {
        body["content_type"] = json!(content_type);
    }
    if let Some(envelope) = settings.envelope {
        body["format"] = json!(match envelope {
            Envelope::Tenax => "tenax",
            Envelope::Zaqar => "zaqar",
        });
    }
    if !settings.retryable_statuses.is_empty() {
        body["retryable_statuses"] = json!(settings.retryable_statuses);
    }
    if let Some(max) = settings.max_concurrency {
        body["max_concurrency"] = json!(max);
    }
    if let Some(after) = &settings.auto_disable_after {
        body["auto_disable_after"] = json!(after);
    }
    if let Some(budget) = &settings.retry_budget {
        body["retry_budget"] = budget.clone();
    }
    Ok(body)
}

pub fn run(command: SubscriptionsCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            SubscriptionsCommand::Create(args) => create(&args).await,
            SubscriptionsCommand::List { queue, output } => {
                let path = match &queue {
                    Some(queue) => format!("/api/queues/{queue}/subscriptions"),
                    None => "/api/subscriptions".to_owned(),
                };
                let list = Client::new(&output.server)?.get(&path).await?;
                print(&list, output.format, list_table)
            }
            SubscriptionsCommand::Show { id, output } => {
                let view = Client::new(&output.server)?
                    .get(&format!("/api/subscriptions/{id}"))
                    .await?;
                print(&view, output.format, subscription_table)
            }
            SubscriptionsCommand::Update(args) => update(&args).await,
            SubscriptionsCommand::Delete { id, server } => {
                let answer = Client::new(&server)?
                    .delete(&format!("/api/subscriptions/{id}"))
                    .await?;
                println!(
                    "deleted subscription {id} and its {} deliveries",
                    answer["deliveries_deleted"]
                );
                Ok(())
            }
            SubscriptionsCommand::RotateSecret {
                id,
                secret,
                overlap,
                output,
            } => {
                let mut body = json!({});
                if let Some(secret) = secret {
                    body["secret"] = json!(secret);
                }
                if let Some(overlap) = overlap {
                    body["overlap"] = json!(overlap);
                }
                let view = Client::new(&output.server)?
                    .post(&format!("/api/subscriptions/{id}/rotate-secret"), &body)
                    .await?;
                print(&view, output.format, subscription_table)
            }
        }
    })
}

async fn create(args: &CreateArgs) -> Result<(), CliError> {
    let mut body = settings_body(&args.settings)?;
    body["endpoint"] = json!(args.endpoint);
    if args.disabled {
        body["enabled"] = json!(false);
    }
    let view = Client::new(&args.output.server)?
        .post(&format!("/api/queues/{}/subscriptions", args.queue), &body)
        .await?;
    print(&view, args.output.format, subscription_table)
}

async fn update(args: &UpdateArgs) -> Result<(), CliError> {
    let mut body = settings_body(&args.settings)?;
    if let Some(endpoint) = &args.endpoint {
        body["endpoint"] = json!(endpoint);
    }
    if args.no_policy {
        body["policy"] = Value::Null;
    }
    if args.no_retry_budget {
        body["retry_budget"] = Value::Null;
    }
    if args.enable || args.disable {
        body["enabled"] = json!(args.enable);
    }
    let view = Client::new(&args.output.server)?
        .patch(&format!("/api/subscriptions/{}", args.id), &body)
        .await?;
    print(&view, args.output.format, subscription_table)
}

/// Prints `answer` as JSON, or as the table `table` makes of it.
pub(super) fn print(
    answer: &Value,
    format: Format,
    table: fn(&Value) -> String,
) -> Result<(), CliError> {
    match format {
        Format::Json => println!(
            "{}",
            super::terminal::safe_json(
                &serde_json::to_string_pretty(answer).context("encoding the answer")?
            )
        ),
        Format::Table => print!("{}", table(answer)),
    }
    Ok(())
}

/// A string field, safe for a terminal ([`super::terminal::safe`]), or `""`.
pub(super) fn text(value: &Value) -> std::borrow::Cow<'_, str> {
    super::terminal::safe(value.as_str().unwrap_or_default())
}

/// A field that may be `null`: its text, or `default`.
pub(super) fn or(value: &Value, default: &str) -> String {
    match value {
        Value::Null => default.to_owned(),
        Value::String(text) => super::terminal::safe(text).into_owned(),
        other => super::terminal::safe(&other.to_string()).into_owned(),
    }
}

fn list_table(list: &Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6}  {:<20} {:<8} {:<8} {:>8} {:>8}  endpoint",
        "id", "queue", "enabled", "health", "pending", "dead"
    );
    for s in list["subscriptions"].as_array().into_iter().flatten() {
        let d = &s["deliveries"];
        let count = |key: &str| d[key].as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "{:>6}  {:<20} {:<8} {:<8} {:>8} {:>8}  {}",
            s["id"].to_string(),
            text(&s["queue"]),
            if s["enabled"] == true { "yes" } else { "no" },
            if s["health"]["healthy"] == false {
                "failing"
            } else {
                "ok"
            },
            count("scheduled") + count("ready") + count("in_flight"),
            count("dead"),
            text(&s["endpoint"]),
        );
    }
    out
}

fn subscription_table(s: &Value) -> String {
    let mut rows: Vec<(&str, String)> = Vec::new();
    rows.push(("id", s["id"].to_string()));
    rows.push(("queue", or(&s["queue"], "")));
    rows.push(("endpoint", or(&s["endpoint"], "")));
    let enabled = match (&s["enabled"], &s["disabled_reason"]) {
        (Value::Bool(true), _) => "yes".to_owned(),
        (_, Value::String(reason)) => format!("no: {reason}"),
        _ => "no".to_owned(),
    };
    rows.push(("enabled", enabled));
    let policy = native::parse(&s["effective_policy"])
        .map(|p| describe(&p))
        .unwrap_or_else(|_| s["effective_policy"].to_string());
    rows.push((
        "policy",
        format!("{policy} (from the {})", text(&s["policy_source"])),
    ));
    rows.push(("", s["effective_policy"].to_string()));
    rows.push((
        "throttle",
        s["throttle_per_second"]
            .as_u64()
            .map_or_else(|| "none".to_owned(), |n| format!("{n} per second")),
    ));
    rows.push(("content type", or(&s["content_type"], "")));
    rows.push(("secret", or(&s["secret"], "")));
    let headers: Vec<String> = s["headers"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| format!("{name}: {}", text(value)))
        .collect();
    rows.push(("headers", headers.join(", ")));
    rows.push((
        "retried",
        match s["retryable_statuses"].as_array() {
            Some(list) => list
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            None => "5xx, 408, 429, connection errors, timeouts".to_owned(),
        },
    ));
    rows.push(("concurrency", or(&s["max_concurrency"], "endpoint's bound")));
    rows.push((
        "auto-disable",
        match s["auto_disable_after_ms"].as_u64() {
            Some(0) | None => "never".to_owned(),
            Some(ms) => format!("after {} failing", format_duration(ms)),
        },
    ));
    rows.push((
        "retry budget",
        retry_budget(&s["retry_budget"], &s["health"]),
    ));
    rows.push(("format", or(&s["format"], "")));
    rows.push(("health", health(&s["health"])));
    rows.push(("endpoint", endpoint(&s["health"]["endpoint"])));
    let d = &s["deliveries"];
    rows.push((
        "deliveries",
        format!(
            "{} scheduled, {} ready, {} in flight, {} completed, {} dead",
            d["scheduled"], d["ready"], d["in_flight"], d["completed"], d["dead"]
        ),
    ));
    rows.push(("created", or(&s["created_at"], "")));
    rows.push(("updated", or(&s["updated_at"], "")));
    let mut out = String::new();
    for (key, value) in rows {
        let _ = writeln!(out, "{key:<13} {value}");
    }
    out
}

fn retry_budget(budget: &Value, health: &Value) -> String {
    let Some(percent) = budget["percent"].as_u64() else {
        return "none".to_owned();
    };
    let window = budget["window_ms"]
        .as_u64()
        .map_or_else(String::new, format_duration);
    let mut words = format!(
        "retries at most {percent}% of the attempts in any {window} (or {})",
        budget["min_retries"]
    );
    let used = &health["retry_budget"];
    if let (Some(attempts), Some(retries)) = (used["attempts"].as_u64(), used["retries"].as_u64()) {
        let _ = write!(words, "; now {retries} of {attempts} on this server");
    }
    words
}

/// The endpoint's pause and circuit breaker in words.
fn endpoint(e: &Value) -> String {
    let mut words = or(&e["origin"], "");
    if let Some(until) = e["paused_until"].as_str() {
        let _ = write!(
            words,
            "; paused until {} (it answered {})",
            super::terminal::safe(until),
            e["paused_by_status"]
        );
    }
    match e["breaker"].as_str() {
        Some("open") => {
            let _ = write!(
                words,
                "; circuit breaker open until {} ({}; opened {} times in a row)",
                or(&e["breaker_until"], "?"),
                or(&e["breaker_reason"], "failures"),
                e["breaker_trips"]
            );
        }
        Some("half_open") => {
            let _ = write!(words, "; circuit breaker half-open: one probe on its way");
        }
        _ => {
            let _ = write!(words, "; circuit breaker closed");
            if let Some(n) = e["breaker_failures"].as_u64().filter(|n| *n > 0) {
                let _ = write!(words, " ({n} failures in a row here)");
            }
        }
    }
    words
}

fn health(h: &Value) -> String {
    let mut words = if h["healthy"] == false {
        format!("failing since {}", or(&h["failing_since"], "?"))
    } else {
        "ok".to_owned()
    };
    if let Some(n) = h["consecutive_failures"].as_u64().filter(|n| *n > 0) {
        let _ = write!(words, "; {n} failures in a row");
    }
    if let (Some(rate), Some(recent)) = (
        h["recent_failure_rate"].as_f64(),
        h["recent_attempts"].as_u64().filter(|n| *n > 0),
    ) {
        let _ = write!(words, "; {:.0}% of the last {recent} failed", rate * 100.0);
    }
    if let Some(at) = h["last_success_at"].as_str() {
        let _ = write!(words, "; last success {at}");
    }
    words
}
