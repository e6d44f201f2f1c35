//! Enqueue scenarios (`enqueue-1`, `enqueue-8`, `bulk-100`, `bulk-1000`), and the bulk load the
//! other scenarios fill their queues with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use indicatif::ProgressBar;

use super::lane::Lane;
use super::{Ctx, Latency, ScenarioReport, Stop, batch_body, job, join_all, rate};

/// Connections of the bulk scenarios and of every fill.
pub(super) const BULK_CONNECTIONS: usize = 4;
/// Jobs per request of a fill.
pub(super) const FILL_BATCH: usize = 1_000;

/// The same body POSTed `requests` times over `connections` connections (or, without a body,
/// the same GET).
#[derive(Debug)]
pub(super) struct Load {
    pub url: String,
    /// `None`: a GET.
    pub body: Option<Bytes>,
    pub jobs_per_request: u64,
    pub connections: usize,
    pub requests: u64,
    pub deadline: Instant,
    /// Advanced by the jobs of each acknowledged request.
    pub progress: ProgressBar,
}

#[derive(Debug)]
pub(super) struct Loaded {
    /// Jobs the server acknowledged.
    pub jobs: u64,
    pub jobs_per_request: u64,
    pub requests: u64,
    pub elapsed: Duration,
    pub latency: Latency,
}

/// Sends a load; the first error stops every connection.
pub(super) async fn send(ctx: &Ctx, load: Load) -> anyhow::Result<Loaded> {
    let load = Arc::new(load);
    let next = Arc::new(AtomicU64::new(0));
    let stop = Stop::default();
    let started = Instant::now();
    let tasks = (0..load.connections)
        .map(|_| {
            let (api, load, next, stop) =
                (ctx.api.clone(), load.clone(), next.clone(), stop.clone());
            let progress = load.progress.clone();
            tokio::spawn(async move {
                let mut latency = Latency::new();
                let mut jobs = 0;
                let mut lane = match Lane::open(&api).await {
                    Ok(lane) => lane,
                    Err(error) => {
                        stop.set();
                        return Err(error);
                    }
                };
                while !stop.is_set() && Instant::now() < load.deadline {
                    if next.fetch_add(1, Ordering::Relaxed) >= load.requests {
                        break;
                    }
                    let sent = Instant::now();
                    if let Err(error) = lane.send(load.body.clone(), &load.url).await {
                        stop.set();
                        return Err(error);
                    }
                    latency.record(sent.elapsed());
                    jobs += load.jobs_per_request;
                    progress.inc(load.jobs_per_request);
                }
                Ok((jobs, latency))
            })
        })
        .collect();
    let results = join_all(tasks).await?;
    let elapsed = started.elapsed();
    let mut latency = Latency::new();
    let mut jobs = 0;
    for (n, part) in &results {
        jobs += n;
        latency.merge(part);
    }
    Ok(Loaded {
        jobs,
        jobs_per_request: load.jobs_per_request,
        requests: latency.count(),
        elapsed,
        latency,
    })
}

/// Fills the scenario's queue with `ctx.jobs` (rounded up to whole requests) through
/// `POST /api/jobs/batch`, up to 1000 jobs a request over 4 connections.
pub(super) async fn fill(ctx: &Ctx, run_at_ms: Option<u64>) -> anyhow::Result<Loaded> {
    let batch = usize::try_from(ctx.jobs).map_or(FILL_BATCH, |n| n.clamp(1, FILL_BATCH));
    let per = batch as u64;
    send(
        ctx,
        Load {
            url: ctx.api.url("/api/jobs/batch"),
            body: Some(batch_body(&ctx.queue, batch, run_at_ms)),
            jobs_per_request: per,
            connections: BULK_CONNECTIONS,
            requests: ctx.jobs.div_ceil(per),
            deadline: ctx.deadline(),
            progress: ctx.progress.clone(),
        },
    )
    .await
}

/// `enqueue-1` and `enqueue-8`: one job per request.
pub(super) async fn single(ctx: &Ctx, connections: usize) -> anyhow::Result<ScenarioReport> {
    let connections = ctx.config.connections.unwrap_or(connections);
    let body = Bytes::from(serde_json::to_vec(&job(&ctx.queue, None))?);
    let loaded = send(
        ctx,
        Load {
            url: ctx.api.url("/api/jobs"),
            body: Some(body),
            jobs_per_request: 1,
            connections,
            requests: ctx.jobs,
            deadline: ctx.deadline(),
            progress: ctx.progress.clone(),
        },
    )
    .await?;
    Ok(report(
        ctx,
        &loaded,
        "POST /api/jobs",
        ctx.jobs,
        connections,
    ))
}

/// `bulk-100` and `bulk-1000`: `per` jobs per request over 4 connections (or `--connections`).
pub(super) async fn bulk(ctx: &Ctx, per: usize) -> anyhow::Result<ScenarioReport> {
    let jobs_per_request = per as u64;
    let requests = ctx.jobs.div_ceil(jobs_per_request);
    let connections = ctx.config.connections.unwrap_or(BULK_CONNECTIONS);
    let loaded = send(
        ctx,
        Load {
            url: ctx.api.url("/api/jobs/batch"),
            body: Some(batch_body(&ctx.queue, per, None)),
            jobs_per_request,
            connections,
            requests,
            deadline: ctx.deadline(),
            progress: ctx.progress.clone(),
        },
    )
    .await?;
    let name = format!("POST /api/jobs/batch ({per})");
    Ok(report(
        ctx,
        &loaded,
        &name,
        requests * jobs_per_request,
        connections,
    ))
}

/// `growth`: bulk enqueue of 100 jobs a request over 4 connections (or `--connections`)
/// while the store grows to `--jobs` (a million by default): its tail latency (p99.9, max)
/// shows whether any request waits on the store's growth.
pub(super) async fn growth(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let mut report = bulk(ctx, 100).await?;
    report
        .notes
        .push("the store grows from its size at the start by --jobs: look at p99.9 and max".into());
    Ok(report)
}

fn report(
    ctx: &Ctx,
    loaded: &Loaded,
    request: &str,
    planned: u64,
    connections: usize,
) -> ScenarioReport {
    let mut notes = vec![format!(
        "{connections} connection(s); jobs/s = jobs acknowledged / wall time"
    )];
    if loaded.jobs < planned {
        notes.push(format!(
            "stopped at --max-seconds ({}s) after {} of {planned} jobs",
            ctx.config.max_seconds, loaded.jobs
        ));
    }
    ScenarioReport {
        jobs: loaded.jobs,
        seconds: loaded.elapsed.as_secs_f64(),
        jobs_per_sec: rate(loaded.jobs, loaded.elapsed),
        requests: vec![loaded.latency.stats(request)],
        notes,
        ..ScenarioReport::default()
    }
}
