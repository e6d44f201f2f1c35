//! The worker runtime against the real server, in real time with short policies: outcomes,
//! heartbeats, batched completions, shutdown, panics, unknown types, tokens.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::{ADMIN, CountingProxy, Server, eventually, joined, wait_for_errors, wait_for_status};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tenax_client::{
    Client, Job, JobError, JobFilter, JobStatus, NewJob, NewToken, Outcome, OutcomeExt as _, Role,
    UnknownTypes, Worker,
};

use crate::common;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Email {
    to: String,
}

#[derive(Debug, thiserror::Error)]
#[error("sending to {to}")]
struct SendError {
    to: String,
    #[source]
    cause: std::io::Error,
}

/// Every job of `queue`, by id.
async fn jobs_of(client: &Client, queue: &str) -> Vec<tenax_client::JobInfo> {
    use futures_util::TryStreamExt as _;
    client
        .all_jobs(JobFilter::new().queue(queue))
        .try_collect()
        .await
        .expect("the jobs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_each_type_with_its_payload_and_completes_the_jobs() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_emails = seen.clone();
    let seen_numbers = seen.clone();
    let worker = Worker::builder(client.clone())
        .queue("mail")
        .queue("numbers")
        .concurrency(4)
        .handler("email.send", move |job: Job<Email>| {
            let seen = seen_emails.clone();
            async move {
                seen.lock().expect("seen").push(job.payload.to.clone());
                Ok::<_, JobError>(())
            }
        })
        .handler("square", move |job: Job<u64>| {
            let seen = seen_numbers.clone();
            async move {
                seen.lock()
                    .expect("seen")
                    .push((job.payload * job.payload).to_string());
                Ok::<_, JobError>(())
            }
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let mail = client
        .enqueue(&NewJob::new("mail", "email.send").payload(Email {
            to: "ada@example.com".into(),
        }))
        .await
        .expect("enqueued");
    let number = client
        .enqueue(&NewJob::new("numbers", "square").payload(12))
        .await
        .expect("enqueued");
    // A payload that does not fit its handler's type: dead at once, no retry would fix it.
    let misfit = client
        .enqueue(&NewJob::new("numbers", "square").payload("twelve"))
        .await
        .expect("enqueued");
    // A type without a handler: dead at once, though its policy would retry it.
    let unknown = client
        .enqueue(&NewJob::new("mail", "sms.send").policy(json!({"type": "list", "delays": ["1h"]})))
        .await
        .expect("enqueued");
    for id in [mail.id, number.id] {
        let job = wait_for_status(&client, id, JobStatus::Completed).await;
        assert!(job.errors.is_empty(), "{job:?}");
    }
    let misfit = wait_for_errors(&client, misfit.id, JobStatus::Dead, 1).await;
    let message = &misfit.errors[0].message;
    assert!(
        message.contains("does not fit u64") && message.contains("invalid type: string"),
        "{message}"
    );
    let unknown = wait_for_errors(&client, unknown.id, JobStatus::Dead, 1).await;
    assert_eq!(
        unknown.errors[0].message,
        "no handler for job type \"sms.send\" in this worker (it handles: \"email.send\", \"square\")"
    );
    assert_eq!(
        unknown.dead_reason.as_deref(),
        Some("the failure was marked not retryable")
    );
    let mut seen = seen.lock().expect("seen").clone();
    seen.sort();
    assert_eq!(seen, ["144", "ada@example.com"]);
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert_eq!((stats.received, stats.succeeded, stats.failed), (4, 2, 2));
    assert_eq!(stats.completed, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_type_is_retried_when_the_worker_says_so() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let worker = Worker::builder(client.clone())
        .queue("mail")
        .unknown_types(UnknownTypes::Retry)
        .handler("email.send", |_job: Job<Email>| async {
            Ok::<_, JobError>(())
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let unknown = client
        .enqueue(&NewJob::new("mail", "sms.send").policy(json!({"type": "list", "delays": ["1h"]})))
        .await
        .expect("enqueued");
    let unknown = wait_for_errors(&client, unknown.id, JobStatus::Scheduled, 1).await;
    assert_eq!((unknown.failures, unknown.attempt), (1, 2));
    assert_eq!(
        unknown.errors[0].message,
        "no handler for job type \"sms.send\" in this worker (it handles: \"email.send\")"
    );
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert_eq!(stats.failed, 1);
}

/// An `Email` that refuses fields it does not have.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictEmail {
    #[allow(dead_code)]
    to: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_fields_the_type_lacks_are_ignored_unless_it_denies_them() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_handler = seen.clone();
    let worker = Worker::builder(client.clone())
        .queue("mail")
        .handler("email.send", move |job: Job<Email>| {
            let seen = seen_by_handler.clone();
            async move {
                seen.lock().expect("seen").push(job.payload.to);
                Ok::<_, JobError>(())
            }
        })
        .handler("email.strict", |_job: Job<StrictEmail>| async {
            Ok::<_, JobError>(())
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    // "locale": a field the producer added before the workers know it.
    let payload = json!({"to": "ada@example.com", "locale": "fr"});
    let lenient = client
        .enqueue(&NewJob::new("mail", "email.send").payload(&payload))
        .await
        .expect("enqueued");
    let strict = client
        .enqueue(&NewJob::new("mail", "email.strict").payload(&payload))
        .await
        .expect("enqueued");
    wait_for_status(&client, lenient.id, JobStatus::Completed).await;
    let dead = wait_for_errors(&client, strict.id, JobStatus::Dead, 1).await;
    let message = &dead.errors[0].message;
    assert!(
        message.contains("does not fit") && message.contains("unknown field `locale`"),
        "{message}"
    );
    assert_eq!(*seen.lock().expect("seen"), ["ada@example.com"]);
    handle.shutdown();
    joined(running).await.expect("a clean stop");
}

/// Runs of jobs: id, attempt, when.
type Runs = Arc<Mutex<Vec<(u64, u32, Instant)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_choose_the_outcome() {
    let server = Server::start(&[]).await;
    let client = server.client();
    // When each job ran (by id), to see the delays between its runs.
    let runs: Runs = Arc::default();
    let retry_at = SystemTime::now() + Duration::from_millis(900);
    let record = |runs: &Runs, id, attempt| {
        runs.lock()
            .expect("runs")
            .push((id, attempt, Instant::now()));
    };
    let worker = Worker::builder(client.clone())
        .queue("outcomes")
        .concurrency(5)
        .handler("plain", {
            let runs = runs.clone();
            move |job: Job<Email>| {
                record(&runs, job.id, job.attempt);
                let to = job.payload.to;
                async move {
                    Err::<(), _>(SendError {
                        to,
                        cause: std::io::Error::other("connection refused"),
                    })
                }
            }
        })
        .handler("not-retryable", |_job: Job<serde_json::Value>| async move {
            "x".parse::<u32>().not_retryable()?;
            Ok::<_, JobError>(())
        })
        .handler("retry-in", {
            let runs = runs.clone();
            move |job: Job<serde_json::Value>| {
                record(&runs, job.id, job.attempt);
                async move {
                    if job.attempt == 1 {
                        return Err(JobError::retry_in(Duration::from_millis(700))
                            .with_message("rate limited"));
                    }
                    Ok(())
                }
            }
        })
        .handler("retry-at", {
            let runs = runs.clone();
            move |job: Job<serde_json::Value>| {
                record(&runs, job.id, job.attempt);
                async move {
                    if job.attempt == 1 {
                        return Err(Outcome::RetryAt(retry_at));
                    }
                    Ok(())
                }
            }
        })
        .handler("snooze", {
            let runs = runs.clone();
            let snoozed = Arc::new(AtomicU32::new(0));
            move |job: Job<serde_json::Value>| {
                record(&runs, job.id, job.attempt);
                let first = snoozed.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if first {
                        return Err(Outcome::Snooze(Duration::from_millis(600)));
                    }
                    Ok(())
                }
            }
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let quick = json!({"type": "list", "delays": ["100ms", "100ms"]});
    let enqueue = |kind: &'static str| {
        let client = client.clone();
        let quick = quick.clone();
        async move {
            client
                .enqueue(
                    &NewJob::new("outcomes", kind)
                        .payload(json!({"to": "ada@example.com"}))
                        .policy(quick),
                )
                .await
                .expect("enqueued")
                .id
        }
    };
    let plain = enqueue("plain").await;
    let not_retryable = enqueue("not-retryable").await;
    let retry_in = enqueue("retry-in").await;
    let retry_at_job = enqueue("retry-at").await;
    let snooze = enqueue("snooze").await;

    // Any error: retried by the list policy (two retries) until dead, its chain recorded.
    let dead = wait_for_errors(&client, plain, JobStatus::Dead, 3).await;
    assert!(dead.dead_reason.is_some());
    for error in &dead.errors {
        assert_eq!(
            error.message,
            "sending to ada@example.com: connection refused"
        );
        let detail = error.detail.as_ref().expect("a detail");
        assert_eq!(
            detail["chain"],
            json!(["sending to ada@example.com", "connection refused"])
        );
        assert!(
            detail["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("SendError")),
            "{detail}"
        );
    }
    // Not retryable: dead at its first failure.
    let dead = wait_for_errors(&client, not_retryable, JobStatus::Dead, 1).await;
    assert_eq!(dead.errors[0].message, "invalid digit found in string");
    // Retry in: the second run comes after the chosen delay, not the policy's 100 ms.
    let done = wait_for_errors(&client, retry_in, JobStatus::Completed, 1).await;
    assert_eq!(done.errors[0].message, "rate limited");
    // Retry at: the second run comes at the chosen time.
    let done = wait_for_errors(&client, retry_at_job, JobStatus::Completed, 1).await;
    assert!(done.errors[0].message.starts_with("retry at "), "{done:?}");
    // Snooze: run again later without using an attempt, and nothing recorded.
    let done = wait_for_status(&client, snooze, JobStatus::Completed).await;
    assert!(done.errors.is_empty(), "{done:?}");
    assert_eq!(done.failures, 0);

    let runs = runs.lock().expect("runs").clone();
    let of = |id: u64| -> Vec<(u32, Instant)> {
        runs.iter()
            .filter(|(job, _, _)| *job == id)
            .map(|(_, attempt, at)| (*attempt, *at))
            .collect()
    };
    assert_eq!(of(plain).len(), 3, "{runs:?} {plain}");
    let retried = of(retry_in);
    assert_eq!(retried.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
    assert!(retried[1].1 - retried[0].1 >= Duration::from_millis(690));
    let at = of(retry_at_job);
    assert_eq!(at.len(), 2);
    let snoozed = of(snooze);
    assert_eq!(
        snoozed.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 1],
        "a snooze uses no attempt"
    );
    assert!(snoozed[1].1 - snoozed[0].1 >= Duration::from_millis(590));
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert_eq!(stats.failed, 3 + 1 + 1 + 1 + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_job_whose_handler_outlives_its_lease() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let worker = Worker::builder(client.clone())
        .queue("long")
        .concurrency(2)
        .lease(Duration::from_secs(1))
        .handler("slow", move |_job: Job<()>| {
            let runs = counted.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3500)).await;
                Ok::<_, JobError>(())
            }
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let id = client
        .enqueue(&NewJob::new("long", "slow"))
        .await
        .expect("enqueued")
        .id;
    let job = wait_for_status(&client, id, JobStatus::Completed).await;
    assert_eq!(
        (job.attempt, job.failures),
        (1, 0),
        "the lease never expired: {job:?}"
    );
    assert!(job.errors.is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "it ran once");
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert!(stats.heartbeats >= 5, "{stats:?}");
    assert_eq!(stats.lost, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_batched() {
    let server = Server::start(&[]).await;
    let proxy = CountingProxy::start(server.address).await;
    let client = server.client();
    let through_proxy = Client::new(&proxy.url).expect("a client");
    let worker = Worker::builder(through_proxy)
        .queue("many")
        .concurrency(10)
        .handler("quick", |_job: Job<u32>| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, JobError>(())
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    const JOBS: u64 = 60;
    client
        .enqueue_many(
            &(0..JOBS)
                .map(|i| NewJob::new("many", "quick").payload(i))
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch");
    let running = tokio::spawn(worker.run());
    eventually("every job completed", || {
        let client = client.clone();
        async move {
            let stats = client.stats().await.expect("stats");
            (stats.queue("many").completed == JOBS).then_some(())
        }
    })
    .await;
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    let batches = proxy.count("POST /api/jobs/complete");
    assert_eq!(
        proxy.count_matching("POST /api/jobs/", "/complete"),
        batches,
        "no job was completed on its own"
    );
    assert_eq!(batches, stats.ack_requests);
    assert_eq!(stats.completed, JOBS);
    assert!(
        batches <= JOBS / 4,
        "{batches} completion requests for {JOBS} jobs"
    );
    assert_eq!(proxy.count("POST /api/take/stream"), 1);
}

/// A worker with jobs in hand whose handlers finish within the shutdown timeout: every job
/// ends completed or back to ready with no attempt used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_finishes_running_handlers_and_gives_back_the_rest() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let started = Arc::new(AtomicU32::new(0));
    let counted = started.clone();
    let worker = Worker::builder(client.clone())
        .queue("drain")
        .concurrency(4)
        .shutdown_timeout(Duration::from_secs(10))
        .handler("work", move |job: Job<u32>| {
            let started = counted.clone();
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(400)).await;
                assert!(job.is_stopping(), "the handler sees the shutdown");
                Ok::<_, JobError>(())
            }
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    client
        .enqueue_many(
            &(0..20)
                .map(|i| NewJob::new("drain", "work").payload(i))
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch");
    let running = tokio::spawn(worker.run());
    eventually("four handlers running", || {
        let started = started.clone();
        async move { (started.load(Ordering::SeqCst) >= 4).then_some(()) }
    })
    .await;
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    // The server takes back what the closed stream held as soon as it sees the close.
    let jobs = eventually("no job in flight", || {
        let client = client.clone();
        async move {
            let jobs = jobs_of(&client, "drain").await;
            jobs.iter()
                .all(|j| j.status != JobStatus::InFlight)
                .then_some(jobs)
        }
    })
    .await;
    assert_eq!(jobs.len(), 20);
    let completed = jobs
        .iter()
        .filter(|j| j.status == JobStatus::Completed)
        .count();
    assert_eq!(completed as u64, stats.completed);
    assert!(completed >= 4, "the running handlers finished: {stats:?}");
    for job in &jobs {
        assert!(
            matches!(job.status, JobStatus::Completed | JobStatus::Ready),
            "job {} is {:?}",
            job.id,
            job.status
        );
        assert_eq!(job.failures, 0, "no attempt used: {job:?}");
    }
    assert_eq!(stats.abandoned, 0);
    assert_eq!(stats.lost, 0);
}

/// Handlers still running at the shutdown deadline are stopped, and their jobs go back to
/// ready without using an attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_past_the_shutdown_deadline_are_stopped_and_their_jobs_given_back() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let started = Arc::new(AtomicU32::new(0));
    let counted = started.clone();
    let worker = Worker::builder(client.clone())
        .queue("stuck")
        .concurrency(3)
        .shutdown_timeout(Duration::from_millis(300))
        .handler("forever", move |_job: Job<u32>| {
            let started = counted.clone();
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, JobError>(())
            }
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    client
        .enqueue_many(
            &(0..5)
                .map(|i| NewJob::new("stuck", "forever").payload(i))
                .collect::<Vec<_>>(),
        )
        .await
        .expect("a batch");
    let running = tokio::spawn(worker.run());
    eventually("three handlers running", || {
        let started = started.clone();
        async move { (started.load(Ordering::SeqCst) == 3).then_some(()) }
    })
    .await;
    let asked = Instant::now();
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(stats.abandoned, 3, "{stats:?}");
    for job in jobs_of(&client, "stuck").await {
        let job = wait_for_status(&client, job.id, JobStatus::Ready).await;
        assert_eq!(
            (job.attempt, job.failures),
            (1, 0),
            "no attempt used: {job:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_its_job_and_the_worker_goes_on() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let worker = Worker::builder(client.clone())
        .queue("fragile")
        .concurrency(1)
        .handler("maybe", |job: Job<bool>| async move {
            if job.payload {
                panic!("boom on job {}", job.id);
            }
            Ok::<_, JobError>(())
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let policy = json!({"type": "list", "delays": ["1h"]});
    let bad = client
        .enqueue(&NewJob::new("fragile", "maybe").payload(true).policy(policy))
        .await
        .expect("enqueued")
        .id;
    let good = client
        .enqueue(&NewJob::new("fragile", "maybe").payload(false))
        .await
        .expect("enqueued")
        .id;
    let failed = wait_for_errors(&client, bad, JobStatus::Scheduled, 1).await;
    assert_eq!(
        failed.errors[0].message,
        format!("the handler panicked: boom on job {bad}")
    );
    wait_for_status(&client, good, JobStatus::Completed).await;
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert_eq!((stats.failed, stats.completed), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_a_token_and_a_refused_stream() {
    let server = Server::start(&["--auth", "on", "--admin-token", ADMIN]).await;
    let admin = server.client_with(ADMIN);
    let worker_token = admin
        .create_token(&NewToken::new("worker", Role::Worker).queues(["jobs.*"]))
        .await
        .expect("a token");
    let id = admin
        .enqueue(&NewJob::new("jobs.a", "t"))
        .await
        .expect("enqueued")
        .id;
    let worker = Worker::builder(server.client_with(&worker_token.token))
        .queue("jobs.a")
        .handler("t", |_job: Job<()>| async { Ok::<_, JobError>(()) })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    wait_for_status(&admin, id, JobStatus::Completed).await;
    handle.shutdown();
    joined(running).await.expect("a clean stop");

    // Out of the token's scope, or without a token: refused for good, and the worker says why.
    let out_of_scope = Worker::builder(server.client_with(&worker_token.token))
        .queue("billing")
        .handler("t", |_job: Job<()>| async { Ok::<_, JobError>(()) })
        .build()
        .expect("a worker");
    let error = joined(tokio::spawn(out_of_scope.run()))
        .await
        .expect_err("forbidden");
    assert!(error.is_forbidden(), "{error}");
    let bad_queue = Worker::builder(server.client_with(ADMIN))
        .queue("jobs.a")
        .queue("no spaces")
        .handler("t", |_job: Job<()>| async { Ok::<_, JobError>(()) })
        .build()
        .expect("a worker");
    let error = joined(tokio::spawn(bad_queue.run()))
        .await
        .expect_err("invalid");
    assert_eq!(error.field(), Some("queues[1]"), "{error}");
}

#[test]
fn bad_settings_are_refused_when_the_worker_is_built() {
    let client = Client::new("http://127.0.0.1:1").expect("a client");
    let refused =
        |builder: tenax_client::WorkerBuilder| builder.build().expect_err("refused").to_string();
    let ok = |job: Job<()>| async move {
        drop(job);
        Ok::<_, JobError>(())
    };
    assert!(refused(Worker::builder(client.clone()).handler("t", ok)).starts_with("queue:"));
    assert!(refused(Worker::builder(client.clone()).queue("q")).starts_with("handler:"));
    assert!(
        refused(
            Worker::builder(client.clone())
                .queue("q")
                .handler("t", ok)
                .handler("t", ok)
        )
        .contains("two handlers")
    );
    assert!(
        refused(
            Worker::builder(client.clone())
                .queue("q")
                .handler("t", ok)
                .concurrency(0)
        )
        .starts_with("concurrency:")
    );
    assert!(
        refused(
            Worker::builder(client)
                .queue("q")
                .handler("t", ok)
                .lease(Duration::from_secs(2))
                .heartbeat_every(Duration::from_secs(2))
        )
        .starts_with("heartbeat_every:")
    );
}

/// A worker names itself to the server: `<hostname>-<pid>` by default, or the name it is
/// given; the cluster lists it under that name, streaming, with the job it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_listed_by_its_name() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let build = |name: Option<&str>, queue: &str| {
        let (started, release) = (started.clone(), release.clone());
        let builder = Worker::builder(client.clone()).queue(queue).handler(
            "hold",
            move |_: Job<serde_json::Value>| {
                let (started, release) = (started.clone(), release.clone());
                async move {
                    started.notify_one();
                    release.notified().await;
                    Ok::<_, JobError>(())
                }
            },
        );
        match name {
            Some(name) => builder.name(name),
            None => builder,
        }
        .build()
        .expect("a worker")
    };
    let default = build(None, "named-a");
    let custom = build(Some("billing worker 7"), "named-b");
    let handles = [default.handle(), custom.handle()];
    let running = [tokio::spawn(default.run()), tokio::spawn(custom.run())];
    client
        .enqueue(&NewJob::new("named-b", "hold"))
        .await
        .expect("enqueued");
    started.notified().await;

    let expected_default = tenax_client::default_name();
    assert!(
        expected_default.ends_with(&format!("-{}", std::process::id())),
        "{expected_default}"
    );
    let listed = eventually("both workers listed, streaming", || {
        let client = client.clone();
        async move {
            let cluster = client.cluster().await.ok()?;
            let mut workers: Vec<(String, Vec<String>, u64, bool)> = cluster
                .workers()
                .map(|w| (w.name.clone(), w.queues.clone(), w.in_flight, w.streaming))
                .collect();
            workers.sort();
            (workers.len() == 2 && workers.iter().any(|w| w.2 == 1)).then_some(workers)
        }
    })
    .await;
    let mut expected = vec![
        (
            "billing worker 7".to_owned(),
            vec!["named-b".to_owned()],
            1,
            true,
        ),
        (expected_default, vec!["named-a".to_owned()], 0, true),
    ];
    expected.sort();
    assert_eq!(listed, expected);
    release.notify_one();
    for handle in &handles {
        handle.shutdown();
    }
    for task in running {
        joined(task).await.expect("a clean stop");
    }
    let refused = Worker::builder(client.clone())
        .queue("q")
        .name("")
        .fallback(|_: Job<serde_json::Value>| async { Ok::<_, JobError>(()) })
        .build()
        .expect_err("an empty name");
    assert!(refused.to_string().contains("worker name"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_returned_value_is_the_jobs_result() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let worker = Worker::builder(client.clone())
        .queue("math")
        .handler("square", |job: Job<u64>| async move {
            Ok::<_, JobError>(json!({"square": job.payload * job.payload}))
        })
        .handler("nothing", |_job: Job<serde_json::Value>| async move {
            Ok::<_, JobError>(())
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let square = client
        .enqueue(&NewJob::new("math", "square").payload(12))
        .await
        .expect("enqueued")
        .id;
    let nothing = client
        .enqueue(&NewJob::new("math", "nothing"))
        .await
        .expect("enqueued")
        .id;
    let done = wait_for_status(&client, square, JobStatus::Completed).await;
    assert_eq!(
        done.result::<serde_json::Value>()
            .expect("a result")
            .expect("JSON"),
        json!({"square": 144})
    );
    let done = wait_for_status(&client, nothing, JobStatus::Completed).await;
    assert!(done.result.is_none(), "() is no result: {done:?}");
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert_eq!(stats.completed, 2);
}

/// A result over the server's payload limit refuses the whole batch it went in: the worker
/// sends the batch's jobs one by one, and the one whose result is refused completes without it;
/// the others keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_result_is_left_out_and_the_others_kept() {
    let server = Server::start(&["--max-payload-bytes", "64"]).await;
    let client = server.client();
    // Whichever batch the large result goes in is refused as a whole (a batch of up to three).
    let worker = Worker::builder(client.clone())
        .queue("sizes")
        .concurrency(3)
        .ack_batch(3)
        .handler("size", |job: Job<usize>| async move {
            Ok::<_, JobError>("x".repeat(job.payload))
        })
        .build()
        .expect("a worker");
    let ids: Vec<u64> = client
        .enqueue_many(&[10, 100, 20].map(|n| NewJob::new("sizes", "size").payload(n)))
        .await
        .expect("enqueued")
        .iter()
        .map(|e| e.id)
        .collect();
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let mut results = Vec::new();
    for id in &ids {
        let done = wait_for_status(&client, *id, JobStatus::Completed).await;
        results.push(done.result.map(|r| r.get().len()));
    }
    // 10 and 20 characters, with their quotes; the 100 left out.
    assert_eq!(results, [Some(12), None, Some(22)]);
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert_eq!((stats.completed, stats.lost), (3, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_jobs_handler_is_told_and_the_job_ends_cancelled() {
    let server = Server::start(&[]).await;
    let client = server.client();
    let (started, mut running_jobs) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let told = Arc::new(Mutex::new(Vec::new()));
    let seen = told.clone();
    let worker = Worker::builder(client.clone())
        .queue("cancel")
        .concurrency(2)
        .lease(Duration::from_secs(1))
        .handler("wait", move |job: Job<bool>| {
            let (started, seen) = (started.clone(), seen.clone());
            async move {
                assert!(!job.is_cancelled());
                started.send(job.id).expect("the test listens");
                // Waits for nothing but its cancellation.
                job.cancelled().await;
                seen.lock()
                    .expect("seen")
                    .push((job.id, job.is_cancelled()));
                // `true`: stop by returning an error; `false`: by returning normally.
                if job.payload {
                    Err(JobError::retry("stopped: cancelled"))
                } else {
                    Ok(())
                }
            }
        })
        .build()
        .expect("a worker");
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let mut ids = Vec::new();
    for by_error in [true, false] {
        let id = client
            .enqueue(&NewJob::new("cancel", "wait").payload(by_error))
            .await
            .expect("enqueued")
            .id;
        ids.push(id);
    }
    for _ in &ids {
        running_jobs.recv().await.expect("a handler started");
    }
    for &id in &ids {
        let cancelled = client.cancel_job(id).await.expect("cancelled");
        assert_eq!(cancelled.outcome, tenax_client::CancelOutcome::Marked);
        assert_eq!(cancelled.job.status, JobStatus::InFlight);
    }
    for &id in &ids {
        let job = wait_for_status(&client, id, JobStatus::Cancelled).await;
        assert_eq!(job.errors.len(), 1, "{job:?}");
    }
    let mut told = told.lock().expect("told").clone();
    told.sort_unstable();
    assert_eq!(told, [(ids[0], true), (ids[1], true)]);
    handle.shutdown();
    let stats = joined(running).await.expect("a clean stop");
    assert_eq!((stats.failed, stats.succeeded), (2, 0), "{stats:?}");

    // A finished job cannot be cancelled: the server says so.
    let error = client.cancel_job(ids[0]).await.expect_err("finished");
    assert_eq!(error.status(), Some(409), "{error}");
    // Cancelling by selection: a ready job of the queue.
    let ready = client
        .enqueue(&NewJob::new("cancel", "wait").payload(true))
        .await
        .expect("enqueued")
        .id;
    let done = client
        .cancel_jobs(&tenax_client::CancelSelection::queue("cancel"))
        .await
        .expect("cancelled");
    assert_eq!((done.cancelled_ids, done.marked), (vec![ready], 0));
}
