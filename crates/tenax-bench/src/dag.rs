//! `dag`: workflows of fan-out and fan-in (one job, then 100 that wait for it, then one that
//! waits for the 100: `POST /api/jobs/batch` of 102 jobs, each a workflow), enqueued by
//! producers while consumers take and complete, against the same jobs without their
//! dependencies in the same run: what the dependencies cost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::enqueue::{self, Load};
use super::work::{self, Drained};
use super::{Ctx, RequestStats, ScenarioReport, payload, rate};
use crate::report::format_rate;

/// Jobs that wait for the first of a workflow, and that its last waits for.
pub const FAN_OUT: usize = 100;
/// Jobs of one workflow.
pub const WORKFLOW_JOBS: usize = FAN_OUT + 2;

/// One workflow as a batch: the source, `FAN_OUT` jobs after it, the sink after those; or the
/// same jobs waiting for nothing (`plain`).
pub fn workflow_body(queue: &str, plain: bool) -> Bytes {
    let job = |kind: &str, after: Value| {
        let mut job = json!({"queue": queue, "type": kind, "payload": payload()});
        if !plain && after != Value::Null {
            job["after"] = after;
        }
        job
    };
    let mut jobs = vec![job("source", Value::Null)];
    jobs.extend((0..FAN_OUT).map(|_| job("fan", json!([{"index": 0}]))));
    let all: Vec<Value> = (1..=FAN_OUT).map(|i| json!({"index": i})).collect();
    jobs.push(job("sink", Value::Array(all)));
    Bytes::from(serde_json::to_vec(&json!({ "jobs": jobs })).unwrap_or_default())
}

/// One phase: producers send `requests` workflows while as many consumers drain them.
struct Phase {
    completed: u64,
    elapsed: Duration,
    drained: Drained,
    produce: RequestStats,
}

async fn phase(ctx: &Ctx, plain: bool, requests: u64, side: usize) -> anyhow::Result<Phase> {
    let target = requests * WORKFLOW_JOBS as u64;
    let drain_state = Arc::new(work::new_drain(ctx, target, true));
    let stop_consumers = drain_state.stop.clone();
    let load = Load {
        url: ctx.api.url("/api/jobs/batch"),
        body: Some(workflow_body(&ctx.queue, plain)),
        jobs_per_request: WORKFLOW_JOBS as u64,
        connections: side,
        requests,
        deadline: ctx.deadline(),
        progress: ProgressBar::hidden(),
    };
    let started = Instant::now();
    let produce = async {
        let produced = enqueue::send(ctx, load).await;
        if produced.is_err() {
            stop_consumers.set();
        }
        produced
    };
    let (produced, drained) = tokio::join!(produce, work::drain(ctx, side, drain_state));
    let (produced, drained) = (produced?, drained?);
    let elapsed = drained.last_completion.unwrap_or(started) - started;
    Ok(Phase {
        completed: drained.completed,
        elapsed,
        produce: produced
            .latency
            .stats(&format!("POST /api/jobs/batch ({WORKFLOW_JOBS})")),
        drained,
    })
}

pub(super) async fn run(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let side = (ctx.config.workers / 2).max(1);
    let requests = ctx.jobs.div_ceil(WORKFLOW_JOBS as u64).max(1);
    ctx.progress.set_message("plain jobs");
    let plain = phase(ctx, true, requests, side).await?;
    ctx.progress.set_position(0);
    ctx.progress.set_message("workflows");
    let dag = phase(ctx, false, requests, side).await?;
    let plain_rate = rate(plain.completed, plain.elapsed);
    let dag_rate = rate(dag.completed, dag.elapsed);
    let mut notes = vec![
        format!(
            "{requests} workflows of 1 → {FAN_OUT} → 1 ({WORKFLOW_JOBS} jobs, one batch each); \
             {side} producer(s) and {side} consumer(s) (take max {}) at once",
            ctx.config.take_max
        ),
        format!(
            "the same jobs without their dependencies first: {} jobs/s in {:.2}s; with them {} \
             jobs/s ({:.0} % of plain), {} workflows/s",
            format_rate(plain_rate),
            plain.elapsed.as_secs_f64(),
            format_rate(dag_rate),
            if plain_rate > 0.0 {
                dag_rate / plain_rate * 100.0
            } else {
                0.0
            },
            format_rate(rate(dag.completed / WORKFLOW_JOBS as u64, dag.elapsed)),
        ),
        "jobs/s = jobs completed / time from start to the last completion".into(),
    ];
    let target = requests * WORKFLOW_JOBS as u64;
    notes.extend(work::drained_notes(
        dag.completed,
        dag.drained.refused,
        target,
        ctx,
    ));
    let requests = vec![
        dag.produce,
        dag.drained
            .take
            .stats(&format!("POST /api/take (max {})", ctx.config.take_max)),
        dag.drained.complete.stats("POST /api/jobs/complete"),
        dag.drained.end_to_end.stats("enqueue→complete (per job)"),
        plain
            .drained
            .end_to_end
            .stats("plain: enqueue→complete (per job)"),
    ];
    Ok(work::drained_report(
        dag.completed,
        dag.elapsed,
        requests,
        notes,
    ))
}
