//! Authentication and authorisation of every request, by the rule of its route
//! ([`crate::auth::rules`]).
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

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error::ApiError;
use super::zaqar::error::ZaqarError;
use crate::auth::rules::{self, Access, Rule, Target};
use crate::auth::{Capability, Principal};
use crate::engine::Engine;
use crate::model::subscription::subscription_of_queue;
use crate::model::{JobId, SubscriptionId};

/// What the middleware needs: the engine (tokens, and the queues of jobs and subscriptions),
/// whether authentication is on, and the methods each route answers.
#[derive(Debug)]
pub struct Authorizer {
    engine: Arc<Engine>,
    required: bool,
    routes: HashSet<(Method, String)>,
}

impl Authorizer {
    /// Panics if a route has no rule: a programming error that every test that starts a server
    /// would show at once.
    pub fn new(engine: Arc<Engine>, required: bool, routes: HashSet<(Method, String)>) -> Self {
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
    let Access::Needs(capability) = rule.access else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    let principal = if authorizer.required {
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
        Capability::Metrics => "read the metrics (an admin or reader token that is not scoped may)",
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

/// Why a scope check did not let a request through.
enum Denied {
    /// The token may not touch what the request names (403).
    Forbidden(String),
    /// Finding what the request names failed.
    Failed(crate::store::StoreError),
}

impl From<crate::store::StoreError> for Denied {
    fn from(error: crate::store::StoreError) -> Self {
        Self::Failed(error)
    }
}

/// A scoped token against the queue (or Zaqar project) a request touches.
struct ScopeCheck<'a> {
    engine: &'a Engine,
    principal: &'a Principal,
    rule: Rule,
    params: &'a [(String, String)],
    headers: &'a HeaderMap,
    query: Option<&'a str>,
    body: &'a [u8],
}

impl ScopeCheck<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(self.body).unwrap_or(Value::Null)
    }

    fn queue(&self, queue: &str) -> Result<(), Denied> {
        if self.principal.queues.admits(queue) {
            Ok(())
        } else {
            Err(Denied::Forbidden(format!(
                "this token ({}) may not touch queue {queue:?}",
                self.principal.name
            )))
        }
    }

    /// The queue of each job id (unknown ids are left to the handler, which answers 404).
    async fn jobs(&self, ids: &[JobId]) -> Result<(), Denied> {
        for peek in self.engine.peek(ids).await?.into_iter().flatten() {
            self.queue(&peek.queue)?;
        }
        Ok(())
    }

    async fn subscription(&self, id: &str) -> Result<(), Denied> {
        let Ok(id) = id.parse::<SubscriptionId>() else {
            return Ok(());
        };
        match self.engine.subscription(id).await? {
            Some(subscription) => self.queue(&subscription.queue),
            None => Ok(()),
        }
    }

    async fn check(&self) -> Result<(), Denied> {
        match self.rule.target {
            Target::Nothing | Target::Listing => Ok(()),
            Target::QueueInPath => self.queue(self.param("name").unwrap_or_default()),
            Target::QueueInBody => match self.json().get("queue").and_then(Value::as_str) {
                Some(queue) => self.queue(queue),
                None => Ok(()),
            },
            Target::QueuesInBody | Target::JobQueuesInBody => {
                let json = self.json();
                let queues: Vec<&str> = if self.rule.target == Target::QueuesInBody {
                    json["queues"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect()
                } else {
                    json["jobs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|job| job["queue"].as_str())
                        .collect()
                };
                queues.into_iter().try_for_each(|q| self.queue(q))
            }
            Target::JobInPath => match self.param("id").and_then(|id| id.parse().ok()) {
                Some(id) => self.jobs(&[id]).await,
                None => Ok(()),
            },
            Target::JobsInBody => {
                let json = self.json();
                let ids: Vec<JobId> = json["jobs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|job| job["id"].as_u64().map(JobId))
                    .collect();
                self.jobs(&ids).await
            }
            Target::QueueInQuery => {
                let queue = url::form_urlencoded::parse(self.query.unwrap_or_default().as_bytes())
                    .find(|(name, _)| name == "queue")
                    .map(|(_, value)| value.into_owned());
                match queue {
                    Some(queue) => self.queue(&queue),
                    None => Err(Denied::Forbidden(format!(
                        "this token ({}) may touch only some queues: name one with ?queue=",
                        self.principal.name
                    ))),
                }
            }
            Target::DeadSelection => {
                let json = self.json();
                let ids: Vec<JobId> = json["ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|id| id.as_u64().map(JobId))
                    .collect();
                match json.get("queue").and_then(Value::as_str) {
                    Some(queue) => self.queue(queue)?,
                    None if ids.is_empty() => {
                        return Err(Denied::Forbidden(format!(
                            "this token ({}) may touch only some queues: name the jobs (ids) or \
                             a queue, not all",
                            self.principal.name
                        )));
                    }
                    None => {}
                }
                self.jobs(&ids).await
            }
            Target::ScheduleInPath => {
                let name = self.param("name").unwrap_or_default();
                if let Some(schedule) = self.engine.schedule(name).await? {
                    self.queue(&schedule.job.queue)?;
                }
                match self.json().pointer("/job/queue").and_then(Value::as_str) {
                    Some(queue) => self.queue(queue),
                    None => Ok(()),
                }
            }
            Target::SubscriptionInPath => {
                self.subscription(self.param("id").unwrap_or_default())
                    .await
            }
            Target::DeliveryInPath => {
                let Some(id) = self.param("id").and_then(|id| id.parse::<JobId>().ok()) else {
                    return Ok(());
                };
                let queue = self.engine.peek(&[id]).await?.pop().flatten();
                match queue.and_then(|peek| subscription_of_queue(&peek.queue)) {
                    Some(subscription) => self.subscription(&subscription.to_string()).await,
                    None => Ok(()),
                }
            }
            Target::ZaqarProject | Target::ZaqarQueue => {
                let project = self
                    .headers
                    .get("x-project-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                // A missing or bad header is Zaqar's own 400, answered by the handler.
                if !project.is_empty() && !self.principal.projects.admits(project) {
                    return Err(Denied::Forbidden(format!(
                        "this token ({}) may not act for project {project:?}",
                        self.principal.name
                    )));
                }
                match (self.rule.target, self.param("queue_name")) {
                    (Target::ZaqarQueue, Some(name)) if !project.is_empty() => {
                        self.queue(&super::zaqar::names::tenax_queue(project, name))
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}
