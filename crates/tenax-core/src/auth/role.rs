//! Roles, and what each may do.

use serde::{Deserialize, Serialize};

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Read jobs, queues, subscriptions and deliveries (and Zaqar messages).
    Read,
    /// Enqueue jobs (post Zaqar messages).
    Enqueue,
    /// Take, heartbeat, complete and fail jobs (Zaqar claims, deleting claimed messages).
    Work,
    /// Change things: queue settings, pause and resume, replay and delete jobs, subscriptions.
    Manage,
    /// Create, list and revoke API tokens.
    Tokens,
    /// Take a backup of the whole store: every queue's jobs, the tokens' hashes, the sealed
    /// secrets (`POST /api/admin/backup`).
    Backup,
    /// See and change the deployment's pools and flavors (`/api/pools`, Zaqar's `/v2/pools`):
    /// databases and their credentials, so only tokens that are not scoped may.
    Pools,
    /// Read the metrics (`GET /metrics`) and the activity (`GET /api/activity`): counts of
    /// every queue together, so only tokens that are not scoped may.
    Metrics,
    /// Anything a token is good for, with no data behind it (policy previews, Zaqar's home).
    Any,
}

/// A token's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, tokens included (tokens only when not scoped to queues or projects).
    Admin,
    /// Enqueue, and read the queues it may touch.
    Producer,
    /// Take, heartbeat, complete and fail.
    Worker,
    /// Read only.
    Reader,
}

impl Role {
    pub const ALL: [Role; 4] = [Self::Admin, Self::Producer, Self::Worker, Self::Reader];

    pub fn name(self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Producer => "producer",
            Self::Worker => "worker",
            Self::Reader => "reader",
        }
    }

    /// Whether the role grants `capability`.
    pub fn grants(self, capability: Capability) -> bool {
        use Capability::{Any, Enqueue, Metrics, Read, Work};
        match self {
            Self::Admin => true,
            Self::Producer => matches!(capability, Enqueue | Read | Any),
            Self::Worker => matches!(capability, Work | Any),
            Self::Reader => matches!(capability, Read | Metrics | Any),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_role_grants() {
        use Capability::*;
        let table = [
            (
                Role::Admin,
                [true, true, true, true, true, true, true, true, true],
            ),
            (
                Role::Producer,
                [true, true, false, false, false, false, true, false, false],
            ),
            (
                Role::Worker,
                [false, false, true, false, false, false, true, false, false],
            ),
            (
                Role::Reader,
                [true, false, false, false, false, true, true, false, false],
            ),
        ];
        for (role, grants) in table {
            for (capability, want) in [
                Read, Enqueue, Work, Manage, Tokens, Metrics, Any, Backup, Pools,
            ]
            .into_iter()
            .zip(grants)
            {
                assert_eq!(role.grants(capability), want, "{role:?} {capability:?}");
            }
        }
    }
}
