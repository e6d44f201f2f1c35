//! Claims: jobs leased together under one id (a streaming take, or a Zaqar claim). Their
//! leases are job rows (`claim_id`); a claim's record is a row of `tenax_claims`.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{ClaimId, JobId};
use tenax_core::store::{
    Claim, ClaimRecord, ClaimStore, ClaimedJob, Decide, StoreError, from_json_bytes,
};

use super::rows::{count_of, id, job_columns, json, time, uncount, unid, untime};
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

#[async_trait]
impl ClaimStore for PostgresStore {
    async fn claim(&self, claim: ClaimId) -> Result<Claim, StoreError> {
        let what = "reading a claim";
        let client = self.client().await?;
        let rows = query(&client, &CLAIMED_JOBS, &[&id(claim.0)])
            .await
            .map_err(fault(what))?;
        let jobs = rows
            .iter()
            .map(|row| ClaimedJob {
                id: JobId(unid(row.get(0))),
                lease_expires_at_ms: row.get::<_, Option<i64>>(1).map_or(0, untime),
                failures: uncount(row.get(2)),
            })
            .collect();
        let records = query(&client, &CLAIM_RECORD, &[&id(claim.0)])
            .await
            .map_err(fault(what))?;
        let record: Option<ClaimRecord> = match records.first() {
            Some(row) => Some(from_json_bytes(
                "claim record",
                row.get::<_, &str>(0).as_bytes(),
            )?),
            None => None,
        };
        Ok(Claim { record, jobs })
    }

    async fn extend_claim(
        &self,
        claim: ClaimId,
        lease_ms: u64,
        keep_until_ms: Option<UnixMs>,
        record: Option<ClaimRecord>,
        now_ms: UnixMs,
    ) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let rows = query(
            &client,
            &EXTEND,
            &[
                &id(claim.0),
                &time(now_ms.saturating_add(lease_ms)),
                &keep_until_ms.map(time),
                &record.as_ref().map(json),
                &record.as_ref().map(|r| time(r.over_at_ms())),
            ],
        )
        .await
        .map_err(fault("extending a claim"))?;
        Ok(count_of(rows.first().map(|r| r.get(0))))
    }

    async fn end_claim(
        &self,
        claim: ClaimId,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let what = "ending a claim";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        execute(&tx, &DELETE_RECORD, &[&id(claim.0)])
            .await
            .map_err(fault(what))?;
        let rows = query(&tx, &LOCK_CLAIMED, &[&id(claim.0)])
            .await
            .map_err(fault(what))?;
        self.decide_each(tx, &rows, decide, now_ms, what).await
    }

    /// The jobs go back to ready as they were: no attempt is counted.
    async fn release_claim(&self, claim: ClaimId) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &RELEASE, &[&id(claim.0)])
            .await
            .map_err(fault("releasing a claim"))?;
        let released = count_of(rows.first().map(|r| r.get(0)));
        if released > 0 {
            self.announce(Wakeup::Ready);
            self.announce(Wakeup::Released);
        }
        Ok(released)
    }
}

statements! {
    CLAIMED_JOBS = "SELECT id, lease_expires_at, failures FROM tenax_jobs
             WHERE status = 2 AND claim_id = $1 ORDER BY id";
    CLAIM_RECORD = "SELECT record FROM tenax_claims WHERE id = $1";
    EXTEND = "WITH extended AS (
                 UPDATE tenax_jobs SET lease_expires_at = $2::bigint,
                     expires_at = CASE WHEN expires_at IS NULL OR $3::bigint IS NULL
                         THEN expires_at ELSE greatest(expires_at, $3::bigint) END
                 WHERE status = 2 AND claim_id = $1::bigint
                 RETURNING id
             ), recorded AS (
                 INSERT INTO tenax_claims (id, record, over_at)
                 SELECT $1::bigint, $4::text, $5::bigint WHERE $4::text IS NOT NULL
                 ON CONFLICT (id) DO UPDATE SET record = excluded.record, over_at = excluded.over_at
             ), forgotten AS (
                 DELETE FROM tenax_claims WHERE id = $1::bigint AND $4::text IS NULL
             )
             SELECT count(*) FROM extended";
    /// The jobs of a claim, locked, read with [`job_columns!`].
    LOCK_CLAIMED = concat!(
        "SELECT ",
        job_columns!(),
        " FROM tenax_jobs WHERE status = 2 AND claim_id = $1
                 ORDER BY id FOR UPDATE"
    );
    DELETE_RECORD = "DELETE FROM tenax_claims WHERE id = $1";
    RELEASE = "WITH released AS (
                 UPDATE tenax_jobs SET status = 1, lease_token = NULL, lease_expires_at = NULL,
                     taken_at = NULL, claim_id = NULL, cancel_requested = false
                 WHERE status = 2 AND claim_id = $1::bigint
                 RETURNING id
             ), forgotten AS (
                 DELETE FROM tenax_claims WHERE id = $1::bigint
             )
             SELECT count(*) FROM released";
}
