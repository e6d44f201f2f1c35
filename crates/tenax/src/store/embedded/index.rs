//! The in-memory indexes of the embedded store: which jobs are ready (by queue, priority and
//! age), which are scheduled (by time), which are leased (by expiry), and which are finished (by
//! finish time, for retention). Rebuilt from disk at start-up; the disk is the truth.
//!
//! Invariant: every live job has exactly one [`Entry`], and it sits in exactly the one ordered set
//! that matches its effective status (ready, scheduled, leased or finished).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::clock::UnixMs;
use crate::model::{JobId, Status};

/// A lease on an in-flight job: who may complete it, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Changes on every take, so an ack from a worker whose lease expired is recognised.
    pub token: u64,
    pub expires_at_ms: UnixMs,
    /// The streaming connection that holds the lease, if any (its jobs return to ready when it
    /// closes).
    pub stream: Option<u64>,
}

/// What the index knows of one job: enough to order and move it without reading the disk.
#[derive(Debug, Clone)]
pub struct Entry {
    pub queue: Arc<str>,
    pub priority: i32,
    pub status: Status,
    /// Scheduled: due time. Finished: finish time. Otherwise unused.
    pub at_ms: UnixMs,
    pub lease: Option<Lease>,
    pub unique_key: Option<Box<str>>,
}

/// Ordering key of the ready set of one queue: highest priority first, then lowest id (FIFO).
type ReadyKey = (Reverse<i32>, JobId);

#[derive(Debug, Default)]
pub struct Index {
    entries: HashMap<JobId, Entry>,
    ready: HashMap<Arc<str>, BTreeSet<ReadyKey>>,
    scheduled: BTreeSet<(UnixMs, JobId)>,
    leased: BTreeSet<(UnixMs, JobId)>,
    finished: BTreeSet<(UnixMs, JobId)>,
    unique: HashMap<(Arc<str>, Box<str>), JobId>,
    counts: HashMap<Arc<str>, [u64; 5]>,
    /// Interned queue names, so that 200 000 jobs of one queue share one allocation.
    names: HashMap<Box<str>, Arc<str>>,
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

    pub fn get(&self, id: JobId) -> Option<&Entry> {
        self.entries.get(&id)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn unique(&self, queue: &str, key: &str) -> Option<JobId> {
        let queue = self.names.get(queue)?;
        self.unique.get(&(queue.clone(), Box::from(key))).copied()
    }

    /// Adds a job in its status. A scheduled job whose time has come is added as ready.
    pub fn insert(&mut self, id: JobId, mut entry: Entry, now_ms: UnixMs) {
        if entry.status == Status::Scheduled && entry.at_ms <= now_ms {
            entry.status = Status::Ready;
        }
        if let Some(key) = &entry.unique_key {
            if !entry.status.is_finished() {
                self.unique.insert((entry.queue.clone(), key.clone()), id);
            }
        }
        self.place(id, &entry);
        self.entries.insert(id, entry);
    }

    /// Removes a job entirely (delete, purge).
    pub fn remove(&mut self, id: JobId) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        self.unplace(id, &entry);
        if let Some(key) = &entry.unique_key {
            let k = (entry.queue.clone(), key.clone());
            if self.unique.get(&k) == Some(&id) {
                self.unique.remove(&k);
            }
        }
        Some(entry)
    }

    /// Moves a job to a new status. `at_ms` is the due time (scheduled), the lease expiry
    /// (in flight) or the finish time (completed, dead).
    pub fn transition(&mut self, id: JobId, status: Status, at_ms: UnixMs, lease: Option<Lease>) {
        let Some(mut entry) = self.entries.remove(&id) else { return };
        self.unplace(id, &entry);
        entry.status = status;
        entry.at_ms = at_ms;
        entry.lease = lease;
        if status.is_finished() {
            if let Some(key) = &entry.unique_key {
                let k = (entry.queue.clone(), key.clone());
                if self.unique.get(&k) == Some(&id) {
                    self.unique.remove(&k);
                }
            }
        } else if let Some(key) = &entry.unique_key {
            self.unique.insert((entry.queue.clone(), key.clone()), id);
        }
        self.place(id, &entry);
        self.entries.insert(id, entry);
    }

    fn place(&mut self, id: JobId, entry: &Entry) {
        self.counts.entry(entry.queue.clone()).or_default()[slot(entry.status)] += 1;
        match entry.status {
            Status::Ready => {
                self.ready
                    .entry(entry.queue.clone())
                    .or_default()
                    .insert((Reverse(entry.priority), id));
            }
            Status::Scheduled => {
                self.scheduled.insert((entry.at_ms, id));
            }
            Status::InFlight => {
                let expires = entry.lease.map_or(entry.at_ms, |l| l.expires_at_ms);
                self.leased.insert((expires, id));
            }
            Status::Completed | Status::Dead => {
                self.finished.insert((entry.at_ms, id));
            }
        }
    }

    fn unplace(&mut self, id: JobId, entry: &Entry) {
        if let Some(counts) = self.counts.get_mut(&entry.queue) {
            counts[slot(entry.status)] = counts[slot(entry.status)].saturating_sub(1);
        }
        match entry.status {
            Status::Ready => {
                if let Some(set) = self.ready.get_mut(&entry.queue) {
                    set.remove(&(Reverse(entry.priority), id));
                }
            }
            Status::Scheduled => {
                self.scheduled.remove(&(entry.at_ms, id));
            }
            Status::InFlight => {
                let expires = entry.lease.map_or(entry.at_ms, |l| l.expires_at_ms);
                self.leased.remove(&(expires, id));
            }
            Status::Completed | Status::Dead => {
                self.finished.remove(&(entry.at_ms, id));
            }
        }
    }

    /// Up to `max` ready jobs across `queues`, highest priority first, then oldest; paused queues
    /// are skipped by the caller.
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
        self.scheduled.range(..=(now_ms, JobId::MAX)).take(max).map(|(_, id)| *id).collect()
    }

    /// The earliest scheduled time, to know how long the scheduler may sleep.
    pub fn next_due(&self) -> Option<UnixMs> {
        self.scheduled.first().map(|(at, _)| *at)
    }

    /// Leases that expired at or before `now_ms`, at most `max`.
    pub fn expired(&self, now_ms: UnixMs, max: usize) -> Vec<JobId> {
        self.leased.range(..=(now_ms, JobId::MAX)).take(max).map(|(_, id)| *id).collect()
    }

    pub fn next_expiry(&self) -> Option<UnixMs> {
        self.leased.first().map(|(at, _)| *at)
    }

    /// Finished jobs of `status` that finished at or before `before_ms`, at most `max`.
    pub fn finished_before(&self, before_ms: UnixMs, max: usize) -> Vec<(JobId, Status)> {
        self.finished
            .range(..=(before_ms, JobId::MAX))
            .filter_map(|(_, id)| self.entries.get(id).map(|e| (*id, e.status)))
            .take(max)
            .collect()
    }

    /// Jobs leased through a streaming connection.
    pub fn leased_by_stream(&self, stream: u64) -> Vec<JobId> {
        self.leased
            .iter()
            .filter(|(_, id)| {
                self.entries.get(id).and_then(|e| e.lease).is_some_and(|l| l.stream == Some(stream))
            })
            .map(|(_, id)| *id)
            .collect()
    }

    /// Counts per queue, in the order of [`Status::ALL`].
    pub fn counts(&self) -> impl Iterator<Item = (&str, [u64; 5])> {
        self.counts.iter().map(|(q, c)| (&**q, *c))
    }

    pub fn ids(&self) -> impl Iterator<Item = (&JobId, &Entry)> {
        self.entries.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: &mut Index, queue: &str, priority: i32, status: Status, at_ms: u64) -> Entry {
        Entry { queue: index.intern(queue), priority, status, at_ms, lease: None, unique_key: None }
    }

    #[test]
    fn ready_order_is_priority_then_fifo_across_queues() {
        let mut index = Index::default();
        for (id, queue, priority) in [(1, "a", 0), (2, "b", 5), (3, "a", 5), (4, "b", 0), (5, "c", 9)] {
            let e = entry(&mut index, queue, priority, Status::Ready, 0);
            index.insert(id, e, 0);
        }
        let queues = [index.intern("a"), index.intern("b")];
        assert_eq!(index.peek_ready(&queues, 10), [2, 3, 1, 4]);
        assert_eq!(index.peek_ready(&queues, 2), [2, 3]);
    }

    #[test]
    fn scheduled_jobs_due_in_the_past_are_ready_on_insert() {
        let mut index = Index::default();
        let past = entry(&mut index, "q", 0, Status::Scheduled, 50);
        let future = entry(&mut index, "q", 0, Status::Scheduled, 500);
        index.insert(1, past, 100);
        index.insert(2, future, 100);
        assert_eq!(index.get(1).map(|e| e.status), Some(Status::Ready));
        assert_eq!(index.due(499, 10), Vec::<JobId>::new());
        assert_eq!(index.due(500, 10), [2]);
        index.transition(2, Status::Ready, 500, None);
        let q = [index.intern("q")];
        assert_eq!(index.peek_ready(&q, 10), [1, 2]);
        let counts: Vec<_> = index.counts().collect();
        assert_eq!(counts, [("q", [0, 2, 0, 0, 0])]);
    }

    #[test]
    fn leases_and_removal_keep_sets_consistent() {
        let mut index = Index::default();
        let e = entry(&mut index, "q", 0, Status::Ready, 0);
        index.insert(7, e, 0);
        let lease = Lease { token: 1, expires_at_ms: 1_000, stream: Some(3) };
        index.transition(7, Status::InFlight, 1_000, Some(lease));
        assert_eq!(index.expired(999, 10), Vec::<JobId>::new());
        assert_eq!(index.expired(1_000, 10), [7]);
        assert_eq!(index.leased_by_stream(3), [7]);
        index.transition(7, Status::Completed, 2_000, None);
        assert_eq!(index.expired(5_000, 10), Vec::<JobId>::new());
        assert_eq!(index.finished_before(2_000, 10), [(7, Status::Completed)]);
        assert!(index.remove(7).is_some());
        assert!(index.is_empty());
        assert_eq!(index.finished_before(u64::MAX, 10), Vec::new());
    }
}
