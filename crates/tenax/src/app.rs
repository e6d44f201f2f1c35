//! The server's HTTP application: the routes of both APIs and of the dashboard in one router,
//! behind the guard that every request passes through ([`api::guard`]). It sits above the API
//! and the dashboard so that the API knows nothing of the dashboard, which builds on the API.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;

use crate::api::error::ApiError;
use crate::api::{self, AppState, guard};
use crate::ui::{self, UiKeys, UiState};

/// Every route of the API's listener. (`--metrics-listen` serves [`api::metrics::router`].)
pub fn router(state: AppState, ui_keys: Arc<UiKeys>) -> Router {
    let limit = state.limits.max_request_bytes;
    let engine = state.engine.clone();
    let app = api::router(&state)
        // The dashboard authenticates by its own session cookie (`ui::session`).
        .merge(ui::router(UiState {
            app: state.clone(),
            keys: ui_keys,
        }))
        .route_layer(axum::middleware::from_fn(guard::record_route))
        .fallback(|| async { ApiError::not_found("no such endpoint; see docs/api.md") })
        .method_not_allowed_fallback(|| async {
            ApiError {
                status: axum::http::StatusCode::METHOD_NOT_ALLOWED,
                code: "method_not_allowed",
                field: None,
                message: "this endpoint does not take that method; see docs/api.md".into(),
            }
        })
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(guard::Guard {
                limits: state.limits.clone(),
                metrics: state.engine.metrics.clone(),
                request_log: state.request_log.clone(),
                tracing: state.engine.tracing.clone(),
                browser: state.browser.clone(),
            }),
            guard::guard,
        ))
        .with_state(state);
    // Zaqar's websocket at `/`, whose frames run through the router above.
    api::zaqar::websocket::at_root(app, engine, limit)
}
