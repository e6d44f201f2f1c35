//! Batches: jobs counted together, with callbacks (`crate::model::batch`). The store counts
//! and fires; the engine makes the jobs (their deliveries, sealed payloads) and resolves the
//! callbacks' policies before the store sees them.

use super::jobs::Enqueue;
use super::jobs::FACTS_ATTEMPTS;
use super::{Engine, EngineError};
use crate::model::{Batch, BatchId, Enqueued, JobTemplate, NewBatch, StoredPolicy};
use crate::store::{BatchTarget, StoreError};

/// A callback as asked for: a job template (its retry limit not yet resolved).
pub type CallbackSpec = Enqueue;

impl Engine {
    /// Makes a batch with `jobs` as its first members, in one commit; closed in that same
    /// commit unless `open`. Returns it and the members' enqueue results, in order.
    pub async fn create_batch(
        &self,
        description: Option<String>,
        on_complete: Option<CallbackSpec>,
        on_success: Option<CallbackSpec>,
        jobs: Vec<Enqueue>,
        open: bool,
    ) -> Result<(Batch, Vec<Enqueued>), EngineError> {
        let mut spec = NewBatch {
            description,
            on_complete: self.callback_template(on_complete).await?,
            on_success: self.callback_template(on_success).await?,
            queues: Vec::new(),
        };
        let mut queues: Vec<String> = jobs.iter().map(|j| j.job.queue.clone()).collect();
        queues.extend(spec.on_complete.iter().map(|t| t.queue.clone()));
        queues.extend(spec.on_success.iter().map(|t| t.queue.clone()));
        queues.sort_unstable();
        queues.dedup();
        spec.queues = queues;
        self.add(BatchTarget::New(Box::new(spec)), jobs, !open)
            .await
    }

    /// Adds `jobs` to open batch `id`, closing it in the same commit when `close`.
    pub async fn add_to_batch(
        &self,
        id: BatchId,
        jobs: Vec<Enqueue>,
        close: bool,
    ) -> Result<(Batch, Vec<Enqueued>), EngineError> {
        self.add(BatchTarget::Existing(id), jobs, close).await
    }

    async fn add(
        &self,
        to: BatchTarget,
        mut jobs: Vec<Enqueue>,
        close: bool,
    ) -> Result<(Batch, Vec<Enqueued>), EngineError> {
        let mut attempt = 1;
        loop {
            let these = if attempt < FACTS_ATTEMPTS {
                jobs.clone()
            } else {
                std::mem::take(&mut jobs)
            };
            let now_ms = self.now_ms();
            let count = these.len();
            let made = self.inserts_of(these, now_ms).await?;
            let added = self
                .store
                .add_to_batch(to.clone(), made.inserts, close, made.seen, now_ms)
                .await;
            match added {
                Err(StoreError::FactsChanged) if attempt < FACTS_ATTEMPTS => attempt += 1,
                Err(error) => return Err(error.into()),
                Ok((batch, results)) => {
                    self.signals().ready.notify_waiters();
                    let jobs = self.count_enqueued(made.observed, results, count, now_ms);
                    return Ok((batch, jobs));
                }
            }
        }
    }

    /// Closes batch `id`; it finishes at once if no member is pending.
    pub async fn close_batch(&self, id: BatchId) -> Result<Batch, EngineError> {
        let batch = self.store.close_batch(id, self.now_ms()).await?;
        self.signals().ready.notify_waiters();
        Ok(batch)
    }

    pub async fn batch(&self, id: BatchId) -> Result<Option<Batch>, EngineError> {
        Ok(self.store.batch(id).await?)
    }

    /// A page of batches, in id order.
    pub async fn batches(
        &self,
        after: Option<BatchId>,
        limit: usize,
    ) -> Result<Vec<Batch>, EngineError> {
        Ok(self.store.batches(after, limit).await?)
    }

    /// Deletes a batch's record; its jobs stay. False if there was none.
    pub async fn delete_batch(&self, id: BatchId) -> Result<bool, EngineError> {
        Ok(self.store.delete_batch(id).await?)
    }

    /// A callback's template, its retry limit resolved now into a policy (its queue's, else
    /// the server's, with the limit), as an enqueue would resolve it.
    async fn callback_template(
        &self,
        spec: Option<CallbackSpec>,
    ) -> Result<Option<JobTemplate>, EngineError> {
        let Some(Enqueue {
            job, retry_limit, ..
        }) = spec
        else {
            return Ok(None);
        };
        let mut policy = job.policy;
        if let (None, Some(limit)) = (&policy, retry_limit) {
            let facts = self.store.queue_facts(&job.queue).await?;
            let base = facts
                .config
                .as_ref()
                .and_then(|c| c.policy.as_ref())
                .map_or(self.default_policy_for(&job.queue), |p| p.policy());
            policy = Some(StoredPolicy::new((**base).clone().with_retry_limit(limit)));
        }
        Ok(Some(JobTemplate {
            queue: job.queue,
            kind: job.kind,
            payload: job.payload,
            priority: job.priority,
            policy,
            retry_limit: None,
        }))
    }
}
