//! Queues: settings (default policy, whether subscriptions may override it, limits), pause and
//! resume.
//!
//! Internal queues (a subscription's deliveries) are never listed: their names cannot be asked
//! for (see `check_queue_name`) and their counts are shown on the subscription.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenax_core::auth::Principal;
use tenax_core::model::pool::{self, PoolError};
use tenax_core::model::{
    LimitUse, QueueConfig, QueueCounts, RateLimit, StoredPolicy, subscription::is_internal_queue,
};
use tenax_policy::parse_policy;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, query};
use super::fields::check_queue_name;
use super::openapi::{Missing, Refusals};

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
    /// At most this many of the queue's jobs in flight at once (across every worker and
    /// server); compare `counts.in_flight`. Shown only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    concurrency: Option<u32>,
    /// At most `limit` jobs start in any `period_ms`. Shown only when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<RateView>,
    /// Payloads enqueued from now on are stored encrypted (docs/security.md). Shown only when
    /// set.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    encrypt_payloads: bool,
    /// On a pooled deployment, the flavor whose pools the queue is placed on. Shown only when
    /// set.
    #[serde(skip_serializing_if = "Option::is_none")]
    flavor: Option<String>,
}

/// A rate limit, and how much of it the current period has used.
#[derive(Debug, Serialize, ToSchema)]
struct RateView {
    limit: u32,
    period_ms: u64,
    /// Jobs started in the last `period_ms`, as takes count them (in buckets of a sixtieth of
    /// the period; docs/api.md).
    used: u64,
}

/// Jobs by status.
#[derive(Debug, Default, Serialize, ToSchema)]
struct Counts {
    scheduled: u64,
    ready: u64,
    in_flight: u64,
    completed: u64,
    dead: u64,
    cancelled: u64,
    waiting: u64,
}

/// Every queue with settings or jobs.
#[derive(Debug, Serialize, ToSchema)]
struct QueueList {
    queues: Vec<QueueView>,
}

fn view(
    name: &str,
    config: &QueueConfig,
    counts: Option<&QueueCounts>,
    used: &LimitUse,
) -> QueueView {
    let counts = counts.map_or_else(Counts::default, |c| Counts {
        scheduled: c.scheduled,
        ready: c.ready,
        in_flight: c.in_flight,
        completed: c.completed,
        dead: c.dead,
        cancelled: c.cancelled,
        waiting: c.waiting,
    });
    QueueView {
        name: name.to_owned(),
        paused: config.paused,
        policy: config.policy.as_ref().map(|p| p.json().clone()),
        counts,
        disable_overrides: config.disable_overrides,
        message_ttl_ms: config.message_ttl_ms,
        concurrency: config.concurrency,
        rate: config.rate.map(|rate| RateView {
            limit: rate.limit,
            period_ms: rate.period_ms,
            used: used.started,
        }),
        encrypt_payloads: config.encrypt_payloads,
        flavor: config.flavor.clone(),
    }
}

/// Every queue with settings or jobs (that the token may touch).
#[utoipa::path(get, path = "/queues", operation_id = "list_queues", tag = "queues",
    responses((status = 200, body = QueueList), Refusals))]
async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<QueueList>, ApiError> {
    let counts = state.engine.counts().await?;
    let mut queues = Vec::new();
    for (name, config) in state.engine.queues().await? {
        if is_internal_queue(&name) || !principal.admits_queue(&name) {
            continue;
        }
        let used = if config.rate.is_some() {
            state.engine.limit_use(&name).await?
        } else {
            LimitUse::default()
        };
        let counts = counts.iter().find(|c| c.queue == name);
        queues.push(view(&name, &config, counts, &used));
    }
    Ok(Json(QueueList { queues }))
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
    let config = state.engine.queue(&name).await?.unwrap_or_default();
    shown(&state, &name, &config).await
}

/// The view of queue `name` with `config`, and its counts as they are now.
async fn shown(
    state: &AppState,
    name: &str,
    config: &QueueConfig,
) -> Result<Json<QueueView>, ApiError> {
    let counts = state.engine.queue_counts(name).await?;
    let used = if config.rate.is_some() {
        state.engine.limit_use(name).await?
    } else {
        LimitUse::default()
    };
    Ok(Json(view(name, config, Some(&counts), &used)))
}

/// New settings; omitted fields keep their value, `"policy": null` removes the policy.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateQueue {
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
    /// At most this many of the queue's jobs in flight at once, across every worker and
    /// server (1 to 1 000 000); `null` removes the limit.
    #[serde(default, deserialize_with = "present_any")]
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 1_000_000)]
    pub(crate) concurrency: Option<Option<u32>>,
    /// At most `limit` of the queue's jobs start in any `period`; `null` removes the limit.
    #[serde(default, deserialize_with = "present_any")]
    #[schema(value_type = Option<RateRequest>)]
    pub(crate) rate: Option<Option<RateRequest>>,
    /// Store the payloads enqueued from now on encrypted with the server's key (and their
    /// webhook deliveries); every read shows them plain. Payloads already stored stay as
    /// they were stored (docs/security.md#encrypted-queues).
    pub(crate) encrypt_payloads: Option<bool>,
    /// On a pooled deployment: place the queue on one of this flavor's pools (when it is first
    /// written to; a queue keeps its pool, so a queue placed elsewhere refuses it with 409).
    pub(crate) flavor: Option<String>,
}

/// A rate limit: at most `limit` jobs start in any `period`.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RateRequest {
    /// 1 to 1 000 000 000.
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub(crate) limit: u32,
    /// At least 1 ms (`"1s"`, `"1m"`, `"1h"`, `"1d"`).
    #[schema(value_type = super::fields::Millis)]
    pub(crate) period: super::fields::Millis,
}

/// Tells `"field": null` (remove) from an absent field (keep).
fn present_any<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Ok(Some(Option::<T>::deserialize(deserializer)?))
}

/// The most jobs of a queue in flight a concurrency limit may name.
const MAX_CONCURRENCY: u32 = 1_000_000;
/// The most starts per period a rate limit may name.
const MAX_RATE: u32 = 1_000_000_000;

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

/// A checked change to a queue's settings: what to set, leaving the rest as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueChange {
    policy: Option<Option<StoredPolicy>>,
    paused: Option<bool>,
    disable_overrides: Option<bool>,
    message_ttl_ms: Option<Option<u64>>,
    concurrency: Option<Option<u32>>,
    rate: Option<Option<RateLimit>>,
    encrypt_payloads: Option<bool>,
    flavor: Option<String>,
}

impl QueueChange {
    /// The settings after the change, from the stored ones (the defaults if none).
    pub fn applied(&self, current: Option<&QueueConfig>) -> QueueConfig {
        let mut config = current.cloned().unwrap_or_default();
        if let Some(policy) = &self.policy {
            config.policy.clone_from(policy);
        }
        if let Some(paused) = self.paused {
            config.paused = paused;
        }
        if let Some(forbid) = self.disable_overrides {
            config.disable_overrides = forbid;
        }
        if let Some(ttl) = self.message_ttl_ms {
            config.message_ttl_ms = ttl;
        }
        if let Some(concurrency) = self.concurrency {
            config.concurrency = concurrency;
        }
        if let Some(rate) = self.rate {
            config.rate = rate;
        }
        if let Some(encrypt) = self.encrypt_payloads {
            config.encrypt_payloads = encrypt;
        }
        if let Some(flavor) = &self.flavor {
            config.flavor = Some(flavor.clone());
        }
        config
    }
}

/// Checks an update's fields: all of them, before anything is stored. Pure, so the fuzz
/// targets run it too.
pub fn queue_change(request: UpdateQueue) -> Result<QueueChange, ApiError> {
    let message_ttl_ms = match request.message_ttl {
        Some(Some(super::fields::Millis(0))) => {
            return Err(ApiError::invalid(
                "message_ttl",
                "must be above 0 (null removes it)",
            ));
        }
        ttl => ttl.map(|ttl| ttl.map(|t| t.0)),
    };
    let mut policy_forbids = false;
    let policy = match request.policy {
        Some(Some(value)) => {
            let parsed = parse_policy(&value).map_err(|e| ApiError::policy("policy", &e))?;
            policy_forbids = parsed.disable_overrides;
            Some(Some(StoredPolicy::new(parsed.retry)))
        }
        Some(None) => Some(None),
        None => None,
    };
    let disable_overrides = match (request.disable_overrides, policy_forbids) {
        (Some(false), true) => {
            return Err(ApiError::invalid(
                "disable_overrides",
                "must not be false when the policy forbids subscription overrides \
                 (disableSubscriptionOverrides / ignore_subscription_override)",
            ));
        }
        (Some(given), _) => Some(given),
        (None, true) => Some(true),
        (None, false) => None,
    };
    let concurrency = match request.concurrency {
        Some(Some(n)) if !(1..=MAX_CONCURRENCY).contains(&n) => {
            return Err(ApiError::invalid(
                "concurrency",
                format!(
                    "must be 1 to {MAX_CONCURRENCY} jobs in flight, got {n} (null removes the \
                     limit; pause stops the queue)"
                ),
            ));
        }
        concurrency => concurrency,
    };
    let rate = match request.rate {
        Some(Some(rate)) => Some(Some(check_rate(rate)?)),
        Some(None) => Some(None),
        None => None,
    };
    if let Some(flavor) = &request.flavor
        && let Err(PoolError::Invalid { rule, .. }) = pool::check_name("flavor", flavor)
    {
        return Err(ApiError::invalid("flavor", rule));
    }
    Ok(QueueChange {
        policy,
        paused: request.paused,
        disable_overrides,
        message_ttl_ms,
        concurrency,
        rate,
        encrypt_payloads: request.encrypt_payloads,
        flavor: request.flavor,
    })
}

fn check_rate(rate: RateRequest) -> Result<RateLimit, ApiError> {
    if !(1..=MAX_RATE).contains(&rate.limit) {
        return Err(ApiError::invalid(
            "rate.limit",
            format!(
                "must be 1 to {MAX_RATE} jobs per period, got {} (null for rate removes the \
                 limit)",
                rate.limit
            ),
        ));
    }
    if rate.period.0 == 0 {
        return Err(ApiError::invalid(
            "rate.period",
            "must be at least 1 ms (\"1s\", \"1m\", \"1h\")",
        ));
    }
    Ok(RateLimit {
        limit: rate.limit,
        period_ms: rate.period.0,
    })
}

/// Whether a change may make the queue: a queue that has never existed is a 404 naming the
/// queues closest to it (a misspelt name), unless the request says `?create=true`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct Creating {
    /// Make the queue if it has never existed (default false).
    #[serde(default)]
    create: bool,
}

/// Stores `change` atomically (a concurrent pause and settings update both hold) and answers
/// with the queue as it is then.
async fn change_queue(
    state: &AppState,
    principal: &Principal,
    name: &str,
    creating: Creating,
    change: QueueChange,
) -> Result<Json<QueueView>, ApiError> {
    check_queue_name("name", name)?;
    if !creating.create {
        // The closest names offered are only those the token may touch.
        state
            .engine
            .require_queue(name, |queue| principal.admits_queue(queue))
            .await?;
    }
    let config = state
        .engine
        .update_queue(name, |current| {
            Ok::<_, ApiError>(Some(change.applied(current)))
        })
        .await?
        .unwrap_or_default();
    shown(state, name, &config).await
}

/// Changes a queue's settings. A queue that has never existed is a 404 naming the closest
/// ones, unless `?create=true`.
#[utoipa::path(put, path = "/queues/{name}", operation_id = "update_queue", tag = "queues",
    params(("name" = String, Path, description = "The queue"), Creating),
    request_body = UpdateQueue,
    responses((status = 200, body = QueueView), Refusals, Missing))]
async fn update(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
    creating: Result<Query<Creating>, QueryRejection>,
    JsonBody(request): JsonBody<UpdateQueue>,
) -> Result<Json<QueueView>, ApiError> {
    check_queue_name("name", &name)?;
    let change = queue_change(request)?;
    if let Some(flavor) = &change.flavor
        && !state
            .engine
            .flavors()
            .await?
            .iter()
            .any(|f| &f.name == flavor)
    {
        return Err(ApiError::invalid(
            "flavor",
            format!(
                "flavor {flavor:?} does not exist (flavors group the pools of a deployment on \
                 PostgreSQL: docs/postgres.md)"
            ),
        ));
    }
    change_queue(&state, &principal, &name, query(creating)?, change).await
}

async fn set_paused(
    state: AppState,
    principal: Principal,
    name: String,
    creating: Result<Query<Creating>, QueryRejection>,
    paused: bool,
) -> Result<Json<QueueView>, ApiError> {
    let change = QueueChange {
        paused: Some(paused),
        ..QueueChange::default()
    };
    change_queue(&state, &principal, &name, query(creating)?, change).await
}

/// Pauses a queue: it accepts jobs but hands none out. A queue that has never existed is a
/// 404 naming the closest ones, unless `?create=true`.
#[utoipa::path(post, path = "/queues/{name}/pause", operation_id = "pause_queue", tag = "queues",
    params(("name" = String, Path, description = "The queue"), Creating),
    responses((status = 200, body = QueueView), Refusals, Missing))]
async fn pause(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
    creating: Result<Query<Creating>, QueryRejection>,
) -> Result<Json<QueueView>, ApiError> {
    set_paused(state, principal, name, creating, true).await
}

/// Resumes a paused queue. A queue that has never existed is a 404 naming the closest ones,
/// unless `?create=true`.
#[utoipa::path(post, path = "/queues/{name}/resume", operation_id = "resume_queue", tag = "queues",
    params(("name" = String, Path, description = "The queue"), Creating),
    responses((status = 200, body = QueueView), Refusals, Missing))]
async fn resume(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
    creating: Result<Query<Creating>, QueryRejection>,
) -> Result<Json<QueueView>, ApiError> {
    set_paused(state, principal, name, creating, false).await
}
