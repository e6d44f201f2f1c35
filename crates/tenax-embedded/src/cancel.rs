//! Cancellation (docs/workflows.md#cancellation): a scheduled or ready job becomes cancelled at
//! once; a job in flight has its lease marked, in memory (leases live only there: after a
//! restart the mark is forgotten, and the job is ready again and runs as any job in flight at a
//! crash does).
//!
//! [`into_cancelled`] is the one place where a job of this store becomes cancelled, whether an
//! operator cancelled it or its marked lease ended in a failure or an expiry
//! ([`EmbeddedStore::apply`](super::EmbeddedStore)): work that must follow a cancellation in
//! the same commit hooks in there: a cancelled job is a parent that will not complete, which
//! the index tells `dependencies` of, and every commit that cancels settles its waiting
//! children ([`EmbeddedStore::submit_ending`]).

use tenax_core::clock::UnixMs;
use tenax_core::model::{Cancelled, JobId, JobState, Outcome, Selection, Status};
use tenax_core::store::{StoreError, to_json_bytes};

use super::index::Index;
use super::ops::Op;
use super::read::passes;
use super::writer;
use super::{EmbeddedStore, Inner};

/// Job `id` becomes cancelled with `state` (its status [`Status::Cancelled`]): in memory now
/// (where it sits with the dead jobs, for retention and replay, its unique key free again),
/// and on disk by `ops`, which the caller commits. Called under the lock.
pub(super) fn into_cancelled(inner: &mut Inner, id: JobId, state: &JobState, ops: &mut Vec<Op>) {
    debug_assert_eq!(state.status, Status::Cancelled);
    ops.push(Op::PutState {
        id,
        state: to_json_bytes(state),
    });
    inner.index.update(id, |e| e.set_state(state));
    let at = state.finished_at_ms.unwrap_or_default();
    super::batches::finished(inner, id, false, Outcome::Cancelled, at);
}

impl EmbeddedStore {
    /// See [`tenax_core::store::JobCuration::cancel_jobs`].
    pub(super) async fn cancel_selected(
        &self,
        selection: &Selection,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<Cancelled, StoreError> {
        let (done, receiver) = {
            let mut inner = self.inner.lock();
            let inner = &mut *inner;
            let selected = unfinished(&inner.index, selection);
            let mut done = Cancelled::default();
            let mut ops = Vec::new();
            for id in selected {
                let Some(entry) = inner.index.get(id) else {
                    continue;
                };
                match entry.status {
                    Status::Scheduled | Status::Ready | Status::Waiting => {
                        let state = entry.state().cancelled(now_ms, reason);
                        into_cancelled(inner, id, &state, &mut ops);
                        done.cancelled.push(id);
                    }
                    Status::InFlight => {
                        inner.index.update(id, |e| {
                            if let Some(lease) = e.lease() {
                                e.set_lease(Some(super::index::Lease {
                                    cancel_requested: true,
                                    ..lease
                                }));
                            }
                        });
                        done.marked.push(id);
                    }
                    Status::Completed | Status::Dead | Status::Cancelled => {}
                }
            }
            // Jobs that wait for those cancelled are moved in the same commit.
            let receiver = (!ops.is_empty()).then(|| self.commit(inner, ops, None, now_ms));
            (done, receiver)
        };
        if let Some(receiver) = receiver {
            writer::wait(receiver).await?;
            // A wait for a job's end looks again: a cancelled job has finished.
            self.signals.released.notify_waiters();
        }
        Ok(done)
    }
}

/// The unfinished jobs `selection` selects, in id order. Unfinished jobs are all in memory:
/// nothing on disk is read.
fn unfinished(index: &Index, selection: &Selection) -> Vec<JobId> {
    let filter = &selection.filter;
    let keep = |id: JobId| {
        index
            .get(id)
            .is_some_and(|e| !e.status.is_finished() && passes(index, filter, e))
    };
    let mut ids: Vec<JobId> = match &selection.ids {
        Some(ids) => ids.iter().copied().filter(|id| keep(*id)).collect(),
        None => index
            .entries()
            .filter(|(_, e)| !e.status.is_finished() && passes(index, filter, e))
            .map(|(id, _)| id)
            .collect(),
    };
    ids.sort_unstable();
    ids.dedup();
    ids
}
