//! A typed async client and worker runtime for [Tenax], the durable job queue and webhook
//! delivery server.
//!
//! - [`Client`]: one method per endpoint of the native HTTP API (enqueue, inspect, take and
//!   stream, heartbeat, complete, fail with an outcome, dead jobs, queues, schedules, policies,
//!   webhook subscriptions and deliveries, tokens, the cluster's servers, workers and
//!   activity), typed answers, typed errors ([`Error`]).
//! - [`Worker`]: runs handlers by job type with typed payloads, a concurrency limit, a
//!   streaming take, heartbeats, batched completions and graceful shutdown; it names itself to
//!   the server (hostname-pid unless told otherwise).
//!
//! ```no_run
//! use std::time::Duration;
//! use tenax_client::{Client, Job, JobError, NewJob, OutcomeExt as _, Worker};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Email { to: String }
//!
//! # async fn send(_: &Email) -> std::io::Result<()> { Ok(()) }
//! # async fn example() -> Result<(), tenax_client::Error> {
//! let client = Client::from_env()?; // TENAX_URL, TENAX_TOKEN, TENAX_CA_FILE
//! client
//!     .enqueue(&NewJob::new("emails", "email.send").payload(Email { to: "ada@example.com".into() }))
//!     .await?;
//!
//! let worker = Worker::builder(client)
//!     .queue("emails")
//!     .concurrency(8)
//!     .handler("email.send", |job: Job<Email>| async move {
//!         send(&job.payload).await.retry_in(Duration::from_secs(60))?;
//!         Ok::<_, JobError>(())
//!     })
//!     .build()?;
//! worker.run_until(tenax_client::shutdown_signal()).await?;
//! # Ok(()) }
//! ```
//!
//! TLS goes through rustls with the ring provider, which this crate installs as the process
//! default before it builds an HTTP client (another provider installed first is kept).
//!
//! [Tenax]: https://example.invalid/tenax

/// `as_str` and `Display` (padded as a `str` is) for an enum of the API: each variant's name on
/// the wire. Defined before the modules, which use it.
macro_rules! api_names {
    ($type:ty { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $type {
            /// Its name in the API.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)+
                }
            }
        }

        impl std::fmt::Display for $type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

mod batch;
mod client;
mod cluster;
mod error;
mod model;
mod request;
mod schedule;
mod stream;
mod time;
mod tls;
pub mod worker;

pub use batch::{Batch, BatchCounts, BatchJobs, BatchState, Callback, NewBatch};
pub use client::{Backup, Client, ClientBuilder, DEFAULT_URL, WORKER_HEADER};
pub use cluster::{Activity, ActivityCounts, ActivityMinute, Cluster, ServerInfo, WorkerInfo};
pub use error::{Error, Result};
pub use model::{
    AttemptPage, AttemptResult, AttemptTrigger, BreakerState, CancelOutcome, CancelResult,
    CancelledJobs, CompleteError, CompleteResult, Counts, CreatedToken, DeletedJobs,
    DeletedSubscription, Delivery, DeliveryAttempt, DeliveryPage, EndpointHealth, Enqueued,
    EnvelopeFormat, FailResult, JobInfo, JobPage, JobStatus, Lease, LeaseExtended, MovedQueues,
    ParentResult, PolicyPreview, PolicySource, PreviewRow, Queue, QueueCounts, QueueRate,
    RecordedError, ReplayResult, RetryBudget, RetryBudgetUse, Role, Skipped, Stats, Subscription,
    SubscriptionHealth, TakenJob, TokenInfo, Workflow, WorkflowStep,
};
pub use request::{
    CancelSelection, DeadSelection, DeliveryFilter, Failure, JobFilter, NewJob, NewToken,
    OnDuplicate, OnParentDead, Outcome, Parent, QueueUpdate, ReplayDead, ReplayDeliveries,
    RetryBudgetSettings, RotateSecret, SubscriptionSettings, Take,
};
pub use schedule::{
    Missed, NewSchedule, Overlap, Schedule, SchedulePreview, ScheduledJob, Tick, TickCounts, Ticks,
};
pub use stream::{DEFAULT_IDLE_TIMEOUT, JobStream};
pub use tls::install_crypto_provider;
pub use worker::{
    Job, JobError, OutcomeExt, UnknownTypes, Worker, WorkerBuilder, WorkerHandle, WorkerStats,
    default_name, shutdown_signal,
};
