//! Queues: settings (default policy, whether subscriptions may override it), pause and resume.
//!
//! Internal queues (a subscription's deliveries) are never listed: their names cannot be asked
//! for (see `check_queue_name`) and their counts are shown on the subscription.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenax_policy::parse_policy;
use tenax_policy::spelling::native;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::check_queue_name;
use super::openapi::Refusals;
use crate::auth::Principal;
use crate::model::subscription::is_internal_queue;
use crate::store::{QueueConfig, QueueCounts};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, update))
        .routes(routes!(pause))
        .routes(routes!(resume))
}

/// A queue: its settings and its jobs by status.
#[derive(Debug, Serialize, ToSchema)]
struct QueueView {
    name: String,
    paused: bool,
    /// The queue's policy, canonical native JSON; `null` when it has none.
    #[schema(value_type = Option<Object>)]
    policy: Option<Value>,
    counts: Counts,
    /// Shown only when set: the queue's policy applies to every subscription.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    disable_overrides: bool,
    /// Shown only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    message_ttl_ms: Option<u64>,
}

/// Jobs by status.
#[derive(Debug, Default, Serialize, ToSchema)]
struct Counts {
    scheduled: u64,
    ready: u64,
    in_flight: u64,
    completed: u64,
    dead: u64,
}

/// Every queue with settings or jobs.
#[derive(Debug, Serialize, ToSchema)]
struct QueueList {
    queues: Vec<QueueView>,
}

fn view(name: &str, config: &QueueConfig, counts: Option<&QueueCounts>) -> QueueView {
    let counts = counts.map_or_else(Counts::default, |c| Counts {
        scheduled: c.scheduled,
        ready: c.ready,
        in_flight: c.in_flight,
        completed: c.completed,
        dead: c.dead,
    });
    QueueView {
        name: name.to_owned(),
        paused: config.paused,
        policy: config.policy.clone(),
        counts,
        disable_overrides: config.disable_overrides,
        message_ttl_ms: config.message_ttl_ms,
    }
}

/// Every queue with settings or jobs (that the token may touch).
#[utoipa::path(get, path = "/queues", operation_id = "list_queues", tag = "queues",
    responses((status = 200, body = QueueList), Refusals))]
async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Json<QueueList> {
    let counts = state.engine.store.counts().await;
    let queues: Vec<QueueView> = state
        .engine
        .store
        .queues()
        .await
        .iter()
        .filter(|(name, _)| !is_internal_queue(name) && principal.queues.admits(name))
        .map(|(name, config)| view(name, config, counts.iter().find(|c| &c.queue == name)))
        .collect();
    Json(QueueList { queues })
}

/// One queue: its settings (the defaults if it has none) and its counts.
#[utoipa::path(get, path = "/queues/{name}", operation_id = "get_queue", tag = "queues",
    params(("name" = String, Path, description = "The queue")),
    responses((status = 200, body = QueueView), Refusals))]
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<QueueView>, ApiError> {
    check_queue_name("name", &name)?;
    let config = state.engine.store.queue(&name).await.unwrap_or_default();
    let counts = state.engine.store.counts().await;
    Ok(Json(view(
        &name,
        &config,
        counts.iter().find(|c| c.queue == name),
    )))
}

/// New settings; omitted fields keep their value, `"policy": null` removes the policy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateQueue {
    /// The queue's policy, in any spelling; `null` removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub(crate) policy: Option<Option<Value>>,
    pub(crate) paused: Option<bool>,
    /// The queue's policy applies to every subscription, whatever the subscription's own. Also
    /// set by a policy that says so (SNS `disableSubscriptionOverrides`, Zaqar
    /// `ignore_subscription_override`).
    pub(crate) disable_overrides: Option<bool>,
    /// New jobs are deleted this long after enqueue unless done sooner; `null` removes it.
    #[serde(default, deserialize_with = "present_millis")]
    #[schema(value_type = Option<super::fields::Millis>)]
    pub(crate) message_ttl: Option<Option<super::fields::Millis>>,
}

/// Tells `"message_ttl": null` (remove) from an absent field (keep).
fn present_millis<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<super::fields::Millis>>, D::Error> {
    Ok(Some(Option::<super::fields::Millis>::deserialize(
        deserializer,
    )?))
}

/// Tells `"policy": null` (remove) from an absent field (keep).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<Value>>, D::Error> {
    Ok(Some(Option::<Value>::deserialize(deserializer)?))
}

/// Changes a queue's settings.
#[utoipa::path(put, path = "/queues/{name}", operation_id = "update_queue", tag = "queues",
    params(("name" = String, Path, description = "The queue")),
    request_body = UpdateQueue,
    responses((status = 200, body = QueueView), Refusals))]
async fn update(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<UpdateQueue>,
) -> Result<Json<QueueView>, ApiError> {
    check_queue_name("name", &name)?;
    let mut config = state.engine.store.queue(&name).await.unwrap_or_default();
    if let Some(paused) = request.paused {
        config.paused = paused;
    }
    match request.message_ttl {
        Some(Some(super::fields::Millis(0))) => {
            return Err(ApiError::invalid(
                "message_ttl",
                "must be above 0 (null removes it)",
            ));
        }
        Some(ttl) => config.message_ttl_ms = ttl.map(|t| t.0),
        None => {}
    }
    let mut policy_forbids = false;
    let parsed = match request.policy {
        Some(Some(value)) => {
            let parsed = parse_policy(&value).map_err(|e| ApiError::policy("policy", &e))?;
            policy_forbids = parsed.disable_overrides;
            let policy = parsed.retry;
            config.policy = Some(native::to_json(&policy));
            Some(Arc::new(policy))
        }
        Some(None) => {
            config.policy = None;
            None
        }
        None => existing_policy(&config)?,
    };
    match (request.disable_overrides, policy_forbids) {
        (Some(false), true) => {
            return Err(ApiError::invalid(
                "disable_overrides",
                "must not be false when the policy forbids subscription overrides \
                 (disableSubscriptionOverrides / ignore_subscription_override)",
            ));
        }
        (Some(given), _) => config.disable_overrides = given,
        (None, true) => config.disable_overrides = true,
        (None, false) => {}
    }
    state.engine.store.put_queue(&name, config, parsed).await?;
    // The delivery policy of the queue's subscriptions may have changed.
    state.deliveries.subscription_changed();
    show(State(state), Path(name)).await
}

fn existing_policy(
    config: &QueueConfig,
) -> Result<Option<Arc<tenax_policy::RetryPolicy>>, ApiError> {
    config
        .policy
        .as_ref()
        .map(|v| {
            native::parse(v)
                .map(Arc::new)
                .map_err(|e| ApiError::policy("policy", &e))
        })
        .transpose()
}

async fn set_paused(
    state: AppState,
    name: String,
    paused: bool,
) -> Result<Json<QueueView>, ApiError> {
    check_queue_name("name", &name)?;
    let mut config = state.engine.store.queue(&name).await.unwrap_or_default();
    config.paused = paused;
    let policy = existing_policy(&config)?;
    state.engine.store.put_queue(&name, config, policy).await?;
    show(State(state), Path(name)).await
}

/// Pauses a queue: it accepts jobs but hands none out.
#[utoipa::path(post, path = "/queues/{name}/pause", operation_id = "pause_queue", tag = "queues",
    params(("name" = String, Path, description = "The queue")),
    responses((status = 200, body = QueueView), Refusals))]
async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<QueueView>, ApiError> {
    set_paused(state, name, true).await
}

/// Resumes a paused queue.
#[utoipa::path(post, path = "/queues/{name}/resume", operation_id = "resume_queue", tag = "queues",
    params(("name" = String, Path, description = "The queue")),
    responses((status = 200, body = QueueView), Refusals))]
async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<QueueView>, ApiError> {
    set_paused(state, name, false).await
}
