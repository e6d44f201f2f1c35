//! The body a delivery POSTs: Tenax's envelope, or Zaqar's notification body.
//!
//! The envelope is rendered anew for each attempt (it carries the attempt number and the time
//! it was sent); the `webhook-id` header, not the body, identifies the delivery across attempts.

use serde::Serialize;
use serde_json::value::RawValue;
use tenax_core::clock::{UnixMs, rfc3339};
use tenax_core::model::subscription::CONFIRMATION_EVENT_KIND;
use tenax_core::model::{DeliveryPayload, EnvelopeFormat, JobId, SubscriptionId};

/// What one attempt sends.
#[derive(Debug, Clone, Copy)]
pub struct AttemptInfo<'a> {
    pub delivery_id: JobId,
    pub subscription_id: SubscriptionId,
    pub attempt: u32,
    pub message: &'a DeliveryPayload,
    /// The message's id (the delivery's parent).
    pub message_id: JobId,
    pub message_created_at_ms: UnixMs,
    pub sent_at_ms: UnixMs,
}

#[derive(Serialize)]
struct TenaxEnvelope<'a> {
    delivery_id: JobId,
    subscription_id: SubscriptionId,
    attempt: u32,
    queue: &'a str,
    message: Message<'a>,
    sent_at: String,
}

#[derive(Serialize)]
struct Message<'a> {
    id: JobId,
    #[serde(rename = "type")]
    kind: &'a str,
    body: &'a RawValue,
    created_at: String,
}

/// Zaqar's notification body (`zaqar/notification/tasks/webhook.py`): the message without its id.
#[derive(Serialize)]
struct ZaqarNotification<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<u64>,
    body: &'a RawValue,
    queue_name: &'a str,
    #[serde(rename = "Message_Type")]
    message_type: &'static str,
}

/// The text a Zaqar body template (`options.post_data`) names the message by, quotes included.
pub const ZAQAR_MESSAGE_PLACEHOLDER: &str = "\"$zaqar_message$\"";

/// The request body of one attempt. A Zaqar subscription's `template` (its `post_data`) is
/// sent with each `"$zaqar_message$"` (quotes included) replaced by the notification's JSON,
/// as Zaqar's webhook task does; the rest of the template is sent as it is.
pub fn render(format: EnvelopeFormat, template: Option<&str>, info: &AttemptInfo<'_>) -> Vec<u8> {
    let message = info.message;
    let encoded = match format {
        EnvelopeFormat::Tenax => serde_json::to_vec(&TenaxEnvelope {
            delivery_id: info.delivery_id,
            subscription_id: info.subscription_id,
            attempt: info.attempt,
            queue: &message.queue,
            message: Message {
                id: info.message_id,
                kind: &message.kind,
                body: &message.body,
                created_at: rfc3339(info.message_created_at_ms),
            },
            sent_at: rfc3339(info.sent_at_ms),
        }),
        // A confirmation notice is its own body, with the queue's name, as Zaqar's webhook
        // task adds it to every message it sends.
        EnvelopeFormat::Zaqar if message.kind == CONFIRMATION_EVENT_KIND => {
            let mut notice: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(message.body.get()).unwrap_or_default();
            notice.insert(
                "queue_name".to_owned(),
                zaqar_queue_name(&message.queue).into(),
            );
            serde_json::to_vec(&notice)
        }
        EnvelopeFormat::Zaqar => serde_json::to_vec(&ZaqarNotification {
            ttl: message.ttl_s,
            body: &message.body,
            queue_name: zaqar_queue_name(&message.queue),
            message_type: "Notification",
        }),
    };
    // Strings, integers and already-valid JSON: encoding cannot fail.
    let encoded = encoded.unwrap_or_default();
    match (format, template) {
        (EnvelopeFormat::Zaqar, Some(template)) => template
            .replace(
                ZAQAR_MESSAGE_PLACEHOLDER,
                &String::from_utf8_lossy(&encoded),
            )
            .into_bytes(),
        _ => encoded,
    }
}

/// The queue name a Zaqar receiver expects: without the project prefix Tenax stores
/// (`<project>:<queue>`), if any.
fn zaqar_queue_name(queue: &str) -> &str {
    queue.rsplit_once(':').map_or(queue, |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload() -> DeliveryPayload {
        DeliveryPayload {
            message_id: None,
            queue: "orders".into(),
            kind: "order.paid".into(),
            body: RawValue::from_string(r#"{"total": 12}"#.into()).unwrap(),
            ttl_s: None,
        }
    }

    #[test]
    fn tenax_envelope_carries_message_attempt_and_times() {
        let message = payload();
        let body = render(
            EnvelopeFormat::Tenax,
            None,
            &AttemptInfo {
                delivery_id: JobId(43),
                subscription_id: SubscriptionId(7),
                attempt: 2,
                message: &message,
                message_id: JobId(42),
                message_created_at_ms: 1_700_000_000_000,
                sent_at_ms: 1_700_000_005_000,
            },
        );
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "delivery_id": 43, "subscription_id": 7, "attempt": 2, "queue": "orders",
                "message": {"id": 42, "type": "order.paid", "body": {"total": 12},
                            "created_at": "2023-11-14T22:13:20.000Z"},
                "sent_at": "2023-11-14T22:13:25.000Z",
            })
        );
    }

    #[test]
    fn zaqar_body_is_zaqars() {
        let mut message = payload();
        message.queue = "project-1:orders".into();
        message.ttl_s = Some(3_600);
        let info = AttemptInfo {
            delivery_id: JobId(1),
            subscription_id: SubscriptionId(1),
            attempt: 1,
            message: &message,
            message_id: JobId(1),
            message_created_at_ms: 0,
            sent_at_ms: 0,
        };
        let body = render(EnvelopeFormat::Zaqar, None, &info);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let notification = serde_json::json!({"ttl": 3_600, "body": {"total": 12},
                                              "queue_name": "orders",
                                              "Message_Type": "Notification"});
        assert_eq!(value, notification);

        // A template: every quoted placeholder is the notification; the rest stays as it is.
        let template = r#"{"text": "new", "event": "$zaqar_message$", "again": ["$zaqar_message$"], "bare": "$zaqar_message$x"}"#;
        let body = render(EnvelopeFormat::Zaqar, Some(template), &info);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"text": "new", "event": notification, "again": [notification],
                               "bare": "$zaqar_message$x"})
        );
        // Tenax's envelope has no template.
        assert_eq!(
            render(EnvelopeFormat::Tenax, Some(template), &info),
            render(EnvelopeFormat::Tenax, None, &info)
        );
    }
}
