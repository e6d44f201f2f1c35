//! Claims: jobs leased together under one id (a streaming take, or a Zaqar claim), found,
//! renewed, ended and released together. Memory only, like every lease; so is a claim's record.

use async_trait::async_trait;
use tenax_core::clock::UnixMs;
use tenax_core::model::{ClaimId, JobId, Status};
use tenax_core::store::{Claim, ClaimRecord, ClaimStore, ClaimedJob, Decide, StoreError};

use super::EmbeddedStore;
use super::index::Lease;
use super::leases::decide_on;
use super::writer;

#[async_trait]
impl ClaimStore for EmbeddedStore {
    async fn claim(&self, id: ClaimId) -> Result<Claim, StoreError> {
        let inner = self.inner.lock();
        let jobs: Vec<ClaimedJob> = inner
            .index
            .held_by_claim(id)
            .into_iter()
            .filter_map(|job| {
                let entry = inner.index.get(job)?;
                let lease = entry.lease().filter(|_| entry.status == Status::InFlight)?;
                Some(ClaimedJob {
                    id: job,
                    lease_expires_at_ms: lease.expires_at_ms,
                    failures: entry.failures,
                })
            })
            .collect();
        // In id order already: the claim's set is ordered.
        Ok(Claim {
            record: inner.claims.get(&id).cloned(),
            jobs,
        })
    }

    async fn extend_claim(
        &self,
        id: ClaimId,
        lease_ms: u64,
        keep_until_ms: Option<UnixMs>,
        record: Option<ClaimRecord>,
        now_ms: UnixMs,
    ) -> Result<usize, StoreError> {
        let mut inner = self.inner.lock();
        let ids = inner.index.held_by_claim(id);
        let expires_at_ms = now_ms.saturating_add(lease_ms);
        for job in &ids {
            inner.index.update(*job, |e| {
                if let Some(lease) = e.lease() {
                    e.set_lease(Some(Lease {
                        expires_at_ms,
                        ..lease
                    }));
                }
                if let (Some(at), Some(keep)) = (e.expires_at_ms(), keep_until_ms) {
                    e.set_expires_at_ms(Some(at.max(keep)));
                }
            });
        }
        match record {
            Some(record) => inner.claims.insert(id, record),
            None => inner.claims.remove(&id),
        };
        Ok(ids.len())
    }

    async fn end_claim(
        &self,
        id: ClaimId,
        now_ms: UnixMs,
        decide: &Decide<'_>,
    ) -> Result<usize, StoreError> {
        let receivers = {
            let mut inner = self.inner.lock();
            inner.claims.remove(&id);
            let mut ids: Vec<JobId> = inner.index.held_by_claim(id);
            ids.sort_unstable();
            let mut receivers = Vec::with_capacity(ids.len());
            for job in ids {
                let inner = &mut *inner;
                let Some(mut transition) = decide_on(inner, job, decide) else {
                    continue;
                };
                receivers.push(self.apply(inner, job, &mut transition, now_ms, Vec::new())?);
            }
            receivers
        };
        let count = receivers.len();
        for receiver in receivers {
            writer::wait(receiver).await?;
        }
        if count > 0 {
            self.signals.ready.notify_waiters();
            // Its jobs left flight, some perhaps for good (dead): a wait for a job's end looks.
            self.signals.released.notify_waiters();
        }
        Ok(count)
    }

    /// Nothing is written: on disk the jobs never left ready.
    async fn release_claim(&self, id: ClaimId) -> Result<usize, StoreError> {
        let mut inner = self.inner.lock();
        inner.claims.remove(&id);
        let ids = inner.index.held_by_claim(id);
        for job in &ids {
            inner.index.update(*job, |e| e.status = Status::Ready);
        }
        drop(inner);
        if !ids.is_empty() {
            self.signals.ready.notify_waiters();
        }
        Ok(ids.len())
    }
}
