//! The catalogue of a pooled deployment (`migrations/0016_pools.sql`): the pools, the flavors
//! and which pool holds each queue. Read and written on the catalogue's database (the one
//! `--database-url` names); the pooled store (`tenax-pools`) routes every other call.

use serde::{Deserialize, Serialize};
use tenax_core::store::StoreError;

use super::statements::statements;
use super::transitions::{execute, query};
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
}

impl PostgresStore {
    /// Every pool, by name.
    pub async fn pools(&self) -> Result<Vec<PoolRecord>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &POOLS, &[])
            .await
            .map_err(fault("reading the pools"))?;
        rows.iter()
            .map(|row| {
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
                Ok(PoolRecord {
                    name,
                    number: u8::try_from(row.get::<_, i16>(1)).unwrap_or(0),
                    uri,
                    weight: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
                    flavor: row.get(4),
                    options: row.get(5),
                })
            })
            .collect()
    }

    /// Stores a pool, or replaces the one of its name (its number stays).
    pub async fn put_pool(&self, pool: &PoolRecord) -> Result<(), StoreError> {
        // The URI may hold a password: sealed at rest, as payloads of encrypted queues are.
        let uri = self
            .payload_key
            .seal(&uri_aad(&pool.name), pool.uri.as_bytes())
            .map_err(|e| StoreError::storage("sealing a pool's URI", e))?;
        let client = self.client().await?;
        execute(
            &client,
            &PUT_POOL,
            &[
                &pool.name,
                &i16::from(pool.number),
                &uri,
                &i32::try_from(pool.weight).unwrap_or(i32::MAX),
                &pool.flavor,
                &pool.options,
            ],
        )
        .await
        .map_err(fault("storing a pool"))?;
        Ok(())
    }

    /// Forgets a pool; false if there was none.
    pub async fn delete_pool(&self, name: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let deleted = execute(&client, &DELETE_POOL, &[&name])
            .await
            .map_err(fault("deleting a pool"))?;
        Ok(deleted > 0)
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
}

/// What a sealed URI is bound to: its pool's name.
fn uri_aad(name: &str) -> Vec<u8> {
    format!("tenax pool uri {name}").into_bytes()
}

statements! {
    POOLS = "SELECT name, number, uri, weight, flavor, options FROM tenax_pools ORDER BY name";
    PUT_POOL = "INSERT INTO tenax_pools (name, number, uri, weight, flavor, options)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (name) DO UPDATE SET uri = excluded.uri, weight = excluded.weight,
                 flavor = excluded.flavor, options = excluded.options";
    DELETE_POOL = "DELETE FROM tenax_pools WHERE name = $1";
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
