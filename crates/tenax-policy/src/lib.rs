//! Retry and backoff policies for Tenax: exact, validated, previewable.
//!
//! The contract is `policies.md` (in Tenax's design documents) and `docs/policies.md` for users.
//! This crate is pure: no I/O, no async, no clock. Time comes in as milliseconds since the Unix
//! epoch, randomness through [`RandomSource`].
//!
//! ```
//! use tenax_policy::{Failure, Decision, Preview, SeededRandom, parse_policy_str};
//!
//! let policy = parse_policy_str(r#"{"type": "phased", "min_delay": "5s", "max_delay": "260s",
//!                                   "num_retries": 10, "function": "geometric"}"#)?.retry;
//! assert_eq!(policy.delay_ms(2), 7_756);
//!
//! let decision = policy.decide(&Failure::first(1_000), &mut SeededRandom::for_retry("job-1", 1));
//! assert_eq!(decision, Decision::Retry { retry: 1, at_ms: 6_000, delay_ms: 5_000 });
//!
//! assert_eq!(Preview::of(&policy).window_ms, 722_629);
//! # Ok::<(), tenax_policy::PolicyError>(())
//! ```

pub mod decision;
pub mod duration;
pub mod error;
pub mod jitter;
pub mod phased;
pub mod policy;
pub mod polynomial;
pub mod preview;
pub mod random;
pub mod saturating;
pub mod shape;
pub mod simple;
pub mod spelling;

pub use decision::{DeadReason, Decision, Failure, Outcome};
pub use duration::{MAX_DELAY_MS, format_duration, parse_duration};
pub use error::PolicyError;
pub use jitter::Jitter;
pub use phased::{BackoffFunction, Phased};
pub use policy::{MAX_RETRY_LIMIT, RetryPolicy};
pub use preview::{Preview, PreviewRow};
pub use random::{FixedRandom, RandomSource, SeededRandom, seed_for};
pub use shape::Shape;
pub use spelling::{ParsedPolicy, Spelling, parse_policy, parse_policy_str, spell};
