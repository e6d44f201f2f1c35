//! Reads: one job, a filtered page of jobs, counts, peeks, a delivery's attempts. Memory gives
//! the state of every job that can still change; disk gives the rest, and completed jobs
//! (`history`).

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Attempt, Backlog, ErrorEntry, Held, Job, JobFilter, JobId, JobPeek, JobState, NewJob, Order,
    Page, QueueCounts, Searched, Selection, Status, TextQuery,
};
use tenax_core::store::{JobReads, StoreError, from_json_bytes};

use super::history::{CompletedJob, may_hold_completed};
use super::index::{Entry, Index};
use super::tables::{ATTEMPTS, CHILDREN, ERRORS, JOBS, POLICIES, StoredBody};
use super::{EmbeddedStore, Inner, fault};

/// What memory (or, for a completed job, disk) knows of a job at one moment.
pub(super) struct Snapshot {
    state: JobState,
    expires_at_ms: Option<UnixMs>,
    held: Option<Held>,
}

fn snapshot(entry: &Entry) -> Snapshot {
    Snapshot {
        state: entry.state(),
        expires_at_ms: entry.expires_at_ms(),
        held: held_of(entry),
    }
}

fn held_of(entry: &Entry) -> Option<Held> {
    let lease = entry.lease().filter(|_| entry.status == Status::InFlight)?;
    Some(Held {
        claim: lease.claim,
        lease_expires_at_ms: lease.expires_at_ms,
    })
}

/// What a peek shows of an entry.
pub(super) fn peek_of(index: &Index, entry: &Entry) -> JobPeek {
    let held = held_of(entry);
    JobPeek {
        queue: index.name(entry.queue).clone(),
        status: entry.status,
        failures: entry.failures,
        expires_at_ms: entry.expires_at_ms(),
        claim: held.and_then(|h| h.claim),
        lease_expires_at_ms: held.map(|h| h.lease_expires_at_ms),
    }
}

/// What a peek shows of a completed job on disk.
fn peek_of_completed(job: &CompletedJob) -> JobPeek {
    JobPeek {
        queue: job.body.queue.as_str().into(),
        status: Status::Completed,
        failures: job.state.failures,
        expires_at_ms: job.body.expires_at_ms,
        claim: None,
        lease_expires_at_ms: None,
    }
}

/// Whether an entry passes the conditions of `filter` that memory can judge (all but type and
/// origin, which need the body).
pub(super) fn passes(index: &Index, filter: &JobFilter, entry: &Entry) -> bool {
    filter
        .queue
        .as_deref()
        .is_none_or(|q| **index.name(entry.queue) == *q)
        && filter.status.is_none_or(|s| entry.status == s)
        // A type memory cannot tell (an unnamed one) passes here, for the body to decide.
        && filter
            .kind
            .as_deref()
            .is_none_or(|k| index.is_kind(entry, k) != Some(false))
        && filter.finished_since_ms.is_none_or(|since| {
            entry
                .finished_at_ms()
                .is_some_and(|at| entry.status.is_finished() && at >= since)
        })
        && filter.live_at_ms.is_none_or(|now| {
            !entry.status.is_finished() && entry.expires_at_ms().is_none_or(|at| at > now)
        })
        && !(filter.not_scheduled && entry.status == Status::Scheduled)
        && filter.claimed_at.is_none_or(|(claimed, now)| {
            let held =
                held_of(entry).is_some_and(|h| h.claim.is_some() && h.lease_expires_at_ms > now);
            held == claimed
        })
}

/// Whether a job's body passes the conditions of `filter` that need it.
pub(super) fn body_passes(filter: &JobFilter, kind: &str, origin: Option<&str>) -> bool {
    filter.kind.as_deref().is_none_or(|k| k == kind)
        && filter
            .not_origin
            .as_deref()
            .is_none_or(|o| origin != Some(o))
}

fn needs_body(filter: &JobFilter) -> bool {
    filter.kind.is_some() || filter.not_origin.is_some()
}

/// Whether the jobs in memory that [`passes`] lets through must still have their bodies read:
/// for the origin, or a type memory does not know by name.
fn memory_needs_body(index: &Index, filter: &JobFilter) -> bool {
    filter.not_origin.is_some() || filter.kind.as_deref().is_some_and(|k| !index.knows_kind(k))
}

/// A job a page may show: from memory, or completed on disk.
enum Candidate {
    Memory(JobId, Snapshot),
    Completed(JobId, JobState),
}

impl Candidate {
    fn id(&self) -> JobId {
        match self {
            Self::Memory(id, _) | Self::Completed(id, _) => *id,
        }
    }
}

impl EmbeddedStore {
    /// The jobs of `queue` in memory, in id order. Called under the lock.
    pub(super) fn jobs_of_queue(&self, index: &Index, queue: &str) -> Vec<JobId> {
        match index.queue_ref(queue) {
            Some(queue) => index
                .entries()
                .filter(|(_, e)| e.queue == queue)
                .map(|(id, _)| id)
                .collect(),
            None => Vec::new(),
        }
    }

    /// A quick look at job `id` if it is completed on disk.
    pub(super) fn peek_completed(&self, id: JobId) -> Result<Option<JobPeek>, StoreError> {
        Ok(self.completed_job(id)?.as_ref().map(peek_of_completed))
    }

    /// A whole job: its snapshot with its body, policy and errors from disk.
    fn read_job(
        &self,
        id: JobId,
        snapshot: Snapshot,
        body: Option<StoredBody>,
    ) -> Result<Option<Job>, StoreError> {
        let body = match body {
            Some(body) => body,
            None => match self.read_body(&[id])?.pop() {
                Some(Some(body)) => body,
                _ => return Ok(None),
            },
        };
        let what = "reading a job";
        let tx = self.read_tx(what)?;
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
            payload_sealed,
            after,
            on_parent_dead,
            batch,
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
                payload_sealed,
                after,
                on_parent_dead,
                batch,
            },
            state: snapshot.state,
            errors,
            held: snapshot.held,
        }))
    }

    /// A completed job from disk, whole.
    fn read_completed(&self, job: CompletedJob) -> Result<Option<Job>, StoreError> {
        let snapshot = Snapshot {
            state: job.state,
            expires_at_ms: job.body.expires_at_ms,
            held: None,
        };
        self.read_job(job.id, snapshot, Some(job.body))
    }

    /// Job `id` as it is now, read while the caller holds the lock on `index`.
    pub(super) fn load_job(&self, index: &Index, id: JobId) -> Result<Option<Job>, StoreError> {
        match index.get(id) {
            Some(entry) => self.read_job(id, snapshot(entry), None),
            None => Ok(None),
        }
    }

    /// Ids matching a selection, in id order (type filters read bodies): jobs in memory, under
    /// the lock the caller holds, and completed ones on disk.
    pub(super) fn select(
        &self,
        inner: &Inner,
        selection: &Selection,
    ) -> Result<Vec<JobId>, StoreError> {
        let index = &inner.index;
        let filter = &selection.filter;
        let mut ids: Vec<JobId> = match &selection.ids {
            Some(ids) => {
                let mut found = Vec::new();
                for id in ids {
                    let passes = match index.get(*id) {
                        Some(entry) => passes(index, filter, entry),
                        None => self.completed_job(*id)?.is_some_and(|job| {
                            may_hold_completed(filter)
                                && filter.queue.as_deref().is_none_or(|q| q == job.body.queue)
                                && filter.finished_since_ms.is_none_or(|since| {
                                    job.state.finished_at_ms.is_some_and(|at| at >= since)
                                })
                        }),
                    };
                    if passes {
                        found.push(*id);
                    }
                }
                found
            }
            None => {
                let mut ids: Vec<JobId> = index
                    .entries()
                    .filter(|(_, e)| passes(index, filter, e))
                    .map(|(id, _)| id)
                    .collect();
                let queues = Self::completed_queues(inner, filter);
                let mut after = None;
                loop {
                    let page =
                        self.completed_page(&queues, filter, after, Order::Ascending, 10_000)?;
                    let Some((last, _)) = page.last() else { break };
                    after = Some(*last);
                    ids.extend(
                        page.iter()
                            .map(|(id, _)| *id)
                            .filter(|id| index.get(*id).is_none()),
                    );
                }
                ids
            }
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
        ids.dedup();
        Ok(ids)
    }

    /// A candidate, read whole (`None`: it went meanwhile).
    fn load_candidate(&self, candidate: Candidate) -> Result<Option<Job>, StoreError> {
        match candidate {
            Candidate::Memory(id, snapshot) => self.read_job(id, snapshot, None),
            Candidate::Completed(id, state) => match self.read_body(&[id])?.pop() {
                Some(Some(body)) => self.read_completed(CompletedJob { id, body, state }),
                _ => Ok(None),
            },
        }
    }

    /// The next `n` jobs past `after` in `order` that pass `filter`'s memory and state
    /// conditions, from memory and from the completed jobs on disk, merged; and whether there
    /// may be more.
    async fn candidates(
        &self,
        filter: &JobFilter,
        after: Option<JobId>,
        order: Order,
        n: usize,
    ) -> Result<(Vec<Candidate>, bool), StoreError> {
        let (memory, queues, submitted) = {
            let inner = self.inner.lock();
            let index = &inner.index;
            let memory: Vec<Candidate> = index
                .entries_after(after, order)
                .filter(|(_, e)| passes(index, filter, e))
                .take(n)
                .map(|(id, e)| Candidate::Memory(id, snapshot(e)))
                .collect();
            let queues = Self::completed_queues(&inner, filter);
            (memory, queues, self.writer.submitted())
        };
        // The candidates' bodies and errors are read from the file once it holds what memory
        // showed of them.
        self.writer.caught_up(submitted).await;
        let disk = self.completed_page(&queues, filter, after, order, n)?;
        let more = memory.len() == n || disk.len() == n;
        let mut merged: Vec<Candidate> = memory;
        let in_memory: std::collections::HashSet<JobId> =
            merged.iter().map(Candidate::id).collect();
        // A completion not yet evicted from memory may be on disk already: memory's copy shows.
        merged.extend(
            disk.into_iter()
                .filter(|(id, _)| !in_memory.contains(id))
                .map(|(id, state)| Candidate::Completed(id, state)),
        );
        match order {
            Order::Ascending => merged.sort_unstable_by_key(Candidate::id),
            Order::Descending => merged.sort_unstable_by_key(|c| std::cmp::Reverse(c.id())),
        }
        // The first `n` merged are each among the first `n` of their own source.
        merged.truncate(n);
        Ok((merged, more))
    }
}

#[async_trait]
impl JobReads for EmbeddedStore {
    async fn get_job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        let (snapshot, submitted) = {
            let inner = self.inner.lock();
            (inner.index.get(id).map(snapshot), self.writer.submitted())
        };
        // The state is memory's; its errors are read from the file once it holds them too.
        self.writer.caught_up(submitted).await;
        match snapshot {
            // A completion that was being written: the file holds it now, with its result
            // (which memory never holds).
            Some(snapshot) if snapshot.state.status == Status::Completed => {
                match self.completed_job(id)? {
                    Some(job) => self.read_completed(job),
                    None => self.read_job(id, snapshot, None),
                }
            }
            Some(snapshot) => self.read_job(id, snapshot, None),
            None => match self.completed_job(id)? {
                Some(job) => self.read_completed(job),
                None => Ok(None),
            },
        }
    }

    /// A page starts where the last ended (ordered maps, no scan of what came before); a page
    /// filtered by type or origin reads bodies until it is full.
    async fn list_jobs(&self, filter: &JobFilter, page: Page) -> Result<Vec<Job>, StoreError> {
        let mut jobs = Vec::with_capacity(page.limit.min(1_024));
        let mut after = page.after;
        let chunk = page.limit.clamp(16, 1_000);
        while jobs.len() < page.limit {
            let (candidates, more) = self.candidates(filter, after, page.order, chunk).await?;
            for candidate in candidates {
                after = Some(candidate.id());
                if let Some(job) = self.load_candidate(candidate)? {
                    if body_passes(filter, &job.spec.kind, job.spec.origin.as_deref()) {
                        jobs.push(job);
                        if jobs.len() >= page.limit {
                            break;
                        }
                    }
                }
            }
            if !more {
                break;
            }
        }
        Ok(jobs)
    }

    async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        let (in_memory, needs_body) = {
            let inner = self.inner.lock();
            let index = &inner.index;
            let ids: Vec<JobId> = index
                .entries()
                .filter(|(_, e)| passes(index, filter, e))
                .map(|(id, _)| id)
                .collect();
            (ids, memory_needs_body(index, filter))
        };
        let in_memory = if needs_body {
            self.read_body(&in_memory)?
                .iter()
                .flatten()
                .filter(|b| body_passes(filter, &b.kind, b.origin.as_deref()))
                .count() as u64
        } else {
            in_memory.len() as u64
        };
        Ok(in_memory + self.count_completed(filter)?)
    }

    /// Looks at candidates a chunk at a time (the lock is never held for the whole budget);
    /// bodies and errors are read from disk for each one looked at.
    async fn search_jobs(
        &self,
        filter: &JobFilter,
        text: &TextQuery,
        page: Page,
        budget: usize,
    ) -> Result<Searched, StoreError> {
        const CHUNK: usize = 256;
        let mut searched = Searched::default();
        let mut after = page.after;
        while searched.looked_at < budget && searched.jobs.len() < page.limit {
            let n = (budget - searched.looked_at).min(CHUNK);
            let (candidates, more) = self.candidates(filter, after, page.order, n).await?;
            let count = candidates.len();
            if count == 0 {
                searched.exhausted = true;
                break;
            }
            for (at, candidate) in candidates.into_iter().enumerate() {
                let id = candidate.id();
                after = Some(id);
                searched.looked_to = Some(id);
                searched.looked_at += 1;
                let Some(job) = self.load_candidate(candidate)? else {
                    continue;
                };
                if body_passes(filter, &job.spec.kind, job.spec.origin.as_deref())
                    && text.matches(job.spec.payload.get(), &job.errors)
                {
                    searched.jobs.push(job);
                    if searched.jobs.len() >= page.limit {
                        searched.exhausted = !more && at + 1 == count;
                        return Ok(searched);
                    }
                }
            }
            if !more {
                searched.exhausted = true;
                break;
            }
        }
        Ok(searched)
    }

    async fn children(&self, parents: &[JobId]) -> Result<Vec<(JobId, JobId)>, StoreError> {
        let what = "reading a workflow's edges";
        let tx = self.read_tx(what)?;
        let edges = tx.open_table(CHILDREN).map_err(fault(what))?;
        let jobs = tx.open_table(JOBS).map_err(fault(what))?;
        let mut parents = parents.to_vec();
        parents.sort_unstable();
        parents.dedup();
        let mut found = Vec::new();
        for parent in parents {
            for row in edges
                .range((parent.0, 0)..=(parent.0, u64::MAX))
                .map_err(fault(what))?
            {
                let (key, _) = row.map_err(fault(what))?;
                let child = key.value().1;
                if jobs.get(child).map_err(fault(what))?.is_some() {
                    found.push((parent, JobId(child)));
                }
            }
        }
        Ok(found)
    }

    async fn ready_since(&self, queues: &[String]) -> Result<Vec<Option<UnixMs>>, StoreError> {
        let inner = self.inner.lock();
        Ok(queues
            .iter()
            .map(|queue| {
                let head = inner.index.head_ready(queue)?;
                inner.index.get(head).map(|e| e.run_at_ms)
            })
            .collect())
    }

    async fn peek_jobs(&self, ids: &[JobId]) -> Result<Vec<Option<JobPeek>>, StoreError> {
        let peeks: Vec<Option<JobPeek>> = {
            let inner = self.inner.lock();
            ids.iter()
                .map(|id| inner.index.get(*id).map(|e| peek_of(&inner.index, e)))
                .collect()
        };
        let mut out = Vec::with_capacity(ids.len());
        for (id, peek) in ids.iter().zip(peeks) {
            out.push(match peek {
                Some(peek) => Some(peek),
                None => self.peek_completed(*id)?,
            });
        }
        Ok(out)
    }

    async fn counts(&self) -> Result<Vec<QueueCounts>, StoreError> {
        let mut counts: Vec<QueueCounts>;
        let mut completed;
        {
            let inner = self.inner.lock();
            completed = inner.completed.clone();
            counts = inner
                .index
                .counts()
                .map(|(queue, mut c)| {
                    c[3] += completed.remove(&**queue).unwrap_or(0);
                    (queue, c)
                })
                .filter(|(_, c)| c.iter().any(|n| *n > 0))
                .map(|(queue, c)| QueueCounts::from_slots(&**queue, c))
                .collect();
        }
        counts.extend(
            completed
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(queue, n)| QueueCounts::from_slots(queue, [0, 0, 0, n, 0, 0, 0])),
        );
        counts.sort_by(|a, b| a.queue.cmp(&b.queue));
        Ok(counts)
    }

    async fn queue_counts(&self, queue: &str) -> Result<QueueCounts, StoreError> {
        let inner = self.inner.lock();
        let mut slots = inner.index.queue_counts(queue);
        slots[3] += inner.completed.get(queue).copied().unwrap_or(0);
        Ok(QueueCounts::from_slots(queue, slots))
    }

    /// Every attempt whose end memory has shown (an attempt is logged in the commit that ends
    /// it, which memory shows when it is submitted).
    async fn attempts(&self, id: JobId) -> Result<Vec<Attempt>, StoreError> {
        let submitted = self.writer.submitted();
        self.writer.caught_up(submitted).await;
        let what = "reading a delivery's attempts";
        let tx = self.read_tx(what)?;
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

    /// From memory: the counts the index keeps.
    async fn backlog(&self) -> Result<Vec<Backlog>, StoreError> {
        let inner = self.inner.lock();
        Ok(inner
            .index
            .counts()
            .filter(|(_, c)| c[0] + c[1] + c[2] + c[4] + c[5] + c[6] > 0)
            .map(
                |(queue, [scheduled, ready, in_flight, _, dead, cancelled, waiting])| Backlog {
                    queue: queue.to_string(),
                    scheduled,
                    ready,
                    in_flight,
                    dead,
                    cancelled,
                    waiting,
                },
            )
            .collect())
    }
}
