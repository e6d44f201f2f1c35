//! Subscriptions, and the delivery side of a delivery job: finishing an attempt, and its log.
//!
//! Each subscription's deliveries sit in its internal queue, whose settings are derived here
//! (never stored): its policy is the one that applies to the subscription's deliveries, and it
//! is paused while the subscription is disabled. Derived settings are recomputed whenever the
//! subscription or its queue changes.

use std::sync::Arc;

use redb::ReadableDatabase;
use tenax_policy::RetryPolicy;
use tenax_policy::spelling::native;

use super::writer::{self, Op};
use super::{EmbeddedStore, Inner, QueueEntry, SubscriptionEntry};
use crate::clock::UnixMs;
use crate::model::subscription::delivery_queue;
use crate::model::{Attempt, AttemptResult, JobId, Subscription, SubscriptionId};
use crate::store::{
    Ack, Decide, QueueConfig, StoreError, Transition, from_json_bytes, to_json_bytes,
};

/// How a finished attempt left its delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    Delivered,
    Failed(Transition),
}

impl EmbeddedStore {
    /// Stores a subscription. An id of 0 asks for a new one; the stored subscription is
    /// returned. `policy` is `subscription.policy` parsed.
    pub async fn put_subscription(
        &self,
        mut subscription: Subscription,
        policy: Option<Arc<RetryPolicy>>,
    ) -> Result<Subscription, StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if subscription.id == 0 {
                subscription.id = inner.next_subscription_id;
                inner.next_subscription_id += 1;
            } else if !inner.subscriptions.contains_key(&subscription.id) {
                return Err(StoreError::NoSubscription(subscription.id));
            }
            let receiver = self.writer.submit(vec![Op::PutSubscription {
                id: subscription.id,
                subscription: to_json_bytes(&subscription),
            }]);
            install(&mut inner, subscription.clone(), policy);
            receiver
        };
        writer::wait(receiver).await?;
        if subscription.enabled {
            self.ready.notify_waiters();
        }
        Ok(subscription)
    }

    /// Changes a stored subscription in place (its policy stays as it is) and returns it.
    pub async fn patch_subscription(
        &self,
        id: SubscriptionId,
        change: &(dyn Fn(&mut Subscription) + Send + Sync),
    ) -> Result<Subscription, StoreError> {
        let (subscription, receiver) = {
            let mut inner = self.inner.lock();
            let Some(entry) = inner.subscriptions.get(&id) else {
                return Err(StoreError::NoSubscription(id));
            };
            let mut subscription = entry.subscription.clone();
            let policy = entry.policy.clone();
            change(&mut subscription);
            subscription.id = id;
            let receiver = self.writer.submit(vec![Op::PutSubscription {
                id,
                subscription: to_json_bytes(&subscription),
            }]);
            install(&mut inner, subscription.clone(), policy);
            (subscription, receiver)
        };
        writer::wait(receiver).await?;
        if subscription.enabled {
            self.ready.notify_waiters();
        }
        Ok(subscription)
    }

    /// Deletes a subscription and every delivery it has (with their attempt logs).
    pub async fn delete_subscription(&self, id: SubscriptionId) -> Result<usize, StoreError> {
        let (deliveries, receiver) = {
            let mut inner = self.inner.lock();
            let Some(entry) = inner.subscriptions.remove(&id) else {
                return Err(StoreError::NoSubscription(id));
            };
            let queue = &entry.subscription.queue;
            if let Some(ids) = inner.subscribed.get_mut(queue) {
                ids.retain(|s| *s != id);
                if ids.is_empty() {
                    inner.subscribed.remove(queue);
                }
            }
            let deliveries = delivery_queue(id);
            inner.queues.remove(&deliveries);
            let ids: Vec<JobId> = inner
                .index
                .entries()
                .filter(|(_, e)| *e.queue == *deliveries)
                .map(|(id, _)| *id)
                .collect();
            let mut ops = Vec::with_capacity(ids.len() + 1);
            for job in &ids {
                inner.index.remove(*job);
                ops.push(Op::DeleteJob { id: *job });
            }
            ops.push(Op::DeleteSubscription {
                id,
                next_id: inner.next_subscription_id,
            });
            (ids.len(), self.writer.submit(ops))
        };
        writer::wait(receiver).await?;
        Ok(deliveries)
    }

    pub fn subscription(&self, id: SubscriptionId) -> Option<Subscription> {
        let inner = self.inner.lock();
        inner.subscriptions.get(&id).map(|e| e.subscription.clone())
    }

    /// Subscriptions of `queue` (all when `None`), in id order.
    pub fn subscriptions(&self, queue: Option<&str>) -> Vec<Subscription> {
        let inner = self.inner.lock();
        let mut all: Vec<Subscription> = match queue {
            Some(queue) => inner
                .subscribed
                .get(queue)
                .into_iter()
                .flatten()
                .filter_map(|id| inner.subscriptions.get(id))
                .map(|e| e.subscription.clone())
                .collect(),
            None => inner
                .subscriptions
                .values()
                .map(|e| e.subscription.clone())
                .collect(),
        };
        all.sort_by_key(|s| s.id);
        all
    }

    /// The policy that applies to `id`'s deliveries, if any but the server's default.
    pub fn delivery_policy(&self, id: SubscriptionId) -> Option<Arc<RetryPolicy>> {
        let inner = self.inner.lock();
        inner
            .queues
            .get(&delivery_queue(id))
            .and_then(|q| q.policy.clone())
    }

    /// Ends an attempt of an in-flight delivery: `Delivered` completes it (kept for the
    /// completed retention when `retain`), a failure asks `decide`. The attempt is logged in the
    /// same commit.
    pub async fn finish_delivery(
        &self,
        ack: Ack,
        attempt: &Attempt,
        retain: bool,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Finished, StoreError> {
        let (finished, receiver) = {
            let mut inner = self.inner.lock();
            super::leases::check_lease(&inner.index, ack)?;
            let log = Op::PutAttempt {
                id: ack.id,
                entry: to_json_bytes(attempt),
            };
            if attempt.result == AttemptResult::Delivered {
                let mut ops = vec![log];
                ops.extend(super::leases::complete_one(
                    &mut inner, ack.id, retain, now_ms,
                ));
                (Finished::Delivered, self.writer.submit(ops))
            } else {
                let inner = &mut *inner;
                let mut transition = super::leases::decide_on(inner, ack.id, decide)
                    .ok_or(StoreError::NotFound(ack.id))?;
                let receiver = self.apply(inner, ack.id, &mut transition, now_ms, vec![log]);
                (Finished::Failed(transition), receiver)
            }
        };
        writer::wait(receiver).await?;
        if let Finished::Failed(transition) = &finished {
            self.signal(transition);
        }
        Ok(finished)
    }

    /// A delivery's attempts, oldest first.
    pub fn attempts(&self, id: JobId) -> Result<Vec<Attempt>, StoreError> {
        let storage = |e: &dyn std::fmt::Display| StoreError::Storage(e.to_string());
        let tx = self.db.begin_read().map_err(|e| storage(&e))?;
        let table = tx
            .open_table(super::tables::ATTEMPTS)
            .map_err(|e| storage(&e))?;
        let mut attempts = Vec::new();
        for row in table
            .range((id, 0)..=(id, u32::MAX))
            .map_err(|e| storage(&e))?
        {
            let (_, bytes) = row.map_err(|e| storage(&e))?;
            attempts.push(from_json_bytes("delivery attempt", bytes.value())?);
        }
        Ok(attempts)
    }

    /// Status counts of `id`'s deliveries: scheduled, ready, in flight, completed, dead.
    pub fn delivery_counts(&self, id: SubscriptionId) -> [u64; 5] {
        let queue = delivery_queue(id);
        let inner = self.inner.lock();
        inner
            .index
            .counts()
            .find(|(name, _)| *name == queue)
            .map_or([0; 5], |(_, counts)| counts)
    }
}

/// Puts a subscription into memory and derives its delivery queue's settings. Called under the
/// lock (or while rebuilding).
pub(super) fn install(
    inner: &mut Inner,
    subscription: Subscription,
    policy: Option<Arc<RetryPolicy>>,
) {
    let id = subscription.id;
    if let Some(old) = inner.subscriptions.get(&id) {
        let old_queue = old.subscription.queue.clone();
        if let Some(ids) = inner.subscribed.get_mut(&old_queue) {
            ids.retain(|s| *s != id);
        }
    }
    let ids = inner
        .subscribed
        .entry(subscription.queue.clone())
        .or_default();
    if let Err(at) = ids.binary_search(&id) {
        ids.insert(at, id);
    }
    let queue = subscription.queue.clone();
    inner.subscriptions.insert(
        id,
        SubscriptionEntry {
            subscription,
            policy,
        },
    );
    derive(inner, id, inner.queues.get(&queue).cloned());
}

/// Recomputes the delivery queues of every subscription of `queue` (its settings changed).
/// Called under the lock.
pub(super) fn rederive_queue(inner: &mut Inner, queue: &str) {
    let parent = inner.queues.get(queue).cloned();
    for id in inner.subscribed.get(queue).cloned().unwrap_or_default() {
        derive(inner, id, parent.clone());
    }
}

/// The delivery queue's settings: the queue's policy when it forbids overrides, else the
/// subscription's own, else the queue's; paused while the subscription is disabled.
fn derive(inner: &mut Inner, id: SubscriptionId, parent: Option<QueueEntry>) {
    let Some(entry) = inner.subscriptions.get(&id) else {
        return;
    };
    let forbid = parent.as_ref().is_some_and(|p| p.config.disable_overrides);
    let (json, policy) = match (&entry.subscription.policy, &entry.policy, &parent) {
        (Some(json), Some(policy), _) if !forbid => (Some(json.clone()), Some(policy.clone())),
        (_, _, Some(parent)) => (parent.config.policy.clone(), parent.policy.clone()),
        _ => (None, None),
    };
    let config = QueueConfig {
        policy: json,
        paused: !entry.subscription.enabled,
        ..QueueConfig::default()
    };
    inner
        .queues
        .insert(delivery_queue(id), QueueEntry { config, policy });
}

/// Parses a stored policy (used when rebuilding).
pub(super) fn parse_policy(
    what: &str,
    value: Option<&serde_json::Value>,
) -> Result<Option<Arc<RetryPolicy>>, StoreError> {
    value
        .map(|value| {
            native::parse(value)
                .map(Arc::new)
                .map_err(|e| StoreError::Corrupt(format!("{what} policy: {e}")))
        })
        .transpose()
}
