//! Enqueue, inspect, list, delete jobs; counts per queue.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tenax_policy::spelling::native;
use tenax_policy::{RetryPolicy, parse_policy};

use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::{Millis, Time, check_queue_name};
use super::views::JobView;
use super::{AppState, Limits};
use crate::clock::{UnixMs, rfc3339};
use crate::model::subscription::is_internal_queue;
use crate::model::{NewJob, Status};
use crate::store::{Enqueued, Insert, JobFilter, OnDuplicate, Selection};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/jobs", post(enqueue_one).get(list))
        .route("/jobs/batch", post(enqueue_batch))
        .route("/jobs/{id}", get(show).delete(delete_one))
        .route("/stats", get(stats))
}

/// One job to enqueue.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    pub queue: String,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub payload: Option<Box<RawValue>>,
    #[serde(default)]
    pub priority: i32,
    pub run_at: Option<Time>,
    pub delay: Option<Millis>,
    /// Any spelling of a retry policy.
    pub policy: Option<Value>,
    pub retry_limit: Option<u32>,
    pub unique_key: Option<String>,
    pub on_duplicate: Option<OnDuplicate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub jobs: Vec<EnqueueRequest>,
    #[serde(default)]
    pub on_duplicate: OnDuplicate,
}

/// Turns a request into a store insert, naming fields under `prefix` in errors.
pub(crate) fn to_insert(
    request: EnqueueRequest,
    prefix: &str,
    now_ms: UnixMs,
    limits: &Limits,
    default_policy: &RetryPolicy,
) -> Result<Insert, ApiError> {
    let field = |name: &str| {
        if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}.{name}")
        }
    };
    check_queue_name(&field("queue"), &request.queue)?;
    if request.kind.len() > 128 {
        return Err(ApiError::invalid(
            field("type"),
            "must be at most 128 characters",
        ));
    }
    let payload = match request.payload {
        Some(payload) => payload,
        None => RawValue::from_string("null".into())
            .map_err(|e| ApiError::invalid(field("payload"), e.to_string()))?,
    };
    if payload.get().len() > limits.max_payload_bytes {
        return Err(ApiError::invalid(
            field("payload"),
            format!(
                "must be at most {} bytes of JSON (--max-payload-bytes), got {}",
                limits.max_payload_bytes,
                payload.get().len()
            ),
        ));
    }
    let run_at_ms = match (request.run_at, request.delay) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                field("delay"),
                "give run_at or delay, not both",
            ));
        }
        (Some(Time(at)), None) => at,
        (None, Some(Millis(delay))) => now_ms.saturating_add(delay),
        (None, None) => now_ms,
    };
    if let Some(key) = &request.unique_key {
        if key.is_empty() || key.len() > 256 {
            return Err(ApiError::invalid(
                field("unique_key"),
                "must be 1 to 256 characters",
            ));
        }
    }
    let policy = match request.policy {
        Some(value) => {
            let parsed =
                parse_policy(&value).map_err(|e| ApiError::policy(&field("policy"), &e))?;
            Some(parsed.retry)
        }
        None => None,
    };
    let policy = match (policy, request.retry_limit) {
        (_, Some(limit)) if limit > tenax_policy::MAX_RETRY_LIMIT => {
            return Err(ApiError::invalid(
                field("retry_limit"),
                format!(
                    "must be at most {}, got {limit}",
                    tenax_policy::MAX_RETRY_LIMIT
                ),
            ));
        }
        (Some(policy), Some(limit)) => Some(policy.with_retry_limit(limit)),
        // A job that gives only a retry limit keeps the curve it would otherwise have had
        // (its queue's, else the server's), with that limit.
        (None, Some(limit)) => Some(default_policy.clone().with_retry_limit(limit)),
        (policy, None) => policy,
    };
    let canonical = policy.as_ref().map(native::to_json);
    Ok(Insert {
        job: NewJob {
            queue: request.queue,
            kind: request.kind,
            payload,
            priority: request.priority,
            run_at_ms,
            policy: canonical,
            unique_key: request.unique_key,
            created_at_ms: now_ms,
            expires_at_ms: None,
            origin: None,
        },
        policy: policy.map(Arc::new),
    })
}

/// The answer for one enqueued job. Serialised straight from this struct rather than through a
/// `serde_json::Value` (one map per job); the fields are in the order such a map gave them.
#[derive(Debug, Serialize)]
struct EnqueuedView {
    created: bool,
    id: u64,
    run_at: String,
    status: Status,
}

fn enqueued_view(e: &Enqueued) -> EnqueuedView {
    EnqueuedView {
        created: e.created,
        id: e.id,
        run_at: rfc3339(e.run_at_ms),
        status: e.status,
    }
}

#[derive(Debug, Serialize)]
struct BatchView {
    jobs: Vec<EnqueuedView>,
}

async fn enqueue_one(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<EnqueueRequest>,
) -> Result<(StatusCode, Json<EnqueuedView>), ApiError> {
    let on_duplicate = request.on_duplicate.unwrap_or_default();
    let now = state.engine.now_ms();
    let base = state.engine.base_policy(&request.queue).await;
    let insert = to_insert(request, "", now, &state.limits, &base)?;
    let result = state.engine.enqueue(vec![insert], on_duplicate).await?;
    let first = result
        .first()
        .ok_or_else(|| ApiError::invalid("", "nothing was enqueued"))?;
    let status = if first.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(enqueued_view(first))))
}

async fn enqueue_batch(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<BatchRequest>,
) -> Result<(StatusCode, Json<BatchView>), ApiError> {
    if request.jobs.is_empty() {
        return Err(ApiError::invalid("jobs", "must hold at least one job"));
    }
    let now = state.engine.now_ms();
    let mut inserts = Vec::with_capacity(request.jobs.len());
    for (i, job) in request.jobs.into_iter().enumerate() {
        // Only a job with a bare retry limit needs its queue's policy.
        let base = if job.policy.is_none() && job.retry_limit.is_some() {
            state.engine.base_policy(&job.queue).await
        } else {
            state.engine.settings.default_policy.clone()
        };
        inserts.push(to_insert(
            job,
            &format!("jobs[{i}]"),
            now,
            &state.limits,
            &base,
        )?);
    }
    let result = state.engine.enqueue(inserts, request.on_duplicate).await?;
    let jobs = result.iter().map(enqueued_view).collect();
    Ok((StatusCode::CREATED, Json(BatchView { jobs })))
}

pub(super) fn parse_id(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::invalid(
            "id",
            format!("must be a job id (a whole number), got {text:?}"),
        )
    })
}

async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<JobView>, ApiError> {
    let id = parse_id(&id)?;
    let job = state.engine.store.get(id).await?;
    job.map(|job| Json(JobView::from(job)))
        .ok_or_else(|| ApiError::not_found(format!("job {id} does not exist")))
}

async fn delete_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id)?;
    let deleted = state
        .engine
        .store
        .delete(&Selection {
            ids: Some(vec![id]),
            ..Selection::default()
        })
        .await?;
    if deleted.is_empty() {
        return Err(ApiError::not_found(format!("job {id} does not exist")));
    }
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub queue: Option<String>,
    pub status: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub limit: Option<usize>,
    /// The `next_after` of the previous page.
    pub after: Option<u64>,
}

pub(super) fn filter_from(
    query: &ListQuery,
    status: Option<Status>,
) -> Result<(JobFilter, usize), ApiError> {
    let status = match (&query.status, status) {
        (_, Some(fixed)) => Some(fixed),
        (Some(text), None) => Some(Status::parse(text).ok_or_else(|| {
            ApiError::invalid(
                "status",
                format!(
                    "must be one of scheduled, ready, in_flight, completed, dead; got {text:?}"
                ),
            )
        })?),
        (None, None) => None,
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=1_000).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("must be from 1 to 1000, got {limit}"),
        ));
    }
    Ok((
        JobFilter {
            queue: query.queue.clone(),
            status,
            kind: query.kind.clone(),
            finished_since_ms: None,
        },
        limit,
    ))
}

pub(super) async fn list_page(
    state: &AppState,
    query: &ListQuery,
    status: Option<Status>,
) -> Result<Json<Value>, ApiError> {
    let (filter, limit) = filter_from(query, status)?;
    let jobs = state.engine.store.list(&filter, query.after, limit).await?;
    let next_after = (jobs.len() == limit)
        .then(|| jobs.last().map(|j| j.id))
        .flatten();
    let jobs: Vec<JobView> = jobs.into_iter().map(JobView::from).collect();
    Ok(Json(json!({ "jobs": jobs, "next_after": next_after })))
}

async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid("query", e.body_text()))?;
    list_page(&state, &query, None).await
}

/// Counts per queue and in total. Internal queues (subscriptions' deliveries) are left out:
/// their counts are on each subscription.
async fn stats(State(state): State<AppState>) -> Json<Value> {
    let mut queues = state.engine.store.counts().await;
    queues.retain(|q| !is_internal_queue(&q.queue));
    let mut totals = [0u64; 5];
    for q in &queues {
        for (t, n) in
            totals
                .iter_mut()
                .zip([q.scheduled, q.ready, q.in_flight, q.completed, q.dead])
        {
            *t += n;
        }
    }
    Json(json!({
        "queues": queues,
        "totals": {"scheduled": totals[0], "ready": totals[1], "in_flight": totals[2], "completed": totals[3], "dead": totals[4]},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enqueued_view_encodes_as_the_json_map_it_replaces() {
        for (created, status) in [(true, Status::Ready), (false, Status::Scheduled)] {
            let e = Enqueued {
                id: 42,
                created,
                status,
                run_at_ms: 1_795_260_337_123,
            };
            let map = json!({
                "id": e.id,
                "created": e.created,
                "status": e.status,
                "run_at": rfc3339(e.run_at_ms),
            });
            assert_eq!(
                serde_json::to_string(&enqueued_view(&e)).unwrap(),
                serde_json::to_string(&map).unwrap()
            );
        }
    }
}
