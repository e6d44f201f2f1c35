//! A quick look at a job: its queue, status and lease, without its body; and what a
//! conditional delete saw of each job it looked at.

use std::sync::Arc;

use crate::clock::UnixMs;
use crate::model::{ClaimId, JobId, Status};

/// A job looked at for a conditional delete: what it was, and whether it was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub id: JobId,
    /// `None`: there is no such job.
    pub peek: Option<JobPeek>,
    pub deleted: bool,
}

/// A quick look at a job: its queue and state, without its body.
///
/// Invariant: a peek is a snapshot under the store's serialisation; the job may change right
/// after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPeek {
    pub queue: Arc<str>,
    pub status: Status,
    /// Earlier runs that failed or whose lease expired.
    pub failures: u32,
    /// When the job is deleted whatever its status, if ever (a claim may have moved it later).
    pub expires_at_ms: Option<UnixMs>,
    /// While in flight: the claim (or stream) holding the lease, if any.
    pub claim: Option<ClaimId>,
    /// While in flight: when the lease ends.
    pub lease_expires_at_ms: Option<UnixMs>,
}

impl JobPeek {
    /// Whether the job is live at `now_ms`: unfinished, and its expiry has not come. Only live
    /// jobs are messages to Zaqar's API.
    pub fn is_live(&self, now_ms: UnixMs) -> bool {
        !self.status.is_finished() && self.expires_at_ms.is_none_or(|at| at > now_ms)
    }

    /// The claim holding the job at `now_ms`: its lease has not ended.
    pub fn claim_at(&self, now_ms: UnixMs) -> Option<ClaimId> {
        let leased = self.status == Status::InFlight
            && self.lease_expires_at_ms.is_some_and(|at| at > now_ms);
        self.claim.filter(|_| leased)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peek(status: Status, expires: Option<u64>, lease: Option<u64>) -> JobPeek {
        JobPeek {
            queue: Arc::from("p:q"),
            status,
            failures: 0,
            expires_at_ms: expires,
            claim: lease.map(|_| ClaimId(7)),
            lease_expires_at_ms: lease,
        }
    }

    #[test]
    fn liveness_and_claims_follow_time() {
        assert!(peek(Status::Ready, Some(2_000), None).is_live(1_000));
        assert!(!peek(Status::Ready, Some(1_000), None).is_live(1_000));
        assert!(!peek(Status::Dead, None, None).is_live(1_000));
        assert!(!peek(Status::Completed, None, None).is_live(1_000));
        let claimed = peek(Status::InFlight, None, Some(5_000));
        assert_eq!(claimed.claim_at(4_999), Some(ClaimId(7)));
        assert_eq!(claimed.claim_at(5_000), None);
    }
}
