//! Background transitions, run by the leading server: scheduled → ready, expired leases by
//! the decision, job expiry, and retention in short batches.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::store::{Decide, JobUpkeep, StoreError};

use super::dependents::{End, settle};
use super::rows::{count_of, job_columns, limit, time, untime};
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

impl PostgresStore {
    /// Deletes the expired jobs `ids`, which have children (left by [`EXPIRE_JOBS`]), in a
    /// transaction that settles their children; returns how many were unfinished, finished.
    async fn expire_parents(
        &self,
        ids: &[i64],
        now_ms: UnixMs,
    ) -> Result<(usize, usize), StoreError> {
        let what = "deleting expired jobs";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(&tx, &EXPIRE_PARENTS, &[&ids, &time(now_ms)])
            .await
            .map_err(fault(what))?;
        let (mut live, mut finished) = (0, 0);
        let mut parents = Vec::with_capacity(rows.len());
        for row in &rows {
            if row.get::<_, bool>(1) {
                live += 1;
                parents.push((row.get(0), End::Deleted));
            } else {
                finished += 1;
                parents.push((row.get(0), End::Forgotten));
            }
        }
        let settled = settle(&tx, &parents, now_ms).await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        Ok((live, finished))
    }
}

#[async_trait]
impl JobUpkeep for PostgresStore {
    async fn promote_due(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let promoted = execute(&client, &PROMOTE_DUE, &[&time(now_ms), &limit(max)])
            .await
            .map_err(fault("promoting due jobs"))?;
        if promoted > 0 {
            self.announce(Wakeup::Ready);
        }
        Ok(usize::try_from(promoted).unwrap_or(usize::MAX))
    }

    async fn expire_leases(
        &self,
        now_ms: UnixMs,
        max: usize,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let what = "expiring leases";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        execute(&tx, &FORGET_CLAIMS, &[&time(now_ms)])
            .await
            .map_err(fault(what))?;
        let rows = query(&tx, &LOCK_EXPIRED, &[&time(now_ms), &limit(max)])
            .await
            .map_err(fault(what))?;
        self.decide_each(tx, &rows, decide, now_ms, what).await
    }

    /// `FOR UPDATE` without `SKIP LOCKED`: a row another transaction holds (the leader's
    /// maintenance ending the same lease) is waited for, then looked at again as that one
    /// left it, so a lease already ended there is not ended twice, and none is missed. Rows
    /// are locked in id order, so two of these never wait for each other in a circle.
    async fn expire_leases_of(
        &self,
        queue: &str,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let what = "expiring the leases of a queue";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(&tx, &LOCK_EXPIRED_OF, &[&queue, &time(now_ms)])
            .await
            .map_err(fault(what))?;
        self.decide_each(tx, &rows, decide, now_ms, what).await
    }

    async fn expire_jobs(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &EXPIRE_JOBS, &[&time(now_ms), &limit(max)])
            .await
            .map_err(fault("deleting expired jobs"))?;
        let (mut live, mut finished) = rows
            .first()
            .map_or((0, 0), |r| (count_of(r.get(0)), count_of(r.get(1))));
        let parents: Vec<i64> = rows.first().map_or_else(Vec::new, |r| r.get(2));
        if !parents.is_empty() {
            let (more_live, more_finished) = self.expire_parents(&parents, now_ms).await?;
            live += more_live;
            finished += more_finished;
        }
        if live > 0 {
            // A deleted job may have been held by a stream: it has room again.
            self.announce(Wakeup::Released);
        }
        Ok(live + finished)
    }

    async fn purge_finished(
        &self,
        completed_before: UnixMs,
        dead_before: UnixMs,
        max: usize,
    ) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let rows = query(
            &client,
            &PURGE,
            &[&time(completed_before), &time(dead_before), &limit(max)],
        )
        .await
        .map_err(fault("purging finished jobs"))?;
        drop(client);
        let mut purged = rows.first().map_or(0, |r| count_of(r.get(0)));
        let parents: Vec<i64> = rows.first().map_or_else(Vec::new, |r| r.get(1));
        if !parents.is_empty() {
            let what = "purging finished jobs";
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(fault(what))?;
            let gone: Vec<(i64, End)> = query(&tx, &PURGE_PARENTS, &[&parents])
                .await
                .map_err(fault(what))?
                .iter()
                .map(|r| (r.get(0), End::Forgotten))
                .collect();
            settle(&tx, &gone, self.clock.now_ms()).await?;
            tx.commit().await.map_err(fault(what))?;
            purged += gone.len();
        }
        Ok(purged)
    }

    async fn next_wakeup(&self) -> Result<Option<UnixMs>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &NEXT_WAKEUP, &[])
            .await
            .map_err(fault("finding the next due time"))?;
        Ok(rows
            .first()
            .and_then(|r| r.get::<_, Option<i64>>(0))
            .map(untime))
    }
}

statements! {
    PROMOTE_DUE = "UPDATE tenax_jobs SET status = 1 WHERE id IN (
                 SELECT id FROM tenax_jobs WHERE status = 0 AND run_at <= $1
                 ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED)";
    FORGET_CLAIMS = "DELETE FROM tenax_claims WHERE over_at <= $1";
    /// Leases ended by now, the oldest first, locked unless another transaction holds them.
    LOCK_EXPIRED = concat!(
        "SELECT ",
        job_columns!(),
        " FROM tenax_jobs
                 WHERE status = 2 AND lease_expires_at <= $1
                 ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED"
    );
    /// A queue's leases ended by now, locked in id order (waiting for other holders).
    LOCK_EXPIRED_OF = concat!(
        "SELECT ",
        job_columns!(),
        " FROM tenax_jobs
                 WHERE queue = $1 AND status = 2 AND lease_expires_at <= $2
                 ORDER BY id FOR UPDATE"
    );
    /// Deletes the jobs expired by `$1`, at most `$2`, but those with children, whose ids it
    /// answers (for [`PostgresStore::expire_parents`]) after the counts of each table's. A job
    /// whose flag an enqueue set meanwhile is left by the delete and not named: the next
    /// round names it.
    EXPIRE_JOBS = "WITH doomed AS (
                 SELECT id, has_children FROM (
                     SELECT id, expires_at, has_children FROM tenax_jobs WHERE expires_at <= $1
                     UNION ALL
                     SELECT id, expires_at, has_children FROM tenax_finished
                     WHERE expires_at <= $1
                 ) AS due ORDER BY expires_at LIMIT $2
             ), live AS (
                 DELETE FROM tenax_jobs WHERE id IN (SELECT id FROM doomed) AND NOT has_children
                 RETURNING 1
             ), finished AS (
                 DELETE FROM tenax_finished
                 WHERE id IN (SELECT id FROM doomed) AND NOT has_children RETURNING 1
             )
             SELECT (SELECT count(*) FROM live), (SELECT count(*) FROM finished),
                 ARRAY(SELECT id FROM doomed WHERE has_children)";
    /// Deletes the jobs `$1` expired by `$2`: (id, whether it was unfinished) of each.
    EXPIRE_PARENTS = "WITH live AS (
                 DELETE FROM tenax_jobs WHERE id = ANY($1::bigint[]) AND expires_at <= $2
                 RETURNING id
             ), finished AS (
                 DELETE FROM tenax_finished WHERE id = ANY($1::bigint[]) AND expires_at <= $2
                 RETURNING id
             )
             SELECT id, true FROM live UNION ALL SELECT id, false FROM finished";
    /// Deletes finished jobs past their retention, at most `$3`, but those with children
    /// (read under the row's lock), whose ids it answers after the count.
    PURGE = "WITH picked AS (
                 SELECT id, has_children FROM tenax_finished
                 WHERE finished_at <= greatest($1::bigint, $2::bigint)
                   AND ((status = 3 AND finished_at <= $1::bigint)
                     OR (status IN (4, 5) AND finished_at <= $2::bigint))
                 LIMIT $3 FOR UPDATE SKIP LOCKED
             ), gone AS (
                 DELETE FROM tenax_finished
                 WHERE id IN (SELECT id FROM picked WHERE NOT has_children) RETURNING 1
             )
             SELECT (SELECT count(*) FROM gone), ARRAY(SELECT id FROM picked WHERE has_children)";
    /// Deletes the finished jobs `$1` (picked by [`PURGE`]).
    PURGE_PARENTS = "DELETE FROM tenax_finished WHERE id = ANY($1::bigint[]) RETURNING id";
    NEXT_WAKEUP = "SELECT least(
                 (SELECT min(run_at) FROM tenax_jobs WHERE status = 0),
                 (SELECT min(lease_expires_at) FROM tenax_jobs WHERE status = 2),
                 (SELECT min(expires_at) FROM tenax_jobs WHERE expires_at IS NOT NULL),
                 (SELECT min(expires_at) FROM tenax_finished WHERE expires_at IS NOT NULL),
                 (SELECT min(next_tick) FROM tenax_schedules WHERE NOT paused))";
}
