//! `deliveries-fanout`: webhook deliveries as a queue's subscriptions grow, and what one slow
//! endpoint among them does to the others (the server must be started with
//! `--allow-private-endpoints`).
//!
//! For each size (`--subscriptions`, [`SIZES`] by default), a queue of its own gets that many
//! subscriptions, spread over [`ENDPOINTS`] receivers on loopback ports of this process (an
//! endpoint is an origin, so each port is one endpoint with its own concurrency bound). Each
//! size runs three times ([`Extra`]): with those subscriptions alone; with one more to a spare
//! endpoint that answers at once; and with the slow endpoint, which answers after
//! [`SLOW_ANSWER`], in the spare's place. The first two differ in the fan-out only (one more
//! delivery per message), the last two in the slow endpoint only. Each run has two phases,
//! counted at the size's healthy receivers only (never the spare's or the slow one's):
//! - **burst**: the messages of `--jobs` deliveries enqueued at once (batches of up to 1 000);
//!   deliveries/s from the first enqueue to the last healthy delivery;
//! - **paced**: the messages of `--jobs` deliveries offered at [`PACED_PER_SEC`] healthy
//!   deliveries a second; each delivery's latency runs from the start of the enqueue request
//!   that carried its message to its arrival at the receiver (one clock: both are this
//!   process's).
//!
//! The promise measured: the slow endpoint's deliveries wait on its own bound, so the healthy
//! endpoints' paced p99 with it is no worse than with the spare.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::extract::State;
use axum::http::StatusCode;
use bytes::Bytes;
use futures_util::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;
use serde_json::{Value, json};

use super::deliveries::wait_for_deliveries;
use super::{Ctx, Latency, RequestStats, ScenarioReport, rate};

/// Subscriptions per queue, one size after the other.
pub const SIZES: [usize; 3] = [1, 100, 10_000];

/// Healthy receivers (ports); a size's subscriptions are spread over as many as it has, up to
/// this.
const ENDPOINTS: usize = 100;

/// How long the slow endpoint takes to answer (well within the delivery timeout, so its
/// deliveries succeed, slowly).
const SLOW_ANSWER: Duration = Duration::from_secs(2);

/// Healthy deliveries offered a second in the paced phase: well below what the server
/// delivers, so the latency is the dispatch's, not a backlog's.
const PACED_PER_SEC: u64 = 2_000;

/// Messages per enqueue request.
const BATCH: usize = 1_000;

/// Subscription requests in flight while setting up and tearing down a size.
const SETUP_CONCURRENCY: usize = 16;

/// The subscription a run has beside its size's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Extra {
    None,
    /// An endpoint that answers at once: one more delivery per message.
    Spare,
    /// An endpoint that answers after [`SLOW_ANSWER`], in the spare's place.
    Slow,
}

impl Extra {
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Spare => "spare",
            Self::Slow => "slow",
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, Serialize)]
pub struct FanoutCase {
    pub subscriptions: usize,
    /// The subscription beside the size's.
    pub extra: Extra,
    /// Healthy deliveries of the burst.
    pub burst_deliveries: u64,
    pub burst_per_sec: f64,
    /// Healthy deliveries offered a second in the paced phase.
    pub paced_offered_per_sec: u64,
    /// Healthy deliveries' latency in the paced phase.
    pub paced_latency: RequestStats,
}

/// What the healthy receivers count, for the phase under way.
#[derive(Debug)]
struct Healthy {
    base: Instant,
    /// The phase whose deliveries are counted; others (none are expected) are ignored.
    phase: AtomicU64,
    delivered: AtomicU64,
    /// Microseconds from `base` to the last counted delivery.
    last_us: AtomicU64,
    latency: Mutex<Latency>,
}

impl Healthy {
    fn since_base_us(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn begin(&self, phase: u64) {
        self.delivered.store(0, Ordering::SeqCst);
        self.last_us.store(0, Ordering::SeqCst);
        *self.latency() = Latency::new();
        self.phase.store(phase, Ordering::SeqCst);
    }

    /// The phase's latencies (a receiver that panicked mid-record left them whole).
    fn latency(&self) -> MutexGuard<'_, Latency> {
        self.latency.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A healthy receiver's answer: 204, after counting the delivery of the phase under way.
async fn healthy(State(counts): State<Arc<Healthy>>, body: Bytes) -> StatusCode {
    let now_us = counts.since_base_us();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let message = &body["message"]["body"];
    let phase = message["p"].as_u64();
    if phase == Some(counts.phase.load(Ordering::SeqCst)) {
        if let Some(sent_us) = message["t"].as_u64() {
            counts.latency().record_us(now_us.saturating_sub(sent_us));
        }
        counts.last_us.fetch_max(now_us, Ordering::SeqCst);
        counts.delivered.fetch_add(1, Ordering::SeqCst);
    }
    StatusCode::NO_CONTENT
}

/// The receivers: [`ENDPOINTS`] healthy ones, the spare and the slow one, each on a port of its
/// own.
struct Receivers {
    healthy: Vec<std::net::SocketAddr>,
    spare: std::net::SocketAddr,
    slow: std::net::SocketAddr,
    counts: Arc<Healthy>,
    serving: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Receivers {
    fn drop(&mut self) {
        for task in &self.serving {
            task.abort();
        }
    }
}

async fn bind() -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding a bench receiver")
}

async fn start_receivers() -> anyhow::Result<Receivers> {
    let counts = Arc::new(Healthy {
        base: Instant::now(),
        phase: AtomicU64::new(0),
        delivered: AtomicU64::new(0),
        last_us: AtomicU64::new(0),
        latency: Mutex::new(Latency::new()),
    });
    let healthy_app = axum::Router::new()
        .fallback(healthy)
        .with_state(counts.clone());
    let spare_app = axum::Router::new().fallback(|| async { StatusCode::NO_CONTENT });
    let slow_app = axum::Router::new().fallback(|| async {
        tokio::time::sleep(SLOW_ANSWER).await;
        StatusCode::NO_CONTENT
    });
    let mut serving = Vec::new();
    let mut healthy_at = Vec::new();
    for _ in 0..ENDPOINTS {
        let listener = bind().await?;
        healthy_at.push(listener.local_addr()?);
        let app = healthy_app.clone();
        serving.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
    }
    let mut at = Vec::new();
    for app in [spare_app, slow_app] {
        let listener = bind().await?;
        at.push(listener.local_addr()?);
        serving.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
    }
    Ok(Receivers {
        healthy: healthy_at,
        spare: at[0],
        slow: at[1],
        counts,
        serving,
    })
}

pub(super) async fn run(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let receivers = start_receivers().await?;
    let started = Instant::now();
    let mut cases = Vec::new();
    let mut phase = 0;
    for &size in &ctx.config.fanout_sizes {
        let queue = format!("{}-{size}", ctx.queue);
        let endpoints: Vec<String> = (0..size)
            .map(|n| {
                let at = receivers.healthy[n % receivers.healthy.len()];
                format!("http://{at}/hook/{n}")
            })
            .collect();
        ctx.progress
            .set_message(format!("subscribing {size} endpoint(s)"));
        let mut subscriptions = subscribe(ctx, &queue, &endpoints).await?;
        let mut spare = Vec::new();
        for extra in [Extra::None, Extra::Spare, Extra::Slow] {
            match extra {
                Extra::None => {}
                Extra::Spare => {
                    let at = format!("http://{}/hook", receivers.spare);
                    spare = subscribe(ctx, &queue, &[at]).await?;
                }
                Extra::Slow => {
                    unsubscribe(ctx, &spare).await?;
                    let at = format!("http://{}/hook", receivers.slow);
                    subscriptions.extend(subscribe(ctx, &queue, &[at]).await?);
                }
            }
            phase += 1;
            let burst = burst(ctx, &receivers.counts, &queue, size, phase).await?;
            phase += 1;
            let paced = paced(ctx, &receivers.counts, &queue, size, phase).await?;
            cases.push(FanoutCase {
                subscriptions: size,
                extra,
                burst_deliveries: burst.0,
                burst_per_sec: burst.1,
                paced_offered_per_sec: PACED_PER_SEC,
                paced_latency: paced.stats(&case_name(size, extra)),
            });
        }
        ctx.progress.set_message("unsubscribing");
        unsubscribe(ctx, &subscriptions).await?;
    }
    let delivered: u64 = cases.iter().map(|c| c.burst_deliveries).sum();
    let mut notes = vec![format!(
        "{ENDPOINTS} healthy endpoints (a size's subscriptions spread over them); each size \
         alone, then with one more subscription to a spare endpoint answering at once, then to \
         a slow one answering after {} s in its place; burst: the messages of {} deliveries \
         enqueued at once; paced: {PACED_PER_SEC} healthy deliveries/s offered, latency from \
         the enqueue request to the receiver",
        SLOW_ANSWER.as_secs(),
        ctx.jobs
    )];
    for case in &cases {
        notes.push(format!(
            "{}: burst {:.0} deliveries/s; paced p50 {} µs, p99 {} µs",
            case_name(case.subscriptions, case.extra),
            case.burst_per_sec,
            case.paced_latency.p50_us,
            case.paced_latency.p99_us,
        ));
    }
    Ok(ScenarioReport {
        jobs: delivered,
        seconds: started.elapsed().as_secs_f64(),
        jobs_per_sec: rate(delivered, started.elapsed()),
        requests: cases.iter().map(|c| c.paced_latency.clone()).collect(),
        fanout: Some(cases),
        notes,
        ..ScenarioReport::default()
    })
}

fn case_name(size: usize, extra: Extra) -> String {
    let plural = if size == 1 { "" } else { "s" };
    match extra {
        Extra::None => format!("delivery, {size} subscription{plural}"),
        Extra::Spare => format!("delivery, {size} subscription{plural} + spare endpoint"),
        Extra::Slow => format!("delivery, {size} subscription{plural} + slow endpoint"),
    }
}

/// Subscribes each endpoint to `queue`; the subscriptions' ids.
async fn subscribe(ctx: &Ctx, queue: &str, endpoints: &[String]) -> anyhow::Result<Vec<u64>> {
    let url = ctx.api.url(&format!("/api/queues/{queue}/subscriptions"));
    futures_util::stream::iter(endpoints)
        .map(|endpoint| {
            let url = url.clone();
            async move {
                let body = serde_json::to_vec(&json!({"endpoint": endpoint}))?;
                let created = ctx.api.post(&url, Bytes::from(body)).await.context(
                    "subscribing a bench receiver (start the server with \
                     --allow-private-endpoints)",
                )?;
                let created: Value = serde_json::from_slice(&created)?;
                created["id"].as_u64().context("the subscription has no id")
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect()
        .await
}

async fn unsubscribe(ctx: &Ctx, ids: &[u64]) -> anyhow::Result<()> {
    futures_util::stream::iter(ids)
        .map(|id| async move {
            ctx.api
                .delete(&ctx.api.url(&format!("/api/subscriptions/{id}")))
                .await
                .context("deleting a bench subscription")
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// Messages that make `ctx.jobs` deliveries to `size` subscriptions (at least one).
fn messages_for(ctx: &Ctx, size: usize) -> u64 {
    (ctx.jobs / size as u64).max(1)
}

/// Enqueues `count` messages of `phase` in one request, stamped with the request's start.
async fn enqueue(
    ctx: &Ctx,
    counts: &Healthy,
    queue: &str,
    phase: u64,
    count: u64,
) -> anyhow::Result<()> {
    let t = counts.since_base_us();
    let jobs: Vec<Value> = (0..count)
        .map(|_| json!({"queue": queue, "type": "fanout", "payload": {"t": t, "p": phase}}))
        .collect();
    let body = serde_json::to_vec(&json!({ "jobs": jobs }))?;
    ctx.api
        .post(&ctx.api.url("/api/jobs/batch"), Bytes::from(body))
        .await
        .context("enqueueing bench messages")?;
    Ok(())
}

/// Waits for the phase's `expected` healthy deliveries ([`wait_for_deliveries`]); an error
/// naming the `phase` if fewer arrived.
async fn all_delivered(
    ctx: &Ctx,
    counts: &Healthy,
    expected: u64,
    phase: &str,
) -> anyhow::Result<u64> {
    let delivered = wait_for_deliveries(ctx, &counts.delivered, expected).await;
    anyhow::ensure!(
        delivered >= expected,
        "only {delivered} of {expected} {phase} deliveries arrived"
    );
    Ok(delivered)
}

/// The burst phase: healthy deliveries, and their rate.
async fn burst(
    ctx: &Ctx,
    counts: &Healthy,
    queue: &str,
    size: usize,
    phase: u64,
) -> anyhow::Result<(u64, f64)> {
    counts.begin(phase);
    ctx.progress
        .set_message(format!("{size} subscription(s): burst"));
    let messages = messages_for(ctx, size);
    let expected = messages * size as u64;
    let first_us = counts.since_base_us();
    let mut sent = 0;
    while sent < messages {
        let count = (messages - sent).min(BATCH as u64);
        enqueue(ctx, counts, queue, phase, count).await?;
        sent += count;
    }
    let delivered = all_delivered(ctx, counts, expected, "burst").await?;
    let span = Duration::from_micros(counts.last_us.load(Ordering::SeqCst) - first_us);
    Ok((delivered, rate(delivered, span)))
}

/// The paced phase: the healthy deliveries' latencies.
async fn paced(
    ctx: &Ctx,
    counts: &Healthy,
    queue: &str,
    size: usize,
    phase: u64,
) -> anyhow::Result<Latency> {
    counts.begin(phase);
    ctx.progress
        .set_message(format!("{size} subscription(s): paced"));
    let messages = messages_for(ctx, size);
    let expected = messages * size as u64;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut sent = 0;
    while sent < messages {
        tick.tick().await;
        // Messages due by now at the offered rate, the first at once.
        let due_deliveries = started.elapsed().as_micros() * u128::from(PACED_PER_SEC) / 1_000_000;
        let due = u64::try_from(due_deliveries / size as u128)
            .unwrap_or(u64::MAX)
            .saturating_add(1)
            .min(messages);
        if due > sent {
            let count = (due - sent).min(BATCH as u64);
            enqueue(ctx, counts, queue, phase, count).await?;
            sent += count;
        }
    }
    all_delivered(ctx, counts, expected, "paced").await?;
    Ok(counts.latency().clone())
}
