//! The integration tests of the `tenax` crate, in one test binary: built and linked once, where
//! a binary per suite would compile the harness and link the server ~47 times over.
//!
//! Each suite is a module (a file of this directory, or `conformance/`), its tests named
//! `<suite>::<test>`: `cargo test -p tenax --test it -- webhooks::` runs the webhook suite, and
//! several filters run several suites (`-- webhooks:: power_cut::`). A filter matches anywhere
//! in the name: `api::` picks openapi::, subscriptions_api:: and zaqar_api:: too, and `--skip`
//! leaves out what it matches.
//!
//! `common/` is the harness the suites share; its statics (the PostgreSQL cluster of
//! `common/postgres.rs`, the port counter of `common/ports.rs`) are one for the whole binary, so
//! a suite that restarts its PostgreSQL server or changes its configuration has a cluster of its
//! own (`postgres::OwnCluster`), and a suite whose tests must take turns holds a lock of its own
//! (`multinode::TURN`).

mod common;

mod api;
mod backpressure;
mod backup;
mod batches;
mod bench;
mod browsers;
mod cancel;
mod cli;
mod conformance;
mod connections;
mod copy;
mod crash;
mod delivery_proxy;
mod deploy_metrics;
mod encrypted_queues;
mod engine_model;
mod health_command;
mod layers;
mod limits;
mod logs;
mod metrics;
mod multinode;
mod openapi;
mod otel;
mod pg_clock;
mod pg_failover;
mod pg_start;
mod pg_statements;
mod pools;
mod postgres_harness;
mod postgres_tls;
mod power_cut;
mod results;
mod robustness;
mod schedules;
mod scopes;
mod secrets;
mod security;
mod subscriptions_api;
mod ui;
mod wal_damage;
mod webhooks;
mod work_exec;
mod workflows;
mod zaqar_api;
mod zaqar_notifications;
mod zaqar_websocket;
