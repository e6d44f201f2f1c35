//! Handlers by job type, with their payload types erased.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::json;

use super::job::Job;
use super::outcome::JobError;
use super::shutdown::Shutdown;
use crate::model::TakenJob;

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;

/// A handler with its payload type erased: reads the payload, then runs.
pub(crate) type Erased = Arc<dyn Fn(TakenJob, Shutdown) -> HandlerFuture + Send + Sync>;

pub(crate) fn erase<T, F, Fut, E>(handler: F) -> Erased
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Job<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Into<JobError>,
{
    let handler = Arc::new(handler);
    Arc::new(move |taken: TakenJob, stopping: Shutdown| {
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
            let job = Job::new(taken, payload, stopping);
            (*handler)(job).await.map_err(Into::into)
        })
    })
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

    /// The handler of a job: its type's, or the fallback; an error for a type without one.
    pub fn get(&self, kind: &str) -> Result<&Erased, JobError> {
        if let Some(handler) = self.by_kind.get(kind).or(self.fallback.as_ref()) {
            return Ok(handler);
        }
        let handled = self.kinds();
        let list = if handled.is_empty() {
            "none".to_owned()
        } else {
            handled
                .iter()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        // Retried by its policy: another worker, or a later version of this one, may know it.
        Err(JobError::retry(format!(
            "no handler for job type {kind:?} in this worker (it handles: {list})"
        ))
        .with_detail(json!({"type": kind, "handled": handled})))
    }
}
