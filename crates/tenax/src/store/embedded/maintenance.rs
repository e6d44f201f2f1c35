//! Background transitions: scheduled → ready, expired lease → ready (or dead), and retention.

use super::EmbeddedStore;
use super::writer::{self, Op};
use crate::clock::UnixMs;
use crate::model::{JobId, JobState, Status};
use crate::store::{Decide, StoreError, Transition, to_json_bytes};

impl EmbeddedStore {
    /// Scheduled jobs that are due become ready. Memory only: on disk a due scheduled job is
    /// already treated as ready at start-up.
    pub fn promote_due(&self, now_ms: UnixMs, max: usize) -> usize {
        let mut inner = self.inner.lock();
        let due = inner.index.due(now_ms, max);
        for id in &due {
            inner.index.update(*id, |e| e.state.status = Status::Ready);
        }
        drop(inner);
        if !due.is_empty() {
            self.ready.notify_waiters();
        }
        due.len()
    }

    /// Deletes jobs past their expiry (Zaqar message TTL), whatever their status.
    pub async fn expire_jobs(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let (count, receiver) = {
            let mut inner = self.inner.lock();
            let expired = inner.index.expired_jobs(now_ms, max);
            let mut ops = Vec::with_capacity(expired.len());
            for id in &expired {
                if inner.index.remove(*id).is_some() {
                    ops.push(Op::DeleteJob { id: *id });
                }
            }
            if ops.is_empty() {
                return Ok(0);
            }
            (expired.len(), self.writer.submit(ops))
        };
        writer::wait(receiver).await?;
        Ok(count)
    }

    /// Expired leases: `decide` says whether each job returns to ready or dies.
    pub async fn expire_leases(
        &self,
        now_ms: UnixMs,
        max: usize,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let receivers = {
            let mut inner = self.inner.lock();
            let expired = inner.index.expired(now_ms, max);
            let mut receivers = Vec::with_capacity(expired.len());
            for id in expired {
                let inner = &mut *inner;
                let Some(mut transition) = super::leases::decide_on(inner, id, decide) else {
                    continue;
                };
                if let Some(receiver) = self.dead_letter(inner, id, &transition, now_ms)? {
                    receivers.push(receiver);
                    continue;
                }
                receivers.push(self.apply(inner, id, &mut transition, now_ms, Vec::new()));
            }
            receivers
        };
        let count = receivers.len();
        for receiver in receivers {
            writer::wait(receiver).await?;
        }
        if count > 0 {
            self.ready.notify_waiters();
        }
        Ok(count)
    }

    /// Moves job `id` to its queue's dead-letter queue if `transition` counts its lease
    /// expiries up to the queue's limit; `None` when it stays. Called under the lock.
    fn dead_letter(
        &self,
        inner: &mut super::Inner,
        id: JobId,
        transition: &Transition,
        now_ms: UnixMs,
    ) -> Result<Option<writer::Receiver>, StoreError> {
        let Some(entry) = inner.index.get(id) else {
            return Ok(None);
        };
        let rule = inner
            .queues
            .get(&*entry.queue)
            .and_then(|q| q.config.dead_letter.clone());
        let Some(rule) = rule.filter(|r| transition.state.failures >= r.max_claims) else {
            return Ok(None);
        };
        let Some(Some(mut body)) = self.read_body(&[id])?.pop() else {
            return Ok(None);
        };
        body.queue.clone_from(&rule.queue);
        let expires_at_ms = match rule.ttl_ms {
            Some(ttl) => Some(now_ms.saturating_add(ttl)),
            None => entry.expires_at_ms,
        };
        body.expires_at_ms = expires_at_ms;
        let queue = inner.index.intern(&rule.queue);
        let mut state = JobState::new(now_ms, now_ms);
        state.first_failure_at_ms = None;
        let entry = inner.index.update(id, |e| {
            e.queue = queue;
            e.state = state.clone();
            e.expires_at_ms = expires_at_ms;
        });
        if entry.is_none() {
            return Ok(None);
        }
        Ok(Some(self.writer.submit(vec![
            Op::PutBody {
                id,
                body: to_json_bytes(&body),
            },
            Op::PutState {
                id,
                state: to_json_bytes(&state),
            },
        ])))
    }

    /// Deletes finished jobs past their retention.
    pub async fn purge_finished(
        &self,
        completed_before: UnixMs,
        dead_before: UnixMs,
        max: usize,
    ) -> Result<usize, StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            let horizon = completed_before.max(dead_before);
            let mut ops = Vec::new();
            for (id, status) in inner.index.finished_before(horizon, usize::MAX) {
                if ops.len() >= max {
                    break;
                }
                let finished = inner
                    .index
                    .get(id)
                    .and_then(|e| e.state.finished_at_ms)
                    .unwrap_or(0);
                let cutoff = if status == Status::Dead {
                    dead_before
                } else {
                    completed_before
                };
                if finished <= cutoff {
                    inner.index.remove(id);
                    ops.push(Op::DeleteJob { id });
                }
            }
            if ops.is_empty() {
                return Ok(0);
            }
            let count = ops.len();
            (self.writer.submit(ops), count)
        };
        writer::wait(receiver.0).await?;
        Ok(receiver.1)
    }
}
