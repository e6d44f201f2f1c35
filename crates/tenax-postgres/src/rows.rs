//! Between rows and the seam's types: the column lists, and the conversions of ids, times and
//! statuses. Ids are stored as the same 64 bits (a claim id is random and may use the top
//! bit); times are stored as they are, clamped to `bigint`'s range (they are far below it).

use std::sync::Arc;

use serde_json::value::RawValue;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    ClaimId, ErrorEntry, Held, Job, JobId, JobPeek, JobResult, JobState, LeaseToken, NewJob,
    OnParentDead, QueueConfig, Status, StoredPolicy, Subscription, Trigger,
};
use tenax_core::secrets::Keyring;
use tenax_core::store::{StoreError, from_json_bytes, sealed};
use tokio_postgres::Row;

/// Where [`job_columns!`] puts the columns read by name elsewhere, and how many it has (a
/// statement's own columns come after them).
pub const HAS_CHILDREN_AT: usize = 29;
pub const CANCEL_REQUESTED_AT: usize = 30;
pub const BATCH_AT: usize = 31;
pub const JOB_COLUMNS: usize = 32;

/// A job's columns, in the order [`job_of`] reads them. Both job tables have them all.
macro_rules! job_columns {
    () => {
        "id, queue, kind, payload, priority, unique_key, created_at, \
         expires_at, origin, parent, traceparent, policy, status, run_at, failures, \
         first_failure_at, last_delay, finished_at, dead_reason, errors, lease_token, \
         lease_expires_at, taken_at, claim_id, trigger, payload_sealed, result, after_ids, \
         on_parent_dead, has_children, cancel_requested, batch_id"
    };
}
pub(super) use job_columns;

/// What a peek reads, in the order [`peek_of`] reads it.
macro_rules! peek_columns {
    () => {
        "id, queue, status, failures, expires_at, claim_id, lease_expires_at"
    };
}
pub(super) use peek_columns;

/// The columns of a job row, for INSERT … SELECT between the two tables.
macro_rules! table_columns {
    () => {
        "id, queue, kind, payload, priority, unique_key, created_at, \
         expires_at, origin, parent, traceparent, policy, status, run_at, failures, \
         first_failure_at, last_delay, finished_at, dead_reason, errors, attempts, lease_token, \
         lease_expires_at, taken_at, claim_id, trigger, payload_sealed, result, after_ids, \
         on_parent_dead, pending, has_children"
    };
}
pub(super) use table_columns;

/// A 64-bit id as stored: the same bits.
pub fn id(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

/// A 64-bit id as read.
pub fn unid(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

/// A time (or a duration) as stored.
pub fn time(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A time as read (never negative: only [`time`] writes them).
pub fn untime(value: i64) -> UnixMs {
    u64::try_from(value).unwrap_or(0)
}

pub fn count(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

pub fn uncount(value: i32) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// A `count(*)` (of the first row, if any) as a number.
pub fn count_of(value: Option<i64>) -> usize {
    value.and_then(|n| usize::try_from(n).ok()).unwrap_or(0)
}

/// A limit as `bigint`.
pub fn limit(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub fn status_code(status: Status) -> i16 {
    match status {
        Status::Scheduled => 0,
        Status::Ready => 1,
        Status::InFlight => 2,
        Status::Completed => 3,
        Status::Dead => 4,
        Status::Cancelled => 5,
        Status::Waiting => 6,
    }
}

pub fn status_of(code: i16) -> Result<Status, StoreError> {
    Ok(match code {
        0 => Status::Scheduled,
        1 => Status::Ready,
        2 => Status::InFlight,
        3 => Status::Completed,
        4 => Status::Dead,
        5 => Status::Cancelled,
        6 => Status::Waiting,
        other => return Err(StoreError::Corrupt(format!("job status {other}"))),
    })
}

/// A job's parents as stored (`after_ids`: NULL for none).
pub fn after_of(ids: Option<Vec<i64>>) -> Vec<JobId> {
    ids.unwrap_or_default()
        .into_iter()
        .map(|p| JobId(unid(p)))
        .collect()
}

/// A job's parents as stored: NULL for none, so that a job without parents stores nothing.
pub fn stored_after(ids: &[JobId]) -> Option<Vec<i64>> {
    (!ids.is_empty()).then(|| ids.iter().map(|p| id(p.0)).collect())
}

pub fn on_parent_dead_code(on_parent_dead: OnParentDead) -> i16 {
    match on_parent_dead {
        OnParentDead::Cancel => 0,
        OnParentDead::Run => 1,
    }
}

/// What a job does when a parent will not complete, as read; an unknown code reads as the
/// default.
pub fn on_parent_dead_of(code: i16) -> OnParentDead {
    match code {
        1 => OnParentDead::Run,
        _ => OnParentDead::Cancel,
    }
}

/// A trigger as stored: NULL for a scheduled run.
pub fn trigger_code(trigger: Trigger) -> Option<i16> {
    match trigger {
        Trigger::Scheduled => None,
        Trigger::Replay => Some(1),
        Trigger::Manual => Some(2),
    }
}

/// A trigger as read; an unknown code reads as scheduled (the run happens either way).
pub fn trigger_of(code: Option<i16>) -> Trigger {
    match code {
        Some(1) => Trigger::Replay,
        Some(2) => Trigger::Manual,
        _ => Trigger::Scheduled,
    }
}

fn opt_time(row: &Row, at: usize) -> Option<UnixMs> {
    row.get::<_, Option<i64>>(at).map(untime)
}

/// A job state from a row read with [`job_columns!`].
pub fn state_of(row: &Row) -> Result<JobState, StoreError> {
    Ok(JobState {
        status: status_of(row.get(12))?,
        run_at_ms: untime(row.get(13)),
        failures: uncount(row.get(14)),
        first_failure_at_ms: opt_time(row, 15),
        last_delay_ms: opt_time(row, 16),
        finished_at_ms: opt_time(row, 17),
        dead_reason: row.get(18),
        trigger: trigger_of(row.get(24)),
        result: row
            .get::<_, Option<String>>(26)
            .map(|text| {
                RawValue::from_string(text)
                    .map(JobResult)
                    .map_err(|e| StoreError::Corrupt(format!("job result: {e}")))
            })
            .transpose()?,
    })
}

/// The stored policy of a row read with [`job_columns!`].
pub fn policy_of(row: &Row) -> Result<Option<StoredPolicy>, StoreError> {
    row.get::<_, Option<&str>>(11)
        .map(|text| from_json_bytes("job policy", text.as_bytes()))
        .transpose()
}

/// A whole job from a row read with [`job_columns!`].
pub fn job_of(row: &Row) -> Result<Job, StoreError> {
    let state = state_of(row)?;
    let payload: String = row.get(3);
    let payload = RawValue::from_string(payload)
        .map_err(|e| StoreError::Corrupt(format!("job payload: {e}")))?;
    let errors: Vec<ErrorEntry> = row
        .get::<_, Vec<&str>>(19)
        .into_iter()
        .map(|text| from_json_bytes("job error", text.as_bytes()))
        .collect::<Result<_, _>>()?;
    let held = (state.status == Status::InFlight)
        .then(|| opt_time(row, 21))
        .flatten()
        .map(|lease_expires_at_ms| Held {
            claim: row.get::<_, Option<i64>>(23).map(|c| ClaimId(unid(c))),
            lease_expires_at_ms,
        });
    Ok(Job {
        id: JobId(unid(row.get(0))),
        spec: NewJob {
            queue: row.get(1),
            kind: row.get(2),
            payload,
            priority: row.get(4),
            run_at_ms: state.run_at_ms,
            policy: policy_of(row)?,
            unique_key: row.get(5),
            created_at_ms: untime(row.get(6)),
            expires_at_ms: opt_time(row, 7),
            origin: row.get(8),
            parent: row.get::<_, Option<i64>>(9).map(|p| JobId(unid(p))),
            traceparent: row.get(10),
            payload_sealed: row.get(25),
            after: after_of(row.get(27)),
            on_parent_dead: on_parent_dead_of(row.get(28)),
            batch: row
                .get::<_, Option<i64>>(BATCH_AT)
                .map(|b| tenax_core::model::BatchId(unid(b))),
        },
        state,
        errors,
        held,
    })
}

/// The lease token of a row read with [`job_columns!`], if it has one.
pub fn lease_token_of(row: &Row) -> Option<LeaseToken> {
    row.get::<_, Option<i64>>(20).map(|t| LeaseToken(unid(t)))
}

/// A peek from a row read with [`peek_columns!`], and the job's id.
pub fn peek_of(row: &Row) -> Result<(JobId, JobPeek), StoreError> {
    let status = status_of(row.get(2))?;
    let in_flight = status == Status::InFlight;
    let queue: &str = row.get(1);
    Ok((
        JobId(unid(row.get(0))),
        JobPeek {
            queue: Arc::from(queue),
            status,
            failures: uncount(row.get(3)),
            expires_at_ms: opt_time(row, 4),
            claim: row
                .get::<_, Option<i64>>(5)
                .filter(|_| in_flight)
                .map(|c| ClaimId(unid(c))),
            lease_expires_at_ms: opt_time(row, 6).filter(|_| in_flight),
        },
    ))
}

/// JSON text of one of our own values.
pub fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Stored queue settings (`tenax_queues.config`).
pub fn queue_config_of(text: &str) -> Result<QueueConfig, StoreError> {
    from_json_bytes("queue settings", text.as_bytes())
}

/// A stored subscription (`tenax_subscriptions.body`), its secrets opened with `keys`.
pub fn subscription_of(text: &str, keys: &Keyring) -> Result<Subscription, StoreError> {
    Ok(sealed::from_stored(text.as_bytes(), keys)?.subscription)
}

/// A subscription as stored (`tenax_subscriptions.body`), its secrets sealed with `keys`.
pub fn stored_subscription(
    subscription: &Subscription,
    keys: &Keyring,
) -> Result<String, StoreError> {
    let bytes = sealed::to_stored(subscription, keys)?;
    // JSON is UTF-8: nothing is replaced.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod column_tests {
    use super::*;

    #[test]
    fn the_named_positions_are_those_of_the_column_list() {
        let columns: Vec<&str> = job_columns!().split(',').map(str::trim).collect();
        assert_eq!(columns.len(), JOB_COLUMNS);
        assert_eq!(columns[HAS_CHILDREN_AT], "has_children");
        assert_eq!(columns[CANCEL_REQUESTED_AT], "cancel_requested");
        assert_eq!(columns[BATCH_AT], "batch_id");
    }
}
