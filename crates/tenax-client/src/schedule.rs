//! Schedules (`docs/schedules.md`): named cron timetables, read in an IANA time zone, whose
//! ticks each enqueue one job. What a request carries ([`NewSchedule`], [`SchedulePreview`])
//! and what the server answers ([`Schedule`], [`Ticks`]), serialized as the API spells them.

use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::time::{rfc3339, rfc3339_opt, unix_ms};

/// What ticks that no server handled within a minute of their time do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Missed {
    /// They enqueue nothing (they are counted).
    #[default]
    Skip,
    /// They enqueue one job together, for the latest of them.
    RunOnce,
    /// A choice this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

api_names!(Missed {
    Skip => "skip",
    RunOnce => "run_once",
    Unknown => "unknown",
});

/// What a tick does while the job of the previous tick is unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Overlap {
    /// It enqueues its job anyway.
    #[default]
    Allow,
    /// It is left out (and counted).
    Skip,
    /// A choice this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

api_names!(Overlap {
    Allow => "allow",
    Skip => "skip",
    Unknown => "unknown",
});

/// The job each tick of a schedule enqueues, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduledJob {
    pub queue: String,
    /// The job's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The payload, byte for byte as it was given.
    pub payload: Box<RawValue>,
    pub priority: i32,
    /// The job's own policy, canonical native spelling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
}

impl ScheduledJob {
    /// The payload read as `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }
}

/// What became of a schedule's ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TickCounts {
    /// Ticks that enqueued a job (a run of missed ticks run once counts once).
    pub enqueued: u64,
    /// Ticks no server handled in time (up to 10 000 per outage).
    pub missed: u64,
    /// Ticks left out because the previous tick's job was unfinished ([`Overlap::Skip`]).
    pub overlapped: u64,
}

/// A schedule: its definition, its next tick, and what its ticks did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Schedule {
    pub name: String,
    pub cron: String,
    pub timezone: String,
    /// The expression in words.
    pub description: String,
    pub job: ScheduledJob,
    pub missed: Missed,
    pub overlap: Overlap,
    pub paused: bool,
    /// `None` when the expression has no more ticks. Shown while paused too: what it would be.
    #[serde(default, with = "rfc3339_opt")]
    pub next_tick: Option<SystemTime>,
    /// The tick of the last job a tick enqueued, and that job.
    #[serde(default, with = "rfc3339_opt")]
    pub last_tick: Option<SystemTime>,
    #[serde(default)]
    pub last_job: Option<u64>,
    pub counts: TickCounts,
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    #[serde(with = "rfc3339")]
    pub updated_at: SystemTime,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ScheduleList {
    pub schedules: Vec<Schedule>,
}

/// One tick of a timetable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Tick {
    #[serde(with = "rfc3339")]
    pub at: SystemTime,
    /// The wall-clock time in the schedule's zone, with its offset
    /// (`2027-03-28T03:00:00+02:00`).
    pub local: String,
    /// The expression names a wall time that does not exist that day (the clocks moved
    /// forward): the tick is the first instant after the gap.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shifted: bool,
}

/// An expression's next ticks, and the expression in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Ticks {
    pub cron: String,
    pub timezone: String,
    pub description: String,
    pub ticks: Vec<Tick>,
}

/// A schedule to make, or to replace the one of its name with.
///
/// ```
/// use tenax_client::{Missed, NewSchedule, Overlap};
///
/// let nightly = NewSchedule::new("30 2 * * *", "reports", "nightly")
///     .timezone("Europe/Berlin")
///     .payload(serde_json::json!({"full": true}))
///     .missed(Missed::RunOnce)
///     .overlap(Overlap::Skip);
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct NewSchedule<P = ()> {
    cron: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    timezone: Option<String>,
    job: Template<P>,
    #[serde(skip_serializing_if = "Option::is_none")]
    missed: Option<Missed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overlap: Option<Overlap>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<bool>,
}

/// The job of a [`NewSchedule`]: an enqueue's fields but those that say when or dedupe.
#[derive(Debug, Clone, Serialize)]
struct Template<P> {
    queue: String,
    #[serde(rename = "type")]
    kind: String,
    payload: P,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_limit: Option<u32>,
}

impl NewSchedule<()> {
    /// Ticks at the times of `cron` (five fields, six with a leading second, or `@daily` and
    /// the like), each enqueueing a job of `kind` on `queue` with a `null` payload until
    /// [`NewSchedule::payload`] gives one.
    pub fn new(cron: impl Into<String>, queue: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            cron: cron.into(),
            timezone: None,
            job: Template {
                queue: queue.into(),
                kind: kind.into(),
                payload: (),
                priority: None,
                policy: None,
                retry_limit: None,
            },
            missed: None,
            overlap: None,
            paused: None,
        }
    }
}

impl<P> NewSchedule<P> {
    /// The payload of every tick's job: any `Serialize`.
    pub fn payload<Q>(self, payload: Q) -> NewSchedule<Q> {
        let job = self.job;
        NewSchedule {
            cron: self.cron,
            timezone: self.timezone,
            job: Template {
                queue: job.queue,
                kind: job.kind,
                payload,
                priority: job.priority,
                policy: job.policy,
                retry_limit: job.retry_limit,
            },
            missed: self.missed,
            overlap: self.overlap,
            paused: self.paused,
        }
    }

    /// The IANA time zone the expression is read in (default `UTC`).
    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = Some(timezone.into());
        self
    }

    /// The job's priority (default 0).
    pub fn priority(mut self, priority: i32) -> Self {
        self.job.priority = Some(priority);
        self
    }

    /// The job's retry policy, in any spelling.
    pub fn policy(mut self, policy: Value) -> Self {
        self.job.policy = Some(policy);
        self
    }

    /// A retry limit over the policy the job would otherwise have.
    pub fn retry_limit(mut self, limit: u32) -> Self {
        self.job.retry_limit = Some(limit);
        self
    }

    /// What missed ticks do (default [`Missed::Skip`]).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = Some(missed);
        self
    }

    /// What a tick does while the previous tick's job is unfinished (default
    /// [`Overlap::Allow`]).
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = Some(overlap);
        self
    }

    /// Make (or keep) it paused: its ticks enqueue nothing until it is resumed.
    pub fn paused(mut self, paused: bool) -> Self {
        self.paused = Some(paused);
        self
    }
}

/// An expression whose ticks to see before storing it.
#[derive(Debug, Clone, Serialize)]
pub struct SchedulePreview {
    cron: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    timezone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<u64>,
}

impl SchedulePreview {
    /// The next ticks of `cron`, in UTC unless [`SchedulePreview::timezone`] says otherwise.
    pub fn new(cron: impl Into<String>) -> Self {
        Self {
            cron: cron.into(),
            timezone: None,
            count: None,
            after: None,
        }
    }

    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = Some(timezone.into());
        self
    }

    /// How many ticks, 1 to 1000 (default 10).
    pub fn count(mut self, count: u32) -> Self {
        self.count = Some(count);
        self
    }

    /// The ticks after this time (default: now).
    pub fn after(mut self, after: SystemTime) -> Self {
        self.after = Some(unix_ms(after));
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_schedule_sends_only_what_was_set() {
        let plain = NewSchedule::new("@daily", "reports", "r");
        assert_eq!(
            serde_json::to_value(&plain).expect("JSON"),
            json!({"cron": "@daily", "job": {"queue": "reports", "type": "r", "payload": null}})
        );
        let full = plain
            .payload(json!({"full": true}))
            .timezone("Europe/Berlin")
            .priority(3)
            .retry_limit(2)
            .missed(Missed::RunOnce)
            .overlap(Overlap::Skip)
            .paused(true);
        assert_eq!(
            serde_json::to_value(&full).expect("JSON"),
            json!({"cron": "@daily", "timezone": "Europe/Berlin",
                   "job": {"queue": "reports", "type": "r", "payload": {"full": true},
                           "priority": 3, "retry_limit": 2},
                   "missed": "run_once", "overlap": "skip", "paused": true})
        );
    }
}
