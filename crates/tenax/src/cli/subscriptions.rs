//! `tenax subscriptions`: subscribe webhook endpoints to queues, and list, show, change and
//! delete subscriptions.
//!
//! Invariants:
//! - Every command is one request to the API (`/api/queues/{queue}/subscriptions`,
//!   `/api/subscriptions/...`); the server checks every field and its error names the field.
//! - `--format json` prints the server's answer; the table is a reading of it
//!   ([`super::subscription_view`]).

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use tenax_client::{EnvelopeFormat, RetryBudgetSettings, RotateSecret, SubscriptionSettings};

use super::client::{Server, ServerArgs, block_on};
use super::output::{Output, print, print_list};
use super::policy::policy_json;
use super::subscription_view::{list_table, subscription_table};
use super::{CliError, parse};

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
        #[arg(long, value_parser = parse::duration)]
        overlap: Option<Duration>,
        #[command(flatten)]
        output: Output,
    },
}

/// The body webhooks POST.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Envelope {
    /// Tenax's envelope (docs/webhooks.md).
    Tenax,
    /// Zaqar's notification body.
    Zaqar,
}

impl From<Envelope> for EnvelopeFormat {
    fn from(envelope: Envelope) -> Self {
        match envelope {
            Envelope::Tenax => Self::Tenax,
            Envelope::Zaqar => Self::Zaqar,
        }
    }
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
    #[arg(long, value_parser = parse::duration)]
    pub auto_disable_after: Option<Duration>,
    /// Cap retries: PERCENT,WINDOW[,MIN_RETRIES] ("20,1m": within any minute, retries are at
    /// most 20 % of the attempts, or 10 whatever the share). Retries over it wait.
    #[arg(long, value_parser = parse_retry_budget)]
    pub retry_budget: Option<RetryBudgetSettings>,
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

/// `PERCENT,WINDOW[,MIN_RETRIES]`, checked here for its shape and by the server for its ranges.
fn parse_retry_budget(text: &str) -> Result<RetryBudgetSettings, String> {
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
    let window = parse::duration(window).map_err(|rule| format!("the window {rule}"))?;
    let budget = RetryBudgetSettings::new(percent, window);
    match min {
        Some(min) => {
            let min: u32 = min
                .parse()
                .map_err(|_| format!("MIN_RETRIES must be a whole number, got {min:?}"))?;
            Ok(budget.min_retries(min))
        }
        None => Ok(budget),
    }
}

fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_owned(), value.to_owned()))
        }
        _ => Err(format!("must be NAME=VALUE, got {text:?}")),
    }
}

/// `settings` onto `request`: what the flags name.
fn with_settings(
    mut request: SubscriptionSettings,
    settings: &Settings,
) -> Result<SubscriptionSettings, CliError> {
    if let Some(policy) = &settings.policy {
        request = request.policy(policy_json(policy)?);
    }
    if let Some(rate) = settings.throttle {
        request = request.throttle_per_second(rate);
    }
    if let Some(secret) = &settings.secret {
        request = request.secret(secret);
    }
    if !settings.headers.is_empty() {
        request = request.headers(settings.headers.iter().cloned().collect::<BTreeMap<_, _>>());
    }
    if let Some(content_type) = &settings.content_type {
        request = request.content_type(content_type);
    }
    if let Some(envelope) = settings.envelope {
        request = request.format(envelope.into());
    }
    if !settings.retryable_statuses.is_empty() {
        request = request.retryable_statuses(settings.retryable_statuses.clone());
    }
    if let Some(max) = settings.max_concurrency {
        request = request.max_concurrency(max);
    }
    if let Some(after) = settings.auto_disable_after {
        request = request.auto_disable_after(after);
    }
    if let Some(budget) = settings.retry_budget {
        request = request.retry_budget(budget);
    }
    Ok(request)
}

pub fn run(command: SubscriptionsCommand) -> Result<(), CliError> {
    block_on(async move {
        match command {
            SubscriptionsCommand::Create(args) => create(&args).await,
            SubscriptionsCommand::List { queue, output } => {
                let server = Server::connect(&output.server)?;
                let subscriptions = match &queue {
                    Some(queue) => server.ask(server.list_queue_subscriptions(queue)).await?,
                    None => server.ask(server.list_subscriptions()).await?,
                };
                print_list("subscriptions", &subscriptions, output.format, list_table)
            }
            SubscriptionsCommand::Show { id, output } => {
                let server = Server::connect(&output.server)?;
                let subscription = server.ask(server.get_subscription(id)).await?;
                print(&subscription, output.format, subscription_table)
            }
            SubscriptionsCommand::Update(args) => update(&args).await,
            SubscriptionsCommand::Delete { id, server } => {
                let server = Server::connect(&server)?;
                let answer = server.ask(server.delete_subscription(id)).await?;
                println!(
                    "deleted subscription {id} and its {} deliveries",
                    answer.deliveries_deleted
                );
                Ok(())
            }
            SubscriptionsCommand::RotateSecret {
                id,
                secret,
                overlap,
                output,
            } => {
                let mut rotation = RotateSecret::new();
                if let Some(secret) = secret {
                    rotation = rotation.secret(secret);
                }
                if let Some(overlap) = overlap {
                    rotation = rotation.overlap(overlap);
                }
                let server = Server::connect(&output.server)?;
                let subscription = server
                    .ask(server.rotate_subscription_secret(id, &rotation))
                    .await?;
                print(&subscription, output.format, subscription_table)
            }
        }
    })
}

async fn create(args: &CreateArgs) -> Result<(), CliError> {
    let mut request = with_settings(
        SubscriptionSettings::endpoint(&args.endpoint),
        &args.settings,
    )?;
    if args.disabled {
        request = request.enabled(false);
    }
    let server = Server::connect(&args.output.server)?;
    let subscription = server
        .ask(server.create_subscription(&args.queue, &request))
        .await?;
    print(&subscription, args.output.format, subscription_table)
}

async fn update(args: &UpdateArgs) -> Result<(), CliError> {
    let mut request = with_settings(SubscriptionSettings::changes(), &args.settings)?;
    if let Some(endpoint) = &args.endpoint {
        request = request.set_endpoint(endpoint);
    }
    if args.no_policy {
        request = request.reset_policy();
    }
    if args.no_retry_budget {
        request = request.reset_retry_budget();
    }
    if args.enable || args.disable {
        request = request.enabled(args.enable);
    }
    let server = Server::connect(&args.output.server)?;
    let subscription = server
        .ask(server.update_subscription(args.id, &request))
        .await?;
    print(&subscription, args.output.format, subscription_table)
}
