//! The cluster's answers: its servers with the workers each has seen (`GET /api/cluster`), and
//! its activity per minute (`GET /api/activity`).

use std::time::SystemTime;

use serde::Deserialize;

use crate::time::{rfc3339, rfc3339_opt};

/// Every live server of the cluster, by id.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Cluster {
    pub servers: Vec<ServerInfo>,
}

impl Cluster {
    /// The server that answered.
    pub fn this(&self) -> Option<&ServerInfo> {
        self.servers.iter().find(|s| s.this)
    }

    /// Every worker of every server.
    pub fn workers(&self) -> impl Iterator<Item = &WorkerInfo> {
        self.servers.iter().flat_map(|s| s.workers.iter())
    }
}

/// A live server: what it says of itself, and the workers it has seen.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct ServerInfo {
    /// Its id in the store (16 hex digits, new at each start).
    pub id: String,
    /// Whether it is the server that answered.
    pub this: bool,
    /// The version of Tenax it runs (`None`: a server that does not say).
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default, deserialize_with = "rfc3339_opt::deserialize")]
    pub started_at: Option<SystemTime>,
    /// When it last wrote its row (every second on PostgreSQL).
    #[serde(deserialize_with = "rfc3339::deserialize")]
    pub seen_at: SystemTime,
    /// Whether it leads the maintenance.
    pub leads: bool,
    /// Where it listens.
    #[serde(default)]
    pub address: Option<String>,
    /// The workers it has seen in the last 5 minutes, most recently seen first.
    #[serde(default)]
    pub workers: Vec<WorkerInfo>,
}

/// A worker, as the server it takes from has seen it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// The name it gave ([`Client::with_worker`](crate::Client::with_worker)), else its address
    /// and User-Agent.
    pub name: String,
    /// The queues it took from lately.
    pub queues: Vec<String>,
    /// The jobs it holds now (leases that server handed it and that are still running).
    pub in_flight: u64,
    /// Whether it has a stream open, and how many.
    pub streaming: bool,
    pub streams: u32,
    /// Its last take, stream or heartbeat (now, while a stream is open).
    #[serde(deserialize_with = "rfc3339::deserialize")]
    pub seen_at: SystemTime,
}

/// The cluster's activity: every minute of the window, oldest first, and the sums.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Activity {
    pub minutes: Vec<ActivityMinute>,
    pub total: ActivityCounts,
}

/// One minute: its start and its counts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct ActivityMinute {
    #[serde(deserialize_with = "rfc3339::deserialize")]
    pub at: SystemTime,
    #[serde(flatten)]
    pub counts: ActivityCounts,
}

/// What happened in a minute, or over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct ActivityCounts {
    pub enqueued: u64,
    pub completed: u64,
    /// Failed runs (a worker's failure or an expired lease), retried or not.
    pub failed: u64,
    /// Jobs and deliveries that died.
    pub dead: u64,
    /// Webhook attempts that delivered, and that failed.
    pub delivered: u64,
    pub delivery_failed: u64,
}
