//! Which store the server runs on, and opening it: the embedded store in a data directory, or
//! PostgreSQL (`tenax-embedded`, `tenax-postgres`, both built on the seam of `tenax-core`).
//! `config.rs` builds a [`StoreConfig`] from the flags and `server.rs` opens it.

use std::path::PathBuf;
use std::sync::Arc;

use tenax_core::clock::Clock;
use tenax_core::store::{Store, StoreError};
use tenax_embedded::{EmbeddedOptions, EmbeddedStore};
use tenax_postgres::PostgresOptions;

/// Where the data lives and how to open it.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// The embedded store in a data directory.
    Embedded {
        dir: PathBuf,
        options: EmbeddedOptions,
    },
    /// PostgreSQL, shared by any number of servers.
    Postgres(PostgresOptions),
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
            // With pools in its catalogue, the pooled store (docs/postgres.md, "Pools").
            Self::Postgres(options) => tenax_pools::open(options, clock).await,
        }
    }
}
