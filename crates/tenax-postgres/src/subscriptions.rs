//! Webhook subscriptions: a row each, with the columns takes and the unique-endpoint index
//! need beside the whole subscription as JSON.

use async_trait::async_trait;
use tenax_core::model::subscription::delivery_queue;
use tenax_core::model::{Subscription, SubscriptionId};
use tenax_core::secrets::Keyring;
use tenax_core::store::{ChangeSubscription, StoreError, SubscriptionStore};

use super::dependents::{self, settle};
use super::rows::{count_of, id, stored_subscription, subscription_of, unid};
use super::statements::statements;
use super::transitions::{execute, query, subscription_row};
use super::wakeups::Wakeup;
use super::{PostgresStore, RETRIES, facts, fault, is_conflict};

/// The subscription of `subscription`'s queue holding its unique endpoint, other than itself.
async fn endpoint_holder<C: deadpool_postgres::GenericClient>(
    client: &C,
    subscription: &Subscription,
    keys: &Keyring,
) -> Result<Option<Subscription>, StoreError> {
    let Some(endpoint) = subscription.unique_endpoint() else {
        return Ok(None);
    };
    let rows = query(
        client,
        &ENDPOINT_HOLDER,
        &[&subscription.queue, &endpoint, &id(subscription.id.0)],
    )
    .await
    .map_err(fault("looking for a subscription's endpoint"))?;
    rows.first()
        .map(|r| subscription_of(r.get(0), keys))
        .transpose()
}

#[async_trait]
impl SubscriptionStore for PostgresStore {
    async fn insert_subscription(
        &self,
        mut subscription: Subscription,
    ) -> Result<(Subscription, bool), StoreError> {
        let what = "storing a subscription";
        let client = self.client().await?;
        for _ in 0..RETRIES {
            subscription.id = SubscriptionId(0);
            if let Some(holder) = endpoint_holder(&client, &subscription, &self.keys).await? {
                return Ok((holder, false));
            }
            let next = query(&client, &NEXT_ID, &[]).await.map_err(fault(what))?;
            subscription.id = SubscriptionId(unid(next.first().map_or(0, |r| r.get(0))));
            let stored = stored_subscription(&subscription, &self.keys)?;
            let inserted = query(
                &client,
                &INSERT,
                &[
                    &id(subscription.id.0),
                    &subscription.queue,
                    &subscription.enabled,
                    &subscription.unique_endpoint(),
                    &stored,
                ],
            )
            .await
            .map_err(fault(what))?;
            if count_of(inserted.first().map(|r| r.get(0))) == 1 {
                self.facts.forget();
                self.changed(&subscription);
                return Ok((subscription, true));
            }
            // Another server stored one with the endpoint meanwhile: answer with it.
        }
        Err(StoreError::storage(
            what,
            std::io::Error::other("the endpoint kept changing hands"),
        ))
    }

    async fn update_subscription(
        &self,
        subscription: SubscriptionId,
        change: &ChangeSubscription<'_>,
    ) -> Result<Subscription, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_update_subscription(subscription, change).await {
                Err(error) if is_conflict(&error) && attempt < RETRIES => continue,
                done => return done,
            }
        }
    }

    async fn delete_subscription(&self, subscription: SubscriptionId) -> Result<usize, StoreError> {
        let what = "deleting a subscription";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(
            &tx,
            &DELETE,
            &[&id(subscription.0), &delivery_queue(subscription)],
        )
        .await
        .map_err(fault(what))?;
        let parents = rows
            .first()
            .map_or_else(Vec::new, |r| dependents::deleted(r.get(2), r.get(3)));
        let settled = settle(&tx, &parents, self.clock.now_ms()).await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        let (gone, deliveries) = rows
            .first()
            .map_or((0, 0), |r| (count_of(r.get(0)), count_of(r.get(1))));
        if gone == 0 {
            return Err(StoreError::NoSubscription(subscription));
        }
        self.facts.forget();
        self.announce(Wakeup::Subscriptions);
        self.announce(Wakeup::Released);
        Ok(deliveries)
    }

    async fn subscription(
        &self,
        subscription: SubscriptionId,
    ) -> Result<Option<Subscription>, StoreError> {
        subscription_row(&self.client().await?, subscription, false, &self.keys).await
    }

    async fn subscriptions(&self, queue: Option<&str>) -> Result<Vec<Subscription>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &LIST, &[&queue])
            .await
            .map_err(fault("listing subscriptions"))?;
        rows.iter()
            .map(|r| subscription_of(r.get(0), &self.keys))
            .collect()
    }
}

impl PostgresStore {
    async fn try_update_subscription(
        &self,
        subscription: SubscriptionId,
        change: &ChangeSubscription<'_>,
    ) -> Result<Subscription, StoreError> {
        let what = "changing a subscription";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let Some(current) = subscription_row(&tx, subscription, true, &self.keys).await? else {
            return Err(StoreError::NoSubscription(subscription));
        };
        let Some(mut changed) = change(&current) else {
            return Ok(current);
        };
        changed.id = subscription;
        if let Some(holder) = endpoint_holder(&tx, &changed, &self.keys).await? {
            return Err(StoreError::EndpointTaken {
                queue: changed.queue,
                endpoint: changed.endpoint,
                holder: holder.id,
            });
        }
        execute(
            &tx,
            &UPDATE,
            &[
                &id(subscription.0),
                &changed.queue,
                &changed.enabled,
                &changed.unique_endpoint(),
                &stored_subscription(&changed, &self.keys)?,
            ],
        )
        .await
        .map_err(fault(what))?;
        let moved = changed.queue != current.queue;
        if moved {
            execute(&tx, &facts::ADVANCE, &[])
                .await
                .map_err(fault(what))?;
        }
        tx.commit().await.map_err(fault(what))?;
        if moved {
            self.facts.forget();
        }
        self.changed(&changed);
        Ok(changed)
    }

    /// Wakes the runners, and takers of deliveries that a change may have freed.
    fn changed(&self, subscription: &Subscription) {
        self.announce(Wakeup::Subscriptions);
        if subscription.enabled {
            self.announce(Wakeup::Ready);
        }
    }
}

statements! {
    ENDPOINT_HOLDER = "SELECT body FROM tenax_subscriptions
         WHERE queue = $1 AND endpoint_key = $2 AND id <> $3";
    NEXT_ID = "SELECT nextval('tenax_subscription_ids')";
    /// Stores a subscription unless another holds its id or unique endpoint, and advances the
    /// facts version if it did ([`super::facts`]).
    pub INSERT = "WITH stored AS (
                     INSERT INTO tenax_subscriptions (id, queue, enabled, endpoint_key, body)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING 1),
                 advanced AS (UPDATE tenax_facts SET version = version + 1
                              WHERE EXISTS (SELECT 1 FROM stored))
                 SELECT count(*) FROM stored";
    /// Deletes a subscription (`$1`) and its deliveries (queue `$2`); advances the facts
    /// version if it was there. Answers the count of each, then the ids of deliveries with
    /// children, unfinished and finished ([`super::dependents`]).
    DELETE = "WITH gone AS (DELETE FROM tenax_subscriptions WHERE id = $1 RETURNING id),
                  advanced AS (UPDATE tenax_facts SET version = version + 1
                               WHERE EXISTS (SELECT 1 FROM gone)),
                  live AS (DELETE FROM tenax_jobs WHERE queue = $2
                           AND EXISTS (SELECT 1 FROM gone) RETURNING id, has_children),
                  finished AS (DELETE FROM tenax_finished WHERE queue = $2
                               AND EXISTS (SELECT 1 FROM gone) RETURNING id, has_children)
             SELECT (SELECT count(*) FROM gone),
                    (SELECT count(*) FROM live) + (SELECT count(*) FROM finished),
                    ARRAY(SELECT id FROM live WHERE has_children),
                    ARRAY(SELECT id FROM finished WHERE has_children)";
    /// All subscriptions, or those of queue `$1`.
    LIST = "SELECT body FROM tenax_subscriptions
             WHERE $1::text IS NULL OR queue = $1::text ORDER BY id";
    UPDATE = "UPDATE tenax_subscriptions SET queue = $2, enabled = $3, endpoint_key = $4, body = $5
             WHERE id = $1";
}
