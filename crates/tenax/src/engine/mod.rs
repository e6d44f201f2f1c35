//! The engine: the job state machine on top of the store. It validates nothing about HTTP and
//! reads no wall clock: time comes from its [`Clock`], so tests move it.

mod claims;
mod decide;
mod deliveries;
pub mod maintenance;
mod tokens;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tenax_policy::{Outcome, RetryPolicy};

pub use self::decide::{decide_failure, decide_lease_expiry};
use crate::clock::{Clock, UnixMs};
use crate::model::ErrorEntry;
use crate::store::{
    Ack, Enqueued, Insert, OnDuplicate, Store, StoreError, TakeRequest, TakenJob, Transition,
};

/// Settings the engine needs (a subset of the server configuration).
#[derive(Debug, Clone)]
pub struct EngineSettings {
    pub default_policy: Arc<RetryPolicy>,
    /// The policy of deliveries whose subscription and queue name none.
    pub delivery_policy: Arc<RetryPolicy>,
    pub completed_retention_ms: u64,
    pub dead_retention_ms: u64,
    /// The longest heartbeats may hold one attempt, from its take.
    pub max_attempt_ms: u64,
}

#[derive(Debug)]
pub struct Engine {
    pub store: Store,
    pub clock: Clock,
    pub settings: EngineSettings,
    /// Ids of streaming take connections.
    streams: AtomicU64,
    /// Turns true when the server begins to shut down: long polls return, streams end.
    stopping: tokio::sync::watch::Sender<bool>,
    /// The API tokens, by hash.
    tokens: tokens::TokenBook,
}

/// A worker's failure report.
#[derive(Debug, Clone)]
pub struct FailureReport {
    pub message: String,
    pub detail: Option<serde_json::Value>,
    pub outcome: Outcome,
}

impl Engine {
    pub fn new(store: Store, clock: Clock, settings: EngineSettings) -> Self {
        let (stopping, _) = tokio::sync::watch::channel(false);
        // Seeded from the clock so that ids (streams and claims) differ across restarts.
        let first_stream = clock.now_ms().saturating_mul(1_000).max(1);
        Self {
            store,
            clock,
            settings,
            streams: AtomicU64::new(first_stream),
            stopping,
            tokens: tokens::TokenBook::default(),
        }
    }

    /// Starts the shutdown of waiting requests: long polls return empty, streams end.
    pub fn begin_stop(&self) {
        self.stopping.send_replace(true);
    }

    /// Completes once [`Engine::begin_stop`] was called.
    pub async fn stopped(&self) {
        let mut receiver = self.stopping.subscribe();
        let _ = receiver.wait_for(|stopping| *stopping).await;
    }

    pub fn now_ms(&self) -> UnixMs {
        self.clock.now_ms()
    }

    /// Enqueues jobs atomically. A job without an expiry gets its queue's message TTL.
    pub async fn enqueue(
        &self,
        mut jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let now_ms = self.now_ms();
        // A batch is mostly of one queue: look each queue up once per run.
        let mut last: Option<(String, Option<u64>)> = None;
        for insert in &mut jobs {
            if insert.job.expires_at_ms.is_some() {
                continue;
            }
            let ttl = match &last {
                Some((queue, ttl)) if *queue == insert.job.queue => *ttl,
                _ => {
                    let ttl = self.store.message_ttl(&insert.job.queue).await;
                    last = Some((insert.job.queue.clone(), ttl));
                    ttl
                }
            };
            insert.job.expires_at_ms = ttl.map(|ttl| now_ms.saturating_add(ttl));
        }
        self.store.enqueue(jobs, on_duplicate, now_ms).await
    }

    /// Takes up to `max` jobs, waiting up to `wait` for the first one if none is ready.
    pub async fn take(
        &self,
        queues: &[String],
        max: usize,
        lease_ms: u64,
        wait: Duration,
        stream: Option<u64>,
    ) -> Result<Vec<TakenJob>, StoreError> {
        let request = TakeRequest {
            queues,
            max,
            lease_ms,
            stream,
            keep_until_ms: None,
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Register for the wake-up before looking, so a job that arrives in between is seen.
            let signal = self.store.ready_signal().notified();
            tokio::pin!(signal);
            signal.as_mut().enable();
            let taken = self.store.take(&request, self.now_ms()).await?;
            if !taken.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(taken);
            }
            tokio::select! {
                () = signal => {}
                () = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
                () = self.stopped() => return Ok(Vec::new()),
            }
        }
    }

    /// Extends a lease to `lease_ms` from now; heartbeats never hold one attempt longer than
    /// `max_attempt_ms` after its take (the lease then ends, and expires as any other).
    pub async fn heartbeat(&self, ack: Ack, lease_ms: u64) -> Result<UnixMs, StoreError> {
        let max = self.settings.max_attempt_ms;
        self.store
            .heartbeat(ack, lease_ms, max, self.now_ms())
            .await
    }

    pub async fn complete(&self, acks: &[Ack]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let retain = self.settings.completed_retention_ms > 0;
        self.store.complete(acks, retain, self.now_ms()).await
    }

    /// Records a failure and asks the job's policy what happens next. Returns the transition
    /// and the time of the failure.
    pub async fn fail(
        &self,
        ack: Ack,
        report: FailureReport,
    ) -> Result<(Transition, UnixMs), StoreError> {
        let now_ms = self.now_ms();
        let default = self.settings.default_policy.clone();
        let delivery_default = self.settings.delivery_policy.clone();
        let decide = move |ctx: &crate::store::DecideContext<'_>| {
            let default = if crate::model::subscription::is_internal_queue(ctx.queue) {
                &delivery_default
            } else {
                &default
            };
            let error = ErrorEntry {
                attempt: ctx.state.failures + 1,
                at_ms: now_ms,
                message: report.message.clone(),
                detail: report.detail.clone(),
            };
            decide_failure(ctx, default, now_ms, report.outcome, error)
        };
        let transition = self.store.fail(ack, now_ms, &decide).await?;
        Ok((transition, now_ms))
    }

    /// The policy a job of `queue` gets when it names none: the queue's, else the server's.
    pub async fn base_policy(&self, queue: &str) -> Arc<RetryPolicy> {
        let configured = self
            .store
            .queue(queue)
            .await
            .and_then(|config| config.policy);
        match configured.map(|value| tenax_policy::spelling::native::parse(&value)) {
            Some(Ok(policy)) => Arc::new(policy),
            _ => self.settings.default_policy.clone(),
        }
    }

    /// A new id for a streaming take connection.
    pub fn open_stream(&self) -> u64 {
        self.streams.fetch_add(1, Ordering::Relaxed)
    }

    pub async fn close_stream(&self, stream: u64) -> usize {
        self.store.release_stream(stream).await
    }
}
