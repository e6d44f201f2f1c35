//! The PostgreSQL store: several Tenax servers on one database.
//!
//! Everything is in the database, leases and claims included ([`StoreProperties::durable_leases`]),
//! so any server can complete, heartbeat or expire any lease. Each operation of the seam is one
//! statement, or one transaction that locks the rows it decides about (`FOR UPDATE`), so the
//! engine's closures run under a row lock; takes skip rows another taker holds
//! (`FOR UPDATE SKIP LOCKED`). Wake-ups cross servers by LISTEN/NOTIFY ([`wakeups`]); the
//! maintenance loop runs on the one server holding an advisory lock ([`StoreLifecycle::lead`]).
//!
//! The schema and why it is shaped so: `migrations/`, and `docs/postgres.md`. One file per
//! family of the seam, as in the embedded store.

mod activity;
mod batches;
mod cancel;
pub mod catalogue;
mod claims;
mod clock;
mod combiner;
mod connect;
mod curation;
mod demotion;
mod dependents;
mod dsn;
mod endpoints;
mod facts;
mod filter;
mod import;
mod inserts;
mod leases;
mod limits;
mod linger;
pub mod moves;
mod queues;
mod reads;
mod rows;
mod schedules;
pub mod schema;
pub mod sealing;
mod servers;
mod statements;
mod subscriptions;
mod tls;
mod tokens;
mod transitions;
mod upkeep;
mod wakeups;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, RecyclingMethod};
use tenax_core::clock::Clock;
use tenax_core::secrets::{Keyring, PayloadKey};
use tenax_core::store::{
    CommitObserver, JobUpkeep, Signals, StoreError, StoreLifecycle, StoreProperties,
};
use tokio::sync::Mutex;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use self::connect::CONNECT_TIMEOUT;
pub use self::connect::Database;
pub use self::wakeups::Listening;
use self::wakeups::{Wakeup, Wakeups};

type Pool = deadpool_postgres::Pool;

/// Options of the PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The database, and how to connect to it.
    pub database: Database,
    /// Connections in this server's pool.
    pub pool_size: usize,
    pub listening: Listening,
    /// Where enqueue commits are reported, for the metrics.
    pub commits: Option<Arc<dyn CommitObserver>>,
    /// The keys that seal the subscriptions' secrets: every server sharing the database holds
    /// the same ones (`--secrets-key-file`).
    pub secrets: Arc<Keyring>,
    /// How long [`PostgresStore::open`] keeps trying while PostgreSQL cannot be used.
    pub start_wait: Duration,
    /// The signals the store fires, when they are shared with other stores (the pools of a
    /// pooled deployment wake one engine); `None`: its own.
    pub signals: Option<Arc<Signals>>,
    /// The CA certificates `database` was made with (`--database-ca-file`): a pooled
    /// deployment checks its pools' databases against them too.
    pub ca_file: Option<std::path::PathBuf>,
}

impl PostgresOptions {
    pub fn new(database: Database, secrets: Arc<Keyring>) -> Self {
        Self {
            secrets,
            database,
            start_wait: Duration::ZERO,
            pool_size: 16,
            listening: Listening {
                listen: true,
                poll_interval: Duration::from_secs(1),
            },
            commits: None,
            signals: None,
            ca_file: None,
        }
    }
}

/// The advisory lock the leading server holds ("tenax-ld").
const LEAD_LOCK: i64 = 0x7465_6e61_782d_6c64;

statements::statements! {
    /// Takes the lead's lock `$1` if no other session holds it; answers whether it has it.
    TRY_LEAD = "SELECT pg_try_advisory_lock($1)";
}

/// Every statement text this store can send, as (name, text): each declared statement, and
/// every shape of each built one ([`statements`]). For the test that prepares them all
/// (`crates/tenax/tests/it/pg_statements.rs`); not an API.
#[doc(hidden)]
pub fn every_statement() -> Vec<(String, String)> {
    statements::all()
}

/// Every prefix this store builds statements from, with how many of [`every_statement`]'s
/// shapes were built from it (none: a builder whose shapes are not listed). For the same
/// test; not an API.
#[doc(hidden)]
pub fn every_prefix() -> Vec<(String, usize)> {
    statements::all_prefixes()
}

#[derive(Debug)]
pub struct PostgresStore {
    pool: Pool,
    database: Database,
    wakeups: Arc<Wakeups>,
    /// Group commit of small enqueues.
    combiner: Arc<combiner::Combiner>,
    /// Where enqueue commits are reported.
    commits: Option<Arc<dyn CommitObserver>>,
    /// What enqueues need of queues, as last read.
    facts: facts::FactsCache,
    /// A shortcut to the signals inside `wakeups`, which never move.
    signals: Arc<Signals>,
    /// The session that holds (or tries for) the lead lock, and whether it holds it.
    leader: Mutex<Option<(Client, bool)>>,
    /// This server's row in `tenax_servers`, and how many servers were seen alive last.
    server: i64,
    servers: Arc<AtomicUsize>,
    /// How this server describes itself, written with its row ([`servers::beat`]).
    describing: servers::Describing,
    beating: tokio::task::JoinHandle<()>,
    /// Samples the database's clock, when this server decides by it.
    sampling: Option<tokio::task::JoinHandle<()>>,
    /// Seal the subscriptions' secrets on their way to the database, and open them on theirs
    /// back.
    keys: Arc<Keyring>,
    /// The data key of encrypted queues' payloads, opened at start (the same on every server:
    /// [`sealing::seal_at_rest`]).
    payload_key: PayloadKey,
    /// The clock the store was opened with: the time of what the seam's calls without one
    /// change (a waiting job cancelled by a deletion of its parent, [`dependents`]).
    clock: Clock,
}

/// A database failure while doing `what`, with its source kept. A lost connection, a server
/// shutting down or starting, or one that refuses writes as read-only (a primary demoted by a
/// failover, [`demotion`]) is [`StoreError::Unavailable`] (a 503: send it again).
pub(crate) fn fault(what: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    move |error| {
        if is_read_only(&error) {
            demotion::seen();
            StoreError::unavailable(what, error)
        } else if is_unreachable(&error) || is_moved(&error) {
            StoreError::unavailable(what, error)
        } else {
            StoreError::storage(what, error)
        }
    }
}

/// Whether `error` says the server cannot be reached (rather than refusing a statement).
fn is_unreachable(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    match error.code() {
        // Class 08: connection exception; 57P01–57P03: shutting down, or not yet accepting.
        Some(code) => {
            code.code().starts_with("08")
                || *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
        }
        // No answer from the server at all: the connection failed underneath. A TLS handshake
        // whose certificate check failed failed underneath too, but it is a refusal that
        // trying again cannot mend, not an unreachable server.
        None => {
            std::error::Error::source(error)
                .is_some_and(|source| source.downcast_ref::<std::io::Error>().is_some())
                && !is_tls_refusal(error)
        }
    }
}

/// Whether rustls refused the connection (a certificate that failed its check, a protocol
/// neither side speaks), anywhere in the error's chain of sources.
fn is_tls_refusal(error: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(error);
    while let Some(error) = source {
        let refused = error.downcast_ref::<rustls::Error>().is_some()
            || error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
        if refused {
            return true;
        }
        source = error.source();
    }
    false
}

/// Whether the server refused a statement because it accepts no writes (SQLSTATE 25006): it
/// is a standby now, or read-only for everyone. Tenax makes no read-only transactions, so the
/// refusal is the server's, never the request's.
fn is_read_only(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// Whether the database refused a row of a queue that moved out of it (SQLSTATE TXMOV, from
/// `migrations/0018_moves.sql`): the server routed by a placement older than the move, and
/// routes by the catalogue's when it tries again (within a second).
fn is_moved(error: &tokio_postgres::Error) -> bool {
    error.code().is_some_and(|code| code.code() == "TXMOV")
}

/// A failure to get a connection from the pool: the database cannot be reached.
fn pool_fault(error: deadpool_postgres::PoolError) -> StoreError {
    StoreError::unavailable("getting a connection to PostgreSQL", error)
}

/// Whether an error is a conflict that the same transaction, run again, resolves: a unique
/// key another transaction took meanwhile, or a serialisation failure.
fn is_conflict(error: &StoreError) -> bool {
    let StoreError::Storage(fault) = error else {
        return false;
    };
    fault
        .source
        .downcast_ref::<tokio_postgres::Error>()
        .and_then(tokio_postgres::Error::code)
        .is_some_and(|code| {
            *code == SqlState::UNIQUE_VIOLATION
                || *code == SqlState::T_R_SERIALIZATION_FAILURE
                || *code == SqlState::T_R_DEADLOCK_DETECTED
        })
}

/// Connects once and readies the database for this server: samples its clock (when it is the
/// clock that decides), migrates the schema, and seals what is not sealed.
async fn prepare(
    database: &Database,
    clock: &Clock,
    secrets: &Keyring,
) -> Result<PayloadKey, StoreError> {
    // Said when connecting fails: a refused certificate is then explained by the check.
    let connecting = format!("connecting to PostgreSQL {}", database.said());
    let (mut client, connection) =
        database
            .connect()
            .await
            .map_err(|error| match database.refusal(&error) {
                Some(refusal) => StoreError::Refused(refusal),
                None => fault(connecting)(error),
            })?;
    let driver = tokio::spawn(connection);
    let sampled = match clock.database_time() {
        Some(time) => clock::round(&client, time)
            .await
            .map_err(fault("sampling PostgreSQL's clock")),
        None => Ok(()),
    };
    let migrated = match sampled {
        Ok(()) => schema::migrate(&mut client).await,
        Err(error) => Err(error),
    };
    let sealed = match migrated {
        Ok(_) => sealing::seal_at_rest(&mut client, secrets)
            .await
            .map(|(_, payload_key)| payload_key),
        Err(error) => Err(error),
    };
    drop(client);
    let _ = driver.await;
    sealed
}

/// The first pause between tries to reach PostgreSQL at start; it doubles up to
/// [`CONNECT_TIMEOUT`].
const START_PAUSE: Duration = Duration::from_millis(250);

/// The longest a request waits for a free connection of the pool.
const POOL_WAIT: Duration = Duration::from_secs(30);

/// How often a transaction that lost a race is run again.
const RETRIES: usize = 8;

impl PostgresStore {
    /// Connects (trying again for [`PostgresOptions::start_wait`] while PostgreSQL cannot be
    /// used), applies the schema migrations (refusing a newer schema), seals what is not
    /// sealed with the sealing key (refusing keys that do not open the store: [`sealing`]), and
    /// starts the wake-up tasks. Scheduled jobs due now by `clock` are ready from the start, as
    /// they are in the embedded store. When `clock` is the database's ([`Clock::Database`]),
    /// the store samples it before anything else, and from then on ([`clock`]).
    pub async fn open(options: &PostgresOptions, clock: &Clock) -> Result<Self, StoreError> {
        let database = options.database.clone();
        let mut pause = START_PAUSE;
        let started = tokio::time::Instant::now();
        let payload_key = loop {
            match prepare(&database, clock, &options.secrets).await {
                Ok(payload_key) => break payload_key,
                // Unreachable or read-only (starting, failing over, cut off): worth waiting for.
                Err(error @ StoreError::Unavailable(_))
                    if started.elapsed() + pause <= options.start_wait =>
                {
                    tracing::warn!(
                        %error,
                        "PostgreSQL cannot be used yet; trying again in {pause:?} (--database-wait)"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(CONNECT_TIMEOUT);
                }
                Err(error) => return Err(error),
            }
        };
        tracing::info!(
            secrets_key = %options.secrets.current().id(),
            "connected to PostgreSQL {}",
            database.said()
        );
        let manager = Manager::from_config(
            database.config().clone(),
            database.tls(),
            ManagerConfig {
                // A connection that failed is dropped, not handed out again.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(2))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            // A database that does not answer fails the request (503) instead of holding it.
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(POOL_WAIT))
            // A connection made before a write was refused as read-only goes to a demoted
            // primary: it is dropped when it comes back, not handed out again.
            .pre_recycle(deadpool_postgres::Hook::sync_fn(|_, metrics| {
                if demotion::predates(metrics.created) {
                    Err(deadpool_postgres::HookError::message(
                        "made before the server refused a write as read-only",
                    ))
                } else {
                    Ok(())
                }
            }))
            .build()
            .map_err(|e| StoreError::storage("making the PostgreSQL pool", e))?;
        let wakeups = Arc::new(Wakeups::start(
            pool.clone(),
            database.clone(),
            &options.listening,
            options.signals.clone().unwrap_or_default(),
        ));
        let combiner =
            combiner::Combiner::new(pool.clone(), wakeups.clone(), options.commits.clone());
        let signals = wakeups.shared_signals();
        let server = rows::id(rand::random::<u64>());
        let servers = Arc::new(AtomicUsize::new(1));
        let describing = servers::Describing::default();
        let beating = tokio::spawn(servers::beat(
            pool.clone(),
            server,
            servers.clone(),
            describing.clone(),
        ));
        let sampling = clock
            .database_time()
            .map(|time| tokio::spawn(clock::follow(pool.clone(), time.clone())));
        let store = Self {
            pool,
            database,
            wakeups,
            combiner,
            commits: options.commits.clone(),
            facts: facts::FactsCache::default(),
            signals,
            leader: Mutex::new(None),
            server,
            servers,
            describing,
            beating,
            sampling,
            keys: options.secrets.clone(),
            payload_key,
            clock: clock.clone(),
        };
        store.promote_due(clock.now_ms(), usize::MAX).await?;
        Ok(store)
    }

    /// A connection from the pool.
    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool_fault)
    }

    /// Wakes this server's waiters for `wakeup`, and soon the other servers'.
    fn announce(&self, wakeup: Wakeup) {
        self.wakeups.announce(wakeup);
    }
}

#[async_trait]
impl StoreLifecycle for PostgresStore {
    fn properties(&self) -> StoreProperties {
        StoreProperties {
            durable_leases: true,
            shared: true,
            cached_facts: true,
            durable_activity: true,
        }
    }

    fn payload_key(&self) -> &PayloadKey {
        &self.payload_key
    }

    fn signals(&self) -> &Signals {
        &self.signals
    }

    fn servers(&self) -> usize {
        self.servers.load(Ordering::Relaxed)
    }

    /// The lead is a session-level advisory lock on a connection of its own: it goes when
    /// the leading server's connection does (the process died, or the network failed), and
    /// the next server to ask gets it. Each call checks the session still lives. A leader
    /// that stops writing its row in `tenax_servers` (paused, or cut off while PostgreSQL
    /// keeps its session) has its session ended by the next server to ask.
    async fn lead(&self) -> Result<bool, StoreError> {
        let mut leader = self.leader.lock().await;
        if let Some((client, holds)) = leader.as_ref() {
            // A session on a demoted primary holds a lock nobody else asks for.
            let alive = connect::writable(client).await;
            if alive && *holds {
                return Ok(true);
            }
            if !alive {
                if *holds {
                    tracing::warn!(
                        "this server no longer leads the maintenance of the PostgreSQL store: \
                         its session for the lead was lost"
                    );
                }
                *leader = None;
            }
        }
        if leader.is_none() {
            let (client, connection) = self
                .database
                .connect()
                .await
                .map_err(fault("connecting to PostgreSQL for the lead"))?;
            tokio::spawn(connection);
            servers::name_lead_session(&client, self.server).await?;
            *leader = Some((client, false));
        }
        let Some((client, holds)) = leader.as_mut() else {
            return Ok(false);
        };
        let row = client
            .query_one(TRY_LEAD.text(), &[&LEAD_LOCK])
            .await
            .map_err(fault("asking for the lead"))?;
        *holds = row.get(0);
        if *holds {
            tracing::info!("this server leads the maintenance of the PostgreSQL store");
        } else if let Some(silent) = servers::unseat_silent_leader(client, LEAD_LOCK).await? {
            // The lock goes when the ended session's backend exits; the next call takes it.
            tracing::warn!(
                server = %silent,
                "the leading server has not been seen for 5 s: its session for the lead was \
                 ended so that another server can lead"
            );
        }
        Ok(*holds)
    }

    async fn close(&self) {
        self.beating.abort();
        if let Some(sampling) = &self.sampling {
            sampling.abort();
        }
        servers::leave(&self.pool, self.server).await;
        self.wakeups.stop(&self.pool).await;
        // The lead goes with its session.
        self.leader.lock().await.take();
        self.pool.close();
    }
}
