//! Queues: counts by status, how long the next job has been ready, the policy, and pause and
//! resume. Each queue's own page is [`super::queue`].

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::Extension;
use axum::extract::{Path, Query, RawForm, State};
use axum::response::Response;
use maud::{Markup, html};
use tenax_core::model::{QueueConfig, QueueCounts, subscription::is_internal_queue};
use tenax_policy::{Preview, format_duration};

use super::form::{Fields, NoteQuery, back_with};
use super::layout::{self, Nav, Refresh};
use super::{Session, UiError, format};
use crate::api::AppState;

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Query(query): Query<NoteQuery>,
) -> Result<Response, UiError> {
    let engine = &state.engine;
    let now = engine.now_ms();
    let mut queues: BTreeMap<String, (QueueCounts, QueueConfig)> = BTreeMap::new();
    for (name, config) in engine.queues().await? {
        queues.insert(
            name.clone(),
            (QueueCounts::from_slots(name, Default::default()), config),
        );
    }
    for counts in engine.counts().await? {
        let name = counts.queue.clone();
        queues
            .entry(name)
            .or_insert_with(|| (QueueCounts::default(), QueueConfig::default()))
            .0 = counts;
    }
    queues.retain(|name, _| !is_internal_queue(name) && session.principal.admits_queue(name));
    let names: Vec<String> = queues.keys().cloned().collect();
    let since = engine.ready_since(&names).await?;
    let manage = session.must_manage().is_ok();
    let content = html! {
        (layout::note(query.note.as_deref()))
        @if queues.is_empty() {
            p { "No queue has jobs or settings yet." }
        } @else {
            table.queues {
                thead {
                    tr {
                        th { "queue" } th { "scheduled" } th { "ready" } th { "in flight" } th { "completed" } th { "dead" }
                        th { "cancelled" } th { "next job ready for" } th { "policy" } th { "state" }
                    }
                }
                tbody {
                    @for ((name, (counts, config)), ready_since) in queues.iter().zip(&since) {
                        tr data-queue=(name) {
                            td { a href={"/ui/queues/" (urlencode(name))} { (name) } }
                            td { (counts.scheduled) } td { (counts.ready) } td { (counts.in_flight) }
                            td { (counts.completed) }
                            td { @if counts.dead > 0 { a href={"/ui/dead?queue=" (urlencode(name))} { (counts.dead) } } @else { "0" } }
                            td { @if counts.cancelled > 0 { a href={"/ui/jobs?status=cancelled&queue=" (urlencode(name))} { (counts.cancelled) } } @else { "0" } }
                            td { @if let Some(at) = ready_since { (format::duration(now.saturating_sub(*at))) } @else { "—" } }
                            td {
                                @if let Some(policy) = &config.policy {
                                    a href={"/ui/policy?p=" (urlencode(&policy.json().to_string()))} title="Open in the policy designer" { (summary(policy.policy())) }
                                } @else {
                                    span.muted { "server default" }
                                }
                            }
                            td {
                                @if config.paused { span.status.paused { "paused" } } @else { span.status.running { "running" } }
                                @if manage { (pause_button(&session, name, config.paused, "/ui/queues")) }
                            }
                        }
                    }
                }
            }
            p.hint { "A paused queue keeps accepting jobs but hands none out." }
        }
    };
    Ok(layout::page(
        &session,
        Nav::Queues,
        "Queues",
        Refresh::Live,
        content,
    ))
}

/// A policy in a few words: its shape, retries and window.
pub fn summary(policy: &tenax_policy::RetryPolicy) -> String {
    let preview = Preview::of(policy);
    format!(
        "{}, {} retries over {}",
        policy.shape.kind(),
        preview.retries.len(),
        format_duration(preview.window_ms)
    )
}

/// Pause or Resume, whichever applies; the action comes back to `back`.
pub fn pause_button(session: &Session, name: &str, paused: bool, back: &str) -> Markup {
    html! {
        form.inline method="post" action={"/ui/queues/" (urlencode(name)) (if paused { "/resume" } else { "/pause" })} {
            (layout::csrf(session))
            input type="hidden" name="back" value=(back);
            button type="submit" { @if paused { "Resume" } @else { "Pause" } }
        }
    }
}

pub fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

async fn set_paused(
    state: &AppState,
    session: &Session,
    name: &str,
    paused: bool,
    form: &Fields,
) -> Result<Response, UiError> {
    session.must_manage()?;
    session.must_admit(name)?;
    crate::api::fields::check_queue_name("queue", name)?;
    state
        .engine
        .update_queue(name, |current| {
            let mut config = current.cloned().unwrap_or_default();
            config.paused = paused;
            Ok::<_, Infallible>(Some(config))
        })
        .await?;
    let note = format!(
        "Queue {name} is {}.",
        if paused { "paused" } else { "running again" }
    );
    Ok(back_with(&form.back("/ui/queues"), &note))
}

pub async fn pause(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    RawForm(form): RawForm,
) -> Result<Response, UiError> {
    set_paused(&state, &session, &name, true, &Fields::parse(&form)).await
}

pub async fn resume(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
    RawForm(form): RawForm,
) -> Result<Response, UiError> {
    set_paused(&state, &session, &name, false, &Fields::parse(&form)).await
}
