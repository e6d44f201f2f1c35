//! The job families routed: inserts, leases, claims, upkeep and curation.

use std::sync::Arc;

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{
    Ack, After, Attempt, Cancelled, Checked, ClaimId, Enqueued, Job, JobId, JobResult, OnDuplicate,
    Replay, Replayed, Selection,
};
use tenax_core::store::{
    Claim, ClaimRecord, ClaimStore, Decide, DeleteCheck, Extended, FactsSeen, Finished, Insert,
    JobCuration, JobInserts, JobLeases, JobUpkeep, LeaseFacts, LimitHold, QueueFacts, StoreError,
    TakeRequest, Taken, Transition,
};

use super::{Member, PooledStore, Sequence, across_pools, seen_in, seen_of};

/// Where an insert goes: its pool, and the first of its queues if this insert placed them all.
pub(crate) struct Placed {
    pub(crate) store: Arc<Member>,
    pub(crate) fresh: Option<String>,
}

impl PooledStore {
    /// The one pool every job of `jobs` goes to and every stored job they wait for is in,
    /// placing their queues there; refused when they are on different pools already.
    pub(crate) async fn pool_of_inserts(
        &self,
        jobs: &[Insert],
        more_queues: &[&str],
    ) -> Result<Placed, StoreError> {
        let mut anchor: Option<Arc<Member>> = None;
        for after in jobs.iter().flat_map(|insert| &insert.after) {
            if let After::Job(parent) = after {
                let store = self.of_job(*parent).await?;
                if anchor.as_ref().is_some_and(|a| a.number != store.number) {
                    return Err(across_pools("the jobs these jobs wait for"));
                }
                anchor = Some(store);
            }
        }
        let mut queues: Vec<&str> = jobs.iter().map(|i| i.job.queue.as_str()).collect();
        queues.extend(more_queues);
        queues.sort_unstable();
        queues.dedup();
        let (store, fresh) = self
            .place_together(
                &queues,
                anchor,
                None,
                "the queues of these jobs (or of the jobs they wait for)",
            )
            .await?;
        Ok(Placed {
            store,
            fresh: fresh
                .then(|| queues.first().map(|q| (*q).to_owned()))
                .flatten(),
        })
    }

    /// The pool's own version of `seen`, for an insert into `placed`. Facts read from another
    /// pool are old ([`StoreError::FactsChanged`]: the engine reads them again), but for
    /// queues this insert placed: read from the catalogue before they had a pool, they were
    /// empty, and so are they on their new pool up to its version now (any change of them
    /// after that is a change of that version, and refuses the insert as usual).
    pub(crate) async fn facts_for(
        &self,
        placed: &Placed,
        seen: FactsSeen,
    ) -> Result<FactsSeen, StoreError> {
        let (number, version) = seen_of(seen);
        if number == placed.store.number {
            return Ok(version);
        }
        match &placed.fresh {
            Some(queue) if number == 0 => Ok(placed.store.queue_facts(queue).await?.seen),
            _ => Err(StoreError::FactsChanged),
        }
    }

    /// `selection` split by pool: its ids by their pools, its queue to the queue's pool (none
    /// when the queue was never placed), else every pool.
    pub(crate) async fn split(
        &self,
        selection: &Selection,
    ) -> Result<Vec<(Arc<Member>, Selection)>, StoreError> {
        if let Some(ids) = &selection.ids {
            return Ok(self
                .group(ids, Sequence::Jobs, |id| id.0)
                .await?
                .into_iter()
                .map(|(store, ids)| {
                    let selection = Selection {
                        ids: Some(ids.into_iter().map(|(_, id)| id).collect()),
                        filter: selection.filter.clone(),
                    };
                    (store, selection)
                })
                .collect());
        }
        if let Some(queue) = &selection.filter.queue {
            return Ok(self
                .placed(queue)
                .await?
                .map(|store| (store, selection.clone()))
                .into_iter()
                .collect());
        }
        Ok(self
            .pools()
            .await
            .all()?
            .into_iter()
            .map(|s| (s, selection.clone()))
            .collect())
    }

    /// `queues` by pool (the queues never placed left out), in this take's turn.
    async fn queues_in_turn(
        &self,
        queues: &[String],
    ) -> Result<Vec<(Arc<Member>, Vec<String>)>, StoreError> {
        let mut by_pool: Vec<(Arc<Member>, Vec<String>)> = Vec::new();
        for store in self.in_turn().await {
            by_pool.push((store, Vec::new()));
        }
        for queue in queues {
            if let Some(store) = self.placed(queue).await? {
                if let Some((_, mine)) = by_pool.iter_mut().find(|(s, _)| s.number == store.number)
                {
                    mine.push(queue.clone());
                }
            }
        }
        by_pool.retain(|(_, queues)| !queues.is_empty());
        Ok(by_pool)
    }

    /// The pool holding claim `id` (its record or its jobs), if any does.
    async fn holder_of_claim(&self, id: ClaimId) -> Result<Option<Arc<Member>>, StoreError> {
        let claims = self
            .pools()
            .await
            .each_reachable("looking for a claim", |store| async move {
                Ok((store.clone(), store.claim(id).await?))
            })
            .await?;
        Ok(claims
            .into_iter()
            .find(|(_, claim)| claim.record.is_some() || !claim.jobs.is_empty())
            .map(|(store, _)| store))
    }
}

#[async_trait]
impl JobInserts for PooledStore {
    async fn queue_facts(&self, queue: &str) -> Result<Arc<QueueFacts>, StoreError> {
        // Read where the queue is, without placing it: its insert places it (with the jobs
        // it waits for, say), and refuses facts read elsewhere, which the engine then reads
        // again from there.
        let store = self.read_pool(queue).await?;
        let facts = store.queue_facts(queue).await?;
        Ok(Arc::new(QueueFacts {
            seen: seen_in(store.number, facts.seen),
            ..(*facts).clone()
        }))
    }

    async fn insert_jobs(
        &self,
        jobs: Vec<Insert>,
        on_duplicate: OnDuplicate,
        seen: FactsSeen,
        now_ms: UnixMs,
    ) -> Result<Vec<Option<Enqueued>>, StoreError> {
        let placed = self.pool_of_inserts(&jobs, &[]).await?;
        let seen = self.facts_for(&placed, seen).await?;
        placed
            .store
            .insert_jobs(jobs, on_duplicate, seen, now_ms)
            .await
    }
}

#[async_trait]
impl JobLeases for PooledStore {
    /// Each pool's queues in turn, until `max` are taken. A pool that cannot be reached is
    /// passed over (its queues are unavailable, the others' are served); when none answers,
    /// the first failure is the answer.
    async fn take_jobs(
        &self,
        request: &TakeRequest<'_>,
        now_ms: UnixMs,
    ) -> Result<Taken, StoreError> {
        let mut taken = Taken {
            jobs: Vec::new(),
            held: LimitHold::default(),
        };
        let mut failure = None;
        let mut answered = false;
        for (store, queues) in self.queues_in_turn(request.queues).await? {
            let left = request.max.saturating_sub(taken.jobs.len());
            if left == 0 {
                break;
            }
            let part = TakeRequest {
                queues: &queues,
                max: left,
                record: request.record.clone(),
                ..*request
            };
            match store.take_jobs(&part, now_ms).await {
                Ok(more) => {
                    answered = true;
                    taken.jobs.extend(more.jobs);
                    taken.held = taken.held.and(more.held);
                }
                Err(error @ StoreError::Unavailable(_)) => {
                    tracing::warn!(%error, "a pool is unavailable: its queues are passed over");
                    failure.get_or_insert(error);
                }
                Err(error) => return Err(error),
            }
        }
        match failure {
            Some(error) if !answered => Err(error),
            _ => Ok(taken),
        }
    }

    async fn extend_lease(
        &self,
        ack: Ack,
        lease_ms: u64,
        max_attempt_ms: u64,
        now_ms: UnixMs,
    ) -> Result<Extended, StoreError> {
        self.of_job(ack.id)
            .await?
            .extend_lease(ack, lease_ms, max_attempt_ms, now_ms)
            .await
    }

    async fn complete_jobs(
        &self,
        acks: &[Ack],
        results: &[Option<JobResult>],
        retain: bool,
        now_ms: UnixMs,
    ) -> Result<Vec<Result<Option<LeaseFacts>, StoreError>>, StoreError> {
        let mut answers: Vec<Option<Result<Option<LeaseFacts>, StoreError>>> =
            (0..acks.len()).map(|_| None).collect();
        for (store, mine) in self.group(acks, Sequence::Jobs, |ack| ack.id.0).await? {
            let part: Vec<Ack> = mine.iter().map(|(_, ack)| *ack).collect();
            let part_results: Vec<Option<JobResult>> = if results.is_empty() {
                Vec::new()
            } else {
                mine.iter().map(|(at, _)| results[*at].clone()).collect()
            };
            let done = store
                .complete_jobs(&part, &part_results, retain, now_ms)
                .await?;
            for ((at, _), answer) in mine.into_iter().zip(done) {
                answers[at] = Some(answer);
            }
        }
        Ok(answers.into_iter().map(|a| a.unwrap_or(Ok(None))).collect())
    }

    async fn fail_job(
        &self,
        ack: Ack,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Transition, StoreError> {
        self.of_job(ack.id)
            .await?
            .fail_job(ack, now_ms, decide)
            .await
    }

    async fn finish_delivery(
        &self,
        ack: Ack,
        attempt: &Attempt,
        retain: bool,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<Finished, StoreError> {
        self.of_job(ack.id)
            .await?
            .finish_delivery(ack, attempt, retain, now_ms, decide)
            .await
    }

    async fn pop_jobs(
        &self,
        queues: &[String],
        max: usize,
        now_ms: UnixMs,
    ) -> Result<Vec<Job>, StoreError> {
        let mut popped = Vec::new();
        for (store, mine) in self.queues_in_turn(queues).await? {
            let left = max.saturating_sub(popped.len());
            if left == 0 {
                break;
            }
            popped.extend(store.pop_jobs(&mine, left, now_ms).await?);
        }
        Ok(popped)
    }
}

#[async_trait]
impl ClaimStore for PooledStore {
    async fn claim(&self, id: ClaimId) -> Result<Claim, StoreError> {
        let claims = self
            .pools()
            .await
            .each_reachable("reading a claim", |store| store.claim(id))
            .await?;
        let mut merged = Claim {
            record: None,
            jobs: Vec::new(),
        };
        for claim in claims {
            merged.record = merged.record.or(claim.record);
            merged.jobs.extend(claim.jobs);
        }
        merged.jobs.sort_by_key(|j| j.id);
        Ok(merged)
    }

    async fn extend_claim(
        &self,
        id: ClaimId,
        lease_ms: u64,
        keep_until_ms: Option<UnixMs>,
        record: Option<ClaimRecord>,
        now_ms: UnixMs,
    ) -> Result<usize, StoreError> {
        // Only where the claim is: a record written elsewhere would be a claim of nothing.
        match self.holder_of_claim(id).await? {
            Some(store) => {
                store
                    .extend_claim(id, lease_ms, keep_until_ms, record, now_ms)
                    .await
            }
            None => Ok(0),
        }
    }

    async fn end_claim(
        &self,
        id: ClaimId,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        match self.holder_of_claim(id).await? {
            Some(store) => store.end_claim(id, now_ms, decide).await,
            None => Ok(0),
        }
    }

    async fn release_claim(&self, id: ClaimId) -> Result<usize, StoreError> {
        match self.holder_of_claim(id).await? {
            Some(store) => store.release_claim(id).await,
            None => Ok(0),
        }
    }
}

#[async_trait]
impl JobUpkeep for PooledStore {
    async fn promote_due(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let promoted = self
            .pools()
            .await
            .each_reachable("promoting due jobs", |s| s.promote_due(now_ms, max))
            .await?;
        Ok(promoted.into_iter().sum())
    }

    async fn expire_leases(
        &self,
        now_ms: UnixMs,
        max: usize,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let expired = self
            .pools()
            .await
            .each_reachable("expiring leases", |s| s.expire_leases(now_ms, max, decide))
            .await?;
        Ok(expired.into_iter().sum())
    }

    async fn expire_leases_of(
        &self,
        queue: &str,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        match self.placed(queue).await? {
            Some(store) => store.expire_leases_of(queue, now_ms, decide).await,
            None => Ok(0),
        }
    }

    async fn expire_jobs(&self, now_ms: UnixMs, max: usize) -> Result<usize, StoreError> {
        let expired = self
            .pools()
            .await
            .each_reachable("deleting expired jobs", |s| s.expire_jobs(now_ms, max))
            .await?;
        Ok(expired.into_iter().sum())
    }

    async fn purge_finished(
        &self,
        completed_before: UnixMs,
        dead_before: UnixMs,
        max: usize,
    ) -> Result<usize, StoreError> {
        let purged = self
            .pools()
            .await
            .each_reachable("purging finished jobs", |s| {
                s.purge_finished(completed_before, dead_before, max)
            })
            .await?;
        Ok(purged.into_iter().sum())
    }

    async fn next_wakeup(&self) -> Result<Option<UnixMs>, StoreError> {
        let wakeups = self
            .pools()
            .await
            .each_reachable("finding the next due time", |s| s.next_wakeup())
            .await?;
        Ok(wakeups.into_iter().flatten().min())
    }
}

#[async_trait]
impl JobCuration for PooledStore {
    async fn replay_jobs(&self, replay: &Replay, now_ms: UnixMs) -> Result<Replayed, StoreError> {
        let mut replayed = Replayed {
            ids: Vec::new(),
            skipped: Vec::new(),
        };
        for (store, selection) in self.split(&replay.selection).await? {
            let part = Replay {
                selection,
                ..replay.clone()
            };
            let more = store.replay_jobs(&part, now_ms).await?;
            replayed.ids.extend(more.ids);
            replayed.skipped.extend(more.skipped);
        }
        replayed.ids.sort();
        replayed.skipped.sort_by_key(|(id, _)| *id);
        Ok(replayed)
    }

    async fn run_now(&self, ids: &[JobId], now_ms: UnixMs) -> Result<Vec<JobId>, StoreError> {
        let mut ran = Vec::new();
        for (store, mine) in self.group(ids, Sequence::Jobs, |id| id.0).await? {
            let mine: Vec<JobId> = mine.into_iter().map(|(_, id)| id).collect();
            ran.extend(store.run_now(&mine, now_ms).await?);
        }
        ran.sort();
        Ok(ran)
    }

    async fn cancel_jobs(
        &self,
        selection: &Selection,
        reason: &str,
        now_ms: UnixMs,
    ) -> Result<Cancelled, StoreError> {
        let mut cancelled = Cancelled::default();
        for (store, part) in self.split(selection).await? {
            let more = store.cancel_jobs(&part, reason, now_ms).await?;
            cancelled.cancelled.extend(more.cancelled);
            cancelled.marked.extend(more.marked);
        }
        cancelled.cancelled.sort();
        cancelled.marked.sort();
        Ok(cancelled)
    }

    async fn delete_jobs(
        &self,
        selection: &Selection,
        now_ms: UnixMs,
    ) -> Result<Vec<JobId>, StoreError> {
        let mut deleted = Vec::new();
        for (store, part) in self.split(selection).await? {
            deleted.extend(store.delete_jobs(&part, now_ms).await?);
        }
        deleted.sort();
        Ok(deleted)
    }

    async fn delete_checked(
        &self,
        ids: &[JobId],
        check: &DeleteCheck<'_>,
        now_ms: UnixMs,
    ) -> Result<Vec<Checked>, StoreError> {
        let mut answers: Vec<Option<Checked>> = (0..ids.len()).map(|_| None).collect();
        for (store, mine) in self.group(ids, Sequence::Jobs, |id| id.0).await? {
            let part: Vec<JobId> = mine.iter().map(|(_, id)| *id).collect();
            let checked = store.delete_checked(&part, check, now_ms).await?;
            for ((at, _), answer) in mine.into_iter().zip(checked) {
                answers[at] = Some(answer);
            }
        }
        Ok(answers
            .into_iter()
            .zip(ids)
            .map(|(answer, id)| {
                answer.unwrap_or(Checked {
                    id: *id,
                    peek: None,
                    deleted: false,
                })
            })
            .collect())
    }
}
