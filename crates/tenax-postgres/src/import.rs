//! Records stored as they are, with their ids (`tenax copy` into a database): each job in the
//! table its status puts it in (the finished ones in `tenax_finished`), one transaction per call.
//!
//! Invariant: ids stay unique and never reused. A job's id must be past every id the sequence
//! has handed out, and the sequence moves past it in the same transaction; a subscription's or
//! token's id must be free, and its sequence moves past it.

use async_trait::async_trait;
use futures_util::future::try_join_all;
use tenax_core::auth::TokenRecord;
use tenax_core::model::{JobId, Status, Subscription};
use tenax_core::store::{ImportedJob, StoreError, StoreImport};

use super::rows::{
    count, count_of, id, json, on_parent_dead_code, status_code, stored_after, stored_subscription,
    table_columns, time, trigger_code, unid,
};
use super::statements::statements;
use super::subscriptions::INSERT as INSERT_SUBSCRIPTION;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

#[async_trait]
impl StoreImport for PostgresStore {
    async fn import_jobs(&self, jobs: Vec<ImportedJob>) -> Result<(), StoreError> {
        let what = "importing jobs";
        let Some(last) = jobs.last().map(|j| j.job.id) else {
            return Ok(());
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let next = query(&tx, &NEXT_JOB_ID, &[]).await.map_err(fault(what))?;
        let mut floor = JobId(unid(next.first().map_or(1, |r| r.get(0))));
        for imported in &jobs {
            let id = imported.job.id;
            if id < floor {
                return Err(StoreError::Refused(format!(
                    "job {id} cannot be imported: its id is not past every id the database \
                     holds or has assigned (the next is {floor})"
                )));
            }
            if imported.job.state.status == Status::InFlight {
                return Err(StoreError::Refused(format!(
                    "job {id} cannot be imported in flight: import it at rest \
                     (ImportedJob::at_rest)"
                )));
            }
            floor = JobId(id.0 + 1);
        }
        let rows: Vec<Row> = jobs.iter().map(Row::of).collect();
        let live = tx
            .prepare_cached(INSERT_LIVE.text())
            .await
            .map_err(fault(what))?;
        let finished = tx
            .prepare_cached(INSERT_FINISHED.text())
            .await
            .map_err(fault(what))?;
        let params: Vec<_> = rows.iter().map(Row::params).collect();
        // Sent together: the connection pipelines them.
        try_join_all(rows.iter().zip(&params).map(|(row, params)| {
            let statement = if row.finished { &finished } else { &live };
            tx.execute(statement, &params[..])
        }))
        .await
        .map_err(fault(what))?;
        // Jobs that wait or waited for others: their edges, their parents' flags, and the
        // counts of the waiting ones, from the parents as stored now.
        let children: Vec<i64> = rows
            .iter()
            .filter(|row| row.after_ids.is_some())
            .map(|row| row.id)
            .collect();
        if !children.is_empty() {
            for sql in [LINK_IMPORTED, COUNT_IMPORTED] {
                query(&tx, &sql, &[&children]).await.map_err(fault(what))?;
            }
        }
        query(&tx, &SET_NEXT_JOB_ID, &[&id(last.0)])
            .await
            .map_err(fault(what))?;
        // Members name their batch, which the column lists of the inserts leave out.
        let (members, batches): (Vec<i64>, Vec<i64>) = jobs
            .iter()
            .filter_map(|j| Some((id(j.job.id.0), id(j.job.spec.batch?.0))))
            .unzip();
        if !members.is_empty() {
            execute(&tx, &SET_BATCHES, &[&members, &batches])
                .await
                .map_err(fault(what))?;
        }
        tx.commit().await.map_err(fault(what))?;
        self.announce(Wakeup::Ready);
        Ok(())
    }

    async fn import_subscription(&self, subscription: Subscription) -> Result<(), StoreError> {
        let what = "importing a subscription";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let stored = stored_subscription(&subscription, &self.keys)?;
        let inserted = query(
            &tx,
            &INSERT_SUBSCRIPTION,
            &[
                &id(subscription.id.0),
                &subscription.queue,
                &subscription.enabled,
                &subscription.unique_endpoint(),
                &stored,
            ],
        )
        .await
        .map_err(fault(what))?;
        if count_of(inserted.first().map(|r| r.get(0))) != 1 {
            return Err(StoreError::Refused(format!(
                "subscription {} cannot be imported: its id, or its endpoint in queue {:?}, is \
                 taken",
                subscription.id, subscription.queue
            )));
        }
        query(&tx, &SET_NEXT_SUBSCRIPTION_ID, &[&id(subscription.id.0)])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        self.facts.forget();
        self.announce(Wakeup::Subscriptions);
        Ok(())
    }

    async fn import_token(&self, record: TokenRecord) -> Result<(), StoreError> {
        let what = "importing a token";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let inserted = query(&tx, &INSERT_TOKEN, &[&id(record.id), &json(&record)])
            .await
            .map_err(fault(what))?;
        if inserted.is_empty() {
            return Err(StoreError::Refused(format!(
                "token {} cannot be imported: the id is taken",
                record.id
            )));
        }
        query(&tx, &SET_NEXT_TOKEN_ID, &[&id(record.id)])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        self.announce(Wakeup::Tokens);
        Ok(())
    }
}

/// A job's row, as [`table_columns!`] orders it.
struct Row {
    finished: bool,
    id: i64,
    queue: String,
    kind: String,
    payload: String,
    priority: i32,
    unique_key: Option<String>,
    created_at: i64,
    expires_at: Option<i64>,
    origin: Option<String>,
    parent: Option<i64>,
    traceparent: Option<String>,
    policy: Option<String>,
    status: i16,
    run_at: i64,
    failures: i32,
    first_failure_at: Option<i64>,
    last_delay: Option<i64>,
    finished_at: Option<i64>,
    dead_reason: Option<String>,
    errors: Vec<String>,
    attempts: Vec<String>,
    trigger: Option<i16>,
    payload_sealed: bool,
    result: Option<String>,
    after_ids: Option<Vec<i64>>,
    on_parent_dead: i16,
}

impl Row {
    fn of(imported: &ImportedJob) -> Self {
        let (job, spec, state) = (&imported.job, &imported.job.spec, &imported.job.state);
        Self {
            finished: state.status.is_finished(),
            id: id(job.id.0),
            queue: spec.queue.clone(),
            kind: spec.kind.clone(),
            payload: spec.payload.get().to_owned(),
            priority: spec.priority,
            unique_key: spec.unique_key.clone(),
            created_at: time(spec.created_at_ms),
            expires_at: spec.expires_at_ms.map(time),
            origin: spec.origin.clone(),
            parent: spec.parent.map(|p| id(p.0)),
            traceparent: spec.traceparent.clone(),
            policy: spec.policy.as_ref().map(json),
            status: status_code(state.status),
            run_at: time(state.run_at_ms),
            failures: count(state.failures),
            first_failure_at: state.first_failure_at_ms.map(time),
            last_delay: state.last_delay_ms.map(time),
            finished_at: state.finished_at_ms.map(time),
            dead_reason: state.dead_reason.clone(),
            errors: job.errors.iter().map(json).collect(),
            attempts: imported.attempts.iter().map(json).collect(),
            trigger: trigger_code(state.trigger),
            payload_sealed: spec.payload_sealed,
            result: state.result.as_ref().map(|r| r.get().to_owned()),
            after_ids: stored_after(&spec.after),
            on_parent_dead: on_parent_dead_code(spec.on_parent_dead),
        }
    }

    fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 26] {
        [
            &self.id,
            &self.queue,
            &self.kind,
            &self.payload,
            &self.priority,
            &self.unique_key,
            &self.created_at,
            &self.expires_at,
            &self.origin,
            &self.parent,
            &self.traceparent,
            &self.policy,
            &self.status,
            &self.run_at,
            &self.failures,
            &self.first_failure_at,
            &self.last_delay,
            &self.finished_at,
            &self.dead_reason,
            &self.errors,
            &self.attempts,
            &self.trigger,
            &self.payload_sealed,
            &self.result,
            &self.after_ids,
            &self.on_parent_dead,
        ]
    }
}

/// The values of a row, without its lease (`lease_token` … `claim_id`: a job is imported at
/// rest), in [`table_columns!`]'s order; its `pending` and `has_children` are written by
/// [`LINK_IMPORTED`].
macro_rules! import_values {
    () => {
        "$1::bigint, $2::text, $3::text, $4::text, $5::integer, $6::text, $7::bigint, \
         $8::bigint, $9::text, $10::bigint, $11::text, $12::text, $13::smallint, $14::bigint, \
         $15::integer, $16::bigint, $17::bigint, $18::bigint, $19::text, $20::text[], \
         $21::text[], NULL, NULL, NULL, NULL, $22::smallint, $23::boolean, $24::text, \
         $25::bigint[], $26::smallint, NULL, false"
    };
}

statements! {
    SET_BATCHES = "WITH m AS (SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS m(id, batch)),
         live AS (UPDATE tenax_jobs j SET batch_id = m.batch FROM m WHERE j.id = m.id)
         UPDATE tenax_finished f SET batch_id = m.batch FROM m WHERE f.id = m.id";
    /// The next id the sequence hands out.
    NEXT_JOB_ID = "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
                   FROM tenax_job_ids";
    SET_NEXT_JOB_ID = "SELECT setval('tenax_job_ids', $1::bigint)";
    INSERT_LIVE = concat!(
        "INSERT INTO tenax_jobs (", table_columns!(), ") VALUES (", import_values!(), ")"
    );
    INSERT_FINISHED = concat!(
        "INSERT INTO tenax_finished (", table_columns!(), ") VALUES (", import_values!(), ")"
    );
    /// Links the imported jobs `$1` to their stored parents as an enqueue would have
    /// ([`super::dependents`]): an edge from each stored parent (imported before, since its id
    /// is smaller), its flag, and a waiting job's count of its unfinished parents. A waiting
    /// job none of whose parents is unfinished any more (they were not copied) is ready.
    LINK_IMPORTED = "WITH links AS (
             SELECT DISTINCT p.parent, c.id AS child
             FROM tenax_all_jobs c CROSS JOIN LATERAL unnest(c.after_ids) AS p(parent)
             WHERE c.id = ANY($1::bigint[])
         ), edges AS (
             INSERT INTO tenax_edges (parent, child)
             SELECT l.parent, l.child FROM links l
             WHERE EXISTS (SELECT 1 FROM tenax_all_jobs j WHERE j.id = l.parent)
             ON CONFLICT DO NOTHING
         ), live_flags AS (
             UPDATE tenax_jobs SET has_children = true
             WHERE id IN (SELECT parent FROM links) AND NOT has_children
         )
         UPDATE tenax_finished SET has_children = true
         WHERE id IN (SELECT parent FROM links) AND NOT has_children";
    /// The counts of the waiting jobs among `$1`, after [`LINK_IMPORTED`] (a statement of
    /// its own: a job may be a parent and a waiting child, and one statement updates a row
    /// once).
    COUNT_IMPORTED = "WITH counted AS (
             SELECT c.id AS child, count(DISTINCT j.id)::integer AS pending
             FROM tenax_jobs c CROSS JOIN LATERAL unnest(c.after_ids) AS p(parent)
             LEFT JOIN tenax_jobs j ON j.id = p.parent
             WHERE c.id = ANY($1::bigint[]) AND c.status = 6
             GROUP BY c.id
         )
         UPDATE tenax_jobs c SET pending = nullif(counted.pending, 0),
             status = CASE WHEN counted.pending = 0 THEN 1 ELSE c.status END
         FROM counted WHERE c.id = counted.child";
    /// Raises the sequence to `$1` (never lowers it), so that the next id is past it.
    SET_NEXT_SUBSCRIPTION_ID = "SELECT setval('tenax_subscription_ids',
        greatest($1::bigint, (SELECT last_value FROM tenax_subscription_ids)))";
    INSERT_TOKEN = "INSERT INTO tenax_tokens (id, body) VALUES ($1, $2)
                    ON CONFLICT DO NOTHING RETURNING id";
    SET_NEXT_TOKEN_ID = "SELECT setval('tenax_token_ids',
        greatest($1::bigint, (SELECT last_value FROM tenax_token_ids)))";
}
