//! The model shared by the engine, the stores and the API: what a job is, its states, and the
//! errors recorded on it; subscriptions and their deliveries. Stored types live here, and the
//! vocabulary of the engine's operations (queue settings, selections and pages, replays, leased
//! jobs); request and response shapes live in `api`, the seam's own mechanics in `store`.

pub mod activity;
pub mod backup;
pub mod batch;
mod cancel;
pub mod cluster;
pub mod dependency;
pub mod endpoint;
mod enqueue;
mod ids;
mod job;
mod lease;
pub mod payload;
mod peek;
mod policy;
pub mod pool;
pub mod project;
mod queue;
mod replay;
pub mod schedule;
mod selection;
pub mod subscription;
pub mod timetable;
mod trace;

pub use batch::{Batch, BatchCounts, BatchId, BatchState, NewBatch, Outcome};
pub use cancel::{CANCELLED_BY_REQUEST, CANCELLED_IN_FLIGHT, CancelOutcome, Cancelled};
pub use cluster::{LiveServer, ServerAbout, WorkerInfo, WorkerQueue};
pub use dependency::{After, OnParentDead};
pub use endpoint::{Breaker, BreakerState, EndpointState, Pause};
pub use enqueue::{Enqueued, KeyHolder, OnDuplicate};
pub use ids::{
    ClaimId, JobId, JobIdHasher, JobIdMap, LeaseToken, MAX_EXACT_INTEGER, SubscriptionId,
};
pub use job::{ErrorEntry, Held, Job, JobResult, JobState, NewJob, Status};
pub use lease::{Ack, ParentOutcome, TakenJob};
pub use peek::{Checked, JobPeek};
pub use policy::StoredPolicy;
pub use queue::{Backlog, DeadLetter, LimitUse, QueueConfig, QueueCounts, RateLimit, StatusSlots};
pub use replay::{NotReplayed, Replay, Replayed};
pub use schedule::{JobTemplate, Missed, Overlap, Schedule, TickCounts};
pub use selection::{JobFilter, Order, Page, Searched, Selection, TextQuery};
pub use subscription::{
    Attempt, AttemptResult, DeliveryPayload, EnvelopeFormat, HealthMarks, RetryBudget,
    Subscription, Trigger,
};
pub use trace::{MAX_TRACEPARENT_LEN, check_traceparent};
