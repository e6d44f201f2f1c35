//! The servers of the cluster: what this server says of itself (its version, start, address,
//! whether it leads, and the workers it has seen), which the store writes with its row, and
//! the list of every live server with theirs. On the embedded store the cluster is this server.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use super::workers::WorkerBook;
use super::{Engine, EngineError};
use crate::clock::UnixMs;
use crate::model::{LiveServer, ServerAbout};

/// This server, as it describes itself to the others.
#[derive(Debug)]
pub struct ThisServer {
    started_at_ms: UnixMs,
    identity: RwLock<Identity>,
    /// Whether the maintenance loop led the last time it asked the store.
    leads: AtomicBool,
    /// The workers seen lately.
    pub workers: WorkerBook,
}

#[derive(Debug, Clone)]
struct Identity {
    version: String,
    address: Option<String>,
}

impl ThisServer {
    pub(super) fn new(started_at_ms: UnixMs) -> Self {
        Self {
            started_at_ms,
            identity: RwLock::new(Identity {
                version: env!("CARGO_PKG_VERSION").to_owned(),
                address: None,
            }),
            leads: AtomicBool::new(false),
            workers: WorkerBook::default(),
        }
    }

    pub(super) fn set_leads(&self, leads: bool) {
        self.leads.store(leads, Ordering::Relaxed);
    }

    /// What it says of itself at `now_ms`.
    pub fn about(&self, now_ms: UnixMs) -> ServerAbout {
        let identity = self.identity.read().clone();
        ServerAbout {
            version: identity.version,
            started_at_ms: self.started_at_ms,
            leads: self.leads.load(Ordering::Relaxed),
            address: identity.address,
            workers: self.workers.workers(now_ms),
        }
    }
}

impl Engine {
    /// Whether this server led the maintenance the last time its loop asked the store (on the
    /// embedded store, the one server always does once its loop has run).
    pub fn leads_maintenance(&self) -> bool {
        self.this_server.leads.load(Ordering::Relaxed)
    }

    /// Names the version this server runs and where it listens, for the others to read.
    pub fn identify(&self, version: &str, address: Option<String>) {
        *self.this_server.identity.write() = Identity {
            version: version.to_owned(),
            address,
        };
    }

    /// The workers this server has seen lately ([`super::workers`]).
    pub fn workers(&self) -> &WorkerBook {
        &self.this_server.workers
    }

    /// Every live server of the cluster by id, this one included, with what each says of
    /// itself. This server's own description is made now; the others' are as they last wrote
    /// them (on PostgreSQL, within a second).
    pub async fn live_servers(&self) -> Result<Vec<LiveServer>, EngineError> {
        let now = self.now_ms();
        let mut servers = self.store.live_servers(now).await?;
        for server in servers.iter_mut().filter(|s| s.this) {
            server.about = Some(self.this_server.about(now));
        }
        Ok(servers)
    }
}
