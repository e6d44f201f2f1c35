//! Schedules: a row each, the whole schedule as JSON beside the columns the maintenance loop
//! looks by. A tick's record and its job are one transaction: the jobs are inserted, then the
//! schedule row is updated only where its revision is still the one the engine read; when it is
//! not (another server recorded the tick, or the schedule changed), nothing commits.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{Enqueued, OnDuplicate, Schedule};
use tenax_core::store::{
    ChangeSchedule, FactsSeen, Insert, ScheduleStore, StoreError, from_json_bytes,
};

use super::inserts::insert_in;
use super::rows::{json, limit, time};
use super::statements::statements;
use super::transitions::{execute, query};
use super::{PostgresStore, fault};

fn schedule_of(text: &str) -> Result<Schedule, StoreError> {
    from_json_bytes("schedule", text.as_bytes())
}

fn revision(schedule: &Schedule) -> i64 {
    i64::try_from(schedule.revision).unwrap_or(i64::MAX)
}

#[async_trait]
impl ScheduleStore for PostgresStore {
    async fn schedule(&self, name: &str) -> Result<Option<Schedule>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &SCHEDULE, &[&name])
            .await
            .map_err(fault("reading a schedule"))?;
        rows.first().map(|r| schedule_of(r.get(0))).transpose()
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &LIST, &[])
            .await
            .map_err(fault("listing schedules"))?;
        rows.iter().map(|r| schedule_of(r.get(0))).collect()
    }

    async fn update_schedule(
        &self,
        name: &str,
        change: &ChangeSchedule<'_>,
    ) -> Result<Option<Schedule>, StoreError> {
        let what = "changing a schedule";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        // A schedule may have no row yet: the lock is on its name.
        execute(&tx, &LOCK, &[&name]).await.map_err(fault(what))?;
        // The row too: a tick recorded meanwhile (`record_tick` takes no advisory lock) would
        // otherwise be overwritten by a change decided on the row as it was before the tick.
        let rows = query(&tx, &SCHEDULE_FOR_UPDATE, &[&name])
            .await
            .map_err(fault(what))?;
        let current = rows.first().map(|r| schedule_of(r.get(0))).transpose()?;
        let Some(schedule) = change(current.as_ref()) else {
            return Ok(current);
        };
        execute(
            &tx,
            &PUT,
            &[
                &name,
                &schedule.paused,
                &schedule.next_tick_ms.map(time),
                &revision(&schedule),
                &json(&schedule),
            ],
        )
        .await
        .map_err(fault(what))?;
        tx.commit().await.map_err(fault(what))?;
        // The leader's maintenance loop may have a new next tick to wait for.
        self.announce(super::wakeups::Wakeup::Schedule);
        Ok(Some(schedule))
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let deleted = execute(&client, &DELETE, &[&name])
            .await
            .map_err(fault("deleting a schedule"))?;
        Ok(deleted > 0)
    }

    async fn due_schedules(&self, now_ms: UnixMs, max: usize) -> Result<Vec<Schedule>, StoreError> {
        let client = self.client().await?;
        let rows = query(&client, &DUE, &[&time(now_ms), &limit(max)])
            .await
            .map_err(fault("finding due schedules"))?;
        rows.iter().map(|r| schedule_of(r.get(0))).collect()
    }

    async fn record_tick(
        &self,
        schedule: &Schedule,
        expected_revision: u64,
        jobs: Vec<Insert>,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Option<Vec<Option<Enqueued>>>, StoreError> {
        let what = "recording a schedule's tick";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(fault(what))?;
        let (results, made) = insert_in(&tx, &jobs, OnDuplicate::Refuse, seen, now_ms).await?;
        let mut stored = schedule.clone();
        if let Some(first) = results.iter().flatten().find(|e| e.created) {
            stored.last_job = Some(first.id);
        }
        let expected = i64::try_from(expected_revision).unwrap_or(i64::MAX);
        let updated = execute(
            &tx,
            &RECORD_TICK,
            &[
                &stored.name,
                &stored.paused,
                &stored.next_tick_ms.map(time),
                &revision(&stored),
                &json(&stored),
                &expected,
            ],
        )
        .await
        .map_err(fault(what))?;
        if updated == 0 {
            // Rolled back as `tx` goes: the jobs are not stored either.
            return Ok(None);
        }
        tx.commit().await.map_err(fault(what))?;
        self.announce_made(made);
        Ok(Some(results))
    }
}

statements! {
    SCHEDULE = "SELECT body FROM tenax_schedules WHERE name = $1";
    SCHEDULE_FOR_UPDATE = "SELECT body FROM tenax_schedules WHERE name = $1 FOR UPDATE";
    LIST = "SELECT body FROM tenax_schedules ORDER BY name";
    LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('tenax.schedule:' || $1, 0))";
    PUT = "INSERT INTO tenax_schedules (name, paused, next_tick, revision, body)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (name) DO UPDATE SET paused = excluded.paused,
                 next_tick = excluded.next_tick, revision = excluded.revision,
                 body = excluded.body";
    DELETE = "DELETE FROM tenax_schedules WHERE name = $1";
    DUE = "SELECT body FROM tenax_schedules
             WHERE NOT paused AND next_tick <= $1 ORDER BY next_tick LIMIT $2";
    RECORD_TICK = "UPDATE tenax_schedules SET paused = $2, next_tick = $3, revision = $4, body = $5
             WHERE name = $1 AND revision = $6";
}
