//! Zaqar's confirmation notices (`zaqar/notification/notifier.py`,
//! `send_confirm_notification`): what a subscription that must be confirmed is sent when it is
//! made (or posted again unconfirmed), and when its subscriber stops it.
//!
//! A notice carries the subscription's confirm path pre-signed for `PUT` ([`super::signed`]),
//! so the subscriber confirms with the headers it was sent and no token. The delivery runtime
//! sends it like a message (the subscription's headers, template and retry policy), whether or
//! not the subscription is confirmed; the rule that unconfirmed subscriptions get no message is
//! the delivery runtime's (`crate::delivery::confirmation`).

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use tenax_core::model::SubscriptionId;

use super::error::ZaqarError;
use super::names::QueueRef;
use super::signed::{self, SigningKey};
use crate::api::AppState;

/// How long the confirm URL of an unsubscribe notice lasts: Zaqar's default subscription ttl.
const UNSUBSCRIBE_URL_LIFETIME_S: u64 = 3_600;

/// Which notice: Zaqar's `MessageType` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// The subscription was made: confirm it to get messages.
    Subscribe,
    /// The subscriber stopped it (`{"confirmed": false}`): confirm again to resume.
    Unsubscribe,
}

/// The body of `notice` for subscription `id` of `queue`, whose confirm URL is signed with
/// `key` until `expires_s` (Unix seconds). Zaqar's keys, without `WSGISubscribeURL` (Tenax
/// knows no public URL of itself: the path is in `URL-Paths`).
pub fn body(
    key: &SigningKey,
    queue: &QueueRef,
    id: SubscriptionId,
    notice: Notice,
    expires_s: u64,
) -> Value {
    let path = format!("{}/subscriptions/{id}/confirm", queue.href());
    let methods = ["PUT".to_owned()];
    let expires = signed::format_expires(UNIX_EPOCH + Duration::from_secs(expires_s));
    let paths = [path.clone()];
    let signature = signed::sign(key, &paths, &methods, &queue.project, &expires);
    let (kind, message) = match notice {
        Notice::Subscribe => (
            "SubscriptionConfirmation",
            format!("You have chosen to subscribe to the queue: {}", queue.name),
        ),
        Notice::Unsubscribe => (
            "UnsubscribeConfirmation",
            format!(
                "You have unsubscribed successfully to the queue: {}, you can resubscribe it \
                 by using confirmed=True.",
                queue.name
            ),
        ),
    };
    json!({
        "Message_Type": kind,
        "Message": message,
        "URL-Signature": signature,
        "URL-Methods": "PUT",
        "URL-Paths": path,
        "X-Project-ID": queue.project,
        "URL-Expires": expires,
        "SubscribeBody": {"confirmed": true},
        "UnsubscribeBody": {"confirmed": false},
    })
}

/// Sends `notice` to subscription `id` of `queue`. A subscription notice's URL lasts as long as
/// the subscription (`ttl_s` from now), an unsubscribe notice's an hour, as in Zaqar.
pub async fn send(
    state: &AppState,
    queue: &QueueRef,
    id: SubscriptionId,
    notice: Notice,
    ttl_s: u64,
) -> Result<(), ZaqarError> {
    let now_s = state.engine.now_ms() / 1_000;
    let lifetime_s = match notice {
        Notice::Subscribe => ttl_s,
        Notice::Unsubscribe => UNSUBSCRIBE_URL_LIFETIME_S,
    };
    let body = body(
        &state.zaqar_signing,
        queue,
        id,
        notice,
        now_s.saturating_add(lifetime_s),
    );
    state.engine.send_confirmation(id, &body).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_sign_the_confirm_path_for_put() {
        let key = SigningKey::new(b"k".to_vec());
        let queue = QueueRef::new("p", "q").expect("a queue");
        let notice = body(
            &key,
            &queue,
            SubscriptionId(9),
            Notice::Subscribe,
            1_893_456_000,
        );
        assert_eq!(notice["Message_Type"], "SubscriptionConfirmation");
        assert_eq!(
            notice["Message"],
            "You have chosen to subscribe to the queue: q"
        );
        assert_eq!(notice["URL-Paths"], "/v2/queues/q/subscriptions/9/confirm");
        assert_eq!(notice["URL-Methods"], "PUT");
        assert_eq!(notice["X-Project-ID"], "p");
        assert_eq!(notice["URL-Expires"], "2030-01-01T00:00:00");
        let expected = signed::sign(
            &key,
            &["/v2/queues/q/subscriptions/9/confirm".to_owned()],
            &["PUT".to_owned()],
            "p",
            "2030-01-01T00:00:00",
        );
        assert_eq!(notice["URL-Signature"], json!(expected));
        assert_eq!(notice["SubscribeBody"], json!({"confirmed": true}));
        let stop = body(
            &key,
            &queue,
            SubscriptionId(9),
            Notice::Unsubscribe,
            1_893_456_000,
        );
        assert_eq!(stop["Message_Type"], "UnsubscribeConfirmation");
    }
}
