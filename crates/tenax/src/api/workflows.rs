//! `GET /api/workflows/{id}`: the jobs joined to one by their dependencies, with their states and
//! edges (`tenax_core::engine::workflows`).

use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::Serialize;
use serde_json::value::RawValue;
use tenax_core::auth::Principal;
use tenax_core::clock::rfc3339;
use tenax_core::engine::workflows::MAX_WORKFLOW_JOBS;
use tenax_core::model::{Job, JobId, OnParentDead, Status};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::jobs::parse_id;
use super::openapi::{Missing, Refusals};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(show))
}

/// A workflow: its jobs and the edges between them.
#[derive(Debug, Serialize, ToSchema)]
struct WorkflowView {
    /// The job asked about.
    id: JobId,
    /// `running` while a job of it has not finished; then `completed` when every job
    /// completed, else `failed`.
    status: &'static str,
    /// Jobs by status.
    counts: std::collections::BTreeMap<Status, usize>,
    /// In id order.
    jobs: Vec<StepView>,
    /// `[parent, child]` pairs: the child waits (or waited) for the parent.
    edges: Vec<[JobId; 2]>,
    /// The workflow has more than the jobs shown (at most 1 000 are).
    truncated: bool,
}

/// One job of a workflow.
#[derive(Debug, Serialize, ToSchema)]
struct StepView {
    id: JobId,
    queue: String,
    #[serde(rename = "type")]
    kind: String,
    status: Status,
    /// The jobs it waits for, in the order given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    after: Vec<JobId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_parent_dead: Option<OnParentDead>,
    attempt: u32,
    run_at: String,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    result: Option<Box<RawValue>>,
}

impl From<Job> for StepView {
    fn from(job: Job) -> Self {
        Self {
            id: job.id,
            queue: job.spec.queue,
            kind: job.spec.kind,
            status: job.state.status,
            on_parent_dead: (!job.spec.after.is_empty()).then_some(job.spec.on_parent_dead),
            after: job.spec.after,
            attempt: job.state.failures + 1,
            run_at: rfc3339(job.state.run_at_ms),
            created_at: rfc3339(job.spec.created_at_ms),
            finished_at: job.state.finished_at_ms.map(rfc3339),
            dead_reason: job.state.dead_reason,
            result: job.state.result.map(|r| r.0),
        }
    }
}

/// The workflow a job belongs to: every job joined to it by `after`, either way, with its
/// state, and the edges. A job that waits for none and that none waits for is a workflow of
/// one. A token scoped to some queues sees only their jobs.
#[utoipa::path(get, path = "/workflows/{id}", operation_id = "get_workflow", tag = "jobs",
    params(("id" = u64, Path, description = "Any job of the workflow")),
    responses((status = 200, body = WorkflowView), Missing, Refusals))]
async fn show(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<WorkflowView>, ApiError> {
    let id = parse_id(&id)?;
    let Some(workflow) = state.engine.workflow(id, MAX_WORKFLOW_JOBS).await? else {
        return Err(ApiError::not_found(format!("job {id} does not exist")));
    };
    let jobs: Vec<Job> = workflow
        .jobs
        .into_iter()
        .filter(|job| principal.admits_queue(&job.spec.queue))
        .collect();
    let shown: std::collections::BTreeSet<JobId> = jobs.iter().map(|j| j.id).collect();
    let mut counts = std::collections::BTreeMap::new();
    for job in &jobs {
        *counts.entry(job.state.status).or_insert(0) += 1;
    }
    let unfinished = jobs.iter().any(|j| !j.state.status.is_finished());
    let failed = jobs.iter().any(|j| j.state.status != Status::Completed);
    let status = match (unfinished, failed) {
        (true, _) => "running",
        (false, false) => "completed",
        (false, true) => "failed",
    };
    Ok(Json(WorkflowView {
        id,
        status,
        counts,
        edges: workflow
            .edges
            .into_iter()
            .filter(|(p, c)| shown.contains(p) && shown.contains(c))
            .map(|(p, c)| [p, c])
            .collect(),
        jobs: jobs.into_iter().map(StepView::from).collect(),
        truncated: workflow.truncated,
    }))
}
