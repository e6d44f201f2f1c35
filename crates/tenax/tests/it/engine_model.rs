//! A model of the engine's job state machine, checked against the real thing: random sequences
//! of operations run on an [`Engine`] with a manual clock and on a plain in-memory model
//! ([`Model`]), and after every step the two must agree on everything observable. The engine
//! runs on each store ([`Backend`]): the embedded store in a temporary directory, and
//! PostgreSQL on a fresh database per run on the test server (`tests/it/common/postgres.rs`).
//!
//! Operations: enqueue (now, in the past or in the future; any priority; the server's policy,
//! a policy of the job's own, or the server's with a retry limit), take (one or both queues,
//! a few at a time), heartbeat, fail (retryable or not), complete (each with the current lease
//! token, a stale one or a made-up one), a clock advance, a maintenance pass (promotions and
//! lease expiry, as the maintenance loop runs them), and replays of dead jobs (by id or by
//! queue, with or without a fresh attempt count).
//!
//! Compared after every step: each job's status, failures (its attempt count), run-at time,
//! finish time, number of recorded errors and lease end; the answer of the step itself (which
//! jobs a take leases, in priority-then-age order, with their attempt numbers and lease ends;
//! the errors of acks with a lost lease; a failure's next state; a replay's report); and the
//! counts per queue and status.
//!
//! Every policy is a fixed delay without jitter, so the model is exact. Leases end only by a
//! maintenance pass, as in the engine: until the pass, the holder of a lease whose time has
//! passed may still act on it (the job "may run elsewhere" only once it was returned).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{TestCaseError, TestRunner};
use serde_json::value::RawValue;
use tenax::storage::StoreConfig;
use tenax_core::clock::Clock;
use tenax_core::engine::{
    Conflict, Engine, EngineError, EngineSettings, Enqueue, FailureReport, Take, maintenance,
};
use tenax_core::model::{
    Ack, JobFilter, JobId, LeaseToken, NewJob, NotReplayed, OnDuplicate, QueueCounts, Replay,
    Replayed, Selection, Status, StoredPolicy,
};
use tenax_core::secrets::Keyring;
use tenax_embedded::EmbeddedOptions;
use tenax_policy::{Outcome, RetryPolicy, Shape};
use tenax_postgres::{Database, PostgresOptions};

/// Every run starts at this time (ms since the epoch).
const T0: u64 = 1_800_000_000_000;
const QUEUES: [&str; 2] = ["a", "b"];
/// The server's default policy: a fixed delay, this many retries.
const DEFAULT_DELAY_MS: u64 = 3_000;
const DEFAULT_RETRY_LIMIT: u32 = 2;
/// The longest heartbeats may hold one attempt, from its take.
const MAX_ATTEMPT_MS: u64 = 20_000;
/// Retention far longer than a run: nothing is purged.
const RETENTION_MS: u64 = 86_400_000;
/// Runs on the embedded store, and the most steps in one: about 10 s in a debug build.
const CASES: u32 = 128;
const STEPS: usize = 60;
/// Runs on PostgreSQL: fewer, because one costs about seven on the embedded store (a database
/// and its schema made for it, then a few round trips per job at every step, where the embedded
/// store answers from memory). 32 take about as long as the embedded store's 128, 10 to 15 s in
/// a debug build on 2 cores. The engine above is the same code on both; what PostgreSQL adds is
/// its store's answers, which the conformance suite checks case by case. `PROPTEST_CASES` asks
/// for more runs on both stores, for a longer search (600 on PostgreSQL: about 3.5 min).
const POSTGRES_CASES: u32 = 32;

use crate::common::postgres as postgres_server;

// --- operations ------------------------------------------------------------------------------

/// Which policy a new job goes by.
#[derive(Debug, Clone, Copy)]
enum PolicyPick {
    /// The server's default.
    Server,
    /// Its own: a fixed delay and a retry limit.
    Own { delay_ms: u64, limit: u32 },
    /// The server's curve with this retry limit (the API's `retry_limit`).
    Limit(u32),
}

/// Which lease token an ack carries.
#[derive(Debug, Clone, Copy)]
enum TokenPick {
    /// The job's latest (the current one while it is in flight).
    Latest,
    /// The first it was ever given (stale once it was taken again).
    Oldest,
    /// One never handed out.
    MadeUp,
}

/// Which job an operation acts on: one with the given status if there is one, else any.
#[derive(Debug, Clone)]
struct JobPick {
    status: Option<Status>,
    index: Index,
}

/// A job to enqueue.
#[derive(Debug, Clone)]
struct NewSpec {
    queue: usize,
    priority: i32,
    /// From now: negative is in the past.
    run_in_ms: i64,
    policy: PolicyPick,
}

#[derive(Debug, Clone)]
enum Op {
    /// A batch, stored all at once.
    Enqueue(Vec<NewSpec>),
    Take {
        queues: Vec<&'static str>,
        max: usize,
        lease_ms: u64,
    },
    Heartbeat {
        job: JobPick,
        token: TokenPick,
        lease_ms: u64,
    },
    Fail {
        job: JobPick,
        token: TokenPick,
        retryable: bool,
    },
    Complete {
        job: JobPick,
        token: TokenPick,
    },
    Advance {
        ms: u64,
    },
    Maintain,
    ReplayOne {
        job: JobPick,
        reset: bool,
    },
    ReplayAll {
        queue: Option<usize>,
        only_dead: bool,
        reset: bool,
    },
}

fn policy_pick() -> impl Strategy<Value = PolicyPick> {
    prop_oneof![
        2 => Just(PolicyPick::Server),
        2 => (prop::sample::select(vec![0u64, 1_000, 6_000]), 0..=2u32)
            .prop_map(|(delay_ms, limit)| PolicyPick::Own { delay_ms, limit }),
        1 => (0..=3u32).prop_map(PolicyPick::Limit),
    ]
}

fn token_pick() -> impl Strategy<Value = TokenPick> {
    prop_oneof![
        6 => Just(TokenPick::Latest),
        1 => Just(TokenPick::Oldest),
        1 => Just(TokenPick::MadeUp),
    ]
}

/// Mostly a job with `status`, sometimes any job.
fn job_pick(status: Status) -> impl Strategy<Value = JobPick> {
    let status = prop_oneof![4 => Just(Some(status)), 1 => Just(None)];
    (status, any::<Index>()).prop_map(|(status, index)| JobPick { status, index })
}

fn new_spec() -> impl Strategy<Value = NewSpec> {
    (
        0..QUEUES.len(),
        -1..=2i32,
        prop::sample::select(vec![-1_000i64, 0, 0, 1_000, 4_000, 15_000]),
        policy_pick(),
    )
        .prop_map(|(queue, priority, run_in_ms, policy)| NewSpec {
            queue,
            priority,
            run_in_ms,
            policy,
        })
}

fn op() -> impl Strategy<Value = Op> {
    let queues = prop::sample::select(vec![vec!["a"], vec!["b"], vec!["a", "b"], vec!["b", "a"]]);
    prop_oneof![
        4 => prop::collection::vec(new_spec(), 1..=3).prop_map(Op::Enqueue),
        4 => (queues, 1..=3usize, prop::sample::select(vec![2_000u64, 5_000, 10_000]))
            .prop_map(|(queues, max, lease_ms)| Op::Take {
                queues,
                max,
                lease_ms,
            }),
        2 => (
            job_pick(Status::InFlight),
            token_pick(),
            prop::sample::select(vec![1_000u64, 8_000, 30_000]),
        )
            .prop_map(|(job, token, lease_ms)| Op::Heartbeat {
                job,
                token,
                lease_ms,
            }),
        3 => (job_pick(Status::InFlight), token_pick(), prop::bool::weighted(0.8))
            .prop_map(|(job, token, retryable)| Op::Fail {
                job,
                token,
                retryable,
            }),
        3 => (job_pick(Status::InFlight), token_pick())
            .prop_map(|(job, token)| Op::Complete { job, token }),
        3 => prop::sample::select(vec![500u64, 1_000, 2_000, 5_000, 10_000, 25_000])
            .prop_map(|ms| Op::Advance { ms }),
        3 => Just(Op::Maintain),
        1 => (job_pick(Status::Dead), any::<bool>())
            .prop_map(|(job, reset)| Op::ReplayOne { job, reset }),
        1 => (
            prop::option::of(0..QUEUES.len()),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(queue, only_dead, reset)| Op::ReplayAll {
                queue,
                only_dead,
                reset,
            }),
    ]
}

// --- the model -------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    token: LeaseToken,
    expires_at_ms: u64,
    taken_at_ms: u64,
}

#[derive(Debug, Clone)]
struct ModelJob {
    queue: &'static str,
    priority: i32,
    status: Status,
    failures: u32,
    run_at_ms: u64,
    finished_at_ms: Option<u64>,
    errors: usize,
    /// While in flight.
    lease: Option<Lease>,
    /// Every lease token it was given, oldest first.
    tokens: Vec<LeaseToken>,
    delay_ms: u64,
    retry_limit: u32,
}

/// What the engine should be: the time, and every job by id.
#[derive(Debug, Default)]
struct Model {
    now: u64,
    jobs: BTreeMap<JobId, ModelJob>,
}

/// A lease token no take hands out (they start at the clock's milliseconds times 1 000).
fn made_up_token() -> LeaseToken {
    LeaseToken(7)
}

impl Model {
    /// The id of the job `pick` picks, if there are jobs.
    fn pick(&self, pick: &JobPick) -> Option<JobId> {
        let with_status: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| pick.status.is_none_or(|s| j.status == s))
            .map(|(id, _)| *id)
            .collect();
        let among = if with_status.is_empty() {
            self.jobs.keys().copied().collect()
        } else {
            with_status
        };
        if among.is_empty() {
            return None;
        }
        Some(among[pick.index.index(among.len())])
    }

    fn ack(&self, id: JobId, pick: TokenPick) -> Ack {
        let tokens = &self.jobs[&id].tokens;
        let token = match pick {
            TokenPick::Latest => tokens.last(),
            TokenPick::Oldest => tokens.first(),
            TokenPick::MadeUp => None,
        };
        Ack {
            id,
            lease: token.copied().unwrap_or_else(made_up_token),
        }
    }

    /// The lease `ack` may act on now, or the error the engine must answer: a lease ends at
    /// its expiry, whether or not the maintenance loop has ended it yet.
    fn check(&self, ack: Ack) -> Result<Lease, EngineError> {
        let job = &self.jobs[&ack.id];
        if job.status != Status::InFlight {
            return Err(EngineError::Conflict(Conflict::NotInFlight {
                id: ack.id,
                status: job.status,
            }));
        }
        match job.lease {
            Some(lease) if lease.token == ack.lease && lease.expires_at_ms > self.now => Ok(lease),
            _ => Err(EngineError::Conflict(Conflict::LeaseLost { id: ack.id })),
        }
    }

    /// The jobs a take of `queues` leases: ready ones, highest priority first, then oldest.
    fn takeable(&self, queues: &[&str], max: usize) -> Vec<JobId> {
        let mut ready: Vec<(i32, JobId)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.status == Status::Ready && queues.contains(&j.queue))
            .map(|(id, j)| (-j.priority, *id))
            .collect();
        ready.sort_unstable();
        ready.into_iter().take(max).map(|(_, id)| id).collect()
    }

    /// A failure reported at `now`.
    fn fail(&mut self, id: JobId, retryable: bool) {
        let now = self.now;
        let job = self.jobs.get_mut(&id).expect("a job");
        let failure = job.failures + 1;
        job.failures = failure;
        job.errors += 1;
        job.lease = None;
        if !retryable || failure > job.retry_limit {
            job.status = Status::Dead;
            job.finished_at_ms = Some(now);
        } else {
            job.run_at_ms = now + job.delay_ms;
            job.status = if job.run_at_ms > now {
                Status::Scheduled
            } else {
                Status::Ready
            };
        }
    }

    /// A maintenance pass: due jobs are ready; jobs whose lease has ended count a failure and
    /// are ready at once, or dead past their retry limit.
    fn maintain(&mut self) {
        let now = self.now;
        for job in self.jobs.values_mut() {
            if job.status == Status::Scheduled && job.run_at_ms <= now {
                job.status = Status::Ready;
            }
        }
        for job in self.jobs.values_mut() {
            let ended = job.lease.is_some_and(|l| l.expires_at_ms <= now);
            if job.status != Status::InFlight || !ended {
                continue;
            }
            job.lease = None;
            job.failures += 1;
            job.errors += 1;
            if job.failures > job.retry_limit {
                job.status = Status::Dead;
                job.finished_at_ms = Some(now);
            } else {
                job.status = Status::Ready;
                job.run_at_ms = now;
            }
        }
    }

    /// Replays dead job `id`.
    fn replay(&mut self, id: JobId, reset: bool) {
        let now = self.now;
        let job = self.jobs.get_mut(&id).expect("a job");
        job.status = Status::Ready;
        job.run_at_ms = now;
        job.finished_at_ms = None;
        if reset {
            job.failures = 0;
        }
    }

    /// Counts per queue with jobs, by name, in the order of [`Status::ALL`].
    fn counts(&self) -> Vec<QueueCounts> {
        let mut by_queue: BTreeMap<&str, tenax_core::model::StatusSlots> = BTreeMap::new();
        for job in self.jobs.values() {
            let slot = Status::ALL
                .iter()
                .position(|s| *s == job.status)
                .expect("a status");
            by_queue.entry(job.queue).or_default()[slot] += 1;
        }
        by_queue
            .into_iter()
            .map(|(queue, slots)| QueueCounts::from_slots(queue, slots))
            .collect()
    }
}

// --- the run ---------------------------------------------------------------------------------

fn fixed(delay_ms: u64, limit: u32) -> RetryPolicy {
    RetryPolicy::new(Shape::Fixed { delay_ms }).with_retry_limit(limit)
}

/// The store a run's engine uses.
#[derive(Debug, Clone, Copy)]
enum Backend {
    /// In a temporary directory.
    Embedded,
    /// On a fresh database on the test server.
    Postgres,
}

/// Where a run's store keeps its data, for as long as the run lasts.
enum Place {
    Directory(tempfile::TempDir),
    Database(String),
}

impl Backend {
    /// Whether the backend can be had here: `false` when there is no test PostgreSQL (the
    /// harness has said so on stderr, or failed the test when one is required).
    async fn available(self) -> bool {
        match self {
            Backend::Embedded => true,
            Backend::Postgres => postgres_server::admin_url().await.is_some(),
        }
    }

    /// A new, empty place for a store (once [`Backend::available`] said there is one).
    async fn place(self) -> Place {
        match self {
            Backend::Embedded => Place::Directory(
                tempfile::Builder::new()
                    .prefix("tenax-model-")
                    .tempdir()
                    .expect("a temporary directory"),
            ),
            Backend::Postgres => Place::Database(
                postgres_server::fresh_database()
                    .await
                    .expect("a test PostgreSQL"),
            ),
        }
    }
}

impl Place {
    fn config(&self) -> StoreConfig {
        match self {
            Place::Directory(dir) => StoreConfig::Embedded {
                dir: dir.path().to_owned(),
                options: EmbeddedOptions {
                    // Durability is not what this test is about; fsyncs would only slow it down.
                    sync: false,
                    cache_bytes: 1 << 20,
                    commits: None,
                    log_bytes: 1 << 20,
                    secrets: None,
                },
            },
            Place::Database(url) => StoreConfig::Postgres(PostgresOptions::new(
                Database::new(url, None).expect("the test database's URL"),
                Arc::new(Keyring::generate("model.key").expect("a key")),
            )),
        }
    }
}

async fn engine(place: &Place) -> Engine {
    let store = place
        .config()
        .open(&Clock::manual(T0))
        .await
        .expect("the store opens");
    Engine::new(
        store,
        Clock::manual(T0),
        EngineSettings {
            default_policy: Arc::new(fixed(DEFAULT_DELAY_MS, DEFAULT_RETRY_LIMIT)),
            delivery_policy: Arc::new(RetryPolicy::default()),
            completed_retention_ms: RETENTION_MS,
            dead_retention_ms: RETENTION_MS,
            max_attempt_ms: MAX_ATTEMPT_MS,
        },
    )
}

fn new_job(queue: &str, priority: i32, run_at_ms: u64, now: u64) -> NewJob {
    NewJob {
        queue: queue.to_owned(),
        kind: "work".to_owned(),
        payload: RawValue::from_string("{}".to_owned()).expect("JSON"),
        priority,
        run_at_ms,
        policy: None,
        unique_key: None,
        created_at_ms: now,
        expires_at_ms: None,
        origin: None,
        parent: None,
        traceparent: None,
        payload_sealed: false,
        after: Vec::new(),
        on_parent_dead: Default::default(),
        batch: None,
    }
}

/// Runs `ops` on a fresh engine over a store in `place` and on the model, comparing after
/// every step.
async fn run(place: &Place, ops: &[Op]) -> Result<(), TestCaseError> {
    let engine = engine(place).await;
    let mut model = Model {
        now: T0,
        ..Model::default()
    };
    let mut last_purge = 0;
    for (step, op) in ops.iter().enumerate() {
        apply(&engine, &mut model, op, &mut last_purge)
            .await
            .map_err(|e| TestCaseError::fail(format!("step {step} ({op:?}): {e}")))?;
        compare(&engine, &model)
            .await
            .map_err(|e| TestCaseError::fail(format!("after step {step} ({op:?}): {e}")))?;
    }
    engine.close().await;
    Ok(())
}

/// Fails with `what` unless `engine == model`.
fn same<T: PartialEq + std::fmt::Debug>(what: &str, engine: T, model: T) -> Result<(), String> {
    if engine == model {
        Ok(())
    } else {
        Err(format!(
            "{what}: the engine has {engine:?}, the model {model:?}"
        ))
    }
}

/// One step, on both; compares the step's answer.
async fn apply(
    engine: &Engine,
    model: &mut Model,
    op: &Op,
    last_purge: &mut u64,
) -> Result<(), String> {
    let now = model.now;
    same("the clock", engine.now_ms(), now)?;
    match op {
        Op::Enqueue(specs) => {
            let mut batch = Vec::with_capacity(specs.len());
            let mut news = Vec::with_capacity(specs.len());
            for spec in specs {
                let queue = QUEUES[spec.queue];
                let run_at_ms = now.saturating_add_signed(spec.run_in_ms);
                let mut job = new_job(queue, spec.priority, run_at_ms, now);
                let (retry_limit, delay_ms, limit) = match spec.policy {
                    PolicyPick::Server => (None, DEFAULT_DELAY_MS, DEFAULT_RETRY_LIMIT),
                    PolicyPick::Own { delay_ms, limit } => {
                        job.policy = Some(StoredPolicy::new(fixed(delay_ms, limit)));
                        (None, delay_ms, limit)
                    }
                    PolicyPick::Limit(limit) => (Some(limit), DEFAULT_DELAY_MS, limit),
                };
                batch.push(Enqueue {
                    job,
                    retry_limit,
                    after: Vec::new(),
                });
                let status = if run_at_ms > now {
                    Status::Scheduled
                } else {
                    Status::Ready
                };
                news.push(ModelJob {
                    queue,
                    priority: spec.priority,
                    status,
                    failures: 0,
                    run_at_ms,
                    finished_at_ms: None,
                    errors: 0,
                    lease: None,
                    tokens: Vec::new(),
                    delay_ms,
                    retry_limit: limit,
                });
            }
            let enqueued = engine
                .enqueue(batch, OnDuplicate::Refuse)
                .await
                .map_err(|e| format!("enqueue failed: {e}"))?;
            same("answers to the enqueue", enqueued.len(), news.len())?;
            for (enqueued, new) in enqueued.into_iter().zip(news) {
                if model.jobs.keys().any(|id| *id >= enqueued.id) {
                    return Err(format!("id {} is not above every earlier id", enqueued.id));
                }
                same(
                    "the enqueue's answer",
                    (enqueued.created, enqueued.status, enqueued.run_at_ms),
                    (true, new.status, new.run_at_ms),
                )?;
                model.jobs.insert(enqueued.id, new);
            }
        }
        Op::Take {
            queues,
            max,
            lease_ms,
        } => {
            let names: Vec<String> = queues.iter().map(|q| (*q).to_owned()).collect();
            let request = Take::new(&names, *max, *lease_ms);
            let taken = engine
                .take(&request, Duration::ZERO, std::future::pending())
                .await
                .map_err(|e| format!("take failed: {e}"))?;
            let want = model.takeable(queues, *max);
            same(
                "the jobs taken",
                taken.iter().map(|t| t.id).collect::<Vec<_>>(),
                want,
            )?;
            for leased in &taken {
                let job = model.jobs.get_mut(&leased.id).expect("a job");
                same(
                    "a taken job",
                    (
                        leased.queue.as_str(),
                        leased.priority,
                        leased.attempt,
                        leased.lease_expires_at_ms,
                    ),
                    (job.queue, job.priority, job.failures + 1, now + lease_ms),
                )?;
                if job.tokens.contains(&leased.lease_token) {
                    return Err(format!("job {} got a lease token again", leased.id));
                }
                job.status = Status::InFlight;
                job.tokens.push(leased.lease_token);
                job.lease = Some(Lease {
                    token: leased.lease_token,
                    expires_at_ms: now + lease_ms,
                    taken_at_ms: now,
                });
            }
        }
        Op::Heartbeat {
            job,
            token,
            lease_ms,
        } => {
            let Some(id) = model.pick(job) else {
                return Ok(());
            };
            let ack = model.ack(id, *token);
            let want = model
                .check(ack)
                .map(|lease| (now + lease_ms).min(lease.taken_at_ms + MAX_ATTEMPT_MS));
            // Nothing here cancels: no lease is ever marked.
            let got = engine.heartbeat(ack, *lease_ms).await.map(|extended| {
                assert!(!extended.cancel_requested, "no lease is marked cancelled");
                extended.expires_at_ms
            });
            same("the heartbeat's answer", got.clone(), want)?;
            if let (Ok(until), Some(lease)) =
                (got, model.jobs.get_mut(&id).and_then(|j| j.lease.as_mut()))
            {
                lease.expires_at_ms = until;
            }
        }
        Op::Fail {
            job,
            token,
            retryable,
        } => {
            let Some(id) = model.pick(job) else {
                return Ok(());
            };
            let ack = model.ack(id, *token);
            let report = FailureReport {
                message: "boom".into(),
                detail: None,
                outcome: if *retryable {
                    Outcome::Retry
                } else {
                    Outcome::NotRetryable
                },
            };
            let got = engine.fail(ack, report).await;
            match model.check(ack) {
                Err(error) => same("the failure's answer", got.map(|_| ()), Err(error))?,
                Ok(_) => {
                    let (transition, at) = got.map_err(|e| format!("fail failed: {e}"))?;
                    model.fail(id, *retryable);
                    let job = &model.jobs[&id];
                    same(
                        "the failure's transition",
                        (
                            at,
                            transition.state.status,
                            transition.state.failures,
                            transition.state.run_at_ms,
                            transition.error.is_some(),
                        ),
                        (now, job.status, job.failures, job.run_at_ms, true),
                    )?;
                }
            }
        }
        Op::Complete { job, token } => {
            let Some(id) = model.pick(job) else {
                return Ok(());
            };
            let ack = model.ack(id, *token);
            let want = model.check(ack).map(|_| ());
            let got = engine
                .complete(&[ack])
                .await
                .map_err(|e| format!("complete failed: {e}"))?;
            same("the completion's answer", got, vec![want.clone()])?;
            if want.is_ok() {
                let job = model.jobs.get_mut(&id).expect("a job");
                job.status = Status::Completed;
                job.finished_at_ms = Some(now);
                job.lease = None;
            }
        }
        Op::Advance { ms } => {
            engine.clock.advance_ms(*ms);
            model.now += ms;
        }
        Op::Maintain => {
            maintenance::pass(engine, now, last_purge).await;
            model.maintain();
        }
        Op::ReplayOne { job, reset } => {
            let Some(id) = model.pick(job) else {
                return Ok(());
            };
            let replay = Replay {
                selection: Selection {
                    ids: Some(vec![id]),
                    filter: JobFilter::default(),
                },
                policy: None,
                reset_attempts: *reset,
            };
            let got = engine
                .replay(&replay)
                .await
                .map_err(|e| format!("replay failed: {e}"))?;
            let status = model.jobs[&id].status;
            let want = if status == Status::Dead {
                model.replay(id, *reset);
                Replayed {
                    ids: vec![id],
                    skipped: vec![],
                }
            } else {
                Replayed {
                    ids: vec![],
                    skipped: vec![(id, NotReplayed::NotDead(status))],
                }
            };
            same("the replay's report", got, want)?;
        }
        Op::ReplayAll {
            queue,
            only_dead,
            reset,
        } => {
            let queue = queue.map(|q| QUEUES[q]);
            let replay = Replay {
                selection: Selection {
                    ids: None,
                    filter: JobFilter {
                        queue: queue.map(str::to_owned),
                        status: only_dead.then_some(Status::Dead),
                        ..JobFilter::default()
                    },
                },
                policy: None,
                reset_attempts: *reset,
            };
            let got = engine
                .replay(&replay)
                .await
                .map_err(|e| format!("replay failed: {e}"))?;
            let dead: Vec<JobId> = model
                .jobs
                .iter()
                .filter(|(_, j)| j.status == Status::Dead && queue.is_none_or(|q| j.queue == q))
                .map(|(id, _)| *id)
                .collect();
            for id in &dead {
                model.replay(*id, *reset);
            }
            // Jobs the filter selects that are not dead are left as they are, unreported.
            let want = Replayed {
                ids: dead,
                skipped: vec![],
            };
            same("the replay's report", got, want)?;
        }
    }
    Ok(())
}

/// Compares everything observable: every job, and the counts.
async fn compare(engine: &Engine, model: &Model) -> Result<(), String> {
    let ids: Vec<JobId> = model.jobs.keys().copied().collect();
    let peeks = engine
        .peek(&ids)
        .await
        .map_err(|e| format!("peek failed: {e}"))?;
    for (id, peek) in ids.iter().zip(peeks) {
        let want = &model.jobs[id];
        let Some(peek) = peek else {
            return Err(format!("job {id} is gone"));
        };
        same(
            &format!("job {id}'s status and failures"),
            (&*peek.queue, peek.status, peek.failures),
            (want.queue, want.status, want.failures),
        )?;
        let shown = engine
            .job(*id)
            .await
            .map_err(|e| format!("reading job {id} failed: {e}"))?
            .ok_or_else(|| format!("job {id} is gone"))?;
        same(
            &format!("job {id}"),
            (
                shown.state.status,
                shown.state.failures,
                shown.state.run_at_ms,
                shown.state.finished_at_ms,
                shown.errors.len(),
                shown.held.map(|h| h.lease_expires_at_ms),
                shown.spec.priority,
            ),
            (
                want.status,
                want.failures,
                want.run_at_ms,
                want.finished_at_ms,
                want.errors,
                want.lease.map(|l| l.expires_at_ms),
                want.priority,
            ),
        )?;
    }
    let counts = engine
        .counts()
        .await
        .map_err(|e| format!("counts failed: {e}"))?;
    same("the counts", counts, model.counts())?;
    for queue in QUEUES {
        let counts = engine
            .queue_counts(queue)
            .await
            .map_err(|e| format!("counts failed: {e}"))?;
        let want = model
            .counts()
            .into_iter()
            .find(|c| c.queue == queue)
            .unwrap_or_else(|| QueueCounts::from_slots(queue, Default::default()));
        same(&format!("queue {queue}'s counts"), counts, want)?;
    }
    Ok(())
}

/// Runs `cases` random sequences of operations on `backend` (and the sequences that failed
/// before, from `engine_model.proptest-regressions`), each on a fresh store.
fn check(backend: Backend, cases: u32) {
    // A runtime per run: the store's background tasks end with it.
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    // Asked once, before the runs: without a server, one line says so (or the test fails
    // when one is required), rather than one per run.
    if !runtime().block_on(backend.available()) {
        return;
    }
    // `ProptestConfig::default()` holds `PROPTEST_CASES` when it is set.
    let asked = std::env::var_os("PROPTEST_CASES").is_some();
    let defaults = ProptestConfig::default();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: if asked { defaults.cases } else { cases },
        source_file: Some(file!()),
        ..defaults
    });
    let ops = prop::collection::vec(op(), 1..=STEPS);
    let outcome = runner.run(&ops, |ops| {
        runtime().block_on(async {
            let place = backend.place().await;
            run(&place, &ops).await
        })
    });
    if let Err(failure) = outcome {
        panic!("{backend:?}: {failure}\n{runner}");
    }
}

/// The engine on the embedded store behaves as the model, step by step.
#[test]
fn the_engine_behaves_as_the_model() {
    check(Backend::Embedded, CASES);
}

/// The engine on PostgreSQL behaves as the model, step by step.
#[test]
fn the_engine_on_postgres_behaves_as_the_model() {
    check(Backend::Postgres, POSTGRES_CASES);
}
