//! Claims: several jobs leased together under one id, as Zaqar's claims are. A claim is a
//! group lease: its jobs are found, renewed and released together, and each still completes or
//! expires on its own.

use crate::store::{ClaimedJob, DecideContext, StoreError, TakeRequest, TakenJob};

use super::{Engine, decide_lease_expiry};

impl Engine {
    /// Leases up to `max` ready jobs of `queues` for `lease_ms` under a new claim id, keeping
    /// them alive for at least `lease_ms + grace_ms`. Does not wait.
    pub async fn claim(
        &self,
        queues: &[String],
        max: usize,
        lease_ms: u64,
        grace_ms: u64,
    ) -> Result<(u64, Vec<TakenJob>), StoreError> {
        let claim = self.open_stream();
        let now_ms = self.now_ms();
        let request = TakeRequest {
            queues,
            max,
            lease_ms,
            stream: Some(claim),
            keep_until_ms: Some(now_ms.saturating_add(lease_ms).saturating_add(grace_ms)),
        };
        let jobs = self.store.take(&request, now_ms).await?;
        Ok((claim, jobs))
    }

    /// The jobs a claim still holds.
    pub async fn claimed(&self, claim: u64) -> Vec<ClaimedJob> {
        self.store.claimed(claim).await
    }

    /// Renews a claim: its leases end `lease_ms` from now, its jobs live `grace_ms` longer.
    pub async fn renew_claim(&self, claim: u64, lease_ms: u64, grace_ms: u64) -> usize {
        let now_ms = self.now_ms();
        let keep = now_ms.saturating_add(lease_ms).saturating_add(grace_ms);
        self.store
            .extend_claim(claim, lease_ms, Some(keep), now_ms)
            .await
    }

    /// Ends a claim now as if its leases had expired: each job counts the claim as an attempt
    /// (its policy decides whether it is ready again or dead, and its queue's dead-letter rule
    /// may move it). Zaqar's claim deletion: a message claimed and released `_max_claim_count`
    /// times goes to the dead-letter queue. Returns how many jobs the claim held.
    pub async fn expire_claim(&self, claim: u64) -> Result<usize, StoreError> {
        let held = self.store.extend_claim(claim, 0, None, self.now_ms()).await;
        if held > 0 {
            self.expire_due_leases().await?;
        }
        Ok(held)
    }

    /// Handles every lease that has ended by now, as the maintenance loop's next pass would, so
    /// that a claim made right after sees those jobs ready (or moved to a dead-letter queue).
    /// Cheap when no lease has ended.
    pub async fn expire_due_leases(&self) -> Result<usize, StoreError> {
        let now_ms = self.now_ms();
        let decide = move |ctx: &DecideContext<'_>| {
            decide_lease_expiry(ctx, self.default_policy_for(ctx.queue), now_ms)
        };
        self.store.expire_leases(now_ms, usize::MAX, &decide).await
    }
}
