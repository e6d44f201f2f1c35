//! Enqueue, inspect, list, delete jobs; counts per queue.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tenax_core::auth::Principal;
use tenax_core::clock::{UnixMs, check_time, rfc3339};
use tenax_core::engine::{self, EngineError, Enqueue};
use tenax_core::model::{
    After, Enqueued, JobFilter, JobId, NewJob, OnDuplicate, OnParentDead, Page, QueueCounts,
    Selection, Status, StoredPolicy, check_traceparent, subscription::is_internal_queue,
};
use tenax_policy::parse_policy;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::after;
use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::{Millis, Time, check_queue_name};
use super::openapi::{Conflict, Missing, Refusals};
use super::views::JobView;
use super::{AppState, Limits};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(enqueue_one, list))
        .routes(routes!(enqueue_batch))
        .routes(routes!(show, delete_one))
        .routes(routes!(stats))
}

/// One job to enqueue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"queue": "emails", "type": "welcome", "payload": {"user": 42},
    "policy": {"type": "list", "delays": ["2s", "4s"]}}))]
pub struct EnqueueRequest {
    /// The queue: 1 to 1602 of `A-Z a-z 0-9 - _ . :` (`fields::MAX_QUEUE_NAME`).
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,1602}$")]
    pub queue: String,
    /// What the worker should do.
    #[serde(rename = "type", default)]
    #[schema(max_length = 128)]
    pub kind: String,
    /// Any JSON (at most 64 levels deep), kept and shown byte for byte.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub payload: Option<Box<RawValue>>,
    /// Higher runs first; FIFO within a priority.
    #[serde(default)]
    pub priority: i32,
    /// When the job becomes ready (default: now).
    pub run_at: Option<Time>,
    /// The alternative to `run_at`.
    pub delay: Option<Millis>,
    /// This job's retry policy, in any spelling (native, SNS, Zaqar).
    #[schema(value_type = Option<Object>)]
    pub policy: Option<Value>,
    /// Overrides the policy's retry limit.
    #[schema(maximum = 100_000)]
    pub retry_limit: Option<u32>,
    /// At most one unfinished job per queue and key.
    #[schema(min_length = 1, max_length = 256)]
    pub unique_key: Option<String>,
    /// What a duplicate unique key gets.
    pub on_duplicate: Option<OnDuplicate>,
    /// The W3C trace context to carry with the job (handed to its workers, sent with its
    /// webhook deliveries). Without it, the request's `traceparent` header, if any.
    #[schema(
        pattern = "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$",
        max_length = 512
    )]
    pub traceparent: Option<String>,
    /// The jobs this one waits for: it runs once every one of them has completed. A stored
    /// job by its id; in a batch, another job of the batch by `{"index": n}` or
    /// `{"step": "name"}`.
    #[schema(value_type = Option<Vec<Object>>, max_items = 1000,
        example = json!([17, {"step": "extract"}]))]
    pub after: Option<Vec<Value>>,
    /// What it does when a job it waits for will not complete (dies, is deleted or
    /// cancelled): `cancel` (the default) or `run`.
    pub on_parent_dead: Option<OnParentDead>,
    /// In a batch: this job's name, by which other jobs of the batch wait for it.
    #[schema(min_length = 1, max_length = 128)]
    pub step: Option<String>,
}

/// Jobs to enqueue atomically: all or none.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[schema(min_items = 1)]
    pub jobs: Vec<EnqueueRequest>,
    #[serde(default)]
    pub on_duplicate: OnDuplicate,
}

/// Turns a request into a job to enqueue, naming fields under `prefix` in errors.
pub fn to_enqueue(
    request: EnqueueRequest,
    prefix: &str,
    now_ms: UnixMs,
    limits: &Limits,
) -> Result<Enqueue, ApiError> {
    let field = |name: &str| {
        if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}.{name}")
        }
    };
    check_queue_name(&field("queue"), &request.queue)?;
    // The enqueue handlers take these out first (`after::plan`); elsewhere no job waits.
    if request.after.is_some() || request.step.is_some() {
        let name = if request.after.is_some() {
            "after"
        } else {
            "step"
        };
        return Err(ApiError::invalid(
            field(name),
            "only a job enqueued by POST /api/jobs or /api/jobs/batch can wait for others",
        ));
    }
    if request.kind.len() > 128 {
        return Err(ApiError::invalid(
            field("type"),
            "must be at most 128 characters",
        ));
    }
    // Text databases cannot hold U+0000: a job type or key with one could not be stored
    // alike by every store, so none accepts it.
    if request.kind.contains('\0') {
        return Err(ApiError::invalid(
            field("type"),
            "must not contain the NUL character (U+0000)",
        ));
    }
    let payload = match request.payload {
        Some(payload) => payload,
        None => RawValue::from_string("null".into())
            .map_err(|e| ApiError::invalid(field("payload"), e.to_string()))?,
    };
    tenax_core::model::payload::check_text(payload.get())
        .map_err(|rule| ApiError::invalid(field("payload"), rule))?;
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
    if let Some(traceparent) = &request.traceparent {
        check_traceparent(traceparent)
            .map_err(|rule| ApiError::invalid(field("traceparent"), rule))?;
    }
    let traceparent = request.traceparent;
    let run_at_ms = match (request.run_at, request.delay) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                field("delay"),
                "give run_at or delay, not both",
            ));
        }
        (Some(Time(at)), None) => {
            check_time(at, now_ms).map_err(|rule| ApiError::invalid(field("run_at"), rule))?
        }
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
        if key.contains('\0') {
            return Err(ApiError::invalid(
                field("unique_key"),
                "must not contain the NUL character (U+0000)",
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
    if let Some(limit) = request.retry_limit {
        if limit > tenax_policy::MAX_RETRY_LIMIT {
            return Err(ApiError::invalid(
                field("retry_limit"),
                format!(
                    "must be at most {}, got {limit}",
                    tenax_policy::MAX_RETRY_LIMIT
                ),
            ));
        }
    }
    // A limit beside a policy applies to it; a bare limit is the engine's to apply, to the
    // policy the job would otherwise have had (its queue's, else the server's).
    let (policy, retry_limit) = match (policy, request.retry_limit) {
        (Some(policy), Some(limit)) => (Some(policy.with_retry_limit(limit)), None),
        (policy, limit) => (policy, limit),
    };
    Ok(Enqueue {
        job: NewJob {
            queue: request.queue,
            kind: request.kind,
            payload,
            priority: request.priority,
            run_at_ms,
            policy: policy.map(StoredPolicy::new),
            unique_key: request.unique_key,
            created_at_ms: now_ms,
            expires_at_ms: None,
            origin: None,
            parent: None,
            traceparent,
            payload_sealed: false,
            after: Vec::new(),
            on_parent_dead: request.on_parent_dead.unwrap_or_default(),
            batch: None,
        },
        retry_limit,
        after: Vec::new(),
    })
}

/// The answer for one enqueued job. Serialised straight from this struct rather than through a
/// `serde_json::Value` (one map per job); the fields are in the order such a map gave them.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EnqueuedView {
    created: bool,
    id: JobId,
    run_at: String,
    status: Status,
}

pub(super) fn enqueued_view(e: &Enqueued) -> EnqueuedView {
    EnqueuedView {
        created: e.created,
        id: e.id,
        run_at: rfc3339(e.run_at_ms),
        status: e.status,
    }
}

#[derive(Debug, Serialize, ToSchema)]
struct EnqueuedJobsView {
    jobs: Vec<EnqueuedView>,
}

/// Enqueues one job.
#[utoipa::path(post, path = "/jobs", operation_id = "enqueue_job", tag = "jobs", request_body = EnqueueRequest, responses(
    (status = 201, description = "The job was stored", body = EnqueuedView, links(
            ("get_job" = (operation_id = "get_job", parameters(("id" = "$response.body#/id")))),
            ("delete_job" = (operation_id = "delete_job", parameters(("id" = "$response.body#/id")))),
            ("heartbeat_job" = (operation_id = "heartbeat_job", parameters(("id" = "$response.body#/id")))),
            ("complete_job" = (operation_id = "complete_job", parameters(("id" = "$response.body#/id")))),
            ("fail_job" = (operation_id = "fail_job", parameters(("id" = "$response.body#/id")))),
        )),
    (status = 200, description = "The unique key's holder (`on_duplicate: existing`)", body = EnqueuedView),
    Conflict, Refusals))]
async fn enqueue_one(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(mut request): JsonBody<EnqueueRequest>,
) -> Result<(StatusCode, Json<EnqueuedView>), ApiError> {
    let header = traceparent_header(&headers)?;
    request.traceparent = request.traceparent.or(header);
    let on_duplicate = request.on_duplicate.unwrap_or_default();
    let now = state.engine.now_ms();
    if request.step.is_some() {
        return Err(ApiError::invalid(
            "step",
            "names a job of a batch, for others of the batch to wait for: use POST /api/jobs/batch",
        ));
    }
    check_on_parent_dead(&request, "")?;
    let parents = match request.after.take() {
        Some(values) => after::parse(&values, "after")?,
        None => Vec::new(),
    };
    let mut ids = Vec::with_capacity(parents.len());
    for (position, parent) in parents.into_iter().enumerate() {
        match parent {
            after::ParentRef::Job(id) => ids.push((format!("after[{position}]"), id)),
            _ => {
                return Err(ApiError::invalid(
                    format!("after[{position}]"),
                    "names a job of a batch: only POST /api/jobs/batch has others",
                ));
            }
        }
    }
    check_parents(&state, &ids).await?;
    let mut job = to_enqueue(request, "", now, &state.limits)?;
    job.after = ids.iter().map(|(_, id)| After::Job(*id)).collect();
    let result = state
        .engine
        .enqueue(vec![job], on_duplicate)
        .await
        .map_err(|e| enqueue_field(e, |_| String::new()))?;
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

/// Enqueues jobs atomically: one bad job refuses them all and nothing is stored.
#[utoipa::path(post, path = "/jobs/batch", operation_id = "enqueue_jobs", tag = "jobs", request_body = BatchRequest, responses(
    (status = 201, description = "Every job, in request order", body = EnqueuedJobsView),
    Conflict, Refusals))]
async fn enqueue_batch(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(request): JsonBody<BatchRequest>,
) -> Result<(StatusCode, Json<EnqueuedJobsView>), ApiError> {
    if request.jobs.is_empty() {
        return Err(ApiError::invalid("jobs", "must hold at least one job"));
    }
    let header = traceparent_header(&headers)?;
    let now = state.engine.now_ms();
    let mut inserts = Vec::with_capacity(request.jobs.len());
    let mut planned = Vec::with_capacity(request.jobs.len());
    let mut stored_parents = Vec::new();
    for (i, mut job) in request.jobs.into_iter().enumerate() {
        if job.on_duplicate.is_some() {
            return Err(ApiError::invalid(
                format!("jobs[{i}].on_duplicate"),
                "is set for the whole batch: give on_duplicate beside jobs, not in a job",
            ));
        }
        if let Some(step) = &job.step {
            if step.is_empty() || step.len() > 128 {
                return Err(ApiError::invalid(
                    format!("jobs[{i}].step"),
                    "must be 1 to 128 characters",
                ));
            }
        }
        check_on_parent_dead(&job, &format!("jobs[{i}]."))?;
        let field = format!("jobs[{i}].after");
        let after = match job.after.take() {
            Some(values) => after::parse(&values, &field)?,
            None => Vec::new(),
        };
        for (position, parent) in after.iter().enumerate() {
            if let after::ParentRef::Job(id) = parent {
                stored_parents.push((format!("{field}[{position}]"), *id));
            }
        }
        planned.push(after::Planned {
            step: job.step.take(),
            after,
        });
        let job = EnqueueRequest {
            traceparent: job.traceparent.or_else(|| header.clone()),
            ..job
        };
        inserts.push(Some(to_enqueue(
            job,
            &format!("jobs[{i}]"),
            now,
            &state.limits,
        )?));
    }
    let (order, afters) = after::plan(&planned)?;
    check_parents(&state, &stored_parents).await?;
    // Stored parents first: `order` puts each job after the jobs of the batch it waits for.
    let mut ordered = Vec::with_capacity(inserts.len());
    for (&i, after) in order.iter().zip(afters) {
        let Some(mut job) = inserts[i].take() else {
            continue;
        };
        job.after = after;
        ordered.push(job);
    }
    let result = state
        .engine
        .enqueue(ordered, request.on_duplicate)
        .await
        .map_err(|e| enqueue_field(e, |i| format!("jobs[{}].", order[i])))?;
    let mut views: Vec<Option<EnqueuedView>> = order.iter().map(|_| None).collect();
    for (at, enqueued) in result.iter().enumerate() {
        if let Some(&i) = order.get(at) {
            views[i] = Some(enqueued_view(enqueued));
        }
    }
    let jobs = views.into_iter().flatten().collect();
    Ok((StatusCode::CREATED, Json(EnqueuedJobsView { jobs })))
}

/// The request's `traceparent` header (W3C trace context), checked: the trace of every job the
/// request enqueues without naming its own.
pub(super) fn traceparent_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("traceparent") else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::invalid("traceparent", "the header must be ASCII"))?;
    check_traceparent(text)
        .map_err(|rule| ApiError::invalid("traceparent", format!("(the header) {rule}")))?;
    Ok(Some(text.to_owned()))
}

/// Refuses `on_parent_dead` without `after`: it would say nothing (`prefix` names the job).
fn check_on_parent_dead(request: &EnqueueRequest, prefix: &str) -> Result<(), ApiError> {
    if request.on_parent_dead.is_some() && request.after.as_ref().is_none_or(Vec::is_empty) {
        return Err(ApiError::invalid(
            format!("{prefix}on_parent_dead"),
            "says what the job does when a job it waits for will not complete: give after too",
        ));
    }
    Ok(())
}

/// Refuses parents that are webhook deliveries: a job waits only for jobs. (An unknown id is
/// the store's to refuse, atomically with the enqueue.)
async fn check_parents(state: &AppState, parents: &[(String, JobId)]) -> Result<(), ApiError> {
    if parents.is_empty() {
        return Ok(());
    }
    let ids: Vec<JobId> = parents.iter().map(|(_, id)| *id).collect();
    for ((field, id), peek) in parents.iter().zip(state.engine.peek(&ids).await?) {
        if peek.is_some_and(|p| is_internal_queue(&p.queue)) {
            return Err(ApiError::invalid(
                field,
                format!("job {id} is a webhook delivery: a job waits only for jobs"),
            ));
        }
    }
    Ok(())
}

/// A refused enqueue names the field at fault: a duplicate the job's `unique_key`, an unknown
/// parent its place in `after`; `prefix(i)` is the job at index `i` as the request names it
/// (`""` for a single job, `"jobs[3]."` in a batch). Other errors as usual.
fn enqueue_field(error: EngineError, prefix: impl Fn(usize) -> String) -> ApiError {
    if let EngineError::NotFound(engine::Missing::Parent {
        index,
        position,
        id,
    }) = &error
    {
        return ApiError::invalid(
            format!("{}after[{position}]", prefix(*index)),
            format!("job {id} does not exist"),
        );
    }
    duplicate_field(error, |i| format!("{}unique_key", prefix(i)))
}

/// A refused duplicate names the job's `unique_key` field; other errors as usual.
pub(super) fn duplicate_field(error: EngineError, field: impl Fn(usize) -> String) -> ApiError {
    match &error {
        EngineError::Conflict(engine::Conflict::Duplicate { index, .. }) => ApiError {
            field: Some(field(*index)),
            ..ApiError::from(error.clone())
        },
        _ => error.into(),
    }
}

pub(super) fn parse_id(text: &str) -> Result<JobId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::invalid(
            "id",
            format!("must be a job id (a whole number), got {text:?}"),
        )
    })
}

/// One job with its errors.
#[utoipa::path(get, path = "/jobs/{id}", operation_id = "get_job", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id"), ShowQuery),
    responses((status = 200, body = JobView), Missing, Refusals))]
async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    query: Result<Query<ShowQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobView>, ApiError> {
    let id = parse_id(&id)?;
    let query = super::extract::query(query)?;
    let job = match &query.wait {
        Some(wait) => {
            let wait_ms = parse_wait(wait)?;
            let wait = std::time::Duration::from_millis(wait_ms);
            state.engine.job_when_finished(id, wait).await?
        }
        None => state.engine.job(id).await?,
    };
    job.map(|job| Json(JobView::from(job)))
        .ok_or_else(|| ApiError::not_found(format!("job {id} does not exist")))
}

/// How to show a job.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ShowQuery {
    /// Wait until the job has finished (completed or dead), at most this long (milliseconds
    /// or a duration such as `30s`; at most 60 s), then show it as it is: a producer waits
    /// for a job's result without polling.
    #[param(value_type = Option<String>, example = "30s")]
    pub wait: Option<String>,
}

/// The longest `GET /api/jobs/{id}?wait=` waits: as long as a take.
const MAX_SHOW_WAIT_MS: u64 = 60_000;

/// `?wait=`'s duration, in milliseconds.
fn parse_wait(text: &str) -> Result<u64, ApiError> {
    let wait_ms = tenax_policy::parse_duration("wait", text)
        .map_err(|e| ApiError::invalid("wait", e.rule))?;
    if wait_ms > MAX_SHOW_WAIT_MS {
        return Err(ApiError::invalid(
            "wait",
            format!("must be at most {MAX_SHOW_WAIT_MS} ms, got {wait_ms} ms"),
        ));
    }
    Ok(wait_ms)
}

/// Deletes a job, whatever its status.
#[utoipa::path(delete, path = "/jobs/{id}", operation_id = "delete_job", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    responses((status = 204, description = "Deleted"), Missing, Refusals))]
async fn delete_one(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id(&id)?;
    let deleted = state
        .engine
        .delete_jobs(&Selection {
            ids: Some(vec![id]),
            ..Selection::default()
        })
        .await?;
    if deleted.is_empty() {
        return Err(ApiError::not_found(format!("job {id} does not exist")));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Which jobs, and which page of them.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this queue's jobs.
    pub queue: Option<String>,
    /// Only jobs in this status.
    #[param(value_type = Option<Status>)]
    pub status: Option<String>,
    /// Only jobs of this type.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Jobs per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// The `next_after` of the previous page.
    pub after: Option<JobId>,
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
            ..JobFilter::default()
        },
        limit,
    ))
}

/// A page of jobs. Serialised from the views, never through a `serde_json::Value`: a payload is
/// written out as the JSON text that was stored, never parsed again on the way.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobPage {
    jobs: Vec<JobView>,
    /// The cursor of the next page (`after`), `null` at the end.
    next_after: Option<JobId>,
}

pub(super) async fn list_page(
    state: &AppState,
    query: &ListQuery,
    status: Option<Status>,
) -> Result<Json<JobPage>, ApiError> {
    let (filter, limit) = filter_from(query, status)?;
    let jobs = state
        .engine
        .jobs(&filter, Page::after(query.after, limit))
        .await?;
    let next_after = (jobs.len() == limit)
        .then(|| jobs.last().map(|j| j.id))
        .flatten();
    let jobs: Vec<JobView> = jobs.into_iter().map(JobView::from).collect();
    Ok(Json(JobPage { jobs, next_after }))
}

/// A page of jobs in id order, filtered by queue, status and type.
#[utoipa::path(get, path = "/jobs", operation_id = "list_jobs", tag = "jobs", params(ListQuery),
    responses((status = 200, body = JobPage), Refusals))]
async fn list(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    let query = super::extract::query(query)?;
    list_page(&state, &query, None).await
}

/// Job counts per queue and in total.
#[derive(Debug, Serialize, ToSchema)]
struct StatsView {
    queues: Vec<QueueCounts>,
    totals: Totals,
}

/// Jobs by status, over every queue.
#[derive(Debug, Default, Serialize, ToSchema)]
struct Totals {
    scheduled: u64,
    ready: u64,
    in_flight: u64,
    completed: u64,
    dead: u64,
    cancelled: u64,
    waiting: u64,
}

/// Counts per queue and in total. Internal queues (subscriptions' deliveries) are left out:
/// their counts are on each subscription; so are queues the token may not touch.
#[utoipa::path(get, path = "/stats", operation_id = "get_stats", tag = "jobs",
    responses((status = 200, body = StatsView), Refusals))]
async fn stats(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<StatsView>, ApiError> {
    let mut queues = state.engine.counts().await?;
    queues.retain(|q| !is_internal_queue(&q.queue) && principal.admits_queue(&q.queue));
    let mut totals = Totals::default();
    for q in &queues {
        totals.scheduled += q.scheduled;
        totals.ready += q.ready;
        totals.in_flight += q.in_flight;
        totals.completed += q.completed;
        totals.dead += q.dead;
        totals.cancelled += q.cancelled;
        totals.waiting += q.waiting;
    }
    Ok(Json(StatsView { queues, totals }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn enqueued_view_encodes_as_the_json_map_it_replaces() {
        for (created, status) in [(true, Status::Ready), (false, Status::Scheduled)] {
            let e = Enqueued {
                id: JobId(42),
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
