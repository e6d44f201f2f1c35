//! The data key of encrypted queues (envelope encryption): one random 256-bit key per store,
//! kept in the store sealed by the secrets key ring (`Keyring::seal`, like a subscription's
//! secrets), and used to seal the payloads of the queues that ask for it.
//!
//! A rotation of the secrets key re-seals this key only: payloads sealed with it stay as they
//! are and open as before. Every server sharing a store opens the one data key it holds.
//!
//! A sealed payload is the standard base64 of: one layout byte ([`LAYOUT`]: AES-256-GCM), the
//! 12-byte random nonce, the ciphertext, then the 16-byte tag. Its associated data binds it to
//! its job (the engine says what that is), so a payload copied to another job does not open.
//!
//! Invariants: no `Debug` of a type here shows key bytes; a payload is sealed with a fresh
//! random nonce each time (AES-GCM stays safe for 2^32 values under one key: a store that
//! sealed more payloads than that needs a new data key, which docs/security.md says).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, LessSafeKey, NONCE_LEN, UnboundKey};

use super::key::Keyring;
use super::seal::{OpenError, Sealed, open_box, random, seal_box};

/// Bytes in the data key.
const KEY_LEN: usize = 32;

/// The layout of a sealed payload: 1 is AES-256-GCM, nonce first, tag last.
const LAYOUT: u8 = 1;

/// The associated data of the data key's own box: it opens only as the data key.
const KEY_AAD: &[u8] = b"tenax payload data key";

/// Why a sealed payload does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("it is not a sealed payload (not base64, or too short)")]
    Malformed,
    #[error("it is sealed in layout {0}, which this version of Tenax does not know")]
    Layout(u8),
    #[error("it does not open with the store's data key: damaged, or moved from another job")]
    Damaged,
}

/// The store's data key, ready to seal and open payloads.
#[derive(Clone)]
pub struct PayloadKey {
    bytes: [u8; KEY_LEN],
    aead: std::sync::Arc<LessSafeKey>,
}

impl fmt::Debug for PayloadKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PayloadKey(..)")
    }
}

impl PayloadKey {
    fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        // A 32-byte key is what AES-256-GCM takes: this cannot fail.
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes).expect("32 bytes are an AES-256 key");
        Self {
            bytes,
            aead: std::sync::Arc::new(LessSafeKey::new(unbound)),
        }
    }

    /// A new data key from the operating system's random source.
    pub fn generate() -> std::io::Result<Self> {
        let mut bytes = [0u8; KEY_LEN];
        random(&mut bytes)?;
        Ok(Self::from_bytes(bytes))
    }

    /// The data key sealed by `keys`' sealing key, as the store keeps it.
    pub fn sealed_by(&self, keys: &Keyring) -> std::io::Result<Sealed> {
        keys.seal(KEY_AAD, &self.bytes)
    }

    /// The data key the store keeps, opened with any key of `keys`.
    pub fn open_with(sealed: &Sealed, keys: &Keyring) -> Result<Self, OpenError> {
        let plain = keys.open(sealed, KEY_AAD)?;
        let bytes = <[u8; KEY_LEN]>::try_from(plain.as_slice())
            .map_err(|_| OpenError::Damaged(sealed.key))?;
        Ok(Self::from_bytes(bytes))
    }

    /// Seals `plain`, bound to `aad`: the text to store (base64, see the module's comment).
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> std::io::Result<String> {
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + plain.len() + 16);
        sealed.push(LAYOUT);
        seal_box(&self.aead, aad, plain, &mut sealed)?;
        Ok(STANDARD.encode(sealed))
    }

    /// Opens the text [`PayloadKey::seal`] made, bound to `aad`.
    pub fn open(&self, aad: &[u8], text: &str) -> Result<Vec<u8>, PayloadError> {
        let data = STANDARD.decode(text).map_err(|_| PayloadError::Malformed)?;
        let (&layout, rest) = data.split_first().ok_or(PayloadError::Malformed)?;
        if layout != LAYOUT {
            return Err(PayloadError::Layout(layout));
        }
        if rest.len() < NONCE_LEN {
            return Err(PayloadError::Malformed);
        }
        open_box(&self.aead, aad, rest).ok_or(PayloadError::Damaged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::key::Key;

    #[test]
    fn a_payload_opens_only_with_its_key_and_its_job() {
        let key = PayloadKey::generate().unwrap();
        let text = key.seal(b"job 1", br#"{"card":"4111"}"#).unwrap();
        assert!(!text.contains("4111"));
        assert_eq!(key.open(b"job 1", &text).unwrap(), br#"{"card":"4111"}"#);
        assert_eq!(key.open(b"job 2", &text), Err(PayloadError::Damaged));
        let other = PayloadKey::generate().unwrap();
        assert_eq!(other.open(b"job 1", &text), Err(PayloadError::Damaged));
        // A fresh nonce each time.
        assert_ne!(
            key.seal(b"job 1", b"x").unwrap(),
            key.seal(b"job 1", b"x").unwrap()
        );
        assert_eq!(
            key.open(b"job 1", "not base64!"),
            Err(PayloadError::Malformed)
        );
        assert_eq!(key.open(b"job 1", ""), Err(PayloadError::Malformed));
        let mut bytes = STANDARD.decode(&text).unwrap();
        bytes[0] = 9;
        assert_eq!(
            key.open(b"job 1", &STANDARD.encode(&bytes)),
            Err(PayloadError::Layout(9))
        );
        assert_eq!(format!("{key:?}"), "PayloadKey(..)");
    }

    #[test]
    fn the_data_key_survives_a_rotation_of_the_keyring() {
        let old = Keyring::generate("old").unwrap();
        let key = PayloadKey::generate().unwrap();
        let stored = key.sealed_by(&old).unwrap();
        let text = key.seal(b"a", b"payload").unwrap();
        // During a rotation both keys open; the new one re-seals the same data key.
        let both = old.sealing_with(Key::generate().unwrap());
        let resealed = PayloadKey::open_with(&stored, &both)
            .unwrap()
            .sealed_by(&both)
            .unwrap();
        assert_eq!(resealed.key, both.current().id());
        let new_only = both.current_only();
        let reopened = PayloadKey::open_with(&resealed, &new_only).unwrap();
        assert_eq!(reopened.open(b"a", &text).unwrap(), b"payload");
        assert!(PayloadKey::open_with(&stored, &new_only).is_err());
    }
}
