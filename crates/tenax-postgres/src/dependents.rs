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

use std::collections::BTreeMap;

use deadpool_postgres::GenericClient;
use tenax_core::clock::UnixMs;
use tenax_core::model::dependency::{ChildMove, ParentEnd, child_move, lost_parent_reason};
use tenax_core::model::{JobId, Status};
use tenax_core::store::StoreError;

use super::fault;
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

    /// The edges of parents `$1`, which are gone.
    FORGET_EDGES = "DELETE FROM tenax_edges WHERE parent = ANY($1::bigint[])";
}
