//! The storage seam. A few operations shaped like the job state machine's transitions; one
//! implementation per backend (the embedded store now, PostgreSQL next), all held by the
//! [`Store`] enum, and one conformance suite (`tests/store_conformance.rs`) that every backend
//! must pass.
//!
//! The store decides nothing about retries: transitions that need a policy decision take a
//! closure from the engine ([`Decide`]), called with the job's state under the store's own
//! serialisation (a lock here, a row lock in PostgreSQL).

pub mod embedded;
mod peek;
mod types;

pub use embedded::EmbeddedStore;
pub use peek::JobPeek;
pub use types::*;

use crate::clock::UnixMs;
pub use embedded::Finished;

use crate::model::{Attempt, Job, JobId, Subscription, SubscriptionId};

/// Every backend. An enum rather than a trait object: the set is closed and small, and async
/// methods need no boxing.
#[derive(Debug)]
pub enum Store {
    Embedded(EmbeddedStore),
}

macro_rules! dispatch {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            Store::Embedded($store) => $call,
        }
    };
}

impl Store {
    /// Adds jobs atomically: all are stored, or none.
    pub async fn enqueue(
        &self,
        jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
        now_ms: UnixMs,
    ) -> Result<Vec<Enqueued>, StoreError> {
        dispatch!(self, s => s.enqueue(jobs, on_duplicate, now_ms).await)
    }

    /// Leases up to `request.max` ready jobs.
    pub async fn take(
        &self,
        request: &TakeRequest<'_>,
        now_ms: UnixMs,
    ) -> Result<Vec<TakenJob>, StoreError> {
        dispatch!(self, s => s.take(request, now_ms))
    }

    /// Extends a lease to `now + lease_ms`, but never past `max_attempt_ms` after the take.
    pub async fn heartbeat(
        &self,
        ack: Ack,
        lease_ms: u64,
        max_attempt_ms: u64,
        now_ms: UnixMs,
    ) -> Result<UnixMs, StoreError> {
        dispatch!(self, s => s.heartbeat(ack, lease_ms, max_attempt_ms, now_ms))
    }

    /// Completes in-flight jobs: one durable commit, one result per job.
    pub async fn complete(
        &self,
        acks: &[Ack],
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        dispatch!(self, s => s.complete(acks, retain, now_ms).await)
    }

    /// Records a failure of an in-flight job; `decide` gives the next state.
    pub async fn fail(
        &self,
        ack: Ack,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Transition, StoreError> {
        dispatch!(self, s => s.fail(ack, now_ms, decide).await)
    }

    /// Returns the jobs leased through a closed stream to ready, without counting an attempt.
    pub async fn release_stream(&self, stream: u64) -> usize {
        dispatch!(self, s => s.release_stream(stream))
    }

    /// How many jobs a streaming connection holds leased.
    pub async fn stream_leases(&self, stream: u64) -> usize {
        dispatch!(self, s => s.stream_leases(stream))
    }

    /// The jobs a claim (or stream) holds, in id order.
    pub async fn claimed(&self, claim: u64) -> Vec<ClaimedJob> {
        dispatch!(self, s => s.claimed(claim))
    }

    /// Renews a claim's leases and keeps its jobs alive at least until `keep_until_ms`.
    pub async fn extend_claim(
        &self,
        claim: u64,
        lease_ms: u64,
        keep_until_ms: Option<UnixMs>,
        now_ms: UnixMs,
    ) -> usize {
        dispatch!(self, s => s.extend_claim(claim, lease_ms, keep_until_ms, now_ms))
    }

    /// Makes scheduled jobs that are due ready; returns how many.
    pub async fn promote_due(&self, now_ms: UnixMs, max: usize) -> usize {
        dispatch!(self, s => s.promote_due(now_ms, max))
    }

    /// Handles leases that expired; `decide` gives each job's next state.
    pub async fn expire_leases(
        &self,
        now_ms: UnixMs,
        max: usize,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        dispatch!(self, s => s.expire_leases(now_ms, max, decide).await)
    }

    /// Deletes jobs past their expiry; returns how many.
    pub async fn expire_jobs(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        dispatch!(self, s => s.expire_jobs(now_ms, max).await)
    }

    /// Deletes completed jobs finished before `completed_before` and dead ones before
    /// `dead_before`, at most `max`.
    pub async fn purge_finished(
        &self,
        completed_before: UnixMs,
        dead_before: UnixMs,
        max: usize,
    ) -> Result<usize, StoreError> {
        dispatch!(self, s => s.purge_finished(completed_before, dead_before, max).await)
    }

    /// Dead jobs back to ready, unless their unique key is held by an unfinished job.
    pub async fn replay(&self, replay: &Replay, now_ms: UnixMs) -> Result<Replayed, StoreError> {
        dispatch!(self, s => s.replay(replay, now_ms).await)
    }

    /// Deletes jobs matching `selection`; returns their ids.
    pub async fn delete(&self, selection: &Selection) -> Result<Vec<JobId>, StoreError> {
        dispatch!(self, s => s.delete(selection).await)
    }

    pub async fn get(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        dispatch!(self, s => s.get(id))
    }

    /// Jobs matching `filter` with ids above `after`, in id order.
    pub async fn list(
        &self,
        filter: &JobFilter,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<Vec<Job>, StoreError> {
        dispatch!(self, s => s.list(filter, after, limit))
    }

    pub async fn counts(&self) -> Vec<QueueCounts> {
        dispatch!(self, s => s.counts())
    }

    pub async fn queue(&self, name: &str) -> Option<QueueConfig> {
        dispatch!(self, s => s.queue(name))
    }

    /// The queue's message TTL, if it has one.
    pub async fn message_ttl(&self, name: &str) -> Option<u64> {
        dispatch!(self, s => s.message_ttl(name))
    }

    pub async fn queues(&self) -> Vec<(String, QueueConfig)> {
        dispatch!(self, s => s.queues())
    }

    /// Deletes a queue's settings and jobs; returns how many jobs.
    pub async fn delete_queue(&self, name: &str) -> Result<usize, StoreError> {
        dispatch!(self, s => s.delete_queue(name).await)
    }

    pub async fn put_queue(
        &self,
        name: &str,
        config: QueueConfig,
        policy: Option<std::sync::Arc<tenax_policy::RetryPolicy>>,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_queue(name, config, policy).await)
    }

    /// A future that completes when jobs may have become ready (enqueue, promotion, retry,
    /// replay, release). Create it before trying to take, so no wake-up is lost.
    pub fn ready_signal(&self) -> &tokio::sync::Notify {
        dispatch!(self, s => s.ready_signal())
    }

    /// The earliest time maintenance has work: a scheduled job due or a lease expiring.
    pub async fn next_wakeup(&self) -> Option<UnixMs> {
        dispatch!(self, s => s.next_wakeup())
    }

    /// Fires when the earliest scheduled time may have moved earlier.
    pub fn schedule_signal(&self) -> &tokio::sync::Notify {
        dispatch!(self, s => s.schedule_signal())
    }

    /// Stores a subscription (id 0: a new one, whose id is assigned) and returns it.
    pub async fn put_subscription(
        &self,
        subscription: Subscription,
        policy: Option<std::sync::Arc<tenax_policy::RetryPolicy>>,
    ) -> Result<Subscription, StoreError> {
        dispatch!(self, s => s.put_subscription(subscription, policy).await)
    }

    /// Changes a stored subscription in place, keeping its policy; returns it.
    pub async fn patch_subscription(
        &self,
        id: SubscriptionId,
        change: &(dyn Fn(&mut Subscription) + Send + Sync),
    ) -> Result<Subscription, StoreError> {
        dispatch!(self, s => s.patch_subscription(id, change).await)
    }

    /// Deletes a subscription and its deliveries; returns how many deliveries went with it.
    pub async fn delete_subscription(&self, id: SubscriptionId) -> Result<usize, StoreError> {
        dispatch!(self, s => s.delete_subscription(id).await)
    }

    pub async fn subscription(&self, id: SubscriptionId) -> Option<Subscription> {
        dispatch!(self, s => s.subscription(id))
    }

    /// Subscriptions of `queue`, or all, in id order.
    pub async fn subscriptions(&self, queue: Option<&str>) -> Vec<Subscription> {
        dispatch!(self, s => s.subscriptions(queue))
    }

    /// The policy applying to a subscription's deliveries, unless it is the server default.
    pub async fn delivery_policy(
        &self,
        id: SubscriptionId,
    ) -> Option<std::sync::Arc<tenax_policy::RetryPolicy>> {
        dispatch!(self, s => s.delivery_policy(id))
    }

    /// Ends an attempt of an in-flight delivery and logs it in the same commit.
    pub async fn finish_delivery(
        &self,
        ack: Ack,
        attempt: &Attempt,
        retain: bool,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Finished, StoreError> {
        dispatch!(self, s => s.finish_delivery(ack, attempt, retain, now_ms, decide).await)
    }

    /// A delivery's attempts, oldest first.
    pub async fn attempts(&self, id: JobId) -> Result<Vec<Attempt>, StoreError> {
        dispatch!(self, s => s.attempts(id))
    }

    /// Counts of a subscription's deliveries by status (scheduled, ready, in flight,
    /// completed, dead).
    pub async fn delivery_counts(&self, id: SubscriptionId) -> [u64; 5] {
        dispatch!(self, s => s.delivery_counts(id))
    }

    /// Stores an API token (id 0: a new one, whose id is assigned) and returns it.
    pub async fn put_token(
        &self,
        record: crate::auth::TokenRecord,
    ) -> Result<crate::auth::TokenRecord, StoreError> {
        dispatch!(self, s => s.put_token(record).await)
    }

    /// Deletes an API token; false if there was none.
    pub async fn delete_token(&self, id: u64) -> Result<bool, StoreError> {
        dispatch!(self, s => s.delete_token(id).await)
    }

    /// Every API token, by id.
    pub async fn tokens(&self) -> Vec<crate::auth::TokenRecord> {
        dispatch!(self, s => s.tokens())
    }

    /// Flushes and stops background writers.
    pub async fn close(self) {
        dispatch!(self, s => s.close())
    }
}

/// Serialises a value that cannot fail to serialise (our own types) to JSON bytes.
pub(crate) fn to_json_bytes<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Parses JSON bytes the store wrote itself.
pub(crate) fn from_json_bytes<T: serde::de::DeserializeOwned>(
    what: &str,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
