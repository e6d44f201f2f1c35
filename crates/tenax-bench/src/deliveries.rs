//! `deliveries` and `deliveries-flaky`: webhook deliveries per second to a receiver this
//! process runs on a loopback port (the server must be started with
//! `--allow-private-endpoints`).
//!
//! The scenario subscribes the receiver to its queue, bulk-enqueues the messages, and counts
//! successful deliveries at the receiver. The rate is successful deliveries over the time from
//! the first enqueue to the last success. In `deliveries-flaky` the receiver answers every
//! other request with 500, and the subscription retries after 1 ms: every message still ends
//! delivered, after one failure on average.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::http::StatusCode;
use bytes::Bytes;
use serde_json::{Value, json};

use super::enqueue;
use super::{Ctx, ScenarioReport, rate};
use crate::report::format_rate;

/// What the receiver counts.
#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    delivered: AtomicU64,
}

/// A receiver on 127.0.0.1: 204 to everything, or 500 to every other request when `flaky`.
async fn start_receiver(
    flaky: bool,
) -> anyhow::Result<(
    std::net::SocketAddr,
    Arc<Counters>,
    tokio::task::JoinHandle<()>,
)> {
    let counters = Arc::new(Counters::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the bench receiver")?;
    let address = listener.local_addr()?;
    let shared = counters.clone();
    let app = axum::Router::new().fallback(move |_body: Bytes| {
        let counters = shared.clone();
        async move {
            let n = counters.requests.fetch_add(1, Ordering::Relaxed);
            if flaky && n % 2 == 0 {
                StatusCode::INTERNAL_SERVER_ERROR
            } else {
                counters.delivered.fetch_add(1, Ordering::Relaxed);
                StatusCode::NO_CONTENT
            }
        }
    });
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((address, counters, server))
}

/// Waits until a receiver's `delivered` count reaches `expected`, or the scenario's time is up,
/// or none came for 10 s; the count then.
pub(super) async fn wait_for_deliveries(ctx: &Ctx, delivered: &AtomicU64, expected: u64) -> u64 {
    let deadline = ctx.deadline();
    let mut last_change = (0, Instant::now());
    loop {
        let count = delivered.load(Ordering::SeqCst);
        ctx.progress.set_position(count);
        if count >= expected {
            return count;
        }
        if count != last_change.0 {
            last_change = (count, Instant::now());
        }
        if Instant::now() >= deadline || last_change.1.elapsed() > Duration::from_secs(10) {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub(super) async fn run(ctx: &Ctx, flaky: bool) -> anyhow::Result<ScenarioReport> {
    let (address, counters, server) = start_receiver(flaky).await?;
    let mut subscription = json!({"endpoint": format!("http://{address}/hook")});
    if flaky {
        subscription["policy"] = json!({"type": "fixed", "delay": 1, "retry_limit": 20});
    }
    let created = ctx
        .api
        .post(
            &ctx.api
                .url(&format!("/api/queues/{}/subscriptions", ctx.queue)),
            Bytes::from(serde_json::to_vec(&subscription)?),
        )
        .await
        .context(
            "subscribing the bench receiver (start the server with --allow-private-endpoints)",
        )?;
    let created: Value = serde_json::from_slice(&created)?;
    let id = created["id"]
        .as_u64()
        .context("the subscription has no id")?;

    let started = Instant::now();
    ctx.progress.set_message("enqueueing messages");
    let filled = enqueue::fill(ctx, None).await?;
    let enqueued_in = started.elapsed();
    ctx.progress.set_position(0);
    ctx.progress.set_message("waiting for deliveries");
    let delivered = wait_for_deliveries(ctx, &counters.delivered, filled.jobs).await;
    let elapsed = started.elapsed();
    let requests = counters.requests.load(Ordering::Relaxed);
    server.abort();
    ctx.api
        .delete(&ctx.api.url(&format!("/api/subscriptions/{id}")))
        .await
        .context("deleting the bench subscription")?;

    let mut notes = vec![format!(
        "{} messages enqueued in {:.2} s ({} msg/s); deliveries/s = successful deliveries / \
         time from the first enqueue to the last success; {} requests reached the receiver",
        filled.jobs,
        enqueued_in.as_secs_f64(),
        format_rate(rate(filled.jobs, enqueued_in)),
        requests,
    )];
    if delivered < filled.jobs {
        notes.push(format!(
            "only {delivered} of {} messages were delivered before the scenario stopped",
            filled.jobs
        ));
    }
    Ok(ScenarioReport {
        jobs: delivered,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(delivered, elapsed),
        requests: vec![filled.latency.stats("POST /api/jobs/batch")],
        notes,
        ..ScenarioReport::default()
    })
}
