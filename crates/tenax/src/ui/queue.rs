//! One queue: its jobs by status, its limits with their use now (editable), its policy, its
//! subscriptions and schedules, and pause and resume.
//!
//! The limits form is checked by the API's rules (`queue_change`), so the dashboard refuses
//! what `PUT /api/queues/{name}` refuses, with the same words.

use std::convert::Infallible;

use axum::Extension;
use axum::extract::{Path, Query, RawForm, State};
use axum::response::Response;
use maud::html;
use tenax_core::model::{LimitUse, Status};
use tenax_policy::format_duration;

use super::form::{Fields, NoteQuery, back_with};
use super::layout::{self, Nav, Refresh};
use super::overview::slots_of;
use super::queues::{pause_button, summary, urlencode};
use super::{Session, UiError, format, subscriptions};
use crate::api::AppState;
use crate::api::fields::{Millis, check_queue_name};
use crate::api::queues::{RateRequest, UpdateQueue, queue_change};

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    Query(query): Query<NoteQuery>,
) -> Result<Response, UiError> {
    check_queue_name("queue", &name)?;
    session.must_admit(&name)?;
    let engine = &state.engine;
    let stored = engine.queue(&name).await?;
    let counts = engine.queue_counts(&name).await?;
    if stored.is_none() && slots_of(&counts).iter().all(|n| *n == 0) {
        return Err(UiError::not_found(format!(
            "queue {name:?} has no jobs and no settings"
        )));
    }
    let config = stored.unwrap_or_default();
    let used = if config.rate.is_some() {
        engine.limit_use(&name).await?
    } else {
        LimitUse::default()
    };
    let ready_since = engine
        .ready_since(std::slice::from_ref(&name))
        .await?
        .pop()
        .flatten();
    let subscriptions = subscriptions::views_of(&state, &session, Some(&name)).await?;
    let schedules: Vec<String> = engine
        .schedules()
        .await?
        .into_iter()
        .filter(|s| s.job.queue == name)
        .map(|s| s.name)
        .collect();
    let now = engine.now_ms();
    let manage = session.must_manage().is_ok();
    let here = format!("/ui/queues/{}", urlencode(&name));
    let jobs = format!("/ui/jobs?queue={}", urlencode(&name));
    let content = html! {
        (layout::note(query.note.as_deref()))
        section.cards {
            @for (status, n) in Status::ALL.iter().zip(slots_of(&counts)) {
                a.card href={(jobs) "&status=" (status.name())} data-status=(status.name()) {
                    span.count { (n) }
                    span.label { "jobs " (status.name().replace('_', " ")) }
                }
            }
        }
        section.facts {
            dl {
                dt { "state" } dd {
                    @if config.paused { span.status.paused { "paused" } " — accepts jobs but hands none out" } @else { span.status.running { "running" } }
                    @if manage { (pause_button(&session, &name, config.paused, &here)) }
                }
                dt { "next job ready for" } dd {
                    @if let Some(at) = ready_since { (format::duration(now.saturating_sub(at))) } @else { "—" }
                }
                dt { "policy" } dd {
                    @if let Some(policy) = &config.policy {
                        a href={"/ui/policy?p=" (urlencode(&policy.json().to_string()))} title="Open in the policy designer" { (summary(policy.policy())) }
                        @if config.disable_overrides { " — applies to every subscription, whatever its own" }
                    } @else {
                        span.muted { "the server's default" } " · " a href="/ui/policy" { "design one" }
                    }
                }
                @if let Some(ttl) = config.message_ttl_ms {
                    dt { "message TTL" } dd { "new jobs are deleted " (format_duration(ttl)) " after their enqueue" }
                }
                @if let Some(dead_letter) = &config.dead_letter {
                    dt { "dead letters" } dd { "to " a href={"/ui/queues/" (urlencode(&dead_letter.queue))} { (dead_letter.queue) } " after " (dead_letter.max_claims) " expired claims" }
                }
            }
            p { a href=(jobs) { "Its jobs" } " · " a href={"/ui/dead?queue=" (urlencode(&name))} { "its dead jobs" } }
        }
        section #limits {
            h2 { "Limits" }
            table.limits {
                thead { tr { th { "limit" } th { "in use now" } th { "of" } } }
                tbody {
                    tr data-limit="concurrency" {
                        th { "concurrency" }
                        td.use { (counts.in_flight) " in flight" }
                        td { @if let Some(limit) = config.concurrency { (limit) " at once" } @else { span.muted { "no limit" } } }
                    }
                    tr data-limit="rate" {
                        th { "rate" }
                        @if let Some(rate) = config.rate {
                            td.use { (used.started) " started in the last " (format_duration(rate.period_ms)) }
                            td { (rate.limit) " per " (format_duration(rate.period_ms)) }
                        } @else {
                            td.use { "—" }
                            td { span.muted { "no limit" } }
                        }
                    }
                }
            }
            @if manage {
                form.limits method="post" action={(here) "/limits"} {
                    (layout::csrf(&session))
                    label { "Concurrency " input name="concurrency" inputmode="numeric" value=[config.concurrency] placeholder="no limit"; }
                    label { "Rate: at most " input name="rate_limit" inputmode="numeric" value=[config.rate.map(|r| r.limit)] placeholder="no limit"; }
                    label { "jobs per " input name="rate_period" value=[config.rate.map(|r| period_text(r.period_ms))] placeholder="1s"; }
                    button type="submit" { "Save limits" }
                }
            }
            p.hint { "Counted by the store for every worker and server together. An empty field removes its limit; pausing the queue stops it." }
        }
        section {
            h2 { "Subscriptions" }
            @if subscriptions.is_empty() {
                p.muted { "No endpoint is subscribed to this queue." }
            } @else {
                (subscriptions::table(&session, &subscriptions, now, &here))
            }
        }
        @if !schedules.is_empty() {
            section {
                h2 { "Schedules" }
                p {
                    "Enqueuing here: "
                    @for (i, schedule) in schedules.iter().enumerate() {
                        @if i > 0 { ", " }
                        a href={"/ui/schedules#schedule-" (schedule)} { (schedule) }
                    }
                }
            }
        }
    };
    let title = format!("Queue {name}");
    Ok(layout::page(
        &session,
        Nav::Queues,
        &title,
        Refresh::Live,
        content,
    ))
}

/// A rate's period as the form's field shows it: exact, in the largest unit that divides it
/// (a shown duration is rounded to three units, and the field must read back the same).
fn period_text(ms: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ];
    UNITS.iter().find(|(_, size)| ms % size == 0).map_or_else(
        || format!("{ms}ms"),
        |(unit, size)| format!("{}{unit}", ms / size),
    )
}

/// A whole number from the form; `None` when the field is empty (no limit).
fn whole(fields: &Fields, name: &str) -> Result<Option<u32>, UiError> {
    match fields.get(name).as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|_| {
            UiError::invalid(format!(
                "{name}: must be a whole number (empty for no limit), got {text:?}"
            ))
        }),
    }
}

/// Sets or clears the queue's concurrency and rate limits, as the form says.
pub async fn limits(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    RawForm(form): RawForm,
) -> Result<Response, UiError> {
    session.must_manage()?;
    check_queue_name("queue", &name)?;
    session.must_admit(&name)?;
    let fields = Fields::parse(&form);
    let concurrency = whole(&fields, "concurrency")?;
    let rate = match whole(&fields, "rate_limit")? {
        Some(limit) => {
            let period = fields
                .get("rate_period")
                .filter(|p| !p.trim().is_empty())
                .unwrap_or_else(|| "1s".to_owned());
            let period_ms = tenax_policy::parse_duration("rate_period", &period)
                .map_err(|e| UiError::invalid(format!("{}: {}", e.field, e.rule)))?;
            Some(RateRequest {
                limit,
                period: Millis(period_ms),
            })
        }
        None => None,
    };
    let change = queue_change(UpdateQueue {
        policy: None,
        paused: None,
        disable_overrides: None,
        message_ttl: None,
        concurrency: Some(concurrency),
        rate: Some(rate),
        encrypt_payloads: None,
        flavor: None,
    })?;
    let stored = state
        .engine
        .update_queue(&name, |current| {
            Ok::<_, Infallible>(Some(change.applied(current)))
        })
        .await?
        .unwrap_or_default();
    let concurrency = stored
        .concurrency
        .map_or("no concurrency limit".to_owned(), |n| {
            format!("at most {n} in flight")
        });
    let rate = stored.rate.map_or("no rate limit".to_owned(), |r| {
        format!(
            "at most {} started per {}",
            r.limit,
            format_duration(r.period_ms)
        )
    });
    let note = format!("Queue {name}: {concurrency}, {rate}.");
    Ok(back_with(
        &format!("/ui/queues/{}", urlencode(&name)),
        &note,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_reads_back_the_same() {
        for ms in [
            1,
            999,
            1_000,
            90_000,
            3_600_000,
            86_400_000 + 1_000,
            400 * 86_400_000,
        ] {
            let text = period_text(ms);
            assert_eq!(
                tenax_policy::parse_duration("p", &text).ok(),
                Some(ms),
                "{text}"
            );
        }
    }
}
