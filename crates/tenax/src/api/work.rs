//! The worker's side: take (long poll or stream), heartbeat, complete, fail.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tenax_policy::Outcome;

use super::AppState;
use super::error::ApiError;
use super::extract::{JsonBody, JsonOrEmpty};
use super::fields::{Millis, Time, check_queue_name};
use super::jobs::parse_id;
use super::views::TakenView;
use crate::clock::rfc3339;
use crate::engine::FailureReport;
use crate::model::Status;
use crate::store::Ack;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/take", post(take))
        .route("/take/stream", post(take_stream))
        .route("/jobs/complete", post(complete_many))
        .route("/jobs/{id}/complete", post(complete_one))
        .route("/jobs/{id}/fail", post(fail))
        .route("/jobs/{id}/heartbeat", post(heartbeat))
}

/// The longest a take may wait for a job.
const MAX_WAIT_MS: u64 = 60_000;
/// The most jobs one take returns, and the largest stream prefetch.
const MAX_TAKE: usize = 1_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TakeRequest {
    /// Queues to take from, best job first across all of them.
    pub(crate) queues: Vec<String>,
    /// Most jobs to return (take) or to hold leased at once (stream). Default 1 (take), 100
    /// (stream).
    pub(crate) max: Option<usize>,
    /// Lease duration; default `--default-lease`.
    pub(crate) lease: Option<Millis>,
    /// How long to wait for a job if none is ready (take only). Default 0.
    pub(crate) wait: Option<Millis>,
}

struct TakeParams {
    queues: Vec<String>,
    max: usize,
    lease_ms: u64,
    wait_ms: u64,
}

fn params(
    state: &AppState,
    request: TakeRequest,
    default_max: usize,
) -> Result<TakeParams, ApiError> {
    if request.queues.is_empty() {
        return Err(ApiError::invalid("queues", "must name at least one queue"));
    }
    for (i, queue) in request.queues.iter().enumerate() {
        check_queue_name(&format!("queues[{i}]"), queue)?;
    }
    let max = request.max.unwrap_or(default_max);
    if !(1..=MAX_TAKE).contains(&max) {
        return Err(ApiError::invalid(
            "max",
            format!("must be from 1 to {MAX_TAKE}, got {max}"),
        ));
    }
    let lease_ms = lease_ms(state, request.lease)?;
    let wait_ms = request.wait.map_or(0, |m| m.0);
    if wait_ms > MAX_WAIT_MS {
        return Err(ApiError::invalid(
            "wait",
            format!("must be at most {MAX_WAIT_MS} ms, got {wait_ms} ms"),
        ));
    }
    Ok(TakeParams {
        queues: request.queues,
        max,
        lease_ms,
        wait_ms,
    })
}

/// The lease asked for, or the default; refused when 0 or over `--max-lease`.
fn lease_ms(state: &AppState, asked: Option<Millis>) -> Result<u64, ApiError> {
    let lease_ms = asked.map_or(state.limits.default_lease_ms, |m| m.0);
    if lease_ms == 0 || lease_ms > state.limits.max_lease_ms {
        return Err(ApiError::invalid(
            "lease",
            format!(
                "must be above 0 and at most {} ms (--max-lease), got {lease_ms} ms",
                state.limits.max_lease_ms
            ),
        ));
    }
    Ok(lease_ms)
}

async fn take(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<TakeRequest>,
) -> Result<Json<TakeView>, ApiError> {
    let p = params(&state, request, 1)?;
    let jobs = state
        .engine
        .take(
            &p.queues,
            p.max,
            p.lease_ms,
            Duration::from_millis(p.wait_ms),
            None,
        )
        .await?;
    let jobs: Vec<TakenView> = jobs.into_iter().map(TakenView::from).collect();
    Ok(Json(TakeView { jobs }))
}

/// The answer of a take, serialised straight from the views (as the stream does) rather than
/// through a `serde_json::Value`, which re-parsed every payload and sorted every job's keys.
#[derive(Debug, Serialize)]
struct TakeView {
    jobs: Vec<TakenView>,
}

/// Releases a stream's leased jobs when the response body is dropped (the client went away or
/// the server is shutting down).
struct StreamGuard {
    engine: std::sync::Arc<crate::engine::Engine>,
    stream: u64,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let engine = self.engine.clone();
        let stream = self.stream;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let released = engine.close_stream(stream).await;
                if released > 0 {
                    tracing::info!(
                        stream,
                        released,
                        "stream closed; its leased jobs are ready again"
                    );
                }
            });
        }
    }
}

/// One connection, jobs pushed as newline-delimited JSON as they become ready. At most `max`
/// jobs of the stream are leased at once: acknowledge some (complete or fail) to get more.
/// Closing the connection returns the stream's unacknowledged jobs to ready.
async fn take_stream(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<TakeRequest>,
) -> Result<Response, ApiError> {
    if request.wait.is_some() {
        return Err(ApiError::invalid(
            "wait",
            "is not used by a stream, which waits as long as it is open",
        ));
    }
    let p = params(&state, request, 100)?;
    let engine = state.engine.clone();
    let stream = engine.open_stream();
    let guard = StreamGuard {
        engine: engine.clone(),
        stream,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let _guard = guard;
        loop {
            let held = engine.store.stream_leases(stream).await;
            let room = p.max.saturating_sub(held);
            if room == 0 {
                // Wait for acknowledgements; they do not signal, so look again shortly.
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(20)) => continue,
                    () = tx.closed() => return,
                    () = engine.stopped() => return,
                }
            }
            let taken = tokio::select! {
                taken = engine.take(&p.queues, room, p.lease_ms, Duration::from_secs(1), Some(stream)) => taken,
                () = tx.closed() => return,
                () = engine.stopped() => return,
            };
            let jobs = match taken {
                Ok(jobs) => jobs,
                Err(error) => {
                    tracing::error!(%error, "stream take failed");
                    return;
                }
            };
            if jobs.is_empty() {
                // A heartbeat line keeps proxies from closing an idle stream.
                if tx.send(Ok(Bytes::from_static(b"\n"))).await.is_err() {
                    return;
                }
                continue;
            }
            let mut lines = Vec::with_capacity(jobs.len() * 256);
            for job in jobs {
                let _ = serde_json::to_writer(&mut lines, &TakenView::from(job));
                lines.push(b'\n');
            }
            if tx.send(Ok(Bytes::from(lines))).await.is_err() {
                return;
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseBody {
    lease_token: Option<u64>,
    lease: Option<Millis>,
}

async fn heartbeat(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(body): JsonOrEmpty<LeaseBody>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let lease_ms = lease_ms(&state, body.lease)?;
    let expires = state
        .engine
        .heartbeat(
            Ack {
                id,
                lease: body.lease_token,
            },
            lease_ms,
        )
        .await?;
    Ok(Json(
        json!({ "id": id, "lease_expires_at": rfc3339(expires) }),
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteOne {
    lease_token: Option<u64>,
}

async fn complete_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonOrEmpty(body): JsonOrEmpty<CompleteOne>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let token = body.lease_token;
    let mut results = state.engine.complete(&[Ack { id, lease: token }]).await?;
    match results.pop() {
        Some(Ok(())) => Ok(Json(json!({ "id": id, "status": Status::Completed }))),
        Some(Err(error)) => Err(error.into()),
        None => Err(ApiError::not_found(format!("job {id} does not exist"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CompleteMany {
    jobs: Vec<AckItem>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AckItem {
    id: u64,
    lease_token: Option<u64>,
}

async fn complete_many(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<CompleteMany>,
) -> Result<Json<CompleteResults>, ApiError> {
    if body.jobs.is_empty() || body.jobs.len() > 10_000 {
        return Err(ApiError::invalid("jobs", "must hold 1 to 10000 jobs"));
    }
    let acks: Vec<Ack> = body
        .jobs
        .iter()
        .map(|j| Ack {
            id: j.id,
            lease: j.lease_token,
        })
        .collect();
    let results = state.engine.complete(&acks).await?;
    let results = acks
        .iter()
        .zip(results)
        .map(|(ack, result)| match result {
            Ok(()) => CompleteResult {
                completed: true,
                error: None,
                id: ack.id,
            },
            Err(error) => {
                let error = ApiError::from(error);
                CompleteResult {
                    completed: false,
                    error: Some(CompleteError {
                        code: error.code,
                        message: error.message,
                    }),
                    id: ack.id,
                }
            }
        })
        .collect();
    Ok(Json(CompleteResults { results }))
}

/// The answer of a batch complete, serialised straight from these structs rather than through
/// a `serde_json::Value` per job. Fields are in the (sorted) order such maps gave them, so the
/// bytes are the same.
#[derive(Debug, Serialize)]
struct CompleteResults {
    results: Vec<CompleteResult>,
}

#[derive(Debug, Serialize)]
struct CompleteResult {
    completed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<CompleteError>,
    id: u64,
}

#[derive(Debug, Serialize)]
struct CompleteError {
    code: &'static str,
    message: String,
}

/// A failure report. `error` is a message or `{"message", "detail"}`; at most one of
/// `retryable: false`, `retry_at`, `retry_in`, `snooze`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailRequest {
    pub(crate) lease_token: Option<u64>,
    pub(crate) error: ErrorReport,
    #[serde(default = "yes")]
    pub(crate) retryable: bool,
    pub(crate) retry_at: Option<Time>,
    pub(crate) retry_in: Option<Millis>,
    pub(crate) snooze: Option<Millis>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum ErrorReport {
    Message(String),
    Detailed {
        message: String,
        #[serde(default)]
        detail: Option<Value>,
    },
}

async fn fail(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<FailRequest>,
) -> Result<Json<Value>, ApiError> {
    let id = parse_id(&id)?;
    let choices = [
        !body.retryable,
        body.retry_at.is_some(),
        body.retry_in.is_some(),
        body.snooze.is_some(),
    ];
    if choices.iter().filter(|c| **c).count() > 1 {
        return Err(ApiError::invalid(
            "retryable",
            "give at most one of retryable: false, retry_at, retry_in and snooze",
        ));
    }
    let outcome = if !body.retryable {
        Outcome::NotRetryable
    } else if let Some(Time(at_ms)) = body.retry_at {
        Outcome::RetryAt { at_ms }
    } else if let Some(Millis(delay_ms)) = body.retry_in {
        Outcome::RetryIn { delay_ms }
    } else if let Some(Millis(delay_ms)) = body.snooze {
        Outcome::Snooze { delay_ms }
    } else {
        Outcome::Retry
    };
    let (message, detail) = match body.error {
        ErrorReport::Message(message) => (message, None),
        ErrorReport::Detailed { message, detail } => (message, detail),
    };
    if message.len() > 64 * 1024 {
        return Err(ApiError::invalid(
            "error.message",
            "must be at most 65536 bytes",
        ));
    }
    let report = FailureReport {
        message,
        detail,
        outcome,
    };
    let (transition, failed_at) = state
        .engine
        .fail(
            Ack {
                id,
                lease: body.lease_token,
            },
            report,
        )
        .await?;
    let s = &transition.state;
    let mut answer = json!({ "id": id, "status": s.status, "failures": s.failures });
    match s.status {
        Status::Dead => answer["dead_reason"] = json!(s.dead_reason),
        _ => {
            answer["attempt"] = json!(s.failures + 1);
            answer["run_at"] = json!(rfc3339(s.run_at_ms));
            answer["delay_ms"] = json!(s.run_at_ms.saturating_sub(failed_at));
        }
    }
    Ok(Json(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_results_encode_as_the_json_maps_they_replace() {
        let answer = CompleteResults {
            results: vec![
                CompleteResult {
                    completed: true,
                    error: None,
                    id: 7,
                },
                CompleteResult {
                    completed: false,
                    error: Some(CompleteError {
                        code: "lease_lost",
                        message: "job 8: gone".into(),
                    }),
                    id: 8,
                },
            ],
        };
        let maps = json!({ "results": [
            json!({ "id": 7, "completed": true }),
            json!({ "id": 8, "completed": false, "error": {"code": "lease_lost", "message": "job 8: gone"} }),
        ]});
        assert_eq!(
            serde_json::to_string(&answer).unwrap(),
            serde_json::to_string(&maps).unwrap()
        );
    }
}
