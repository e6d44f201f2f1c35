//! Outbound connections that Tenax makes: HTTP clients that can all speak TLS ([`http`]), and
//! which certificates they trust ([`trust`]). The webhook sender, the PostgreSQL store, the
//! OTLP exporter and `tenax bench` build on it.

pub mod http;
pub mod trust;
