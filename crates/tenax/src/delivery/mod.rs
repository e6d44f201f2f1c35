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
/// applies them to the deliveries it sends, so an endpoint's concurrency and a subscription's
/// throttle across the cluster are up to the number of servers times the configured value
/// (`docs/architecture.md`). Subscription changes reach the runners through the store's
/// signal, whichever server made them.
#[derive(Debug)]
pub struct Deliveries {
    pub config: DeliveryConfig,
    health: health::HealthBook,
    /// One bound per endpoint origin (scheme, host, port), shared by its subscriptions.
    endpoints: Mutex<HashMap<String, Arc<Semaphore>>>,
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

    /// The concurrency bound of the endpoint `url` points at.
    fn endpoint_bound(&self, url: &url::Url) -> Arc<Semaphore> {
        let origin = url.origin().ascii_serialization();
        let permits = usize::try_from(self.config.concurrency_per_endpoint).unwrap_or(usize::MAX);
        self.endpoints
            .lock()
            .entry(origin)
            .or_insert_with(|| Arc::new(Semaphore::new(permits)))
            .clone()
    }
}
