//! Who may do what: API tokens, their roles and scopes, and the rule of every route.
//!
//! - [`token`]: tokens as stored (hashed), made and shown once.
//! - [`role`]: roles and the capabilities they grant.
//! - [`scope`]: the queues and Zaqar projects a token may touch.
//! - [`rules`]: for every route of both APIs, the capability it needs and where its queue is.
//!
//! Invariants:
//! - A token's secret is never stored, logged or shown again after the answer that created it;
//!   only its SHA-256 is kept, and a presented token is recognised by its hash.
//! - Every route has a rule ([`rules::rule`]); a route without one is refused (500), never
//!   served unchecked, and `crates/tenax/tests/it/security.rs` fails when one is added without a rule.

pub mod role;
pub mod rules;
pub mod scope;
pub mod token;

pub use role::{Capability, Role};
pub use scope::{Principal, Scope};
pub use token::{NewToken, TokenRecord};
