//! Response shapes of subscriptions, deliveries and delivery attempts.
//!
//! Invariants:
//! - Every field is always present; a field without a value is `null` (never left out), so a
//!   client can tell "unset" from "not shown".
//! - `effective_policy` and `policy_source` say what the store really applies: a queue that
//!   forbids overrides imposes its own policy, or the server's delivery default when it has none.
//! - A delivery view is only made of a job in a subscription's internal queue whose payload is a
//!   [`DeliveryPayload`]; anything else is "not a delivery".

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use tenax_core::clock::rfc3339;
use tenax_core::engine::PolicyOwner;
use tenax_core::model::QueueCounts;
use tenax_core::model::subscription::{REDACTED, subscription_of_queue};
use tenax_core::model::{
    Attempt, AttemptResult, DeliveryPayload, EnvelopeFormat, Job, JobId, RetryBudget, Status,
    Subscription, SubscriptionId, Trigger,
};
use tenax_policy::spelling::native;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use crate::delivery::HealthView;

/// Where a subscription's effective delivery policy comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PolicySource {
    Subscription,
    Queue,
    Server,
}

impl From<Option<PolicyOwner>> for PolicySource {
    fn from(owner: Option<PolicyOwner>) -> Self {
        match owner {
            Some(PolicyOwner::Subscription) => Self::Subscription,
            Some(PolicyOwner::Queue) => Self::Queue,
            None => Self::Server,
        }
    }
}

/// A subscription's deliveries by status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct DeliveryCounts {
    pub scheduled: u64,
    pub ready: u64,
    pub in_flight: u64,
    pub completed: u64,
    pub dead: u64,
    pub cancelled: u64,
    /// Always 0 (a delivery waits for no job): every count of jobs by status has every status.
    pub waiting: u64,
}

impl From<QueueCounts> for DeliveryCounts {
    fn from(counts: QueueCounts) -> Self {
        Self {
            scheduled: counts.scheduled,
            ready: counts.ready,
            in_flight: counts.in_flight,
            completed: counts.completed,
            dead: counts.dead,
            cancelled: counts.cancelled,
            waiting: counts.waiting,
        }
    }
}

/// A subscription as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SubscriptionView {
    pub id: SubscriptionId,
    pub queue: String,
    pub endpoint: String,
    pub enabled: bool,
    /// Whether its subscriber confirmed it (Zaqar's confirmation, `--zaqar-require-confirmation`):
    /// messages are delivered only to a confirmed subscription.
    pub confirmed: bool,
    /// Why it was disabled automatically; `null` when enabled or disabled by request.
    pub disabled_reason: Option<String>,
    /// Its own policy, canonical native JSON.
    #[schema(value_type = Option<Object>)]
    pub policy: Option<Value>,
    /// The policy its deliveries follow, every default filled in.
    #[schema(value_type = Object)]
    pub effective_policy: Value,
    pub policy_source: PolicySource,
    pub throttle_per_second: Option<u32>,
    pub content_type: String,
    /// The signing secret: shown only in the answer to the request that set it (create,
    /// rotate-secret); `[redacted]` everywhere else.
    pub secret: String,
    /// Extra request headers; their values are shown only in the answer to a create.
    pub headers: BTreeMap<String, String>,
    /// While a rotated-out secret still signs deliveries (beside the new one): until when.
    pub previous_secret_until: Option<String>,
    /// `null`: the default (every 5xx, 408 and 429).
    pub retryable_statuses: Option<Vec<u16>>,
    pub max_concurrency: Option<u32>,
    /// The subscription's own, else the server's; 0 is never.
    pub auto_disable_after_ms: u64,
    /// `null`: retries are not capped.
    pub retry_budget: Option<RetryBudgetView>,
    pub format: EnvelopeFormat,
    pub created_at: String,
    pub updated_at: String,
    pub health: HealthView,
    pub deliveries: DeliveryCounts,
}

/// A retry budget as stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct RetryBudgetView {
    pub percent: u32,
    pub window_ms: u64,
    pub min_retries: u32,
}

impl From<RetryBudget> for RetryBudgetView {
    fn from(budget: RetryBudget) -> Self {
        Self {
            percent: budget.percent,
            window_ms: budget.window_ms,
            min_retries: budget.min_retries,
        }
    }
}

/// Whether a view may show the subscription's secret and header values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Only in the answer to the request that set them.
    Reveal,
    Redact,
}

/// The view of `subscription`, with its effective policy, health and delivery counts.
pub async fn subscription_view(
    state: &AppState,
    subscription: Subscription,
    secrets: Secrets,
) -> Result<SubscriptionView, ApiError> {
    let engine = &state.engine;
    let (effective, owner) = engine.effective_delivery_policy(&subscription).await?;
    let counts = engine.delivery_counts(subscription.id).await?;
    let health = state.deliveries.health(engine, &subscription).await?;
    let previous_secret_until = subscription
        .previous_secret_at(engine.now_ms())
        .and(subscription.previous_secret_until_ms)
        .map(rfc3339);
    Ok(SubscriptionView {
        policy_source: PolicySource::from(owner),
        effective_policy: native::to_json(&effective),
        auto_disable_after_ms: subscription
            .auto_disable_after_ms
            .unwrap_or(state.deliveries.config.auto_disable_after_ms),
        created_at: rfc3339(subscription.created_at_ms),
        updated_at: rfc3339(subscription.updated_at_ms),
        health,
        deliveries: DeliveryCounts::from(counts),
        id: subscription.id,
        queue: subscription.queue,
        endpoint: subscription.endpoint,
        enabled: subscription.enabled,
        confirmed: subscription.confirmed,
        disabled_reason: subscription.disabled_reason,
        policy: subscription.policy.map(|p| p.json().clone()),
        throttle_per_second: subscription.throttle_per_second,
        content_type: subscription.content_type,
        previous_secret_until,
        secret: match secrets {
            Secrets::Reveal => subscription.secret,
            Secrets::Redact => REDACTED.to_owned(),
        },
        headers: match secrets {
            Secrets::Reveal => subscription.headers,
            Secrets::Redact => subscription
                .headers
                .into_keys()
                .map(|name| (name, REDACTED.to_owned()))
                .collect(),
        },
        retryable_statuses: subscription.retryable_statuses,
        max_concurrency: subscription.max_concurrency,
        retry_budget: subscription.retry_budget.map(RetryBudgetView::from),
        format: subscription.format,
    })
}

/// A delivery: one message for one subscription.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: JobId,
    pub subscription: SubscriptionId,
    pub message_id: JobId,
    /// The message's queue.
    pub queue: String,
    /// The message's type.
    #[serde(rename = "type")]
    pub kind: String,
    pub status: Status,
    /// Failed attempts so far.
    pub failures: u32,
    /// Scheduled: when the next attempt is due. Otherwise when it last became ready.
    pub run_at: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub dead_reason: Option<String>,
    /// Its own policy (given at a replay), canonical native JSON.
    #[schema(value_type = Option<Object>)]
    pub policy: Option<Value>,
    /// Every attempt, oldest first; only on a single delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptView>>,
}

/// The view of `job` if it is a delivery; `Err` is the 404 (or the unreadable payload).
pub fn delivery_view(job: Job) -> Result<DeliveryView, ApiError> {
    let Some(subscription) = subscription_of_queue(&job.spec.queue) else {
        return Err(not_a_delivery(job.id));
    };
    let carried: DeliveryPayload = serde_json::from_str(job.spec.payload.get()).map_err(|e| {
        tracing::error!(id = job.id.0, error = %e, "a delivery's payload is unreadable");
        ApiError {
            status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            code: "corrupt",
            field: None,
            message: format!("delivery {} has an unreadable payload: {e}", job.id),
        }
    })?;
    Ok(DeliveryView {
        id: job.id,
        subscription,
        message_id: carried.message_id(job.spec.parent),
        queue: carried.queue,
        kind: carried.kind,
        status: job.state.status,
        failures: job.state.failures,
        run_at: rfc3339(job.state.run_at_ms),
        created_at: rfc3339(job.spec.created_at_ms),
        finished_at: job.state.finished_at_ms.map(rfc3339),
        dead_reason: job.state.dead_reason,
        policy: job.spec.policy.map(|p| p.json().clone()),
        attempts: None,
    })
}

/// The 404 for an id that is not a delivery's.
pub fn not_a_delivery(id: JobId) -> ApiError {
    ApiError::not_found(format!("there is no delivery {id}"))
}

/// One recorded POST of a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptView {
    pub delivery: JobId,
    /// The delivery's run number, from 1.
    pub attempt: u32,
    /// What started the attempt: its schedule (the first try, or a retry by the policy), a
    /// replay of the dead delivery, or an operator (run now, a test event).
    pub trigger: Trigger,
    pub at: String,
    pub latency_ms: u64,
    pub result: AttemptResult,
    /// The HTTP status, when a response came.
    pub status: Option<u16>,
    /// The connection or timeout error, when no response came.
    pub error: Option<String>,
    /// The start of the response body.
    pub response: Option<String>,
    /// The `Retry-After` the endpoint asked for, in ms.
    pub retry_after_ms: Option<u64>,
}

pub fn attempt_view(delivery: JobId, attempt: Attempt) -> AttemptView {
    AttemptView {
        delivery,
        attempt: attempt.attempt,
        trigger: attempt.trigger,
        at: rfc3339(attempt.at_ms),
        latency_ms: attempt.latency_ms,
        result: attempt.result,
        status: attempt.status,
        error: attempt.error,
        response: attempt.response,
        retry_after_ms: attempt.retry_after_ms,
    }
}
