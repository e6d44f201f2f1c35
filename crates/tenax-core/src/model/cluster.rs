//! The servers of the cluster, and the workers connected to each: what every server says of
//! itself ([`ServerAbout`], written with its row on a shared store), and how the store answers
//! for the live ones ([`LiveServer`]).

use serde::{Deserialize, Serialize};

use crate::clock::UnixMs;

/// What a server says of itself. On a shared store each server writes it with its row every
/// second, as JSON: fields added later must have defaults, so that every version reads every
/// other's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerAbout {
    /// The version of Tenax it runs.
    pub version: String,
    pub started_at_ms: UnixMs,
    /// Whether it leads the maintenance (the last time it asked).
    #[serde(default)]
    pub leads: bool,
    /// Where it listens, as it was started (`--listen`, the port it got).
    #[serde(default)]
    pub address: Option<String>,
    /// The workers it has seen lately, most recently seen first.
    #[serde(default)]
    pub workers: Vec<WorkerInfo>,
}

/// A worker as a server saw it: by take, stream or heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The name it gave, or its address and User-Agent when it gave none.
    pub name: String,
    /// The queues it took from lately, by name, each with the jobs it holds of it.
    #[serde(default)]
    pub queues: Vec<WorkerQueue>,
    /// How many streams it has open on the server.
    #[serde(default)]
    pub streams: u32,
    pub seen_at_ms: UnixMs,
}

/// A queue a worker takes from, and how many of its jobs the worker holds now (leases in
/// flight that the server handed it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerQueue {
    pub queue: String,
    #[serde(default)]
    pub in_flight: u64,
}

impl WorkerInfo {
    /// The jobs it holds, of every queue.
    pub fn in_flight(&self) -> u64 {
        self.queues.iter().map(|q| q.in_flight).sum()
    }
}

/// A live server, as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveServer {
    /// Its id in the store (random, 64 bits).
    pub id: u64,
    /// Whether it is the server asking.
    pub this: bool,
    /// When its row was last written (on a shared store, by the database's clock).
    pub seen_at_ms: UnixMs,
    /// What it says of itself; `None` for a server that says nothing (a version before this
    /// was written, or one that has not written it yet).
    pub about: Option<ServerAbout>,
}
