//! Tenax: a durable job queue and notification-delivery server whose retries follow
//! configurable backoff policies. `main.rs` only parses and dispatches; the program lives here.
//!
//! This crate holds the layers above the core (`tenax-core`: the model, the engine, the storage
//! seam, the clock): both HTTP APIs, the dashboard, webhook delivery, the HTTP listener, the
//! server's assembly and the command line. The stores are crates of their own
//! (`tenax-embedded`, `tenax-postgres`), which [`storage`] opens; `tenax bench` is
//! `tenax-bench`. docs/architecture.md, "Who may import whom", says which module may name which.

pub mod api;
pub mod app;
pub mod chart;
pub mod cli;
pub mod config;
pub mod delivery;
pub mod offline;
pub mod otlp;
pub mod serve;
pub mod server;
pub mod storage;
pub mod ui;
