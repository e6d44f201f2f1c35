//! A subscription as both backends keep it: its JSON, with what must not be kept in clear
//! taken out and sealed together under the secrets key (`crate::secrets`):
//!
//! - the signing secret and the previous one (both sign deliveries: whoever reads them can
//!   forge a delivery);
//! - the extra headers, whose values often carry an endpoint's credentials;
//! - Zaqar's free-form `options`, which hold `post_headers` (the same credentials) and
//!   whatever else a client put there.
//!
//! ```json
//! {"id": 7, "queue": "orders", …, "secret": "", "headers": {},
//!  "sealed": {"v": 1, "key": "3f2a…", "box": "…"}}
//! ```
//!
//! The box's associated data is the subscription's id, so a box copied to another subscription
//! does not open. Every field a backend reads without the key (queue, endpoint, enabled) stays
//! in clear. Invariants: both backends write subscriptions only through [`to_stored`] and read
//! them only through [`from_stored`], so memory and the engine only ever see them opened and
//! the disk or database only ever sealed. A stored subscription without `sealed` was written
//! in clear by an earlier release: it reads as it is, and each backend seals it at open.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::StoreError;
use crate::model::Subscription;
use crate::secrets::{KeyId, Keyring, OpenError, PayloadKey, Sealed};

/// What is sealed of a subscription.
#[derive(Serialize, Deserialize)]
struct Secrets {
    secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous_secret: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    options: Option<serde_json::Value>,
}

/// The stored JSON: the subscription without its secrets, and the box holding them.
#[derive(Serialize)]
struct Stored<'a> {
    #[serde(flatten)]
    subscription: &'a Subscription,
    sealed: &'a Sealed,
}

/// The box of a stored subscription, if it has one.
#[derive(Deserialize)]
struct Boxed {
    #[serde(default)]
    sealed: Option<Sealed>,
}

/// The associated data of subscription `id`'s box.
fn associated_data(subscription: &Subscription) -> Vec<u8> {
    format!("tenax subscription {} secrets", subscription.id).into_bytes()
}

/// The stored form of `subscription`, sealed with `keys`' sealing key.
pub fn to_stored(subscription: &Subscription, keys: &Keyring) -> Result<Vec<u8>, StoreError> {
    let mut public = subscription.clone();
    let secrets = Secrets {
        secret: std::mem::take(&mut public.secret),
        previous_secret: public.previous_secret.take(),
        headers: std::mem::take(&mut public.headers),
        options: public.options.take(),
    };
    let plain = super::to_json_bytes(&secrets);
    let sealed = keys
        .seal(&associated_data(subscription), &plain)
        .map_err(|e| StoreError::storage("sealing a subscription's secrets", e))?;
    Ok(super::to_json_bytes(&Stored {
        subscription: &public,
        sealed: &sealed,
    }))
}

/// A subscription read back, and how it was kept.
#[derive(Debug)]
pub struct Opened {
    pub subscription: Subscription,
    /// The key its secrets were sealed with; `None`: it was kept in clear (an earlier release).
    pub sealed_with: Option<KeyId>,
}

/// Reads a stored subscription, opening its box with `keys`.
pub fn from_stored(bytes: &[u8], keys: &Keyring) -> Result<Opened, StoreError> {
    let mut subscription: Subscription = super::from_json_bytes("subscription", bytes)?;
    let Boxed { sealed } = super::from_json_bytes("subscription", bytes)?;
    let Some(sealed) = sealed else {
        return Ok(Opened {
            subscription,
            sealed_with: None,
        });
    };
    let plain = keys
        .open(&sealed, &associated_data(&subscription))
        .map_err(|e| cannot_open(&subscription, keys, &e))?;
    let secrets: Secrets = super::from_json_bytes("a subscription's sealed secrets", &plain)?;
    subscription.secret = secrets.secret;
    subscription.previous_secret = secrets.previous_secret;
    subscription.headers = secrets.headers;
    subscription.options = secrets.options;
    Ok(Opened {
        subscription,
        sealed_with: Some(sealed.key),
    })
}

/// Why a subscription's secrets do not open, with what the operator can do.
fn cannot_open(subscription: &Subscription, keys: &Keyring, error: &OpenError) -> StoreError {
    let hint = match error {
        OpenError::UnknownKey(_) => format!(
            "; the secrets key file {} holds key {}: give the key file the store was sealed with \
             (--secrets-key-file), or one holding both keys while a rotation is under way \
             (docs/security.md)",
            keys.source(),
            keys.ids()
        ),
        OpenError::Version(_) => "; run the newer version of Tenax that wrote it".into(),
        OpenError::Damaged(_) => String::new(),
    };
    StoreError::Secrets(format!(
        "the secrets of subscription {} do not open: {error}{hint}",
        subscription.id
    ))
}

/// The stored form of the store's payload data key: its box, sealed with `keys`' sealing key.
pub fn payload_key_to_stored(key: &PayloadKey, keys: &Keyring) -> Result<Vec<u8>, StoreError> {
    let sealed = key
        .sealed_by(keys)
        .map_err(|e| StoreError::storage("sealing the payload data key", e))?;
    Ok(super::to_json_bytes(&sealed))
}

/// The store's payload data key read back, and the key ring's key that sealed it.
pub fn payload_key_from_stored(
    bytes: &[u8],
    keys: &Keyring,
) -> Result<(PayloadKey, KeyId), StoreError> {
    let sealed: Sealed = super::from_json_bytes("the payload data key", bytes)?;
    let key = PayloadKey::open_with(&sealed, keys).map_err(|e| {
        StoreError::Secrets(format!(
            "the payload data key of encrypted queues does not open: {e}; the secrets key file \
             {} holds key {} (docs/security.md)",
            keys.source(),
            keys.ids()
        ))
    })?;
    Ok((key, sealed.key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SubscriptionId;
    use crate::secrets::key::Key;

    fn subscription() -> Subscription {
        let mut s = Subscription::new("orders".into(), 5);
        s.id = SubscriptionId(7);
        s.endpoint = "https://example.com/hook".into();
        s.secret = "whsec_TOPSECRETTOPSECRETTOPSECRET".into();
        s.previous_secret = Some("whsec_OLDSECRETOLDSECRET".into());
        s.previous_secret_until_ms = Some(99);
        s.headers
            .insert("Authorization".into(), "Bearer hunter2".into());
        s.options =
            Some(serde_json::json!({"post_headers": {"X-Key": "zaqarkey"}, "trust": "t0ken"}));
        s
    }

    #[test]
    fn stored_secrets_are_sealed_and_come_back_whole() {
        let keys = Keyring::generate("test").unwrap();
        let original = subscription();
        let stored = to_stored(&original, &keys).unwrap();
        let text = String::from_utf8(stored.clone()).unwrap();
        for secret in [
            "TOPSECRET",
            "OLDSECRET",
            "hunter2",
            "zaqarkey",
            "t0ken",
            "Authorization",
        ] {
            assert!(!text.contains(secret), "{text}");
        }
        // What the backends index stays readable.
        for clear in ["orders", "https://example.com/hook"] {
            assert!(text.contains(clear), "{text}");
        }
        let opened = from_stored(&stored, &keys).unwrap();
        assert_eq!(opened.subscription, original);
        assert_eq!(opened.sealed_with, Some(keys.current().id()));
    }

    #[test]
    fn a_clear_subscription_of_an_earlier_release_reads_as_it_is() {
        let keys = Keyring::generate("test").unwrap();
        let original = subscription();
        let clear = crate::store::to_json_bytes(&original);
        let opened = from_stored(&clear, &keys).unwrap();
        assert_eq!(opened.subscription, original);
        assert_eq!(opened.sealed_with, None);
    }

    #[test]
    fn a_box_opens_only_in_its_own_subscription_with_a_key_held() {
        let keys = Keyring::generate("/etc/k").unwrap();
        let stored = to_stored(&subscription(), &keys).unwrap();
        let other = Keyring::generate("/etc/other.key").unwrap();
        let error = from_stored(&stored, &other).unwrap_err().to_string();
        assert!(
            error.contains("subscription 7 do not open")
                && error.contains(&keys.current().id().to_string())
                && error.contains("/etc/other.key"),
            "{error}"
        );
        // The box moved to subscription 8.
        let moved = String::from_utf8(stored)
            .unwrap()
            .replacen("\"id\":7", "\"id\":8", 1);
        let error = from_stored(moved.as_bytes(), &keys)
            .unwrap_err()
            .to_string();
        assert!(error.contains("damaged, or moved"), "{error}");
        // During a rotation, a key ring holding both keys opens it.
        let both = keys.sealing_with(Key::generate().unwrap());
        let stored = to_stored(&subscription(), &keys).unwrap();
        let opened = from_stored(&stored, &both).unwrap();
        assert_eq!(opened.sealed_with, Some(keys.current().id()));
    }
}
