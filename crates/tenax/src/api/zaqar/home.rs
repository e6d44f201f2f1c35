//! The home document (`GET /v2/`), `ping`, `health`, and the answers for paths and methods
//! that are no resource.
//!
//! The home document is Zaqar's JSON home (`zaqar/transport/wsgi/v2_0/homedoc.py`) with the
//! resources Tenax serves: queues, messages, claims, subscriptions, ping and health (not pools,
//! flavors or pre-signed URLs).

use axum::extract::State;
use axum::http::header::{ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tenax_core::model::subscription::is_internal_queue;

use super::error::ZaqarError;
use super::names::zaqar_queue;
use super::request::Ctx;
use crate::api::AppState;

fn resource(template: &str, vars: Value, allow: &[&str], accepts_post: bool) -> Value {
    let mut hints = json!({ "allow": allow, "formats": { "application/json": {} } });
    if accepts_post {
        hints["accept-post"] = json!(["application/json"]);
    }
    let mut resource = json!({ "href-template": template, "hints": hints });
    if vars.as_object().is_some_and(|v| !v.is_empty()) {
        resource["href-vars"] = vars;
    }
    resource
}

/// Zaqar's JSON home document, for the resources Tenax serves.
pub fn document() -> Value {
    let queue = json!({ "queue_name": "param/queue_name" });
    let message = json!({ "queue_name": "param/queue_name", "message_id": "param/message_id" });
    let claim = json!({ "queue_name": "param/queue_name", "claim_id": "param/claim_id" });
    let subscription = json!({
        "queue_name": "param/queue_name", "subscriptions_id": "param/subscriptions_id",
    });
    json!({ "resources": {
        "rel/queues": resource(
            "/v2/queues{?marker,limit,detailed}",
            json!({ "marker": "param/marker", "limit": "param/queue_limit",
                    "detailed": "param/detailed" }),
            &["GET"], false),
        "rel/queue": resource(
            "/v2/queues/{queue_name}", queue.clone(), &["GET", "PUT", "DELETE", "PATCH"], false),
        "rel/queue_stats": resource(
            "/v2/queues/{queue_name}/stats", queue.clone(), &["GET"], false),
        "rel/queue_purge": resource(
            "/v2/queues/{queue_name}/purge", queue.clone(), &["POST"], true),
        "rel/messages": resource(
            "/v2/queues/{queue_name}/messages{?marker,limit,echo,include_claimed}",
            json!({ "queue_name": "param/queue_name", "marker": "param/marker",
                    "limit": "param/messages_limit", "echo": "param/echo",
                    "include_claimed": "param/include_claimed" }),
            &["GET"], false),
        "rel/post_messages": resource(
            "/v2/queues/{queue_name}/messages", queue.clone(), &["POST"], true),
        "rel/messages_delete": resource(
            "/v2/queues/{queue_name}/messages{?ids,pop}",
            json!({ "queue_name": "param/queue_name", "ids": "param/ids", "pop": "param/pop" }),
            &["DELETE"], false),
        "rel/message_delete": resource(
            "/v2/queues/{queue_name}/messages/{message_id}{?claim}",
            json!({ "queue_name": "param/queue_name", "message_id": "param/message_id",
                    "claim": "param/claim_id" }),
            &["DELETE"], false),
        "rel/message_get": resource(
            "/v2/queues/{queue_name}/messages/{message_id}", message, &["GET"], false),
        "rel/claim": resource(
            "/v2/queues/{queue_name}/claims/{claim_id}", claim.clone(), &["GET"], false),
        "rel/post_claim": resource(
            "/v2/queues/{queue_name}/claims{?limit}",
            json!({ "queue_name": "param/queue_name", "limit": "param/claim_limit" }),
            &["POST"], true),
        "rel/patch_claim": resource(
            "/v2/queues/{queue_name}/claims/{claim_id}", claim.clone(), &["PATCH"], true),
        "rel/delete_claim": resource(
            "/v2/queues/{queue_name}/claims/{claim_id}", claim, &["DELETE"], false),
        "rel/subscriptions_get": resource(
            "/v2/queues/{queue_name}/subscriptions{?marker,limit}",
            json!({ "queue_name": "param/queue_name", "marker": "param/marker",
                    "limit": "param/subscription_limit" }),
            &["GET"], false),
        "rel/subscriptions_post": resource(
            "/v2/queues/{queue_name}/subscriptions",
            json!({ "queue_name": "param/queue_name", "limit": "param/subscription_limit" }),
            &["POST"], true),
        "rel/subscription": resource(
            "/v2/queues/{queue_name}/subscriptions/{subscriptions_id}", subscription.clone(),
            &["GET", "DELETE"], false),
        "rel/subscription_patch": resource(
            "/v2/queues/{queue_name}/subscriptions/{subscriptions_id}", subscription,
            &["PATCH"], true),
        "rel/ping": resource("/v2/ping", json!({}), &["GET"], false),
        "rel/health": {
            "href": "/v2/health",
            "hints": { "allow": ["GET"], "formats": { "application/json": {} } },
        },
    }})
}

/// `GET /v2/`: the home document, as `application/json-home`, cacheable for a day.
pub async fn home(_ctx: Ctx) -> Response {
    let body = serde_json::to_vec_pretty(&document()).unwrap_or_default();
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json-home"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=86400"));
    response
}

/// `GET /`: Zaqar's version document, 300 Multiple Choices, listing the one version Tenax
/// serves. Outside `/v2`, it needs no Zaqar headers (as in Zaqar).
pub async fn versions() -> Response {
    let body = json!({ "versions": [{
        "id": "2",
        "status": "CURRENT",
        "updated": "2014-9-24T04:06:47Z",
        "media-types": [{
            "base": "application/json",
            "type": "application/vnd.openstack.messaging-v2+json",
        }],
        "links": [{ "href": "/v2/", "rel": "self" }],
    }]});
    super::views::json(StatusCode::MULTIPLE_CHOICES, &body)
}

/// `GET`/`HEAD /v2/ping`: 204 while the server serves.
pub async fn ping(_ctx: Ctx) -> StatusCode {
    StatusCode::NO_CONTENT
}

/// `GET /v2/health`: whether storage answers, and the number of messages in the caller's
/// project's queues (Zaqar counts every queue of the pool; a project must not see others'
/// volume).
pub async fn health(ctx: Ctx, State(state): State<AppState>) -> Response {
    let counts = match state.engine.counts().await {
        Ok(counts) => counts,
        Err(error) => return super::error::ZaqarError::from(error).into_response(),
    };
    let (mut free, mut claimed) = (0u64, 0u64);
    for counts in counts {
        let own = zaqar_queue(&ctx.project, &counts.queue).is_some();
        if own && !is_internal_queue(&counts.queue) {
            free = free.saturating_add(counts.ready.saturating_add(counts.scheduled));
            claimed = claimed.saturating_add(counts.in_flight);
        }
    }
    let body = json!({
        "storage_reachable": true,
        "operation_status": {},
        "message_volume": {
            "free": free, "claimed": claimed, "total": free.saturating_add(claimed),
        },
    });
    super::views::json(StatusCode::OK, &body)
}

/// Any `/v2` path that is no resource (after the header checks, as Zaqar's hooks run first).
pub async fn no_route(_ctx: Ctx) -> ZaqarError {
    ZaqarError::no_route()
}

/// A method the resource does not have: Falcon's 405, with `Allow`.
pub fn method_not_allowed(allow: &'static str) -> ZaqarError {
    ZaqarError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        title: "405 Method Not Allowed".into(),
        description: None,
        headers: vec![(ALLOW, HeaderValue::from_static(allow))],
    }
}
