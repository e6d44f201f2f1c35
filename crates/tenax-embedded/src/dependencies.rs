//! Waiting jobs in memory: which jobs wait for which, and how a parent's end moves its waiting
//! children, in the commit that ends the parent (`tenax_core::model::dependency` has the rules).
//!
//! Invariants:
//! - Every waiting job in memory (status `waiting`, or staged by an enqueue not yet shown) has a
//!   [`Waiter`] whose `pending` counts its parents that have not ended, and is listed once under
//!   each of those parents in `children`. A parent's list goes when it ends.
//! - The index reports every end of a parent that has children ([`Dependencies::ended`]): a
//!   job that had not finished completes, dies, or leaves memory while unfinished (deleted,
//!   expired, popped). Every operation that can end a job calls [`settle`] before it submits
//!   its ops, so its children move in the same commit: the callers are `leases` (complete,
//!   fail, finish a delivery, pop, expire a lease), `curation` (delete), `upkeep` (expiry),
//!   `queues` (deletion with its jobs), `cancel`: all of them through
//!   [`EmbeddedStore::commit`](super::EmbeddedStore), which settles before it submits.
//! - A released child becomes visible (ready) only once the commit that released it is durable,
//!   as a new job does: no worker can run a child whose parent's completion could still be
//!   lost. A cancelled child changes at once (it will never run).
//! - A job cancelled because a parent did not complete is remembered under that parent
//!   (`cancelled_by`, found again at open by its `dead_reason`), so that the parent's replay
//!   resumes it ([`resume`], in the replay's commit).

use std::collections::{BTreeSet, VecDeque};

use tenax_core::clock::UnixMs;
use tenax_core::model::dependency::{ChildMove, ParentEnd, child_move, lost_parent_reason};
use tenax_core::model::{JobId, JobIdMap, JobState, OnParentDead, Status};
use tenax_core::store::{StoreError, to_json_bytes};

use super::index::Index;
use super::ops::Op;
use super::writer::Wake;

/// The status of a child whose parent will not complete and that asked to be cancelled.
pub const CANCELLED: Status = Status::Cancelled;

/// A job waiting for its parents.
#[derive(Debug, Clone)]
struct Waiter {
    /// Its parents that have not ended yet.
    pending: u32,
    /// All of its parents, as its `after` names them.
    after: Box<[JobId]>,
    on_parent_dead: OnParentDead,
    /// Its state as its enqueue wrote it, while that enqueue is not yet in memory (`show`).
    staged: Option<JobState>,
}

#[derive(Debug, Default)]
pub struct Dependencies {
    waiting: JobIdMap<Waiter>,
    /// Parents that have not ended → their waiting children.
    /// A set: a child cancelled and then resumed by a replay waits again for a parent whose
    /// set still names it, and must be counted once.
    children: JobIdMap<BTreeSet<JobId>>,
    /// Parents that ended since the last [`settle`].
    ended: VecDeque<(JobId, ParentEnd)>,
    /// Staged children cancelled before their enqueue reached memory: the state `show` gives
    /// them.
    cancelled: JobIdMap<JobState>,
    /// Jobs cancelled because a parent did not complete, by that parent: a replay of the
    /// parent resumes them ([`resume`]). A child listed here may have changed since (replayed,
    /// deleted): `resume` checks it is still cancelled because of that parent.
    cancelled_by: JobIdMap<Vec<JobId>>,
    /// What each job of `cancelled_by` waits for: its parents, and its `on_parent_dead`.
    cancelled_waits: JobIdMap<(Box<[JobId]>, OnParentDead)>,
}

impl Dependencies {
    /// Whether `parent` has waiting children: asked on every end of a job, so a map lookup
    /// only when some job has any.
    pub fn has_children(&self, parent: JobId) -> bool {
        !self.children.is_empty() && self.children.contains_key(&parent)
    }

    /// `parent`, which has children, ended.
    pub fn ended(&mut self, parent: JobId, end: ParentEnd) {
        self.ended.push_back((parent, end));
    }

    /// `child` waits for `unfinished` (none repeated), and does `on_parent_dead` if one of them
    /// will not complete. `staged`: its state, while its enqueue is not in memory yet.
    pub fn wait(
        &mut self,
        child: JobId,
        after: &[JobId],
        unfinished: &[JobId],
        on_parent_dead: OnParentDead,
        staged: Option<JobState>,
    ) {
        let pending = u32::try_from(unfinished.len()).unwrap_or(u32::MAX);
        self.waiting.insert(
            child,
            Waiter {
                pending,
                after: after.into(),
                on_parent_dead,
                staged,
            },
        );
        for parent in unfinished {
            self.children.entry(*parent).or_default().insert(child);
        }
    }

    /// `child` no longer waits (released, cancelled, deleted). Its parents' lists may still name
    /// it: [`settle`] passes over a child it does not know.
    pub fn forget(&mut self, child: JobId) {
        self.waiting.remove(&child);
    }

    /// `child`, which waits for `after`, was cancelled because `parent` did not complete.
    pub fn cancelled_because(
        &mut self,
        child: JobId,
        parent: JobId,
        after: &[JobId],
        on_parent_dead: OnParentDead,
    ) {
        self.cancelled_by.entry(parent).or_default().push(child);
        self.cancelled_waits
            .insert(child, (after.into(), on_parent_dead));
    }

    /// `job` left memory: what was kept to resume it goes.
    pub fn gone(&mut self, job: JobId) {
        if !self.cancelled_waits.is_empty() {
            self.cancelled_waits.remove(&job);
            self.cancelled_by.remove(&job);
        }
    }

    /// The enqueue of `child` reached memory (`written`: it is stored). Returns the state it
    /// was cancelled to meanwhile, if it was.
    pub fn shown(&mut self, child: JobId, written: bool) -> Option<JobState> {
        if let Some(waiter) = self.waiting.get_mut(&child) {
            waiter.staged = None;
        }
        if !written {
            self.forget(child);
        }
        self.cancelled.remove(&child)
    }
}

/// What a [`settle`] did: the children it released, with their new states, to show once the
/// commit is durable; and those it cancelled (they have ended: a batch counts them).
#[derive(Debug, Default)]
pub struct Settled {
    pub released: Released,
    pub cancelled: Vec<JobId>,
}

/// The children a [`settle`] released, to show once its commit is durable.
#[derive(Debug, Default)]
pub struct Released(Vec<(JobId, JobState)>);

impl Released {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Shows the released children (the commit is durable when `written`): they become ready
    /// or scheduled. Says whom to wake.
    pub fn show(self, index: &mut Index, written: bool) -> Wake {
        let mut wake = Wake::default();
        if !written {
            return wake;
        }
        for (id, state) in self.0 {
            // A job deleted since (it left memory) stays gone.
            if index.get(id).is_some_and(|e| e.status == Status::Waiting) {
                index.update(id, |e| e.set_state(&state));
                let shown = index.get(id).map(|e| e.status);
                wake.ready |= shown == Some(Status::Ready);
                wake.schedule |= shown == Some(Status::Scheduled);
            }
        }
        wake
    }
}

/// Moves the waiting children of every parent that ended since the last settle, adding their
/// new states to `ops` (the commit that ended the parents). Under the lock, before the ops are
/// submitted (`EmbeddedStore::commit`); the caller shows the [`Released`] children once the
/// commit is durable. A cancelled child ends in turn: its own children follow in the same
/// commit.
pub fn settle(index: &mut Index, ops: &mut Vec<Op>, now_ms: UnixMs) -> Settled {
    let mut settled = Settled::default();
    while let Some((parent, end)) = index.deps.ended.pop_front() {
        let Some(children) = index.deps.children.remove(&parent) else {
            continue;
        };
        for child in children {
            let Some(waiter) = index.deps.waiting.get_mut(&child) else {
                continue;
            };
            match child_move(end, waiter.on_parent_dead, waiter.pending) {
                ChildMove::Wait { pending } => waiter.pending = pending,
                ChildMove::Release => {
                    let waiter = waiter.clone();
                    index.deps.forget(child);
                    let Some(mut state) = state_of(index, child, waiter.staged) else {
                        continue;
                    };
                    release(&mut state, now_ms);
                    ops.push(Op::PutState {
                        id: child,
                        state: to_json_bytes(&state),
                    });
                    settled.released.0.push((child, state));
                }
                ChildMove::Cancel => {
                    let staged = waiter.staged.clone();
                    let (after, on_parent_dead) = (waiter.after.clone(), waiter.on_parent_dead);
                    index.deps.forget(child);
                    index
                        .deps
                        .cancelled_because(child, parent, &after, on_parent_dead);
                    let Some(mut state) = state_of(index, child, staged) else {
                        continue;
                    };
                    cancel(&mut state, parent, now_ms);
                    settled.cancelled.push(child);
                    ops.push(Op::PutState {
                        id: child,
                        state: to_json_bytes(&state),
                    });
                    if index.get(child).is_some() {
                        // The index reports the end if it has children of its own.
                        index.update(child, |e| e.set_state(&state));
                    } else {
                        if index.deps.has_children(child) {
                            index.deps.ended(child, ParentEnd::Lost);
                        }
                        index.deps.cancelled.insert(child, state);
                    }
                }
            }
        }
    }
    settled
}

/// A waiting child's state: memory's, or its enqueue's while that is not shown.
fn state_of(index: &Index, child: JobId, staged: Option<JobState>) -> Option<JobState> {
    index.get(child).map(|e| e.state()).or(staged)
}

/// Ready now, or scheduled when its run time is ahead.
fn release(state: &mut JobState, now_ms: UnixMs) {
    if state.run_at_ms > now_ms {
        state.status = Status::Scheduled;
    } else {
        state.status = Status::Ready;
        state.run_at_ms = now_ms;
    }
}

fn cancel(state: &mut JobState, parent: JobId, now_ms: UnixMs) {
    state.status = CANCELLED;
    state.finished_at_ms = Some(now_ms);
    state.dead_reason = Some(lost_parent_reason(parent));
}

/// How `parents` stand for a job enqueued now: those not ended, and whether one of them will
/// not complete. `status` says where memory has each (`None`: not in memory, so completed
/// when `on_disk`, else unknown: `Err(position)`).
pub fn standing(
    parents: &[JobId],
    status: impl Fn(JobId) -> Option<Status>,
    on_disk: impl Fn(JobId) -> bool,
) -> Result<(Vec<JobId>, Option<JobId>), usize> {
    let mut unfinished = Vec::new();
    let mut lost = None;
    for (position, parent) in parents.iter().enumerate() {
        if parents[..position].contains(parent) {
            continue;
        }
        match status(*parent) {
            Some(Status::Completed) => {}
            Some(status) if status.is_finished() => {
                lost.get_or_insert(*parent);
            }
            Some(_) => unfinished.push(*parent),
            None if on_disk(*parent) => {}
            None => return Err(position),
        }
    }
    Ok((unfinished, lost))
}

/// The state a job enqueued now starts in, given how its parents stand.
pub fn starting_state(
    state: &mut JobState,
    unfinished: &[JobId],
    lost: Option<JobId>,
    on_parent_dead: OnParentDead,
    now_ms: UnixMs,
) {
    match (lost, on_parent_dead) {
        (Some(parent), OnParentDead::Cancel) => cancel(state, parent, now_ms),
        _ if !unfinished.is_empty() => state.status = Status::Waiting,
        _ => {}
    }
}

/// A cancelled job that waited for others, as open finds it: its id, parents,
/// `on_parent_dead` and `dead_reason`.
pub type Cancelled = (JobId, Vec<JobId>, OnParentDead, Option<String>);

/// Finds, at open, the jobs cancelled because a parent did not complete (their `dead_reason`
/// names it), so that a replay of that parent resumes them.
pub fn rebuild_cancelled(index: &mut Index, cancelled: Vec<Cancelled>) {
    for (child, parents, on_parent_dead, reason) in cancelled {
        let Some(reason) = reason else {
            continue;
        };
        if let Some(parent) = parents.iter().find(|p| lost_parent_reason(**p) == reason) {
            index
                .deps
                .cancelled_because(child, *parent, &parents, on_parent_dead);
        }
    }
}

/// Resumes what a replay of `parent` (now ready again) resumes: the jobs cancelled because it
/// did not complete wait for it again, unless another of their parents did not complete
/// either; and, in turn, the jobs cancelled because of those. Their new states go into `ops`
/// (the replay's commit); returns them, for the batches they are members of. A parent that
/// memory no longer holds has completed. Under the lock.
pub fn resume(index: &mut Index, parent: JobId, ops: &mut Vec<Op>) -> Vec<JobId> {
    let mut resumed = Vec::new();
    let mut parents = vec![parent];
    while let Some(parent) = parents.pop() {
        let Some(children) = index.deps.cancelled_by.remove(&parent) else {
            continue;
        };
        for child in children {
            let Some(entry) = index.get(child) else {
                continue;
            };
            let mut state = entry.state();
            let Some((after, on_parent_dead)) = index.deps.cancelled_waits.remove(&child) else {
                continue;
            };
            // Still cancelled because a parent did not complete (that one, or another of its
            // parents that blocked it since).
            let named = |reason: &str| after.iter().any(|p| lost_parent_reason(*p) == reason);
            if state.status != CANCELLED || !state.dead_reason.as_deref().is_some_and(named) {
                continue;
            }
            let status = |p: JobId| index.get(p).map(|e| e.status);
            let Ok((unfinished, lost)) = standing(&after, status, |_| true) else {
                continue;
            };
            if let Some(other) = lost.filter(|other| *other != parent) {
                // Still blocked by another parent: it stays cancelled, for that one's replay.
                index
                    .deps
                    .cancelled_because(child, other, &after, on_parent_dead);
                continue;
            }
            state.status = Status::Waiting;
            state.finished_at_ms = None;
            state.dead_reason = None;
            index
                .deps
                .wait(child, &after, &unfinished, on_parent_dead, None);
            index.update(child, |e| e.set_state(&state));
            ops.push(Op::PutState {
                id: child,
                state: to_json_bytes(&state),
            });
            resumed.push(child);
            parents.push(child);
        }
    }
    resumed
}

/// Finds who waits for whom at open, once every job in memory is: each waiting job (its
/// parents as its body names them) waits for those of its parents still unfinished. Commits move
/// a waiting job with the end of its parents, so each one found still waits for one at least;
/// should one not (a parent gone that it did not hear of), it moves now, in memory, as the
/// rules say, and its next change writes it.
pub fn rebuild(
    index: &mut Index,
    waiting: Vec<(JobId, Vec<JobId>, OnParentDead)>,
    on_disk: impl Fn(JobId) -> Result<bool, StoreError>,
    now_ms: UnixMs,
) -> Result<(), StoreError> {
    for (child, parents, on_parent_dead) in waiting {
        let mut stood = Vec::with_capacity(parents.len());
        for parent in &parents {
            let status = index.get(*parent).map(|e| e.status);
            let disk = status.is_none() && on_disk(*parent)?;
            stood.push((*parent, status, disk));
        }
        let find = |p: JobId| stood.iter().find(|s| s.0 == p).and_then(|s| s.1);
        let disk = |p: JobId| stood.iter().any(|s| s.0 == p && s.2);
        // A parent neither in memory nor on disk is gone: lost, as a deleted one is.
        let (unfinished, lost) = match standing(&parents, find, disk) {
            Ok(standing) => standing,
            Err(position) => (Vec::new(), Some(parents[position])),
        };
        let Some(entry) = index.get(child) else {
            continue;
        };
        let mut state = entry.state();
        state.status = Status::Scheduled;
        starting_state(&mut state, &unfinished, lost, on_parent_dead, now_ms);
        match state.status {
            Status::Waiting => index
                .deps
                .wait(child, &parents, &unfinished, on_parent_dead, None),
            _ => {
                if state.status != CANCELLED {
                    release(&mut state, now_ms);
                }
                index.update(child, |e| e.set_state(&state));
            }
        }
    }
    Ok(())
}
