//! `promotion`: many jobs due at one instant; how fast do they become ready?
//!
//! The jobs are enqueued (bulk) with one `run_at` a little in the future. From that instant the
//! scenario polls `GET /api/stats` until the queue shows none scheduled; the rate is the jobs
//! promoted over the time from `run_at` to that observation.

use std::time::{Duration, Instant};

use super::enqueue;
use super::{Ctx, Latency, ScenarioReport, now_ms};
use crate::report::format_rate;

/// Pause between two polls of the counts.
const POLL_EVERY: Duration = Duration::from_millis(1);

/// Milliseconds since the Unix epoch with a fraction (microseconds).
fn now_ms_f64() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

pub(super) async fn run(ctx: &Ctx) -> anyhow::Result<ScenarioReport> {
    let lead_ms = u64::try_from(ctx.config.promotion_lead.as_millis()).unwrap_or(u64::MAX);
    let run_at = now_ms().saturating_add(lead_ms);
    ctx.progress.set_message("enqueueing scheduled jobs");
    let filled = enqueue::fill(ctx, Some(run_at)).await?;
    let filled_at = now_ms_f64();
    let counts = ctx.api.queue_counts(&ctx.queue).await?;
    if filled_at > run_at as f64 {
        anyhow::bail!(
            "the enqueue ended {:.0} ms after run_at, with {} of {} jobs still scheduled: the \
             promotion cannot be timed; give a longer --promotion-lead (now {lead_ms} ms)",
            filled_at - run_at as f64,
            counts.scheduled,
            filled.jobs
        );
    }
    let mut notes = vec![format!(
        "{} jobs enqueued with run_at {} ms ahead ({} requests of {}, {} jobs/s); \
         jobs/s = jobs / time from run_at until /api/stats shows none scheduled",
        filled.jobs,
        lead_ms,
        filled.requests,
        filled.jobs_per_request,
        format_rate(super::rate(filled.jobs, filled.elapsed)),
    )];
    if counts.scheduled != filled.jobs {
        notes.push(format!(
            "expected {} scheduled jobs before run_at, saw {}",
            filled.jobs, counts.scheduled
        ));
    }

    let wait = run_at.saturating_sub(now_ms()).saturating_sub(20);
    ctx.progress.set_position(0);
    ctx.progress.set_message("waiting for run_at");
    tokio::time::sleep(Duration::from_millis(wait)).await;
    ctx.progress.set_message("polling /api/stats");
    let deadline = Instant::now() + Duration::from_secs(ctx.config.max_seconds);
    let mut poll = Latency::new();
    let mut first_ready: Option<f64> = None;
    let (promoted, all_ready) = loop {
        let sent = Instant::now();
        let counts = ctx.api.queue_counts(&ctx.queue).await?;
        poll.record(sent.elapsed());
        let seen = now_ms_f64();
        let promoted = counts.total().saturating_sub(counts.scheduled);
        ctx.progress.set_position(promoted);
        if promoted > 0 && first_ready.is_none() && seen >= run_at as f64 {
            first_ready = Some(seen - run_at as f64);
        }
        if counts.scheduled == 0 && counts.total() >= filled.jobs {
            break (promoted, Some(seen));
        }
        if Instant::now() >= deadline {
            break (promoted, None);
        }
        tokio::time::sleep(POLL_EVERY).await;
    };
    if let Some(first) = first_ready {
        notes.push(format!("first jobs seen ready {first:.1} ms after run_at"));
    }
    let (jobs, seconds) = match all_ready {
        Some(at) => (filled.jobs, ((at - run_at as f64) / 1_000.0).max(0.0)),
        None => {
            notes.push(format!(
                "only {promoted} of {} jobs ready after --max-seconds ({}s)",
                filled.jobs, ctx.config.max_seconds
            ));
            (
                promoted,
                ((now_ms_f64() - run_at as f64) / 1_000.0).max(0.0),
            )
        }
    };
    let jobs_per_sec = if seconds > 0.0 {
        jobs as f64 / seconds
    } else {
        0.0
    };
    Ok(ScenarioReport {
        jobs,
        seconds,
        jobs_per_sec,
        requests: vec![
            filled.latency.stats(&format!(
                "POST /api/jobs/batch ({})",
                filled.jobs_per_request
            )),
            poll.stats("GET /api/stats (polling)"),
        ],
        notes,
        ..ScenarioReport::default()
    })
}
