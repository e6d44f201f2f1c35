//! A scripted webhook receiver: a real HTTP server on a loopback port whose answers the test
//! chooses (fail N times then succeed, always 500, 404, 429 with `Retry-After`, slow beyond the
//! timeout), and which records every request with the moment it arrived.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Notify;

/// One answer the receiver gives.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub delay: Duration,
    pub retry_after: Option<String>,
    pub body: String,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            delay: Duration::ZERO,
            retry_after: None,
            body: String::new(),
        }
    }

    pub fn ok() -> Self {
        Self::status(204)
    }

    pub fn slow(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::ok()
        }
    }

    pub fn retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.to_owned());
        self
    }

    pub fn body(mut self, body: &str) -> Self {
        self.body = body.to_owned();
        self
    }
}

/// A request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the delivery body is JSON")
    }

    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }
}

#[derive(Debug)]
struct Script {
    /// Answers in order; when empty, `then` is given forever.
    replies: VecDeque<Reply>,
    then: Reply,
    received: Vec<Received>,
}

#[derive(Debug, Clone)]
struct Shared {
    script: Arc<Mutex<Script>>,
    arrived: Arc<Notify>,
}

#[derive(Debug)]
pub struct Receiver {
    pub address: SocketAddr,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Answers `replies` in order, then `then` to every later request.
    pub async fn start(replies: Vec<Reply>, then: Reply) -> Self {
        let shared = Shared {
            script: Arc::new(Mutex::new(Script {
                replies: replies.into(),
                then,
                received: Vec::new(),
            })),
            arrived: Arc::new(Notify::new()),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let address = listener.local_addr().expect("receiver address");
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(shared.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            address,
            shared,
            server,
        }
    }

    /// Succeeds every time.
    pub async fn ok() -> Self {
        Self::start(Vec::new(), Reply::ok()).await
    }

    /// Fails `n` times with `status`, then succeeds.
    pub async fn failing(n: usize, status: u16) -> Self {
        Self::start(vec![Reply::status(status); n], Reply::ok()).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.script.lock().received.clone()
    }

    pub fn count(&self) -> usize {
        self.shared.script.lock().received.len()
    }

    /// Waits until `n` requests have arrived, or panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let received = self.received();
            if received.len() >= n {
                return received;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!(
                    "the receiver got {} requests within {within:?}, expected {n}",
                    self.count()
                );
            }
        }
    }

    /// Stops answering: later connections are refused.
    pub fn shut(&self) {
        self.server.abort();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let reply = {
        let mut script = shared.script.lock();
        script.received.push(Received {
            at: Instant::now(),
            headers,
            body,
        });
        let then = script.then.clone();
        script.replies.pop_front().unwrap_or(then)
    };
    shared.arrived.notify_waiters();
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let status = StatusCode::from_u16(reply.status).expect("a valid status");
    let mut response = (status, reply.body).into_response();
    if let Some(value) = reply.retry_after {
        response
            .headers_mut()
            .insert("retry-after", value.parse().expect("a header value"));
    }
    response
}
