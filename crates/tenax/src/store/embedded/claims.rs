//! Claims: jobs leased together under one id (a streaming connection, or a Zaqar claim), found,
//! extended and released together. Memory only, like every lease.

use super::EmbeddedStore;
use super::index::Lease;
use crate::clock::UnixMs;
use crate::model::{JobId, Status};
use crate::store::ClaimedJob;

impl EmbeddedStore {
    /// The jobs a claim holds, in id order.
    pub fn claimed(&self, claim: u64) -> Vec<ClaimedJob> {
        let inner = self.inner.lock();
        let mut jobs: Vec<ClaimedJob> = inner
            .index
            .leased_by_stream(claim)
            .into_iter()
            .filter_map(|id| claimed_job(inner.index.get(id)?, id))
            .collect();
        jobs.sort_by_key(|j| j.id);
        jobs
    }

    /// Renews every lease of a claim to `now + lease_ms`, and keeps its jobs alive until at
    /// least `keep_until_ms`. Returns how many jobs the claim holds.
    pub fn extend_claim(
        &self,
        claim: u64,
        lease_ms: u64,
        keep_until_ms: Option<UnixMs>,
        now_ms: UnixMs,
    ) -> usize {
        let mut inner = self.inner.lock();
        let ids = inner.index.leased_by_stream(claim);
        let expires_at_ms = now_ms.saturating_add(lease_ms);
        for id in &ids {
            inner.index.update(*id, |e| {
                if let Some(lease) = e.lease {
                    e.lease = Some(Lease {
                        expires_at_ms,
                        ..lease
                    });
                }
                if let (Some(at), Some(keep)) = (e.expires_at_ms, keep_until_ms) {
                    e.expires_at_ms = Some(at.max(keep));
                }
            });
        }
        ids.len()
    }
}

fn claimed_job(entry: &super::index::Entry, id: JobId) -> Option<ClaimedJob> {
    if entry.state.status != Status::InFlight {
        return None;
    }
    let lease = entry.lease?;
    Some(ClaimedJob {
        id,
        claim: lease.stream?,
        lease_expires_at_ms: lease.expires_at_ms,
        failures: entry.state.failures,
    })
}
