//! What requests carry: builders for jobs, takes, failure reports, selections and settings.
//!
//! Durations and times are sent as integer milliseconds, which every field accepts exactly.
//! Policies are [`serde_json::Value`]s in any of the server's spellings (native, AWS SNS
//! `DeliveryPolicy`, Zaqar `_retry_policy`: `docs/policies.md`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::model::{EnvelopeFormat, JobStatus, Role};
use crate::time::{duration_ms, format, unix_ms};

/// What an enqueue does when an unfinished job of the queue holds the same unique key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDuplicate {
    /// Refuse with `409 duplicate` (the default).
    Refuse,
    /// Answer `200` with the existing job (`created: false`).
    Existing,
}

/// A job to enqueue.
///
/// ```
/// use std::time::Duration;
/// use tenax_client::NewJob;
///
/// #[derive(serde::Serialize)]
/// struct Email { to: String }
///
/// let job = NewJob::new("emails", "email.send")
///     .payload(Email { to: "ada@example.com".into() })
///     .priority(10)
///     .delay(Duration::from_secs(5))
///     .policy(serde_json::json!({"type": "list", "delays": ["1s", "1m"]}))
///     .unique_key("welcome-ada");
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct NewJob<P = ()> {
    queue: String,
    #[serde(rename = "type")]
    kind: String,
    payload: P,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unique_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_duplicate: Option<OnDuplicate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    after: Vec<Parent>,
    #[serde(skip_serializing_if = "Option::is_none")]
    on_parent_dead: Option<OnParentDead>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<String>,
}

/// A job another waits for: a stored job, or another job of the same batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parent {
    /// A stored job, by id.
    Job(u64),
    /// The job at this index of the same batch.
    Index(usize),
    /// The job of the same batch with this [`NewJob::step`].
    Step(String),
}

impl Serialize for Parent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Parent::Job(id) => serializer.serialize_u64(*id),
            Parent::Index(index) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("index", index)?;
                map.end()
            }
            Parent::Step(step) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("step", step)?;
                map.end()
            }
        }
    }
}

/// What a waiting job does when a job it waits for will not complete (dies, is deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnParentDead {
    /// It is cancelled, and so are the jobs waiting for it (the default).
    Cancel,
    /// It still runs once its other parents are done.
    Run,
}

impl NewJob<()> {
    /// A job of `kind` (its type: what the worker should do) on `queue`, with a `null`
    /// payload until [`NewJob::payload`] gives one.
    pub fn new(queue: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            queue: queue.into(),
            kind: kind.into(),
            payload: (),
            priority: None,
            run_at: None,
            delay: None,
            policy: None,
            retry_limit: None,
            unique_key: None,
            on_duplicate: None,
            traceparent: None,
            after: Vec::new(),
            on_parent_dead: None,
            step: None,
        }
    }
}

impl<P> NewJob<P> {
    /// The payload: any `Serialize` (use a `serde_json::Value` to mix kinds in one batch).
    pub fn payload<Q>(self, payload: Q) -> NewJob<Q> {
        NewJob {
            queue: self.queue,
            kind: self.kind,
            payload,
            priority: self.priority,
            run_at: self.run_at,
            delay: self.delay,
            policy: self.policy,
            retry_limit: self.retry_limit,
            unique_key: self.unique_key,
            on_duplicate: self.on_duplicate,
            traceparent: self.traceparent,
            after: self.after,
            on_parent_dead: self.on_parent_dead,
            step: self.step,
        }
    }

    /// Waits for `parent`: the job runs once every job it waits for has completed, and its
    /// worker is handed their results ([`TakenJob::parents`](crate::TakenJob)). Call once per
    /// parent.
    pub fn after(mut self, parent: Parent) -> Self {
        self.after.push(parent);
        self
    }

    /// What it does when a job it waits for will not complete (default: cancelled).
    pub fn on_parent_dead(mut self, on_parent_dead: OnParentDead) -> Self {
        self.on_parent_dead = Some(on_parent_dead);
        self
    }

    /// In a batch: this job's name, by which others of the batch wait for it
    /// ([`Parent::Step`]).
    pub fn step(mut self, step: impl Into<String>) -> Self {
        self.step = Some(step.into());
        self
    }

    /// Higher runs first; FIFO within a priority. Default 0.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// When the job becomes ready (instead of now).
    pub fn run_at(mut self, at: SystemTime) -> Self {
        self.run_at = Some(unix_ms(at));
        self.delay = None;
        self
    }

    /// Ready after this delay (instead of now).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(duration_ms(delay));
        self.run_at = None;
        self
    }

    /// This job's retry policy, in any spelling (otherwise its queue's, or the server's).
    pub fn policy(mut self, policy: Value) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Overrides the policy's retry limit.
    pub fn retry_limit(mut self, limit: u32) -> Self {
        self.retry_limit = Some(limit);
        self
    }

    /// At most one unfinished job per queue and key.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// What a duplicate key gets (one job only; a batch says it for all its jobs:
    /// [`Client::enqueue_many_with`](crate::Client::enqueue_many_with)).
    pub fn on_duplicate(mut self, on_duplicate: OnDuplicate) -> Self {
        self.on_duplicate = Some(on_duplicate);
        self
    }

    /// A W3C `traceparent` to carry with the job: the server keeps it, hands it to the job's
    /// workers ([`TakenJob::traceparent`](crate::TakenJob)) and sends it with its webhook
    /// deliveries. Sent only when set.
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.traceparent = Some(traceparent.into());
        self
    }
}

/// The body of `POST /api/jobs/batch`: [`NewJob`]s, or jobs already in JSON.
#[derive(Serialize)]
pub(crate) struct Batch<'a, J> {
    pub jobs: &'a [J],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_duplicate: Option<OnDuplicate>,
}

/// What to take, and how: the queues (best job first across them), how many, the lease, and
/// (for [`Client::take`](crate::Client::take)) how long to wait for the first.
#[derive(Debug, Clone, Serialize)]
pub struct Take {
    queues: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    worker: Option<String>,
}

impl Take {
    /// Jobs of one queue.
    pub fn queue(queue: impl Into<String>) -> Self {
        Self::queues([queue])
    }

    /// Jobs of several queues, best first across all of them.
    pub fn queues<S: Into<String>>(queues: impl IntoIterator<Item = S>) -> Self {
        Self {
            queues: queues.into_iter().map(Into::into).collect(),
            max: None,
            lease: None,
            wait: None,
            worker: None,
        }
    }

    /// Most jobs to return (take: default 1), or to hold leased at once (stream: default
    /// 100); 1 to 1000.
    pub fn max(mut self, max: u32) -> Self {
        self.max = Some(max);
        self
    }

    /// The lease of each job (default: the server's `--default-lease`).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(duration_ms(lease));
        self
    }

    /// Wait up to this long (at most 60 s) for the first job when none is ready: a long poll.
    /// Not for streams, which wait as long as they are open.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(duration_ms(wait));
        self
    }

    /// The worker's name, 1 to 128 characters, under which the server lists it
    /// (`GET /api/cluster`); without it, the client's [`with_worker`](crate::Client::with_worker)
    /// name, else its address and User-Agent.
    pub fn worker(mut self, name: impl Into<String>) -> Self {
        self.worker = Some(name.into());
        self
    }

    pub(crate) fn wait_duration(&self) -> Duration {
        Duration::from_millis(self.wait.unwrap_or(0))
    }
}

/// What a failure report asks of the job's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The policy decides when the job runs again, and when it is dead.
    Retry,
    /// Dead at once, whatever the policy (it can be replayed).
    NotRetryable,
    /// Retry after this delay instead of the policy's; uses an attempt (the limit and window
    /// still apply).
    RetryIn(Duration),
    /// Retry at this time; uses an attempt.
    RetryAt(SystemTime),
    /// Run again after this delay without using an attempt; nothing is recorded.
    Snooze(Duration),
}

impl Outcome {
    /// The outcome in words, the message of a report that gives none.
    pub fn describe(&self) -> String {
        match self {
            Self::Retry => "retry".to_owned(),
            Self::NotRetryable => "not retryable".to_owned(),
            Self::RetryIn(delay) => format!("retry in {}", show(*delay)),
            Self::RetryAt(at) => format!("retry at {}", format(*at)),
            Self::Snooze(delay) => format!("snoozed for {}", show(*delay)),
        }
    }
}

fn show(duration: Duration) -> String {
    humantime::format_duration(Duration::from_millis(duration_ms(duration))).to_string()
}

/// A failure report: an outcome, a message, and any JSON detail recorded with it.
///
/// ```
/// use std::time::Duration;
/// use tenax_client::{Failure, Outcome};
///
/// let plain = Failure::new("SMTP timeout");                     // the policy decides
/// let dead = Failure::new("no such mailbox").outcome(Outcome::NotRetryable);
/// let later = Failure::new("rate limited").outcome(Outcome::RetryIn(Duration::from_secs(60)));
/// let snooze = Failure::snooze(Duration::from_secs(30));        // no attempt used
/// let detailed = Failure::new("bounced").detail(serde_json::json!({"code": 550}));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    message: String,
    detail: Option<Value>,
    outcome: Outcome,
}

impl Failure {
    /// A failure with this message; the policy decides what follows.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            detail: None,
            outcome: Outcome::Retry,
        }
    }

    /// Put the job off without using an attempt (no message needed: nothing is recorded).
    pub fn snooze(delay: Duration) -> Self {
        Self {
            message: String::new(),
            detail: None,
            outcome: Outcome::Snooze(delay),
        }
    }

    /// Chooses the outcome.
    pub fn outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = outcome;
        self
    }

    /// Any JSON recorded with the error (nested at most 64 levels).
    pub fn detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// The body of `POST /api/jobs/{id}/fail`.
pub(crate) struct FailBody<'a> {
    pub lease_token: u64,
    pub failure: &'a Failure,
}

impl Serialize for FailBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let failure = self.failure;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("lease_token", &self.lease_token)?;
        let message = if failure.message.is_empty() {
            failure.outcome.describe()
        } else {
            failure.message.clone()
        };
        let snooze = matches!(failure.outcome, Outcome::Snooze(_));
        match &failure.detail {
            Some(detail) => map.serialize_entry(
                "error",
                &serde_json::json!({"message": message, "detail": detail}),
            )?,
            // A snooze records nothing, so it need not say anything.
            None if snooze && failure.message.is_empty() => {}
            None => map.serialize_entry("error", &message)?,
        }
        match failure.outcome {
            Outcome::Retry => {}
            Outcome::NotRetryable => map.serialize_entry("retryable", &false)?,
            Outcome::RetryIn(delay) => map.serialize_entry("retry_in", &duration_ms(delay))?,
            Outcome::RetryAt(at) => map.serialize_entry("retry_at", &unix_ms(at))?,
            Outcome::Snooze(delay) => map.serialize_entry("snooze", &duration_ms(delay))?,
        }
        map.end()
    }
}

/// Which jobs to list: by queue, status and type, a page at a time.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    queue: Option<String>,
    status: Option<JobStatus>,
    kind: Option<String>,
    limit: Option<u32>,
    after: Option<u64>,
}

impl JobFilter {
    /// Every job (a scoped token needs [`JobFilter::queue`]).
    pub fn new() -> Self {
        Self::default()
    }

    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Jobs of this type.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Jobs per page, 1 to 1000 (default 100).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Jobs after this id: a page's `next_after`.
    pub fn after(mut self, after: u64) -> Self {
        self.after = Some(after);
        self
    }

    pub(crate) fn with_after(&self, after: Option<u64>) -> Self {
        Self {
            after,
            ..self.clone()
        }
    }

    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(queue) = &self.queue {
            pairs.push(("queue", queue.clone()));
        }
        if let Some(status) = self.status {
            pairs.push(("status", status.as_str().to_owned()));
        }
        if let Some(kind) = &self.kind {
            pairs.push(("type", kind.clone()));
        }
        if let Some(limit) = self.limit {
            pairs.push(("limit", limit.to_string()));
        }
        if let Some(after) = self.after {
            pairs.push(("after", after.to_string()));
        }
        pairs
    }
}

/// Which dead jobs a replay or delete acts on: ids, and/or a queue and type, or all.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeadSelection {
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    all: bool,
    /// `cancelled` to select cancelled jobs instead of dead ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
}

impl DeadSelection {
    /// Cancelled jobs instead of dead ones (they are replayed and deleted alike).
    pub fn cancelled(mut self) -> Self {
        self.status = Some("cancelled");
        self
    }

    /// These jobs.
    pub fn ids(ids: impl IntoIterator<Item = u64>) -> Self {
        Self {
            ids: Some(ids.into_iter().collect()),
            ..Self::default()
        }
    }

    /// The dead jobs of a queue (narrow further with [`DeadSelection::kind`]).
    pub fn queue(queue: impl Into<String>) -> Self {
        Self {
            queue: Some(queue.into()),
            ..Self::default()
        }
    }

    /// Every dead job.
    pub fn all() -> Self {
        Self {
            all: true,
            ..Self::default()
        }
    }

    /// Only jobs of this type.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs of this queue (of the ids, those in it).
    pub fn in_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }
}

/// Which unfinished jobs to cancel (`Client::cancel_jobs`): by id, by queue and/or type, or
/// all. Finished jobs among them are left as they are.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CancelSelection {
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    all: bool,
}

impl CancelSelection {
    /// These jobs.
    pub fn ids(ids: impl IntoIterator<Item = u64>) -> Self {
        Self {
            ids: Some(ids.into_iter().collect()),
            ..Self::default()
        }
    }

    /// The unfinished jobs of a queue (narrow further with [`CancelSelection::kind`]).
    pub fn queue(queue: impl Into<String>) -> Self {
        Self {
            queue: Some(queue.into()),
            ..Self::default()
        }
    }

    /// Every unfinished job.
    pub fn all() -> Self {
        Self {
            all: true,
            ..Self::default()
        }
    }

    /// Only jobs of this type.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs of this queue (of the ids, those in it).
    pub fn in_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }
}

/// A dead-job replay: which jobs, and how they run again.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayDead {
    #[serde(flatten)]
    selection: DeadSelection,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reset_attempts: Option<bool>,
}

impl ReplayDead {
    pub fn new(selection: DeadSelection) -> Self {
        Self {
            selection,
            policy: None,
            reset_attempts: None,
        }
    }

    /// A new policy for the replayed jobs, in any spelling.
    pub fn policy(mut self, policy: Value) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Start the retries again from 1 (otherwise a job at its limit dies again at its next
    /// failure).
    pub fn reset_attempts(mut self, reset: bool) -> Self {
        self.reset_attempts = Some(reset);
        self
    }
}

impl From<DeadSelection> for ReplayDead {
    fn from(selection: DeadSelection) -> Self {
        Self::new(selection)
    }
}

/// Serializes a field that may be left as it is (`None`), set (`Some(Some(v))`) or reset to
/// its default (`Some(None)`, sent as `null`).
type Change<T> = Option<Option<T>>;

/// A change of a queue's settings: what is not named keeps its value.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueueUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Change<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disable_overrides: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_ttl: Change<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    concurrency: Change<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Change<RateLimit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flavor: Option<String>,
    /// Sent in the query string (`?create=true`), not the body.
    #[serde(skip)]
    create: bool,
}

/// A rate limit as a queue update sends it.
#[derive(Debug, Clone, Copy, Serialize)]
struct RateLimit {
    limit: u32,
    period: u64,
}

impl QueueUpdate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the queue if it has never existed. Without it, changing a queue that has never
    /// existed (no jobs, settings, subscriptions or schedule) is refused with
    /// [`Error::Api`](crate::Error::Api) 404 naming the existing queues closest to the name, so
    /// that a misspelt name is never made into a queue.
    pub fn create(mut self) -> Self {
        self.create = true;
        self
    }

    /// Whether the update may make the queue ([`QueueUpdate::create`]).
    pub fn creates(&self) -> bool {
        self.create
    }

    /// The queue's retry policy (any spelling): its jobs without one of their own use it.
    pub fn policy(mut self, policy: Value) -> Self {
        self.policy = Some(Some(policy));
        self
    }

    /// Removes the queue's policy: its jobs use the server's default.
    pub fn remove_policy(mut self) -> Self {
        self.policy = Some(None);
        self
    }

    pub fn paused(mut self, paused: bool) -> Self {
        self.paused = Some(paused);
        self
    }

    /// On a pooled deployment, places the queue on one of `flavor`'s pools when it is first
    /// written to (a queue placed elsewhere already refuses it: 409).
    pub fn flavor(mut self, flavor: impl Into<String>) -> Self {
        self.flavor = Some(flavor.into());
        self
    }

    /// Make the queue's policy apply to every webhook subscription of the queue.
    pub fn disable_overrides(mut self, disable: bool) -> Self {
        self.disable_overrides = Some(disable);
        self
    }

    /// Delete each new job of the queue this long after its enqueue, whatever its status.
    pub fn message_ttl(mut self, ttl: Duration) -> Self {
        self.message_ttl = Some(Some(duration_ms(ttl)));
        self
    }

    pub fn remove_message_ttl(mut self) -> Self {
        self.message_ttl = Some(None);
        self
    }

    /// At most `limit` of the queue's jobs in flight at once, across every worker and server.
    pub fn concurrency(mut self, limit: u32) -> Self {
        self.concurrency = Some(Some(limit));
        self
    }

    pub fn remove_concurrency(mut self) -> Self {
        self.concurrency = Some(None);
        self
    }

    /// At most `limit` of the queue's jobs start in any `period`.
    pub fn rate(mut self, limit: u32, period: Duration) -> Self {
        self.rate = Some(Some(RateLimit {
            limit,
            period: duration_ms(period),
        }));
        self
    }

    pub fn remove_rate(mut self) -> Self {
        self.rate = Some(None);
        self
    }
}

/// A webhook subscription's settings: for a create ([`SubscriptionSettings::endpoint`]), or
/// the changes of an update (what is not named keeps its value; `reset_*` restores a default).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SubscriptionSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Change<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    throttle_per_second: Change<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retryable_statuses: Change<Vec<u16>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_concurrency: Change<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    auto_disable_after: Change<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_budget: Change<RetryBudgetSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<EnvelopeFormat>,
}

/// A cap on a subscription's retries: within any `window`, retries are at most `percent` % of
/// the attempts, or `min_retries` (server default 10) whatever the share. Retries over it wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetryBudgetSettings {
    percent: u32,
    window: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_retries: Option<u32>,
}

impl RetryBudgetSettings {
    /// `percent` from 1 to 100, `window` from 1 s to 1 day.
    pub fn new(percent: u32, window: Duration) -> Self {
        Self {
            percent,
            window: duration_ms(window),
            min_retries: None,
        }
    }

    /// Retries allowed in any window whatever the share (1 to 1 000 000).
    pub fn min_retries(mut self, min_retries: u32) -> Self {
        self.min_retries = Some(min_retries);
        self
    }
}

impl SubscriptionSettings {
    /// A subscription of this endpoint (an `http` or `https` URL), for a create.
    pub fn endpoint(url: impl Into<String>) -> Self {
        Self {
            endpoint: Some(url.into()),
            ..Self::default()
        }
    }

    /// No change yet: name the fields to update.
    pub fn changes() -> Self {
        Self::default()
    }

    /// A new endpoint (update).
    pub fn set_endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The delivery policy, any spelling.
    pub fn policy(mut self, policy: Value) -> Self {
        self.policy = Some(Some(policy));
        self
    }

    /// Back to the queue's policy, or the server's.
    pub fn reset_policy(mut self) -> Self {
        self.policy = Some(None);
        self
    }

    pub fn throttle_per_second(mut self, per_second: u32) -> Self {
        self.throttle_per_second = Some(Some(per_second));
        self
    }

    pub fn reset_throttle(mut self) -> Self {
        self.throttle_per_second = Some(None);
        self
    }

    pub fn content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }

    /// The signing secret (`whsec_…`); made by the server when a create leaves it out.
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Extra headers sent with every delivery (replaces the whole set on an update).
    pub fn headers(mut self, headers: BTreeMap<String, String>) -> Self {
        self.headers = Some(headers);
        self
    }

    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = Some(enabled);
        self
    }

    /// Which endpoint statuses are retried (default: the server's list).
    pub fn retryable_statuses(mut self, statuses: Vec<u16>) -> Self {
        self.retryable_statuses = Some(Some(statuses));
        self
    }

    pub fn reset_retryable_statuses(mut self) -> Self {
        self.retryable_statuses = Some(None);
        self
    }

    pub fn max_concurrency(mut self, max: u32) -> Self {
        self.max_concurrency = Some(Some(max));
        self
    }

    pub fn reset_max_concurrency(mut self) -> Self {
        self.max_concurrency = Some(None);
        self
    }

    /// Disable the subscription after its endpoint failed this long without a success.
    pub fn auto_disable_after(mut self, after: Duration) -> Self {
        self.auto_disable_after = Some(Some(duration_ms(after)));
        self
    }

    pub fn reset_auto_disable_after(mut self) -> Self {
        self.auto_disable_after = Some(None);
        self
    }

    /// Caps the subscription's retries.
    pub fn retry_budget(mut self, budget: RetryBudgetSettings) -> Self {
        self.retry_budget = Some(Some(budget));
        self
    }

    /// Removes the retry budget: retries are not capped.
    pub fn reset_retry_budget(mut self) -> Self {
        self.retry_budget = Some(None);
        self
    }

    pub fn format(mut self, format: EnvelopeFormat) -> Self {
        self.format = Some(format);
        self
    }
}

/// A secret rotation: the new secret (made by the server if not given) and how long the old
/// one still signs deliveries beside it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RotateSecret {
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    overlap: Option<u64>,
}

impl RotateSecret {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    pub fn overlap(mut self, overlap: Duration) -> Self {
        self.overlap = Some(duration_ms(overlap));
        self
    }
}

/// How a dead delivery (or a subscription's dead deliveries) run again.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayDeliveries {
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reset_attempts: Option<bool>,
}

impl ReplayDeliveries {
    pub fn new() -> Self {
        Self::default()
    }

    /// Only deliveries that died at or after this time (a subscription's replay).
    pub fn since(mut self, since: SystemTime) -> Self {
        self.since = Some(unix_ms(since));
        self
    }

    pub fn policy(mut self, policy: Value) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Start the retries again from 1 (the server's default: yes).
    pub fn reset_attempts(mut self, reset: bool) -> Self {
        self.reset_attempts = Some(reset);
        self
    }

    pub(crate) fn has_since(&self) -> bool {
        self.since.is_some()
    }
}

/// Which deliveries of a subscription to list.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    status: Option<JobStatus>,
    after: Option<u64>,
    limit: Option<u32>,
}

impl DeliveryFilter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn status(mut self, status: JobStatus) -> Self {
        self.status = Some(status);
        self
    }

    pub fn after(mut self, after: u64) -> Self {
        self.after = Some(after);
        self
    }

    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if let Some(status) = self.status {
            pairs.push(("status", status.as_str().to_owned()));
        }
        if let Some(after) = self.after {
            pairs.push(("after", after.to_string()));
        }
        if let Some(limit) = self.limit {
            pairs.push(("limit", limit.to_string()));
        }
        pairs
    }
}

/// A new API token (admin only): a name, a role, and optional queue and project scopes.
#[derive(Debug, Clone, Serialize)]
pub struct NewToken {
    name: String,
    role: Role,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    queues: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    projects: Vec<String>,
}

impl NewToken {
    pub fn new(name: impl Into<String>, role: Role) -> Self {
        Self {
            name: name.into(),
            role,
            queues: Vec::new(),
            projects: Vec::new(),
        }
    }

    /// Scope the token to queues matching these patterns (`billing.*`).
    pub fn queues<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.queues = patterns.into_iter().map(Into::into).collect();
        self
    }

    /// Scope the token to these Zaqar projects (patterns too).
    pub fn projects<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.projects = patterns.into_iter().map(Into::into).collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_job_sends_only_what_was_set() {
        let job = NewJob::new("emails", "email.send");
        assert_eq!(
            serde_json::to_value(&job).expect("JSON"),
            json!({"queue": "emails", "type": "email.send", "payload": null})
        );
        let job = job
            .payload(json!({"to": 1}))
            .delay(Duration::from_millis(1500))
            .retry_limit(3)
            .traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        assert_eq!(
            serde_json::to_value(&job).expect("JSON"),
            json!({"queue": "emails", "type": "email.send", "payload": {"to": 1},
                   "delay": 1500, "retry_limit": 3,
                   "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
        );
    }

    #[test]
    fn failures_spell_their_outcome() {
        let body = |failure: &Failure| {
            serde_json::to_value(FailBody {
                lease_token: 9,
                failure,
            })
            .expect("JSON")
        };
        assert_eq!(
            body(&Failure::new("boom")),
            json!({"lease_token": 9, "error": "boom"})
        );
        assert_eq!(
            body(&Failure::new("bad").outcome(Outcome::NotRetryable)),
            json!({"lease_token": 9, "error": "bad", "retryable": false})
        );
        assert_eq!(
            body(&Failure::snooze(Duration::from_secs(2))),
            json!({"lease_token": 9, "snooze": 2000})
        );
        assert_eq!(
            body(
                &Failure::new("")
                    .outcome(Outcome::RetryIn(Duration::from_secs(90)))
                    .detail(json!({"a": 1}))
            ),
            json!({"lease_token": 9, "error": {"message": "retry in 1m 30s", "detail": {"a": 1}},
                   "retry_in": 90000})
        );
    }

    #[test]
    fn updates_tell_unset_from_reset() {
        let update = QueueUpdate::new().remove_policy().paused(true);
        assert_eq!(
            serde_json::to_value(&update).expect("JSON"),
            json!({"policy": null, "paused": true})
        );
        let settings = SubscriptionSettings::changes()
            .reset_throttle()
            .enabled(false);
        assert_eq!(
            serde_json::to_value(&settings).expect("JSON"),
            json!({"throttle_per_second": null, "enabled": false})
        );
        let budget = RetryBudgetSettings::new(20, Duration::from_secs(60)).min_retries(5);
        assert_eq!(
            serde_json::to_value(SubscriptionSettings::changes().retry_budget(budget))
                .expect("JSON"),
            json!({"retry_budget": {"percent": 20, "window": 60000, "min_retries": 5}})
        );
        assert_eq!(
            serde_json::to_value(SubscriptionSettings::changes().reset_retry_budget())
                .expect("JSON"),
            json!({"retry_budget": null})
        );
    }
}
