//! One websocket connection: frames in, answers (and pushed notifications) out, in order.
//!
//! Invariants:
//! - each frame is answered once, in the order frames arrive (Zaqar's clients read the answer
//!   to what they sent next); pushed notifications go between answers, never inside one;
//! - a frame is checked as Zaqar checks it (JSON text, an object, a known action, its schema)
//!   before anything runs, and every failure is answered in Zaqar's frame, never by closing;
//! - the connection is busy only while it handles a frame; between frames the listener may
//!   close it to make room, and it closes when the server stops, when the peer has answered
//!   nothing (not even a ping) for the idle timeout, or when a message waits that long for the
//!   peer to read it.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, close_code};
use axum::http::{HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use super::Endpoint;
use super::actions::{self, Call};
use super::frames::{Frame, python_repr};
use super::push::Subscriptions;
use crate::serve::Upgraded;

/// A connection subscription's ttl when the frame names none: Zaqar's
/// `[transport] default_subscription_ttl`.
const DEFAULT_SUBSCRIPTION_TTL_S: u64 = 3600;

/// Notifications waiting to be sent, at most: a subscription waits when its connection is
/// this far behind.
const PUSH_BACKLOG: usize = 64;

/// What the upgrade request said that every frame's request carries too.
#[derive(Debug, Clone, Default)]
pub(super) struct Origin {
    pub host: Option<HeaderValue>,
    pub origin: Option<HeaderValue>,
    pub peer: Option<SocketAddr>,
    /// `X-Auth-Token` or `Authorization` of the upgrade request, if any.
    pub token: Option<(HeaderName, HeaderValue)>,
}

/// Who a `/v2` request is made for: the frame's headers, and the connection's.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub peer: Option<ConnectInfo<SocketAddr>>,
}

/// The state of one connection.
struct Session {
    endpoint: Endpoint,
    origin: Origin,
    /// The token of the last successful `authenticate`.
    token: Option<HeaderValue>,
    subscriptions: Subscriptions,
    pushes: mpsc::Sender<String>,
}

/// Serves one upgraded connection until it closes.
pub(super) async fn run(
    mut socket: WebSocket,
    endpoint: Endpoint,
    origin: Origin,
    upgraded: Upgraded,
) {
    let (pushes, mut pushed) = mpsc::channel(PUSH_BACKLOG);
    let mut session = Session {
        endpoint,
        origin,
        token: None,
        subscriptions: Subscriptions::default(),
        pushes,
    };
    let idle = upgraded.idle_timeout();
    let mut heard = Instant::now();
    let mut pinged = false;
    loop {
        // A ping half the idle timeout after the peer was last heard; closed if that goes
        // unanswered for the other half.
        let due = heard + if pinged { idle } else { idle / 2 };
        let reason = tokio::select! {
            () = upgraded.closing() => Some((close_code::AWAY, "server closing the connection")),
            () = sleep_until(due) => {
                if pinged {
                    Some((close_code::AWAY, "idle timeout"))
                } else {
                    pinged = true;
                    if !send(&mut socket, Message::Ping(Default::default()), idle).await {
                        return;
                    }
                    None
                }
            }
            Some(notification) = pushed.recv() => {
                if !send(&mut socket, Message::Text(notification.into()), idle).await {
                    return;
                }
                None
            }
            received = socket.recv() => {
                let Some(Ok(message)) = received else { return };
                heard = Instant::now();
                pinged = false;
                let answer = match message {
                    Message::Text(text) => {
                        let _busy = upgraded.busy();
                        Some(session.answer(text.as_str()).await)
                    }
                    Message::Binary(_) => Some(Frame::unread().answer(400, json!({
                        "error": "Can't decode binary (MessagePack) request. Tenax reads text \
                                  (JSON) frames only."
                    }))),
                    Message::Close(_) => return,
                    Message::Ping(_) | Message::Pong(_) => None,
                };
                if let Some(answer) = answer
                    && !send(&mut socket, Message::Text(answer.into()), idle).await
                {
                    return;
                }
                None
            }
        };
        if let Some((code, why)) = reason {
            let close = CloseFrame {
                code,
                reason: Utf8Bytes::from_static(why),
            };
            send(&mut socket, Message::Close(Some(close)), idle).await;
            return;
        }
    }
}

/// Sends one message; false if the connection failed, or the peer accepted none of it for
/// `idle` (as an HTTP response the client stops reading: a peer that stops reading cannot hold
/// the connection open).
async fn send(socket: &mut WebSocket, message: Message, idle: std::time::Duration) -> bool {
    matches!(
        tokio::time::timeout(idle, socket.send(message)).await,
        Ok(Ok(()))
    )
}

impl Session {
    /// The answer to one text frame.
    async fn answer(&mut self, text: &str) -> String {
        let payload: Map<String, Value> = match serde_json::from_str::<Value>(text) {
            Err(error) => {
                return Frame::unread().answer(
                    400,
                    json!({"error": format!("Can't decode text (JSON) request. {error}")}),
                );
            }
            Ok(Value::Object(payload)) => payload,
            Ok(_) => {
                return Frame::unread().answer(
                    400,
                    json!({"error": "Unexpected body type. Expected dict or dict like."}),
                );
            }
        };
        let frame = Frame::of(&payload);
        let Some((action, schema)) = frame
            .action()
            .and_then(|name| Some((name.to_owned(), actions::schema_of(name)?)))
        else {
            let error = format!("{} is not a valid action", python_repr(&frame.action));
            return frame.answer(400, json!({ "error": error }));
        };
        if !schema.admits(&payload) {
            return frame.answer(400, json!({"error": "Schema validation failed."}));
        }
        let (status, body) = self.act(&action, &frame).await;
        if action == "authenticate" {
            // Zaqar answers with a request of its own making: `{"action": "authenticate"}`.
            let made = Frame::of(
                json!({"action": "authenticate"})
                    .as_object()
                    .expect("object"),
            );
            return made.answer(status, body);
        }
        frame.answer(status, body)
    }

    /// Runs one checked action: its status and body.
    async fn act(&mut self, action: &str, frame: &Frame) -> (u16, Value) {
        let caller = self.caller(frame);
        let queue = frame.text("queue_name").unwrap_or_default().to_owned();
        match action {
            "authenticate" => return self.authenticate(frame, caller).await,
            "subscription_create" if frame.text("subscriber").is_none_or(str::is_empty) => {
                let ttl = match frame.field("ttl").and_then(Value::as_i64) {
                    None => DEFAULT_SUBSCRIPTION_TTL_S,
                    Some(ttl) if ttl >= 60 => u64::try_from(ttl).unwrap_or(u64::MAX),
                    Some(_) => {
                        return (
                            400,
                            json!({"exception": "The TTL for a subscription must be at least 60 \
                                                 seconds long.", "error": null}),
                        );
                    }
                };
                let created = self
                    .subscriptions
                    .create(&self.endpoint, caller, &queue, ttl, self.pushes.clone())
                    .await;
                return match created {
                    Ok(id) => (
                        201,
                        json!({"subscription_id": id,
                               "message": format!("Subscription {queue} created.")}),
                    ),
                    Err((status, body)) => self.refused(action, frame, status, &body),
                };
            }
            "subscription_get" | "subscription_delete"
                if frame
                    .text("subscription_id")
                    .is_some_and(|id| self.subscriptions.has(id)) =>
            {
                let id = frame.text("subscription_id").unwrap_or_default();
                if action == "subscription_get" {
                    if let Some(shown) = self.subscriptions.show(&queue, id) {
                        return (200, shown);
                    }
                } else if self.subscriptions.delete(&queue, id) {
                    return (204, json!(format!("Subscription {id} removed.")));
                }
            }
            _ => {}
        }
        let Some(call) = actions::call(action, frame) else {
            return (
                400,
                json!({"error": format!("{action} is not a valid action")}),
            );
        };
        let (status, body) = self.endpoint.run(&call, &caller).await;
        if status >= 400 {
            return self.refused(action, frame, status, &body);
        }
        actions::success(action, frame, status, body)
    }

    /// The answer to a refused `/v2` request.
    fn refused(&self, action: &str, frame: &Frame, status: u16, body: &Value) -> (u16, Value) {
        let signed = frame.header("URL-Signature").is_some();
        // No token, a token that is not valid, or a pre-signed URL set that does not hold:
        // Zaqar's websocket answers all of them alike.
        if status == 401 || (signed && status == 404 && body.is_null()) {
            return (403, json!({"error": "Not authentified."}));
        }
        actions::failure(action, frame, status, body)
    }

    /// `authenticate`: keeps the frame's `X-Auth-Token` for the frames that follow if the
    /// server accepts it (asked with `GET /v2/ping`, which any valid token may send).
    async fn authenticate(&mut self, frame: &Frame, caller: Caller) -> (u16, Value) {
        let ping = Call {
            method: axum::http::Method::GET,
            path_and_query: "/v2/ping".to_owned(),
            json: None,
        };
        let (status, _) = self.endpoint.run(&ping, &caller).await;
        let token = frame
            .header("X-Auth-Token")
            .and_then(|t| HeaderValue::from_str(t).ok());
        match (status, token) {
            (401, _) | (_, None) => (401, json!({"error": "Authentication failed."})),
            (_, Some(token)) => {
                self.token = Some(token);
                (200, json!({"message": "Authentified."}))
            }
        }
    }

    /// The headers of the `/v2` request for a frame: the frame's own (string values that are
    /// valid HTTP headers; `Host` and `Origin` excepted), then the connection's token unless the
    /// frame carries one, and the upgrade request's `Host` and `Origin`, so that the browser
    /// rules of `/v2` hold for the connection as for the page that opened it.
    fn caller(&self, frame: &Frame) -> Caller {
        let mut headers: Vec<(HeaderName, HeaderValue)> = frame
            .headers
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| {
                let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
                let value = HeaderValue::from_str(value.as_str()?).ok()?;
                Some((name, value))
            })
            .filter(|(name, _)| {
                name != axum::http::header::HOST && name != axum::http::header::ORIGIN
            })
            .collect();
        let carries_token = headers.iter().any(|(name, _)| {
            name == axum::http::header::AUTHORIZATION || name.as_str() == "x-auth-token"
        });
        if !carries_token {
            if let Some(token) = &self.token {
                headers.push((HeaderName::from_static("x-auth-token"), token.clone()));
            } else if let Some((name, value)) = &self.origin.token {
                headers.push((name.clone(), value.clone()));
            }
        }
        if let Some(host) = &self.origin.host {
            headers.push((axum::http::header::HOST, host.clone()));
        }
        if let Some(origin) = &self.origin.origin {
            headers.push((axum::http::header::ORIGIN, origin.clone()));
        }
        Caller {
            headers,
            peer: self.origin.peer.map(ConnectInfo),
        }
    }
}
