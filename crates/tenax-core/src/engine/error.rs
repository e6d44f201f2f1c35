//! What the engine's operations answer when they fail, in the engine's terms: what the request
//! names does not exist, it conflicts with the state it found, the server cannot serve it just
//! now, or storage failed. The layers above map these kinds to their own answers (HTTP statuses
//! and bodies) and never see the store's error.
//!
//! Invariant: an error displays exactly as the store's error it was mapped from, so messages
//! that reach clients read as they always did.

use crate::model::{JobId, KeyHolder, Status, SubscriptionId};
use crate::store::StoreError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    /// What the request names does not exist (never did, or is gone).
    #[error(transparent)]
    NotFound(Missing),
    /// The request conflicts with the state it found; repeating it will not help.
    #[error(transparent)]
    Conflict(Conflict),
    /// The server cannot serve the request just now; it may succeed when sent again.
    #[error(transparent)]
    Unavailable(Unavailable),
    /// Storage failed, or holds what this server cannot read: the server, not the request, is
    /// at fault. The details are for the log.
    #[error(transparent)]
    Storage(StorageFailure),
    /// A change of the pools or flavors was refused (what the request names does not exist,
    /// breaks a rule, or conflicts with the pools as they are); the layers above map each
    /// kind.
    #[error(transparent)]
    Pool(crate::model::pool::PoolError),
}

/// What does not exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    #[error("job {0} does not exist")]
    Job(JobId),
    #[error("subscription {0} does not exist")]
    Subscription(SubscriptionId),
    /// A job that the job at `index` of an enqueue waits for (`position` in its `after`).
    #[error("job {id} does not exist")]
    Parent {
        index: usize,
        position: usize,
        id: JobId,
    },
    #[error("batch {0} does not exist")]
    Batch(crate::model::BatchId),
    /// A queue that has never existed (`engine/known_queues.rs`), with the existing names
    /// closest to it.
    #[error("{}", queue_missing(name, closest))]
    Queue { name: String, closest: Vec<String> },
}

fn queue_missing(name: &str, closest: &[String]) -> String {
    if closest.is_empty() {
        format!("queue {name:?} does not exist")
    } else {
        format!(
            "queue {name:?} does not exist; did you mean {}?",
            super::known_queues::quoted(closest)
        )
    }
}

/// How a request conflicts with the state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    #[error("job {id} is {}, not in flight", status.name())]
    NotInFlight { id: JobId, status: Status },
    #[error("job {id}: this lease is no longer valid (it expired, or the job was taken again)")]
    LeaseLost { id: JobId },
    /// The job at `index` of an enqueue names a unique key that is already held.
    #[error("{}", holder.refusal(queue, key))]
    Duplicate {
        index: usize,
        queue: String,
        key: String,
        holder: KeyHolder,
    },
    /// Another subscription of the queue has the endpoint, which must be unique there.
    #[error("subscription {holder} of queue {queue:?} already has endpoint {endpoint:?}")]
    EndpointTaken {
        queue: String,
        endpoint: String,
        holder: SubscriptionId,
    },
    /// Jobs may be added to an open batch only.
    #[error("batch {0} is closed: no more jobs may be added to it")]
    BatchClosed(crate::model::BatchId),
    /// What one transaction would change is on several pools (docs/postgres.md, "Pools").
    #[error("{0}")]
    AcrossPools(String),
}

/// Why the server cannot serve a request just now.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unavailable {
    /// Storage failed earlier and refuses writes until the server restarts.
    #[error("storage has failed and refuses writes; restart the server")]
    Failed,
    /// The storage cannot be reached (a shared database restarting or failing over). The
    /// operation happened entirely or not at all; it did not happen unless the connection broke
    /// while committing.
    #[error(transparent)]
    Unreachable(StorageFailure),
    /// A queue's settings or subscriptions kept changing while an enqueue read them; nothing
    /// was stored.
    #[error("a queue's settings or subscriptions changed during the enqueue")]
    FactsChanged,
}

/// A storage failure, kept whole for the log (its message and the causes underneath).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(transparent)]
pub struct StorageFailure(StoreError);

impl From<StoreError> for EngineError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound(id) => Self::NotFound(Missing::Job(id)),
            StoreError::NoSubscription(id) => Self::NotFound(Missing::Subscription(id)),
            StoreError::UnknownParent {
                index,
                position,
                id,
            } => Self::NotFound(Missing::Parent {
                index,
                position,
                id,
            }),
            StoreError::NoBatch(id) => Self::NotFound(Missing::Batch(id)),
            StoreError::BatchClosed(id) => Self::Conflict(Conflict::BatchClosed(id)),
            StoreError::NotInFlight { id, status } => {
                Self::Conflict(Conflict::NotInFlight { id, status })
            }
            StoreError::LeaseLost { id } => Self::Conflict(Conflict::LeaseLost { id }),
            StoreError::Duplicate {
                index,
                queue,
                key,
                holder,
            } => Self::Conflict(Conflict::Duplicate {
                index,
                queue,
                key,
                holder,
            }),
            StoreError::EndpointTaken {
                queue,
                endpoint,
                holder,
            } => Self::Conflict(Conflict::EndpointTaken {
                queue,
                endpoint,
                holder,
            }),
            StoreError::AcrossPools(message) => Self::Conflict(Conflict::AcrossPools(message)),
            StoreError::Pool(error) => Self::Pool(error),
            StoreError::Failed => Self::Unavailable(Unavailable::Failed),
            StoreError::FactsChanged => Self::Unavailable(Unavailable::FactsChanged),
            error @ StoreError::Unavailable(_) => {
                Self::Unavailable(Unavailable::Unreachable(StorageFailure(error)))
            }
            error @ (StoreError::Storage(_)
            | StoreError::Corrupt(_)
            | StoreError::Secrets(_)
            | StoreError::Refused(_)
            | StoreError::NewerFormat { .. }) => Self::Storage(StorageFailure(error)),
        }
    }
}

impl EngineError {
    /// Whether the server, not the request, is at fault.
    pub fn is_internal(&self) -> bool {
        // Settings that kept changing under an enqueue are a race the client may retry, not a
        // fault of the server.
        matches!(
            self,
            Self::Storage(_) | Self::Unavailable(Unavailable::Failed | Unavailable::Unreachable(_))
        )
    }

    /// The job `id` does not exist.
    pub fn no_job(id: JobId) -> Self {
        Self::NotFound(Missing::Job(id))
    }

    /// The subscription `id` does not exist.
    pub fn no_subscription(id: SubscriptionId) -> Self {
        Self::NotFound(Missing::Subscription(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of store error keeps its message, and whether it is the server's fault.
    #[test]
    fn store_errors_keep_their_message_and_fault() {
        let io = || std::io::Error::other("disk on fire");
        let errors = [
            StoreError::NotFound(JobId(3)),
            StoreError::NoSubscription(SubscriptionId(4)),
            StoreError::NotInFlight {
                id: JobId(5),
                status: Status::Dead,
            },
            StoreError::LeaseLost { id: JobId(6) },
            StoreError::Duplicate {
                index: 2,
                queue: "p:q".into(),
                key: "k".into(),
                holder: KeyHolder::Earlier(1),
            },
            StoreError::Duplicate {
                index: 0,
                queue: "p:q".into(),
                key: "k".into(),
                holder: KeyHolder::Job(JobId(9)),
            },
            StoreError::EndpointTaken {
                queue: "p:q".into(),
                endpoint: "https://example.test/hook".into(),
                holder: SubscriptionId(7),
            },
            StoreError::FactsChanged,
            StoreError::Failed,
            StoreError::storage("writing", io()),
            StoreError::unavailable("connecting", io()),
            StoreError::Corrupt("a row".into()),
            StoreError::Secrets("no key".into()),
            StoreError::NewerFormat {
                found: 9,
                supported: 3,
            },
        ];
        for error in errors {
            let mapped = EngineError::from(error.clone());
            assert_eq!(mapped.to_string(), error.to_string());
            assert_eq!(mapped.is_internal(), error.is_internal(), "{error}");
        }
    }
}
