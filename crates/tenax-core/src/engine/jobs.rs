//! Jobs: enqueue (with the fan-out to subscriptions), reads, deletes and replays.

use std::sync::Arc;
use std::time::Duration;

use super::Engine;
use super::observe::Enqueueing;
use crate::clock::UnixMs;
use crate::engine::EngineError;
use crate::model::subscription::{DELIVERY_KIND, delivery_queue};
use crate::model::{
    After, CANCELLED_BY_REQUEST, Cancelled, Checked, DeliveryPayload, Enqueued, Job, JobFilter,
    JobId, JobPeek, NewJob, OnDuplicate, Page, QueueCounts, Replay, Replayed, Searched, Selection,
    StoredPolicy, SubscriptionId, TextQuery,
};
use crate::store::{DeleteCheck, FactsSeen, Insert, QueueFacts, StoreError};

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct Enqueue {
    pub job: NewJob,
    /// A retry limit for a job without a policy of its own: it keeps the curve it would
    /// otherwise have had (its queue's, else the server's), with this limit.
    pub retry_limit: Option<u32>,
    /// The jobs it waits for: stored ones, or earlier jobs of the same enqueue.
    pub after: Vec<After>,
}

impl From<NewJob> for Enqueue {
    fn from(job: NewJob) -> Self {
        Self {
            job,
            retry_limit: None,
            after: Vec::new(),
        }
    }
}

/// How many times an enqueue is made again when a cache's queue facts turn out old.
pub(super) const FACTS_ATTEMPTS: u32 = 8;

/// What an enqueue hands the store, and what it reports once done ([`Enqueueing`]).
pub(super) struct Inserts {
    pub inserts: Vec<Insert>,
    pub seen: FactsSeen,
    pub observed: Enqueueing,
}

impl Engine {
    /// Enqueues jobs atomically: all or none. A job without an expiry gets its queue's message
    /// TTL. Every job gets one delivery per subscription of its queue, in the same commit: a
    /// job of the subscription's internal queue whose parent is the message. One result per
    /// job, in order.
    pub async fn enqueue(
        &self,
        mut jobs: Vec<Enqueue>,
        on_duplicate: OnDuplicate,
    ) -> Result<Vec<Enqueued>, EngineError> {
        if !self.store.properties().cached_facts {
            return Ok(self.enqueue_once(jobs, on_duplicate).await?);
        }
        // Facts from a cache may turn out old: the jobs are then made again from fresh ones,
        // so each attempt but the last works on a copy.
        let mut attempt = 1;
        loop {
            let these = if attempt < FACTS_ATTEMPTS {
                jobs.clone()
            } else {
                std::mem::take(&mut jobs)
            };
            match self.enqueue_once(these, on_duplicate).await {
                Err(StoreError::FactsChanged) if attempt < FACTS_ATTEMPTS => attempt += 1,
                done => return Ok(done?),
            }
        }
    }

    async fn enqueue_once(
        &self,
        jobs: Vec<Enqueue>,
        on_duplicate: OnDuplicate,
    ) -> Result<Vec<Enqueued>, StoreError> {
        let now_ms = self.now_ms();
        let count = jobs.len();
        let made = self.inserts_of(jobs, now_ms).await?;
        let results = self
            .store
            .insert_jobs(made.inserts, on_duplicate, made.seen, now_ms)
            .await?;
        Ok(self.count_enqueued(made.observed, results, count, now_ms))
    }

    /// Reports the jobs an insert created (the first `count` of `results`, as `observed`
    /// saw them made); returns them.
    pub(super) fn count_enqueued(
        &self,
        observed: Enqueueing,
        results: Vec<Option<Enqueued>>,
        count: usize,
        now_ms: UnixMs,
    ) -> Vec<Enqueued> {
        let messages = &results[..count.min(results.len())];
        self.observe_enqueued(observed, messages, now_ms);
        results.into_iter().take(count).flatten().collect()
    }

    /// The inserts that enqueue `jobs` at `now_ms` (each job, then every job's deliveries),
    /// the oldest version of the queue facts they were made from, and what to report of them.
    pub(super) async fn inserts_of(
        &self,
        jobs: Vec<Enqueue>,
        now_ms: UnixMs,
    ) -> Result<Inserts, StoreError> {
        let count = jobs.len();
        let mut inserts: Vec<Insert> = Vec::with_capacity(count);
        let mut deliveries: Vec<Insert> = Vec::new();
        // A batch is mostly of one queue: look each queue up once per run of it.
        let mut last: Option<(String, Arc<QueueFacts>)> = None;
        let mut seen_jobs = Enqueueing::new(self);
        let mut seen: Option<FactsSeen> = None;
        for (
            index,
            Enqueue {
                mut job,
                retry_limit,
                after,
            },
        ) in jobs.into_iter().enumerate()
        {
            if last.as_ref().is_none_or(|(name, _)| *name != job.queue) {
                let facts = self.store.queue_facts(&job.queue).await?;
                seen = Some(seen.map_or(facts.seen, |s| s.min(facts.seen)));
                last = Some((job.queue.clone(), facts));
            }
            let Some((_, facts)) = &last else {
                continue;
            };
            seen_jobs.message(self, &job);
            let config = facts.config.as_ref();
            if job.expires_at_ms.is_none() {
                let ttl = config.and_then(|c| c.message_ttl_ms);
                job.expires_at_ms = ttl.map(|ttl| now_ms.saturating_add(ttl));
            }
            if let (None, Some(limit)) = (&job.policy, retry_limit) {
                let base = config
                    .and_then(|c| c.policy.as_ref())
                    .map_or(self.default_policy_for(&job.queue), |p| p.policy());
                job.policy = Some(StoredPolicy::new((**base).clone().with_retry_limit(limit)));
            }
            // An encrypted queue's message and its deliveries (which carry its body) are
            // sealed before the store sees them.
            let seal = config.is_some_and(|c| c.encrypt_payloads);
            // Deliveries come after every message, so that the first `count` results are the
            // messages' and a parent always precedes its children.
            for subscription in &facts.subscribers {
                let mut delivery = delivery_of(*subscription, &job);
                if seal {
                    self.seal_payload(&mut delivery)?;
                }
                deliveries.push(Insert {
                    job: delivery,
                    parent: Some(index),
                    owner: Some(*subscription),
                    after: Vec::new(),
                });
            }
            if seal {
                self.seal_payload(&mut job)?;
            }
            inserts.push(Insert {
                after,
                ..Insert::new(job)
            });
        }
        inserts.append(&mut deliveries);
        Ok(Inserts {
            inserts,
            seen: seen.unwrap_or_default(),
            observed: seen_jobs,
        })
    }

    pub async fn job(&self, id: JobId) -> Result<Option<Job>, EngineError> {
        let job = self.store.get_job(id).await?;
        Ok(job.map(|job| self.opened_job(job)).transpose()?)
    }

    /// Job `id` once it has finished (completed or dead), or as it is when `wait` has passed,
    /// or the server stops, first; `None` once there is no such job (never was, or deleted).
    ///
    /// No polling: every way a job can finish leaves flight or fires on the way there (a
    /// completion, a failure, a lease's or claim's end, a deletion), and each of those fires
    /// [`Signals::released`](crate::store::Signals) on every server sharing the store. The
    /// waiter registers before it looks, so a finish in between is not missed.
    pub async fn job_when_finished(
        &self,
        id: JobId,
        wait: Duration,
    ) -> Result<Option<Job>, EngineError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let released = self.signals().released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let job = self.job(id).await?;
            let finished = job.as_ref().is_none_or(|j| j.state.status.is_finished());
            if finished || tokio::time::Instant::now() >= deadline {
                return Ok(job);
            }
            tokio::select! {
                () = released => {}
                () = tokio::time::sleep_until(deadline) => {}
                () = self.stopped() => return Ok(job),
            }
        }
    }

    /// A page of the jobs matching `filter`.
    pub async fn jobs(&self, filter: &JobFilter, page: Page) -> Result<Vec<Job>, EngineError> {
        let jobs = self.store.list_jobs(filter, page).await?;
        Ok(self.opened_jobs(jobs)?)
    }

    pub async fn count_jobs(&self, filter: &JobFilter) -> Result<u64, EngineError> {
        Ok(self.store.count_jobs(filter).await?)
    }

    /// How many jobs match `filter`, counting no further than `max`; and whether more match.
    pub async fn count_jobs_upto(
        &self,
        filter: &JobFilter,
        max: u64,
    ) -> Result<(u64, bool), EngineError> {
        Ok(self.store.count_jobs_upto(filter, max).await?)
    }

    /// For each id, a quick look at the job (its queue and state), or `None`.
    pub async fn peek(&self, ids: &[JobId]) -> Result<Vec<Option<JobPeek>>, EngineError> {
        Ok(self.store.peek_jobs(ids).await?)
    }

    /// Counts by status of every queue that has jobs.
    pub async fn counts(&self) -> Result<Vec<QueueCounts>, EngineError> {
        Ok(self.store.counts().await?)
    }

    pub async fn queue_counts(&self, queue: &str) -> Result<QueueCounts, EngineError> {
        Ok(self.store.queue_counts(queue).await?)
    }

    /// Deletes the jobs matching `selection`, whatever their state; returns their ids.
    pub async fn delete_jobs(&self, selection: &Selection) -> Result<Vec<JobId>, EngineError> {
        Ok(self.store.delete_jobs(selection, self.now_ms()).await?)
    }

    /// Deletes those of `ids` that `check` accepts, each judged and deleted atomically.
    pub async fn delete_checked(
        &self,
        ids: &[JobId],
        check: &DeleteCheck<'_>,
    ) -> Result<Vec<Checked>, EngineError> {
        Ok(self.store.delete_checked(ids, check, self.now_ms()).await?)
    }

    /// Scheduled jobs among `ids` run at once, their next run marked as an operator's. Returns
    /// those that were scheduled.
    pub async fn run_now(&self, ids: &[JobId]) -> Result<Vec<JobId>, EngineError> {
        Ok(self.store.run_now(ids, self.now_ms()).await?)
    }

    /// Jobs matching `filter` that hold `text`, looking at no more than `budget` of them from
    /// the page's cursor on (see [`crate::store::JobReads::search_jobs`]).
    pub async fn search(
        &self,
        filter: &JobFilter,
        text: &TextQuery,
        page: Page,
        budget: usize,
    ) -> Result<Searched, EngineError> {
        let mut searched = self.store.search_jobs(filter, text, page, budget).await?;
        searched.jobs = self.opened_jobs(std::mem::take(&mut searched.jobs))?;
        Ok(searched)
    }

    /// For each queue, when the job it hands out next became ready (`None`: none is ready).
    pub async fn ready_since(&self, queues: &[String]) -> Result<Vec<Option<UnixMs>>, EngineError> {
        Ok(self.store.ready_since(queues).await?)
    }

    /// Cancels the jobs matching `selection` (docs/workflows.md#cancellation): scheduled and
    /// ready ones at once, those in flight by marking their leases (their workers learn it on
    /// their next heartbeat). Finished jobs are left alone.
    pub async fn cancel(&self, selection: &Selection) -> Result<Cancelled, EngineError> {
        let now_ms = self.now_ms();
        let cancelled = self
            .store
            .cancel_jobs(selection, CANCELLED_BY_REQUEST, now_ms)
            .await?;
        if !cancelled.cancelled.is_empty() || !cancelled.marked.is_empty() {
            tracing::info!(
                cancelled = cancelled.cancelled.len(),
                marked = cancelled.marked.len(),
                "jobs cancelled"
            );
        }
        Ok(cancelled)
    }

    /// Dead (or cancelled) jobs back to ready (optionally with a new policy and a fresh
    /// count).
    pub async fn replay(&self, replay: &Replay) -> Result<Replayed, EngineError> {
        Ok(self.store.replay_jobs(replay, self.now_ms()).await?)
    }
}

/// The delivery of `message` to `subscription`: due when the message is. It outlives its
/// message: it is retried until its own policy gives up.
fn delivery_of(subscription: SubscriptionId, message: &NewJob) -> NewJob {
    let carried = DeliveryPayload {
        message_id: None,
        queue: message.queue.clone(),
        kind: message.kind.clone(),
        body: message.payload.clone(),
        ttl_s: message
            .expires_at_ms
            .map(|at| at.saturating_sub(message.created_at_ms) / 1_000),
    };
    let payload =
        serde_json::value::to_raw_value(&carried).unwrap_or_else(|_| message.payload.clone());
    NewJob {
        queue: delivery_queue(subscription),
        kind: DELIVERY_KIND.to_owned(),
        payload,
        priority: message.priority,
        run_at_ms: message.run_at_ms,
        policy: None,
        unique_key: None,
        created_at_ms: message.created_at_ms,
        expires_at_ms: None,
        origin: None,
        parent: None,
        // The delivery belongs to the message's trace: the endpoint gets its `traceparent`.
        traceparent: message.traceparent.clone(),
        payload_sealed: false,
        after: Vec::new(),
        on_parent_dead: Default::default(),
        batch: None,
    }
}
