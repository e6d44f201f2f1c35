//! `take-one-1` and `take-one-8`: the simple worker. Each worker takes one job
//! (`POST /api/take` with `max: 1`) and completes it (`POST /api/jobs/{id}/complete`), one
//! request each, as most hand-written workers do. The queue is filled first, in batches.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::lane::Lane;
use super::work::{LEASE_MS, drained_notes, drained_report, fill_for_drain};
use super::{Api, Ctx, Latency, ScenarioReport, Stop, join_all};

/// Long-poll of a take that finds nothing: short, so workers notice the end promptly.
const TAKE_WAIT_MS: u64 = 100;

#[derive(Debug, Deserialize)]
struct TakeAnswer {
    jobs: Vec<Taken>,
}

#[derive(Debug, Deserialize)]
struct Taken {
    id: u64,
    lease_token: u64,
}

/// The answer of `POST /api/jobs/{id}/complete` (a refusal is an error status).
#[derive(Debug, Deserialize)]
struct CompleteAnswer {
    status: String,
}

/// What the workers share.
#[derive(Debug)]
struct Plan {
    take_body: Bytes,
    /// Jobs to take in all.
    target: u64,
    taken: AtomicU64,
    deadline: Instant,
    stop: Stop,
}

#[derive(Debug, Default)]
struct Worked {
    take: Latency,
    complete: Latency,
    completed: u64,
    refused: u64,
    last_completion: Option<Instant>,
}

/// One worker: take one, complete it, until the target is taken or time is up.
async fn work(
    api: Api,
    plan: Arc<Plan>,
    ctx_progress: indicatif::ProgressBar,
) -> anyhow::Result<Worked> {
    let mut out = Worked::default();
    let take_url = api.url("/api/take");
    let mut lane = Lane::open(&api).await?;
    while !plan.stop.is_set()
        && Instant::now() < plan.deadline
        && plan.taken.load(Ordering::Relaxed) < plan.target
    {
        let sent = Instant::now();
        let bytes = lane.post(&take_url, plan.take_body.clone()).await?;
        out.take.record(sent.elapsed());
        let answer: TakeAnswer = serde_json::from_slice(&bytes).context("reading a take answer")?;
        let Some(job) = answer.jobs.first() else {
            continue;
        };
        plan.taken.fetch_add(1, Ordering::Relaxed);
        let body = Bytes::from(format!("{{\"lease_token\":{}}}", job.lease_token));
        let sent = Instant::now();
        let bytes = lane
            .post(&api.url(&format!("/api/jobs/{}/complete", job.id)), body)
            .await?;
        let done = Instant::now();
        out.complete.record(done - sent);
        let answer: CompleteAnswer =
            serde_json::from_slice(&bytes).context("reading a complete answer")?;
        if answer.status == "completed" {
            out.completed += 1;
            ctx_progress.inc(1);
        } else {
            out.refused += 1;
        }
        out.last_completion = Some(done);
    }
    Ok(out)
}

pub(super) async fn run(ctx: &Ctx, workers: usize) -> anyhow::Result<ScenarioReport> {
    let (filled, filled_note) = fill_for_drain(ctx).await?;
    let plan = Arc::new(Plan {
        take_body: Bytes::from(
            json!({"queues": [ctx.queue], "max": 1, "lease": LEASE_MS, "wait": TAKE_WAIT_MS})
                .to_string(),
        ),
        target: filled.jobs,
        taken: AtomicU64::new(0),
        deadline: ctx.deadline(),
        stop: Stop::default(),
    });
    let started = Instant::now();
    let tasks = (0..workers)
        .map(|_| {
            let (api, plan, progress) = (ctx.api.clone(), plan.clone(), ctx.progress.clone());
            tokio::spawn(async move {
                let result = work(api, plan.clone(), progress).await;
                if result.is_err() {
                    plan.stop.set();
                }
                result
            })
        })
        .collect();
    let mut all = Worked::default();
    for part in join_all(tasks).await? {
        all.take.merge(&part.take);
        all.complete.merge(&part.complete);
        all.completed += part.completed;
        all.refused += part.refused;
        all.last_completion = all.last_completion.max(part.last_completion);
    }
    let elapsed = all.last_completion.unwrap_or(started) - started;
    let mut notes = vec![
        format!("{filled_note}; then {workers} worker(s), each taking one job and completing it"),
        "jobs/s = jobs completed / time from the first take to the last completion".into(),
    ];
    notes.extend(drained_notes(all.completed, all.refused, filled.jobs, ctx));
    let requests = vec![
        all.take.stats("POST /api/take (max 1)"),
        all.complete.stats("POST /api/jobs/{id}/complete"),
    ];
    Ok(drained_report(all.completed, elapsed, requests, notes))
}
