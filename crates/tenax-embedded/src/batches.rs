//! Batches (`tenax_core::model::batch`): records in the `batches` table, written through; in
//! memory, every batch and the members still in memory (`Inner::members`).
//!
//! A member is counted by [`finished`], the one place every path that ends a member calls
//! under the lock (a completion: `leases::complete_one`; a death: `EmbeddedStore::apply`; a
//! deletion: [`remove_job`]). It changes the batch in memory and stages the batch's record,
//! and the callbacks when the batch is due, in `Inner::staged`, which the commit of the
//! request that ended the member carries ([`EmbeddedStore::commit`]): the member's end, its
//! count and the callbacks are one commit, so a crash keeps all or none of them.

use std::collections::HashSet;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::batch::Callback;
use tenax_core::model::{
    Batch, BatchId, BatchState, Enqueued, JobId, JobState, OnDuplicate, Outcome, Status,
};
use tenax_core::store::{BatchStore, BatchTarget, FactsSeen, Insert, StoreError, to_json_bytes};

use super::enqueue::{self, Staged};
use super::index::Entry;
use super::ops::Op;
use super::writer::{self, After, Receiver, Wake};
use super::{EmbeddedStore, Inner};

/// What ended members staged for the commit that ends them: batch records and callbacks.
#[derive(Debug, Default)]
pub(super) struct StagedBatches {
    ops: Vec<Op>,
    fresh: Vec<(JobId, Insert, JobState)>,
    /// When the staged callbacks were made.
    now_ms: UnixMs,
}

/// Counts the end of member `id` (if it is one) by `outcome`; `was_dead`: it had died before
/// (and was counted then). A member that leaves memory (completed, deleted) stops being one;
/// a dead one stays, so that a replay can make it pending again. Called under the lock.
pub(super) fn finished(
    inner: &mut Inner,
    id: JobId,
    was_dead: bool,
    outcome: Outcome,
    now_ms: UnixMs,
) {
    let Some(&batch) = inner.members.get(&id) else {
        return;
    };
    // A dead or cancelled member stays one: a replay makes it pending again.
    if !matches!(outcome, Outcome::Dead | Outcome::Cancelled) {
        inner.members.remove(&id);
    }
    if was_dead {
        return;
    }
    let Some(record) = inner.batches.get_mut(&batch) else {
        return;
    };
    if record.state == BatchState::Finished {
        return;
    }
    record.counts.finish(outcome);
    stage(inner, batch, now_ms);
}

/// A dead member replayed: pending again while its batch is unfinished. Called under the lock.
pub(super) fn replayed(inner: &mut Inner, id: JobId, was: Status, now_ms: UnixMs) {
    let Some(&batch) = inner.members.get(&id) else {
        return;
    };
    let Some(record) = inner.batches.get_mut(&batch) else {
        return;
    };
    if record.state == BatchState::Finished {
        return;
    }
    record.counts.reopen(if was == Status::Cancelled {
        Outcome::Cancelled
    } else {
        Outcome::Dead
    });
    stage(inner, batch, now_ms);
}

/// Removes job `id` from memory, counting it as deleted if it is an unfinished member.
/// Called under the lock, by every deletion.
pub(super) fn remove_job(inner: &mut Inner, id: JobId, now_ms: UnixMs) -> Option<Entry> {
    let entry = inner.index.remove(id)?;
    if inner.members.contains_key(&id) {
        finished(
            inner,
            id,
            entry.status.is_given_up(),
            Outcome::Deleted,
            now_ms,
        );
    }
    Some(entry)
}

/// Stages batch `id`'s record, finishing it first when it is due: its callbacks are staged
/// as new jobs (ids taken now, visible once written).
fn stage(inner: &mut Inner, id: BatchId, now_ms: UnixMs) {
    let Some(record) = inner.batches.get(&id) else {
        return;
    };
    if record.due() {
        let callbacks = record.callbacks(now_ms);
        let kinds: Vec<Callback> = callbacks.iter().map(|(kind, _)| *kind).collect();
        let inserts = callbacks
            .into_iter()
            .map(|(_, job)| Insert::new(job))
            .collect();
        let encoded = enqueue::encode_all(inserts, now_ms);
        // A callback waits for no job.
        let staged = enqueue::stage(
            inner,
            encoded,
            OnDuplicate::Existing,
            &HashSet::new(),
            now_ms,
        );
        let ids: Vec<(Callback, JobId)> = match staged {
            Ok(Staged {
                results,
                ops,
                fresh,
            }) => {
                inner.staged.ops.extend(ops);
                inner.staged.fresh.extend(fresh);
                inner.staged.now_ms = now_ms;
                kinds
                    .into_iter()
                    .zip(results)
                    .filter_map(|(kind, r)| r.map(|e| (kind, e.id)))
                    .collect()
            }
            // Callbacks have no unique key, the only thing a stage refuses: not reached.
            Err(error) => {
                tracing::error!(batch = %id, %error, "a batch's callbacks could not be enqueued");
                Vec::new()
            }
        };
        if let Some(record) = inner.batches.get_mut(&id) {
            record.finish(now_ms, &ids);
        }
    }
    if let Some(record) = inner.batches.get(&id) {
        inner.staged.ops.push(Op::PutBatch {
            id,
            record: to_json_bytes(record),
        });
    }
}

impl EmbeddedStore {
    /// Submits `ops`, made under the lock at `now_ms`, with what follows the jobs they end in
    /// the same commit: the moves of the jobs waiting for them (`dependencies::settle`; a
    /// child it cancels is a member that ends too), then what ended members staged
    /// (`Inner::staged`: batch records and callbacks); `after` runs once it is written, then
    /// the released children and the callbacks are shown. Every request that may end a job
    /// submits through here, under the lock it ended it under.
    pub(super) fn commit(
        &self,
        inner: &mut Inner,
        mut ops: Vec<Op>,
        after: Option<After>,
        now_ms: UnixMs,
    ) -> Receiver {
        let settled = super::dependencies::settle(&mut inner.index, &mut ops, now_ms);
        for child in &settled.cancelled {
            finished(inner, *child, false, Outcome::Cancelled, now_ms);
        }
        let released = settled.released;
        let staged = std::mem::take(&mut inner.staged);
        ops.extend(staged.ops);
        if staged.fresh.is_empty() && released.is_empty() {
            return match after {
                Some(after) => self.writer.submit_then(ops, after),
                None => self.writer.submit(ops),
            };
        }
        let fresh = staged.fresh;
        let staged_at = staged.now_ms;
        let show: After = Box::new(move |inner: &mut Inner, written| {
            let mut wake = after.map_or_else(Wake::default, |after| after(inner, written));
            wake.add(released.show(&mut inner.index, written));
            if !fresh.is_empty() {
                wake.add(enqueue::show(inner, fresh, written, staged_at));
            }
            wake
        });
        self.writer.submit_then(ops, show)
    }

    /// The ops that make or change a batch with `jobs`, under the lock: the jobs, the batch's
    /// record, and (when it finishes at once) its callbacks.
    fn stage_add(
        &self,
        inner: &mut Inner,
        to: BatchTarget,
        mut jobs: Vec<Insert>,
        close: bool,
        now_ms: UnixMs,
    ) -> Result<(BatchId, Staged), StoreError> {
        let mut batch = match to {
            BatchTarget::New(spec) => Batch::new(inner.next_batch_id, *spec, now_ms),
            BatchTarget::Existing(id) => {
                let batch = inner.batches.get(&id).ok_or(StoreError::NoBatch(id))?;
                if batch.state != BatchState::Open {
                    return Err(StoreError::BatchClosed(id));
                }
                batch.clone()
            }
        };
        let id = batch.id;
        for insert in &mut jobs {
            if insert.parent.is_none() {
                insert.job.batch = Some(id);
            }
        }
        let members: Vec<bool> = jobs.iter().map(|i| i.parent.is_none()).collect();
        let encoded = enqueue::encode_all(jobs, now_ms);
        // A batch's jobs wait for no others (`after` is refused in a batch's jobs).
        let staged = enqueue::stage(inner, encoded, OnDuplicate::Refuse, &HashSet::new(), now_ms)?;
        let mut queues = Vec::new();
        for ((result, member), (_, insert, _)) in staged
            .results
            .iter()
            .zip(&members)
            .filter(|(r, _)| r.as_ref().is_some_and(|e| e.created))
            .zip(&staged.fresh)
        {
            let (Some(result), true) = (result, *member) else {
                continue;
            };
            inner.members.insert(result.id, id);
            batch.counts.total += 1;
            batch.counts.pending += 1;
            queues.push(insert.job.queue.clone());
        }
        batch.add_queues(queues.iter().map(String::as_str));
        if close {
            batch.state = BatchState::Closed;
        }
        if id == inner.next_batch_id {
            inner.next_batch_id = BatchId(id.0 + 1);
        }
        inner.batches.insert(id, batch);
        stage(inner, id, now_ms);
        Ok((id, staged))
    }
}

#[async_trait]
impl BatchStore for EmbeddedStore {
    async fn add_to_batch(
        &self,
        to: BatchTarget,
        jobs: Vec<Insert>,
        close: bool,
        _seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<(Batch, Vec<Option<Enqueued>>), StoreError> {
        if self.writer.has_failed() {
            return Err(StoreError::Failed);
        }
        let (batch, results, receiver) = {
            let mut inner = self.inner.lock();
            let (id, staged) = self.stage_add(&mut inner, to, jobs, close, now_ms)?;
            let Staged {
                results,
                ops,
                fresh,
            } = staged;
            let after: After = Box::new(move |inner: &mut Inner, written| {
                enqueue::show(inner, fresh, written, now_ms)
            });
            let receiver = self.commit(&mut inner, ops, Some(after), now_ms);
            let batch = inner
                .batches
                .get(&id)
                .cloned()
                .ok_or(StoreError::NoBatch(id))?;
            (batch, results, receiver)
        };
        writer::wait(receiver).await?;
        Ok((batch, results))
    }

    async fn close_batch(&self, id: BatchId, now_ms: UnixMs) -> Result<Batch, StoreError> {
        let (batch, receiver) = {
            let mut inner = self.inner.lock();
            let record = inner.batches.get_mut(&id).ok_or(StoreError::NoBatch(id))?;
            if record.state != BatchState::Open {
                return Ok(record.clone());
            }
            record.state = BatchState::Closed;
            stage(&mut inner, id, now_ms);
            let receiver = self.commit(&mut inner, Vec::new(), None, now_ms);
            let batch = inner
                .batches
                .get(&id)
                .cloned()
                .ok_or(StoreError::NoBatch(id))?;
            (batch, receiver)
        };
        writer::wait(receiver).await?;
        Ok(batch)
    }

    async fn batch(&self, id: BatchId) -> Result<Option<Batch>, StoreError> {
        Ok(self.inner.lock().batches.get(&id).cloned())
    }

    async fn batches(
        &self,
        after: Option<BatchId>,
        limit: usize,
    ) -> Result<Vec<Batch>, StoreError> {
        let inner = self.inner.lock();
        let from = after.map_or(0, |a| a.0.saturating_add(1));
        Ok(inner
            .batches
            .range(BatchId(from)..)
            .take(limit)
            .map(|(_, b)| b.clone())
            .collect())
    }

    async fn delete_batch(&self, id: BatchId) -> Result<bool, StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if inner.batches.remove(&id).is_none() {
                return Ok(false);
            }
            inner.members.retain(|_, b| *b != id);
            self.writer.submit(vec![Op::DeleteBatch { id }])
        };
        writer::wait(receiver).await?;
        Ok(true)
    }

    async fn import_batch(&self, batch: Batch) -> Result<(), StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if inner.batches.contains_key(&batch.id) {
                return Err(StoreError::Refused(format!(
                    "batch {} is already in the store",
                    batch.id
                )));
            }
            let id = batch.id;
            inner.next_batch_id = inner.next_batch_id.max(BatchId(id.0 + 1));
            let record = to_json_bytes(&batch);
            // Its members come after it (`import_jobs` makes them members).
            inner.batches.insert(id, batch);
            self.writer.submit(vec![Op::PutBatch { id, record }])
        };
        writer::wait(receiver).await?;
        Ok(())
    }
}
