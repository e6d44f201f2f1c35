//! The engine counts what it decides: jobs enqueued, taken (their wait), completed, failed,
//! retried, snoozed, dead, and leases expired, by queue and type ([`crate::metrics::jobs`]); and
//! says at warn when a job or a delivery dies. Handlers count nothing.
//!
//! What a lease was (the job's queue, type, creation and take) comes from the store when it
//! reports it ([`LeaseFacts`]: a shared store must), else from this server's book of the leases
//! it handed out ([`crate::metrics::leases`]), which is exact for a store of this process alone.
//! Internal queues (webhook deliveries) are counted by the webhook metrics instead.

use std::sync::Arc;

use super::Engine;
use crate::clock::UnixMs;
use crate::metrics::histogram::Tally;
use crate::metrics::jobs::{JobSeries, LastSeries};
use crate::metrics::leases::Held;
use crate::model::subscription::{is_internal_queue, subscription_of_queue};
use crate::model::{JobId, LeaseToken, Status};
use crate::store::{Ack, DecideContext, LeaseFacts, StoreError, TakenJob, Transition};

/// What the metrics need of a lease that ended.
struct Ended {
    series: Arc<JobSeries>,
    created_at_ms: UnixMs,
    taken_at_ms: UnixMs,
}

/// The completions of one run of jobs of one series, added to it when the run ends: one
/// atomic addition per counter and bucket for the run rather than several per job.
struct Completions {
    series: Arc<JobSeries>,
    completed: u64,
    running: Tally,
    end_to_end: Tally,
}

impl Completions {
    fn new(series: Arc<JobSeries>) -> Self {
        let running = Tally::new(&series.running);
        let end_to_end = Tally::new(&series.end_to_end);
        Self {
            series,
            completed: 0,
            running,
            end_to_end,
        }
    }
}

impl Drop for Completions {
    fn drop(&mut self) {
        self.series.completed.inc_by(self.completed);
    }
}

impl Engine {
    /// Jobs were just taken at `now_ms`: their wait since ready, and their leases.
    pub(super) fn observe_taken(&self, jobs: &[TakenJob], now_ms: UnixMs) {
        if jobs.is_empty() {
            return;
        }
        let book = !self.store.properties().shared;
        let mut last = LastSeries::default();
        // The waits of the current run of one series.
        let mut waits: Option<(u32, Tally)> = None;
        for job in jobs {
            if is_internal_queue(&job.queue) {
                continue;
            }
            let series = last.get(&self.metrics.jobs, &job.queue, &job.kind);
            let tally = match &mut waits {
                Some((index, tally)) if *index == series.index => tally,
                _ => &mut waits.insert((series.index, Tally::new(&series.waiting))).1,
            };
            tally.observe_ms(now_ms.saturating_sub(job.ready_at_ms));
            if book {
                self.metrics.leases.hold(
                    job.id,
                    Held {
                        series: series.index,
                        token: job.lease_token,
                        created_at_ms: job.created_at_ms,
                        taken_at_ms: now_ms,
                    },
                );
            }
        }
    }

    /// What is known of the lease of `id` that just ended: the store's facts, else the book's.
    /// `last` caches the series last resolved.
    fn ended(
        &self,
        id: JobId,
        token: Option<LeaseToken>,
        facts: Option<&LeaseFacts>,
        last: &mut Option<Arc<JobSeries>>,
    ) -> Option<Ended> {
        let held = self.metrics.leases.end(id, token);
        if let Some(facts) = facts {
            if is_internal_queue(&facts.queue) {
                return None;
            }
            return Some(Ended {
                series: self.metrics.jobs.series(&facts.queue, &facts.kind),
                created_at_ms: facts.created_at_ms,
                taken_at_ms: facts.taken_at_ms,
            });
        }
        let held = held?;
        let series = match last.as_ref() {
            Some(series) if series.index == held.series => series.clone(),
            _ => {
                let series = self.metrics.jobs.by_index(held.series)?;
                last.insert(series).clone()
            }
        };
        Some(Ended {
            series,
            created_at_ms: held.created_at_ms,
            taken_at_ms: held.taken_at_ms,
        })
    }

    /// Completions: one result per ack.
    pub(super) fn observe_completed(
        &self,
        acks: &[Ack],
        results: &[Result<Option<LeaseFacts>, StoreError>],
        now_ms: UnixMs,
    ) {
        let mut last = None;
        let mut run: Option<Completions> = None;
        for (ack, result) in acks.iter().zip(results) {
            let Ok(facts) = result else { continue };
            let Some(ended) = self.ended(ack.id, Some(ack.lease), facts.as_ref(), &mut last) else {
                continue;
            };
            let completions = match &mut run {
                Some(run) if Arc::ptr_eq(&run.series, &ended.series) => run,
                _ => run.insert(Completions::new(ended.series)),
            };
            completions.completed += 1;
            completions
                .running
                .observe_ms(now_ms.saturating_sub(ended.taken_at_ms));
            completions
                .end_to_end
                .observe_ms(now_ms.saturating_sub(ended.created_at_ms));
        }
    }

    /// A failure a worker reported (`expired` false) or a lease that expired, and what the
    /// job's policy made of it.
    pub(super) fn observe_failure(
        &self,
        failed: &Failed,
        transition: &Transition,
        expired: bool,
        now_ms: UnixMs,
    ) {
        let ended = self.ended(failed.id, failed.token, failed.lease.as_ref(), &mut None);
        let dead = transition.state.status == Status::Dead;
        let reason = transition.state.dead_reason.as_deref().unwrap_or("");
        match subscription_of_queue(&failed.queue) {
            // A delivery: its attempts are the webhook metrics' (a lease that expired is not one).
            Some(subscription) => {
                if dead {
                    self.metrics.webhooks.series(subscription).dead.inc();
                    tracing::warn!(
                        delivery = failed.id.0,
                        subscription = subscription.0,
                        failures = transition.state.failures,
                        reason,
                        "delivery dead"
                    );
                }
                return;
            }
            None if dead => tracing::warn!(
                job = failed.id.0,
                queue = %failed.queue,
                failures = transition.state.failures,
                reason,
                "job dead"
            ),
            None => {}
        }
        let Some(ended) = ended else { return };
        let series = &ended.series;
        // A failure records an error; a snooze does not (it is not an attempt that failed, and
        // its run is not over).
        if transition.error.is_none() && !expired {
            series.snoozed.inc();
            return;
        }
        if !expired {
            series
                .running
                .observe_ms(now_ms.saturating_sub(ended.taken_at_ms));
        }
        series.failed.inc();
        if expired {
            series.lease_expired.inc();
        }
        if dead {
            series.dead.inc();
        } else if transition.moved_to.is_none() {
            series.retried.inc();
        }
    }
}

/// Leases ended as if expired (by the maintenance loop, or a claim ended), with what their
/// decisions made of them, counted once the store has applied them.
#[derive(Debug, Default)]
pub(super) struct Expiries(parking_lot::Mutex<Vec<(Failed, Transition)>>);

impl Expiries {
    /// The decision for a lease that expired at `now_ms`, kept to be counted.
    pub fn decide(&self, engine: &Engine, ctx: &DecideContext<'_>, now_ms: UnixMs) -> Transition {
        let transition =
            super::decide_lease_expiry(ctx, engine.default_policy_for(ctx.queue), now_ms);
        self.0
            .lock()
            .push((Failed::of(ctx, None), transition.clone()));
        transition
    }

    /// Counts what was applied. A backend may have asked about a job more than once: its last
    /// decision counts.
    pub fn count(self, engine: &Engine, now_ms: UnixMs) {
        let decided = self.0.into_inner();
        let mut seen = std::collections::HashSet::new();
        for (failed, transition) in decided.iter().rev() {
            if seen.insert(failed.id) {
                engine.observe_failure(failed, transition, true, now_ms);
            }
        }
    }
}

/// A lease that ended in a failure, as its decision saw it.
#[derive(Debug, Clone)]
pub(super) struct Failed {
    pub id: JobId,
    /// The lease's token, when the worker named it.
    pub token: Option<LeaseToken>,
    pub queue: String,
    pub lease: Option<LeaseFacts>,
}

impl Failed {
    pub fn of(ctx: &DecideContext<'_>, token: Option<LeaseToken>) -> Self {
        Self {
            id: ctx.id,
            token,
            queue: ctx.queue.to_owned(),
            lease: ctx.lease.clone(),
        }
    }
}
