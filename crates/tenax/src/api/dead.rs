//! Dead jobs: list, replay (optionally with a new policy and a fresh attempt count), delete.
//! Replay and delete take cancelled jobs too, with `"status": "cancelled"`.

use axum::Json;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenax_core::model::{JobFilter, JobId, Replay, Replayed, Selection, Status};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::stored_policy;
use super::jobs::{JobPage, ListQuery, list_page};
use super::openapi::Refusals;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(replay))
        .routes(routes!(delete))
}

/// A page of dead jobs (`status` may not be given: it is always dead).
#[utoipa::path(get, path = "/dead", operation_id = "list_dead_jobs", tag = "dead", params(ListQuery),
    responses((status = 200, body = JobPage), Refusals))]
async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    let query = super::extract::query(query)?;
    if query.status.is_some() {
        return Err(ApiError::invalid("status", "is always dead here"));
    }
    list_page(&state, &query, Some(Status::Dead)).await
}

/// Which dead (or cancelled) jobs: by id, or by queue and/or type, or `all: true`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct DeadSelection {
    ids: Option<Vec<JobId>>,
    queue: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Every dead job: required when nothing else narrows the choice.
    #[serde(default)]
    all: bool,
    /// `dead` (the default) or `cancelled`: which finished jobs the selection is of.
    #[schema(example = "cancelled")]
    status: Option<String>,
}

impl DeadSelection {
    fn into_selection(self) -> Result<Selection, ApiError> {
        let narrowed = self.ids.is_some() || self.queue.is_some() || self.kind.is_some();
        if !narrowed && !self.all {
            return Err(ApiError::invalid(
                "ids",
                "name the jobs (ids), narrow by queue and/or type, or say all: true",
            ));
        }
        let status = match self.status.as_deref() {
            None | Some("dead") => Status::Dead,
            Some("cancelled") => Status::Cancelled,
            Some(other) => {
                return Err(ApiError::invalid(
                    "status",
                    format!("must be dead or cancelled, got {other:?}"),
                ));
            }
        };
        Ok(Selection {
            ids: self.ids,
            filter: JobFilter {
                queue: self.queue,
                status: Some(status),
                kind: self.kind,
                ..JobFilter::default()
            },
        })
    }
}

/// Which dead jobs to replay, and how.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    #[serde(flatten)]
    selection: DeadSelection,
    /// A new policy for the replayed jobs, in any spelling.
    #[schema(value_type = Option<Object>)]
    policy: Option<Value>,
    /// Forget earlier failures: retries start again from 1.
    #[serde(default)]
    reset_attempts: bool,
}

/// Makes dead (or, with `"status": "cancelled"`, cancelled) jobs ready again, except those
/// whose unique key an unfinished job holds.
#[utoipa::path(post, path = "/dead/replay", operation_id = "replay_dead_jobs", tag = "dead", request_body = ReplayRequest,
    responses((status = 200, body = ReplayView), Refusals))]
async fn replay(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<ReplayRequest>,
) -> Result<Json<ReplayView>, ApiError> {
    let selection = request.selection.into_selection()?;
    let policy = request
        .policy
        .map(|value| stored_policy("policy", &value))
        .transpose()?;
    let replay = Replay {
        selection,
        policy,
        reset_attempts: request.reset_attempts,
    };
    let replayed = state.engine.replay(&replay).await?;
    Ok(Json(ReplayView::from(replayed)))
}

/// What a replay did: how many and which jobs are ready again, and each job that was named or
/// selected but not replayed, with the reason.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayView {
    replayed: usize,
    ids: Vec<JobId>,
    skipped: Vec<SkippedView>,
}

#[derive(Debug, Serialize, ToSchema)]
struct SkippedView {
    id: JobId,
    reason: String,
}

impl From<Replayed> for ReplayView {
    fn from(replayed: Replayed) -> Self {
        Self {
            replayed: replayed.ids.len(),
            ids: replayed.ids,
            skipped: replayed
                .skipped
                .into_iter()
                .map(|(id, why)| SkippedView {
                    id,
                    reason: why.describe(),
                })
                .collect(),
        }
    }
}

/// How many and which jobs were deleted.
#[derive(Debug, Serialize, ToSchema)]
struct DeletedView {
    deleted: usize,
    ids: Vec<JobId>,
}

/// Deletes dead (or, with `"status": "cancelled"`, cancelled) jobs.
#[utoipa::path(post, path = "/dead/delete", operation_id = "delete_dead_jobs", tag = "dead", request_body = DeadSelection,
    responses((status = 200, body = DeletedView), Refusals))]
async fn delete(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<DeadSelection>,
) -> Result<Json<DeletedView>, ApiError> {
    let selection = request.into_selection()?;
    let ids = state.engine.delete_jobs(&selection).await?;
    Ok(Json(DeletedView {
        deleted: ids.len(),
        ids,
    }))
}
