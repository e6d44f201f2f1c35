//! Queue settings: a row per configured queue. Changes to one queue are serialised by a
//! transaction-scoped advisory lock on its name (a queue may have no row yet).

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{LimitUse, QueueConfig};
use tenax_core::store::{ChangeQueue, QueueStore, StoreError};

use super::dependents::{self, settle};
use super::rows::{count_of, json, queue_config_of};
use super::statements::statements;
use super::transitions::{execute, query, queue_config};
use super::wakeups::Wakeup;
use super::{PostgresStore, facts, fault, limits};

#[async_trait]
impl QueueStore for PostgresStore {
    async fn queue(&self, name: &str) -> Result<Option<QueueConfig>, StoreError> {
        queue_config(&self.client().await?, name).await
    }

    async fn queues(&self) -> Result<Vec<(String, QueueConfig)>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &QUEUES, &[])
            .await
            .map_err(fault("listing queues"))?;
        rows.iter()
            .map(|r| {
                let config = match r.get::<_, Option<&str>>(1) {
                    Some(text) => queue_config_of(text)?,
                    None => QueueConfig::default(),
                };
                Ok((r.get(0), config))
            })
            .collect()
    }

    async fn update_queue(
        &self,
        name: &str,
        change: &ChangeQueue<'_>,
    ) -> Result<Option<QueueConfig>, StoreError> {
        let what = "changing a queue's settings";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        execute(&tx, &LOCK_QUEUE, &[&name])
            .await
            .map_err(fault(what))?;
        let current = queue_config(&tx, name).await?;
        let Some(config) = change(current.as_ref()) else {
            return Ok(current);
        };
        execute(
            &tx,
            &PUT_QUEUE,
            &[&name, &config.paused, &json(&config), &config.is_limited()],
        )
        .await
        .map_err(fault(what))?;
        execute(&tx, &facts::ADVANCE, &[])
            .await
            .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        self.facts.forget();
        if !config.paused {
            // It may have been resumed.
            self.announce(Wakeup::Ready);
        }
        Ok(Some(config))
    }

    async fn delete_queue(&self, name: &str, now_ms: UnixMs) -> Result<usize, StoreError> {
        let what = "deleting a queue";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let rows = query(&tx, &DELETE_QUEUE, &[&name])
            .await
            .map_err(fault(what))?;
        let parents = rows
            .first()
            .map_or_else(Vec::new, |r| dependents::deleted(r.get(1), r.get(2)));
        let settled = settle(&tx, &parents, now_ms).await?;
        tx.commit().await.map_err(fault(what))?;
        self.announce_settled(settled);
        self.facts.forget();
        let count = count_of(rows.first().map(|r| r.get(0)));
        if count > 0 {
            self.announce(Wakeup::Released);
        }
        Ok(count)
    }

    async fn limit_use(&self, name: &str, now_ms: UnixMs) -> Result<LimitUse, StoreError> {
        let client = self.client().await?;
        let Some(rate) = queue_config(&client, name).await?.and_then(|c| c.rate) else {
            return Ok(LimitUse::default());
        };
        let started = limits::started(&client, name, &rate, now_ms).await?;
        Ok(LimitUse { started })
    }
}

statements! {
    /// Every queue with settings or jobs. The names of the queues with jobs are read by a
    /// skip scan of each table's `(queue, id)` index, one descent per queue, instead of a
    /// `DISTINCT` over every job kept (issue 31: 200 ms with 2.2 million jobs kept, against
    /// 1 ms; a dashboard and every listing pay it).
    QUEUES = "WITH RECURSIVE live(queue) AS (
                 (SELECT queue FROM tenax_jobs ORDER BY queue LIMIT 1)
                 UNION ALL
                 SELECT (SELECT j.queue FROM tenax_jobs j WHERE j.queue > live.queue
                         ORDER BY j.queue LIMIT 1)
                 FROM live WHERE live.queue IS NOT NULL
             ), finished(queue) AS (
                 (SELECT queue FROM tenax_finished ORDER BY queue LIMIT 1)
                 UNION ALL
                 SELECT (SELECT f.queue FROM tenax_finished f WHERE f.queue > finished.queue
                         ORDER BY f.queue LIMIT 1)
                 FROM finished WHERE finished.queue IS NOT NULL
             )
             SELECT name, config FROM tenax_queues
             UNION ALL
             SELECT queue, NULL
             FROM (SELECT queue FROM live UNION SELECT queue FROM finished) AS used
             WHERE queue IS NOT NULL AND queue NOT IN (SELECT name FROM tenax_queues)
             ORDER BY 1";
    /// Changes to one queue wait for each other: the queue may have no row to lock yet.
    LOCK_QUEUE = "SELECT pg_advisory_xact_lock(hashtextextended('tenax.queue:' || $1, 0))";
    PUT_QUEUE = "INSERT INTO tenax_queues (name, paused, config, limited) VALUES ($1, $2, $3, $4)
             ON CONFLICT (name) DO UPDATE
             SET paused = excluded.paused, config = excluded.config, limited = excluded.limited";
    /// Deletes a queue's jobs and settings: answers how many jobs, then the ids of those with
    /// children, unfinished and finished ([`super::dependents`]).
    DELETE_QUEUE = "WITH live AS (DELETE FROM tenax_jobs WHERE queue = $1
                               RETURNING id, has_children),
                  finished AS (DELETE FROM tenax_finished WHERE queue = $1
                               RETURNING id, has_children),
                  settings AS (DELETE FROM tenax_queues WHERE name = $1 RETURNING 1),
                  starts AS (DELETE FROM tenax_queue_starts WHERE queue = $1),
                  advanced AS (UPDATE tenax_facts SET version = version + 1
                               WHERE EXISTS (SELECT 1 FROM settings))
             SELECT (SELECT count(*) FROM live) + (SELECT count(*) FROM finished),
                 ARRAY(SELECT id FROM live WHERE has_children),
                 ARRAY(SELECT id FROM finished WHERE has_children)";
}
