//! The worker's side: `take-complete` (drain a filled queue) and `mixed` (producers and
//! consumers at once), with a hand-written take/complete loop. The fill, the producers, the
//! notes and the report are shared with the worker-runtime variants (`worker.rs`).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use indicatif::ProgressBar;
use serde::Deserialize;
use serde_json::json;
use tenax_core::clock::parse_rfc3339;

use super::enqueue::{self, Load, Loaded};
use super::{
    Api, Ctx, Latency, RequestStats, ScenarioReport, Stop, batch_body, complete_body, join_all,
    now_ms, rate,
};
use crate::report::format_rate;

/// Long-poll of a take that finds nothing: short, so workers notice the end promptly.
const TAKE_WAIT_MS: u64 = 100;
/// Lease of taken jobs: far longer than any run, so none expires mid-benchmark.
pub(super) const LEASE_MS: u64 = 300_000;
/// Jobs per producer request in `mixed`.
pub(super) const MIXED_BATCH: usize = 100;

#[derive(Debug, Deserialize)]
struct TakeAnswer<'a> {
    #[serde(borrow)]
    jobs: Vec<Taken<'a>>,
}

#[derive(Debug, Deserialize)]
struct Taken<'a> {
    id: u64,
    lease_token: u64,
    #[serde(borrow)]
    created_at: Cow<'a, str>,
}

#[derive(Debug, Deserialize)]
struct CompleteAnswer {
    results: Vec<Completed>,
}

#[derive(Debug, Deserialize)]
struct Completed {
    completed: bool,
}

/// What the consumers of one scenario share.
#[derive(Debug)]
pub(super) struct Drain {
    take_url: String,
    complete_url: String,
    take_body: Bytes,
    /// Jobs to complete in all.
    target: u64,
    taken: AtomicU64,
    deadline: Instant,
    /// Record each job's time from enqueue (its `created_at`) to its completion.
    end_to_end: bool,
    pub stop: Stop,
    progress: ProgressBar,
}

#[derive(Debug, Default)]
pub(super) struct Drained {
    pub take: Latency,
    pub complete: Latency,
    pub end_to_end: Latency,
    pub completed: u64,
    pub refused: u64,
    empty_takes: u64,
    pub last_completion: Option<Instant>,
}

impl Drained {
    fn merge(&mut self, other: &Drained) {
        self.take.merge(&other.take);
        self.complete.merge(&other.complete);
        self.end_to_end.merge(&other.end_to_end);
        self.completed += other.completed;
        self.refused += other.refused;
        self.empty_takes += other.empty_takes;
        self.last_completion = self.last_completion.max(other.last_completion);
    }
}

/// One worker: take a batch, complete it, until the target is taken or time is up.
async fn consume(api: Api, drain: Arc<Drain>) -> anyhow::Result<Drained> {
    let mut out = Drained::default();
    let mut acks: Vec<(u64, u64)> = Vec::new();
    let mut created: Vec<u64> = Vec::new();
    while !drain.stop.is_set()
        && Instant::now() < drain.deadline
        && drain.taken.load(Ordering::Relaxed) < drain.target
    {
        let sent = Instant::now();
        let bytes = api.post(&drain.take_url, drain.take_body.clone()).await?;
        out.take.record(sent.elapsed());
        let answer: TakeAnswer<'_> =
            serde_json::from_slice(&bytes).context("reading a take answer")?;
        if answer.jobs.is_empty() {
            out.empty_takes += 1;
            continue;
        }
        acks.clear();
        created.clear();
        for job in &answer.jobs {
            acks.push((job.id, job.lease_token));
            if drain.end_to_end {
                created.push(parse_rfc3339(&job.created_at).unwrap_or(0));
            }
        }
        drain.taken.fetch_add(acks.len() as u64, Ordering::Relaxed);
        let sent = Instant::now();
        let bytes = api.post(&drain.complete_url, complete_body(&acks)).await?;
        let done = Instant::now();
        out.complete.record(done - sent);
        let answer: CompleteAnswer =
            serde_json::from_slice(&bytes).context("reading a complete answer")?;
        let ok = answer.results.iter().filter(|r| r.completed).count() as u64;
        out.completed += ok;
        out.refused += answer.results.len() as u64 - ok;
        out.last_completion = Some(done);
        drain.progress.inc(ok);
        if drain.end_to_end {
            let now = now_ms();
            for at in &created {
                out.end_to_end
                    .record_us(now.saturating_sub(*at).saturating_mul(1_000));
            }
        }
    }
    Ok(out)
}

/// Runs `workers` consumers to the end and merges what they saw.
pub(super) async fn drain(ctx: &Ctx, workers: usize, drain: Arc<Drain>) -> anyhow::Result<Drained> {
    let tasks = (0..workers)
        .map(|_| {
            let (api, drain) = (ctx.api.clone(), drain.clone());
            tokio::spawn(async move {
                let result = consume(api, drain.clone()).await;
                if result.is_err() {
                    drain.stop.set();
                }
                result
            })
        })
        .collect();
    let mut all = Drained::default();
    for part in join_all(tasks).await? {
        all.merge(&part);
    }
    Ok(all)
}

pub(super) fn new_drain(ctx: &Ctx, target: u64, end_to_end: bool) -> Drain {
    let take_body = json!({
        "queues": [ctx.queue],
        "max": ctx.config.take_max,
        "lease": LEASE_MS,
        "wait": TAKE_WAIT_MS,
    });
    Drain {
        take_url: ctx.api.url("/api/take"),
        complete_url: ctx.api.url("/api/jobs/complete"),
        take_body: Bytes::from(take_body.to_string()),
        target,
        taken: AtomicU64::new(0),
        deadline: ctx.deadline(),
        end_to_end,
        stop: Stop::default(),
        progress: ctx.progress.clone(),
    }
}

/// Drains `target` jobs of the scenario's queue with `workers` take+complete loops (take max
/// `--take-max`); returns how many were completed.
pub(super) async fn drain_queue(ctx: &Ctx, workers: usize, target: u64) -> anyhow::Result<u64> {
    let drained = drain(ctx, workers, Arc::new(new_drain(ctx, target, false))).await?;
    Ok(drained.completed)
}

/// Notes on a drain that did not go to plan: `refused` completions, fewer than `target` jobs.
pub(super) fn drained_notes(completed: u64, refused: u64, target: u64, ctx: &Ctx) -> Vec<String> {
    let max_seconds = ctx.config.max_seconds;
    let mut notes = Vec::new();
    if refused > 0 {
        notes.push(format!("{refused} completions refused (lease lost?)"));
    }
    if completed < target {
        notes.push(format!(
            "stopped after {completed} of {target} jobs (--max-seconds {max_seconds})"
        ));
    }
    notes
}

/// The report of a drain: `completed` jobs in `elapsed`.
pub(super) fn drained_report(
    completed: u64,
    elapsed: Duration,
    requests: Vec<RequestStats>,
    notes: Vec<String>,
) -> ScenarioReport {
    ScenarioReport {
        jobs: completed,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(completed, elapsed),
        requests,
        notes,
        ..ScenarioReport::default()
    }
}

/// Fills the queue before a drain (`take-complete`), and says how fast in a note.
pub(super) async fn fill_for_drain(ctx: &Ctx) -> anyhow::Result<(Loaded, String)> {
    ctx.progress.set_message("filling");
    let filled = enqueue::fill(ctx, None).await?;
    ctx.progress.set_position(0);
    ctx.progress.set_message("taking and completing");
    let note = format!(
        "filled {} jobs first ({} jobs/s, {} requests of {})",
        filled.jobs,
        format_rate(rate(filled.jobs, filled.elapsed)),
        filled.requests,
        filled.jobs_per_request,
    );
    Ok((filled, note))
}

/// What `mixed` produces: `side` producers (and consumers), `requests` batches of
/// [`MIXED_BATCH`], `target` jobs in all.
#[derive(Debug, Clone, Copy)]
pub(super) struct MixedPlan {
    pub side: usize,
    pub requests: u64,
    pub target: u64,
}

impl MixedPlan {
    pub(super) fn new(ctx: &Ctx) -> Self {
        let side = (ctx.config.workers / 2).max(1);
        let requests = ctx.jobs.div_ceil(MIXED_BATCH as u64);
        Self {
            side,
            requests,
            target: requests * MIXED_BATCH as u64,
        }
    }

    /// Runs the producers; a failure sets `stop_consumers`.
    pub(super) async fn produce(self, ctx: &Ctx, stop_consumers: &Stop) -> anyhow::Result<Loaded> {
        let load = Load {
            url: ctx.api.url("/api/jobs/batch"),
            body: Some(batch_body(&ctx.queue, MIXED_BATCH, None)),
            jobs_per_request: MIXED_BATCH as u64,
            connections: self.side,
            requests: self.requests,
            deadline: ctx.deadline(),
            progress: ProgressBar::hidden(),
        };
        let produced = enqueue::send(ctx, load).await;
        if produced.is_err() {
            stop_consumers.set();
        }
        produced
    }
}

/// The latency of `mixed`'s producer requests.
pub(super) fn produced_stats(produced: &Loaded) -> RequestStats {
    produced
        .latency
        .stats(&format!("POST /api/jobs/batch ({MIXED_BATCH})"))
}

/// The note on `mixed`'s producers.
pub(super) fn produced_note(produced: &Loaded) -> String {
    format!(
        "enqueued {} jobs in {:.2}s ({} jobs/s)",
        produced.jobs,
        produced.elapsed.as_secs_f64(),
        format_rate(rate(produced.jobs, produced.elapsed))
    )
}

/// `take-complete`: fill the queue, then drain it with `workers` take+complete loops.
pub(super) async fn take_complete(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let (filled, filled_note) = fill_for_drain(ctx).await?;
    let workers = ctx.config.workers.max(1);
    let started = Instant::now();
    let drained = drain(ctx, workers, Arc::new(new_drain(ctx, filled.jobs, false))).await?;
    let elapsed = drained.last_completion.unwrap_or(started) - started;
    let mut notes = vec![
        format!(
            "{filled_note}; then {workers} workers, take max {}",
            ctx.config.take_max
        ),
        "jobs/s = jobs completed / time from the first take to the last completion".into(),
    ];
    notes.extend(drained_notes(
        drained.completed,
        drained.refused,
        filled.jobs,
        ctx,
    ));
    let requests = vec![
        drained
            .take
            .stats(&format!("POST /api/take (max {})", ctx.config.take_max)),
        drained.complete.stats("POST /api/jobs/complete"),
    ];
    Ok(drained_report(drained.completed, elapsed, requests, notes))
}

/// `mixed`: producers enqueue in batches of 100 while consumers take and complete; the rate is
/// of jobs completed end to end.
pub(super) async fn mixed(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let plan = MixedPlan::new(ctx);
    let side = plan.side;
    let drain_state = Arc::new(new_drain(ctx, plan.target, true));
    let stop_consumers = drain_state.stop.clone();
    let started = Instant::now();
    let (produced, drained) = tokio::join!(
        plan.produce(ctx, &stop_consumers),
        drain(ctx, side, drain_state)
    );
    let (produced, drained) = (produced?, drained?);
    let elapsed = drained.last_completion.unwrap_or(started) - started;
    let mut notes = vec![
        format!(
            "{side} producer(s) (batches of {MIXED_BATCH}) and {side} consumer(s) (take max {}) at once",
            ctx.config.take_max
        ),
        produced_note(&produced),
        "jobs/s = jobs completed / time from start to the last completion".into(),
        "enqueue→complete is per job, from the server's created_at (ms resolution)".into(),
    ];
    notes.extend(drained_notes(
        drained.completed,
        drained.refused,
        produced.jobs,
        ctx,
    ));
    let requests = vec![
        produced_stats(&produced),
        drained
            .take
            .stats(&format!("POST /api/take (max {})", ctx.config.take_max)),
        drained.complete.stats("POST /api/jobs/complete"),
        drained.end_to_end.stats("enqueue→complete (per job)"),
    ];
    Ok(drained_report(drained.completed, elapsed, requests, notes))
}
