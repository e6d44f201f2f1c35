//! Store commits: how many, how many requests each carried, and how long each took (with its
//! sync, when it synced). The stores report each commit, through the observer the server's
//! configuration wires to [`CommitMetrics::committed`].

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::{Registry, Unit};

use super::histogram::{COMMIT_REQUESTS, COMMIT_SECONDS, Histogram};

#[derive(Debug)]
pub struct CommitMetrics {
    commits: Counter,
    requests: Histogram,
    duration: Histogram,
}

impl CommitMetrics {
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            commits: Counter::default(),
            requests: Histogram::counts(COMMIT_REQUESTS),
            duration: Histogram::seconds(COMMIT_SECONDS),
        };
        registry.register(
            "tenax_store_commits",
            "Commits of the store (a group commit counts once)",
            metrics.commits.clone(),
        );
        registry.register(
            "tenax_store_commit_requests",
            "Requests that shared one commit",
            metrics.requests.clone(),
        );
        registry.register_with_unit(
            "tenax_store_commit_duration",
            "Time one commit took, its sync included",
            Unit::Seconds,
            metrics.duration.clone(),
        );
        metrics
    }
}

impl CommitMetrics {
    /// Counts one commit that carried `requests` requests and took `elapsed`.
    pub fn committed(&self, requests: usize, elapsed: Duration) {
        self.commits.inc();
        self.requests
            .observe_units(u64::try_from(requests).unwrap_or(u64::MAX));
        self.duration.observe_duration(elapsed);
    }
}
