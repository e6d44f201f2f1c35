//! The model shared by the engine, the stores and the API: what a job is, its states, and the
//! errors recorded on it; subscriptions and their deliveries. Stored types live here; request
//! and response shapes live in `api`.

mod job;
pub mod payload;
mod policy;
pub mod subscription;

pub use job::{ClaimId, ErrorEntry, Held, Job, JobId, JobState, LeaseToken, NewJob, Status};
pub use policy::StoredPolicy;
pub use subscription::{
    Attempt, AttemptResult, DeliveryPayload, EnvelopeFormat, HealthMarks, Subscription,
    SubscriptionId,
};
