//! Zaqar's websocket transport: the `/v2` operations as JSON frames over a websocket opened at
//! the server's root (`ws://host:port/`, where Zaqar's clients connect), on the API's listener
//! and on `--zaqar-websocket-listen`'s. `docs/zaqar.md` ("Websocket") says what is supported
//! and how it differs from Zaqar.
//!
//! Invariants:
//! - a frame is answered by running the equivalent `/v2` HTTP request through the server's
//!   whole router, in process ([`Endpoint::run`]): the websocket has exactly the checks, limits,
//!   tokens, scopes and pre-signed URLs of `/v2`, and the engine's rules, with no copy of them
//!   here. This module only translates frames to requests and answers to frames ([`actions`]);
//! - a websocket is a connection of the listener's table for its whole life, with the
//!   listener's idle timeout, and its messages and frames are bounded by `--max-request-bytes`
//!   ([`crate::serve::Upgraded`]);
//! - `GET /` without an upgrade is answered as before (Zaqar's version document).

mod actions;
mod frames;
mod push;
mod session;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::header::{AUTHORIZATION, CONNECTION, CONTENT_TYPE, HOST, ORIGIN, UPGRADE};
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tenax_core::engine::Engine;
use tower::ServiceExt;

use actions::Call;
use session::{Caller, Origin};

use crate::serve::Upgraded;

/// What the websocket needs of the server: its router (with every middleware), the engine (for
/// its signals) and the size bound of a request.
#[derive(Debug, Clone)]
pub struct Endpoint {
    app: Router,
    engine: Arc<Engine>,
    max_bytes: usize,
}

impl Endpoint {
    /// Runs one `/v2` request through the router: the answer's status and JSON body (null when
    /// empty or not JSON).
    async fn run(&self, call: &Call, caller: &Caller) -> (u16, Value) {
        let mut request = Request::new(match &call.json {
            Some(json) => Body::from(json.to_string()),
            None => Body::empty(),
        });
        *request.method_mut() = call.method.clone();
        match call.path_and_query.parse() {
            Ok(uri) => *request.uri_mut() = uri,
            Err(_) => return (400, Value::Null),
        }
        let headers = request.headers_mut();
        for (name, value) in &caller.headers {
            headers.append(name.clone(), value.clone());
        }
        if call.json.is_some() {
            headers.insert(CONTENT_TYPE, "application/json".parse().expect("a header"));
        }
        if let Some(peer) = caller.peer {
            request.extensions_mut().insert(peer);
        }
        let Ok(response) = self.app.clone().oneshot(request).await;
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), self.max_bytes)
            .await
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or(Value::Null);
        (status, body)
    }
}

/// Whether a request asks for a websocket (`Connection: upgrade`, `Upgrade: websocket`).
fn asks_for_websocket(method: &Method, headers: &HeaderMap) -> bool {
    let has = |name: HeaderName, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value
                .to_str()
                .unwrap_or_default()
                .split(',')
                .any(|part| part.trim().eq_ignore_ascii_case(token))
        })
    };
    method == Method::GET && has(CONNECTION, "upgrade") && has(UPGRADE, "websocket")
}

/// The upgrade to a websocket, answered for `endpoint`.
async fn upgrade(endpoint: Endpoint, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    let Some(upgraded) = parts.extensions.get::<Upgraded>().cloned() else {
        // Only the server's own listener can hand a connection over (HTTP/1.1).
        return (
            StatusCode::BAD_REQUEST,
            "websocket upgrades need an HTTP/1.1 connection to the server's listener",
        )
            .into_response();
    };
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    let headers = &parts.headers;
    let token = [AUTHORIZATION, HeaderName::from_static("x-auth-token")]
        .into_iter()
        .find_map(|name| Some((name.clone(), headers.get(&name)?.clone())));
    let origin = Origin {
        host: headers.get(HOST).cloned(),
        origin: headers.get(ORIGIN).cloned(),
        peer: parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0),
        token,
    };
    let limit = endpoint.max_bytes;
    ws.max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| session::run(socket, endpoint, origin, upgraded))
}

/// The middleware that serves the websocket at `/` in front of the rest of the router.
async fn at_root_layer(State(endpoint): State<Endpoint>, request: Request, next: Next) -> Response {
    if request.uri().path() == "/" && asks_for_websocket(request.method(), request.headers()) {
        return upgrade(endpoint, request).await;
    }
    next.run(request).await
}

/// `app` with Zaqar's websocket at `/` (each frame runs through `app` itself).
pub fn at_root(app: Router, engine: Arc<Engine>, max_bytes: usize) -> Router {
    let endpoint = Endpoint {
        app: app.clone(),
        engine,
        max_bytes,
    };
    app.layer(axum::middleware::from_fn_with_state(
        endpoint,
        at_root_layer,
    ))
}

/// The router of `--zaqar-websocket-listen`: the websocket at `/` (each frame runs through
/// `app`, the API's router), and `426 Upgrade Required` for anything else.
pub fn listener(app: Router, engine: Arc<Engine>, max_bytes: usize) -> Router {
    let endpoint = Endpoint {
        app,
        engine,
        max_bytes,
    };
    Router::new()
        .fallback(
            |State(endpoint): State<Endpoint>, request: Request| async move {
                if request.uri().path() == "/"
                    && asks_for_websocket(request.method(), request.headers())
                {
                    return upgrade(endpoint, request).await;
                }
                (
                    StatusCode::UPGRADE_REQUIRED,
                    [(UPGRADE, "websocket")],
                    "this listener speaks Zaqar's websocket protocol only: open a websocket at /",
                )
                    .into_response()
            },
        )
        .with_state(endpoint)
}
