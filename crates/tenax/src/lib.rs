//! Tenax: a durable job queue and notification-delivery server whose retries follow
//! configurable backoff policies. `main.rs` only parses and dispatches; the program lives here.

pub mod api;
pub mod app;
pub mod auth;
pub mod bench;
pub mod chart;
pub mod cli;
pub mod clock;
pub mod config;
pub mod delivery;
pub mod engine;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod metrics;
pub mod model;
pub mod otel;
pub mod secrets;
pub mod serve;
pub mod server;
pub mod store;
pub mod trust;
pub mod ui;
