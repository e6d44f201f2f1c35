//! Standard Webhooks signatures (<https://www.standardwebhooks.com>).
//!
//! A subscription's secret is `whsec_` followed by the standard base64 of its key; the key is the
//! decoded bytes, never the text. A delivery is signed by HMAC-SHA256 over
//! `"{msg_id}.{timestamp_s}.{body}"` and sent as `webhook-signature: v1,<base64>`.
//!
//! Invariants:
//! - A key accepted by [`secret_key`] is 16 to 64 bytes long; [`generate_secret`] makes 24.
//! - [`sign`] is deterministic: the same key, id, timestamp and body give the same signature.
//! - [`verify`] compares in constant time and accepts a header listing several signatures
//!   (separated by spaces, as during a secret rotation) if any `v1` entry matches.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::digest::{Key, KeyInit};
use hmac::{Hmac, Mac};
use rand::TryRngCore as _;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};

/// The prefix every secret's text starts with.
pub const SECRET_PREFIX: &str = "whsec_";

/// The number of random bytes in a generated secret's key.
const GENERATED_KEY_BYTES: usize = 24;

/// The smallest and largest key accepted, in bytes.
const MIN_KEY_BYTES: usize = 16;
const MAX_KEY_BYTES: usize = 64;

/// The version tag of an HMAC-SHA256 signature.
const SIGNATURE_VERSION: &str = "v1";

type HmacSha256 = Hmac<Sha256>;

/// A new secret: [`SECRET_PREFIX`] followed by the base64 of 24 bytes from the operating system's
/// random source.
pub fn generate_secret() -> std::io::Result<String> {
    let mut key = [0u8; GENERATED_KEY_BYTES];
    OsRng
        .try_fill_bytes(&mut key)
        .map_err(std::io::Error::other)?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
}

/// The key in a secret's text. The error is the rule the text broke, phrased for an API error.
pub fn secret_key(secret: &str) -> Result<Vec<u8>, String> {
    let rule = || {
        format!(
            "must be \"{SECRET_PREFIX}\" followed by {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes in base64"
        )
    };
    let encoded = secret.strip_prefix(SECRET_PREFIX).ok_or_else(rule)?;
    let key = STANDARD.decode(encoded).map_err(|_| rule())?;
    if (MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
        Ok(key)
    } else {
        Err(rule())
    }
}

/// The `webhook-signature` value for a message: `v1,` followed by the base64 HMAC-SHA256 of
/// `"{msg_id}.{timestamp_s}.{body}"` under `key`.
pub fn sign(key: &[u8], msg_id: &str, timestamp_s: u64, body: &[u8]) -> String {
    let tag = mac(key, msg_id, timestamp_s, body).finalize().into_bytes();
    format!("{SIGNATURE_VERSION},{}", STANDARD.encode(tag))
}

/// Whether any `v1` entry of a `webhook-signature` header is the message's signature under `key`.
/// Entries are separated by spaces; entries of other versions and malformed entries are ignored.
pub fn verify(
    key: &[u8],
    msg_id: &str,
    timestamp_s: u64,
    body: &[u8],
    signature_header: &str,
) -> bool {
    let expected = mac(key, msg_id, timestamp_s, body);
    signature_header
        .split_ascii_whitespace()
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == SIGNATURE_VERSION)
        .filter_map(|(_, encoded)| STANDARD.decode(encoded).ok())
        .any(|tag| expected.clone().verify_slice(&tag).is_ok())
}

/// The HMAC state after feeding it the signed content, ready to finalize or verify.
fn mac(key: &[u8], msg_id: &str, timestamp_s: u64, body: &[u8]) -> HmacSha256 {
    let mut mac = <HmacSha256 as KeyInit>::new(&key_block(key));
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp_s.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The key as one hash block, as RFC 2104 derives it: a key longer than the block is hashed first,
/// then the result is padded with zeros. HMAC keyed with this block equals HMAC keyed with `key`;
/// deriving it here makes the infallible constructor usable, where `new_from_slice` returns a
/// `Result` whose error cannot happen for HMAC.
fn key_block(key: &[u8]) -> Key<HmacSha256> {
    let mut block = Key::<HmacSha256>::default();
    let digest;
    let key = if key.len() > block.len() {
        digest = Sha256::digest(key);
        digest.as_slice()
    } else {
        key
    };
    for (dst, src) in block.iter_mut().zip(key) {
        *dst = *src;
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Standard Webhooks reference test vector.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: u64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn key() -> Vec<u8> {
        secret_key(SECRET).unwrap()
    }

    #[test]
    fn signs_the_reference_vector() {
        assert_eq!(sign(&key(), MSG_ID, TIMESTAMP, BODY), SIGNATURE);
    }

    #[test]
    fn verifies_the_reference_vector() {
        assert!(verify(&key(), MSG_ID, TIMESTAMP, BODY, SIGNATURE));
    }

    #[test]
    fn refuses_a_changed_message() {
        let key = key();
        assert!(!verify(&key, "msg_other", TIMESTAMP, BODY, SIGNATURE));
        assert!(!verify(&key, MSG_ID, TIMESTAMP + 1, BODY, SIGNATURE));
        assert!(!verify(&key, MSG_ID, TIMESTAMP, b"{}", SIGNATURE));
        assert!(!verify(&[7u8; 24], MSG_ID, TIMESTAMP, BODY, SIGNATURE));
    }

    #[test]
    fn finds_the_matching_entry_among_several() {
        let header = format!("v1,Zm9vYmFy v2,abc garbage {SIGNATURE} v1a,xyz");
        assert!(verify(&key(), MSG_ID, TIMESTAMP, BODY, &header));
    }

    #[test]
    fn ignores_other_versions_and_malformed_entries() {
        let key = key();
        let tag = SIGNATURE.trim_start_matches("v1,");
        for header in [
            "",
            " ",
            "v1,",
            "v1,not base64!",
            tag,
            &format!("v2,{tag}"),
            &format!("v1,{}", &tag[..tag.len() - 4]),
        ] {
            assert!(!verify(&key, MSG_ID, TIMESTAMP, BODY, header), "{header:?}");
        }
    }

    #[test]
    fn accepts_keys_of_16_to_64_bytes() {
        for len in [16, 24, 32, 64] {
            let secret = format!("{SECRET_PREFIX}{}", STANDARD.encode(vec![1u8; len]));
            assert_eq!(secret_key(&secret).unwrap(), vec![1u8; len]);
        }
    }

    #[test]
    fn refuses_malformed_secrets_with_the_rule() {
        let rule = "must be \"whsec_\" followed by 16 to 64 bytes in base64";
        for secret in [
            "",
            "whsec_",
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_not*base64",
            &format!("whsec_{}", STANDARD.encode([1u8; 15])),
            &format!("whsec_{}", STANDARD.encode([1u8; 65])),
        ] {
            assert_eq!(secret_key(secret).unwrap_err(), rule, "{secret:?}");
        }
    }

    #[test]
    fn the_key_block_gives_the_same_mac_as_the_raw_key() {
        for len in [0, 1, 16, 32, 63, 64, 65, 128, 200] {
            let key: Vec<u8> = (0..len).map(|i| u8::try_from(i % 251).unwrap()).collect();
            let mut reference = <HmacSha256 as KeyInit>::new_from_slice(&key).unwrap();
            reference.update(b"msg.1.body");
            let ours = mac(&key, "msg", 1, b"body");
            assert_eq!(
                ours.finalize().into_bytes(),
                reference.finalize().into_bytes(),
                "key of {len} bytes"
            );
        }
    }

    #[test]
    fn generated_secrets_are_valid_and_distinct() {
        let first = generate_secret().unwrap();
        let second = generate_secret().unwrap();
        assert!(first.starts_with(SECRET_PREFIX));
        assert_eq!(secret_key(&first).unwrap().len(), GENERATED_KEY_BYTES);
        assert_ne!(first, second);
    }

    #[test]
    fn a_generated_secret_round_trips_through_sign_and_verify() {
        let key = secret_key(&generate_secret().unwrap()).unwrap();
        let signature = sign(&key, MSG_ID, TIMESTAMP, BODY);
        assert!(verify(&key, MSG_ID, TIMESTAMP, BODY, &signature));
    }
}
