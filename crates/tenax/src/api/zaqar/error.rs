//! Zaqar's error shape: `{"title": "...", "description": "..."}` with Zaqar's status codes and,
//! where Zaqar has one, its exact title and description (clients and their users match on them).
//!
//! Titles are Zaqar's (`zaqar/transport/wsgi/errors.py` and Falcon's); a description Tenax adds
//! for a rule Zaqar does not have names the field and the rule.

use std::borrow::Cow;

use axum::Json;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tenax_core::engine::{EngineError, Unavailable};
use tenax_core::model::pool::PoolError;

/// Zaqar's "the request is well-formed JSON but breaks a rule" title.
pub const BAD_API: &str = "Invalid API request";
/// Zaqar's "the body cannot be read as what the resource expects" title.
pub const BAD_BODY: &str = "Invalid request body";

#[derive(Debug, Clone)]
pub struct ZaqarError {
    pub status: StatusCode,
    pub title: Cow<'static, str>,
    /// Left out of the body when `None` (Falcon's bare 404 and 405 have none).
    pub description: Option<String>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl ZaqarError {
    pub fn new(
        status: StatusCode,
        title: impl Into<Cow<'static, str>>,
        description: impl Into<String>,
    ) -> Self {
        Self {
            status,
            title: title.into(),
            description: Some(description.into()),
            headers: Vec::new(),
        }
    }

    /// 400 "Invalid API request": a rule of the API (limits, ranges, reserved metadata).
    pub fn api(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, BAD_API, description)
    }

    /// 400 "Invalid request body": the body is not JSON, or not shaped as the resource expects.
    pub fn body(description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, BAD_BODY, description)
    }

    /// The body is not JSON at all.
    pub fn unparsable() -> Self {
        Self::body("Request body could not be parsed.")
    }

    /// The body is JSON of the wrong type (an array where an object belongs, ...).
    pub fn document_type() -> Self {
        Self::body("Document type not supported.")
    }

    /// 400 "Invalid parameter", Falcon's wording for a query parameter that does not parse.
    pub fn param(name: &str, rule: &str) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "Invalid parameter",
            format!("The \"{name}\" parameter is invalid. {rule}"),
        )
    }

    /// 404 "Not found".
    pub fn not_found(description: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "Not found", description)
    }

    /// Falcon's 404 for a path that is no resource.
    pub fn no_route() -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            title: "404 Not Found".into(),
            description: None,
            headers: Vec::new(),
        }
    }

    /// 409 "Resource conflict".
    pub fn conflict(description: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "Resource conflict", description)
    }

    /// 503 "Service temporarily unavailable", Zaqar's answer when storage fails.
    pub fn unavailable(description: &str) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service temporarily unavailable",
            format!("{description} Please try again in a few seconds."),
        )
    }

    /// A refused change of the pools or flavors, as Zaqar answers its own.
    fn of_pool(refusal: &PoolError) -> Self {
        match refusal {
            PoolError::NoPool(name) => Self::not_found(format!("Pool {name} does not exist")),
            PoolError::NoFlavor(name) => Self::api(format!("Flavor {name} does not exist")),
            // Zaqar's answer to a URI it cannot connect to, and to a rule of the body.
            PoolError::Unreachable(_) | PoolError::Invalid { .. } | PoolError::NotPooled => {
                Self::body(refusal.to_string())
            }
            PoolError::UriTaken(_)
            | PoolError::HoldsQueues { .. }
            | PoolError::Forwards(_)
            | PoolError::LastOfFlavor { .. }
            | PoolError::NotOfFlavor { .. }
            | PoolError::Tied { .. }
            | PoolError::MoveAcrossPools { .. }
            | PoolError::MoveUnfinished { .. } => Self::conflict(refusal.to_string()),
        }
    }

    /// The same error under another title.
    pub fn retitled(mut self, title: &'static str) -> Self {
        self.title = title.into();
        self
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }
}

impl From<EngineError> for ZaqarError {
    fn from(error: EngineError) -> Self {
        match &error {
            EngineError::NotFound(_) => Self::not_found(error.to_string()),
            EngineError::Conflict(_) => Self::conflict(error.to_string()),
            EngineError::Unavailable(Unavailable::Failed) => {
                tracing::error!(%error, "storage has failed");
                Self::unavailable("The storage refuses writes until the server is restarted.")
            }
            EngineError::Unavailable(Unavailable::Unreachable(_)) => {
                tracing::warn!(%error, "the store is unavailable");
                Self::unavailable("The database cannot be reached just now; retry the request.")
            }
            EngineError::Unavailable(Unavailable::FactsChanged) => Self::unavailable(
                "The queue's settings or subscriptions kept changing while the messages were \
                 posted, and none was stored; retry the request.",
            ),
            EngineError::Pool(refusal) => Self::of_pool(refusal),
            EngineError::Storage(_) => {
                // Bare: the details go to the log, under the request's id.
                tracing::error!(
                    %error,
                    source = std::error::Error::source(&error).map(tracing::field::display),
                    "internal error in the Zaqar API"
                );
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal server error",
                    "An internal error occurred; the server's log has the details.",
                )
            }
        }
    }
}

/// A refused change carries the handler's own error; a failed one, the engine's.
impl From<tenax_core::engine::ChangeError<ZaqarError>> for ZaqarError {
    fn from(error: tenax_core::engine::ChangeError<ZaqarError>) -> Self {
        match error {
            tenax_core::engine::ChangeError::Refused(error) => error,
            tenax_core::engine::ChangeError::Failed(error) => error.into(),
        }
    }
}

impl IntoResponse for ZaqarError {
    fn into_response(mut self) -> Response {
        // A server error's details are in the log, under the request's id.
        if self.status.is_server_error() {
            if let (Some(id), Some(description)) =
                (crate::api::request_id::current(), self.description.as_mut())
            {
                if !description.contains(&*id) {
                    description.push_str(&format!(" (request id {id})"));
                }
            }
        }
        let body = match &self.description {
            Some(description) => json!({ "title": self.title, "description": description }),
            None => json!({ "title": self.title }),
        };
        let mut response = (self.status, Json(body)).into_response();
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}
