//! The job model shared by the engine, the stores and the API: what a job is, its states, and
//! the errors recorded on it. Stored types live here; request and response shapes live in `api`.

mod job;

pub use job::{ErrorEntry, Job, JobId, JobState, NewJob, Status};
