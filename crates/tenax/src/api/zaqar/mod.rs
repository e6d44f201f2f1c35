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
//! - Projects are namespaces: queue `q` of project `p` is the Tenax queue `p:q`, topic `t` the
//!   Tenax queue `p::t` ([`names`]); nothing reaches across. Topics are served by the queue,
//!   message and subscription handlers, which take what they serve through [`names::Kind`].
//! - Handlers translate: they check Zaqar's rules on requests, call the engine, and shape its
//!   answers and errors as Zaqar does. They keep no state of their own and never reach the
//!   store.

mod claims;
mod confirmation;
pub mod error;
mod flavors;
mod home;
pub mod limits;
pub mod messages;
pub mod metadata;
pub(crate) mod names;
pub mod patch;
mod pools;
mod queues;
pub mod request;
pub mod signed;
mod subscriptions;
mod views;
pub mod websocket;

use axum::Router;
use axum::http::Method;
use axum::routing::{MethodRouter, any, get, post, put};

use super::AppState;

/// The `/v2` routes (and Zaqar's version document at `/`), to merge into the server's router,
/// with the methods each answers (for the authorization rules of [`tenax_core::auth::rules`]).
pub fn router() -> (Router<AppState>, Vec<(Method, &'static str)>) {
    let routes = Routes::default()
        .add("/", "GET", get(home::versions))
        .add("/v2/", "GET", get(home::home))
        .add("/v2/ping", "GET, HEAD", get(home::ping).head(home::ping))
        .add("/v2/health", "GET", get(home::health))
        .add("/v2/queues", "GET", get(queues::list))
        .add(
            "/v2/queues/{queue_name}",
            "DELETE, GET, HEAD, PATCH, PUT",
            put(queues::create)
                .get(queues::show)
                .head(queues::exists)
                .patch(queues::update)
                .delete(queues::delete),
        )
        .add("/v2/queues/{queue_name}/stats", "GET", get(queues::stats))
        .add("/v2/queues/{queue_name}/purge", "POST", post(queues::purge))
        .add("/v2/queues/{queue_name}/share", "POST", post(signed::share))
        .add(
            "/v2/queues/{queue_name}/messages",
            "DELETE, GET, POST",
            post(messages::post)
                .get(messages::list)
                .delete(messages::delete_many),
        )
        .add(
            "/v2/queues/{queue_name}/messages/{message_id}",
            "DELETE, GET",
            get(messages::get).delete(messages::delete),
        )
        .add(
            "/v2/queues/{queue_name}/claims",
            "POST",
            post(claims::create),
        )
        .add(
            "/v2/queues/{queue_name}/claims/{claim_id}",
            "DELETE, GET, PATCH",
            get(claims::show)
                .patch(claims::update)
                .delete(claims::delete),
        )
        .add(
            "/v2/queues/{queue_name}/subscriptions",
            "GET, POST",
            post(subscriptions::create).get(subscriptions::list),
        )
        .add(
            "/v2/queues/{queue_name}/subscriptions/{subscription_id}",
            "DELETE, GET, PATCH",
            get(subscriptions::show)
                .patch(subscriptions::update)
                .delete(subscriptions::delete),
        )
        .add(
            "/v2/queues/{queue_name}/subscriptions/{subscription_id}/confirm",
            "PUT",
            put(subscriptions::confirm),
        )
        .add("/v2/pools", "GET", get(pools::list))
        .add(
            "/v2/pools/{pool_name}",
            "DELETE, GET, PATCH, PUT",
            put(pools::put)
                .get(pools::show)
                .patch(pools::update)
                .delete(pools::delete),
        )
        .add("/v2/flavors", "GET", get(flavors::list))
        .add(
            "/v2/flavors/{flavor_name}",
            "DELETE, GET, PATCH, PUT",
            put(flavors::put)
                .get(flavors::show)
                .patch(flavors::update)
                .delete(flavors::delete),
        )
        .add("/v2/topics", "GET", get(queues::list))
        .add(
            "/v2/topics/{topic_name}",
            "DELETE, GET, PATCH, PUT",
            put(queues::create)
                .get(queues::show)
                .patch(queues::update)
                .delete(queues::delete),
        )
        .add("/v2/topics/{topic_name}/stats", "GET", get(queues::stats))
        .add("/v2/topics/{topic_name}/purge", "POST", post(queues::purge))
        .add(
            "/v2/topics/{topic_name}/messages",
            "DELETE, GET, POST",
            post(messages::post)
                .get(messages::list)
                .delete(messages::delete_many),
        )
        .add(
            "/v2/topics/{topic_name}/messages/{message_id}",
            "DELETE, GET",
            get(messages::get).delete(messages::delete),
        )
        .add(
            "/v2/topics/{topic_name}/subscriptions",
            "GET, POST",
            post(subscriptions::create).get(subscriptions::list),
        )
        .add(
            "/v2/topics/{topic_name}/subscriptions/{subscription_id}",
            "DELETE, GET, PATCH",
            get(subscriptions::show)
                .patch(subscriptions::update)
                .delete(subscriptions::delete),
        )
        .add(
            "/v2/topics/{topic_name}/subscriptions/{subscription_id}/confirm",
            "PUT",
            put(subscriptions::confirm),
        )
        .any("/v2", any(home::no_route))
        .any("/v2/{*rest}", any(home::no_route));
    (routes.router, routes.methods)
}

/// The routes as they are added, and the methods each answers.
struct Routes {
    router: Router<AppState>,
    methods: Vec<(Method, &'static str)>,
}

impl Default for Routes {
    fn default() -> Self {
        Self {
            router: Router::new(),
            methods: Vec::new(),
        }
    }
}

impl Routes {
    /// A route answering `allow` (Zaqar's `Allow` list); other methods get Falcon's 405.
    fn add(
        mut self,
        path: &'static str,
        allow: &'static str,
        methods: MethodRouter<AppState>,
    ) -> Self {
        for name in allow.split(", ") {
            if let Ok(method) = Method::from_bytes(name.as_bytes()) {
                self.methods.push((method, path));
            }
        }
        let methods = methods.fallback(move || async move { home::method_not_allowed(allow) });
        self.router = self.router.route(path, methods);
        self
    }

    /// A route answering every method.
    fn any(mut self, path: &'static str, methods: MethodRouter<AppState>) -> Self {
        for method in [
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
        ] {
            self.methods.push((method, path));
        }
        self.router = self.router.route(path, methods);
        self
    }
}
