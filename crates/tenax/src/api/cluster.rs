//! The cluster: every live server, and the workers each has seen. On PostgreSQL each server
//! writes what it says of itself with its row every second, so every server answers with the
//! same servers and workers (within a second); on the embedded store the cluster is this server.
//! A token scoped to some queues sees the workers of those queues only, and of their jobs in
//! flight only those of its queues.

use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use tenax_core::auth::Principal;
use tenax_core::clock::rfc3339;
use tenax_core::model::{LiveServer, WorkerInfo};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::ApiError;
use super::openapi::Refusals;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(cluster))
}

/// The live servers, by id.
#[derive(Debug, Serialize, ToSchema)]
struct ClusterView {
    servers: Vec<ServerView>,
}

/// A live server: what it says of itself, and the workers it has seen.
#[derive(Debug, Serialize, ToSchema)]
struct ServerView {
    /// Its id in the store (16 hex digits; random, new at each start).
    id: String,
    /// Whether it is the server answering.
    this: bool,
    /// The version of Tenax it runs; `null` for a server that does not say (an earlier
    /// version).
    version: Option<String>,
    started_at: Option<String>,
    /// When it last wrote its row (on PostgreSQL, every second).
    seen_at: String,
    /// Whether it leads the maintenance (promotions, lease expiry, retention).
    leads: bool,
    /// Where it listens.
    address: Option<String>,
    /// The workers it has seen in the last 5 minutes (at most 1000), most recently seen first.
    workers: Vec<WorkerView>,
}

/// A worker, as the server it takes from has seen it.
#[derive(Debug, Serialize, ToSchema)]
struct WorkerView {
    /// The name it gave (the take's `worker`, or `X-Tenax-Worker`), else its address and
    /// User-Agent.
    name: String,
    /// The queues it took from in the last 5 minutes, by name.
    queues: Vec<String>,
    /// The jobs it holds now: leases this server handed it that it has not completed or failed
    /// through this server, and that have not ended.
    in_flight: u64,
    /// Whether it has a stream open (`POST /api/take/stream`), and how many.
    streaming: bool,
    streams: u32,
    /// Its last take, stream or heartbeat (now, while a stream is open).
    seen_at: String,
}

/// `worker` as `principal` may see it: only the queues its scopes admit, with their jobs;
/// `None` when the principal is scoped and admits none of them. The API's `/api/cluster` and
/// the dashboard's workers page both show workers so.
pub fn as_seen_by(mut worker: WorkerInfo, principal: &Principal) -> Option<WorkerInfo> {
    worker.queues.retain(|q| principal.admits_queue(&q.queue));
    if principal.is_scoped() && worker.queues.is_empty() {
        return None;
    }
    Some(worker)
}

fn worker_view(worker: WorkerInfo, principal: &Principal) -> Option<WorkerView> {
    let worker = as_seen_by(worker, principal)?;
    Some(WorkerView {
        name: worker.name.clone(),
        in_flight: worker.in_flight(),
        queues: worker.queues.into_iter().map(|q| q.queue).collect(),
        streaming: worker.streams > 0,
        streams: worker.streams,
        seen_at: rfc3339(worker.seen_at_ms),
    })
}

fn server_view(server: LiveServer, principal: &Principal) -> ServerView {
    let about = server.about.unwrap_or_default();
    let said = !about.version.is_empty();
    ServerView {
        id: format!("{:016x}", server.id),
        this: server.this,
        version: said.then_some(about.version),
        started_at: said.then(|| rfc3339(about.started_at_ms)),
        seen_at: rfc3339(server.seen_at_ms),
        leads: about.leads,
        address: about.address,
        workers: about
            .workers
            .into_iter()
            .filter_map(|w| worker_view(w, principal))
            .collect(),
    }
}

/// Every live server of the cluster, with the workers each has seen: on PostgreSQL every server
/// answers the same (as of the last second); on the embedded store, this server.
#[utoipa::path(get, path = "/cluster", operation_id = "get_cluster", tag = "cluster",
    responses((status = 200, body = ClusterView), Refusals))]
async fn cluster(
    State(state): State<AppState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<ClusterView>, ApiError> {
    let servers = state.engine.live_servers().await?;
    Ok(Json(ClusterView {
        servers: servers
            .into_iter()
            .map(|s| server_view(s, &principal))
            .collect(),
    }))
}
