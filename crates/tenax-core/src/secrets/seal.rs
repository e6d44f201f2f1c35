//! Sealing values: AES-256-GCM (ring) with a random 96-bit nonce per value, and associated data
//! that binds a value to what it belongs to (a sealed value moved to another record does not
//! open).
//!
//! A sealed value is stored as `{"v": 1, "key": "<key id>", "box": "<base64>"}`: `v` names the
//! algorithm and layout (1: AES-256-GCM; the box is the 12-byte nonce, the ciphertext, then the
//! 16-byte tag); `key` the key that sealed it, so that during a rotation an old value is opened
//! with the old key, and a value sealed with a key this server lacks is refused by name rather
//! than failing as if damaged.
//!
//! Nonces are random: AES-GCM stays safe for 2^32 values sealed under one key, and a value is
//! sealed once per write of its record, far fewer times than that.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{Aad, LessSafeKey, NONCE_LEN, Nonce};
use ring::rand::{SecureRandom as _, SystemRandom};
use serde::{Deserialize, Serialize};

use super::key::{KeyId, Keyring};

/// The only layout so far.
const VERSION: u32 = 1;

/// A sealed value, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    pub v: u32,
    pub key: KeyId,
    #[serde(rename = "box")]
    pub data: String,
}

/// Why a sealed value does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("it is sealed with key {0}, which is not among the keys held")]
    UnknownKey(KeyId),
    #[error("it is sealed in layout {0}, which this version of Tenax does not know")]
    Version(u32),
    #[error(
        "it is sealed with key {0} but does not open with it: damaged, or moved from another record"
    )]
    Damaged(KeyId),
}

impl Keyring {
    /// Seals `plain` with the sealing key, bound to `aad`. Fails only if the system's random
    /// source does.
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> std::io::Result<Sealed> {
        let key = self.current();
        let mut data = Vec::with_capacity(NONCE_LEN + plain.len() + 16);
        seal_box(key.aead(), aad, plain, &mut data)?;
        Ok(Sealed {
            v: VERSION,
            key: key.id(),
            data: STANDARD.encode(data),
        })
    }

    /// Opens a value sealed with any key held, bound to `aad`.
    pub fn open(&self, sealed: &Sealed, aad: &[u8]) -> Result<Vec<u8>, OpenError> {
        if sealed.v != VERSION {
            return Err(OpenError::Version(sealed.v));
        }
        let key = self
            .key(sealed.key)
            .ok_or(OpenError::UnknownKey(sealed.key))?;
        let damaged = || OpenError::Damaged(sealed.key);
        let data = STANDARD.decode(&sealed.data).map_err(|_| damaged())?;
        open_box(key.aead(), aad, &data).ok_or_else(damaged)
    }
}

/// Fills `bytes` from the system's random source.
pub(super) fn random(bytes: &mut [u8]) -> std::io::Result<()> {
    SystemRandom::new()
        .fill(bytes)
        .map_err(|_| std::io::Error::other("the system's random source failed"))
}

/// Appends the box of `plain` sealed with `aead`, bound to `aad`, to `out`: a fresh random
/// nonce, the ciphertext, then the 16-byte tag. Every sealed value of Tenax is such a box.
pub(super) fn seal_box(
    aead: &LessSafeKey,
    aad: &[u8],
    plain: &[u8],
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let mut nonce = [0u8; NONCE_LEN];
    random(&mut nonce)?;
    out.extend_from_slice(&nonce);
    let start = out.len();
    out.extend_from_slice(plain);
    let tag = aead
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut out[start..],
        )
        .map_err(|_| std::io::Error::other("sealing failed"))?;
    out.extend_from_slice(tag.as_ref());
    Ok(())
}

/// The plain text of a box [`seal_box`] made, if it opens with `aead` and `aad`.
pub(super) fn open_box(aead: &LessSafeKey, aad: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < NONCE_LEN {
        return None;
    }
    let (nonce, sealed) = data.split_at(NONCE_LEN);
    let nonce = <[u8; NONCE_LEN]>::try_from(nonce).ok()?;
    let mut sealed = sealed.to_vec();
    let len = aead
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut sealed,
        )
        .ok()?
        .len();
    sealed.truncate(len);
    Some(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::key::Key;

    #[test]
    fn a_sealed_value_opens_only_with_its_key_and_its_associated_data() {
        let ring = Keyring::generate("test").unwrap();
        let sealed = ring.seal(b"subscription 1", b"whsec_hunter2").unwrap();
        assert_eq!(sealed.key, ring.current().id());
        assert!(!sealed.data.contains("hunter2"));
        assert_eq!(
            ring.open(&sealed, b"subscription 1").unwrap(),
            b"whsec_hunter2"
        );
        // Moved to another record.
        assert_eq!(
            ring.open(&sealed, b"subscription 2"),
            Err(OpenError::Damaged(sealed.key))
        );
        // Another key.
        let other = Keyring::generate("other").unwrap();
        assert_eq!(
            other.open(&sealed, b"subscription 1"),
            Err(OpenError::UnknownKey(sealed.key))
        );
        // A flipped bit, a cut box, an unknown layout.
        let mut bytes = STANDARD.decode(&sealed.data).unwrap();
        bytes[NONCE_LEN] ^= 1;
        let flipped = Sealed {
            data: STANDARD.encode(&bytes),
            ..sealed.clone()
        };
        assert!(matches!(
            ring.open(&flipped, b"subscription 1"),
            Err(OpenError::Damaged(_))
        ));
        let cut = Sealed {
            data: STANDARD.encode(&bytes[..5]),
            ..sealed.clone()
        };
        assert!(matches!(
            ring.open(&cut, b"subscription 1"),
            Err(OpenError::Damaged(_))
        ));
        let future = Sealed { v: 2, ..sealed };
        assert_eq!(
            ring.open(&future, b"subscription 1"),
            Err(OpenError::Version(2))
        );
    }

    #[test]
    fn during_a_rotation_both_keys_open_and_the_new_one_seals() {
        let old = Keyring::generate("test").unwrap();
        let before = old.seal(b"a", b"one").unwrap();
        let both = old.sealing_with(Key::generate().unwrap());
        let after = both.seal(b"a", b"two").unwrap();
        assert_ne!(before.key, after.key);
        assert_eq!(both.open(&before, b"a").unwrap(), b"one");
        assert_eq!(both.open(&after, b"a").unwrap(), b"two");
        // Each seal has its own nonce.
        assert_ne!(both.seal(b"a", b"two").unwrap().data, after.data);
    }
}
