//! Replay, cancel (`super::cancel`) and delete.

use std::collections::HashSet;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Cancelled, Checked, JobId, NotReplayed, Replay, Replayed, Selection, Status, Trigger,
};
use tenax_core::store::{DeleteCheck, JobCuration, StoreError, to_json_bytes};

use super::EmbeddedStore;
use super::batches;
use super::dependencies;
use super::ops::Op;
use super::read::peek_of;
use super::writer;

#[async_trait]
impl JobCuration for EmbeddedStore {
    /// Dead (and cancelled) jobs matching the selection become ready, optionally with a new
    /// policy and a fresh attempt count. Their error history is kept. A job whose unique key an
    /// unfinished job holds stays as it is (the key index maps a key to one unfinished job), and
    /// so does any id the selection names that is not a selected dead or cancelled job; each is
    /// reported with the reason.
    async fn replay_jobs(&self, replay: &Replay, now_ms: UnixMs) -> Result<Replayed, StoreError> {
        let (replayed, receiver) = {
            let mut inner = self.inner.lock();
            let selected = self.select(&inner, &replay.selection)?;
            let mut replayed = Replayed::default();
            if let Some(named) = &replay.selection.ids {
                let selected: HashSet<JobId> = selected.iter().copied().collect();
                for id in named {
                    if selected.contains(id) {
                        continue;
                    }
                    let reason = match inner.index.get(*id) {
                        Some(e) if !e.status.is_given_up() => NotReplayed::NotDead(e.status),
                        Some(_) => NotReplayed::NotSelected,
                        None if self.completed_job(*id)?.is_some() => {
                            NotReplayed::NotDead(Status::Completed)
                        }
                        None => NotReplayed::NotFound,
                    };
                    replayed.skipped.push((*id, reason));
                }
            }
            let mut ops = Vec::with_capacity(selected.len() * 2);
            for id in selected {
                let Some(entry) = inner.index.get(id) else {
                    // Completed on disk: never replayed.
                    if replay.selection.ids.is_some() {
                        let reason = NotReplayed::NotDead(Status::Completed);
                        replayed.skipped.push((id, reason));
                    }
                    continue;
                };
                if !entry.status.is_given_up() {
                    if replay.selection.ids.is_some() {
                        let reason = NotReplayed::NotDead(entry.status);
                        replayed.skipped.push((id, reason));
                    }
                    continue;
                }
                if let Some(key) = entry.unique_key() {
                    let queue = inner.index.name(entry.queue);
                    let pending = inner
                        .pending_unique
                        .get(&(queue.to_string(), key.to_string()))
                        .copied();
                    let holder = inner.index.unique(queue, key).or(pending);
                    if let Some(holder) = holder.filter(|h| *h != id) {
                        let key = key.to_string();
                        replayed
                            .skipped
                            .push((id, NotReplayed::KeyHeld { key, holder }));
                        continue;
                    }
                }
                let was = entry.status;
                let updated = inner.index.update(id, |e| {
                    let mut state = e.state();
                    state.status = Status::Ready;
                    state.run_at_ms = now_ms;
                    state.finished_at_ms = None;
                    state.dead_reason = None;
                    state.trigger = Trigger::Replay;
                    if replay.reset_attempts {
                        state.failures = 0;
                        state.first_failure_at_ms = None;
                        state.last_delay_ms = None;
                    }
                    e.set_state(&state);
                    if let Some(policy) = &replay.policy {
                        e.set_policy(Some(policy.policy().clone()));
                    }
                });
                if let Some(entry) = updated {
                    ops.push(Op::PutState {
                        id,
                        state: to_json_bytes(&entry.state()),
                    });
                    batches::replayed(&mut inner, id, was, now_ms);
                    // The jobs it cancelled by not completing wait for it again.
                    for child in dependencies::resume(&mut inner.index, id, &mut ops) {
                        batches::replayed(&mut inner, child, Status::Cancelled, now_ms);
                    }
                }
                if let Some(policy) = &replay.policy {
                    ops.push(Op::PutPolicy {
                        id,
                        policy: to_json_bytes(policy),
                    });
                }
                replayed.ids.push(id);
            }
            replayed.skipped.sort_by_key(|(id, _)| *id);
            let receiver = (!ops.is_empty()).then(|| self.commit(&mut inner, ops, None, now_ms));
            (replayed, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
            self.signals.ready.notify_waiters();
        }
        Ok(replayed)
    }

    async fn run_now(&self, ids: &[JobId], now_ms: UnixMs) -> Result<Vec<JobId>, StoreError> {
        let (ran, receiver) = {
            let mut inner = self.inner.lock();
            let mut ran = Vec::new();
            let mut ops = Vec::new();
            for id in ids {
                let scheduled = inner
                    .index
                    .get(*id)
                    .is_some_and(|e| e.status == Status::Scheduled);
                if !scheduled {
                    continue;
                }
                let updated = inner.index.update(*id, |e| {
                    let mut state = e.state();
                    state.status = Status::Ready;
                    state.run_at_ms = now_ms;
                    state.trigger = Trigger::Manual;
                    e.set_state(&state);
                });
                if let Some(entry) = updated {
                    ops.push(Op::PutState {
                        id: *id,
                        state: to_json_bytes(&entry.state()),
                    });
                    ran.push(*id);
                }
            }
            ran.sort_unstable();
            ran.dedup();
            let receiver = (!ops.is_empty()).then(|| self.writer.submit(ops));
            (ran, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
            self.signals.ready.notify_waiters();
        }
        Ok(ran)
    }

    /// See `super::cancel`.
    async fn cancel_jobs(
        &self,
        selection: &Selection,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<Cancelled, StoreError> {
        self.cancel_selected(selection, reason, now_ms).await
    }

    async fn delete_jobs(
        &self,
        selection: &Selection,
        now_ms: UnixMs,
    ) -> Result<Vec<JobId>, StoreError> {
        let (ids, receiver) = {
            let mut inner = self.inner.lock();
            let ids = self.select(&inner, selection)?;
            // Selected jobs are in memory, or completed on disk (the writer finds them there).
            let ops: Vec<Op> = ids
                .iter()
                .map(|id| {
                    batches::remove_job(&mut inner, *id, now_ms);
                    Op::DeleteJob { id: *id }
                })
                .collect();
            let receiver = (!ops.is_empty()).then(|| self.commit(&mut inner, ops, None, now_ms));
            (ids, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
            // A deleted job may have been held by a stream: it has room again.
            self.signals.released.notify_waiters();
        }
        Ok(ids)
    }

    async fn delete_checked(
        &self,
        ids: &[JobId],
        check: &DeleteCheck<'_>,
        now_ms: UnixMs,
    ) -> Result<Vec<Checked>, StoreError> {
        let (checked, receiver) = {
            let mut inner = self.inner.lock();
            let mut checked = Vec::with_capacity(ids.len());
            let mut ops = Vec::new();
            for &id in ids {
                let peek = match inner.index.get(id) {
                    Some(entry) => Some(peek_of(&inner.index, entry)),
                    None => self.peek_completed(id)?,
                };
                let deleted = peek.as_ref().is_some_and(check);
                if deleted {
                    batches::remove_job(&mut inner, id, now_ms);
                    ops.push(Op::DeleteJob { id });
                }
                checked.push(Checked { id, peek, deleted });
            }
            let receiver = (!ops.is_empty()).then(|| self.commit(&mut inner, ops, None, now_ms));
            (checked, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
            self.signals.released.notify_waiters();
        }
        Ok(checked)
    }
}
