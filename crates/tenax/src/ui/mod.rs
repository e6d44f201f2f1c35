//! The web dashboard at `/ui`: pages rendered on the server (maud), a little plain JavaScript
//! (pages that update themselves, the policy designer's live chart), every asset inside the
//! binary (no request leaves the machine). Pages read and act through the engine, as the API
//! does; charts of policies are drawn by [`crate::chart`], the code behind `tenax policy plot`.
//!
//! Authentication: the same tokens as the API. A browser cannot send a bearer header by
//! itself, so `/ui/login` takes a token and keeps it in an HttpOnly, SameSite=Strict cookie
//! ([`session`]); with authentication off, the pages need none. Every action is a POST that
//! carries a CSRF token bound to the session.

mod assets;
mod bars;
mod designer;
mod endpoint;
mod form;
mod format;
mod job;
mod jobs;
mod layout;
mod overview;
mod queue;
mod queues;
mod schedules;
mod session;
mod subscriptions;
mod workers;
mod workflow;

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{Hmac, Mac as _};
use maud::html;
pub use session::Session;
use sha2::Sha256;
use tenax_core::engine::{ChangeError, EngineError};

use crate::api::AppState;

/// The dashboard's keys: what CSRF tokens are made with, and whether cookies need TLS.
#[derive(Debug)]
pub struct UiKeys {
    /// Random per start: CSRF tokens of an earlier run are refused.
    secret: [u8; 32],
    /// The server speaks TLS: cookies are `Secure`.
    pub secure: bool,
}

impl UiKeys {
    pub fn new(secure: bool) -> Self {
        Self {
            secret: rand::random(),
            secure,
        }
    }

    /// The CSRF token of a session: a MAC of what identifies it, so that only a page this
    /// server rendered for that session holds it.
    fn csrf(&self, session: &str) -> String {
        use base64::Engine as _;
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.secret) {
            Ok(mac) => mac,
            Err(_) => return String::new(),
        };
        mac.update(b"tenax-ui-csrf:");
        mac.update(session.as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }
}

/// What the dashboard's handlers get: the API's state, and the dashboard's keys besides.
/// A handler takes either part as its `State`.
#[derive(Debug, Clone)]
pub struct UiState {
    pub app: AppState,
    pub keys: Arc<UiKeys>,
}

impl FromRef<UiState> for AppState {
    fn from_ref(state: &UiState) -> Self {
        state.app.clone()
    }
}

impl FromRef<UiState> for Arc<UiKeys> {
    fn from_ref(state: &UiState) -> Self {
        state.keys.clone()
    }
}

/// The dashboard's routes, ready to merge into the API's. Pages and actions need a session
/// ([`session::require`]); the login page and the assets do not.
pub fn router(state: UiState) -> Router<AppState> {
    Router::new()
        .route("/ui", get(overview::page))
        .route("/ui/queues", get(queues::page))
        .route("/ui/queues/{name}", get(queue::page))
        .route("/ui/queues/{name}/pause", post(queues::pause))
        .route("/ui/queues/{name}/resume", post(queues::resume))
        .route("/ui/queues/{name}/limits", post(queue::limits))
        .route("/ui/schedules", get(schedules::page))
        .route("/ui/schedules/{name}/{action}", post(schedules::act))
        .route("/ui/jobs", get(jobs::page))
        .route("/ui/jobs/act", post(jobs::act))
        .route("/ui/jobs/{id}", get(job::page))
        .route("/ui/workflows/{id}", get(workflow::page))
        .route("/ui/dead", get(jobs::dead))
        .route("/ui/subscriptions", get(subscriptions::page))
        .route("/ui/subscriptions/{id}", get(subscriptions::detail))
        .route("/ui/subscriptions/{id}/enable", post(subscriptions::enable))
        .route(
            "/ui/subscriptions/{id}/disable",
            post(subscriptions::disable),
        )
        .route(
            "/ui/subscriptions/{id}/test",
            post(subscriptions::test_event),
        )
        .route("/ui/workers", get(workers::page))
        .route("/ui/policy", get(designer::page))
        .route("/ui/policy/chart", post(designer::chart))
        .route("/ui/logout", post(session::logout))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            session::require,
        ))
        .route("/ui/login", get(session::login_page).post(session::login))
        .route("/ui/assets/{name}", get(assets::serve))
        .route("/ui/{*rest}", get(not_found))
        .with_state(state)
}

async fn not_found(session: Option<axum::Extension<Session>>) -> UiError {
    let _ = session;
    UiError::not_found("no such page")
}

/// An error page.
#[derive(Debug)]
pub struct UiError {
    status: axum::http::StatusCode,
    message: String,
}

impl UiError {
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: axum::http::StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            status: axum::http::StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            status: axum::http::StatusCode::FORBIDDEN,
            message: message.into(),
        }
    }
}

impl From<EngineError> for UiError {
    fn from(error: EngineError) -> Self {
        if error.is_internal() {
            tracing::error!(%error, "a dashboard page failed");
            Self {
                status: axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                message: "the server failed to read or change its store; the log has the details"
                    .into(),
            }
        } else {
            Self::invalid(error.to_string())
        }
    }
}

/// A change the dashboard makes refuses nothing itself: only the store can fail it.
impl From<ChangeError<Infallible>> for UiError {
    fn from(error: ChangeError<Infallible>) -> Self {
        match error {
            ChangeError::Failed(error) => Self::from(error),
            ChangeError::Refused(never) => match never {},
        }
    }
}

/// A refusal by the API's rules (a field the dashboard checks as the API does), or an error the
/// API's views met: its status, and its message naming the field.
impl From<crate::api::error::ApiError> for UiError {
    fn from(error: crate::api::error::ApiError) -> Self {
        let message = match error.field {
            Some(field) => format!("{field}: {}", error.message),
            None => error.message,
        };
        Self {
            status: error.status,
            message,
        }
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        // A server error's details are in the log, under the request's id.
        let request_id = self
            .status
            .is_server_error()
            .then(crate::api::request_id::current)
            .flatten();
        let body = html! {
            (maud::DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    title { "Tenax — " (self.status.as_u16()) }
                    link rel="stylesheet" href="/ui/assets/app.css";
                link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml";
                }
                body {
                    main {
                        h1 { (self.status.as_u16()) " " (self.status.canonical_reason().unwrap_or("")) }
                        p.error { (self.message) }
                        @if let Some(id) = &request_id {
                            p { "Request id: " code { (id) } }
                        }
                        p { a href="/ui" { "Back to the overview" } }
                    }
                }
            }
        };
        (self.status, layout::headers(), Html(body.into_string())).into_response()
    }
}
