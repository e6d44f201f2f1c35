//! Pools and flavors: the databases a pooled deployment places its queues on, and named groups
//! of them a queue may ask for (Zaqar's pools and flavors; docs/postgres.md, "Pools").

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The most pools a deployment has: ids keep their pool in their residue modulo 64, and the
/// catalogue is residue 0.
pub const MAX_POOLS: usize = 63;

/// What a pool name (and a flavor name) may be: 1 to 64 ASCII letters, digits, `_` or `-`, as
/// Zaqar's.
pub const NAME_RULE: &str = "1 to 64 ASCII letters, digits, '_' or '-'";

/// Whether `name` follows [`NAME_RULE`].
pub fn is_pool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Refuses a `name` given as `field` that breaks [`NAME_RULE`].
pub fn check_name(field: &'static str, name: &str) -> Result<(), PoolError> {
    if is_pool_name(name) {
        Ok(())
    } else {
        Err(PoolError::Invalid {
            field,
            rule: format!("{name:?} is not a name: {NAME_RULE}"),
        })
    }
}

/// A pool to register, or the whole of a registered pool's new settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub name: String,
    /// The pool's database: a `postgres://` URL.
    pub uri: String,
    /// New queues go to a pool in proportion to its weight; 0 takes none.
    pub weight: u32,
    /// The flavor the pool serves, if any.
    pub flavor: Option<String>,
    /// Kept as given, for the operator.
    pub options: Map<String, Value>,
}

/// A registered pool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    #[serde(flatten)]
    pub spec: PoolSpec,
    /// 1 to 63: the remainder modulo 64 of every id its database hands out.
    pub number: u8,
    /// How many queues are placed on it.
    pub queues: usize,
    /// Whether new queues may be placed on it yet: a new pool takes queues once every server
    /// has read it (at once when every live server says so, else after a few seconds).
    pub ready: bool,
}

/// A flavor: a named group of pools. A queue that names it (Zaqar's `_flavor`) is placed on
/// one of its pools, by weight. Its pools are those whose `flavor` names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flavor {
    pub name: String,
    /// The names of its pools.
    pub pools: Vec<String>,
    /// What the operator said of it (Zaqar's `capabilities`), kept as given.
    pub capabilities: Map<String, Value>,
}

/// Queues moved to another pool (`tenax queues move`), with what they held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    /// The queues, as asked for.
    pub queues: Vec<String>,
    /// The pool they were on ("" for the catalogue's database); none when none of them was
    /// placed yet (they are placed on `to` now) or they were on `to` already.
    pub from: Option<String>,
    pub to: String,
    /// The jobs moved, finished ones too (0 when a run before moved them).
    pub jobs: u64,
    /// The subscriptions moved, with their deliveries.
    pub subscriptions: u64,
}

/// Why a change of the pools or flavors was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// The store keeps one database: pools need the server on PostgreSQL.
    #[error("pools need the server on PostgreSQL (--database-url): this store keeps one database")]
    NotPooled,
    /// `field` breaks `rule`.
    #[error("{field}: {rule}")]
    Invalid { field: &'static str, rule: String },
    /// The pool's database cannot be reached, or refuses this server.
    #[error("uri: cannot connect to the pool's database: {0}")]
    Unreachable(String),
    /// Another pool has this database.
    #[error("uri: pool {0:?} has this database already")]
    UriTaken(String),
    /// A pool that holds queues keeps its database.
    #[error(
        "pool {name:?} holds {queues} queue(s): its uri stays, and it is removed once they are \
         moved to other pools"
    )]
    HoldsQueues { name: String, queues: usize },
    /// Queues moved out of it: the ids of their jobs name it, and it forwards them.
    #[error(
        "queues were moved out of pool {0:?}: it forwards their jobs' ids (which name it), and \
         stays"
    )]
    Forwards(String),
    #[error("pool {0:?} does not exist")]
    NoPool(String),
    #[error("flavor {0:?} does not exist")]
    NoFlavor(String),
    /// The last pool of a flavor stays while the flavor does (as Zaqar's).
    #[error("pool {pool:?} is the last pool of flavor {flavor:?}: delete the flavor first")]
    LastOfFlavor { pool: String, flavor: String },
    /// A queue of a flavor is placed on one of its pools, and stays there.
    #[error(
        "queue {queue:?} is placed on pool {pool:?}, which is not of flavor {flavor:?}: a \
         queue's pool never changes under it"
    )]
    NotOfFlavor {
        queue: String,
        pool: String,
        flavor: String,
    },
    /// One transaction writes both queues (a job and the job it waits for, a batch, a
    /// dead-letter queue): they move together or not at all.
    #[error("queue {queue:?} is tied to queue {other:?} by a {how}: move them together (`with`)")]
    Tied {
        queue: String,
        other: String,
        how: String,
    },
    /// Queues of one move are on one pool.
    #[error("queues {first:?} and {second:?} are on different pools: move them one at a time")]
    MoveAcrossPools { first: String, second: String },
    /// One move runs at a time, and one that stopped short is finished first.
    #[error(
        "the move of {queues:?} to pool {to:?} is not finished: run it again (the same queues, \
         to the same pool) to finish it first"
    )]
    MoveUnfinished { queues: Vec<String>, to: String },
}
