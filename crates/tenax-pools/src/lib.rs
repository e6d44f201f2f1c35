//! The pooled store: queues placed across several PostgreSQL databases (Zaqar's pools).
//!
//! A pooled deployment has a catalogue, the database `--database-url` names, and pools:
//! databases registered in the catalogue (`tenax_pools`). The catalogue is itself pool 0.
//! Each queue is placed on one pool when it is first written to (by weight among the pools
//! that have one) and stays there (`tenax_placements`); its jobs, messages, leases, claims,
//! settings, subscriptions and their deliveries all live in that pool's database, so every
//! operation on one queue is one database's transaction, as on an unpooled deployment.
//!
//! Routing, the one rule of this crate:
//! - a call that names a queue goes to the queue's pool (a delivery queue to its
//!   subscription's);
//! - a call that names an id goes to the pool in the id's residue modulo 64: every pool's
//!   sequences hand out ids of its own residue ([`PostgresStore::stripe_ids`]);
//! - what belongs to the deployment, not to a queue (tokens, endpoints' states, activity,
//!   servers, the lead) is the catalogue's;
//! - everything else asks every pool and merges the answers (by id, by name).
//!
//! What one transaction cannot span is refused with a reason rather than done by halves: one
//! insert of jobs of queues on different pools, a job that waits for a job of another pool, a
//! batch whose members are on different pools.

pub mod admin;
mod jobs;
mod reads;
mod settings;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::try_join_all;
use tenax_core::clock::Clock;
use tenax_core::model::subscription::subscription_of_queue;
use tenax_core::model::{BatchId, JobId, SubscriptionId};
use tenax_core::store::{
    FactsSeen, JobReads, QueueStore, Signals, Store, StoreError, SubscriptionStore,
};
use tenax_postgres::catalogue::{PoolRecord, STRIPES, Stripes};
use tenax_postgres::{Database, PostgresOptions, PostgresStore};

/// One database of the deployment.
#[derive(Debug)]
struct Member {
    /// 0 for the catalogue.
    number: u8,
    /// New queues go to a pool in proportion to its weight.
    weight: u32,
    store: PostgresStore,
}

/// Queues placed across the catalogue's pools. See the crate's documentation.
#[derive(Debug)]
pub struct PooledStore {
    /// By number; the catalogue first (number 0).
    members: Vec<Member>,
    /// Queue → pool number, as read from or written to the catalogue: a queue's pool never
    /// changes under a running server.
    placed: parking_lot::RwLock<HashMap<String, u8>>,
    /// Fired by every member's store.
    signals: Arc<Signals>,
    /// Where the next take starts, so that no pool's queues are always served last.
    turn: AtomicUsize,
    /// Where the catalogue's ids began to stripe: every id below is the catalogue's own.
    since: Stripes,
}

/// What an id numbers.
#[derive(Debug, Clone, Copy)]
enum Sequence {
    Jobs,
    Subscriptions,
    Batches,
}

impl PooledStore {
    /// Opens the catalogue (`options`) and every pool it names, each with `options`' pool
    /// size, keys and CA certificates.
    pub async fn open(options: &PostgresOptions, clock: &Clock) -> Result<Self, StoreError> {
        let (catalogue, shared) = open_catalogue(options, clock).await?;
        let pools = catalogue.pools().await?;
        Self::around(catalogue, pools, &shared, clock).await
    }

    /// The pooled store around `catalogue`, opened with `shared` (whose signals it fires), and
    /// its `pools`.
    async fn around(
        catalogue: PostgresStore,
        pools: Vec<PoolRecord>,
        shared: &PostgresOptions,
        clock: &Clock,
    ) -> Result<Self, StoreError> {
        let signals = shared.signals.clone().unwrap_or_default();
        let weighed = pools.iter().any(|p| p.weight > 0);
        let since = catalogue.stripes().await?;
        let mut members = vec![Member {
            number: 0,
            weight: u32::from(!weighed),
            store: catalogue,
        }];
        for pool in pools {
            members.push(open_pool(shared, &pool, clock).await?);
        }
        members.sort_by_key(|m| m.number);
        Ok(Self {
            members,
            placed: parking_lot::RwLock::new(HashMap::new()),
            signals,
            turn: AtomicUsize::new(0),
            since,
        })
    }

    /// The catalogue's store: pool 0, and the home of what is the deployment's.
    fn catalogue(&self) -> &PostgresStore {
        &self.members[0].store
    }

    fn member(&self, number: u8) -> Option<&Member> {
        self.members.iter().find(|m| m.number == number)
    }

    /// The pool that handed out `id` of `sequence`: the catalogue for ids from before it
    /// striped them, else the pool of the id's remainder. An id of a pool no longer
    /// registered is looked for in the catalogue, which then answers that it has none.
    fn of_id(&self, sequence: Sequence, id: u64) -> &PostgresStore {
        let since = match sequence {
            Sequence::Jobs => self.since.jobs,
            Sequence::Subscriptions => self.since.subscriptions,
            Sequence::Batches => self.since.batches,
        };
        if i64::try_from(id).is_ok_and(|id| id < since) {
            return self.catalogue();
        }
        let residue = u8::try_from(id % STRIPES.unsigned_abs()).unwrap_or(0);
        self.member(residue)
            .map_or_else(|| self.catalogue(), |m| &m.store)
    }

    fn of_job(&self, id: JobId) -> &PostgresStore {
        self.of_id(Sequence::Jobs, id.0)
    }

    fn of_subscription(&self, id: SubscriptionId) -> &PostgresStore {
        self.of_id(Sequence::Subscriptions, id.0)
    }

    fn of_batch(&self, id: BatchId) -> &PostgresStore {
        self.of_id(Sequence::Batches, id.0)
    }

    /// The pool of `queue` if it was placed (a queue never written to has no jobs, settings or
    /// subscriptions anywhere).
    async fn placed(&self, queue: &str) -> Result<Option<&PostgresStore>, StoreError> {
        if let Some(subscription) = subscription_of_queue(queue) {
            return Ok(Some(self.of_subscription(subscription)));
        }
        if let Some(number) = self.placed.read().get(queue).copied() {
            return self.pool_numbered(number, queue).map(Some);
        }
        let Some(number) = self.catalogue().placement(queue).await? else {
            return Ok(None);
        };
        self.placed.write().insert(queue.to_owned(), number);
        Ok(Some(self.pool_numbered(number, queue)?))
    }

    /// The number of the pool `store` is.
    fn number_of(&self, store: &PostgresStore) -> u8 {
        self.members
            .iter()
            .find(|m| std::ptr::eq(&m.store, store))
            .map_or(0, |m| m.number)
    }

    /// Places `queues` together, on the pool of those already placed, or `anchor`'s, or else
    /// chosen for the first: what one transaction writes (a job and the jobs it waits for, a
    /// batch and its callbacks, a queue and its dead-letter queue) must be in one database.
    /// Refused when two of them are placed on different pools already. Says too whether
    /// every one of them was placed by this call (none had anything stored anywhere before).
    async fn place_together<'a>(
        &'a self,
        queues: &[&str],
        anchor: Option<&'a PostgresStore>,
        what: &str,
    ) -> Result<(&'a PostgresStore, bool), StoreError> {
        let mut pool = anchor;
        let mut unplaced = Vec::new();
        for queue in queues {
            match self.placed(queue).await? {
                Some(store) if pool.is_some_and(|p| !std::ptr::eq(p, store)) => {
                    return Err(across_pools(what));
                }
                Some(store) => pool = Some(store),
                None => unplaced.push(*queue),
            }
        }
        let fresh = unplaced.len() == queues.len();
        let pool = match pool {
            Some(pool) => pool,
            None => match unplaced.first() {
                Some(first) => self.place(first).await?,
                None => return Ok((self.catalogue(), false)),
            },
        };
        let number = self.number_of(pool);
        for queue in unplaced {
            if self.catalogue().place(queue, number).await? != number {
                // Placed elsewhere meanwhile by another server.
                return Err(across_pools(what));
            }
            self.placed.write().insert(queue.to_owned(), number);
        }
        Ok((pool, fresh))
    }

    /// The pool of `queue`, placing it now if it has none: by weight among the pools.
    async fn place(&self, queue: &str) -> Result<&PostgresStore, StoreError> {
        if let Some(store) = self.placed(queue).await? {
            return Ok(store);
        }
        let chosen = if self.held_by_catalogue(queue).await? {
            0
        } else {
            self.by_weight(queue)
        };
        let number = self.catalogue().place(queue, chosen).await?;
        self.placed.write().insert(queue.to_owned(), number);
        self.pool_numbered(number, queue)
    }

    /// Whether the catalogue's database holds something of `queue` already (written before
    /// the pools were registered): such a queue stays where its data is.
    async fn held_by_catalogue(&self, queue: &str) -> Result<bool, StoreError> {
        let catalogue = self.catalogue();
        if catalogue.queue(queue).await?.is_some() {
            return Ok(true);
        }
        let counts = catalogue.queue_counts(queue).await?;
        let held = counts.scheduled
            + counts.ready
            + counts.in_flight
            + counts.completed
            + counts.dead
            + counts.cancelled;
        if held > 0 {
            return Ok(true);
        }
        Ok(!catalogue.subscriptions(Some(queue)).await?.is_empty())
    }

    fn pool_numbered(&self, number: u8, queue: &str) -> Result<&PostgresStore, StoreError> {
        self.member(number).map(|m| &m.store).ok_or_else(|| {
            StoreError::Refused(format!(
                "queue {queue:?} is placed on pool {number}, which this server does not know: \
                 restart it to read the catalogue again"
            ))
        })
    }

    /// A pool number for `queue`, in proportion to the pools' weights: drawn from the queue's
    /// name, so that every server would choose the same (the catalogue keeps the first choice
    /// written in any case).
    fn by_weight(&self, queue: &str) -> u8 {
        use std::hash::{Hash, Hasher};
        let total: u64 = self.members.iter().map(|m| u64::from(m.weight)).sum();
        if total == 0 {
            return 0;
        }
        let mut hasher = std::hash::DefaultHasher::new();
        queue.hash(&mut hasher);
        let mut draw = hasher.finish() % total;
        for member in &self.members {
            let weight = u64::from(member.weight);
            if draw < weight {
                return member.number;
            }
            draw -= weight;
        }
        0
    }

    /// Every member's store, the catalogue first.
    fn stores(&self) -> impl Iterator<Item = &PostgresStore> {
        self.members.iter().map(|m| &m.store)
    }

    /// `call` on every pool at once; the answers in the pools' order.
    async fn each<'a, T, F, Fut>(&'a self, call: F) -> Result<Vec<T>, StoreError>
    where
        F: Fn(&'a PostgresStore) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        try_join_all(self.stores().map(call)).await
    }

    /// `call` on every pool at once, passing over those that cannot be reached (each said in
    /// the log): the maintenance of the others goes on while one is down. Fails only when no
    /// pool answered.
    async fn each_reachable<'a, T, F, Fut>(
        &'a self,
        what: &str,
        call: F,
    ) -> Result<Vec<T>, StoreError>
    where
        F: Fn(&'a PostgresStore) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let answers = futures_util::future::join_all(self.stores().map(call)).await;
        let mut reached = Vec::with_capacity(answers.len());
        let mut unreachable = None;
        for (member, answer) in self.members.iter().zip(answers) {
            match answer {
                Ok(answer) => reached.push(answer),
                Err(error @ StoreError::Unavailable(_)) => {
                    tracing::warn!(pool = member.number, %error, "{what}: a pool is unavailable");
                    unreachable.get_or_insert(error);
                }
                Err(error) => return Err(error),
            }
        }
        match unreachable {
            Some(error) if reached.is_empty() => Err(error),
            _ => Ok(reached),
        }
    }

    /// Groups `items` by the pool `pool_of` names, keeping each item's index.
    fn group<'a, T: Copy>(
        &'a self,
        items: &[T],
        pool_of: impl Fn(T) -> &'a PostgresStore,
    ) -> Vec<(&'a PostgresStore, Vec<(usize, T)>)> {
        let mut groups: Vec<(&PostgresStore, Vec<(usize, T)>)> = Vec::new();
        for (at, item) in items.iter().copied().enumerate() {
            let store = pool_of(item);
            match groups.iter_mut().find(|(s, _)| std::ptr::eq(*s, store)) {
                Some((_, members)) => members.push((at, item)),
                None => groups.push((store, vec![(at, item)])),
            }
        }
        groups
    }

    /// The members in the order a take asks them, starting one further each time.
    fn in_turn(&self) -> Vec<&PostgresStore> {
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % self.members.len();
        (0..self.members.len())
            .map(|i| &self.members[(start + i) % self.members.len()].store)
            .collect()
    }
}

/// Opens the store `options` name: the pooled store when its database's catalogue has pools,
/// else that database's own store, as before pools.
pub async fn open(options: &PostgresOptions, clock: &Clock) -> Result<Arc<dyn Store>, StoreError> {
    let (catalogue, shared) = open_catalogue(options, clock).await?;
    let pools = catalogue.pools().await?;
    if pools.is_empty() {
        return Ok(Arc::new(catalogue));
    }
    Ok(Arc::new(
        PooledStore::around(catalogue, pools, &shared, clock).await?,
    ))
}

/// The catalogue's store, firing signals of its own that its pools will share (alone, it is
/// an ordinary store), and the options the pools are opened with.
async fn open_catalogue(
    options: &PostgresOptions,
    clock: &Clock,
) -> Result<(PostgresStore, PostgresOptions), StoreError> {
    let shared = PostgresOptions {
        signals: Some(Arc::new(Signals::default())),
        ..options.clone()
    };
    Ok((PostgresStore::open(&shared, clock).await?, shared))
}

/// Opens pool `pool` as a member: its database, with the catalogue's options, its ids striped.
async fn open_pool(
    shared: &PostgresOptions,
    pool: &PoolRecord,
    clock: &Clock,
) -> Result<Member, StoreError> {
    let database = Database::new(&pool.uri, shared.ca_file.as_deref()).map_err(|e| {
        StoreError::Refused(format!("pool {:?}: {e}", pool.name).replace("--database-url: ", ""))
    })?;
    let options = PostgresOptions {
        database,
        ..shared.clone()
    };
    let store = PostgresStore::open(&options, clock).await?;
    Ok(Member {
        number: pool.number,
        weight: pool.weight,
        store,
    })
}

/// The refusal of what one transaction cannot span.
fn across_pools(what: &str) -> StoreError {
    StoreError::AcrossPools(format!(
        "{what} are on different pools, and one transaction changes one pool: place them \
         together (`tenax queues move`)"
    ))
}

/// A facts version of the pooled store: the version of the pool the facts were read from,
/// with the pool's number, so that an insert made from them goes to that pool or is refused
/// as made from old facts (the engine then reads them again, from the right pool).
fn seen_in(number: u8, seen: FactsSeen) -> FactsSeen {
    FactsSeen((seen.0 << 6) | u64::from(number))
}

/// The pool number and the pool's own version of a pooled facts version.
fn seen_of(seen: FactsSeen) -> (u8, FactsSeen) {
    (
        u8::try_from(seen.0 & 63).unwrap_or(0),
        FactsSeen(seen.0 >> 6),
    )
}
