//! One job: its payload, every error with its detail (first, for a job that failed), and its
//! attempt timeline drawn against its policy's schedule: the delays it had, the delays to come,
//! the jitter band and the window. A delivery also shows each attempt (status, latency,
//! response, trigger). The page updates itself until the job has finished.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, PreEscaped, html};
use tenax_core::engine::{PolicyOwner, delivery_policy};
use tenax_core::model::subscription::subscription_of_queue;
use tenax_core::model::{Attempt, Job, JobId, Status};
use tenax_policy::{Preview, RetryPolicy, format_duration};

use super::layout::{self, Nav, Refresh};
use super::{Session, UiError, format};
use crate::api::AppState;
use crate::chart::{self, ChartOptions, Series, Style};

/// The most retries a timeline draws: enough to see a curve, bounded for huge limits.
const DRAWN: u32 = 120;

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let id: JobId = id
        .parse()
        .map_err(|_| UiError::invalid(format!("a job id is a whole number; got {id:?}")))?;
    let engine = &state.engine;
    let job = engine
        .job(id)
        .await?
        .ok_or_else(|| UiError::not_found(format!("job {id} does not exist (or was purged)")))?;
    let subscription = subscription_of_queue(&job.spec.queue);
    match subscription {
        Some(sub) => {
            if let Some(s) = engine.subscription(sub).await? {
                session.must_admit(&s.queue)?;
            }
        }
        None => session.must_admit(&job.spec.queue)?,
    }
    let (policy, source) = effective_policy(&state, &job).await?;
    let attempts = if subscription.is_some() {
        engine.attempts(id).await?
    } else {
        Vec::new()
    };
    let now = engine.now_ms();
    let in_workflow = !job.spec.after.is_empty() || engine.has_dependents(id).await?;
    let timeline = timeline(&job, &policy, &attempts);
    let preview = Preview::of(&policy);
    let manage = session.must_manage().is_ok();
    let title = format!("Job #{id}");
    // A job that failed (dead, or waiting to run again) shows why before anything else.
    let errors_first = !job.errors.is_empty()
        && (job.state.status == Status::Dead
            || (!job.state.status.is_finished() && job.state.failures > 0));
    let errors = html! {
        section #errors {
            h2 { "Errors (" (job.errors.len()) ")" }
            @if job.errors.is_empty() {
                p.muted { "No failure so far." }
            } @else {
                ol.errors {
                    @for error in job.errors.iter().rev() {
                        li {
                            p { strong { "attempt " (error.attempt) } " · " span title=(format::time(error.at_ms)) { (format::relative(error.at_ms, now)) } }
                            p.message { (error.message) }
                            @if let Some(detail) = &error.detail {
                                details { summary { "detail" } pre.json { (serde_json::to_string_pretty(detail).unwrap_or_default()) } }
                            }
                        }
                    }
                }
            }
        }
    };
    let content = html! {
        section.facts {
            dl {
                dt { "status" } dd { (layout::status(job.state.status))
                    @if let Some(reason) = &job.state.dead_reason { " — " (reason) } }
                dt { "queue" } dd {
                    @if let Some(sub) = subscription {
                        a href={"/ui/subscriptions/" (sub)} { "subscription " (sub) } " (its deliveries)"
                    } @else {
                        a href={"/ui/jobs?queue=" (super::queues::urlencode(&job.spec.queue))} { (job.spec.queue) }
                    }
                }
                dt { "type" } dd { (job.spec.kind) }
                @if in_workflow {
                    dt { "waits for" } dd {
                        @if job.spec.after.is_empty() { "no job" }
                        @for (i, parent) in job.spec.after.iter().enumerate() {
                            @if i > 0 { ", " } a href={"/ui/jobs/" (parent)} { "#" (parent) }
                        }
                        " — " (super::workflow::link(id))
                    }
                }
                dt { "priority" } dd { (job.spec.priority) }
                dt { "failures" } dd { (job.state.failures) " (the next run is attempt " (job.state.failures + 1) ")" }
                dt { "created" } dd title=(format::time(job.spec.created_at_ms)) { (format::relative(job.spec.created_at_ms, now)) }
                dt { @if job.state.status == Status::Scheduled { "runs" } @else { "ready since" } }
                dd title=(format::time(job.state.run_at_ms)) { (format::relative(job.state.run_at_ms, now)) }
                @if let Some(at) = job.state.finished_at_ms {
                    dt { "finished" } dd title=(format::time(at)) { (format::relative(at, now)) }
                }
                @if !job.state.trigger.is_scheduled() {
                    dt { "next run" } dd { "at an operator's request (" (job.state.trigger.name()) ")" }
                }
                @if let Some(key) = &job.spec.unique_key { dt { "unique key" } dd { code { (key) } } }
                @if let Some(trace) = &job.spec.traceparent { dt { "traceparent" } dd { code { (trace) } } }
                @if let Some(held) = &job.held {
                    dt { "lease ends" } dd { (format::relative(held.lease_expires_at_ms, now)) }
                }
            }
        }
        @if errors_first { (errors) }
        @if manage {
            form.actions method="post" action="/ui/jobs/act" {
                (layout::csrf(&session))
                input type="hidden" name="id" value=(id);
                input type="hidden" name="back" value={"/ui/jobs/" (id)};
                @if job.state.status == Status::Scheduled {
                    button type="submit" name="action" value="run_now" { "Run now" }
                }
                @if !job.state.status.is_finished() {
                    button type="submit" name="action" value="cancel" data-confirm="Cancel this job? A job in flight is told to stop on its next heartbeat." { "Cancel" }
                }
                @if job.state.status.is_given_up() {
                    button type="submit" name="action" value="replay" { "Replay" }
                    details {
                        summary { "with another policy" }
                        textarea name="policy" rows="3" placeholder=r#"{"type": "fixed", "delay": "1m", "retry_limit": 5}"# {}
                        label { input type="checkbox" name="reset_attempts" value="true" checked; " start the retries again from 1" }
                    }
                }
                button.danger type="submit" name="action" value="delete" data-confirm="Delete this job? This cannot be undone." { "Delete" }
            }
        }
        section {
            h2 { "Attempt timeline" }
            p {
                "Policy: " strong { (super::queues::summary(&policy)) } " — " (source) ". "
                a href={"/ui/policy?p=" (super::queues::urlencode(&tenax_policy::spelling::native::to_json(&policy).to_string()))} { "Open in the designer" }
            }
            (window(&job, &policy, &preview, now))
            @match &timeline {
                Ok(svg) => div.chart { (PreEscaped(svg)) },
                Err(why) => p.muted { (why) },
            }
        }
        section {
            h2 { "Payload" }
            pre.json { (format::pretty(job.spec.payload.get())) }
        }
        @if !errors_first { (errors) }
        @if subscription.is_some() {
            section {
                h2 { "Attempts (" (attempts.len()) ")" }
                (attempts_table(&attempts.iter().rev().map(|a| (id, a)).collect::<Vec<_>>(), now))
            }
        }
    };
    // A job's page follows it while it can change: until it has finished.
    let refresh = if job.state.status.is_finished() {
        Refresh::Still
    } else {
        Refresh::Live
    };
    Ok(layout::page(&session, Nav::Jobs, &title, refresh, content))
}

/// Attempts of deliveries, in the order given (callers put the newest first).
pub fn attempts_table(attempts: &[(JobId, &Attempt)], now: u64) -> Markup {
    html! {
        @if attempts.is_empty() {
            p.muted { "No attempt yet." }
        } @else {
            table.attempts {
                thead { tr { th { "delivery" } th { "attempt" } th { "trigger" } th { "when" } th { "result" } th { "status" } th { "latency" } th { "response or error" } } }
                tbody {
                    @for (delivery, attempt) in attempts {
                        tr {
                            td { a href={"/ui/jobs/" (delivery)} { "#" (delivery) } }
                            td { (attempt.attempt) }
                            td { span class={"trigger " (attempt.trigger.name())} { (attempt.trigger.name()) } }
                            td title=(format::time(attempt.at_ms)) { (format::relative(attempt.at_ms, now)) }
                            td { span class={"result " (result_name(attempt))} { (result_name(attempt)) } }
                            td { @if let Some(status) = attempt.status { (status) } @else { "—" } }
                            td { (format_duration(attempt.latency_ms)) }
                            td.excerpt { @if let Some(error) = &attempt.error { span.error { (format::excerpt(error, 160)) } } @else if let Some(body) = &attempt.response { code { (format::excerpt(body, 160)) } } }
                        }
                    }
                }
            }
        }
    }
}

fn result_name(attempt: &Attempt) -> &'static str {
    match attempt.result {
        tenax_core::model::AttemptResult::Delivered => "delivered",
        tenax_core::model::AttemptResult::Retryable => "retryable",
        tenax_core::model::AttemptResult::Permanent => "permanent",
    }
}

/// The policy the job follows, and whose it is: its own, else (a delivery) its subscription's
/// or queue's, else its queue's, else the server's default.
async fn effective_policy(
    state: &AppState,
    job: &Job,
) -> Result<(Arc<RetryPolicy>, String), UiError> {
    let engine = &state.engine;
    if let Some(own) = &job.spec.policy {
        return Ok((own.policy().clone(), "the job's own".into()));
    }
    if let Some(sub) = subscription_of_queue(&job.spec.queue) {
        if let Some(subscription) = engine.subscription(sub).await? {
            let queue = engine.queue(&subscription.queue).await?;
            return Ok(match delivery_policy(&subscription, queue.as_ref()) {
                Some((policy, PolicyOwner::Subscription)) => {
                    (policy.policy().clone(), format!("subscription {sub}'s"))
                }
                Some((policy, PolicyOwner::Queue)) => (
                    policy.policy().clone(),
                    format!("queue {}'s", subscription.queue),
                ),
                None => (
                    engine.settings.delivery_policy.clone(),
                    "the server's delivery default".into(),
                ),
            });
        }
    }
    let queue = engine.queue(&job.spec.queue).await?;
    Ok(match queue.and_then(|q| q.policy) {
        Some(policy) => (
            policy.policy().clone(),
            format!("queue {}'s", job.spec.queue),
        ),
        None => (
            engine.default_policy_for(&job.spec.queue).clone(),
            "the server's default".into(),
        ),
    })
}

/// The delays the job had before each retry, as far as its history tells: for a delivery,
/// from the end of one attempt to the start of the next; for a job, between its failures (a
/// retry's delay plus the run before the failure); the retry waiting now, exactly.
fn delays_had(job: &Job, attempts: &[Attempt]) -> Vec<(u32, u64)> {
    let mut had = Vec::new();
    if !attempts.is_empty() {
        for pair in attempts.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            if after.attempt == before.attempt + 1 && after.trigger.is_scheduled() {
                let ended = before.at_ms.saturating_add(before.latency_ms);
                had.push((before.attempt, after.at_ms.saturating_sub(ended)));
            }
        }
    } else {
        for pair in job.errors.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            if after.attempt == before.attempt + 1 {
                had.push((before.attempt, after.at_ms.saturating_sub(before.at_ms)));
            }
        }
    }
    if job.state.status == Status::Scheduled && job.state.failures > 0 {
        if let Some(delay) = job.state.last_delay_ms {
            had.retain(|(r, _)| *r != job.state.failures);
            had.push((job.state.failures, delay));
        }
    }
    had
}

/// The timeline chart: the policy's schedule (solid up to where the job is, dashed for what is
/// to come) with its jitter band, and the delays the job had.
fn timeline(job: &Job, policy: &RetryPolicy, attempts: &[Attempt]) -> Result<String, String> {
    let limit = policy.retry_limit.min(DRAWN);
    if limit == 0 {
        return Err("This policy allows no retry: the first failure is final.".into());
    }
    let done = job.state.failures.min(limit);
    let mut previous_high = None;
    let mut band = Vec::new();
    let mut schedule = Vec::new();
    for r in 1..=limit {
        let (low, high) = policy.jitter_band_ms(r, previous_high);
        previous_high = Some(high);
        band.push((r, low, high));
        schedule.push((r, policy.delay_ms(r)));
    }
    // Retries up to `split` are behind the job (all of them once it has finished).
    let split = if job.state.status.is_finished() {
        limit
    } else {
        done
    };
    let upto = |r: u32| r <= split;
    // What is to come starts at the last retry behind, so that the line does not break.
    let ahead = |r: u32| split < limit && r >= split.max(1);
    let mut series = Vec::new();
    if split > 0 {
        series.push(Series {
            label: "the schedule so far".into(),
            points: schedule.iter().copied().filter(|(r, _)| upto(*r)).collect(),
            band: band.iter().copied().filter(|(r, ..)| upto(*r)).collect(),
            style: Style::Line,
        });
    }
    if split < limit {
        series.push(Series {
            label: "the delays to come".into(),
            points: schedule
                .iter()
                .copied()
                .filter(|(r, _)| ahead(*r))
                .collect(),
            band: band.iter().copied().filter(|(r, ..)| ahead(*r)).collect(),
            style: Style::Dashed,
        });
    }
    let had = delays_had(job, attempts);
    if !had.is_empty() {
        series.push(Series {
            label: "the delays it had".into(),
            points: had,
            band: Vec::new(),
            style: Style::Points,
        });
    }
    let options = ChartOptions {
        title: String::new(),
        width: 900,
        height: 360,
        log_scale: false,
    };
    chart::render_svg(&series, &options).map_err(|e| e.to_string())
}

/// The window: how long the retries may last, how much has gone, and when they stop.
fn window(job: &Job, policy: &RetryPolicy, preview: &Preview, now: u64) -> Markup {
    let first = job.state.first_failure_at_ms;
    html! {
        p.window {
            (policy.retry_limit) " retries"
            @if let Some(max) = policy.max_window_ms { ", within a window of " (format_duration(max)) " from the first failure" }
            "; the whole schedule spans " (format_duration(preview.window_ms))
            @if preview.min_window_ms() != preview.max_window_ms() {
                " (with jitter " (format_duration(preview.min_window_ms())) " – " (format_duration(preview.max_window_ms())) ")"
            }
            "."
            @if let Some(first) = first {
                " First failure " span title=(format::time(first)) { (format::relative(first, now)) }
                @if let Some(max) = policy.max_window_ms {
                    "; retries stop " span title=(format::time(first.saturating_add(max))) { (format::relative(first.saturating_add(max), now)) }
                }
                "."
            }
        }
    }
}
