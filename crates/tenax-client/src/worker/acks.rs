//! Completions, batched: one `POST /api/jobs/complete` for many jobs.
//!
//! A completion waits at most `ack_interval` for others to share its request; it goes at once
//! when `ack_batch` are waiting, or when no job of the worker is still undecided (nothing else
//! could join it, and the stream, which counts unacknowledged jobs against its `max`, waits
//! for room). When the channel closes (shutdown), everything left is flushed, with retries for
//! at most [`FINAL_PATIENCE`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Inner;
use super::stats::add;
use crate::model::Lease;

/// How long the last flush keeps trying a server that does not answer.
const FINAL_PATIENCE: Duration = Duration::from_secs(10);

/// A job whose handler returned, waiting for its completion to be sent.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) lease: Lease,
    pub(crate) kind: String,
    /// How long the handler ran, for the log line of the completion.
    pub(crate) ran: Duration,
}

pub(crate) async fn run(inner: Arc<Inner>, mut completions: mpsc::UnboundedReceiver<Completion>) {
    let settings = &inner.settings;
    let mut pending: Vec<Completion> = Vec::new();
    // When the first waiting completion arrived.
    let mut oldest: Option<Instant> = None;
    let mut open = true;
    // After a failed flush: not before this.
    let mut retry_at: Option<Instant> = None;
    let mut backoff = Duration::from_millis(200);
    let mut give_up_at: Option<Instant> = None;
    loop {
        if !open && pending.is_empty() {
            return;
        }
        let now = Instant::now();
        let idle = inner.undecided.load(Ordering::SeqCst) == 0;
        let due = oldest.is_some_and(|t| now >= t + settings.ack_interval);
        let may_send = retry_at.is_none_or(|t| now >= t);
        if !pending.is_empty()
            && may_send
            && (!open || idle || due || pending.len() >= settings.ack_batch)
        {
            let take = pending.len().min(settings.ack_batch);
            let batch: Vec<Completion> = pending.drain(..take).collect();
            let leases: Vec<Lease> = batch.iter().map(|c| c.lease).collect();
            match inner.client.complete_many(&leases).await {
                Ok(results) => {
                    add(&inner.counters.ack_requests, 1);
                    let sent: HashMap<u64, &Completion> =
                        batch.iter().map(|c| (c.lease.id, c)).collect();
                    for result in results {
                        if result.completed {
                            add(&inner.counters.completed, 1);
                            if let Some(done) = sent.get(&result.id) {
                                inner
                                    .outcomes
                                    .completed(done.lease.id, &done.kind, done.ran);
                            }
                        } else {
                            add(&inner.counters.lost, 1);
                            tracing::warn!(
                                job = result.id,
                                reason = result.error.as_ref().map(|e| e.message.as_str()),
                                "the job ran, but its completion was refused: it may run again"
                            );
                        }
                    }
                    retry_at = None;
                    backoff = Duration::from_millis(200);
                }
                Err(error) if error.is_transient() => {
                    tracing::warn!(%error, jobs = batch.len(), "cannot report completions; trying again");
                    pending.splice(0..0, batch);
                    retry_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(error) => {
                    add(&inner.counters.lost, batch.len() as u64);
                    tracing::error!(%error, jobs = batch.len(), "completions refused: those jobs will run again");
                }
            }
            oldest = if pending.is_empty() {
                None
            } else {
                Some(oldest.unwrap_or(now))
            };
            if !open && give_up_at.is_some_and(|t| Instant::now() >= t) && !pending.is_empty() {
                add(&inner.counters.lost, pending.len() as u64);
                tracing::error!(
                    jobs = pending.len(),
                    "completions could not be reported before shutdown: those jobs will run again"
                );
                return;
            }
            continue;
        }
        let wake = match (oldest, retry_at) {
            (Some(t), Some(r)) => Some((t + settings.ack_interval).max(r)),
            (Some(t), None) => Some(t + settings.ack_interval),
            (None, _) => None,
        };
        tokio::select! {
            completion = completions.recv(), if open => match completion {
                Some(completion) => {
                    pending.push(completion);
                    oldest.get_or_insert_with(Instant::now);
                    // Take every completion already waiting before deciding to flush: they
                    // belong in the same request.
                    while let Ok(completion) = completions.try_recv() {
                        pending.push(completion);
                    }
                }
                None => {
                    open = false;
                    give_up_at = Some(Instant::now() + FINAL_PATIENCE);
                }
            },
            () = sleep_until(wake), if wake.is_some() => {}
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
