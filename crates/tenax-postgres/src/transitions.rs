//! Transitions under a row lock: checking a worker's lease, asking the engine's decision, and
//! writing a job's new state (in place while unfinished; moved to `tenax_finished` once it is
//! completed or dead).

use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::GenericClient;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Ack, Attempt, JobId, QueueConfig, Status, Subscription, SubscriptionId,
    subscription::subscription_of_queue,
};
use tenax_core::secrets::Keyring;
use tenax_core::store::{Decide, DecideContext, LeaseFacts, StoreError, Transition};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::dependents::{End, Settled, settle};
use super::rows::{
    count, id, job_columns, json, lease_token_of, policy_of, queue_config_of, state_of,
    status_code, status_of, subscription_of, table_columns, time, trigger_code, unid, untime,
};
use super::statements::{Text, statements};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

/// Runs `sql` as a cached prepared statement. A [`Text`], never a bare string: every text
/// sent is listed ([`super::statements`]).
pub async fn query<C: GenericClient, S: Text + ?Sized>(
    client: &C,
    sql: &S,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql.text()).await?;
    client.query(&statement, params).await
}

/// Runs `sql` as a cached prepared statement; returns how many rows it changed.
pub async fn execute<C: GenericClient, S: Text + ?Sized>(
    client: &C,
    sql: &S,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, tokio_postgres::Error> {
    let statement = client.prepare_cached(sql.text()).await?;
    client.execute(&statement, params).await
}

/// Queue settings and subscriptions read for decisions, once per transaction.
#[derive(Debug)]
pub struct Context {
    queues: HashMap<String, Option<QueueConfig>>,
    subscriptions: HashMap<SubscriptionId, Option<Subscription>>,
    /// Open the subscriptions' secrets.
    keys: Arc<Keyring>,
}

impl Context {
    pub fn new(keys: Arc<Keyring>) -> Self {
        Self {
            queues: HashMap::new(),
            subscriptions: HashMap::new(),
            keys,
        }
    }

    pub async fn queue<C: GenericClient>(
        &mut self,
        client: &C,
        name: &str,
    ) -> Result<Option<QueueConfig>, StoreError> {
        if let Some(known) = self.queues.get(name) {
            return Ok(known.clone());
        }
        let config = queue_config(client, name).await?;
        self.queues.insert(name.to_owned(), config.clone());
        Ok(config)
    }

    pub async fn subscription<C: GenericClient>(
        &mut self,
        client: &C,
        subscription: SubscriptionId,
    ) -> Result<Option<Subscription>, StoreError> {
        if let Some(known) = self.subscriptions.get(&subscription) {
            return Ok(known.clone());
        }
        let found = subscription_row(client, subscription, false, &self.keys).await?;
        self.subscriptions.insert(subscription, found.clone());
        Ok(found)
    }
}

/// A queue's stored settings.
pub async fn queue_config<C: GenericClient>(
    client: &C,
    name: &str,
) -> Result<Option<QueueConfig>, StoreError> {
    let rows = query(client, &QUEUE_CONFIG, &[&name])
        .await
        .map_err(fault("reading a queue's settings"))?;
    rows.first()
        .map(|row| queue_config_of(row.get(0)))
        .transpose()
}

/// A stored subscription, opened with `keys`; locked until the transaction ends when `lock`.
pub async fn subscription_row<C: GenericClient>(
    client: &C,
    subscription: SubscriptionId,
    lock: bool,
    keys: &Keyring,
) -> Result<Option<Subscription>, StoreError> {
    let sql = if lock {
        &SUBSCRIPTION_FOR_UPDATE
    } else {
        &SUBSCRIPTION
    };
    let rows = query(client, sql, &[&id(subscription.0)])
        .await
        .map_err(fault("reading a subscription"))?;
    rows.first()
        .map(|row| subscription_of(row.get(0), keys))
        .transpose()
}

/// Locks unfinished job `job` until the transaction ends; its row, read with [`job_columns!`].
pub async fn lock_job<C: GenericClient>(client: &C, job: JobId) -> Result<Option<Row>, StoreError> {
    let rows = query(client, &LOCK_JOB, &[&id(job.0)])
        .await
        .map_err(fault("locking a job"))?;
    Ok(rows.into_iter().next())
}

/// The status of job `job` wherever it is, if it exists.
pub async fn status_of_job<C: GenericClient>(
    client: &C,
    job: JobId,
) -> Result<Option<Status>, StoreError> {
    let rows = query(client, &JOB_STATUS, &[&id(job.0)])
        .await
        .map_err(fault("reading a job's status"))?;
    rows.first().map(|r| status_of(r.get(0))).transpose()
}

/// Locks the job `ack` names and checks that `ack` holds its current lease.
/// Locks the job `ack` names and checks that `ack` may act on it: in flight under `ack`'s
/// lease and, with `live_at`, a lease that has not ended by then (a worker's acknowledgement
/// after its lease's end is refused whether or not the lease has been ended yet; the runner's
/// own deliveries pass `None`).
pub async fn check_ack<C: GenericClient>(
    client: &C,
    ack: Ack,
    live_at: Option<UnixMs>,
) -> Result<Row, StoreError> {
    let Some(row) = lock_job(client, ack.id).await? else {
        return Err(match status_of_job(client, ack.id).await? {
            Some(status) => StoreError::NotInFlight { id: ack.id, status },
            None => StoreError::NotFound(ack.id),
        });
    };
    let status = status_of(row.get(12))?;
    if status != Status::InFlight {
        return Err(StoreError::NotInFlight { id: ack.id, status });
    }
    let ended = live_at.is_some_and(|now| {
        row.get::<_, Option<i64>>(21)
            .is_none_or(|end| untime(end) <= now)
    });
    if lease_token_of(&row) != Some(ack.lease) || ended {
        return Err(StoreError::LeaseLost { id: ack.id });
    }
    Ok(row)
}

/// Asks `decide` about a locked job and writes its transition, logging `attempt` with it.
/// A retry due already is ready at once; the transition returned says so, and what became of
/// the job's waiting children if it ended.
pub async fn decide_and_apply<C: GenericClient>(
    client: &C,
    context: &mut Context,
    row: &Row,
    decide: &Decide<'_>,
    now_ms: UnixMs,
    attempt: Option<&Attempt>,
) -> Result<(Transition, Settled), StoreError> {
    let job = JobId(unid(row.get(0)));
    let queue: &str = row.get(1);
    let state = state_of(row)?;
    let policy = policy_of(row)?;
    let expires_at_ms = row.get::<_, Option<i64>>(7).map(super::rows::untime);
    let queue_config = context.queue(client, queue).await?;
    let owner = match subscription_of_queue(queue) {
        Some(subscription) => match context.subscription(client, subscription).await? {
            Some(subscription) => {
                let config = context.queue(client, &subscription.queue).await?;
                Some((subscription, config))
            }
            None => None,
        },
        None => None,
    };
    let lease = LeaseFacts {
        queue: queue.to_owned(),
        kind: row.get(2),
        created_at_ms: super::rows::untime(row.get(6)),
        taken_at_ms: row
            .get::<_, Option<i64>>(22)
            .map_or(now_ms, super::rows::untime),
        traceparent: row.get(10),
    };
    let mut transition = decide(&DecideContext {
        id: job,
        queue,
        state: &state,
        expires_at_ms,
        job_policy: policy.as_ref().map(|p| p.policy().as_ref()),
        queue_config: queue_config.as_ref(),
        owner: owner.as_ref().map(|(s, c)| (s, c.as_ref())),
        lease: Some(lease),
        cancel_requested: row.get(super::rows::CANCEL_REQUESTED_AT),
    });
    if transition.state.status == Status::Scheduled && transition.state.run_at_ms <= now_ms {
        transition.state.status = Status::Ready;
    }
    let settled = write_transition(client, job, &transition, attempt, now_ms).await?;
    Ok((transition, settled))
}

impl PostgresStore {
    /// Ends the leases of locked jobs in flight (`rows`, read with [`job_columns!`]) as
    /// `decide` says, commits, and wakes whoever waits for what that made. Returns how many.
    pub(super) async fn decide_each(
        &self,
        tx: deadpool_postgres::Transaction<'_>,
        rows: &[Row],
        decide: &Decide<'_>,
        now_ms: UnixMs,
        what: &'static str,
    ) -> Result<usize, StoreError> {
        let mut context = Context::new(self.keys.clone());
        for row in rows {
            // Every kind of wake-up is announced below.
            decide_and_apply(&tx, &mut context, row, decide, now_ms, None).await?;
        }
        tx.commit().await.map_err(fault(what))?;
        if !rows.is_empty() {
            self.announce(Wakeup::Ready);
            self.announce(Wakeup::Schedule);
            self.announce(Wakeup::Released);
        }
        Ok(rows.len())
    }
}

/// Writes a job's new state, error and attempt, and its move to another queue. Its lease goes
/// (and its mark, if it was marked cancelled). A cancelled job goes through
/// [`super::cancel::into_cancelled`], the one way into that status. A job that ends so settles
/// its waiting children ([`super::dependents`]), if it has any, in the transaction of `client`.
pub async fn write_transition<C: GenericClient>(
    client: &C,
    job: JobId,
    transition: &Transition,
    attempt: Option<&Attempt>,
    now_ms: UnixMs,
) -> Result<Settled, StoreError> {
    if transition.state.status == Status::Cancelled {
        return super::cancel::into_cancelled(client, job, transition, attempt, now_ms).await;
    }
    write_state(client, job, transition, attempt, now_ms).await
}

/// What [`write_transition`] writes, whatever the status, with the settling of the job's
/// waiting children when it ends: only it and [`super::cancel::into_cancelled`] call this.
pub(super) async fn write_state<C: GenericClient>(
    client: &C,
    job: JobId,
    transition: &Transition,
    attempt: Option<&Attempt>,
    now_ms: UnixMs,
) -> Result<Settled, StoreError> {
    let state = &transition.state;
    let queue: Option<String> = transition.moved_to.as_ref().map(|m| m.queue.clone());
    let moved = transition.moved_to.is_some();
    let expires: Option<i64> = transition
        .moved_to
        .as_ref()
        .and_then(|m| m.expires_at_ms)
        .map(time);
    let error: Option<String> = transition.error.as_ref().map(json);
    let attempt: Option<String> = attempt.map(json);
    let trigger = trigger_code(state.trigger);
    let params: [&(dyn ToSql + Sync); 14] = [
        &id(job.0),
        &queue,
        &moved,
        &expires,
        &status_code(state.status),
        &time(state.run_at_ms),
        &count(state.failures),
        &state.first_failure_at_ms.map(time),
        &state.last_delay_ms.map(time),
        &state.finished_at_ms.map(time),
        &state.dead_reason,
        &error,
        &attempt,
        &trigger,
    ];
    if !state.status.is_finished() {
        execute(client, &UPDATE_IN_PLACE, &params)
            .await
            .map_err(fault("writing a job's transition"))?;
        return Ok(Settled::default());
    }
    let finished = query(client, &MOVE_TO_FINISHED, &params)
        .await
        .map_err(fault("writing a job's transition"))?;
    // Its flag, as the move read it ([`super::dependents`]).
    if !finished.first().is_some_and(|row| row.get::<_, bool>(0)) {
        return Ok(Settled::default());
    }
    let end = if state.status == Status::Completed {
        End::Completed
    } else {
        End::Lost
    };
    settle(client, &[(id(job.0), end)], now_ms).await
}

/// Completes the in-flight jobs whose leases are the given tokens: kept as completed (moved to
/// `tenax_finished`, with `attempt` logged and the job's result from `results`, one per id,
/// or none for all) when `retain`, else deleted. Returns the (id, lease token) pairs
/// completed, with what their rows said of their leases.
///
/// A job with children is completed only `in_transaction` (then its children are settled,
/// [`super::dependents`]); otherwise it is left in flight, and its pair not returned: the
/// caller completes it again in a transaction. So a job without children is completed in
/// one statement, transaction or not.
#[allow(clippy::too_many_arguments)]
pub async fn complete<C: GenericClient>(
    client: &C,
    ids: &[i64],
    tokens: &[i64],
    results: Option<&[Option<&str>]>,
    retain: bool,
    now_ms: UnixMs,
    attempt: Option<&Attempt>,
    in_transaction: bool,
) -> Result<(Vec<((i64, i64), LeaseFacts)>, Settled), StoreError> {
    // A worker's completion needs a lease that has not ended; a delivery's (with its attempt)
    // is the runner's own, kept whenever the lease is still its.
    let live_at: Option<i64> = attempt.is_none().then(|| time(now_ms));
    let attempt: Option<String> = attempt.map(json);
    let rows = query(
        client,
        &COMPLETE,
        &[
            &ids,
            &tokens,
            &time(now_ms),
            &retain,
            &attempt,
            &live_at,
            &results,
            &in_transaction,
        ],
    )
    .await
    .map_err(fault("completing jobs"))?;
    let parents: Vec<(i64, End)> = rows
        .iter()
        .filter(|r| r.get::<_, bool>(7))
        .map(|r| {
            let end = if retain {
                End::Completed
            } else {
                // Not kept: its edges go with it.
                End::CompletedAndDeleted
            };
            (r.get(0), end)
        })
        .collect();
    let settled = if parents.is_empty() {
        Settled::default()
    } else {
        settle(client, &parents, now_ms).await?
    };
    let done = rows
        .iter()
        .map(|r| {
            let facts = LeaseFacts {
                queue: r.get(2),
                kind: r.get(3),
                created_at_ms: untime(r.get(4)),
                taken_at_ms: r.get::<_, Option<i64>>(5).map_or(now_ms, untime),
                traceparent: r.get(6),
            };
            ((r.get(0), r.get(1)), facts)
        })
        .collect();
    Ok((done, settled))
}

statements! {
    QUEUE_CONFIG = "SELECT config FROM tenax_queues WHERE name = $1";
    SUBSCRIPTION = "SELECT body FROM tenax_subscriptions WHERE id = $1";
    SUBSCRIPTION_FOR_UPDATE = "SELECT body FROM tenax_subscriptions WHERE id = $1 FOR UPDATE";
    LOCK_JOB = concat!(
        "SELECT ",
        job_columns!(),
        " FROM tenax_jobs WHERE id = $1 FOR UPDATE"
    );
    JOB_STATUS = "SELECT status FROM tenax_all_jobs WHERE id = $1";

    UPDATE_IN_PLACE = "UPDATE tenax_jobs SET
        queue = coalesce($2::text, queue),
        expires_at = CASE WHEN $3::bool THEN $4::bigint ELSE expires_at END,
        status = $5::smallint, run_at = $6::bigint, failures = $7::integer,
        first_failure_at = $8::bigint, last_delay = $9::bigint, finished_at = $10::bigint,
        dead_reason = $11::text,
        errors = CASE WHEN $12::text IS NULL THEN errors ELSE array_append(errors, $12::text) END,
        attempts = CASE WHEN $13::text IS NULL THEN attempts ELSE array_append(attempts, $13::text) END,
        lease_token = NULL, lease_expires_at = NULL, taken_at = NULL, claim_id = NULL,
        cancel_requested = false, trigger = $14::smallint
    WHERE id = $1::bigint";

    MOVE_TO_FINISHED = concat!(
        "WITH moved AS (DELETE FROM tenax_jobs WHERE id = $1::bigint RETURNING *)
         INSERT INTO tenax_finished (",
        table_columns!(),
        ")
         SELECT id, coalesce($2::text, queue), kind, payload, priority, unique_key, created_at,
             CASE WHEN $3::bool THEN $4::bigint ELSE expires_at END, origin, parent,
             traceparent, policy, $5::smallint, $6::bigint, $7::integer, $8::bigint,
             $9::bigint, $10::bigint, $11::text,
             CASE WHEN $12::text IS NULL THEN errors ELSE array_append(errors, $12::text) END,
             CASE WHEN $13::text IS NULL THEN attempts ELSE array_append(attempts, $13::text) END,
             NULL, NULL, NULL, NULL, $14::smallint, payload_sealed, result, after_ids,
             on_parent_dead, NULL, has_children
         FROM moved
         RETURNING has_children"
    );

    /// A job holds a lease token only while in flight (every transition out of flight clears
    /// it), so matching the token is enough, and the statement does not say `status = 2`:
    /// with statistics gathered while no job was in flight, that condition made PostgreSQL
    /// expect one row and rescan the arrays for each job in flight (1.8 s per batch of 1000).
    /// A job with children is left in flight unless `$8` (the caller's transaction settles
    /// them, [`complete`]).
    COMPLETE = concat!(
        "WITH done AS (
             DELETE FROM tenax_jobs j
             USING unnest($1::bigint[], $2::bigint[], $7::text[]) AS a(id, token, result)
             WHERE j.id = a.id AND j.lease_token = a.token
               AND ($6::bigint IS NULL OR j.lease_expires_at > $6::bigint)
               AND ($8::bool OR NOT j.has_children)
             RETURNING j.*, a.result AS new_result
         ), kept AS (
             INSERT INTO tenax_finished (",
        table_columns!(),
        ")
             SELECT id, queue, kind, payload, priority, unique_key, created_at, expires_at,
                 origin, parent, traceparent, policy, 3, run_at, failures, first_failure_at,
                 last_delay, $3::bigint, dead_reason, errors,
                 CASE WHEN $5::text IS NULL THEN attempts ELSE array_append(attempts, $5::text) END,
                 NULL, NULL, NULL, NULL, NULL, payload_sealed, new_result, after_ids,
                 on_parent_dead, NULL, has_children
             FROM done WHERE $4::bool OR batch_id IS NOT NULL
         )
         SELECT id, lease_token, queue, kind, created_at, taken_at, traceparent, has_children
         FROM done"
    );
}
