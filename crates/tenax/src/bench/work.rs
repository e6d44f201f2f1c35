//! The worker's side: `take-complete` (drain a filled queue) and `mixed` (producers and
//! consumers at once).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use bytes::Bytes;
use indicatif::ProgressBar;
use serde::Deserialize;
use serde_json::json;

use super::enqueue::{self, Load};
use super::{
    Api, Ctx, Latency, ScenarioReport, Stop, batch_body, complete_body, join_all, now_ms, rate,
};
use crate::bench::report::format_rate;
use crate::clock::parse_rfc3339;

/// Long-poll of a take that finds nothing: short, so workers notice the end promptly.
const TAKE_WAIT_MS: u64 = 100;
/// Lease of taken jobs: far longer than any run, so none expires mid-benchmark.
const LEASE_MS: u64 = 300_000;
/// Jobs per producer request in `mixed`.
const MIXED_BATCH: usize = 100;

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
struct Drain {
    take_url: String,
    complete_url: String,
    take_body: Bytes,
    /// Jobs to complete in all.
    target: u64,
    taken: AtomicU64,
    deadline: Instant,
    /// Record each job's time from enqueue (its `created_at`) to its completion.
    end_to_end: bool,
    stop: Stop,
    progress: ProgressBar,
}

#[derive(Debug, Default)]
struct Drained {
    take: Latency,
    complete: Latency,
    end_to_end: Latency,
    completed: u64,
    refused: u64,
    empty_takes: u64,
    last_completion: Option<Instant>,
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
async fn drain(ctx: &Ctx, workers: usize, drain: Arc<Drain>) -> anyhow::Result<Drained> {
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

fn new_drain(ctx: &Ctx, target: u64, end_to_end: bool) -> Drain {
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

fn drained_notes(drained: &Drained, target: u64, max_seconds: u64) -> Vec<String> {
    let mut notes = Vec::new();
    if drained.refused > 0 {
        notes.push(format!(
            "{} completions refused (lease lost?)",
            drained.refused
        ));
    }
    if drained.completed < target {
        notes.push(format!(
            "stopped after {} of {target} jobs (--max-seconds {max_seconds})",
            drained.completed
        ));
    }
    notes
}

/// `take-complete`: fill the queue, then drain it with `workers` take+complete loops.
pub(super) async fn take_complete(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    ctx.progress.set_message("filling");
    let filled = enqueue::fill(ctx, None).await?;
    ctx.progress.set_position(0);
    ctx.progress.set_message("taking and completing");
    let workers = ctx.config.workers.max(1);
    let started = Instant::now();
    let drained = drain(ctx, workers, Arc::new(new_drain(ctx, filled.jobs, false))).await?;
    let elapsed = drained.last_completion.unwrap_or(started) - started;
    let mut notes = vec![
        format!(
            "filled {} jobs first ({} jobs/s, {} requests of {}); then {workers} workers, take max {}",
            filled.jobs,
            format_rate(rate(filled.jobs, filled.elapsed)),
            filled.requests,
            filled.jobs_per_request,
            ctx.config.take_max
        ),
        "jobs/s = jobs completed / time from the first take to the last completion".into(),
    ];
    notes.extend(drained_notes(&drained, filled.jobs, ctx.config.max_seconds));
    Ok(ScenarioReport {
        jobs: drained.completed,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(drained.completed, elapsed),
        requests: vec![
            drained
                .take
                .stats(&format!("POST /api/take (max {})", ctx.config.take_max)),
            drained.complete.stats("POST /api/jobs/complete"),
        ],
        notes,
        ..ScenarioReport::default()
    })
}

/// `mixed`: producers enqueue in batches of 100 while consumers take and complete; the rate is
/// of jobs completed end to end.
pub(super) async fn mixed(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let side = (ctx.config.workers / 2).max(1);
    let per = MIXED_BATCH as u64;
    let requests = ctx.jobs.div_ceil(per);
    let target = requests * per;
    let drain_state = Arc::new(new_drain(ctx, target, true));
    let stop_consumers = drain_state.stop.clone();
    let started = Instant::now();
    let producers = async {
        let load = Load {
            url: ctx.api.url("/api/jobs/batch"),
            body: batch_body(&ctx.queue, MIXED_BATCH, None),
            jobs_per_request: per,
            connections: side,
            requests,
            deadline: ctx.deadline(),
            progress: ProgressBar::hidden(),
        };
        let produced = enqueue::send(ctx, load).await;
        if produced.is_err() {
            stop_consumers.set();
        }
        produced
    };
    let (produced, drained) = tokio::join!(producers, drain(ctx, side, drain_state));
    let (produced, drained) = (produced?, drained?);
    let elapsed = drained.last_completion.unwrap_or(started) - started;
    let mut notes = vec![
        format!(
            "{side} producer(s) (batches of {MIXED_BATCH}) and {side} consumer(s) (take max {}) at once",
            ctx.config.take_max
        ),
        format!(
            "enqueued {} jobs in {:.2}s ({} jobs/s)",
            produced.jobs,
            produced.elapsed.as_secs_f64(),
            format_rate(rate(produced.jobs, produced.elapsed))
        ),
        "jobs/s = jobs completed / time from start to the last completion".into(),
        "enqueue→complete is per job, from the server's created_at (ms resolution)".into(),
    ];
    notes.extend(drained_notes(
        &drained,
        produced.jobs,
        ctx.config.max_seconds,
    ));
    Ok(ScenarioReport {
        jobs: drained.completed,
        seconds: elapsed.as_secs_f64(),
        jobs_per_sec: rate(drained.completed, elapsed),
        requests: vec![
            produced
                .latency
                .stats(&format!("POST /api/jobs/batch ({MIXED_BATCH})")),
            drained
                .take
                .stats(&format!("POST /api/take (max {})", ctx.config.take_max)),
            drained.complete.stats("POST /api/jobs/complete"),
            drained.end_to_end.stats("enqueue→complete (per job)"),
        ],
        notes,
        ..ScenarioReport::default()
    })
}
