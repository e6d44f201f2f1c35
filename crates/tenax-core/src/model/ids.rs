//! Distinct id types, so that one kind of id cannot pass for another: a job id is not a
//! subscription id, and neither is a lease token or a claim. Each is a `u64` on the wire (JSON
//! numbers, except where an API spells it otherwise) and in storage.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Job ids are assigned by the store, not chosen by clients, and consecutive: they are their
/// own hash.
#[derive(Debug, Default)]
pub struct JobIdHasher(u64);

impl Hasher for JobIdHasher {
    fn finish(&self) -> u64 {
        // Spread consecutive ids over the table's high bits too (Fibonacci hashing).
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 << 8) | u64::from(*byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A map keyed by job id, hashed by [`JobIdHasher`]: for the books kept per lease, where each
/// take and acknowledgement touches the map once per job.
pub type JobIdMap<V> = HashMap<JobId, V, BuildHasherDefault<JobIdHasher>>;

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
    /// The token of one lease: drawn anew on every take, so only the current holder of a job
    /// may heartbeat, complete or fail it.
    LeaseToken
);

/// The largest integer that every JSON client reads exactly: JavaScript's
/// `Number.MAX_SAFE_INTEGER`, 2^53 − 1. Larger ones are rounded by `JSON.parse` and `jq`, so no
/// integer Tenax sends may exceed it (ids, lease tokens, counts).
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

impl LeaseToken {
    /// A new lease token: 53 bits from the thread's CSPRNG (ChaCha, seeded by the operating
    /// system), from 1 to [`MAX_EXACT_INTEGER`]. Unpredictable, so a worker cannot act on
    /// another's lease by guessing its token from its own; and exact in every JSON client.
    pub fn random() -> Self {
        use rand::Rng as _;
        Self(rand::rng().random_range(1..=MAX_EXACT_INTEGER))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_tokens_are_random_and_exact_in_javascript() {
        let tokens: Vec<u64> = (0..1_000).map(|_| LeaseToken::random().0).collect();
        assert!(tokens.iter().all(|&t| (1..=MAX_EXACT_INTEGER).contains(&t)));
        let distinct: std::collections::HashSet<_> = tokens.iter().collect();
        assert_eq!(distinct.len(), tokens.len());
        // Not a counter: no token follows the one before.
        assert!(tokens.windows(2).all(|w| w[1] != w[0] + 1));
        // The high bits are used: some of 1 000 tokens are above 2^52.
        assert!(tokens.iter().any(|&t| t > 1 << 52));
    }
}
