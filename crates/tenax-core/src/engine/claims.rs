//! Claims: several jobs leased together under one id, as Zaqar's claims are. A claim is a
//! group lease with a record of its terms: its jobs are found, renewed and ended together, and
//! each still completes or expires on its own. Also the operations on messages that a claim
//! guards: deleting a message under its claim, and pop.

use super::observe::{Expiries, began};
use super::{Engine, random_id};
use crate::clock::UnixMs;
use crate::engine::EngineError;
use crate::model::{ClaimId, Job, JobId, TakenJob};
use crate::store::{ClaimRecord, DecideContext, TakeRequest};

/// A claim to make: up to `max` ready jobs of `queue`, leased for `lease_ms` and kept alive at
/// least `lease_ms + grace_ms`.
#[derive(Debug, Clone, Copy)]
pub struct NewClaim<'a> {
    pub queue: &'a str,
    pub max: usize,
    pub lease_ms: u64,
    pub grace_ms: u64,
}

/// A live claim: its record, and the live jobs it holds, in id order.
#[derive(Debug, Clone)]
pub struct ClaimView {
    pub id: ClaimId,
    pub record: ClaimRecord,
    pub jobs: Vec<JobId>,
}

/// What deleting a message under a claim did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageDelete {
    Deleted,
    /// There is no such live message in the queue: nothing to do.
    Missing,
    /// A claim was named, but no claim holds the message.
    NotClaimed,
    /// A claim holds the message, and it is not the one named (or none was).
    Claimed,
}

impl Engine {
    /// Leases up to `new.max` ready jobs under a new claim, with a record of its terms; jobs
    /// of the queue whose leases have ended are handled first, so they can be claimed again at
    /// once. Does
    /// not wait. Returns the claim's id and its jobs (none: no claim was made).
    pub async fn claim(&self, new: NewClaim<'_>) -> Result<(ClaimId, Vec<TakenJob>), EngineError> {
        self.expire_due_leases_of(new.queue).await?;
        let id = random_id();
        let now_ms = self.now_ms();
        let queues = [new.queue.to_owned()];
        let request = TakeRequest {
            claim: Some(id),
            record: Some(ClaimRecord {
                queue: new.queue.to_owned(),
                lease_ms: new.lease_ms,
                grace_ms: new.grace_ms,
                renewed_at_ms: now_ms,
            }),
            keep_until_ms: Some(keep_until(now_ms, new.lease_ms, new.grace_ms)),
            ..TakeRequest::new(&queues, new.max, new.lease_ms)
        };
        let began = began(self);
        let jobs = self.store.take_jobs(&request, now_ms).await?.jobs;
        // As for a take: messages whose claim ended while the store committed it are not
        // handed out (they are free again once it is seen to have ended).
        let (jobs, _ended) = self.unended(jobs);
        self.observe_taken(&jobs, now_ms, began);
        Ok((id, self.opened_taken(jobs)?))
    }

    /// Claim `id` of `queue`, while it is live: its record names the queue and it still holds a
    /// live job of the queue whose lease has not ended.
    pub async fn claim_of(
        &self,
        queue: &str,
        id: ClaimId,
    ) -> Result<Option<ClaimView>, EngineError> {
        let claim = self.store.claim(id).await?;
        let Some(record) = claim.record.filter(|r| r.queue == queue) else {
            return Ok(None);
        };
        let now_ms = self.now_ms();
        let held: Vec<JobId> = claim.jobs.iter().map(|j| j.id).collect();
        let peeks = self.store.peek_jobs(&held).await?;
        let jobs: Vec<JobId> = held
            .into_iter()
            .zip(peeks)
            .filter(|(_, peek)| {
                peek.as_ref().is_some_and(|p| {
                    *p.queue == *queue && p.is_live(now_ms) && p.claim_at(now_ms) == Some(id)
                })
            })
            .map(|(job, _)| job)
            .collect();
        if jobs.is_empty() {
            return Ok(None);
        }
        Ok(Some(ClaimView { id, record, jobs }))
    }

    /// Renews a claim: its leases end `lease_ms` from now, its jobs live `grace_ms` longer, and
    /// its record says so. Returns how many jobs it holds: none when the new end had passed
    /// by the time the store confirmed it (as a heartbeat's, the end counts from when the
    /// renewal began), so that the claim is not said to be live when its messages are free.
    pub async fn renew_claim(
        &self,
        claim: &ClaimView,
        lease_ms: u64,
        grace_ms: u64,
    ) -> Result<usize, EngineError> {
        let now_ms = self.now_ms();
        let record = ClaimRecord {
            lease_ms,
            grace_ms,
            renewed_at_ms: now_ms,
            ..claim.record.clone()
        };
        let held = self
            .store
            .extend_claim(
                claim.id,
                lease_ms,
                Some(keep_until(now_ms, lease_ms, grace_ms)),
                Some(record),
                now_ms,
            )
            .await?;
        if now_ms.saturating_add(lease_ms) <= self.now_ms() {
            return Ok(0);
        }
        Ok(held)
    }

    /// Ends a claim now as if its leases had expired: each job counts the claim as an attempt
    /// (its policy decides whether it is ready again or dead, and its queue's dead-letter rule
    /// may move it). Zaqar's claim deletion: a message claimed and released `_max_claim_count`
    /// times goes to the dead-letter queue. Returns how many jobs the claim held.
    pub async fn end_claim(&self, id: ClaimId) -> Result<usize, EngineError> {
        let now_ms = self.now_ms();
        let expiries = Expiries::new(self);
        let decide = |ctx: &DecideContext<'_>| expiries.decide(self, ctx, now_ms);
        let ended = self.store.end_claim(id, now_ms, &decide).await?;
        expiries.report(self, now_ms);
        Ok(ended)
    }

    /// Handles every lease of `queue` that has ended by now, as the maintenance loop's next
    /// pass would, so that a claim or pop made right after sees those jobs ready (or moved to
    /// a dead-letter queue), as the queue's stats and listings, which go by time, already
    /// show them. A lease the maintenance loop is ending at this moment is waited for. Cheap
    /// when no lease has ended.
    pub async fn expire_due_leases_of(&self, queue: &str) -> Result<usize, EngineError> {
        let now_ms = self.now_ms();
        let expiries = Expiries::new(self);
        let decide = |ctx: &DecideContext<'_>| expiries.decide(self, ctx, now_ms);
        let expired = self.store.expire_leases_of(queue, now_ms, &decide).await?;
        expiries.report(self, now_ms);
        Ok(expired)
    }

    /// Handles up to `max` leases that have ended by `now_ms`: each counts as a failed
    /// attempt. Returns how many.
    pub async fn expire_leases(&self, now_ms: UnixMs, max: usize) -> Result<usize, EngineError> {
        let expiries = Expiries::new(self);
        let decide = |ctx: &DecideContext<'_>| expiries.decide(self, ctx, now_ms);
        let expired = self.store.expire_leases(now_ms, max, &decide).await?;
        expiries.report(self, now_ms);
        Ok(expired)
    }

    /// Deletes live message `id` of `queue` if the claim holding it is `claim` (`None`: if no
    /// claim holds it), judged and done atomically, so that a claim that ends and is taken over
    /// meanwhile cannot let the old holder delete the new holder's message.
    pub async fn delete_held(
        &self,
        queue: &str,
        id: JobId,
        claim: Option<ClaimId>,
    ) -> Result<MessageDelete, EngineError> {
        let now_ms = self.now_ms();
        let check = |peek: &crate::model::JobPeek| {
            *peek.queue == *queue && peek.is_live(now_ms) && peek.claim_at(now_ms) == claim
        };
        let checked = self
            .store
            .delete_checked(&[id], &check, self.now_ms())
            .await?;
        let Some(checked) = checked.into_iter().next() else {
            return Ok(MessageDelete::Missing);
        };
        if checked.deleted {
            return Ok(MessageDelete::Deleted);
        }
        let Some(peek) = checked
            .peek
            .filter(|p| *p.queue == *queue && p.is_live(now_ms))
        else {
            return Ok(MessageDelete::Missing);
        };
        Ok(match (claim, peek.claim_at(now_ms)) {
            (Some(_), None) => MessageDelete::NotClaimed,
            _ => MessageDelete::Claimed,
        })
    }

    /// Takes up to `max` ready jobs of `queue` and deletes them, atomically; returns them.
    pub async fn pop(&self, queue: &str, max: usize) -> Result<Vec<Job>, EngineError> {
        self.expire_due_leases_of(queue).await?;
        let queues = [queue.to_owned()];
        let jobs = self.store.pop_jobs(&queues, max, self.now_ms()).await?;
        Ok(self.opened_jobs(jobs)?)
    }
}

/// Until when a claim keeps its jobs alive.
fn keep_until(now_ms: u64, lease_ms: u64, grace_ms: u64) -> u64 {
    now_ms.saturating_add(lease_ms).saturating_add(grace_ms)
}
