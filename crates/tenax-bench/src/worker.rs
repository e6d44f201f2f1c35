//! `take-complete-worker` and `mixed-worker`: the worker scenarios of `work.rs` with
//! tenax-client's worker runtime as the consumers, so that the runtime's overhead over a
//! hand-written take/complete loop is measured. Same queue, job count, payload, fill and
//! producers; the handler does nothing, so every job is completed.
//!
//! The fair equivalent of the hand-written loop's consumers (`--workers`, half of it in mixed,
//! each taking up to `--take-max` and completing them in one request): as many `Worker`s,
//! each with `concurrency = --take-max` and `ack_batch = --take-max`. A worker's stream then
//! holds at most `--take-max` jobs leased, as a hand-written consumer does between its take and
//! its complete, and its completions go in requests of up to `--take-max` (flushed at once when
//! no job of the worker is left undecided, or after the default `ack_interval` of 50 ms). The
//! lease is the hand-written loop's, far longer than a run: no heartbeat is sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use serde::de::IgnoredAny;
use tenax_client::{Client, Job, JobError, Worker, WorkerHandle};

use super::work::{
    LEASE_MS, MIXED_BATCH, MixedPlan, drained_notes, drained_report, fill_for_drain, produced_note,
    produced_stats,
};
use super::{Ctx, JOB_TYPE, Latency, ScenarioReport, Stop, join_all};

/// How often the workers' counters are read: the resolution of the last completion's time,
/// and of each job's completion time in `mixed-worker`.
const POLL: Duration = Duration::from_millis(1);

/// What one worker's handler saw, for `mixed-worker`.
#[derive(Debug, Default)]
struct Seen {
    /// Enqueue (the server's `created_at`) to the handler's start, per job.
    handled: Latency,
    /// `created_at` (µs since the epoch) of the jobs handled and not yet counted completed,
    /// in the order the handler saw them.
    awaiting: VecDeque<u64>,
}

/// What one worker's handler saw, shared with the poll; `None` when nothing is recorded.
type Shared = Option<Arc<Mutex<Seen>>>;

/// Workers built, not started yet.
#[derive(Debug)]
struct Consumers {
    workers: Vec<(Worker, Shared)>,
    settings: String,
}

/// A running worker, as the poll sees it.
#[derive(Debug)]
struct Watched {
    handle: WorkerHandle,
    seen: Shared,
    /// Its completions counted so far.
    counted: u64,
}

impl Watched {
    /// Its completions now; those since the last poll are recorded in `end_to_end` as
    /// completed `now_us`.
    fn poll(&mut self, now_us: u64, end_to_end: &mut Latency) -> u64 {
        let done = self.handle.stats().completed;
        // Completions are acknowledged in the order the handlers finished, within a
        // millisecond or so of the order they started in: the oldest jobs seen are the ones
        // just counted.
        if let Some(seen) = &self.seen {
            let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            for _ in self.counted..done {
                if let Some(created) = seen.awaiting.pop_front() {
                    end_to_end.record_us(now_us.saturating_sub(created));
                }
            }
        }
        self.counted = done;
        done
    }
}

/// What the workers did.
#[derive(Debug, Default)]
struct Consumed {
    /// Jobs the workers' counters showed completed by the last poll that saw one.
    completed: u64,
    last_completion: Option<Instant>,
    /// The workers' counters once they stopped, summed.
    lost: u64,
    ack_requests: u64,
    stream_errors: u64,
    handled: Latency,
    /// Enqueue to the completion's acknowledgement, per job (`mixed-worker`).
    end_to_end: Latency,
}

fn micros_since_epoch(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl Consumers {
    /// `count` workers on the scenario's queue; `end_to_end` records each job's latency.
    fn build(ctx: &Ctx, count: usize, end_to_end: bool) -> anyhow::Result<Self> {
        let options = &ctx.config.client;
        let mut client = Client::builder().url(&ctx.config.url);
        if let Some(token) = &options.token {
            client = client.token(token);
        }
        if let Some(path) = &options.ca_file {
            client = client.ca_file(path);
        }
        let client = client.build().context("building the tenax-client client")?;
        let per_worker = ctx.config.take_max;
        let mut workers = Vec::with_capacity(count);
        for _ in 0..count {
            let seen = end_to_end.then(|| Arc::new(Mutex::new(Seen::default())));
            let record = seen.clone();
            let worker = Worker::builder(client.clone())
                .queue(&ctx.queue)
                .concurrency(per_worker)
                .ack_batch(per_worker)
                .lease(Duration::from_millis(LEASE_MS))
                .handler(JOB_TYPE, move |job: Job<IgnoredAny>| {
                    if let Some(seen) = &record {
                        let created = micros_since_epoch(job.created_at);
                        let now = micros_since_epoch(SystemTime::now());
                        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                        seen.handled.record_us(now.saturating_sub(created));
                        seen.awaiting.push_back(created);
                    }
                    std::future::ready(Ok::<_, JobError>(()))
                })
                .build()
                .context("building a tenax-client worker")?;
            workers.push((worker, seen));
        }
        Ok(Self {
            workers,
            settings: format!(
                "{count} tenax-client worker(s), concurrency {per_worker} and ack_batch \
                 {per_worker} each (the equivalent of take max {per_worker}), no-op handler"
            ),
        })
    }

    /// Runs the workers until `target` jobs are completed, `stop` is set, a worker fails or
    /// `--max-seconds` pass; then shuts them down gracefully.
    async fn run(self, ctx: &Ctx, target: u64, stop: &Stop) -> anyhow::Result<Consumed> {
        let mut watched = Vec::new();
        let mut tasks = Vec::new();
        for (worker, seen) in self.workers {
            watched.push(Watched {
                handle: worker.handle(),
                seen,
                counted: 0,
            });
            tasks.push(tokio::spawn(async move {
                worker
                    .run()
                    .await
                    .context("a tenax-client worker stopped with an error")
            }));
        }
        let deadline = ctx.deadline();
        let mut out = Consumed::default();
        let mut ticks = tokio::time::interval(POLL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            ticks.tick().await;
            let now = Instant::now();
            let now_us = micros_since_epoch(SystemTime::now());
            let mut completed = 0;
            for worker in &mut watched {
                completed += worker.poll(now_us, &mut out.end_to_end);
            }
            if completed > out.completed {
                out.completed = completed;
                out.last_completion = Some(now);
                ctx.progress.set_position(completed);
            }
            if completed >= target
                || stop.is_set()
                || now >= deadline
                || tasks.iter().any(tokio::task::JoinHandle::is_finished)
            {
                break;
            }
        }
        for worker in &watched {
            worker.handle.shutdown();
        }
        for stats in join_all(tasks).await? {
            out.lost += stats.lost;
            out.ack_requests += stats.ack_requests;
            out.stream_errors += stats.stream_errors;
        }
        for worker in &watched {
            if let Some(seen) = &worker.seen {
                let seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                out.handled.merge(&seen.handled);
            }
        }
        Ok(out)
    }
}

impl Consumed {
    /// The runtime's own figures.
    fn note(&self) -> String {
        let per_request = self.completed as f64 / self.ack_requests.max(1) as f64;
        format!(
            "{} completion requests ({per_request:.0} jobs each on average), {} stream reopenings",
            self.ack_requests, self.stream_errors
        )
    }
}

/// `take-complete-worker`: fill the queue, then drain it with `--workers` workers.
pub(super) async fn take_complete(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let (filled, filled_note) = fill_for_drain(ctx).await?;
    let consumers = Consumers::build(ctx, ctx.config.workers.max(1), false)?;
    let settings = consumers.settings.clone();
    let started = Instant::now();
    let consumed = consumers.run(ctx, filled.jobs, &Stop::default()).await?;
    let elapsed = consumed.last_completion.unwrap_or(started) - started;
    let mut notes = vec![
        format!("{filled_note}; then {settings}"),
        "jobs/s = jobs completed / time from the workers' start to the last completion \
         (read from their counters every millisecond)"
            .into(),
        consumed.note(),
    ];
    notes.extend(drained_notes(
        consumed.completed,
        consumed.lost,
        filled.jobs,
        ctx,
    ));
    Ok(drained_report(
        consumed.completed,
        elapsed,
        Vec::new(),
        notes,
    ))
}

/// `mixed-worker`: `mixed`'s producers while workers take and complete.
pub(super) async fn mixed(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let plan = MixedPlan::new(ctx);
    let consumers = Consumers::build(ctx, plan.side, true)?;
    let settings = consumers.settings.clone();
    let stop = Stop::default();
    let started = Instant::now();
    let (produced, consumed) = tokio::join!(
        plan.produce(ctx, &stop),
        consumers.run(ctx, plan.target, &stop)
    );
    let (produced, consumed) = (produced?, consumed?);
    let elapsed = consumed.last_completion.unwrap_or(started) - started;
    let mut notes = vec![
        format!(
            "{} producer(s) (batches of {MIXED_BATCH}) and {settings}, at once",
            plan.side
        ),
        produced_note(&produced),
        "jobs/s = jobs completed / time from start to the last completion (read from the \
         workers' counters every millisecond)"
            .into(),
        "enqueue→handler is per job, from the server's created_at (ms resolution) to the \
         handler's start; enqueue→complete to the poll that saw the job's completion counted \
         (in the order the handlers saw the jobs)"
            .into(),
        consumed.note(),
    ];
    notes.extend(drained_notes(
        consumed.completed,
        consumed.lost,
        produced.jobs,
        ctx,
    ));
    let requests = vec![
        produced_stats(&produced),
        consumed.handled.stats("enqueue→handler (per job)"),
        consumed.end_to_end.stats("enqueue→complete (per job)"),
    ];
    Ok(drained_report(consumed.completed, elapsed, requests, notes))
}
