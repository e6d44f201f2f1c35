//! The server's answers, typed.
//!
//! Fields a later server adds are ignored, so this client keeps working against newer servers.
//! Times are [`SystemTime`]s; durations the server gives in milliseconds keep their `_ms` name
//! and have a [`Duration`] method beside them. Payloads stay the exact JSON text that was
//! enqueued ([`RawValue`]): read them into your type with `payload::<T>()`.
//!
//! Every answer also serializes back to the API's JSON: the same field names, times in RFC 3339
//! UTC with milliseconds as the server writes them, and a field the server leaves out when it
//! has no value left out too (the `tenax` command prints its `--format json` this way).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::time::{rfc3339, rfc3339_opt};

/// Where a job is in its lifecycle (`docs/api.md`, "Job lifecycle").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum JobStatus {
    /// Waiting for its run time (a delay, or a retry's backoff).
    Scheduled,
    /// Due: the next take may get it.
    Ready,
    /// Leased to a worker.
    InFlight,
    Completed,
    /// Out of retries (or failed as not retryable); can be replayed.
    Dead,
    /// Cancelled (`Client::cancel`); can be replayed.
    Cancelled,
    /// Held until every job it waits for (its `after`) has completed.
    Waiting,
    /// A status this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

api_names!(JobStatus {
    Scheduled => "scheduled",
    Ready => "ready",
    InFlight => "in_flight",
    Completed => "completed",
    Dead => "dead",
    Cancelled => "cancelled",
    Waiting => "waiting",
    Unknown => "unknown",
});

/// What an enqueue stored. `created` is false when `on_duplicate: existing` found an unfinished
/// job holding the unique key: `id` is then that job's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Enqueued {
    pub created: bool,
    pub id: u64,
    #[serde(with = "rfc3339")]
    pub run_at: SystemTime,
    pub status: JobStatus,
}

/// One failed attempt of a job, as its worker reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RecordedError {
    pub attempt: u32,
    #[serde(with = "rfc3339")]
    pub at: SystemTime,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// A job with its status and history (`GET /api/jobs/{id}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobInfo {
    pub id: u64,
    pub queue: String,
    /// The job's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The payload, byte for byte as it was enqueued.
    pub payload: Box<RawValue>,
    pub priority: i32,
    pub status: JobStatus,
    /// The number of the next run: failures so far + 1.
    pub attempt: u32,
    pub failures: u32,
    /// For a scheduled job, when it becomes ready; otherwise when it last became ready.
    #[serde(with = "rfc3339")]
    pub run_at: SystemTime,
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    #[serde(default, with = "rfc3339_opt", skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<SystemTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<String>,
    /// The job's own policy, canonical native spelling (`None`: its queue's or the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// The W3C trace context it was enqueued with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// One entry per failed attempt.
    #[serde(default)]
    pub errors: Vec<RecordedError>,
    /// A completed job's result, byte for byte as its worker sent it (`None`: it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
    /// The jobs it waits (or waited) for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<u64>,
    /// What it does when one of those will not complete; with `after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_parent_dead: Option<crate::request::OnParentDead>,
    /// The batch it is a member of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
}

impl JobInfo {
    /// The payload read as `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }

    /// The result read as `T`, if the job has one.
    pub fn result<T: DeserializeOwned>(&self) -> Option<Result<T, serde_json::Error>> {
        self.result.as_ref().map(|r| serde_json::from_str(r.get()))
    }
}

/// A page of jobs in id order; pass `next_after` as `after` for the next page.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobPage {
    pub jobs: Vec<JobInfo>,
    #[serde(default)]
    pub next_after: Option<u64>,
}

/// A job leased to this client by a take or a stream. Report on it with
/// [`Client::complete`](crate::Client::complete), [`Client::fail`](crate::Client::fail) or
/// [`Client::heartbeat`](crate::Client::heartbeat): they send its `lease_token`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TakenJob {
    pub id: u64,
    pub queue: String,
    /// The job's type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The payload, byte for byte as it was enqueued.
    pub payload: Box<RawValue>,
    pub priority: i32,
    /// 1 for the first run; failures so far + 1.
    pub attempt: u32,
    /// Proves this lease: heartbeat, complete and fail need it.
    pub lease_token: u64,
    #[serde(with = "rfc3339")]
    pub lease_expires_at: SystemTime,
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    /// The W3C trace context the job was enqueued with, when the server hands one out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The jobs it waited for, in its `after`'s order, with how each finished and its result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<ParentResult>,
}

/// A job a taken job waited for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ParentResult {
    pub id: u64,
    #[serde(rename = "type")]
    pub kind: String,
    /// `Completed`; `Dead` for a parent the job runs past (`OnParentDead::Run`).
    pub status: JobStatus,
    /// Its worker's result, byte for byte (`None`: it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
}

impl TakenJob {
    /// The payload read as `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }

    /// The result of parent `id` read as `T`, if it is one of the jobs this one waited for and
    /// has a result.
    pub fn parent_result<T: DeserializeOwned>(
        &self,
        id: u64,
    ) -> Option<Result<T, serde_json::Error>> {
        let parent = self.parents.iter().find(|p| p.id == id)?;
        parent
            .result
            .as_ref()
            .map(|r| serde_json::from_str(r.get()))
    }

    /// The job and lease token to report with.
    pub fn lease(&self) -> Lease {
        Lease {
            id: self.id,
            lease_token: self.lease_token,
        }
    }
}

/// A job and the token of its current lease: what heartbeat, complete and fail need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Lease {
    pub id: u64,
    pub lease_token: u64,
}

impl From<&TakenJob> for Lease {
    fn from(job: &TakenJob) -> Self {
        job.lease()
    }
}

/// The answer of a heartbeat: the lease now ends at `lease_expires_at` (never past the
/// server's `--max-attempt-time` after the take).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LeaseExtended {
    pub id: u64,
    #[serde(with = "rfc3339")]
    pub lease_expires_at: SystemTime,
    /// The job was cancelled while in flight: stop, and report a failure (the server then
    /// finishes the job as cancelled). Absent (false) from servers before cancellation.
    #[serde(default)]
    pub cancelled: bool,
}

/// Why one job of a batch completion was not completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompleteError {
    /// `lease_lost`, `not_in_flight`, `not_found`.
    pub code: String,
    pub message: String,
}

/// The outcome of completing one job of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompleteResult {
    pub id: u64,
    pub completed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CompleteError>,
}

/// The policy's decision on a failure: scheduled again (`run_at`, after `delay_ms`, as
/// `attempt`) or dead (`dead_reason`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FailResult {
    pub id: u64,
    pub status: JobStatus,
    pub failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, with = "rfc3339_opt", skip_serializing_if = "Option::is_none")]
    pub run_at: Option<SystemTime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

impl FailResult {
    pub fn is_dead(&self) -> bool {
        self.status == JobStatus::Dead
    }

    /// The job was cancelled while in flight: the failure finished it as cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.status == JobStatus::Cancelled
    }

    /// How long until the job runs again.
    pub fn delay(&self) -> Option<Duration> {
        self.delay_ms.map(Duration::from_millis)
    }
}

/// Jobs (or deliveries) by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Counts {
    #[serde(default)]
    pub scheduled: u64,
    #[serde(default)]
    pub ready: u64,
    #[serde(default)]
    pub in_flight: u64,
    #[serde(default)]
    pub completed: u64,
    #[serde(default)]
    pub dead: u64,
    #[serde(default)]
    pub cancelled: u64,
    /// Waiting for other jobs (their `after`); never a delivery.
    #[serde(default)]
    pub waiting: u64,
}

impl Counts {
    /// Jobs not yet completed, dead or cancelled.
    pub fn unfinished(&self) -> u64 {
        self.scheduled + self.ready + self.in_flight
    }
}

/// One queue's counts in [`Stats`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueCounts {
    pub queue: String,
    #[serde(flatten)]
    pub counts: Counts,
}

/// Counts per queue and over every queue (`GET /api/stats`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Stats {
    pub queues: Vec<QueueCounts>,
    pub totals: Counts,
}

impl Stats {
    /// The counts of one queue (all zero for a queue without jobs).
    pub fn queue(&self, name: &str) -> Counts {
        self.queues
            .iter()
            .find(|q| q.queue == name)
            .map(|q| q.counts)
            .unwrap_or_default()
    }
}

/// Queues moved to another pool (`POST /api/queues/{name}/move`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MovedQueues {
    pub queues: Vec<String>,
    /// The pool they were on ("" for the catalogue's database); `None` when none of them held
    /// anything elsewhere.
    pub from: Option<String>,
    pub to: String,
    /// Jobs moved, finished ones too.
    pub jobs: u64,
    /// Subscriptions moved, with their deliveries.
    pub subscriptions: u64,
}

/// A queue's settings and counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Queue {
    pub name: String,
    pub paused: bool,
    #[serde(default)]
    pub policy: Option<Value>,
    pub counts: Counts,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_overrides: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_ttl_ms: Option<u64>,
    /// At most this many of the queue's jobs in flight at once (compare `counts.in_flight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// At most `limit` jobs start in any `period_ms`, and how many the period has used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<QueueRate>,
    /// On a pooled deployment, the flavor whose pools the queue is placed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flavor: Option<String>,
}

/// A queue's rate limit and its use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueRate {
    pub limit: u32,
    pub period_ms: u64,
    /// Jobs started in the last period, as the limit counts them.
    pub used: u64,
}

impl Queue {
    pub fn message_ttl(&self) -> Option<Duration> {
        self.message_ttl_ms.map(Duration::from_millis)
    }
}

impl QueueRate {
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms)
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct QueueList {
    pub queues: Vec<Queue>,
}

/// A job that a replay named or selected but did not replay, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Skipped {
    pub id: u64,
    pub reason: String,
}

/// What a dead-job replay did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReplayResult {
    pub replayed: u64,
    pub ids: Vec<u64>,
    #[serde(default)]
    pub skipped: Vec<Skipped>,
}

/// What `POST /api/jobs/{id}/cancel` did: the job was `cancelled` at once (it was scheduled
/// or ready), or `marked` (it is in flight: its worker learns it on its next heartbeat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancelOutcome {
    Cancelled,
    Marked,
}

/// A job after `Client::cancel_job`, and what the cancellation did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CancelResult {
    pub outcome: CancelOutcome,
    pub job: JobInfo,
}

/// What `Client::cancel_jobs` did: jobs cancelled at once, and jobs in flight whose leases
/// were marked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CancelledJobs {
    pub cancelled: u64,
    pub marked: u64,
    pub cancelled_ids: Vec<u64>,
    pub marked_ids: Vec<u64>,
}

/// What a dead-job delete did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeletedJobs {
    pub deleted: u64,
    pub ids: Vec<u64>,
}

/// Retry `retry` of a policy: its delay, the sum so far, and the jitter band.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PreviewRow {
    pub retry: u32,
    pub delay_ms: u64,
    pub cumulative_ms: u64,
    pub min_delay_ms: u64,
    pub max_delay_ms: u64,
}

/// A policy's first retries, and the totals of all of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PolicyPreview {
    pub retries: Vec<PreviewRow>,
    /// The sum of every delay the policy allows.
    pub window_ms: u64,
    pub retry_count: u64,
    /// Whether `retries` shows fewer than `retry_count`.
    pub truncated: bool,
}

impl PolicyPreview {
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }
}

/// Where a subscription's effective delivery policy comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PolicySource {
    Subscription,
    Queue,
    Server,
    #[serde(other)]
    Unknown,
}

api_names!(PolicySource {
    Subscription => "subscription",
    Queue => "queue",
    Server => "server",
    Unknown => "unknown",
});

/// The body a delivery POSTs: Tenax's envelope or Zaqar's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvelopeFormat {
    Tenax,
    Zaqar,
}

api_names!(EnvelopeFormat {
    Tenax => "tenax",
    Zaqar => "zaqar",
});

/// How a subscription's endpoint has been answering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SubscriptionHealth {
    pub healthy: bool,
    pub consecutive_failures: u64,
    pub recent_attempts: u64,
    pub recent_failure_rate: f64,
    #[serde(default, with = "rfc3339_opt")]
    pub last_success_at: Option<SystemTime>,
    #[serde(default, with = "rfc3339_opt")]
    pub last_failure_at: Option<SystemTime>,
    /// When the current run of failures began.
    #[serde(default, with = "rfc3339_opt")]
    pub failing_since: Option<SystemTime>,
    /// The endpoint's pause and circuit breaker, shared by every subscription pointing there.
    #[serde(default)]
    pub endpoint: EndpointHealth,
    /// The retry budget's use in its window on the server that answered; `None` without a
    /// budget.
    #[serde(default)]
    pub retry_budget: Option<RetryBudgetUse>,
}

/// Where an endpoint's circuit breaker is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BreakerState {
    /// Deliveries go.
    #[default]
    Closed,
    /// None go until the cool-down is over (`breaker_until`).
    Open,
    /// One probe delivery is on its way; its outcome closes or opens the breaker again.
    HalfOpen,
    #[serde(other)]
    Unknown,
}

api_names!(BreakerState {
    Closed => "closed",
    Open => "open",
    HalfOpen => "half_open",
    Unknown => "unknown",
});

/// An endpoint's backpressure (`docs/webhooks.md`): a pause it asked for (429, 503) and its
/// circuit breaker. `breaker_failures` is the answering server's own count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EndpointHealth {
    /// The origin (scheme, host and port) the state is kept by.
    pub origin: String,
    /// While the endpoint's pause holds: until when.
    #[serde(default, with = "rfc3339_opt")]
    pub paused_until: Option<SystemTime>,
    /// The status of the answer that asked for the pause.
    #[serde(default)]
    pub paused_by_status: Option<u16>,
    #[serde(default)]
    pub breaker: BreakerState,
    /// Open: when a probe may go. Half-open: when the probe on its way counts as lost.
    #[serde(default, with = "rfc3339_opt")]
    pub breaker_until: Option<SystemTime>,
    /// When the breaker last opened.
    #[serde(default, with = "rfc3339_opt")]
    pub breaker_opened_at: Option<SystemTime>,
    /// Openings since a probe last closed it.
    #[serde(default)]
    pub breaker_trips: u32,
    /// The failure that opened it last.
    #[serde(default)]
    pub breaker_reason: Option<String>,
    /// Failed requests to the endpoint in a row, toward opening.
    #[serde(default)]
    pub breaker_failures: u32,
}

/// A retry budget's use: attempts and retries sent in its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetryBudgetUse {
    pub attempts: u64,
    pub retries: u64,
}

/// A subscription's retry budget: within any `window_ms`, retries are at most `percent` % of
/// the attempts, or `min_retries` whatever the share; retries over it wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetryBudget {
    pub percent: u32,
    pub window_ms: u64,
    pub min_retries: u32,
}

impl RetryBudget {
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }
}

/// A webhook subscription of a queue (`docs/webhooks.md`). `secret` and header values are
/// `"[redacted]"` except in the answers of a create and a secret rotation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Subscription {
    pub id: u64,
    pub queue: String,
    pub endpoint: String,
    pub enabled: bool,
    /// Whether its subscriber confirmed it (Zaqar's confirmation): messages go only to a
    /// confirmed subscription. Servers before confirmation existed say nothing: confirmed.
    #[serde(default = "confirmed_by_default")]
    pub confirmed: bool,
    #[serde(default)]
    pub disabled_reason: Option<String>,
    #[serde(default)]
    pub policy: Option<Value>,
    pub effective_policy: Value,
    pub policy_source: PolicySource,
    #[serde(default)]
    pub throttle_per_second: Option<u32>,
    pub content_type: String,
    pub secret: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default, with = "rfc3339_opt")]
    pub previous_secret_until: Option<SystemTime>,
    #[serde(default)]
    pub retryable_statuses: Option<Vec<u16>>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// Disabled after its endpoint failed this long without a success; 0 is never.
    pub auto_disable_after_ms: u64,
    /// `None`: retries are not capped.
    #[serde(default)]
    pub retry_budget: Option<RetryBudget>,
    pub format: EnvelopeFormat,
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    #[serde(with = "rfc3339")]
    pub updated_at: SystemTime,
    pub health: SubscriptionHealth,
    pub deliveries: Counts,
}

fn confirmed_by_default() -> bool {
    true
}

#[derive(Debug, Deserialize)]
pub(crate) struct SubscriptionList {
    pub subscriptions: Vec<Subscription>,
}

/// What deleting a subscription did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeletedSubscription {
    pub deleted: u64,
    pub deliveries_deleted: u64,
}

/// How one delivery attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptResult {
    Delivered,
    /// Failed; the policy retries it.
    Retryable,
    /// Failed in a way no retry fixes (the delivery is dead).
    Permanent,
    #[serde(other)]
    Unknown,
}

api_names!(AttemptResult {
    Delivered => "delivered",
    Retryable => "retryable",
    Permanent => "permanent",
    Unknown => "unknown",
});

/// What started a delivery attempt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptTrigger {
    /// Due by its schedule: the first try, or a retry by the policy.
    #[default]
    Scheduled,
    /// The first run after an operator replayed the dead delivery.
    Replay,
    /// An operator asked for it at once (run now, a test event).
    Manual,
    #[serde(other)]
    Unknown,
}

api_names!(AttemptTrigger {
    Scheduled => "scheduled",
    Replay => "replay",
    Manual => "manual",
    Unknown => "unknown",
});

/// One POST of a delivery to its endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeliveryAttempt {
    pub delivery: u64,
    pub attempt: u32,
    #[serde(default)]
    pub trigger: AttemptTrigger,
    #[serde(with = "rfc3339")]
    pub at: SystemTime,
    pub latency_ms: u64,
    pub result: AttemptResult,
    /// The endpoint's HTTP status, when it answered.
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub error: Option<String>,
    /// The start of the endpoint's answer.
    #[serde(default)]
    pub response: Option<String>,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// A message's delivery to one subscription; `attempts` only from
/// [`Client::get_delivery`](crate::Client::get_delivery).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Delivery {
    pub id: u64,
    pub subscription: u64,
    pub message_id: u64,
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: JobStatus,
    pub failures: u32,
    #[serde(with = "rfc3339")]
    pub run_at: SystemTime,
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    #[serde(default, with = "rfc3339_opt")]
    pub finished_at: Option<SystemTime>,
    #[serde(default)]
    pub dead_reason: Option<String>,
    #[serde(default)]
    pub policy: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<DeliveryAttempt>>,
}

/// A page of a subscription's deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeliveryPage {
    pub deliveries: Vec<Delivery>,
    #[serde(default)]
    pub next_after: Option<u64>,
}

/// The attempts of a page of a subscription's deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AttemptPage {
    pub attempts: Vec<DeliveryAttempt>,
    /// The last delivery of the page: pass it as `after` for the next one.
    #[serde(default)]
    pub next_after: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct AttemptList {
    pub attempts: Vec<DeliveryAttempt>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Replayed {
    pub replayed: Vec<u64>,
}

/// A token's role (`docs/security.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Producer,
    Worker,
    Reader,
}

api_names!(Role {
    Admin => "admin",
    Producer => "producer",
    Worker => "worker",
    Reader => "reader",
});

/// An API token as listed: never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TokenInfo {
    pub id: u64,
    pub name: String,
    pub role: Role,
    #[serde(default)]
    pub queues: Vec<String>,
    #[serde(default)]
    pub projects: Vec<String>,
    #[serde(with = "rfc3339")]
    pub created_at: SystemTime,
    #[serde(default, with = "rfc3339_opt")]
    pub last_used_at: Option<SystemTime>,
}

/// A new API token: `token` is shown this once.
#[derive(Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CreatedToken {
    #[serde(flatten)]
    pub info: TokenInfo,
    pub token: String,
}

impl std::fmt::Debug for CreatedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedToken")
            .field("token", &"[redacted]")
            .field("info", &self.info)
            .finish()
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct JobList<T> {
    pub jobs: Vec<T>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct CompleteResults {
    pub results: Vec<CompleteResult>,
}

/// A workflow: the jobs joined by their dependencies (`GET /api/workflows/{id}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Workflow {
    /// The job asked about.
    pub id: u64,
    /// `running`, `completed` (every job completed) or `failed`.
    pub status: String,
    /// Jobs by status name.
    #[serde(default)]
    pub counts: std::collections::BTreeMap<String, u64>,
    /// In id order.
    pub jobs: Vec<WorkflowStep>,
    /// `[parent, child]` pairs.
    pub edges: Vec<[u64; 2]>,
    /// More jobs than shown (at most 1 000 are).
    #[serde(default)]
    pub truncated: bool,
}

/// One job of a [`Workflow`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorkflowStep {
    pub id: u64,
    pub queue: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: JobStatus,
    #[serde(default)]
    pub after: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
}
