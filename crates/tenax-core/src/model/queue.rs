//! A queue's settings (its policy, pause, limits, dead-letter queue) and what is counted of it.
//! Queues exist implicitly when a job names them; only their settings are stored.

use serde::{Deserialize, Serialize};

use crate::clock::UnixMs;
use crate::model::StoredPolicy;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct QueueCounts {
    pub queue: String,
    pub scheduled: u64,
    pub ready: u64,
    pub in_flight: u64,
    pub completed: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub waiting: u64,
}

/// A count per status, in the order of [`Status::ALL`](crate::model::Status::ALL).
pub type StatusSlots = [u64; crate::model::Status::ALL.len()];

impl QueueCounts {
    /// Counts of `queue` in the order of [`Status::ALL`](crate::model::Status::ALL).
    pub fn from_slots(queue: impl Into<String>, slots: StatusSlots) -> Self {
        Self {
            queue: queue.into(),
            scheduled: slots[0],
            ready: slots[1],
            in_flight: slots[2],
            completed: slots[3],
            dead: slots[4],
            cancelled: slots[5],
            waiting: slots[6],
        }
    }

    /// The counts in the order of [`Status::ALL`](crate::model::Status::ALL).
    pub fn slots(&self) -> StatusSlots {
        [
            self.scheduled,
            self.ready,
            self.in_flight,
            self.completed,
            self.dead,
            self.cancelled,
            self.waiting,
        ]
    }
}

/// A queue's backlog at one moment, for the metrics: its jobs by status (completed jobs are
/// left out: counting them would read every job kept for retention). When its first job in line
/// became ready is [`crate::store::JobReads::ready_since`]'s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backlog {
    pub queue: String,
    pub scheduled: u64,
    pub ready: u64,
    pub in_flight: u64,
    pub dead: u64,
    pub cancelled: u64,
    pub waiting: u64,
}

/// A queue's settings. Queues exist implicitly when a job names them; a config is stored only
/// once set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// The queue's default policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<StoredPolicy>,
    /// A paused queue keeps accepting jobs but hands none out.
    #[serde(default)]
    pub paused: bool,
    /// The queue's policy applies to every subscription's deliveries, whatever the
    /// subscription's own (SNS `disableSubscriptionOverrides`, Zaqar
    /// `ignore_subscription_override`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_overrides: bool,
    /// New jobs of the queue are deleted this long after their enqueue, whatever their status,
    /// unless they name their own expiry: what a queue that only feeds webhooks needs, so that
    /// messages no worker takes do not pile up (Zaqar's `_default_message_ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_ttl_ms: Option<u64>,
    /// Free-form metadata (Zaqar's queue metadata), kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Where jobs go whose leases expired too often (Zaqar's dead-letter queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetter>,
    /// At most this many of the queue's jobs in flight at once, across every worker and
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// At most this many of the queue's jobs started in any period (see [`RateLimit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateLimit>,
    /// Payloads enqueued to the queue (and their webhook deliveries) are stored sealed with
    /// the store's data key and opened on every read (Zaqar's `_enable_encrypt_messages`).
    /// Whether a stored payload is sealed is the job's own record, not this flag's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encrypt_payloads: bool,
    /// On a pooled deployment, the flavor whose pools the queue is placed on (Zaqar's
    /// `_flavor`); a store of one database keeps it and places nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
}

impl QueueConfig {
    /// Whether takes must count before handing out the queue's jobs.
    pub fn is_limited(&self) -> bool {
        self.concurrency.is_some() || self.rate.is_some()
    }
}

/// At most `limit` jobs of a queue start (are taken or popped) in any `period_ms`.
///
/// How it is counted, by every backend alike: starts are kept in buckets a sixtieth of the
/// period wide (at least 1 ms); a take counts every bucket that overlaps the last period, so
/// never more than `limit` start in any period, and a start may wait up to a bucket longer than
/// a count of each start's exact time would make it ([`RateLimit::bucket_ms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    pub limit: u32,
    pub period_ms: u64,
}

impl RateLimit {
    /// The width of the buckets starts are counted in.
    pub fn bucket_ms(&self) -> u64 {
        (self.period_ms / 60).max(1)
    }

    /// The bucket a start at `at_ms` is counted in: its start.
    pub fn bucket_of(&self, at_ms: UnixMs) -> UnixMs {
        let width = self.bucket_ms();
        at_ms / width * width
    }

    /// Whether a bucket `[start, start + width)` still counts at `now_ms`: it overlaps the last
    /// period, `(now - period, now]`.
    pub fn counts(&self, start_ms: UnixMs, width_ms: u64, now_ms: UnixMs) -> bool {
        start_ms.saturating_add(width_ms) > now_ms.saturating_sub(self.period_ms)
    }

    /// Buckets that end at or before this are forgotten at `now_ms`: two periods back, not
    /// one. Takes of a queue are serialised, but each reads its clock before it waits for its
    /// turn, so a take may count from a period older than the last take's: the last take must
    /// leave every bucket of that period in place. Exact while no take waits longer than a
    /// period for its turn (and, on PostgreSQL, the servers' clocks agree within one); past
    /// that, a take may count fewer starts than were made in its period, never stall.
    pub fn forget_before(&self, now_ms: UnixMs) -> UnixMs {
        now_ms.saturating_sub(self.period_ms.saturating_mul(2))
    }

    /// Whether a bucket `[start, start + width)` is still kept at `now_ms`
    /// ([`RateLimit::forget_before`]).
    pub fn kept(&self, start_ms: UnixMs, width_ms: u64, now_ms: UnixMs) -> bool {
        start_ms.saturating_add(width_ms) > self.forget_before(now_ms)
    }

    /// When a bucket stops counting: room it holds is free again then.
    pub fn frees_at(&self, start_ms: UnixMs, width_ms: u64) -> UnixMs {
        start_ms
            .saturating_add(width_ms)
            .saturating_add(self.period_ms)
    }
}

/// How much of a queue's limits is used: what its stats show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimitUse {
    /// Jobs started in the current period, as the rate limit counts them (0 without one).
    pub started: u64,
}

/// A dead-letter queue: a job whose lease has expired `max_claims` times moves there, ready,
/// with a fresh count (and the new expiry, if given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub queue: String,
    pub max_claims: u32,
    /// The moved job's time to live; without it the job keeps its expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}
