//! Batches (`tenax_core::model::batch`): a row each in `tenax_batches`; members name theirs in
//! `batch_id`. Counting is the schema's (`migrations/0014_batches.sql`): a trigger on the
//! deletion of a member from `tenax_jobs` counts it and, when the batch is due, enqueues its
//! callbacks, in the transaction that finished the member, whatever statement did.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Batch, BatchCounts, BatchId, BatchState, Enqueued, JobId, JobTemplate, NewBatch, OnDuplicate,
};
use tenax_core::store::{BatchStore, BatchTarget, FactsSeen, Insert, StoreError};
use tokio_postgres::Row;

use super::inserts::insert_in;
use super::rows::{id, time, unid, untime};
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, RETRIES, fault, is_conflict};

fn state_code(state: BatchState) -> i16 {
    match state {
        BatchState::Open => 0,
        BatchState::Closed => 1,
        BatchState::Finished => 2,
    }
}

fn state_of(code: i16) -> Result<BatchState, StoreError> {
    Ok(match code {
        0 => BatchState::Open,
        1 => BatchState::Closed,
        2 => BatchState::Finished,
        other => return Err(StoreError::Corrupt(format!("batch state {other}"))),
    })
}

fn template_text(template: Option<&JobTemplate>) -> Option<String> {
    template.map(|t| serde_json::to_string(t).unwrap_or_default())
}

fn template_of(text: Option<String>) -> Result<Option<JobTemplate>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(format!("a batch callback: {e}")))
    })
    .transpose()
}

fn count(row: &Row, at: usize) -> u64 {
    u64::try_from(row.get::<_, i64>(at)).unwrap_or(0)
}

/// A batch from a row of [`batch_columns!`].
fn batch_of(row: &Row) -> Result<Batch, StoreError> {
    Ok(Batch {
        id: BatchId(unid(row.get(0))),
        spec: NewBatch {
            description: row.get(1),
            on_complete: template_of(row.get(2))?,
            on_success: template_of(row.get(3))?,
            queues: row.get(4),
        },
        state: state_of(row.get(5))?,
        counts: BatchCounts {
            total: count(row, 6),
            pending: count(row, 7),
            completed: count(row, 8),
            dead: count(row, 9),
            deleted: count(row, 10),
            cancelled: count(row, 15),
        },
        created_at_ms: untime(row.get(11)),
        finished_at_ms: row.get::<_, Option<i64>>(12).map(untime),
        on_complete_job: row.get::<_, Option<i64>>(13).map(|j| JobId(unid(j))),
        on_success_job: row.get::<_, Option<i64>>(14).map(|j| JobId(unid(j))),
    })
}

macro_rules! batch_columns {
    () => {
        "id, description, on_complete, on_success, queues, state, total, pending, completed, \
         dead, deleted, created_at, finished_at, on_complete_job, on_success_job, cancelled"
    };
}

#[async_trait]
impl BatchStore for PostgresStore {
    async fn add_to_batch(
        &self,
        to: BatchTarget,
        jobs: Vec<Insert>,
        close: bool,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<(Batch, Vec<Option<Enqueued>>), StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_add(&to, &jobs, close, seen, now_ms).await {
                Err(error) if is_conflict(&error) && attempt < RETRIES => {}
                Err(StoreError::FactsChanged) => {
                    self.facts.forget();
                    return Err(StoreError::FactsChanged);
                }
                done => return done,
            }
        }
    }

    async fn close_batch(&self, batch: BatchId, now_ms: UnixMs) -> Result<Batch, StoreError> {
        let what = "closing a batch";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(&tx, &CLOSE, &[&id(batch.0)])
            .await
            .map_err(fault(what))?;
        if rows.is_empty() {
            return Err(StoreError::NoBatch(batch));
        }
        execute(&tx, &SETTLE, &[&id(batch.0), &time(now_ms)])
            .await
            .map_err(fault(what))?;
        let rows = query(&tx, &GET, &[&id(batch.0)])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        self.announce(Wakeup::Ready);
        batch_of(rows.first().ok_or(StoreError::NoBatch(batch))?)
    }

    async fn batch(&self, batch: BatchId) -> Result<Option<Batch>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &GET, &[&id(batch.0)])
            .await
            .map_err(fault("reading a batch"))?;
        rows.first().map(batch_of).transpose()
    }

    async fn batches(
        &self,
        after: Option<BatchId>,
        limit: usize,
    ) -> Result<Vec<Batch>, StoreError> {
        let client = self.client().await?;
        let after = after.map_or(0, |a| id(a.0));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = query(&client, &LIST, &[&after, &limit])
            .await
            .map_err(fault("listing batches"))?;
        rows.iter().map(batch_of).collect()
    }

    async fn delete_batch(&self, batch: BatchId) -> Result<bool, StoreError> {
        let what = "deleting a batch";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let deleted = execute(&tx, &DELETE, &[&id(batch.0)])
            .await
            .map_err(fault(what))?;
        // Its jobs are members of nothing from then on: the trigger would find no batch.
        tx.commit().await.map_err(fault(what))?;
        Ok(deleted > 0)
    }

    async fn import_batch(&self, batch: Batch) -> Result<(), StoreError> {
        let what = "importing a batch";
        let client = self.client().await?;
        let inserted = execute(&client, &IMPORT, &params(&batch).as_refs())
            .await
            .map_err(fault(what))?;
        if inserted != 1 {
            return Err(StoreError::Refused(format!(
                "batch {} cannot be imported: its id is taken",
                batch.id
            )));
        }
        execute(&client, &RAISE_IDS, &[&id(batch.id.0)])
            .await
            .map_err(fault(what))?;
        Ok(())
    }
}

/// A batch's columns as parameters, in [`batch_columns!`]'s order.
struct Params {
    id: i64,
    description: Option<String>,
    on_complete: Option<String>,
    on_success: Option<String>,
    queues: Vec<String>,
    state: i16,
    counts: [i64; 6],
    created_at: i64,
    finished_at: Option<i64>,
    on_complete_job: Option<i64>,
    on_success_job: Option<i64>,
}

impl Params {
    fn as_refs(&self) -> Vec<&(dyn tokio_postgres::types::ToSql + Sync)> {
        vec![
            &self.id,
            &self.description,
            &self.on_complete,
            &self.on_success,
            &self.queues,
            &self.state,
            &self.counts[0],
            &self.counts[1],
            &self.counts[2],
            &self.counts[3],
            &self.counts[4],
            &self.created_at,
            &self.finished_at,
            &self.on_complete_job,
            &self.on_success_job,
            &self.counts[5],
        ]
    }
}

fn params(batch: &Batch) -> Params {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Params {
        id: id(batch.id.0),
        description: batch.spec.description.clone(),
        on_complete: template_text(batch.spec.on_complete.as_ref()),
        on_success: template_text(batch.spec.on_success.as_ref()),
        queues: batch.spec.queues.clone(),
        state: state_code(batch.state),
        counts: [
            n(batch.counts.total),
            n(batch.counts.pending),
            n(batch.counts.completed),
            n(batch.counts.dead),
            n(batch.counts.deleted),
            n(batch.counts.cancelled),
        ],
        created_at: time(batch.created_at_ms),
        finished_at: batch.finished_at_ms.map(time),
        on_complete_job: batch.on_complete_job.map(|j| id(j.0)),
        on_success_job: batch.on_success_job.map(|j| id(j.0)),
    }
}

impl PostgresStore {
    async fn try_add(
        &self,
        to: &BatchTarget,
        jobs: &[Insert],
        close: bool,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<(Batch, Vec<Option<Enqueued>>), StoreError> {
        let what = "adding jobs to a batch";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let batch = match to {
            BatchTarget::New(spec) => {
                let rows = query(&tx, &NEXT_ID, &[]).await.map_err(fault(what))?;
                let new = BatchId(unid(rows.first().map_or(1, |r| r.get(0))));
                let batch = Batch::new(new, (**spec).clone(), now_ms);
                execute(&tx, &IMPORT, &params(&batch).as_refs())
                    .await
                    .map_err(fault(what))?;
                new
            }
            BatchTarget::Existing(batch) => {
                // Locks the row: a close or another add waits for this one.
                let rows = query(&tx, &LOCK, &[&id(batch.0)])
                    .await
                    .map_err(fault(what))?;
                let row = rows.first().ok_or(StoreError::NoBatch(*batch))?;
                if state_of(row.get(0))? != BatchState::Open {
                    return Err(StoreError::BatchClosed(*batch));
                }
                *batch
            }
        };
        let (results, made) = insert_in(&tx, jobs, OnDuplicate::Refuse, seen, now_ms).await?;
        let mut members = Vec::new();
        let mut queues = Vec::new();
        for (insert, result) in jobs.iter().zip(&results) {
            if let (None, Some(enqueued)) = (insert.parent, result) {
                if enqueued.created {
                    members.push(id(enqueued.id.0));
                    queues.push(insert.job.queue.clone());
                }
            }
        }
        let added = i64::try_from(members.len()).unwrap_or(i64::MAX);
        execute(&tx, &SET_MEMBERS, &[&id(batch.0), &members])
            .await
            .map_err(fault(what))?;
        execute(&tx, &ADD, &[&id(batch.0), &added, &queues, &close])
            .await
            .map_err(fault(what))?;
        if close {
            execute(&tx, &SETTLE, &[&id(batch.0), &time(now_ms)])
                .await
                .map_err(fault(what))?;
        }
        let rows = query(&tx, &GET, &[&id(batch.0)])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_made(made);
        if close {
            self.announce(Wakeup::Ready);
        }
        let batch = batch_of(rows.first().ok_or(StoreError::NoBatch(batch))?)?;
        Ok((batch, results))
    }
}

statements! {
    NEXT_ID = "SELECT nextval('tenax_batch_ids')";
    RAISE_IDS = "SELECT setval('tenax_batch_ids', greatest($1::bigint,
                    (SELECT last_value FROM tenax_batch_ids)))";
    IMPORT = concat!(
        "INSERT INTO tenax_batches (",
        batch_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
         ON CONFLICT (id) DO NOTHING"
    );
    LOCK = "SELECT state FROM tenax_batches WHERE id = $1 FOR UPDATE";
    SET_MEMBERS = "UPDATE tenax_jobs SET batch_id = $1 WHERE id = ANY($2::bigint[])";
    ADD = "UPDATE tenax_batches SET total = total + $2, pending = pending + $2,
               queues = ARRAY(SELECT DISTINCT q FROM unnest(queues || $3::text[]) AS q ORDER BY q),
               state = CASE WHEN $4::bool THEN 1 ELSE state END
           WHERE id = $1";
    CLOSE = "UPDATE tenax_batches SET state = CASE WHEN state = 0 THEN 1 ELSE state END
             WHERE id = $1 RETURNING state";
    SETTLE = "SELECT tenax_batch_settle($1::bigint, $2::bigint)";
    GET = concat!("SELECT ", batch_columns!(), " FROM tenax_batches WHERE id = $1");
    LIST = concat!(
        "SELECT ",
        batch_columns!(),
        " FROM tenax_batches WHERE id > $1 ORDER BY id LIMIT $2"
    );
    DELETE = "DELETE FROM tenax_batches WHERE id = $1";
}
