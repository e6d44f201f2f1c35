//! The native HTTP API: thin handlers that decode, validate, call the engine and encode. One
//! file per resource, each with its own `router()`. Paths and shapes: `docs/api.md`.

mod dead;
mod deliveries;
pub mod error;
pub(crate) mod extract;
pub(crate) mod fields;
pub(crate) mod jobs;
mod policy;
pub(crate) mod queues;
mod subscription_views;
pub(crate) mod subscriptions;
mod views;
pub(crate) mod work;
pub(crate) mod zaqar;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;

use crate::delivery::Deliveries;
use crate::engine::Engine;

/// Request limits and defaults the handlers enforce.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_request_bytes: usize,
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
}

pub fn router(state: AppState) -> Router {
    let limit = state.limits.max_request_bytes;
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .merge(zaqar::router())
        .nest(
            "/api",
            Router::new()
                .merge(jobs::router())
                .merge(work::router())
                .merge(dead::router())
                .merge(queues::router())
                .merge(policy::router())
                .merge(subscriptions::router())
                .merge(deliveries::router()),
        )
        .fallback(|| async { error::ApiError::not_found("no such endpoint; see docs/api.md") })
        .method_not_allowed_fallback(|| async {
            error::ApiError {
                status: axum::http::StatusCode::METHOD_NOT_ALLOWED,
                code: "method_not_allowed",
                field: None,
                message: "this endpoint does not take that method; see docs/api.md".into(),
            }
        })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
