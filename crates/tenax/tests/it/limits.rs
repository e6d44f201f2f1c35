//! Per-queue limits over real HTTP: many concurrent workers never hold more of a queue's jobs
//! than its concurrency limit, nor start more than its rate limit in any period (counted by
//! the workers, and from the server's own start times); a waiting worker is woken when room
//! appears; limits are set, shown with their use, and refused naming the field. With
//! `TENAX_TEST_STORE=postgres` the same on PostgreSQL.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Api, Options, TestServer};
use reqwest::Method;
use serde_json::json;

use crate::common;

/// Runs `workers` tasks that take from `queue` (up to `max` at a time, long-polling) and
/// complete each job after `hold`, until `total` jobs are done. Returns the most jobs the
/// workers held at once, and the server's start time of every job (its lease's end less the
/// lease).
async fn work(
    api: &Api,
    queue: &str,
    workers: usize,
    max: usize,
    hold: Duration,
    total: usize,
) -> (usize, Vec<u64>) {
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let starts = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (api, queue) = (api.clone(), queue.to_owned());
        let (held, most, done, starts) = (held.clone(), most.clone(), done.clone(), starts.clone());
        tasks.push(tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < total {
                assert!(Instant::now() < deadline, "the jobs were not done in time");
                let jobs = api
                    .take_with(json!({"queues": [queue], "max": max, "wait": "200ms",
                        "lease": "30s"}))
                    .await;
                let now_held = held.fetch_add(jobs.len(), Ordering::SeqCst) + jobs.len();
                most.fetch_max(now_held, Ordering::SeqCst);
                for job in &jobs {
                    starts.lock().push(job.lease_expires_at_ms - 30_000);
                }
                tokio::time::sleep(hold).await;
                for job in &jobs {
                    held.fetch_sub(1, Ordering::SeqCst);
                    api.complete(job).await;
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a worker");
    }
    let starts = starts.lock().clone();
    (most.load(Ordering::SeqCst), starts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_never_hold_more_than_the_concurrency_limit() {
    let server = TestServer::start(Options::system()).await;
    server
        .put("/api/queues/lim?create=true", json!({"concurrency": 3}))
        .await;
    let jobs: Vec<_> = (0..60)
        .map(|i| json!({"queue": "lim", "payload": i}))
        .collect();
    server.enqueue_batch(jobs).await;
    // The server's own count, sampled while the workers run.
    let sampler = {
        let api = server.api.clone();
        tokio::spawn(async move {
            let mut most = 0;
            for _ in 0..200 {
                let queue = api.get("/api/queues/lim").await;
                most = most.max(queue["counts"]["in_flight"].as_u64().expect("a count"));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            most
        })
    };
    let (most, starts) = work(&server, "lim", 12, 2, Duration::from_millis(15), 60).await;
    assert_eq!(starts.len(), 60);
    assert!(most <= 3, "the workers held {most} at once");
    assert_eq!(most, 3, "twelve workers fill the limit");
    let sampled = sampler.await.expect("the sampler");
    assert!(sampled <= 3, "the server counted {sampled} in flight");
    let queue = server.get("/api/queues/lim").await;
    assert_eq!(queue["concurrency"], 3);
    assert_eq!(queue["counts"]["completed"], 60);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_workers_never_start_more_than_the_rate_limit_in_any_period() {
    let server = TestServer::start(Options::system()).await;
    server
        .put(
            "/api/queues/rated?create=true",
            json!({"rate": {"limit": 10, "period": "500ms"}}),
        )
        .await;
    let jobs: Vec<_> = (0..40)
        .map(|i| json!({"queue": "rated", "payload": i}))
        .collect();
    server.enqueue_batch(jobs).await;
    let began = Instant::now();
    let (_, mut starts) = work(&server, "rated", 8, 4, Duration::from_millis(1), 40).await;
    starts.sort_unstable();
    // In any 500 ms (half-open, ending at a start), at most 10 starts.
    for (i, end) in starts.iter().enumerate() {
        let within = starts[..=i].iter().filter(|s| **s + 500 > *end).count();
        assert!(
            within <= 10,
            "{within} starts in the 500 ms up to {end}: {starts:?}"
        );
    }
    // Forty at ten per half second take at least one and a half seconds.
    assert!(
        began.elapsed() >= Duration::from_millis(1_500),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_worker_is_woken_when_room_appears() {
    let server = TestServer::manual().await;
    server
        .put("/api/queues/one?create=true", json!({"concurrency": 1}))
        .await;
    server
        .enqueue_batch(vec![json!({"queue": "one"}), json!({"queue": "one"})])
        .await;
    let first = server.take_one("one").await;
    let waiter = {
        let api = server.api.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let jobs = api
                .take_with(json!({"queues": ["one"], "max": 5, "wait": "20s"}))
                .await;
            (jobs, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the limit held the waiter");
    server.complete(&first).await;
    let (jobs, waited) = waiter.await.expect("the waiter");
    assert_eq!(jobs.len(), 1, "room for one");
    assert!(waited < Duration::from_secs(5), "woken late: {waited:?}");

    // A rate limit frees room when its period moves on: a waiter sees it as soon as the
    // clock does.
    server
        .put(
            "/api/queues/slow?create=true",
            json!({"rate": {"limit": 2, "period": "10s"}}),
        )
        .await;
    server
        .enqueue_batch((0..4).map(|_| json!({"queue": "slow"})).collect())
        .await;
    assert_eq!(server.take(&["slow"], 10).await.len(), 2);
    let queue = server.get("/api/queues/slow").await;
    assert_eq!(
        queue["rate"],
        json!({"limit": 2, "period_ms": 10_000, "used": 2})
    );
    let waiter = {
        let api = server.api.clone();
        tokio::spawn(async move {
            api.take_with(json!({"queues": ["slow"], "max": 5, "wait": "20s"}))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the rate held the waiter");
    server.advance(Duration::from_secs(11));
    let jobs = waiter.await.expect("the waiter");
    assert_eq!(jobs.len(), 2);
    let queue = server.get("/api/queues/slow").await;
    assert_eq!(queue["rate"]["used"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_set_shown_removed_and_refused_naming_the_field() {
    let server = TestServer::manual().await;
    let set = server
        .put(
            "/api/queues/q?create=true",
            json!({"concurrency": 5, "rate": {"limit": 100, "period": "1m"}}),
        )
        .await;
    assert_eq!(set["concurrency"], 5);
    assert_eq!(
        set["rate"],
        json!({"limit": 100, "period_ms": 60_000, "used": 0})
    );
    let list = server.get("/api/queues").await;
    assert_eq!(list["queues"][0]["concurrency"], 5);
    // Other settings leave the limits; null removes one.
    let paused = server
        .put("/api/queues/q?create=true", json!({"paused": true}))
        .await;
    assert_eq!(paused["concurrency"], 5);
    let removed = server
        .put("/api/queues/q?create=true", json!({"concurrency": null}))
        .await;
    assert!(removed.get("concurrency").is_none(), "{removed}");
    assert_eq!(removed["rate"]["limit"], 100);
    let removed = server
        .put("/api/queues/q?create=true", json!({"rate": null}))
        .await;
    assert!(removed.get("rate").is_none(), "{removed}");
    for (body, field) in [
        (json!({"concurrency": 0}), "concurrency"),
        (json!({"concurrency": 2_000_000}), "concurrency"),
        (json!({"concurrency": -1}), "concurrency"),
        (json!({"rate": {"limit": 0, "period": "1s"}}), "rate.limit"),
        (json!({"rate": {"limit": 5, "period": 0}}), "rate.period"),
        (json!({"rate": {"limit": 5}}), "rate.period"),
        (
            json!({"rate": {"limit": 5, "period": "1s", "burst": 2}}),
            "rate.burst",
        ),
        (json!({"rate": 5}), "rate"),
    ] {
        let error = server
            .error(Method::PUT, "/api/queues/q", Some(body.clone()), 400)
            .await;
        assert_eq!(error.field.as_deref(), Some(field), "{body}: {error:?}");
    }
    let shown = server.get("/api/queues/q").await;
    assert!(shown.get("concurrency").is_none() && shown.get("rate").is_none());
}
