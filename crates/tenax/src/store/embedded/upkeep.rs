//! Background transitions: scheduled → ready, expired lease → ready (or dead, or moved), job
//! expiry, and retention.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::leases::decide_on;
use super::writer::{self, Op};
use crate::clock::UnixMs;
use crate::model::Status;
use crate::store::{Decide, JobUpkeep, StoreError};

#[async_trait]
impl JobUpkeep for EmbeddedStore {
    /// Memory only: on disk a due scheduled job is already treated as ready at start-up.
    async fn promote_due(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let mut inner = self.inner.lock();
        let due = inner.index.due(now_ms, max);
        for id in &due {
            inner.index.update(*id, |e| e.state.status = Status::Ready);
        }
        drop(inner);
        if !due.is_empty() {
            self.signals.ready.notify_waiters();
        }
        Ok(due.len())
    }

    async fn expire_jobs(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
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

    async fn expire_leases(
        &self,
        now_ms: UnixMs,
        max: usize,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let receivers = {
            let mut inner = self.inner.lock();
            inner
                .claims
                .retain(|_, record| record.over_at_ms() > now_ms);
            let expired = inner.index.expired(now_ms, max);
            let mut receivers = Vec::with_capacity(expired.len());
            for id in expired {
                let inner = &mut *inner;
                let Some(mut transition) = decide_on(inner, id, decide) else {
                    continue;
                };
                receivers.push(self.apply(inner, id, &mut transition, now_ms, Vec::new())?);
            }
            receivers
        };
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

    async fn purge_finished(
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

    async fn next_wakeup(&self) -> Result<Option<UnixMs>, StoreError> {
        let inner = self.inner.lock();
        Ok([
            inner.index.next_due(),
            inner.index.next_expiry(),
            inner.index.next_job_expiry(),
        ]
        .into_iter()
        .flatten()
        .min())
    }
}
