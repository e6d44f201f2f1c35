//! Prometheus metrics: what the server counts, shown in the Prometheus text format by `GET
//! /metrics` (`api/metrics.rs`).
//!
//! - [`jobs`]: transitions by queue and type, counted by the engine where it decides them, and
//!   waiting, run and end-to-end time by queue;
//! - [`webhooks`]: delivery attempts by subscription and outcome class, and their latency;
//! - [`http`]: requests by route template and status, and their latency;
//! - [`commits`]: the store's commits, reported by the store (the configuration wires the two);
//! - [`backlog`]: the last count of jobs by queue and state, kept between scrapes.
//!
//! The gauges read at scrape time (jobs by state per queue, the ready job first in line,
//! endpoint health) are the API's (`api/scrape.rs`): they are read through the engine, which
//! sits above these metrics and counts into them.
//!
//! Every name and label is in `docs/operations.md`. Label values chosen by users (queues, types,
//! subscriptions) are bounded ([`labels`]).

pub mod backlog;
pub mod commits;
pub mod histogram;
pub mod http;
pub mod jobs;
pub mod labels;
pub mod leases;
pub mod webhooks;

use std::sync::Arc;

use prometheus_client::registry::Registry;

use self::backlog::BacklogCache;
use self::commits::CommitMetrics;
use self::http::HttpMetrics;
use self::jobs::JobMetrics;
use self::leases::LeaseBook;
use self::webhooks::WebhookMetrics;

/// Distinct queues, types and subscriptions that get series of their own, each, unless
/// `--metrics-label-limit` says otherwise.
pub const DEFAULT_LABEL_LIMIT: usize = 100;

/// Every metric of one server.
#[derive(Debug)]
pub struct Metrics {
    /// The metrics counted as things happen; the gauges are made at each scrape.
    pub registry: Registry,
    pub jobs: JobMetrics,
    pub webhooks: WebhookMetrics,
    pub http: HttpMetrics,
    pub commits: Arc<CommitMetrics>,
    /// The leases this server handed out, for a store used by this process alone.
    pub leases: LeaseBook,
    /// What the last count of the backlog gave, and when.
    pub backlog: BacklogCache,
}

impl Metrics {
    /// At most `label_limit` distinct queues, types and subscriptions (each) get series of
    /// their own; the rest are counted under [`labels::OTHER`].
    pub fn new(label_limit: usize) -> Self {
        let mut registry = Registry::default();
        let jobs = JobMetrics::new(&mut registry, label_limit);
        let webhooks = WebhookMetrics::new(&mut registry, label_limit);
        let http = HttpMetrics::new(&mut registry);
        let commits = Arc::new(CommitMetrics::new(&mut registry));
        Self {
            registry,
            jobs,
            webhooks,
            http,
            commits,
            leases: LeaseBook::default(),
            backlog: BacklogCache::default(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new(DEFAULT_LABEL_LIMIT)
    }
}
