//! Memory-only looks at jobs (see `store::peek`).

use super::EmbeddedStore;
use super::index::Entry;
use crate::model::{JobId, Status};
use crate::store::JobPeek;

impl EmbeddedStore {
    pub fn peek(&self, ids: &[JobId]) -> Vec<Option<JobPeek>> {
        let inner = self.inner.lock();
        ids.iter()
            .map(|id| inner.index.get(*id).map(peek_of))
            .collect()
    }

    pub fn peek_queue(&self, queue: &str) -> Vec<(JobId, JobPeek)> {
        let inner = self.inner.lock();
        // A queue that never had a job has no interned name: nothing to scan.
        if inner.index.queue_name(queue).is_none() {
            return Vec::new();
        }
        let mut jobs: Vec<(JobId, JobPeek)> = inner
            .index
            .entries()
            .filter(|(_, e)| *e.queue == *queue)
            .map(|(id, e)| (*id, peek_of(e)))
            .collect();
        jobs.sort_unstable_by_key(|(id, _)| *id);
        jobs
    }
}

fn peek_of(entry: &Entry) -> JobPeek {
    let lease = entry
        .lease
        .filter(|_| entry.state.status == Status::InFlight);
    JobPeek {
        queue: entry.queue.clone(),
        status: entry.state.status,
        failures: entry.state.failures,
        expires_at_ms: entry.expires_at_ms,
        claim: lease.and_then(|l| l.stream),
        lease_expires_at_ms: lease.map(|l| l.expires_at_ms),
    }
}
