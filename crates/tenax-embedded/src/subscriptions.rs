//! Subscriptions, with their two indexes: by queue, and by unique endpoint.

use async_trait::async_trait;
use tenax_core::model::subscription::delivery_queue;
use tenax_core::model::{Subscription, SubscriptionId};
use tenax_core::store::sealed::to_stored;
use tenax_core::store::{ChangeSubscription, StoreError, SubscriptionStore};

use super::ops::Op;
use super::writer;
use super::{EmbeddedStore, Inner};

#[async_trait]
impl SubscriptionStore for EmbeddedStore {
    async fn insert_subscription(
        &self,
        mut subscription: Subscription,
    ) -> Result<(Subscription, bool), StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if let Some(holder) = endpoint_holder(&inner, &subscription) {
                if let Some(existing) = inner.subscriptions.get(&holder) {
                    return Ok((existing.clone(), false));
                }
            }
            subscription.id = inner.next_subscription_id;
            let stored = to_stored(&subscription, &self.keys)?;
            inner.next_subscription_id = SubscriptionId(subscription.id.0 + 1);
            let receiver = self.writer.submit(vec![Op::PutSubscription {
                id: subscription.id,
                subscription: stored,
            }]);
            install(&mut inner, subscription.clone());
            receiver
        };
        writer::wait(receiver).await?;
        self.changed(&subscription);
        Ok((subscription, true))
    }

    async fn update_subscription(
        &self,
        id: SubscriptionId,
        change: &ChangeSubscription<'_>,
    ) -> Result<Subscription, StoreError> {
        let (subscription, receiver) = {
            let mut inner = self.inner.lock();
            let Some(current) = inner.subscriptions.get(&id) else {
                return Err(StoreError::NoSubscription(id));
            };
            let Some(mut subscription) = change(current) else {
                return Ok(current.clone());
            };
            subscription.id = id;
            if let Some(holder) = endpoint_holder(&inner, &subscription).filter(|h| *h != id) {
                return Err(StoreError::EndpointTaken {
                    queue: subscription.queue,
                    endpoint: subscription.endpoint,
                    holder,
                });
            }
            let receiver = self.writer.submit(vec![Op::PutSubscription {
                id,
                subscription: to_stored(&subscription, &self.keys)?,
            }]);
            install(&mut inner, subscription.clone());
            (subscription, receiver)
        };
        writer::wait(receiver).await?;
        self.changed(&subscription);
        Ok(subscription)
    }

    async fn delete_subscription(&self, id: SubscriptionId) -> Result<usize, StoreError> {
        let completed = self.completed_of_queue(&delivery_queue(id))?;
        let (deliveries, receiver) = {
            let mut inner = self.inner.lock();
            let Some(subscription) = inner.subscriptions.remove(&id) else {
                return Err(StoreError::NoSubscription(id));
            };
            uninstall(&mut inner, &subscription);
            let mut ids = self.jobs_of_queue(&inner.index, &delivery_queue(id));
            ids.extend(completed);
            ids.sort_unstable();
            ids.dedup();
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
        self.signals.subscriptions.notify_waiters();
        Ok(deliveries)
    }

    async fn subscription(&self, id: SubscriptionId) -> Result<Option<Subscription>, StoreError> {
        Ok(self.inner.lock().subscriptions.get(&id).cloned())
    }

    async fn subscriptions(&self, queue: Option<&str>) -> Result<Vec<Subscription>, StoreError> {
        let inner = self.inner.lock();
        let mut all: Vec<Subscription> = match queue {
            Some(queue) => inner
                .subscribed
                .get(queue)
                .into_iter()
                .flatten()
                .filter_map(|id| inner.subscriptions.get(id))
                .cloned()
                .collect(),
            None => inner.subscriptions.values().cloned().collect(),
        };
        all.sort_by_key(|s| s.id);
        Ok(all)
    }
}

impl EmbeddedStore {
    /// Wakes the runners, and takers of deliveries that a change may have freed.
    fn changed(&self, subscription: &Subscription) {
        self.signals.subscriptions.notify_waiters();
        if subscription.enabled {
            self.signals.ready.notify_waiters();
        }
    }
}

/// The subscription of the same queue holding `subscription`'s unique endpoint, if any.
fn endpoint_holder(inner: &Inner, subscription: &Subscription) -> Option<SubscriptionId> {
    let endpoint = subscription.unique_endpoint()?;
    inner
        .endpoints
        .get(&(subscription.queue.clone(), endpoint.to_owned()))
        .copied()
}

/// Puts a subscription into memory and its indexes, replacing its earlier version. Called
/// under the lock (or while rebuilding).
pub(super) fn install(inner: &mut Inner, subscription: Subscription) {
    if let Some(old) = inner.subscriptions.remove(&subscription.id) {
        uninstall(inner, &old);
    }
    let id = subscription.id;
    let ids = inner
        .subscribed
        .entry(subscription.queue.clone())
        .or_default();
    if let Err(at) = ids.binary_search(&id) {
        ids.insert(at, id);
    }
    if let Some(endpoint) = subscription.unique_endpoint() {
        inner
            .endpoints
            .insert((subscription.queue.clone(), endpoint.to_owned()), id);
    }
    inner.subscriptions.insert(id, subscription);
}

/// Takes a subscription out of the indexes (not out of `subscriptions`).
fn uninstall(inner: &mut Inner, subscription: &Subscription) {
    let id = subscription.id;
    if let Some(ids) = inner.subscribed.get_mut(&subscription.queue) {
        ids.retain(|s| *s != id);
        if ids.is_empty() {
            inner.subscribed.remove(&subscription.queue);
        }
    }
    if let Some(endpoint) = subscription.unique_endpoint() {
        let key = (subscription.queue.clone(), endpoint.to_owned());
        if inner.endpoints.get(&key) == Some(&id) {
            inner.endpoints.remove(&key);
        }
    }
}
