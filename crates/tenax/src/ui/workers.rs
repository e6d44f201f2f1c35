//! Servers and workers: every live server of the cluster (its version, how long it has run,
//! whether it leads the maintenance, where it listens, when it was last seen) and every worker
//! each has seen lately (its name, the queues it takes from, the jobs it holds, its streams,
//! when it was last seen). On PostgreSQL every server shows the same list, from the rows the
//! servers write every second; on the embedded store, this server. A session whose token is
//! scoped to some queues sees the workers of those queues only, as the API's `/api/cluster`.

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use maud::html;
use tenax_core::model::{LiveServer, WorkerInfo};

use super::layout::{self, Nav, Refresh};
use super::{Session, UiError, format};
use crate::api::AppState;
use crate::api::cluster::as_seen_by;

pub async fn page(
    State(state): State<AppState>,
    Extension(session): Extension<Session>,
) -> Result<Response, UiError> {
    let engine = &state.engine;
    let now = engine.now_ms();
    let servers: Vec<LiveServer> = engine.live_servers().await?;
    // Each server with the workers the session may see, as `/api/cluster` shows them.
    let seen: Vec<(&LiveServer, Vec<WorkerInfo>)> = servers
        .iter()
        .map(|server| {
            let workers = server.about.iter().flat_map(|a| a.workers.iter().cloned());
            let visible = workers.filter_map(|w| as_seen_by(w, &session.principal));
            (server, visible.collect())
        })
        .collect();
    let content = html! {
        section {
            h2 { "Servers" }
            table.servers {
                thead { tr { th { "server" } th { "version" } th { "up for" } th { "leads" } th { "listens on" } th { "last seen" } th { "workers" } } }
                tbody {
                    @for (server, workers) in &seen {
                        @let about = server.about.clone().unwrap_or_default();
                        tr data-server=(format!("{:016x}", server.id)) {
                            td {
                                code { (format!("{:016x}", server.id)) }
                                @if server.this { " (this one)" }
                            }
                            td { @if about.version.is_empty() { "-" } @else { (about.version) } }
                            td {
                                @if about.version.is_empty() { "-" }
                                @else { span title=(format::time(about.started_at_ms)) { (format::duration(now.saturating_sub(about.started_at_ms) / 1_000 * 1_000)) } }
                            }
                            td { @if about.leads { "yes" } @else { "no" } }
                            td { (about.address.as_deref().unwrap_or("-")) }
                            td { span title=(format::time(server.seen_at_ms)) { (format::relative(server.seen_at_ms, now)) } }
                            td { (workers.len()) }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Workers" }
            @let workers: Vec<(&LiveServer, &WorkerInfo)> = seen
                .iter()
                .flat_map(|(server, workers)| workers.iter().map(move |w| (*server, w)))
                .collect();
            @if workers.is_empty() {
                p { "No worker has taken from this cluster in the last few minutes." }
            } @else {
                table.workers {
                    thead { tr { th { "worker" } th { "queues" } th { "jobs in flight" } th { "streams" } th { "last seen" } th { "on server" } } }
                    tbody {
                        @for (server, worker) in &workers {
                            tr data-worker=(worker.name) {
                                td { (worker.name) }
                                td {
                                    @for (i, queue) in worker.queues.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        a href={"/ui/queues/" (super::queues::urlencode(&queue.queue))} { (queue.queue) }
                                    }
                                }
                                td { (worker.in_flight()) }
                                td { (worker.streams) }
                                td { span title=(format::time(worker.seen_at_ms)) { (format::relative(worker.seen_at_ms, now)) } }
                                td { code { (format!("{:016x}", server.id)) } }
                            }
                        }
                    }
                }
            }
            p.hint { "A worker is named by the worker field of its take, its X-Tenax-Worker header, or else its address and User-Agent; one silent for five minutes is forgotten. Jobs in flight are the leases its server handed it that have not ended." }
        }
    };
    Ok(layout::page(
        &session,
        Nav::Workers,
        "Servers and workers",
        Refresh::Live,
        content,
    ))
}
