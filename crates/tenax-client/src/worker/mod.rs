//! The worker runtime: [`Worker`] runs handlers for the jobs of some queues.
//!
//! How it works:
//!
//! - **Taking.** One streaming take (`POST /api/take/stream`) with `max = concurrency`: the
//!   server pushes jobs as they become ready and never holds more than `concurrency` leased to
//!   the worker, so no job waits in a local buffer while its lease runs. A stream that breaks
//!   or goes silent (the server sends a keep-alive line every second) is opened again, with a
//!   backoff.
//! - **Running.** Each job gets a supervisor task, which runs the handler in a task of its own
//!   (a panic is caught there and fails the job), at most `concurrency` at once.
//! - **Heartbeats.** While a job is held, its supervisor extends the lease every
//!   `heartbeat_every` (default: half the lease), so a handler may run longer than its lease.
//!   A heartbeat that finds the lease gone marks the job lost: its result is not reported.
//! - **Acknowledgements.** Completions are batched (`POST /api/jobs/complete`), flushed after
//!   `ack_interval`, at `ack_batch` jobs, at once when no other job is undecided, and at
//!   shutdown. Failures are reported at once, with their outcome.
//! - **Shutdown** ([`WorkerHandle::shutdown`], or the future given to [`Worker::run_until`]):
//!   no new job starts; running handlers get `shutdown_timeout` to finish, then are stopped
//!   (their futures dropped); completions are flushed; then the stream is closed, which puts
//!   every job it still holds (received but not started, or stopped) back to ready at once
//!   without using an attempt. Nothing is lost: every job ends completed, failed by its
//!   handler, or back in the queue.
//! - **Types without a handler.** A job whose type has no handler (and no fallback) fails not
//!   retryable, so it is dead at once and shows, with a message naming the types this worker
//!   handles; [`WorkerBuilder::unknown_types`] lets its policy retry it instead.
//! - **Logging** (through `tracing`): the start (server, queues, concurrency, types), each
//!   job's outcome (INFO: completed and how long it ran, failed and when it runs again,
//!   snoozed; WARN: dead; ERROR: a type without a handler), and the stop with the counts.
//!   Past 10 outcomes in a second, a summary every 5 s replaces the line per job, until a 5 s
//!   window averages 10 a second or fewer.

mod acks;
mod handler;
mod job;
mod outcome;
mod outcome_log;
mod shutdown;
mod stats;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use acks::Completion;
use futures_util::StreamExt as _;
use handler::Registry;
pub use handler::UnknownTypes;
pub use job::Job;
pub use outcome::{JobError, OutcomeExt};
use outcome_log::{FailedBy, OutcomeLog};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use shutdown::Shutdown;
pub use shutdown::{WorkerHandle, shutdown_signal};
pub use stats::WorkerStats;
use stats::{Counters, add};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::model::{Lease, TakenJob};
use crate::request::{Failure, Take};

/// A stream that sends nothing for this long is taken for dead (the server writes a line at
/// least every second).
const STREAM_IDLE: Duration = Duration::from_secs(10);

/// How often a failure report is tried when the server does not answer.
const REPORT_TRIES: u32 = 5;

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    queues: Vec<String>,
    concurrency: usize,
    lease: Duration,
    heartbeat_every: Duration,
    pub(crate) ack_interval: Duration,
    pub(crate) ack_batch: usize,
    shutdown_timeout: Duration,
    unknown_types: UnknownTypes,
}

/// Settings and handlers of a [`Worker`].
///
/// ```no_run
/// # async fn example() -> Result<(), tenax_client::Error> {
/// use std::time::Duration;
/// use tenax_client::{Client, Job, JobError, Worker};
///
/// #[derive(serde::Deserialize)]
/// struct Email { to: String }
///
/// let worker = Worker::builder(Client::from_env()?)
///     .queue("emails")
///     .concurrency(8)
///     .lease(Duration::from_secs(30))
///     .handler("email.send", |job: Job<Email>| async move {
///         println!("to {}", job.payload.to);
///         Ok::<_, JobError>(())
///     })
///     .build()?;
/// let stats = worker.run_until(tenax_client::shutdown_signal()).await?;
/// println!("{} jobs completed", stats.completed);
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built and run"]
pub struct WorkerBuilder {
    client: Client,
    /// The name it gives the server; `None`: the client's, else [`default_name`].
    name: Option<String>,
    queues: Vec<String>,
    concurrency: usize,
    lease: Duration,
    heartbeat_every: Option<Duration>,
    ack_interval: Duration,
    ack_batch: usize,
    shutdown_timeout: Duration,
    unknown_types: UnknownTypes,
    registry: Registry,
    problems: Vec<String>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("name", &self.name)
            .field("queues", &self.queues)
            .field("concurrency", &self.concurrency)
            .field("lease", &self.lease)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// The name the worker gives the server with each take, heartbeat and acknowledgement
    /// (`X-Tenax-Worker`), under which `GET /api/cluster` lists it: 1 to 128 visible ASCII
    /// characters or spaces. Default: the client's own ([`Client::with_worker`]), else
    /// `<hostname>-<pid>` ([`default_name`]).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Takes jobs of this queue too (at least one is needed).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queues.push(queue.into());
        self
    }

    /// Takes jobs of these queues too, best job first across all of them.
    pub fn queues<S: Into<String>>(mut self, queues: impl IntoIterator<Item = S>) -> Self {
        self.queues.extend(queues.into_iter().map(Into::into));
        self
    }

    /// Handlers run at once, and jobs held leased at once: 1 to 1000 (default 10).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// The lease of each job (default 30 s; at least 500 ms, at most the server's
    /// `--max-lease`). Heartbeats renew it while the handler runs.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often a held job's lease is renewed (default: half the lease; below the lease).
    pub fn heartbeat_every(mut self, every: Duration) -> Self {
        self.heartbeat_every = Some(every);
        self
    }

    /// How long a completion may wait for others to share its request (default 50 ms).
    pub fn ack_interval(mut self, interval: Duration) -> Self {
        self.ack_interval = interval;
        self
    }

    /// Most completions in one request: 1 to 10 000 (default 100).
    pub fn ack_batch(mut self, batch: usize) -> Self {
        self.ack_batch = batch;
        self
    }

    /// How long running handlers may take to finish once a shutdown is asked for (default
    /// 25 s): then they are stopped and their jobs go back to the queue.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Runs `handler` for jobs of type `kind`, with the payload read as `T` (a payload that
    /// does not fit makes the job dead: no retry would change it).
    ///
    /// `T` is read with serde, which ignores fields the type does not have (a producer may add
    /// one before every worker knows it) unless the type says `#[serde(deny_unknown_fields)]`;
    /// a missing field without `#[serde(default)]` does not fit.
    ///
    /// The handler's error chooses the outcome: see [`JobError`]. Returning `Ok(value)`
    /// completes the job, with `value` as its result ([`JobInfo::result`](crate::JobInfo),
    /// serialised to JSON) unless it serialises to `null` (as `()` does: `Ok(())` completes
    /// it without one). A result the server refuses (over its payload limit), or that cannot
    /// be serialised, is left out: the job completes without it, and the worker logs why.
    pub fn handler<T, R, F, Fut, E>(mut self, kind: impl Into<String>, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        F: Fn(Job<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<R, E>> + Send + 'static,
        E: Into<JobError>,
    {
        let kind = kind.into();
        if !self.registry.add(kind.clone(), handler::erase(handler)) {
            self.problems
                .push(format!("handler: job type {kind:?} has two handlers"));
        }
        self
    }

    /// Runs `handler` for every job whose type has no handler of its own (without one, such
    /// a job fails with a message naming the types this worker handles: see
    /// [`unknown_types`](Self::unknown_types)).
    pub fn fallback<T, R, F, Fut, E>(mut self, handler: F) -> Self
    where
        T: DeserializeOwned + Send + 'static,
        R: Serialize + Send + 'static,
        F: Fn(Job<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<R, E>> + Send + 'static,
        E: Into<JobError>,
    {
        if !self.registry.set_fallback(handler::erase(handler)) {
            self.problems
                .push("fallback: there are two fallback handlers".to_owned());
        }
        self
    }

    /// What becomes of a job whose type has no handler (and no fallback): dead at once
    /// ([`UnknownTypes::Dead`], the default), or retried by its policy
    /// ([`UnknownTypes::Retry`]). Either way it fails with `no handler for job type "x" in
    /// this worker (it handles: …)`, logged at ERROR.
    pub fn unknown_types(mut self, unknown: UnknownTypes) -> Self {
        self.unknown_types = unknown;
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<Worker> {
        let config = |message: String| Err(Error::Config(message));
        if let Some(problem) = self.problems.first() {
            return config(problem.clone());
        }
        if self.queues.is_empty() {
            return config("queue: a worker needs at least one queue".to_owned());
        }
        if !(1..=1000).contains(&self.concurrency) {
            return config(format!(
                "concurrency: must be from 1 to 1000, got {}",
                self.concurrency
            ));
        }
        if self.lease < Duration::from_millis(500) {
            return config(format!(
                "lease: must be at least 500 ms, got {:?}",
                self.lease
            ));
        }
        let heartbeat_every = self.heartbeat_every.unwrap_or(self.lease / 2);
        if heartbeat_every.is_zero() || heartbeat_every >= self.lease {
            return config(format!(
                "heartbeat_every: must be above 0 and below the lease ({:?}), got {heartbeat_every:?}",
                self.lease
            ));
        }
        if !(1..=10_000).contains(&self.ack_batch) {
            return config(format!(
                "ack_batch: must be from 1 to 10000, got {}",
                self.ack_batch
            ));
        }
        if self.registry.is_empty() {
            return config(
                "handler: register at least one handler (or a fallback) before building the worker"
                    .to_owned(),
            );
        }
        let client = match (&self.name, self.client.worker()) {
            (Some(name), _) => self.client.with_worker(name)?,
            (None, Some(_)) => self.client,
            (None, None) => self.client.with_worker(&default_name())?,
        };
        let counters = Arc::new(Counters::default());
        let handle = WorkerHandle::new(counters.clone());
        let inner = Inner {
            client,
            settings: Settings {
                queues: self.queues,
                concurrency: self.concurrency,
                lease: self.lease,
                heartbeat_every,
                ack_interval: self.ack_interval,
                ack_batch: self.ack_batch,
                shutdown_timeout: self.shutdown_timeout,
                unknown_types: self.unknown_types,
            },
            outcomes: OutcomeLog::new(self.registry.handled()),
            registry: self.registry,
            counters,
            undecided: AtomicUsize::new(0),
            slots: Arc::new(Semaphore::new(self.concurrency)),
            stopping: handle.stopping(),
            hurrying: handle.hurrying(),
        };
        Ok(Worker {
            inner: Arc::new(inner),
            handle,
        })
    }
}

/// The name a worker gives the server unless told another: `<hostname>-<pid>`, the host's name
/// as the kernel has it (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, `$COMPUTERNAME`, else
/// `localhost`), kept to what a header may carry.
pub fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    let host: String = host
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .take(100)
        .collect();
    format!("{host}-{}", std::process::id())
}

/// Runs handlers for the jobs of some queues; see the [module documentation](self) for how.
#[derive(Debug)]
pub struct Worker {
    inner: Arc<Inner>,
    handle: WorkerHandle,
}

/// What the worker's tasks share.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) settings: Settings,
    registry: Registry,
    pub(crate) outcomes: OutcomeLog,
    pub(crate) counters: Arc<Counters>,
    /// Jobs received whose outcome is not decided yet (waiting to start, or running). The
    /// acknowledger flushes at once when it is 0: no other completion could join the batch.
    pub(crate) undecided: AtomicUsize,
    /// One permit per handler allowed to run. The stream alone bounds the jobs leased to it;
    /// after a reconnection, handlers of the old stream may still be running.
    slots: Arc<Semaphore>,
    stopping: Shutdown,
    hurrying: Shutdown,
}

/// How a stream connection ended.
enum StreamEnd {
    /// A shutdown was asked for; the connection is still open (it holds the running jobs).
    Stopping(OpenStream),
    /// The connection broke or the server closed it: the server released its jobs.
    Broken,
}

/// A stream connection, and the flag its jobs' supervisors watch to learn that it closed
/// (then the jobs not started yet are no longer this worker's).
struct OpenStream {
    stream: crate::stream::JobStream,
    closed: watch::Sender<bool>,
}

impl Worker {
    /// A worker that takes jobs with `client`; add queues and handlers, then build it.
    pub fn builder(client: Client) -> WorkerBuilder {
        WorkerBuilder {
            client,
            name: None,
            queues: Vec::new(),
            concurrency: 10,
            lease: Duration::from_secs(30),
            heartbeat_every: None,
            ack_interval: Duration::from_millis(50),
            ack_batch: 100,
            shutdown_timeout: Duration::from_secs(25),
            unknown_types: UnknownTypes::Dead,
            registry: Registry::default(),
            problems: Vec::new(),
        }
    }

    /// A handle to stop the worker and read its counters, from anywhere.
    pub fn handle(&self) -> WorkerHandle {
        self.handle.clone()
    }

    /// Runs until `signal` resolves (for example [`shutdown_signal`]) or
    /// [`WorkerHandle::shutdown`] is called, then shuts down gracefully.
    pub async fn run_until<F: Future>(self, signal: F) -> Result<WorkerStats> {
        let handle = self.handle();
        let run = self.run();
        tokio::pin!(run);
        tokio::select! {
            result = &mut run => return result,
            _ = signal => handle.shutdown(),
        }
        run.await
    }

    /// Runs until [`WorkerHandle::shutdown`] is called, then shuts down gracefully and
    /// returns the counters. An error means the job stream was refused for good (a bad queue
    /// name, a lease over the server's `--max-lease`, a token that may not take from these
    /// queues): the worker still shut down gracefully first.
    pub async fn run(self) -> Result<WorkerStats> {
        let Worker { inner, handle } = self;
        let settings = &inner.settings;
        tracing::info!(
            url = inner.client.url(),
            queues = %settings.queues.join(","),
            types = %inner.registry.kinds().join(","),
            any_type = inner.registry.has_fallback(),
            unknown_types = ?settings.unknown_types,
            concurrency = settings.concurrency,
            "worker started"
        );
        let (completions, acknowledged) = mpsc::unbounded_channel();
        let acknowledger = tokio::spawn(acks::run(inner.clone(), acknowledged));
        // Writes the summary of job outcomes when one is due, also once the load stopped.
        let summaries = AbortOnDrop(tokio::spawn({
            let inner = inner.clone();
            async move {
                loop {
                    tokio::time::sleep(outcome_log::TICK).await;
                    inner.outcomes.tick();
                }
            }
        }));
        let mut supervisors = JoinSet::new();
        let mut stopping = inner.stopping.clone();
        let take = Take::queues(settings.queues.iter().cloned())
            .max(u32::try_from(settings.concurrency).unwrap_or(1000))
            .lease(settings.lease);
        let mut backoff = Backoff::default();
        let mut refused: Option<Error> = None;
        let mut kept: Option<OpenStream> = None;
        while !stopping.is_set() {
            let opened = tokio::select! {
                opened = inner.client.stream(&take) => opened,
                () = stopping.wait() => break,
            };
            let stream = match opened {
                Ok(stream) => stream.idle_timeout(STREAM_IDLE),
                Err(error) if !error.is_transient() => {
                    tracing::error!(%error, "the job stream was refused");
                    refused = Some(error);
                    break;
                }
                Err(error) => {
                    add(&inner.counters.stream_errors, 1);
                    let delay = backoff.next();
                    tracing::warn!(%error, delay = %shown(delay), "cannot open the job stream; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => continue,
                        () = stopping.wait() => break,
                    }
                }
            };
            let open = OpenStream {
                stream,
                closed: watch::channel(false).0,
            };
            match read_stream(&inner, open, &mut supervisors, &completions, &mut backoff).await {
                StreamEnd::Stopping(open) => {
                    kept = Some(open);
                    break;
                }
                StreamEnd::Broken => {
                    add(&inner.counters.stream_errors, 1);
                    let delay = backoff.next();
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = stopping.wait() => break,
                    }
                }
            }
        }
        handle.shutdown();
        drain(&inner, &handle, &mut supervisors).await;
        drop(completions);
        if acknowledger.await.is_err() {
            tracing::error!("the acknowledger failed");
        }
        // Closing the connection puts what the stream still holds back to ready.
        if let Some(open) = kept {
            drop(open.stream);
            open.closed.send_replace(true);
        }
        drop(summaries);
        inner.outcomes.flush();
        let stats = handle.stats();
        tracing::info!(
            completed = stats.completed,
            failed = stats.failed,
            returned = stats.returned,
            abandoned = stats.abandoned,
            lost = stats.lost,
            "worker stopped"
        );
        match refused {
            Some(error) => Err(error),
            None => Ok(stats),
        }
    }
}

/// Reads one stream connection until it ends or a shutdown is asked for, starting a
/// supervisor for every job.
async fn read_stream(
    inner: &Arc<Inner>,
    mut open: OpenStream,
    supervisors: &mut JoinSet<()>,
    completions: &mpsc::UnboundedSender<Completion>,
    backoff: &mut Backoff,
) -> StreamEnd {
    let mut stopping = inner.stopping.clone();
    loop {
        tokio::select! {
            biased;
            () = stopping.wait() => return StreamEnd::Stopping(open),
            next = open.stream.next() => match next {
                Some(Ok(job)) => {
                    backoff.reset();
                    add(&inner.counters.received, 1);
                    inner.undecided.fetch_add(1, Ordering::SeqCst);
                    // Boxed: the supervisor's future is large (some KB), and a task holding
                    // it inline copies it when it starts and when it ends.
                    supervisors.spawn(Box::pin(supervise(
                        inner.clone(),
                        job,
                        open.closed.subscribe(),
                        completions.clone(),
                    )));
                }
                Some(Err(error)) => {
                    tracing::warn!(%error, "the job stream broke; opening it again");
                    break;
                }
                None => {
                    tracing::warn!("the server ended the job stream; opening it again");
                    break;
                }
            },
            Some(ended) = supervisors.join_next(), if !supervisors.is_empty() => log_supervisor(ended),
        }
    }
    drop(open.stream);
    open.closed.send_replace(true);
    StreamEnd::Broken
}

fn log_supervisor(ended: std::result::Result<(), tokio::task::JoinError>) {
    if let Err(error) = ended {
        tracing::error!(%error, "a job supervisor failed");
    }
}

/// Waits for running handlers until the shutdown timeout, then stops those left.
async fn drain(inner: &Inner, handle: &WorkerHandle, supervisors: &mut JoinSet<()>) {
    let running = inner.settings.concurrency - inner.slots.available_permits();
    tracing::info!(
        running,
        timeout = %shown(inner.settings.shutdown_timeout),
        "stopping: no new jobs; waiting for running handlers"
    );
    let deadline = tokio::time::sleep(inner.settings.shutdown_timeout);
    tokio::pin!(deadline);
    let hurrying = inner.hurrying.clone();
    loop {
        tokio::select! {
            ended = supervisors.join_next() => match ended {
                Some(ended) => log_supervisor(ended),
                None => return,
            },
            () = &mut deadline, if !hurrying.is_set() => {
                tracing::warn!(
                    timeout = %shown(inner.settings.shutdown_timeout),
                    "handlers still running at the shutdown deadline: stopping them; their jobs go back to the queue"
                );
                handle.shutdown_now();
            }
        }
    }
}

/// How a supervised job ended before its outcome was reported.
enum Ending {
    /// The handler returned (or panicked) after running this long; with its result, if any.
    Finished(
        std::result::Result<Option<Box<RawValue>>, JobError>,
        Duration,
    ),
    /// No handler takes the job's type: the failure to report.
    NoHandler(JobError),
    /// Not started: a shutdown came first (the stream's close gives it back).
    NotStarted,
    /// Not started: its stream closed, and the server took it back.
    StreamClosed,
    /// Still running at the shutdown deadline: stopped.
    Abandoned,
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Holds one job from its receipt to its outcome: waits for a slot, runs the handler in a
/// task of its own, heartbeats meanwhile, then reports.
async fn supervise(
    inner: Arc<Inner>,
    job: TakenJob,
    closed: watch::Receiver<bool>,
    completions: mpsc::UnboundedSender<Completion>,
) {
    let lease = job.lease();
    let kind = job.kind.clone();
    let lost = AtomicBool::new(false);
    // Set by a heartbeat that answers that the job was cancelled; its handler is told.
    let (cancel, cancelled) = Shutdown::flag();
    let ending = {
        let beats = heartbeats(&inner, lease, &lost, &cancel);
        tokio::pin!(beats);
        tokio::select! {
            ending = run_job(&inner, job, closed, cancelled.clone()) => ending,
            never = &mut beats => match never {},
        }
    };
    inner.undecided.fetch_sub(1, Ordering::SeqCst);
    let lost = lost.load(Ordering::SeqCst);
    // A cancelled job's handler stopped: whatever it returned, the worker reports a failure,
    // which the server finishes as cancelled.
    let ending = match ending {
        Ending::Finished(result, ran) if cancelled.is_set() && !lost => {
            let error = result.err().unwrap_or_else(|| {
                JobError::retry("the job was cancelled while it ran; its handler stopped")
            });
            report_failure(&inner, lease, &kind, FailedBy::Cancelled(ran), &error).await;
            return;
        }
        ending => ending,
    };
    match ending {
        Ending::NotStarted => add(&inner.counters.returned, 1),
        Ending::StreamClosed => {}
        Ending::Abandoned => add(&inner.counters.abandoned, 1),
        Ending::Finished(result, _) if lost => {
            add(&inner.counters.lost, 1);
            tracing::warn!(
                job = lease.id,
                kind,
                succeeded = result.is_ok(),
                "the job's lease was lost while it ran: its result is not reported"
            );
        }
        Ending::NoHandler(error) => {
            report_failure(&inner, lease, &kind, FailedBy::NoHandler, &error).await;
        }
        Ending::Finished(Ok(result), ran) => {
            add(&inner.counters.succeeded, 1);
            let completion = Completion {
                lease,
                kind,
                ran,
                result,
            };
            if completions.send(completion).is_err() {
                tracing::error!(
                    job = lease.id,
                    "the acknowledger is gone: the job will run again"
                );
            }
        }
        Ending::Finished(Err(error), ran) => {
            report_failure(&inner, lease, &kind, FailedBy::Handler(ran), &error).await;
        }
    }
}

async fn run_job(
    inner: &Inner,
    job: TakenJob,
    mut closed: watch::Receiver<bool>,
    cancelled: Shutdown,
) -> Ending {
    let mut stopping = inner.stopping.clone();
    let slot = tokio::select! {
        biased;
        () = stopping.wait() => return Ending::NotStarted,
        _ = closed.wait_for(|c| *c) => return Ending::StreamClosed,
        slot = inner.slots.clone().acquire_owned() => match slot {
            Ok(slot) => slot,
            Err(_) => return Ending::NotStarted,
        },
    };
    if stopping.is_set() {
        return Ending::NotStarted;
    }
    let Some(handler) = inner.registry.get(&job.kind).cloned() else {
        let error = inner
            .registry
            .no_handler(&job.kind, inner.settings.unknown_types);
        return Ending::NoHandler(error);
    };
    let started = Instant::now();
    let mut task = AbortOnDrop(tokio::spawn(handler(
        job,
        inner.stopping.clone(),
        cancelled,
    )));
    let mut hurrying = inner.hurrying.clone();
    let joined = tokio::select! {
        joined = &mut task.0 => joined,
        () = hurrying.wait() => return Ending::Abandoned,
    };
    drop(slot);
    let ran = started.elapsed();
    match joined {
        Ok(result) => Ending::Finished(result, ran),
        Err(error) if error.is_panic() => {
            let panic = error.into_panic();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Ending::Finished(
                Err(JobError::retry(format!("the handler panicked: {message}"))
                    .with_detail(serde_json::json!({"panic": message}))),
                ran,
            )
        }
        Err(_) => Ending::Abandoned,
    }
}

/// Renews a job's lease every `heartbeat_every` while it is held. Never returns: a lost lease
/// is recorded in `lost`, and the beats stop. A heartbeat that answers that the job was
/// cancelled sets `cancel`, which its handler sees (`Job::cancelled`); the beats go on, so
/// that the lease is held until the handler stops.
async fn heartbeats(
    inner: &Inner,
    lease: Lease,
    lost: &AtomicBool,
    cancel: &watch::Sender<bool>,
) -> Infallible {
    let settings = &inner.settings;
    let mut next = Instant::now() + settings.heartbeat_every;
    loop {
        tokio::time::sleep_until(next).await;
        match inner.client.heartbeat(lease, Some(settings.lease)).await {
            Ok(extended) => {
                if extended.cancelled && !*cancel.borrow() {
                    tracing::info!(
                        job = lease.id,
                        "the job was cancelled; its handler is told to stop"
                    );
                    cancel.send_replace(true);
                }
                add(&inner.counters.heartbeats, 1);
                next = Instant::now() + settings.heartbeat_every;
            }
            Err(error) if error.is_gone() => {
                tracing::warn!(job = lease.id, %error, "the job lost its lease");
                lost.store(true, Ordering::SeqCst);
                return std::future::pending().await;
            }
            Err(error) => {
                let soon = (settings.heartbeat_every / 4).min(Duration::from_secs(1));
                tracing::warn!(job = lease.id, %error, "a heartbeat failed; trying again");
                next = Instant::now() + soon;
            }
        }
    }
}

/// Reports a job's failure with its outcome, trying again while the server does not answer.
async fn report_failure(inner: &Inner, lease: Lease, kind: &str, by: FailedBy, error: &JobError) {
    let mut failure = error.to_failure();
    let mut plain = false;
    let mut delay = Duration::from_millis(200);
    for _ in 0..REPORT_TRIES {
        match inner.client.fail(lease, &failure).await {
            Ok(result) => {
                add(&inner.counters.failed, 1);
                inner.outcomes.failed(lease.id, kind, by, error, &result);
                return;
            }
            Err(refused) if refused.is_gone() => {
                add(&inner.counters.lost, 1);
                tracing::warn!(job = lease.id, %refused, "cannot report the job's failure: its lease is gone");
                return;
            }
            Err(refused) if refused.is_invalid() && !plain => {
                // The report itself was refused (a detail the server cannot store, a retry
                // time too far ahead): report the failure plainly, with the reason.
                tracing::error!(job = lease.id, %refused, "the failure report was refused; sending it plainly");
                failure = Failure::new(format!("{} (report refused: {refused})", error.message()));
                plain = true;
            }
            Err(broken) if broken.is_transient() => {
                tracing::warn!(job = lease.id, %broken, "cannot report the job's failure; trying again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(refused) => {
                tracing::error!(job = lease.id, %refused, "the failure report was refused; the lease will expire");
                return;
            }
        }
    }
    tracing::error!(
        job = lease.id,
        "gave up reporting the job's failure; its lease will expire"
    );
}

/// Delays between attempts to open the stream: 200 ms doubling to 5 s, reset by a job.
#[derive(Debug, Default)]
struct Backoff {
    current: Option<Duration>,
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let next = match self.current {
            None => Duration::from_millis(200),
            Some(current) => (current * 2).min(Duration::from_secs(5)),
        };
        self.current = Some(next);
        next
    }

    fn reset(&mut self) {
        self.current = None;
    }
}

/// A duration in a log line as one would write it (`1m 30s`, `250ms`), to the millisecond.
fn shown(duration: Duration) -> String {
    let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}
