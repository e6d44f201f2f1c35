//! Secrets keys and the key files that hold them.
//!
//! A key is 32 random bytes (AES-256). Its id is the first 8 bytes of SHA-256 over a fixed label
//! and the key: every sealed value names the key that sealed it, and each store records the id
//! of the key that seals it, so a value or a store sealed with another key is told apart before
//! anything is opened with the wrong one. An id reveals nothing usable of its key (a hash of 256
//! random bits).
//!
//! A key file is text: one key per line, in standard base64 (44 characters); blank lines and
//! lines starting with `#` are ignored. The first key seals; the others only open what they
//! sealed (during a rotation). Key files are written whole or not at all, readable by their
//! owner only (mode 0600: [`super::files::write_private`]).
//!
//! Invariants: a [`Keyring`] holds at least one key and no key twice; no `Debug` or `Display`
//! of any type here shows a key, only ids.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, LessSafeKey, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};

/// The key file the embedded store makes in its data directory when no key file is given.
pub const SECRETS_KEY_FILE: &str = "secrets.key";

/// Bytes in a key.
const KEY_LEN: usize = 32;

/// What the id hashes before the key, so that an id is never the hash of the key alone.
const ID_LABEL: &[u8] = b"tenax secrets key id\0";

/// The first lines of a key file Tenax writes.
const FILE_HEADER: &str = "# Tenax secrets key (docs/security.md). The first key seals; any after it only opens\n\
                           # what it sealed. Keep a copy apart from the data: without it, stored webhook\n\
                           # secrets and header values cannot be read.\n";

/// A key's id: 16 hex digits wherever it is shown or stored as text.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub u64);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

impl std::str::FromStr for KeyId {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.len() != 16 {
            return Err(format!("{text:?} is not a key id (16 hex digits)"));
        }
        u64::from_str_radix(text, 16)
            .map(Self)
            .map_err(|_| format!("{text:?} is not a key id (16 hex digits)"))
    }
}

impl serde::Serialize for KeyId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for KeyId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// One key, ready to seal and open.
#[derive(Clone)]
pub struct Key {
    id: KeyId,
    bytes: [u8; KEY_LEN],
    aead: LessSafeKey,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Key {
    fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, &[ID_LABEL, &bytes].concat());
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest.as_ref()[..8]);
        // A 32-byte key is what AES-256-GCM takes: this cannot fail.
        let unbound = UnboundKey::new(&AES_256_GCM, &bytes).expect("32 bytes are an AES-256 key");
        Self {
            id: KeyId(u64::from_be_bytes(id)),
            bytes,
            aead: LessSafeKey::new(unbound),
        }
    }

    /// A new key from the operating system's random source.
    pub fn generate() -> std::io::Result<Self> {
        let mut bytes = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| std::io::Error::other("the system's random source failed"))?;
        Ok(Self::from_bytes(bytes))
    }

    pub fn id(&self) -> KeyId {
        self.id
    }

    pub(super) fn aead(&self) -> &LessSafeKey {
        &self.aead
    }

    /// The key as a key file's line.
    fn line(&self) -> String {
        STANDARD.encode(self.bytes)
    }
}

/// The keys a server holds: the first seals, every one opens what it sealed.
#[derive(Clone)]
pub struct Keyring {
    keys: Vec<Key>,
    /// Where the keys came from, for messages: a key file's path.
    source: String,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("keys", &self.keys.iter().map(Key::id).collect::<Vec<_>>())
            .field("source", &self.source)
            .finish()
    }
}

impl Keyring {
    /// A key ring of one new key.
    pub fn generate(source: impl Into<String>) -> std::io::Result<Self> {
        Ok(Self {
            keys: vec![Key::generate()?],
            source: source.into(),
        })
    }

    /// Parses a key file's text; `source` names it in errors.
    pub fn parse(text: &str, source: impl Into<String>) -> Result<Self, String> {
        let source = source.into();
        let mut keys: Vec<Key> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bytes = STANDARD
                .decode(line)
                .ok()
                .and_then(|bytes| <[u8; KEY_LEN]>::try_from(bytes).ok())
                .ok_or_else(|| {
                    format!(
                        "{source}: line {} is not a key: a key is {KEY_LEN} bytes in standard \
                         base64 (44 characters; `tenax secrets generate-key` makes one)",
                        n + 1
                    )
                })?;
            let key = Key::from_bytes(bytes);
            if keys.iter().any(|k| k.id == key.id) {
                return Err(format!("{source}: line {} repeats key {}", n + 1, key.id));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(format!(
                "{source} holds no key (`tenax secrets generate-key` makes a key file)"
            ));
        }
        Ok(Self { keys, source })
    }

    /// Reads a key file. (Whether others may read it is for the caller to say, once logging
    /// is set up: [`super::files::warn_if_loose`].)
    pub fn read_file(path: &Path) -> Result<Self, String> {
        let shown = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        Self::parse(&text, shown)
    }

    /// The key file's text: a comment, then one key per line, the sealing key first.
    pub fn to_text(&self) -> String {
        let mut text = FILE_HEADER.to_owned();
        for key in &self.keys {
            text.push_str(&key.line());
            text.push('\n');
        }
        text
    }

    /// Writes the key ring to `path` (mode 0600), whole or not at all.
    pub fn write_file(&self, path: &Path) -> std::io::Result<()> {
        super::files::write_private(path, &self.to_text())
    }

    /// The key that seals.
    pub fn current(&self) -> &Key {
        // Never empty: every constructor makes or checks at least one key.
        &self.keys[0]
    }

    /// A 32-byte key for `purpose`, derived from the sealing key (HMAC-SHA256 of the purpose
    /// under it): every server given the same key file derives the same key, and no derived key
    /// reveals the sealing key. A new sealing key (a rotation) derives other keys.
    pub fn derive(&self, purpose: &[u8]) -> [u8; KEY_LEN] {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.current().bytes);
        let tag = ring::hmac::sign(&key, purpose);
        let mut derived = [0u8; KEY_LEN];
        derived.copy_from_slice(tag.as_ref());
        derived
    }

    /// The key of id `id`, if held.
    pub fn key(&self, id: KeyId) -> Option<&Key> {
        self.keys.iter().find(|k| k.id == id)
    }

    pub fn holds(&self, id: KeyId) -> bool {
        self.key(id).is_some()
    }

    /// The ids of the keys held, the sealing one first, as a list for messages.
    pub fn ids(&self) -> String {
        self.keys
            .iter()
            .map(|k| k.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Where the keys came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// This key ring with `key` sealing, every key it held still opening.
    pub fn sealing_with(&self, key: Key) -> Self {
        let first = key.id;
        let mut keys = vec![key];
        keys.extend(self.keys.iter().filter(|k| k.id != first).cloned());
        Self {
            keys,
            source: self.source.clone(),
        }
    }

    /// The sealing key alone.
    pub fn current_only(&self) -> Self {
        Self {
            keys: vec![self.current().clone()],
            source: self.source.clone(),
        }
    }

    /// The same keys, said to come from `source`.
    pub fn named(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_follow_the_sealing_key_and_the_purpose() {
        let one = Keyring::generate("a").unwrap();
        let again = Keyring::parse(&one.to_text(), "b").unwrap();
        assert_eq!(one.derive(b"x"), again.derive(b"x"));
        assert_ne!(one.derive(b"x"), one.derive(b"y"));
        let other = Keyring::generate("c").unwrap();
        assert_ne!(one.derive(b"x"), other.derive(b"x"));
    }

    #[test]
    fn a_key_file_round_trips_and_its_first_key_seals() {
        let one = Keyring::generate("test").unwrap();
        let two = one.sealing_with(Key::generate().unwrap());
        let text = two.to_text();
        let read = Keyring::parse(&text, "file").unwrap();
        assert_eq!(read.ids(), two.ids());
        assert_eq!(read.current().id(), two.current().id());
        assert!(read.holds(one.current().id()));
        assert_ne!(read.current().id(), one.current().id());
        assert_eq!(read.current_only().ids(), read.current().id().to_string());
        // The same key twice stays once, first.
        let again = two.sealing_with(two.current().clone());
        assert_eq!(again.ids(), two.ids());
    }

    #[test]
    fn ids_and_debug_never_show_the_key() {
        let ring = Keyring::generate("test").unwrap();
        let line = ring.current().line();
        let shown = format!("{ring:?} {:?} {}", ring.current(), ring.ids());
        assert!(!shown.contains(&line), "{shown}");
        assert!(!shown.contains(&line[..12]), "{shown}");
        let id = ring.current().id();
        assert_eq!(id.to_string().parse::<KeyId>().unwrap(), id);
        assert_eq!(serde_json::to_string(&id).unwrap(), format!("\"{id}\""));
    }

    #[test]
    fn a_bad_key_file_is_refused_with_its_line() {
        let err = |text: &str| Keyring::parse(text, "k.key").unwrap_err();
        assert!(err("").contains("k.key holds no key"), "{}", err(""));
        assert!(err("# only a comment\n\n").contains("holds no key"));
        let short = err("# c\nAAAA\n");
        assert!(short.starts_with("k.key: line 2 is not a key"), "{short}");
        assert!(err("not base64 at all!!\n").contains("line 1 is not a key"));
        let key = Keyring::generate("t").unwrap().current().line();
        let twice = err(&format!("{key}\n{key}\n"));
        assert!(twice.contains("line 2 repeats key"), "{twice}");
        // Spaces around a key, and comments, are fine.
        assert!(Keyring::parse(&format!("  {key}  \n# old\n"), "k").is_ok());
    }
}
