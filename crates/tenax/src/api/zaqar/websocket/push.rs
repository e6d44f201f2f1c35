//! The connection's own subscriptions: Zaqar's `subscription_create` without a `subscriber`
//! subscribes the websocket itself, and each message posted to the queue afterwards is sent
//! down the connection as Zaqar's notification `{"body", "ttl", "queue_name", "Message_Type":
//! "Notification"}`.
//!
//! Invariants:
//! - a subscription lives with its connection (as Zaqar deletes a websocket's subscriptions
//!   when it closes) and at most its `ttl`; it is kept in the connection's task, not in the
//!   store, so it is never delivered anywhere else;
//! - it reads the queue through `/v2` as the connection would (`GET .../messages`, with the
//!   token and headers of the frame that subscribed), so it sees only what that caller may
//!   read, on either store and from any server of a cluster;
//! - it pushes messages in id order, each once, from the first posted after it began; it looks
//!   again whenever the store signals that jobs arrived (never on a timer).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Endpoint;
use super::actions::Call;
use super::frames::Frame;
use super::session::Caller;

/// Messages read per look: `/v2`'s largest page.
const PAGE: usize = 20;

/// One of the connection's subscriptions.
#[derive(Debug)]
struct Subscription {
    queue: String,
    ttl_s: u64,
    began: Instant,
    task: JoinHandle<()>,
}

/// The connection's subscriptions, by id; their tasks end with them.
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    by_id: HashMap<String, Subscription>,
    next: u64,
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        for subscription in self.by_id.values() {
            subscription.task.abort();
        }
    }
}

/// The page of messages after `marker` (all of them, the caller's own, claimed and delayed
/// too), as `/v2` lists them.
fn page(queue: &str, marker: Option<&str>) -> Call {
    let mut payload = json!({"action": "message_list", "headers": {},
        "body": {"queue_name": queue, "limit": PAGE, "echo": true, "include_claimed": true,
                 "include_delayed": true}});
    if let Some(marker) = marker {
        payload["body"]["marker"] = json!(marker);
    }
    let frame = Frame::of(payload.as_object().expect("an object"));
    super::actions::call("message_list", &frame).expect("message_list has a request")
}

/// The messages of a listing answer.
fn listed(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

impl Subscriptions {
    /// Subscribes the connection to `queue` for `ttl_s`, pushing into `out`. The caller may
    /// read the queue (checked by reading it): else its `/v2` error (status and body).
    pub async fn create(
        &mut self,
        endpoint: &Endpoint,
        caller: Caller,
        queue: &str,
        ttl_s: u64,
        out: mpsc::Sender<String>,
    ) -> Result<String, (u16, Value)> {
        // The marker: the last message already there (the subscription pushes what follows),
        // found by reading the queue to its end, a page at a time.
        let mut marker: Option<String> = None;
        loop {
            let (status, body) = endpoint.run(&page(queue, marker.as_deref()), &caller).await;
            if status >= 300 {
                return Err((status, body));
            }
            let Some(last) = listed(&body).last() else {
                break;
            };
            marker = last.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        self.next += 1;
        let id = format!("ws{:x}{:04x}", rand::random::<u64>(), self.next);
        let until = Instant::now() + Duration::from_secs(ttl_s);
        let task = tokio::spawn(follow(
            endpoint.clone(),
            caller,
            queue.to_owned(),
            marker,
            until,
            out,
        ));
        self.by_id.insert(
            id.clone(),
            Subscription {
                queue: queue.to_owned(),
                ttl_s,
                began: Instant::now(),
                task,
            },
        );
        Ok(id)
    }

    /// Zaqar's view of one of the connection's subscriptions, if `id` is one on `queue`.
    pub fn show(&self, queue: &str, id: &str) -> Option<Value> {
        let subscription = self.by_id.get(id).filter(|s| s.queue == queue)?;
        Some(json!({
            "id": id,
            "source": subscription.queue,
            "subscriber": "websocket",
            "ttl": subscription.ttl_s,
            "age": subscription.began.elapsed().as_secs(),
            "options": {},
            "confirmed": true,
        }))
    }

    /// Ends one of the connection's subscriptions; whether it was one.
    pub fn delete(&mut self, queue: &str, id: &str) -> bool {
        if self.by_id.get(id).is_none_or(|s| s.queue != queue) {
            return false;
        }
        if let Some(subscription) = self.by_id.remove(id) {
            subscription.task.abort();
        }
        true
    }

    /// Whether `id` names one of the connection's subscriptions (on any queue).
    pub fn has(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }
}

/// Pushes the queue's messages after `marker` into `out` until `until`, the connection closes
/// (`out` is closed) or the caller may no longer read the queue.
async fn follow(
    endpoint: Endpoint,
    caller: Caller,
    queue: String,
    mut marker: Option<String>,
    until: Instant,
    out: mpsc::Sender<String>,
) {
    let engine = endpoint.engine.clone();
    loop {
        // Registered before the look, so that a message posted during it wakes the next.
        let signals = engine.signals();
        let ready = signals.ready.notified();
        let scheduled = signals.schedule.notified();
        tokio::pin!(ready, scheduled);
        ready.as_mut().enable();
        scheduled.as_mut().enable();
        let (status, body) = endpoint
            .run(&page(&queue, marker.as_deref()), &caller)
            .await;
        if status >= 300 {
            tracing::debug!(%queue, status, "websocket subscription ends: the queue cannot be read");
            return;
        }
        let messages = listed(&body);
        for message in messages {
            let notification = json!({
                "body": message.get("body").cloned().unwrap_or(Value::Null),
                "ttl": message.get("ttl").cloned().unwrap_or(Value::Null),
                "queue_name": queue,
                "Message_Type": "Notification",
            });
            if out.send(notification.to_string()).await.is_err() {
                return;
            }
            marker = message
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or(marker);
        }
        if messages.len() == PAGE {
            continue;
        }
        tokio::select! {
            () = &mut ready => {}
            () = &mut scheduled => {}
            () = tokio::time::sleep_until(until) => return,
            () = out.closed() => return,
            () = engine.stopped() => return,
        }
    }
}
