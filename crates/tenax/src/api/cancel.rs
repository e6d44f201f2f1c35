//! Cancelling jobs (docs/workflows.md#cancellation): one by id, or every unfinished job a
//! selection names. The engine owns the rules (`tenax_core::model::Cancelled`); this module
//! decodes, validates and answers.

use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use tenax_core::model::{JobFilter, JobId, Selection};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::jobs::parse_id;
use super::openapi::{Conflict, Missing, Refusals};
use super::views::JobView;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(cancel_one))
        .routes(routes!(cancel_selected))
}

/// A job after its cancellation, and what the cancellation did.
#[derive(Debug, Serialize, ToSchema)]
struct CancelView {
    /// `cancelled`: the job was scheduled or ready, and is now cancelled. `marked`: the job is
    /// in flight; its lease is marked cancelled, its worker learns it on its next heartbeat
    /// (`"cancelled": true`), and its failure or lease expiry then finishes it as cancelled (a
    /// completion still completes it).
    #[schema(example = "cancelled")]
    outcome: String,
    job: JobView,
}

/// Cancels a job: at once if it is scheduled or ready; by marking its lease if it is in
/// flight. A finished job (completed, dead or cancelled) is refused with 409.
#[utoipa::path(post, path = "/jobs/{id}/cancel", operation_id = "cancel_job", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    responses((status = 200, body = CancelView), Missing, Conflict, Refusals))]
async fn cancel_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<CancelView>, ApiError> {
    let id = parse_id(&id)?;
    let done = state
        .engine
        .cancel(&Selection {
            ids: Some(vec![id]),
            ..Selection::default()
        })
        .await?;
    let outcome = done.outcome(id);
    let job = state.engine.job(id).await?;
    match (outcome, job) {
        (Some(outcome), Some(job)) => Ok(Json(CancelView {
            outcome: outcome.name().to_owned(),
            job: JobView::from(job),
        })),
        // Cancelled, then deleted (or expired) before it could be read.
        (_, None) => Err(ApiError::not_found(format!("job {id} does not exist"))),
        (None, Some(job)) => Err(ApiError::conflict(
            "finished",
            format!(
                "job {id} is {}: only a scheduled, ready or in-flight job can be cancelled",
                job.state.status.name()
            ),
        )),
    }
}

/// Which jobs to cancel: by id, or by queue and/or type, or `all: true`. Only unfinished jobs
/// are cancelled; finished ones are left as they are.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"queue": "emails", "type": "welcome"}))]
struct CancelRequest {
    ids: Option<Vec<JobId>>,
    queue: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Every unfinished job: required when nothing else narrows the choice.
    #[serde(default)]
    all: bool,
}

impl CancelRequest {
    fn into_selection(self) -> Result<Selection, ApiError> {
        let narrowed = self.ids.is_some() || self.queue.is_some() || self.kind.is_some();
        if !narrowed && !self.all {
            return Err(ApiError::invalid(
                "ids",
                "name the jobs (ids), narrow by queue and/or type, or say all: true",
            ));
        }
        if self.ids.as_ref().is_some_and(Vec::is_empty) {
            return Err(ApiError::invalid(
                "ids",
                "must name at least one job when given",
            ));
        }
        Ok(Selection {
            ids: self.ids,
            filter: JobFilter {
                queue: self.queue,
                kind: self.kind,
                ..JobFilter::default()
            },
        })
    }
}

/// What a cancellation by selection did: the jobs cancelled at once, and the jobs in flight
/// whose leases were marked.
#[derive(Debug, Serialize, ToSchema)]
struct CancelledView {
    cancelled: usize,
    marked: usize,
    cancelled_ids: Vec<JobId>,
    marked_ids: Vec<JobId>,
}

/// Cancels every unfinished job the selection names: scheduled and ready ones at once, those
/// in flight by marking their leases. Finished jobs are left as they are.
#[utoipa::path(post, path = "/jobs/cancel", operation_id = "cancel_jobs", tag = "jobs",
    request_body = CancelRequest,
    responses((status = 200, body = CancelledView), Refusals))]
async fn cancel_selected(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<CancelRequest>,
) -> Result<Json<CancelledView>, ApiError> {
    let selection = request.into_selection()?;
    let done = state.engine.cancel(&selection).await?;
    Ok(Json(CancelledView {
        cancelled: done.cancelled.len(),
        marked: done.marked.len(),
        cancelled_ids: done.cancelled,
        marked_ids: done.marked,
    }))
}
