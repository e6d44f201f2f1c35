//! [`Job`]: what a handler is given.

use std::time::SystemTime;

use super::shutdown::Shutdown;
use crate::model::{Lease, ParentResult, TakenJob};

/// A job handed to a handler, with its payload read as `T`.
///
/// `lease_expires_at` is the lease of the take: the worker's heartbeats extend it while the
/// handler runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Job<T> {
    pub id: u64,
    pub queue: String,
    /// The job's type: which handler runs it.
    pub kind: String,
    pub payload: T,
    pub priority: i32,
    /// 1 for the first run; failures so far + 1.
    pub attempt: u32,
    pub lease_token: u64,
    pub lease_expires_at: SystemTime,
    pub created_at: SystemTime,
    /// The W3C trace context the job carries, when the server hands one out.
    pub traceparent: Option<String>,
    /// The jobs it waited for, with how each finished and its result.
    pub parents: Vec<ParentResult>,
    stopping: Shutdown,
    /// Set when a heartbeat answers that the job was cancelled.
    cancelled: Shutdown,
}

impl<T> Job<T> {
    pub(crate) fn new(
        taken: TakenJob,
        payload: T,
        stopping: Shutdown,
        cancelled: Shutdown,
    ) -> Self {
        Self {
            id: taken.id,
            queue: taken.queue,
            kind: taken.kind,
            payload,
            priority: taken.priority,
            attempt: taken.attempt,
            lease_token: taken.lease_token,
            lease_expires_at: taken.lease_expires_at,
            created_at: taken.created_at,
            traceparent: taken.traceparent,
            parents: taken.parents,
            stopping,
            cancelled,
        }
    }

    /// The result of parent `id` read as `R`, if it is one of the jobs this one waited for and
    /// has a result.
    pub fn parent_result<R: serde::de::DeserializeOwned>(
        &self,
        id: u64,
    ) -> Option<Result<R, serde_json::Error>> {
        let parent = self.parents.iter().find(|p| p.id == id)?;
        parent
            .result
            .as_ref()
            .map(|r| serde_json::from_str(r.get()))
    }

    /// The job and lease token, to report on it by hand with the [`Client`](crate::Client).
    pub fn lease(&self) -> Lease {
        Lease {
            id: self.id,
            lease_token: self.lease_token,
        }
    }

    /// Whether the worker is shutting down: a long handler may give up early (returning an
    /// error such as a snooze) rather than be stopped at the shutdown deadline.
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_set()
    }

    /// Resolves when the worker starts shutting down.
    pub async fn stopping(&self) {
        self.stopping.clone().wait().await;
    }

    /// Whether the job was cancelled while it ran (`POST /api/jobs/{id}/cancel`), as the
    /// worker learnt on a heartbeat. A handler should stop soon: whatever it then returns, the
    /// worker reports a failure, and the server finishes the job as cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.is_set()
    }

    /// Resolves when the job is cancelled (learnt on a heartbeat: within the worker's
    /// `heartbeat_every`); never, if it is not. For a `select!` against the handler's work.
    pub async fn cancelled(&self) {
        self.cancelled.clone().wait_set().await;
    }
}

impl<T> From<&Job<T>> for Lease {
    fn from(job: &Job<T>) -> Self {
        job.lease()
    }
}
