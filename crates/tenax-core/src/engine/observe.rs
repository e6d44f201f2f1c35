//! The one place where the engine reports what its operations did. Each operation that changes
//! jobs reports its transitions once, here, and this feeds everything that watches them:
//!
//! - the metrics: jobs enqueued, taken (their wait), completed, failed, retried, snoozed, dead,
//!   and leases expired, by queue and type ([`crate::metrics::jobs`]); webhook attempts by
//!   subscription, and deliveries held back without an attempt ([`crate::metrics::webhooks`]);
//! - the dashboard's activity per minute ([`super::activity`]);
//! - the spans, when tracing is on ([`crate::otel`]);
//! - the log: a job or a delivery that dies, at warn.
//!
//! Handlers and runners report nothing themselves.
//!
//! What a lease was (the job's queue, type, creation, take and trace) comes from the store when
//! it reports it ([`LeaseFacts`]: a shared store must), else from this server's books of the
//! leases it handed out ([`crate::metrics::leases`], and [`crate::otel::book`] while tracing),
//! which are exact for a store of this process alone. Internal queues (webhook deliveries) are
//! counted by the webhook metrics instead, and their spans are their attempts'.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanContext;

use super::Engine;
use super::activity::Event;
use crate::clock::UnixMs;
use crate::metrics::histogram::Tally;
use crate::metrics::jobs::{JobSeries, LastSeries};
use crate::metrics::leases::Held;
use crate::metrics::webhooks::HeldReason;
use crate::model::subscription::{is_internal_queue, subscription_of_queue};
use crate::model::{
    Ack, Attempt, Enqueued, JobId, LeaseToken, NewJob, Status, Subscription, SubscriptionId,
    TakenJob,
};
use crate::otel::book::Traced;
use crate::otel::jobs::{JobSpan, Operation};
use crate::otel::{Tracing, parse_traceparent};
use crate::store::{DecideContext, Finished, LeaseFacts, StoreError, Transition};

/// What the metrics need of a lease that ended.
struct Ended {
    series: Arc<JobSeries>,
    created_at_ms: UnixMs,
    taken_at_ms: UnixMs,
}

/// The completions of one run of jobs of one series, added to it when the run ends: one
/// atomic addition per counter and bucket for the run rather than several per job.
struct Completions {
    series: Arc<JobSeries>,
    completed: u64,
    running: Tally,
    end_to_end: Tally,
}

impl Completions {
    fn new(series: Arc<JobSeries>) -> Self {
        let running = Tally::new(&series.running);
        let end_to_end = Tally::new(&series.end_to_end);
        Self {
            series,
            completed: 0,
            running,
            end_to_end,
        }
    }
}

impl Drop for Completions {
    fn drop(&mut self) {
        self.series.completed.inc_by(self.completed);
    }
}

/// A message's queue, type and trace context, for its span.
type Message = (String, String, Option<SpanContext>);

/// What an enqueue reports, gathered as its messages are made: their series by runs of one
/// queue and type and, while tracing, what their spans need.
pub(super) struct Enqueueing {
    runs: Vec<(Arc<JobSeries>, usize)>,
    last: LastSeries,
    /// When the enqueue began, and each message's queue, type and trace context.
    traced: Option<(SystemTime, Vec<Message>)>,
}

impl Enqueueing {
    pub fn new(engine: &Engine) -> Self {
        Self {
            runs: Vec::new(),
            last: LastSeries::default(),
            traced: engine
                .tracing
                .as_ref()
                .map(|_| (SystemTime::now(), Vec::new())),
        }
    }

    /// The next message of the enqueue.
    pub fn message(&mut self, engine: &Engine, job: &NewJob) {
        let this = self.last.get(&engine.metrics.jobs, &job.queue, &job.kind);
        match self.runs.last_mut() {
            Some((run, n)) if Arc::ptr_eq(run, this) => *n += 1,
            _ => self.runs.push((this.clone(), 1)),
        }
        if let Some((_, traced)) = &mut self.traced {
            let context = job.traceparent.as_deref().and_then(parse_traceparent);
            traced.push((job.queue.clone(), job.kind.clone(), context));
        }
    }
}

/// When an operation began, for its spans: `None` while tracing is off.
pub(super) fn began(engine: &Engine) -> Option<SystemTime> {
    engine.tracing.as_ref().map(|_| SystemTime::now())
}

/// The wall-clock time of `at_ms`.
fn wall(at_ms: UnixMs) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(at_ms)
}

impl Engine {
    /// Messages were enqueued: one result per message, in order.
    pub(super) fn observe_enqueued(
        &self,
        seen: Enqueueing,
        results: &[Option<Enqueued>],
        now_ms: UnixMs,
    ) {
        let mut outcomes = results.iter();
        for (series, n) in seen.runs {
            let n = outcomes
                .by_ref()
                .take(n)
                .filter(|r| r.as_ref().is_some_and(|e| e.created))
                .count();
            series.enqueued.inc_by(n as u64);
        }
        let created = results.iter().flatten().filter(|e| e.created).count();
        self.activity
            .record(Event::Enqueued(created as u64), now_ms);
        if let (Some(tracing), Some((began, traced))) = (&self.tracing, seen.traced) {
            let ended = SystemTime::now();
            for (result, (queue, kind, trace)) in results.iter().zip(traced) {
                let Some(enqueued) = result else { continue };
                let span = JobSpan {
                    operation: Operation::Enqueue,
                    id: enqueued.id,
                    queue: &queue,
                    trace,
                    attributes: vec![
                        KeyValue::new("tenax.job.type", kind),
                        KeyValue::new("tenax.job.created", enqueued.created),
                        KeyValue::new("tenax.job.status", enqueued.status.name()),
                    ],
                    error: None,
                };
                tracing.job_span(span, began, ended);
            }
        }
    }

    /// Jobs were just taken at `now_ms`: their wait since ready, and their leases.
    pub(super) fn observe_taken(
        &self,
        jobs: &[TakenJob],
        now_ms: UnixMs,
        began: Option<SystemTime>,
    ) {
        if jobs.is_empty() {
            return;
        }
        let book = !self.store.properties().shared;
        let mut last = LastSeries::default();
        // The waits of the current run of one series.
        let mut waits: Option<(u32, Tally)> = None;
        for job in jobs {
            if is_internal_queue(&job.queue) {
                continue;
            }
            let series = last.get(&self.metrics.jobs, &job.queue, &job.kind);
            let tally = match &mut waits {
                Some((index, tally)) if *index == series.index => tally,
                _ => &mut waits.insert((series.index, Tally::new(&series.waiting))).1,
            };
            tally.observe_ms(now_ms.saturating_sub(job.ready_at_ms));
            if book {
                self.metrics.leases.hold(
                    job.id,
                    Held {
                        series: series.index,
                        token: job.lease_token,
                        created_at_ms: job.created_at_ms,
                        taken_at_ms: now_ms,
                    },
                );
            }
        }
        if let Some(tracing) = &self.tracing {
            self.trace_taken(tracing, jobs, book, now_ms, began);
        }
    }

    fn trace_taken(
        &self,
        tracing: &Tracing,
        jobs: &[TakenJob],
        book: bool,
        now_ms: UnixMs,
        began: Option<SystemTime>,
    ) {
        let ended = SystemTime::now();
        for job in jobs.iter().filter(|j| !is_internal_queue(&j.queue)) {
            let context = job.traceparent.as_deref().and_then(parse_traceparent);
            let span = JobSpan {
                operation: Operation::Take,
                id: job.id,
                queue: &job.queue,
                trace: context.clone(),
                attributes: vec![
                    KeyValue::new("tenax.job.type", job.kind.clone()),
                    KeyValue::new("tenax.attempt", i64::from(job.attempt)),
                    KeyValue::new(
                        "tenax.wait_ms",
                        i64::try_from(now_ms.saturating_sub(job.ready_at_ms)).unwrap_or(i64::MAX),
                    ),
                ],
                error: None,
            };
            tracing.job_span(span, began.unwrap_or(ended), ended);
            if book {
                tracing.book.hold(
                    job.id,
                    Traced {
                        token: job.lease_token,
                        queue: job.queue.clone(),
                        kind: job.kind.clone(),
                        context,
                        taken_at_ms: now_ms,
                    },
                );
            }
        }
    }

    /// What is known of the lease of `id` that just ended: the store's facts, else the book's.
    /// `last` caches the series last resolved.
    fn ended(
        &self,
        id: JobId,
        token: Option<LeaseToken>,
        facts: Option<&LeaseFacts>,
        last: &mut Option<Arc<JobSeries>>,
    ) -> Option<Ended> {
        let held = self.metrics.leases.end(id, token);
        if let Some(facts) = facts {
            if is_internal_queue(&facts.queue) {
                return None;
            }
            return Some(Ended {
                series: self.metrics.jobs.series(&facts.queue, &facts.kind),
                created_at_ms: facts.created_at_ms,
                taken_at_ms: facts.taken_at_ms,
            });
        }
        let held = held?;
        let series = match last.as_ref() {
            Some(series) if series.index == held.series => series.clone(),
            _ => {
                let series = self.metrics.jobs.by_index(held.series)?;
                last.insert(series).clone()
            }
        };
        Some(Ended {
            series,
            created_at_ms: held.created_at_ms,
            taken_at_ms: held.taken_at_ms,
        })
    }

    /// What a span of the end of the lease of `id` needs: from the store's facts, else from the
    /// trace book.
    fn traced_end(
        tracing: &Tracing,
        id: JobId,
        token: Option<LeaseToken>,
        facts: Option<&LeaseFacts>,
    ) -> Option<Traced> {
        let held = tracing.book.end(id, token);
        match facts {
            Some(facts) => Some(Traced {
                token: token.unwrap_or(LeaseToken(0)),
                queue: facts.queue.clone(),
                kind: facts.kind.clone(),
                context: facts.traceparent.as_deref().and_then(parse_traceparent),
                taken_at_ms: facts.taken_at_ms,
            }),
            None => held,
        }
    }

    /// Completions: one result per ack.
    pub(super) fn observe_completed(
        &self,
        acks: &[Ack],
        results: &[Result<Option<LeaseFacts>, StoreError>],
        now_ms: UnixMs,
        began: Option<SystemTime>,
    ) {
        let mut last = None;
        let mut run: Option<Completions> = None;
        let mut done = 0;
        for (ack, result) in acks.iter().zip(results) {
            let Ok(facts) = result else { continue };
            done += 1;
            let Some(ended) = self.ended(ack.id, Some(ack.lease), facts.as_ref(), &mut last) else {
                continue;
            };
            let completions = match &mut run {
                Some(run) if Arc::ptr_eq(&run.series, &ended.series) => run,
                _ => run.insert(Completions::new(ended.series)),
            };
            completions.completed += 1;
            completions
                .running
                .observe_ms(now_ms.saturating_sub(ended.taken_at_ms));
            completions
                .end_to_end
                .observe_ms(now_ms.saturating_sub(ended.created_at_ms));
        }
        drop(run);
        self.activity.record(Event::Completed(done), now_ms);
        let Some(tracing) = &self.tracing else { return };
        let ended = SystemTime::now();
        for (ack, result) in acks.iter().zip(results) {
            let Ok(facts) = result else { continue };
            let Some(traced) = Self::traced_end(tracing, ack.id, Some(ack.lease), facts.as_ref())
            else {
                continue;
            };
            let span = JobSpan {
                operation: Operation::Complete,
                id: ack.id,
                queue: &traced.queue,
                trace: traced.context,
                attributes: vec![
                    KeyValue::new("tenax.job.type", traced.kind),
                    KeyValue::new("tenax.run_ms", run_ms(now_ms, traced.taken_at_ms)),
                ],
                error: None,
            };
            tracing.job_span(span, began.unwrap_or(ended), ended);
        }
    }

    /// A failure a worker reported (`expired` false) or a lease that expired, and what the
    /// job's policy made of it.
    pub(super) fn observe_failure(
        &self,
        failed: &Failed,
        transition: &Transition,
        expired: bool,
        now_ms: UnixMs,
        began: Option<SystemTime>,
    ) {
        if let Some(tracing) = &self.tracing {
            self.trace_failure(tracing, failed, transition, expired, now_ms, began);
        }
        let ended = self.ended(failed.id, failed.token, failed.lease.as_ref(), &mut None);
        let dead = transition.state.status == Status::Dead;
        let cancelled = transition.state.status == Status::Cancelled;
        let reason = transition.state.dead_reason.as_deref().unwrap_or("");
        match subscription_of_queue(&failed.queue) {
            // A delivery: its attempts are the webhook metrics' (a lease that expired is not one).
            Some(subscription) => {
                if cancelled {
                    tracing::info!(
                        delivery = failed.id.0,
                        subscription = subscription.0,
                        "delivery cancelled"
                    );
                }
                if dead {
                    self.metrics.webhooks.series(subscription).dead.inc();
                    self.activity.record(Event::Died, now_ms);
                    tracing::warn!(
                        delivery = failed.id.0,
                        subscription = subscription.0,
                        failures = transition.state.failures,
                        reason,
                        "delivery dead"
                    );
                }
                return;
            }
            None if dead => tracing::warn!(
                job = failed.id.0,
                queue = %failed.queue,
                failures = transition.state.failures,
                reason,
                "job dead"
            ),
            None if cancelled => tracing::info!(
                job = failed.id.0,
                queue = %failed.queue,
                reason,
                "job cancelled"
            ),
            None => {}
        }
        // A failure records an error; a snooze does not (it is not an attempt that failed, and
        // its run is not over).
        let snoozed = transition.error.is_none() && !expired;
        if !snoozed {
            self.activity.record(Event::Failed { dead }, now_ms);
        }
        let Some(ended) = ended else { return };
        let series = &ended.series;
        if snoozed {
            series.snoozed.inc();
            return;
        }
        if !expired {
            series
                .running
                .observe_ms(now_ms.saturating_sub(ended.taken_at_ms));
        }
        series.failed.inc();
        if expired {
            series.lease_expired.inc();
        }
        if dead {
            series.dead.inc();
        } else if cancelled {
            series.cancelled.inc();
        } else if transition.moved_to.is_none() {
            series.retried.inc();
        }
    }

    fn trace_failure(
        &self,
        tracing: &Tracing,
        failed: &Failed,
        transition: &Transition,
        expired: bool,
        now_ms: UnixMs,
        began: Option<SystemTime>,
    ) {
        if is_internal_queue(&failed.queue) {
            tracing.book.end(failed.id, failed.token);
            return;
        }
        let Some(traced) =
            Self::traced_end(tracing, failed.id, failed.token, failed.lease.as_ref())
        else {
            return;
        };
        let state = &transition.state;
        let mut attributes = vec![
            KeyValue::new("tenax.job.type", traced.kind),
            KeyValue::new("tenax.job.status", state.status.name()),
            KeyValue::new("tenax.failures", i64::from(state.failures)),
        ];
        if !expired {
            attributes.push(KeyValue::new(
                "tenax.run_ms",
                run_ms(now_ms, traced.taken_at_ms),
            ));
        }
        if let Some(moved) = &transition.moved_to {
            attributes.push(KeyValue::new("tenax.moved_to", moved.queue.clone()));
        }
        let error = match (&transition.error, &state.dead_reason) {
            (_, Some(reason)) => Some(format!("dead: {reason}")),
            (Some(error), None) => Some(error.message.clone()),
            (None, None) if expired => Some("the lease expired".to_owned()),
            // A snooze: no error.
            (None, None) => None,
        };
        let span = JobSpan {
            operation: if expired {
                Operation::Expire
            } else {
                Operation::Fail
            },
            id: failed.id,
            queue: &traced.queue,
            trace: traced.context,
            attributes,
            error,
        };
        let ended = SystemTime::now();
        tracing.job_span(span, began.unwrap_or(ended), ended);
    }

    /// A webhook delivery attempt of `subscription` ended (`attempt`), and what came of it.
    /// `traceparent` is the delivery's.
    pub(super) fn observe_delivery(
        &self,
        subscription: &Subscription,
        ack: Ack,
        attempt: &Attempt,
        traceparent: Option<&str>,
        finished: &Finished,
        now_ms: UnixMs,
    ) {
        let series = self.metrics.webhooks.series(subscription.id);
        series.attempted(attempt);
        let event = match finished {
            Finished::Delivered => Event::Delivered,
            Finished::Failed(transition) => {
                let dead = transition.state.status == Status::Dead;
                if dead {
                    series.dead.inc();
                    tracing::warn!(
                        delivery = ack.id.0,
                        subscription = subscription.id.0,
                        attempts = attempt.attempt,
                        reason = transition.state.dead_reason.as_deref().unwrap_or(""),
                        "delivery dead"
                    );
                } else {
                    series.retried.inc();
                }
                Event::DeliveryFailed { dead }
            }
        };
        self.activity.record(event, now_ms);
        if let Some(tracing) = &self.tracing {
            trace_delivery(tracing, subscription, ack, attempt, traceparent, finished);
        }
    }
}

impl Engine {
    /// A delivery was held back without an attempt (its endpoint asked to wait, or its circuit
    /// is open): counted by the webhook metrics only, as it is no attempt and no failure.
    pub(super) fn observe_held(&self, subscription: SubscriptionId, reason: HeldReason) {
        self.metrics.webhooks.series(subscription).held(reason);
    }
}

fn trace_delivery(
    tracing: &Tracing,
    subscription: &Subscription,
    ack: Ack,
    attempt: &Attempt,
    traceparent: Option<&str>,
    finished: &Finished,
) {
    let mut attributes = vec![
        KeyValue::new("http.request.method", "POST"),
        KeyValue::new("tenax.subscription", subscription.id.0.to_string()),
        KeyValue::new("tenax.attempt", i64::from(attempt.attempt)),
        KeyValue::new("tenax.trigger", attempt.trigger.name()),
    ];
    if let Some(host) = url::Url::parse(&subscription.endpoint)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
    {
        attributes.push(KeyValue::new("server.address", host));
    }
    if let Some(status) = attempt.status {
        attributes.push(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
    }
    let error = match finished {
        Finished::Delivered => None,
        Finished::Failed(transition) => Some(match &transition.state.dead_reason {
            Some(reason) => format!("dead: {reason}"),
            None => attempt
                .error
                .clone()
                .or_else(|| attempt.status.map(|s| format!("HTTP {s}")))
                .unwrap_or_else(|| "failed".to_owned()),
        }),
    };
    let span = JobSpan {
        operation: Operation::Deliver,
        id: ack.id,
        queue: &subscription.queue,
        trace: traceparent.and_then(parse_traceparent),
        attributes,
        error,
    };
    let began = wall(attempt.at_ms);
    tracing.job_span(
        span,
        began,
        began + Duration::from_millis(attempt.latency_ms),
    );
}

/// A run's time so far, for a span's attribute.
fn run_ms(now_ms: UnixMs, taken_at_ms: UnixMs) -> i64 {
    i64::try_from(now_ms.saturating_sub(taken_at_ms)).unwrap_or(i64::MAX)
}

/// Leases ended as if expired (by the maintenance loop, or a claim ended), with what their
/// decisions made of them, reported once the store has applied them.
#[derive(Debug)]
pub(super) struct Expiries {
    decided: parking_lot::Mutex<Vec<(Failed, Transition)>>,
    began: Option<SystemTime>,
}

impl Expiries {
    pub fn new(engine: &Engine) -> Self {
        Self {
            decided: parking_lot::Mutex::default(),
            began: began(engine),
        }
    }

    /// The decision for a lease that expired at `now_ms`, kept to be reported.
    pub fn decide(&self, engine: &Engine, ctx: &DecideContext<'_>, now_ms: UnixMs) -> Transition {
        let transition =
            super::decide_lease_expiry(ctx, engine.default_policy_for(ctx.queue), now_ms);
        self.decided
            .lock()
            .push((Failed::of(ctx, None), transition.clone()));
        transition
    }

    /// Reports what was applied. A backend may have asked about a job more than once: its last
    /// decision counts.
    pub fn report(self, engine: &Engine, now_ms: UnixMs) {
        let decided = self.decided.into_inner();
        let mut seen = std::collections::HashSet::new();
        for (failed, transition) in decided.iter().rev() {
            if seen.insert(failed.id) {
                engine.observe_failure(failed, transition, true, now_ms, self.began);
            }
        }
    }
}

/// A lease that ended in a failure, as its decision saw it.
#[derive(Debug, Clone)]
pub(super) struct Failed {
    pub id: JobId,
    /// The lease's token, when the worker named it.
    pub token: Option<LeaseToken>,
    pub queue: String,
    pub lease: Option<LeaseFacts>,
}

impl Failed {
    pub fn of(ctx: &DecideContext<'_>, token: Option<LeaseToken>) -> Self {
        Self {
            id: ctx.id,
            token,
            queue: ctx.queue.to_owned(),
            lease: ctx.lease.clone(),
        }
    }
}
