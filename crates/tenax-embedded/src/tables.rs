//! The on-disk layout of the embedded store: one redb file, `tenax.redb`, in the data directory.
//!
//! | table      | key                  | value                                        |
//! |------------|----------------------|----------------------------------------------|
//! | `jobs`     | job id (u64)         | [`StoredBody`] as JSON: fixed at enqueue; an encrypted queue's payload sealed (`payload_sealed`) |
//! | `states`   | job id (u64)         | [`JobState`](tenax_core::model::JobState) as JSON, of every job not completed |
//! | `completed` | (queue, job id)     | the [`JobState`](tenax_core::model::JobState) of a completed job, as JSON, with its result (sealed when its payload is) |
//! | `completed_at` | (finished at, job id) | the job's queue: completed jobs in the order retention removes them |
//! | `completed_expiring` | (expires at, job id) | the job's queue: completed jobs that have an expiry |
//! | `completed_counts` | queue        | u64: how many completed jobs the queue has |
//! | `policies` | job id (u64)         | the job's own policy, canonical native JSON  |
//! | `errors`   | (job id, n)          | [`ErrorEntry`](tenax_core::model::ErrorEntry) JSON |
//! | `queues`   | queue name           | [`QueueConfig`](tenax_core::model::QueueConfig) JSON |
//! | `subscriptions` | subscription id | [`Subscription`](tenax_core::model::Subscription) JSON, its secrets sealed ([`tenax_core::store::sealed`]) |
//! | `attempts` | (delivery id, n)     | [`Attempt`](tenax_core::model::Attempt) JSON: every POST of a delivery |
//! | `tokens`   | token id (u64)       | [`TokenRecord`](tenax_core::auth::TokenRecord) JSON: an API token's hash, role and scopes |
//! | `schedules` | schedule name       | [`Schedule`](tenax_core::model::Schedule) JSON: its definition and what it has done |
//! | `starts`   | (queue, bucket start) | (bucket width, jobs started): a rate-limited queue's recent starts (see [`RateLimit`](tenax_core::model::RateLimit)) |
//! | `batches`  | batch id (u64)       | [`Batch`](tenax_core::model::Batch) JSON: a batch's callbacks, counts and state; its members name it in their bodies (`batch`) |
//! | `endpoints` | endpoint origin     | [`EndpointState`](tenax_core::model::EndpointState) JSON: a webhook endpoint's pause and circuit breaker |
//! | `children` | (parent id, child id) | (): a job that waits for another (its `after`), written with the child and removed with the parent |
//! | `payload_key` | `data_key`        | the payload data key of encrypted queues, sealed by the secrets key (`sealing::payload_key`) |
//! | `meta`     | name                 | u64: `format_version`, `next_id` (the next job id to assign), `next_subscription_id`, `next_token_id`, `next_batch_id`, `wal_lsn` (the last write-ahead log record applied: see `wal`), `wal_id` (the identity of the log that goes with this file; absent before format 4), `secrets_key` (the id of the key that seals the subscriptions' secrets), `scrub_pending` (present while the files still owe a scrub of secrets an earlier release kept in clear: see `sealing`) |
//!
//! Memory holds every job that can still change (see `index`); a completed job moves from
//! `states` to `completed` (and `completed_at`, `completed_expiring`, `completed_counts`) in the
//! commit that completes it, and is read from there: the history a day of retention keeps
//! costs disk, not memory.
//!
//! An attempt's `n` counts from 1 per delivery and never repeats (attempt numbers restart after
//! a replay that resets them; `n` does not).
//! A delivery is a job (see [`tenax_core::model::subscription`]); deleting it deletes its attempts.
//!
//! An error's `n` is its attempt, or one past the job's last entry if that is higher (after a
//! replay that reset the attempts), so the history is append-only, oldest first.
//!
//! `format_version` is [`FORMAT_VERSION`]: a file stamped with a higher one was written by a newer
//! Tenax, and is refused rather than misread. A file without one predates the stamp and is
//! format 1. Format 1 kept completed jobs in `states`; opening it moves them (`upgrade`).
//! Format 3 adds `schedules` and `starts` (and the log's ops that write them), which an older
//! Tenax could not read: it refuses the file rather than ignore them.
//! Format 4 seals the subscriptions' secrets (`sealing`), which an older Tenax would read as
//! empty and sign deliveries with, and writes the log in its format 2 (a header, page stamps:
//! see `wal`) and names it in `wal_id`, which an older Tenax would read as empty: it refuses
//! the file instead. A format 3 file's log (format 1) is applied at open and made again in
//! format 2, and its secrets are sealed.
//! Format 5 may hold sealed payloads and the `payload_key` table (encrypted queues), which an
//! older Tenax would show as ciphertext: it refuses the file instead. Nothing is rewritten.
//! Results (`JobState::result`, a completed job's) need no new format: they are a field of the
//! completed state's JSON in `completed`, which an older Tenax reads without it (serde ignores
//! it) and never rewrites (a completed job is only read, then deleted), so it shows the jobs
//! without their results and loses none; the log carries them inside that same JSON.
//! Format 6 may hold cancelled jobs (`"status": "cancelled"` in `states`, and in the log's
//! states), which an older Tenax cannot read: it refuses the file instead. Nothing is
//! rewritten: a format 5 file holds none. The mark on a lease in flight (`index::Lease`) is
//! never written, as the lease is not.
//!
//! Batches need no new format: an older Tenax never opens the `batches` table, reads the
//! bodies' `batch` as nothing, and refuses a log holding their ops (an unknown op).
//!
//! Ids are never reused: `next_id` is written in the same commit as the jobs that used it.
//! In-flight status, leases and claims are never written: after a restart a job is as its last
//! durable state says (ready or scheduled), which returns every in-flight job to ready.
//! Internal queues (a subscription's deliveries) have no row in `queues`.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tenax_core::clock::UnixMs;
use tenax_core::model::{BatchId, JobId, OnParentDead};

pub const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");
pub const STATES: TableDefinition<u64, &[u8]> = TableDefinition::new("states");
pub const POLICIES: TableDefinition<u64, &[u8]> = TableDefinition::new("policies");
pub const ERRORS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("errors");
pub const QUEUES: TableDefinition<&str, &[u8]> = TableDefinition::new("queues");
pub const SUBSCRIPTIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("subscriptions");
pub const ATTEMPTS: TableDefinition<(u64, u32), &[u8]> = TableDefinition::new("attempts");
pub const TOKENS: TableDefinition<u64, &[u8]> = TableDefinition::new("tokens");
pub const ENDPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoints");
pub const COMPLETED: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("completed");
pub const COMPLETED_AT: TableDefinition<(u64, u64), &str> = TableDefinition::new("completed_at");
pub const COMPLETED_EXPIRING: TableDefinition<(u64, u64), &str> =
    TableDefinition::new("completed_expiring");
pub const COMPLETED_COUNTS: TableDefinition<&str, u64> = TableDefinition::new("completed_counts");
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
pub const SCHEDULES: TableDefinition<&str, &[u8]> = TableDefinition::new("schedules");
pub const STARTS: TableDefinition<(&str, u64), (u64, u64)> = TableDefinition::new("starts");
pub const BATCHES: TableDefinition<u64, &[u8]> = TableDefinition::new("batches");
/// The payload data key of encrypted queues, sealed by the secrets key (one row:
/// [`PAYLOAD_KEY_ROW`]; `tenax_core::store::sealed::payload_key_to_stored`).
pub const PAYLOAD_KEY: TableDefinition<&str, &[u8]> = TableDefinition::new("payload_key");
pub const PAYLOAD_KEY_ROW: &str = "data_key";
/// The edges of workflows, from parent to child (`NewJob::after` is the other way): written
/// with the child, removed with the parent.
pub const CHILDREN: TableDefinition<(u64, u64), ()> = TableDefinition::new("children");

pub const FORMAT_VERSION_KEY: &str = "format_version";
/// The format this version writes and reads.
pub const FORMAT_VERSION: u64 = 6;
pub const NEXT_ID: &str = "next_id";
pub const NEXT_SUBSCRIPTION_ID: &str = "next_subscription_id";
pub const NEXT_TOKEN_ID: &str = "next_token_id";
pub const NEXT_BATCH_ID: &str = "next_batch_id";
pub const WAL_LSN: &str = "wal_lsn";
pub const WAL_ID: &str = "wal_id";
pub const SECRETS_KEY: &str = "secrets_key";
pub const SCRUB_PENDING: &str = "scrub_pending";

/// The part of a job that never changes after enqueue.
/// A dead-letter move rewrites it with the new queue (and expiry).
#[derive(Debug, Serialize, Deserialize)]
pub struct StoredBody {
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub payload: Box<RawValue>,
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    pub created_at_ms: UnixMs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<JobId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// `payload` is sealed (`NewJob::payload_sealed`); absent in bodies written before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub payload_sealed: bool,
    /// The jobs it waits for (`NewJob::after`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<JobId>,
    #[serde(default, skip_serializing_if = "OnParentDead::is_default")]
    pub on_parent_dead: OnParentDead,
    /// The batch the job is a member of; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchId>,
}

/// The fields of a [`StoredBody`] that the writer needs to find a completed job's rows.
#[derive(Debug, Deserialize)]
pub struct BodyHead {
    pub queue: String,
    #[serde(default)]
    pub expires_at_ms: Option<UnixMs>,
}
