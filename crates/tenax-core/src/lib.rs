//! The core of Tenax: the domain's values ([`model`]), every rule ([`engine`]), the storage seam
//! that the backends implement ([`store`]) and the clock that decides ([`clock`]), with what the
//! engine needs beside them: tokens and scopes ([`auth`]), the keys that seal secrets at rest
//! ([`secrets`]), the metrics and spans it records ([`metrics`], [`otel`]).
//!
//! The stores (`tenax-embedded`, `tenax-postgres`) and the HTTP layers (`tenax`) build on this
//! crate; it knows none of them. Its own modules are layered too (docs/architecture.md, "Who may
//! import whom"), held by `crates/tenax/tests/it/layers.rs`.

pub mod auth;
pub mod clock;
pub mod engine;
pub mod errors;
pub mod metrics;
pub mod model;
pub mod otel;
pub mod secrets;
pub mod store;
