//! Schedules: each with its timetable and next ticks, its last job, whether it is paused, and
//! the ticks it missed or left out; pause, resume and run now.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use maud::{Markup, html};
use tenax_core::model::timetable::Timetable;
use tenax_core::model::{JobId, JobPeek, Missed, Overlap, Schedule};

use super::form::{NoteQuery, back_with};
use super::layout::{self, Nav, Refresh};
use super::queues::urlencode;
use super::{Session, UiError, format};
use crate::api::AppState;

/// Next ticks a schedule shows.
const NEXT_TICKS: usize = 3;

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Query(query): Query<NoteQuery>,
) -> Result<Response, UiError> {
    let engine = &state.engine;
    let schedules: Vec<Schedule> = engine
        .schedules()
        .await?
        .into_iter()
        .filter(|s| session.principal.admits_queue(&s.job.queue))
        .collect();
    let last_jobs: Vec<JobId> = schedules.iter().filter_map(|s| s.last_job).collect();
    let peeks: HashMap<JobId, JobPeek> = last_jobs
        .iter()
        .copied()
        .zip(engine.peek(&last_jobs).await?)
        .filter_map(|(id, peek)| peek.map(|p| (id, p)))
        .collect();
    let now = engine.now_ms();
    let manage = session.must_manage().is_ok();
    let content = html! {
        (layout::note(query.note.as_deref()))
        @if schedules.is_empty() {
            p { "No schedule yet. Make one with the API (" code { "PUT /api/schedules/{name}" } ") or " code { "tenax schedules set" } "." }
        } @else {
            table.schedules {
                thead { tr { th { "schedule" } th { "when" } th { "job" } th { "next ticks" } th { "last job" } th { "ticks" } th { "state" } } }
                tbody {
                    @for schedule in &schedules {
                        tr #{"schedule-" (schedule.name)} data-schedule=(schedule.name) {
                            td { strong { (schedule.name) } }
                            td {
                                code { (schedule.cron) } " " small { (schedule.timezone) }
                                br; small { (describe(schedule)) }
                            }
                            td {
                                a href={"/ui/queues/" (urlencode(&schedule.job.queue))} { (schedule.job.queue) }
                                " · " (schedule.job.kind)
                            }
                            td.ticks { (next_ticks(schedule, now)) }
                            td.last {
                                @if let Some(id) = schedule.last_job {
                                    a href={"/ui/jobs/" (id)} { "#" (id) } " "
                                    @match peeks.get(&id) {
                                        Some(peek) => (layout::status(peek.status)),
                                        None => span.muted { "(purged)" },
                                    }
                                    @if let Some(at) = schedule.last_tick_ms {
                                        br; small title=(format::time(at)) { (format::relative(at, now)) }
                                    }
                                } @else {
                                    span.muted { "none yet" }
                                }
                            }
                            td.counts { (counts(schedule)) }
                            td {
                                @if schedule.paused { span.status.paused { "paused" } } @else { span.status.running { "running" } }
                                @if manage { (buttons(&session, schedule)) }
                            }
                        }
                    }
                }
            }
            p.hint { "A tick no server handled within a minute of its time is missed; with overlap skip, a tick while the last job is unfinished is left out. Ticks while a schedule is paused are never enqueued: resuming starts from the next tick. Run now enqueues the job at once, outside the timetable." }
        }
    };
    Ok(layout::page(
        &session,
        Nav::Schedules,
        "Schedules",
        Refresh::Live,
        content,
    ))
}

/// The expression in words, or why it cannot be read (a schedule stored before a rule
/// changed, which ticks no more until it is replaced).
fn describe(schedule: &Schedule) -> String {
    Timetable::new(&schedule.cron, &schedule.timezone)
        .map(|t| t.describe())
        .unwrap_or_else(|e| format!("cannot be read: {}", e.rule))
}

/// The next ticks, in the schedule's zone; a paused schedule's are what they would be.
fn next_ticks(schedule: &Schedule, now: u64) -> Markup {
    let ticks = Timetable::new(&schedule.cron, &schedule.timezone)
        .map(|t| t.ticks_after(schedule.through_ms.max(now), NEXT_TICKS))
        .unwrap_or_default();
    html! {
        @if ticks.is_empty() {
            span.muted { "no more" }
        } @else {
            @if schedule.paused { small.muted { "if resumed:" } br; }
            @for tick in &ticks {
                span title=(format::time(tick.at_ms)) { (tick.local) } " " small { (format::relative(tick.at_ms, now)) }
                @if tick.shifted { " " small { "(after a clock change)" } }
                br;
            }
        }
    }
}

/// What became of the schedule's ticks, with its rules for missed and overlapping ones.
fn counts(schedule: &Schedule) -> Markup {
    let c = schedule.counts;
    html! {
        (c.enqueued) " enqueued"
        br; span class=[(c.missed > 0).then_some("warn")] {
            (c.missed) " missed"
        }
        " " small { (match schedule.missed { Missed::Skip => "(skipped)", Missed::RunOnce => "(run once)" }) }
        br; span class=[(c.overlapped > 0).then_some("warn")] {
            (c.overlapped) " left out"
        }
        " " small { (match schedule.overlap { Overlap::Allow => "(overlap allowed)", Overlap::Skip => "(while the last job runs)" }) }
    }
}

fn buttons(session: &Session, schedule: &Schedule) -> Markup {
    let base = format!("/ui/schedules/{}", urlencode(&schedule.name));
    html! {
        form.inline method="post" action={(base) (if schedule.paused { "/resume" } else { "/pause" })} {
            (layout::csrf(session))
            button type="submit" { @if schedule.paused { "Resume" } @else { "Pause" } }
        }
        form.inline method="post" action={(base) "/run"} {
            (layout::csrf(session))
            button type="submit" { "Run now" }
        }
    }
}

/// The schedule `name`, if the session may touch its job's queue.
async fn admitted(state: &AppState, session: &Session, name: &str) -> Result<Schedule, UiError> {
    session.must_manage()?;
    let schedule = state
        .engine
        .schedule(name)
        .await?
        .ok_or_else(|| UiError::not_found(format!("schedule {name:?} does not exist")))?;
    session.must_admit(&schedule.job.queue)?;
    Ok(schedule)
}

/// Pause, resume or run now, as the path says.
pub async fn act(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path((name, action)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let note = match action.as_str() {
        "pause" | "resume" => {
            admitted(&state, &session, &name).await?;
            let paused = action == "pause";
            state.engine.pause_schedule(&name, paused).await?;
            if paused {
                format!("Schedule {name} is paused.")
            } else {
                format!("Schedule {name} is running again, from its next tick.")
            }
        }
        "run" => {
            admitted(&state, &session, &name).await?;
            let job =
                state.engine.run_schedule_now(&name).await?.ok_or_else(|| {
                    UiError::not_found(format!("schedule {name:?} does not exist"))
                })?;
            format!("Schedule {name} enqueued job #{job}.")
        }
        other => return Err(UiError::not_found(format!("no action {other:?}"))),
    };
    Ok(back_with("/ui/schedules", &note))
}
