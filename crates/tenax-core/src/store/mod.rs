//! The storage seam: the traits every backend implements ([`seam`]), and its own mechanics
//! (its error, the records backends keep, the engine's decision closures; the domain's types are
//! [`crate::model`]'s). The backends are crates of their own (`tenax-embedded`, and
//! `tenax-postgres` for several servers), built on this one; one conformance suite
//! (`crates/tenax/tests/it/conformance/`, one file per family of the seam) runs against every
//! backend.
//!
//! The store decides nothing: transitions that need a decision take a closure from the engine
//! (see [`seam`]). Only the engine calls the store.

pub mod sealed;
mod seam;
mod types;

pub use seam::*;
pub use types::*;

/// Serialises a value that cannot fail to serialise (our own types) to JSON bytes.
pub fn to_json_bytes<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Parses JSON bytes the store wrote itself.
pub fn from_json_bytes<T: serde::de::DeserializeOwned>(
    what: &str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
