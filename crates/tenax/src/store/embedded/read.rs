//! Reads: one job, a filtered page of jobs, counts, peeks, a delivery's attempts. Memory gives
//! status and leases; disk gives the rest.

use async_trait::async_trait;
use redb::ReadableDatabase;

use super::index::{Entry, Index};
use super::tables::{ATTEMPTS, ERRORS, POLICIES, StoredBody};
use super::{EmbeddedStore, fault};
use crate::clock::UnixMs;
use crate::model::{Attempt, ErrorEntry, Held, Job, JobId, JobState, NewJob, Status};
use crate::store::{
    Backlog, JobFilter, JobPeek, JobReads, Order, Page, QueueCounts, Selection, StoreError,
    from_json_bytes,
};

/// What memory knows of a job at one moment.
struct Snapshot {
    state: JobState,
    expires_at_ms: Option<UnixMs>,
    held: Option<Held>,
}

fn snapshot(index: &Index, id: JobId) -> Option<Snapshot> {
    let entry = index.get(id)?;
    Some(Snapshot {
        state: entry.state.clone(),
        expires_at_ms: entry.expires_at_ms,
        held: held_of(entry),
    })
}

fn held_of(entry: &Entry) -> Option<Held> {
    let lease = entry
        .lease
        .filter(|_| entry.state.status == Status::InFlight)?;
    Some(Held {
        claim: lease.claim,
        lease_expires_at_ms: lease.expires_at_ms,
    })
}

/// What a peek shows of an entry.
pub(super) fn peek_of(entry: &Entry) -> JobPeek {
    let held = held_of(entry);
    JobPeek {
        queue: entry.queue.clone(),
        status: entry.state.status,
        failures: entry.state.failures,
        expires_at_ms: entry.expires_at_ms,
        claim: held.and_then(|h| h.claim),
        lease_expires_at_ms: held.map(|h| h.lease_expires_at_ms),
    }
}

/// Whether an entry passes the conditions of `filter` that memory can judge (all but type and
/// origin, which need the body).
fn passes(filter: &JobFilter, entry: &Entry) -> bool {
    let state = &entry.state;
    filter.queue.as_deref().is_none_or(|q| *entry.queue == *q)
        && filter.status.is_none_or(|s| state.status == s)
        && filter
            .finished_since_ms
            .is_none_or(|since| state.finished_at_ms.is_some_and(|at| at >= since))
        && filter.live_at_ms.is_none_or(|now| {
            !state.status.is_finished() && entry.expires_at_ms.is_none_or(|at| at > now)
        })
        && !(filter.not_scheduled && state.status == Status::Scheduled)
        && filter.claimed_at.is_none_or(|(claimed, now)| {
            let held =
                held_of(entry).is_some_and(|h| h.claim.is_some() && h.lease_expires_at_ms > now);
            held == claimed
        })
}

/// Whether a job's body passes the conditions of `filter` that need it.
fn body_passes(filter: &JobFilter, kind: &str, origin: Option<&str>) -> bool {
    filter.kind.as_deref().is_none_or(|k| k == kind)
        && filter
            .not_origin
            .as_deref()
            .is_none_or(|o| origin != Some(o))
}

fn needs_body(filter: &JobFilter) -> bool {
    filter.kind.is_some() || filter.not_origin.is_some()
}

impl EmbeddedStore {
    /// A whole job: memory's snapshot of it with its body, policy and errors from disk.
    fn read_job(&self, id: JobId, snapshot: Snapshot) -> Result<Option<Job>, StoreError> {
        let Some(Some(body)) = self.read_body(&[id])?.pop() else {
            return Ok(None);
        };
        let what = "reading a job";
        let tx = self.db.begin_read().map_err(fault(what))?;
        let policies = tx.open_table(POLICIES).map_err(fault(what))?;
        let policy = match policies.get(id.0).map_err(fault(what))? {
            Some(bytes) => Some(from_json_bytes("job policy", bytes.value())?),
            None => None,
        };
        let errors_table = tx.open_table(ERRORS).map_err(fault(what))?;
        let mut errors: Vec<ErrorEntry> = Vec::new();
        for row in errors_table
            .range((id.0, 0)..=(id.0, u32::MAX))
            .map_err(fault(what))?
        {
            let (_, bytes) = row.map_err(fault(what))?;
            errors.push(from_json_bytes("job error", bytes.value())?);
        }
        let StoredBody {
            queue,
            kind,
            payload,
            priority,
            unique_key,
            created_at_ms,
            expires_at_ms: _,
            origin,
            parent,
            traceparent,
        } = body;
        Ok(Some(Job {
            id,
            spec: NewJob {
                queue,
                kind,
                payload,
                priority,
                run_at_ms: snapshot.state.run_at_ms,
                policy,
                unique_key,
                created_at_ms,
                // Memory's: a claim may have kept the job alive longer.
                expires_at_ms: snapshot.expires_at_ms,
                origin,
                parent,
                traceparent,
            },
            state: snapshot.state,
            errors,
            held: snapshot.held,
        }))
    }

    /// Job `id` as it is now, read while the caller holds the lock on `index`.
    pub(super) fn load_job(&self, index: &Index, id: JobId) -> Result<Option<Job>, StoreError> {
        match snapshot(index, id) {
            Some(snapshot) => self.read_job(id, snapshot),
            None => Ok(None),
        }
    }

    /// Ids matching a selection, in id order (type filters read bodies). Called under the lock.
    pub(super) fn select(
        &self,
        index: &Index,
        selection: &Selection,
    ) -> Result<Vec<JobId>, StoreError> {
        let filter = &selection.filter;
        let matches = |id: JobId| index.get(id).is_some_and(|e| passes(filter, e));
        let mut ids: Vec<JobId> = match &selection.ids {
            Some(ids) => ids.iter().copied().filter(|id| matches(*id)).collect(),
            None => index
                .entries()
                .filter(|(_, e)| passes(filter, e))
                .map(|(id, _)| *id)
                .collect(),
        };
        if needs_body(filter) {
            let bodies = self.read_body(&ids)?;
            let mut keep = bodies.iter().map(|b| {
                b.as_ref()
                    .is_some_and(|b| body_passes(filter, &b.kind, b.origin.as_deref()))
            });
            ids.retain(|_| keep.next().unwrap_or(false));
        }
        ids.sort_unstable();
        Ok(ids)
    }
}

#[async_trait]
impl JobReads for EmbeddedStore {
    async fn get_job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let Some(snapshot) = snapshot(&self.inner.lock().index, id) else {
            return Ok(None);
        };
        self.read_job(id, snapshot)
    }

    /// Memory filters by everything but type and origin; those need the body, so a page
    /// filtered by them reads bodies until it is full.
    async fn list_jobs(&self, filter: &JobFilter, page: Page) -> Result<Vec<Job>, StoreError> {
        let mut ids: Vec<JobId> = {
            let inner = self.inner.lock();
            inner
                .index
                .entries()
                .filter(|(id, e)| {
                    page.after.is_none_or(|after| match page.order {
                        Order::Ascending => **id > after,
                        Order::Descending => **id < after,
                    }) && passes(filter, e)
                })
                .map(|(id, _)| *id)
                .collect()
        };
        match page.order {
            Order::Ascending => ids.sort_unstable(),
            Order::Descending => ids.sort_unstable_by(|a, b| b.cmp(a)),
        }
        let mut jobs = Vec::with_capacity(page.limit.min(ids.len()));
        for id in ids {
            if jobs.len() >= page.limit {
                break;
            }
            if let Some(job) = self.get_job(id).await? {
                if body_passes(filter, &job.spec.kind, job.spec.origin.as_deref()) {
                    jobs.push(job);
                }
            }
        }
        Ok(jobs)
    }

    async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        let selection = Selection {
            ids: None,
            filter: filter.clone(),
        };
        if needs_body(filter) {
            let inner = self.inner.lock();
            return Ok(self.select(&inner.index, &selection)?.len() as u64);
        }
        let inner = self.inner.lock();
        Ok(inner
            .index
            .entries()
            .filter(|(_, e)| passes(filter, e))
            .count() as u64)
    }

    async fn peek_jobs(&self, ids: &[JobId]) -> Result<Vec<Option<JobPeek>>, StoreError> {
        let inner = self.inner.lock();
        Ok(ids
            .iter()
            .map(|id| inner.index.get(*id).map(peek_of))
            .collect())
    }

    async fn counts(&self) -> Result<Vec<QueueCounts>, StoreError> {
        let inner = self.inner.lock();
        let mut counts: Vec<QueueCounts> = inner
            .index
            .counts()
            .filter(|(_, c)| c.iter().any(|n| *n > 0))
            .map(|(queue, c)| QueueCounts::from_slots(queue, c))
            .collect();
        counts.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(counts)
    }

    async fn queue_counts(&self, queue: &str) -> Result<QueueCounts, StoreError> {
        let inner = self.inner.lock();
        Ok(QueueCounts::from_slots(
            queue,
            inner.index.queue_counts(queue),
        ))
    }

    async fn attempts(&self, id: JobId) -> Result<Vec<Attempt>, StoreError> {
        let what = "reading a delivery's attempts";
        let tx = self.db.begin_read().map_err(fault(what))?;
        let table = tx.open_table(ATTEMPTS).map_err(fault(what))?;
        let mut attempts = Vec::new();
        for row in table
            .range((id.0, 0)..=(id.0, u32::MAX))
            .map_err(fault(what))?
        {
            let (_, bytes) = row.map_err(fault(what))?;
            attempts.push(from_json_bytes("delivery attempt", bytes.value())?);
        }
        Ok(attempts)
    }

    /// From memory: the counts the index keeps, and the head of each queue's ready set.
    async fn backlog(&self) -> Result<Vec<Backlog>, StoreError> {
        let inner = self.inner.lock();
        Ok(inner
            .index
            .counts()
            .filter(|(_, c)| c[0] + c[1] + c[2] + c[4] > 0)
            .map(|(queue, [scheduled, ready, in_flight, _, dead])| {
                let first_ready_since_ms = inner
                    .index
                    .queue_name(queue)
                    .and_then(|name| inner.index.peek_ready(&[name], 1).pop())
                    .and_then(|id| inner.index.get(id))
                    .map(|entry| entry.state.run_at_ms);
                Backlog {
                    queue: queue.to_owned(),
                    scheduled,
                    ready,
                    in_flight,
                    dead,
                    first_ready_since_ms,
                }
            })
            .collect())
    }
}
