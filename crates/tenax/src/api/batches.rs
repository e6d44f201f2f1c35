//! Batches: jobs counted together, with callback jobs enqueued once every one has finished
//! (`on_complete`) or only when every one completed (`on_success`). The rules are in
//! `tenax_core::model::batch`; the shapes in docs/api.md and docs/workflows.md ("Batches").

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenax_core::auth::Principal;
use tenax_core::clock::rfc3339;
use tenax_core::engine::Enqueue;
use tenax_core::model::{Batch, BatchCounts, BatchId, BatchState, JobId, JobTemplate};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::jobs::{
    EnqueueRequest, EnqueuedView, duplicate_field, enqueued_view, to_enqueue, traceparent_header,
};
use super::openapi::{Conflict, Missing, Refusals};
use super::schedules::TemplateRequest;

/// The longest description kept.
const MAX_DESCRIPTION: usize = 1024;
/// The most batches a page lists.
const MAX_PAGE: usize = 1000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(show, delete))
        .routes(routes!(add))
        .routes(routes!(close))
}

/// A new batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBatch {
    #[schema(max_length = 1024)]
    description: Option<String>,
    /// Enqueued once every member has finished, whatever the outcome.
    on_complete: Option<TemplateRequest>,
    /// Enqueued once every member has finished, only if every one completed.
    on_success: Option<TemplateRequest>,
    /// The first members, as `POST /api/jobs/batch` takes them.
    #[serde(default)]
    jobs: Vec<EnqueueRequest>,
    /// Keep the batch open for more jobs (`POST /api/batches/{id}/jobs`) until it is closed;
    /// default false: it closes once these jobs are stored, in the same commit.
    #[serde(default)]
    open: bool,
}

/// Jobs to add to an open batch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddJobs {
    #[schema(min_items = 1)]
    jobs: Vec<EnqueueRequest>,
    /// Close the batch in the same commit.
    #[serde(default)]
    close: bool,
}

/// A batch as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
struct BatchView {
    id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    state: BatchState,
    counts: BatchCounts,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    on_complete: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    on_success: Option<Value>,
    /// The callbacks' jobs, once enqueued.
    #[serde(skip_serializing_if = "Option::is_none")]
    on_complete_job: Option<JobId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_success_job: Option<JobId>,
    /// The queues of its members and callbacks.
    queues: Vec<String>,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<String>,
}

/// A batch, and the jobs a request added to it, in request order.
#[derive(Debug, Serialize, ToSchema)]
struct BatchWithJobs {
    batch: BatchView,
    jobs: Vec<EnqueuedView>,
}

#[derive(Debug, Serialize, ToSchema)]
struct BatchList {
    batches: Vec<BatchView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Batches after this id.
    after: Option<u64>,
    /// At most this many (default 100, at most 1000).
    limit: Option<usize>,
}

#[derive(Debug, Serialize, ToSchema)]
struct Deleted {
    deleted: bool,
}

fn template_view(template: &JobTemplate) -> Value {
    serde_json::to_value(template).unwrap_or(Value::Null)
}

fn view(batch: Batch) -> BatchView {
    BatchView {
        id: batch.id.0,
        on_complete: batch.spec.on_complete.as_ref().map(template_view),
        on_success: batch.spec.on_success.as_ref().map(template_view),
        description: batch.spec.description,
        state: batch.state,
        counts: batch.counts,
        on_complete_job: batch.on_complete_job,
        on_success_job: batch.on_success_job,
        queues: batch.spec.queues,
        created_at: rfc3339(batch.created_at_ms),
        finished_at: batch.finished_at_ms.map(rfc3339),
    }
}

fn parse_id(text: &str) -> Result<BatchId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::invalid(
            "id",
            format!("must be a batch id (a whole number), got {text:?}"),
        )
    })
}

/// A callback's template, checked by an enqueue's rules under `field`.
async fn callback(
    state: &AppState,
    template: Option<TemplateRequest>,
    field: &str,
) -> Result<Option<Enqueue>, ApiError> {
    let Some(template) = template else {
        return Ok(None);
    };
    let now = state.engine.now_ms();
    let enqueue = to_enqueue(template.into_request(), field, now, &state.limits)?;
    // The store wraps the payload with the counts as the batch finishes: it cannot seal it.
    let config = state.engine.queue(&enqueue.job.queue).await?;
    if config.is_some_and(|c| c.encrypt_payloads) {
        return Err(ApiError::invalid(
            format!("{field}.queue"),
            "must not be an encrypted queue: a callback's payload is made by the server as the \
             batch finishes, and is not sealed",
        ));
    }
    Ok(Some(enqueue))
}

/// The members of a request, checked by an enqueue's rules (`jobs[i].…`).
fn members(
    state: &AppState,
    headers: &HeaderMap,
    jobs: Vec<EnqueueRequest>,
) -> Result<Vec<Enqueue>, ApiError> {
    let header = traceparent_header(headers)?;
    let now = state.engine.now_ms();
    let mut inserts = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.into_iter().enumerate() {
        if job.on_duplicate.is_some() {
            return Err(ApiError::invalid(
                format!("jobs[{i}].on_duplicate"),
                "is not taken in a batch: a duplicate unique key refuses the request",
            ));
        }
        let job = EnqueueRequest {
            traceparent: job.traceparent.or_else(|| header.clone()),
            ..job
        };
        inserts.push(to_enqueue(job, &format!("jobs[{i}]"), now, &state.limits)?);
    }
    Ok(inserts)
}

/// Makes a batch, with its first jobs in the same commit.
#[utoipa::path(post, path = "/batches", operation_id = "create_batch", tag = "batches",
    request_body = CreateBatch,
    responses((status = 201, description = "The batch and its jobs", body = BatchWithJobs),
        Conflict, Refusals))]
async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<CreateBatch>,
) -> Result<(StatusCode, Json<BatchWithJobs>), ApiError> {
    if request.on_complete.is_none() && request.on_success.is_none() {
        return Err(ApiError::invalid(
            "on_complete",
            "give on_complete, on_success or both: a batch without a callback does nothing",
        ));
    }
    if let Some(description) = &request.description {
        if description.chars().count() > MAX_DESCRIPTION {
            return Err(ApiError::invalid(
                "description",
                format!("must be at most {MAX_DESCRIPTION} characters"),
            ));
        }
    }
    let on_complete = callback(&state, request.on_complete, "on_complete").await?;
    let on_success = callback(&state, request.on_success, "on_success").await?;
    let jobs = members(&state, &headers, request.jobs)?;
    let (batch, jobs) = state
        .engine
        .create_batch(
            request.description,
            on_complete,
            on_success,
            jobs,
            request.open,
        )
        .await
        .map_err(|e| duplicate_field(e, |i| format!("jobs[{i}].unique_key")))?;
    let jobs = jobs.iter().map(enqueued_view).collect();
    Ok((
        StatusCode::CREATED,
        Json(BatchWithJobs {
            batch: view(batch),
            jobs,
        }),
    ))
}

/// Adds jobs to an open batch (409 once it is closed).
#[utoipa::path(post, path = "/batches/{id}/jobs", operation_id = "add_to_batch", tag = "batches",
    params(("id" = u64, Path, description = "The batch's id")), request_body = AddJobs,
    responses((status = 201, description = "The batch and the added jobs", body = BatchWithJobs),
        Missing, Conflict, Refusals))]
async fn add(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<AddJobs>,
) -> Result<(StatusCode, Json<BatchWithJobs>), ApiError> {
    let id = parse_id(&id)?;
    if request.jobs.is_empty() {
        return Err(ApiError::invalid("jobs", "must hold at least one job"));
    }
    let jobs = members(&state, &headers, request.jobs)?;
    let (batch, jobs) = state
        .engine
        .add_to_batch(id, jobs, request.close)
        .await
        .map_err(|e| duplicate_field(e, |i| format!("jobs[{i}].unique_key")))?;
    let jobs = jobs.iter().map(enqueued_view).collect();
    Ok((
        StatusCode::CREATED,
        Json(BatchWithJobs {
            batch: view(batch),
            jobs,
        }),
    ))
}

/// Closes a batch: no more jobs; its callbacks go once its pending jobs finish (at once if
/// none is pending). Closing a closed batch changes nothing.
#[utoipa::path(post, path = "/batches/{id}/close", operation_id = "close_batch", tag = "batches",
    params(("id" = u64, Path, description = "The batch's id")),
    responses((status = 200, body = BatchView), Missing, Refusals))]
async fn close(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<BatchView>, ApiError> {
    let id = parse_id(&id)?;
    Ok(Json(view(state.engine.close_batch(id).await?)))
}

/// One batch: its state, counts and callbacks.
#[utoipa::path(get, path = "/batches/{id}", operation_id = "get_batch", tag = "batches",
    params(("id" = u64, Path, description = "The batch's id")),
    responses((status = 200, body = BatchView), Missing, Refusals))]
async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<BatchView>, ApiError> {
    let id = parse_id(&id)?;
    let batch = state
        .engine
        .batch(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("batch {id} does not exist")))?;
    Ok(Json(view(batch)))
}

/// Deletes a batch's record; its jobs stay (they still name it), and its callbacks will not
/// be enqueued if it had not finished.
#[utoipa::path(delete, path = "/batches/{id}", operation_id = "delete_batch", tag = "batches",
    params(("id" = u64, Path, description = "The batch's id")),
    responses((status = 200, body = Deleted), Missing, Refusals))]
async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    let id = parse_id(&id)?;
    if !state.engine.delete_batch(id).await? {
        return Err(ApiError::not_found(format!("batch {id} does not exist")));
    }
    Ok(Json(Deleted { deleted: true }))
}

/// Batches in id order, a page at a time (`after` the last id of the page before); a scoped
/// token sees those whose every queue it may touch.
#[utoipa::path(get, path = "/batches", operation_id = "list_batches", tag = "batches",
    params(ListQuery), responses((status = 200, body = BatchList), Refusals))]
async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<ListQuery>,
) -> Result<Json<BatchList>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::invalid(
            "limit",
            format!("must be from 1 to {MAX_PAGE}"),
        ));
    }
    let batches = state
        .engine
        .batches(query.after.map(BatchId), limit)
        .await?
        .into_iter()
        .filter(|b| b.spec.queues.iter().all(|q| principal.admits_queue(q)))
        .map(view)
        .collect();
    Ok(Json(BatchList { batches }))
}
