//! Schedules: named cron timetables whose ticks enqueue jobs. Make or replace one (PUT), read,
//! list, delete, pause and resume; see its next ticks, or any expression's before storing it.
//!
//! Invariant: a stored schedule's expression and time zone were read by [`Timetable`] and its
//! job template passed every rule of an enqueue (`jobs::to_enqueue`), so its ticks can always
//! be enqueued.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tenax_core::auth::Principal;
use tenax_core::clock::rfc3339;
use tenax_core::engine::ScheduleSpec;
use tenax_core::model::timetable::{Tick, Timetable, TimetableError};
use tenax_core::model::{JobId, JobTemplate, Missed, Overlap, Schedule, TickCounts};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::extract::JsonBody;
use super::fields::{MAX_QUEUE_NAME, check_queue_name};
use super::jobs::{EnqueueRequest, to_enqueue};
use super::openapi::{Missing, Refusals};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show, put, delete))
        .routes(routes!(pause))
        .routes(routes!(resume))
        .routes(routes!(run))
        .routes(routes!(ticks))
        .routes(routes!(preview))
}

/// The most ticks one request shows.
const MAX_TICKS: usize = 1_000;
/// Ticks shown when a request does not say.
const DEFAULT_TICKS: usize = 10;

/// A schedule to make, or to replace the one of its name with.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin",
    "job": {"queue": "reports", "type": "nightly", "payload": {"full": true}}}))]
pub struct PutSchedule {
    /// Five fields (minute hour day-of-month month day-of-week), six (a leading second), or
    /// `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`.
    #[schema(max_length = 256)]
    pub(crate) cron: String,
    /// The IANA time zone the expression is read in (default `UTC`).
    pub(crate) timezone: Option<String>,
    /// The job each tick enqueues: an enqueue's fields but those that say when or dedupe
    /// (`run_at`, `delay`, `unique_key`, `on_duplicate`).
    pub(crate) job: TemplateRequest,
    /// Ticks no server handled within a minute of their time: `skip` them (default), or
    /// `run_once` (one job for the latest of them).
    pub(crate) missed: Option<Missed>,
    /// A tick while the previous tick's job is unfinished: `allow` (default) enqueues it,
    /// `skip` leaves it out.
    pub(crate) overlap: Option<Overlap>,
    /// Make (or keep) it paused.
    pub(crate) paused: Option<bool>,
}

/// A schedule's job.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TemplateRequest {
    #[schema(pattern = "^[A-Za-z0-9._:-]{1,256}$")]
    pub(crate) queue: String,
    #[serde(rename = "type", default)]
    #[schema(max_length = 128)]
    pub(crate) kind: String,
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub(crate) payload: Option<Box<RawValue>>,
    #[serde(default)]
    pub(crate) priority: i32,
    #[schema(value_type = Option<Object>)]
    pub(crate) policy: Option<Value>,
    #[schema(maximum = 100_000)]
    pub(crate) retry_limit: Option<u32>,
}

impl TemplateRequest {
    /// The enqueue this template makes (a schedule's tick, a batch's callback), for the checks
    /// of [`to_enqueue`] and the job they give: a job of its own, now, waiting for none.
    pub(crate) fn into_request(self) -> EnqueueRequest {
        EnqueueRequest {
            queue: self.queue,
            kind: self.kind,
            payload: self.payload,
            priority: self.priority,
            run_at: None,
            delay: None,
            policy: self.policy,
            retry_limit: self.retry_limit,
            unique_key: None,
            on_duplicate: None,
            traceparent: None,
            after: None,
            on_parent_dead: None,
            step: None,
        }
    }
}

/// A schedule: its definition, its next ticks, and what its ticks did.
#[derive(Debug, Serialize, ToSchema)]
struct ScheduleView {
    name: String,
    cron: String,
    timezone: String,
    /// The expression in words.
    description: String,
    job: TemplateView,
    missed: Missed,
    overlap: Overlap,
    paused: bool,
    /// The next tick (RFC 3339, UTC); `null` when the expression has no more. Shown while
    /// paused too: what it would be.
    next_tick: Option<String>,
    /// The tick of the last job enqueued, and that job.
    last_tick: Option<String>,
    last_job: Option<JobId>,
    counts: TickCounts,
    created_at: String,
    updated_at: String,
}

/// A schedule's job, as stored.
#[derive(Debug, Serialize, ToSchema)]
struct TemplateView {
    queue: String,
    #[serde(rename = "type")]
    kind: String,
    #[schema(value_type = serde_json::Value)]
    payload: Box<RawValue>,
    priority: i32,
    /// Canonical native JSON; absent when the job has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_limit: Option<u32>,
}

#[derive(Debug, Serialize, ToSchema)]
struct ScheduleList {
    schedules: Vec<ScheduleView>,
}

/// One tick.
#[derive(Debug, Serialize, ToSchema)]
struct TickView {
    /// RFC 3339, UTC.
    at: String,
    /// The wall-clock time in the schedule's zone, with its offset.
    local: String,
    /// The expression names a wall time that does not exist that day (clocks moved forward):
    /// the tick is the first instant after the gap.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    shifted: bool,
}

#[derive(Debug, Serialize, ToSchema)]
struct TickList {
    cron: String,
    timezone: String,
    description: String,
    ticks: Vec<TickView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct TicksQuery {
    /// How many ticks (1 to 1000, default 10).
    count: Option<usize>,
}

/// An expression to check before storing it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PreviewRequest {
    #[schema(max_length = 256)]
    cron: String,
    /// Default `UTC`.
    timezone: Option<String>,
    /// How many ticks (1 to 1000, default 10).
    count: Option<usize>,
    /// The ticks after this time (default: now).
    after: Option<super::fields::Time>,
}

#[derive(Debug, Serialize, ToSchema)]
struct DeletedSchedule {
    deleted: String,
}

fn tick_view(tick: Tick) -> TickView {
    TickView {
        at: rfc3339(tick.at_ms),
        local: tick.local,
        shifted: tick.shifted,
    }
}

fn timetable_error(error: TimetableError) -> ApiError {
    ApiError::invalid(error.field, error.rule)
}

fn check_count(count: Option<usize>) -> Result<usize, ApiError> {
    match count.unwrap_or(DEFAULT_TICKS) {
        n @ 1..=MAX_TICKS => Ok(n),
        n => Err(ApiError::invalid(
            "count",
            format!("must be 1 to {MAX_TICKS} ticks, got {n}"),
        )),
    }
}

/// Checks a schedule's name: the rule of queue names, but `preview` (a route of its own).
fn check_name(name: &str) -> Result<(), ApiError> {
    if name == "preview" {
        return Err(ApiError::invalid(
            "name",
            "must not be \"preview\": POST /api/schedules/preview shows an expression's ticks",
        ));
    }
    check_queue_name("name", name).map_err(|_| {
        ApiError::invalid(
            "name",
            format!(
                "must be 1 to {MAX_QUEUE_NAME} characters of letters, digits, '-', '_', '.' or \
                 ':', got {name:?}"
            ),
        )
    })
}

fn view(schedule: &Schedule) -> ScheduleView {
    let description = Timetable::new(&schedule.cron, &schedule.timezone)
        .map(|t| t.describe())
        .unwrap_or_else(|e| format!("cannot be read: {}", e.rule));
    let job = &schedule.job;
    ScheduleView {
        name: schedule.name.clone(),
        cron: schedule.cron.clone(),
        timezone: schedule.timezone.clone(),
        description,
        job: TemplateView {
            queue: job.queue.clone(),
            kind: job.kind.clone(),
            payload: job.payload.clone(),
            priority: job.priority,
            policy: job.policy.as_ref().map(|p| p.json().clone()),
            retry_limit: job.retry_limit,
        },
        missed: schedule.missed,
        overlap: schedule.overlap,
        paused: schedule.paused,
        next_tick: schedule.next_tick_ms.map(rfc3339),
        last_tick: schedule.last_tick_ms.map(rfc3339),
        last_job: schedule.last_job,
        counts: schedule.counts,
        created_at: rfc3339(schedule.created_at_ms),
        updated_at: rfc3339(schedule.updated_at_ms),
    }
}

/// Checks a PUT: every rule, before anything is stored. Pure, so the fuzz targets run it too.
pub fn schedule_spec(
    name: &str,
    request: PutSchedule,
    now_ms: u64,
    limits: &super::Limits,
) -> Result<(ScheduleSpec, Timetable), ApiError> {
    check_name(name)?;
    let timezone = request.timezone.unwrap_or_else(|| "UTC".to_owned());
    let timetable = Timetable::new(&request.cron, &timezone).map_err(timetable_error)?;
    if timetable.next_after(now_ms).is_none() {
        return Err(ApiError::invalid(
            "cron",
            "never matches a time from now on (such as February 30th)",
        ));
    }
    let template = request.job;
    // The rules of an enqueue, so that every tick's job can be enqueued.
    let enqueue = to_enqueue(template.into_request(), "job", now_ms, limits)?;
    let job = enqueue.job;
    let spec = ScheduleSpec {
        name: name.to_owned(),
        cron: request.cron.trim().to_owned(),
        timezone: timezone.trim().to_owned(),
        job: JobTemplate {
            queue: job.queue,
            kind: job.kind,
            payload: job.payload,
            priority: job.priority,
            policy: job.policy,
            retry_limit: enqueue.retry_limit,
        },
        missed: request.missed.unwrap_or_default(),
        overlap: request.overlap.unwrap_or_default(),
        paused: request.paused,
    };
    Ok((spec, timetable))
}

/// Every schedule (whose job's queue the token may touch), by name.
#[utoipa::path(get, path = "/schedules", operation_id = "list_schedules", tag = "schedules",
    responses((status = 200, body = ScheduleList), Refusals))]
async fn list(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<ScheduleList>, ApiError> {
    let schedules = state
        .engine
        .schedules()
        .await?
        .iter()
        .filter(|s| principal.admits_queue(&s.job.queue))
        .map(view)
        .collect();
    Ok(Json(ScheduleList { schedules }))
}

async fn found(state: &AppState, name: &str) -> Result<Schedule, ApiError> {
    check_name(name)?;
    state
        .engine
        .schedule(name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("schedule {name:?} does not exist")))
}

/// One schedule.
#[utoipa::path(get, path = "/schedules/{name}", operation_id = "get_schedule", tag = "schedules",
    params(("name" = String, Path, description = "The schedule")),
    responses((status = 200, body = ScheduleView), Missing, Refusals))]
async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    Ok(Json(view(&found(&state, &name).await?)))
}

/// Makes a schedule, or replaces the one of this name. A replaced schedule keeps what its ticks
/// did; when its expression or time zone changes, its ticks start after the change.
#[utoipa::path(put, path = "/schedules/{name}", operation_id = "put_schedule", tag = "schedules",
    params(("name" = String, Path, description = "The schedule")),
    request_body = PutSchedule,
    responses(
        (status = 201, description = "Made", body = ScheduleView),
        (status = 200, description = "Replaced", body = ScheduleView),
        Refusals))]
async fn put(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(request): JsonBody<PutSchedule>,
) -> Result<(StatusCode, Json<ScheduleView>), ApiError> {
    let (spec, timetable) = schedule_spec(&name, request, state.engine.now_ms(), &state.limits)?;
    let (stored, created) = state.engine.put_schedule(spec, &timetable).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view(&stored))))
}

/// Deletes a schedule; the jobs it made stay.
#[utoipa::path(delete, path = "/schedules/{name}", operation_id = "delete_schedule", tag = "schedules",
    params(("name" = String, Path, description = "The schedule")),
    responses((status = 200, body = DeletedSchedule), Missing, Refusals))]
async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<DeletedSchedule>, ApiError> {
    check_name(&name)?;
    if !state.engine.delete_schedule(&name).await? {
        return Err(ApiError::not_found(format!(
            "schedule {name:?} does not exist"
        )));
    }
    Ok(Json(DeletedSchedule { deleted: name }))
}

async fn set_paused(
    state: &AppState,
    name: &str,
    paused: bool,
) -> Result<Json<ScheduleView>, ApiError> {
    check_name(name)?;
    state.engine.pause_schedule(name, paused).await?;
    Ok(Json(view(&found(state, name).await?)))
}

/// Pauses a schedule: its ticks enqueue nothing until it is resumed.
#[utoipa::path(post, path = "/schedules/{name}/pause", operation_id = "pause_schedule", tag = "schedules",
    params(("name" = String, Path, description = "The schedule")),
    responses((status = 200, body = ScheduleView), Missing, Refusals))]
async fn pause(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&state, &name, true).await
}

/// Resumes a paused schedule from its next tick after now: ticks while paused are not
/// enqueued.
#[utoipa::path(post, path = "/schedules/{name}/resume", operation_id = "resume_schedule", tag = "schedules",
    params(("name" = String, Path, description = "The schedule")),
    responses((status = 200, body = ScheduleView), Missing, Refusals))]
async fn resume(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&state, &name, false).await
}

/// Runs a schedule now: enqueues its job at once, outside the timetable, recorded as its last
/// job (so `overlap: skip` waits for it as for a tick's); its ticks and counts are unchanged.
#[utoipa::path(post, path = "/schedules/{name}/run", operation_id = "run_schedule", tag = "schedules",
    params(("name" = String, Path, description = "The schedule")),
    responses((status = 200, body = ScheduleView), Missing, Refusals))]
async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    check_name(&name)?;
    if state.engine.run_schedule_now(&name).await?.is_none() {
        return Err(ApiError::not_found(format!(
            "schedule {name:?} does not exist"
        )));
    }
    Ok(Json(view(&found(&state, &name).await?)))
}

/// A schedule's next ticks, from now (or from its last handled tick, if later).
#[utoipa::path(get, path = "/schedules/{name}/ticks", operation_id = "schedule_ticks", tag = "schedules",
    params(("name" = String, Path, description = "The schedule"), TicksQuery),
    responses((status = 200, body = TickList), Missing, Refusals))]
async fn ticks(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<TicksQuery>,
) -> Result<Json<TickList>, ApiError> {
    let count = check_count(query.count)?;
    let schedule = found(&state, &name).await?;
    let timetable = Timetable::new(&schedule.cron, &schedule.timezone).map_err(timetable_error)?;
    let after = schedule.through_ms.max(state.engine.now_ms());
    Ok(Json(tick_list(
        &schedule.cron,
        &schedule.timezone,
        &timetable,
        after,
        count,
    )))
}

fn tick_list(
    cron: &str,
    timezone: &str,
    timetable: &Timetable,
    after: u64,
    count: usize,
) -> TickList {
    TickList {
        cron: cron.to_owned(),
        timezone: timezone.to_owned(),
        description: timetable.describe(),
        ticks: timetable
            .ticks_after(after, count)
            .into_iter()
            .map(tick_view)
            .collect(),
    }
}

/// The next ticks of an expression in a time zone, without storing anything: check it before
/// trusting it.
#[utoipa::path(post, path = "/schedules/preview", operation_id = "preview_schedule", tag = "schedules",
    request_body = PreviewRequest,
    responses((status = 200, body = TickList), Refusals))]
async fn preview(
    State(state): State<AppState>,
    JsonBody(request): JsonBody<PreviewRequest>,
) -> Result<Json<TickList>, ApiError> {
    let count = check_count(request.count)?;
    let timezone = request.timezone.unwrap_or_else(|| "UTC".to_owned());
    let timetable = Timetable::new(&request.cron, &timezone).map_err(timetable_error)?;
    let after = request.after.map_or_else(|| state.engine.now_ms(), |t| t.0);
    Ok(Json(tick_list(
        request.cron.trim(),
        timezone.trim(),
        &timetable,
        after,
        count,
    )))
}
