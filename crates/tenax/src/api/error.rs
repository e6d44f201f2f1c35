//! One error shape for every response that is not a success:
//! `{"error": {"status": 400, "code": "invalid", "field": "jobs[2].priority", "message": "..."}}`.
//! Client errors name the field and the rule; server errors are logged and answered plainly,
//! with the request id under which the log has the details (`"request_id"`).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tenax_core::engine::{Conflict, EngineError, Unavailable};
use tenax_core::model::pool::PoolError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub field: Option<String>,
    pub message: String,
}

impl ApiError {
    /// A 400 naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "invalid",
            field: Some(field.into()).filter(|f: &String| !f.is_empty()),
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            field: None,
            message: message.into(),
        }
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::CONFLICT,
            code,
            field: None,
            message: message.into(),
        }
    }

    /// A policy error under `prefix` (for example `policy` or `jobs[3].policy`).
    pub fn policy(prefix: &str, error: &tenax_policy::PolicyError) -> Self {
        let field = if error.field.is_empty() {
            prefix.to_owned()
        } else if prefix.is_empty() {
            error.field.clone()
        } else {
            format!("{prefix}.{}", error.field)
        };
        Self::invalid(field, error.rule.clone())
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        match &error {
            EngineError::NotFound(_) => Self::not_found(error.to_string()),
            EngineError::Conflict(conflict) => {
                let code = match conflict {
                    Conflict::NotInFlight { .. } => "not_in_flight",
                    Conflict::LeaseLost { .. } => "lease_lost",
                    // The handler names the field (`unique_key`, `jobs[i].unique_key`).
                    Conflict::Duplicate { .. } => "duplicate",
                    Conflict::EndpointTaken { .. } => "endpoint_taken",
                    Conflict::BatchClosed(_) => "batch_closed",
                    Conflict::AcrossPools(_) => "across_pools",
                };
                Self::conflict(code, error.to_string())
            }
            EngineError::Unavailable(Unavailable::Failed) => {
                tracing::error!(%error, "storage has failed");
                Self {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    code: "unavailable",
                    field: None,
                    message: "the server cannot store anything until it is restarted; the log \
                              has the details under this request's id"
                        .into(),
                }
            }
            EngineError::Unavailable(Unavailable::Unreachable(_)) => {
                tracing::warn!(%error, "the store is unavailable");
                Self {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    code: "unavailable",
                    field: None,
                    message: "the database cannot be reached just now; send the request again \
                              (if the connection broke while committing, it may have taken effect: \
                              an enqueue with a unique_key is safe to repeat)"
                        .into(),
                }
            }
            EngineError::Unavailable(Unavailable::FactsChanged) => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "unavailable",
                field: None,
                message: "the queue's settings or subscriptions kept changing while the jobs were \
                          enqueued, and none was stored; send the request again"
                    .into(),
            },
            EngineError::Storage(_) => Self::internal(&error),
            EngineError::Pool(refusal) => Self::of_pool(refusal),
        }
    }
}

impl ApiError {
    /// A refused change of the pools or flavors.
    fn of_pool(refusal: &PoolError) -> Self {
        let message = refusal.to_string();
        match refusal {
            PoolError::NoPool(_) | PoolError::NoFlavor(_) => Self::not_found(message),
            PoolError::Invalid { field, rule } => Self::invalid(*field, rule.clone()),
            PoolError::Unreachable(_) => Self::invalid("uri", message),
            PoolError::UriTaken(_) => Self {
                field: Some("uri".to_owned()),
                ..Self::conflict("uri_taken", message)
            },
            PoolError::HoldsQueues { .. } => Self::conflict("pool_in_use", message),
            PoolError::LastOfFlavor { .. } | PoolError::Forwards(_) => {
                Self::conflict("pool_in_use", message)
            }
            PoolError::NotOfFlavor { .. } | PoolError::MoveAcrossPools { .. } => {
                Self::conflict("across_pools", message)
            }
            PoolError::Tied { .. } => Self::conflict("queues_tied", message),
            PoolError::MoveUnfinished { .. } => Self::conflict("move_unfinished", message),
            PoolError::NotPooled => Self::conflict("not_pooled", message),
        }
    }

    /// A bare 500: the details go to the log, under the request's id, never to the client.
    pub fn internal(error: &dyn std::error::Error) -> Self {
        tracing::error!(
            error = %error,
            source = error.source().map(tracing::field::display),
            "internal error"
        );
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            field: None,
            message: "internal error; the log has the details under this request's id".into(),
        }
    }
}

/// A refused change carries the handler's own error; a failed one, the engine's.
impl From<tenax_core::engine::ChangeError<ApiError>> for ApiError {
    fn from(error: tenax_core::engine::ChangeError<ApiError>) -> Self {
        match error {
            tenax_core::engine::ChangeError::Refused(error) => error,
            tenax_core::engine::ChangeError::Failed(error) => error.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({
            "status": self.status.as_u16(),
            "code": self.code,
            "message": self.message,
        });
        if let Some(field) = self.field {
            error["field"] = json!(field);
        }
        // A server error's details are in the log, under the request's id.
        if self.status.is_server_error() {
            if let Some(id) = super::request_id::current() {
                error["request_id"] = json!(*id);
            }
        }
        (self.status, Json(json!({ "error": error }))).into_response()
    }
}
