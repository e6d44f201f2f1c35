//! The OpenAPI 3.1 description of the native API, generated from the handlers' own request and
//! response types (`#[utoipa::path]` on each handler, `ToSchema` on each type) and served at
//! `GET /api/openapi.json`.
//!
//! Invariant: the description and the router are one thing. Every native route is registered
//! through `utoipa_axum::routes!`, which takes its method and path from the handler's
//! `#[utoipa::path]`, so a route cannot exist without its description (and `tests/it/openapi.rs`
//! checks every described operation against the running server).

use serde::Serialize;
use utoipa::openapi::OpenApi as Spec;
use utoipa::{IntoResponses, OpenApi, ToSchema};

/// The error body of every native error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: the status again, a stable code, the field at fault (a JSON path; `body` for
/// the body as a whole, `path` for the path) and the rule it broke.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub status: u16,
    pub code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
    /// On a 5xx: the id under which the log has the details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// The answers any request may get (never built: they describe [`ErrorBody`] answers).
#[allow(dead_code)]
#[derive(Debug, IntoResponses)]
pub enum Refusals {
    /// A field breaks a rule; `field` names it.
    #[response(status = 400)]
    Invalid(ErrorBody),
    /// No valid API token (`Authorization: Bearer <token>`).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token's role or scopes do not allow this; or a browser sent it from another site's
    /// page (`Origin`), or by a name this server does not answer to (`Host`).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// The body did not arrive within `--request-timeout`.
    #[response(status = 408)]
    Timeout(ErrorBody),
    /// The body is larger than `--max-request-bytes`.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The request has a body that is not declared JSON (`Content-Type`).
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody),
    /// A bug; the log has the details under `request_id`.
    #[response(status = 500)]
    Internal(ErrorBody),
    /// The store failed; writes are refused until the server restarts.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// No such job, subscription or delivery.
#[allow(dead_code)]
#[derive(Debug, IntoResponses)]
pub enum Missing {
    #[response(status = 404)]
    NotFound(ErrorBody),
}

/// The resource is not in a state the request needs (a lease lost, a job not in flight, a
/// unique key held, a delivery not dead).
#[allow(dead_code)]
#[derive(Debug, IntoResponses)]
pub enum Conflict {
    #[response(status = 409)]
    Conflict(ErrorBody),
}

#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Tenax",
        description = "The native HTTP API of Tenax: jobs, workers, dead jobs, queues, schedules, \
                       retry policies, webhook subscriptions and deliveries, the cluster's servers, \
                       workers and activity. Conventions (durations, \
                       times, errors): docs/api.md.",
        license(name = "Apache-2.0"),
    ),
    components(schemas(ErrorBody, ErrorDetail)),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "jobs", description = "Enqueue, inspect, list and delete jobs"),
        (name = "work", description = "The worker's side: take, heartbeat, complete, fail"),
        (name = "dead", description = "Dead jobs: list, replay, delete"),
        (name = "queues", description = "Queue settings and limits, pause and resume"),
        (name = "schedules", description = "Periodic jobs: cron timetables whose ticks enqueue jobs"),
        (name = "batches", description = "Jobs counted together, with callback jobs once all have finished"),
        (name = "policies", description = "Previews of retry policies"),
        (name = "subscriptions", description = "Webhook subscriptions"),
        (name = "deliveries", description = "Webhook deliveries and their attempts"),
        (name = "tokens", description = "API tokens (an unscoped admin token only)"),
        (name = "pools", description = "The databases queues are placed on, and their flavors (a pooled PostgreSQL deployment; an unscoped admin token only)"),
        (name = "admin", description = "Backups of the embedded store (an unscoped admin token only)"),
        (name = "cluster", description = "The servers of the cluster, their workers, and the activity per minute"),
    )
)]
pub struct ApiDoc;

/// The API's authentication: a bearer token (see docs/security.md).
#[derive(Debug)]
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, spec: &mut Spec) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = spec.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token (`tnx_…`): `tenax tokens create`, or the first admin \
                         token (docs/security.md). Needed unless the server listens on \
                         loopback only with authentication at auto.",
                    ))
                    .build(),
            ),
        );
    }
}

/// `GET /api/openapi.json`: the description, encoded once.
pub fn route<S: Clone + Send + Sync + 'static>(spec: &Spec) -> axum::routing::MethodRouter<S> {
    let encoded = bytes::Bytes::from(spec.to_pretty_json().unwrap_or_default());
    axum::routing::get(move || {
        let encoded = encoded.clone();
        async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                encoded,
            )
        }
    })
}
