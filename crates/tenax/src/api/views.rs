//! Response shapes. Times are RFC 3339 strings; ids are integers.

use serde::Serialize;
use serde_json::value::RawValue;
use tenax_core::clock::rfc3339;
use tenax_core::model::{Job, JobId, LeaseToken, OnParentDead, Status, TakenJob};
use utoipa::ToSchema;

/// A job as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct JobView {
    pub id: JobId,
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// The payload, byte for byte as it was enqueued.
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    pub priority: i32,
    pub status: Status,
    /// The attempt the next run will be (failures so far + 1).
    pub attempt: u32,
    pub failures: u32,
    /// Scheduled: when it becomes ready. Otherwise when it last became ready.
    pub run_at: String,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<String>,
    /// The job's own policy, canonical native JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub policy: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// The W3C trace context it was enqueued with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    pub errors: Vec<ErrorView>,
    /// A completed job's result, byte for byte as its worker sent it; absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub result: Option<Box<RawValue>>,
    /// The jobs it waits for (or waited for), in the order given; absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    /// What it does when one of those will not complete; shown with `after`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_parent_dead: Option<OnParentDead>,
    /// The batch the job is a member of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
}

/// One failure of a job.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorView {
    pub attempt: u32,
    pub at: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl From<Job> for JobView {
    fn from(job: Job) -> Self {
        Self {
            id: job.id,
            queue: job.spec.queue,
            kind: job.spec.kind,
            payload: job.spec.payload,
            priority: job.spec.priority,
            status: job.state.status,
            attempt: job.state.failures + 1,
            failures: job.state.failures,
            run_at: rfc3339(job.state.run_at_ms),
            created_at: rfc3339(job.spec.created_at_ms),
            finished_at: job.state.finished_at_ms.map(rfc3339),
            dead_reason: job.state.dead_reason,
            result: job.state.result.map(|r| r.0),
            on_parent_dead: (!job.spec.after.is_empty()).then_some(job.spec.on_parent_dead),
            after: job.spec.after,
            batch: job.spec.batch.map(|b| b.0),
            policy: job.spec.policy.map(|p| p.json().clone()),
            unique_key: job.spec.unique_key,
            traceparent: job.spec.traceparent,
            errors: job
                .errors
                .into_iter()
                .map(|e| ErrorView {
                    attempt: e.attempt,
                    at: rfc3339(e.at_ms),
                    message: e.message,
                    detail: e.detail,
                })
                .collect(),
        }
    }
}

/// A job handed to a worker.
#[derive(Debug, Serialize, ToSchema)]
pub struct TakenView {
    pub id: JobId,
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(value_type = serde_json::Value)]
    pub payload: Box<RawValue>,
    pub priority: i32,
    pub attempt: u32,
    /// Pass back on heartbeat, complete and fail.
    pub lease_token: LeaseToken,
    pub lease_expires_at: String,
    pub created_at: String,
    /// The W3C trace context it was enqueued with: continue the trace from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The jobs it waited for, in its `after`'s order, with how each finished and its result
    /// (a parent no longer stored is left out); absent when it waited for none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<ParentView>,
}

/// A job a taken job waited for.
#[derive(Debug, Serialize, ToSchema)]
pub struct ParentView {
    pub id: JobId,
    #[serde(rename = "type")]
    pub kind: String,
    /// `completed`, or `dead`/`cancelled` for a parent the job runs past (`on_parent_dead: run`).
    pub status: Status,
    /// Its worker's result, byte for byte; absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub result: Option<Box<RawValue>>,
}

impl From<TakenJob> for TakenView {
    fn from(job: TakenJob) -> Self {
        Self {
            id: job.id,
            queue: job.queue,
            kind: job.kind,
            payload: job.payload,
            priority: job.priority,
            attempt: job.attempt,
            lease_token: job.lease_token,
            lease_expires_at: rfc3339(job.lease_expires_at_ms),
            created_at: rfc3339(job.created_at_ms),
            traceparent: job.traceparent,
            parents: job
                .parents
                .into_iter()
                .map(|p| ParentView {
                    id: p.id,
                    kind: p.kind,
                    status: p.status,
                    result: p.result.map(|r| r.0),
                })
                .collect(),
        }
    }
}
