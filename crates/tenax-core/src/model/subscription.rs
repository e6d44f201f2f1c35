//! Subscriptions and deliveries: a queue's webhook endpoints, and one delivery per message and
//! subscription.
//!
//! A delivery is a job. It lives in its subscription's own internal queue (named by
//! [`delivery_queue`]), so it is retried, leased, killed, replayed and retained by the same
//! machinery as every other job; its payload ([`DeliveryPayload`]) holds a copy of the message.
//! Internal queue names start with `~`, which user queue names cannot contain.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{JobId, StoredPolicy, SubscriptionId};
use crate::clock::UnixMs;

/// The prefix of internal queue names; user queue names never start with it.
pub const INTERNAL_QUEUE_PREFIX: char = '~';

const DELIVERY_QUEUE_PREFIX: &str = "~deliveries/";

/// The job kind of every delivery of a message.
pub const DELIVERY_KIND: &str = "tenax.delivery";

/// The job kind of a test event's delivery (sent to one subscription from the dashboard or
/// the API, of no message).
pub const TEST_DELIVERY_KIND: &str = "tenax.delivery.test";

/// The job kind of a subscription confirmation notice (Zaqar's `SubscriptionConfirmation` and
/// `UnsubscribeConfirmation`): sent to one subscription, of no message, whether or not it is
/// confirmed. Its payload's body is the notice itself.
pub const CONFIRMATION_DELIVERY_KIND: &str = "tenax.delivery.confirmation";

/// The message type a confirmation notice's payload carries.
pub const CONFIRMATION_EVENT_KIND: &str = "tenax.confirmation";

/// The message type a test event's body carries.
pub const TEST_EVENT_KIND: &str = "tenax.test";

/// The internal queue holding subscription `id`'s deliveries.
pub fn delivery_queue(id: SubscriptionId) -> String {
    format!("{DELIVERY_QUEUE_PREFIX}{id}")
}

/// The subscription whose deliveries queue `queue` is, if it is one.
pub fn subscription_of_queue(queue: &str) -> Option<SubscriptionId> {
    queue.strip_prefix(DELIVERY_QUEUE_PREFIX)?.parse().ok()
}

/// Whether `queue` is internal (hidden from queue listings).
pub fn is_internal_queue(queue: &str) -> bool {
    queue.starts_with(INTERNAL_QUEUE_PREFIX)
}

/// The body a delivery POSTs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnvelopeFormat {
    /// Tenax's envelope (`docs/webhooks.md`).
    #[default]
    Tenax,
    /// Zaqar's notification body: `{"body", "queue_name", "Message_Type"}`.
    Zaqar,
}

/// A queue's webhook subscription, as stored.
///
/// Invariant: its secrets and header values never leave the server except in the answer to the
/// request that set them (create, rotate); its `Debug` shows neither, so no log line does.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Subscription {
    pub id: SubscriptionId,
    pub queue: String,
    /// An http(s) URL.
    pub endpoint: String,
    /// The subscription's own delivery policy (stored as canonical native JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<StoredPolicy>,
    /// At most this many deliveries start per second; more wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_per_second: Option<u32>,
    /// The request's `Content-Type`.
    pub content_type: String,
    /// The Standard Webhooks signing secret, `whsec_…`.
    pub secret: String,
    /// The secret before the last rotation, still signing deliveries (beside the new one)
    /// until `previous_secret_until_ms`, so receivers can switch over without missing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_until_ms: Option<UnixMs>,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub enabled: bool,
    /// Whether its subscriber confirmed it wants the queue's messages. Deliveries of messages
    /// go only to a confirmed subscription (the delivery runtime ends the others unsent);
    /// confirmation notices go to it either way. Subscriptions stored before confirmation
    /// existed read as confirmed.
    #[serde(default = "confirmed_by_default")]
    pub confirmed: bool,
    /// Why it was disabled, when it was disabled automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// Which non-2xx statuses are retried, replacing the default (5xx, 408, 429).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable_statuses: Option<Vec<u16>>,
    /// At most this many requests of this subscription at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Disable the subscription after its endpoint has failed for this long without a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_disable_after_ms: Option<u64>,
    /// A cap on retries: a failing endpoint cannot turn a burst into a storm of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<RetryBudget>,
    #[serde(default)]
    pub format: EnvelopeFormat,
    /// Free-form options kept for the API that created it (Zaqar's `options`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<serde_json::Value>,
    /// The subscription is deleted at this time (Zaqar's `ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<UnixMs>,
    pub created_at_ms: UnixMs,
    pub updated_at_ms: UnixMs,
    /// Durable part of the endpoint's health.
    #[serde(default)]
    pub health: HealthMarks,
}

impl Subscription {
    /// A new subscription of `queue` made at `now_ms`, before a request's fields are applied:
    /// enabled, JSON, no secret yet, the store assigns the id.
    pub fn new(queue: String, now_ms: UnixMs) -> Self {
        Self {
            id: SubscriptionId(0),
            queue,
            endpoint: String::new(),
            policy: None,
            throttle_per_second: None,
            content_type: "application/json".into(),
            secret: String::new(),
            previous_secret: None,
            previous_secret_until_ms: None,
            headers: BTreeMap::new(),
            enabled: true,
            confirmed: true,
            disabled_reason: None,
            retryable_statuses: None,
            max_concurrency: None,
            auto_disable_after_ms: None,
            retry_budget: None,
            format: EnvelopeFormat::default(),
            options: None,
            expires_at_ms: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            health: HealthMarks::default(),
        }
    }

    /// The endpoint, when no other subscription of the queue may have it: Zaqar's
    /// subscriptions are unique by queue and subscriber. The store keeps this unique per queue.
    pub fn unique_endpoint(&self) -> Option<&str> {
        (self.format == EnvelopeFormat::Zaqar).then_some(self.endpoint.as_str())
    }

    /// The template of its notifications' body: a Zaqar subscription's `options.post_data`
    /// (a string), in which the delivery puts the notification.
    pub fn body_template(&self) -> Option<&str> {
        if self.format != EnvelopeFormat::Zaqar {
            return None;
        }
        self.options.as_ref()?.get("post_data")?.as_str()
    }

    /// The previous secret, while it still signs deliveries at `now_ms`.
    pub fn previous_secret_at(&self, now_ms: UnixMs) -> Option<&str> {
        match (&self.previous_secret, self.previous_secret_until_ms) {
            (Some(secret), Some(until)) if now_ms < until => Some(secret),
            _ => None,
        }
    }
}

/// What a log line may show of a subscription: everything but its secrets and header values.
impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("id", &self.id)
            .field("queue", &self.queue)
            .field("endpoint", &self.endpoint)
            .field("policy", &self.policy)
            .field("throttle_per_second", &self.throttle_per_second)
            .field("content_type", &self.content_type)
            .field("secret", &REDACTED)
            .field(
                "previous_secret",
                &self.previous_secret.as_ref().map(|_| REDACTED),
            )
            .field("previous_secret_until_ms", &self.previous_secret_until_ms)
            .field(
                "headers",
                &self
                    .headers
                    .keys()
                    .map(|name| (name, REDACTED))
                    .collect::<Vec<_>>(),
            )
            .field("enabled", &self.enabled)
            .field("confirmed", &self.confirmed)
            .field("disabled_reason", &self.disabled_reason)
            .field("retryable_statuses", &self.retryable_statuses)
            .field("max_concurrency", &self.max_concurrency)
            .field("auto_disable_after_ms", &self.auto_disable_after_ms)
            .field("retry_budget", &self.retry_budget)
            .field("format", &self.format)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("created_at_ms", &self.created_at_ms)
            .field("updated_at_ms", &self.updated_at_ms)
            .field("health", &self.health)
            .finish_non_exhaustive()
    }
}

fn confirmed_by_default() -> bool {
    true
}

/// Whether a delivery of job kind `kind` waits for its subscription's confirmation: every
/// delivery of a message does; a test event and a confirmation notice do not.
pub fn needs_confirmation(kind: &str) -> bool {
    kind == DELIVERY_KIND
}

/// A cap on a subscription's retries: within any `window_ms`, the retries it sends may be at
/// most `percent` % of all its attempts (the retries among them), or `min_retries`, whichever
/// allows more. Retries over it wait; they use no attempt (`crate::delivery::budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryBudget {
    /// 1 to 100.
    pub percent: u32,
    pub window_ms: u64,
    /// Retries allowed in any window whatever the share, so that a quiet subscription can
    /// retry at all.
    #[serde(default)]
    pub min_retries: u32,
}

/// What is shown in place of a secret or a header value.
pub const REDACTED: &str = "[redacted]";

/// The endpoint's health, as far as it must survive a restart: enough to know how long it has
/// been failing, which is what automatic disabling is based on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthMarks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_at_ms: Option<UnixMs>,
    /// When the current run of failures began; `None` while the last attempt succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since_ms: Option<UnixMs>,
}

/// What a delivery job carries: the message it delivers. The message's id is the delivery's
/// parent ([`NewJob::parent`](super::NewJob::parent)); deliveries stored before parents existed
/// carry it here instead.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeliveryPayload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<JobId>,
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub body: Box<RawValue>,
    /// The message's time to live in seconds, if it has one (Zaqar's notification shows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_s: Option<u64>,
}

impl DeliveryPayload {
    /// The delivered message's id, given the delivery's parent.
    pub fn message_id(&self, parent: Option<JobId>) -> JobId {
        parent.or(self.message_id).unwrap_or_default()
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AttemptResult {
    Delivered,
    /// Failed; retried if the policy allows.
    Retryable,
    /// Failed in a way not worth retrying: the delivery is dead at once.
    Permanent,
}

/// What started a run of a job (for a delivery, an attempt): its schedule, an operator's replay
/// of it dead, or an operator's request to run it now (or a test event).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Due by its schedule: the first run, or a retry by its policy.
    #[default]
    Scheduled,
    /// The first run after an operator replayed it dead.
    Replay,
    /// The first run after an operator asked for it at once (run now, a test event).
    Manual,
}

impl Trigger {
    pub fn name(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Replay => "replay",
            Self::Manual => "manual",
        }
    }

    /// A scheduled run is the default, stored as nothing.
    pub fn is_scheduled(&self) -> bool {
        *self == Self::Scheduled
    }
}

/// One POST of a delivery, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The delivery's run number, from 1.
    pub attempt: u32,
    /// What started this attempt. Attempts logged before triggers were recorded read as
    /// scheduled.
    #[serde(default, skip_serializing_if = "Trigger::is_scheduled")]
    pub trigger: Trigger,
    pub at_ms: UnixMs,
    pub latency_ms: u64,
    pub result: AttemptResult,
    /// The HTTP status, when a response came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The connection or timeout error, when no response came.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The start of the response body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// A `Retry-After` the endpoint asked for, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_secrets_or_header_values() {
        let subscription: Subscription = serde_json::from_value(serde_json::json!({
            "id": 1, "queue": "q", "endpoint": "https://example.com/", "content_type": "x",
            "secret": "whsec_TOPSECRETTOPSECRETTOPSECRET", "previous_secret": "whsec_OLDSECRET",
            "previous_secret_until_ms": 5, "headers": {"Authorization": "Bearer hunter2"},
            "enabled": true, "created_at_ms": 0, "updated_at_ms": 0,
        }))
        .unwrap();
        let shown = format!("{subscription:?} {subscription:#?}");
        for secret in ["TOPSECRET", "OLDSECRET", "hunter2"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("Authorization"), "{shown}");
        assert!(
            subscription.confirmed,
            "stored before confirmation: confirmed"
        );
        assert_eq!(subscription.previous_secret_at(4), Some("whsec_OLDSECRET"));
        assert_eq!(subscription.previous_secret_at(5), None);
    }

    #[test]
    fn delivery_queues_name_their_subscription() {
        assert_eq!(delivery_queue(SubscriptionId(42)), "~deliveries/42");
        assert_eq!(
            subscription_of_queue("~deliveries/42"),
            Some(SubscriptionId(42))
        );
        assert_eq!(subscription_of_queue("orders"), None);
        assert_eq!(subscription_of_queue("~deliveries/x"), None);
        assert!(is_internal_queue(&delivery_queue(SubscriptionId(1))));
        assert!(!is_internal_queue("orders"));
    }
}
