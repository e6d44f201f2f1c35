//! Batches: a set of jobs with callback jobs, enqueued once when every member has finished
//! (`on_complete`), or only when every member completed (`on_success`).
//!
//! The rules every store keeps (docs/workflows.md, "Batches"):
//! - A member counts once, in the commit that finishes it: completed, dead (by a failure, a
//!   lease's end past its limits, a claim's end), or deleted (by an operator, a queue's
//!   deletion, a pop, its expiry). What counts as what is [`Outcome`]; how it counts is
//!   [`BatchCounts::finish`], the one place where an outcome is added.
//! - The commit that finishes the last member of a closed batch (or that closes a batch whose
//!   members have all finished) enqueues the callbacks and marks the batch finished, so a crash
//!   can neither lose nor repeat them.
//! - A dead member replayed while its batch is unfinished is pending again (its death no
//!   longer counts); once the batch has finished, nothing a member does changes it.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{JobId, JobTemplate, NewJob};
use crate::clock::UnixMs;

/// A batch's id: assigned by the store, increasing, never reused.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct BatchId(pub u64);

impl std::fmt::Display for BatchId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for BatchId {
    type Err = std::num::ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse().map(Self)
    }
}

/// How a member's run ended, as its batch counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    /// Dead: out of retries, or refused further ones.
    Dead,
    /// Deleted before it finished (by an operator, its queue's deletion, a pop, its expiry).
    Deleted,
    /// Cancelled: by an operator, or because a job it waited for did not complete.
    Cancelled,
}

impl Outcome {
    /// Its code in the stores (PostgreSQL's batch trigger speaks the same numbers).
    pub fn code(self) -> u8 {
        match self {
            Self::Completed => 0,
            Self::Dead => 1,
            Self::Deleted => 2,
            Self::Cancelled => 3,
        }
    }
}

/// Where a batch is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    /// Jobs may still be added.
    #[default]
    Open,
    /// No more jobs; the callbacks go once the pending members finish.
    Closed,
    /// Every member finished and the callbacks were enqueued.
    Finished,
}

/// A batch's members, by how far they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchCounts {
    /// Every member ever added.
    pub total: u64,
    /// Members not finished yet.
    pub pending: u64,
    pub completed: u64,
    pub dead: u64,
    /// Deleted (or expired) before they finished.
    pub deleted: u64,
    /// Cancelled before they finished.
    #[serde(default)]
    pub cancelled: u64,
}

impl BatchCounts {
    /// Counts a member's finish: the one place an outcome is counted, in every store.
    pub fn finish(&mut self, outcome: Outcome) {
        self.pending = self.pending.saturating_sub(1);
        let counter = match outcome {
            Outcome::Completed => &mut self.completed,
            Outcome::Dead => &mut self.dead,
            Outcome::Deleted => &mut self.deleted,
            Outcome::Cancelled => &mut self.cancelled,
        };
        *counter = counter.saturating_add(1);
    }

    /// A dead (or cancelled: `from`) member replayed: pending again.
    pub fn reopen(&mut self, from: Outcome) {
        let counter = match from {
            Outcome::Cancelled => &mut self.cancelled,
            _ => &mut self.dead,
        };
        *counter = counter.saturating_sub(1);
        self.pending = self.pending.saturating_add(1);
    }

    /// Every member finished by completing.
    pub fn succeeded(&self) -> bool {
        self.pending == 0 && self.completed == self.total
    }
}

/// What a batch is made with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewBatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Enqueued once every member has finished, whatever the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<JobTemplate>,
    /// Enqueued once every member has finished, only if every one completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<JobTemplate>,
    /// The queues of the members and callbacks: a scoped token reaches the batch only if it
    /// may touch every one.
    #[serde(default)]
    pub queues: Vec<String>,
}

/// A batch as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Batch {
    pub id: BatchId,
    /// Not flattened: a flattened payload (a raw JSON value) does not read back.
    pub spec: NewBatch,
    pub state: BatchState,
    pub counts: BatchCounts,
    pub created_at_ms: UnixMs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<UnixMs>,
    /// The callbacks' jobs, once enqueued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete_job: Option<JobId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success_job: Option<JobId>,
}

impl Batch {
    pub fn new(id: BatchId, spec: NewBatch, now_ms: UnixMs) -> Self {
        Self {
            id,
            spec,
            state: BatchState::Open,
            counts: BatchCounts::default(),
            created_at_ms: now_ms,
            finished_at_ms: None,
            on_complete_job: None,
            on_success_job: None,
        }
    }

    /// Adds `queues` to those the batch names (kept sorted, each once).
    pub fn add_queues<'a>(&mut self, queues: impl IntoIterator<Item = &'a str>) {
        for queue in queues {
            if let Err(at) = self.spec.queues.binary_search_by(|q| q.as_str().cmp(queue)) {
                self.spec.queues.insert(at, queue.to_owned());
            }
        }
    }

    /// Whether the batch is due to finish: closed, and no member pending.
    pub fn due(&self) -> bool {
        self.state == BatchState::Closed && self.counts.pending == 0
    }

    /// The callbacks to enqueue as the batch finishes at `now_ms`: `on_complete` always,
    /// `on_success` if every member completed. Each with its kind, to record its id.
    pub fn callbacks(&self, now_ms: UnixMs) -> Vec<(Callback, NewJob)> {
        let mut jobs = Vec::new();
        if let Some(template) = &self.spec.on_complete {
            jobs.push((Callback::Complete, self.callback_job(template, now_ms)));
        }
        if let (Some(template), true) = (&self.spec.on_success, self.counts.succeeded()) {
            jobs.push((Callback::Success, self.callback_job(template, now_ms)));
        }
        jobs
    }

    /// Marks the batch finished at `now_ms`, with the ids its callbacks got.
    pub fn finish(&mut self, now_ms: UnixMs, ids: &[(Callback, JobId)]) {
        self.state = BatchState::Finished;
        self.finished_at_ms = Some(now_ms);
        for (kind, id) in ids {
            match kind {
                Callback::Complete => self.on_complete_job = Some(*id),
                Callback::Success => self.on_success_job = Some(*id),
            }
        }
    }

    /// A callback's job: ready at once, its payload the batch's counts and the template's
    /// payload (`{"batch": {...}, "payload": ...}`, see [`CallbackPayload`]).
    fn callback_job(&self, template: &JobTemplate, now_ms: UnixMs) -> NewJob {
        let carried = CallbackPayload {
            batch: CallbackBatch {
                id: self.id,
                description: self.spec.description.as_deref(),
                total: self.counts.total,
                completed: self.counts.completed,
                dead: self.counts.dead,
                deleted: self.counts.deleted,
                cancelled: self.counts.cancelled,
                succeeded: self.counts.succeeded(),
            },
            payload: &template.payload,
        };
        let payload =
            serde_json::value::to_raw_value(&carried).unwrap_or_else(|_| template.payload.clone());
        NewJob {
            queue: template.queue.clone(),
            kind: template.kind.clone(),
            payload,
            priority: template.priority,
            run_at_ms: now_ms,
            policy: template.policy.clone(),
            unique_key: None,
            created_at_ms: now_ms,
            expires_at_ms: None,
            origin: None,
            parent: None,
            traceparent: None,
            payload_sealed: false,
            after: Vec::new(),
            on_parent_dead: Default::default(),
            batch: None,
        }
    }
}

/// Which callback a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Callback {
    Complete,
    Success,
}

/// A callback job's payload.
#[derive(Debug, Serialize)]
pub struct CallbackPayload<'a> {
    pub batch: CallbackBatch<'a>,
    /// The template's own payload, as given.
    pub payload: &'a RawValue,
}

/// The batch, as its callbacks see it when it finished.
#[derive(Debug, Serialize)]
pub struct CallbackBatch<'a> {
    pub id: BatchId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<&'a str>,
    pub total: u64,
    pub completed: u64,
    pub dead: u64,
    pub deleted: u64,
    pub cancelled: u64,
    /// Every member completed.
    pub succeeded: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(queue: &str) -> JobTemplate {
        JobTemplate {
            queue: queue.into(),
            kind: "done".into(),
            payload: RawValue::from_string(r#"{"n":1}"#.into()).unwrap(),
            priority: 0,
            policy: None,
            retry_limit: None,
        }
    }

    #[test]
    fn callbacks_carry_the_counts_and_success_needs_every_member_completed() {
        let spec = NewBatch {
            description: Some("d".into()),
            on_complete: Some(template("c")),
            on_success: Some(template("s")),
            queues: Vec::new(),
        };
        let mut batch = Batch::new(BatchId(7), spec, 10);
        batch.counts.total = 2;
        batch.counts.pending = 2;
        batch.counts.finish(Outcome::Completed);
        batch.counts.finish(Outcome::Dead);
        let jobs = batch.callbacks(20);
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].0, Callback::Complete);
        assert_eq!(
            jobs[0].1.payload.get(),
            r#"{"batch":{"id":7,"description":"d","total":2,"completed":1,"dead":1,"deleted":0,"cancelled":0,"succeeded":false},"payload":{"n":1}}"#
        );
        batch.counts.reopen(Outcome::Dead);
        batch.counts.finish(Outcome::Completed);
        assert_eq!(batch.callbacks(20).len(), 2);
    }
}
