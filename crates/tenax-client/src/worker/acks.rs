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

use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Inner;
use super::stats::add;
use crate::error::Result;
use crate::model::{CompleteResult, Lease};

/// How long the last flush keeps trying a server that does not answer.
const FINAL_PATIENCE: Duration = Duration::from_secs(10);

/// A job whose handler returned, waiting for its completion to be sent.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) lease: Lease,
    pub(crate) kind: String,
    /// How long the handler ran, for the log line of the completion.
    pub(crate) ran: Duration,
    /// What the handler returned, as the job's result.
    pub(crate) result: Option<Box<RawValue>>,
}

/// Sends `batch`'s completions in one request, with their results when one has any (the
/// common batch has none, and is sent as before).
async fn send(inner: &Inner, batch: &[Completion]) -> Result<Vec<CompleteResult>> {
    if batch.iter().all(|c| c.result.is_none()) {
        let leases: Vec<Lease> = batch.iter().map(|c| c.lease).collect();
        return inner.client.complete_many(&leases).await;
    }
    let jobs: Vec<(Lease, Option<&RawValue>)> = batch
        .iter()
        .map(|c| (c.lease, c.result.as_deref()))
        .collect();
    inner.client.complete_many_with_results(&jobs).await
}

/// After the server refused a whole batch that carried results (one over its payload limit
/// refuses them all): each job completed alone, so that only a refused one suffers. A job
/// whose result is refused completes without it, with an error logged (as the Python worker
/// does): it ran, and running it again would produce the same result.
async fn send_one_by_one(inner: &Inner, batch: Vec<Completion>) {
    for done in batch {
        let mut sent = match &done.result {
            Some(result) => {
                inner
                    .client
                    .complete_with_result(done.lease, &**result)
                    .await
            }
            None => inner.client.complete(done.lease).await,
        };
        if let Err(refused) = &sent {
            if refused.is_invalid() && done.result.is_some() {
                tracing::error!(job = done.lease.id, %refused, "the job's result was refused: completing it without one");
                sent = inner.client.complete(done.lease).await;
            }
        }
        match sent {
            Ok(()) => {
                add(&inner.counters.completed, 1);
                inner
                    .outcomes
                    .completed(done.lease.id, &done.kind, done.ran);
            }
            Err(error) => {
                add(&inner.counters.lost, 1);
                tracing::error!(job = done.lease.id, %error, "the completion was refused: the job will run again");
            }
        }
    }
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
            match send(&inner, &batch).await {
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
                Err(error) if error.is_invalid() && batch.iter().any(|c| c.result.is_some()) => {
                    tracing::warn!(%error, jobs = batch.len(), "completions with results refused together: sending them one by one");
                    send_one_by_one(&inner, batch).await;
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
