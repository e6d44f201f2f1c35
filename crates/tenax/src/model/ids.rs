//! Distinct id types, so that one kind of id cannot pass for another: a job id is not a
//! subscription id, and neither is a lease token or a claim. Each is a `u64` on the wire (JSON
//! numbers, except where an API spells it otherwise) and in storage.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize,
            Deserialize, utoipa::ToSchema,
        )]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = std::num::ParseIntError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                text.parse().map(Self)
            }
        }
    };
}

id_type!(
    /// A job's id: assigned by the store in enqueue order, unique for the life of the store,
    /// and the FIFO tie-breaker within a priority.
    JobId
);
id_type!(
    /// A webhook subscription's id.
    SubscriptionId
);
id_type!(
    /// A group of leases held and released together: a streaming take, or a Zaqar claim.
    /// Random, so that ids made by several servers on one database do not collide and cannot
    /// be guessed.
    ClaimId
);
id_type!(
    /// The token of one lease: it changes on every take, so only the current holder of a job
    /// may heartbeat, complete or fail it.
    LeaseToken
);
