//! Take, heartbeat, complete, fail, finish a delivery, pop: the worker's side of a job.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Ack, Attempt, AttemptResult, Job, JobId, JobResult, LeaseToken, Outcome, Status, TakenJob,
    subscription::subscription_of_queue,
};
use tenax_core::store::{
    Decide, DecideContext, Extended, Finished, JobLeases, LeaseFacts, StoreError, TakeRequest,
    Taken, Transition, to_json_bytes,
};

use super::batches;
use super::index::{Index, Lease, QueueRef};
use super::ops::Op;
use super::writer::{self, Receiver, Wake};
use super::{EmbeddedStore, Inner};
use super::{cancel, limits};

#[async_trait]
impl JobLeases for EmbeddedStore {
    /// Leases are memory only: nothing is written, so taking costs no fsync.
    async fn take_jobs(
        &self,
        request: &TakeRequest<'_>,
        now_ms: UnixMs,
    ) -> Result<Taken, StoreError> {
        if self.writer.has_failed() {
            return Err(StoreError::Failed);
        }
        let mut leased = Vec::new();
        let held = {
            let mut inner = self.inner.lock();
            if let Some(id) = request.subscription {
                if !inner.subscriptions.get(&id).is_some_and(|s| s.enabled) {
                    return Ok(Taken::default());
                }
            }
            let room = limits::room(&inner, request.queues, request.max, now_ms, true);
            let ids = match &room.caps {
                Some(caps) => {
                    inner
                        .index
                        .peek_ready_capped(&room.queues, caps, request.max, now_ms)
                }
                None => inner.index.peek_ready(&room.queues, request.max, now_ms),
            };
            let expires_at_ms = now_ms.saturating_add(request.lease_ms);
            let mut started: Vec<QueueRef> = Vec::new();
            for id in ids {
                let token = LeaseToken::random();
                let lease = Lease {
                    token,
                    expires_at_ms,
                    taken_at_ms: now_ms,
                    claim: request.claim,
                    cancel_requested: false,
                };
                let keep_until = request.keep_until_ms;
                if let Some(entry) = inner.index.update(id, |e| {
                    e.status = Status::InFlight;
                    e.set_lease(Some(lease));
                    if let (Some(at), Some(keep)) = (e.expires_at_ms(), keep_until) {
                        e.set_expires_at_ms(Some(at.max(keep)));
                    }
                }) {
                    if room.caps.is_some() {
                        started.push(entry.queue);
                    }
                    let ready_at_ms = entry.run_at_ms;
                    leased.push((
                        id,
                        lease,
                        entry.failures + 1,
                        entry.expires_at_ms(),
                        ready_at_ms,
                        entry.trigger(),
                    ));
                }
            }
            if let (Some(claim), Some(record)) = (request.claim, &request.record) {
                if !leased.is_empty() {
                    inner.claims.insert(claim, record.clone());
                }
            }
            self.record_starts(&mut inner, started, now_ms);
            room.held
        };
        if leased.is_empty() {
            return Ok(Taken {
                jobs: Vec::new(),
                held,
            });
        }
        let ids: Vec<JobId> = leased.iter().map(|(id, ..)| *id).collect();
        let bodies = self.read_body_alone(&ids)?;
        let jobs = leased
            .into_iter()
            .zip(bodies)
            // A job deleted since it was leased has no body: nothing to hand out.
            .filter_map(
                |((id, lease, attempt, expires_at_ms, ready_at_ms, trigger), body)| {
                    let body = body?;
                    Some(TakenJob {
                        id,
                        queue: body.queue,
                        kind: body.kind,
                        payload: body.payload,
                        payload_sealed: body.payload_sealed,
                        priority: body.priority,
                        attempt,
                        lease_token: lease.token,
                        lease_expires_at_ms: lease.expires_at_ms,
                        created_at_ms: body.created_at_ms,
                        expires_at_ms,
                        parent: body.parent,
                        traceparent: body.traceparent,
                        ready_at_ms,
                        trigger,
                        after: body.after,
                        parents: Vec::new(),
                    })
                },
            )
            .collect();
        Ok(Taken { jobs, held })
    }

    async fn extend_lease(
        &self,
        ack: Ack,
        lease_ms: u64,
        max_attempt_ms: u64,
        now_ms: UnixMs,
    ) -> Result<Extended, StoreError> {
        let mut inner = self.inner.lock();
        let lease = self.check_lease(&inner.index, ack, Some(now_ms))?;
        let expires_at_ms = now_ms
            .saturating_add(lease_ms)
            .min(lease.taken_at_ms.saturating_add(max_attempt_ms));
        inner.index.update(ack.id, |e| {
            e.set_lease(Some(Lease {
                expires_at_ms,
                ..lease
            }));
        });
        Ok(Extended {
            expires_at_ms,
            cancel_requested: lease.cancel_requested,
        })
    }

    async fn complete_jobs(
        &self,
        acks: &[Ack],
        job_results: &[Option<JobResult>],
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Vec<Result<Option<LeaseFacts>, StoreError>>, StoreError> {
        let (results, receiver) = {
            let mut inner = self.inner.lock();
            let mut ops = Vec::with_capacity(acks.len());
            let mut results = Vec::with_capacity(acks.len());
            for (at, ack) in acks.iter().enumerate() {
                if let Err(error) = self.check_lease(&inner.index, *ack, Some(now_ms)) {
                    results.push(Err(error));
                    continue;
                }
                let result = job_results.get(at).and_then(Option::as_ref);
                ops.extend(complete_one(&mut inner, ack.id, result, retain, now_ms));
                // One process uses this store: the engine knows the lease from its take.
                results.push(Ok(None));
            }
            let receiver = (!ops.is_empty()).then(|| {
                let completed: Vec<JobId> = acks
                    .iter()
                    .zip(&results)
                    .filter(|(_, r)| r.is_ok())
                    .map(|(a, _)| a.id)
                    .collect();
                self.commit(
                    &mut inner,
                    ops,
                    Some(Box::new(move |inner, written| {
                        evict(inner, completed, written)
                    })),
                    now_ms,
                )
            });
            (results, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
        }
        Ok(results)
    }

    async fn fail_job(
        &self,
        ack: Ack,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Transition, StoreError> {
        let (transition, receiver) = {
            let mut inner = self.inner.lock();
            self.check_lease(&inner.index, ack, Some(now_ms))?;
            let inner = &mut *inner;
            let mut transition =
                decide_on(inner, ack.id, decide).ok_or(StoreError::NotFound(ack.id))?;
            let receiver = self.apply(inner, ack.id, &mut transition, now_ms, Vec::new())?;
            (transition, receiver)
        };
        writer::wait(receiver).await?;
        self.signal(&transition);
        self.signals.released.notify_waiters();
        Ok(transition)
    }

    async fn finish_delivery(
        &self,
        ack: Ack,
        attempt: &Attempt,
        retain: bool,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Finished, StoreError> {
        let (finished, receiver) = {
            let mut inner = self.inner.lock();
            // The runner's own lease: its attempt's outcome is kept even when the answer came
            // after the lease's end (the lease then has not been taken over: same token).
            self.check_lease(&inner.index, ack, None)?;
            let log = Op::PutAttempt {
                id: ack.id,
                entry: to_json_bytes(attempt),
            };
            if attempt.result == AttemptResult::Delivered {
                let mut ops = vec![log];
                ops.extend(complete_one(&mut inner, ack.id, None, retain, now_ms));
                let id = ack.id;
                let after =
                    Box::new(move |inner: &mut Inner, written| evict(inner, vec![id], written));
                let receiver = self.commit(&mut inner, ops, Some(after), now_ms);
                (Finished::Delivered, receiver)
            } else {
                let inner = &mut *inner;
                let mut transition =
                    decide_on(inner, ack.id, decide).ok_or(StoreError::NotFound(ack.id))?;
                let receiver = self.apply(inner, ack.id, &mut transition, now_ms, vec![log])?;
                (Finished::Failed(transition), receiver)
            }
        };
        writer::wait(receiver).await?;
        if let Finished::Failed(transition) = &finished {
            self.signal(transition);
            // The delivery left flight, perhaps for good (dead): a wait for its end looks.
            self.signals.released.notify_waiters();
        }
        Ok(finished)
    }

    async fn pop_jobs(
        &self,
        queues: &[String],
        max: usize,
        now_ms: UnixMs,
    ) -> Result<Vec<Job>, StoreError> {
        if self.writer.has_failed() {
            return Err(StoreError::Failed);
        }
        let (jobs, receiver) = {
            let mut inner = self.inner.lock();
            let room = limits::room(&inner, queues, max, now_ms, false);
            let ids = match &room.caps {
                Some(caps) => inner
                    .index
                    .peek_ready_capped(&room.queues, caps, max, now_ms),
                None => inner.index.peek_ready(&room.queues, max, now_ms),
            };
            let mut jobs = Vec::with_capacity(ids.len());
            let mut ops = Vec::with_capacity(ids.len());
            let mut started: Vec<QueueRef> = Vec::new();
            for id in ids {
                // Read before it goes, under the lock: nobody can take it in between.
                if let Some(job) = self.load_job(&inner.index, id)? {
                    jobs.push(job);
                }
                if let Some(entry) = batches::remove_job(&mut inner, id, now_ms) {
                    if room.caps.is_some() {
                        started.push(entry.queue);
                    }
                }
                ops.push(Op::DeleteJob { id });
            }
            self.record_starts(&mut inner, started, now_ms);
            let receiver = (!ops.is_empty()).then(|| self.commit(&mut inner, ops, None, now_ms));
            (jobs, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
        }
        Ok(jobs)
    }
}

impl EmbeddedStore {
    /// Writes a transition (with `ops` in the same commit) and moves the job in memory: to its
    /// new state, and to its new queue if it moves. Called under the lock. A retry due already
    /// is ready at once; `transition` is updated to say so, so callers report the state as
    /// stored.
    pub(super) fn apply(
        &self,
        inner: &mut Inner,
        id: JobId,
        transition: &mut Transition,
        now_ms: UnixMs,
        mut ops: Vec<Op>,
    ) -> Result<Receiver, StoreError> {
        if transition.state.status == Status::Scheduled && transition.state.run_at_ms <= now_ms {
            transition.state.status = Status::Ready;
        }
        if let Some(to) = &transition.moved_to {
            let Some(Some(mut body)) = self.read_body(&[id])?.pop() else {
                return Err(StoreError::NotFound(id));
            };
            body.queue.clone_from(&to.queue);
            body.expires_at_ms = to.expires_at_ms;
            ops.push(Op::PutBody {
                id,
                body: to_json_bytes(&body),
            });
            let queue = inner.index.intern(&to.queue);
            let expires_at_ms = to.expires_at_ms;
            inner.index.update(id, |e| {
                e.queue = queue;
                e.set_expires_at_ms(expires_at_ms);
            });
        }
        let state = &transition.state;
        if state.status == Status::Cancelled {
            cancel::into_cancelled(inner, id, state, &mut ops);
        } else {
            ops.push(Op::PutState {
                id,
                state: to_json_bytes(state),
            });
            inner.index.update(id, |e| e.set_state(state));
        }
        if let Some(error) = &transition.error {
            ops.push(Op::PutError {
                id,
                attempt: error.attempt,
                entry: to_json_bytes(error),
            });
        }
        if state.status == Status::Dead {
            batches::finished(inner, id, false, Outcome::Dead, now_ms);
        }
        Ok(self.commit(inner, ops, None, now_ms))
    }

    /// Wakes whoever waits for what a transition produced.
    pub(super) fn signal(&self, transition: &Transition) {
        match transition.state.status {
            Status::Ready => self.signals.ready.notify_waiters(),
            Status::Scheduled => {
                self.signals.schedule.notify_waiters();
                self.signals.ready.notify_waiters();
            }
            _ => {}
        }
    }
}

/// Once completions are written: the completed jobs leave memory (they are read from disk from
/// now on, and counted there, by the same commit), and streams that held them have room again.
/// Runs in the writer, under the lock.
fn evict(inner: &mut Inner, ids: Vec<JobId>, written: bool) -> Wake {
    if written {
        for id in ids {
            inner.index.evict_completed(id);
        }
    }
    Wake {
        released: true,
        ..Wake::default()
    }
}

impl EmbeddedStore {
    /// Records the starts of rate-limited queues (`started`: the queue of each job handed out
    /// of a limited take), and writes them without waiting. Called under the lock.
    fn record_starts(&self, inner: &mut Inner, mut started: Vec<QueueRef>, now_ms: UnixMs) {
        if started.is_empty() {
            return;
        }
        started.sort_unstable();
        let mut ops = Vec::new();
        for run in started.chunk_by(|a, b| a == b) {
            let queue = inner.index.name(run[0]).clone();
            let count = u64::try_from(run.len()).unwrap_or(u64::MAX);
            ops.extend(limits::started(inner, &queue, count, now_ms));
        }
        if !ops.is_empty() {
            // Not waited for: see `limits`.
            drop(self.writer.submit(ops));
        }
    }
}

/// Completes in-flight job `id` in memory and returns the writes: its state kept as completed
/// (for the retention period, with its `result`) when `retain`, else the job deleted. Called
/// under the lock. A kept job stays in memory until the write is done; then [`evict`]. The
/// result is never in memory: it is written with the completed state, and read from there.
pub(super) fn complete_one(
    inner: &mut Inner,
    id: JobId,
    result: Option<&JobResult>,
    retain: bool,
    now_ms: UnixMs,
) -> Option<Op> {
    if inner.members.contains_key(&id) {
        batches::finished(inner, id, false, Outcome::Completed, now_ms);
    }
    if retain {
        let entry = inner
            .index
            .update(id, |e| e.finish(Status::Completed, now_ms))?;
        let mut state = entry.state();
        state.result = result.cloned();
        let (queue, expires_at_ms, state) =
            (entry.queue, entry.expires_at_ms(), to_json_bytes(&state));
        Some(Op::Complete {
            id,
            queue: inner.index.name(queue).clone(),
            finished_at_ms: now_ms,
            expires_at_ms,
            state,
        })
    } else {
        if inner.index.deps.has_children(id) {
            // Its waiting children see a completion, not a job gone.
            inner
                .index
                .update(id, |e| e.finish(Status::Completed, now_ms));
        }
        inner.index.remove(id)?;
        Some(Op::DeleteJob { id })
    }
}

/// Asks `decide` about job `id`, with its own policy, its queue's settings and, for a
/// delivery, its subscription and that one's queue's settings. Called under the lock.
pub(super) fn decide_on(inner: &Inner, id: JobId, decide: &Decide<'_>) -> Option<Transition> {
    let entry = inner.index.get(id)?;
    let queue = inner.index.name(entry.queue);
    let owner = subscription_of_queue(queue)
        .and_then(|s| inner.subscriptions.get(&s))
        .map(|s| (s, inner.queues.get(&s.queue)));
    Some(decide(&DecideContext {
        id,
        queue,
        state: &entry.state(),
        expires_at_ms: entry.expires_at_ms(),
        job_policy: entry.policy().map(|p| &**p),
        queue_config: inner.queues.get(&**queue),
        owner,
        lease: None,
        cancel_requested: entry.lease().is_some_and(|l| l.cancel_requested),
    }))
}

impl EmbeddedStore {
    /// The lease of an in-flight job, if `ack` may act on it (and, with `live_at`, if it has
    /// not ended by then). A job not in memory may be completed (on disk), which is said as
    /// such.
    fn check_lease(
        &self,
        index: &Index,
        ack: Ack,
        live_at: Option<UnixMs>,
    ) -> Result<Lease, StoreError> {
        match lease_of(index, ack, live_at) {
            Err(StoreError::NotFound(id)) if self.completed_job(id)?.is_some() => {
                Err(StoreError::NotInFlight {
                    id,
                    status: Status::Completed,
                })
            }
            found => found,
        }
    }
}

/// The lease of an in-flight job in memory, if `ack` may act on it: its token is the current
/// lease's and, with `live_at`, the lease has not ended by then. A lease ends at its expiry by
/// the server's time, whether or not the maintenance loop has ended it yet, so a worker's
/// acknowledgement after that is refused as one of a lease taken over is.
fn lease_of(index: &Index, ack: Ack, live_at: Option<UnixMs>) -> Result<Lease, StoreError> {
    let entry = index.get(ack.id).ok_or(StoreError::NotFound(ack.id))?;
    if entry.status != Status::InFlight {
        return Err(StoreError::NotInFlight {
            id: ack.id,
            status: entry.status,
        });
    }
    let lease = entry.lease().ok_or(StoreError::LeaseLost { id: ack.id })?;
    if ack.lease != lease.token || live_at.is_some_and(|now| lease.expires_at_ms <= now) {
        return Err(StoreError::LeaseLost { id: ack.id });
    }
    Ok(lease)
}
