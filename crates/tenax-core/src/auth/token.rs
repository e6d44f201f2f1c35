//! API tokens: `tnx_` and 43 characters of URL-safe base64 (32 random bytes, 256 bits). The
//! token is shown once, in the answer that creates it; the store keeps its SHA-256, its name,
//! role and scopes, when it was made and (about) when it was last used.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::TryRngCore as _;
use rand::rngs::OsRng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::role::Role;
use crate::clock::UnixMs;

/// The prefix of every token, so a leaked one is recognisable (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "tnx_";

/// Random bytes in a token.
const TOKEN_BYTES: usize = 32;

/// A token as stored: everything but the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: u64,
    pub name: String,
    /// Lowercase hex SHA-256 of the token.
    pub hash: String,
    pub role: Role,
    /// Queue-name patterns it may touch; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<String>,
    /// Zaqar project ids (patterns) it may act for; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
    pub created_at_ms: UnixMs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at_ms: Option<UnixMs>,
}

/// A new token: its secret (to show once) and its record (to store).
#[derive(Debug)]
pub struct NewToken {
    pub secret: String,
    pub record: TokenRecord,
}

/// A new token's secret: [`TOKEN_PREFIX`] and 32 bytes of the operating system's randomness.
pub fn generate() -> std::io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(std::io::Error::other)?;
    Ok(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// The stored form of a token: lowercase hex SHA-256.
pub fn hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        hex.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    hex
}

/// The rule a token given by an operator (`--admin-token`) must keep: long enough to be
/// unguessable, and of characters that survive a header.
pub fn check_given(secret: &str) -> Result<(), String> {
    let valid_chars = secret
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.~+/=".contains(&b));
    if secret.len() < 32 || !valid_chars {
        return Err(
            "must be at least 32 characters of letters, digits and -_.~+/= (generate one with \
             `openssl rand -base64 32`)"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_hashed() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert!(
            a.starts_with(TOKEN_PREFIX) && a.len() == TOKEN_PREFIX.len() + 43,
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(hash(&a), hash(&a));
        assert_ne!(hash(&a), hash(&b));
        assert_eq!(
            hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(check_given("short").is_err());
        assert!(check_given(&"x".repeat(32)).is_ok());
        assert!(check_given(&format!("{}\n", "x".repeat(40))).is_err());
    }
}
