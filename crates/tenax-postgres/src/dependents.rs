//! A parent's end, as its waiting children see it: the one place where the PostgreSQL store
//! applies the rules of [`tenax_core::model::dependency`], in the transaction that ends the
//! parent.
//!
//! The statements that end a job (complete, fail to dead, expire, delete, pop, purge) return
//! its `has_children` flag, which an enqueue sets on a parent's row, under that row's lock, in
//! the transaction that links a child to it. Only a job with the flag comes here: a job
//! without children costs no statement more than it did before dependencies, and nothing
//! reads `tenax_edges` for it. [`settle`] runs as a statement of its own after the one that
//! ended the parents (never inside it): in READ COMMITTED a statement that waited for an
//! enqueue's lock on the parent sees the parent's new flag, but its snapshot would not see the
//! edges that enqueue wrote; the next statement's does.
//!
//! Callers, each in the transaction that ends the parents:
//! - [`super::leases`]: `complete_jobs` (a job with children is completed again in a
//!   transaction, [`super::transitions::complete`]), `finish_delivery`, and `pop_jobs` (a
//!   popped parent is lost);
//! - [`super::transitions::write_transition`]: a job that dies (`fail_job`, a delivery's
//!   failure, the lease expiry of `expire_leases` and `expire_leases_of`);
//! - [`super::curation`]: `delete_jobs`, `delete_checked`;
//! - [`super::upkeep`]: `expire_jobs` (a job's expiry), `purge_finished` (a purged parent's
//!   edges go with it);
//! - [`super::queues`]: `delete_queue`; [`super::subscriptions`]: `delete_subscription`
//!   (their deliveries).
//!
//! Races: an enqueue locks every stored parent's row (setting its flag) before it reads the
//! parent's status ([`super::inserts`]), so a parent's end either waits for the child's commit
//! (and then sees the flag, and the edge) or comes first (and the enqueue sees the parent
//! ended). Children are locked (`FOR UPDATE`) and read under the lock, so ends of several of a
//! child's parents in concurrent transactions each see the count the one before left: the
//! last one, and only it, releases the child.
//!
//! A replay undoes a loss ([`resume`], called by [`super::curation`]'s `replay_jobs` in the
//! transaction that brings dead and cancelled jobs back): the children a replayed job
//! cancelled (their `dead_reason` is [`lost_parent_reason`] of it), and down the graph the
//! children those cancelled in turn, wait again, each for its parents that have not completed
//! (the replayed job among them). Only a child whose every parent is completed, unfinished, or
//! resumed with it comes back: one that another lost parent (dead, cancelled for another
//! reason, or no longer stored: a parent deleted unfinished and one completed and not kept
//! cannot be told apart) still blocks stays cancelled, and so do its own children; so does one
//! whose unique key an unfinished job holds. A child that ran past the lost parent
//! (`on_parent_dead: run`) was never cancelled: nothing to undo. The other parents are locked
//! as an enqueue locks them, with the same effect on a race with their end. A resumed child
//! that is a batch member moves back as a replayed one does, so the batch's trigger
//! (`tenax_batch_member_replayed`, migration 0014) counts it pending again.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use deadpool_postgres::GenericClient;
use tenax_core::clock::UnixMs;
use tenax_core::model::dependency::{ChildMove, ParentEnd, child_move, lost_parent_reason};
use tenax_core::model::{JobId, Status};
use tenax_core::store::StoreError;

use super::fault;
use super::inserts::{Stands, key_holders, lock_stands};
use super::rows::{count, on_parent_dead_of, status_code, table_columns, time, uncount, unid};
use super::statements::statements;
use super::transitions::{execute, query};

/// The status of a waiting job whose parent will not complete and that cancels on it: stored
/// in `tenax_finished`, with `finished_at` and `dead_reason` set, as a dead job.
pub const CANCELLED: Status = Status::Cancelled;

/// How a parent with children ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Completed, and still stored.
    Completed,
    /// Completed and not kept (a completion without retention): its edges go.
    CompletedAndDeleted,
    /// Dead (or cancelled): still stored.
    Lost,
    /// Deleted, popped or expired while unfinished: lost, and its edges go with it.
    Deleted,
    /// A finished parent deleted (purged, expired, deleted): its children were settled when
    /// it finished; only its edges go.
    Forgotten,
}

/// Ended jobs that had children (by id), and how each ended.
pub type Ended = Vec<(i64, End)>;

/// What settling made of the children: whether any became ready, or scheduled.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settled {
    pub ready: bool,
    pub scheduled: bool,
}

impl Settled {
    /// What another settling woke, too.
    pub fn add(&mut self, other: Settled) {
        self.ready |= other.ready;
        self.scheduled |= other.scheduled;
    }
}

/// Applies the ends of `parents` (each one that has children) to their waiting children, and
/// in turn to the waiting children of the children that this cancels, in the transaction of
/// `client`.
pub async fn settle<C: GenericClient>(
    client: &C,
    parents: &[(i64, End)],
    now_ms: UnixMs,
) -> Result<Settled, StoreError> {
    let what = "settling the jobs waiting for ended jobs";
    let mut settled = Settled::default();
    let gone: Vec<i64> = parents
        .iter()
        .filter(|(_, end)| {
            matches!(
                end,
                End::CompletedAndDeleted | End::Deleted | End::Forgotten
            )
        })
        .map(|(parent, _)| *parent)
        .collect();
    let mut round: Vec<(i64, ParentEnd)> = parents
        .iter()
        .filter_map(|(parent, end)| match end {
            End::Completed | End::CompletedAndDeleted => Some((*parent, ParentEnd::Completed)),
            End::Lost | End::Deleted => Some((*parent, ParentEnd::Lost)),
            End::Forgotten => None,
        })
        .collect();
    while !round.is_empty() {
        round.sort_unstable_by_key(|(parent, _)| *parent);
        let ends: BTreeMap<i64, ParentEnd> = round.iter().copied().collect();
        let ids: Vec<i64> = ends.keys().copied().collect();
        // (child, parent) pairs of waiting children, locked, in child order.
        let rows = query(client, &LOCK_WAITING_CHILDREN, &[&ids])
            .await
            .map_err(fault(what))?;
        let mut children: BTreeMap<i64, Child> = BTreeMap::new();
        for row in &rows {
            let child = children.entry(row.get(0)).or_insert_with(|| Child {
                pending: uncount(row.get::<_, Option<i32>>(2).unwrap_or(0)),
                on_parent_dead: row.get(3),
                run_at: row.get(4),
                parents: Vec::new(),
            });
            child.parents.push(row.get(1));
        }
        let mut waits = Waits::default();
        let (mut cancelled, mut reasons): (Vec<i64>, Vec<String>) = (Vec::new(), Vec::new());
        for (&id, child) in &children {
            let mut pending = child.pending;
            let mut moved = ChildMove::Wait { pending };
            for parent in &child.parents {
                let end = ends[parent];
                moved = child_move(end, on_parent_dead_of(child.on_parent_dead), pending);
                match moved {
                    ChildMove::Wait { pending: left } => pending = left,
                    ChildMove::Release => break,
                    ChildMove::Cancel => {
                        cancelled.push(id);
                        reasons.push(lost_parent_reason(JobId(unid(*parent))));
                        break;
                    }
                }
            }
            match moved {
                ChildMove::Wait { pending } => {
                    waits.push(id, Status::Waiting, Some(pending), child.run_at)
                }
                ChildMove::Release => {
                    let now = time(now_ms);
                    if child.run_at > now {
                        settled.scheduled = true;
                        waits.push(id, Status::Scheduled, None, child.run_at);
                    } else {
                        settled.ready = true;
                        waits.push(id, Status::Ready, None, now);
                    }
                }
                ChildMove::Cancel => {}
            }
        }
        if !waits.ids.is_empty() {
            execute(
                client,
                &MOVE_WAITING,
                &[&waits.ids, &waits.statuses, &waits.pending, &waits.run_at],
            )
            .await
            .map_err(fault(what))?;
        }
        round = if cancelled.is_empty() {
            Vec::new()
        } else {
            // Cancelled children that are parents in turn: lost ones, the next round.
            query(
                client,
                &CANCEL_WAITING,
                &[&cancelled, &reasons, &status_code(CANCELLED), &time(now_ms)],
            )
            .await
            .map_err(fault(what))?
            .iter()
            .filter(|row| row.get::<_, bool>(1))
            .map(|row| (row.get(0), ParentEnd::Lost))
            .collect()
        };
    }
    if !gone.is_empty() {
        execute(client, &FORGET_EDGES, &[&gone])
            .await
            .map_err(fault(what))?;
    }
    Ok(settled)
}

/// Resumes the workflows of `replayed` (ids of jobs the transaction of `client` has just
/// brought back from dead or cancelled to unfinished): every child cancelled because of one of
/// them, and recursively every child cancelled because of a resumed one, waits again for its
/// parents that have not completed, unless a parent that will not complete still blocks it
/// (see the module's documentation). Answers the resumed children, in id order.
pub async fn resume<C: GenericClient>(
    client: &C,
    replayed: &[i64],
) -> Result<Vec<i64>, StoreError> {
    let what = "resuming the workflows of replayed jobs";
    // Every job cancelled because of a replayed one or, down the graph, of one found so, locked.
    // The graph has no cycle: this ends.
    let mut cancelled: BTreeMap<i64, Cancelled> = BTreeMap::new();
    let mut causes: Vec<i64> = replayed.to_vec();
    while !causes.is_empty() {
        causes.sort_unstable();
        causes.dedup();
        let reasons: Vec<String> = causes
            .iter()
            .map(|cause| lost_parent_reason(JobId(unid(*cause))))
            .collect();
        let rows = query(client, &LOCK_CANCELLED_CHILDREN, &[&causes, &reasons])
            .await
            .map_err(fault(what))?;
        causes = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.get(0);
            if cancelled.contains_key(&id) {
                continue;
            }
            let mut parents: Vec<i64> = row.get::<_, Option<Vec<i64>>>(2).unwrap_or_default();
            // The cause is a parent, whatever `after_ids` says: the child waits for it.
            parents.push(row.get(1));
            parents.sort_unstable();
            parents.dedup();
            let key = row
                .get::<_, Option<String>>(4)
                .map(|key| (row.get::<_, String>(3), key));
            cancelled.insert(id, Cancelled { parents, key });
            causes.push(id);
        }
    }
    if cancelled.is_empty() {
        return Ok(Vec::new());
    }
    // Their parents other than themselves (the replayed ones among them, unfinished now),
    // locked against their end, as an enqueue locks a new child's.
    let others: Vec<i64> = cancelled
        .values()
        .flat_map(|child| child.parents.iter().copied())
        .filter(|parent| !cancelled.contains_key(parent))
        .collect();
    let stands = lock_stands(client, others, what).await?;
    let (queues, keys): (Vec<String>, Vec<String>) = cancelled
        .values()
        .filter_map(|child| child.key.clone())
        .unzip();
    let held: HashSet<(String, String)> = key_holders(client, &queues, &keys)
        .await?
        .into_keys()
        .collect();
    let resumed = resumable(&cancelled, &stands, &held);
    if resumed.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, pending): (Vec<i64>, Vec<i32>) = resumed
        .iter()
        .map(|(id, pending)| (*id, count(*pending)))
        .unzip();
    execute(
        client,
        &RESUME_CANCELLED,
        &[&ids, &pending, &status_code(Status::Waiting)],
    )
    .await
    .map_err(fault(what))?;
    Ok(ids)
}

/// A job cancelled because its parent did not complete, as a resume finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cancelled {
    /// Its parents, distinct, in id order.
    parents: Vec<i64>,
    /// Its (queue, unique key), if it has a key.
    key: Option<(String, String)>,
}

/// Which of the `cancelled` jobs (every one cancelled because of a replayed job, or of another
/// of them) resume, and how many parents each then waits for: a parent of `stands` that is
/// unfinished, and one of `cancelled` that resumes. A job stays cancelled when a parent of it
/// will not complete: a lost one of `stands`, one not stored (absent from both), or one of
/// `cancelled` that stays so. Then, in id order, one whose unique key is `held` by an
/// unfinished job, or by a resumed one before it, stays cancelled too (and so do the jobs
/// that it blocks), one at a time.
///
/// A job's parents are older than it (the graph has no cycle), so removing the blocked ones
/// until none is left settles on the one answer.
fn resumable(
    cancelled: &BTreeMap<i64, Cancelled>,
    stands: &HashMap<i64, Stands>,
    held: &HashSet<(String, String)>,
) -> BTreeMap<i64, u32> {
    let mut blocked: BTreeSet<i64> = BTreeSet::new();
    loop {
        loop {
            let before = blocked.len();
            for (id, child) in cancelled {
                if blocked.contains(id) {
                    continue;
                }
                let stuck = child.parents.iter().any(|parent| {
                    if cancelled.contains_key(parent) {
                        blocked.contains(parent)
                    } else {
                        !matches!(
                            stands.get(parent),
                            Some(Stands::Unfinished | Stands::Completed)
                        )
                    }
                });
                if stuck {
                    blocked.insert(*id);
                }
            }
            if blocked.len() == before {
                break;
            }
        }
        let mut keys: HashSet<&(String, String)> = held.iter().collect();
        let clash = cancelled
            .iter()
            .filter(|(id, _)| !blocked.contains(id))
            .find(|(_, child)| child.key.as_ref().is_some_and(|key| !keys.insert(key)));
        match clash {
            Some((id, _)) => {
                blocked.insert(*id);
            }
            None => break,
        }
    }
    cancelled
        .iter()
        .filter(|(id, _)| !blocked.contains(id))
        .map(|(id, child)| {
            let pending = child
                .parents
                .iter()
                .filter(|parent| {
                    if cancelled.contains_key(parent) {
                        !blocked.contains(parent)
                    } else {
                        stands.get(parent) == Some(&Stands::Unfinished)
                    }
                })
                .count();
            (*id, u32::try_from(pending).unwrap_or(u32::MAX))
        })
        .collect()
}

/// The jobs with children a deletion of whole tables' worth of rows removed: those of
/// `unfinished` lost, those of `finished` only taking their edges along.
pub fn deleted(unfinished: Vec<i64>, finished: Vec<i64>) -> Vec<(i64, End)> {
    let lost = unfinished.into_iter().map(|p| (p, End::Deleted));
    lost.chain(finished.into_iter().map(|p| (p, End::Forgotten)))
        .collect()
}

/// A waiting child, as locked.
struct Child {
    pending: u32,
    on_parent_dead: i16,
    run_at: i64,
    /// Its parents that ended, in id order.
    parents: Vec<i64>,
}

/// New states of waiting children, one array per column.
#[derive(Default)]
struct Waits {
    ids: Vec<i64>,
    statuses: Vec<i16>,
    pending: Vec<Option<i32>>,
    run_at: Vec<i64>,
}

impl Waits {
    fn push(&mut self, id: i64, status: Status, pending: Option<u32>, run_at: i64) {
        self.ids.push(id);
        self.statuses.push(status_code(status));
        self.pending.push(pending.map(count));
        self.run_at.push(run_at);
    }
}

statements! {
    /// The waiting children of the parents `$1`, locked, as (child, parent, pending,
    /// on_parent_dead, run_at), in (child, parent) order. Locked in id order: two of these
    /// never wait for each other in a circle.
    LOCK_WAITING_CHILDREN = "SELECT j.id, e.parent, j.pending, j.on_parent_dead, j.run_at
         FROM tenax_edges e JOIN tenax_jobs j ON j.id = e.child
         WHERE e.parent = ANY($1::bigint[]) AND j.status = 6
         ORDER BY j.id, e.parent
         FOR UPDATE OF j";

    /// Waiting children `$1` wait on with `$3` parents left, or are released (`$2`, at `$4`).
    MOVE_WAITING = "UPDATE tenax_jobs j SET status = u.status, pending = u.pending,
             run_at = u.run_at
         FROM unnest($1::bigint[], $2::smallint[], $3::integer[], $4::bigint[])
             AS u(id, status, pending, run_at)
         WHERE j.id = u.id";

    /// Waiting children `$1` cancelled (status `$3`, reasons `$2`, at `$4`), moved where the
    /// finished jobs are; answers (id, has_children) of each.
    pub(super) CANCEL_WAITING = concat!(
        "WITH moved AS (
             DELETE FROM tenax_jobs j USING unnest($1::bigint[], $2::text[]) AS c(id, reason)
             WHERE j.id = c.id
             RETURNING j.*, c.reason AS new_reason
         )
         INSERT INTO tenax_finished (",
        table_columns!(),
        ")
         SELECT id, queue, kind, payload, priority, unique_key, created_at, expires_at, origin,
             parent, traceparent, policy, $3::smallint, run_at, failures, first_failure_at,
             last_delay, $4::bigint, new_reason, errors, attempts, NULL, NULL, NULL, NULL,
             trigger, payload_sealed, result, after_ids, on_parent_dead, NULL, has_children
         FROM moved
         RETURNING id, has_children"
    );

    /// The jobs cancelled because their parent `$1[i]` did not complete (their reason is
    /// `$2[i]`), locked, in id order: (id, the parent, after_ids, queue, unique_key).
    LOCK_CANCELLED_CHILDREN = "SELECT f.id, c.parent, f.after_ids, f.queue, f.unique_key
         FROM unnest($1::bigint[], $2::text[]) AS c(parent, reason)
         JOIN tenax_edges e ON e.parent = c.parent
         JOIN tenax_finished f ON f.id = e.child
         WHERE f.status = 5 AND f.dead_reason = c.reason
         ORDER BY f.id
         FOR UPDATE OF f";

    /// Cancelled jobs `$1` back where the unfinished jobs are, waiting (status `$3`) for `$2`
    /// parents, as they were before they were cancelled: `finished_at` and `dead_reason`
    /// cleared, their errors and attempts kept. A batch member's `batch_id` is set again, and
    /// its batch counts it pending again, by the trigger on its deletion from tenax_finished.
    RESUME_CANCELLED = concat!(
        "WITH moved AS (
             DELETE FROM tenax_finished f USING unnest($1::bigint[], $2::integer[]) AS r(id, pending)
             WHERE f.id = r.id AND f.status = 5
             RETURNING f.*, r.pending AS new_pending
         )
         INSERT INTO tenax_jobs (",
        table_columns!(),
        ")
         SELECT id, queue, kind, payload, priority, unique_key, created_at, expires_at, origin,
             parent, traceparent, policy, $3::smallint, run_at, failures, first_failure_at,
             last_delay, NULL, NULL, errors, attempts, NULL, NULL, NULL, NULL, trigger,
             payload_sealed, NULL, after_ids, on_parent_dead, new_pending, has_children
         FROM moved"
    );

    /// The edges of parents `$1`, which are gone.
    FORGET_EDGES = "DELETE FROM tenax_edges WHERE parent = ANY($1::bigint[])";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cancelled jobs by id, each with its parents and maybe a key of queue `q`.
    fn cancelled(jobs: &[(i64, &[i64], Option<&str>)]) -> BTreeMap<i64, Cancelled> {
        jobs.iter()
            .map(|(id, parents, key)| {
                let child = Cancelled {
                    parents: parents.to_vec(),
                    key: key.map(|key| ("q".to_owned(), key.to_owned())),
                };
                (*id, child)
            })
            .collect()
    }

    fn stands(parents: &[(i64, Stands)]) -> HashMap<i64, Stands> {
        parents.iter().copied().collect()
    }

    #[test]
    fn a_child_resumes_waiting_for_its_parents_not_completed() {
        use Stands::*;
        // 1 replayed; 2 waits for 1 and completed 9; 3 for 1 and unfinished 8; 4 for 2.
        let jobs = cancelled(&[(2, &[1, 9], None), (3, &[1, 8], None), (4, &[2], None)]);
        let parents = stands(&[(1, Unfinished), (8, Unfinished), (9, Completed)]);
        let resumed = resumable(&jobs, &parents, &HashSet::new());
        assert_eq!(resumed, BTreeMap::from([(2, 1), (3, 2), (4, 1)]));
    }

    #[test]
    fn a_parent_that_will_not_complete_blocks_a_child_and_its_descendants() {
        use Stands::*;
        // 2 also waits for dead 7; 3 for gone 6; 4 for 2 (blocked); 5 for 1 only.
        let jobs = cancelled(&[
            (2, &[1, 7], None),
            (3, &[1, 6], None),
            (4, &[2], None),
            (5, &[1], None),
        ]);
        let parents = stands(&[(1, Unfinished), (7, Lost)]);
        let resumed = resumable(&jobs, &parents, &HashSet::new());
        assert_eq!(resumed, BTreeMap::from([(5, 1)]));
    }

    #[test]
    fn a_child_waits_for_a_resumed_parent_found_deeper_or_shallower() {
        use Stands::*;
        // 1 → 2 → 3 → 4, and 5 waits for 2 (its cause) and 4: 4 resumes, so 5 does, waiting
        // for both; blocking 3 (by a lost 8) blocks 4, and so 5.
        let jobs = cancelled(&[
            (2, &[1], None),
            (3, &[2], None),
            (4, &[3], None),
            (5, &[2, 4], None),
        ]);
        let parents = stands(&[(1, Unfinished)]);
        let resumed = resumable(&jobs, &parents, &HashSet::new());
        assert_eq!(resumed, BTreeMap::from([(2, 1), (3, 1), (4, 1), (5, 2)]));

        let mut jobs = jobs;
        jobs.get_mut(&3).expect("3").parents = vec![2, 8];
        let parents = stands(&[(1, Unfinished), (8, Lost)]);
        let resumed = resumable(&jobs, &parents, &HashSet::new());
        assert_eq!(resumed, BTreeMap::from([(2, 1)]));
    }

    #[test]
    fn a_held_unique_key_keeps_a_child_cancelled_and_the_first_resumed_takes_a_key() {
        use Stands::*;
        // 2 and 3 share key "a"; 4's "b" is held; 5 waits for 4.
        let jobs = cancelled(&[
            (2, &[1], Some("a")),
            (3, &[1], Some("a")),
            (4, &[1], Some("b")),
            (5, &[4], Some("c")),
        ]);
        let parents = stands(&[(1, Unfinished)]);
        let held = HashSet::from([("q".to_owned(), "b".to_owned())]);
        let resumed = resumable(&jobs, &parents, &held);
        assert_eq!(resumed, BTreeMap::from([(2, 1)]));
    }
}
