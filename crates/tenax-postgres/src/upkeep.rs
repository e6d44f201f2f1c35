//! Background transitions, run by the leading server: scheduled → ready, expired leases by
//! the decision, job expiry, and retention in short batches.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::store::{Decide, JobUpkeep, StoreError};

use super::rows::{count_of, job_columns, limit, time, untime};
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

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
        let (live, finished) = rows
            .first()
            .map_or((0, 0), |r| (count_of(r.get(0)), count_of(r.get(1))));
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
        let purged = execute(
            &client,
            &PURGE,
            &[&time(completed_before), &time(dead_before), &limit(max)],
        )
        .await
        .map_err(fault("purging finished jobs"))?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
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
    EXPIRE_JOBS = "WITH doomed AS (
                 SELECT id FROM (
                     SELECT id, expires_at FROM tenax_jobs WHERE expires_at <= $1
                     UNION ALL
                     SELECT id, expires_at FROM tenax_finished WHERE expires_at <= $1
                 ) AS due ORDER BY expires_at LIMIT $2
             ), live AS (
                 DELETE FROM tenax_jobs WHERE id IN (SELECT id FROM doomed) RETURNING 1
             ), finished AS (
                 DELETE FROM tenax_finished WHERE id IN (SELECT id FROM doomed) RETURNING 1
             )
             SELECT (SELECT count(*) FROM live), (SELECT count(*) FROM finished)";
    PURGE = "DELETE FROM tenax_finished WHERE id IN (
                 SELECT id FROM tenax_finished
                 WHERE finished_at <= greatest($1::bigint, $2::bigint)
                   AND ((status = 3 AND finished_at <= $1::bigint)
                     OR (status IN (4, 5) AND finished_at <= $2::bigint))
                 LIMIT $3 FOR UPDATE SKIP LOCKED)";
    NEXT_WAKEUP = "SELECT least(
                 (SELECT min(run_at) FROM tenax_jobs WHERE status = 0),
                 (SELECT min(lease_expires_at) FROM tenax_jobs WHERE status = 2),
                 (SELECT min(expires_at) FROM tenax_jobs WHERE expires_at IS NOT NULL),
                 (SELECT min(expires_at) FROM tenax_finished WHERE expires_at IS NOT NULL),
                 (SELECT min(next_tick) FROM tenax_schedules WHERE NOT paused))";
}
