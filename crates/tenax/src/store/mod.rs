//! Storage: the seam every backend implements ([`seam`]), its own mechanics (its error, the
//! records backends keep, the engine's decision closures; the domain's types are
//! [`crate::model`]'s), and the backends (the embedded store, and PostgreSQL for several
//! servers). One conformance suite (`tests/conformance/`, one file per family of the seam) runs
//! against every backend.
//!
//! The store decides nothing: transitions that need a decision take a closure from the engine
//! (see [`seam`]). Only the engine calls the store.

pub mod embedded;
pub mod postgres;
pub mod sealed;
mod seam;
mod types;

use std::path::PathBuf;
use std::sync::Arc;

pub use embedded::EmbeddedStore;
pub use postgres::PostgresStore;
pub use seam::*;
pub use types::*;

use crate::clock::Clock;

/// Where the data lives and how to open it.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// The embedded store in a data directory.
    Embedded {
        dir: PathBuf,
        options: embedded::EmbeddedOptions,
    },
    /// PostgreSQL, shared by any number of servers.
    Postgres(postgres::PostgresOptions),
}

impl StoreConfig {
    /// The clock that decides with this store: servers sharing a database decide by its clock,
    /// not each by its own (docs/postgres.md, "Whose clock decides what"); any other clock,
    /// and a manual one (tests), stays as it is.
    pub fn deciding_clock(&self, clock: Clock) -> Clock {
        match (self, clock) {
            (Self::Postgres(_), Clock::System) => Clock::database(),
            (_, clock) => clock,
        }
    }

    /// Opens the backend this names, at the time `clock` says (on PostgreSQL, a
    /// [`Clock::Database`] is sampled by the store, which keeps it up to date).
    pub async fn open(&self, clock: &Clock) -> Result<Arc<dyn Store>, StoreError> {
        match self {
            Self::Embedded { dir, options } => {
                let (dir, options, now_ms) = (dir.clone(), options.clone(), clock.now_ms());
                let opened = tokio::task::spawn_blocking(move || {
                    EmbeddedStore::open(&dir, &options, now_ms)
                })
                .await
                .map_err(|e| StoreError::storage("opening the embedded store", e))??;
                Ok(Arc::new(opened))
            }
            Self::Postgres(options) => Ok(Arc::new(PostgresStore::open(options, clock).await?)),
        }
    }
}

/// Serialises a value that cannot fail to serialise (our own types) to JSON bytes.
pub(crate) fn to_json_bytes<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Parses JSON bytes the store wrote itself.
pub(crate) fn from_json_bytes<T: serde::de::DeserializeOwned>(
    what: &str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
