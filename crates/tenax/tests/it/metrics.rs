//! `GET /metrics` after a scripted workload on a real server: jobs enqueued, taken, completed,
//! failed into a retry, failed to death and snoozed; webhook deliveries to a real receiver that
//! fails once and then accepts. The answer is parsed by a strict Prometheus text-format parser
//! (`prom_text_format_parser`: any malformed line fails the test) and every value the workload
//! determines is checked.
//!
//! Runs on the store `TENAX_TEST_STORE` names, like the API suite.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use common::{Options, PATIENCE, TestServer};
use prom_text_format_parser::{Sample, Scrape, Type, ValueType};
use receiver::{Receiver, Reply};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common;
use crate::common::receiver;

/// `GET /metrics` (with `token`, if any), parsed.
async fn scrape_at(server: &TestServer, base: &str, token: Option<&str>) -> Scrape {
    let mut request = server.http().get(format!("{base}/metrics"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let answer = request.send().await.unwrap();
    assert_eq!(answer.status(), 200, "GET /metrics");
    let content_type = answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = answer.text().await.unwrap();
    Scrape::parse(&text).unwrap_or_else(|e| panic!("not the Prometheus text format: {e:?}\n{text}"))
}

async fn scrape(server: &TestServer) -> Scrape {
    scrape_at(server, &server.base, None).await
}

fn label<'a>(sample: &'a Sample, key: &str) -> Option<&'a str> {
    sample
        .labels
        .iter()
        .find(|l| l.key == key)
        .map(|l| l.value.as_str())
}

/// The samples of the metric `name` (of type `kind`) whose labels include `labels`, of the
/// value type `of`.
fn samples<'a>(
    scrape: &'a Scrape,
    name: &str,
    kind: Type,
    of: ValueType,
    labels: &[(&str, &str)],
) -> Vec<&'a Sample> {
    let Some(metric) = scrape.metrics.iter().find(|m| m.name == name) else {
        return Vec::new();
    };
    assert_eq!(metric.kind, kind, "{name}");
    metric
        .samples
        .iter()
        .filter(|s| s.value.value_type == of && labels.iter().all(|(k, v)| label(s, k) == Some(v)))
        .collect()
}

/// The one counter or gauge sample of `name` with `labels`; 0 when there is none (a series is
/// made on its first event). Counters are named with `_total`.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let kind = if name.ends_with("_total") {
        Type::Counter
    } else {
        Type::Gauge
    };
    let found = samples(scrape, name, kind, ValueType::Sample, labels);
    assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
    found.first().map_or(0.0, |s| s.value.value.as_f64())
}

/// The number of observations of the histogram `name` with `labels`, checked against its
/// buckets.
fn observations(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let count = samples(scrape, name, Type::Histogram, ValueType::Count, labels);
    assert_eq!(count.len(), 1, "{name} {labels:?}: {count:?}");
    let count = count[0].value.value.as_f64();
    let buckets = samples(scrape, name, Type::Histogram, ValueType::Sample, labels);
    let counts: Vec<f64> = buckets.iter().map(|b| b.value.value.as_f64()).collect();
    // Cumulative buckets never decrease, and the last (+Inf) holds every observation.
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "{name}: {counts:?}"
    );
    let last = buckets.last().unwrap();
    assert_eq!(label(last, "le"), Some("+Inf"), "{name}");
    assert_eq!(
        last.value.value.as_f64(),
        count,
        "{name}: +Inf bucket and count agree"
    );
    count
}

/// Waits until `check` holds for a fresh scrape.
async fn eventually(server: &TestServer, what: &str, check: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let scrape = scrape(server).await;
        if check(&scrape) {
            return scrape;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn take(server: &TestServer, queue: &str, max: u64) -> Vec<Value> {
    let answer = server
        .post("/api/take", json!({"queues": [queue], "max": max}))
        .await;
    answer["jobs"].as_array().unwrap().clone()
}

fn by_type<'a>(jobs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    jobs.iter().filter(|j| j["type"] == kind).collect()
}

async fn fail(server: &TestServer, job: &Value, body: Value) -> Value {
    let mut body = body;
    body["lease_token"] = job["lease_token"].clone();
    server
        .post(&format!("/api/jobs/{}/fail", job["id"]), body)
        .await
}

#[tokio::test]
async fn a_scripted_workload_is_counted() {
    let server = TestServer::start(Options::system().flags(&["--allow-private-endpoints"])).await;
    let retry_fast = json!({"type": "list", "delays": ["1ms"]});
    for _ in 0..3 {
        server
            .enqueue(
                json!({"queue": "emails", "type": "welcome", "payload": {}, "policy": retry_fast}),
            )
            .await;
    }
    server
        .enqueue(json!({"queue": "emails", "type": "receipt", "payload": {}}))
        .await;
    server
        .enqueue(json!({"queue": "later", "type": "t", "payload": {}, "delay": "1h"}))
        .await;

    let taken = take(&server, "emails", 10).await;
    assert_eq!(taken.len(), 4);
    let welcome = by_type(&taken, "welcome");
    let receipt = by_type(&taken, "receipt");
    // One completes; one fails into a retry; one fails for good; the receipt is snoozed.
    let done = server
        .post(
            "/api/jobs/complete",
            json!({"jobs": [{"id": welcome[0]["id"], "lease_token": welcome[0]["lease_token"]}]}),
        )
        .await;
    assert_eq!(done["results"][0]["completed"], json!(true), "{done}");
    let retried = fail(&server, welcome[1], json!({"error": "flaky"})).await;
    assert_eq!(retried["failures"], json!(1), "{retried}");
    let dead = fail(
        &server,
        welcome[2],
        json!({"error": "broken", "retryable": false}),
    )
    .await;
    assert_eq!(dead["status"], json!("dead"), "{dead}");
    let snoozed = fail(&server, receipt[0], json!({"snooze": "1h"})).await;
    assert_eq!(snoozed["status"], json!("scheduled"), "{snoozed}");
    // The retry is due in a millisecond: take it again and complete it.
    let deadline = Instant::now() + PATIENCE;
    let again = loop {
        let again = take(&server, "emails", 10).await;
        if !again.is_empty() {
            break again;
        }
        assert!(Instant::now() < deadline, "the retry never became ready");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(again.len(), 1);
    server
        .post(
            "/api/jobs/complete",
            json!({"jobs": [{"id": again[0]["id"], "lease_token": again[0]["lease_token"]}]}),
        )
        .await;

    // A webhook to a real receiver: the first attempt gets a 500, the retry a 200.
    let receiver = Receiver::start(vec![Reply::status(500)], Reply::ok()).await;
    let subscription = server
        .expect(
            Method::POST,
            "/api/queues/orders/subscriptions",
            Some(json!({"endpoint": receiver.url("/hook"),
                        "policy": {"type": "list", "delays": ["10ms"]}})),
            201,
        )
        .await;
    let subscription = subscription["id"].as_u64().unwrap().to_string();
    server
        .enqueue(json!({"queue": "orders", "type": "order.paid", "payload": {"n": 1}}))
        .await;
    receiver.wait_for(2, PATIENCE).await;

    let sub = subscription.as_str();
    let scrape = eventually(&server, "both webhook attempts are counted", |s| {
        let this = [("subscription", sub)];
        value(
            s,
            "tenax_webhook_attempts_total",
            &[("subscription", sub), ("outcome", "2xx")],
        ) == 1.0
            // Health is recorded just after the attempt.
            && value(s, "tenax_webhook_endpoint_healthy", &this) == 1.0
    })
    .await;

    let welcome = [("queue", "emails"), ("type", "welcome")];
    let receipt = [("queue", "emails"), ("type", "receipt")];
    let emails = [("queue", "emails")];
    for (name, labels, want) in [
        ("tenax_jobs_enqueued_total", &welcome, 3.0),
        ("tenax_jobs_enqueued_total", &receipt, 1.0),
        ("tenax_jobs_completed_total", &welcome, 2.0),
        ("tenax_jobs_failed_total", &welcome, 2.0),
        ("tenax_jobs_retried_total", &welcome, 1.0),
        ("tenax_jobs_dead_total", &welcome, 1.0),
        ("tenax_jobs_snoozed_total", &receipt, 1.0),
        ("tenax_jobs_failed_total", &receipt, 0.0),
        ("tenax_jobs_lease_expired_total", &welcome, 0.0),
    ] {
        assert_eq!(value(&scrape, name, labels), want, "{name} {labels:?}");
    }
    assert_eq!(
        value(
            &scrape,
            "tenax_jobs_enqueued_total",
            &[("queue", "orders"), ("type", "order.paid")]
        ),
        1.0
    );
    // Five takes waited; three completions and failures ran (a snooze is neither); two
    // completions went end to end.
    assert_eq!(
        observations(&scrape, "tenax_job_wait_seconds", &emails),
        5.0
    );
    assert_eq!(observations(&scrape, "tenax_job_run_seconds", &emails), 4.0);
    assert_eq!(
        observations(&scrape, "tenax_job_end_to_end_seconds", &emails),
        2.0
    );

    // Jobs by state: the receipt is scheduled (snoozed), one welcome is dead, the rest are
    // done; the later job waits; the message was taken by no worker and is ready.
    for (queue, state, want) in [
        ("emails", "scheduled", 1.0),
        ("emails", "ready", 0.0),
        ("emails", "in_flight", 0.0),
        ("emails", "dead", 1.0),
        ("later", "scheduled", 1.0),
        ("orders", "ready", 1.0),
    ] {
        assert_eq!(
            value(&scrape, "tenax_jobs", &[("queue", queue), ("state", state)]),
            want,
            "{queue} {state}"
        );
    }
    assert_eq!(
        value(&scrape, "tenax_queue_ready_age_seconds", &emails),
        0.0
    );
    let orders_age = value(
        &scrape,
        "tenax_queue_ready_age_seconds",
        &[("queue", "orders")],
    );
    assert!((0.0..60.0).contains(&orders_age), "{orders_age}");

    // The webhook: one 5xx, then one 2xx after a retry; the delivery is done.
    let on = |outcome: &'static str| [("subscription", sub), ("outcome", outcome)];
    assert_eq!(
        value(&scrape, "tenax_webhook_attempts_total", &on("5xx")),
        1.0
    );
    assert_eq!(
        value(&scrape, "tenax_webhook_attempts_total", &on("4xx")),
        0.0
    );
    assert_eq!(
        value(&scrape, "tenax_webhook_attempts_total", &on("error")),
        0.0
    );
    let this = [("subscription", sub)];
    assert_eq!(
        value(&scrape, "tenax_webhook_deliveries_retried_total", &this),
        1.0
    );
    assert_eq!(
        value(&scrape, "tenax_webhook_deliveries_dead_total", &this),
        0.0
    );
    assert_eq!(
        observations(&scrape, "tenax_webhook_attempt_duration_seconds", &this),
        2.0
    );
    assert_eq!(value(&scrape, "tenax_webhook_endpoint_healthy", &this), 1.0);
    assert_eq!(
        value(
            &scrape,
            "tenax_webhook_endpoint_consecutive_failures",
            &this
        ),
        0.0
    );
    assert_eq!(
        value(&scrape, "tenax_webhook_subscription_enabled", &this),
        1.0
    );

    // HTTP: by route template, never the path; status as answered.
    let enqueues = [
        ("method", "POST"),
        ("route", "/api/jobs"),
        ("status", "201"),
    ];
    assert_eq!(value(&scrape, "tenax_http_requests_total", &enqueues), 6.0);
    let fails = [
        ("method", "POST"),
        ("route", "/api/jobs/{id}/fail"),
        ("status", "200"),
    ];
    assert_eq!(value(&scrape, "tenax_http_requests_total", &fails), 3.0);
    let requests = samples(
        &scrape,
        "tenax_http_requests_total",
        Type::Counter,
        ValueType::Sample,
        &[],
    );
    assert!(
        requests.iter().all(|s| !label(s, "route")
            .unwrap()
            .contains(|c: char| c.is_ascii_digit())),
        "no raw path (with an id) is a route label"
    );
    let routed = [("method", "POST"), ("route", "/api/jobs/{id}/fail")];
    assert_eq!(
        observations(&scrape, "tenax_http_request_duration_seconds", &routed),
        3.0
    );

    // The store committed every change, some perhaps together.
    let commits = value(&scrape, "tenax_store_commits_total", &[]);
    assert!(commits >= 5.0, "{commits}");
    assert_eq!(
        observations(&scrape, "tenax_store_commit_duration_seconds", &[]),
        commits
    );
    assert_eq!(
        observations(&scrape, "tenax_store_commit_requests", &[]),
        commits
    );

    // A path no route matches is counted under (unmatched).
    server
        .error(Method::GET, "/api/nothing/here", None, 404)
        .await;
    let scrape = self::scrape(&server).await;
    let unmatched = [("route", "(unmatched)"), ("status", "404")];
    assert_eq!(value(&scrape, "tenax_http_requests_total", &unmatched), 1.0);
    // The server leads the maintenance (alone on its store, or the first of a cluster) once
    // its loop has asked.
    eventually(&server, "this server leads the maintenance", |s| {
        value(s, "tenax_maintenance_leader", &[]) == 1.0
    })
    .await;
}

/// A lease that expires is a failed attempt, counted with its job's queue and type; a job that
/// dies of it is dead.
#[tokio::test]
async fn expired_leases_are_counted() {
    let server = TestServer::start(Options::manual()).await;
    server
        .enqueue(json!({"queue": "slow", "type": "hang", "payload": {},
                        "policy": {"type": "fixed", "delay": "1s", "retry_limit": 0}}))
        .await;
    let taken = server
        .post("/api/take", json!({"queues": ["slow"], "lease": "10s"}))
        .await;
    assert_eq!(taken["jobs"].as_array().unwrap().len(), 1);
    server.advance(Duration::from_secs(11));
    let hang = [("queue", "slow"), ("type", "hang")];
    let dead = [("queue", "slow"), ("state", "dead")];
    // The counts of jobs may lag the counters by a moment: a count is reused while it is
    // young (see metrics::scrape).
    let scrape = eventually(&server, "the lease expired", |s| {
        value(s, "tenax_jobs_lease_expired_total", &hang) == 1.0
            && value(s, "tenax_jobs", &dead) == 1.0
    })
    .await;
    assert_eq!(value(&scrape, "tenax_jobs_failed_total", &hang), 1.0);
    assert_eq!(value(&scrape, "tenax_jobs_dead_total", &hang), 1.0);
    assert_eq!(value(&scrape, "tenax_jobs_retried_total", &hang), 0.0);
    assert_eq!(
        value(
            &scrape,
            "tenax_jobs",
            &[("queue", "slow"), ("state", "dead")]
        ),
        1.0
    );
}

/// Past `--metrics-label-limit` distinct queues, the others are counted under `(other)`.
#[tokio::test]
async fn label_values_are_bounded() {
    let server = TestServer::start(Options::manual().flags(&["--metrics-label-limit", "2"])).await;
    for queue in ["q1", "q2", "q3", "q4"] {
        server
            .enqueue(json!({"queue": queue, "type": "t", "payload": {}}))
            .await;
    }
    let scrape = scrape(&server).await;
    let enqueued = samples(
        &scrape,
        "tenax_jobs_enqueued_total",
        Type::Counter,
        ValueType::Sample,
        &[],
    );
    let queues: std::collections::BTreeSet<&str> = enqueued
        .iter()
        .map(|s| label(s, "queue").unwrap())
        .collect();
    assert_eq!(queues, ["(other)", "q1", "q2"].into_iter().collect());
    let other = [("queue", "(other)"), ("type", "t")];
    assert_eq!(value(&scrape, "tenax_jobs_enqueued_total", &other), 2.0);
    assert_eq!(
        value(
            &scrape,
            "tenax_jobs",
            &[("queue", "(other)"), ("state", "ready")]
        ),
        2.0
    );
}

/// With authentication on, `/metrics` needs a token that may read metrics: an unscoped admin or
/// reader; `--metrics-listen` serves it without a token.
#[tokio::test]
async fn metrics_need_a_reader_token_or_their_own_listener() {
    let admin = "metrics-test-admin-token-0123456789abcdef";
    let port = common::ports::spare_port();
    let metrics_at = format!("127.0.0.1:{port}");
    let server = TestServer::start(Options::manual().flags(&[
        "--auth",
        "on",
        "--admin-token",
        admin,
        "--metrics-listen",
        &metrics_at,
    ]))
    .await;
    let token = |role: &'static str, queues: Value| {
        let server = &server;
        async move {
            let made = server
                .http()
                .post(server.url("/api/tokens"))
                .bearer_auth(admin)
                .json(&json!({"name": role, "role": role, "queues": queues}))
                .send()
                .await
                .unwrap();
            assert_eq!(made.status(), 201);
            made.json::<Value>().await.unwrap()["token"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let status = |token: Option<String>| {
        let server = &server;
        async move {
            let mut request = server.http().get(server.url("/metrics"));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(status(None).await, 401);
    assert_eq!(status(Some(admin.to_owned())).await, 200);
    assert_eq!(status(Some(token("reader", json!([])).await)).await, 200);
    assert_eq!(status(Some(token("worker", json!([])).await)).await, 403);
    assert_eq!(status(Some(token("producer", json!([])).await)).await, 403);
    // A scoped reader would see every queue's counts: refused.
    assert_eq!(status(Some(token("reader", json!(["a"])).await)).await, 403);

    let scrape = scrape_at(&server, &format!("http://{metrics_at}"), None).await;
    // The API's listener counted the two requests it answered with metrics.
    let answered = [("route", "/metrics"), ("status", "200")];
    assert_eq!(value(&scrape, "tenax_http_requests_total", &answered), 2.0);
}
