//! Replay and delete.

use super::EmbeddedStore;
use super::writer::{self, Op};
use crate::clock::UnixMs;
use crate::model::{JobId, Status};
use crate::store::{Replay, Selection, StoreError, to_json_bytes};

impl EmbeddedStore {
    /// Dead jobs matching the selection become ready, optionally with a new policy and a fresh
    /// attempt count. Their error history is kept.
    pub async fn replay(&self, replay: &Replay, now_ms: UnixMs) -> Result<Vec<JobId>, StoreError> {
        let (ids, receiver) = {
            let mut inner = self.inner.lock();
            let mut ids = self.select(&inner.index, &replay.selection)?;
            ids.retain(|id| {
                inner
                    .index
                    .get(*id)
                    .is_some_and(|e| e.state.status == Status::Dead)
            });
            let mut ops = Vec::with_capacity(ids.len() * 2);
            for id in &ids {
                let updated = inner.index.update(*id, |e| {
                    e.state.status = Status::Ready;
                    e.state.run_at_ms = now_ms;
                    e.state.finished_at_ms = None;
                    e.state.dead_reason = None;
                    if replay.reset_attempts {
                        e.state.failures = 0;
                        e.state.first_failure_at_ms = None;
                        e.state.last_delay_ms = None;
                    }
                    if let Some((_, policy)) = &replay.policy {
                        e.policy = Some(policy.clone());
                    }
                });
                if let Some(entry) = updated {
                    ops.push(Op::PutState {
                        id: *id,
                        state: to_json_bytes(&entry.state),
                    });
                }
                if let Some((json, _)) = &replay.policy {
                    ops.push(Op::PutPolicy {
                        id: *id,
                        policy: to_json_bytes(json),
                    });
                }
            }
            let receiver = (!ops.is_empty()).then(|| self.writer.submit(ops));
            (ids, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
            self.ready.notify_waiters();
        }
        Ok(ids)
    }

    pub async fn delete(&self, selection: &Selection) -> Result<Vec<JobId>, StoreError> {
        let (ids, receiver) = {
            let mut inner = self.inner.lock();
            let ids = self.select(&inner.index, selection)?;
            let ops: Vec<Op> = ids
                .iter()
                .filter_map(|id| inner.index.remove(*id).map(|_| Op::DeleteJob { id: *id }))
                .collect();
            let receiver = (!ops.is_empty()).then(|| self.writer.submit(ops));
            (ids, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
        }
        Ok(ids)
    }
}
