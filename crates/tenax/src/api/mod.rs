//! The native HTTP API: thin handlers that decode, validate, call the engine and encode. One
//! file per resource, each with its own `router()`. Paths and shapes: `docs/api.md`.

mod activity;
mod admin;
mod after;
pub mod auth;
mod batches;
pub mod browser;
mod cancel;
pub mod cluster;
mod dead;
mod deliveries;
pub mod error;
pub mod extract;
pub(crate) mod fields;
pub mod guard;
pub mod jobs;
pub mod metrics;
pub mod openapi;
mod policy;
mod pools;
pub mod queues;
pub mod request_id;
pub mod request_log;
pub mod schedules;
mod scope;
mod scrape;
pub(crate) mod subscription_views;
pub mod subscriptions;
mod tokens;
mod views;
pub mod work;
pub mod worker_name;
mod workflows;
pub mod zaqar;

use std::collections::HashSet;
use std::sync::Arc;

use axum::Router;
use axum::http::Method;
use tenax_core::engine::Engine;
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::delivery::Deliveries;

/// Request limits and defaults the handlers enforce.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_request_bytes: usize,
    /// How long a request's body may take to arrive (`--request-timeout`).
    pub request_timeout: std::time::Duration,
    pub max_payload_bytes: usize,
    pub default_lease_ms: u64,
    pub max_lease_ms: u64,
}

/// What every handler gets.
#[derive(Debug, Clone)]
pub struct AppState {
    pub engine: Arc<Engine>,
    pub limits: Arc<Limits>,
    pub deliveries: Arc<Deliveries>,
    /// Whether requests need an API token.
    pub auth_required: bool,
    /// One line per request at info, written off the request's thread; `None` with
    /// `--log-requests false`.
    pub request_log: Option<request_log::RequestLog>,
    /// What a browser may send ([`browser`]).
    pub browser: Arc<browser::BrowserPolicy>,
    /// The key of Zaqar's pre-signed URLs ([`zaqar::signed`]).
    pub zaqar_signing: Arc<zaqar::signed::SigningKey>,
    /// Zaqar's transport limits ([`zaqar::limits`]).
    pub zaqar_limits: zaqar::limits::Limits,
    /// Whether Zaqar subscriptions wait for their subscriber's confirmation
    /// (`--zaqar-require-confirmation`).
    pub zaqar_require_confirmation: bool,
}

/// `GET /healthz`: `ok` while the server serves.
#[utoipa::path(get, path = "/healthz", operation_id = "health", tag = "health", security(()),
    responses((status = 200, description = "The server is up", body = String, content_type = "text/plain")))]
async fn healthz() -> &'static str {
    "ok"
}

/// The native routes, with their OpenAPI description.
pub fn native() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(healthz))
        .routes(routes!(metrics::metrics))
        .nest(
            "/api",
            OpenApiRouter::new()
                .merge(jobs::router())
                .merge(cancel::router())
                .merge(batches::router())
                .merge(work::router())
                .merge(dead::router())
                .merge(queues::router())
                .merge(schedules::router())
                .merge(policy::router())
                .merge(subscriptions::router())
                .merge(deliveries::router())
                .merge(tokens::router())
                .merge(pools::router())
                .merge(admin::router())
                .merge(cluster::router())
                .merge(activity::router())
                .merge(workflows::router()),
        )
        .split_for_parts()
}

/// Every route of the server and the methods it answers: the native ones from their
/// OpenAPI description, and Zaqar's.
fn routes(
    spec: &utoipa::openapi::OpenApi,
    zaqar: &[(Method, &'static str)],
) -> HashSet<(Method, String)> {
    let mut routes = HashSet::new();
    for (path, item) in &spec.paths.paths {
        for (method, operation) in [
            (Method::GET, &item.get),
            (Method::PUT, &item.put),
            (Method::POST, &item.post),
            (Method::DELETE, &item.delete),
            (Method::PATCH, &item.patch),
        ] {
            if operation.is_some() {
                routes.insert((method, path.clone()));
            }
        }
    }
    routes.insert((Method::GET, "/api/openapi.json".to_owned()));
    routes.extend(zaqar.iter().map(|(m, p)| (m.clone(), (*p).to_owned())));
    routes
}

/// Every route of both APIs and the methods it answers, for the authorization rules' test.
pub fn all_routes() -> HashSet<(Method, String)> {
    let (_, spec) = native();
    let (_, zaqar) = zaqar::router();
    routes(&spec, &zaqar)
}

/// The routes of both APIs and the OpenAPI description, behind the authorizer; the server's
/// application (`app.rs`) adds the dashboard and puts the guard around them all.
pub fn router(state: &AppState) -> Router<AppState> {
    let (native, spec) = native();
    let (zaqar, zaqar_routes) = zaqar::router();
    let authorizer = Arc::new(auth::Authorizer::new(
        state.engine.clone(),
        state.auth_required,
        routes(&spec, &zaqar_routes),
        state.zaqar_signing.clone(),
    ));
    native
        .route("/api/openapi.json", openapi::route(&spec))
        .merge(zaqar)
        .route_layer(axum::middleware::from_fn_with_state(
            authorizer,
            auth::authorize,
        ))
}
