//! Take, heartbeat, complete, fail and stream release: the worker's side of a job.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::EmbeddedStore;
use super::index::Lease;
use super::writer::{self, Op};
use crate::clock::UnixMs;
use crate::model::{JobId, Status};
use crate::store::{
    Ack, Decide, DecideContext, StoreError, TakeRequest, TakenJob, Transition, to_json_bytes,
};

impl EmbeddedStore {
    /// Leases up to `max` ready jobs of the unpaused `queues`, best first. Leases are memory
    /// only: nothing is written, so taking costs no fsync.
    pub fn take(
        &self,
        request: &TakeRequest<'_>,
        now_ms: UnixMs,
    ) -> Result<Vec<TakenJob>, StoreError> {
        if self.writer.has_failed() {
            return Err(StoreError::Failed);
        }
        let mut leased = Vec::new();
        {
            let mut inner = self.inner.lock();
            let queues: Vec<Arc<str>> = request
                .queues
                .iter()
                .filter(|q| {
                    !inner
                        .queues
                        .get(q.as_str())
                        .is_some_and(|e| e.config.paused)
                })
                .filter_map(|q| inner.index.queue_name(q))
                .collect();
            let expires_at_ms = now_ms.saturating_add(request.lease_ms);
            for id in inner.index.peek_ready(&queues, request.max) {
                let token = self.lease_tokens.fetch_add(1, Ordering::Relaxed);
                let lease = Lease {
                    token,
                    expires_at_ms,
                    taken_at_ms: now_ms,
                    stream: request.stream,
                };
                let keep_until = request.keep_until_ms;
                if let Some(entry) = inner.index.update(id, |e| {
                    e.state.status = Status::InFlight;
                    e.lease = Some(lease);
                    if let (Some(at), Some(keep)) = (e.expires_at_ms, keep_until) {
                        e.expires_at_ms = Some(at.max(keep));
                    }
                }) {
                    leased.push((id, lease, entry.state.failures + 1));
                }
            }
        }
        if leased.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<JobId> = leased.iter().map(|(id, _, _)| *id).collect();
        let bodies = self.read_body(&ids)?;
        Ok(leased
            .into_iter()
            .zip(bodies)
            // A job deleted since it was leased has no body: nothing to hand out.
            .filter_map(|((id, lease, attempt), body)| {
                let body = body?;
                Some(TakenJob {
                    id,
                    queue: body.queue,
                    kind: body.kind,
                    payload: body.payload,
                    priority: body.priority,
                    attempt,
                    lease_token: lease.token,
                    lease_expires_at_ms: lease.expires_at_ms,
                    created_at_ms: body.created_at_ms,
                })
            })
            .collect())
    }

    /// Extends a lease to `now + lease_ms`, but never past `max_attempt_ms` after the take.
    pub fn heartbeat(
        &self,
        ack: Ack,
        lease_ms: u64,
        max_attempt_ms: u64,
        now_ms: UnixMs,
    ) -> Result<UnixMs, StoreError> {
        let mut inner = self.inner.lock();
        let lease = check_lease(&inner.index, ack)?;
        let expires_at_ms = now_ms
            .saturating_add(lease_ms)
            .min(lease.taken_at_ms.saturating_add(max_attempt_ms));
        inner.index.update(ack.id, |e| {
            e.lease = Some(Lease {
                expires_at_ms,
                ..lease
            })
        });
        Ok(expires_at_ms)
    }

    /// Completes each job whose lease is valid; one commit for all.
    pub async fn complete(
        &self,
        acks: &[Ack],
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let (results, receiver) = {
            let mut inner = self.inner.lock();
            let mut ops = Vec::with_capacity(acks.len());
            let mut results = Vec::with_capacity(acks.len());
            for ack in acks {
                if let Err(error) = check_lease(&inner.index, *ack) {
                    results.push(Err(error));
                    continue;
                }
                ops.extend(complete_one(&mut inner, ack.id, retain, now_ms));
                results.push(Ok(()));
            }
            let receiver = (!ops.is_empty()).then(|| self.writer.submit(ops));
            (results, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
        }
        Ok(results)
    }

    /// Records a failure; `decide` gives the next state (retry, snooze or dead).
    pub async fn fail(
        &self,
        ack: Ack,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Transition, StoreError> {
        let (transition, receiver) = {
            let mut inner = self.inner.lock();
            check_lease(&inner.index, ack)?;
            let inner = &mut *inner;
            let mut transition =
                decide_on(inner, ack.id, decide).ok_or(StoreError::NotFound(ack.id))?;
            let receiver = self.apply(inner, ack.id, &mut transition, now_ms, Vec::new());
            (transition, receiver)
        };
        writer::wait(receiver).await?;
        self.signal(&transition);
        Ok(transition)
    }

    /// Writes a transition (with `ops` in the same commit) and moves the job in memory. Called
    /// under the lock. A retry due already is ready at once; `transition` is updated to say so,
    /// so callers report the state as stored.
    pub(super) fn apply(
        &self,
        inner: &mut super::Inner,
        id: JobId,
        transition: &mut Transition,
        now_ms: UnixMs,
        mut ops: Vec<Op>,
    ) -> tokio::sync::oneshot::Receiver<Result<(), StoreError>> {
        if transition.state.status == Status::Scheduled && transition.state.run_at_ms <= now_ms {
            transition.state.status = Status::Ready;
        }
        let state = transition.state.clone();
        ops.push(Op::PutState {
            id,
            state: to_json_bytes(&state),
        });
        if let Some(error) = &transition.error {
            ops.push(Op::PutError {
                id,
                attempt: error.attempt,
                entry: to_json_bytes(error),
            });
        }
        inner.index.update(id, |e| e.state = state);
        self.writer.submit(ops)
    }

    /// Wakes whoever waits for what a transition produced.
    pub(super) fn signal(&self, transition: &Transition) {
        match transition.state.status {
            Status::Ready => self.ready.notify_waiters(),
            Status::Scheduled => {
                self.schedule.notify_waiters();
                self.ready.notify_waiters();
            }
            _ => {}
        }
    }

    /// A closed stream's jobs go back to ready at once. Nothing is written: on disk they never
    /// left ready. No attempt is counted: the worker never reported on them.
    pub fn release_stream(&self, stream: u64) -> usize {
        let mut inner = self.inner.lock();
        let ids = inner.index.leased_by_stream(stream);
        for id in &ids {
            inner.index.update(*id, |e| e.state.status = Status::Ready);
        }
        drop(inner);
        if !ids.is_empty() {
            self.ready.notify_waiters();
        }
        ids.len()
    }
}

/// Completes in-flight job `id` in memory and returns the writes: its state kept as completed
/// (for the retention period) when `retain`, else the job deleted. Called under the lock.
pub(super) fn complete_one(
    inner: &mut super::Inner,
    id: JobId,
    retain: bool,
    now_ms: UnixMs,
) -> Option<Op> {
    if retain {
        let entry = inner.index.update(id, |e| {
            e.state.status = Status::Completed;
            e.state.finished_at_ms = Some(now_ms);
        })?;
        Some(Op::PutState {
            id,
            state: to_json_bytes(&entry.state),
        })
    } else {
        inner.index.remove(id)?;
        Some(Op::DeleteJob { id })
    }
}

/// Asks `decide` about job `id`, with its own and its queue's policy. Called under the lock.
pub(super) fn decide_on(
    inner: &super::Inner,
    id: JobId,
    decide: &Decide<'_>,
) -> Option<Transition> {
    let entry = inner.index.get(id)?;
    let queue_policy = inner
        .queues
        .get(&*entry.queue)
        .and_then(|q| q.policy.as_deref());
    Some(decide(&DecideContext {
        id,
        queue: &entry.queue,
        state: &entry.state,
        job_policy: entry.policy.as_deref(),
        queue_policy,
    }))
}

/// The lease of an in-flight job, if `ack` may act on it.
pub(super) fn check_lease(index: &super::index::Index, ack: Ack) -> Result<Lease, StoreError> {
    let entry = index.get(ack.id).ok_or(StoreError::NotFound(ack.id))?;
    if entry.state.status != Status::InFlight {
        return Err(StoreError::NotInFlight {
            id: ack.id,
            status: entry.state.status,
        });
    }
    let lease = entry.lease.ok_or(StoreError::LeaseLost { id: ack.id })?;
    if ack.lease != lease.token {
        return Err(StoreError::LeaseLost { id: ack.id });
    }
    Ok(lease)
}

impl EmbeddedStore {
    /// How many jobs a stream holds leased.
    pub fn stream_leases(&self, stream: u64) -> usize {
        self.inner.lock().index.leased_by_stream(stream).len()
    }
}
