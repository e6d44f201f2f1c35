//! The model shared by the engine, the stores and the API: what a job is, its states, and the
//! errors recorded on it; subscriptions and their deliveries. Stored types live here; request
//! and response shapes live in `api`.

pub mod endpoint;
mod ids;
mod job;
pub mod payload;
mod policy;
pub mod project;
pub mod schedule;
pub mod subscription;
pub mod timetable;
mod trace;

pub use endpoint::{Breaker, BreakerState, EndpointState, Pause};
pub use ids::{ClaimId, JobId, LeaseToken, MAX_EXACT_INTEGER, SubscriptionId};
pub use job::{ErrorEntry, Held, Job, JobState, NewJob, Status};
pub use policy::StoredPolicy;
pub use schedule::{JobTemplate, Missed, Overlap, Schedule, TickCounts};
pub use subscription::{
    Attempt, AttemptResult, DeliveryPayload, EnvelopeFormat, HealthMarks, RetryBudget,
    Subscription, Trigger,
};
pub use trace::{MAX_TRACEPARENT_LEN, check_traceparent};
