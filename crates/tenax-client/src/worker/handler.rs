//! Handlers by job type, with their payload types erased, and what becomes of a job whose
//! type has none.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use serde_json::value::RawValue;

use super::job::Job;
use super::outcome::JobError;
use super::shutdown::Shutdown;
use crate::model::TakenJob;

/// A handler's run: its result as JSON (`None`: it has none), or its error.
pub(crate) type HandlerFuture =
    Pin<Box<dyn Future<Output = Result<Option<Box<RawValue>>, JobError>> + Send>>;

/// A handler with its payload type erased: reads the payload, then runs. Given the worker's
/// stopping flag and the job's cancellation flag.
pub(crate) type Erased = Arc<dyn Fn(TakenJob, Shutdown, Shutdown) -> HandlerFuture + Send + Sync>;

pub(crate) fn erase<T, R, F, Fut, E>(handler: F) -> Erased
where
    T: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    F: Fn(Job<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
    E: Into<JobError>,
{
    let handler = Arc::new(handler);
    Arc::new(
        move |taken: TakenJob, stopping: Shutdown, cancelled: Shutdown| {
            let handler = handler.clone();
            Box::pin(async move {
                // A payload that does not fit the handler's type will not fit at the next attempt
                // either: dead at once (fix the code or the job, then replay it).
                let payload: T = serde_json::from_str(taken.payload.get()).map_err(|error| {
                    JobError::not_retryable(format!(
                        "the payload of job type {:?} does not fit {}: {error}",
                        taken.kind,
                        std::any::type_name::<T>()
                    ))
                    .with_source(error)
                })?;
                let (id, kind) = (taken.id, taken.kind.clone());
                let job = Job::new(taken, payload, stopping, cancelled);
                let value = (*handler)(job).await.map_err(Into::into)?;
                Ok(result_of(id, &kind, &value))
            })
        },
    )
}

/// A handler's returned value as the job's result: none when it serialises to `null` (`()`,
/// `None`), or cannot be serialised (the job ran: it completes, without it, and a warning
/// says why).
fn result_of(id: u64, kind: &str, value: &impl Serialize) -> Option<Box<RawValue>> {
    match serde_json::value::to_raw_value(value) {
        Ok(raw) if raw.get() == "null" => None,
        Ok(raw) => Some(raw),
        Err(error) => {
            tracing::warn!(job = id, kind, %error, "the handler's result cannot be serialised to JSON: the job completes without it");
            None
        }
    }
}

/// What a worker does with a job whose type has no handler (and no
/// [fallback](super::WorkerBuilder::fallback)); see [`WorkerBuilder::unknown_types`](super::WorkerBuilder::unknown_types).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnknownTypes {
    /// Fail it not retryable: dead at once, among the dead jobs where it shows (and can be
    /// replayed once a worker handles the type), instead of retried unseen for the policy's
    /// weeks. The default.
    #[default]
    Dead,
    /// Fail it with a retry: its policy decides when it runs again (for a queue shared with
    /// workers of other versions, which may know the type).
    Retry,
}

/// The handlers of a worker.
#[derive(Default, Clone)]
pub(crate) struct Registry {
    by_kind: BTreeMap<String, Erased>,
    fallback: Option<Erased>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("kinds", &self.by_kind.keys().collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl Registry {
    /// Adds a handler; false if the type already has one.
    pub fn add(&mut self, kind: String, handler: Erased) -> bool {
        if self.by_kind.contains_key(&kind) {
            return false;
        }
        self.by_kind.insert(kind, handler);
        true
    }

    /// Sets the handler of every type without one of its own; false if one was set.
    pub fn set_fallback(&mut self, handler: Erased) -> bool {
        let first = self.fallback.is_none();
        self.fallback = Some(handler);
        first
    }

    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty() && self.fallback.is_none()
    }

    /// Whether a handler takes every type without one of its own.
    pub fn has_fallback(&self) -> bool {
        self.fallback.is_some()
    }

    pub fn kinds(&self) -> Vec<&str> {
        self.by_kind.keys().map(String::as_str).collect()
    }

    /// The handler of a job: its type's, or the fallback.
    pub fn get(&self, kind: &str) -> Option<&Erased> {
        self.by_kind.get(kind).or(self.fallback.as_ref())
    }

    /// The types this worker handles, quoted, for a log line or a message.
    pub fn handled(&self) -> String {
        let handled = self.kinds();
        if handled.is_empty() {
            return "none".to_owned();
        }
        handled
            .iter()
            .map(|k| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The failure of a job whose type has no handler.
    pub fn no_handler(&self, kind: &str, unknown: UnknownTypes) -> JobError {
        let message = format!(
            "no handler for job type {kind:?} in this worker (it handles: {})",
            self.handled()
        );
        let error = match unknown {
            UnknownTypes::Dead => JobError::not_retryable(message),
            UnknownTypes::Retry => JobError::retry(message),
        };
        error.with_detail(json!({"type": kind, "handled": self.kinds()}))
    }
}
