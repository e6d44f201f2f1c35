//! Asking a worker to stop: [`WorkerHandle`], and [`shutdown_signal`] for SIGTERM and Ctrl-C.

use std::sync::Arc;

use tokio::sync::watch;

use super::stats::{Counters, WorkerStats};

/// Controls a running worker from anywhere: ask it to stop, read its counters. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WorkerHandle {
    /// Set once: take no new job, let running handlers finish (within the shutdown timeout).
    stop: Arc<watch::Sender<bool>>,
    /// Set once: stop running handlers now (their jobs go back to the queue).
    hurry: Arc<watch::Sender<bool>>,
    counters: Arc<Counters>,
}

impl WorkerHandle {
    pub(crate) fn new(counters: Arc<Counters>) -> Self {
        Self {
            stop: Arc::new(watch::channel(false).0),
            hurry: Arc::new(watch::channel(false).0),
            counters,
        }
    }

    /// Graceful shutdown: take no new job; running handlers get the shutdown timeout to
    /// finish; completions are flushed; then the stream is closed, which puts the jobs still
    /// held back to ready without using an attempt.
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
    }

    /// Shutdown without waiting for running handlers: they are stopped (their futures
    /// dropped) and their jobs go back to ready; completions already made are still flushed.
    pub fn shutdown_now(&self) {
        self.stop.send_replace(true);
        self.hurry.send_replace(true);
    }

    /// Whether a shutdown was asked for.
    pub fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// The worker's counters now.
    pub fn stats(&self) -> WorkerStats {
        self.counters.snapshot()
    }

    pub(crate) fn stopping(&self) -> Shutdown {
        Shutdown(self.stop.subscribe())
    }

    pub(crate) fn hurrying(&self) -> Shutdown {
        Shutdown(self.hurry.subscribe())
    }
}

/// A flag that is set once, to wait on.
#[derive(Debug, Clone)]
pub(crate) struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the flag is set.
    pub async fn wait(&mut self) {
        // An error means the sender is gone: the worker is gone too, which is a stop.
        let _ = self.0.wait_for(|set| *set).await;
    }

    /// Resolves once the flag is set; never if its sender goes without setting it (a job's
    /// cancellation flag, whose heartbeats end with the job).
    pub async fn wait_set(&mut self) {
        if self.0.wait_for(|set| *set).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// A flag of its own, and what sets it.
    pub fn flag() -> (watch::Sender<bool>, Self) {
        let (set, flag) = watch::channel(false);
        (set, Self(flag))
    }
}

/// Resolves at the first SIGTERM or SIGINT (Ctrl-C); elsewhere than Unix, at Ctrl-C. For
/// [`Worker::run_until`](crate::Worker::run_until).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
                return;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM; stopping on Ctrl-C only");
            }
        }
    }
    if let Err(error) = tokio::signal::ctrl_c().await {
        tracing::error!(%error, "cannot listen for Ctrl-C");
        std::future::pending::<()>().await;
    }
}
