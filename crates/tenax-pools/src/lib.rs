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
//!
//! Pools are registered and changed while servers run. Each server holds the pools as it last
//! loaded them ([`Pools`]): a call routes through one such snapshot from start to end. The
//! server loads them again when the catalogue says they changed (a notification, and a read of
//! the catalogue's version every [`LOAD_EVERY`]), and before it routes anything on a snapshot
//! older than [`TRUSTED_FOR`]. A new pool takes queues only once every server has loaded it
//! (or when a server could not have gone without it any longer): so no server is ever handed
//! an id of a pool it does not know, nor routes a queue by a placement it cannot see.

pub mod admin;
mod jobs;
mod moves;
mod reads;
mod registry;
mod settings;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use futures_util::future::try_join_all;
use tenax_core::clock::Clock;
use tenax_core::model::pool::PoolError;
use tenax_core::model::subscription::subscription_of_queue;
use tenax_core::model::{BatchId, JobId, SubscriptionId};
use tenax_core::store::{
    DescribeServer, FactsSeen, JobReads, QueueStore, ServerStore, Signals, StorageFault,
    StoreError, StoreLifecycle, SubscriptionStore,
};
pub(crate) use tenax_postgres::catalogue::Sequence;
use tenax_postgres::catalogue::{
    CatalogueState, LOAD_EVERY, PoolRecord, STRIPES, Stripes, TRUSTED_FOR,
};
use tenax_postgres::moves::MovedFrom;
use tenax_postgres::{Database, PostgresOptions, PostgresStore};

/// One database of the deployment, open.
#[derive(Debug)]
pub(crate) struct Member {
    /// 0 for the catalogue.
    pub(crate) number: u8,
    /// The URI it was opened with: a pool whose URI changes is opened again.
    uri: String,
    store: PostgresStore,
}

impl std::ops::Deref for Member {
    type Target = PostgresStore;

    fn deref(&self) -> &PostgresStore {
        &self.store
    }
}

/// A member as the snapshot that holds it sees it.
#[derive(Debug, Clone)]
struct Slot {
    member: Arc<Member>,
    /// The pool's name ("" for the catalogue).
    name: String,
    /// New queues go to a pool in proportion to its weight.
    weight: u32,
    /// Whether it takes new queues yet (the catalogue always does).
    ready: bool,
    flavor: Option<String>,
}

/// The pools as this server loaded them at one moment. See the crate's documentation.
#[derive(Debug)]
pub(crate) struct Pools {
    /// By number; the catalogue first (number 0).
    slots: Vec<Slot>,
    /// Registered pools this server could not open (their queues are unavailable until it
    /// can), by number.
    unopened: Vec<u8>,
    /// Where the catalogue's ids began to stripe: every id below is the catalogue's own.
    since: Stripes,
    /// The catalogue's version these were loaded at.
    version: i64,
    /// The pools queues were moved out of, and below which ids (`tenax queues move`).
    moved_from: Vec<MovedFrom>,
}

/// Queues placed across the catalogue's pools. See the crate's documentation.
#[derive(Debug)]
pub struct PooledStore {
    /// Pool 0, the home of what is the deployment's: it never changes.
    catalogue: Arc<Member>,
    pools: parking_lot::RwLock<Arc<Pools>>,
    /// When [`Self::pools`] was last confirmed against the catalogue (when the confirming read
    /// began).
    confirmed: parking_lot::Mutex<Instant>,
    /// One load at a time.
    loading: tokio::sync::Mutex<()>,
    /// Queue → pool number, as read from or written to the catalogue: a queue's pool never
    /// changes under a running server.
    placed: parking_lot::RwLock<HashMap<String, u8>>,
    /// Advanced (under `placed`'s lock) each time `placed` is forgotten: a placement read from
    /// the catalogue before is not kept after, or a move finished meanwhile would be missed.
    placed_generation: AtomicU64,
    /// Fired by every member's store.
    signals: Arc<Signals>,
    /// Where the next take starts, so that no pool's queues are always served last.
    turn: AtomicUsize,
    /// What the pools are opened with: the catalogue's options.
    shared: PostgresOptions,
    clock: Clock,
    /// How this server describes itself, for the pools opened after it said so.
    described: Described,
    /// Loads the pools when the catalogue changes.
    watcher: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// How this server describes itself, once it said so.
#[derive(Default)]
struct Described(parking_lot::Mutex<Option<DescribeServer>>);

impl std::fmt::Debug for Described {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let given = self.0.lock().is_some();
        f.debug_struct("Described").field("given", &given).finish()
    }
}

/// Items routed to one member, each with its index among all of them.
pub(crate) type Group<T> = (Arc<Member>, Vec<(usize, T)>);

/// The most queues whose placement a server keeps; past it, the cache starts again empty.
const MOST_PLACED: usize = 65_536;

impl Pools {
    fn catalogue(&self) -> &Arc<Member> {
        &self.slots[0].member
    }

    fn slot(&self, number: u8) -> Option<&Slot> {
        self.slots.iter().find(|s| s.member.number == number)
    }

    /// Every member, the catalogue first.
    fn members(&self) -> impl Iterator<Item = &Arc<Member>> {
        self.slots.iter().map(|s| &s.member)
    }

    /// Where `id` of `sequence` is: the catalogue for ids from before it striped them (or all
    /// of them while it does not), else the pool of the id's residue. `None`: a residue this
    /// snapshot has no member for.
    fn of_id(&self, sequence: Sequence, id: u64) -> Option<Route> {
        let since = self.since.of(sequence);
        if since == 0 || i64::try_from(id).is_ok_and(|id| id < since) {
            return Some(Route::Member(self.catalogue().clone()));
        }
        let residue = u8::try_from(id % STRIPES.unsigned_abs()).unwrap_or(0);
        if let Some(slot) = self.slot(residue) {
            return Some(Route::Member(slot.member.clone()));
        }
        self.unopened
            .contains(&residue)
            .then_some(Route::Unopened(residue))
    }

    /// A pool number for `queue`, in proportion to the weights of the pools that take new
    /// queues of its flavor (none: the catalogue and the pools of no flavor), drawn from the
    /// queue's name, so that every server would choose the same (the catalogue keeps the first
    /// choice written in any case). `None`: no pool of the flavor takes queues yet.
    fn by_weight(&self, queue: &str, flavor: Option<&str>) -> Option<u8> {
        use std::hash::{Hash, Hasher};
        let candidates: Vec<&Slot> = self
            .slots
            .iter()
            .filter(|s| s.ready && s.flavor.as_deref() == flavor)
            .collect();
        let total: u64 = candidates.iter().map(|s| u64::from(s.weight)).sum();
        if total == 0 {
            // The catalogue takes the queues of no flavor when no pool weighs anything.
            return flavor.is_none().then_some(0);
        }
        let mut hasher = std::hash::DefaultHasher::new();
        queue.hash(&mut hasher);
        let mut draw = hasher.finish() % total;
        for slot in candidates {
            let weight = u64::from(slot.weight);
            if draw < weight {
                return Some(slot.member.number);
            }
            draw -= weight;
        }
        None
    }

    /// Whether `id` of `sequence`, routed to member `number`, may have moved out of it with its
    /// queue (to be looked up in its forwards).
    fn may_have_moved(&self, number: u8, sequence: Sequence, id: u64) -> bool {
        self.moved_from
            .iter()
            .filter(|m| m.source == number)
            .any(|m| {
                m.below
                    .is_none_or(|below| i64::try_from(id).is_ok_and(|id| id < below.of(sequence)))
            })
    }

    /// Whether some pool is waiting to take queues: its readiness is read again each load.
    fn pending(&self) -> bool {
        self.slots.iter().any(|s| !s.ready) || !self.unopened.is_empty()
    }

    /// Every member, the catalogue first; unavailable while a pool cannot be opened (what
    /// asks every pool would miss its part).
    pub(crate) fn all(&self) -> Result<Vec<Arc<Member>>, StoreError> {
        if let Some(&number) = self.unopened.first() {
            return Err(unopened(number));
        }
        Ok(self.members().cloned().collect())
    }

    /// `call` on every member at once; the answers in the members' order.
    pub(crate) async fn each<'a, T, F, Fut>(&'a self, call: F) -> Result<Vec<T>, StoreError>
    where
        F: Fn(&'a Arc<Member>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        if let Some(&number) = self.unopened.first() {
            return Err(unopened(number));
        }
        try_join_all(self.members().map(call)).await
    }

    /// `call` on every member at once, passing over those that cannot be reached (each said
    /// in the log): the maintenance of the others goes on while one is down. Fails only when
    /// no pool answered.
    pub(crate) async fn each_reachable<'a, T, F, Fut>(
        &'a self,
        what: &str,
        call: F,
    ) -> Result<Vec<T>, StoreError>
    where
        F: Fn(&'a Arc<Member>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let answers = futures_util::future::join_all(self.members().map(call)).await;
        let mut reached = Vec::with_capacity(answers.len());
        let mut unreachable = None;
        for (member, answer) in self.members().zip(answers) {
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

    /// The members in the order a take asks them, starting one further each time.
    fn in_turn(&self, turn: &AtomicUsize) -> Vec<Arc<Member>> {
        let count = self.slots.len();
        let start = turn.fetch_add(1, Ordering::Relaxed) % count;
        (0..count)
            .map(|i| self.slots[(start + i) % count].member.clone())
            .collect()
    }
}

/// Where an id routes.
enum Route {
    Member(Arc<Member>),
    /// A registered pool this server could not open.
    Unopened(u8),
}

impl PooledStore {
    /// Opens the catalogue (`options`) and every pool it names, each with `options`' pool
    /// size, keys and CA certificates.
    pub async fn open(options: &PostgresOptions, clock: &Clock) -> Result<Arc<Self>, StoreError> {
        let shared = PostgresOptions {
            signals: Some(Arc::new(Signals::default())),
            ..options.clone()
        };
        let catalogue = PostgresStore::open(&shared, clock).await?;
        let signals = shared.signals.clone().unwrap_or_default();
        let catalogue = Arc::new(Member {
            number: 0,
            uri: String::new(),
            store: catalogue,
        });
        let store = Arc::new(Self {
            pools: parking_lot::RwLock::new(Arc::new(Pools {
                slots: vec![catalogue_slot(&catalogue, true)],
                unopened: Vec::new(),
                since: Stripes::default(),
                version: -1,
                moved_from: Vec::new(),
            })),
            catalogue,
            confirmed: parking_lot::Mutex::new(Instant::now()),
            loading: tokio::sync::Mutex::new(()),
            placed: parking_lot::RwLock::new(HashMap::new()),
            placed_generation: AtomicU64::new(0),
            signals,
            turn: AtomicUsize::new(0),
            shared,
            clock: clock.clone(),
            described: Described::default(),
            watcher: parking_lot::Mutex::new(None),
        });
        store.load(Instant::now()).await?;
        let watcher = tokio::spawn(watch(Arc::downgrade(&store), store.signals.clone()));
        *store.watcher.lock() = Some(watcher);
        Ok(store)
    }

    /// The pools to route a call by: confirmed against the catalogue first when they were not
    /// for [`TRUSTED_FOR`] (the watcher confirms them every [`LOAD_EVERY`], so this is rare).
    pub(crate) async fn pools(&self) -> Arc<Pools> {
        if self.confirmed.lock().elapsed() > TRUSTED_FOR {
            if let Err(error) = self.confirm().await {
                // Routes to the catalogue fail as well while it cannot be reached, and routes
                // to the pools known stay right: ids and placements keep their pool.
                tracing::warn!(%error, "the catalogue cannot be read: routing on the pools known");
            }
        }
        self.pools.read().clone()
    }

    /// Reads the catalogue's version, and loads the pools again if it moved (or while a pool
    /// is waiting to take queues).
    async fn confirm(&self) -> Result<(), StoreError> {
        let began = Instant::now();
        let version = self.catalogue.catalogue_version().await?;
        let current = self.pools.read().clone();
        if version != current.version || current.pending() {
            self.load(began).await
        } else {
            self.confirmed(began);
            Ok(())
        }
    }

    fn confirmed(&self, began: Instant) {
        let mut confirmed = self.confirmed.lock();
        if *confirmed < began {
            *confirmed = began;
        }
    }

    /// Loads the pools from the catalogue: opens those new to this server (or whose database
    /// changed), closes those gone, and says in the catalogue which version it loaded. A pool
    /// that cannot be opened makes only its own queues unavailable; it is tried again at the
    /// next load.
    async fn load(&self, began: Instant) -> Result<(), StoreError> {
        let _one = self.loading.lock().await;
        let since = self.catalogue.stripes().await?;
        let mut gone = Vec::new();
        // Twice when a pool waits to take queues: this server's word may be what it waited for.
        for _ in 0..2 {
            let state = self.catalogue.catalogue_state().await?;
            let moved_from = self.catalogue.moved_from().await?;
            let loaded = self.assemble(&state, since, moved_from).await?;
            if loaded.version != self.pools.read().version {
                // A move may have placed a queue elsewhere: placements are read again.
                self.forget_placements();
            }
            gone.extend(self.swap(loaded));
            self.catalogue.loaded_pools(state.version).await?;
            if state.pools.iter().all(|p| p.ready) {
                break;
            }
        }
        self.confirmed(began);
        for member in gone {
            tokio::spawn(async move { member.close().await });
        }
        Ok(())
    }

    /// The snapshot of `state`, keeping the members this server has open already. A pool that
    /// cannot be reached is left unopened; one that refuses this server for a reason waiting
    /// cannot mend (secrets that do not open, a newer schema) fails the load.
    async fn assemble(
        &self,
        state: &CatalogueState,
        since: Stripes,
        moved_from: Vec<MovedFrom>,
    ) -> Result<Pools, StoreError> {
        let current = self.pools.read().clone();
        let weighed = state.pools.iter().any(|p| p.weight > 0 && p.ready);
        let mut slots = vec![catalogue_slot(&self.catalogue, !weighed)];
        let mut unopened = Vec::new();
        for pool in &state.pools {
            let kept = current
                .slot(pool.number)
                .filter(|s| s.member.uri == pool.uri)
                .map(|s| s.member.clone());
            let member = match kept {
                Some(member) => member,
                None => match self.open_pool(pool).await {
                    Ok(member) => Arc::new(member),
                    Err(error @ StoreError::Unavailable(_)) => {
                        tracing::warn!(pool = %pool.name, %error, "a pool cannot be opened: \
                                       its queues are unavailable until it can");
                        unopened.push(pool.number);
                        continue;
                    }
                    Err(error) => return Err(error),
                },
            };
            slots.push(Slot {
                member,
                name: pool.name.clone(),
                weight: pool.weight,
                ready: pool.ready,
                flavor: pool.flavor.clone(),
            });
        }
        slots.sort_by_key(|s| s.member.number);
        Ok(Pools {
            slots,
            unopened,
            since,
            version: state.version,
            moved_from,
        })
    }

    /// Makes `loaded` the pools routed by; answers the members no longer among them.
    fn swap(&self, loaded: Pools) -> Vec<Arc<Member>> {
        let loaded = Arc::new(loaded);
        let old = std::mem::replace(&mut *self.pools.write(), loaded.clone());
        old.members()
            .filter(|m| m.number != 0)
            .filter(|m| !loaded.members().any(|n| Arc::ptr_eq(m, n)))
            .cloned()
            .collect()
    }

    /// Opens pool `pool` as a member: its database, with the catalogue's options.
    async fn open_pool(&self, pool: &PoolRecord) -> Result<Member, StoreError> {
        let database = Database::new(&pool.uri, self.shared.ca_file.as_deref()).map_err(|e| {
            StoreError::Refused(
                format!("pool {:?}: {e}", pool.name).replace("--database-url: ", ""),
            )
        })?;
        let options = PostgresOptions {
            database,
            ..self.shared.clone()
        };
        let store = PostgresStore::open(&options, &self.clock).await?;
        if let Some(describe) = self.described.0.lock().clone() {
            store.describe_server(describe);
        }
        Ok(Member {
            number: pool.number,
            uri: pool.uri.clone(),
            store,
        })
    }

    /// Where `id` of `sequence` is. An id of a pool this server does not know makes it look
    /// at the catalogue once more first (a pool registered a moment ago).
    pub(crate) async fn of_id(
        &self,
        sequence: Sequence,
        id: u64,
    ) -> Result<Arc<Member>, StoreError> {
        let pools = self.pools().await;
        let route = match pools.of_id(sequence, id) {
            Some(route) => route,
            None => {
                self.confirm().await?;
                let pools = self.pools.read().clone();
                // Still none: no pool has it, and the catalogue answers that it has none.
                pools
                    .of_id(sequence, id)
                    .unwrap_or_else(|| Route::Member(pools.catalogue().clone()))
            }
        };
        let mut member = match route {
            Route::Member(member) => member,
            Route::Unopened(number) => return Err(unopened(number)),
        };
        // An id that moved with its queue is forwarded by the pool it left (again by the next,
        // if it moved on).
        for _ in 0..=tenax_core::model::pool::MAX_POOLS {
            let moved = self
                .pools
                .read()
                .may_have_moved(member.number, sequence, id);
            if !moved {
                break;
            }
            match member.forwarded(sequence, id).await? {
                Some(number) => member = self.numbered(number).await?,
                None => break,
            }
        }
        Ok(member)
    }

    pub(crate) async fn of_job(&self, id: JobId) -> Result<Arc<Member>, StoreError> {
        self.of_id(Sequence::Jobs, id.0).await
    }

    pub(crate) async fn of_subscription(
        &self,
        id: SubscriptionId,
    ) -> Result<Arc<Member>, StoreError> {
        self.of_id(Sequence::Subscriptions, id.0).await
    }

    pub(crate) async fn of_batch(&self, id: BatchId) -> Result<Arc<Member>, StoreError> {
        self.of_id(Sequence::Batches, id.0).await
    }

    /// The pool of `queue` if it was placed (a queue never written to has no jobs, settings or
    /// subscriptions anywhere).
    pub(crate) async fn placed(&self, queue: &str) -> Result<Option<Arc<Member>>, StoreError> {
        if let Some(subscription) = subscription_of_queue(queue) {
            return self.of_subscription(subscription).await.map(Some);
        }
        let cached = self.placed.read().get(queue).copied();
        let number = match cached {
            Some(number) => number,
            None => {
                let seen = self.placed_generation();
                let Some(number) = self.catalogue.placement(queue).await? else {
                    return Ok(None);
                };
                self.remember(queue, number, seen);
                number
            }
        };
        self.numbered(number).await.map(Some)
    }

    /// The generation of the placements kept now: what [`Self::remember`] is given.
    fn placed_generation(&self) -> u64 {
        self.placed_generation.load(Ordering::Acquire)
    }

    /// Keeps `queue`'s placement, read from the catalogue at generation `seen`, unless the
    /// placements were forgotten since.
    fn remember(&self, queue: &str, number: u8, seen: u64) {
        let mut placed = self.placed.write();
        if self.placed_generation.load(Ordering::Acquire) != seen {
            return;
        }
        if placed.len() >= MOST_PLACED {
            placed.clear();
        }
        placed.insert(queue.to_owned(), number);
    }

    /// Forgets every placement kept: they are read from the catalogue again.
    fn forget_placements(&self) {
        let mut placed = self.placed.write();
        placed.clear();
        self.placed_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Member `number`, loading the pools again if this server does not know it yet.
    async fn numbered(&self, number: u8) -> Result<Arc<Member>, StoreError> {
        for attempt in 0..2 {
            let pools = if attempt == 0 {
                self.pools().await
            } else {
                self.confirm().await?;
                self.pools.read().clone()
            };
            if let Some(slot) = pools.slot(number) {
                return Ok(slot.member.clone());
            }
            if pools.unopened.contains(&number) {
                return Err(unopened(number));
            }
        }
        Err(StoreError::Corrupt(format!(
            "a queue is placed on pool {number}, which the catalogue does not have"
        )))
    }

    /// Places `queues` together, on the pool of those already placed, or `anchor`'s, or else
    /// chosen for the first (of `flavor`'s pools, if it names one): what one transaction
    /// writes (a job and the jobs it waits for, a batch and its callbacks, a queue and its
    /// dead-letter queue) must be in one database. Refused when two of them are placed on
    /// different pools already. Says too whether every one of them was placed by this call
    /// (none had anything stored anywhere before).
    pub(crate) async fn place_together(
        &self,
        queues: &[&str],
        anchor: Option<Arc<Member>>,
        flavor: Option<&str>,
        what: &str,
    ) -> Result<(Arc<Member>, bool), StoreError> {
        let mut pool = anchor;
        let mut unplaced = Vec::new();
        for queue in queues {
            match self.placed(queue).await? {
                Some(store) if pool.as_ref().is_some_and(|p| p.number != store.number) => {
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
                Some(first) => self.place(first, flavor).await?,
                None => return Ok((self.catalogue.clone(), false)),
            },
        };
        for queue in unplaced {
            let seen = self.placed_generation();
            if self.catalogue.place(queue, pool.number).await? != pool.number {
                // Placed elsewhere meanwhile by another server.
                return Err(across_pools(what));
            }
            self.remember(queue, pool.number, seen);
        }
        Ok((pool, fresh))
    }

    /// The pool of `queue`, placing it now if it has none: by weight among the pools of
    /// `flavor` (none: of no flavor) that take queues.
    pub(crate) async fn place(
        &self,
        queue: &str,
        flavor: Option<&str>,
    ) -> Result<Arc<Member>, StoreError> {
        if let Some(store) = self.placed(queue).await? {
            return Ok(store);
        }
        let mut pools = self.pools().await;
        if pools.pending() {
            // A pool this server has seen waiting may take queues by now: the catalogue says.
            self.confirm().await?;
            pools = self.pools.read().clone();
        }
        let chosen = if self.held_by_catalogue(queue).await? {
            0
        } else if let Some(number) = pools.by_weight(queue, flavor) {
            number
        } else {
            // None known takes it: perhaps none did when these pools were loaded.
            self.confirm().await?;
            let pools = self.pools.read().clone();
            pools
                .by_weight(queue, flavor)
                .ok_or_else(|| no_pool_ready(&pools, flavor.unwrap_or_default()))?
        };
        let seen = self.placed_generation();
        let number = self.catalogue.place(queue, chosen).await?;
        self.remember(queue, number, seen);
        self.numbered(number).await
    }

    /// Whether the catalogue's database holds something of `queue` already (written before
    /// the pools were registered): such a queue stays where its data is.
    async fn held_by_catalogue(&self, queue: &str) -> Result<bool, StoreError> {
        let catalogue = &self.catalogue;
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

    /// The flavor of pool `number`, and its name, as this server knows them.
    pub(crate) async fn pool_named(&self, number: u8) -> (String, Option<String>) {
        let pools = self.pools().await;
        pools
            .slot(number)
            .map(|s| (s.name.clone(), s.flavor.clone()))
            .unwrap_or_default()
    }

    /// `items` grouped by the member `pool_of` routes each to, keeping each item's index.
    pub(crate) async fn group<T: Copy>(
        &self,
        items: &[T],
        sequence: Sequence,
        id_of: impl Fn(T) -> u64,
    ) -> Result<Vec<Group<T>>, StoreError> {
        let mut groups: Vec<Group<T>> = Vec::new();
        for (at, item) in items.iter().copied().enumerate() {
            let store = self.of_id(sequence, id_of(item)).await?;
            match groups.iter_mut().find(|(s, _)| s.number == store.number) {
                Some((_, members)) => members.push((at, item)),
                None => groups.push((store, vec![(at, item)])),
            }
        }
        Ok(groups)
    }

    /// The members in the order a take asks them, starting one further each time.
    pub(crate) async fn in_turn(&self) -> Vec<Arc<Member>> {
        self.pools().await.in_turn(&self.turn)
    }
}

/// Confirms the pools every [`LOAD_EVERY`], and at once when the catalogue announces a change.
/// Ends when the store is dropped or closed.
async fn watch(store: Weak<PooledStore>, signals: Arc<Signals>) {
    loop {
        let changed = signals.pools.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        tokio::select! {
            () = changed => {}
            () = tokio::time::sleep(LOAD_EVERY) => {}
        }
        let Some(store) = store.upgrade() else {
            return;
        };
        if let Err(error) = store.confirm().await {
            tracing::warn!(%error, "the catalogue cannot be read: the pools stay as they were");
        }
    }
}

fn catalogue_slot(catalogue: &Arc<Member>, weighs: bool) -> Slot {
    Slot {
        member: catalogue.clone(),
        name: String::new(),
        weight: u32::from(weighs),
        ready: true,
        flavor: None,
    }
}

/// Opens the store `options` name: the pooled store over the catalogue its database holds (with
/// no pools registered, every queue is on the catalogue, as before pools).
pub async fn open(
    options: &PostgresOptions,
    clock: &Clock,
) -> Result<Arc<dyn tenax_core::store::Store>, StoreError> {
    Ok(PooledStore::open(options, clock).await?)
}

/// The refusal of what one transaction cannot span.
pub(crate) fn across_pools(what: &str) -> StoreError {
    StoreError::AcrossPools(format!(
        "{what} are on different pools, and one transaction changes one pool: place them \
         together (`tenax queues move`)"
    ))
}

/// A registered pool this server could not open.
fn unopened(number: u8) -> StoreError {
    StoreError::Unavailable(StorageFault {
        what: format!("pool {number} cannot be reached"),
        source: Arc::new(std::io::Error::other(
            "this server could not open the pool's database; it tries again every second",
        )),
    })
}

/// No pool of `flavor` takes queues: none is ready yet (503), or it has none.
fn no_pool_ready(pools: &Pools, flavor: &str) -> StoreError {
    let waiting = pools
        .slots
        .iter()
        .any(|s| s.flavor.as_deref() == Some(flavor) && !s.ready);
    if waiting {
        StoreError::Unavailable(StorageFault {
            what: format!("the pools of flavor {flavor:?} do not take queues yet"),
            source: Arc::new(std::io::Error::other(
                "a new pool takes queues once every server has loaded it: a few seconds",
            )),
        })
    } else {
        StoreError::Pool(PoolError::Invalid {
            field: "flavor",
            rule: format!("flavor {flavor:?} has no pool that takes queues"),
        })
    }
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
