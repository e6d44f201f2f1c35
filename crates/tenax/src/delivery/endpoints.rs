//! This server's side of endpoint backpressure ([`super::backpressure`]): the endpoints'
//! stored states as last read, the runs of failures it counts, and the changes it makes.
//!
//! The stored states are what every server obeys; this server reads them all again whenever
//! it changed one itself or the store says one changed (`Signals::endpoints`, from any
//! server), and a delivery looks again just before it is sent, so another server's
//! pause or opened breaker holds here within moments: the time its notification takes, or
//! the poll interval in poll-only mode. Requests already sent are not recalled.
//!
//! The run of failures that opens a breaker is counted by each server, in memory: on `n`
//! servers sharing a failing endpoint, the breaker opens once one of them has seen the
//! threshold in a row (so after at most `n × (threshold − 1) + 1` failures in the cluster).
//! A run is counted under the breaker's epoch, so one counted before an opening never counts
//! after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use tenax_core::clock::UnixMs;
use tenax_core::engine::Engine;
use tenax_core::engine::EngineError;
use tenax_core::model::{Attempt, BreakerState, EndpointState, Pause, SubscriptionId};

use super::backpressure::{self, BreakerSettings, Gate, ProbeEnd, Verdict};

#[derive(Debug)]
pub struct EndpointBook {
    settings: BreakerSettings,
    /// Advanced whenever the stored states may have changed.
    generation: AtomicU64,
    cache: Mutex<Cache>,
    /// One read of the states, or one change of a state, at a time.
    loading: tokio::sync::Mutex<()>,
    /// Changes of a state this server is storing: while any is, the cache is not fresh, and a
    /// gate waits for the change to be stored (the store shows a change before it is stored,
    /// and this server must obey its own opening of a breaker from that moment on).
    changing: AtomicU64,
    runs: Mutex<HashMap<String, Run>>,
}

/// One change in [`EndpointBook::changing`] while it lives: a change dropped half-way (its
/// task aborted) counts no longer.
struct Changing<'a>(&'a AtomicU64);

impl<'a> Changing<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Default)]
struct Cache {
    /// The generation the states were read at; `None` before the first read.
    read_at: Option<u64>,
    states: HashMap<String, EndpointState>,
}

/// Failures in a row this server saw, under the breaker's epoch then.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    epoch: u64,
    failures: u32,
}

impl EndpointBook {
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            generation: AtomicU64::new(0),
            cache: Mutex::new(Cache::default()),
            loading: tokio::sync::Mutex::new(()),
            changing: AtomicU64::new(0),
            runs: Mutex::new(HashMap::new()),
        }
    }

    pub fn settings(&self) -> &BreakerSettings {
        &self.settings
    }

    /// The stored states may have changed: read them again before the next use.
    pub fn invalidate(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// What is known of `origin` now, without reading the store.
    pub fn known(&self, origin: &str) -> Option<EndpointState> {
        self.cache.lock().states.get(origin).cloned()
    }

    /// Whether deliveries to `origin` may go at `now_ms`, from the stored state (read again
    /// if it may have changed).
    pub async fn gate(
        &self,
        engine: &Engine,
        origin: &str,
        now_ms: UnixMs,
    ) -> Result<Gate, EngineError> {
        self.refresh(engine).await?;
        Ok(backpressure::gate(self.known(origin).as_ref(), now_ms))
    }

    async fn refresh(&self, engine: &Engine) -> Result<(), EngineError> {
        let fresh = |book: &Self| {
            book.changing.load(Ordering::SeqCst) == 0
                && book.cache.lock().read_at == Some(book.generation.load(Ordering::SeqCst))
        };
        if fresh(self) {
            return Ok(());
        }
        let _one = self.loading.lock().await;
        if fresh(self) {
            return Ok(());
        }
        // Read at this generation: a change announced during the read makes it stale again.
        let generation = self.generation.load(Ordering::SeqCst);
        let states = engine.endpoint_states().await?;
        let mut cache = self.cache.lock();
        cache.states = states.into_iter().map(|s| (s.origin.clone(), s)).collect();
        cache.read_at = Some(generation);
        Ok(())
    }

    /// Stores a change of `origin`'s state; what the store answers is known at once. Gates
    /// wait until it is stored (see `changing`); and it makes the cache stale, so that a read
    /// of the states begun before it is never kept as fresh.
    async fn change(
        &self,
        engine: &Engine,
        origin: &str,
        change: impl Fn(Option<&EndpointState>) -> Option<EndpointState> + Send + Sync,
    ) -> Option<EndpointState> {
        let stored = {
            let _changing = Changing::new(&self.changing);
            let _one = self.loading.lock().await;
            let stored = engine.update_endpoint(origin, change).await;
            if let Ok(Some(state)) = &stored {
                self.invalidate();
                self.cache
                    .lock()
                    .states
                    .insert(origin.to_owned(), state.clone());
            }
            stored
        };
        match stored {
            Ok(state) => state,
            Err(error) => {
                tracing::warn!(%error, origin, "storing an endpoint's delivery state failed");
                None
            }
        }
    }

    /// Claims the one probe of `origin`'s half-open breaker; its id if this server got it.
    pub async fn claim_probe(&self, engine: &Engine, origin: &str, now_ms: UnixMs) -> Option<u64> {
        let probe = rand::random::<u64>().max(1);
        let settings = self.settings;
        let state = self
            .change(engine, origin, |current| {
                backpressure::probe_claimed(current, probe, now_ms, &settings)
            })
            .await?;
        (state.breaker.probe == Some(probe) && state.breaker.state == BreakerState::HalfOpen)
            .then_some(probe)
    }

    /// Ends probe `probe` of `origin`.
    pub async fn end_probe(
        &self,
        engine: &Engine,
        origin: &str,
        probe: u64,
        end: &ProbeEnd,
        now_ms: UnixMs,
    ) {
        let settings = self.settings;
        let ended = self
            .change(engine, origin, |current| {
                backpressure::probe_ended(current, probe, end, now_ms, &settings)
            })
            .await;
        if let Some(state) = ended {
            match state.breaker.state {
                BreakerState::Closed => {
                    tracing::info!(
                        origin,
                        "the endpoint answered the probe: its circuit breaker is closed"
                    );
                }
                BreakerState::Open if matches!(end, ProbeEnd::Failed(_)) => tracing::warn!(
                    origin,
                    trips = state.breaker.trips,
                    reason = state.breaker.reason.as_deref().unwrap_or_default(),
                    "the probe failed: the endpoint's circuit breaker is open again, for longer"
                ),
                BreakerState::Open | BreakerState::HalfOpen => {}
            }
        }
    }

    /// Takes in what `attempt` (by `subscription`, answered at `now_ms`; `probe` if it was
    /// the breaker's probe) says about its endpoint: a pause it asked for, the breaker's probe
    /// ended, or a failure (or an answer) in this server's run.
    pub async fn record(
        &self,
        engine: &Engine,
        origin: &str,
        subscription: SubscriptionId,
        attempt: &Attempt,
        probe: Option<u64>,
        now_ms: UnixMs,
    ) {
        let verdict = backpressure::verdict(attempt);
        if let (Verdict::Asked { pause_ms }, Some(status)) = (&verdict, attempt.status) {
            let pause = Pause {
                until_ms: now_ms.saturating_add(*pause_ms),
                status,
                subscription,
                at_ms: now_ms,
            };
            let before = self.known(origin).and_then(|s| s.pause);
            let after = self
                .change(engine, origin, |current| {
                    backpressure::paused(current, origin, pause)
                })
                .await
                .and_then(|s| s.pause);
            if after != before && after == Some(pause) {
                tracing::info!(
                    origin,
                    status,
                    pause_ms,
                    subscription = subscription.0,
                    "the endpoint asked for a pause: its deliveries wait"
                );
            }
        }
        if let Some(probe) = probe {
            let end = match verdict {
                Verdict::Failed(reason) => ProbeEnd::Failed(reason),
                Verdict::Answered | Verdict::Asked { .. } => ProbeEnd::Answered,
                Verdict::Unsent => ProbeEnd::Unsent,
            };
            self.end_probe(engine, origin, probe, &end, now_ms).await;
            return;
        }
        if self.settings.failures == 0 {
            return;
        }
        let (state, epoch) = self.known(origin).map_or((BreakerState::Closed, 0), |s| {
            (s.breaker.state, s.breaker.epoch)
        });
        // Only a closed breaker counts: requests sent before it opened end meanwhile.
        if state != BreakerState::Closed {
            return;
        }
        let failures = {
            let mut runs = self.runs.lock();
            let run = runs.entry(origin.to_owned()).or_default();
            if run.epoch != epoch {
                *run = Run { epoch, failures: 0 };
            }
            match verdict {
                Verdict::Failed(_) => run.failures = run.failures.saturating_add(1),
                Verdict::Answered => run.failures = 0,
                Verdict::Asked { .. } | Verdict::Unsent => {}
            }
            run.failures
        };
        let Verdict::Failed(reason) = verdict else {
            return;
        };
        if failures < self.settings.failures {
            return;
        }
        let settings = self.settings;
        // Whether this server's change opened it (the last call of the closure counts).
        let tripped_here = AtomicBool::new(false);
        let opened = self
            .change(engine, origin, |current| {
                let next =
                    backpressure::tripped(current, origin, epoch, &reason, now_ms, &settings);
                tripped_here.store(next.is_some(), Ordering::SeqCst);
                next
            })
            .await;
        if let Some(state) = opened.filter(|_| tripped_here.load(Ordering::SeqCst)) {
            tracing::warn!(
                origin,
                failures,
                reason,
                until = state.breaker.until_ms.unwrap_or_default(),
                "the endpoint failed too often in a row: its circuit breaker is open"
            );
        }
    }

    /// Failures in a row to `origin` as this server counts them toward opening its breaker.
    pub fn run(&self, origin: &str, epoch: u64) -> u32 {
        self.runs
            .lock()
            .get(origin)
            .filter(|run| run.epoch == epoch)
            .map_or(0, |run| run.failures)
    }
}
