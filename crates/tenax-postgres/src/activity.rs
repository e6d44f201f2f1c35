//! The cluster's activity per minute: a row per minute in `tenax_activity`, to which every
//! server adds its counts (one upsert that adds, for all the minutes a flush carries), so a
//! minute's row is the sum of every server's.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::activity::{Counts, Minute};
use tenax_core::store::{ActivityStore, StoreError};

use super::rows::{time, untime};
use super::statements::statements;
use super::transitions::{execute, query};
use super::{PostgresStore, fault};

/// A count as stored.
fn stored(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// A count as read (never negative: only [`stored`] counts are added up).
fn read(count: i64) -> u64 {
    u64::try_from(count).unwrap_or(0)
}

#[async_trait]
impl ActivityStore for PostgresStore {
    async fn add_activity(&self, minutes: &[Minute]) -> Result<(), StoreError> {
        if minutes.is_empty() {
            return Ok(());
        }
        let column = |count: fn(&Counts) -> u64| -> Vec<i64> {
            minutes.iter().map(|m| stored(count(&m.counts))).collect()
        };
        let at: Vec<i64> = minutes.iter().map(|m| time(m.at_ms)).collect();
        let (enqueued, completed, failed) = (
            column(|c| c.enqueued),
            column(|c| c.completed),
            column(|c| c.failed),
        );
        let (dead, delivered, delivery_failed) = (
            column(|c| c.dead),
            column(|c| c.delivered),
            column(|c| c.delivery_failed),
        );
        let client = self.client().await?;
        execute(
            &client,
            &ADD,
            &[
                &at,
                &enqueued,
                &completed,
                &failed,
                &dead,
                &delivered,
                &delivery_failed,
            ],
        )
        .await
        .map_err(fault("adding activity counts"))?;
        Ok(())
    }

    async fn activity(&self, from_ms: UnixMs, to_ms: UnixMs) -> Result<Vec<Minute>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &READ, &[&time(from_ms), &time(to_ms)])
            .await
            .map_err(fault("reading activity counts"))?;
        Ok(rows
            .iter()
            .map(|row| Minute {
                at_ms: untime(row.get(0)),
                counts: Counts {
                    enqueued: read(row.get(1)),
                    completed: read(row.get(2)),
                    failed: read(row.get(3)),
                    dead: read(row.get(4)),
                    delivered: read(row.get(5)),
                    delivery_failed: read(row.get(6)),
                },
            })
            .collect())
    }

    async fn purge_activity(&self, before_ms: UnixMs) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let purged = execute(&client, &PURGE, &[&time(before_ms)])
            .await
            .map_err(fault("forgetting old activity counts"))?;
        Ok(usize::try_from(purged).unwrap_or(usize::MAX))
    }
}

statements! {
    /// Adds each minute's counts (`$1`: the minutes, distinct; `$2`–`$7`: their counts). Rows
    /// are written in minute order, so two servers adding the same minutes lock them in the
    /// same order and never wait for each other in a circle.
    ADD = "INSERT INTO tenax_activity AS a
             (minute, enqueued, completed, failed, dead, delivered, delivery_failed)
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[],
                              $5::bigint[], $6::bigint[], $7::bigint[])
         ORDER BY 1
         ON CONFLICT (minute) DO UPDATE SET
             enqueued = a.enqueued + EXCLUDED.enqueued,
             completed = a.completed + EXCLUDED.completed,
             failed = a.failed + EXCLUDED.failed,
             dead = a.dead + EXCLUDED.dead,
             delivered = a.delivered + EXCLUDED.delivered,
             delivery_failed = a.delivery_failed + EXCLUDED.delivery_failed";
    READ = "SELECT minute, enqueued, completed, failed, dead, delivered, delivery_failed
         FROM tenax_activity WHERE minute >= $1 AND minute <= $2 ORDER BY minute";
    PURGE = "DELETE FROM tenax_activity WHERE minute < $1";
}
