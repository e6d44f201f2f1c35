//! A leased job: what a worker is handed when it takes one, and the hold it answers with.

use serde_json::value::RawValue;

use crate::clock::UnixMs;
use crate::model::{JobId, LeaseToken, Trigger};

/// A leased job, as handed to a worker.
#[derive(Debug, Clone)]
pub struct TakenJob {
    pub id: JobId,
    pub queue: String,
    pub kind: String,
    pub payload: Box<RawValue>,
    /// The payload is sealed, as in [`NewJob::payload_sealed`](crate::model::NewJob).
    pub payload_sealed: bool,
    pub priority: i32,
    /// This run's number: previous failures + 1.
    pub attempt: u32,
    pub lease_token: LeaseToken,
    pub lease_expires_at_ms: UnixMs,
    pub created_at_ms: UnixMs,
    /// When the job is deleted whatever its status, if ever.
    pub expires_at_ms: Option<UnixMs>,
    /// The job it was made for (a delivery's message).
    pub parent: Option<JobId>,
    /// The trace context it was enqueued with.
    pub traceparent: Option<String>,
    /// What started this run: its schedule, a replay, or an operator's run-now.
    pub trigger: Trigger,
    /// When it became ready (was due): the wait before this take started then.
    pub ready_at_ms: UnixMs,
    /// The jobs it waited for ([`NewJob::after`](crate::model::NewJob::after)), whose results
    /// its worker is handed.
    pub after: Vec<JobId>,
    /// How those jobs finished, filled by the engine (the store leaves it empty); a parent no
    /// longer stored is left out.
    pub parents: Vec<ParentOutcome>,
}

/// A job a taken job waited for, as its worker is handed it: how it finished, and its result.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentOutcome {
    pub id: JobId,
    pub kind: String,
    pub status: crate::model::Status,
    pub result: Option<crate::model::JobResult>,
}

/// A worker's hold on a job: its id, and the lease token it was given when it took the job.
/// Only the current lease's holder may heartbeat, complete or fail a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub id: JobId,
    pub lease: LeaseToken,
}
