//! Webhook subscriptions: health, their endpoint's state (paused, circuit breaker), success and
//! failure counts, every attempt (status, latency, response excerpt, trigger), enable and
//! disable, and a test event.

use std::convert::Infallible;

use axum::Extension;
use axum::extract::{Path, Query, RawForm, State};
use axum::response::Response;
use maud::{Markup, html};
use tenax_core::model::{
    Attempt, JobFilter, JobId, Order, Page, Subscription, SubscriptionId,
    subscription::delivery_queue,
};

use super::form::{Fields, NoteQuery, back_with};
use super::layout::{self, Nav, Refresh};
use super::queues::urlencode;
use super::{Session, UiError, endpoint};
use crate::api::AppState;
use crate::api::subscription_views::{Secrets, SubscriptionView, subscription_view};

/// Deliveries whose attempts a subscription's page shows.
const DELIVERIES: usize = 25;

fn parse_id(text: &str) -> Result<SubscriptionId, UiError> {
    text.parse()
        .map_err(|_| UiError::invalid(format!("a subscription id is a whole number; got {text:?}")))
}

async fn admitted(
    state: &AppState,
    session: &Session,
    id: SubscriptionId,
) -> Result<Subscription, UiError> {
    let subscription = state
        .engine
        .subscription(id)
        .await?
        .ok_or_else(|| UiError::not_found(format!("subscription {id} does not exist")))?;
    session.must_admit(&subscription.queue)?;
    Ok(subscription)
}

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Query(query): Query<NoteQuery>,
) -> Result<Response, UiError> {
    let views = views_of(&state, &session, None).await?;
    let now = state.engine.now_ms();
    let content = html! {
        (layout::note(query.note.as_deref()))
        @if views.is_empty() {
            p { "No subscription yet. Subscribe an endpoint to a queue with the API: " code { "POST /api/queues/{name}/subscriptions" } "." }
        } @else {
            (table(&session, &views, now, "/ui/subscriptions"))
        }
    };
    Ok(layout::page(
        &session,
        Nav::Subscriptions,
        "Subscriptions",
        Refresh::Live,
        content,
    ))
}

/// The views of the subscriptions (of `queue`, or of every queue) the session may see.
pub async fn views_of(
    state: &AppState,
    session: &Session,
    queue: Option<&str>,
) -> Result<Vec<SubscriptionView>, UiError> {
    let mut views = Vec::new();
    for subscription in state.engine.subscriptions(queue).await? {
        if session.principal.admits_queue(&subscription.queue) {
            let view = subscription_view(state, subscription, Secrets::Redact).await?;
            views.push(view);
        }
    }
    Ok(views)
}

/// Subscriptions with their state, their endpoint's, their health and their deliveries; their
/// actions come back to `back`.
pub fn table(session: &Session, views: &[SubscriptionView], now: u64, back: &str) -> Markup {
    let manage = session.must_manage().is_ok();
    html! {
        table.subscriptions {
            thead { tr { th { "id" } th { "queue" } th { "endpoint" } th { "state" } th { "health" } th { "delivered" } th { "dead" } th { "waiting" } th {} } }
            tbody {
                @for s in views {
                    tr data-subscription=(s.id) {
                        td { a href={"/ui/subscriptions/" (s.id)} { (s.id) } }
                        td { a href={"/ui/queues/" (urlencode(&s.queue))} { (s.queue) } }
                        td.endpoint { (s.endpoint) br; (endpoint::state(&s.health.endpoint, now)) }
                        td {
                            @if s.enabled { span.status.running { "enabled" } } @else { span.status.paused { "disabled" } }
                            @if let Some(reason) = &s.disabled_reason { br; small { (reason) } }
                        }
                        td {
                            @if s.health.healthy { span.healthy { "healthy" } } @else { span.unhealthy { "failing" } }
                            small { " " (s.health.consecutive_failures) " in a row, "
                                (format!("{:.0}", s.health.recent_failure_rate * 100.0)) "% of the last " (s.health.recent_attempts) }
                        }
                        td { (s.deliveries.completed) }
                        td { @if s.deliveries.dead > 0 { a href={"/ui/dead?queue=" (urlencode(&delivery_queue(s.id)))} { (s.deliveries.dead) } } @else { "0" } }
                        td { (s.deliveries.scheduled + s.deliveries.ready + s.deliveries.in_flight) }
                        td { @if manage { (buttons(session, s.id, s.enabled, back)) } }
                    }
                }
            }
        }
        p.hint { "Delivered and dead count the deliveries kept (completed ones are kept for --completed-retention); health counts this server's recent attempts; an endpoint's pause and circuit breaker hold for every subscription posting to it." }
    }
}

fn buttons(session: &Session, id: SubscriptionId, enabled: bool, back: &str) -> Markup {
    html! {
        form.inline method="post" action={"/ui/subscriptions/" (id) (if enabled { "/disable" } else { "/enable" })} {
            (layout::csrf(session))
            input type="hidden" name="back" value=(back);
            button type="submit" { @if enabled { "Disable" } @else { "Enable" } }
        }
        form.inline method="post" action={"/ui/subscriptions/" (id) "/test"} {
            (layout::csrf(session))
            button type="submit" { "Send a test event" }
        }
    }
}

pub async fn detail(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    Query(query): Query<NoteQuery>,
) -> Result<Response, UiError> {
    let id = parse_id(&id)?;
    let subscription = admitted(&state, &session, id).await?;
    let view = subscription_view(&state, subscription, Secrets::Redact).await?;
    let engine = &state.engine;
    let now = engine.now_ms();
    let deliveries = engine
        .jobs(
            &JobFilter::queue(delivery_queue(id)),
            Page {
                after: None,
                limit: DELIVERIES,
                order: Order::Descending,
            },
        )
        .await?;
    let mut attempts = Vec::new();
    for delivery in &deliveries {
        attempts.push((delivery.id, engine.attempts(delivery.id).await?));
    }
    // One list, newest first: a replayed old delivery's new attempt comes first too.
    let mut newest_first: Vec<(JobId, &Attempt)> = attempts
        .iter()
        .flat_map(|(delivery, list)| list.iter().map(|attempt| (*delivery, attempt)))
        .collect();
    newest_first.sort_by_key(|(delivery, attempt)| {
        std::cmp::Reverse((attempt.at_ms, *delivery, attempt.attempt))
    });
    let manage = session.must_manage().is_ok();
    let policy = serde_json::to_string_pretty(&view.effective_policy).unwrap_or_default();
    let content = html! {
        (layout::note(query.note.as_deref()))
        section.facts {
            dl {
                dt { "queue" } dd { a href={"/ui/queues/" (urlencode(&view.queue))} { (view.queue) } }
                dt { "endpoint" } dd { code { (view.endpoint) } }
                dt { "state" } dd { @if view.enabled { "enabled" } @else { "disabled" } @if let Some(reason) = &view.disabled_reason { " — " (reason) } }
                dt { "health" } dd {
                    @if view.health.healthy { "healthy" } @else { "failing" }
                    " · " (view.health.consecutive_failures) " failures in a row · "
                    (format!("{:.0}", view.health.recent_failure_rate * 100.0)) "% of the last " (view.health.recent_attempts) " attempts failed"
                    @if let Some(at) = &view.health.last_success_at { " · last success " (at) }
                    @if let Some(at) = &view.health.failing_since { " · failing since " (at) }
                }
                dt { "endpoint state" } dd {
                    (endpoint::state(&view.health.endpoint, now))
                    small { " (kept for " code { (view.health.endpoint.origin) } ", for every subscription posting there)" }
                }
                dt { "deliveries" } dd {
                    (view.deliveries.completed) " delivered · " (view.deliveries.dead) " dead · "
                    (view.deliveries.scheduled + view.deliveries.ready + view.deliveries.in_flight) " waiting"
                }
                dt { "format" } dd { (format!("{:?}", view.format).to_lowercase()) ", " (view.content_type) }
                @if let Some(rate) = view.throttle_per_second { dt { "throttle" } dd { (rate) " per second" } }
            }
            @if manage { div.actions { (buttons(&session, id, view.enabled, &format!("/ui/subscriptions/{id}"))) } }
        }
        section {
            h2 { "Delivery policy (" (format!("{:?}", view.policy_source).to_lowercase()) ")" }
            pre.json { (policy) }
            p { a href={"/ui/policy?p=" (urlencode(&view.effective_policy.to_string()))} { "Open in the designer" } }
        }
        section {
            h2 { "Attempts of the latest " (deliveries.len()) " deliveries, newest first" }
            (super::job::attempts_table(&newest_first, now))
            p { a href={"/ui/jobs?queue=" (urlencode(&delivery_queue(id)))} { "Every delivery of this subscription" } }
        }
    };
    let title = format!("Subscription {id}");
    Ok(layout::page(
        &session,
        Nav::Subscriptions,
        &title,
        Refresh::Live,
        content,
    ))
}

async fn set_enabled(
    state: &AppState,
    session: &Session,
    id: &str,
    enabled: bool,
    form: &Fields,
) -> Result<Response, UiError> {
    session.must_manage()?;
    let id = parse_id(id)?;
    admitted(state, session, id).await?;
    let now = state.engine.now_ms();
    state
        .engine
        .update_subscription(id, |current| {
            let mut s = current.clone();
            s.enabled = enabled;
            if enabled {
                s.disabled_reason = None;
            }
            s.updated_at_ms = now;
            Ok::<_, Infallible>(Some(s))
        })
        .await?;
    let note = format!(
        "Subscription {id} is {}.",
        if enabled { "enabled" } else { "disabled" }
    );
    Ok(back_with(&form.back("/ui/subscriptions"), &note))
}

pub async fn enable(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    RawForm(form): RawForm,
) -> Result<Response, UiError> {
    set_enabled(&state, &session, &id, true, &Fields::parse(&form)).await
}

pub async fn disable(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    RawForm(form): RawForm,
) -> Result<Response, UiError> {
    set_enabled(&state, &session, &id, false, &Fields::parse(&form)).await
}

pub async fn test_event(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    session.must_manage()?;
    let id = parse_id(&id)?;
    admitted(&state, &session, id).await?;
    let delivery = state.engine.send_test_event(id).await?;
    let note = format!("A test event is on its way to subscription {id} (delivery #{delivery}).");
    Ok(back_with(&format!("/ui/subscriptions/{id}"), &note))
}
