//! Webhook delivery: every subscription's deliveries POSTed to its endpoint and ended by the
//! subscription's policy.
//!
//! One runner task per subscription takes its deliveries from the engine (leases, like any
//! worker), bounded by the endpoint's concurrency and the subscription's throttle, and spawns
//! one request per delivery. Each request's outcome ends the attempt through
//! [`Engine::finish_delivery`](crate::engine::Engine::finish_delivery), which logs it and
//! retries or kills the delivery in one commit. A crash loses only leases: deliveries in flight
//! are sent again after a restart (at least once).

pub mod address;
pub mod envelope;
pub mod headers;
pub mod health;
pub mod outcome;
mod runner;
mod send;
pub mod signing;
pub mod throttle;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Semaphore;

pub use self::health::HealthView;
pub use self::runner::run;
use crate::config::DeliveryConfig;
use crate::model::Subscription;

/// What the API and the runners share: settings, health, and the endpoints' bounds.
///
/// Per process: the health book and the endpoints' concurrency bounds (like each runner's
/// throttle) live in this server's memory. On a store shared by several servers each server
/// applies its [`share`] of each limit to the deliveries it sends, so the cluster keeps the
/// limit within the tolerance `docs/postgres.md` states. Subscription changes reach the
/// runners through the store's signal, whichever server made them.
#[derive(Debug)]
pub struct Deliveries {
    pub config: DeliveryConfig,
    health: health::HealthBook,
    /// One bound per endpoint origin (scheme, host, port), shared by its subscriptions, with
    /// the permits it was made with.
    endpoints: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
}

/// This server's share of a limit set for the whole cluster of `servers`: the limit divided
/// among them, rounded up so that each keeps at least one. Together they stay within
/// `limit + servers - 1`, and within `limit` when it is a multiple of `servers`.
pub fn share(limit: u32, servers: usize) -> u32 {
    limit.div_ceil(u32::try_from(servers.max(1)).unwrap_or(u32::MAX))
}

impl Deliveries {
    pub fn new(config: DeliveryConfig) -> Self {
        Self {
            config,
            health: health::HealthBook::default(),
            endpoints: Mutex::new(HashMap::new()),
        }
    }

    /// The endpoint's health as the API shows it.
    pub fn health(&self, subscription: &Subscription) -> HealthView {
        self.health.view(subscription)
    }

    /// This server's concurrency bound of the endpoint `url` points at, with `servers`
    /// sharing the endpoint's concurrency. When their number changes the bound is made anew:
    /// requests under the old one finish under it.
    fn endpoint_bound(&self, url: &url::Url, servers: usize) -> Arc<Semaphore> {
        let origin = url.origin().ascii_serialization();
        let permits = share(self.config.concurrency_per_endpoint, servers);
        let permits = usize::try_from(permits).unwrap_or(usize::MAX);
        let mut endpoints = self.endpoints.lock();
        let bound = endpoints
            .entry(origin)
            .or_insert_with(|| (permits, Arc::new(Semaphore::new(permits))));
        if bound.0 != permits {
            *bound = (permits, Arc::new(Semaphore::new(permits)));
        }
        bound.1.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn a_cluster_limit_is_shared_rounding_up() {
        assert_eq!(share(8, 1), 8);
        assert_eq!(share(8, 2), 4);
        assert_eq!(share(5, 2), 3, "together 6: within limit + servers - 1");
        assert_eq!(share(1, 3), 1, "each keeps one");
        assert_eq!(share(3, 0), 3, "no count yet: this server alone");
    }
}
