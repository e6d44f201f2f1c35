//! The catalogue of a pooled deployment (`migrations/0016_pools.sql`): the pools, the flavors
//! and which pool holds each queue. Read and written on the catalogue's database (the one
//! `--database-url` names); the pooled store (`tenax-pools`) routes every other call.

use serde::{Deserialize, Serialize};
use tenax_core::store::StoreError;

use super::servers::alive;
use super::statements::statements;
use super::transitions::{execute, query};
use super::wakeups::Wakeup;
use super::{PostgresStore, fault};

/// The largest pool number: ids keep their pool in their residue modulo [`STRIPES`].
pub const STRIPES: i64 = 64;

/// A pool as the catalogue holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub name: String,
    /// 1 to 63: the residue of every id the pool's sequences hand out.
    pub number: u8,
    /// The pool's database: a `postgres://` URL.
    pub uri: String,
    /// How often new queues are placed on it, against the other pools' weights.
    pub weight: u32,
    pub flavor: Option<String>,
    /// A JSON object, as given.
    pub options: String,
    /// Whether it takes new queues yet (`migrations/0017_live_pools.sql`): as read, not
    /// written.
    #[serde(default)]
    pub ready: bool,
}

/// The pools and flavors as the catalogue holds them at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogueState {
    /// Advanced by every change of the pools or the flavors.
    pub version: i64,
    /// By name.
    pub pools: Vec<PoolRecord>,
}

/// A flavor as the catalogue holds it (its pools are those whose `flavor` names it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlavorRecord {
    pub name: String,
    /// A JSON object, as given.
    pub capabilities: String,
}

/// A pool takes new queues at the latest this long after its database was named, when some
/// server has not said it loaded the pools since: every server loads them every
/// [`LOAD_EVERY`] and routes nothing on pools older than [`TRUSTED_FOR`], so by then each one
/// knows the pool. Keep in step with docs/postgres.md.
macro_rules! placeable_after {
    () => {
        "10 seconds"
    };
}

/// How often a server of a pooled deployment reads the catalogue's version (and loads the
/// pools again when it moved, or while a pool is not ready yet).
pub const LOAD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest a server routes on pools it has not confirmed against the catalogue.
pub const TRUSTED_FOR: std::time::Duration = std::time::Duration::from_secs(5);

impl PostgresStore {
    /// Every pool, by name.
    pub async fn pools(&self) -> Result<Vec<PoolRecord>, StoreError> {
        Ok(self.catalogue_state().await?.pools)
    }

    /// The catalogue's version and its pools. The version is read first: pools read with an
    /// older version than theirs are loaded again at the next look, never the other way.
    pub async fn catalogue_state(&self) -> Result<CatalogueState, StoreError> {
        let version = self.catalogue_version().await?;
        let client = self.client().await?;
        let rows = query(&client, &STATE, &[])
            .await
            .map_err(fault("reading the pools"))?;
        let mut state = CatalogueState {
            version,
            pools: Vec::with_capacity(rows.len()),
        };
        for row in &rows {
            let name: String = row.get(0);
            let uri = self
                .payload_key
                .open(&uri_aad(&name), row.get(2))
                .ok()
                .and_then(|plain| String::from_utf8(plain).ok())
                .ok_or_else(|| {
                    StoreError::Secrets(format!(
                        "the URI of pool {name:?} does not open with this server's secrets key"
                    ))
                })?;
            state.pools.push(PoolRecord {
                name,
                number: u8::try_from(row.get::<_, i16>(1)).unwrap_or(0),
                uri,
                weight: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
                flavor: row.get(4),
                options: row.get(5),
                ready: row.get(6),
            });
        }
        Ok(state)
    }

    /// The catalogue's version alone: what a server reads every [`LOAD_EVERY`].
    pub async fn catalogue_version(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &VERSION, &[])
            .await
            .map_err(fault("reading the catalogue's version"))?;
        Ok(rows.first().map_or(0, |row| row.get(0)))
    }

    /// Says in this server's row that it loaded the pools at catalogue version `version`.
    pub async fn loaded_pools(&self, version: i64) -> Result<(), StoreError> {
        let client = self.client().await?;
        execute(&client, &LOADED, &[&self.server, &version])
            .await
            .map_err(fault("saying which pools this server loaded"))?;
        Ok(())
    }

    /// Stores a pool, or replaces the one of its name (its number stays). `renamed`: its
    /// database is new (a new pool, or a new uri), so it takes new queues only once every
    /// server has loaded it.
    pub async fn put_pool(&self, pool: &PoolRecord, renamed: bool) -> Result<(), StoreError> {
        // The URI may hold a password: sealed at rest, as payloads of encrypted queues are.
        let uri = self
            .payload_key
            .seal(&uri_aad(&pool.name), pool.uri.as_bytes())
            .map_err(|e| StoreError::storage("sealing a pool's URI", e))?;
        let what = "storing a pool";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        execute(
            &tx,
            &PUT_POOL,
            &[
                &pool.name,
                &i16::from(pool.number),
                &uri,
                &i32::try_from(pool.weight).unwrap_or(i32::MAX),
                &pool.flavor,
                &pool.options,
                &renamed,
            ],
        )
        .await
        .map_err(fault(what))?;
        self.commit_change(tx, what).await
    }

    /// Forgets a pool; false if there was none.
    pub async fn delete_pool(&self, name: &str) -> Result<bool, StoreError> {
        let what = "deleting a pool";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let deleted = execute(&tx, &DELETE_POOL, &[&name])
            .await
            .map_err(fault(what))?;
        self.commit_change(tx, what).await?;
        Ok(deleted > 0)
    }

    /// Every flavor, by name.
    pub async fn flavors(&self) -> Result<Vec<FlavorRecord>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &FLAVORS, &[])
            .await
            .map_err(fault("reading the flavors"))?;
        Ok(rows
            .iter()
            .map(|row| FlavorRecord {
                name: row.get(0),
                capabilities: row.get(1),
            })
            .collect())
    }

    /// Stores a flavor whose pools are exactly `pools` (the pools it had and are not named
    /// leave it); true if it is new. Pools that do not exist are left out: the caller checks.
    pub async fn put_flavor(
        &self,
        flavor: &FlavorRecord,
        pools: &[String],
    ) -> Result<bool, StoreError> {
        let what = "storing a flavor";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let created = query(&tx, &PUT_FLAVOR, &[&flavor.name, &flavor.capabilities])
            .await
            .map_err(fault(what))?
            .first()
            .is_some_and(|row| row.get::<_, bool>(0));
        execute(&tx, &FLAVOR_POOLS, &[&flavor.name, &pools])
            .await
            .map_err(fault(what))?;
        self.commit_change(tx, what).await?;
        Ok(created)
    }

    /// Forgets a flavor: its pools stay, of no flavor. False if there was none.
    pub async fn delete_flavor(&self, name: &str) -> Result<bool, StoreError> {
        let what = "deleting a flavor";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let none: &[String] = &[];
        execute(&tx, &FLAVOR_POOLS, &[&name, &none])
            .await
            .map_err(fault(what))?;
        let deleted = execute(&tx, &DELETE_FLAVOR, &[&name])
            .await
            .map_err(fault(what))?;
        self.commit_change(tx, what).await?;
        Ok(deleted > 0)
    }

    /// Advances the catalogue's version in `tx`, commits it, then tells every server (they
    /// load the pools again).
    pub(crate) async fn commit_change(
        &self,
        tx: deadpool_postgres::Transaction<'_>,
        what: &str,
    ) -> Result<(), StoreError> {
        execute(&tx, &ADVANCE, &[]).await.map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        self.announce(Wakeup::Pools);
        Ok(())
    }

    /// Which pool holds `queue`, if it was placed.
    pub async fn placement(&self, queue: &str) -> Result<Option<u8>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &PLACEMENT, &[&queue])
            .await
            .map_err(fault("reading a queue's placement"))?;
        Ok(rows
            .first()
            .map(|row| u8::try_from(row.get::<_, i16>(0)).unwrap_or(0)))
    }

    /// Places `queue` on `pool` unless it was placed already; answers where it is.
    pub async fn place(&self, queue: &str, pool: u8) -> Result<u8, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &PLACE, &[&queue, &i16::from(pool)])
            .await
            .map_err(fault("placing a queue"))?;
        Ok(rows
            .first()
            .map_or(pool, |row| u8::try_from(row.get::<_, i16>(0)).unwrap_or(0)))
    }

    /// Every placement, by queue.
    pub async fn placements(&self) -> Result<Vec<(String, u8)>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &PLACEMENTS, &[])
            .await
            .map_err(fault("reading the placements"))?;
        Ok(rows
            .iter()
            .map(|row| (row.get(0), u8::try_from(row.get::<_, i16>(1)).unwrap_or(0)))
            .collect())
    }

    /// Makes this database pool `number`: from now on its job, subscription and batch ids
    /// are `number` modulo [`STRIPES`], past every id it handed out before and past `floor`'s.
    /// Answers where each sequence began to (the first time this was done: the same after).
    pub async fn stripe_ids(&self, number: u8, floor: &Stripes) -> Result<Stripes, StoreError> {
        let what = "striping the ids";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        for step in [&STEP_JOBS, &STEP_SUBSCRIPTIONS, &STEP_BATCHES] {
            execute(&tx, step, &[]).await.map_err(fault(what))?;
        }
        let mut since = [0i64; 3];
        for (at, (sequence, floor)) in SEQUENCES.iter().zip(floor.all()).enumerate() {
            let rows = query(&tx, &STRIPE, &[sequence, &i64::from(number), &floor])
                .await
                .map_err(fault(what))?;
            since[at] = rows.first().map_or(0, |row| row.get(0));
        }
        tx.commit().await.map_err(fault(what))?;
        Ok(Stripes {
            jobs: since[0],
            subscriptions: since[1],
            batches: since[2],
        })
    }
}

impl PostgresStore {
    /// Where this database's id sequences began to stripe (0 for one that has not).
    pub async fn stripes(&self) -> Result<Stripes, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &STRIPES_SINCE, &[])
            .await
            .map_err(fault("reading where the ids began to stripe"))?;
        let since = |sequence: &str| {
            rows.iter()
                .find(|row| row.get::<_, &str>(0) == sequence)
                .map_or(0, |row| row.get(1))
        };
        Ok(Stripes {
            jobs: since(SEQUENCES[0]),
            subscriptions: since(SEQUENCES[1]),
            batches: since(SEQUENCES[2]),
        })
    }
}

/// The id sequences a pool stripes, in [`Stripes`]' order.
const SEQUENCES: [&str; 3] = ["tenax_job_ids", "tenax_subscription_ids", "tenax_batch_ids"];

/// Where a database's id sequences began to hand out ids by pool ([`PostgresStore::stripe_ids`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stripes {
    pub jobs: i64,
    pub subscriptions: i64,
    pub batches: i64,
}

impl Stripes {
    fn all(&self) -> [i64; 3] {
        [self.jobs, self.subscriptions, self.batches]
    }

    /// Where `sequence` began to stripe.
    pub fn of(&self, sequence: Sequence) -> i64 {
        match sequence {
            Sequence::Jobs => self.jobs,
            Sequence::Subscriptions => self.subscriptions,
            Sequence::Batches => self.batches,
        }
    }
}

/// What an id numbers: one of a pool's striped sequences (`tenax_forwards.sequence` stores
/// it as its discriminant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sequence {
    Jobs = 0,
    Subscriptions = 1,
    Batches = 2,
}

/// What a sealed URI is bound to: its pool's name.
fn uri_aad(name: &str) -> Vec<u8> {
    format!("tenax pool uri {name}").into_bytes()
}

statements! {
    /// Every pool with whether it takes new queues: once every live server has loaded the
    /// version that named its database, or [`placeable_after!`] after. (No join with the
    /// version's table: its estimate alone would make PostgreSQL compile the plan, ten times
    /// the query's cost.)
    STATE = concat!(
        "SELECT p.name, p.number, p.uri, p.weight, p.flavor, p.options,
                p.named_at < now() - interval '",
        placeable_after!(),
        "' OR NOT EXISTS (
                    SELECT 1 FROM tenax_servers s
                    WHERE s.seen_at > now() - interval '",
        alive!(),
        "' AND coalesce(s.pools_seen, -1) < p.named_version)
         FROM tenax_pools p
         ORDER BY p.name"
    );
    VERSION = "SELECT version FROM tenax_catalogue";
    /// This server's row may not be written yet (its first beat is a task of its own).
    LOADED = "INSERT INTO tenax_servers (id, seen_at, pools_seen) VALUES ($1, now(), $2)
             ON CONFLICT (id) DO UPDATE SET pools_seen = excluded.pools_seen";
    /// `$7`: the pool's database is new, so it is named now (at the version this transaction
    /// advances to).
    PUT_POOL = "INSERT INTO tenax_pools
                 (name, number, uri, weight, flavor, options, named_version, named_at)
             VALUES ($1, $2, $3, $4, $5, $6, (SELECT version + 1 FROM tenax_catalogue), now())
             ON CONFLICT (name) DO UPDATE SET uri = excluded.uri, weight = excluded.weight,
                 flavor = excluded.flavor, options = excluded.options,
                 named_version = CASE WHEN $7 THEN excluded.named_version
                                      ELSE tenax_pools.named_version END,
                 named_at = CASE WHEN $7 THEN excluded.named_at ELSE tenax_pools.named_at END";
    DELETE_POOL = "DELETE FROM tenax_pools WHERE name = $1";
    ADVANCE = "UPDATE tenax_catalogue SET version = version + 1";
    FLAVORS = "SELECT name, body FROM tenax_flavors ORDER BY name";
    /// Answers whether the flavor is new.
    PUT_FLAVOR = "INSERT INTO tenax_flavors (name, body) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET body = excluded.body
             RETURNING xmax = 0";
    DELETE_FLAVOR = "DELETE FROM tenax_flavors WHERE name = $1";
    /// Flavor `$1`'s pools become exactly those named in `$2`.
    FLAVOR_POOLS = "UPDATE tenax_pools
             SET flavor = CASE WHEN name = ANY($2::text[]) THEN $1 ELSE NULL END
             WHERE flavor = $1 OR name = ANY($2::text[])";
    PLACEMENT = "SELECT pool FROM tenax_placements WHERE queue = $1";
    PLACE = "WITH placed AS (
                 INSERT INTO tenax_placements (queue, pool) VALUES ($1, $2)
                 ON CONFLICT (queue) DO NOTHING RETURNING pool
             )
             SELECT pool FROM placed
             UNION ALL
             SELECT pool FROM tenax_placements WHERE queue = $1 AND NOT EXISTS (SELECT 1 FROM placed)";
    PLACEMENTS = "SELECT queue, pool FROM tenax_placements ORDER BY queue";
    STRIPES_SINCE = "SELECT sequence, since FROM tenax_stripes";
    /// A step of 64 ([`STRIPES`]) for each id sequence.
    STEP_JOBS = "ALTER SEQUENCE tenax_job_ids INCREMENT BY 64";
    STEP_SUBSCRIPTIONS = "ALTER SEQUENCE tenax_subscription_ids INCREMENT BY 64";
    STEP_BATCHES = "ALTER SEQUENCE tenax_batch_ids INCREMENT BY 64";
    /// Sequence `$1`'s next value: the first past any it handed out (one more is drawn to know:
    /// `nextval` is past all of them, used or set) and past `$3` whose remainder is `$2`;
    /// answers where the sequence began to stripe (recorded the first time).
    STRIPE = "WITH next AS (
                 SELECT setval($1::text::regclass,
                     (greatest(nextval($1::text::regclass), $3::bigint) / 64 + 1) * 64
                         + $2::bigint, false) AS value
             ), recorded AS (
                 INSERT INTO tenax_stripes (sequence, since) SELECT $1::text, value FROM next
                 ON CONFLICT (sequence) DO NOTHING RETURNING since
             )
             SELECT since FROM recorded
             UNION ALL
             SELECT since FROM tenax_stripes WHERE sequence = $1::text
                 AND NOT EXISTS (SELECT 1 FROM recorded)";
}

/// A database of its own is no pooled deployment: it lists no pools, and registers none (the
/// pooled store, `tenax-pools`, does).
impl tenax_core::store::PoolStore for PostgresStore {}
