//! Background transitions: scheduled → ready, expired lease → ready (or dead, or moved), job
//! expiry, and retention.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{JobId, Status};
use tenax_core::store::{Decide, JobUpkeep, StoreError};

use super::leases::decide_on;
use super::ops::Op;
use super::writer;
use super::{EmbeddedStore, Inner};

#[async_trait]
impl JobUpkeep for EmbeddedStore {
    /// Memory only: on disk a due scheduled job is already treated as ready at start-up.
    async fn promote_due(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let mut inner = self.inner.lock();
        let due = inner.index.due(now_ms, max);
        for id in &due {
            inner.index.update(*id, |e| e.status = Status::Ready);
        }
        drop(inner);
        if !due.is_empty() {
            self.signals.ready.notify_waiters();
        }
        Ok(due.len())
    }

    /// Jobs in memory, and completed jobs on disk.
    async fn expire_jobs(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let completed = self.completed_expired(now_ms, max)?;
        let (count, receiver) = {
            let mut inner = self.inner.lock();
            let expired = inner.index.expired_jobs(now_ms, max);
            let mut ops = Vec::with_capacity(expired.len() + completed.len());
            for id in &expired {
                if super::batches::remove_job(&mut inner, *id, now_ms).is_some() {
                    ops.push(Op::DeleteJob { id: *id });
                }
            }
            // Deleting a job twice (another request got there first) deletes it once.
            for id in completed.iter().take(max.saturating_sub(ops.len())) {
                inner.index.remove(*id);
                ops.push(Op::DeleteJob { id: *id });
            }
            if ops.is_empty() {
                return Ok(0);
            }
            (ops.len(), self.commit(&mut inner, ops, None, now_ms))
        };
        writer::wait(receiver).await?;
        Ok(count)
    }

    async fn expire_leases(
        &self,
        now_ms: UnixMs,
        max: usize,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let ended = {
            let mut inner = self.inner.lock();
            inner
                .claims
                .retain(|_, record| record.over_at_ms() > now_ms);
            let expired = inner.index.expired(now_ms, max);
            self.end_leases(&mut inner, expired, now_ms, decide)?
        };
        self.wait_for_ended(ended).await
    }

    /// Under the index lock, which every other lease transition takes too: nothing of the
    /// queue can be half-ended by someone else when this looks.
    async fn expire_leases_of(
        &self,
        queue: &str,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let ended = {
            let mut inner = self.inner.lock();
            let Some(queue) = inner.index.queue_ref(queue) else {
                return Ok(0);
            };
            let expired: Vec<JobId> = inner
                .index
                .expired(now_ms, usize::MAX)
                .into_iter()
                .filter(|id| inner.index.get(*id).is_some_and(|e| e.queue == queue))
                .collect();
            self.end_leases(&mut inner, expired, now_ms, decide)?
        };
        self.wait_for_ended(ended).await
    }

    async fn purge_finished(
        &self,
        completed_before: UnixMs,
        dead_before: UnixMs,
        max: usize,
    ) -> Result<usize, StoreError> {
        // Completed jobs on disk, then those in memory (dead and cancelled ones, and completions not yet
        // evicted).
        let completed = self.completed_before(completed_before, max)?;
        let receiver = {
            let mut inner = self.inner.lock();
            let horizon = completed_before.max(dead_before);
            let mut ops: Vec<Op> = completed
                .iter()
                .map(|id| {
                    inner.index.remove(*id);
                    Op::DeleteJob { id: *id }
                })
                .collect();
            let past: Vec<JobId> = inner
                .index
                .finished_before(horizon)
                .filter(|(_, e)| {
                    let cutoff = if e.status.is_given_up() {
                        dead_before
                    } else {
                        completed_before
                    };
                    e.finished_at_ms().unwrap_or(0) <= cutoff
                })
                .map(|(id, _)| id)
                .take(max.saturating_sub(ops.len()))
                .collect();
            for id in past {
                inner.index.remove(id);
                ops.push(Op::DeleteJob { id });
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

    async fn next_wakeup(&self) -> Result<Option<UnixMs>, StoreError> {
        let completed = self.next_completed_expiry()?;
        let inner = self.inner.lock();
        let next_tick = inner
            .schedules
            .values()
            .filter(|s| !s.paused)
            .filter_map(|s| s.next_tick_ms)
            .min();
        Ok([
            inner.index.next_due(),
            inner.index.next_expiry(),
            inner.index.next_job_expiry(),
            completed,
            next_tick,
        ]
        .into_iter()
        .flatten()
        .min())
    }
}

impl EmbeddedStore {
    /// Applies `decide` to each of `expired` (jobs whose leases ended) in memory and submits
    /// the writes; returns what to wait for.
    fn end_leases(
        &self,
        inner: &mut Inner,
        expired: Vec<JobId>,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Vec<writer::Receiver>, StoreError> {
        let mut receivers = Vec::with_capacity(expired.len());
        for id in expired {
            let Some(mut transition) = decide_on(inner, id, decide) else {
                continue;
            };
            receivers.push(self.apply(inner, id, &mut transition, now_ms, Vec::new())?);
        }
        Ok(receivers)
    }

    /// Waits for the writes of ended leases, then wakes takers; returns how many ended.
    async fn wait_for_ended(&self, receivers: Vec<writer::Receiver>) -> Result<usize, StoreError> {
        let count = receivers.len();
        for receiver in receivers {
            writer::wait(receiver).await?;
        }
        if count > 0 {
            self.signals.ready.notify_waiters();
            self.signals.released.notify_waiters();
        }
        Ok(count)
    }
}
