//! Queues: settings (default policy, whether subscriptions may override it), pause and resume.
//!
//! Internal queues (a subscription's deliveries) are never listed: their names cannot be asked
//! for (see `check_queue_name`) and their counts are shown on the subscription.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use tenax_policy::parse_policy;
use tenax_policy::spelling::native;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::check_queue_name;
use crate::model::subscription::is_internal_queue;
use crate::store::{QueueConfig, QueueCounts};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/queues", get(list))
        .route("/queues/{name}", get(show).put(update))
        .route("/queues/{name}/pause", post(pause))
        .route("/queues/{name}/resume", post(resume))
}

fn view(name: &str, config: &QueueConfig, counts: Option<&QueueCounts>) -> Value {
    let zero = QueueCounts {
        queue: name.to_owned(),
        scheduled: 0,
        ready: 0,
        in_flight: 0,
        completed: 0,
        dead: 0,
    };
    let counts = counts.unwrap_or(&zero);
    let mut view = json!({
        "name": name,
        "paused": config.paused,
        "policy": config.policy,
        "counts": {
            "scheduled": counts.scheduled, "ready": counts.ready, "in_flight": counts.in_flight,
            "completed": counts.completed, "dead": counts.dead,
        },
    });
    // Shown only when set, as it is stored: most queues have no subscriptions.
    if config.disable_overrides {
        view["disable_overrides"] = json!(true);
    }
    if let Some(ttl) = config.message_ttl_ms {
        view["message_ttl_ms"] = json!(ttl);
    }
    view
}

async fn list(State(state): State<AppState>) -> Json<Value> {
    let counts = state.engine.store.counts().await;
    let queues: Vec<Value> = state
        .engine
        .store
        .queues()
        .await
        .iter()
        .filter(|(name, _)| !is_internal_queue(name))
        .map(|(name, config)| view(name, config, counts.iter().find(|c| &c.queue == name)))
        .collect();
    Json(json!({ "queues": queues }))
}

async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateQueue {
    #[serde(default, deserialize_with = "present")]
    pub(crate) policy: Option<Option<Value>>,
    pub(crate) paused: Option<bool>,
    /// The queue's policy applies to every subscription, whatever the subscription's own. Also
    /// set by a policy that says so (SNS `disableSubscriptionOverrides`, Zaqar
    /// `ignore_subscription_override`).
    pub(crate) disable_overrides: Option<bool>,
    /// New jobs are deleted this long after enqueue unless done sooner; `null` removes it.
    #[serde(default, deserialize_with = "present_millis")]
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

async fn update(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<UpdateQueue>,
) -> Result<Json<Value>, ApiError> {
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

async fn set_paused(state: AppState, name: String, paused: bool) -> Result<Json<Value>, ApiError> {
    check_queue_name("name", &name)?;
    let mut config = state.engine.store.queue(&name).await.unwrap_or_default();
    config.paused = paused;
    let policy = existing_policy(&config)?;
    state.engine.store.put_queue(&name, config, policy).await?;
    show(State(state), Path(name)).await
}

async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_paused(state, name, true).await
}

async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_paused(state, name, false).await
}
