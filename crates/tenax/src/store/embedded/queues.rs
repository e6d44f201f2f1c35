//! Queue settings: default policy and pause.

use std::sync::Arc;

use tenax_policy::RetryPolicy;

use super::writer::{self, Op};
use super::{EmbeddedStore, QueueEntry};
use crate::store::{QueueConfig, StoreError, to_json_bytes};

impl EmbeddedStore {
    pub fn queue(&self, name: &str) -> Option<QueueConfig> {
        self.inner.lock().queues.get(name).map(|q| q.config.clone())
    }

    /// The queue's message TTL, without copying its settings (asked on every enqueue).
    pub fn message_ttl(&self, name: &str) -> Option<u64> {
        self.inner
            .lock()
            .queues
            .get(name)
            .and_then(|q| q.config.message_ttl_ms)
    }

    /// Every queue with settings or jobs, by name.
    pub fn queues(&self) -> Vec<(String, QueueConfig)> {
        let inner = self.inner.lock();
        let mut all: Vec<(String, QueueConfig)> = inner
            .queues
            .iter()
            .map(|(name, q)| (name.clone(), q.config.clone()))
            .collect();
        for (name, counts) in inner.index.counts() {
            // A queue whose jobs are all gone has no jobs (as after a restart).
            if counts.iter().any(|n| *n > 0) && !inner.queues.contains_key(name) {
                all.push((name.to_owned(), QueueConfig::default()));
            }
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Deletes a queue: its settings and every job in it. Its subscriptions stay (they are
    /// deleted on their own). Returns how many jobs went.
    pub async fn delete_queue(&self, name: &str) -> Result<usize, StoreError> {
        let (count, receiver) = {
            let mut inner = self.inner.lock();
            let ids: Vec<crate::model::JobId> = inner
                .index
                .entries()
                .filter(|(_, e)| *e.queue == *name)
                .map(|(id, _)| *id)
                .collect();
            let mut ops = Vec::with_capacity(ids.len() + 1);
            for id in &ids {
                inner.index.remove(*id);
                ops.push(Op::DeleteJob { id: *id });
            }
            inner.queues.remove(name);
            super::subscriptions::rederive_queue(&mut inner, name);
            ops.push(Op::DeleteQueue {
                name: name.to_owned(),
            });
            (ids.len(), self.writer.submit(ops))
        };
        writer::wait(receiver).await?;
        Ok(count)
    }

    /// Stores a queue's settings; `policy` is `config.policy` parsed.
    pub async fn put_queue(
        &self,
        name: &str,
        config: QueueConfig,
        policy: Option<Arc<RetryPolicy>>,
    ) -> Result<(), StoreError> {
        let receiver = {
            let _inner = self.inner.lock();
            self.writer.submit(vec![Op::PutQueue {
                name: name.to_owned(),
                config: to_json_bytes(&config),
            }])
        };
        writer::wait(receiver).await?;
        let resumed = !config.paused;
        let mut inner = self.inner.lock();
        inner
            .queues
            .insert(name.to_owned(), QueueEntry { config, policy });
        super::subscriptions::rederive_queue(&mut inner, name);
        drop(inner);
        if resumed {
            self.ready.notify_waiters();
        }
        Ok(())
    }
}
