//! Webhook delivery: every subscription's deliveries POSTed to its endpoint and ended by the
//! subscription's policy.
//!
//! One runner task per subscription takes its deliveries from the engine (leases, like any
//! worker), bounded by the endpoint's concurrency and the subscription's throttle, and spawns
//! one request per delivery. Each request's outcome ends the attempt through
//! [`Engine::finish_delivery`](tenax_core::engine::Engine::finish_delivery), which logs it and
//! retries or kills the delivery in one commit. A crash loses only leases: deliveries in flight
//! are sent again after a restart (at least once).

pub mod address;
pub mod admission;
pub mod backpressure;
pub mod budget;
pub mod confirmation;
pub mod endpoints;
pub mod envelope;
pub mod headers;
pub mod health;
pub mod mailto;
pub mod outcome;
mod runner;
mod send;
pub mod signals;
pub mod signing;
pub mod throttle;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tenax_core::engine::Engine;
use tenax_core::engine::EngineError;
use tenax_core::model::Subscription;
use tenax_net::trust::CaFile;
use tenax_policy::{Jitter, RetryPolicy, Shape};
use tokio::sync::Semaphore;

use self::backpressure::BreakerSettings;
pub use self::health::{BudgetView, EndpointView, HealthView};
pub use self::runner::run;

/// How webhooks are delivered.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    pub default_policy: RetryPolicy,
    pub allow_private_endpoints: bool,
    pub timeout_ms: u64,
    pub concurrency_per_endpoint: u32,
    /// 0: never.
    pub auto_disable_after_ms: u64,
    /// CA certificates trusted in addition to the platform's roots (`--delivery-ca-file`).
    pub ca_file: Option<CaFile>,
    /// Endpoints' circuit breakers.
    pub breaker: BreakerSettings,
    /// The proxy deliveries go through (`--delivery-proxy`), if any.
    pub proxy: Option<url::Url>,
    /// The SMTP server of `mailto:` subscribers (`--smtp-url`), if any.
    pub smtp: Option<mailto::SmtpUrl>,
}

/// The default delivery policy: the schedule Standard Webhooks senders commonly use.
pub fn default_delivery_policy() -> RetryPolicy {
    let delays_ms = [
        5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000,
    ];
    RetryPolicy::new(Shape::List(tenax_policy::simple::DelayList {
        delays_ms: delays_ms.to_vec(),
        repeat_last: false,
    }))
    .with_jitter(Jitter::Proportional { percent: 10.0 })
    .with_retry_limit(7)
}

/// What the API and the runners share: settings, health, backpressure, and the endpoints'
/// bounds.
///
/// Per process: the health book, the retry budgets' windows, the runs of failures toward a
/// circuit breaker and the endpoints' concurrency bounds (like each runner's throttle) live
/// in this server's memory. On a store shared by several servers each server applies its
/// [`share`] of each limit to the deliveries it sends, so the cluster keeps the limit within
/// the tolerance `docs/postgres.md` states. Endpoints' pauses and breakers are stored, so every
/// server obeys them ([`endpoints`]). Subscription and endpoint changes reach the runners
/// through the store's signals, whichever server made them.
#[derive(Debug)]
pub struct Deliveries {
    pub config: DeliveryConfig,
    health: health::HealthBook,
    /// Endpoints' pauses and circuit breakers, as this server knows them.
    pub endpoints: endpoints::EndpointBook,
    /// Subscriptions' retry budgets, as this server counts them.
    pub budgets: budget::BudgetBook,
    /// One bound per endpoint origin (scheme, host, port), shared by its subscriptions, with
    /// the permits it was made with.
    bounds: Mutex<HashMap<String, (usize, Arc<Semaphore>)>>,
    /// Where the runners tell what they decide (tests listen; nobody else does).
    signals: signals::Signals,
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
            endpoints: endpoints::EndpointBook::new(config.breaker),
            budgets: budget::BudgetBook::default(),
            config,
            health: health::HealthBook::default(),
            bounds: Mutex::new(HashMap::new()),
            signals: signals::Signals::default(),
        }
    }

    /// The same, with the runners telling `signals` what they decide.
    pub fn with_signals(self, signals: signals::Signals) -> Self {
        Self { signals, ..self }
    }

    /// The endpoint's health as the API shows it: this server's counts, the stored pause
    /// and circuit breaker of its endpoint, and its retry budget's use on this server.
    pub async fn health(
        &self,
        engine: &Engine,
        subscription: &Subscription,
    ) -> Result<HealthView, EngineError> {
        let mut view = self.health.view(subscription);
        let origin = origin_of(&subscription.endpoint);
        let stored = engine.endpoint_state(&origin).await?;
        let epoch = stored.as_ref().map_or(0, |s| s.breaker.epoch);
        view.endpoint = EndpointView::of(origin.clone(), stored.as_ref(), engine.now_ms());
        view.endpoint.breaker_failures = self.endpoints.run(&origin, epoch);
        view.retry_budget = self
            .budgets
            .used(subscription, engine.now_ms())
            .map(|used| BudgetView {
                attempts: used.attempts,
                retries: used.retries,
            });
        Ok(view)
    }

    /// This server's counts of the subscription's attempts alone, without its endpoint's
    /// stored state (left empty): what the metrics show per subscription.
    pub fn local_health(&self, subscription: &Subscription) -> HealthView {
        self.health.view(subscription)
    }

    /// This server's concurrency bound of the endpoint `url` points at, with `servers`
    /// sharing the endpoint's concurrency. When their number changes the bound is made anew:
    /// requests under the old one finish under it.
    fn endpoint_bound(&self, url: &url::Url, servers: usize) -> Arc<Semaphore> {
        let origin = origin_of_url(url);
        let permits = share(self.config.concurrency_per_endpoint, servers);
        let permits = usize::try_from(permits).unwrap_or(usize::MAX);
        let mut bounds = self.bounds.lock();
        let bound = bounds
            .entry(origin)
            .or_insert_with(|| (permits, Arc::new(Semaphore::new(permits))));
        if bound.0 != permits {
            *bound = (permits, Arc::new(Semaphore::new(permits)));
        }
        bound.1.clone()
    }
}

/// The origin (scheme, host and port) of an endpoint URL: what its concurrency bound, pause
/// and circuit breaker are kept by. An endpoint that is not a URL is its own origin.
pub fn origin_of(endpoint: &str) -> String {
    url::Url::parse(endpoint).map_or_else(|_| endpoint.to_owned(), |url| origin_of_url(&url))
}

/// The origin of an endpoint URL. Every `mailto:` subscriber's mail goes to the one SMTP server
/// (`--smtp-url`): they share one origin, `mailto:`, and so its bound, pause and breaker.
pub fn origin_of_url(url: &url::Url) -> String {
    if url.scheme() == mailto::SCHEME {
        format!("{}:", mailto::SCHEME)
    } else {
        url.origin().ascii_serialization()
    }
}

/// What the delivery modules' unit tests share.
#[cfg(test)]
pub(crate) mod fixtures {
    use tenax_core::model::{JobId, LeaseToken, TakenJob, Trigger};

    /// A first attempt of delivery 8 (of message 7) of job kind `kind`, leased.
    pub fn taken_job(kind: &str) -> TakenJob {
        let payload = r#"{"queue": "orders", "type": "t", "body": {}}"#;
        TakenJob {
            id: JobId(8),
            queue: "orders".to_owned(),
            kind: kind.to_owned(),
            payload: serde_json::value::RawValue::from_string(payload.to_owned())
                .expect("raw JSON"),
            payload_sealed: false,
            priority: 0,
            attempt: 1,
            lease_token: LeaseToken(1),
            lease_expires_at_ms: 0,
            created_at_ms: 0,
            expires_at_ms: None,
            parent: Some(JobId(7)),
            traceparent: None,
            ready_at_ms: 0,
            trigger: Trigger::Scheduled,
            after: Vec::new(),
            parents: Vec::new(),
        }
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
