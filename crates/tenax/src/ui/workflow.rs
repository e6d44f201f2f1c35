//! A workflow: the jobs joined to one by their dependencies, drawn as a graph (parents above
//! their children, each job a box in its status's colour, linking to its page) and listed
//! below. The page follows the workflow until every job of it has finished.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, PreEscaped, html};
use tenax_core::engine::workflows::MAX_WORKFLOW_JOBS;
use tenax_core::model::{Job, JobId};

use super::layout::{self, Nav, Refresh};
use super::{Session, UiError, format};
use crate::api::AppState;

/// The most jobs drawn; a larger workflow is listed only.
const DRAWN: usize = 200;
const BOX_W: usize = 150;
const BOX_H: usize = 40;
const GAP_X: usize = 30;
const GAP_Y: usize = 50;
const MARGIN: usize = 10;

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let id: JobId = id
        .parse()
        .map_err(|_| UiError::invalid(format!("a job id is a whole number; got {id:?}")))?;
    let workflow = state
        .engine
        .workflow(id, MAX_WORKFLOW_JOBS)
        .await?
        .ok_or_else(|| UiError::not_found(format!("job {id} does not exist (or was purged)")))?;
    let first = workflow.jobs.iter().find(|j| j.id == id);
    if let Some(job) = first {
        session.must_admit(&job.spec.queue)?;
    }
    let jobs: Vec<&Job> = workflow
        .jobs
        .iter()
        .filter(|j| session.principal.admits_queue(&j.spec.queue))
        .collect();
    let edges: Vec<(JobId, JobId)> = workflow
        .edges
        .iter()
        .copied()
        .filter(|(p, c)| jobs.iter().any(|j| j.id == *p) && jobs.iter().any(|j| j.id == *c))
        .collect();
    let now = state.engine.now_ms();
    let unfinished = jobs.iter().any(|j| !j.state.status.is_finished());
    let title = format!("Workflow of job #{id}");
    let content = html! {
        p {
            (jobs.len()) " jobs, " (edges.len()) " dependencies"
            @if workflow.truncated { " (the first " (MAX_WORKFLOW_JOBS) " found)" }
            ". A job runs once every job above it that it is joined to has completed."
        }
        @if jobs.len() <= DRAWN {
            div.chart.dag { (PreEscaped(draw(&jobs, &edges))) }
        } @else {
            p.muted { "Too many jobs to draw (more than " (DRAWN) "): listed below." }
        }
        table.jobs {
            thead { tr { th { "job" } th { "type" } th { "queue" } th { "status" } th { "waits for" } th { "finished" } } }
            tbody {
                @for job in &jobs {
                    tr {
                        td { a href={"/ui/jobs/" (job.id)} { "#" (job.id) } }
                        td { (job.spec.kind) }
                        td { (job.spec.queue) }
                        td { (layout::status(job.state.status))
                            @if let Some(reason) = &job.state.dead_reason { " " span.muted { (format::excerpt(reason, 80)) } } }
                        td { @for (i, parent) in job.spec.after.iter().enumerate() {
                            @if i > 0 { ", " } a href={"/ui/jobs/" (parent)} { "#" (parent) } } }
                        td { @if let Some(at) = job.state.finished_at_ms {
                            span title=(format::time(at)) { (format::relative(at, now)) } } }
                    }
                }
            }
        }
    };
    let refresh = if unfinished {
        Refresh::Live
    } else {
        Refresh::Still
    };
    Ok(layout::page(&session, Nav::Jobs, &title, refresh, content))
}

/// The graph as SVG: each job in the row below its deepest parent (ids follow the order jobs
/// can run in, so one pass in id order places every parent first), rows centred, edges from a
/// parent's bottom to its child's top.
fn draw(jobs: &[&Job], edges: &[(JobId, JobId)]) -> String {
    let mut depth: BTreeMap<JobId, usize> = BTreeMap::new();
    for job in jobs {
        let below = edges
            .iter()
            .filter(|(_, child)| *child == job.id)
            .filter_map(|(parent, _)| depth.get(parent))
            .map(|d| d + 1)
            .max()
            .unwrap_or(0);
        depth.insert(job.id, below);
    }
    let mut rows: BTreeMap<usize, Vec<&Job>> = BTreeMap::new();
    for job in jobs {
        rows.entry(depth[&job.id]).or_default().push(job);
    }
    let widest = rows.values().map(Vec::len).max().unwrap_or(1);
    let width = MARGIN * 2 + widest * BOX_W + widest.saturating_sub(1) * GAP_X;
    let height = MARGIN * 2 + rows.len() * BOX_H + rows.len().saturating_sub(1) * GAP_Y;
    let mut at: BTreeMap<JobId, (usize, usize)> = BTreeMap::new();
    for (row, members) in &rows {
        let used = members.len() * BOX_W + members.len().saturating_sub(1) * GAP_X;
        let left = (width - used) / 2;
        for (i, job) in members.iter().enumerate() {
            at.insert(
                job.id,
                (left + i * (BOX_W + GAP_X), MARGIN + row * (BOX_H + GAP_Y)),
            );
        }
    }
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="the workflow's jobs and dependencies">"#
    );
    for (parent, child) in edges {
        let (Some(&(px, py)), Some(&(cx, cy))) = (at.get(parent), at.get(child)) else {
            continue;
        };
        let (x1, y1) = (px + BOX_W / 2, py + BOX_H);
        let (x2, y2) = (cx + BOX_W / 2, cy);
        let mid = (y1 + y2) / 2;
        let _ = write!(
            svg,
            r#"<path class="edge" data-edge="{parent}-{child}" d="M{x1},{y1} C{x1},{mid} {x2},{mid} {x2},{y2}"/>"#
        );
    }
    for job in jobs {
        let (x, y) = at[&job.id];
        let status = job.state.status.name();
        let kind = format::excerpt(&job.spec.kind, 20);
        let _ = write!(
            svg,
            r##"<a href="/ui/jobs/{id}"><g class="node {status}" data-job="{id}"><rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6"/><text x="{tx}" y="{ty1}">{kind}</text><text class="sub" x="{tx}" y="{ty2}">#{id} · {status}</text></g></a>"##,
            id = job.id,
            tx = x + BOX_W / 2,
            ty1 = y + 17,
            ty2 = y + 32,
            kind = html! { (kind) }.into_string(),
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A link to the workflow of a job that has parents or children, for its page.
pub fn link(id: JobId) -> Markup {
    html! { a href={"/ui/workflows/" (id)} { "its workflow" } }
}
