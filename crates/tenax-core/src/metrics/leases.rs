//! The leases this server handed out, with what the metrics need when each ends (its series,
//! when the job was made and taken). Kept only for a store used by this process alone (not
//! shared with other servers): such a store's leases live in this process, so every lease that
//! ends was handed out here, and the book knows it. A shared store reports these facts itself
//! with each lease that ends, since a lease may end on another server.
//!
//! Invariants: an entry is replaced by the next take of its job and removed when the lease
//! ends through the engine; entries whose leases ended otherwise (the job deleted in flight,
//! a stream closed) are forgotten once their take is older than the longest an attempt can be
//! held, so the book holds at most the jobs in flight plus those of the last such period.

use parking_lot::Mutex;

use crate::clock::UnixMs;
use crate::model::{JobId, JobIdMap, LeaseToken};

/// What the book keeps of one lease.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    /// The job's series ([`super::jobs::JobSeries::index`]).
    pub series: u32,
    pub token: LeaseToken,
    pub created_at_ms: UnixMs,
    pub taken_at_ms: UnixMs,
}

/// Shards, so that concurrent takes and completions rarely meet on one lock.
const SHARDS: usize = 16;

type Shard = Mutex<JobIdMap<Held>>;

#[derive(Debug)]
pub struct LeaseBook {
    shards: Box<[Shard]>,
}

impl Default for LeaseBook {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(JobIdMap::default()))
                .collect(),
        }
    }
}

impl LeaseBook {
    fn shard(&self, id: JobId) -> &Shard {
        // Ids are consecutive: their low bits spread them evenly.
        #[allow(clippy::cast_possible_truncation)]
        &self.shards[(id.0 as usize) % SHARDS]
    }

    pub fn hold(&self, id: JobId, held: Held) {
        self.shard(id).lock().insert(id, held);
    }

    /// Removes and returns the lease of `id`, if the book has it (and it is `token`'s, when
    /// given).
    pub fn end(&self, id: JobId, token: Option<LeaseToken>) -> Option<Held> {
        let mut shard = self.shard(id).lock();
        match shard.get(&id) {
            Some(held) if token.is_none_or(|t| t == held.token) => shard.remove(&id),
            _ => None,
        }
    }

    /// Forgets leases taken before `before_ms`; returns how many.
    pub fn forget_taken_before(&self, before_ms: UnixMs) -> usize {
        let mut forgotten = 0;
        for shard in &self.shards {
            let mut shard = shard.lock();
            let before = shard.len();
            shard.retain(|_, held| held.taken_at_ms >= before_ms);
            forgotten += before - shard.len();
        }
        forgotten
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
