//! Response shapes. The official client builds a `Message` from every key of a message object
//! and fails on any it does not know, so message objects carry exactly Zaqar's keys:
//! `id, href, ttl, age, body` (and `claim_count, claim_id` in a pop, as Zaqar's MongoDB driver
//! sends them there).
//!
//! Invariants:
//! - A message is live while it is scheduled, ready or in flight and its expiry has not passed
//!   ([`JobPeek::is_live`](tenax_core::model::JobPeek::is_live)); completed, dead and cancelled jobs, and
//!   expired ones the maintenance loop has not deleted yet, are no messages.
//! - A message is claimed while a claim's lease on it has not ended; its `href` then ends in
//!   `?claim_id=<claim>`.
//! - `ttl` is the message's lifetime in whole seconds from its creation to its expiry (a claim
//!   that outlives a message extends it); `age` is whole seconds since its creation.

use axum::http::StatusCode;
use axum::http::header::{CONTENT_TYPE, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use tenax_core::clock::UnixMs;
use tenax_core::model::{ClaimId, JobId};

use super::names::QueueRef;

/// Whole seconds from `from_ms` to `to_ms` (0 if `to_ms` is earlier).
pub fn seconds(from_ms: UnixMs, to_ms: UnixMs) -> u64 {
    to_ms.saturating_sub(from_ms) / 1_000
}

/// A message's `ttl`: whole seconds from its creation to its expiry; 0 when it never expires
/// (a job posted through the native API).
pub fn ttl(created_at_ms: UnixMs, expires_at_ms: Option<UnixMs>) -> u64 {
    expires_at_ms.map_or(0, |at| seconds(created_at_ms, at))
}

/// What a message view is built from.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub id: JobId,
    pub created_at_ms: UnixMs,
    pub expires_at_ms: Option<UnixMs>,
    pub claim: Option<ClaimId>,
    pub body: &'a RawValue,
}

/// A message object: exactly Zaqar's `id, href, ttl, age, body`.
#[derive(Debug, Serialize)]
pub struct MessageView<'a> {
    pub id: String,
    pub href: String,
    pub ttl: u64,
    pub age: u64,
    pub body: &'a RawValue,
}

impl<'a> MessageView<'a> {
    pub fn new(queue: &QueueRef, facts: Facts<'a>, now_ms: UnixMs) -> Self {
        Self {
            id: facts.id.to_string(),
            href: queue.message_href(facts.id, facts.claim),
            ttl: ttl(facts.created_at_ms, facts.expires_at_ms),
            age: seconds(facts.created_at_ms, now_ms),
            body: facts.body,
        }
    }
}

/// A popped message, as Zaqar's MongoDB driver returns one: no `href` (it is gone), its claim
/// count, and no claim.
#[derive(Debug, Serialize)]
pub struct PoppedView<'a> {
    pub id: String,
    pub age: u64,
    pub ttl: u64,
    pub body: &'a RawValue,
    pub claim_count: u32,
    pub claim_id: Option<String>,
}

/// `{"messages": [...]}`.
#[derive(Debug, Serialize)]
pub struct Messages<T: Serialize> {
    pub messages: Vec<T>,
}

/// A `next` link.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Link {
    pub rel: &'static str,
    pub href: String,
}

impl Link {
    pub fn next(href: String) -> Self {
        Self { rel: "next", href }
    }
}

/// A JSON response with `status`, serialised from `value`.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An empty response with `status` (204, or 201 with a `Location`).
pub fn empty(status: StatusCode, location: Option<&str>) -> Response {
    let mut response = status.into_response();
    if let Some(value) = location.and_then(|l| HeaderValue::from_str(l).ok()) {
        response
            .headers_mut()
            .insert(axum::http::header::LOCATION, value);
    }
    response
}

/// Adds a `Location` header to a response.
pub fn located(mut response: Response, location: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(location) {
        response
            .headers_mut()
            .insert(axum::http::header::LOCATION, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_have_zaqars_keys() {
        let queue = QueueRef::new("p", "q").unwrap();
        let body = RawValue::from_string("{\"a\":1}".into()).unwrap();
        let facts = Facts {
            id: JobId(12),
            created_at_ms: 1_000,
            expires_at_ms: Some(61_000),
            claim: Some(ClaimId(255)),
            body: &body,
        };
        let view = serde_json::to_value(MessageView::new(&queue, facts, 3_500)).unwrap();
        assert_eq!(
            view,
            serde_json::json!({"id": "12", "href": "/v2/queues/q/messages/12?claim_id=ff",
                               "ttl": 60, "age": 2, "body": {"a": 1}})
        );
    }
}
