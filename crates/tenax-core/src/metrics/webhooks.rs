//! Webhook metrics: delivery attempts by subscription and outcome class, their latency,
//! deliveries that died, and deliveries held back unsent by their endpoint's backpressure or
//! their retry budget. Subscriptions are bounded like queues ([`super::labels`]).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};

use super::histogram::{Histogram, WEBHOOK_SECONDS};
use super::labels::Bounded;
use crate::model::{Attempt, SubscriptionId};

/// An attempt's outcome class: the class of the endpoint's HTTP status, or `error` when no
/// answer came (connection refused, TLS failure, timeout, address refused by the guard).
pub const OUTCOMES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];

fn outcome_of(attempt: &Attempt) -> usize {
    match attempt.status {
        Some(200..=299) => 0,
        Some(300..=399) => 1,
        Some(400..=499) => 2,
        Some(500..=599) => 3,
        // 1xx and other oddities are answers too; the status says which.
        Some(_) => 2,
        None => 4,
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    pub subscription: String,
    pub outcome: String,
}

/// Why a delivery taken to be sent was put back unsent (it used no attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldReason {
    /// Its endpoint asked for a pause (a 429 or 503 with `Retry-After`).
    Paused,
    /// Its endpoint's circuit breaker is open, or another delivery is its probe.
    Breaker,
    /// It is a retry, and its subscription's retry budget is spent.
    RetryBudget,
}

impl HeldReason {
    pub const ALL: [Self; 3] = [Self::Paused, Self::Breaker, Self::RetryBudget];

    pub fn name(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::Breaker => "breaker",
            Self::RetryBudget => "retry_budget",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    pub subscription: String,
    pub reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SubscriptionLabel {
    pub subscription: String,
}

/// One subscription's series.
#[derive(Debug)]
pub struct WebhookSeries {
    attempts: [Counter; 5],
    latency: Histogram,
    pub retried: Counter,
    pub dead: Counter,
    /// By [`HeldReason`], in the order of [`HeldReason::ALL`].
    held: [Counter; 3],
}

impl WebhookSeries {
    pub fn held(&self, reason: HeldReason) {
        self.held[reason as usize].inc();
    }

    pub fn attempted(&self, attempt: &Attempt) {
        self.attempts[outcome_of(attempt)].inc();
        self.latency.observe_ms(attempt.latency_ms);
    }
}

#[derive(Debug)]
pub struct WebhookMetrics {
    subscriptions: Bounded,
    attempts: Family<AttemptLabels, Counter>,
    latency: Family<SubscriptionLabel, Histogram, fn() -> Histogram>,
    retried: Family<SubscriptionLabel, Counter>,
    dead: Family<SubscriptionLabel, Counter>,
    held: Family<HeldLabels, Counter>,
    /// Every subscription id seen, to its (perhaps folded) series.
    series: RwLock<HashMap<SubscriptionId, Arc<WebhookSeries>>>,
}

fn webhook_seconds() -> Histogram {
    Histogram::seconds(WEBHOOK_SECONDS)
}

impl WebhookMetrics {
    pub fn new(registry: &mut Registry, label_limit: usize) -> Self {
        let metrics = Self {
            subscriptions: Bounded::new(label_limit),
            attempts: Family::default(),
            latency: Family::new_with_constructor(webhook_seconds as fn() -> Histogram),
            retried: Family::default(),
            dead: Family::default(),
            held: Family::default(),
            series: RwLock::new(HashMap::new()),
        };
        registry.register(
            "tenax_webhook_attempts",
            "Webhook delivery attempts, by subscription and outcome class (2xx, 3xx, 4xx, 5xx, \
             error: no answer)",
            metrics.attempts.clone(),
        );
        registry.register_with_unit(
            "tenax_webhook_attempt_duration",
            "Time a webhook request took, to its answer or its failure",
            Unit::Seconds,
            metrics.latency.clone(),
        );
        registry.register(
            "tenax_webhook_deliveries_retried",
            "Failed delivery attempts after which the delivery policy scheduled a retry",
            metrics.retried.clone(),
        );
        registry.register(
            "tenax_webhook_deliveries_dead",
            "Deliveries that died: no retry left, or an answer that is not retried",
            metrics.dead.clone(),
        );
        registry.register(
            "tenax_webhook_deliveries_held",
            "Deliveries taken to be sent and put back unsent, using no attempt, by reason: \
             paused (the endpoint asked for a pause), breaker (its circuit breaker is open or \
             probing), retry_budget (a retry over the subscription's retry budget)",
            metrics.held.clone(),
        );
        metrics
    }

    /// The label value subscription `id` is counted under.
    pub fn label(&self, id: SubscriptionId) -> Arc<str> {
        self.subscriptions.admit(&id.to_string())
    }

    pub fn series(&self, id: SubscriptionId) -> Arc<WebhookSeries> {
        if let Some(series) = self.series.read().get(&id) {
            return series.clone();
        }
        let label = self.label(id);
        let subscription = SubscriptionLabel {
            subscription: label.to_string(),
        };
        let attempts = OUTCOMES.map(|outcome| {
            self.attempts.get_or_create_owned(&AttemptLabels {
                subscription: label.to_string(),
                outcome: outcome.to_owned(),
            })
        });
        let made = Arc::new(WebhookSeries {
            attempts,
            latency: self.latency.get_or_create_owned(&subscription),
            retried: self.retried.get_or_create_owned(&subscription),
            dead: self.dead.get_or_create_owned(&subscription),
            held: HeldReason::ALL.map(|reason| {
                self.held.get_or_create_owned(&HeldLabels {
                    subscription: label.to_string(),
                    reason: reason.name().to_owned(),
                })
            }),
        });
        self.series.write().entry(id).or_insert(made).clone()
    }
}
