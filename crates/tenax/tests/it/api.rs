//! End-to-end tests of the native HTTP API: the real server on a loopback port, driven over HTTP.
//!
//! Time: most tests run the server on a manual clock (`common::T0`) and move it, so retry
//! delays of minutes or days take no time. One test (`real_time_retries_follow_the_schedule`)
//! runs on the system clock to check that the maintenance loop wakes up on time.

use std::time::{Duration, Instant};

use common::{Options, T0, TestServer, Waiter, ids, ms};
use reqwest::Method;
use serde_json::{Value, json};
use tenax_core::clock::rfc3339;
use tenax_policy::{Decision, Failure, Outcome, Preview, RetryPolicy, SeededRandom, parse_policy};

use crate::common;

const SECOND: u64 = 1_000;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn millis(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A minimal job for `queue`.
fn job(queue: &str) -> Value {
    json!({ "queue": queue })
}

// --- enqueue ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_one_and_read_it_back() {
    let server = TestServer::manual().await;
    let answer = server
        .expect(
            Method::POST,
            "/api/jobs",
            Some(
                json!({"queue": "mail", "type": "send", "payload": {"to": "a@example.com"},
                        "priority": 3}),
            ),
            201,
        )
        .await;
    let id = answer["id"].as_u64().expect("an id");
    assert_eq!(
        answer,
        json!({"id": id, "created": true, "status": "ready", "run_at": rfc3339(T0)})
    );
    let shown = server.job(id).await;
    assert_eq!(
        shown,
        json!({"id": id, "queue": "mail", "type": "send", "payload": {"to": "a@example.com"},
               "priority": 3, "status": "ready", "attempt": 1, "failures": 0,
               "run_at": rfc3339(T0), "created_at": rfc3339(T0), "errors": []})
    );

    // Later: by delay, by RFC 3339 time, by milliseconds since the epoch.
    let delayed = server
        .expect(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "mail", "delay": "90s"})),
            201,
        )
        .await;
    assert_eq!(delayed["status"], "scheduled");
    assert_eq!(ms(&delayed["run_at"]), T0 + 90 * SECOND);
    let at = server
        .expect(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "mail", "run_at": "2027-01-15T09:00:00Z"})),
            201,
        )
        .await;
    assert_eq!(rfc3339(T0), "2027-01-15T08:00:00.000Z");
    assert_eq!(ms(&at["run_at"]), T0 + HOUR);
    // Any offset is read, and the answer is in UTC.
    for offset in ["2027-01-15T10:00:00+01:00", "2027-01-15T04:30:00.000-04:30"] {
        let at = server
            .expect(
                Method::POST,
                "/api/jobs",
                Some(json!({"queue": "mail", "run_at": offset})),
                201,
            )
            .await;
        assert_eq!(at["run_at"], "2027-01-15T09:00:00.000Z", "{offset}");
    }
    let at_ms = server
        .expect(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "mail", "run_at": T0 + 5 * SECOND})),
            201,
        )
        .await;
    assert_eq!(ms(&at_ms["run_at"]), T0 + 5 * SECOND);
    // A time in the past is ready at once.
    let past = server
        .expect(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "mail", "run_at": T0 - HOUR})),
            201,
        )
        .await;
    assert_eq!(past["status"], "ready");

    assert_eq!(server.totals().await, (5, 2, 0, 0, 0));
    // The payload defaults to null and the type to "".
    let bare = server.enqueue(job("mail")).await;
    let bare = server.job(bare).await;
    assert_eq!(
        (&bare["payload"], &bare["type"]),
        (&json!(null), &json!(""))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_enqueue_is_all_or_nothing() {
    let server = TestServer::manual().await;
    let stored = server
        .enqueue_batch(vec![
            json!({"queue": "b", "type": "x"}),
            json!({"queue": "b", "priority": 5}),
            json!({"queue": "c", "delay": "1m"}),
        ])
        .await;
    assert_eq!(stored.len(), 3);
    assert!(
        stored.windows(2).all(|w| w[0] < w[1]),
        "ids in order: {stored:?}"
    );
    server
        .enqueue(json!({"queue": "b", "unique_key": "taken"}))
        .await;
    let before = server.totals().await;
    assert_eq!(before, (1, 3, 0, 0, 0));

    let ok = json!({"queue": "b"});
    let bad = |field: &str, value: Value| {
        let mut job = json!({"queue": "b"});
        job[field] = value;
        job
    };
    // One bad job refuses the whole batch; the error names it by index.
    for (jobs, field) in [
        (
            vec![ok.clone(), bad("priority", json!("high")), ok.clone()],
            "jobs[1].priority",
        ),
        (
            vec![ok.clone(), ok.clone(), json!({"queue": "no spaces"})],
            "jobs[2].queue",
        ),
        (
            vec![ok.clone(), bad("delay", json!("soon"))],
            "jobs[1].delay",
        ),
        (
            vec![bad("policy", json!({"type": "fixed"}))],
            "jobs[0].policy.delay",
        ),
        (
            vec![ok.clone(), bad("retry_limit", json!(100_001))],
            "jobs[1].retry_limit",
        ),
        (
            vec![ok.clone(), bad("unique_key", json!(""))],
            "jobs[1].unique_key",
        ),
        (vec![ok.clone(), json!({"priority": 1})], "jobs[1]"),
    ] {
        let body = json!({ "jobs": jobs });
        if field == "jobs[1]" {
            // A missing required field: named by the message.
            let error = server
                .error(Method::POST, "/api/jobs/batch", Some(body), 400)
                .await;
            assert!(error.message.contains("queue"), "{error:?}");
        } else {
            server.invalid("/api/jobs/batch", body, field).await;
        }
    }
    server
        .invalid("/api/jobs/batch", json!({"jobs": []}), "jobs")
        .await;
    // A duplicate unique key (against a stored job, or within the batch) refuses it all too,
    // naming the job of the batch and what holds the key: never an id that was not stored.
    for (jobs, field, holder) in [
        (
            vec![ok.clone(), json!({"queue": "b", "unique_key": "taken"})],
            "jobs[1].unique_key",
            "(job ",
        ),
        (
            vec![
                json!({"queue": "b", "unique_key": "twice"}),
                ok.clone(),
                json!({"queue": "b", "unique_key": "twice"}),
            ],
            "jobs[2].unique_key",
            "of jobs[0]",
        ),
    ] {
        let error = server
            .error(
                Method::POST,
                "/api/jobs/batch",
                Some(json!({ "jobs": jobs })),
                409,
            )
            .await;
        assert_eq!(error.code, "duplicate");
        assert_eq!(error.field.as_deref(), Some(field), "{error:?}");
        assert!(error.message.contains(holder), "{error:?}");
    }

    // Nothing of the refused batches was stored, and ids continue after the stored ones.
    assert_eq!(server.totals().await, before);
    let listed = server.get("/api/jobs?queue=b").await;
    assert_eq!(ids(&listed["jobs"]).len(), 3);
    let next = server.enqueue(ok).await;
    assert!(next > *stored.last().expect("ids"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_keys_refuse_or_return_the_existing_job() {
    let server = TestServer::manual().await;
    let first = server
        .enqueue(json!({"queue": "u", "unique_key": "order-1"}))
        .await;
    assert_eq!(server.job(first).await["unique_key"], "order-1");

    let error = server
        .error(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "u", "unique_key": "order-1"})),
            409,
        )
        .await;
    assert_eq!(error.code, "duplicate");
    assert!(error.message.contains(&first.to_string()), "{error:?}");

    let existing = server
        .expect(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "u", "unique_key": "order-1", "on_duplicate": "existing"})),
            200,
        )
        .await;
    assert_eq!(
        existing,
        json!({"id": first, "created": false, "status": "ready", "run_at": rfc3339(T0)})
    );

    // Keys are per queue.
    let elsewhere = server
        .enqueue(json!({"queue": "u2", "unique_key": "order-1"}))
        .await;
    assert_ne!(elsewhere, first);

    // In a batch, on_duplicate applies to each job.
    let batch = server
        .expect(
            Method::POST,
            "/api/jobs/batch",
            Some(json!({"on_duplicate": "existing", "jobs": [
                {"queue": "u", "unique_key": "order-1"},
                {"queue": "u", "unique_key": "order-2"},
            ]})),
            201,
        )
        .await;
    assert_eq!(batch["jobs"][0]["id"], first);
    assert_eq!(batch["jobs"][0]["created"], false);
    assert_eq!(batch["jobs"][1]["created"], true);
    assert_eq!(server.totals().await.1, 3);

    // A finished job frees its key.
    let taken = server.take_one("u").await;
    assert_eq!(taken.id, first);
    server.complete(&taken).await;
    let again = server
        .enqueue(json!({"queue": "u", "unique_key": "order-1"}))
        .await;
    assert!(again > first);
}

// --- take ------------------------------------------------------------------------------------

/// A job carries the W3C trace context it was enqueued with (its own field, else the request's
/// `traceparent` header) to `GET` and to the worker that takes it; a malformed one is refused
/// with the field named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_context_goes_from_producer_to_worker() {
    const OWN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let server = TestServer::manual().await;
    let mut own = job("traced");
    own["traceparent"] = json!(OWN);
    let first = server.enqueue(own).await;
    let send = |path: &str, body: Value| {
        server
            .api
            .http()
            .post(server.url(path))
            .header("traceparent", HEADER)
            .json(&body)
    };
    let answer: Value = send(
        "/api/jobs/batch",
        json!({"jobs": [job("traced"), job("traced")]}),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let by_header = ids(&answer["jobs"]);
    let mut both = job("traced");
    both["traceparent"] = json!(OWN);
    let answer: Value = send("/api/jobs", both)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let own_wins = answer["id"].as_u64().unwrap();
    let plain = server.enqueue(job("traced")).await;

    assert_eq!(server.job(first).await["traceparent"], OWN);
    assert_eq!(server.job(by_header[1]).await["traceparent"], HEADER);
    assert_eq!(server.job(own_wins).await["traceparent"], OWN);
    assert!(server.job(plain).await.get("traceparent").is_none());
    let taken = server.take(&["traced"], 10).await;
    let traces: Vec<Value> = taken
        .iter()
        .map(|t| t.json.get("traceparent").cloned().unwrap_or(Value::Null))
        .collect();
    assert_eq!(
        traces,
        [
            json!(OWN),
            json!(HEADER),
            json!(HEADER),
            json!(OWN),
            Value::Null
        ]
    );

    let mut bad = job("traced");
    bad["traceparent"] = json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331");
    server
        .invalid("/api/jobs", bad.clone(), "traceparent")
        .await;
    server
        .invalid(
            "/api/jobs/batch",
            json!({"jobs": [job("traced"), bad]}),
            "jobs[1].traceparent",
        )
        .await;
    let refused = server
        .api
        .http()
        .post(server.url("/api/jobs"))
        .header("traceparent", "not-a-trace")
        .json(&job("traced"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["error"]["field"], "traceparent", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_is_highest_priority_first_then_fifo_across_queues() {
    let server = TestServer::manual().await;
    let mut id = std::collections::HashMap::new();
    for (name, queue, priority) in [
        ("a0", "a", 0),
        ("b5", "b", 5),
        ("a5", "a", 5),
        ("c9", "c", 9),
        ("b0", "b", 0),
        ("a-1", "a", -1),
        ("b5'", "b", 5),
    ] {
        let job_id = server
            .enqueue(json!({"queue": queue, "priority": priority}))
            .await;
        id.insert(name, job_id);
    }
    let taken = server.take(&["a", "b"], 10).await;
    let got: Vec<u64> = taken.iter().map(|j| j.id).collect();
    let want: Vec<u64> = ["b5", "a5", "b5'", "a0", "b0", "a-1"]
        .iter()
        .map(|n| id[n])
        .collect();
    assert_eq!(got, want);
    let priorities: Vec<i64> = taken.iter().map(|j| j.priority).collect();
    assert_eq!(priorities, [5, 5, 5, 0, 0, -1]);
    for job in &taken {
        assert_eq!(job.attempt, 1);
        assert_eq!(
            job.lease_expires_at_ms,
            T0 + 30 * SECOND,
            "the default lease"
        );
    }
    // The queue not asked for was untouched.
    let c = server.take(&["c"], 10).await;
    assert_eq!(c.iter().map(|j| j.id).collect::<Vec<_>>(), [id["c9"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_returns_at_most_max() {
    let server = TestServer::manual().await;
    let stored = server.enqueue_batch(vec![job("m"); 5]).await;
    let first = server.take(&["m"], 3).await;
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), stored[..3]);
    let second = server.take(&["m"], 3).await;
    assert_eq!(second.iter().map(|j| j.id).collect::<Vec<_>>(), stored[3..]);
    assert!(server.take(&["m"], 3).await.is_empty());
    // Without max, one.
    server.enqueue_batch(vec![job("m"); 2]).await;
    assert_eq!(server.take_with(json!({"queues": ["m"]})).await.len(), 1);
    assert_eq!(server.totals().await, (0, 1, 6, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_returns_as_soon_as_a_job_arrives() {
    let server = TestServer::manual().await;
    let api = server.api.clone();
    let started = Instant::now();
    let waiter = tokio::spawn(async move {
        let jobs = api
            .take_with(json!({"queues": ["lp"], "wait": "20s"}))
            .await;
        (jobs, started.elapsed())
    });
    // Give the take time to start waiting; a job for another queue does not answer it.
    tokio::time::sleep(millis(200)).await;
    server.enqueue(job("other")).await;
    tokio::time::sleep(millis(100)).await;
    assert!(!waiter.is_finished(), "the take waits for its own queue");
    let id = server.enqueue(job("lp")).await;
    let (jobs, elapsed) = waiter.await.expect("the waiter");
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [id]);
    server.complete(&jobs[0]).await;
    assert!(elapsed >= millis(300), "{elapsed:?}");
    assert!(
        elapsed < secs(5),
        "answered on arrival, not at the end: {elapsed:?}"
    );

    // A scheduled job coming due answers a waiting take too.
    let later = server.enqueue(json!({"queue": "lp", "delay": "30s"})).await;
    let api = server.api.clone();
    let waiter = tokio::spawn(async move {
        api.take_with(json!({"queues": ["lp"], "wait": "20s"}))
            .await
    });
    tokio::time::sleep(millis(100)).await;
    server.advance(secs(30));
    let jobs = tokio::time::timeout(secs(5), waiter)
        .await
        .expect("answered once due")
        .expect("the waiter");
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [later]);

    // Nothing arrives: an empty answer after the wait.
    let started = Instant::now();
    let jobs = server
        .take_with(json!({"queues": ["lp"], "wait": "300ms"}))
        .await;
    assert!(jobs.is_empty());
    let elapsed = started.elapsed();
    assert!(elapsed >= millis(300) && elapsed < secs(3), "{elapsed:?}");
}

// --- heartbeat and complete ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_extends_the_lease() {
    let server = TestServer::start(Options::manual().flags(&["--max-lease", "1m"])).await;
    let id = server.enqueue(job("hb")).await;
    let taken = server
        .take_with(json!({"queues": ["hb"], "lease": "10s"}))
        .await
        .remove(0);
    assert_eq!(taken.lease_expires_at_ms, T0 + 10 * SECOND);
    let path = format!("/api/jobs/{id}/heartbeat");

    server.advance(secs(8));
    let answer = server
        .post(
            &path,
            json!({"lease_token": taken.lease_token, "lease": "10s"}),
        )
        .await;
    assert_eq!(
        answer,
        json!({"id": id, "lease_expires_at": rfc3339(T0 + 18 * SECOND), "cancelled": false})
    );
    // Past the first lease, still in flight.
    server.advance(secs(5));
    server.assert_nothing_to_take("hb", "50ms").await;
    assert_eq!(server.status(id).await, "in_flight");

    let error = server
        .error(
            Method::POST,
            &path,
            Some(json!({"lease_token": taken.lease_token + 1})),
            409,
        )
        .await;
    assert_eq!(error.code, "lease_lost");
    server
        .invalid(
            &path,
            json!({"lease_token": taken.lease_token, "lease": "2m"}),
            "lease",
        )
        .await;
    // The lease token is required: a heartbeat without it is refused.
    server
        .invalid(&path, json!({"lease": "10s"}), "lease_token")
        .await;
    let error = server.error(Method::POST, &path, None, 400).await;
    assert_eq!(error.field.as_deref(), Some("body"));
    // Without a lease: the default lease (30 s).
    let answer = server
        .post(&path, json!({"lease_token": taken.lease_token}))
        .await;
    assert_eq!(ms(&answer["lease_expires_at"]), T0 + 43 * SECOND);

    server.advance(secs(30));
    server.wait_for(id, "ready").await;
    let error = server
        .error(
            Method::POST,
            &path,
            Some(json!({"lease_token": taken.lease_token})),
            409,
        )
        .await;
    assert_eq!(error.code, "not_in_flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_one_and_many_with_lease_tokens() {
    let server = TestServer::manual().await;
    let stored = server.enqueue_batch(vec![job("c"); 4]).await;
    let taken = server.take(&["c"], 4).await;
    let [a, b, c, d] = [&taken[0], &taken[1], &taken[2], &taken[3]];
    assert_eq!([a.id, b.id, c.id, d.id], stored[..]);

    let answer = server
        .post(
            &format!("/api/jobs/{}/complete", a.id),
            json!({"lease_token": a.lease_token}),
        )
        .await;
    assert_eq!(answer, json!({"id": a.id, "status": "completed"}));
    let shown = server.job(a.id).await;
    assert_eq!(shown["status"], "completed");
    assert_eq!(ms(&shown["finished_at"]), T0);
    let error = server
        .error(
            Method::POST,
            &format!("/api/jobs/{}/complete", a.id),
            Some(json!({"lease_token": a.lease_token})),
            409,
        )
        .await;
    assert_eq!(error.code, "not_in_flight");
    // Another job's token is not this job's lease.
    let error = server
        .error(
            Method::POST,
            &format!("/api/jobs/{}/complete", b.id),
            Some(json!({"lease_token": c.lease_token})),
            409,
        )
        .await;
    assert_eq!(error.code, "lease_lost");

    // Many at once: one result per job.
    let answer = server
        .post(
            "/api/jobs/complete",
            json!({"jobs": [
                {"id": b.id, "lease_token": b.lease_token},
                {"id": c.id, "lease_token": d.lease_token},
                {"id": d.id, "lease_token": d.lease_token},
                {"id": 987_654, "lease_token": 1},
            ]}),
        )
        .await;
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], json!({"id": b.id, "completed": true}));
    assert_eq!(results[1]["completed"], false);
    assert_eq!(results[1]["error"]["code"], "lease_lost");
    assert_eq!(results[2], json!({"id": d.id, "completed": true}));
    assert_eq!(results[3]["error"]["code"], "not_found");
    // Every item needs its lease token.
    server
        .invalid(
            "/api/jobs/complete",
            json!({"jobs": [{"id": d.id}]}),
            "jobs[0].lease_token",
        )
        .await;
    server
        .invalid(
            &format!("/api/jobs/{}/complete", d.id),
            json!({}),
            "lease_token",
        )
        .await;
    assert_eq!(server.totals().await, (0, 0, 1, 3, 0));

    // A lease that expired and was given to another worker: the old token is stale.
    server.advance(secs(30));
    server.wait_for(c.id, "ready").await;
    let again = server.take_one("c").await;
    assert_eq!(again.id, c.id);
    assert_ne!(again.lease_token, c.lease_token);
    let answer = server
        .post(
            "/api/jobs/complete",
            json!({"jobs": [{"id": c.id, "lease_token": c.lease_token}]}),
        )
        .await;
    assert_eq!(answer["results"][0]["error"]["code"], "lease_lost");
    let answer = server
        .post(
            "/api/jobs/complete",
            json!({"jobs": [{"id": c.id, "lease_token": again.lease_token}]}),
        )
        .await;
    assert_eq!(answer["results"][0], json!({"id": c.id, "completed": true}));
    assert_eq!(server.totals().await, (0, 0, 0, 4, 0));
    server
        .invalid("/api/jobs/complete", json!({"jobs": []}), "jobs")
        .await;
}

// --- failures and policies -------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_follow_a_phased_linear_policy_until_dead() {
    let server = TestServer::manual().await;
    let policy = json!({"type": "phased", "min_delay": "10s", "max_delay": "50s",
                        "num_retries": 5, "function": "linear"});
    let id = server
        .enqueue(json!({"queue": "ph", "policy": policy}))
        .await;
    assert_eq!(server.job(id).await["policy"]["type"], "phased");

    for (i, delay) in [10, 20, 30, 40, 50].into_iter().enumerate() {
        let retry = u64::try_from(i).expect("small") + 1;
        let delay = delay * SECOND;
        let taken = server.take_one("ph").await;
        assert_eq!((taken.id, taken.attempt), (id, retry));
        let now = server.now_ms();
        let answer = server
            .fail(&taken, &format!("boom {retry}"), json!({}))
            .await;
        assert_eq!(
            answer,
            json!({"id": id, "status": "scheduled", "failures": retry, "attempt": retry + 1,
                   "run_at": rfc3339(now + delay), "delay_ms": delay})
        );
        let shown = server.job(id).await;
        assert_eq!(shown["status"], "scheduled");
        assert_eq!(ms(&shown["run_at"]), now + delay);
        let errors = shown["errors"].as_array().expect("errors");
        assert_eq!(
            errors.len(),
            usize::try_from(retry).expect("small"),
            "one entry per failure"
        );
        assert_eq!(
            errors.last(),
            Some(
                &json!({"attempt": retry, "at": rfc3339(now), "message": format!("boom {retry}")})
            )
        );
        // Not a millisecond early.
        server.advance(millis(delay - 1));
        server.assert_nothing_to_take("ph", "30ms").await;
        server.advance(millis(1));
    }
    let taken = server.take_one("ph").await;
    assert_eq!(taken.attempt, 6);
    let now = server.now_ms();
    let answer = server.fail(&taken, "boom 6", json!({})).await;
    assert_eq!(
        answer,
        json!({"id": id, "status": "dead", "failures": 6, "dead_reason": "all 5 retries were used"})
    );
    let shown = server.job(id).await;
    assert_eq!(shown["status"], "dead");
    assert_eq!(ms(&shown["finished_at"]), now);
    assert_eq!(shown["errors"].as_array().map(Vec::len), Some(6));
    assert_eq!(ids(&server.get("/api/dead").await["jobs"]), [id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_follow_the_default_polynomial_policy() {
    let server = TestServer::manual().await;
    let id = server.enqueue(job("poly")).await;
    let policy = RetryPolicy::default();
    let mut first = None;
    let mut previous = None;
    for retry in 1..=4u32 {
        let taken = server.take_one("poly").await;
        assert_eq!(taken.attempt, u64::from(retry));
        let now = server.now_ms();
        let answer = server.fail(&taken, "nope", json!({})).await;
        let run_at = ms(&answer["run_at"]);
        let delay = run_at - now;
        assert_eq!(answer["delay_ms"], delay);
        // The documented curve: 15 s + r^4 s, plus up to 30 s·r of jitter.
        let base = 15 * SECOND + u64::from(retry.pow(4)) * SECOND;
        assert!(
            (base..base + 30 * SECOND * u64::from(retry)).contains(&delay),
            "retry {retry}: {delay} ms"
        );
        // Exactly the policy's draw for this job and retry (seeded by both).
        let expected = policy.decide(
            &Failure {
                failure: retry,
                at_ms: now,
                first_failure_at_ms: *first.get_or_insert(now),
                previous_delay_ms: previous,
                outcome: Outcome::Retry,
            },
            &mut SeededRandom::for_retry(&id.to_string(), retry),
        );
        assert_eq!(
            expected,
            Decision::Retry {
                retry,
                at_ms: run_at,
                delay_ms: delay
            }
        );
        previous = Some(delay);
        server.advance(millis(delay));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_outcomes_retry_in_retry_at_snooze_and_not_retryable() {
    let server = TestServer::manual().await;
    let id = server.enqueue(job("out")).await;

    // retry_in: an attempt, at the worker's delay.
    let taken = server.take_one("out").await;
    let answer = server
        .fail(&taken, "later", json!({"retry_in": "90s"}))
        .await;
    assert_eq!(
        answer,
        json!({"id": id, "status": "scheduled", "failures": 1, "attempt": 2,
               "run_at": rfc3339(T0 + 90 * SECOND), "delay_ms": 90 * SECOND})
    );
    server.advance(secs(90));

    // retry_at: an attempt, at the worker's time.
    let taken = server.take_one("out").await;
    assert_eq!(taken.attempt, 2);
    let at = server.now_ms() + 3 * HOUR;
    let answer = server
        .fail(&taken, "at three", json!({"retry_at": rfc3339(at)}))
        .await;
    assert_eq!(
        (answer["failures"].clone(), ms(&answer["run_at"])),
        (json!(2), at)
    );
    server.advance(millis(3 * HOUR));

    // snooze: no attempt used, nothing recorded.
    let taken = server.take_one("out").await;
    assert_eq!(taken.attempt, 3);
    let now = server.now_ms();
    let answer = server
        .fail(&taken, "not yet", json!({"snooze": "5m"}))
        .await;
    assert_eq!(
        answer,
        json!({"id": id, "status": "scheduled", "failures": 2, "attempt": 3,
               "run_at": rfc3339(now + 5 * MINUTE), "delay_ms": 5 * MINUTE})
    );
    let shown = server.job(id).await;
    let messages: Vec<&str> = shown["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["message"].as_str().expect("a message"))
        .collect();
    assert_eq!(messages, ["later", "at three"]);
    server.advance(secs(300));

    let taken = server.take_one("out").await;
    assert_eq!(taken.attempt, 3);
    let path = format!("/api/jobs/{id}/fail");
    // At most one of the four choices.
    for extra in [
        json!({"retry_in": "1s", "snooze": "1s"}),
        json!({"retryable": false, "retry_at": rfc3339(T0)}),
    ] {
        let mut body = json!({"lease_token": taken.lease_token, "error": "x"});
        for (k, v) in extra.as_object().expect("an object") {
            body[k] = v.clone();
        }
        server.invalid(&path, body, "retryable").await;
    }
    // Not retryable: dead at once, with a detailed error.
    let now = server.now_ms();
    let answer = server
        .post(
            &path,
            json!({"lease_token": taken.lease_token, "retryable": false,
                   "error": {"message": "fatal", "detail": {"code": 42}}}),
        )
        .await;
    assert_eq!(
        answer,
        json!({"id": id, "status": "dead", "failures": 3,
               "dead_reason": "the failure was marked not retryable"})
    );
    let shown = server.job(id).await;
    assert_eq!(
        shown["errors"][2],
        json!({"attempt": 3, "at": rfc3339(now), "message": "fatal", "detail": {"code": 42}})
    );
    let error = server
        .error(
            Method::POST,
            &path,
            Some(json!({"lease_token": taken.lease_token, "error": "again"})),
            409,
        )
        .await;
    assert_eq!(error.code, "not_in_flight");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_jobs_are_listed_replayed_and_deleted() {
    let server = TestServer::manual().await;
    let mut dead = Vec::new();
    for kind in ["x", "y", "x"] {
        let id = server
            .enqueue(json!({"queue": "dq", "type": kind, "retry_limit": 0}))
            .await;
        let taken = server.take_one("dq").await;
        let answer = server
            .fail(&taken, &format!("{kind} broke"), json!({}))
            .await;
        assert_eq!(answer["dead_reason"], "the policy allows no retries");
        dead.push(id);
    }
    let [a, b, c] = [dead[0], dead[1], dead[2]];
    assert_eq!(ids(&server.get("/api/dead").await["jobs"]), [a, b, c]);
    assert_eq!(
        ids(&server.get("/api/dead?queue=dq&type=x").await["jobs"]),
        [a, c]
    );
    assert_eq!(
        ids(&server.get("/api/dead?queue=elsewhere").await["jobs"]),
        Vec::<u64>::new()
    );
    let error = server
        .error(Method::GET, "/api/dead?status=ready", None, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("status"));

    // Replay with a new policy and a fresh attempt count; the error history is kept.
    let answer = server
        .post(
            "/api/dead/replay",
            json!({"ids": [a], "policy": {"type": "fixed", "delay": "2m"}, "reset_attempts": true}),
        )
        .await;
    assert_eq!(answer, json!({"replayed": 1, "ids": [a], "skipped": []}));
    let shown = server.job(a).await;
    assert_eq!(
        (&shown["status"], &shown["failures"], &shown["attempt"]),
        (&json!("ready"), &json!(0), &json!(1))
    );
    assert_eq!(shown["policy"]["type"], "fixed");
    assert!(shown.get("dead_reason").is_none() && shown.get("finished_at").is_none());
    let taken = server.take_one("dq").await;
    assert_eq!((taken.id, taken.attempt), (a, 1));
    let now = server.now_ms();
    let answer = server.fail(&taken, "again", json!({})).await;
    assert_eq!(
        ms(&answer["run_at"]),
        now + 2 * MINUTE,
        "the new policy applies"
    );
    assert_eq!(
        server.job(a).await["errors"].as_array().map(Vec::len),
        Some(2)
    );

    // Replay without reset: the attempt count goes on (and the limit of 0 kills it again).
    server.post("/api/dead/replay", json!({"ids": [b]})).await;
    let taken = server.take_one("dq").await;
    assert_eq!((taken.id, taken.attempt), (b, 2));
    assert_eq!(
        server.fail(&taken, "still", json!({})).await["status"],
        "dead"
    );

    // Replaying a job that is not dead does nothing, and says why; a selection is required.
    let status = server.status(a).await;
    assert_eq!(
        server.post("/api/dead/replay", json!({"ids": [a]})).await,
        json!({"replayed": 0, "ids": [], "skipped": [
            {"id": a, "reason": format!("it is {status}, not dead")}
        ]})
    );
    server.invalid("/api/dead/replay", json!({}), "ids").await;
    server
        .invalid(
            "/api/dead/replay",
            json!({"all": true, "policy": {"type": "fixed"}}),
            "policy.delay",
        )
        .await;

    // Delete by queue and type, then all; deleting one job by id.
    assert_eq!(
        server
            .post("/api/dead/delete", json!({"queue": "dq", "type": "x"}))
            .await,
        json!({"deleted": 1, "ids": [c]})
    );
    server
        .error(Method::GET, &format!("/api/jobs/{c}"), None, 404)
        .await;
    server.invalid("/api/dead/delete", json!({}), "ids").await;
    assert_eq!(
        server.post("/api/dead/delete", json!({"all": true})).await,
        json!({"deleted": 1, "ids": [b]})
    );
    server
        .expect(Method::DELETE, &format!("/api/jobs/{a}"), None, 204)
        .await;
    server
        .error(Method::DELETE, &format!("/api/jobs/{a}"), None, 404)
        .await;
    assert_eq!(server.totals().await, (0, 0, 0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_returns_the_job_then_kills_it_past_the_limit() {
    let server = TestServer::start(Options::manual().flags(&["--default-lease", "10s"])).await;
    let id = server
        .enqueue(
            json!({"queue": "le", "policy": {"type": "fixed", "delay": "1m", "retry_limit": 1}}),
        )
        .await;
    let first = server.take_one("le").await;
    assert_eq!(first.lease_expires_at_ms, T0 + 10 * SECOND);

    server.advance(millis(10 * SECOND - 1));
    server.assert_nothing_to_take("le", "30ms").await;
    assert_eq!(server.status(id).await, "in_flight");
    server.advance(millis(1));
    let shown = server
        .wait_until(id, "the first expiry", |j| {
            j["status"] == "ready" && j["errors"].as_array().is_some_and(|e| e.len() == 1)
        })
        .await;
    assert_eq!(
        (&shown["failures"], &shown["attempt"]),
        (&json!(1), &json!(2))
    );
    assert_eq!(
        ms(&shown["run_at"]),
        T0 + 10 * SECOND,
        "ready at once, not after the policy's delay"
    );
    let error = &shown["errors"][0];
    assert_eq!(
        (&error["attempt"], ms(&error["at"])),
        (&json!(1), T0 + 10 * SECOND)
    );
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("lease expired")),
        "{error}"
    );

    // The worker that lost the lease can no longer act on the job.
    let complete = format!("/api/jobs/{id}/complete");
    let stale = json!({"lease_token": first.lease_token});
    let error = server
        .error(Method::POST, &complete, Some(stale.clone()), 409)
        .await;
    assert_eq!(error.code, "not_in_flight");
    let second = server.take_one("le").await;
    assert_eq!(second.attempt, 2);
    let error = server
        .error(Method::POST, &complete, Some(stale), 409)
        .await;
    assert_eq!(error.code, "lease_lost");
    let error = server
        .error(
            Method::POST,
            &format!("/api/jobs/{id}/fail"),
            Some(json!({"lease_token": first.lease_token, "error": "late"})),
            409,
        )
        .await;
    assert_eq!(error.code, "lease_lost");

    // The second expiry is past the one retry allowed.
    server.advance(secs(10));
    let shown = server
        .wait_until(id, "the second expiry", |j| {
            j["status"] == "dead" && j["errors"].as_array().is_some_and(|e| e.len() == 2)
        })
        .await;
    assert_eq!(shown["failures"], 2);
    assert_eq!(
        shown["dead_reason"],
        "the lease expired and all 1 retries were used"
    );
    assert_eq!(shown["errors"].as_array().map(Vec::len), Some(2));
}

/// Settings changed at the same time are all kept: a pause, a TTL, a policy and the
/// override flag sent together to one queue. Each request once read the settings, changed
/// its field and wrote them all back, so one could undo another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_settings_changes_are_all_kept() {
    let server = TestServer::manual().await;
    let policy = json!({"type": "fixed", "delay": 1000, "retry_limit": 3});
    for round in 0..40 {
        // Each change may be the one that makes the queue.
        let path = format!("/api/queues/race{round}");
        let (pause, put) = (
            format!("{path}/pause?create=true"),
            format!("{path}?create=true"),
        );
        let (paused, ttl, policed, forbidden) = tokio::join!(
            server.post(&pause, json!({})),
            server.put(&put, json!({"message_ttl": "1m"})),
            server.put(&put, json!({"policy": policy})),
            server.put(&put, json!({"disable_overrides": true})),
        );
        // Each answer shows its own change.
        assert_eq!(paused["paused"], true, "{paused}");
        assert_eq!(ttl["message_ttl_ms"], 60_000, "{ttl}");
        assert_eq!(policed["policy"]["delay"], 1000, "{policed}");
        assert_eq!(forbidden["disable_overrides"], true, "{forbidden}");
        let shown = server.get(&path).await;
        assert_eq!(
            (
                &shown["paused"],
                &shown["message_ttl_ms"],
                &shown["policy"]["delay"],
                &shown["disable_overrides"]
            ),
            (&json!(true), &json!(60_000), &json!(1000), &json!(true)),
            "round {round}: a change was lost: {shown}"
        );
    }
}

/// The closest names a refusal offers are only those the token may touch: a token scoped to
/// `p1:*` misspelling its queue is not told of project p2's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misspelt_queue_offers_only_the_names_the_token_may_touch() {
    const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let send = |token: &str, path: &str, body: Value| {
        let request = server
            .http()
            .post(server.url(path))
            .bearer_auth(token)
            .json(&body);
        async move {
            let response = request.send().await.expect("an answer");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.expect("json"))
        }
    };
    let jobs = json!({"jobs": [{"queue": "p1:orders"}, {"queue": "p2:orders"}]});
    assert_eq!(send(ADMIN, "/api/jobs/batch", jobs).await.0, 201);
    let token = json!({"name": "p1 admin", "role": "admin", "queues": ["p1:*"]});
    let (status, made) = send(ADMIN, "/api/tokens", token).await;
    assert_eq!(status, 201, "{made}");
    let scoped = made["token"].as_str().expect("a token");
    for (token, offered) in [
        (ADMIN, r#""p1:orders" or "p2:orders""#),
        (scoped, r#""p1:orders""#),
    ] {
        let (status, refusal) = send(token, "/api/queues/p1:ordesr/pause", json!({})).await;
        assert_eq!(status, 404, "{refusal}");
        assert_eq!(
            refusal["error"]["message"],
            format!("queue \"p1:ordesr\" does not exist; did you mean {offered}?")
        );
    }
}

/// A misspelt queue is not made by a pause or a settings change: a queue that has never
/// existed is a 404 naming the existing queues closest to it, unless `?create=true`. A queue
/// exists with jobs, settings, subscriptions or a schedule that enqueues to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_a_queue_that_never_existed_is_refused_naming_the_closest() {
    let server = TestServer::manual().await;
    server.enqueue(json!({"queue": "emails"})).await;
    server
        .put("/api/queues/exports?create=true", json!({"concurrency": 2}))
        .await;
    for (method, path) in [
        (Method::POST, "/api/queues/emials/pause"),
        (Method::POST, "/api/queues/emials/resume"),
        (Method::PUT, "/api/queues/emials"),
    ] {
        let body = (method == Method::PUT).then(|| json!({"paused": true}));
        let error = server.error(method.clone(), path, body, 404).await;
        assert_eq!(error.code, "not_found", "{method} {path}: {error:?}");
        assert_eq!(
            error.message, "queue \"emials\" does not exist; did you mean \"emails\"?",
            "{method} {path}"
        );
    }
    let error = server
        .error(Method::POST, "/api/queues/invoices/pause", None, 404)
        .await;
    assert_eq!(error.message, "queue \"invoices\" does not exist");
    // Nothing was made by the refusals.
    let queues = server.get("/api/queues").await;
    let names: Vec<&str> = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["emails", "exports"], "{queues}");
    // Existing queues change as before; `create` makes a new one.
    assert_eq!(
        server.post("/api/queues/emails/pause", json!({})).await["paused"],
        true
    );
    assert_eq!(
        server
            .put("/api/queues/exports", json!({"concurrency": 3}))
            .await["concurrency"],
        3
    );
    let made = server
        .post("/api/queues/invoices/pause?create=true", json!({}))
        .await;
    assert_eq!(made["paused"], true, "{made}");
    let error = server
        .error(
            Method::POST,
            "/api/queues/emails/pause?create=maybe",
            None,
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("query"), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_queue_hands_out_nothing_until_resumed() {
    let server = TestServer::manual().await;
    let paused = server
        .post("/api/queues/pq/pause?create=true", json!({}))
        .await;
    assert_eq!(paused["paused"], true);
    let held = server.enqueue(job("pq")).await;
    let free = server.enqueue(job("other")).await;
    let taken = server.take(&["pq", "other"], 10).await;
    assert_eq!(taken.iter().map(|j| j.id).collect::<Vec<_>>(), [free]);
    server.assert_nothing_to_take("pq", "50ms").await;
    let shown = server.get("/api/queues/pq").await;
    assert_eq!(
        shown,
        json!({"name": "pq", "paused": true, "policy": null, "counts":
               {"scheduled": 0, "ready": 1, "in_flight": 0, "completed": 0, "dead": 0, "cancelled": 0,
               "waiting": 0}})
    );

    // A take waiting on the paused queue is answered by the resume.
    let api = server.api.clone();
    let waiter = tokio::spawn(async move {
        api.take_with(json!({"queues": ["pq"], "wait": "20s"}))
            .await
    });
    tokio::time::sleep(millis(100)).await;
    assert!(!waiter.is_finished());
    let resumed = server.post("/api/queues/pq/resume", json!({})).await;
    assert_eq!(resumed["paused"], false);
    let jobs = tokio::time::timeout(secs(5), waiter)
        .await
        .expect("answered on resume")
        .expect("the waiter");
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [held]);

    // PUT sets the same flag.
    server.put("/api/queues/pq", json!({"paused": true})).await;
    server.enqueue(job("pq")).await;
    server.assert_nothing_to_take("pq", "30ms").await;
    let queues = server.get("/api/queues").await;
    let names: Vec<(&str, bool)> = queues["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| (q["name"].as_str().expect("a name"), q["paused"] == true))
        .collect();
    assert_eq!(names, [("other", false), ("pq", true)]);
}

/// Fails `taken` and returns the delay the server chose.
async fn fail_delay(server: &TestServer, queue: &str) -> Value {
    let taken = server.take_one(queue).await;
    let now = server.now_ms();
    let answer = server.fail(&taken, "x", json!({})).await;
    let shown = server.job(taken.id).await;
    assert_eq!(
        answer["status"], shown["status"],
        "the answer tells the job's new status: {answer}"
    );
    match answer["status"].as_str() {
        Some("dead") => json!("dead"),
        _ => json!(ms(&answer["run_at"]) - now),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_policy_beats_queue_policy_beats_the_server_default() {
    let server = TestServer::start(Options::manual().flags(&[
        "--default-policy",
        r#"{"type": "fixed", "delay": "7s", "retry_limit": 2}"#,
    ]))
    .await;
    let queue = server
        .put(
            "/api/queues/qp?create=true",
            json!({"policy": {"type": "fixed", "delay": "3s"}}),
        )
        .await;
    assert_eq!(queue["policy"]["type"], "fixed");
    let error = server
        .error(
            Method::PUT,
            "/api/queues/qp2?create=true",
            Some(json!({"policy": {"type": "fixed", "delay": "soon"}})),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("policy.delay"));

    server.enqueue(job("plain")).await;
    assert_eq!(
        fail_delay(&server, "plain").await,
        json!(7 * SECOND),
        "server default"
    );
    server.enqueue(job("qp")).await;
    assert_eq!(
        fail_delay(&server, "qp").await,
        json!(3 * SECOND),
        "queue policy"
    );
    server
        .enqueue(json!({"queue": "qp", "priority": 9, "policy": {"type": "fixed", "delay": "1s"}}))
        .await;
    assert_eq!(fail_delay(&server, "qp").await, json!(SECOND), "job policy");

    // The server default's limit of 2 retries.
    server.advance(secs(7));
    assert_eq!(fail_delay(&server, "plain").await, json!(7 * SECOND));
    server.advance(secs(7));
    assert_eq!(fail_delay(&server, "plain").await, json!("dead"));

    // Removing the queue policy falls back to the default.
    let queue = server.put("/api/queues/qp", json!({"policy": null})).await;
    assert_eq!(queue["policy"], Value::Null);
    server.advance(secs(3));
    let taken = server.take(&["qp"], 10).await;
    let queue_job = taken
        .iter()
        .find(|t| t.priority == 0)
        .expect("the queue-policy job");
    let now = server.now_ms();
    let answer = server.fail(queue_job, "x", json!({})).await;
    assert_eq!(ms(&answer["run_at"]) - now, 7 * SECOND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_retry_limit_keeps_the_queue_curve() {
    let server = TestServer::manual().await;
    server
        .put(
            "/api/queues/ql?create=true",
            json!({"policy": {"type": "fixed", "delay": "4s"}}),
        )
        .await;
    server
        .enqueue(json!({"queue": "ql", "retry_limit": 1}))
        .await;
    assert_eq!(
        fail_delay(&server, "ql").await,
        json!(4 * SECOND),
        "the queue's curve"
    );
    server.advance(secs(4));
    assert_eq!(
        fail_delay(&server, "ql").await,
        json!("dead"),
        "the job's own limit of 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_flags_set_the_server_default() {
    let server = TestServer::start(Options::manual().flags(&[
        "--default-backoff-base",
        "2s",
        "--default-backoff-exponent",
        "1",
        "--default-backoff-jitter",
        "0",
        "--default-retry-limit",
        "3",
    ]))
    .await;
    server.enqueue(job("bf")).await;
    // 2 s + r^1 s, no jitter, three retries.
    for (retry, delay) in [(1, 3), (2, 4), (3, 5)] {
        assert_eq!(
            fail_delay(&server, "bf").await,
            json!(delay * SECOND),
            "retry {retry}"
        );
        server.advance(secs(delay));
    }
    assert_eq!(fail_delay(&server, "bf").await, json!("dead"));

    // A job that gives only a retry limit keeps the default curve.
    server
        .enqueue(json!({"queue": "bf1", "retry_limit": 1}))
        .await;
    assert_eq!(fail_delay(&server, "bf1").await, json!(3 * SECOND));
    server.advance(secs(3));
    assert_eq!(fail_delay(&server, "bf1").await, json!("dead"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_spelling_is_accepted_on_a_job() {
    let server = TestServer::manual().await;
    // One policy (Zaqar's defaults: 3 immediate retries, 3 at 5 s, linear 5 s → 30 s, 3 at
    // 30 s) in every spelling, SNS and Zaqar verbatim, wrapped and bare.
    let spellings = [
        json!({"type": "phased", "min_delay": "5s", "max_delay": "30s", "num_retries": 14,
               "num_no_delay_retries": 3, "num_min_delay_retries": 3,
               "num_max_delay_retries": 3, "function": "linear"}),
        json!({"healthyRetryPolicy": {"minDelayTarget": 5, "maxDelayTarget": 30,
               "numRetries": 14, "numNoDelayRetries": 3, "numMinDelayRetries": 3,
               "numMaxDelayRetries": 3, "backoffFunction": "LINEAR"},
               "sicklyRetryPolicy": null, "throttlePolicy": {"maxReceivesPerSecond": 10},
               "requestPolicy": {"headerContentType": "application/json"}, "guaranteed": false}),
        json!({"http": {"defaultHealthyRetryPolicy": {"minDelayTarget": 5, "maxDelayTarget": 30,
               "numRetries": 14, "numNoDelayRetries": 3, "numMinDelayRetries": 3,
               "numMaxDelayRetries": 3, "backoffFunction": "linear"},
               "disableSubscriptionOverrides": false,
               "defaultThrottlePolicy": {"maxReceivesPerSecond": 1}}}),
        json!({"_retry_policy": {}}),
        json!({"_retry_policy": {"retries_with_no_delay": 3, "minimum_delay_retries": 3,
               "minimum_delay": 5, "maximum_delay": 30, "maximum_delay_retries": 3,
               "retry_backoff_function": "linear", "ignore_subscription_override": false}}),
        json!({"minimum_delay": 5, "maximum_delay": 30}),
    ];
    let mut canonical = Vec::new();
    for (i, policy) in spellings.iter().enumerate() {
        let queue = format!("sp{i}");
        let id = server
            .enqueue(json!({"queue": queue, "policy": policy}))
            .await;
        let stored = server.job(id).await["policy"].clone();
        assert!(stored.is_object(), "spelling {i}: {stored}");
        canonical.push(stored);
        // Three immediate retries, then 5 s.
        for _ in 0..3 {
            assert_eq!(fail_delay(&server, &queue).await, json!(0), "spelling {i}");
        }
        assert_eq!(
            fail_delay(&server, &queue).await,
            json!(5 * SECOND),
            "spelling {i}"
        );
    }
    assert!(
        canonical.windows(2).all(|w| w[0] == w[1]),
        "every spelling is stored as the same native policy: {canonical:#?}"
    );
    // Stored canonically, the policy parses back to the same thing.
    let reparsed = parse_policy(&canonical[0]).expect("canonical parses").retry;
    assert_eq!(reparsed, parse_policy(&spellings[0]).expect("native").retry);

    // Errors name the field under "policy", as the user wrote it.
    for (policy, field) in [
        (json!({"min_delay": "5s"}), "policy.type"),
        (
            json!({"type": "phased", "min_delay": "10s", "max_delay": "5s"}),
            "policy.max_delay",
        ),
        (json!({"type": "polynomial", "bsae": "15s"}), "policy.bsae"),
        (
            json!({"type": "fixed", "delay": "5 parsecs"}),
            "policy.delay",
        ),
        (
            json!({"type": "fixed", "delay": "1s", "jitter": {"type": "proportional", "percent": 500}}),
            "policy.jitter.percent",
        ),
        (
            json!({"healthyRetryPolicy": {"numRetries": 101}}),
            "policy.healthyRetryPolicy.numRetries",
        ),
        (
            json!({"healthyRetryPolicy": {"minDelayTarget": 20, "maxDelayTarget": 3600, "numRetries": 100}}),
            "policy.healthyRetryPolicy",
        ),
        (
            json!({"healthyRetryPolicy": {}, "throttlePolicy": {"maxReceivesPerSecond": 0}}),
            "policy.throttlePolicy.maxReceivesPerSecond",
        ),
        (
            json!({"http": {"defaultHealthyRetryPolicy": {"minDelayTarget": 0}}}),
            "policy.http.defaultHealthyRetryPolicy.minDelayTarget",
        ),
        (
            json!({"_retry_policy": {"minimum_delay": 30, "maximum_delay": 5}}),
            "policy._retry_policy.maximum_delay",
        ),
        (
            json!({"retry_backoff_function": "cubic"}),
            "policy.retry_backoff_function",
        ),
        (json!("fast"), "policy"),
    ] {
        let message = server
            .invalid(
                "/api/jobs",
                json!({"queue": "bad", "policy": policy}),
                field,
            )
            .await;
        if field == "policy.healthyRetryPolicy" {
            assert_eq!(
                message,
                "Total policy retry time cannot be greater than 3600 seconds"
            );
        }
    }
    assert_eq!(
        server.totals().await,
        (6, 0, 0, 0, 0),
        "nothing of the refused jobs was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_answers_exactly_what_the_cli_prints() {
    let server = TestServer::manual().await;
    for policy in [
        json!({"type": "phased", "min_delay": "5s", "max_delay": "260s", "num_retries": 10,
               "function": "geometric"}),
        json!({"type": "polynomial"}),
        json!({"type": "exponential", "initial": "10s", "factor": 2, "max": "2m",
               "retry_limit": 6, "jitter": "decorrelated", "cap": "2m"}),
        json!({"type": "fixed", "delay": "30s", "retry_limit": 3, "jitter": "equal"}),
        json!({"type": "list", "delays": ["1s", "5s", "1m"]}),
        json!({"healthyRetryPolicy": {"minDelayTarget": 20, "maxDelayTarget": 40, "numRetries": 3}}),
        json!({"_retry_policy": {}}),
    ] {
        let answer = server.post("/api/policy/preview", policy.clone()).await;
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_tenax"))
            .args([
                "policy",
                "preview",
                "--format",
                "json",
                "--policy",
                &policy.to_string(),
            ])
            .output()
            .expect("the tenax binary runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed: Value = serde_json::from_slice(&output.stdout).expect("the CLI prints JSON");
        // The API's first rows and window are the CLI's; it adds how many retries there are.
        assert_eq!(answer["retries"], printed["retries"], "{policy}");
        assert_eq!(answer["window_ms"], printed["window_ms"], "{policy}");
        let keys: Vec<&String> = answer.as_object().expect("an object").keys().collect();
        assert_eq!(keys, ["retries", "retry_count", "truncated", "window_ms"]);
        assert_eq!(answer["truncated"], false);
        assert_eq!(
            answer["retry_count"].as_u64(),
            printed["retries"].as_array().map(|r| r.len() as u64)
        );
        let preview: Preview = serde_json::from_value(printed).expect("the Preview shape");
        let parsed = parse_policy(&policy).expect("valid").retry;
        assert_eq!(preview, Preview::of(&parsed));
    }
    // AWS's own example: 20, 30, 40 s.
    let answer = server
        .post(
            "/api/policy/preview",
            json!({"healthyRetryPolicy": {"minDelayTarget": 20, "maxDelayTarget": 40, "numRetries": 3}}),
        )
        .await;
    let delays: Vec<u64> = answer["retries"]
        .as_array()
        .expect("retries")
        .iter()
        .map(|r| r["delay_ms"].as_u64().expect("a delay"))
        .collect();
    assert_eq!(delays, [20_000, 30_000, 40_000]);
    assert_eq!(answer["window_ms"], 90_000);

    // Errors name the field within the policy.
    server
        .invalid(
            "/api/policy/preview",
            json!({"type": "phased", "min_delay": "10s", "max_delay": "5s"}),
            "max_delay",
        )
        .await;
    server
        .invalid(
            "/api/policy/preview",
            json!({"healthyRetryPolicy": {"numRetries": 101}}),
            "healthyRetryPolicy.numRetries",
        )
        .await;
    let error = server
        .error_raw(
            Method::POST,
            "/api/policy/preview",
            b"{not json".to_vec(),
            400,
        )
        .await;
    assert_eq!(error.code, "invalid");
}

// --- bad requests ----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_naming_the_field() {
    let server = TestServer::manual().await;
    let id = server.enqueue(job("q")).await;
    let complete = format!("/api/jobs/{id}/complete");
    let fail = format!("/api/jobs/{id}/fail");
    let heartbeat = format!("/api/jobs/{id}/heartbeat");
    let long_name = "t".repeat(129);
    for (path, body, field) in [
        // Unknown fields.
        ("/api/jobs", json!({"queue": "q", "prio": 1}), "prio"),
        (
            "/api/take",
            json!({"queues": ["q"], "timeout": "1s"}),
            "timeout",
        ),
        (complete.as_str(), json!({"lease": 1}), "lease"),
        // Wrong types.
        ("/api/jobs", json!({"queue": 7}), "queue"),
        (
            "/api/jobs",
            json!({"queue": "q", "priority": "high"}),
            "priority",
        ),
        (
            "/api/jobs",
            json!({"queue": "q", "priority": 1.5}),
            "priority",
        ),
        (
            "/api/jobs",
            json!({"queue": "q", "on_duplicate": "merge"}),
            "on_duplicate",
        ),
        ("/api/take", json!({"queues": "q"}), "queues"),
        ("/api/take", json!({"queues": ["q"], "max": "ten"}), "max"),
        (
            "/api/jobs/complete",
            json!({"jobs": [{"id": "one"}]}),
            "jobs[0].id",
        ),
        (fail.as_str(), json!({"error": 5}), "error"),
        // Bad durations and times.
        ("/api/jobs", json!({"queue": "q", "delay": "-5s"}), "delay"),
        ("/api/jobs", json!({"queue": "q", "delay": 1.5}), "delay"),
        (
            "/api/jobs",
            json!({"queue": "q", "delay": "200 years"}),
            "delay",
        ),
        (
            "/api/jobs",
            json!({"queue": "q", "run_at": "tomorrow"}),
            "run_at",
        ),
        (
            "/api/jobs",
            json!({"queue": "q", "run_at": T0, "delay": "1s"}),
            "delay",
        ),
        (
            "/api/take",
            json!({"queues": ["q"], "lease": "ten seconds"}),
            "lease",
        ),
        ("/api/take", json!({"queues": ["q"], "wait": true}), "wait"),
        (
            fail.as_str(),
            json!({"error": "x", "retry_in": "soon"}),
            "retry_in",
        ),
        (heartbeat.as_str(), json!({"lease": "forever"}), "lease"),
        // Values out of range.
        ("/api/jobs", json!({"queue": ""}), "queue"),
        ("/api/jobs", json!({"queue": "a b"}), "queue"),
        (
            "/api/jobs",
            json!({"queue": "q", "type": long_name}),
            "type",
        ),
        (
            "/api/jobs",
            json!({"queue": "q", "retry_limit": 100_001}),
            "retry_limit",
        ),
        ("/api/take", json!({"queues": []}), "queues"),
        ("/api/take", json!({"queues": ["q", "b@d"]}), "queues[1]"),
        ("/api/take", json!({"queues": ["q"], "max": 0}), "max"),
        ("/api/take", json!({"queues": ["q"], "max": 1001}), "max"),
        ("/api/take", json!({"queues": ["q"], "lease": 0}), "lease"),
        (
            "/api/take",
            json!({"queues": ["q"], "lease": "13h"}),
            "lease",
        ),
        ("/api/take", json!({"queues": ["q"], "wait": "2m"}), "wait"),
        (
            "/api/take/stream",
            json!({"queues": ["q"], "wait": "1s"}),
            "wait",
        ),
        (
            "/api/take/stream",
            json!({"queues": ["q"], "max": 0}),
            "max",
        ),
        ("/api/take/stream", json!({"queues": []}), "queues"),
    ] {
        server.invalid(path, body, field).await;
    }
    // A missing required field, invalid JSON, an empty body.
    let error = server
        .error(Method::POST, "/api/jobs", Some(json!({})), 400)
        .await;
    assert!(error.message.contains("queue"), "{error:?}");
    for body in [&b"{not json"[..], b"", b"[1, 2]"] {
        let error = server
            .error_raw(Method::POST, "/api/jobs", body.to_vec(), 400)
            .await;
        assert_eq!(error.code, "invalid");
    }
    // Query strings.
    for (path, field) in [
        ("/api/jobs?limit=0", "limit"),
        ("/api/jobs?limit=1001", "limit"),
        ("/api/jobs?status=lost", "status"),
        ("/api/jobs?colour=red", "query"),
        ("/api/jobs?after=x", "query"),
    ] {
        let error = server.error(Method::GET, path, None, 400).await;
        assert_eq!(error.field.as_deref(), Some(field), "{path}: {error:?}");
    }
    let error = server
        .error(
            Method::GET,
            &format!("/api/queues/{}", "q".repeat(1603)),
            None,
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("name"));
    // Nothing was changed by any of it.
    assert_eq!(server.totals().await, (0, 1, 0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_and_endpoints_that_do_not_exist() {
    let server = TestServer::manual().await;
    for (method, path, body) in [
        (Method::GET, "/api/jobs/abc", None),
        (Method::DELETE, "/api/jobs/1x", None),
        (
            Method::POST,
            "/api/jobs/-1/complete",
            Some(json!({"lease_token": 1})),
        ),
        (
            Method::POST,
            "/api/jobs/99999999999999999999999/heartbeat",
            Some(json!({"lease_token": 1})),
        ),
        (
            Method::POST,
            "/api/jobs/abc/fail",
            Some(json!({"lease_token": 1, "error": "x"})),
        ),
    ] {
        let error = server.error(method.clone(), path, body, 400).await;
        assert_eq!(error.field.as_deref(), Some("id"), "{method} {path}");
    }
    for (method, path, body) in [
        (Method::GET, "/api/jobs/424242", None),
        (Method::DELETE, "/api/jobs/424242", None),
        (
            Method::POST,
            "/api/jobs/424242/complete",
            Some(json!({"lease_token": 1})),
        ),
        (
            Method::POST,
            "/api/jobs/424242/heartbeat",
            Some(json!({"lease_token": 1})),
        ),
        (
            Method::POST,
            "/api/jobs/424242/fail",
            Some(json!({"lease_token": 1, "error": "x"})),
        ),
    ] {
        let error = server.error(method.clone(), path, body, 404).await;
        assert_eq!(error.code, "not_found", "{method} {path}");
    }
    for path in ["/api/nope", "/nope", "/api/jobs/1/explode"] {
        let error = server.error(Method::GET, path, None, 404).await;
        assert_eq!(error.code, "not_found", "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_and_payload_size_limits() {
    let server = TestServer::start(Options::manual().flags(&[
        "--max-request-bytes",
        "4096",
        "--max-payload-bytes",
        "1000",
    ]))
    .await;
    let payload = |bytes: usize| json!({"blob": "x".repeat(bytes)});
    // Within both limits.
    server
        .enqueue(json!({"queue": "s", "payload": payload(900)}))
        .await;
    // A payload over --max-payload-bytes, alone or in a batch.
    let message = server
        .invalid(
            "/api/jobs",
            json!({"queue": "s", "payload": payload(1_200)}),
            "payload",
        )
        .await;
    assert!(message.contains("1000"), "{message}");
    server
        .invalid(
            "/api/jobs/batch",
            json!({"jobs": [{"queue": "s"}, {"queue": "s", "payload": payload(1_200)}]}),
            "jobs[1].payload",
        )
        .await;
    // A request over --max-request-bytes.
    for path in ["/api/jobs", "/api/jobs/batch", "/api/take"] {
        let body = json!({"queue": "s", "payload": payload(5_000)});
        let error = server.error(Method::POST, path, Some(body), 413).await;
        assert_eq!(error.code, "too_large", "{path}");
    }
    assert_eq!(server.totals().await, (0, 1, 0, 0, 0));
}

// --- listing ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_and_pages_and_stats_count() {
    let server = TestServer::manual().await;
    let a1 = server.enqueue(json!({"queue": "la", "type": "x"})).await;
    let b1 = server.enqueue(json!({"queue": "lb", "type": "y"})).await;
    let a2 = server
        .enqueue(json!({"queue": "la", "type": "y", "delay": "1h"}))
        .await;
    let a3 = server.enqueue(json!({"queue": "la", "type": "x"})).await;
    let taken = server.take(&["lb"], 1).await;
    assert_eq!(taken[0].id, b1);

    let list = |query: &'static str| {
        let server = &server;
        async move { ids(&server.get(&format!("/api/jobs{query}")).await["jobs"]) }
    };
    assert_eq!(list("").await, [a1, b1, a2, a3]);
    assert_eq!(list("?queue=la").await, [a1, a2, a3]);
    assert_eq!(list("?status=scheduled").await, [a2]);
    assert_eq!(list("?status=in_flight").await, [b1]);
    assert_eq!(list("?type=x").await, [a1, a3]);
    assert_eq!(list("?queue=la&type=y").await, [a2]);
    assert_eq!(list("?queue=nobody").await, Vec::<u64>::new());

    let page = server.get("/api/jobs?limit=2").await;
    assert_eq!(ids(&page["jobs"]), [a1, b1]);
    assert_eq!(page["next_after"], b1);
    let page = server.get(&format!("/api/jobs?limit=2&after={b1}")).await;
    assert_eq!(ids(&page["jobs"]), [a2, a3]);
    let page = server.get(&format!("/api/jobs?limit=2&after={a3}")).await;
    assert_eq!(ids(&page["jobs"]), Vec::<u64>::new());
    assert_eq!(page["next_after"], Value::Null);

    let stats = server.stats().await;
    assert_eq!(
        stats,
        json!({
            "queues": [
                {"queue": "la", "scheduled": 1, "ready": 2, "in_flight": 0, "completed": 0, "dead": 0, "cancelled": 0, "waiting": 0},
                {"queue": "lb", "scheduled": 0, "ready": 0, "in_flight": 1, "completed": 0, "dead": 0, "cancelled": 0, "waiting": 0},
            ],
            "totals": {"scheduled": 1, "ready": 2, "in_flight": 1, "completed": 0, "dead": 0, "cancelled": 0, "waiting": 0},
        })
    );
    let queue = server.get("/api/queues/la").await;
    assert_eq!(queue["counts"]["ready"], 2);
    let unknown = server.get("/api/queues/never-used").await;
    assert_eq!(unknown["counts"]["ready"], 0);
}

// --- streaming take --------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_take_pushes_jobs_and_releases_them_on_disconnect() {
    let server = TestServer::manual().await;
    let mut stream = server
        .stream(json!({"queues": ["st"], "max": 2, "lease": "1m"}))
        .await;
    // Nothing yet: the stream waits.
    assert!(stream.next_within(millis(200)).await.is_none());
    let stored = server.enqueue_batch(vec![job("st"); 5]).await;

    // Two arrive (the stream's prefetch), and no more while they are unacknowledged.
    let first = stream.next_n(2).await;
    assert_eq!(first.iter().map(|j| j.id).collect::<Vec<_>>(), stored[..2]);
    assert!(
        first
            .iter()
            .all(|j| j.attempt == 1 && j.lease_expires_at_ms == T0 + MINUTE)
    );
    assert!(stream.next_within(millis(200)).await.is_none());
    assert_eq!(server.totals().await, (0, 3, 2, 0, 0));
    // A full stream is not silent: keep-alive lines go on (a client cannot tell silence from
    // a dead server).
    let before = stream.keep_alives;
    assert!(stream.next_within(millis(2_500)).await.is_none());
    assert!(
        stream.keep_alives > before,
        "no keep-alive while the stream was full"
    );

    // Acknowledge them: more arrive.
    for job in &first {
        server.complete(job).await;
    }
    let second = stream.next_n(2).await;
    assert_eq!(
        second.iter().map(|j| j.id).collect::<Vec<_>>(),
        stored[2..4]
    );
    server
        .fail(&second[0], "nope", json!({"retry_in": "1h"}))
        .await;
    let third = stream.next_n(1).await;
    assert_eq!(third[0].id, stored[4]);
    assert_eq!(server.totals().await, (1, 0, 2, 2, 0));

    // Drop the connection: its unacknowledged jobs are ready again, without an attempt used.
    drop(stream);
    let held = [second[1].id, third[0].id];
    for id in held {
        let job = server.wait_for(id, "ready").await;
        assert_eq!(job["failures"], 0);
    }
    assert_eq!(server.totals().await, (1, 2, 0, 2, 0));
    let again = server.take(&["st"], 10).await;
    assert_eq!(again.iter().map(|j| j.id).collect::<Vec<_>>(), held);
}

// --- real time -------------------------------------------------------------------------------

/// The one test on the system clock: the maintenance loop must make each retry takeable on
/// time. A worker fails a job whose policy is phased linear 50 ms → 250 ms over 5 retries and
/// records when each retry became takeable.
///
/// Tolerance: a retry may not be taken more than 5 ms before its delay (the server rounds "now"
/// to the millisecond), nor more than 150 ms after it (scheduling noise on a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_time_retries_follow_the_schedule() {
    const EARLY_MS: i64 = 5;
    const LATE_MS: i64 = 150;
    let server = TestServer::start(Options::system()).await;
    let policy = json!({"type": "phased", "min_delay": "50ms", "max_delay": "250ms",
                        "num_retries": 5, "function": "linear"});
    let id = server
        .enqueue(json!({"queue": "rt", "policy": policy}))
        .await;
    let take = json!({"queues": ["rt"], "max": 1, "wait": "5s"});

    let mut taken = server.take_with(take.clone()).await.remove(0);
    let mut observed = Vec::new();
    for (retry, planned) in [50i64, 100, 150, 200, 250].into_iter().enumerate() {
        let failed_at = Instant::now();
        let answer = server.fail(&taken, "flaky", json!({})).await;
        assert_eq!(answer["delay_ms"], planned, "retry {}", retry + 1);
        let mut jobs = server.take_with(take.clone()).await;
        let waited = failed_at.elapsed();
        assert_eq!(jobs.len(), 1, "retry {} never became takeable", retry + 1);
        taken = jobs.remove(0);
        assert_eq!(taken.attempt, u64::try_from(retry).expect("small") + 2);
        let waited_ms = i64::try_from(waited.as_millis()).expect("short");
        observed.push((planned, waited_ms));
    }
    println!("retry delays, planned vs observed (ms): {observed:?}");
    for (retry, (planned, waited)) in observed.iter().enumerate() {
        let off = waited - planned;
        assert!(
            (-EARLY_MS..=LATE_MS).contains(&off),
            "retry {}: planned {planned} ms, took {waited} ms (off by {off} ms)",
            retry + 1
        );
    }
    let answer = server.fail(&taken, "flaky", json!({})).await;
    assert_eq!(answer["status"], "dead");
    let shown = server.job(id).await;
    assert_eq!(
        (&shown["status"], &shown["failures"]),
        (&json!("dead"), &json!(6))
    );

    // Replay it: takeable at once, and it can succeed.
    server
        .post(
            "/api/dead/replay",
            json!({"ids": [id], "reset_attempts": true}),
        )
        .await;
    let started = Instant::now();
    let replayed = server.take_with(take).await.remove(0);
    assert!(started.elapsed() < millis(500));
    assert_eq!((replayed.id, replayed.attempt), (id, 1));
    server.complete(&replayed).await;
    assert_eq!(server.status(id).await, "completed");
}

// --- restart ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_every_acknowledged_state() {
    let mut server = TestServer::manual().await;
    server
        .post("/api/queues/held/pause?create=true", json!({}))
        .await;
    server
        .put(
            "/api/queues/rq?create=true",
            json!({"policy": {"type": "fixed", "delay": "42s"}}),
        )
        .await;
    let past = server
        .enqueue(json!({"queue": "rq", "run_at": T0 - HOUR, "payload": {"n": 1}}))
        .await;
    let due_while_down = server.enqueue(json!({"queue": "rq", "delay": "30s"})).await;
    let future = server
        .enqueue(json!({"queue": "rq", "delay": "1h", "unique_key": "only-one"}))
        .await;
    let done = server.enqueue(json!({"queue": "rq", "priority": 9})).await;
    let in_flight = server.enqueue(json!({"queue": "rq", "priority": 8})).await;
    let dead = server
        .enqueue(json!({"queue": "rq", "priority": 7, "retry_limit": 0}))
        .await;
    let held = server.enqueue(job("held")).await;

    let taken = server.take(&["rq"], 3).await;
    assert_eq!(
        taken.iter().map(|j| j.id).collect::<Vec<_>>(),
        [done, in_flight, dead]
    );
    server.complete(&taken[0]).await;
    let stale = taken[1].clone();
    server.fail(&taken[2], "fatal", json!({})).await;

    server.stop().await;
    // Time passes while the server is down.
    server.advance(secs(31));
    server.start_again().await;

    // Past and newly due jobs are takeable at once, and so is the job that was in flight. The
    // embedded store keeps leases in memory, so a restart returns it without counting an
    // attempt (the worker never reported); PostgreSQL keeps leases, and this one ran out while
    // the server was down, which counts as a lost attempt, once the maintenance of the server
    // that leads has seen it (the new server leads once the old one's session is gone).
    if common::on_postgres() {
        server.wait_for(in_flight, "ready").await;
    }
    let ready = server.take(&["rq"], 10).await;
    assert_eq!(
        ready.iter().map(|j| j.id).collect::<Vec<_>>(),
        [in_flight, past, due_while_down]
    );
    let lost = u64::from(common::on_postgres());
    assert!(
        ready
            .iter()
            .all(|j| j.attempt == 1 + if j.id == in_flight { lost } else { 0 }),
        "{ready:?}"
    );
    assert_eq!(ready[1].json["payload"], json!({"n": 1}));
    // The lease from before the restart is not the new lease.
    let error = server
        .error(
            Method::POST,
            &format!("/api/jobs/{in_flight}/complete"),
            Some(json!({"lease_token": stale.lease_token})),
            409,
        )
        .await;
    assert_eq!(error.code, "lease_lost");
    server.complete(&ready[0]).await;
    server.complete(&ready[2]).await;
    // The queue's policy survived.
    let now = server.now_ms();
    let answer = server.fail(&ready[1], "x", json!({})).await;
    assert_eq!(ms(&answer["run_at"]), now + 42 * SECOND);

    // Completed jobs never come back, dead ones stay dead, the future job waits for its time.
    assert_eq!(server.status(done).await, "completed");
    let shown = server.job(dead).await;
    assert_eq!(
        (&shown["status"], &shown["errors"][0]["message"]),
        (&json!("dead"), &json!("fatal"))
    );
    assert_eq!(server.status(future).await, "scheduled");
    server.assert_nothing_to_take("rq", "30ms").await;
    server.advance(millis(HOUR - 31 * SECOND));
    server.wait_for(future, "ready").await;

    // The pause survived.
    server.assert_nothing_to_take("held", "30ms").await;
    assert_eq!(server.status(held).await, "ready");
    // Unique keys of unfinished jobs hold; ids are never reused.
    let error = server
        .error(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "rq", "unique_key": "only-one"})),
            409,
        )
        .await;
    assert_eq!(error.code, "duplicate");
    let fresh = server.enqueue(job("rq")).await;
    assert!(fresh > held);

    // Once more with a job in flight: the same counts come back, in flight turned ready (on
    // the embedded store) or still leased (where leases are durable).
    assert_eq!(server.take(&["rq"], 1).await.len(), 1);
    let before = server.stats().await;
    server.restart().await;
    let after = server.stats().await;
    let count = |stats: &Value, status: &str| stats["totals"][status].as_u64().expect("a count");
    assert_eq!(count(&before, "in_flight"), 1);
    let kept = u64::from(common::on_postgres());
    assert_eq!(count(&after, "in_flight"), kept);
    assert_eq!(count(&after, "ready"), count(&before, "ready") + 1 - kept);
    for status in ["scheduled", "completed", "dead"] {
        assert_eq!(count(&after, status), count(&before, status), "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_after_a_failure_keeps_its_retry_time_and_history() {
    let mut server = TestServer::manual().await;
    let policy = json!({"type": "fixed", "delay": "10m", "retry_limit": 3});
    let id = server
        .enqueue(json!({"queue": "rf", "policy": policy}))
        .await;
    let taken = server.take_one("rf").await;
    server.fail(&taken, "first", json!({})).await;

    server.restart().await;
    let shown = server.job(id).await;
    assert_eq!(shown["status"], "scheduled");
    assert_eq!(ms(&shown["run_at"]), T0 + 10 * MINUTE);
    assert_eq!(shown["failures"], 1);
    assert_eq!(shown["errors"][0]["message"], "first");
    assert_eq!(shown["policy"]["type"], "fixed");
    server.advance(millis(10 * MINUTE - 1));
    server.assert_nothing_to_take("rf", "30ms").await;
    server.advance(millis(1));
    let again = server.take_one("rf").await;
    assert_eq!(again.attempt, 2);
    // The job's own policy came back from disk too.
    let now = server.now_ms();
    let answer = server.fail(&again, "second", json!({})).await;
    assert_eq!(ms(&answer["run_at"]), now + 10 * MINUTE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_message_ttl_deletes_jobs_nobody_takes() {
    let server = TestServer::manual().await;
    let api = &server;
    let queue = api
        .put(
            "/api/queues/hooks?create=true",
            json!({"message_ttl": "1m"}),
        )
        .await;
    assert_eq!(queue["message_ttl_ms"], 60_000);
    let kept = api
        .enqueue(json!({"queue": "other", "type": "t", "payload": {}}))
        .await;
    let id = api
        .enqueue(json!({"queue": "hooks", "type": "t", "payload": {}}))
        .await;
    server.advance(Duration::from_secs(59));
    assert_eq!(api.status(id).await, "ready");
    server.advance(Duration::from_secs(2));
    let deadline = Instant::now() + common::PATIENCE;
    while api
        .send_raw(Method::GET, &format!("/api/jobs/{id}"), None)
        .await
        .0
        != 404
    {
        assert!(
            Instant::now() < deadline,
            "job {id} outlived its queue's TTL"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(api.status(kept).await, "ready");
    let error = api
        .error(
            Method::PUT,
            "/api/queues/hooks?create=true",
            Some(json!({"message_ttl": 0})),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("message_ttl"));
    assert!(error.message.contains("above 0"), "{error:?}");
}

/// Every store keeps text exactly, U+0000 included where JSON carries it (payloads, error
/// messages and details); names a store matches on (a job's type, its unique key) refuse it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_are_kept_in_json_and_refused_in_names() {
    let server = TestServer::manual().await;
    for (body, field) in [
        (json!({"queue": "q", "type": "a\u{0}b"}), "type"),
        (json!({"queue": "q", "unique_key": "k\u{0}"}), "unique_key"),
    ] {
        let message = server.invalid("/api/jobs", body, field).await;
        assert!(message.contains("U+0000"), "{message}");
    }
    let id = server
        .enqueue(json!({"queue": "q", "payload": {"text": "a\u{0}b"}}))
        .await;
    let taken = server.take_one("q").await;
    server
        .post(
            &format!("/api/jobs/{id}/fail"),
            json!({"lease_token": taken.lease_token,
                   "error": {"message": "broke at \u{0} here", "detail": {"raw": "\u{0}"}}}),
        )
        .await;
    let shown = server.job(id).await;
    assert_eq!(shown["payload"], json!({"text": "a\u{0}b"}));
    assert_eq!(shown["errors"][0]["message"], json!("broke at \u{0} here"));
    assert_eq!(shown["errors"][0]["detail"], json!({"raw": "\u{0}"}));
}

/// A job's errors show every failure its state counts, in the same answer, even while the
/// failure's commit is being written (the embedded store shows a change in memory as it is
/// submitted, and reads errors from its file). On a fast disk that window is a fraction of a
/// millisecond; tests/slow-disk/run.sh makes every sync 60 ms slow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_shows_every_error_its_state_counts() {
    const FAILURES: u64 = 8;
    let server = TestServer::manual().await;
    let policy = json!({ "type": "fixed", "delay": 0, "retry_limit": FAILURES + 1 });
    let id = server
        .enqueue(json!({ "queue": "q", "type": "t", "payload": {}, "policy": policy }))
        .await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let api = server.api.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut reads = 0_u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let job = api
                    .expect(Method::GET, &format!("/api/jobs/{id}"), None, 200)
                    .await;
                let failures = job["failures"].as_u64().unwrap();
                let errors = job["errors"].as_array().unwrap().len() as u64;
                assert!(
                    errors >= failures,
                    "{failures} failures, {errors} errors: {job}"
                );
                reads += 1;
            }
            reads
        })
    };
    for _ in 0..FAILURES {
        let job = server.take_one("q").await;
        server.fail(&job, "boom", json!({})).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.await.expect("the reader") > 0);
    let job = server.job(id).await;
    assert_eq!(job["failures"], json!(FAILURES), "{job}");
    assert_eq!(job["errors"].as_array().unwrap().len() as u64, FAILURES);
}

// --- the cluster: its servers, their workers, its activity -----------------------------------

/// `POST path` with `body`, `X-Tenax-Worker: header` and `User-Agent: agent` when given; the
/// status and the JSON answer.
async fn post_as(
    server: &TestServer,
    path: &str,
    body: Value,
    header: Option<&str>,
    agent: Option<&str>,
) -> (u16, Value) {
    let mut request = server.http().post(server.url(path)).json(&body);
    if let Some(name) = header {
        request = request.header("X-Tenax-Worker", name);
    }
    if let Some(agent) = agent {
        request = request.header(reqwest::header::USER_AGENT, agent);
    }
    let response = request.send().await.expect("an answer");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The workers `GET /api/cluster` lists (of every server), by name, once `ready` holds of
/// them; the cluster's answer is read again until it does, for at most ten seconds.
async fn workers_once(server: &TestServer, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let cluster = server
        .poll("/api/cluster", "the workers becoming right", |cluster| {
            ready(&workers_of(cluster))
        })
        .await;
    workers_of(&cluster)
}

/// Every worker of every server of a `/api/cluster` answer, by name.
fn workers_of(cluster: &Value) -> Vec<Value> {
    let mut workers: Vec<Value> = cluster["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .flat_map(|s| s["workers"].as_array().cloned().unwrap_or_default())
        .collect();
    workers.sort_by_key(|w| w["name"].as_str().unwrap_or_default().to_owned());
    workers
}

fn worker<'a>(workers: &'a [Value], name: &str) -> &'a Value {
    workers
        .iter()
        .find(|w| w["name"] == name)
        .unwrap_or_else(|| panic!("no worker {name} in {workers:?}"))
}

/// The cluster of one server: itself, its version and address, whether it leads; it says so
/// at once, and leads once its maintenance has asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_this_server_with_its_version_and_address() {
    let server = TestServer::manual().await;
    let cluster = server
        .poll("/api/cluster", "one leading server", |cluster| {
            cluster["servers"]
                .as_array()
                .is_some_and(|s| s.len() == 1 && s[0]["leads"] == true)
        })
        .await;
    let listed = cluster["servers"][0].clone();
    assert_eq!(listed["this"], true);
    assert_eq!(listed["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        listed["address"].as_str(),
        server.base.strip_prefix("http://")
    );
    let id = listed["id"].as_str().expect("an id");
    assert!(
        id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(ms(&listed["started_at"]), T0, "by the server's clock");
    assert!(listed["seen_at"].is_string());
    assert_eq!(listed["workers"], json!([]));
}

/// A worker is named by the take's `worker`, else by `X-Tenax-Worker`, else by its address and
/// User-Agent; listed with the queues it took from and the jobs it holds until it completes or
/// fails them; a heartbeat names a worker too; a stream's worker is streaming while it is open.
/// Names that break the rule are refused, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_named_and_listed_with_their_queues_and_jobs() {
    let server = TestServer::manual().await;
    server.enqueue_batch(vec![job("a"); 6]).await;
    let take = |n: usize| json!({"queues": ["a", "b"], "max": n});

    let mut body = take(2);
    body["worker"] = json!("from-body");
    let (status, held) = post_as(
        &server,
        "/api/take",
        body.clone(),
        Some("from-header"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{held}");
    let (status, _) = post_as(&server, "/api/take", take(1), Some("from-header"), None).await;
    assert_eq!(status, 200);
    let (status, _) = post_as(&server, "/api/take", take(1), None, Some("test-agent/1.0")).await;
    assert_eq!(status, 200);
    let workers = workers_once(&server, |w| w.len() == 3).await;
    let by_body = worker(&workers, "from-body");
    assert_eq!(by_body["queues"], json!(["a", "b"]));
    assert_eq!(by_body["in_flight"], 2);
    assert_eq!(by_body["streaming"], false);
    assert_eq!(ms(&by_body["seen_at"]), T0);
    assert_eq!(worker(&workers, "from-header")["in_flight"], 1);
    assert_eq!(worker(&workers, "127.0.0.1 test-agent/1.0")["in_flight"], 1);

    // Completing and failing end the holds; a heartbeat names the worker that sends it.
    let held: Vec<common::Taken> = held["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .cloned()
        .map(common::Taken::from_json)
        .collect();
    server.complete(&held[0]).await;
    let (status, _) = post_as(
        &server,
        &format!("/api/jobs/{}/heartbeat", held[1].id),
        json!({"lease_token": held[1].lease_token}),
        Some("beating"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let workers = workers_once(&server, |w| w.len() == 4).await;
    assert_eq!(worker(&workers, "from-body")["in_flight"], 1);
    assert_eq!(worker(&workers, "beating")["queues"], json!([]));
    server
        .fail(&held[1], "boom", json!({"retry_in": "1h"}))
        .await;
    let workers = workers_once(&server, |w| w.len() == 4).await;
    assert_eq!(worker(&workers, "from-body")["in_flight"], 0);

    // A stream's worker streams while it is open.
    let mut stream = server
        .stream(json!({"queues": ["a"], "max": 2, "worker": "streamer"}))
        .await;
    stream.next_n(2).await;
    let workers = workers_once(&server, |w| w.len() == 5).await;
    let streamer = worker(&workers, "streamer");
    assert_eq!(
        (
            &streamer["streaming"],
            &streamer["streams"],
            &streamer["in_flight"]
        ),
        (&json!(true), &json!(1), &json!(2))
    );
    drop(stream);
    workers_once(&server, |w| {
        w.iter()
            .any(|w| w["name"] == "streamer" && w["streaming"] == false && w["in_flight"] == 0)
    })
    .await;

    // Silent for five minutes, they are forgotten.
    server.advance(secs(5 * 60 + 1));
    workers_once(&server, <[Value]>::is_empty).await;

    // Names that break the rule.
    let mut bad = take(1);
    bad["worker"] = json!("");
    let message = server.invalid("/api/take", bad.clone(), "worker").await;
    assert!(message.contains("1 to 128"), "{message}");
    bad["worker"] = json!("a\tb");
    server.invalid("/api/take/stream", bad, "worker").await;
    let long = "w".repeat(129);
    let (status, refused) = post_as(&server, "/api/take", take(1), Some(&long), None).await;
    assert_eq!(status, 400);
    assert_eq!(refused["error"]["field"], "X-Tenax-Worker", "{refused}");
}

/// A reader sees every worker; a token scoped to some queues sees only the workers of its
/// queues, with only those queues and their jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_tokens_see_the_workers_of_their_queues() {
    const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    // A request as `token`: its status and its answer.
    let send = |token: String, method: Method, path: &str, body: Option<Value>| {
        let mut request = server
            .http()
            .request(method, server.url(path))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.expect("an answer");
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let admin = || ADMIN.to_owned();
    let mut tokens = Vec::new();
    for queues in [json!([]), json!(["a"])] {
        let body = json!({"name": "reader", "role": "reader", "queues": queues});
        let (status, made) = send(admin(), Method::POST, "/api/tokens", Some(body)).await;
        assert_eq!(status, 201, "{made}");
        tokens.push(made["token"].as_str().expect("a token").to_owned());
    }
    let (reader, scoped) = (tokens[0].clone(), tokens[1].clone());
    let enqueue = json!({"jobs": [{"queue": "a"}, {"queue": "b"}, {"queue": "b"}]});
    let (status, _) = send(admin(), Method::POST, "/api/jobs/batch", Some(enqueue)).await;
    assert_eq!(status, 201);
    for (name, queues) in [("both", json!(["a", "b"])), ("only-b", json!(["b"]))] {
        let take = json!({"queues": queues, "max": 10, "worker": name});
        let (status, _) = send(admin(), Method::POST, "/api/take", Some(take)).await;
        assert_eq!(status, 200);
    }
    let workers_as = |token: String| {
        let answer = send(token, Method::GET, "/api/cluster", None);
        async move {
            let (status, cluster) = answer.await;
            assert_eq!(status, 200, "{cluster}");
            let mut workers = cluster["servers"][0]["workers"]
                .as_array()
                .expect("workers")
                .clone();
            workers.sort_by_key(|w| w["name"].as_str().unwrap_or_default().to_owned());
            workers
                .iter()
                .map(|w| {
                    (
                        w["name"].clone(),
                        w["queues"].clone(),
                        w["in_flight"].clone(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        workers_as(reader.clone()).await,
        [
            (json!("both"), json!(["a", "b"]), json!(3)),
            (json!("only-b"), json!(["b"]), json!(0))
        ]
    );
    assert_eq!(
        workers_as(scoped.clone()).await,
        [(json!("both"), json!(["a"]), json!(1))]
    );
    // The activity counts every queue together, as the metrics do: the reader that is not
    // scoped reads it, the scoped one is refused (it would learn of queue b's jobs).
    let (status, activity) = send(reader, Method::GET, "/api/activity?minutes=1", None).await;
    assert_eq!(status, 200);
    assert_eq!(activity["total"]["enqueued"], 3);
    let (status, refusal) = send(scoped, Method::GET, "/api/activity?minutes=1", None).await;
    assert_eq!(status, 403);
    assert!(
        refusal["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("not scoped")),
        "{refusal}"
    );
}

/// The activity per minute: every minute of the window, oldest first, with what happened in
/// it, and the sums; `minutes` from 1 to a day, 60 by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_is_counted_per_minute() {
    let server = TestServer::manual().await;
    let empty = server.get("/api/activity").await;
    let minutes = empty["minutes"].as_array().expect("minutes");
    assert_eq!(minutes.len(), 60);
    let last = ms(&minutes[59]["at"]);
    assert_eq!(last, T0 / MINUTE * MINUTE, "the current minute last");
    assert_eq!(ms(&minutes[0]["at"]), last - 59 * MINUTE);
    let zeros = json!({"enqueued": 0, "completed": 0, "failed": 0, "dead": 0,
                       "delivered": 0, "delivery_failed": 0});
    assert_eq!(empty["total"], zeros);
    assert_eq!(
        minutes[0],
        json!({"at": minutes[0]["at"], "enqueued": 0, "completed": 0, "failed": 0, "dead": 0,
               "delivered": 0, "delivery_failed": 0})
    );

    server.enqueue_batch(vec![job("q"); 3]).await;
    let taken = server
        .take_with(json!({"queues": ["q"], "max": 3, "lease": "1h"}))
        .await;
    server.complete(&taken[0]).await;
    server.fail(&taken[1], "later", json!({})).await;
    server.advance(secs(60));
    server
        .fail(&taken[2], "never", json!({"retryable": false}))
        .await;
    let activity = server.get("/api/activity?minutes=2").await;
    let minutes = activity["minutes"].as_array().expect("minutes");
    assert_eq!(minutes.len(), 2);
    assert_eq!(
        (
            &minutes[0]["enqueued"],
            &minutes[0]["completed"],
            &minutes[0]["failed"]
        ),
        (&json!(3), &json!(1), &json!(1))
    );
    assert_eq!(
        (&minutes[1]["failed"], &minutes[1]["dead"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(
        activity["total"],
        json!({"enqueued": 3, "completed": 1, "failed": 2, "dead": 1,
               "delivered": 0, "delivery_failed": 0})
    );
    assert_eq!(
        server.get("/api/activity?minutes=1440").await["minutes"]
            .as_array()
            .map(Vec::len),
        Some(1440)
    );
    assert_eq!(
        server.get("/api/activity?minutes=1").await["total"]["dead"],
        1
    );

    for bad in ["0", "1441", "an+hour", "-1"] {
        let error = server
            .error(
                Method::GET,
                &format!("/api/activity?minutes={bad}"),
                None,
                400,
            )
            .await;
        assert_eq!(error.field.as_deref(), Some("minutes"), "{bad}: {error:?}");
        assert!(error.message.contains("1 to 1440"), "{bad}: {error:?}");
    }
    let error = server
        .error(Method::GET, "/api/activity?hours=1", None, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("query"), "{error:?}");
}

/// A lease's end is set when its take begins; a take whose commit was slow to come back (a
/// lossy link to a shared database) could answer with leases already over, whose jobs another
/// worker may hold by then. Those are not handed out, and their jobs are taken again with the
/// next attempt. Runs on PostgreSQL (as CI does), and says so on the embedded store.
#[tokio::test]
async fn a_take_hands_out_no_lease_that_ended_while_it_committed() {
    if !common::on_postgres() {
        eprintln!(
            "skipped: the embedded store's takes cannot be held up (TENAX_TEST_STORE=postgres runs it)"
        );
        return;
    }
    let server = TestServer::manual().await;
    let id = server
        .enqueue(json!({ "queue": "held-up", "type": "t" }))
        .await;
    let take = server.take_with(json!({ "queues": ["held-up"], "max": 1, "lease": "5s" }));
    let taken = server
        .held_up(Waiter::Take, Duration::from_secs(6), take)
        .await;
    assert!(
        taken.is_empty(),
        "a lease over before the answer was handed out: {taken:?}"
    );

    // The lease ran out in the store as any other: the job is ready again, one attempt spent.
    server.wait_for(id, "ready").await;
    let again = server.take_one("held-up").await;
    assert_eq!((again.id, again.attempt), (id, 2));
    server.complete(&again).await;
}

/// The same for a heartbeat: when the lease's new end has passed by the time the database
/// confirmed it, the worker is told its lease is lost, not handed an end already past.
#[tokio::test]
async fn a_heartbeat_whose_new_end_passed_while_it_committed_is_lost() {
    if !common::on_postgres() {
        eprintln!(
            "skipped: the embedded store's heartbeats cannot be held up (TENAX_TEST_STORE=postgres runs it)"
        );
        return;
    }
    let server = TestServer::manual().await;
    let id = server
        .enqueue(json!({ "queue": "held-up", "type": "t" }))
        .await;
    let jobs = server
        .take_with(json!({ "queues": ["held-up"], "max": 1, "lease": "60s" }))
        .await;
    let job = &jobs[0];
    // Shorter than the take's lease, which stays far from its end throughout.
    let path = format!("/api/jobs/{id}/heartbeat");
    let heartbeat = server.send_raw(
        Method::POST,
        &path,
        Some(
            serde_json::to_vec(&json!({ "lease_token": job.lease_token, "lease": "1s" }))
                .expect("a body"),
        ),
    );
    let (status, answer) = server
        .held_up(
            Waiter::Statement("SET lease_expires_at"),
            Duration::from_secs(2),
            heartbeat,
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{answer}");
    assert_eq!(answer["error"]["code"], "lease_lost", "{answer}");

    // The lease ended at its new end, and the job is taken again.
    server.wait_for(id, "ready").await;
    assert_eq!(server.take_one("held-up").await.attempt, 2);
}

/// Pools are a PostgreSQL deployment's: each refusal names its field, and a server of one data
/// directory lists none and registers none (docs/api.md, "Pools and flavors").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_are_refused_with_their_reasons() {
    let server = TestServer::manual().await;
    assert_eq!(
        server.expect(Method::GET, "/api/pools", None, 200).await,
        json!({"pools": []})
    );
    for (name, body, field) in [
        ("bad name", json!({"uri": "postgres://h/db"}), "name"),
        ("one", json!({"uri": "mysql://h/db"}), "uri"),
        (
            "one",
            json!({"uri": "postgres://h/db", "flavor": "no flavor"}),
            "flavor",
        ),
    ] {
        let path = format!("/api/pools/{}", name.replace(' ', "%20"));
        let error = server
            .error(Method::PUT, &path, Some(body.clone()), 400)
            .await;
        assert_eq!(error.field.as_deref(), Some(field), "{body}: {error:?}");
    }
    let error = server
        .error(
            Method::PUT,
            "/api/pools/one",
            Some(json!({"weight": 1})),
            400,
        )
        .await;
    assert!(error.message.contains("uri"), "{error:?}");
    server.error(Method::GET, "/api/pools/one", None, 404).await;
    server
        .error(
            Method::PUT,
            "/api/flavors/gold",
            Some(json!({"pools": []})),
            400,
        )
        .await;
    // Nothing listens on port 1: the pool's database cannot be reached.
    let unreachable = json!({"uri": "postgres://postgres@127.0.0.1:1/pool"});
    if common::on_postgres() {
        let error = server
            .error(Method::PUT, "/api/pools/one", Some(unreachable), 400)
            .await;
        assert_eq!(error.field.as_deref(), Some("uri"), "{error:?}");
        assert!(error.message.contains("cannot connect"), "{error:?}");
    } else {
        let error = server
            .error(Method::PUT, "/api/pools/one", Some(unreachable), 409)
            .await;
        assert_eq!(error.code, "not_pooled", "{error:?}");
        assert!(error.message.contains("PostgreSQL"), "{error:?}");
    }
    assert_eq!(
        server.expect(Method::GET, "/api/pools", None, 200).await,
        json!({"pools": []})
    );
}
