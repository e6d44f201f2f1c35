//! Queues, schedules and subscriptions (on their queue's pool), and what is the deployment's
//! (endpoints' states, tokens, activity, servers, the lead: the catalogue's).

use std::sync::Arc;

use async_trait::async_trait;
use tenax_core::auth::TokenRecord;
use tenax_core::clock::UnixMs;
use tenax_core::model::Enqueued;
use tenax_core::model::activity::Minute;
use tenax_core::model::pool::PoolError;
use tenax_core::model::{
    EndpointState, LimitUse, LiveServer, QueueConfig, Schedule, Subscription, SubscriptionId,
};
use tenax_core::secrets::PayloadKey;
use tenax_core::store::{
    ActivityStore, ChangeEndpoint, ChangeQueue, ChangeSchedule, ChangeSubscription, DescribeServer,
    EndpointStore, FactsSeen, ImportedJob, Insert, QueueStore, ScheduleStore, ServerStore, Signals,
    StoreError, StoreImport, StoreLifecycle, StoreProperties, SubscriptionStore, TokenStore,
};

use super::{Member, PooledStore, across_pools};

impl PooledStore {
    /// Where imports go: the catalogue, while no pool is registered. With pools, copied ids
    /// would not name their pools: refused.
    pub(crate) async fn importer(&self) -> Result<Arc<Member>, StoreError> {
        let pools = self.pools().await;
        if pools.slots.len() > 1 || !pools.unopened.is_empty() {
            return Err(StoreError::Refused(
                "a deployment with pools cannot be the target of `tenax copy`: copy into the \
                 catalogue's database before its pools are registered"
                    .to_owned(),
            ));
        }
        Ok(self.catalogue.clone())
    }

    /// The pool that holds schedule `name`, if any does.
    async fn holder_of_schedule(&self, name: &str) -> Result<Option<Arc<Member>>, StoreError> {
        let found = self
            .pools()
            .await
            .each_reachable("looking for a schedule", |store| async move {
                Ok((store.clone(), store.schedule(name).await?))
            })
            .await?;
        Ok(found
            .into_iter()
            .find(|(_, schedule)| schedule.is_some())
            .map(|(store, _)| store))
    }
}

#[async_trait]
impl QueueStore for PooledStore {
    async fn queue(&self, name: &str) -> Result<Option<QueueConfig>, StoreError> {
        self.read_pool(name).await?.queue(name).await
    }

    async fn queues(&self) -> Result<Vec<(String, QueueConfig)>, StoreError> {
        let mut queues: Vec<(String, QueueConfig)> = self
            .pools()
            .await
            .each(|s| s.queues())
            .await?
            .into_iter()
            .flatten()
            .collect();
        queues.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(queues)
    }

    /// A queue lives with its dead-letter queue: a job moves there in the commit that ends
    /// its last attempt. A queue of a flavor is placed on one of the flavor's pools, and
    /// stays there.
    async fn update_queue(
        &self,
        name: &str,
        change: &ChangeQueue<'_>,
    ) -> Result<Option<QueueConfig>, StoreError> {
        let stored = self.read_pool(name).await?.queue(name).await?;
        let changed = change(stored.as_ref());
        let dead_letter = changed
            .as_ref()
            .and_then(|c| c.dead_letter.as_ref())
            .map(|d| d.queue.clone());
        // A flavor newly named: it must exist, and the queue be (or go) on one of its pools.
        let flavor = changed
            .as_ref()
            .and_then(|c| c.flavor.clone())
            .filter(|f| stored.as_ref().and_then(|s| s.flavor.as_ref()) != Some(f));
        if let Some(flavor) = &flavor {
            self.check_flavor(flavor).await?;
        }
        let mut queues = vec![name];
        queues.extend(dead_letter.as_deref());
        let (pool, _) = self
            .place_together(
                &queues,
                None,
                flavor.as_deref(),
                "the queue and its dead-letter queue",
            )
            .await?;
        if let Some(flavor) = flavor {
            let (pool_name, pool_flavor) = self.pool_named(pool.number).await;
            if pool_flavor.as_deref() != Some(flavor.as_str()) {
                return Err(StoreError::Pool(PoolError::NotOfFlavor {
                    queue: name.to_owned(),
                    pool: if pool.number == 0 {
                        "(the catalogue)".to_owned()
                    } else {
                        pool_name
                    },
                    flavor,
                }));
            }
        }
        pool.update_queue(name, change).await
    }

    async fn delete_queue(&self, name: &str, now_ms: UnixMs) -> Result<usize, StoreError> {
        self.read_pool(name).await?.delete_queue(name, now_ms).await
    }

    async fn limit_use(&self, name: &str, now_ms: UnixMs) -> Result<LimitUse, StoreError> {
        self.read_pool(name).await?.limit_use(name, now_ms).await
    }
}

/// A schedule lives on the pool of the queue its ticks enqueue into, so that a tick's record
/// and its job are one commit.
#[async_trait]
impl ScheduleStore for PooledStore {
    async fn schedule(&self, name: &str) -> Result<Option<Schedule>, StoreError> {
        match self.holder_of_schedule(name).await? {
            Some(store) => store.schedule(name).await,
            None => Ok(None),
        }
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        let mut schedules: Vec<Schedule> = self
            .pools()
            .await
            .each(|s| s.schedules())
            .await?
            .into_iter()
            .flatten()
            .collect();
        schedules.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(schedules)
    }

    async fn update_schedule(
        &self,
        name: &str,
        change: &ChangeSchedule<'_>,
    ) -> Result<Option<Schedule>, StoreError> {
        let holder = self.holder_of_schedule(name).await?;
        let stored = match holder {
            Some(ref store) => store.schedule(name).await?,
            None => None,
        };
        // Where the changed schedule's ticks go decides where it is kept.
        let Some(changed) = change(stored.as_ref()) else {
            return Ok(stored);
        };
        let target = self.place(&changed.job.queue, None).await?;
        if let Some(store) = holder
            && store.number != target.number
        {
            return Err(across_pools(
                "the schedule and the queue it would now enqueue into",
            ));
        }
        target.update_schedule(name, change).await
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, StoreError> {
        match self.holder_of_schedule(name).await? {
            Some(store) => store.delete_schedule(name).await,
            None => Ok(false),
        }
    }

    async fn due_schedules(&self, now_ms: UnixMs, max: usize) -> Result<Vec<Schedule>, StoreError> {
        let mut due: Vec<Schedule> = self
            .pools()
            .await
            .each_reachable("finding due schedules", |s| s.due_schedules(now_ms, max))
            .await?
            .into_iter()
            .flatten()
            .collect();
        due.sort_by_key(|s| s.next_tick_ms);
        due.truncate(max);
        Ok(due)
    }

    async fn record_tick(
        &self,
        schedule: &Schedule,
        expected_revision: u64,
        jobs: Vec<Insert>,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Option<Vec<Option<Enqueued>>>, StoreError> {
        let Some(store) = self.holder_of_schedule(&schedule.name).await? else {
            // Deleted meanwhile: as a stale revision.
            return Ok(None);
        };
        let seen = if jobs.is_empty() {
            super::seen_of(seen).1
        } else {
            let placed = self.pool_of_inserts(&jobs, &[]).await?;
            if placed.store.number != store.number {
                return Err(across_pools("the schedule and its tick's jobs"));
            }
            self.facts_for(&placed, seen).await?
        };
        store
            .record_tick(schedule, expected_revision, jobs, seen, now_ms)
            .await
    }
}

/// A subscription lives on its queue's pool, with its deliveries; its id names the pool.
#[async_trait]
impl SubscriptionStore for PooledStore {
    async fn insert_subscription(
        &self,
        subscription: Subscription,
    ) -> Result<(Subscription, bool), StoreError> {
        self.place(&subscription.queue, None)
            .await?
            .insert_subscription(subscription)
            .await
    }

    /// A subscription moved to another queue stays on its pool, with its deliveries: the
    /// queue it moves to must be there (it is placed there if it was nowhere yet).
    async fn update_subscription(
        &self,
        id: SubscriptionId,
        change: &ChangeSubscription<'_>,
    ) -> Result<Subscription, StoreError> {
        let home = self.of_subscription(id).await?;
        let stored = home
            .subscription(id)
            .await?
            .ok_or(StoreError::NoSubscription(id))?;
        if let Some(changed) = change(&stored)
            && changed.queue != stored.queue
        {
            self.place_together(
                &[&changed.queue],
                Some(home.clone()),
                None,
                "the subscription and the queue it would move to",
            )
            .await?;
        }
        home.update_subscription(id, change).await
    }

    async fn delete_subscription(&self, id: SubscriptionId) -> Result<usize, StoreError> {
        self.of_subscription(id)
            .await?
            .delete_subscription(id)
            .await
    }

    async fn subscription(&self, id: SubscriptionId) -> Result<Option<Subscription>, StoreError> {
        self.of_subscription(id).await?.subscription(id).await
    }

    async fn subscriptions(&self, queue: Option<&str>) -> Result<Vec<Subscription>, StoreError> {
        if let Some(queue) = queue {
            return self
                .read_pool(queue)
                .await?
                .subscriptions(Some(queue))
                .await;
        }
        let mut all: Vec<Subscription> = self
            .pools()
            .await
            .each(|s| s.subscriptions(None))
            .await?
            .into_iter()
            .flatten()
            .collect();
        all.sort_by_key(|s| s.id);
        Ok(all)
    }
}

#[async_trait]
impl EndpointStore for PooledStore {
    async fn endpoints(&self) -> Result<Vec<EndpointState>, StoreError> {
        self.catalogue.endpoints().await
    }

    async fn endpoint(&self, origin: &str) -> Result<Option<EndpointState>, StoreError> {
        self.catalogue.endpoint(origin).await
    }

    async fn update_endpoint(
        &self,
        origin: &str,
        change: &ChangeEndpoint<'_>,
    ) -> Result<Option<EndpointState>, StoreError> {
        self.catalogue.update_endpoint(origin, change).await
    }
}

#[async_trait]
impl TokenStore for PooledStore {
    async fn put_token(&self, record: TokenRecord) -> Result<TokenRecord, StoreError> {
        self.catalogue.put_token(record).await
    }

    async fn delete_token(&self, id: u64) -> Result<bool, StoreError> {
        self.catalogue.delete_token(id).await
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.catalogue.tokens().await
    }
}

#[async_trait]
impl ActivityStore for PooledStore {
    async fn add_activity(&self, minutes: &[Minute]) -> Result<(), StoreError> {
        self.catalogue.add_activity(minutes).await
    }

    async fn activity(&self, from_ms: UnixMs, to_ms: UnixMs) -> Result<Vec<Minute>, StoreError> {
        self.catalogue.activity(from_ms, to_ms).await
    }

    async fn purge_activity(&self, before_ms: UnixMs) -> Result<usize, StoreError> {
        self.catalogue.purge_activity(before_ms).await
    }
}

#[async_trait]
impl ServerStore for PooledStore {
    fn describe_server(&self, describe: DescribeServer) {
        *self.described.0.lock() = Some(describe.clone());
        for member in self.pools.read().members() {
            member.describe_server(describe.clone());
        }
    }

    async fn live_servers(&self, now_ms: UnixMs) -> Result<Vec<LiveServer>, StoreError> {
        self.catalogue.live_servers(now_ms).await
    }
}

#[async_trait]
impl StoreImport for PooledStore {
    async fn import_jobs(&self, jobs: Vec<ImportedJob>) -> Result<(), StoreError> {
        self.importer().await?.import_jobs(jobs).await
    }

    async fn import_subscription(&self, subscription: Subscription) -> Result<(), StoreError> {
        self.importer()
            .await?
            .import_subscription(subscription)
            .await
    }

    async fn import_token(&self, record: TokenRecord) -> Result<(), StoreError> {
        self.catalogue.import_token(record).await
    }
}

#[async_trait]
impl StoreLifecycle for PooledStore {
    fn properties(&self) -> StoreProperties {
        self.catalogue.properties()
    }

    fn signals(&self) -> &Signals {
        &self.signals
    }

    fn payload_key(&self) -> &PayloadKey {
        self.catalogue.payload_key()
    }

    fn servers(&self) -> usize {
        self.catalogue.servers()
    }

    /// One leader for every pool: the catalogue's. Its maintenance asks every pool.
    async fn lead(&self) -> Result<bool, StoreError> {
        self.catalogue.lead().await
    }

    async fn close(&self) {
        if let Some(watcher) = self.watcher.lock().take() {
            watcher.abort();
        }
        let members: Vec<Arc<Member>> = self.pools.read().members().cloned().collect();
        for member in members {
            member.close().await;
        }
    }
}
