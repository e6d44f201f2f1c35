//! The conformance suite of the storage seam ([`tenax::store::Store`]): what every backend must
//! do, written once against the seam and run against each backend.
//!
//! Each case is an `async fn` taking a [`Backend`]: a place where a store can be opened, closed
//! and opened again on the same data (for the embedded store, a directory). Each case checks
//! its transitions, then closes the store, reopens it and checks that the state survived (jobs
//! in flight come back ready).
//!
//! Adding a backend (PostgreSQL): implement [`Backend`] for it and add one line
//! `conformance_suite!(postgres, Postgres::new().await);` at the bottom.

use std::sync::{Arc, Mutex};

use serde_json::json;
use serde_json::value::RawValue;
use tempfile::TempDir;
use tenax::model::{ErrorEntry, Job, JobId, NewJob, Status, StoredPolicy};
use tenax::store::embedded::EmbeddedOptions;
use tenax::store::{
    Ack, DecideContext, EmbeddedStore, Enqueued, Insert, JobFilter, KeyHolder, NotReplayed,
    OnDuplicate, Page, QueueConfig, QueueCounts, Replay, Replayed, Selection, Store, StoreError,
    TakeRequest, TakenJob, Transition,
};
use tenax_policy::{RetryPolicy, Shape};

/// Every case starts at this time (ms since the epoch).
const T0: u64 = 1_800_000_000_000;
const SECOND: u64 = 1_000;

// --- backends --------------------------------------------------------------------------------

/// One backend at one location. `open` gives a store on the data the last closed store there
/// left behind (empty the first time).
trait Backend {
    async fn open(&self, now_ms: u64) -> Arc<dyn Store>;
}

/// The embedded store in a temporary directory.
struct Embedded {
    dir: TempDir,
}

impl Embedded {
    fn new() -> Self {
        Self {
            dir: tempfile::Builder::new()
                .prefix("tenax-store-")
                .tempdir()
                .expect("a temporary directory"),
        }
    }
}

impl Backend for Embedded {
    async fn open(&self, now_ms: u64) -> Arc<dyn Store> {
        let dir = self.dir.path().to_owned();
        let store = tokio::task::spawn_blocking(move || {
            EmbeddedStore::open(&dir, &EmbeddedOptions::default(), now_ms)
        })
        .await
        .expect("the open task")
        .expect("the embedded store opens");
        Arc::new(store)
    }
}

// --- helpers ---------------------------------------------------------------------------------

/// A job for `queue`, ready at [`T0`]; adjust with the [`Build`] methods.
fn job(queue: &str) -> Insert {
    Insert {
        job: NewJob {
            queue: queue.to_owned(),
            kind: "work".to_owned(),
            payload: RawValue::from_string("null".to_owned()).expect("JSON"),
            priority: 0,
            run_at_ms: T0,
            policy: None,
            unique_key: None,
            created_at_ms: T0,
            expires_at_ms: None,
            origin: None,
            parent: None,
        },
        parent: None,
        owner: None,
    }
}

trait Build {
    fn priority(self, priority: i32) -> Self;
    fn at(self, run_at_ms: u64) -> Self;
    fn key(self, key: &str) -> Self;
    fn kind(self, kind: &str) -> Self;
    fn payload(self, json: serde_json::Value) -> Self;
    fn policy(self, policy: RetryPolicy) -> Self;
}

impl Build for Insert {
    fn priority(mut self, priority: i32) -> Self {
        self.job.priority = priority;
        self
    }
    fn at(mut self, run_at_ms: u64) -> Self {
        self.job.run_at_ms = run_at_ms;
        self
    }
    fn key(mut self, key: &str) -> Self {
        self.job.unique_key = Some(key.to_owned());
        self
    }
    fn kind(mut self, kind: &str) -> Self {
        self.job.kind = kind.to_owned();
        self
    }
    fn payload(mut self, json: serde_json::Value) -> Self {
        self.job.payload = RawValue::from_string(json.to_string()).expect("JSON");
        self
    }
    fn policy(mut self, policy: RetryPolicy) -> Self {
        self.job.policy = Some(StoredPolicy::new(policy));
        self
    }
}

/// Closes a store and lets go of it, so that its data can be opened again.
async fn close(store: Arc<dyn Store>) {
    store.close().await;
}

/// The policy of the job's queue, as a decision sees it.
fn queue_policy_of(ctx: &DecideContext<'_>) -> Option<RetryPolicy> {
    ctx.queue_config
        .and_then(|c| c.policy.as_ref())
        .map(|p| (**p.policy()).clone())
}

fn fixed(delay_ms: u64) -> RetryPolicy {
    RetryPolicy::new(Shape::Fixed { delay_ms })
}

/// Inserts jobs of their own (no parent, no owner): one result each.
async fn insert(
    store: &Arc<dyn Store>,
    jobs: Vec<Insert>,
    on_duplicate: OnDuplicate,
    now_ms: u64,
) -> Result<Vec<Enqueued>, StoreError> {
    let count = jobs.len();
    let results: Vec<Enqueued> = store
        .insert_jobs(jobs, on_duplicate, now_ms)
        .await?
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(results.len(), count, "one result per job of its own");
    Ok(results)
}

async fn enqueue(store: &Arc<dyn Store>, jobs: Vec<Insert>, now_ms: u64) -> Vec<JobId> {
    insert(store, jobs, OnDuplicate::Refuse, now_ms)
        .await
        .expect("enqueued")
        .iter()
        .map(|e| e.id)
        .collect()
}

async fn take_on(
    store: &Arc<dyn Store>,
    queues: &[&str],
    max: usize,
    lease_ms: u64,
    stream: Option<u64>,
    now_ms: u64,
) -> Vec<TakenJob> {
    let queues: Vec<String> = queues.iter().map(|q| (*q).to_owned()).collect();
    let request = TakeRequest {
        claim: stream,
        ..TakeRequest::new(&queues, max, lease_ms)
    };
    store.take_jobs(&request, now_ms).await.expect("take")
}

/// Takes up to `max` jobs with a 30 s lease.
async fn take(store: &Arc<dyn Store>, queues: &[&str], max: usize, now_ms: u64) -> Vec<TakenJob> {
    take_on(store, queues, max, 30 * SECOND, None, now_ms).await
}

fn taken_ids(jobs: &[TakenJob]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

fn ack(job: &TakenJob) -> Ack {
    Ack {
        id: job.id,
        lease: job.lease_token,
    }
}

async fn get(store: &Arc<dyn Store>, id: JobId) -> Job {
    store
        .get_job(id)
        .await
        .expect("readable")
        .unwrap_or_else(|| panic!("job {id} exists"))
}

async fn status(store: &Arc<dyn Store>, id: JobId) -> Option<Status> {
    store
        .get_job(id)
        .await
        .expect("readable")
        .map(|j| j.state.status)
}

async fn list(
    store: &Arc<dyn Store>,
    filter: JobFilter,
    after: Option<JobId>,
    limit: usize,
) -> Vec<JobId> {
    store
        .list_jobs(&filter, Page::after(after, limit))
        .await
        .expect("list")
        .iter()
        .map(|j| j.id)
        .collect()
}

fn error_entry(ctx: &DecideContext<'_>, now_ms: u64, message: &str) -> ErrorEntry {
    ErrorEntry {
        attempt: ctx.state.failures + 1,
        at_ms: now_ms,
        message: message.to_owned(),
        detail: None,
    }
}

/// A decision: retry `delay_ms` after `now_ms`, recording `message`.
fn retry(
    now_ms: u64,
    delay_ms: u64,
    message: &str,
) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let message = message.to_owned();
    move |ctx| {
        let mut state = ctx.state.clone();
        state.status = Status::Scheduled;
        state.run_at_ms = now_ms + delay_ms;
        state.failures += 1;
        state.first_failure_at_ms.get_or_insert(now_ms);
        state.last_delay_ms = Some(delay_ms);
        Transition {
            state,
            error: Some(error_entry(ctx, now_ms, &message)),
            moved_to: None,
        }
    }
}

/// A decision: dead at `now_ms`, recording `message`.
fn dead(now_ms: u64, message: &str) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let message = message.to_owned();
    move |ctx| {
        let mut state = ctx.state.clone();
        state.status = Status::Dead;
        state.failures += 1;
        state.finished_at_ms = Some(now_ms);
        state.dead_reason = Some(message.clone());
        Transition {
            state,
            error: Some(error_entry(ctx, now_ms, &message)),
            moved_to: None,
        }
    }
}

/// A decision: ready again at once (as after a lost lease), recording `message`.
fn again(now_ms: u64, message: &str) -> impl Fn(&DecideContext<'_>) -> Transition + Send + Sync {
    let message = message.to_owned();
    move |ctx| {
        let mut state = ctx.state.clone();
        state.status = Status::Ready;
        state.run_at_ms = now_ms;
        state.failures += 1;
        Transition {
            state,
            error: Some(error_entry(ctx, now_ms, &message)),
            moved_to: None,
        }
    }
}

/// Takes `ids` (the next jobs to take from `queue`) and fails them to dead.
async fn kill(store: &Arc<dyn Store>, queue: &str, ids: &[JobId], now_ms: u64) {
    let taken = take(store, &[queue], ids.len(), now_ms).await;
    assert_eq!(taken_ids(&taken), ids);
    for job in &taken {
        store
            .fail_job(ack(job), now_ms, &dead(now_ms, "fatal"))
            .await
            .expect("failed");
    }
}

/// Everything a store holds, as a reopened store at `now_ms` must give it back: jobs in flight
/// are ready, and so are scheduled jobs that are due.
async fn snapshot(store: &Arc<dyn Store>, now_ms: u64) -> serde_json::Value {
    let jobs: Vec<Job> = store
        .list_jobs(&JobFilter::default(), Page::after(None, 1_000_000))
        .await
        .expect("list")
        .into_iter()
        .map(|mut job| {
            let state = &mut job.state;
            let due = state.status == Status::Scheduled && state.run_at_ms <= now_ms;
            if state.status == Status::InFlight || due {
                state.status = Status::Ready;
            }
            job
        })
        .collect();
    let queues = store.queues().await.expect("queues");
    json!({ "jobs": jobs, "queues": queues })
}

/// The counts `jobs` imply, sorted by queue; queues without jobs left out.
fn counts_of(jobs: &[Job]) -> Vec<QueueCounts> {
    let mut by_queue: std::collections::BTreeMap<&str, [u64; 5]> = Default::default();
    for job in jobs {
        let slot = Status::ALL
            .iter()
            .position(|s| *s == job.state.status)
            .expect("a status");
        by_queue.entry(&job.spec.queue).or_default()[slot] += 1;
    }
    by_queue
        .into_iter()
        .map(
            |(queue, [scheduled, ready, in_flight, completed, dead])| QueueCounts {
                queue: queue.to_owned(),
                scheduled,
                ready,
                in_flight,
                completed,
                dead,
            },
        )
        .collect()
}

/// Closes the store, reopens it at `now_ms`, and checks that nothing acknowledged changed:
/// every job, its errors and policy, and every queue's settings (in-flight jobs are ready
/// again). Returns the reopened store.
async fn reopen(backend: &impl Backend, store: Arc<dyn Store>, now_ms: u64) -> Arc<dyn Store> {
    let before = snapshot(&store, now_ms).await;
    close(store).await;
    let store = backend.open(now_ms).await;
    let after = snapshot(&store, now_ms).await;
    assert_eq!(after, before, "the state survived closing and reopening");
    let jobs = store
        .list_jobs(&JobFilter::default(), Page::after(None, 1_000_000))
        .await
        .expect("list");
    assert_eq!(
        store.counts().await.expect("counts"),
        counts_of(&jobs),
        "counts match the jobs"
    );
    store
}

// --- cases -----------------------------------------------------------------------------------

async fn enqueue_is_atomic_and_ids_increase(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let first = insert(
        &store,
        vec![
            job("q").payload(json!({"n": 1})),
            job("q").priority(3),
            job("q").at(T0 + SECOND),
        ],
        OnDuplicate::Refuse,
        T0,
    )
    .await
    .expect("enqueued");
    let ids: Vec<JobId> = first.iter().map(|e| e.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert_eq!(
        first
            .iter()
            .map(|e| (e.created, e.status, e.run_at_ms))
            .collect::<Vec<_>>(),
        [
            (true, Status::Ready, T0),
            (true, Status::Ready, T0),
            (true, Status::Scheduled, T0 + SECOND)
        ]
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(shown.spec.payload.get(), r#"{"n":1}"#);
    assert_eq!(
        (shown.spec.queue.as_str(), shown.spec.kind.as_str()),
        ("q", "work")
    );
    assert_eq!(shown.spec.created_at_ms, T0);
    assert!(shown.errors.is_empty());

    let keyed = enqueue(&store, vec![job("q").key("k")], T0).await;
    // A refused batch stores nothing, not even its valid jobs.
    let refused = insert(
        &store,
        vec![job("q"), job("q").key("k")],
        OnDuplicate::Refuse,
        T0,
    )
    .await;
    assert_eq!(
        refused.expect_err("refused"),
        StoreError::Duplicate {
            index: 1,
            queue: "q".into(),
            key: "k".into(),
            holder: KeyHolder::Job(keyed[0])
        }
    );
    let all = list(&store, JobFilter::default(), None, 100).await;
    assert_eq!(all, [ids.clone(), keyed.clone()].concat());
    let next = enqueue(&store, vec![job("q")], T0).await;
    assert!(next[0] > keyed[0]);

    let store = reopen(backend, store, T0).await;
    // Ids are never reused, across restarts too.
    let after = enqueue(&store, vec![job("q")], T0).await;
    assert!(after[0] > next[0]);
    close(store).await;
}

async fn unique_keys_refuse_or_return_the_holder(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let held = enqueue(&store, vec![job("q1").key("k")], T0).await[0];
    // Keys are per queue.
    enqueue(&store, vec![job("q2").key("k")], T0).await;
    let existing = insert(&store, vec![job("q1").key("k")], OnDuplicate::Existing, T0)
        .await
        .expect("answered");
    assert_eq!(
        existing,
        [Enqueued {
            id: held,
            created: false,
            status: Status::Ready,
            run_at_ms: T0
        }]
    );
    // Within one batch, the second holder of a key is the first.
    let batch = insert(
        &store,
        vec![job("q1").key("m"), job("q1").key("m")],
        OnDuplicate::Existing,
        T0,
    )
    .await
    .expect("answered");
    assert_eq!(batch[1].id, batch[0].id);
    assert_eq!((batch[0].created, batch[1].created), (true, false));
    let refused = insert(
        &store,
        vec![job("q1").key("n"), job("q1").key("n")],
        OnDuplicate::Refuse,
        T0,
    )
    .await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Duplicate {
                index: 1,
                holder: KeyHolder::Earlier(0),
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(list(&store, JobFilter::default(), None, 100).await.len(), 3);

    // A finished job (completed or dead) frees its key; an in-flight one holds it.
    let taken = take(&store, &["q1"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [held]);
    let refused = insert(&store, vec![job("q1").key("k")], OnDuplicate::Refuse, T0).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(existing), .. }) if existing == held)
    );
    let done = store
        .complete_jobs(&[ack(&taken[0])], true, T0)
        .await
        .expect("completed");
    assert_eq!(done, [Ok(())]);
    let renewed = enqueue(&store, vec![job("q1").key("k")], T0).await[0];
    assert!(renewed > held);
    kill(&store, "q1", &[batch[0].id], T0).await;
    enqueue(&store, vec![job("q1").key("m")], T0).await;

    let store = reopen(backend, store, T0).await;
    for (queue, key) in [("q1", "k"), ("q1", "m"), ("q2", "k")] {
        let refused = insert(&store, vec![job(queue).key(key)], OnDuplicate::Refuse, T0).await;
        assert!(
            matches!(refused, Err(StoreError::Duplicate { .. })),
            "{queue}/{key} is still held after reopening: {refused:?}"
        );
    }
    close(store).await;
}

async fn take_is_by_priority_then_age_and_leases(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("a"),
            job("b").priority(5),
            job("a").priority(5),
            job("c").priority(9),
            job("b"),
            job("a").priority(-1),
            job("a").priority(9).at(T0 + SECOND),
        ],
        T0,
    )
    .await;
    store
        .update_queue("c", &|_| {
            Some(QueueConfig {
                policy: None,
                paused: true,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("paused");

    let first = take_on(&store, &["a", "b", "c"], 2, 10 * SECOND, None, T0).await;
    assert_eq!(taken_ids(&first), [ids[1], ids[2]]);
    let rest = take_on(
        &store,
        &["a", "b", "c", "nobody"],
        10,
        20 * SECOND,
        None,
        T0 + 5,
    )
    .await;
    assert_eq!(
        taken_ids(&rest),
        [ids[0], ids[4], ids[5]],
        "paused and scheduled jobs stay"
    );
    assert!(take(&store, &["a", "b"], 10, T0).await.is_empty());
    for job in &first {
        assert_eq!(
            (job.attempt, job.lease_expires_at_ms),
            (1, T0 + 10 * SECOND)
        );
    }
    assert!(
        rest.iter()
            .all(|j| j.lease_expires_at_ms == T0 + 5 + 20 * SECOND)
    );
    let mut tokens: Vec<u64> = first.iter().chain(&rest).map(|j| j.lease_token).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 5, "every lease has its own token");
    let b = &first[0];
    assert_eq!(
        (b.queue.as_str(), b.kind.as_str(), b.priority),
        ("b", "work", 5)
    );
    assert_eq!(status(&store, ids[1]).await, Some(Status::InFlight));
    let counts = store.counts().await.expect("counts");
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.queue.as_str(), c.in_flight))
            .collect::<Vec<_>>(),
        [("a", 3), ("b", 2), ("c", 0)]
    );

    // Reopened, the in-flight jobs are ready again, in the same order.
    let store = reopen(backend, store, T0 + 10).await;
    let again = take(&store, &["a", "b"], 10, T0 + 10).await;
    assert_eq!(taken_ids(&again), [ids[1], ids[2], ids[0], ids[4], ids[5]]);
    assert!(
        again.iter().all(|j| j.attempt == 1),
        "a restart is not an attempt"
    );
    close(store).await;
}

async fn complete_needs_the_current_lease(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let taken = take(&store, &["q"], 5, T0).await;
    let [a, b, c, d, e] = [&taken[0], &taken[1], &taken[2], &taken[3], &taken[4]];
    let wrong = Ack {
        id: b.id,
        lease: c.lease_token,
    };
    let guessed = Ack { id: c.id, lease: 0 };
    let results = store
        .complete_jobs(&[ack(a), wrong, guessed, ack(c), ack(d)], true, T0 + 7)
        .await
        .expect("one commit");
    assert_eq!(
        results,
        [
            Ok(()),
            Err(StoreError::LeaseLost { id: b.id }),
            Err(StoreError::LeaseLost { id: c.id }),
            Ok(()),
            Ok(())
        ]
    );
    let shown = get(&store, a.id).await;
    assert_eq!(
        (shown.state.status, shown.state.finished_at_ms),
        (Status::Completed, Some(T0 + 7))
    );
    assert_eq!(status(&store, b.id).await, Some(Status::InFlight));
    let results = store
        .complete_jobs(
            &[
                ack(a),
                Ack {
                    id: 999_999,
                    lease: 1,
                },
            ],
            true,
            T0,
        )
        .await
        .expect("one commit");
    assert_eq!(
        results,
        [
            Err(StoreError::NotInFlight {
                id: a.id,
                status: Status::Completed
            }),
            Err(StoreError::NotFound(999_999))
        ]
    );
    // Without retention, a completed job is gone.
    let results = store
        .complete_jobs(&[ack(b)], false, T0)
        .await
        .expect("one commit");
    assert_eq!(results, [Ok(())]);
    assert!(store.get_job(b.id).await.expect("readable").is_none());
    assert_eq!(ids.len(), 5);

    let store = reopen(backend, store, T0 + 10).await;
    for (id, want) in [
        (a.id, Some(Status::Completed)),
        (b.id, None),
        (c.id, Some(Status::Completed)),
        (d.id, Some(Status::Completed)),
        (e.id, Some(Status::Ready)),
    ] {
        assert_eq!(status(&store, id).await, want, "job {id}");
    }
    assert_eq!(taken_ids(&take(&store, &["q"], 5, T0 + 10).await), [e.id]);
    close(store).await;
}

/// What a decision closure was shown.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    id: JobId,
    queue: String,
    failures: u32,
    job_policy: Option<RetryPolicy>,
    queue_policy: Option<RetryPolicy>,
}

async fn fail_asks_the_decision_and_records_it(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let queue_policy = fixed(5 * SECOND);
    store
        .update_queue("q", &|_| {
            Some(QueueConfig {
                policy: Some(StoredPolicy::new(queue_policy.clone())),
                paused: false,
                ..QueueConfig::default()
            })
        })
        .await
        .expect("configured");
    let job_policy = fixed(60 * SECOND);
    let ids = enqueue(
        &store,
        vec![job("q").policy(job_policy.clone()), job("q"), job("other")],
        T0,
    )
    .await;
    let taken = take(&store, &["q", "other"], 3, T0).await;
    assert_eq!(taken_ids(&taken), ids);

    let seen = Mutex::new(Vec::new());
    let watch = |inner: &(dyn Fn(&DecideContext<'_>) -> Transition + Send + Sync),
                 ctx: &DecideContext<'_>| {
        seen.lock().expect("not poisoned").push(Seen {
            id: ctx.id,
            queue: ctx.queue.to_owned(),
            failures: ctx.state.failures,
            job_policy: ctx.job_policy.cloned(),
            queue_policy: queue_policy_of(ctx),
        });
        inner(ctx)
    };
    let now = T0 + 100;

    // A retry: scheduled, one failure, one error entry.
    let decide = retry(now, 60 * SECOND, "boom");
    let transition = store
        .fail_job(ack(&taken[0]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        (transition.state.status, transition.state.run_at_ms),
        (Status::Scheduled, now + 60 * SECOND)
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(shown.state, transition.state);
    assert_eq!(shown.errors, [transition.error.clone().expect("an error")]);
    assert_eq!(shown.errors[0].attempt, 1);

    // Dead.
    let decide = dead(now, "fatal");
    store
        .fail_job(ack(&taken[1]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.finished_at_ms,
            shown.state.dead_reason.as_deref()
        ),
        (Status::Dead, Some(now), Some("fatal"))
    );

    // A retry that is already due is ready at once, and the answer says so.
    let decide = retry(now, 0, "again");
    let transition = store
        .fail_job(ack(&taken[2]), now, &|ctx: &DecideContext<'_>| {
            watch(&decide, ctx)
        })
        .await
        .expect("failed");
    assert_eq!(transition.state.status, Status::Ready);
    assert_eq!(status(&store, ids[2]).await, Some(Status::Ready));

    assert_eq!(
        *seen.lock().expect("not poisoned"),
        [
            Seen {
                id: ids[0],
                queue: "q".into(),
                failures: 0,
                job_policy: Some(job_policy),
                queue_policy: Some(queue_policy.clone())
            },
            Seen {
                id: ids[1],
                queue: "q".into(),
                failures: 0,
                job_policy: None,
                queue_policy: Some(queue_policy)
            },
            Seen {
                id: ids[2],
                queue: "other".into(),
                failures: 0,
                job_policy: None,
                queue_policy: None
            },
        ]
    );

    // No decision without the lease.
    let calls = seen.lock().expect("not poisoned").len();
    let decide = retry(now, 1, "never");
    let watched = |ctx: &DecideContext<'_>| watch(&decide, ctx);
    let again_taken = take(&store, &["other"], 1, now).await;
    let stale = Ack {
        id: ids[2],
        lease: taken[2].lease_token,
    };
    assert_eq!(
        store.fail_job(stale, now, &watched).await,
        Err(StoreError::LeaseLost { id: ids[2] })
    );
    assert_eq!(
        store.fail_job(ack(&taken[1]), now, &watched).await,
        Err(StoreError::NotInFlight {
            id: ids[1],
            status: Status::Dead
        })
    );
    assert_eq!(
        store
            .fail_job(
                Ack {
                    id: 424_242,
                    lease: 1
                },
                now,
                &watched
            )
            .await,
        Err(StoreError::NotFound(424_242))
    );
    assert_eq!(seen.lock().expect("not poisoned").len(), calls);
    // The errors list grows one entry per failure, oldest first.
    store
        .fail_job(
            ack(&again_taken[0]),
            now + 1,
            &retry(now + 1, 60 * SECOND, "twice"),
        )
        .await
        .expect("failed");
    let messages: Vec<String> = get(&store, ids[2])
        .await
        .errors
        .into_iter()
        .map(|e| format!("{}:{}", e.attempt, e.message))
        .collect();
    assert_eq!(messages, ["1:again", "2:twice"]);

    // Reopened: the schedule, the dead job, the errors, and both policies as decisions see them.
    let store = reopen(backend, store, now + 1).await;
    let due = store
        .promote_due(now + 60 * SECOND, 100)
        .await
        .expect("promote");
    assert_eq!(due, 1, "the first job's retry");
    let retried = take(&store, &["q"], 1, now + 60 * SECOND).await;
    assert_eq!((taken_ids(&retried), retried[0].attempt), (vec![ids[0]], 2));
    let seen = Mutex::new(None);
    store
        .fail_job(ack(&retried[0]), now, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") =
                Some((ctx.job_policy.cloned(), queue_policy_of(ctx)));
            retry(now, 1, "x")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some((Some(fixed(60 * SECOND)), Some(fixed(5 * SECOND))))
    );
    close(store).await;
}

async fn expired_leases_go_to_the_decision(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 3], T0).await;
    let short = take_on(&store, &["q"], 1, 10 * SECOND, None, T0).await;
    let long = take_on(&store, &["q"], 2, 20 * SECOND, None, T0).await;
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 10 * SECOND)
    );

    let expiry = T0 + 10 * SECOND;
    assert_eq!(
        store
            .expire_leases(expiry - 1, 100, &again(expiry - 1, "lost"))
            .await,
        Ok(0)
    );
    assert_eq!(
        store
            .expire_leases(expiry, 100, &again(expiry, "lost"))
            .await,
        Ok(1)
    );
    let shown = get(&store, short[0].id).await;
    assert_eq!(
        (shown.state.status, shown.state.failures),
        (Status::Ready, 1)
    );
    assert_eq!(shown.errors.len(), 1);
    // Its old lease is gone.
    let results = store
        .complete_jobs(&[ack(&short[0])], true, expiry)
        .await
        .expect("commit");
    assert!(matches!(results[0], Err(StoreError::NotInFlight { .. })));

    // A heartbeat moves a lease, never past the longest an attempt may be held (from the
    // take); a stale token cannot.
    const DAY: u64 = 86_400 * SECOND;
    let beat = store
        .extend_lease(ack(&long[0]), 30 * SECOND, DAY, T0 + 15 * SECOND)
        .await;
    assert_eq!(beat, Ok(T0 + 45 * SECOND));
    let capped = store
        .extend_lease(ack(&long[0]), 30 * SECOND, 40 * SECOND, T0 + 16 * SECOND)
        .await;
    assert_eq!(capped, Ok(T0 + 40 * SECOND));
    let stale = Ack {
        id: long[1].id,
        lease: long[0].lease_token,
    };
    assert_eq!(
        store.extend_lease(stale, 30 * SECOND, DAY, T0).await,
        Err(StoreError::LeaseLost { id: long[1].id })
    );
    let at = T0 + 20 * SECOND;
    assert_eq!(
        store.expire_leases(at, 100, &dead(at, "lease lost")).await,
        Ok(1)
    );
    assert_eq!(status(&store, long[1].id).await, Some(Status::Dead));
    assert_eq!(status(&store, long[0].id).await, Some(Status::InFlight));
    // At most `max` per call.
    let at = T0 + 45 * SECOND;
    assert_eq!(store.expire_leases(at, 0, &again(at, "lost")).await, Ok(0));
    assert_eq!(store.expire_leases(at, 1, &again(at, "lost")).await, Ok(1));
    assert_eq!(store.next_wakeup().await.expect("next wakeup"), None);
    assert_eq!(ids.len(), 3);

    let store = reopen(backend, store, at).await;
    let shown = get(&store, long[1].id).await;
    assert_eq!(
        (shown.state.status, shown.errors.len()),
        (Status::Dead, 1),
        "the dead job and its error survived"
    );
    close(store).await;
}

async fn due_jobs_are_promoted(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").at(T0 + SECOND),
            job("q").at(T0 + 2 * SECOND),
            job("q").at(T0 + 2 * SECOND),
            job("q").at(T0 + 3 * SECOND),
        ],
        T0,
    )
    .await;
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + SECOND)
    );
    assert_eq!(
        store
            .promote_due(T0 + SECOND - 1, 100)
            .await
            .expect("promote"),
        0
    );
    assert!(take(&store, &["q"], 10, T0 + SECOND - 1).await.is_empty());
    assert_eq!(
        store.promote_due(T0 + SECOND, 100).await.expect("promote"),
        1
    );
    assert_eq!(
        store.next_wakeup().await.expect("next wakeup"),
        Some(T0 + 2 * SECOND)
    );
    assert_eq!(status(&store, ids[0]).await, Some(Status::Ready));
    // At most `max` at a time.
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        1
    );
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        1
    );
    assert_eq!(
        store
            .promote_due(T0 + 2 * SECOND, 1)
            .await
            .expect("promote"),
        0
    );
    let counts = store.counts().await.expect("counts");
    assert_eq!((counts[0].ready, counts[0].scheduled), (3, 1));

    // Reopened before the last one is due: it waits; after, it is ready.
    let store = reopen(backend, store, T0 + 2 * SECOND).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Scheduled));
    close(store).await;
    let store = backend.open(T0 + 3 * SECOND).await;
    assert_eq!(status(&store, ids[3]).await, Some(Status::Ready));
    assert_eq!(
        taken_ids(&take(&store, &["q"], 10, T0 + 3 * SECOND).await),
        ids
    );
    close(store).await;
}

async fn a_closed_stream_releases_its_jobs(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let seven = take_on(&store, &["q"], 2, 30 * SECOND, Some(7), T0).await;
    let eight = take_on(&store, &["q"], 1, 30 * SECOND, Some(8), T0).await;
    let plain = take_on(&store, &["q"], 1, 30 * SECOND, None, T0).await;
    let nine = take_on(&store, &["q"], 1, 30 * SECOND, Some(9), T0).await;
    assert_eq!(
        (
            store.claim(7).await.expect("claim").jobs.len(),
            store.claim(8).await.expect("claim").jobs.len()
        ),
        (2, 1)
    );
    // An acknowledged job no longer counts against its stream.
    store
        .complete_jobs(&[ack(&nine[0])], true, T0)
        .await
        .expect("completed");
    assert_eq!(store.claim(9).await.expect("claim").jobs.len(), 0);

    assert_eq!(store.release_claim(7).await.expect("release"), 2);
    assert_eq!(store.claim(7).await.expect("claim").jobs.len(), 0);
    for job in &seven {
        let shown = get(&store, job.id).await;
        assert_eq!(
            (shown.state.status, shown.state.failures, shown.errors.len()),
            (Status::Ready, 0, 0),
            "released without an attempt"
        );
    }
    assert_eq!(status(&store, eight[0].id).await, Some(Status::InFlight));
    assert_eq!(status(&store, plain[0].id).await, Some(Status::InFlight));
    assert_eq!(store.release_claim(12_345).await.expect("release"), 0);
    assert_eq!(
        taken_ids(&take(&store, &["q"], 5, T0).await),
        taken_ids(&seven)
    );
    assert_eq!(ids.len(), 5);

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.claim(8).await.expect("claim").jobs.len(), 0);
    assert_eq!(status(&store, nine[0].id).await, Some(Status::Completed));
    close(store).await;
}

async fn dead_jobs_are_replayed(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![job("q"), job("q").kind("other"), job("r"), job("q")],
        T0,
    )
    .await;
    kill(&store, "q", &ids[..2], T0).await;
    kill(&store, "r", &ids[2..3], T0).await;
    let ready = ids[3];
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ready]);

    // By id: only dead jobs are replayed; failures are kept without a reset.
    let replayed = store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: Some(vec![ids[0], ready]),
                    filter: JobFilter::default(),
                },
                policy: None,
                reset_attempts: false,
            },
            T0 + 5,
        )
        .await
        .expect("replayed");
    assert_eq!(
        replayed,
        Replayed {
            ids: vec![ids[0]],
            skipped: vec![(ready, NotReplayed::NotDead(Status::InFlight))],
        }
    );
    let shown = get(&store, ids[0]).await;
    assert_eq!(
        (
            shown.state.status,
            shown.state.failures,
            shown.state.run_at_ms
        ),
        (Status::Ready, 1, T0 + 5)
    );
    assert_eq!(
        (shown.state.finished_at_ms, shown.state.dead_reason.clone()),
        (None, None)
    );
    assert_eq!(shown.errors.len(), 1, "the history is kept");
    assert_eq!(status(&store, ready).await, Some(Status::InFlight));

    // By filter, with a new policy and a fresh attempt count.
    let policy = fixed(90 * SECOND);
    let replayed = store
        .replay_jobs(
            &Replay {
                selection: Selection {
                    ids: None,
                    filter: JobFilter {
                        queue: Some("q".into()),
                        status: Some(Status::Dead),
                        kind: Some("other".into()),
                        ..JobFilter::default()
                    },
                },
                policy: Some(StoredPolicy::new(policy.clone())),
                reset_attempts: true,
            },
            T0 + 6,
        )
        .await
        .expect("replayed");
    assert_eq!(replayed.ids, [ids[1]]);
    assert!(replayed.skipped.is_empty());
    let shown = get(&store, ids[1]).await;
    assert_eq!(
        (
            shown.state.failures,
            shown.state.first_failure_at_ms,
            shown.state.last_delay_ms
        ),
        (0, None, None)
    );
    assert_eq!(shown.spec.policy, Some(StoredPolicy::new(policy.clone())));
    assert_eq!(
        status(&store, ids[2]).await,
        Some(Status::Dead),
        "other queue"
    );

    // The replayed job fails again: the decision sees the new policy and attempt 1, and the
    // new error is added to the history, not written over it.
    let taken = take(&store, &["q"], 10, T0 + 7).await;
    let again = taken.iter().find(|t| t.id == ids[1]).expect("taken");
    assert_eq!(again.attempt, 1);
    let seen = Mutex::new(None);
    store
        .fail_job(ack(again), T0 + 7, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") = ctx.job_policy.cloned();
            dead(T0 + 7, "again")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(
        seen.into_inner().expect("not poisoned"),
        Some(policy.clone())
    );
    let errors: Vec<(u32, String)> = get(&store, ids[1])
        .await
        .errors
        .into_iter()
        .map(|e| (e.attempt, e.message))
        .collect();
    assert_eq!(errors, [(1, "fatal".to_owned()), (1, "again".to_owned())]);

    let store = reopen(backend, store, T0 + 8).await;
    assert_eq!(
        get(&store, ids[1]).await.spec.policy,
        Some(StoredPolicy::new(policy.clone()))
    );
    close(store).await;
}

/// A replay never makes two unfinished jobs share a unique key: a dead job whose key an
/// unfinished job holds stays dead and is reported; once the key is free it is replayed and
/// holds the key again.
async fn replay_respects_unique_keys(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let old = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    kill(&store, "q", &[old], T0).await;
    let new = enqueue(&store, vec![job("q").key("k")], T0).await[0];
    let by_id = |ids: Vec<JobId>| Replay {
        selection: Selection {
            ids: Some(ids),
            filter: JobFilter {
                status: Some(Status::Dead),
                ..JobFilter::default()
            },
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = store
        .replay_jobs(&by_id(vec![old]), T0 + 1)
        .await
        .expect("answered");
    assert_eq!(
        replayed,
        Replayed {
            ids: vec![],
            skipped: vec![(
                old,
                NotReplayed::KeyHeld {
                    key: "k".into(),
                    holder: new
                }
            )],
        }
    );
    assert_eq!(status(&store, old).await, Some(Status::Dead));
    // By filter too.
    let all_dead = Replay {
        selection: Selection {
            ids: None,
            filter: JobFilter {
                status: Some(Status::Dead),
                ..JobFilter::default()
            },
        },
        policy: None,
        reset_attempts: false,
    };
    let replayed = store
        .replay_jobs(&all_dead, T0 + 1)
        .await
        .expect("answered");
    assert!(replayed.ids.is_empty());
    assert_eq!(replayed.skipped.len(), 1);
    // Two dead jobs with one key: only the first comes back.
    kill(&store, "q", &[new], T0 + 2).await;
    let replayed = store
        .replay_jobs(&by_id(vec![old, new, 999_999]), T0 + 3)
        .await
        .expect("answered");
    assert_eq!(replayed.ids, [old]);
    assert_eq!(
        replayed.skipped,
        [
            (
                new,
                NotReplayed::KeyHeld {
                    key: "k".into(),
                    holder: old
                }
            ),
            (999_999, NotReplayed::NotFound),
        ]
    );
    let refused = insert(&store, vec![job("q").key("k")], OnDuplicate::Refuse, T0 + 3).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(h), .. }) if h == old),
        "{refused:?}"
    );
    let store = reopen(backend, store, T0 + 4).await;
    let refused = insert(&store, vec![job("q").key("k")], OnDuplicate::Refuse, T0 + 4).await;
    assert!(
        matches!(refused, Err(StoreError::Duplicate { holder: KeyHolder::Job(h), .. }) if h == old),
        "{refused:?}"
    );
    close(store).await;
}

async fn jobs_are_deleted_by_selection(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("q").key("k"),
            job("q").kind("x"),
            job("q").kind("x"),
            job("r").kind("x"),
            job("q"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["q"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[0]]);

    // By id (an in-flight job too), ignoring ids that do not exist.
    let deleted = store
        .delete_jobs(&Selection {
            ids: Some(vec![ids[0], 777_777]),
            filter: JobFilter::default(),
        })
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[0]]);
    assert!(store.get_job(ids[0]).await.expect("readable").is_none());
    let results = store
        .complete_jobs(&[ack(&taken[0])], true, T0)
        .await
        .expect("commit");
    assert_eq!(results, [Err(StoreError::NotFound(ids[0]))]);
    // Its unique key is free.
    enqueue(&store, vec![job("q").key("k")], T0).await;

    // By filter: queue and type.
    let deleted = store
        .delete_jobs(&Selection {
            ids: None,
            filter: JobFilter {
                queue: Some("q".into()),
                status: None,
                kind: Some("x".into()),
                ..JobFilter::default()
            },
        })
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[1], ids[2]]);
    // Ids narrowed by the filter.
    let deleted = store
        .delete_jobs(&Selection {
            ids: Some(vec![ids[3], ids[4]]),
            filter: JobFilter {
                queue: Some("r".into()),
                status: Some(Status::Ready),
                kind: None,
                ..JobFilter::default()
            },
        })
        .await
        .expect("deleted");
    assert_eq!(deleted, [ids[3]]);
    let left = list(&store, JobFilter::default(), None, 100).await;
    assert_eq!(left.len(), 2);
    assert_eq!(left[0], ids[4]);

    let store = reopen(backend, store, T0).await;
    for id in &ids[..4] {
        assert!(
            store.get_job(*id).await.expect("readable").is_none(),
            "job {id}"
        );
    }
    close(store).await;
}

async fn finished_jobs_are_purged_after_retention(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(&store, vec![job("q"); 5], T0).await;
    let taken = take(&store, &["q"], 5, T0).await;
    store
        .complete_jobs(&[ack(&taken[0])], true, T0 + 1_000)
        .await
        .expect("done");
    store
        .complete_jobs(&[ack(&taken[1])], true, T0 + 5_000)
        .await
        .expect("done");
    store
        .fail_job(ack(&taken[2]), T0 + 1_000, &dead(T0 + 1_000, "x"))
        .await
        .expect("dead");
    store
        .fail_job(ack(&taken[3]), T0 + 5_000, &dead(T0 + 5_000, "x"))
        .await
        .expect("dead");

    // Completed and dead jobs have their own cut-offs; unfinished jobs are never purged.
    assert_eq!(store.purge_finished(T0 + 999, T0 + 999, 100).await, Ok(0));
    assert_eq!(store.purge_finished(T0 + 2_000, T0, 100).await, Ok(1));
    assert_eq!(status(&store, ids[0]).await, None);
    assert_eq!(status(&store, ids[2]).await, Some(Status::Dead));
    assert_eq!(
        store.purge_finished(T0 + 2_000, T0 + 2_000, 100).await,
        Ok(1)
    );
    assert_eq!(status(&store, ids[2]).await, None);
    // At most `max` at a time.
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 1).await, Ok(1));
    let store = reopen(backend, store, T0).await;
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 1).await, Ok(1));
    assert_eq!(store.purge_finished(u64::MAX, u64::MAX, 100).await, Ok(0));
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[4]]
    );
    assert_eq!(status(&store, ids[4]).await, Some(Status::Ready));
    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, JobFilter::default(), None, 100).await,
        [ids[4]]
    );
    close(store).await;
}

async fn list_filters_and_pages(backend: &impl Backend) {
    let store = backend.open(T0).await;
    let ids = enqueue(
        &store,
        vec![
            job("a").kind("x"),
            job("b").kind("y"),
            job("a").kind("y").at(T0 + SECOND),
            job("a").kind("x"),
            job("b").kind("x"),
            job("a").kind("x"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["b"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [ids[1]]);
    let filter = |queue: Option<&str>, status: Option<Status>, kind: Option<&str>| JobFilter {
        queue: queue.map(str::to_owned),
        status,
        kind: kind.map(str::to_owned),
        ..JobFilter::default()
    };
    let pick = |indexes: &[usize]| indexes.iter().map(|i| ids[*i]).collect::<Vec<_>>();

    assert_eq!(list(&store, filter(None, None, None), None, 100).await, ids);
    assert_eq!(
        list(&store, filter(Some("a"), None, None), None, 100).await,
        pick(&[0, 2, 3, 5])
    );
    assert_eq!(
        list(
            &store,
            filter(None, Some(Status::Scheduled), None),
            None,
            100
        )
        .await,
        pick(&[2])
    );
    assert_eq!(
        list(
            &store,
            filter(None, Some(Status::InFlight), None),
            None,
            100
        )
        .await,
        pick(&[1])
    );
    assert_eq!(
        list(&store, filter(None, None, Some("x")), None, 100).await,
        pick(&[0, 3, 4, 5])
    );
    assert_eq!(
        list(
            &store,
            filter(Some("a"), Some(Status::Ready), Some("x")),
            None,
            100
        )
        .await,
        pick(&[0, 3, 5])
    );
    assert!(
        list(&store, filter(Some("zzz"), None, None), None, 100)
            .await
            .is_empty()
    );
    // Pages in id order, after a given id; a type filter pages by matching jobs.
    assert_eq!(
        list(&store, filter(None, None, None), None, 2).await,
        pick(&[0, 1])
    );
    assert_eq!(
        list(&store, filter(None, None, None), Some(ids[1]), 2).await,
        pick(&[2, 3])
    );
    assert_eq!(
        list(&store, filter(None, None, None), Some(ids[3]), 2).await,
        pick(&[4, 5])
    );
    assert!(
        list(&store, filter(None, None, None), Some(ids[5]), 2)
            .await
            .is_empty()
    );
    assert_eq!(
        list(&store, filter(None, None, Some("x")), Some(ids[0]), 2).await,
        pick(&[3, 4])
    );

    let store = reopen(backend, store, T0).await;
    assert_eq!(
        list(&store, filter(None, Some(Status::Ready), None), None, 100).await,
        pick(&[0, 1, 3, 4, 5])
    );
    close(store).await;
}

async fn counts_per_queue_and_status(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert!(store.counts().await.expect("counts").is_empty());
    let ids = enqueue(
        &store,
        vec![
            job("b"),
            job("a").at(T0 + SECOND),
            job("a"),
            job("a"),
            job("a"),
            job("c"),
        ],
        T0,
    )
    .await;
    let taken = take(&store, &["a"], 3, T0).await;
    store
        .complete_jobs(&[ack(&taken[0])], true, T0)
        .await
        .expect("done");
    store
        .fail_job(ack(&taken[1]), T0, &dead(T0, "x"))
        .await
        .expect("dead");
    store
        .delete_jobs(&Selection {
            ids: Some(vec![ids[5]]),
            filter: JobFilter::default(),
        })
        .await
        .expect("deleted");
    let counts =
        |queue: &str, [scheduled, ready, in_flight, completed, dead]: [u64; 5]| QueueCounts {
            queue: queue.to_owned(),
            scheduled,
            ready,
            in_flight,
            completed,
            dead,
        };
    // Sorted by queue; a queue with no jobs left is not listed.
    assert_eq!(
        store.counts().await.expect("counts"),
        [counts("a", [1, 0, 1, 1, 1]), counts("b", [0, 1, 0, 0, 0])]
    );

    let store = reopen(backend, store, T0 + SECOND).await;
    assert_eq!(
        store.counts().await.expect("counts"),
        [counts("a", [0, 2, 0, 1, 1]), counts("b", [0, 1, 0, 0, 0])]
    );
    close(store).await;
}

async fn queue_configs_are_kept(backend: &impl Backend) {
    let store = backend.open(T0).await;
    assert_eq!(store.queue("x").await.expect("queue"), None);
    assert!(store.queues().await.expect("queues").is_empty());
    let paused = QueueConfig {
        policy: None,
        paused: true,
        ..QueueConfig::default()
    };
    store
        .update_queue("x", &|_| Some(paused.clone()))
        .await
        .expect("put");
    assert_eq!(store.queue("x").await.expect("queue"), Some(paused.clone()));
    enqueue(&store, vec![job("jobs-only")], T0).await;
    // Queues with settings, and queues that only have jobs (with default settings).
    assert_eq!(
        store.queues().await.expect("queues"),
        [
            ("jobs-only".to_owned(), QueueConfig::default()),
            ("x".to_owned(), paused)
        ]
    );
    let policy = fixed(7 * SECOND);
    let configured = QueueConfig {
        policy: Some(StoredPolicy::new(policy.clone())),
        paused: false,
        ..QueueConfig::default()
    };
    store
        .update_queue("x", &|_| Some(configured.clone()))
        .await
        .expect("put");
    assert_eq!(
        store.queue("x").await.expect("queue"),
        Some(configured.clone())
    );
    store
        .update_queue("y", &|_| Some(QueueConfig::default()))
        .await
        .expect("put");

    let store = reopen(backend, store, T0).await;
    assert_eq!(store.queue("x").await.expect("queue"), Some(configured));
    assert_eq!(
        store.queue("y").await.expect("queue"),
        Some(QueueConfig::default())
    );
    // The queue policy reaches decisions after a reopen.
    let id = enqueue(&store, vec![job("x")], T0).await[0];
    let taken = take(&store, &["x"], 1, T0).await;
    assert_eq!(taken_ids(&taken), [id]);
    let seen = Mutex::new(None);
    store
        .fail_job(ack(&taken[0]), T0, &|ctx: &DecideContext<'_>| {
            *seen.lock().expect("not poisoned") = queue_policy_of(ctx);
            dead(T0, "x")(ctx)
        })
        .await
        .expect("failed");
    assert_eq!(seen.into_inner().expect("not poisoned"), Some(policy));
    close(store).await;
}

// --- the suite, once per backend -------------------------------------------------------------

/// One `#[tokio::test]` per case, in a module named after the backend; `$backend` is an
/// expression giving a fresh [`Backend`] for each test.
macro_rules! conformance_suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            conformance_suite!(@cases $backend;
                enqueue_is_atomic_and_ids_increase,
                unique_keys_refuse_or_return_the_holder,
                take_is_by_priority_then_age_and_leases,
                complete_needs_the_current_lease,
                fail_asks_the_decision_and_records_it,
                expired_leases_go_to_the_decision,
                due_jobs_are_promoted,
                a_closed_stream_releases_its_jobs,
                dead_jobs_are_replayed,
                replay_respects_unique_keys,
                jobs_are_deleted_by_selection,
                finished_jobs_are_purged_after_retention,
                list_filters_and_pages,
                counts_per_queue_and_status,
                queue_configs_are_kept,
            );
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(&$backend).await;
            }
        )+
    };
}

conformance_suite!(embedded, Embedded::new());
