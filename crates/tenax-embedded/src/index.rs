//! The in-memory indexes of the embedded store, and the authoritative copy of every live job's
//! mutable state. Which jobs are ready (by queue, priority and age), scheduled (by time), leased
//! (by expiry) and dead (by finish time, for retention). Rebuilt from disk at start-up.
//!
//! Memory holds the jobs that can still change: scheduled, ready, in flight, dead and cancelled
//! (dead and cancelled jobs can be replayed). A completed job is on disk only (`super::history`); its entry stays here
//! only from its completion until that is written, so that it is never out of sight.
//!
//! Invariants: every job in memory has exactly one [`Entry`], which sits in exactly the one
//! ordered set matching its status; counts per queue and status match the entries (the completed
//! jobs on disk are counted apart, and a completed entry leaves memory in the same step as its
//! job is counted there); a unique key maps to the one unfinished job that holds it.
//!
//! Size: an entry is 48 bytes (its type an interned number) and every map is ordered (B-trees), so the index grows a node at a
//! time: no request ever waits while a hash table of a million entries is rehashed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use tenax_core::clock::UnixMs;
use tenax_core::model::StatusSlots;
use tenax_core::model::dependency::ParentEnd;
use tenax_core::model::{ClaimId, JobId, JobState, LeaseToken, Order, Status, Trigger};
use tenax_policy::RetryPolicy;

use super::dependencies::Dependencies;

/// A queue's name as entries hold it: a number standing for the interned name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueRef(u32);

/// A job's type as entries hold it: a number standing for the interned name, so that a filter by
/// type is decided in memory. The table is bounded ([`KindRef::UNNAMED`]): a server whose jobs use
/// more distinct types than that keeps the later ones unnamed, and a filter by one of those reads
/// the jobs' bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindRef(u16);

impl KindRef {
    /// A type past the table's size: not known in memory.
    pub const UNNAMED: Self = Self(u16::MAX);
}

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
    /// Marked cancelled by an operator (`crate::cancel`): the worker learns it on its next
    /// heartbeat, and a failure or expiry of this lease ends the job cancelled. In memory
    /// only, as the lease is: after a restart the job is ready again and runs as any job in
    /// flight at a crash does.
    pub cancel_requested: bool,
}

/// What memory holds of one job: enough to order, move and decide on it without reading disk.
/// What most jobs never have (a unique key, an own policy, an expiry, a failure history, a
/// reason to be dead) is boxed apart, so a plain job costs 48 bytes.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Scheduled: when it becomes ready. Ready: when it became ready.
    pub run_at_ms: UnixMs,
    /// When it completed or died; 0 while it has not.
    finished_at_ms: UnixMs,
    pub queue: QueueRef,
    pub kind: KindRef,
    pub priority: i32,
    /// Runs that ended in a failure or a lost lease.
    pub failures: u32,
    pub status: Status,
    /// Set while in flight.
    lease: Option<Box<Lease>>,
    rare: Option<Box<Rare>>,
}

/// The fields of an entry that most jobs leave empty.
#[derive(Debug, Clone, Default, PartialEq)]
struct Rare {
    unique_key: Option<Box<str>>,
    /// The job's own policy, if it has one.
    policy: Option<Arc<RetryPolicy>>,
    /// When the job is deleted whatever its status. A claim may move it later in memory.
    expires_at_ms: Option<UnixMs>,
    first_failure_at_ms: Option<UnixMs>,
    last_delay_ms: Option<u64>,
    dead_reason: Option<Box<str>>,
    /// What starts the next run when not its schedule (a replay, an operator's run-now).
    trigger: Trigger,
}

impl Entry {
    /// A job's entry. `state` is its whole state as stored.
    pub fn new(
        queue: QueueRef,
        kind: KindRef,
        priority: i32,
        unique_key: Option<Box<str>>,
        state: &JobState,
        policy: Option<Arc<RetryPolicy>>,
        expires_at_ms: Option<UnixMs>,
    ) -> Self {
        let mut entry = Self {
            run_at_ms: 0,
            finished_at_ms: 0,
            queue,
            kind,
            priority,
            failures: 0,
            status: state.status,
            lease: None,
            rare: None,
        };
        entry.set_state(state);
        entry.change_rare(|rare| {
            rare.unique_key = unique_key;
            rare.policy = policy;
            rare.expires_at_ms = expires_at_ms;
        });
        entry
    }

    /// The job's state, as it is stored.
    pub fn state(&self) -> JobState {
        let rare = self.rare.as_deref();
        JobState {
            status: self.status,
            run_at_ms: self.run_at_ms,
            failures: self.failures,
            first_failure_at_ms: rare.and_then(|r| r.first_failure_at_ms),
            last_delay_ms: rare.and_then(|r| r.last_delay_ms),
            finished_at_ms: self.finished_at_ms(),
            dead_reason: rare
                .and_then(|r| r.dead_reason.as_deref())
                .map(str::to_owned),
            trigger: rare.map_or(Trigger::Scheduled, |r| r.trigger),
            // Only a completed job has one, and completed jobs are read from disk.
            result: None,
        }
    }

    /// Replaces the job's state.
    pub fn set_state(&mut self, state: &JobState) {
        self.status = state.status;
        self.run_at_ms = state.run_at_ms;
        self.failures = state.failures;
        self.finished_at_ms = state.finished_at_ms.unwrap_or(0);
        self.change_rare(|rare| {
            rare.first_failure_at_ms = state.first_failure_at_ms;
            rare.last_delay_ms = state.last_delay_ms;
            rare.dead_reason = state.dead_reason.as_deref().map(Box::from);
            rare.trigger = state.trigger;
        });
    }

    pub fn finished_at_ms(&self) -> Option<UnixMs> {
        (self.finished_at_ms != 0 || self.status.is_finished()).then_some(self.finished_at_ms)
    }

    /// Marks the job finished (completed, dead or cancelled) at `at_ms`.
    pub fn finish(&mut self, status: Status, at_ms: UnixMs) {
        self.status = status;
        self.finished_at_ms = at_ms;
    }

    /// What starts the next run, when not its schedule.
    pub fn trigger(&self) -> Trigger {
        self.rare
            .as_deref()
            .map_or(Trigger::Scheduled, |r| r.trigger)
    }

    pub fn lease(&self) -> Option<Lease> {
        self.lease.as_deref().copied()
    }

    pub fn set_lease(&mut self, lease: Option<Lease>) {
        match (&mut self.lease, lease) {
            (Some(held), Some(lease)) => **held = lease,
            (slot, lease) => *slot = lease.map(Box::new),
        }
    }

    pub fn unique_key(&self) -> Option<&str> {
        self.rare.as_deref()?.unique_key.as_deref()
    }

    pub fn policy(&self) -> Option<&Arc<RetryPolicy>> {
        self.rare.as_deref()?.policy.as_ref()
    }

    pub fn set_policy(&mut self, policy: Option<Arc<RetryPolicy>>) {
        self.change_rare(|rare| rare.policy = policy);
    }

    pub fn expires_at_ms(&self) -> Option<UnixMs> {
        self.rare.as_deref()?.expires_at_ms
    }

    pub fn set_expires_at_ms(&mut self, at: Option<UnixMs>) {
        self.change_rare(|rare| rare.expires_at_ms = at);
    }

    /// Changes the rare fields, keeping no box when they are all empty.
    fn change_rare(&mut self, change: impl FnOnce(&mut Rare)) {
        let mut rare = self.rare.take().unwrap_or_default();
        change(&mut rare);
        if *rare != Rare::default() {
            self.rare = Some(rare);
        }
    }

    /// The lease of an in-flight entry. Every in-flight entry has one; a missing one reads as
    /// already expired, so the reaper returns the job rather than losing it.
    fn held_lease(&self) -> Lease {
        self.lease().unwrap_or(Lease {
            token: LeaseToken(0),
            expires_at_ms: 0,
            taken_at_ms: 0,
            claim: None,
            cancel_requested: false,
        })
    }
}

/// Ordering key of the ready set of one queue: highest priority first, then lowest id (FIFO).
type ReadyKey = (Reverse<i32>, JobId);

#[derive(Debug, Default)]
pub struct Index {
    entries: BTreeMap<JobId, Entry>,
    ready: HashMap<QueueRef, BTreeSet<ReadyKey>>,
    scheduled: BTreeSet<(UnixMs, JobId)>,
    leased: BTreeSet<(UnixMs, JobId)>,
    by_claim: HashMap<ClaimId, BTreeSet<JobId>>,
    /// Dead and cancelled jobs (and completed ones not yet written), by finish time.
    finished: BTreeSet<(UnixMs, JobId)>,
    /// Jobs with an expiry, by expiry.
    expiring: BTreeSet<(UnixMs, JobId)>,
    unique: HashMap<QueueRef, BTreeMap<Box<str>, JobId>>,
    counts: HashMap<QueueRef, StatusSlots>,
    /// Interned queue names: `names[r]` is the name of `QueueRef(r)`.
    names: Vec<Arc<str>>,
    refs: HashMap<Arc<str>, QueueRef>,
    /// Interned job types, as many as [`KindRef::UNNAMED`] at most.
    kinds: HashMap<Arc<str>, KindRef>,
    /// Who waits for whom; told here of every end of a job that others wait for.
    pub deps: Dependencies,
}

fn slot(status: Status) -> usize {
    match status {
        Status::Scheduled => 0,
        Status::Ready => 1,
        Status::InFlight => 2,
        Status::Completed => 3,
        Status::Dead => 4,
        Status::Cancelled => 5,
        Status::Waiting => 6,
    }
}

impl Index {
    /// The number standing for `queue`, made on first sight. Names are never forgotten: there
    /// are as many as queues ever used, a few bytes each.
    pub fn intern(&mut self, queue: &str) -> QueueRef {
        if let Some(queue) = self.refs.get(queue) {
            return *queue;
        }
        let number = u32::try_from(self.names.len()).expect("fewer than 2^32 queue names");
        let name: Arc<str> = Arc::from(queue);
        self.names.push(name.clone());
        self.refs.insert(name, QueueRef(number));
        QueueRef(number)
    }

    /// The number standing for the job type `kind`, made on first sight while the table has
    /// room; [`KindRef::UNNAMED`] once it is full.
    pub fn intern_kind(&mut self, kind: &str) -> KindRef {
        if let Some(kind) = self.kinds.get(kind) {
            return *kind;
        }
        match u16::try_from(self.kinds.len()) {
            Ok(number) if number < KindRef::UNNAMED.0 => {
                self.kinds.insert(Arc::from(kind), KindRef(number));
                KindRef(number)
            }
            _ => KindRef::UNNAMED,
        }
    }

    /// Whether an entry of type `kind` may be `entry`'s: `Some(answer)` when memory knows,
    /// `None` when only the job's body can tell (an unnamed type).
    pub fn is_kind(&self, entry: &Entry, kind: &str) -> Option<bool> {
        match self.kinds.get(kind) {
            Some(known) => Some(entry.kind == *known),
            // Never interned: no entry has it, unless the table filled up before it came.
            None if entry.kind == KindRef::UNNAMED => None,
            None => Some(false),
        }
    }

    /// Whether every entry of type `kind` is known as such in memory: the type has its number,
    /// or the table never filled up (so no entry has it).
    pub fn knows_kind(&self, kind: &str) -> bool {
        self.kinds.contains_key(kind) || self.kinds.len() < usize::from(KindRef::UNNAMED.0)
    }

    /// The number of a queue that has (or had) jobs.
    pub fn queue_ref(&self, queue: &str) -> Option<QueueRef> {
        self.refs.get(queue).copied()
    }

    /// The name of an interned queue.
    pub fn name(&self, queue: QueueRef) -> &Arc<str> {
        &self.names[queue.0 as usize]
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
        let queue = self.refs.get(queue)?;
        self.unique.get(queue)?.get(key).copied()
    }

    /// Adds a job. A scheduled job whose time has come is added as ready.
    pub fn insert(&mut self, id: JobId, mut entry: Entry, now_ms: UnixMs) {
        if entry.status == Status::Scheduled && entry.run_at_ms <= now_ms {
            entry.status = Status::Ready;
        }
        self.place(id, &entry);
        self.entries.insert(id, entry);
    }

    /// Removes a job entirely (delete, purge).
    pub fn remove(&mut self, id: JobId) -> Option<Entry> {
        let entry = self.entries.remove(&id)?;
        self.unplace(id, &entry);
        self.changed(id, entry.status, None);
        Some(entry)
    }

    /// Removes a completed job whose completion is written: from now on it is read from disk.
    /// Anything else stays.
    pub fn evict_completed(&mut self, id: JobId) {
        if self.get(id).is_some_and(|e| e.status == Status::Completed) {
            self.remove(id);
        }
    }

    /// Changes a job through `change`, keeping every set and count consistent. Returns the
    /// entry as changed.
    pub fn update(&mut self, id: JobId, change: impl FnOnce(&mut Entry)) -> Option<&Entry> {
        let mut entry = self.entries.remove(&id)?;
        self.unplace(id, &entry);
        let before = entry.status;
        change(&mut entry);
        if entry.status != Status::InFlight {
            entry.lease = None;
        }
        self.changed(id, before, Some(entry.status));
        self.place(id, &entry);
        self.entries.insert(id, entry);
        self.entries.get(&id)
    }

    /// Tells the dependencies of a job's change from `before` to `after` (`None`: it left
    /// memory): a waiting job that stops waiting is forgotten, and the end of a job others
    /// wait for is recorded for [`super::dependencies::settle`].
    fn changed(&mut self, id: JobId, before: Status, after: Option<Status>) {
        if before == Status::Waiting && after != Some(Status::Waiting) {
            self.deps.forget(id);
        }
        if after.is_none() {
            self.deps.gone(id);
        }
        if before.is_finished() || !self.deps.has_children(id) {
            return;
        }
        match after {
            Some(Status::Completed) => self.deps.ended(id, ParentEnd::Completed),
            Some(status) if !status.is_finished() => {}
            _ => self.deps.ended(id, ParentEnd::Lost),
        }
    }

    fn place(&mut self, id: JobId, entry: &Entry) {
        if let Some(at) = entry.expires_at_ms() {
            self.expiring.insert((at, id));
        }
        self.counts.entry(entry.queue).or_default()[slot(entry.status)] += 1;
        if let Some(key) = entry.unique_key() {
            if !entry.status.is_finished() {
                self.unique
                    .entry(entry.queue)
                    .or_default()
                    .insert(Box::from(key), id);
            }
        }
        match entry.status {
            Status::Ready => {
                self.ready
                    .entry(entry.queue)
                    .or_default()
                    .insert((Reverse(entry.priority), id));
            }
            Status::Scheduled => {
                self.scheduled.insert((entry.run_at_ms, id));
            }
            Status::InFlight => {
                let lease = entry.held_lease();
                self.leased.insert((lease.expires_at_ms, id));
                if let Some(claim) = lease.claim {
                    self.by_claim.entry(claim).or_default().insert(id);
                }
            }
            Status::Completed | Status::Dead | Status::Cancelled => {
                self.finished.insert((entry.finished_at_ms, id));
            }
            // Held by its parents, in no set: `dependencies` knows it.
            Status::Waiting => {}
        }
    }

    fn unplace(&mut self, id: JobId, entry: &Entry) {
        if let Some(at) = entry.expires_at_ms() {
            self.expiring.remove(&(at, id));
        }
        if let Some(counts) = self.counts.get_mut(&entry.queue) {
            let slot = slot(entry.status);
            counts[slot] = counts[slot].saturating_sub(1);
        }
        if let Some(key) = entry.unique_key() {
            if let Some(keys) = self.unique.get_mut(&entry.queue) {
                if keys.get(key) == Some(&id) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.unique.remove(&entry.queue);
                    }
                }
            }
        }
        match entry.status {
            Status::Ready => {
                if let Some(set) = self.ready.get_mut(&entry.queue) {
                    set.remove(&(Reverse(entry.priority), id));
                }
            }
            Status::Scheduled => {
                self.scheduled.remove(&(entry.run_at_ms, id));
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
            Status::Completed | Status::Dead | Status::Cancelled => {
                self.finished.remove(&(entry.finished_at_ms, id));
            }
            Status::Waiting => {}
        }
    }

    /// Up to `max` ready jobs across `queues`, highest priority first, then oldest; none past
    /// its expiry at `now_ms` (such a job is gone, though the maintenance loop has not deleted
    /// it yet).
    pub fn peek_ready(&self, queues: &[QueueRef], max: usize, now_ms: UnixMs) -> Vec<JobId> {
        self.merge_ready(queues, None, max, now_ms)
    }

    /// Up to `max` ready jobs across `queues`, as [`Index::peek_ready`], but at most `caps[i]`
    /// of `queues[i]`: what a queue's limits leave room for.
    pub fn peek_ready_capped(
        &self,
        queues: &[QueueRef],
        caps: &[usize],
        max: usize,
        now_ms: UnixMs,
    ) -> Vec<JobId> {
        self.merge_ready(queues, Some(caps), max, now_ms)
    }

    fn merge_ready(
        &self,
        queues: &[QueueRef],
        caps: Option<&[usize]>,
        max: usize,
        now_ms: UnixMs,
    ) -> Vec<JobId> {
        // Rarely true (the maintenance loop deletes expired jobs when they are due): only then
        // is each job looked up for its expiry.
        let any_expired = self.expiring.first().is_some_and(|(at, _)| *at <= now_ms);
        let mut cursors: Vec<_> = queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| {
                let cap = caps.map_or(max, |caps| caps.get(i).copied().unwrap_or(0));
                Some((self.ready.get(q)?.iter().peekable(), cap))
            })
            .collect();
        let mut out = Vec::with_capacity(max.min(1_024));
        while out.len() < max {
            // Merge the queues' ordered sets: take the best head each time.
            let best = cursors
                .iter_mut()
                .enumerate()
                .filter(|(_, (_, cap))| *cap > 0)
                .filter_map(|(i, (c, _))| c.peek().map(|k| (**k, i)))
                .min();
            let Some(((_, id), i)) = best else { break };
            let (cursor, cap) = &mut cursors[i];
            cursor.next();
            let expired = any_expired
                && self
                    .entries
                    .get(&id)
                    .and_then(Entry::expires_at_ms)
                    .is_some_and(|at| at <= now_ms);
            if !expired {
                *cap -= 1;
                out.push(id);
            }
        }
        out
    }

    /// How many of a queue's jobs are in flight.
    pub fn in_flight(&self, queue: QueueRef) -> u64 {
        self.counts
            .get(&queue)
            .map_or(0, |c| c[slot(Status::InFlight)])
    }

    /// The job a take of `queue` would hand out next, if one is ready.
    pub fn head_ready(&self, queue: &str) -> Option<JobId> {
        let queue = self.queue_ref(queue)?;
        self.ready.get(&queue)?.first().map(|key| key.1)
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

    /// Finished jobs in memory that finished at or before `before_ms`, oldest first.
    pub fn finished_before(&self, before_ms: UnixMs) -> impl Iterator<Item = (JobId, &Entry)> {
        self.finished
            .range(..=(before_ms, JobId(u64::MAX)))
            .filter_map(|(_, id)| self.entries.get(id).map(|e| (*id, e)))
    }

    /// Jobs leased under a claim (or streaming take), in id order.
    pub fn held_by_claim(&self, claim: ClaimId) -> Vec<JobId> {
        self.by_claim
            .get(&claim)
            .map(|set| set.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Counts of one queue's jobs in memory, in the order of [`Status::ALL`].
    pub fn queue_counts(&self, queue: &str) -> StatusSlots {
        self.refs
            .get(queue)
            .and_then(|queue| self.counts.get(queue))
            .copied()
            .unwrap_or_default()
    }

    /// Counts of the jobs in memory per queue, in the order of [`Status::ALL`].
    pub fn counts(&self) -> impl Iterator<Item = (&Arc<str>, StatusSlots)> {
        self.counts.iter().map(|(q, c)| (self.name(*q), *c))
    }

    /// Every entry, in id order.
    pub fn entries(&self) -> impl Iterator<Item = (JobId, &Entry)> {
        self.entries.iter().map(|(id, e)| (*id, e))
    }

    /// The entries after `after` (all when `None`) in `order`: a page starts where the last
    /// ended without looking at what came before.
    pub fn entries_after(
        &self,
        after: Option<JobId>,
        order: Order,
    ) -> Box<dyn Iterator<Item = (JobId, &Entry)> + '_> {
        fn map<'a>((id, e): (&'a JobId, &'a Entry)) -> (JobId, &'a Entry) {
            (*id, e)
        }
        match (order, after) {
            (Order::Ascending, Some(after)) => Box::new(
                self.entries
                    .range((Bound::Excluded(after), Bound::Unbounded))
                    .map(map),
            ),
            (Order::Ascending, None) => Box::new(self.entries.iter().map(map)),
            (Order::Descending, Some(after)) => {
                Box::new(self.entries.range(..after).rev().map(map))
            }
            (Order::Descending, None) => Box::new(self.entries.iter().rev().map(map)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: &mut Index, queue: &str, priority: i32, status: Status, at_ms: u64) -> Entry {
        let mut state = JobState::new(at_ms, 0);
        state.status = status;
        let queue = index.intern(queue);
        let kind = index.intern_kind("k");
        Entry::new(queue, kind, priority, None, &state, None, None)
    }

    #[test]
    fn job_types_are_known_in_memory_until_the_table_is_full() {
        let mut index = Index::default();
        let queue = index.intern("q");
        let mail = index.intern_kind("mail");
        assert_eq!(index.intern_kind("mail"), mail);
        let entry = Entry::new(queue, mail, 0, None, &JobState::new(0, 0), None, None);
        assert_eq!(index.is_kind(&entry, "mail"), Some(true));
        assert_eq!(index.is_kind(&entry, "sms"), Some(false));
        assert!(
            index.knows_kind("sms"),
            "no entry can have a type never seen"
        );
        for n in 1..KindRef::UNNAMED.0 {
            assert_ne!(index.intern_kind(&format!("type-{n}")), KindRef::UNNAMED);
        }
        // Full: a new type is unnamed, and only the body can tell an unnamed entry's type.
        let late = index.intern_kind("late");
        assert_eq!(late, KindRef::UNNAMED);
        let entry = Entry::new(queue, late, 0, None, &JobState::new(0, 0), None, None);
        assert!(!index.knows_kind("late"));
        assert_eq!(index.is_kind(&entry, "late"), None);
        assert_eq!(index.is_kind(&entry, "mail"), Some(false));
        assert!(index.knows_kind("mail"));
    }

    #[test]
    fn an_entry_is_small() {
        assert!(
            std::mem::size_of::<Entry>() <= 48,
            "{}",
            std::mem::size_of::<Entry>()
        );
    }

    #[test]
    fn an_entry_gives_back_the_state_it_was_given() {
        let mut index = Index::default();
        let queue = index.intern("q");
        let plain = JobState::new(5, 0);
        let mut entry = Entry::new(queue, KindRef(0), 3, None, &plain, None, None);
        assert_eq!(entry.state(), plain);
        assert!(entry.rare.is_none(), "a plain job boxes nothing");
        let dead = JobState {
            status: Status::Dead,
            run_at_ms: 10,
            failures: 4,
            first_failure_at_ms: Some(2),
            last_delay_ms: Some(900),
            finished_at_ms: Some(11),
            dead_reason: Some("all 3 retries were used".into()),
            trigger: Trigger::Replay,
            result: None,
        };
        entry.set_state(&dead);
        assert_eq!(entry.state(), dead);
        entry.set_state(&plain);
        assert_eq!(entry.state(), plain);
        assert!(entry.rare.is_none(), "emptied rare fields go");
        entry.set_expires_at_ms(Some(99));
        assert_eq!(entry.expires_at_ms(), Some(99));
        assert_eq!(entry.state(), plain);
        // A job finished at the epoch still reads as finished.
        entry.finish(Status::Completed, 0);
        assert_eq!(entry.finished_at_ms(), Some(0));
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
            index.peek_ready(&queues, 10, 0),
            [JobId(2), JobId(3), JobId(1), JobId(4)]
        );
        assert_eq!(index.peek_ready(&queues, 2, 0), [JobId(2), JobId(3)]);
    }

    #[test]
    fn capped_peeks_keep_the_order_and_each_queues_cap() {
        let mut index = Index::default();
        for (id, queue, priority) in [
            (1, "a", 0),
            (2, "b", 5),
            (3, "a", 5),
            (4, "b", 0),
            (5, "a", 1),
        ] {
            let e = entry(&mut index, queue, priority, Status::Ready, 0);
            index.insert(JobId(id), e, 0);
        }
        let queues = [index.intern("a"), index.intern("b")];
        assert_eq!(
            index.peek_ready_capped(&queues, &[1, 10], 10, 0),
            [JobId(2), JobId(3), JobId(4)]
        );
        assert_eq!(
            index.peek_ready_capped(&queues, &[10, 0], 2, 0),
            [JobId(3), JobId(5)]
        );
        assert_eq!(index.in_flight(queues[0]), 0);
        index.update(JobId(1), |e| e.status = Status::InFlight);
        assert_eq!(index.in_flight(queues[0]), 1);
    }

    #[test]
    fn scheduled_jobs_due_in_the_past_are_ready_on_insert() {
        let mut index = Index::default();
        let past = entry(&mut index, "q", 0, Status::Scheduled, 50);
        let future = entry(&mut index, "q", 0, Status::Scheduled, 500);
        index.insert(JobId(1), past, 100);
        index.insert(JobId(2), future, 100);
        assert_eq!(index.get(JobId(1)).map(|e| e.status), Some(Status::Ready));
        assert_eq!(index.due(499, 10), Vec::<JobId>::new());
        assert_eq!(index.due(500, 10), [JobId(2)]);
        index.update(JobId(2), |e| e.status = Status::Ready);
        let q = [index.intern("q")];
        assert_eq!(index.peek_ready(&q, 10, 0), [JobId(1), JobId(2)]);
        let counts: Vec<_> = index.counts().map(|(q, c)| (q.to_string(), c)).collect();
        assert_eq!(counts, [("q".to_owned(), [0, 2, 0, 0, 0, 0, 0])]);
    }

    #[test]
    fn leases_unique_keys_and_removal_keep_sets_consistent() {
        let mut index = Index::default();
        let queue = index.intern("q");
        let kind = index.intern_kind("k");
        let e = Entry::new(
            queue,
            kind,
            0,
            Some("k".into()),
            &JobState::new(0, 0),
            None,
            None,
        );
        index.insert(JobId(7), e, 0);
        assert_eq!(index.unique("q", "k"), Some(JobId(7)));
        let lease = Lease {
            token: LeaseToken(1),
            expires_at_ms: 1_000,
            taken_at_ms: 0,
            claim: Some(ClaimId(3)),
            cancel_requested: false,
        };
        index.update(JobId(7), |e| {
            e.status = Status::InFlight;
            e.set_lease(Some(lease));
        });
        assert_eq!(index.expired(999, 10), Vec::<JobId>::new());
        assert_eq!(index.expired(1_000, 10), [JobId(7)]);
        assert_eq!(index.held_by_claim(ClaimId(3)), [JobId(7)]);
        index.update(JobId(7), |e| e.finish(Status::Dead, 2_000));
        assert_eq!(
            index.unique("q", "k"),
            None,
            "a finished job frees its unique key"
        );
        assert_eq!(index.get(JobId(7)).and_then(Entry::lease), None);
        assert_eq!(index.held_by_claim(ClaimId(3)), Vec::<JobId>::new());
        assert_eq!(index.expired(5_000, 10), Vec::<JobId>::new());
        let dead: Vec<JobId> = index.finished_before(2_000).map(|(id, _)| id).collect();
        assert_eq!(dead, [JobId(7)]);
        assert_eq!(index.queue_counts("q"), [0, 0, 0, 0, 1, 0, 0]);
        assert!(index.remove(JobId(7)).is_some());
        assert!(index.is_empty());
        assert_eq!(index.finished_before(u64::MAX).count(), 0);
    }

    #[test]
    fn completed_entries_are_counted_until_evicted() {
        let mut index = Index::default();
        let e = entry(&mut index, "q", 0, Status::Ready, 0);
        index.insert(JobId(1), e, 0);
        index.update(JobId(1), |e| e.finish(Status::Completed, 10));
        assert_eq!(index.queue_counts("q"), [0, 0, 0, 1, 0, 0, 0]);
        index.evict_completed(JobId(1));
        assert!(index.get(JobId(1)).is_none());
        assert_eq!(index.queue_counts("q"), [0; 7]);
        let e = entry(&mut index, "q", 0, Status::Ready, 0);
        index.insert(JobId(2), e, 0);
        index.evict_completed(JobId(2));
        assert!(index.get(JobId(2)).is_some(), "only completed entries go");
    }

    #[test]
    fn pages_start_after_the_last_id_in_either_order() {
        let mut index = Index::default();
        for id in 1..=5 {
            let e = entry(&mut index, "q", 0, Status::Ready, 0);
            index.insert(JobId(id), e, 0);
        }
        let ids = |after, order| -> Vec<u64> {
            index
                .entries_after(after, order)
                .map(|(id, _)| id.0)
                .collect()
        };
        assert_eq!(ids(None, Order::Ascending), [1, 2, 3, 4, 5]);
        assert_eq!(ids(Some(JobId(2)), Order::Ascending), [3, 4, 5]);
        assert_eq!(ids(None, Order::Descending), [5, 4, 3, 2, 1]);
        assert_eq!(ids(Some(JobId(4)), Order::Descending), [3, 2, 1]);
    }
}
