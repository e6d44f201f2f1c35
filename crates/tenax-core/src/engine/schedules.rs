//! Schedules: made, changed, paused and deleted atomically; and their ticks, turned into jobs by
//! the maintenance loop of the server that leads.
//!
//! Rules:
//! - A tick is handled once: its record and its job are one store commit, guarded by the
//!   schedule's revision, so neither a restart nor a second server enqueues it again
//!   (`crate::store::ScheduleStore::record_tick`).
//! - A tick handled within [`MISSED_AFTER_MS`] of its time enqueues its job. Older ones are
//!   missed: counted, and, with [`Missed::RunOnce`], run once together (one job for the latest).
//! - With [`Overlap::Skip`], a tick whose previous job is unfinished (scheduled, ready or in
//!   flight) is counted and left out.
//! - A new schedule, or one whose expression or time zone changed, starts with the ticks after
//!   the change; a changed job, overlap or missed choice keeps its place. Ticks while paused are
//!   never enqueued, not even by `run_once`: resuming starts from the ticks after it.

use super::jobs::FACTS_ATTEMPTS;
use super::{Engine, Enqueue};
use crate::clock::UnixMs;
use crate::engine::EngineError;
use crate::model::schedule::{MISSED_AFTER_MS, MOST_MISSED_COUNTED};
use crate::model::timetable::Timetable;
use crate::model::{JobId, JobTemplate, Missed, NewJob, Overlap, Schedule, TickCounts};
use crate::store::StoreError;

/// What a schedule is made (or replaced) with: its definition, checked.
#[derive(Debug, Clone)]
pub struct ScheduleSpec {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    pub job: JobTemplate,
    pub missed: Missed,
    pub overlap: Overlap,
    /// `None` keeps a replaced schedule's.
    pub paused: Option<bool>,
}

/// The most due schedules one maintenance pass handles.
const BATCH: usize = 1_000;

impl Engine {
    pub async fn schedule(&self, name: &str) -> Result<Option<Schedule>, EngineError> {
        Ok(self.store.schedule(name).await?)
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<Schedule>, EngineError> {
        Ok(self.store.schedules().await?)
    }

    /// Makes or replaces a schedule, atomically. `timetable` is `spec`'s, already read. Returns
    /// it as stored, and whether it is new.
    pub async fn put_schedule(
        &self,
        spec: ScheduleSpec,
        timetable: &Timetable,
    ) -> Result<(Schedule, bool), EngineError> {
        let now_ms = self.now_ms();
        let created = std::sync::atomic::AtomicBool::new(false);
        let stored = self
            .store
            .update_schedule(&spec.name, &|current| {
                created.store(current.is_none(), std::sync::atomic::Ordering::Relaxed);
                Some(replaced(current, &spec, timetable, now_ms))
            })
            .await?;
        let stored =
            stored.ok_or_else(|| StoreError::Corrupt("a schedule was not stored".into()))?;
        Ok((stored, created.into_inner()))
    }

    /// Pauses or resumes a schedule; `None` if there is none.
    pub async fn pause_schedule(
        &self,
        name: &str,
        paused: bool,
    ) -> Result<Option<Schedule>, EngineError> {
        let now_ms = self.now_ms();
        Ok(self
            .store
            .update_schedule(name, &|current| {
                let current = current?;
                if current.paused == paused {
                    return None;
                }
                let mut changed = current.clone();
                changed.paused = paused;
                changed.revision += 1;
                changed.updated_at_ms = now_ms;
                if !paused {
                    // Ticks while paused are not enqueued.
                    changed.through_ms = changed.through_ms.max(now_ms);
                    changed.next_tick_ms = Timetable::new(&changed.cron, &changed.timezone)
                        .ok()
                        .and_then(|t| t.next_after(changed.through_ms));
                }
                Some(changed)
            })
            .await?)
    }

    /// Enqueues a schedule's job at once, outside its timetable (an operator's "run now"),
    /// paused or not. The job becomes the schedule's last job (its time the last tick), so that
    /// `Overlap::Skip` waits for it as for a tick's; the next tick and the counts stay, since
    /// no tick was handled. Recorded with the job in one commit, like a tick. `None` if there is
    /// no such schedule.
    pub async fn run_schedule_now(&self, name: &str) -> Result<Option<JobId>, EngineError> {
        for _ in 0..FACTS_ATTEMPTS {
            let Some(schedule) = self.store.schedule(name).await? else {
                return Ok(None);
            };
            let now_ms = self.now_ms();
            let mut next = schedule.clone();
            next.revision += 1;
            next.last_tick_ms = Some(now_ms);
            let job = enqueue_of(&schedule.job, now_ms, now_ms);
            // `None`: a tick or a change got there first; read the schedule again.
            if let Some(id) = self.record(&next, schedule.revision, Some(job)).await? {
                return Ok(id);
            }
        }
        // The schedule kept changing under the request (a tick every second, and changes).
        Err(StoreError::FactsChanged.into())
    }

    /// Deletes a schedule; the jobs it made stay. False if there was none.
    pub async fn delete_schedule(&self, name: &str) -> Result<bool, EngineError> {
        Ok(self.store.delete_schedule(name).await?)
    }

    /// Handles the ticks due at `now_ms` of every schedule; returns how many jobs were
    /// enqueued. Run by the maintenance loop of the server that leads; safe anywhere.
    pub async fn fire_due_schedules(&self, now_ms: UnixMs) -> Result<usize, EngineError> {
        let mut enqueued = 0;
        for schedule in self.store.due_schedules(now_ms, BATCH).await? {
            let name = schedule.name.clone();
            match self.fire(schedule, now_ms).await {
                Ok(n) => enqueued += n,
                Err(error) => tracing::error!(%error, schedule = name, "a schedule's tick failed"),
            }
        }
        Ok(enqueued)
    }

    /// Handles one schedule's due ticks, one record each; stops when another server (or a
    /// change) got there first. Returns how many jobs were enqueued.
    async fn fire(&self, mut schedule: Schedule, now_ms: UnixMs) -> Result<usize, StoreError> {
        let timetable = match Timetable::new(&schedule.cron, &schedule.timezone) {
            Ok(timetable) => timetable,
            Err(error) => {
                // Stored before a rule changed (or a time zone left the database): it stays,
                // shown, and ticks no more until it is replaced.
                tracing::error!(
                    schedule = schedule.name,
                    field = error.field,
                    rule = error.rule,
                    "a schedule can no longer be read; it does not tick until it is replaced"
                );
                let mut parked = schedule.clone();
                parked.next_tick_ms = None;
                parked.revision += 1;
                self.record(&parked, schedule.revision, None).await?;
                return Ok(0);
            }
        };
        let mut enqueued = 0;
        loop {
            let tick = timetable.next_after(schedule.through_ms);
            let mut next = schedule.clone();
            next.revision += 1;
            let Some(tick) = tick.filter(|at| *at <= now_ms) else {
                // Nothing (more) due: keep the next tick right, in case it was not.
                if schedule.next_tick_ms != tick {
                    next.next_tick_ms = tick;
                    self.record(&next, schedule.revision, None).await?;
                }
                return Ok(enqueued);
            };
            let job_tick = if now_ms.saturating_sub(tick) > MISSED_AFTER_MS {
                let horizon = now_ms - MISSED_AFTER_MS;
                let last = timetable
                    .last_at_or_before(horizon)
                    .map_or(tick, |at| at.max(tick));
                let count = 1 + timetable.count_between(tick, last, MOST_MISSED_COUNTED - 1);
                next.through_ms = last;
                next.counts.missed = next.counts.missed.saturating_add(count);
                tracing::warn!(
                    schedule = schedule.name,
                    missed = count,
                    run_once = schedule.missed == Missed::RunOnce,
                    "a schedule's ticks were missed (no server handled them in time)"
                );
                (schedule.missed == Missed::RunOnce).then_some(last)
            } else {
                next.through_ms = tick;
                Some(tick)
            };
            next.next_tick_ms = timetable.next_after(next.through_ms);
            let mut job = None;
            if let Some(at) = job_tick {
                if schedule.overlap == Overlap::Skip && self.unfinished(schedule.last_job).await? {
                    next.counts.overlapped = next.counts.overlapped.saturating_add(1);
                } else {
                    next.counts.enqueued = next.counts.enqueued.saturating_add(1);
                    next.last_tick_ms = Some(at);
                    job = Some(enqueue_of(&schedule.job, at, now_ms));
                }
            }
            let made = job.is_some();
            let Some(id) = self.record(&next, schedule.revision, job).await? else {
                return Ok(enqueued);
            };
            if let Some(id) = id {
                next.last_job = Some(id);
            }
            enqueued += usize::from(made);
            schedule = next;
        }
    }

    /// Stores `next` (and `job`) if the schedule is still at `expected`: `None` if not; else
    /// the id of the job made, if one was.
    async fn record(
        &self,
        next: &Schedule,
        expected: u64,
        job: Option<Enqueue>,
    ) -> Result<Option<Option<JobId>>, StoreError> {
        let mut attempt = 1;
        loop {
            let now_ms = self.now_ms();
            let made = match &job {
                Some(job) => Some(self.inserts_of(vec![job.clone()], now_ms).await?),
                None => None,
            };
            let (inserts, seen) = made.as_ref().map_or((Vec::new(), Default::default()), |m| {
                (m.inserts.clone(), m.seen)
            });
            match self
                .store
                .record_tick(next, expected, inserts, seen, now_ms)
                .await
            {
                Err(StoreError::FactsChanged) if attempt < FACTS_ATTEMPTS => attempt += 1,
                Err(error) => return Err(error),
                Ok(None) => return Ok(None),
                Ok(Some(results)) => {
                    let id = results.first().and_then(Option::as_ref).map(|e| e.id);
                    if let Some(made) = made {
                        self.count_enqueued(made.observed, results, 1, now_ms);
                    }
                    return Ok(Some(id));
                }
            }
        }
    }

    /// Whether `job` exists and is unfinished.
    async fn unfinished(&self, job: Option<JobId>) -> Result<bool, StoreError> {
        let Some(job) = job else {
            return Ok(false);
        };
        let peek = self.store.peek_jobs(&[job]).await?.pop().flatten();
        Ok(peek.is_some_and(|p| !p.status.is_finished()))
    }
}

/// The schedule `spec` makes of `current` (none yet: a new one) at `now_ms`.
fn replaced(
    current: Option<&Schedule>,
    spec: &ScheduleSpec,
    timetable: &Timetable,
    now_ms: UnixMs,
) -> Schedule {
    let same_times = current.is_some_and(|c| c.cron == spec.cron && c.timezone == spec.timezone);
    let was_paused = current.is_some_and(|c| c.paused);
    let paused = spec.paused.unwrap_or(was_paused);
    let resumed = was_paused && !paused;
    let through_ms = match current {
        Some(c) if same_times && !resumed => c.through_ms,
        // Resumed by the change: ticks while paused are not enqueued.
        Some(c) if same_times => c.through_ms.max(now_ms),
        _ => now_ms,
    };
    Schedule {
        name: spec.name.clone(),
        cron: spec.cron.clone(),
        timezone: spec.timezone.clone(),
        job: spec.job.clone(),
        missed: spec.missed,
        overlap: spec.overlap,
        paused,
        revision: current.map_or(1, |c| c.revision + 1),
        through_ms,
        next_tick_ms: timetable.next_after(through_ms),
        last_tick_ms: current.and_then(|c| c.last_tick_ms),
        last_job: current.and_then(|c| c.last_job),
        counts: current.map_or(TickCounts::default(), |c| c.counts),
        created_at_ms: current.map_or(now_ms, |c| c.created_at_ms),
        updated_at_ms: now_ms,
    }
}

/// The job of the tick at `tick_ms`, enqueued at `now_ms`: due at its tick (so ready at once).
fn enqueue_of(template: &JobTemplate, tick_ms: UnixMs, now_ms: UnixMs) -> Enqueue {
    Enqueue {
        job: NewJob {
            queue: template.queue.clone(),
            kind: template.kind.clone(),
            payload: template.payload.clone(),
            priority: template.priority,
            run_at_ms: tick_ms.min(now_ms),
            policy: template.policy.clone(),
            unique_key: None,
            created_at_ms: now_ms,
            expires_at_ms: None,
            origin: None,
            parent: None,
            traceparent: None,
            payload_sealed: false,
            after: Vec::new(),
            on_parent_dead: Default::default(),
            batch: None,
        },
        retry_limit: template.retry_limit,
        after: Vec::new(),
    }
}
