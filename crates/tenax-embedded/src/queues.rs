//! Queue settings.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{LimitUse, QueueConfig};
use tenax_core::store::{ChangeQueue, QueueStore, StoreError, to_json_bytes};

use super::ops::Op;
use super::{EmbeddedStore, limits, writer};

#[async_trait]
impl QueueStore for EmbeddedStore {
    async fn queue(&self, name: &str) -> Result<Option<QueueConfig>, StoreError> {
        Ok(self.inner.lock().queues.get(name).cloned())
    }

    async fn queues(&self) -> Result<Vec<(String, QueueConfig)>, StoreError> {
        let inner = self.inner.lock();
        let mut all: Vec<(String, QueueConfig)> = inner
            .queues
            .iter()
            .map(|(name, config)| (name.clone(), config.clone()))
            .collect();
        let mut with_jobs: std::collections::BTreeSet<String> = inner
            .completed
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(queue, _)| queue.clone())
            .collect();
        for (name, counts) in inner.index.counts() {
            // A queue whose jobs are all gone has no jobs (as after a restart).
            if counts.iter().any(|n| *n > 0) {
                with_jobs.insert(name.to_string());
            }
        }
        for name in with_jobs {
            if !inner.queues.contains_key(&name) {
                all.push((name, QueueConfig::default()));
            }
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    async fn update_queue(
        &self,
        name: &str,
        change: &ChangeQueue<'_>,
    ) -> Result<Option<QueueConfig>, StoreError> {
        let (config, receiver) = {
            let mut inner = self.inner.lock();
            let current = inner.queues.get(name);
            let Some(config) = change(current) else {
                return Ok(current.cloned());
            };
            let receiver = self.writer.submit(vec![Op::PutQueue {
                name: name.to_owned(),
                config: to_json_bytes(&config),
            }]);
            inner.queues.insert(name.to_owned(), config.clone());
            (config, receiver)
        };
        writer::wait(receiver).await?;
        if !config.paused {
            // It may have been resumed.
            self.signals.ready.notify_waiters();
        }
        Ok(Some(config))
    }

    async fn delete_queue(&self, name: &str, now_ms: UnixMs) -> Result<usize, StoreError> {
        let completed = self.completed_of_queue(name)?;
        let (count, receiver) = {
            let mut inner = self.inner.lock();
            let mut ids = self.jobs_of_queue(&inner.index, name);
            ids.extend(completed);
            ids.sort_unstable();
            ids.dedup();
            let mut ops = Vec::with_capacity(ids.len() + 1);
            for id in &ids {
                super::batches::remove_job(&mut inner, *id, now_ms);
                ops.push(Op::DeleteJob { id: *id });
            }
            inner.queues.remove(name);
            inner.starts.remove(name);
            ops.push(Op::DeleteQueue {
                name: name.to_owned(),
            });
            (ids.len(), self.commit(&mut inner, ops, None, now_ms))
        };
        writer::wait(receiver).await?;
        Ok(count)
    }

    async fn limit_use(&self, name: &str, now_ms: UnixMs) -> Result<LimitUse, StoreError> {
        let inner = self.inner.lock();
        let started = match inner.queues.get(name).and_then(|c| c.rate.as_ref()) {
            Some(rate) => limits::used(inner.starts.get(name), rate, now_ms),
            None => 0,
        };
        Ok(LimitUse { started })
    }
}
