//! Cancellation (docs/workflows.md#cancellation): a scheduled or ready job becomes cancelled at
//! once; a job in flight has its lease marked, on its row (`cancel_requested`), so that every
//! node sees the mark: on a heartbeat, and when the lease ends (a failure or an expiry of a
//! marked lease ends the job cancelled, `tenax_core::engine::decide_cancelled`).
//!
//! [`into_cancelled`] is the one place where a job of this store becomes cancelled, whether an
//! operator cancelled it or its marked lease ended (`super::transitions::write_transition`
//! sends every cancelled transition here), in the transaction that makes it: work that must
//! follow a cancellation in that same transaction (dependent jobs, batch counters) hooks in
//! there.

use deadpool_postgres::GenericClient;
use tenax_core::clock::UnixMs;
use tenax_core::model::{Attempt, Cancelled, JobId, Selection, Status};
use tenax_core::store::{StoreError, Transition};

use super::dependents::Settled;
use super::filter::{Query, selection_shapes};
use super::rows::{job_columns, state_of, status_of, unid};
use super::statements::{prefixes, statements};
use super::transitions::{execute, query, write_state};
use super::wakeups::Wakeup;
use super::{PostgresStore, RETRIES, fault, is_conflict};

/// Locked job `job` becomes cancelled as `transition` says (its status
/// [`Status::Cancelled`]): moved to `tenax_finished`, its lease (and mark) gone, `attempt`
/// logged with it. Runs in the caller's transaction.
pub async fn into_cancelled<C: GenericClient>(
    client: &C,
    job: JobId,
    transition: &Transition,
    attempt: Option<&Attempt>,
    now_ms: UnixMs,
) -> Result<Settled, StoreError> {
    debug_assert_eq!(transition.state.status, Status::Cancelled);
    // A cancelled job will not complete: its waiting children are settled with it.
    write_state(client, job, transition, attempt, now_ms).await
}

impl PostgresStore {
    /// See [`tenax_core::store::JobCuration::cancel_jobs`].
    pub(super) async fn cancel_selected(
        &self,
        selection: &Selection,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<Cancelled, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_cancel(selection, reason, now_ms).await {
                Err(error) if is_conflict(&error) && attempt < RETRIES => continue,
                done => return done,
            }
        }
    }

    async fn try_cancel(
        &self,
        selection: &Selection,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<Cancelled, StoreError> {
        let what = "cancelling jobs";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let statement = cancel_selected(selection);
        let rows = query(&tx, &statement, &statement.params())
            .await
            .map_err(fault(what))?;
        let mut done = Cancelled::default();
        let mut settled = Settled::default();
        for row in &rows {
            let job = JobId(unid(row.get(0)));
            match status_of(row.get(12))? {
                Status::Scheduled | Status::Ready | Status::Waiting => {
                    let transition = Transition {
                        state: state_of(row)?.cancelled(now_ms, reason),
                        error: None,
                        moved_to: None,
                    };
                    settled.add(into_cancelled(&tx, job, &transition, None, now_ms).await?);
                    done.cancelled.push(job);
                }
                Status::InFlight => done.marked.push(job),
                Status::Completed | Status::Dead | Status::Cancelled => {}
            }
        }
        if !done.marked.is_empty() {
            let marked: Vec<i64> = done.marked.iter().map(|j| super::rows::id(j.0)).collect();
            execute(&tx, &MARK, &[&marked]).await.map_err(fault(what))?;
        }
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        if !done.cancelled.is_empty() {
            // A wait for a job's end looks again: a cancelled job has finished.
            self.announce(Wakeup::Released);
        }
        Ok(done)
    }
}

/// The unfinished jobs of `selection`, locked, in id order, read with [`job_columns!`].
fn cancel_selected(selection: &Selection) -> Query {
    let mut statement = Query::new(CANCEL_SELECTED);
    statement.selection(selection);
    statement.push(" ORDER BY id FOR UPDATE");
    statement
}

/// Every statement [`cancel_selected`] builds: one per shape of selection
/// ([`selection_shapes`]).
pub(super) fn shapes() -> Vec<(String, Query)> {
    selection_shapes()
        .into_iter()
        .map(|(label, selection)| (label, cancel_selected(&selection)))
        .collect()
}

prefixes! {
    CANCEL_SELECTED = concat!(
        "SELECT ",
        job_columns!(),
        " FROM tenax_jobs WHERE status IN (0, 1, 2, 6)"
    );
}

statements! {
    /// Marks leases: every later decision on them sees the mark, on every node.
    MARK = "UPDATE tenax_jobs SET cancel_requested = true WHERE id = ANY($1) AND status = 2";
}
