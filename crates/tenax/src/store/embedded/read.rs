//! Reads: one job, a filtered page of jobs, counts, peeks, a delivery's attempts. Memory gives
//! status and leases; disk gives the rest.

use async_trait::async_trait;
use redb::ReadableDatabase;

use std::sync::Arc;

use super::index::{Entry, Index};
use super::listing::Group;
use super::tables::{ATTEMPTS, ERRORS, POLICIES, StoredBody};
use super::{EmbeddedStore, fault};
use crate::clock::UnixMs;
use crate::model::{Attempt, ErrorEntry, Held, Job, JobId, JobState, NewJob, Status};
use crate::store::{
    JobFilter, JobPeek, JobReads, Order, Page, QueueCounts, Searched, Selection, StoreError,
    TextQuery, from_json_bytes,
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

/// Whether an entry passes the conditions of `filter` that memory can judge (all but origin,
/// which needs the body). Queue, type and status are those of the listing's groups, already
/// chosen by [`groups_of`]; the rest are judged here.
fn passes(filter: &JobFilter, entry: &Entry) -> bool {
    let state = &entry.state;
    filter
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
fn body_passes(filter: &JobFilter, origin: Option<&str>) -> bool {
    filter
        .not_origin
        .as_deref()
        .is_none_or(|o| origin != Some(o))
}

fn needs_body(filter: &JobFilter) -> bool {
    filter.not_origin.is_some()
}

/// Whether only the listing's groups decide (no condition is left to judge per job).
fn by_groups_alone(filter: &JobFilter) -> bool {
    filter.finished_since_ms.is_none()
        && filter.live_at_ms.is_none()
        && !filter.not_scheduled
        && filter.claimed_at.is_none()
        && filter.not_origin.is_none()
}

/// Which of the listing's groups (queue, type, status) `filter` keeps. `None`: none can match
/// (the type was never seen).
fn groups_of(index: &Index, filter: &JobFilter) -> Option<impl Fn(&Group) -> bool + use<>> {
    let kind = match &filter.kind {
        Some(kind) => Some(index.listing().kind_id(kind)?),
        None => None,
    };
    let queue: Option<Arc<str>> = filter.queue.as_deref().map(Arc::from);
    let status = filter.status;
    Some(move |(q, k, s): &Group| {
        queue.as_deref().is_none_or(|queue| **q == *queue)
            && kind.is_none_or(|kind| *k == kind)
            && status.is_none_or(|status| *s == status)
    })
}

/// Ids of the listing's groups `filter` keeps, looked at in `order` past `after`.
#[derive(Debug, Default)]
struct Looked {
    /// Those that pass the rest of `filter`: at most the `max` asked for.
    ids: Vec<JobId>,
    /// How many were looked at (at most the `budget` given).
    count: usize,
    /// The last one looked at.
    last: Option<JobId>,
    /// None is left past `last`.
    exhausted: bool,
}

/// Looks at the ids matching `filter`'s groups in `order` past `after`, keeping up to `max`
/// that pass the memory conditions, looking at no more than `budget`.
fn matching_ids(
    index: &Index,
    filter: &JobFilter,
    after: Option<JobId>,
    order: Order,
    max: usize,
    budget: usize,
) -> Looked {
    let Some(keep) = groups_of(index, filter) else {
        return Looked {
            exhausted: true,
            ..Looked::default()
        };
    };
    let mut looked = Looked::default();
    let mut ids = index.listing().ids(&keep, after, order).peekable();
    while looked.ids.len() < max && looked.count < budget {
        let Some(id) = ids.next() else { break };
        looked.count += 1;
        looked.last = Some(id);
        if index.get(id).is_some_and(|e| passes(filter, e)) {
            looked.ids.push(id);
        }
    }
    looked.exhausted = ids.peek().is_none();
    looked
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
        let mut ids: Vec<JobId> = match &selection.ids {
            Some(ids) => {
                let Some(keep) = groups_of(index, filter) else {
                    return Ok(Vec::new());
                };
                ids.iter()
                    .copied()
                    .filter(|id| {
                        index.get(*id).is_some_and(|e| {
                            keep(&(e.queue.clone(), e.kind, e.state.status)) && passes(filter, e)
                        })
                    })
                    .collect()
            }
            None => {
                matching_ids(
                    index,
                    filter,
                    None,
                    Order::Ascending,
                    usize::MAX,
                    usize::MAX,
                )
                .ids
            }
        };
        if needs_body(filter) {
            let bodies = self.read_body(&ids)?;
            let mut keep = bodies.iter().map(|b| {
                b.as_ref()
                    .is_some_and(|b| body_passes(filter, b.origin.as_deref()))
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

    /// The listing index gives the page's ids from its cursor on; memory judges the other
    /// conditions. Origin needs the body, so a page filtered by it reads bodies until it is
    /// full.
    async fn list_jobs(&self, filter: &JobFilter, page: Page) -> Result<Vec<Job>, StoreError> {
        let mut jobs = Vec::with_capacity(page.limit.min(1_024));
        let mut after = page.after;
        while jobs.len() < page.limit {
            let want = page.limit - jobs.len();
            let ids = {
                let inner = self.inner.lock();
                matching_ids(&inner.index, filter, after, page.order, want, usize::MAX).ids
            };
            let Some(last) = ids.last().copied() else {
                break;
            };
            after = Some(last);
            let fewer = ids.len() < want;
            for id in ids {
                if let Some(job) = self.get_job(id).await? {
                    if body_passes(filter, job.spec.origin.as_deref()) {
                        jobs.push(job);
                    }
                }
            }
            if fewer {
                break;
            }
        }
        Ok(jobs)
    }

    async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        let inner = self.inner.lock();
        if by_groups_alone(filter) {
            return Ok(match groups_of(&inner.index, filter) {
                Some(keep) => inner.index.listing().count(&keep),
                None => 0,
            });
        }
        let selection = Selection {
            ids: None,
            filter: filter.clone(),
        };
        Ok(self.select(&inner.index, &selection)?.len() as u64)
    }

    async fn search_jobs(
        &self,
        filter: &JobFilter,
        text: &TextQuery,
        page: Page,
        budget: usize,
    ) -> Result<Searched, StoreError> {
        let mut searched = Searched::default();
        // Ids in chunks, so that the lock is never held for the whole budget.
        const CHUNK: usize = 256;
        let mut after = page.after;
        loop {
            if searched.looked_at >= budget || searched.jobs.len() >= page.limit {
                break;
            }
            let room = (budget - searched.looked_at).min(CHUNK);
            let looked = {
                let inner = self.inner.lock();
                matching_ids(&inner.index, filter, after, page.order, usize::MAX, room)
            };
            let mut filled_at = None;
            for id in &looked.ids {
                if let Some(job) = self.get_job(*id).await? {
                    if body_passes(filter, job.spec.origin.as_deref())
                        && text.matches(job.spec.payload.get(), &job.errors)
                    {
                        searched.jobs.push(job);
                        if searched.jobs.len() >= page.limit {
                            filled_at = Some(*id);
                            break;
                        }
                    }
                }
            }
            match filled_at {
                // The page is full part-way: the rest of the chunk is looked at next time.
                Some(id) => {
                    searched.looked_at += 1 + looked.ids.iter().position(|i| *i == id).unwrap_or(0);
                    searched.looked_to = Some(id);
                    searched.exhausted = looked.exhausted && looked.last == Some(id);
                    break;
                }
                None => {
                    searched.looked_at += looked.count;
                    if looked.last.is_some() {
                        searched.looked_to = looked.last;
                    }
                    after = looked.last.or(after);
                    if looked.exhausted {
                        searched.exhausted = true;
                        break;
                    }
                }
            }
        }
        Ok(searched)
    }

    async fn ready_since(&self, queues: &[String]) -> Result<Vec<Option<UnixMs>>, StoreError> {
        let inner = self.inner.lock();
        Ok(queues
            .iter()
            .map(|queue| {
                let head = inner.index.head_ready(queue)?;
                inner.index.get(head).map(|e| e.state.run_at_ms)
            })
            .collect())
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
}
