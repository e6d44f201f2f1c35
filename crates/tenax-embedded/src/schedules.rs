//! Schedules: held in memory (a few per deployment), written through. A tick's record and its
//! job are one writer request, so one commit.

use std::collections::HashSet;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{Enqueued, OnDuplicate, Schedule};
use tenax_core::store::{
    ChangeSchedule, FactsSeen, Insert, ScheduleStore, StoreError, to_json_bytes,
};

use super::enqueue::{Staged, encode_all, show, stage};
use super::ops::Op;
use super::{EmbeddedStore, Inner, writer};

#[async_trait]
impl ScheduleStore for EmbeddedStore {
    async fn schedule(&self, name: &str) -> Result<Option<Schedule>, StoreError> {
        Ok(self.inner.lock().schedules.get(name).cloned())
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        Ok(self.inner.lock().schedules.values().cloned().collect())
    }

    async fn update_schedule(
        &self,
        name: &str,
        change: &ChangeSchedule<'_>,
    ) -> Result<Option<Schedule>, StoreError> {
        let (schedule, receiver) = {
            let mut inner = self.inner.lock();
            let current = inner.schedules.get(name);
            let Some(schedule) = change(current) else {
                return Ok(current.cloned());
            };
            let receiver = self.writer.submit(vec![put(name, &schedule)]);
            inner.schedules.insert(name.to_owned(), schedule.clone());
            (schedule, receiver)
        };
        writer::wait(receiver).await?;
        // The maintenance loop may have a new next tick to wait for.
        self.signals.schedule.notify_waiters();
        Ok(Some(schedule))
    }

    async fn delete_schedule(&self, name: &str) -> Result<bool, StoreError> {
        let receiver = {
            let mut inner = self.inner.lock();
            if inner.schedules.remove(name).is_none() {
                return Ok(false);
            }
            self.writer.submit(vec![Op::DeleteSchedule {
                name: name.to_owned(),
            }])
        };
        writer::wait(receiver).await?;
        Ok(true)
    }

    async fn due_schedules(&self, now_ms: UnixMs, max: usize) -> Result<Vec<Schedule>, StoreError> {
        let inner = self.inner.lock();
        let mut due: Vec<Schedule> = inner
            .schedules
            .values()
            .filter(|s| !s.paused && s.next_tick_ms.is_some_and(|at| at <= now_ms))
            .cloned()
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
        _seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Option<Vec<Option<Enqueued>>>, StoreError> {
        let encoded = encode_all(jobs, now_ms);
        let (results, receiver) = {
            let mut inner = self.inner.lock();
            let current = inner.schedules.get(&schedule.name);
            if current.is_none_or(|s| s.revision != expected_revision) {
                return Ok(None);
            }
            let Staged {
                results,
                mut ops,
                fresh,
            } = stage(
                &mut inner,
                encoded,
                OnDuplicate::Refuse,
                // A schedule's jobs wait for no others.
                &HashSet::new(),
                now_ms,
            )?;
            let mut stored = schedule.clone();
            if let Some(first) = results.iter().flatten().find(|e| e.created) {
                stored.last_job = Some(first.id);
            }
            ops.push(put(&stored.name, &stored));
            inner.schedules.insert(stored.name.clone(), stored);
            let after =
                Box::new(move |inner: &mut Inner, written| show(inner, fresh, written, now_ms));
            (results, self.writer.submit_then(ops, after))
        };
        writer::wait(receiver).await?;
        Ok(Some(results))
    }
}

fn put(name: &str, schedule: &Schedule) -> Op {
    Op::PutSchedule {
        name: name.to_owned(),
        schedule: to_json_bytes(schedule),
    }
}
