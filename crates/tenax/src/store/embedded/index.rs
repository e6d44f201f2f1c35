//! The in-memory indexes of the embedded store, and the authoritative copy of every live job's
//! mutable state. Which jobs are ready (by queue, priority and age), scheduled (by time), leased
//! (by expiry) and finished (by finish time, for retention). Rebuilt from disk at start-up.
//!
//! Invariants: every live job has exactly one [`Entry`], which sits in exactly the one ordered
//! set matching its status; counts per queue and status match the entries; a unique key maps to
//! the one unfinished job that holds it.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use tenax_policy::RetryPolicy;

use super::listing::{KindId, Listing};
use crate::clock::UnixMs;
use crate::model::{ClaimId, JobId, JobState, LeaseToken, Status};

/// A lease on an in-flight job: who may complete it, and until when. Leases live only in memory:
/// after a crash every in-flight job is ready again, which is what at-least-once requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Changes on every take, so an ack from a worker whose lease was lost is recognised.
    pub token: LeaseToken,
    pub expires_at_ms: UnixMs,
    /// When the job was taken: heartbeats never extend the lease past this plus the most one
    /// attempt may run.
    pub taken_at_ms: UnixMs,
    /// The claim (or streaming take) the lease is held under, if any.
    pub claim: Option<ClaimId>,
}

/// What memory holds of one job: enough to order, move and decide on it without reading disk.
#[derive(Debug, Clone)]
pub struct Entry {
    pub queue: Arc<str>,
    /// The job's type, interned by [`Index::intern_kind`].
    pub kind: KindId,
    pub priority: i32,
    pub unique_key: Option<Box<str>>,
    pub state: JobState,
    /// Set while in flight.
    pub lease: Option<Lease>,
    /// The job's own policy, if it has one.
    pub policy: Option<Arc<RetryPolicy>>,
    /// When the job is deleted whatever its status. A claim may move it later in memory.
    pub expires_at_ms: Option<UnixMs>,
}

impl Entry {
    /// The lease of an in-flight entry. Every in-flight entry has one; a missing one reads as
    /// already expired, so the reaper returns the job rather than losing it.
    fn held_lease(&self) -> Lease {
        self.lease.unwrap_or(Lease {
            token: LeaseToken(0),
            expires_at_ms: 0,
            taken_at_ms: 0,
            claim: None,
        })
    }
}

/// Ordering key of the ready set of one queue: highest priority first, then lowest id (FIFO).
type ReadyKey = (Reverse<i32>, JobId);

#[derive(Debug, Default)]
pub struct Index {
    entries: HashMap<JobId, Entry>,
    ready: HashMap<Arc<str>, BTreeSet<ReadyKey>>,
    scheduled: BTreeSet<(UnixMs, JobId)>,
    leased: BTreeSet<(UnixMs, JobId)>,
    by_claim: HashMap<ClaimId, HashSet<JobId>>,
    finished: BTreeSet<(UnixMs, JobId)>,
    /// Jobs with an expiry, by expiry.
    expiring: BTreeSet<(UnixMs, JobId)>,
    unique: HashMap<(Arc<str>, Box<str>), JobId>,
    counts: HashMap<Arc<str>, [u64; 5]>,
    /// Interned queue names, so that 200 000 jobs of one queue share one allocation.
    names: HashMap<Box<str>, Arc<str>>,
    /// Every job by queue, type and status, in id order: listings and their counts.
    listing: Listing,
}

fn slot(status: Status) -> usize {
    match status {
        Status::Scheduled => 0,
        Status::Ready => 1,
        Status::InFlight => 2,
        Status::Completed => 3,
        Status::Dead => 4,
    }
}

impl Index {
    pub fn intern(&mut self, queue: &str) -> Arc<str> {
        if let Some(name) = self.names.get(queue) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(queue);
        self.names.insert(queue.into(), name.clone());
        name
    }

    /// The number of a job type (made on first sight).
    pub fn intern_kind(&mut self, kind: &str) -> KindId {
        self.listing.intern_kind(kind)
    }

    /// The listing index: jobs by queue, type and status.
    pub fn listing(&self) -> &Listing {
        &self.listing
    }

    /// The job a take of `queue` would hand out next, if one is ready.
    pub fn head_ready(&self, queue: &str) -> Option<JobId> {
        let queue = self.names.get(queue)?;
        self.ready.get(queue)?.first().map(|(_, id)| *id)
    }

    /// The interned name of a queue that has (or had) jobs.
    pub fn queue_name(&self, queue: &str) -> Option<Arc<str>> {
        self.names.get(queue).cloned()
    }

    pub fn get(&self, id: JobId) -> Option<&Entry> {
        self.entries.get(&id)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The unfinished job holding `key` in `queue`.
    pub fn unique(&self, queue: &str, key: &str) -> Option<JobId> {
        let queue = self.names.get(queue)?;
        self.unique.get(&(queue.clone(), Box::from(key))).copied()
    }

    /// Adds a job. A scheduled job whose time has come is added as ready.
    pub fn insert(&mut self, id: JobId, mut entry: Entry, now_ms: UnixMs) {
        if entry.state.status == Status::Scheduled && entry.state.run_at_ms <= now_ms {
            entry.state.status = Status::Ready;
        }
        self.place(id, &entry);
        self.entries.insert(id, entry);
    }

    /// Removes a job entirely (delete, purge).
    pub fn remove(&mut self, id: JobId) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        self.unplace(id, &entry);
        Some(entry)
    }

    /// Changes a job through `change`, keeping every set and count consistent. Returns the
    /// entry as changed.
    pub fn update(&mut self, id: JobId, change: impl FnOnce(&mut Entry)) -> Option<&Entry> {
        let mut entry = self.entries.remove(&id)?;
        self.unplace(id, &entry);
        change(&mut entry);
        if entry.state.status != Status::InFlight {
            entry.lease = None;
        }
        self.place(id, &entry);
        self.entries.insert(id, entry);
        self.entries.get(&id)
    }

    fn place(&mut self, id: JobId, entry: &Entry) {
        self.listing
            .add((entry.queue.clone(), entry.kind, entry.state.status), id);
        if let Some(at) = entry.expires_at_ms {
            self.expiring.insert((at, id));
        }
        self.counts.entry(entry.queue.clone()).or_default()[slot(entry.state.status)] += 1;
        if let Some(key) = &entry.unique_key {
            if !entry.state.status.is_finished() {
                self.unique.insert((entry.queue.clone(), key.clone()), id);
            }
        }
        match entry.state.status {
            Status::Ready => {
                self.ready
                    .entry(entry.queue.clone())
                    .or_default()
                    .insert((Reverse(entry.priority), id));
            }
            Status::Scheduled => {
                self.scheduled.insert((entry.state.run_at_ms, id));
            }
            Status::InFlight => {
                let lease = entry.held_lease();
                self.leased.insert((lease.expires_at_ms, id));
                if let Some(claim) = lease.claim {
                    self.by_claim.entry(claim).or_default().insert(id);
                }
            }
            Status::Completed | Status::Dead => {
                self.finished
                    .insert((entry.state.finished_at_ms.unwrap_or(0), id));
            }
        }
    }

    fn unplace(&mut self, id: JobId, entry: &Entry) {
        self.listing
            .remove(&(entry.queue.clone(), entry.kind, entry.state.status), id);
        if let Some(at) = entry.expires_at_ms {
            self.expiring.remove(&(at, id));
        }
        if let Some(counts) = self.counts.get_mut(&entry.queue) {
            let slot = slot(entry.state.status);
            counts[slot] = counts[slot].saturating_sub(1);
        }
        if let Some(key) = &entry.unique_key {
            let k = (entry.queue.clone(), key.clone());
            if self.unique.get(&k) == Some(&id) {
                self.unique.remove(&k);
            }
        }
        match entry.state.status {
            Status::Ready => {
                if let Some(set) = self.ready.get_mut(&entry.queue) {
                    set.remove(&(Reverse(entry.priority), id));
                }
            }
            Status::Scheduled => {
                self.scheduled.remove(&(entry.state.run_at_ms, id));
            }
            Status::InFlight => {
                let lease = entry.held_lease();
                self.leased.remove(&(lease.expires_at_ms, id));
                if let Some(claim) = lease.claim {
                    if let Some(set) = self.by_claim.get_mut(&claim) {
                        set.remove(&id);
                        if set.is_empty() {
                            self.by_claim.remove(&claim);
                        }
                    }
                }
            }
            Status::Completed | Status::Dead => {
                self.finished
                    .remove(&(entry.state.finished_at_ms.unwrap_or(0), id));
            }
        }
    }

    /// Up to `max` ready jobs across `queues`, highest priority first, then oldest.
    pub fn peek_ready(&self, queues: &[Arc<str>], max: usize) -> Vec<JobId> {
        let mut cursors: Vec<_> = queues
            .iter()
            .filter_map(|q| self.ready.get(q))
            .map(|set| set.iter().peekable())
            .collect();
        let mut out = Vec::with_capacity(max.min(1_024));
        while out.len() < max {
            // Merge the queues' ordered sets: take the best head each time.
            let best = cursors
                .iter_mut()
                .enumerate()
                .filter_map(|(i, c)| c.peek().map(|k| (**k, i)))
                .min();
            let Some((key, i)) = best else { break };
            cursors[i].next();
            out.push(key.1);
        }
        out
    }

    /// Scheduled jobs due at or before `now_ms`, at most `max`.
    pub fn due(&self, now_ms: UnixMs, max: usize) -> Vec<JobId> {
        self.scheduled
            .range(..=(now_ms, JobId(u64::MAX)))
            .take(max)
            .map(|(_, id)| *id)
            .collect()
    }

    /// The earliest scheduled time.
    pub fn next_due(&self) -> Option<UnixMs> {
        self.scheduled.first().map(|(at, _)| *at)
    }

    /// Leases that expired at or before `now_ms`, at most `max`.
    pub fn expired(&self, now_ms: UnixMs, max: usize) -> Vec<JobId> {
        self.leased
            .range(..=(now_ms, JobId(u64::MAX)))
            .take(max)
            .map(|(_, id)| *id)
            .collect()
    }

    /// The earliest lease expiry.
    pub fn next_expiry(&self) -> Option<UnixMs> {
        self.leased.first().map(|(at, _)| *at)
    }

    /// Jobs whose expiry is at or before `now_ms`, at most `max`.
    pub fn expired_jobs(&self, now_ms: UnixMs, max: usize) -> Vec<JobId> {
        self.expiring
            .range(..=(now_ms, JobId(u64::MAX)))
            .take(max)
            .map(|(_, id)| *id)
            .collect()
    }

    /// The earliest job expiry.
    pub fn next_job_expiry(&self) -> Option<UnixMs> {
        self.expiring.first().map(|(at, _)| *at)
    }

    /// Finished jobs that finished at or before `before_ms`, at most `max`, oldest first.
    pub fn finished_before(&self, before_ms: UnixMs, max: usize) -> Vec<(JobId, Status)> {
        self.finished
            .range(..=(before_ms, JobId(u64::MAX)))
            .filter_map(|(_, id)| self.entries.get(id).map(|e| (*id, e.state.status)))
            .take(max)
            .collect()
    }

    /// Jobs leased under a claim (or streaming take), in no order.
    pub fn held_by_claim(&self, claim: ClaimId) -> Vec<JobId> {
        self.by_claim
            .get(&claim)
            .map(|set| set.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Counts of one queue, in the order of [`Status::ALL`].
    pub fn queue_counts(&self, queue: &str) -> [u64; 5] {
        self.names
            .get(queue)
            .and_then(|name| self.counts.get(name))
            .copied()
            .unwrap_or_default()
    }

    /// Counts per queue, in the order of [`Status::ALL`].
    pub fn counts(&self) -> impl Iterator<Item = (&str, [u64; 5])> {
        self.counts.iter().map(|(q, c)| (&**q, *c))
    }

    pub fn entries(&self) -> impl Iterator<Item = (&JobId, &Entry)> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: &mut Index, queue: &str, priority: i32, status: Status, at_ms: u64) -> Entry {
        let mut state = JobState::new(at_ms, 0);
        state.status = status;
        Entry {
            queue: index.intern(queue),
            kind: 0,
            priority,
            unique_key: None,
            state,
            lease: None,
            policy: None,
            expires_at_ms: None,
        }
    }

    #[test]
    fn ready_order_is_priority_then_fifo_across_queues() {
        let mut index = Index::default();
        for (id, queue, priority) in [
            (1, "a", 0),
            (2, "b", 5),
            (3, "a", 5),
            (4, "b", 0),
            (5, "c", 9),
        ] {
            let e = entry(&mut index, queue, priority, Status::Ready, 0);
            index.insert(JobId(id), e, 0);
        }
        let queues = [index.intern("a"), index.intern("b")];
        assert_eq!(
            index.peek_ready(&queues, 10),
            [JobId(2), JobId(3), JobId(1), JobId(4)]
        );
        assert_eq!(index.peek_ready(&queues, 2), [JobId(2), JobId(3)]);
    }

    #[test]
    fn scheduled_jobs_due_in_the_past_are_ready_on_insert() {
        let mut index = Index::default();
        let past = entry(&mut index, "q", 0, Status::Scheduled, 50);
        let future = entry(&mut index, "q", 0, Status::Scheduled, 500);
        index.insert(JobId(1), past, 100);
        index.insert(JobId(2), future, 100);
        assert_eq!(
            index.get(JobId(1)).map(|e| e.state.status),
            Some(Status::Ready)
        );
        assert_eq!(index.due(499, 10), Vec::<JobId>::new());
        assert_eq!(index.due(500, 10), [JobId(2)]);
        index.update(JobId(2), |e| e.state.status = Status::Ready);
        let q = [index.intern("q")];
        assert_eq!(index.peek_ready(&q, 10), [JobId(1), JobId(2)]);
        let counts: Vec<_> = index.counts().collect();
        assert_eq!(counts, [("q", [0, 2, 0, 0, 0])]);
    }

    #[test]
    fn leases_unique_keys_and_removal_keep_sets_consistent() {
        let mut index = Index::default();
        let mut e = entry(&mut index, "q", 0, Status::Ready, 0);
        e.unique_key = Some("k".into());
        index.insert(JobId(7), e, 0);
        assert_eq!(index.unique("q", "k"), Some(JobId(7)));
        let lease = Lease {
            token: LeaseToken(1),
            expires_at_ms: 1_000,
            taken_at_ms: 0,
            claim: Some(ClaimId(3)),
        };
        index.update(JobId(7), |e| {
            e.state.status = Status::InFlight;
            e.lease = Some(lease);
        });
        assert_eq!(index.expired(999, 10), Vec::<JobId>::new());
        assert_eq!(index.expired(1_000, 10), [JobId(7)]);
        assert_eq!(index.held_by_claim(ClaimId(3)), [JobId(7)]);
        index.update(JobId(7), |e| {
            e.state.status = Status::Completed;
            e.state.finished_at_ms = Some(2_000);
        });
        assert_eq!(
            index.unique("q", "k"),
            None,
            "a finished job frees its unique key"
        );
        assert_eq!(index.held_by_claim(ClaimId(3)), Vec::<JobId>::new());
        assert_eq!(index.expired(5_000, 10), Vec::<JobId>::new());
        assert_eq!(
            index.finished_before(2_000, 10),
            [(JobId(7), Status::Completed)]
        );
        assert!(index.remove(JobId(7)).is_some());
        assert!(index.is_empty());
        assert_eq!(index.finished_before(u64::MAX, 10), Vec::new());
    }
}
