//! `GET /metrics`: every metric in the Prometheus text format ([`tenax_core::metrics`], and the gauges
//! of [`super::scrape`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use super::AppState;
use super::openapi::Refusals;

/// `GET /metrics`: the Prometheus text format (version 0.0.4). Needs a token that may read
/// metrics (admin or reader, not scoped) unless authentication is off; `--metrics-listen`
/// serves it without tokens on an address of its own.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "health",
    responses((status = 200, description = "Every metric, in the Prometheus text format (docs/operations.md)", body = String, content_type = "text/plain"), Refusals))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let text = super::scrape::render(&state.engine, &state.deliveries).await;
    ([(CONTENT_TYPE, super::scrape::CONTENT_TYPE)], text)
}

/// The router of `--metrics-listen`: `/metrics` and `/healthz`, without tokens.
pub fn router(state: AppState) -> axum::Router {
    // No token is asked here: the browser checks hold against DNS rebinding (Host) and pages
    // of other sites (Origin), whatever --auth says.
    let browser = Arc::new(super::browser::BrowserPolicy {
        check_host: true,
        tls: false,
        ..(*state.browser).clone()
    });
    axum::Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .layer(axum::middleware::from_fn_with_state(
            browser,
            super::browser::refuse_foreign,
        ))
        .with_state(state)
}
