//! A schedule: a named timetable (a cron expression in a time zone) and the job each of its
//! ticks enqueues, with what it has done so far.
//!
//! Invariants:
//! - Every tick at or before `through_ms` is handled: its job was enqueued, or it was skipped
//!   (missed after downtime, or left out because the previous job was unfinished), and its
//!   count says which. A tick's handling and its job are stored in one commit, guarded by the
//!   schedule's `revision` (see `crate::store::ScheduleStore::record_tick`), so each tick has
//!   at most one job across restarts and servers.
//! - `next_tick_ms` is the first tick after `through_ms` (`None`: the expression has no more).
//! - `revision` grows by one with every stored change.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{JobId, StoredPolicy};
use crate::clock::UnixMs;

/// A schedule as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Schedule {
    pub name: String,
    /// The cron expression, as given.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    pub job: JobTemplate,
    #[serde(default)]
    pub missed: Missed,
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    pub paused: bool,
    pub revision: u64,
    /// Every tick at or before this time is handled.
    pub through_ms: UnixMs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_tick_ms: Option<UnixMs>,
    /// The tick of the last job enqueued, and that job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_tick_ms: Option<UnixMs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<JobId>,
    #[serde(default)]
    pub counts: TickCounts,
    pub created_at_ms: UnixMs,
    pub updated_at_ms: UnixMs,
}

/// What became of a schedule's ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TickCounts {
    /// Ticks that enqueued a job (a run of missed ticks run once counts once).
    pub enqueued: u64,
    /// Ticks no server saw in time (see [`MISSED_AFTER_MS`]), counted up to
    /// [`MOST_MISSED_COUNTED`] per outage.
    pub missed: u64,
    /// Ticks left out because the previous tick's job was unfinished ([`Overlap::Skip`]).
    pub overlapped: u64,
}

/// The job a tick enqueues: the fields of an enqueue that do not depend on when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobTemplate {
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub payload: Box<RawValue>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<StoredPolicy>,
    /// A retry limit over the policy the job would otherwise have (its queue's, else the
    /// server's), as an enqueue's bare `retry_limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<u32>,
}

/// What happens to ticks that no server handled in time (the servers were down, or the
/// schedule's lead moved): see [`MISSED_AFTER_MS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// They are skipped (and counted).
    #[default]
    Skip,
    /// They run once together: one job, for the latest of them.
    RunOnce,
}

/// What a tick does while the previous tick's job is unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Enqueue anyway.
    #[default]
    Allow,
    /// Skip the tick (and count it).
    Skip,
}

/// A tick is missed when it is handled more than this long after its time. Within it a late
/// tick (a restart, a change of lead) still enqueues its job.
pub const MISSED_AFTER_MS: u64 = 60_000;

/// The most missed ticks counted for one outage: counting means walking the timetable, and a
/// schedule of every second down for a week has 604 800.
pub const MOST_MISSED_COUNTED: u64 = 10_000;
