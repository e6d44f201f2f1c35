//! Take, heartbeat, complete, fail, finish a delivery, pop: the worker's side of a job. Leases
//! are rows: any server can act on a lease another one handed out.

use std::collections::HashMap;

use async_trait::async_trait;
use serde_json::value::RawValue;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Ack, Attempt, AttemptResult, Job, JobId, JobResult, LeaseToken, Status, TakenJob,
};
use tenax_core::store::{
    Decide, Extended, Finished, JobLeases, LeaseFacts, LimitHold, StoreError, TakeRequest, Taken,
    Transition,
};
use tokio_postgres::Row;

use super::dependents::{End, Ended, Settled, settle};
use super::rows::{id, job_columns, job_of, json, limit, time, unid, untime};
use super::statements::statements;
use super::transitions::{Context, check_ack, complete, decide_and_apply, query, status_of_job};
use super::wakeups::Wakeup;
use super::{PostgresStore, RETRIES, fault, is_conflict, limits};

/// The lease tokens of a take of at most `max` jobs, the `n`th picked job gets the `n`th:
/// each drawn on its own ([`LeaseToken::random`]), so that no token tells another.
pub(super) fn lease_tokens(max: usize) -> Vec<i64> {
    (0..max.max(1))
        .map(|_| id(LeaseToken::random().0))
        .collect()
}

pub(super) fn taken_of(row: &Row, lease_expires_at_ms: UnixMs) -> Result<TakenJob, StoreError> {
    let payload = RawValue::from_string(row.get(3))
        .map_err(|e| StoreError::Corrupt(format!("job payload: {e}")))?;
    Ok(TakenJob {
        id: JobId(unid(row.get(0))),
        queue: row.get(1),
        kind: row.get(2),
        payload,
        payload_sealed: row.get::<_, Option<bool>>(13).unwrap_or(false),
        priority: row.get(4),
        attempt: super::rows::uncount(row.get(5)).saturating_add(1),
        lease_token: LeaseToken(unid(row.get(6))),
        lease_expires_at_ms,
        created_at_ms: untime(row.get(7)),
        expires_at_ms: row.get::<_, Option<i64>>(8).map(untime),
        parent: row.get::<_, Option<i64>>(9).map(|p| JobId(unid(p))),
        traceparent: row.get(10),
        ready_at_ms: untime(row.get(11)),
        trigger: super::rows::trigger_of(row.get(12)),
        after: super::rows::after_of(row.get(14)),
        parents: Vec::new(),
    })
}

#[async_trait]
impl JobLeases for PostgresStore {
    async fn take_jobs(
        &self,
        request: &TakeRequest<'_>,
        now_ms: UnixMs,
    ) -> Result<Taken, StoreError> {
        let client = self.client().await?;
        let caps = vec![limit(request.max); request.queues.len()];
        let rows = take(&client, request, true, &caps, now_ms).await?;
        // A limited queue among them: nothing was taken, and the take is counted instead.
        if rows
            .iter()
            .any(|row| row.get::<_, Option<i64>>(0).is_none())
        {
            drop(client);
            return self.take_limited(request, now_ms).await;
        }
        let expires_at_ms = now_ms.saturating_add(request.lease_ms);
        Ok(Taken {
            jobs: taken_jobs(&rows, expires_at_ms)?,
            held: LimitHold::default(),
        })
    }

    async fn extend_lease(
        &self,
        ack: Ack,
        lease_ms: u64,
        max_attempt_ms: u64,
        now_ms: UnixMs,
    ) -> Result<Extended, StoreError> {
        let client = self.client().await?;
        // A heartbeat changes no indexed column: a HOT update.
        let rows = query(
            &client,
            &EXTEND_LEASE,
            &[
                &id(ack.id.0),
                &id(ack.lease.0),
                &time(now_ms.saturating_add(lease_ms)),
                &time(max_attempt_ms),
                &time(now_ms),
            ],
        )
        .await
        .map_err(fault("extending a lease"))?;
        if let Some(row) = rows.first() {
            return Ok(Extended {
                expires_at_ms: untime(row.get(0)),
                cancel_requested: row.get(1),
            });
        }
        Err(lease_refusal(&client, ack).await?)
    }

    async fn complete_jobs(
        &self,
        acks: &[Ack],
        job_results: &[Option<JobResult>],
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Vec<Result<Option<LeaseFacts>, StoreError>>, StoreError> {
        let client = self.client().await?;
        let ids: Vec<i64> = acks.iter().map(|a| id(a.id.0)).collect();
        let tokens: Vec<i64> = acks.iter().map(|a| id(a.lease.0)).collect();
        // No array at all when no job has a result (a NULL array: every result NULL).
        let texts: Option<Vec<Option<&str>>> = (!job_results.is_empty()).then(|| {
            job_results
                .iter()
                .map(|r| r.as_ref().map(JobResult::get))
                .collect()
        });
        // A job with children is left for a transaction of its own, below. The statement
        // waits for an enqueue that holds a parent's row, and may deadlock with one that
        // locks several, or with another completion finishing members of several batches
        // (their rows are locked in the orders of their jobs: `migrations/0014_batches.sql`):
        // all or nothing, it runs again.
        let mut attempt = 0;
        let (done, _) = loop {
            attempt += 1;
            match complete(
                &client,
                &ids,
                &tokens,
                texts.as_deref(),
                retain,
                now_ms,
                None,
                false,
            )
            .await
            {
                Err(error) if is_conflict(&error) && attempt < RETRIES => continue,
                done => break done?,
            }
        };
        // Back to the pool before any transaction below takes one.
        drop(client);
        let mut done: HashMap<(i64, i64), LeaseFacts> = done.into_iter().collect();
        if !done.is_empty() {
            self.announce(Wakeup::Released);
        }
        // As if the acks were checked one after another: before the ack that completed a
        // job, it was in flight under another lease; after it, it was completed (or gone).
        let mut winners: HashMap<i64, usize> = HashMap::new();
        for (at, ack) in acks.iter().enumerate() {
            let pair = (id(ack.id.0), id(ack.lease.0));
            if done.contains_key(&pair) {
                winners.entry(pair.0).or_insert(at);
            }
        }
        let mut results = Vec::with_capacity(acks.len());
        for (at, ack) in acks.iter().enumerate() {
            results.push(match winners.get(&id(ack.id.0)) {
                Some(&winner) if winner == at => Ok(done.remove(&(id(ack.id.0), id(ack.lease.0)))),
                Some(&winner) if at < winner => Err(StoreError::LeaseLost { id: ack.id }),
                Some(_) if retain => Err(StoreError::NotInFlight {
                    id: ack.id,
                    status: Status::Completed,
                }),
                Some(_) => Err(StoreError::NotFound(ack.id)),
                // Refused, or a job with children: checked and completed one at a time.
                None => {
                    let text = texts.as_ref().and_then(|t| t.get(at).copied().flatten());
                    self.complete_parent(*ack, text, retain, now_ms).await?
                }
            });
        }
        Ok(results)
    }

    async fn fail_job(
        &self,
        ack: Ack,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Transition, StoreError> {
        let what = "failing a job";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let row = check_ack(&tx, ack, Some(now_ms)).await?;
        let mut context = Context::new(self.keys.clone());
        let (transition, settled) =
            decide_and_apply(&tx, &mut context, &row, decide, now_ms, None).await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_transition(&transition);
        self.announce_settled(settled);
        self.announce(Wakeup::Released);
        Ok(transition)
    }

    async fn finish_delivery(
        &self,
        ack: Ack,
        attempt: &Attempt,
        retain: bool,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Finished, StoreError> {
        let what = "finishing a delivery";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let row = check_ack(&tx, ack, None).await?;
        let (finished, settled) = if attempt.result == AttemptResult::Delivered {
            let (_, settled) = complete(
                &tx,
                &[id(ack.id.0)],
                &[id(ack.lease.0)],
                None,
                retain,
                now_ms,
                Some(attempt),
                true,
            )
            .await?;
            (Finished::Delivered, settled)
        } else {
            let mut context = Context::new(self.keys.clone());
            let (transition, settled) =
                decide_and_apply(&tx, &mut context, &row, decide, now_ms, Some(attempt)).await?;
            (Finished::Failed(transition), settled)
        };
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        if let Finished::Failed(transition) = &finished {
            self.announce_transition(transition);
        }
        self.announce(Wakeup::Released);
        Ok(finished)
    }

    async fn pop_jobs(
        &self,
        queues: &[String],
        max: usize,
        now_ms: UnixMs,
    ) -> Result<Vec<Job>, StoreError> {
        let client = self.client().await?;
        let no_subscription: Option<i64> = None;
        let caps = vec![limit(max); queues.len()];
        let rows = query(
            &client,
            &POP,
            &[
                &queues,
                &limit(max),
                &no_subscription,
                &true,
                &caps,
                &time(now_ms),
                &false,
            ],
        )
        .await
        .map_err(fault("popping jobs"))?;
        let (mut jobs, _) = popped(&rows)?;
        let held: Vec<i64> = rows
            .first()
            .map_or_else(Vec::new, |r| r.get(super::rows::JOB_COLUMNS));
        if jobs.is_empty() && held.is_empty() && limits::any_limited(&client, queues).await? {
            drop(client);
            return self.pop_limited(queues, max, now_ms).await;
        }
        drop(client);
        if !held.is_empty() {
            jobs.extend(self.pop_parents(&held, now_ms).await?);
        }
        jobs.sort_by_key(|job| (std::cmp::Reverse(job.spec.priority), job.id));
        Ok(jobs)
    }
}

/// Runs [`TAKE`] for `request` with a cap per queue; `check_limits` makes it take nothing when
/// a queue is limited (and say which).
pub(super) async fn take<C: deadpool_postgres::GenericClient>(
    client: &C,
    request: &TakeRequest<'_>,
    check_limits: bool,
    caps: &[i64],
    now_ms: UnixMs,
) -> Result<Vec<Row>, StoreError> {
    let expires_at_ms = now_ms.saturating_add(request.lease_ms);
    let record = request.record.as_ref().filter(|_| request.claim.is_some());
    query(
        client,
        &TAKE,
        &[
            &request.queues,
            &limit(request.max),
            &request.subscription.map(|s| id(s.0)),
            &check_limits,
            &caps,
            &lease_tokens(request.max),
            &time(expires_at_ms),
            &time(now_ms),
            &request.claim.map(|c| id(c.0)),
            &request.keep_until_ms.map(time),
            &record.map(json),
            &record.map(|r| time(r.over_at_ms())),
        ],
    )
    .await
    .map_err(fault("taking jobs"))
}

/// The jobs [`POP`] popped, and the ids of those that had children.
pub(super) fn popped(rows: &[Row]) -> Result<(Vec<Job>, Ended), StoreError> {
    let mut jobs = Vec::with_capacity(rows.len());
    let mut parents = Vec::new();
    for row in rows {
        let Some(job) = row.get::<_, Option<i64>>(0) else {
            continue;
        };
        if row.get::<_, bool>(super::rows::HAS_CHILDREN_AT) {
            parents.push((job, End::Deleted));
        }
        jobs.push(job_of(row)?);
    }
    Ok((jobs, parents))
}

/// The jobs of [`TAKE`]'s rows, best first.
pub(super) fn taken_jobs(rows: &[Row], expires_at_ms: UnixMs) -> Result<Vec<TakenJob>, StoreError> {
    let mut taken: Vec<TakenJob> = rows
        .iter()
        .filter(|row| row.get::<_, Option<i64>>(0).is_some())
        .map(|row| taken_of(row, expires_at_ms))
        .collect::<Result<_, _>>()?;
    taken.sort_by_key(|job| (std::cmp::Reverse(job.priority), job.id));
    Ok(taken)
}

impl PostgresStore {
    /// Completes the job of `ack` in a transaction that settles its waiting children, or says
    /// why it cannot: a job with children, which [`complete`] leaves to its caller's
    /// transaction, or an acknowledgement that the shared statement refused.
    async fn complete_parent(
        &self,
        ack: Ack,
        result: Option<&str>,
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Result<Option<LeaseFacts>, StoreError>, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_complete_parent(ack, result, retain, now_ms).await {
                Err(error) if is_conflict(&error) && attempt < RETRIES => continue,
                done => return done,
            }
        }
    }

    async fn try_complete_parent(
        &self,
        ack: Ack,
        result: Option<&str>,
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Result<Option<LeaseFacts>, StoreError>, StoreError> {
        let what = "completing a job";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        if let Err(refused) = check_ack(&tx, ack, Some(now_ms)).await {
            return match refused {
                StoreError::NotFound(_)
                | StoreError::NotInFlight { .. }
                | StoreError::LeaseLost { .. } => Ok(Err(refused)),
                failed => Err(failed),
            };
        }
        let (mut done, settled) = complete(
            &tx,
            &[id(ack.id.0)],
            &[id(ack.lease.0)],
            Some(&[result]),
            retain,
            now_ms,
            None,
            true,
        )
        .await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce(Wakeup::Released);
        self.announce_settled(settled);
        Ok(match done.pop() {
            Some((_, facts)) => Ok(Some(facts)),
            // Locked and checked: it completes.
            None => Err(StoreError::LeaseLost { id: ack.id }),
        })
    }

    /// Pops the ready jobs `ids` that [`POP`] left because they have children, in a
    /// transaction that settles their children (a popped job will not complete).
    async fn pop_parents(&self, ids: &[i64], now_ms: UnixMs) -> Result<Vec<Job>, StoreError> {
        let what = "popping jobs";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(&tx, &POP_PARENTS, &[&ids, &time(now_ms)])
            .await
            .map_err(fault(what))?;
        let (jobs, parents) = popped(&rows)?;
        let settled = settle(&tx, &parents, now_ms).await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        Ok(jobs)
    }

    /// Wakes whoever waits for the children a parent's end released.
    pub(super) fn announce_settled(&self, settled: Settled) {
        if settled.ready {
            self.announce(Wakeup::Ready);
        }
        if settled.scheduled {
            self.announce(Wakeup::Schedule);
        }
    }

    /// Wakes whoever waits for what a transition produced.
    pub(super) fn announce_transition(&self, transition: &Transition) {
        match transition.state.status {
            Status::Ready => self.announce(Wakeup::Ready),
            Status::Scheduled => {
                self.announce(Wakeup::Schedule);
                self.announce(Wakeup::Ready);
            }
            _ => {}
        }
    }
}

/// Why `ack` could not act: no such job, not in flight, or another lease.
async fn lease_refusal<C: deadpool_postgres::GenericClient>(
    client: &C,
    ack: Ack,
) -> Result<StoreError, StoreError> {
    Ok(match status_of_job(client, ack.id).await? {
        None => StoreError::NotFound(ack.id),
        Some(Status::InFlight) => StoreError::LeaseLost { id: ack.id },
        Some(status) => StoreError::NotInFlight { id: ack.id, status },
    })
}

/// The limited, unpaused queues of `$1`, when `$4` asks to look for them: a take that finds
/// any leaves them to the counted path ([`super::limits`]), and takes nothing.
macro_rules! limited {
    () => {
        "limited AS (
        SELECT name FROM tenax_queues
        WHERE $4::bool AND name = ANY($1::text[]) AND limited AND NOT paused
    )"
    };
}

/// The ready jobs of the unpaused queues in `$1`, best first, at most `$5[i]` of queue
/// `$1[i]` and `$2` in all, locked for this statement (rows another taker holds are skipped).
/// One index range per queue (`tenax_jobs_ready`), read by `tenax_ready_head`
/// (`migrations/0015_take_cost.sql`, which says why a function: a plan that costs as much as
/// the backlog is not possible there). `$3`: a subscription that must exist and be
/// enabled. Nothing when [`limited!`] found a limited queue. `$now`: the parameter with the
/// time of the take; a job past its expiry then is gone, though the maintenance loop has not
/// deleted it yet, and is not picked.
macro_rules! pick {
    ($now:literal) => {
        concat!(
            "picked AS (
        SELECT r.id, row_number() OVER (ORDER BY r.priority DESC, r.id) AS n
        FROM unnest($1::text[], $5::bigint[]) AS q(name, cap)
        CROSS JOIN LATERAL tenax_ready_head(q.name, least($2::bigint, q.cap), ",
            $now,
            "::bigint) AS r
        WHERE NOT EXISTS (SELECT 1 FROM tenax_queues c WHERE c.name = q.name AND c.paused)
          AND ($3::bigint IS NULL OR EXISTS (
              SELECT 1 FROM tenax_subscriptions s WHERE s.id = $3::bigint AND s.enabled))
          AND NOT EXISTS (SELECT 1 FROM limited)
        ORDER BY r.priority DESC, r.id
        LIMIT $2::bigint
    )"
        )
    };
}

statements! {
    /// Leases what [`pick!`] picks (`$8`: now; `$6`: the tokens, [`lease_tokens`], by the
    /// order [`pick!`] numbers its jobs in); then one row per limited queue [`limited!`]
    /// found, with only its name (`id` null).
    pub(super) TAKE = concat!(
        "WITH ",
        limited!(),
        ", ",
        pick!("$8"),
        ", taken AS (
             UPDATE tenax_jobs j SET status = 2, cancel_requested = false,
                 lease_token = ($6::bigint[])[picked.n],
                 lease_expires_at = $7::bigint, taken_at = $8::bigint, claim_id = $9::bigint,
                 expires_at = CASE WHEN j.expires_at IS NULL OR $10::bigint IS NULL
                     THEN j.expires_at ELSE greatest(j.expires_at, $10::bigint) END
             FROM picked WHERE j.id = picked.id
             RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.failures,
                 j.lease_token, j.created_at, j.expires_at, j.parent, j.traceparent, j.run_at,
                 j.trigger, j.payload_sealed, j.after_ids
         ), recorded AS (
             INSERT INTO tenax_claims (id, record, over_at)
             SELECT $9::bigint, $11::text, $12::bigint
             WHERE $11::text IS NOT NULL AND EXISTS (SELECT 1 FROM taken)
             ON CONFLICT (id) DO UPDATE SET record = excluded.record, over_at = excluded.over_at
         )
         SELECT * FROM taken
         UNION ALL
         SELECT NULL::bigint, name, NULL::text, NULL::text, NULL::integer, NULL::integer,
             NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::text, NULL::bigint,
             NULL::smallint, NULL::boolean, NULL::bigint[]
         FROM limited"
    );

    /// Deletes what [`pick!`] picks (`$6`: now), and returns it (read with [`job_columns!`]),
    /// then the ids of the picked jobs with children it left (unless `$7`, a transaction that
    /// settles them, [`super::dependents`]): at least one row, whose job columns are NULL when
    /// nothing was popped.
    pub(super) POP = concat!(
        "WITH ",
        limited!(),
        ", ",
        pick!("$6"),
        ", popped AS (
             DELETE FROM tenax_jobs j USING picked
             WHERE j.id = picked.id AND ($7::bool OR NOT j.has_children)
             RETURNING j.",
        job_columns!(),
        "
         )
         SELECT p.*, h.held
         FROM (SELECT ARRAY(SELECT id FROM picked EXCEPT SELECT id FROM popped) AS held) AS h
         LEFT JOIN popped p ON true"
    );

    /// Deletes the ready jobs `$1` (due by `$2`, not expired), and returns them (read with
    /// [`job_columns!`]).
    POP_PARENTS = concat!(
        "DELETE FROM tenax_jobs WHERE id = ANY($1::bigint[]) AND status = 1
             AND (expires_at IS NULL OR expires_at > $2::bigint)
         RETURNING ",
        job_columns!()
    );

    EXTEND_LEASE = "UPDATE tenax_jobs SET lease_expires_at = least($3::bigint, taken_at + $4::bigint)
             WHERE id = $1 AND status = 2 AND lease_token = $2 AND lease_expires_at > $5::bigint
             RETURNING lease_expires_at, cancel_requested";
}
