//! The worker's side: take (long poll or stream), heartbeat, complete, fail.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tenax_core::auth::Principal;
use tenax_core::clock::{check_time, rfc3339};
use tenax_core::engine::workers::Seen;
use tenax_core::engine::{FailureReport, Take};
use tenax_core::model::{Ack, ClaimId, JobId, JobResult, LeaseToken, Status};
use tenax_policy::Outcome;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::{Millis, Time, check_queue_name};
use super::jobs::parse_id;
use super::openapi::{Conflict, Missing, Refusals};
use super::views::TakenView;
use super::worker_name::WorkerHead;
use super::{AppState, Limits};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(take))
        .routes(routes!(take_stream))
        .routes(routes!(complete_many))
        .routes(routes!(complete_one))
        .routes(routes!(fail))
        .routes(routes!(heartbeat))
}

/// The longest a take may wait for a job.
const MAX_WAIT_MS: u64 = 60_000;
/// The most jobs one take returns, and the largest stream prefetch.
const MAX_TAKE: usize = 1_000;
/// A stream writes at least one line this often: a job, or an empty keep-alive line.
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// What to take, and how.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"queues": ["emails"], "max": 10, "lease": "30s", "wait": "20s"}))]
pub struct TakeRequest {
    /// Queues to take from, best job first across all of them.
    #[schema(min_items = 1)]
    pub(crate) queues: Vec<String>,
    /// Most jobs to return (take) or to hold leased at once (stream), 1 to 1000. Default 1
    /// (take), 100 (stream).
    #[schema(minimum = 1, maximum = 1000)]
    pub(crate) max: Option<usize>,
    /// Lease duration; default `--default-lease`, at most `--max-lease`.
    pub(crate) lease: Option<Millis>,
    /// How long to wait for a job if none is ready, at most 60 s (take only). Default 0.
    pub(crate) wait: Option<Millis>,
    /// The worker's name, 1 to 128 characters, for the list of connected workers
    /// (`GET /api/cluster`). Else the `X-Tenax-Worker` header's; else its address and
    /// User-Agent.
    #[schema(min_length = 1, max_length = 128)]
    pub(crate) worker: Option<String>,
}

/// A take's checked parameters.
#[derive(Debug)]
pub struct TakeParams {
    pub queues: Vec<String>,
    pub max: usize,
    pub lease_ms: u64,
    pub wait_ms: u64,
    /// The name the body gave the worker, unchecked ([`WorkerHead::name`] checks it).
    pub worker: Option<String>,
}

/// Checks a take (or stream) request; `default_max` is the take's or the stream's.
pub fn take_params(
    limits: &Limits,
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
    let lease_ms = lease_ms(limits, request.lease)?;
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
        worker: request.worker,
    })
}

/// The lease asked for, or the default; refused when 0 or over `--max-lease`.
fn lease_ms(limits: &Limits, asked: Option<Millis>) -> Result<u64, ApiError> {
    let lease_ms = asked.map_or(limits.default_lease_ms, |m| m.0);
    if lease_ms == 0 || lease_ms > limits.max_lease_ms {
        return Err(ApiError::invalid(
            "lease",
            format!(
                "must be above 0 and at most {} ms (--max-lease), got {lease_ms} ms",
                limits.max_lease_ms
            ),
        ));
    }
    Ok(lease_ms)
}

/// Leases up to `max` ready jobs of the named queues, waiting up to `wait` for the first.
#[utoipa::path(post, path = "/take", operation_id = "take_jobs", tag = "work", request_body = TakeRequest,
    params(
        ("X-Tenax-Worker" = Option<String>, Header, description = "The worker's name (1 to 128 \
            characters), when the body gives none; else its address and User-Agent")),
    responses((status = 200, description = "The jobs (none if none was ready in time)", body = TakeView), Refusals))]
async fn take(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    head: WorkerHead,
    JsonBody(request): JsonBody<TakeRequest>,
) -> Result<Json<TakeView>, ApiError> {
    let p = take_params(&state.limits, request, 1)?;
    let worker = head.name(p.worker.as_deref())?;
    let engine = &state.engine;
    let seen = Seen {
        name: &worker,
        queues: &p.queues,
    };
    // Seen as it starts to wait, and again with what it took.
    engine.workers().took(seen, &[], None, engine.now_ms());
    let jobs = engine
        .take(
            &Take::new(&p.queues, p.max, p.lease_ms),
            Duration::from_millis(p.wait_ms),
            engine.revoked(principal.token),
        )
        .await?;
    engine.workers().took(seen, &jobs, None, engine.now_ms());
    if jobs.is_empty() && principal.token.is_some_and(|id| !engine.knows_token(id)) {
        return Err(revoked());
    }
    let jobs: Vec<TakenView> = jobs.into_iter().map(TakenView::from).collect();
    Ok(Json(TakeView { jobs }))
}

/// The answer to a long poll whose token was revoked while it waited.
fn revoked() -> ApiError {
    ApiError {
        status: axum::http::StatusCode::UNAUTHORIZED,
        code: "unauthorized",
        field: None,
        message: "the API token was revoked while the take waited".into(),
    }
}

/// The answer of a take, serialised straight from the views (as the stream does) rather than
/// through a `serde_json::Value`, which re-parsed every payload and sorted every job's keys.
#[derive(Debug, Serialize, ToSchema)]
struct TakeView {
    jobs: Vec<TakenView>,
}

/// Releases a stream's leased jobs when the response body is dropped (the client went away or
/// the server is shutting down), and notes that its worker has one stream fewer.
struct StreamGuard {
    engine: std::sync::Arc<tenax_core::engine::Engine>,
    stream: ClaimId,
    worker: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.engine
            .workers()
            .stream_closed(&self.worker, self.stream, self.engine.now_ms());
        let engine = self.engine.clone();
        let stream = self.stream;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                match engine.close_stream(stream).await {
                    Ok(0) => {}
                    Ok(released) => tracing::info!(
                        stream = stream.0,
                        released,
                        "stream closed; its leased jobs are ready again"
                    ),
                    Err(error) => tracing::warn!(
                        stream = stream.0,
                        %error,
                        "releasing a closed stream's jobs failed; their leases will expire"
                    ),
                }
            });
        }
    }
}

/// One connection, jobs pushed as newline-delimited JSON as they become ready. At most `max`
/// jobs of the stream are leased at once: acknowledge some (complete or fail) to get more.
/// Closing the connection returns the stream's unacknowledged jobs to ready.
#[utoipa::path(post, path = "/take/stream", operation_id = "stream_jobs", tag = "work", request_body = TakeRequest,
    params(
        ("X-Tenax-Worker" = Option<String>, Header, description = "The worker's name (1 to 128 \
            characters), when the body gives none; else its address and User-Agent")),
    responses((status = 200, description = "One job per line as each becomes ready, and an empty \
        line every second while none does; closing the connection returns the unacknowledged \
        jobs to ready", content_type = "application/x-ndjson", body = TakenView), Refusals))]
async fn take_stream(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
    head: WorkerHead,
    JsonBody(request): JsonBody<TakeRequest>,
) -> Result<Response, ApiError> {
    if request.wait.is_some() {
        return Err(ApiError::invalid(
            "wait",
            "is not used by a stream, which waits as long as it is open",
        ));
    }
    let p = take_params(&state.limits, request, 100)?;
    let worker = head.name(p.worker.as_deref())?;
    let engine = state.engine.clone();
    let stream = engine.open_stream();
    let seen = Seen {
        name: &worker,
        queues: &p.queues,
    };
    engine.workers().stream_opened(seen, engine.now_ms());
    let guard = StreamGuard {
        engine: engine.clone(),
        stream,
        worker,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let guard = guard;
        // A revoked token's stream ends, and the guard gives its jobs back.
        let revoked = engine.revoked(principal.token);
        tokio::pin!(revoked);
        let mut last_line = tokio::time::Instant::now();
        loop {
            // Registered before looking, so an acknowledgement in between is not missed.
            let released = engine.signals().released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            // A failed look counts as full: wait, and look again.
            let held = engine.stream_leases(stream).await.unwrap_or(p.max);
            let room = p.max.saturating_sub(held);
            if room == 0 {
                // Wait for an acknowledgement (any: the store does not say whose), or for the
                // keep-alive line, which still goes out every second so that a full stream is
                // not silent (a client cannot tell silence from a dead server).
                if last_line.elapsed() >= KEEP_ALIVE {
                    if tx.send(Ok(Bytes::from_static(b"\n"))).await.is_err() {
                        return;
                    }
                    last_line = tokio::time::Instant::now();
                }
                tokio::select! {
                    () = &mut released => continue,
                    () = tokio::time::sleep_until(last_line + KEEP_ALIVE) => continue,
                    () = tx.closed() => return,
                    () = engine.stopped() => return,
                    () = &mut revoked => return,
                }
            }
            let request = Take::new(&p.queues, room, p.lease_ms).in_stream(stream);
            // A closed connection or a revoked token ends the take only while it waits, never
            // inside the store's take: a take cut off there could lease jobs after the guard
            // has released the stream's, leaving them held by a stream that is gone until
            // their leases expire (an attempt lost). The take then ends, and so does the loop.
            let gone = async {
                tokio::select! {
                    () = &mut revoked => {}
                    () = tx.closed() => {}
                }
            };
            let taken = engine.take(&request, KEEP_ALIVE, gone).await;
            if tx.is_closed() {
                return;
            }
            if principal.token.is_some_and(|id| !engine.knows_token(id)) {
                // Taken as the token went: the guard gives these back with the rest.
                return;
            }
            let jobs = match taken {
                Ok(jobs) => jobs,
                Err(error) => {
                    tracing::error!(%error, "stream take failed");
                    return;
                }
            };
            let seen = Seen {
                name: &guard.worker,
                queues: &p.queues,
            };
            engine
                .workers()
                .took(seen, &jobs, Some(stream), engine.now_ms());
            if jobs.is_empty() {
                // A keep-alive line keeps proxies from closing an idle stream.
                if tx.send(Ok(Bytes::from_static(b"\n"))).await.is_err() {
                    return;
                }
                last_line = tokio::time::Instant::now();
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
            last_line = tokio::time::Instant::now();
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// A heartbeat: the lease token of the take, and the new lease (default `--default-lease`, at
/// most `--max-lease`; never past `--max-attempt-time` after the take).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct LeaseBody {
    lease_token: LeaseToken,
    lease: Option<Millis>,
}

/// The lease after a heartbeat.
#[derive(Debug, Serialize, ToSchema)]
struct HeartbeatView {
    id: JobId,
    lease_expires_at: String,
    /// The job was cancelled while in flight (`POST /api/jobs/{id}/cancel`): the worker
    /// should stop and report a failure, which finishes the job as `cancelled`; a completion
    /// still completes it.
    cancelled: bool,
}

/// Extends a job's lease to `lease` from now, and says whether the job was cancelled.
#[utoipa::path(post, path = "/jobs/{id}/heartbeat", operation_id = "heartbeat_job", tag = "work",
    params(("id" = u64, Path, description = "The job's id"),
        ("X-Tenax-Worker" = Option<String>, Header, description = "The worker's name (1 to 128 \
            characters), for the list of connected workers; else its address and User-Agent")),
    request_body = LeaseBody,
    responses((status = 200, body = HeartbeatView), Missing, Conflict, Refusals))]
async fn heartbeat(
    State(state): State<AppState>,
    Path(id): Path<String>,
    head: WorkerHead,
    JsonBody(body): JsonBody<LeaseBody>,
) -> Result<Json<HeartbeatView>, ApiError> {
    let id = parse_id(&id)?;
    let lease_ms = lease_ms(&state.limits, body.lease)?;
    let worker = head.name(None)?;
    let extended = state
        .engine
        .heartbeat(
            Ack {
                id,
                lease: body.lease_token,
            },
            lease_ms,
        )
        .await?;
    let engine = &state.engine;
    engine
        .workers()
        .heartbeat(&worker, id, extended.expires_at_ms, engine.now_ms());
    Ok(Json(HeartbeatView {
        id,
        lease_expires_at: rfc3339(extended.expires_at_ms),
        cancelled: extended.cancel_requested,
    }))
}

/// A completion: the lease token of the take, and the job's result if it has one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"lease_token": 1_800_000_000_000_000u64, "result": {"sent": true}}))]
struct CompleteOne {
    lease_token: LeaseToken,
    /// What the job produced: any JSON (at most 64 levels deep, at most the payload limit,
    /// `--max-payload-bytes`), kept with the completed job for its retention and shown by
    /// `GET /api/jobs/{id}` byte for byte.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    result: Option<Box<RawValue>>,
}

/// `result` (at `field`) checked as a payload is: well-formed within the depth limit, and no
/// larger than the payload limit.
fn checked_result(
    result: Option<Box<RawValue>>,
    field: impl Fn() -> String,
    limits: &Limits,
) -> Result<Option<JobResult>, ApiError> {
    let Some(result) = result else {
        return Ok(None);
    };
    tenax_core::model::payload::check_text(result.get())
        .map_err(|rule| ApiError::invalid(field(), rule))?;
    if result.get().len() > limits.max_payload_bytes {
        return Err(ApiError::invalid(
            field(),
            format!(
                "must be at most {} bytes of JSON (--max-payload-bytes, as a payload), got {}",
                limits.max_payload_bytes,
                result.get().len()
            ),
        ));
    }
    Ok(Some(JobResult(result)))
}

/// A job after its completion.
#[derive(Debug, Serialize, ToSchema)]
struct CompletedView {
    id: JobId,
    status: Status,
}

/// Completes an in-flight job.
#[utoipa::path(post, path = "/jobs/{id}/complete", operation_id = "complete_job", tag = "work",
    params(("id" = u64, Path, description = "The job's id")),
    request_body = CompleteOne,
    responses((status = 200, body = CompletedView), Missing, Conflict, Refusals))]
async fn complete_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<CompleteOne>,
) -> Result<Json<CompletedView>, ApiError> {
    let id = parse_id(&id)?;
    let token = body.lease_token;
    let result = checked_result(body.result, || "result".to_owned(), &state.limits)?;
    let job_results = if result.is_some() {
        vec![result]
    } else {
        Vec::new()
    };
    let mut results = state
        .engine
        .complete_with_results(&[Ack { id, lease: token }], job_results)
        .await?;
    match results.pop() {
        Some(Ok(())) => {
            state.engine.workers().released(&[id]);
            Ok(Json(CompletedView {
                id,
                status: Status::Completed,
            }))
        }
        Some(Err(error)) => Err(error.into()),
        None => Err(ApiError::not_found(format!("job {id} does not exist"))),
    }
}

/// Jobs to complete, 1 to 10 000.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CompleteMany {
    #[schema(min_items = 1, max_items = 10_000)]
    jobs: Vec<AckItem>,
}

/// One job to complete: its id, the lease token of the take, and its result if it has one.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct AckItem {
    id: JobId,
    lease_token: LeaseToken,
    /// What the job produced, as in a single completion's `result`.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    result: Option<Box<RawValue>>,
}

/// Completes many jobs in one durable commit; each gets its own result.
#[utoipa::path(post, path = "/jobs/complete", operation_id = "complete_jobs", tag = "work", request_body = CompleteMany,
    responses((status = 200, body = CompleteResults), Refusals))]
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
    // One result per job only when one has a result: the common batch carries none.
    let mut job_results = Vec::new();
    if body.jobs.iter().any(|j| j.result.is_some()) {
        job_results.reserve_exact(body.jobs.len());
        for (i, job) in body.jobs.into_iter().enumerate() {
            let field = || format!("jobs[{i}].result");
            job_results.push(checked_result(job.result, field, &state.limits)?);
        }
    }
    let results = state
        .engine
        .complete_with_results(&acks, job_results)
        .await?;
    let completed: Vec<JobId> = acks
        .iter()
        .zip(&results)
        .filter(|(_, result)| result.is_ok())
        .map(|(ack, _)| ack.id)
        .collect();
    state.engine.workers().released(&completed);
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
#[derive(Debug, Serialize, ToSchema)]
struct CompleteResults {
    results: Vec<CompleteResult>,
}

#[derive(Debug, Serialize, ToSchema)]
struct CompleteResult {
    completed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<CompleteError>,
    id: JobId,
}

#[derive(Debug, Serialize, ToSchema)]
struct CompleteError {
    #[schema(value_type = String)]
    code: &'static str,
    message: String,
}

/// A failure report. `error` is a message or `{"message", "detail"}`; at most one of
/// `retryable: false`, `retry_at`, `retry_in`, `snooze`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"lease_token": 1_800_000_000_000_000u64, "error": "SMTP timeout"}))]
pub struct FailRequest {
    pub(crate) lease_token: LeaseToken,
    /// What went wrong; required unless `snooze` is given.
    pub(crate) error: Option<ErrorReport>,
    /// `false`: the job is dead at once, whatever its policy.
    #[serde(default = "yes")]
    pub(crate) retryable: bool,
    /// Retry at this time (counts an attempt; the limit and window still apply).
    pub(crate) retry_at: Option<Time>,
    /// Retry after this delay (counts an attempt; the limit and window still apply).
    pub(crate) retry_in: Option<Millis>,
    /// Run again after this delay without counting an attempt.
    pub(crate) snooze: Option<Millis>,
}

fn yes() -> bool {
    true
}

/// What went wrong: a message, or a message with any JSON detail.
#[derive(Debug)]
pub(crate) enum ErrorReport {
    Message(String),
    Detailed(DetailedError),
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DetailedError {
    #[schema(max_length = 65536)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) detail: Option<Value>,
}

impl<'de> Deserialize<'de> for ErrorReport {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        match Value::deserialize(deserializer)? {
            Value::String(message) => Ok(Self::Message(message)),
            object @ Value::Object(_) => serde_json::from_value(object)
                .map(Self::Detailed)
                .map_err(|e| D::Error::custom(super::extract::humanize(&e.to_string()))),
            other => Err(D::Error::custom(format!(
                "must be a message or an object {{\"message\", \"detail\"}}, got {}",
                super::extract::json_kind_of(&other)
            ))),
        }
    }
}

impl utoipa::PartialSchema for ErrorReport {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .max_length(Some(65_536)),
            )
            .item(DetailedError::schema())
            .into()
    }
}

impl ToSchema for ErrorReport {}

/// A worker's failure report as the engine takes it: one outcome at most, an error message
/// (only a snooze may leave it out) within its limits, and readable detail.
pub fn failure_report(body: FailRequest, now_ms: u64) -> Result<FailureReport, ApiError> {
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
        let at_ms =
            check_time(at_ms, now_ms).map_err(|rule| ApiError::invalid("retry_at", rule))?;
        Outcome::RetryAt { at_ms }
    } else if let Some(Millis(delay_ms)) = body.retry_in {
        Outcome::RetryIn { delay_ms }
    } else if let Some(Millis(delay_ms)) = body.snooze {
        Outcome::Snooze { delay_ms }
    } else {
        Outcome::Retry
    };
    let (message, detail) = match body.error {
        Some(ErrorReport::Message(message)) => (message, None),
        Some(ErrorReport::Detailed(DetailedError { message, detail })) => (message, detail),
        // A snooze is not a failure: nothing is recorded, so nothing need be said.
        None if body.snooze.is_some() => (String::new(), None),
        None => {
            return Err(ApiError::invalid(
                "error",
                "is required: a message, or {\"message\", \"detail\"} (only a snooze may leave it out)",
            ));
        }
    };
    if message.len() > 64 * 1024 {
        return Err(ApiError::invalid(
            "error.message",
            "must be at most 65536 bytes",
        ));
    }
    if let Some(detail) = &detail {
        tenax_core::model::payload::check_value(detail)
            .map_err(|rule| ApiError::invalid("error.detail", rule))?;
    }
    Ok(FailureReport {
        message,
        detail,
        outcome,
    })
}

/// A job after a failure: scheduled again (when, after which delay, as which attempt), or dead
/// (why).
#[derive(Debug, Serialize, ToSchema)]
struct FailView {
    id: JobId,
    status: Status,
    failures: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay_ms: Option<u64>,
}

/// Reports a failure of an in-flight job; the answer is its policy's decision.
#[utoipa::path(post, path = "/jobs/{id}/fail", operation_id = "fail_job", tag = "work",
    params(("id" = u64, Path, description = "The job's id")),
    request_body = FailRequest,
    responses((status = 200, body = FailView), Missing, Conflict, Refusals))]
async fn fail(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<FailRequest>,
) -> Result<Json<FailView>, ApiError> {
    let id = parse_id(&id)?;
    let lease = body.lease_token;
    let report = failure_report(body, state.engine.now_ms())?;
    let (transition, failed_at) = state.engine.fail(Ack { id, lease }, report).await?;
    state.engine.workers().released(&[id]);
    let s = &transition.state;
    // Dead, or cancelled (its lease was marked cancelled): it will not run again.
    let dead = s.status.is_given_up();
    Ok(Json(FailView {
        id,
        status: s.status,
        failures: s.failures,
        dead_reason: if dead { s.dead_reason.clone() } else { None },
        attempt: (!dead).then(|| s.failures + 1),
        run_at: (!dead).then(|| rfc3339(s.run_at_ms)),
        delay_ms: (!dead).then(|| s.run_at_ms.saturating_sub(failed_at)),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn complete_results_encode_as_the_json_maps_they_replace() {
        let answer = CompleteResults {
            results: vec![
                CompleteResult {
                    completed: true,
                    error: None,
                    id: JobId(7),
                },
                CompleteResult {
                    completed: false,
                    error: Some(CompleteError {
                        code: "lease_lost",
                        message: "job 8: gone".into(),
                    }),
                    id: JobId(8),
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
