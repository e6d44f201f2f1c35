//! Deliveries and their attempts: list a subscription's deliveries, show one with every
//! attempt, list attempts, and replay dead deliveries (one, or a subscription's since a time).
//!
//! Invariants:
//! - A delivery is a job in its subscription's internal queue; any other job id is a 404 here.
//! - Replay only ever touches dead deliveries of the named subscription (the selection is
//!   narrowed to its queue and to `dead`), and the runners are told afterwards.
//! - Pages are in delivery id order; `next_after` is the cursor for the next page, `null` at the
//!   end.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenax_core::model::subscription::{delivery_queue, subscription_of_queue};
use tenax_core::model::{Job, JobFilter, JobId, Page, Replay, Selection, Status, SubscriptionId};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonOrEmpty, query};
use super::fields::{Time, stored_policy};
use super::jobs::{ListQuery, filter_from};
use super::openapi::{Conflict, Missing, Refusals};
use super::subscription_views::{
    AttemptView, DeliveryView, attempt_view, delivery_view, not_a_delivery,
};
use super::subscriptions::{existing, parse_subscription_id};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(subscription_attempts))
        .routes(routes!(replay_subscription))
        .routes(routes!(show))
        .routes(routes!(delivery_attempts))
        .routes(routes!(replay_one))
}

fn parse_delivery_id(text: &str) -> Result<JobId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::invalid(
            "id",
            format!("must be a delivery id (a whole number), got {text:?}"),
        )
    })
}

/// A page of a subscription's deliveries or attempts.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// Only deliveries in this status.
    #[param(value_type = Option<Status>)]
    status: Option<String>,
    /// The `next_after` of the previous page.
    after: Option<JobId>,
    /// Deliveries per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// A page of deliveries.
#[derive(Debug, Serialize, ToSchema)]
struct DeliveryPage {
    deliveries: Vec<DeliveryView>,
    /// The cursor of the next page (`after`), `null` at the end.
    next_after: Option<JobId>,
}

/// Attempts, oldest first per delivery.
#[derive(Debug, Serialize, ToSchema)]
struct AttemptPage {
    attempts: Vec<AttemptView>,
    /// The cursor of the next page (`after`), `null` at the end.
    next_after: Option<JobId>,
}

/// A delivery's attempts, oldest first.
#[derive(Debug, Serialize, ToSchema)]
struct AttemptList {
    attempts: Vec<AttemptView>,
}

/// Which deliveries a replay made ready again.
#[derive(Debug, Serialize, ToSchema)]
struct ReplayedDeliveries {
    replayed: Vec<JobId>,
}

/// A page of subscription `id`'s deliveries, and the cursor of the next page (the last id when
/// the page is full).
async fn delivery_page(
    state: &AppState,
    id: &str,
    page: &PageQuery,
) -> Result<(Vec<Job>, Option<JobId>), ApiError> {
    let id = existing(state, parse_subscription_id(id)?).await?.id;
    let (filter, limit) = filter_from(
        &ListQuery {
            queue: Some(delivery_queue(id)),
            status: page.status.clone(),
            kind: None,
            limit: page.limit,
            after: page.after,
        },
        None,
    )?;
    let jobs = state
        .engine
        .jobs(&filter, Page::after(page.after, limit))
        .await?;
    let next_after = (jobs.len() == limit)
        .then(|| jobs.last().map(|j| j.id))
        .flatten();
    Ok((jobs, next_after))
}

/// A page of a subscription's deliveries, in id order.
#[utoipa::path(get, path = "/subscriptions/{id}/deliveries", operation_id = "list_deliveries", tag = "deliveries",
    params(("id" = u64, Path, description = "The subscription's id"), PageQuery),
    responses((status = 200, body = DeliveryPage), Missing, Refusals))]
async fn list(
    State(state): State<AppState>,
    Path(id): Path<String>,
    page: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<DeliveryPage>, ApiError> {
    let (jobs, next_after) = delivery_page(&state, &id, &query(page)?).await?;
    let deliveries = jobs
        .into_iter()
        .map(delivery_view)
        .collect::<Result<Vec<DeliveryView>, ApiError>>()?;
    Ok(Json(DeliveryPage {
        deliveries,
        next_after,
    }))
}

/// The attempts of the deliveries in a page: `limit` counts deliveries, so a page holds every
/// attempt of each of its deliveries.
#[utoipa::path(get, path = "/subscriptions/{id}/attempts", operation_id = "list_subscription_attempts", tag = "deliveries",
    params(("id" = u64, Path, description = "The subscription's id"), PageQuery),
    responses((status = 200, body = AttemptPage), Missing, Refusals))]
async fn subscription_attempts(
    State(state): State<AppState>,
    Path(id): Path<String>,
    page: Result<Query<PageQuery>, QueryRejection>,
) -> Result<Json<AttemptPage>, ApiError> {
    let (jobs, next_after) = delivery_page(&state, &id, &query(page)?).await?;
    let mut attempts = Vec::new();
    for job in &jobs {
        attempts.extend(attempts_of(&state, job.id).await?);
    }
    Ok(Json(AttemptPage {
        attempts,
        next_after,
    }))
}

async fn attempts_of(state: &AppState, id: JobId) -> Result<Vec<AttemptView>, ApiError> {
    Ok(state
        .engine
        .attempts(id)
        .await?
        .into_iter()
        .map(|attempt| attempt_view(id, attempt))
        .collect())
}

/// The delivery `id`, or the 404.
async fn delivery(state: &AppState, id: JobId) -> Result<DeliveryView, ApiError> {
    let job = state.engine.job(id).await?;
    job.ok_or_else(|| not_a_delivery(id))
        .and_then(delivery_view)
}

/// One delivery with every attempt.
#[utoipa::path(get, path = "/deliveries/{id}", operation_id = "get_delivery", tag = "deliveries",
    params(("id" = u64, Path, description = "The delivery's id")),
    responses((status = 200, body = DeliveryView), Missing, Refusals))]
async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<DeliveryView>, ApiError> {
    let id = parse_delivery_id(&id)?;
    let mut view = delivery(&state, id).await?;
    view.attempts = Some(attempts_of(&state, id).await?);
    Ok(Json(view))
}

/// A delivery's attempts, oldest first.
#[utoipa::path(get, path = "/deliveries/{id}/attempts", operation_id = "list_delivery_attempts", tag = "deliveries",
    params(("id" = u64, Path, description = "The delivery's id")),
    responses((status = 200, body = AttemptList), Missing, Refusals))]
async fn delivery_attempts(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<AttemptList>, ApiError> {
    let id = parse_delivery_id(&id)?;
    delivery(&state, id).await?;
    Ok(Json(AttemptList {
        attempts: attempts_of(&state, id).await?,
    }))
}

fn reset_by_default() -> bool {
    true
}

/// How to replay one delivery.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReplayOne {
    /// A new policy for the replayed delivery, in any spelling.
    #[schema(value_type = Option<Object>)]
    policy: Option<Value>,
    /// Start the retries again from 1 (default).
    #[serde(default = "reset_by_default")]
    reset_attempts: bool,
}

impl Default for ReplayOne {
    fn default() -> Self {
        Self {
            policy: None,
            reset_attempts: true,
        }
    }
}

/// Which of a subscription's dead deliveries to replay, and how.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReplaySubscription {
    /// Only deliveries that died at or after this time.
    since: Option<Time>,
    /// A new policy for the replayed deliveries, in any spelling.
    #[schema(value_type = Option<Object>)]
    policy: Option<Value>,
    #[serde(default = "reset_by_default")]
    reset_attempts: bool,
}

impl Default for ReplaySubscription {
    fn default() -> Self {
        Self {
            since: None,
            policy: None,
            reset_attempts: true,
        }
    }
}

/// Replays the dead deliveries `selection` names, narrowed to subscription `id`'s.
async fn replay(
    state: &AppState,
    id: SubscriptionId,
    mut selection: Selection,
    policy: Option<Value>,
    reset_attempts: bool,
) -> Result<Vec<JobId>, ApiError> {
    selection.filter.queue = Some(delivery_queue(id));
    selection.filter.status = Some(Status::Dead);
    let policy = policy
        .map(|value| stored_policy("policy", &value))
        .transpose()?;
    let replay = Replay {
        selection,
        policy,
        reset_attempts,
    };
    // The store's ready signal wakes the subscription's runner.
    let replayed = state.engine.replay(&replay).await?;
    Ok(replayed.ids)
}

/// Replays one dead delivery.
#[utoipa::path(post, path = "/deliveries/{id}/replay", operation_id = "replay_delivery", tag = "deliveries",
    params(("id" = u64, Path, description = "The delivery's id")),
    request_body(content = Option<ReplayOne>, description = "May be left out"),
    responses((status = 200, body = ReplayedDeliveries), Missing, Conflict, Refusals))]
async fn replay_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(request): JsonOrEmpty<ReplayOne>,
) -> Result<Json<ReplayedDeliveries>, ApiError> {
    let id = parse_delivery_id(&id)?;
    let job = state
        .engine
        .job(id)
        .await?
        .ok_or_else(|| not_a_delivery(id))?;
    let subscription = subscription_of_queue(&job.spec.queue).ok_or_else(|| not_a_delivery(id))?;
    if job.state.status != Status::Dead {
        return Err(ApiError::conflict(
            "not_dead",
            format!(
                "delivery {id} is {}, not dead: only dead deliveries are replayed",
                job.state.status.name()
            ),
        ));
    }
    let selection = Selection {
        ids: Some(vec![id]),
        filter: JobFilter::default(),
    };
    let ids = replay(
        &state,
        subscription,
        selection,
        request.policy,
        request.reset_attempts,
    )
    .await?;
    Ok(Json(ReplayedDeliveries { replayed: ids }))
}

/// Replays a subscription's dead deliveries (those that died since a time, or all).
#[utoipa::path(post, path = "/subscriptions/{id}/replay", operation_id = "replay_subscription_deliveries", tag = "deliveries",
    params(("id" = u64, Path, description = "The subscription's id")),
    request_body(content = Option<ReplaySubscription>, description = "May be left out"),
    responses((status = 200, body = ReplayedDeliveries), Missing, Refusals))]
async fn replay_subscription(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(request): JsonOrEmpty<ReplaySubscription>,
) -> Result<Json<ReplayedDeliveries>, ApiError> {
    let id = existing(&state, parse_subscription_id(&id)?).await?.id;
    let selection = Selection {
        ids: None,
        filter: JobFilter {
            finished_since_ms: request.since.map(|Time(at)| at),
            ..JobFilter::default()
        },
    };
    let ids = replay(
        &state,
        id,
        selection,
        request.policy,
        request.reset_attempts,
    )
    .await?;
    Ok(Json(ReplayedDeliveries { replayed: ids }))
}
