//! Jobs: filtered by queue, status and type, found by id or by text in the payload or an error,
//! a page at a time from a cursor (newest first), each with the start of its payload; and
//! actions on a selection or on everything the filter matches: run now, replay (with another
//! policy), delete.
//!
//! Every page costs what it shows: the stores page from a cursor by an index, and a text
//! search looks at a bounded number of jobs ([`SEARCH_BUDGET`]) and says how far it got, so the
//! next search goes on from there. An action on everything matching acts on at most
//! [`BULK_MAX`] jobs per request and says when more remain.

use axum::Extension;
use axum::extract::{Query, RawForm, State};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use tenax_core::model::{
    Job, JobFilter, JobId, Order, Page, Replay, Selection, Status, StoredPolicy, TextQuery,
    subscription::subscription_of_queue,
};
use tenax_policy::parse_policy_str;

use super::form::{Fields, back_with};
use super::layout::{self, Nav, Refresh};
use super::{Session, UiError, format};
use crate::api::AppState;

/// Jobs per page.
const PAGE: usize = 50;
/// Jobs a text search looks at per request.
pub const SEARCH_BUDGET: usize = 5_000;
/// The most a job page counts: past it, "100000+ matching" (a database counts by reading).
const COUNT_MAX: u64 = 100_000;
/// Jobs an action on everything matching touches per request.
pub const BULK_MAX: usize = 10_000;
/// Characters of a payload a row shows, and its tooltip.
const PREVIEW: usize = 60;
const PREVIEW_TITLE: usize = 400;

#[derive(Debug, Default, Deserialize)]
pub struct JobsQuery {
    queue: Option<String>,
    status: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Text to find in payloads and errors.
    q: Option<String>,
    /// A job id to open.
    id: Option<String>,
    after: Option<String>,
    note: Option<String>,
}

/// A query's filter, as typed (empty fields are no condition).
#[derive(Debug, Clone, Default)]
struct Filter {
    queue: Option<String>,
    status: Option<Status>,
    kind: Option<String>,
    text: Option<String>,
}

fn given(value: &Option<String>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

impl Filter {
    fn parse(
        queue: &Option<String>,
        status: &Option<String>,
        kind: &Option<String>,
        text: &Option<String>,
    ) -> Result<Self, UiError> {
        let status = match given(status) {
            Some(name) => Some(Status::parse(&name).ok_or_else(|| {
                let names: Vec<&str> = Status::ALL.iter().map(|s| s.name()).collect();
                UiError::invalid(format!(
                    "status must be one of {}; got {name:?}",
                    names.join(", ")
                ))
            })?),
            None => None,
        };
        Ok(Self {
            queue: given(queue),
            status,
            kind: given(kind),
            text: given(text),
        })
    }

    fn store_filter(&self) -> JobFilter {
        JobFilter {
            queue: self.queue.clone(),
            status: self.status,
            kind: self.kind.clone(),
            ..JobFilter::default()
        }
    }

    /// The filter as a query string (no leading `?`).
    fn query(&self) -> String {
        let mut out = url::form_urlencoded::Serializer::new(String::new());
        if let Some(queue) = &self.queue {
            out.append_pair("queue", queue);
        }
        if let Some(status) = self.status {
            out.append_pair("status", status.name());
        }
        if let Some(kind) = &self.kind {
            out.append_pair("type", kind);
        }
        if let Some(text) = &self.text {
            out.append_pair("q", text);
        }
        out.finish()
    }
}

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Query(query): Query<JobsQuery>,
) -> Result<Response, UiError> {
    list(&state, &session, query, false).await
}

pub async fn dead(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Query(mut query): Query<JobsQuery>,
) -> Result<Response, UiError> {
    query.status = Some("dead".into());
    list(&state, &session, query, true).await
}

async fn list(
    state: &AppState,
    session: &Session,
    query: JobsQuery,
    dead_page: bool,
) -> Result<Response, UiError> {
    if let Some(id) = given(&query.id) {
        let id: JobId = id
            .trim_start_matches('#')
            .parse()
            .map_err(|_| UiError::invalid(format!("a job id is a whole number; got {id:?}")))?;
        return Ok(Redirect::to(&format!("/ui/jobs/{id}")).into_response());
    }
    let filter = Filter::parse(&query.queue, &query.status, &query.kind, &query.q)?;
    let after: Option<JobId> = match given(&query.after) {
        Some(text) => Some(
            text.parse()
                .map_err(|_| UiError::invalid(format!("after must be a job id; got {text:?}")))?,
        ),
        None => None,
    };
    let scoped = session.principal.is_scoped();
    if let Some(queue) = &filter.queue {
        session.must_admit(queue)?;
    }
    let engine = &state.engine;
    let page = Page {
        after,
        limit: PAGE,
        order: Order::Descending,
    };
    let store_filter = filter.store_filter();
    // A token scoped to some queues sees jobs of one queue at a time.
    let blocked = scoped && filter.queue.is_none();
    let (jobs, next, searched, total) = if blocked {
        (Vec::new(), None, None, None)
    } else if let Some(text) = &filter.text {
        let found = engine
            .search(&store_filter, &TextQuery::new(text), page, SEARCH_BUDGET)
            .await?;
        let next = (!found.exhausted).then_some(found.looked_to).flatten();
        let jobs = found.jobs.clone();
        (jobs, next, Some(found), None)
    } else {
        let jobs = engine.jobs(&store_filter, page).await?;
        let next = (jobs.len() == PAGE)
            .then(|| jobs.last().map(|j| j.id))
            .flatten();
        let total = engine.count_jobs_upto(&store_filter, COUNT_MAX).await?;
        (jobs, next, None, Some(total))
    };
    let (nav, title, base) = if dead_page {
        (Nav::Dead, "Dead jobs and deliveries", "/ui/dead")
    } else {
        (Nav::Jobs, "Jobs", "/ui/jobs")
    };
    let now = engine.now_ms();
    let manage = session.must_manage().is_ok();
    let content = html! {
        (layout::note(query.note.as_deref()))
        @if dead_page {
            nav.tabs {
                a href="/ui/dead" class=[(filter.kind.is_none()).then_some("current")] { "All dead" }
                a href="/ui/dead?type=tenax.delivery" class=[(filter.kind.as_deref() == Some("tenax.delivery")).then_some("current")] { "Dead deliveries" }
            }
        }
        form.filters method="get" action=(base) {
            label { "Queue " input name="queue" value=[filter.queue.as_deref()] placeholder="any"; }
            @if !dead_page {
                label { "Status "
                    select name="status" {
                        option value="" { "any" }
                        @for status in Status::ALL {
                            option value=(status.name()) selected[filter.status == Some(status)] { (status.name().replace('_', " ")) }
                        }
                    }
                }
            }
            label { "Type " input name="type" value=[filter.kind.as_deref()] placeholder="any"; }
            label { "Text " input name="q" type="search" value=[filter.text.as_deref()] placeholder="in payload or errors"; }
            button type="submit" { "Filter" }
            a.reset href=(base) { "Clear" }
        }
        form.find method="get" action="/ui/jobs" {
            label { "Job id " input name="id" inputmode="numeric" placeholder="e.g. 42"; }
            button type="submit" { "Open" }
        }
        @if blocked {
            p.note { "This token may touch only some queues: choose one with the queue filter." }
        }
        @if let Some(total) = total {
            p.count { (total.0) @if total.1 { "+" } " matching" @if after.is_some() { " · " a href={(base) "?" (filter.query())} { "back to the newest" } } }
        }
        @if let Some(found) = &searched {
            p.count {
                "Found " (found.jobs.len()) " while looking at " (found.looked_at) " jobs"
                @if let Some(to) = found.looked_to { " (down to #" (to) ")" }
                @if found.exhausted { "; nothing further matches." } @else { "; there is more to look through." }
            }
        }
        form #jobs method="post" action="/ui/jobs/act" {
            (layout::csrf(session))
            input type="hidden" name="back" value={(base) "?" (filter.query())};
            @if let Some(queue) = &filter.queue { input type="hidden" name="queue" value=(queue); }
            @if let Some(status) = filter.status { input type="hidden" name="status" value=(status.name()); }
            @if let Some(kind) = &filter.kind { input type="hidden" name="type" value=(kind); }
            (table(&jobs, now, manage))
            @if manage && !jobs.is_empty() {
                (actions(dead_page, filter.text.is_some()))
            }
        }
        @if let Some(next) = next {
            p.pager { a.next href={(base) "?" (filter.query()) "&after=" (next)} rel="next" {
                @if searched.is_some() { "Search further →" } @else { "Older →" }
            } }
        }
    };
    Ok(layout::page(session, nav, title, Refresh::Live, content))
}

fn table(jobs: &[Job], now: u64, manage: bool) -> Markup {
    html! {
        @if jobs.is_empty() {
            p.empty { "No jobs here." }
        } @else {
            table.jobs {
                thead {
                    tr {
                        @if manage { th { input type="checkbox" data-select-all="id" aria-label="Select all on this page"; } }
                        th { "id" } th { "queue" } th { "type" } th { "status" } th { "failures" }
                        th { "when" } th { "payload" } th { "last error" }
                    }
                }
                tbody {
                    @for job in jobs {
                        tr data-id=(job.id) {
                            @if manage { td { input type="checkbox" name="id" value=(job.id) aria-label={"Select job " (job.id)}; } }
                            td { a href={"/ui/jobs/" (job.id)} { "#" (job.id) } }
                            td {
                                @if let Some(sub) = subscription_of_queue(&job.spec.queue) {
                                    a href={"/ui/subscriptions/" (sub)} { "subscription " (sub) }
                                } @else {
                                    (job.spec.queue)
                                }
                            }
                            td { (job.spec.kind) }
                            td { (layout::status(job.state.status)) }
                            td { (job.state.failures) }
                            td title=(format::time(when(job))) { (format::relative(when(job), now)) }
                            td.payload { code title=(format::preview(job.spec.payload.get(), PREVIEW_TITLE)) { (format::preview(job.spec.payload.get(), PREVIEW)) } }
                            td.error { @if let Some(error) = job.errors.last() { (format::excerpt(&error.message, 80)) } }
                        }
                    }
                }
            }
        }
    }
}

/// The time that matters for a job's status: when it runs, or when it finished.
fn when(job: &Job) -> u64 {
    job.state.finished_at_ms.unwrap_or(job.state.run_at_ms)
}

fn actions(dead_page: bool, searching: bool) -> Markup {
    html! {
        fieldset.actions {
            legend { "Act on" }
            label { input type="radio" name="scope" value="selected" checked; " the jobs selected above" }
            @if !searching {
                label { input type="radio" name="scope" value="matching"; " every job the filter matches (up to " (BULK_MAX) " per request)" }
            }
            div.buttons {
                @if !dead_page { button type="submit" name="action" value="run_now" { "Run now" } }
                @if !dead_page { button type="submit" name="action" value="cancel" data-confirm="Cancel these jobs? Jobs in flight are told to stop on their next heartbeat." { "Cancel" } }
                button type="submit" name="action" value="replay" { "Replay" }
                button.danger type="submit" name="action" value="delete" data-confirm="Delete these jobs? This cannot be undone." { "Delete" }
            }
            details {
                summary { "Replay with another policy" }
                label { "Policy (any spelling: native, SNS, Zaqar) " textarea name="policy" rows="3" placeholder=r#"{"type": "exponential", "initial": "10s", "factor": 2, "max": "1h", "retry_limit": 8}"# {} }
                label { input type="checkbox" name="reset_attempts" value="true" checked; " start the retries again from 1" }
                p.hint { "Run now applies to scheduled jobs; cancel to unfinished ones; replay to dead and cancelled ones. Others are left as they are." }
            }
        }
    }
}

/// An action from the jobs form.
pub async fn act(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    RawForm(form): RawForm,
) -> Result<Response, UiError> {
    session.must_manage()?;
    let fields = Fields::parse(&form);
    let field = |name: &str| fields.get(name);
    let action = field("action").unwrap_or_default();
    let back = fields.back("/ui/jobs");
    let filter = Filter::parse(&field("queue"), &field("status"), &field("type"), &None)?;
    let ids: Vec<JobId> = match field("scope").as_deref() {
        Some("matching") => matching(&state, &session, &filter).await?,
        _ => fields
            .all("id")
            .map(|v| {
                v.parse()
                    .map_err(|_| UiError::invalid(format!("a job id is a whole number; got {v:?}")))
            })
            .collect::<Result<_, _>>()?,
    };
    if ids.is_empty() {
        return Ok(back_with(&back, "Nothing was selected."));
    }
    // Scoped tokens act only on their queues' jobs.
    for peek in state.engine.peek(&ids).await?.into_iter().flatten() {
        session.must_admit(&peek.queue)?;
    }
    let more = if ids.len() >= BULK_MAX {
        " More remain: run it again."
    } else {
        ""
    };
    let note = match action.as_str() {
        "run_now" => {
            let ran = state.engine.run_now(&ids).await?;
            format!(
                "{} of {} jobs run now (only scheduled jobs can).{more}",
                ran.len(),
                ids.len()
            )
        }
        "replay" => {
            let policy = match field("policy")
                .map(|p| p.trim().to_owned())
                .filter(|p| !p.is_empty())
            {
                Some(text) => {
                    let parsed = parse_policy_str(&text)
                        .map_err(|e| UiError::invalid(format!("policy: {e}")))?;
                    Some(StoredPolicy::new(parsed.retry))
                }
                None => None,
            };
            let replay = Replay {
                selection: Selection {
                    ids: Some(ids.clone()),
                    filter: JobFilter::default(),
                },
                policy,
                reset_attempts: field("reset_attempts").is_some(),
            };
            let replayed = state.engine.replay(&replay).await?;
            let skipped = replayed.skipped.len();
            format!(
                "{} replayed{}.{more}",
                replayed.ids.len(),
                if skipped > 0 {
                    format!(", {skipped} left as they were (not dead, or a unique key is held)")
                } else {
                    String::new()
                }
            )
        }
        "cancel" => {
            let done = state
                .engine
                .cancel(&Selection {
                    ids: Some(ids.clone()),
                    filter: JobFilter::default(),
                })
                .await?;
            format!(
                "{} cancelled, {} in flight marked (their workers are told on their next heartbeat); \
                 finished jobs are left as they were.{more}",
                done.cancelled.len(),
                done.marked.len()
            )
        }
        "delete" => {
            let deleted = state
                .engine
                .delete_jobs(&Selection {
                    ids: Some(ids.clone()),
                    filter: JobFilter::default(),
                })
                .await?;
            format!("{} deleted.{more}", deleted.len())
        }
        other => return Err(UiError::invalid(format!("unknown action {other:?}"))),
    };
    Ok(back_with(&back, &note))
}

/// Ids of the jobs `filter` matches, at most [`BULK_MAX`], oldest first.
async fn matching(
    state: &AppState,
    session: &Session,
    filter: &Filter,
) -> Result<Vec<JobId>, UiError> {
    match &filter.queue {
        Some(queue) => session.must_admit(queue)?,
        None if session.principal.is_scoped() => {
            return Err(UiError::forbidden(
                "this token may touch only some queues: choose one with the queue filter",
            ));
        }
        None => {}
    }
    let store_filter = filter.store_filter();
    let mut ids = Vec::new();
    let mut after = None;
    while ids.len() < BULK_MAX {
        let page = Page::after(after, 1_000.min(BULK_MAX - ids.len()));
        let jobs = state.engine.jobs(&store_filter, page).await?;
        let Some(last) = jobs.last() else { break };
        after = Some(last.id);
        let full = jobs.len() == page.limit;
        ids.extend(jobs.iter().map(|j| j.id));
        if !full {
            break;
        }
    }
    Ok(ids)
}
