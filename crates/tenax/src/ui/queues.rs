//! Queues: counts by status, how long the next job has been ready, the policy, and pause and
//! resume.

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tenax_core::model::{QueueConfig, QueueCounts, subscription::is_internal_queue};
use tenax_policy::{Preview, format_duration};

use super::layout::{self, Nav};
use super::{Session, UiError, format};
use crate::api::AppState;

#[derive(Debug, Deserialize)]
pub struct NoteQuery {
    note: Option<String>,
}

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
            (QueueCounts::from_slots(name, [0; 5]), config),
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
                        th { "next job ready for" } th { "policy" } th { "state" }
                    }
                }
                tbody {
                    @for ((name, (counts, config)), ready_since) in queues.iter().zip(&since) {
                        tr data-queue=(name) {
                            td { a href={"/ui/jobs?queue=" (urlencode(name))} { (name) } }
                            td { (counts.scheduled) } td { (counts.ready) } td { (counts.in_flight) }
                            td { (counts.completed) }
                            td { @if counts.dead > 0 { a href={"/ui/dead?queue=" (urlencode(name))} { (counts.dead) } } @else { "0" } }
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
                                @if manage {
                                    form.inline method="post" action={"/ui/queues/" (urlencode(name)) (if config.paused { "/resume" } else { "/pause" })} {
                                        (layout::csrf(&session))
                                        button type="submit" { @if config.paused { "Resume" } @else { "Pause" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            p.hint { "A paused queue keeps accepting jobs but hands none out." }
        }
    };
    Ok(layout::page(&session, Nav::Queues, "Queues", content))
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

pub fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

async fn set_paused(
    state: &AppState,
    session: &Session,
    name: &str,
    paused: bool,
) -> Result<Response, UiError> {
    session.must_manage()?;
    session.must_admit(name)?;
    crate::api::fields::check_queue_name("queue", name).map_err(|e| UiError::invalid(e.message))?;
    state
        .engine
        .update_queue(name, |current| {
            let mut config = current.cloned().unwrap_or_default();
            config.paused = paused;
            Ok::<_, Infallible>(Some(config))
        })
        .await
        .map_err(|error| match error {
            tenax_core::engine::ChangeError::Failed(error) => UiError::from(error),
            tenax_core::engine::ChangeError::Refused(never) => match never {},
        })?;
    let note = format!(
        "Queue {name} is {}.",
        if paused { "paused" } else { "running again" }
    );
    Ok(Redirect::to(&format!("/ui/queues?note={}", urlencode(&note))).into_response())
}

pub async fn pause(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    set_paused(&state, &session, &name, true).await
}

pub async fn resume(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    set_paused(&state, &session, &name, false).await
}
