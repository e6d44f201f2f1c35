//! The engine: the job state machine on top of the store, and the only way to it. Handlers
//! (native and Zaqar) and the delivery runtime call its operations; it owns every rule (retries
//! and their policies, fan-out to subscriptions, dead-letter moves, what a claim is) and asks
//! the store to apply them atomically (`crate::store::seam`).
//!
//! It validates nothing about HTTP and reads no wall clock: time comes from its [`Clock`], so
//! tests move it. Its operations speak the model's types and its own requests ([`Enqueue`],
//! [`Take`], [`NewClaim`]), and fail with [`EngineError`]: the layers above never see the
//! store's.

pub mod activity;
mod backup;
mod batches;
mod claims;
pub mod cluster;
mod decide;
mod endpoints;
mod error;
mod jobs;
pub mod known_queues;
pub mod maintenance;
mod observe;
mod payloads;
mod pools;
mod queues;
mod schedules;
mod subscriptions;
pub mod tokens;
mod work;
pub mod workers;
pub mod workflows;

use std::sync::Arc;

use parking_lot::Mutex;
use tenax_policy::{Outcome, RetryPolicy};

pub use self::backup::{Backup, BackupCopy};
pub use self::claims::{ClaimView, MessageDelete, NewClaim};
pub use self::decide::{
    PolicyOwner, decide_failure, decide_lease_expiry, delivery_policy, resolve,
};
pub use self::error::{Conflict, EngineError, Missing, StorageFailure, Unavailable};
pub use self::jobs::Enqueue;
pub use self::payloads::reseal_job;
pub use self::schedules::ScheduleSpec;
pub use self::work::Take;
use crate::clock::{Clock, UnixMs};
use crate::metrics::Metrics;
use crate::model::{ClaimId, subscription::is_internal_queue};
use crate::store::{Signals, Store, StoreError, StoreProperties};

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
    store: Arc<dyn Store>,
    pub clock: Clock,
    pub settings: EngineSettings,
    /// Turns true when the server begins to shut down: long polls return, streams end.
    stopping: tokio::sync::watch::Sender<bool>,
    /// The API tokens, by hash.
    tokens: tokens::TokenBook,
    /// What the server counts ([`crate::metrics`]); the engine counts its transitions there.
    pub metrics: Arc<Metrics>,
    /// What this server did in the last day, per minute, and what it has not yet added to the
    /// store's counts of the cluster ([`Engine::cluster_activity`]).
    pub activity: activity::Activity,
    /// Which queues a take warned of as never having existed.
    take_warnings: known_queues::TakeWarnings,
    /// This server as it describes itself to the others, with the workers it has seen.
    this_server: Arc<cluster::ThisServer>,
    /// The spans, when tracing is on (`--otlp-endpoint`).
    pub tracing: Option<Arc<crate::otel::Tracing>>,
    /// One backup at a time: its permit is held until the backup is sent (`backup`).
    backups: Arc<tokio::sync::Semaphore>,
}

/// A worker's failure report.
#[derive(Debug, Clone)]
pub struct FailureReport {
    pub message: String,
    pub detail: Option<serde_json::Value>,
    pub outcome: Outcome,
}

/// Why an atomic change did not happen: the caller's change refused (with the caller's own
/// error), or the engine failed to make it.
#[derive(Debug)]
pub enum ChangeError<E> {
    Refused(E),
    Failed(EngineError),
}

impl<E> From<StoreError> for ChangeError<E> {
    fn from(error: StoreError) -> Self {
        Self::Failed(error.into())
    }
}

impl<E> From<EngineError> for ChangeError<E> {
    fn from(error: EngineError) -> Self {
        Self::Failed(error)
    }
}

/// Runs `change` as a store closure that cannot carry an error: a refusal is kept aside, and
/// the store is told to leave things as they are. The store may call the closure more than
/// once; the last call's refusal counts.
struct Refusal<E>(Mutex<Option<E>>);

impl<E> Refusal<E> {
    fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// `change`'s answer for the store: the new value, or `None` (and the error kept).
    fn keep<T>(&self, answer: Result<Option<T>, E>) -> Option<T> {
        let mut slot = self.0.lock();
        match answer {
            Ok(value) => {
                *slot = None;
                value
            }
            Err(error) => {
                *slot = Some(error);
                None
            }
        }
    }

    /// The store's result, unless the change was refused.
    fn result<T>(self, result: Result<T, StoreError>) -> Result<T, ChangeError<E>> {
        match self.0.into_inner() {
            Some(error) => Err(ChangeError::Refused(error)),
            None => result.map_err(ChangeError::from),
        }
    }
}

impl Engine {
    pub fn new(store: Arc<dyn Store>, clock: Clock, settings: EngineSettings) -> Self {
        let (stopping, _) = tokio::sync::watch::channel(false);
        let this_server = Arc::new(cluster::ThisServer::new(clock.now_ms()));
        let (describing, describe_clock) = (this_server.clone(), clock.clone());
        store.describe_server(Arc::new(move || describing.about(describe_clock.now_ms())));
        Self {
            store,
            clock,
            settings,
            stopping,
            tokens: tokens::TokenBook::default(),
            metrics: Arc::new(Metrics::default()),
            activity: activity::Activity::default(),
            take_warnings: known_queues::TakeWarnings::default(),
            this_server,
            tracing: None,
            backups: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// Records spans with `tracing` ([`crate::otel`]).
    #[must_use]
    pub fn with_tracing(mut self, tracing: Option<Arc<crate::otel::Tracing>>) -> Self {
        self.tracing = tracing;
        self
    }

    /// Counts into `metrics` (the server's, which `/metrics` shows).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
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

    /// How many servers share the store now: limits set for the whole cluster are divided
    /// among them ([`crate::delivery::share`]).
    pub fn servers(&self) -> usize {
        self.store.servers()
    }

    /// The store's wake-ups: jobs ready, schedules moved, subscriptions changed.
    pub fn signals(&self) -> &Signals {
        self.store.signals()
    }

    pub fn store_properties(&self) -> StoreProperties {
        self.store.properties()
    }

    /// Every queue's backlog, for the metrics.
    pub async fn backlog(&self) -> Result<Vec<crate::model::Backlog>, EngineError> {
        Ok(self.store.backlog().await?)
    }

    /// Adds the activity counted since the last flush to the store, flushes the store and stops
    /// its background work. Called once, at shutdown.
    pub async fn close(&self) {
        if let Err(error) = self.flush_activity().await {
            tracing::warn!(%error, "adding the last activity counts to the store failed");
        }
        self.store.close().await;
    }

    /// The server default for jobs of `queue`: the delivery default for deliveries.
    pub fn default_policy_for(&self, queue: &str) -> &Arc<RetryPolicy> {
        if is_internal_queue(queue) {
            &self.settings.delivery_policy
        } else {
            &self.settings.default_policy
        }
    }
}

/// A fresh random id (claims, streaming takes): unguessable, and unique across the servers of
/// a shared store.
fn random_id() -> ClaimId {
    // Zero reads as "none" in places; never hand it out.
    ClaimId(rand::random::<u64>().max(1))
}
