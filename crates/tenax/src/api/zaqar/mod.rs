//! OpenStack Zaqar's v2 messaging API under `/v2`, on the Tenax engine, so that Zaqar's clients
//! and tools work against Tenax unchanged. What maps to what, and every intentional
//! difference: `docs/zaqar.md`.
//!
//! Invariants:
//! - Every `/v2` request passes Zaqar's header checks first ([`request::Ctx`]): a `Client-ID`
//!   UUID and an `X-Project-ID`, as Zaqar requires on every route (home, ping and health too).
//! - Every error is Zaqar's shape, `{"title", "description"}`, with Zaqar's status, title and
//!   (where Zaqar has one) description ([`error::ZaqarError`]); the native `{"error": ...}`
//!   shape never appears under `/v2`.
//! - Projects are namespaces: queue `q` of project `p` is the Tenax queue `p:q`
//!   ([`names`]); nothing reaches across.
//! - Handlers validate, then call the engine and the store; the only state of their own is the
//!   [`claims::ClaimBook`] (each claim's ttl and renewal time, in memory like leases).

mod claims;
pub(crate) mod error;
mod home;
pub(crate) mod messages;
pub(crate) mod metadata;
mod names;
pub(crate) mod patch;
mod queues;
pub(crate) mod request;
mod subscriptions;
mod views;

use std::sync::Arc;

use axum::routing::{MethodRouter, any, get, post, put};
use axum::{Extension, Router};

use super::AppState;

/// A method router's answer to a method the resource does not have.
fn allow(router: MethodRouter<AppState>, methods: &'static str) -> MethodRouter<AppState> {
    router.fallback(move || async move { home::method_not_allowed(methods) })
}

/// The `/v2` routes, to merge into the server's router.
pub fn router() -> Router<AppState> {
    let claim_book = Arc::new(claims::ClaimBook::default());
    Router::new()
        .route("/v2/", allow(get(home::home), "GET"))
        .route(
            "/v2/ping",
            allow(get(home::ping).head(home::ping), "GET, HEAD"),
        )
        .route("/v2/health", allow(get(home::health), "GET"))
        .route("/v2/queues", allow(get(queues::list), "GET"))
        .route(
            "/v2/queues/{queue_name}",
            allow(
                put(queues::create)
                    .get(queues::show)
                    .head(queues::exists)
                    .patch(queues::update)
                    .delete(queues::delete),
                "DELETE, GET, HEAD, PATCH, PUT",
            ),
        )
        .route(
            "/v2/queues/{queue_name}/stats",
            allow(get(queues::stats), "GET"),
        )
        .route(
            "/v2/queues/{queue_name}/purge",
            allow(post(queues::purge), "POST"),
        )
        .route(
            "/v2/queues/{queue_name}/messages",
            allow(
                post(messages::post)
                    .get(messages::list)
                    .delete(messages::delete_many),
                "DELETE, GET, POST",
            ),
        )
        .route(
            "/v2/queues/{queue_name}/messages/{message_id}",
            allow(get(messages::get).delete(messages::delete), "DELETE, GET"),
        )
        .route(
            "/v2/queues/{queue_name}/claims",
            allow(post(claims::create), "POST"),
        )
        .route(
            "/v2/queues/{queue_name}/claims/{claim_id}",
            allow(
                get(claims::show)
                    .patch(claims::update)
                    .delete(claims::delete),
                "DELETE, GET, PATCH",
            ),
        )
        .route(
            "/v2/queues/{queue_name}/subscriptions",
            allow(
                post(subscriptions::create).get(subscriptions::list),
                "GET, POST",
            ),
        )
        .route(
            "/v2/queues/{queue_name}/subscriptions/{subscription_id}",
            allow(
                get(subscriptions::show)
                    .patch(subscriptions::update)
                    .delete(subscriptions::delete),
                "DELETE, GET, PATCH",
            ),
        )
        .route(
            "/v2/queues/{queue_name}/subscriptions/{subscription_id}/confirm",
            allow(put(subscriptions::confirm), "PUT"),
        )
        .route("/v2", any(home::no_route))
        .route("/v2/{*rest}", any(home::no_route))
        .layer(Extension(claim_book))
}
