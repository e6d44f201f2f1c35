//! A scoped token against what a request touches: the queue its route names, however it is
//! named (the path, the body, a job id, a subscription, a delivery, a filter), and the Zaqar
//! project it acts for. [`super::auth`] runs it for every scoped token before the handler.
//!
//! Invariants:
//! - Fail closed: a body or query that names a queue in a way this check cannot read (a wrong
//!   type, a field given twice, a list with a bad item) is refused here (400), never let through
//!   for the handler to read differently. The shapes below are read with the same decoder and
//!   id types the handlers use.
//! - A queue is judged by [`Principal::admits_queue`] only, so the project scope binds native
//!   routes as it binds Zaqar's.
//! - An id that names nothing (an unknown job or subscription) is left to the handler, which
//!   answers 404 for the scoped and the unscoped alike.

use axum::http::HeaderMap;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tenax_core::auth::Principal;
use tenax_core::auth::rules::{Rule, Target};
use tenax_core::engine::Engine;
use tenax_core::engine::EngineError;
use tenax_core::model::subscription::subscription_of_queue;
use tenax_core::model::{BatchId, JobId, SubscriptionId};

use super::error::ApiError;

/// Why a scope check did not let a request through.
#[derive(Debug)]
pub enum Denied {
    /// The token may not touch what the request names (403).
    Forbidden(String),
    /// What the request names could not be read (400).
    Invalid(ApiError),
    /// Finding what the request names failed.
    Failed(EngineError),
}

impl From<EngineError> for Denied {
    fn from(error: EngineError) -> Self {
        Self::Failed(error)
    }
}

impl From<ApiError> for Denied {
    fn from(error: ApiError) -> Self {
        Self::Invalid(error)
    }
}

/// The body of a request that names one queue (and, for a job, the jobs it waits for: the
/// token must be able to see each one, whose result the job's worker will be handed).
#[derive(Deserialize, Default)]
struct OneQueue {
    queue: Option<String>,
    after: Option<Vec<serde_json::Value>>,
}

impl OneQueue {
    /// The stored jobs its `after` names (`field` names it in errors).
    fn parents(&self, field: &str) -> Result<Vec<JobId>, Denied> {
        match &self.after {
            Some(values) => Ok(super::after::stored_ids(values, field)?),
            None => Ok(Vec::new()),
        }
    }
}

/// The body of a take.
#[derive(Deserialize, Default)]
struct Queues {
    #[serde(default)]
    queues: Vec<String>,
}

/// The body of a batch enqueue.
#[derive(Deserialize, Default)]
struct BatchJobs {
    #[serde(default)]
    jobs: Vec<OneQueue>,
}

/// The body of a batch completion.
#[derive(Deserialize, Default)]
struct Acks {
    #[serde(default)]
    jobs: Vec<Ack>,
}

#[derive(Deserialize, Default)]
struct Ack {
    id: JobId,
}

/// A dead-job selection.
#[derive(Deserialize, Default)]
struct DeadSelection {
    ids: Option<Vec<JobId>>,
    queue: Option<String>,
}

/// A new batch's body.
#[derive(Deserialize, Default)]
struct BatchBody {
    #[serde(default)]
    jobs: Vec<OneQueue>,
    on_complete: Option<OneQueue>,
    on_success: Option<OneQueue>,
}

/// A schedule's body.
#[derive(Deserialize, Default)]
struct ScheduleBody {
    job: Option<OneQueue>,
}

/// What a scope check looks at.
pub struct ScopeCheck<'a> {
    pub engine: &'a Engine,
    pub principal: &'a Principal,
    pub rule: Rule,
    pub params: &'a [(String, String)],
    pub headers: &'a HeaderMap,
    pub query: Option<&'a str>,
    pub body: &'a [u8],
}

impl ScopeCheck<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body read as `T`. An empty body is left to the handler (which refuses it where a
    /// body is needed), as is one that is not a JSON object: neither names a queue.
    fn body<T: DeserializeOwned + Default>(&self) -> Result<T, Denied> {
        let first = self.body.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') {
            return Ok(T::default());
        }
        Ok(super::extract::decode(self.body)?)
    }

    fn queue(&self, queue: &str) -> Result<(), Denied> {
        if self.principal.admits_queue(queue) {
            Ok(())
        } else {
            Err(Denied::Forbidden(self.principal.refusal(queue)))
        }
    }

    /// The queue of each job id (unknown ids are left to the handler, which answers 404).
    async fn jobs(&self, ids: &[JobId]) -> Result<(), Denied> {
        for peek in self.engine.peek(ids).await?.into_iter().flatten() {
            match subscription_of_queue(&peek.queue) {
                // A delivery is a job of its subscription's queue.
                Some(subscription) => self.subscription(subscription).await?,
                None => self.queue(&peek.queue)?,
            }
        }
        Ok(())
    }

    async fn subscription(&self, id: SubscriptionId) -> Result<(), Denied> {
        match self.engine.subscription(id).await? {
            Some(subscription) => self.queue(&subscription.queue),
            None => Ok(()),
        }
    }

    /// A path id; one that is not a number names nothing, and the handler refuses it.
    fn id<T: std::str::FromStr>(&self, name: &str) -> Option<T> {
        self.param(name).and_then(|id| id.parse().ok())
    }

    pub async fn check(&self) -> Result<(), Denied> {
        match self.rule.target {
            Target::Nothing | Target::Listing => Ok(()),
            Target::QueueInPath => self.queue(self.param("name").unwrap_or_default()),
            Target::QueueInBody => {
                let body = self.body::<OneQueue>()?;
                if let Some(queue) = &body.queue {
                    self.queue(queue)?;
                }
                self.jobs(&body.parents("after")?).await
            }
            Target::QueuesInBody => self
                .body::<Queues>()?
                .queues
                .iter()
                .try_for_each(|q| self.queue(q)),
            Target::JobQueuesInBody => {
                let body = self.body::<BatchJobs>()?;
                let mut parents = Vec::new();
                for (i, job) in body.jobs.iter().enumerate() {
                    if let Some(queue) = &job.queue {
                        self.queue(queue)?;
                    }
                    parents.extend(job.parents(&format!("jobs[{i}].after"))?);
                }
                self.jobs(&parents).await
            }
            Target::BatchQueuesInBody => {
                let body = self.body::<BatchBody>()?;
                body.jobs
                    .iter()
                    .chain(body.on_complete.iter())
                    .chain(body.on_success.iter())
                    .filter_map(|job| job.queue.as_deref())
                    .try_for_each(|q| self.queue(q))
            }
            Target::BatchInPath => {
                if let Some(id) = self.id::<BatchId>("id") {
                    if let Some(batch) = self.engine.batch(id).await? {
                        batch.spec.queues.iter().try_for_each(|q| self.queue(q))?;
                    }
                }
                self.body::<BatchJobs>()?
                    .jobs
                    .iter()
                    .filter_map(|job| job.queue.as_deref())
                    .try_for_each(|q| self.queue(q))
            }
            Target::JobInPath => match self.id::<JobId>("id") {
                Some(id) => self.jobs(&[id]).await,
                None => Ok(()),
            },
            Target::JobsInBody => {
                let ids: Vec<JobId> = self.body::<Acks>()?.jobs.iter().map(|a| a.id).collect();
                self.jobs(&ids).await
            }
            Target::QueueInQuery => self.queue_in_query(),
            Target::DeadSelection => {
                let selection = self.body::<DeadSelection>()?;
                let ids = selection.ids.unwrap_or_default();
                match selection.queue {
                    Some(queue) => self.queue(&queue)?,
                    None if ids.is_empty() => {
                        return Err(Denied::Forbidden(format!(
                            "this token ({}) may touch only some queues: name the jobs (ids) or \
                             a queue, not all",
                            self.principal.name
                        )));
                    }
                    None => {}
                }
                self.jobs(&ids).await
            }
            Target::ScheduleInPath => {
                let name = self.param("name").unwrap_or_default();
                if let Some(schedule) = self.engine.schedule(name).await? {
                    self.queue(&schedule.job.queue)?;
                }
                match self.body::<ScheduleBody>()?.job.and_then(|job| job.queue) {
                    Some(queue) => self.queue(&queue),
                    None => Ok(()),
                }
            }
            Target::SubscriptionInPath => match self.id::<SubscriptionId>("id") {
                Some(id) => self.subscription(id).await,
                None => Ok(()),
            },
            Target::DeliveryInPath => match self.id::<JobId>("id") {
                Some(id) => self.jobs(&[id]).await,
                None => Ok(()),
            },
            Target::ZaqarProject | Target::ZaqarQueue | Target::ZaqarTopic => self.zaqar(),
        }
    }

    /// `?queue=`, which a scoped token must give, once.
    fn queue_in_query(&self) -> Result<(), Denied> {
        let mut given = url::form_urlencoded::parse(self.query.unwrap_or_default().as_bytes())
            .filter(|(name, _)| name == "queue")
            .map(|(_, value)| value.into_owned());
        match (given.next(), given.next()) {
            (Some(queue), None) => self.queue(&queue),
            (Some(_), Some(_)) => Err(Denied::Invalid(ApiError::invalid(
                "queue",
                "must be given once",
            ))),
            (None, _) => Err(Denied::Forbidden(format!(
                "this token ({}) may touch only some queues: name one with ?queue=",
                self.principal.name
            ))),
        }
    }

    fn zaqar(&self) -> Result<(), Denied> {
        let project = super::zaqar::request::project_header(self.headers).unwrap_or_default();
        let project = project.as_str();
        // A missing or empty header is Zaqar's own 400, answered by the handler.
        if project.is_empty() {
            return Ok(());
        }
        if !self.principal.admits_project(project) {
            return Err(Denied::Forbidden(format!(
                "this token ({}) may not act for project {project:?}",
                self.principal.name
            )));
        }
        match (self.rule.target, self.param("queue_name")) {
            (Target::ZaqarQueue, Some(name)) => {
                self.queue(&super::zaqar::names::tenax_queue(project, name))
            }
            (Target::ZaqarTopic, _) => match self.param("topic_name") {
                // A bad name is Zaqar's own 400, answered by the handler.
                Some(name) => match super::zaqar::names::QueueRef::topic(project, name) {
                    Ok(topic) => self.queue(&topic.tenax),
                    Err(_) => Ok(()),
                },
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }
}
