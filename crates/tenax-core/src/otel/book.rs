//! What the span of a lease's end (complete, fail, expiry) needs of the job, for each lease this
//! server handed out: its queue, type and trace context. Kept only while tracing is on and only
//! for a store of this process alone: a shared store reports these with the lease's end
//! ([`crate::store::LeaseFacts`]), since a lease may end on another server.
//!
//! Invariants: an entry is replaced by the next
//! take of its job and removed when the lease ends through the engine; entries whose leases
//! ended otherwise (the job deleted in flight, a stream closed) are forgotten once their take is
//! older than the longest an attempt can be held.

use std::collections::HashMap;

use opentelemetry::trace::SpanContext;
use parking_lot::Mutex;

use crate::clock::UnixMs;
use crate::model::{JobId, LeaseToken};

/// What the book keeps of one lease.
#[derive(Debug, Clone)]
pub struct Traced {
    pub token: LeaseToken,
    pub queue: String,
    pub kind: String,
    /// The job's stored trace context.
    pub context: Option<SpanContext>,
    pub taken_at_ms: UnixMs,
}

/// Shards, so that concurrent takes and completions rarely meet on one lock.
const SHARDS: usize = 16;

#[derive(Debug)]
pub struct TraceBook {
    shards: Box<[Mutex<HashMap<JobId, Traced>>]>,
}

impl Default for TraceBook {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl TraceBook {
    fn shard(&self, id: JobId) -> &Mutex<HashMap<JobId, Traced>> {
        // Ids are consecutive: their low bits spread them evenly.
        #[allow(clippy::cast_possible_truncation)]
        &self.shards[(id.0 as usize) % SHARDS]
    }

    pub fn hold(&self, id: JobId, traced: Traced) {
        self.shard(id).lock().insert(id, traced);
    }

    /// The lease of `id` that ended, removed; `token` when the caller named the lease (an entry
    /// of another lease stays).
    pub fn end(&self, id: JobId, token: Option<LeaseToken>) -> Option<Traced> {
        let mut shard = self.shard(id).lock();
        let traced = shard.get(&id)?;
        if token.is_some_and(|token| token != traced.token) {
            return None;
        }
        shard.remove(&id)
    }

    /// Forgets the leases taken before `before_ms` (see the module's invariants).
    pub fn forget_taken_before(&self, before_ms: UnixMs) {
        for shard in &*self.shards {
            shard.lock().retain(|_, t| t.taken_at_ms >= before_ms);
        }
    }
}
