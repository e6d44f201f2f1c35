//! Authentication and authorisation of every request, by the rule of its route
//! ([`tenax_core::auth::rules`]).
//!
//! A request carries its token as `Authorization: Bearer <token>` (either API) or as Zaqar's
//! `X-Auth-Token: <token>`. Without a valid token it is answered 401; with a token whose role
//! does not grant what the route needs, or whose scopes do not admit the queue or the Zaqar
//! project the request touches, 403. Answers are in the shape of the API the route belongs to.
//!
//! Invariants:
//! - A route without a rule is refused (500) before its handler runs; [`Authorizer::new`]
//!   refuses to build a router in which one exists.
//! - The [`Principal`] of an authorised request is in its extensions, so that listings show only
//!   what the token's scopes admit.
//! - A method a route does not have passes through unchecked: the route answers 405 itself,
//!   before any handler runs.
//! - A Zaqar request carrying a pre-signed URL set (`URL-Signature`: [`super::zaqar::signed`])
//!   is decided by that set alone, token or not: if it holds (this path and method are signed,
//!   it has not expired, the signature matches), the request acts as a principal scoped to the
//!   signed project; if not, it is answered Zaqar's bare 404, as Zaqar answers it.

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tenax_core::auth::rules::{self, Access};
use tenax_core::auth::{Capability, Principal, Role, Scope};
use tenax_core::engine::Engine;

use super::error::ApiError;
use super::scope::{Denied, ScopeCheck};
use super::zaqar::error::ZaqarError;
use super::zaqar::signed::{self, SigningKey};

/// What the middleware needs: the engine (tokens, and the queues of jobs and subscriptions),
/// whether authentication is on, and the methods each route answers.
#[derive(Debug)]
pub struct Authorizer {
    engine: Arc<Engine>,
    required: bool,
    routes: HashSet<(Method, String)>,
    signing: Arc<SigningKey>,
}

impl Authorizer {
    /// Panics if a route has no rule: a programming error that every test that starts a server
    /// would show at once.
    pub fn new(
        engine: Arc<Engine>,
        required: bool,
        routes: HashSet<(Method, String)>,
        signing: Arc<SigningKey>,
    ) -> Self {
        let missing: Vec<String> = routes
            .iter()
            .filter(|(method, route)| rules::rule(method, route).is_none())
            .map(|(method, route)| format!("{method} {route}"))
            .collect();
        assert!(
            missing.is_empty(),
            "routes without an authorization rule (add them to auth::rules): {missing:?}"
        );
        Self {
            engine,
            required,
            routes,
            signing,
        }
    }
}

/// The middleware: see the module documentation.
pub async fn authorize(
    State(authorizer): State<Arc<Authorizer>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let Some(route) = parts.extensions.get::<MatchedPath>().cloned() else {
        // No route: the fallback answers 404.
        return next.run(Request::from_parts(parts, body)).await;
    };
    let route = route.as_str();
    let zaqar = route == "/v2" || route.starts_with("/v2/");
    let method = if parts.method == Method::HEAD && !is_routed(&authorizer, &parts.method, route) {
        Method::GET
    } else {
        parts.method.clone()
    };
    if !is_routed(&authorizer, &method, route) {
        // The route answers 405 for a method it does not have.
        return next.run(Request::from_parts(parts, body)).await;
    }
    let Some(rule) = rules::rule(&method, route) else {
        tracing::error!(%method, route, "a route without an authorization rule was refused");
        return refuse(
            zaqar,
            StatusCode::INTERNAL_SERVER_ERROR,
            "this route has no authorization rule",
        );
    };
    let signed = if zaqar {
        let now =
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(authorizer.engine.now_ms());
        match signed::verify(
            &authorizer.signing,
            &parts.headers,
            &parts.method,
            parts.uri.path(),
            now,
        ) {
            Ok(grant) => grant,
            Err(refusal) => {
                tracing::info!(why = %refusal.0, "a pre-signed URL was refused");
                return ZaqarError::no_route().into_response();
            }
        }
    } else {
        None
    };
    let Access::Needs(capability) = rule.access else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    let principal = if let Some(grant) = signed {
        Principal::new(
            None,
            Arc::from(format!("a pre-signed URL of project {}", grant.project)),
            Role::Admin,
            Scope::all(),
            Scope::of(&[grant.project]),
        )
    } else if authorizer.required {
        let Some(token) = token_of(&parts.headers) else {
            return unauthorized(
                zaqar,
                "this server needs an API token: send `Authorization: Bearer <token>`",
            );
        };
        match authorizer.engine.authenticate(token) {
            Some(principal) => principal,
            None => return unauthorized(zaqar, "the API token is not valid (unknown or revoked)"),
        }
    } else {
        Principal::anyone()
    };
    if !principal.may(capability) {
        return refuse(
            zaqar,
            StatusCode::FORBIDDEN,
            &format!(
                "this token ({}, role {}) may not {}",
                principal.name,
                principal.role.name(),
                describe(capability)
            ),
        );
    }
    let body = if principal.is_scoped() {
        let bytes = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(bytes) => bytes,
            Err(_) => return refuse(zaqar, StatusCode::BAD_REQUEST, "the body could not be read"),
        };
        let params = RawPathParams::from_request_parts(&mut parts, &())
            .await
            .ok()
            .map(|params| {
                params
                    .iter()
                    .map(|(name, value)| (name.to_owned(), value.to_owned()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let scope = ScopeCheck {
            engine: &authorizer.engine,
            principal: &principal,
            rule,
            params: &params,
            headers: &parts.headers,
            query: parts.uri.query(),
            body: &bytes,
        };
        match scope.check().await {
            Ok(()) => {}
            Err(Denied::Forbidden(why)) => return refuse(zaqar, StatusCode::FORBIDDEN, &why),
            Err(Denied::Invalid(error)) if zaqar => {
                let field = error.field.map(|f| format!("{f}: ")).unwrap_or_default();
                let message = format!("{field}{}", error.message);
                return refuse(zaqar, StatusCode::BAD_REQUEST, &message);
            }
            Err(Denied::Invalid(error)) => return error.into_response(),
            Err(Denied::Failed(error)) if zaqar => return ZaqarError::from(error).into_response(),
            Err(Denied::Failed(error)) => return ApiError::from(error).into_response(),
        }
        Body::from(bytes)
    } else {
        body
    };
    parts.extensions.insert(principal);
    next.run(Request::from_parts(parts, body)).await
}

fn is_routed(authorizer: &Authorizer, method: &Method, route: &str) -> bool {
    authorizer
        .routes
        .contains(&(method.clone(), route.to_owned()))
}

/// The token a request carries: `Authorization: Bearer <token>`, or Zaqar's `X-Auth-Token`.
fn token_of(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    bearer
        .or_else(|| headers.get("x-auth-token").and_then(|v| v.to_str().ok()))
        .filter(|t| !t.is_empty())
}

fn describe(capability: Capability) -> &'static str {
    match capability {
        Capability::Read => "read",
        Capability::Enqueue => "enqueue",
        Capability::Work => "take, heartbeat, complete or fail jobs",
        Capability::Manage => "change queues, jobs or subscriptions",
        Capability::Tokens => "manage API tokens (an admin token that is not scoped may)",
        Capability::Backup => {
            "take a backup of the store, which holds every queue (an admin token that is not scoped may)"
        }
        Capability::Metrics => {
            "read the metrics or the activity, which count every queue (an admin or reader token that is not scoped may)"
        }
        Capability::Pools => {
            "see or change the pools and flavors, which hold every queue (an admin token that is not scoped may)"
        }
        Capability::Any => "use this server",
    }
}

fn unauthorized(zaqar: bool, message: &str) -> Response {
    let mut response = refuse(zaqar, StatusCode::UNAUTHORIZED, message);
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn refuse(zaqar: bool, status: StatusCode, message: &str) -> Response {
    if zaqar {
        let title = match status {
            StatusCode::UNAUTHORIZED => "Unauthorized",
            StatusCode::FORBIDDEN => "Forbidden",
            StatusCode::BAD_REQUEST => "Invalid request",
            _ => "Internal server error",
        };
        ZaqarError::new(status, title, message).into_response()
    } else {
        let code = match status {
            StatusCode::UNAUTHORIZED => "unauthorized",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::BAD_REQUEST => "invalid",
            _ => "internal",
        };
        ApiError {
            status,
            code,
            field: None,
            message: message.to_owned(),
        }
        .into_response()
    }
}
