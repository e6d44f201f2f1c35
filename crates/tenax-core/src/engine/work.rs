//! The worker's side: take (waiting for work), heartbeat, complete, fail, and streaming takes.

use std::future::Future;
use std::time::Duration;

use parking_lot::Mutex;

use super::observe::{Failed, began};
use super::{Engine, FailureReport, decide_failure, random_id};
use crate::clock::UnixMs;
use crate::engine::EngineError;
use crate::model::{Ack, ClaimId, ErrorEntry, JobId, JobResult, ParentOutcome, TakenJob};
use crate::store::{DecideContext, Extended, StoreError, TakeRequest, Transition};

/// A worker's request for leases: up to `max` jobs of `queues`, leased for `lease_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Take<'a> {
    pub queues: &'a [String],
    pub max: usize,
    pub lease_ms: u64,
    /// The streaming take the leases are held under: they can be found and released together
    /// when the stream ends ([`Engine::close_stream`]).
    pub stream: Option<ClaimId>,
}

impl<'a> Take<'a> {
    /// Up to `max` jobs of `queues`, leased for `lease_ms`, outside any stream.
    pub fn new(queues: &'a [String], max: usize, lease_ms: u64) -> Self {
        Self {
            queues,
            max,
            lease_ms,
            stream: None,
        }
    }

    /// The same take, held under `stream`.
    #[must_use]
    pub fn in_stream(self, stream: ClaimId) -> Self {
        Self {
            stream: Some(stream),
            ..self
        }
    }

    /// What the store is asked for: the stream is the claim the leases are held under.
    fn request(&self) -> TakeRequest<'a> {
        TakeRequest {
            claim: self.stream,
            ..TakeRequest::new(self.queues, self.max, self.lease_ms)
        }
    }
}

impl Engine {
    /// Leases up to `take.max` jobs, waiting up to `wait` for the first one if none is ready.
    /// A taker that a queue's limits held back looks again when room may have appeared: when a
    /// job leaves flight (concurrency), or when the rate limit's period moves on.
    ///
    /// The wait ends early, with nothing, when the server stops or `give_up` completes (the
    /// caller's token was revoked: [`Engine::revoked`]). Only the wait is cut short, never a
    /// look at the store in progress, so no job is leased to a caller that is not answered.
    pub async fn take(
        &self,
        take: &Take<'_>,
        wait: Duration,
        give_up: impl Future<Output = ()>,
    ) -> Result<Vec<TakenJob>, EngineError> {
        tokio::pin!(give_up);
        let request = take.request();
        let deadline = tokio::time::Instant::now() + wait;
        // Whether to wake when jobs leave flight: only once a concurrency limit held this take
        // back (every acknowledgement signals it).
        let mut watch_released = false;
        let mut warned = false;
        loop {
            // Register for the wake-ups before looking, so a job that arrives in between is
            // seen.
            let signals = self.signals();
            let ready = signals.ready.notified();
            let released = signals.released.notified();
            tokio::pin!(ready, released);
            ready.as_mut().enable();
            if watch_released {
                released.as_mut().enable();
            }
            let now_ms = self.now_ms();
            let began = began(self);
            let taken = self.store.take_jobs(&request, now_ms).await?;
            let (jobs, ended) = self.unended(taken.jobs);
            self.observe_taken(&jobs, now_ms, began);
            if jobs.is_empty() && ended == 0 && !warned {
                // A worker waiting on a misspelt queue would otherwise wait in silence.
                warned = true;
                self.warn_of_unknown_queues(take.queues).await;
            }
            if !jobs.is_empty() || tokio::time::Instant::now() >= deadline {
                let jobs = self.opened_taken(jobs)?;
                return Ok(self.with_parents(jobs).await);
            }
            let held = taken.held;
            if held.in_flight && !watch_released {
                // Look again registered for releases: one may have come since the look.
                watch_released = true;
                continue;
            }
            let rate_wait = held.until_ms.map(|at| {
                // A manual clock moves only when a test moves it: look at it often.
                let ms = if self.clock.is_manual() {
                    5
                } else {
                    at.saturating_sub(now_ms).max(1)
                };
                tokio::time::Instant::now() + Duration::from_millis(ms)
            });
            let until = rate_wait.map_or(deadline, |at| at.min(deadline));
            let _waiting = self.metrics.http.take_waiting();
            tokio::select! {
                () = ready => {}
                () = released, if watch_released => {}
                () = tokio::time::sleep_until(until) => {
                    if until == deadline {
                        return Ok(Vec::new());
                    }
                }
                () = self.stopped() => return Ok(Vec::new()),
                () = &mut give_up => return Ok(Vec::new()),
            }
        }
    }

    /// The leases of `jobs` that have not ended by now, and how many had. A lease's end is
    /// set from the time its take began, so a take whose commit was slow to be acknowledged
    /// (a lossy or slow link to a shared database) can come back with leases already over.
    /// Those are not handed out: their jobs may already be another worker's, and nothing sent
    /// with them would be accepted. They end as any expired lease does, counting the attempt.
    pub(super) fn unended(&self, jobs: Vec<TakenJob>) -> (Vec<TakenJob>, usize) {
        let now_ms = self.now_ms();
        let taken = jobs.len();
        let jobs: Vec<TakenJob> = jobs
            .into_iter()
            .filter(|job| job.lease_expires_at_ms > now_ms)
            .collect();
        let ended = taken - jobs.len();
        if ended > 0 {
            tracing::warn!(
                ended,
                "leases ended before their take or claim was answered (the store was slow to \
                 commit it); their jobs are taken again"
            );
        }
        (jobs, ended)
    }

    /// Hands each taken job that waited for others how they finished, with their results
    /// (opened, for an encrypted queue's). A parent that cannot be read just now is left out
    /// rather than failing a take whose leases are made.
    async fn with_parents(&self, mut jobs: Vec<TakenJob>) -> Vec<TakenJob> {
        // Siblings share parents (a fan-out's jobs, taken together): each is read once.
        let mut read: std::collections::HashMap<JobId, Option<ParentOutcome>> =
            std::collections::HashMap::new();
        for job in &mut jobs {
            for id in job.after.clone() {
                if let std::collections::hash_map::Entry::Vacant(slot) = read.entry(id) {
                    let outcome = match self.job(id).await {
                        Ok(parent) => parent.map(|parent| ParentOutcome {
                            id,
                            kind: parent.spec.kind,
                            status: parent.state.status,
                            result: parent.state.result,
                        }),
                        Err(error) => {
                            tracing::warn!(
                                job = %job.id, parent = %id, %error,
                                "a parent's result could not be read for its child's worker"
                            );
                            None
                        }
                    };
                    slot.insert(outcome);
                }
                if let Some(Some(outcome)) = read.get(&id) {
                    job.parents.push(outcome.clone());
                }
            }
        }
        jobs
    }

    /// Extends a lease to `lease_ms` from now; heartbeats never hold one attempt longer than
    /// `max_attempt_ms` after its take (the lease then ends, and expires as any other). Says
    /// whether the lease is marked cancelled ([`Engine::cancel`]).
    ///
    /// As for a take ([`Engine::unended`]): when the new end has passed by the time the store
    /// confirmed it (a commit slower than the lease asked for), the lease has ended, and the
    /// worker is told so rather than handed an end already past.
    pub async fn heartbeat(&self, ack: Ack, lease_ms: u64) -> Result<Extended, EngineError> {
        let max = self.settings.max_attempt_ms;
        let extended = self
            .store
            .extend_lease(ack, lease_ms, max, self.now_ms())
            .await?;
        if extended.expires_at_ms <= self.now_ms() {
            return Err(StoreError::LeaseLost { id: ack.id }.into());
        }
        Ok(extended)
    }

    /// Completes in-flight jobs, without results.
    pub async fn complete(
        &self,
        acks: &[Ack],
    ) -> Result<Vec<Result<(), EngineError>>, EngineError> {
        self.complete_with_results(acks, Vec::new()).await
    }

    /// Completes in-flight jobs, each with its worker's result: `results` is empty (none has
    /// one) or one per ack. A result is kept with its completed job for its retention (none
    /// is kept when completed jobs are not). The results of jobs whose payloads are sealed are
    /// sealed here, before the store sees them; the caller has checked their size.
    pub async fn complete_with_results(
        &self,
        acks: &[Ack],
        mut results: Vec<Option<JobResult>>,
    ) -> Result<Vec<Result<(), EngineError>>, EngineError> {
        debug_assert!(results.is_empty() || results.len() == acks.len());
        let retain = self.settings.completed_retention_ms > 0;
        if !retain {
            // Nothing would keep them.
            results.clear();
        }
        self.seal_results(acks, &mut results).await?;
        let now_ms = self.now_ms();
        let began = began(self);
        let results = self
            .store
            .complete_jobs(acks, &results, retain, now_ms)
            .await?;
        self.observe_completed(acks, &results, now_ms, began);
        Ok(results
            .into_iter()
            .map(|r| r.map(drop).map_err(EngineError::from))
            .collect())
    }

    /// Seals the results of the jobs whose payloads are sealed (`payloads`): each such job is
    /// read first, since whether it is sealed is its own record. Costs a read per job with a
    /// result, none without. A job that is gone keeps its result as it is: its completion is
    /// refused, so nothing is stored.
    async fn seal_results(
        &self,
        acks: &[Ack],
        results: &mut [Option<JobResult>],
    ) -> Result<(), EngineError> {
        for (ack, result) in acks.iter().zip(results.iter_mut()) {
            let Some(plain) = result else { continue };
            let Some(job) = self.store.get_job(ack.id).await? else {
                continue;
            };
            if job.spec.payload_sealed {
                *plain = self.seal_result(plain, &job.spec.kind, job.spec.created_at_ms)?;
            }
        }
        Ok(())
    }

    /// Records a failure and asks the job's policy what happens next. Returns the transition
    /// and the time of the failure.
    pub async fn fail(
        &self,
        ack: Ack,
        report: FailureReport,
    ) -> Result<(Transition, UnixMs), EngineError> {
        let now_ms = self.now_ms();
        let began = began(self);
        let seen: Mutex<Option<Failed>> = Mutex::new(None);
        let decide = |ctx: &DecideContext<'_>| {
            *seen.lock() = Some(Failed::of(ctx, Some(ack.lease)));
            let error = ErrorEntry {
                attempt: ctx.state.failures + 1,
                at_ms: now_ms,
                message: report.message.clone(),
                detail: report.detail.clone(),
            };
            decide_failure(
                ctx,
                self.default_policy_for(ctx.queue),
                now_ms,
                report.outcome,
                error,
            )
        };
        let transition = self.store.fail_job(ack, now_ms, &decide).await?;
        if let Some(failed) = seen.into_inner() {
            self.observe_failure(&failed, &transition, false, now_ms, began);
        }
        Ok((transition, now_ms))
    }

    /// A new id for a streaming take: its leases are held under it, and released together
    /// when the stream ends.
    pub fn open_stream(&self) -> ClaimId {
        random_id()
    }

    /// Returns a closed stream's jobs to ready, without counting an attempt.
    pub async fn close_stream(&self, stream: ClaimId) -> Result<usize, EngineError> {
        Ok(self.store.release_claim(stream).await?)
    }

    /// How many jobs a stream holds leased.
    pub async fn stream_leases(&self, stream: ClaimId) -> Result<usize, EngineError> {
        Ok(self.store.claim(stream).await?.jobs.len())
    }
}
