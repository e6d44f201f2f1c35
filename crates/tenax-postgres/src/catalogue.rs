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
    /// are `number` modulo [`STRIPES`], and past every id it handed out before.
    pub async fn stripe_ids(&self, number: u8) -> Result<(), StoreError> {
        let what = "striping the ids";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        for step in [&STEP_JOBS, &STEP_SUBSCRIPTIONS, &STEP_BATCHES] {
            execute(&tx, step, &[]).await.map_err(fault(what))?;
        }
        query(&tx, &STRIPE, &[&i64::from(number)])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))
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
    /// A step of 64 ([`STRIPES`]) for each id sequence.
    STEP_JOBS = "ALTER SEQUENCE tenax_job_ids INCREMENT BY 64";
    STEP_SUBSCRIPTIONS = "ALTER SEQUENCE tenax_subscription_ids INCREMENT BY 64";
    STEP_BATCHES = "ALTER SEQUENCE tenax_batch_ids INCREMENT BY 64";
    /// Each sequence's next value: the first past its last whose residue is `$1`.
    STRIPE = "SELECT setval(s::regclass,
                 (coalesce(pg_sequence_last_value(s::regclass), 0) / 64 + 1) * 64 + $1::bigint, false)
             FROM unnest(ARRAY['tenax_job_ids', 'tenax_subscription_ids', 'tenax_batch_ids']) AS s";
}
