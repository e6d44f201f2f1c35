//! Secrets at rest: the keys that seal what the store must not keep in clear (webhook
//! subscriptions' secrets, header values and options: `crate::store::sealed`), and the files
//! only Tenax's own user may read.
//!
//! - [`key`]: a secrets key, its id, and the key ring a key file holds (the key that seals,
//!   then earlier keys that still open what they sealed, during a rotation).
//! - [`seal`]: AES-256-GCM with a random nonce per value; a sealed value names its key.
//! - [`payload_key`]: the data key of encrypted queues' payloads, kept in the store sealed by
//!   the key ring (envelope encryption: a rotation re-seals this key, not the payloads).
//! - [`files`]: the data directory made 0700 and every file Tenax writes in it 0600; looser ones
//!   found at start are named in a warning.
//!
//! The operator's side (where the key comes from, how to rotate it) is in docs/security.md.

pub mod files;
pub mod key;
pub mod payload_key;
pub mod seal;

pub use key::{KeyId, Keyring, SECRETS_KEY_FILE};
pub use payload_key::{PayloadError, PayloadKey};
pub use seal::{OpenError, Sealed};
