//! A scrape: the counters and histograms as they are, and gauges read now: jobs by state per
//! queue and the age of the ready job first in line (from the store), deliveries by state and
//! endpoint health per subscription, and webhook endpoints by circuit breaker state and pause
//! (stored, so every server shows the same), and on PostgreSQL the offset of the database's
//! clock to this server's.
//!
//! The job counts are read through the engine and kept between scrapes by
//! [`BacklogCache`](tenax_core::metrics::backlog::BacklogCache), which says when they are counted
//! anew.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tenax_core::engine::Engine;
use tenax_core::engine::EngineError;
use tenax_core::metrics::Metrics;
use tenax_core::metrics::backlog::Counts;
use tenax_core::metrics::jobs::QueueLabel;
use tenax_core::metrics::webhooks::SubscriptionLabel;
use tenax_core::model::subscription::{is_internal_queue, subscription_of_queue};
use tenax_core::model::{Backlog, BreakerState};

use crate::delivery::Deliveries;

/// The content type of the answer: the Prometheus text format, version 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Each queue's backlog and, for the user queues with jobs ready, when the first became ready.
async fn count(engine: &Engine) -> Result<Counts, EngineError> {
    let backlog = engine.backlog().await?;
    let waiting: Vec<String> = backlog
        .iter()
        .filter(|b| b.ready > 0 && !is_internal_queue(&b.queue))
        .map(|b| b.queue.clone())
        .collect();
    let mut heads = engine.ready_since(&waiting).await?.into_iter();
    Ok(backlog
        .into_iter()
        .map(|b| {
            let head = if b.ready > 0 && !is_internal_queue(&b.queue) {
                heads.next().flatten()
            } else {
                None
            };
            (b, head)
        })
        .collect())
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BreakerLabel {
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    queue: String,
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryStateLabels {
    subscription: String,
    state: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// The states counted: completed jobs are left out (counting them would read every job kept
/// for retention; `tenax_jobs_completed_total` has their rate).
const STATES: [&str; 6] = [
    "scheduled",
    "ready",
    "in_flight",
    "dead",
    "cancelled",
    "waiting",
];

fn by_state(b: &Backlog) -> [u64; 6] {
    [
        b.scheduled,
        b.ready,
        b.in_flight,
        b.dead,
        b.cancelled,
        b.waiting,
    ]
}

#[allow(clippy::cast_possible_wrap)]
fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The whole answer to `GET /metrics`.
pub async fn render(engine: &Engine, deliveries: &Deliveries) -> String {
    let metrics: &Metrics = &engine.metrics;
    let mut gauges = Registry::default();
    let now_ms = engine.now_ms();

    if let Some(counted) = metrics.backlog.get(count(engine)).await {
        let jobs = Family::<StateLabels, Gauge>::default();
        let ready_age = Family::<QueueLabel, FloatGauge>::default();
        let deliveries_by_state = Family::<DeliveryStateLabels, Gauge>::default();
        // Folded queues (past the label limit) add up under one label; their age is the oldest.
        let mut queues: BTreeMap<Arc<str>, ([u64; 5], Option<u64>)> = BTreeMap::new();
        let mut subscriptions: BTreeMap<Arc<str>, [u64; 5]> = BTreeMap::new();
        for (backlog, head) in counted.backlog.iter() {
            if is_internal_queue(&backlog.queue) {
                if let Some(id) = subscription_of_queue(&backlog.queue) {
                    let slot = subscriptions.entry(metrics.webhooks.label(id)).or_default();
                    for (sum, n) in slot.iter_mut().zip(by_state(backlog)) {
                        *sum += n;
                    }
                }
                continue;
            }
            let label = metrics.jobs.queue_label(&backlog.queue);
            let slot = queues.entry(label).or_default();
            for (sum, n) in slot.0.iter_mut().zip(by_state(backlog)) {
                *sum += n;
            }
            let age = head.map(|since| now_ms.saturating_sub(since));
            slot.1 = slot.1.max(age);
        }
        for (queue, (counts, age)) in &queues {
            for (state, n) in STATES.iter().zip(counts) {
                jobs.get_or_create(&StateLabels {
                    queue: queue.to_string(),
                    state: (*state).to_owned(),
                })
                .set(gauge_value(*n));
            }
            #[allow(clippy::cast_precision_loss)]
            ready_age
                .get_or_create(&QueueLabel {
                    queue: queue.to_string(),
                })
                .set(age.unwrap_or(0) as f64 / 1_000.0);
        }
        for (subscription, counts) in &subscriptions {
            for (state, n) in STATES.iter().zip(counts) {
                deliveries_by_state
                    .get_or_create(&DeliveryStateLabels {
                        subscription: subscription.to_string(),
                        state: (*state).to_owned(),
                    })
                    .set(gauge_value(*n));
            }
        }
        gauges.register(
            "tenax_jobs",
            "Jobs by queue and state (scheduled, ready, in_flight, dead, cancelled, waiting)",
            jobs,
        );
        gauges.register_with_unit(
            "tenax_queue_ready_age",
            "How long the ready job first in line (the one the next take gets) has been ready; \
             0 when none is",
            Unit::Seconds,
            ready_age,
        );
        gauges.register(
            "tenax_webhook_deliveries",
            "Webhook deliveries by subscription and state (scheduled, ready, in_flight, dead, cancelled, waiting)",
            deliveries_by_state,
        );
        let age = FloatGauge::default();
        age.set(counted.at.elapsed().as_secs_f64());
        gauges.register_with_unit(
            "tenax_backlog_count_age",
            "How old the job counts shown are",
            Unit::Seconds,
            age,
        );
        let took = FloatGauge::default();
        took.set(counted.took.as_secs_f64());
        gauges.register_with_unit(
            "tenax_backlog_count_duration",
            "How long the store took to count them",
            Unit::Seconds,
            took,
        );
    }

    match engine.subscriptions(None).await {
        Ok(all) => {
            let healthy = Family::<SubscriptionLabel, Gauge>::default();
            let failures = Family::<SubscriptionLabel, Gauge>::default();
            let enabled = Family::<SubscriptionLabel, Gauge>::default();
            for subscription in &all {
                let label = SubscriptionLabel {
                    subscription: metrics.webhooks.label(subscription.id).to_string(),
                };
                let view = deliveries.local_health(subscription);
                healthy
                    .get_or_create(&label)
                    .inc_by(i64::from(view.healthy));
                enabled
                    .get_or_create(&label)
                    .inc_by(i64::from(subscription.enabled));
                let most = failures.get_or_create(&label);
                most.set(most.get().max(i64::from(view.consecutive_failures)));
            }
            gauges.register(
                "tenax_webhook_endpoint_healthy",
                "1 while the subscription's endpoint is healthy (its last attempt did not fail), \
                 else 0; under (other), how many of those subscriptions are",
                healthy,
            );
            gauges.register(
                "tenax_webhook_endpoint_consecutive_failures",
                "Failed attempts in a row of the subscription's endpoint, as this server saw \
                 them; under (other), the most of any",
                failures,
            );
            gauges.register(
                "tenax_webhook_subscription_enabled",
                "1 while the subscription is enabled, else 0 (disabled, perhaps automatically); \
                 under (other), how many are",
                enabled,
            );
        }
        Err(error) => tracing::warn!(%error, "listing subscriptions for the metrics failed"),
    }

    match engine.endpoint_states().await {
        Ok(states) => {
            let now = engine.now_ms();
            let breakers = Family::<BreakerLabel, Gauge>::default();
            for state in [
                BreakerState::Closed,
                BreakerState::Open,
                BreakerState::HalfOpen,
            ] {
                // Every state has its series, at 0 while no endpoint is in it.
                breakers
                    .get_or_create(&BreakerLabel {
                        state: state.name().to_owned(),
                    })
                    .set(0);
            }
            let paused: Gauge = Gauge::default();
            for state in &states {
                breakers
                    .get_or_create(&BreakerLabel {
                        state: state.breaker.state.name().to_owned(),
                    })
                    .inc();
                if state.pause.is_some_and(|p| p.until_ms > now) {
                    paused.inc();
                }
            }
            gauges.register(
                "tenax_webhook_endpoints",
                "Webhook endpoints (origins) that ever paused or tripped, by the state of their \
                 circuit breaker (closed, open, half_open), as stored for every server",
                breakers,
            );
            gauges.register(
                "tenax_webhook_endpoints_paused",
                "Webhook endpoints whose pause (asked for by a 429 or 503 with Retry-After) \
                 holds now",
                paused,
            );
        }
        Err(error) => tracing::warn!(%error, "reading endpoint states for the metrics failed"),
    }

    let leader: Gauge = Gauge::default();
    leader.set(i64::from(engine.leads_maintenance()));
    gauges.register(
        "tenax_maintenance_leader",
        "1 while this server leads the maintenance (promotions, lease expiry, schedules, \
         retention), else 0: in a cluster, exactly one server should",
        leader,
    );

    if let Some((offset_us, error_us)) = engine.clock.database_time().and_then(|t| t.offset()) {
        #[allow(clippy::cast_precision_loss)]
        let (offset_s, error_s) = (offset_us as f64 / 1e6, error_us as f64 / 1e6);
        let offset = FloatGauge::default();
        offset.set(offset_s);
        gauges.register_with_unit(
            "tenax_clock_offset",
            "PostgreSQL's clock minus this server's wall clock: the servers sharing a database \
             decide by PostgreSQL's clock, as each estimates it",
            Unit::Seconds,
            offset,
        );
        let error = FloatGauge::default();
        error.set(error_s);
        gauges.register_with_unit(
            "tenax_clock_error",
            "How far this server's estimate of PostgreSQL's clock may be off now",
            Unit::Seconds,
            error,
        );
    }

    let mut text = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry);
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &gauges);
    text
}
