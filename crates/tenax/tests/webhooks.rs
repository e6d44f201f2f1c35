//! Webhook delivery over real HTTP and HTTPS: the real server (system clock) delivering to a
//! scripted receiver on a loopback port (`common/receiver.rs`), with millisecond policies.
//!
//! Every test has its own server and its own receivers, so the tests run in parallel. Timing
//! assertions compare the moments requests reach the receiver; their tolerance is stated where
//! they are made ([`EARLY_MS`], [`LATE_MS`]).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;
#[allow(dead_code)]
#[path = "common/receiver.rs"]
mod receiver;

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Options, PATIENCE, TestServer, ms};
use receiver::{Received, Receiver, Reply, TestCa};
use reqwest::Method;
use serde_json::{Value, json};
use tenax::delivery::admission::Wait;
use tenax::delivery::signals::{Event, Signal};
use tenax::delivery::signing;
use tenax_core::model::SubscriptionId;
use tokio::sync::broadcast;

/// How much earlier than its delay a retry may reach the receiver: none, but the server
/// schedules in whole milliseconds of the system clock while the receiver stamps arrivals with
/// `Instant`, so 5 ms of rounding is allowed.
const EARLY_MS: u64 = 5;
/// How much later than its delay a retry may reach the receiver: the failed request's response,
/// the commit that schedules the retry, the promotion, the runner's wake-up and the new request,
/// on a loaded 2-core CI machine.
const LATE_MS: u64 = 250;

/// The Standard Webhooks reference secret.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// How long a test waits for requests it expects.
const ARRIVAL: Duration = Duration::from_secs(10);

// --- helpers ---------------------------------------------------------------------------------

/// A server with the system clock that may deliver to loopback receivers, plus `extra` flags.
async fn server(extra: &[&str]) -> TestServer {
    let mut flags = vec!["--allow-private-endpoints"];
    flags.extend_from_slice(extra);
    TestServer::start(Options::system().flags(&flags)).await
}

/// Creates a subscription of `queue` delivering to `endpoint` with the extra `fields`; returns
/// its view.
async fn subscribe_to(server: &TestServer, queue: &str, endpoint: &str, fields: Value) -> Value {
    let view = server
        .subscribe(queue, json!({ "endpoint": endpoint }), fields)
        .await;
    assert_eq!(view["queue"], json!(queue), "{view}");
    assert_eq!(view["endpoint"], json!(endpoint), "{view}");
    view
}

/// Creates a subscription of `queue` delivering to `receiver` (path `/hook`).
async fn subscribe(server: &TestServer, queue: &str, receiver: &Receiver, fields: Value) -> Value {
    subscribe_to(server, queue, &receiver.url("/hook"), fields).await
}

fn id(view: &Value) -> u64 {
    view["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no id in {view}"))
}

/// Enqueues one message on `queue`; returns its id.
async fn publish(server: &TestServer, queue: &str, payload: Value) -> u64 {
    server
        .enqueue(json!({ "queue": queue, "type": "order.paid", "payload": payload }))
        .await
}

async fn subscription(server: &TestServer, sub: u64) -> Value {
    server.get(&format!("/api/subscriptions/{sub}")).await
}

async fn delivery(server: &TestServer, delivery: u64) -> Value {
    server.get(&format!("/api/deliveries/{delivery}")).await
}

/// `GET /api/subscriptions/{sub}/deliveries` with `query` (e.g. `status=dead`).
async fn deliveries(server: &TestServer, sub: u64, query: &str) -> Vec<Value> {
    let answer = server
        .get(&format!("/api/subscriptions/{sub}/deliveries?{query}"))
        .await;
    answer["deliveries"]
        .as_array()
        .unwrap_or_else(|| panic!("no deliveries in {answer}"))
        .clone()
}

/// The one delivery subscription `sub` has.
async fn only_delivery(server: &TestServer, sub: u64) -> u64 {
    let all = deliveries(server, sub, "").await;
    assert_eq!(all.len(), 1, "subscription {sub}: {all:?}");
    id(&all[0])
}

/// The attempts of `delivery` once there are `n` (no more). The log entry of an attempt is
/// written in the commit that ends it, which the delivery's status (kept in memory) may show a
/// moment earlier.
async fn wait_attempts(server: &TestServer, delivery: u64, n: usize) -> Vec<Value> {
    let url = format!("/api/deliveries/{delivery}/attempts");
    let answer = poll(server, &url, &format!("{n} attempts"), |a| {
        a["attempts"].as_array().is_some_and(|list| list.len() >= n)
    })
    .await;
    let attempts = answer["attempts"].as_array().unwrap().clone();
    assert_eq!(attempts.len(), n, "delivery {delivery}: {attempts:?}");
    attempts
}

/// Polls `GET url` until `ready` holds, at most [`PATIENCE`]; returns the last answer.
async fn poll(server: &TestServer, url: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = server.get(url).await;
        if ready(&answer) {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "{url}: {what} never happened: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until delivery `delivery` has `status`; returns it.
async fn wait_delivery(server: &TestServer, delivery: u64, status: &str) -> Value {
    poll(
        server,
        &format!("/api/deliveries/{delivery}"),
        &format!("status {status}"),
        |d| d["status"] == json!(status),
    )
    .await
}

/// Waits until subscription `sub` has at least `n` deliveries with `status`; returns them.
async fn wait_deliveries(server: &TestServer, sub: u64, status: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let found = deliveries(server, sub, &format!("status={status}")).await;
        if found.len() >= n {
            assert!(
                found.iter().all(|d| d["status"] == json!(status)),
                "status={status} listed others: {found:?}"
            );
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "subscription {sub}: {n} deliveries never became {status}: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The delivery a request was for, from its envelope.
/// Waits until the runner of subscription `sub` signals `event`, among the signals `listener`
/// hears (from when it began to listen).
async fn signalled(listener: &mut broadcast::Receiver<Signal>, sub: u64, event: Event) {
    let wanted = Signal {
        subscription: SubscriptionId(sub),
        event,
    };
    let heard = async {
        loop {
            match listener.recv().await {
                Ok(signal) if signal == wanted => return,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the server stopped"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, heard)
        .await
        .unwrap_or_else(|_| panic!("the runner of subscription {sub} never signalled {event:?}"));
}

/// The event of a runner that waits for its subscription to change: a disabled one's.
const WAITS_FOR_A_CHANGE: Event = Event::Waits(Wait::Change);

/// Waits until the runner of `sub` has looked at its subscription since every change made
/// before this call and found it disabled, with none of its deliveries in flight. Two changes
/// of its throttle (which a disabled subscription does not use), each followed by the
/// runner's [`WAITS_FOR_A_CHANGE`]: the first signal may come from a look begun before the
/// first change, but the second's look began after it.
async fn settles_disabled(server: &TestServer, sub: u64) {
    let url = format!("/api/subscriptions/{sub}");
    let mut signals = server.listen();
    for throttle in [1, 2] {
        let change = json!({ "throttle_per_second": throttle });
        server
            .api
            .expect(Method::PATCH, &url, Some(change), 200)
            .await;
        signalled(&mut signals, sub, WAITS_FOR_A_CHANGE).await;
    }
    let in_flight = deliveries(server, sub, "status=in_flight").await;
    assert!(
        in_flight.is_empty(),
        "subscription {sub}: in flight: {in_flight:?}"
    );
}

fn delivery_of(received: &Received) -> u64 {
    received.json()["delivery_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no delivery_id in {}", received.json()))
}

/// The message a request carried, from its envelope.
fn message_of(received: &Received) -> u64 {
    received.json()["message"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no message.id in {}", received.json()))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("a short duration")
}

/// The time between consecutive requests, in ms.
fn gaps_ms(received: &[Received]) -> Vec<u64> {
    received
        .windows(2)
        .map(|pair| millis(pair[1].at.duration_since(pair[0].at)))
        .collect()
}

/// Asserts that the gaps between consecutive requests follow `expected` delays, each within
/// [expected − [`EARLY_MS`], expected + [`LATE_MS`]].
fn assert_schedule(what: &str, received: &[Received], expected: &[u64]) {
    let gaps = gaps_ms(received);
    assert_eq!(
        gaps.len(),
        expected.len(),
        "{what}: {} requests, expected {}",
        received.len(),
        expected.len() + 1
    );
    for (i, (gap, want)) in gaps.iter().zip(expected).enumerate() {
        assert!(
            *gap + EARLY_MS >= *want && *gap <= want + LATE_MS,
            "{what}: retry {} came {gap} ms after the previous attempt, expected {want} ms \
             (-{EARLY_MS}/+{LATE_MS}); all gaps {gaps:?}, expected {expected:?}",
            i + 1
        );
    }
}

/// The delays of a policy in any spelling, computed by the policy crate itself.
fn schedule_of(policy: &Value) -> Vec<u64> {
    let parsed = tenax_policy::parse_policy(policy)
        .unwrap_or_else(|e| panic!("{policy} does not parse: {e}"))
        .retry;
    (1..=parsed.retry_limit)
        .map(|r| parsed.delay_ms(r))
        .collect()
}

fn now_ms() -> u64 {
    millis(SystemTime::now().duration_since(UNIX_EPOCH).unwrap())
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("expected a string, got {value}"))
}

/// A fixed-delay native policy.
fn fixed(delay_ms: u64, retry_limit: u32) -> Value {
    json!({ "type": "fixed", "delay": delay_ms, "retry_limit": retry_limit })
}

// --- the envelope and signature ----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_carries_the_envelope_and_a_verifiable_signature_on_every_attempt() {
    let server = server(&[]).await;
    let receiver = Receiver::failing(1, 500).await;
    let sub = subscribe(
        &server,
        "orders",
        &receiver,
        json!({
            "secret": SECRET,
            "headers": {"X-Team": "billing", "Authorization": "Bearer t0ken"},
            "content_type": "application/vnd.orders+json",
            "policy": fixed(20, 3),
        }),
    )
    .await;
    assert_eq!(sub["secret"], json!(SECRET));
    let sub = id(&sub);
    let before = now_ms();
    let message = publish(&server, "orders", json!({"total": 12, "items": ["a", "b"]})).await;
    let received = receiver.wait_for(2, ARRIVAL).await;
    let after = now_ms();
    let d = delivery_of(&received[0]);
    let created_at = server.job(message).await["created_at"].clone();
    let key = signing::secret_key(SECRET).unwrap();

    for (i, request) in received.iter().enumerate() {
        let envelope = request.json();
        let attempt = u64::try_from(i).unwrap() + 1;
        assert_eq!(
            envelope,
            json!({
                "delivery_id": d,
                "subscription_id": sub,
                "attempt": attempt,
                "queue": "orders",
                "message": {
                    "id": message,
                    "type": "order.paid",
                    "body": {"total": 12, "items": ["a", "b"]},
                    "created_at": created_at,
                },
                "sent_at": envelope["sent_at"],
            }),
            "attempt {attempt}"
        );
        let sent_at = ms(&envelope["sent_at"]);
        assert!(
            (before..=after).contains(&sent_at),
            "sent_at {sent_at} outside [{before}, {after}]"
        );
        // The same id on every attempt: receivers deduplicate by it.
        let webhook_id = request.header("webhook-id");
        assert_eq!(webhook_id, format!("dlv_{d}"), "attempt {attempt}");
        let timestamp: u64 = request
            .header("webhook-timestamp")
            .parse()
            .expect("webhook-timestamp is whole seconds");
        assert_eq!(timestamp, sent_at / 1000, "attempt {attempt}");
        let signature = request.header("webhook-signature");
        assert!(signature.starts_with("v1,"), "{signature}");
        assert!(
            signing::verify(&key, &webhook_id, timestamp, &request.body, &signature),
            "attempt {attempt}: {signature} does not verify"
        );
        // The signature covers the id, the time and the body.
        let mut tampered = request.body.to_vec();
        tampered.push(b' ');
        assert!(!signing::verify(
            &key,
            &webhook_id,
            timestamp,
            &tampered,
            &signature
        ));
        assert!(!signing::verify(
            &key,
            &webhook_id,
            timestamp + 1,
            &request.body,
            &signature
        ));
        assert!(!signing::verify(
            &key,
            "dlv_0",
            timestamp,
            &request.body,
            &signature
        ));
        assert_eq!(request.header("x-team"), "billing");
        assert_eq!(request.header("authorization"), "Bearer t0ken");
        assert_eq!(
            request.header("content-type"),
            "application/vnd.orders+json"
        );
        assert_eq!(request.header("tenax-attempt"), attempt.to_string());
        assert_eq!(request.header("tenax-subscription"), sub.to_string());
    }
    let done = wait_delivery(&server, d, "completed").await;
    assert_eq!(done["message_id"], json!(message), "{done}");
    assert_eq!(done["subscription"], json!(sub), "{done}");
    assert_eq!(done["queue"], json!("orders"), "{done}");
    assert_eq!(receiver.count(), 2);
}

// --- retry schedules -------------------------------------------------------------------------

/// The `v1` signatures of a `webhook-signature` header that verify under `key`.
fn verifying(key: &[u8], request: &receiver::Received, header: &str) -> usize {
    let id = request.header("webhook-id");
    let timestamp: u64 = request
        .header("webhook-timestamp")
        .parse()
        .expect("seconds");
    header
        .split_ascii_whitespace()
        .filter(|one| signing::verify(key, &id, timestamp, &request.body, one))
        .count()
}

/// A rotated secret: during the overlap every delivery is signed by both the new and the old
/// secret (so a receiver still on the old one verifies), after it by the new one alone. The
/// new secret is shown once, in the rotation's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_signs_beside_the_old_one_during_the_overlap() {
    const NEW: &str = "whsec_bmV3LXNlY3JldC1mb3ItdGVzdGluZy0xMjM0NTY=";
    let server = server(&[]).await;
    let receiver = Receiver::ok().await;
    let sub = subscribe(&server, "rot", &receiver, json!({"secret": SECRET})).await;
    let sub = id(&sub);
    let old_key = signing::secret_key(SECRET).unwrap();
    let new_key = signing::secret_key(NEW).unwrap();

    let rotated = server
        .post(
            &format!("/api/subscriptions/{sub}/rotate-secret"),
            json!({"secret": NEW, "overlap": "1h"}),
        )
        .await;
    assert_eq!(rotated["secret"], NEW, "{rotated}");
    assert!(rotated["previous_secret_until"].is_string(), "{rotated}");
    assert_eq!(subscription(&server, sub).await["secret"], "[redacted]");
    publish(&server, "rot", json!({"n": 1})).await;
    let received = receiver.wait_for(1, ARRIVAL).await;
    let header = received[0].header("webhook-signature");
    assert_eq!(header.split_ascii_whitespace().count(), 2, "{header}");
    assert_eq!(verifying(&new_key, &received[0], &header), 1, "{header}");
    assert_eq!(verifying(&old_key, &received[0], &header), 1, "{header}");

    // A rotation without overlap ends the old secret at once; a generated one is shown once.
    let rotated = server
        .post(
            &format!("/api/subscriptions/{sub}/rotate-secret"),
            json!({"overlap": 0}),
        )
        .await;
    let generated = rotated["secret"]
        .as_str()
        .expect("the new secret")
        .to_owned();
    assert!(
        generated.starts_with("whsec_") && generated != NEW,
        "{rotated}"
    );
    assert_eq!(rotated["previous_secret_until"], Value::Null);
    publish(&server, "rot", json!({"n": 2})).await;
    let received = receiver.wait_for(2, ARRIVAL).await;
    let header = received[1].header("webhook-signature");
    let generated_key = signing::secret_key(&generated).unwrap();
    assert_eq!(header.split_ascii_whitespace().count(), 1, "{header}");
    assert_eq!(verifying(&generated_key, &received[1], &header), 1);
    assert_eq!(verifying(&new_key, &received[1], &header), 0);
    assert_eq!(verifying(&old_key, &received[1], &header), 0);
    // A bad secret is refused by field.
    server
        .invalid(
            &format!("/api/subscriptions/{sub}/rotate-secret"),
            json!({"secret": "nope"}),
            "secret",
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_follow_each_phased_backoff_function_through_all_four_phases() {
    let server = server(&[]).await;
    let mut cases = Vec::new();
    // (function, MIN, MAX, retries in the four phases: immediate, at MIN, backoff, at MAX).
    // Geometric needs MIN ≥ 1 s (policies.md), so its schedule is in seconds; the others run
    // from 100 to 400 ms.
    for (function, min, max, [a, b, n, c]) in [
        ("linear", 100, 400, [1, 2, 4, 1]),
        ("arithmetic", 100, 400, [1, 2, 4, 1]),
        ("exponential", 100, 400, [1, 2, 4, 1]),
        ("geometric", 1_000, 2_000, [1, 1, 3, 1]),
    ] {
        let policy = json!({
            "type": "phased", "min_delay": min, "max_delay": max, "num_retries": a + b + n + c,
            "num_no_delay_retries": a, "num_min_delay_retries": b, "num_max_delay_retries": c,
            "function": function, "jitter": "none",
        });
        let expected = schedule_of(&policy);
        // The four phases are there: a at 0, b at MIN, a backoff from MIN to MAX, c at MAX.
        let mut phases = vec![0; a];
        phases.extend(vec![min; b + 1]);
        assert_eq!(expected[..a + b + 1], phases, "{function}: {expected:?}");
        assert_eq!(
            expected[a + b + n - 1..],
            vec![max; c + 1],
            "{function}: {expected:?}"
        );
        let inside = &expected[a + b + 1..a + b + n - 1];
        assert!(
            inside.iter().all(|d| (min + 1..max).contains(d)),
            "{function}: {expected:?}"
        );
        let receiver = Receiver::start(Vec::new(), Reply::status(500)).await;
        let sub = subscribe(&server, "events", &receiver, json!({ "policy": policy })).await;
        assert_eq!(sub["policy_source"], json!("subscription"), "{sub}");
        assert_eq!(sub["effective_policy"]["type"], json!("phased"), "{sub}");
        assert_eq!(
            sub["effective_policy"]["function"],
            json!(function),
            "{sub}"
        );
        cases.push((function, expected, receiver, id(&sub)));
    }
    // Inside the backoff phase the curves differ, so the functions are really told apart.
    let insides: BTreeSet<Vec<u64>> = cases
        .iter()
        .filter(|c| c.0 != "geometric")
        .map(|c| c.1[4..6].to_vec())
        .collect();
    assert_eq!(insides.len(), 3, "{insides:?}");

    // One message: one delivery per subscription, all four retried at once.
    publish(&server, "events", json!({"n": 1})).await;
    for (function, expected, receiver, sub) in &cases {
        let attempts_made = expected.len() + 1;
        let received = receiver.wait_for(attempts_made, ARRIVAL).await;
        assert_schedule(function, &received, expected);
        let d = delivery_of(&received[0]);
        assert!(received.iter().all(|r| delivery_of(r) == d));
        assert_eq!(only_delivery(&server, *sub).await, d);
        let dead = wait_delivery(&server, d, "dead").await;
        let exhausted = format!("all {} retries were used", expected.len());
        assert!(
            text(&dead["dead_reason"]).contains(&exhausted),
            "{function}: {dead}"
        );
        assert_eq!(dead["failures"], json!(attempts_made), "{dead}");
        wait_attempts(&server, d, attempts_made).await;
        assert_eq!(
            receiver.count(),
            attempts_made,
            "{function}: no attempt after the last retry"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sns_delivery_policy_is_obeyed_with_its_throttle_and_content_type() {
    let server = server(&[]).await;
    // Verbatim SNS, fractional seconds (SNS's minimum is 1 s): 1 immediate retry, 1 at the
    // minimum, no backoff phase left, 1 at the maximum.
    let policy = json!({
        "healthyRetryPolicy": {
            "minDelayTarget": 1, "maxDelayTarget": 1.5, "numRetries": 3,
            "numNoDelayRetries": 1, "numMinDelayRetries": 1, "numMaxDelayRetries": 1,
            "backoffFunction": "Exponential",
        },
        "throttlePolicy": {"maxReceivesPerSecond": 7},
        "requestPolicy": {"headerContentType": "text/plain"},
    });
    let expected = schedule_of(&policy);
    assert_eq!(expected, [0, 1_000, 1_500]);
    let receiver = Receiver::start(Vec::new(), Reply::status(502)).await;
    let sub = subscribe(&server, "alerts", &receiver, json!({ "policy": policy })).await;
    assert_eq!(sub["throttle_per_second"], json!(7), "{sub}");
    assert_eq!(sub["content_type"], json!("text/plain"), "{sub}");
    assert_eq!(sub["policy_source"], json!("subscription"), "{sub}");
    assert_eq!(sub["effective_policy"]["type"], json!("phased"), "{sub}");

    publish(&server, "alerts", json!("disk full")).await;
    let received = receiver.wait_for(4, ARRIVAL).await;
    assert_schedule("SNS", &received, &expected);
    assert!(
        received
            .iter()
            .all(|r| r.header("content-type") == "text/plain")
    );
    let d = delivery_of(&received[0]);
    let dead = wait_delivery(&server, d, "dead").await;
    assert!(
        text(&dead["dead_reason"]).contains("all 3 retries were used"),
        "{dead}"
    );
    assert_eq!(receiver.count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zaqar_retry_policy_is_obeyed_wrapped_and_bare() {
    let server = server(&[]).await;
    // Zaqar's backoff phase has (maximum_delay − minimum_delay) / 5 s retries: none here, so
    // the schedule is 1 immediate retry, 1 at the minimum, 1 at the maximum.
    let wrapped = json!({"_retry_policy": {
        "retries_with_no_delay": 1, "minimum_delay_retries": 1, "minimum_delay": 1,
        "maximum_delay": 1, "maximum_delay_retries": 1, "retry_backoff_function": "linear",
    }});
    let bare = json!({
        "retries_with_no_delay": 1, "minimum_delay_retries": 1, "minimum_delay": 0.25,
        "maximum_delay": 0.5, "maximum_delay_retries": 1,
    });
    assert_eq!(schedule_of(&wrapped), [0, 1_000, 1_000]);
    assert_eq!(schedule_of(&bare), [0, 250, 500]);

    // Wrapped: fails 3 times, then the last retry succeeds. Bare: always fails.
    let succeeds = Receiver::failing(3, 500).await;
    let fails = Receiver::start(Vec::new(), Reply::status(500)).await;
    let a = subscribe(&server, "tasks", &succeeds, json!({ "policy": wrapped })).await;
    let b = subscribe(&server, "tasks", &fails, json!({ "policy": bare })).await;
    for sub in [&a, &b] {
        assert_eq!(sub["policy_source"], json!("subscription"), "{sub}");
        assert_eq!(sub["effective_policy"]["type"], json!("phased"), "{sub}");
    }
    publish(&server, "tasks", json!({"task": 1})).await;

    let received = fails.wait_for(4, ARRIVAL).await;
    assert_schedule("Zaqar, bare", &received, &schedule_of(&bare));
    let dead = wait_delivery(&server, delivery_of(&received[0]), "dead").await;
    assert!(
        text(&dead["dead_reason"]).contains("all 3 retries were used"),
        "{dead}"
    );

    let received = succeeds.wait_for(4, ARRIVAL).await;
    assert_schedule("Zaqar, wrapped", &received, &schedule_of(&wrapped));
    let done = wait_delivery(&server, delivery_of(&received[0]), "completed").await;
    assert_eq!(done["failures"], json!(3), "{done}");
    assert_eq!(succeeds.count(), 4);
    assert_eq!(fails.count(), 4);
}

// --- outcomes --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_not_retried_and_transient_statuses_are() {
    let server = server(&[]).await;
    let policy = fixed(20, 3);
    // (first answer, retryable_statuses, retried?)
    let cases = [
        (404, None, false),
        (408, None, true),
        (429, None, true),
        (503, None, true),
        // The override replaces the default: 409 is retried, 500 is not.
        (409, Some(json!([409])), true),
        (500, Some(json!([409])), false),
    ];
    let mut subs = Vec::new();
    for (status, retryable, retried) in cases {
        let receiver = Receiver::start(
            vec![Reply::status(status).body("nope")],
            Reply::status(200).body("ok"),
        )
        .await;
        let mut fields = json!({ "policy": policy });
        if let Some(statuses) = retryable {
            fields["retryable_statuses"] = statuses;
        }
        let sub = subscribe(&server, "orders", &receiver, fields).await;
        subs.push((status, retried, receiver, id(&sub)));
    }
    publish(&server, "orders", json!({"n": 1})).await;

    for (status, retried, receiver, sub) in &subs {
        let what = format!("HTTP {status}");
        let d = only_delivery(&server, *sub).await;
        if *retried {
            receiver.wait_for(2, ARRIVAL).await;
            let done = wait_delivery(&server, d, "completed").await;
            assert_eq!(done["failures"], json!(1), "{what}: {done}");
            let tries = wait_attempts(&server, d, 2).await;
            assert_eq!(tries.len(), 2, "{what}: {tries:?}");
            assert_eq!(tries[0]["status"], json!(status), "{what}");
            assert_eq!(tries[0]["result"], json!("retryable"), "{what}");
            assert_eq!(tries[1]["status"], json!(200), "{what}");
            assert_eq!(tries[1]["result"], json!("delivered"), "{what}");
        } else {
            let dead = wait_delivery(&server, d, "dead").await;
            assert_eq!(dead["failures"], json!(1), "{what}: {dead}");
            let reason = text(&dead["dead_reason"]);
            assert!(
                reason.contains(&status.to_string()),
                "{what}: the reason should name the status: {reason}"
            );
            let tries = wait_attempts(&server, d, 1).await;
            assert_eq!(tries.len(), 1, "{what}: {tries:?}");
            assert_eq!(tries[0]["status"], json!(status), "{what}");
            assert_eq!(tries[0]["result"], json!("permanent"), "{what}");
        }
    }
    // By now every retried delivery has had its 20 ms retry; the permanent ones had none.
    for (status, retried, receiver, _) in &subs {
        let want = if *retried { 2 } else { 1 };
        assert_eq!(receiver.count(), want, "HTTP {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_on_429_and_503_is_honoured() {
    let server = server(&[]).await;
    let too_many = Receiver::start(vec![Reply::status(429).retry_after("1")], Reply::ok()).await;
    let unavailable = Receiver::start(vec![Reply::status(503).retry_after("1")], Reply::ok()).await;
    // The control: without Retry-After the 50 ms policy decides.
    let plain = Receiver::failing(1, 429).await;
    let policy = fixed(50, 3);
    let mut subs = Vec::new();
    for receiver in [&too_many, &unavailable, &plain] {
        let sub = subscribe(&server, "orders", receiver, json!({ "policy": policy })).await;
        subs.push(id(&sub));
    }
    publish(&server, "orders", json!({"n": 1})).await;

    for (name, receiver, sub, wait) in [
        ("429 + Retry-After: 1", &too_many, subs[0], Some(1_000)),
        ("503 + Retry-After: 1", &unavailable, subs[1], Some(1_000)),
        ("429", &plain, subs[2], None),
    ] {
        let received = receiver.wait_for(2, ARRIVAL).await;
        assert_schedule(name, &received, &[wait.unwrap_or(50)]);
        let d = only_delivery(&server, sub).await;
        wait_delivery(&server, d, "completed").await;
        let tries = wait_attempts(&server, d, 2).await;
        assert_eq!(tries[0]["retry_after_ms"], json!(wait), "{name}: {tries:?}");
    }
}

/// A retry's delay counts from the endpoint's answer, not from the end of the bookkeeping the
/// answer sets off: here a pause asked for (stored for every server), the subscription's first
/// failure mark, and the attempt's own commit. The retry's due time, as stored, is compared
/// with the answer's time, as the attempt log has it. On a fast disk the bookkeeping takes a
/// millisecond; tests/slow-disk/run.sh makes every sync 60 ms slow, and a delay counted after
/// the bookkeeping is then due 60 ms or more late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_counts_from_the_answer_not_from_the_bookkeeping_after_it() {
    const DELAY_MS: u64 = 2_000;
    let server = server(&[]).await;
    let asked = Receiver::start(vec![Reply::status(503).retry_after("2")], Reply::ok()).await;
    let failed = Receiver::failing(1, 500).await;
    let asked_sub = subscribe(&server, "orders", &asked, json!({ "policy": fixed(50, 3) })).await;
    let policy = fixed(DELAY_MS, 3);
    let failed_sub = subscribe(&server, "orders", &failed, json!({ "policy": policy })).await;
    publish(&server, "orders", json!({"n": 1})).await;
    let both = [
        ("503 + Retry-After: 2", &asked, &asked_sub),
        ("500, policy 2 s", &failed, &failed_sub),
    ];
    for (name, receiver, sub) in both {
        receiver.wait_for(1, ARRIVAL).await;
        let d = only_delivery(&server, id(sub)).await;
        let tries = wait_attempts(&server, d, 1).await;
        let view = delivery(&server, d).await;
        assert_eq!(view["status"], json!("scheduled"), "{name}: {view}");
        let answered = ms(&tries[0]["at"]) + tries[0]["latency_ms"].as_u64().unwrap();
        let due = ms(&view["run_at"]);
        // The attempt's start and its latency are whole milliseconds each, and the server may
        // be descheduled between measuring the latency and reading the clock; a delay counted
        // after the bookkeeping is a sync or more late (60 ms under tests/slow-disk).
        assert!(
            due.abs_diff(answered + DELAY_MS) <= 40,
            "{name}: the retry is due {} ms after the answer, expected {DELAY_MS}",
            due.saturating_sub(answered)
        );
    }
    for (name, receiver, _) in both {
        let received = receiver.wait_for(2, ARRIVAL).await;
        assert_schedule(name, &received, &[DELAY_MS]);
    }
}

/// A delivery's attempts show every attempt its status tells of, in the same answer: one
/// seen completed shows its delivered attempt, and it never counts more failures than it
/// shows failed attempts, even while the attempt's commit is being written (the embedded
/// store shows a change in memory as it is submitted, and reads the attempt log from its
/// file). On a fast disk that window is a fraction of a millisecond; tests/slow-disk/run.sh
/// makes every sync 60 ms slow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_shows_every_attempt_its_status_tells_of() {
    let server = server(&[]).await;
    let receiver = Receiver::failing(2, 500).await;
    let sub = id(&subscribe(
        &server,
        "orders",
        &receiver,
        json!({ "policy": fixed(100, 3) }),
    )
    .await);
    publish(&server, "orders", json!({"n": 1})).await;
    let deadline = Instant::now() + PATIENCE;
    let d = loop {
        if let Some(first) = deliveries(&server, sub, "").await.first() {
            break id(first);
        }
        assert!(
            Instant::now() < deadline,
            "no delivery for subscription {sub}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    loop {
        let view = delivery(&server, d).await;
        let attempts = view["attempts"].as_array().expect("attempts").clone();
        let failed = attempts
            .iter()
            .filter(|a| a["result"] != json!("delivered"))
            .count() as u64;
        let failures = view["failures"].as_u64().unwrap();
        assert!(
            failed >= failures,
            "{failures} failures, {failed} failed attempts: {view}"
        );
        if view["status"] == json!("completed") {
            assert_eq!(attempts.len(), 3, "{view}");
            assert_eq!(attempts[2]["result"], json!("delivered"), "{view}");
            break;
        }
        assert!(Instant::now() < deadline, "never completed: {view}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_refused_connections_are_failed_attempts_that_are_retried() {
    let server = server(&["--delivery-timeout", "300ms"]).await;
    let slow = Receiver::start(vec![Reply::slow(Duration::from_secs(2))], Reply::ok()).await;
    let slow_sub =
        id(&subscribe(&server, "orders", &slow, json!({ "policy": fixed(50, 3) })).await);
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = subscribe_to(
        &server,
        "orders",
        &format!("http://127.0.0.1:{port}/hook"),
        json!({ "policy": fixed(20, 2) }),
    )
    .await;
    publish(&server, "orders", json!({"n": 1})).await;

    // The slow answer is abandoned at the timeout; the retry comes 50 ms later and succeeds.
    let received = slow.wait_for(2, ARRIVAL).await;
    let gap = gaps_ms(&received)[0];
    assert!(
        (300 + 50 - 10..=300 + 50 + LATE_MS).contains(&gap),
        "the retry came {gap} ms after the slow attempt, expected about 350 ms"
    );
    let d = delivery_of(&received[0]);
    assert_eq!(only_delivery(&server, slow_sub).await, d);
    wait_delivery(&server, d, "completed").await;
    let tries = wait_attempts(&server, d, 2).await;
    assert_eq!(tries[0]["status"], Value::Null, "{tries:?}");
    assert_eq!(tries[0]["result"], json!("retryable"), "{tries:?}");
    let error = text(&tries[0]["error"]);
    assert!(error.contains("timed out"), "{error}");
    let latency = tries[0]["latency_ms"].as_u64().unwrap();
    assert!((290..1_500).contains(&latency), "latency {latency} ms");
    assert_eq!(tries[1]["result"], json!("delivered"), "{tries:?}");
    assert_eq!(slow.count(), 2);

    // Nobody listens: every attempt is an error, retried until the policy gives up.
    let d = only_delivery(&server, id(&refused)).await;
    let dead = wait_delivery(&server, d, "dead").await;
    assert!(
        text(&dead["dead_reason"]).contains("all 2 retries were used"),
        "{dead}"
    );
    let tries = wait_attempts(&server, d, 3).await;
    assert_eq!(tries.len(), 3, "{tries:?}");
    for attempt in &tries {
        assert_eq!(attempt["status"], Value::Null, "{attempt}");
        assert_eq!(attempt["result"], json!("retryable"), "{attempt}");
        let error = text(&attempt["error"]);
        assert!(error.contains("connect"), "{error}");
    }
}

// --- durability ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_retry_schedule_resumes_it() {
    let mut server = server(&[]).await;
    let receiver = Receiver::failing(1, 500).await;
    let sub = subscribe(
        &server,
        "orders",
        &receiver,
        json!({ "policy": fixed(1_500, 3) }),
    )
    .await;
    publish(&server, "orders", json!({"n": 1})).await;
    let first = receiver.wait_for(1, ARRIVAL).await;
    let d = delivery_of(&first[0]);
    assert_eq!(only_delivery(&server, id(&sub)).await, d);
    // The failure is on disk once the retry is scheduled; stop right then.
    let scheduled = wait_delivery(&server, d, "scheduled").await;
    assert_eq!(scheduled["failures"], json!(1), "{scheduled}");
    let due = ms(&scheduled["run_at"]);
    let restarting = Instant::now();
    server.restart().await;
    let restart = restarting.elapsed();
    assert!(
        restart < Duration::from_millis(1_000),
        "the restart took {restart:?}: too long for this test's schedule"
    );

    // The retry comes when it was due: not at once, not lost.
    let received = receiver.wait_for(2, ARRIVAL).await;
    assert_schedule("after a restart", &received, &[1_500]);
    assert_eq!(delivery_of(&received[1]), d);
    assert_eq!(received[1].json()["attempt"], json!(2));
    assert_eq!(received[1].header("webhook-id"), format!("dlv_{d}"));
    let sent_at = ms(&received[1].json()["sent_at"]);
    assert!(
        sent_at >= due && sent_at <= due + LATE_MS,
        "sent at {sent_at}, due at {due}"
    );
    wait_delivery(&server, d, "completed").await;
    let tries = wait_attempts(&server, d, 2).await;
    assert_eq!(
        tries.len(),
        2,
        "the first attempt survives the restart: {tries:?}"
    );
    assert_eq!(tries[0]["status"], json!(500));
    assert_eq!(receiver.count(), 2);
}

// --- throttling, fan-out, the address guard ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throttle_holds_and_throttled_deliveries_wait() {
    const RATE: usize = 20;
    const MESSAGES: usize = 100;
    let server = server(&[]).await;
    let receiver = Receiver::ok().await;
    subscribe(
        &server,
        "bulk",
        &receiver,
        json!({ "throttle_per_second": RATE }),
    )
    .await;
    let jobs = (0..MESSAGES)
        .map(|i| json!({"queue": "bulk", "type": "t", "payload": {"i": i}}))
        .collect();
    let messages = server.enqueue_batch(jobs).await;
    let received = receiver.wait_for(MESSAGES, Duration::from_secs(15)).await;

    // Nothing dropped, nothing twice.
    let delivered: BTreeSet<u64> = received.iter().map(message_of).collect();
    assert_eq!(delivered, messages.iter().copied().collect());
    assert_eq!(received.len(), MESSAGES);

    // A bucket of one second's worth: 20 at once, then 20 a second. The whole run takes at
    // least (100 − 20) / 20 = 4 s (less 100 ms for arrival jitter).
    let start = received[0].at;
    let offsets: Vec<u64> = received
        .iter()
        .map(|r| millis(r.at.duration_since(start)))
        .collect();
    let span = *offsets.last().unwrap();
    assert!(span >= 3_900, "100 deliveries took only {span} ms");
    // After the first second the burst is spent: no 1 s window holds more than the rate, plus
    // 2 for requests that left on time but arrived late. In the first second, the burst and
    // the rate.
    for (i, from) in offsets.iter().enumerate() {
        let within = offsets[i..]
            .iter()
            .take_while(|t| **t < from + 1_000)
            .count();
        let limit = if *from >= 1_000 {
            RATE + 2
        } else {
            2 * RATE + 2
        };
        assert!(
            within <= limit,
            "{within} deliveries in the second from {from} ms (limit {limit}); {offsets:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_endpoint_is_refused_by_default() {
    let server = TestServer::start(Options::system()).await;
    let receiver = Receiver::ok().await;
    let port = receiver.address.port();
    for endpoint in [
        format!("http://127.0.0.1:{port}/hook"),
        // The check is made on the resolved address, not the text.
        format!("http://localhost:{port}/hook"),
        "http://10.1.2.3/hook".to_owned(),
        "http://[::1]:8080/hook".to_owned(),
        "http://169.254.169.254/latest/meta-data".to_owned(),
    ] {
        let message = server
            .invalid(
                "/api/queues/orders/subscriptions",
                json!({ "endpoint": endpoint }),
                "endpoint",
            )
            .await;
        assert!(
            message.contains("--allow-private-endpoints"),
            "{endpoint}: {message}"
        );
    }
    let all = server.get("/api/subscriptions").await;
    assert_eq!(all["subscriptions"], json!([]), "{all}");
    publish(&server, "orders", json!({})).await;
    assert_eq!(receiver.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_makes_one_delivery_per_subscription() {
    let server = server(&[]).await;
    let first = Receiver::ok().await;
    let second = Receiver::ok().await;
    let a = id(&subscribe(&server, "orders", &first, json!({})).await);
    let b = id(&subscribe(&server, "orders", &second, json!({})).await);
    let mut messages = Vec::new();
    for i in 0..10 {
        messages.push(publish(&server, "orders", json!({ "i": i })).await);
    }
    let batch = (0..3)
        .map(|i| json!({"queue": "orders", "type": "batched", "payload": {"b": i}}))
        .collect();
    messages.extend(server.enqueue_batch(batch).await);
    // Another queue's messages go to nobody here.
    publish(&server, "elsewhere", json!({})).await;
    let messages: BTreeSet<u64> = messages.into_iter().collect();

    for (sub, receiver) in [(a, &first), (b, &second)] {
        let received = receiver.wait_for(messages.len(), ARRIVAL).await;
        let got: Vec<u64> = received.iter().map(message_of).collect();
        assert_eq!(got.len(), messages.len(), "subscription {sub}: {got:?}");
        assert_eq!(
            got.iter().copied().collect::<BTreeSet<u64>>(),
            messages,
            "subscription {sub}: one request per message"
        );
        assert!(
            received
                .iter()
                .all(|r| r.json()["subscription_id"] == json!(sub))
        );
        let done = wait_deliveries(&server, sub, "completed", messages.len()).await;
        assert_eq!(done.len(), messages.len());
        let view = subscription(&server, sub).await;
        assert_eq!(
            view["deliveries"]["completed"],
            json!(messages.len()),
            "{view}"
        );
    }
    assert_eq!(first.count(), messages.len());
    assert_eq!(second.count(), messages.len());
}

// --- dead deliveries and replay --------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_deliveries_can_be_listed_inspected_and_replayed() {
    let server = server(&[]).await;
    // Three 404s (three dead deliveries), then success.
    let receiver = Receiver::start(
        vec![Reply::status(404).body("no such hook"); 3],
        Reply::status(200).body("thanks"),
    )
    .await;
    let sub = id(&subscribe(
        &server,
        "orders",
        &receiver,
        json!({ "policy": fixed(20, 2) }),
    )
    .await);
    let m1 = publish(&server, "orders", json!({"m": 1})).await;
    let m2 = publish(&server, "orders", json!({"m": 2})).await;
    let dead = wait_deliveries(&server, sub, "dead", 2).await;
    let by_message = |list: &[Value], m: u64| {
        list.iter()
            .find(|d| d["message_id"] == json!(m))
            .map(id)
            .unwrap_or_else(|| panic!("no delivery of message {m} in {list:?}"))
    };
    let d1 = by_message(&dead, m1);
    let d2 = by_message(&dead, m2);
    // A time after both died, before the third message.
    let finished = dead.iter().map(|d| ms(&d["finished_at"])).max().unwrap();
    while now_ms() <= finished + 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let since = now_ms();
    let m3 = publish(&server, "orders", json!({"m": 3})).await;
    let dead = wait_deliveries(&server, sub, "dead", 3).await;
    let d3 = by_message(&dead, m3);
    assert_eq!(receiver.count(), 3);

    // Inspect: the reason, the one attempt and what the endpoint said.
    let view = delivery(&server, d1).await;
    assert_eq!(view["status"], json!("dead"), "{view}");
    assert!(text(&view["dead_reason"]).contains("404"), "{view}");
    let tries = view["attempts"].as_array().unwrap();
    assert_eq!(tries.len(), 1, "{view}");
    assert_eq!(tries[0]["status"], json!(404));
    assert_eq!(tries[0]["response"], json!("no such hook"));

    // Replay one, with another policy.
    let other = fixed(10, 5);
    let answer = server
        .post(
            &format!("/api/deliveries/{d1}/replay"),
            json!({ "policy": other }),
        )
        .await;
    assert_eq!(answer["replayed"], json!([d1]), "{answer}");
    receiver.wait_for(4, ARRIVAL).await;
    let view = wait_delivery(&server, d1, "completed").await;
    assert_eq!(view["policy"]["type"], json!("fixed"), "{view}");
    assert_eq!(view["policy"]["delay"], json!(10), "{view}");
    let tries = wait_attempts(&server, d1, 2).await;
    assert_eq!(tries.len(), 2, "the replay keeps the history: {tries:?}");
    assert_eq!(tries[1]["result"], json!("delivered"));
    assert_eq!(tries[1]["response"], json!("thanks"));

    // Replay the subscription's dead deliveries since a time: only the third.
    let answer = server
        .post(
            &format!("/api/subscriptions/{sub}/replay"),
            json!({ "since": tenax_core::clock::rfc3339(since) }),
        )
        .await;
    assert_eq!(answer["replayed"], json!([d3]), "{answer}");
    receiver.wait_for(5, ARRIVAL).await;
    wait_delivery(&server, d3, "completed").await;
    assert_eq!(delivery(&server, d2).await["status"], json!("dead"));

    // And all of them, with a fresh attempt count: the second.
    let answer = server
        .post(
            &format!("/api/subscriptions/{sub}/replay"),
            json!({ "reset_attempts": true }),
        )
        .await;
    assert_eq!(answer["replayed"], json!([d2]), "{answer}");
    receiver.wait_for(6, ARRIVAL).await;
    let view = wait_delivery(&server, d2, "completed").await;
    assert_eq!(view["failures"], json!(0), "{view}");
    assert_eq!(
        deliveries(&server, sub, "status=dead").await,
        Vec::<Value>::new()
    );
    let replayed = receiver.received();
    assert_eq!(
        replayed[5].json()["attempt"],
        json!(1),
        "a reset delivery starts again at attempt 1"
    );
    assert_eq!(receiver.count(), 6);
}

// --- enabling, disabling, health -------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_subscription_holds_its_deliveries_until_enabled() {
    let server = server(&[]).await;
    let receiver = Receiver::ok().await;
    let mut signals = server.listen();
    let sub = id(&subscribe(&server, "orders", &receiver, json!({ "enabled": false })).await);
    let mut messages = BTreeSet::new();
    for i in 0..3 {
        messages.insert(publish(&server, "orders", json!({ "i": i })).await);
    }
    let view = subscription(&server, sub).await;
    assert_eq!(view["enabled"], json!(false), "{view}");
    assert_eq!(view["deliveries"]["ready"], json!(3), "{view}");
    // Nothing arrives: the runner waits for its subscription to change, and took nothing
    // before (its first look found it disabled).
    signalled(&mut signals, sub, WAITS_FOR_A_CHANGE).await;
    assert_eq!(receiver.count(), 0, "a disabled subscription delivered");

    let view = server
        .post(&format!("/api/subscriptions/{sub}/enable"), json!({}))
        .await;
    assert_eq!(view["enabled"], json!(true), "{view}");
    let received = receiver.wait_for(3, ARRIVAL).await;
    let got: BTreeSet<u64> = received.iter().map(message_of).collect();
    assert_eq!(got, messages);
    wait_deliveries(&server, sub, "completed", 3).await;

    // Disabled again: new messages wait again.
    let mut signals = server.listen();
    server
        .post(&format!("/api/subscriptions/{sub}/disable"), json!({}))
        .await;
    let late = publish(&server, "orders", json!({"late": true})).await;
    signalled(&mut signals, sub, WAITS_FOR_A_CHANGE).await;
    assert_eq!(receiver.count(), 3);
    server
        .post(&format!("/api/subscriptions/{sub}/enable"), json!({}))
        .await;
    let received = receiver.wait_for(4, ARRIVAL).await;
    assert_eq!(message_of(&received[3]), late);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_endpoint_is_unhealthy_and_disabled_automatically() {
    // No circuit breaker: its cool-down would stop the attempts that disabling counts on.
    let server = server(&["--delivery-breaker-failures", "0"]).await;
    let failing = Receiver::start(Vec::new(), Reply::status(500).body("down")).await;
    let mut signals = server.listen();
    let sub = id(&subscribe(
        &server,
        "orders",
        &failing,
        json!({ "auto_disable_after": 300, "policy": fixed(20, 1_000) }),
    )
    .await);
    publish(&server, "orders", json!({"n": 1})).await;
    let url = format!("/api/subscriptions/{sub}");
    let view = poll(&server, &url, "automatic disabling", |s| {
        s["enabled"] == json!(false)
    })
    .await;
    let reason = text(&view["disabled_reason"]);
    assert!(reason.contains("disabled automatically"), "{reason}");
    let health = &view["health"];
    assert_eq!(health["healthy"], json!(false), "{view}");
    let failures = health["consecutive_failures"].as_u64().unwrap();
    assert!(failures >= 2, "{view}");
    assert_eq!(health["recent_failure_rate"], json!(1.0), "{view}");
    assert!(
        health["recent_attempts"].as_u64().unwrap() >= failures,
        "{view}"
    );
    assert_eq!(health["last_success_at"], Value::Null, "{view}");
    assert!(health["last_failure_at"].is_string(), "{view}");
    let since = ms(&health["failing_since"]);
    assert!(ms(&health["last_failure_at"]) >= since + 300, "{view}");

    // It failed for 300 ms before it was disabled, and then it stops. The server counts from
    // the answers it got, the receiver stamps the requests as they arrive: the two spans differ
    // by how much longer the first answer took to come back than the last, which on a loaded
    // machine is milliseconds (294 ms seen here once). Disabling that went by the count of
    // failures instead would show a few tens of ms (a retry every 20 ms).
    const ANSWER_SKEW_MS: u64 = 50;
    let received = failing.received();
    let failing_for = millis(received.last().unwrap().at.duration_since(received[0].at));
    assert!(
        failing_for + ANSWER_SKEW_MS >= 300,
        "disabled after {failing_for} ms"
    );
    // Enabled until then, the runner waits for a change once it has seen the disable, and
    // sends nothing more; a retry taken just before may still arrive.
    let count = failing.count();
    signalled(&mut signals, sub, WAITS_FOR_A_CHANGE).await;
    assert!(
        failing.count() <= count + 1,
        "delivery went on while disabled"
    );
    let d = only_delivery(&server, sub).await;
    let held = delivery(&server, d).await;
    assert_ne!(
        held["status"],
        json!("dead"),
        "the delivery is held, not dead: {held}"
    );

    // Re-enabled on a mended endpoint that fails once more: a fresh failure period, so the
    // delivery is retried and delivered rather than disabled again at once.
    let mended = Receiver::failing(1, 500).await;
    server
        .expect(
            Method::PATCH,
            &url,
            Some(json!({ "endpoint": mended.url("/hook") })),
            200,
        )
        .await;
    let view = server.post(&format!("{url}/enable"), json!({})).await;
    assert_eq!(view["enabled"], json!(true), "{view}");
    assert_eq!(view["disabled_reason"], Value::Null, "{view}");
    mended.wait_for(2, ARRIVAL).await;
    wait_delivery(&server, d, "completed").await;
    let view = poll(&server, &url, "recovery", |s| {
        s["health"]["healthy"] == json!(true)
    })
    .await;
    assert_eq!(view["enabled"], json!(true), "{view}");
    assert_eq!(view["health"]["consecutive_failures"], json!(0), "{view}");
    assert!(view["health"]["last_success_at"].is_string(), "{view}");
    assert_eq!(view["health"]["failing_since"], Value::Null, "{view}");
}

/// Changes made through the API while the runner stores a subscription's health keep both:
/// the runner's failure marks and its automatic disabling survive a PATCH in flight. A PATCH
/// once wrote back the whole subscription it had read after checking the endpoint's
/// addresses, undoing a disable stored meanwhile (so the endpoint got another attempt) or a
/// failure mark (so the failure period began again).
///
/// The bound is exact: attempts are 200 ms apart and the subscription is disabled after
/// failing for 300 ms, so the third attempt at the latest disables it; a fourth means a
/// health change was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_marks_and_disabling_survive_concurrent_changes() {
    const SUBSCRIPTIONS: u64 = 24;
    // No circuit breaker: the bound below counts attempts 200 ms apart.
    let server = server(&["--delivery-breaker-failures", "0"]).await;
    let failing = Receiver::start(Vec::new(), Reply::status(500)).await;
    let mut subs = Vec::new();
    for n in 0..SUBSCRIPTIONS {
        let queue = format!("race{n}");
        let fields = json!({ "auto_disable_after": 300, "policy": fixed(200, 1_000) });
        let endpoint = failing.localhost_url("/hook");
        subs.push(id(&subscribe_to(&server, &queue, &endpoint, fields).await));
        publish(&server, &queue, json!({ "n": n })).await;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let patchers: Vec<_> = subs
        .iter()
        .map(|&sub| {
            let api = server.api.clone();
            let stop = stop.clone();
            // Naming the endpoint makes the PATCH resolve it: the change is slow, as it is
            // with real DNS.
            let endpoint = failing.localhost_url("/hook");
            tokio::spawn(async move {
                let url = format!("/api/subscriptions/{sub}");
                let mut n = 1_000_u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let change = json!({ "endpoint": endpoint, "throttle_per_second": n });
                    let view = api.expect(Method::PATCH, &url, Some(change), 200).await;
                    assert_eq!(view["throttle_per_second"], json!(n), "{view}");
                }
            })
        })
        .collect();
    for &sub in &subs {
        let url = format!("/api/subscriptions/{sub}");
        poll(&server, &url, "automatic disabling", |s| {
            s["enabled"] == json!(false)
        })
        .await;
    }
    // Every PATCH that read a subscription before its disable was stored has ended by now.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for patcher in patchers {
        patcher.await.expect("the PATCH loop");
    }
    // A lost disable would show as a runner that takes again instead of waiting for a change,
    // and a lost failure mark as one more attempt before the disable: each runner settles, and
    // the attempts are counted after.
    for &sub in &subs {
        settles_disabled(&server, sub).await;
    }
    for &sub in &subs {
        let view = subscription(&server, sub).await;
        assert_eq!(view["enabled"], json!(false), "{view}");
        let attempts = failing
            .received()
            .iter()
            .filter(|r| r.json()["subscription_id"] == json!(sub))
            .count();
        assert!(
            (2..=3).contains(&attempts),
            "subscription {sub}: {attempts} attempts; a health change was lost"
        );
    }
}

/// A message's trace context goes with each of its deliveries, as the `traceparent` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_carry_their_messages_trace_context() {
    const TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let server = server(&[]).await;
    let receiver = Receiver::ok().await;
    subscribe(&server, "orders", &receiver, json!({})).await;
    server
        .enqueue(
            json!({"queue": "orders", "type": "order.paid", "payload": {"n": 1},
                        "traceparent": TRACE}),
        )
        .await;
    publish(&server, "orders", json!({"n": 2})).await;
    let received = receiver.wait_for(2, ARRIVAL).await;
    let traces: Vec<Option<&str>> = received
        .iter()
        .map(|r| r.headers.get("traceparent").and_then(|v| v.to_str().ok()))
        .collect();
    assert!(traces.contains(&Some(TRACE)), "{traces:?}");
    assert!(traces.contains(&None), "{traces:?}");
}

// --- the attempt log -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_listed_per_delivery_and_per_subscription() {
    let server = server(&[]).await;
    let long = "x".repeat(2_000);
    let receiver = Receiver::start(
        vec![
            Reply::status(500).body("boom: database down"),
            Reply::status(503).body(&long),
        ],
        Reply::status(200).body("thanks"),
    )
    .await;
    let sub = id(&subscribe(
        &server,
        "orders",
        &receiver,
        json!({ "policy": fixed(20, 5) }),
    )
    .await);
    let before = now_ms();
    publish(&server, "orders", json!({"n": 1})).await;
    let d1 = delivery_of(&receiver.wait_for(3, ARRIVAL).await[0]);
    wait_delivery(&server, d1, "completed").await;
    let after = now_ms();

    let tries = wait_attempts(&server, d1, 3).await;
    assert_eq!(tries.len(), 3, "{tries:?}");
    let statuses: Vec<&Value> = tries.iter().map(|a| &a["status"]).collect();
    assert_eq!(statuses, [&json!(500), &json!(503), &json!(200)]);
    let results: Vec<&Value> = tries.iter().map(|a| &a["result"]).collect();
    assert_eq!(
        results,
        [
            &json!("retryable"),
            &json!("retryable"),
            &json!("delivered")
        ]
    );
    let mut previous = before;
    for (i, attempt) in tries.iter().enumerate() {
        assert_eq!(attempt["delivery"], json!(d1), "{attempt}");
        assert_eq!(attempt["attempt"], json!(i + 1), "{attempt}");
        assert_eq!(attempt["error"], Value::Null, "{attempt}");
        let at = ms(&attempt["at"]);
        assert!(at >= previous && at <= after, "{attempt}");
        previous = at;
        assert!(attempt["latency_ms"].as_u64().unwrap() < 1_000, "{attempt}");
    }
    assert_eq!(tries[0]["response"], json!("boom: database down"));
    let cut = text(&tries[1]["response"]);
    assert!(cut.ends_with('…') && cut.len() < 600, "{cut}");
    assert_eq!(tries[2]["response"], json!("thanks"));
    // The delivery's own view carries the same list.
    assert_eq!(delivery(&server, d1).await["attempts"], json!(tries));

    // A second delivery: the subscription's list holds both deliveries' attempts.
    publish(&server, "orders", json!({"n": 2})).await;
    let d2 = delivery_of(&receiver.wait_for(4, ARRIVAL).await[3]);
    wait_delivery(&server, d2, "completed").await;
    wait_attempts(&server, d2, 1).await;
    let all = server
        .get(&format!("/api/subscriptions/{sub}/attempts"))
        .await;
    let all = all["attempts"].as_array().unwrap();
    assert_eq!(all.len(), 4, "{all:?}");
    let of = |d: u64| all.iter().filter(|a| a["delivery"] == json!(d)).count();
    assert_eq!((of(d1), of(d2)), (3, 1), "{all:?}");
    assert!(
        all.iter()
            .all(|a| a["at"].is_string() && a["latency_ms"].is_u64())
    );
}

// --- endpoint sharing ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_sharing_an_endpoint_do_not_wait_for_each_other() {
    // One request at a time to the endpoint: the bound is shared by both subscriptions, and an
    // idle subscription must not sit on it. Sitting on it holds the next message until the idle
    // runner's wait ends (the runner's IDLE_POLL, a second: 1.0 s measured with the permit held
    // through that wait); a delivery merely slow on a loaded machine takes a fraction of that,
    // so the bound lies between the two, not at the tighter LATE_MS (which a loaded full run
    // once exceeded).
    const HELD_IF_OVER: Duration = Duration::from_millis(600);
    let server = server(&["--delivery-concurrency", "1"]).await;
    let receiver = Receiver::ok().await;
    subscribe_to(&server, "a", &receiver.url("/a"), json!({})).await;
    subscribe_to(&server, "b", &receiver.url("/b"), json!({})).await;
    let mut n = 0;
    for queue in ["a", "a", "b", "b", "a", "b"] {
        let sent = Instant::now();
        publish(&server, queue, json!({})).await;
        n += 1;
        let received = receiver.wait_for(n, ARRIVAL).await;
        let latency = received[n - 1].at.duration_since(sent);
        assert!(
            latency < HELD_IF_OVER,
            "message {n} (queue {queue}) took {latency:?} to arrive"
        );
    }
}

// --- HTTPS -----------------------------------------------------------------------------------

/// A server that trusts `ca` (written to a file in `dir`) besides the platform's roots.
async fn server_trusting(ca: &TestCa, dir: &tempfile::TempDir, extra: &[&str]) -> TestServer {
    let ca_file = ca.write_pem(dir.path(), "ca.pem");
    let mut flags = vec!["--delivery-ca-file", ca_file.to_str().unwrap()];
    flags.extend_from_slice(extra);
    server(&flags).await
}

/// The request of subscription `sub` among `received`.
fn request_of(received: &[Received], sub: u64) -> &Received {
    received
        .iter()
        .find(|r| r.header("tenax-subscription") == sub.to_string())
        .unwrap_or_else(|| panic!("no request of subscription {sub}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_delivery_to_a_private_ca_carries_the_same_envelope_headers_and_signature() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Tenax test CA");
    let server = server_trusting(&ca, &dir, &[]).await;
    let secure = Receiver::start_tls(
        Vec::new(),
        Reply::status(200).body("thanks"),
        &ca.leaf(&["localhost", "127.0.0.1"]),
    )
    .await;
    let plain = Receiver::ok().await;
    // By name (resolved by the address guard's resolver, verified against the certificate's
    // DNS name), by IP address (its IP address name), and plain http beside them.
    let by_name = subscribe_to(
        &server,
        "orders",
        &secure.localhost_url("/hook"),
        json!({ "secret": SECRET, "headers": {"X-Team": "billing"} }),
    )
    .await;
    assert!(text(&by_name["endpoint"]).starts_with("https://localhost:"));
    let by_name = id(&by_name);
    let by_ip = id(&subscribe_to(&server, "orders", &secure.url("/hook"), json!({})).await);
    let by_http = id(&subscribe(&server, "orders", &plain, json!({})).await);
    let before = now_ms();
    let message = publish(&server, "orders", json!({"total": 12})).await;
    let received = secure.wait_for(2, ARRIVAL).await;
    let after = now_ms();

    let request = request_of(&received, by_name);
    let d = delivery_of(request);
    let envelope = request.json();
    let created_at = server.job(message).await["created_at"].clone();
    assert_eq!(
        envelope,
        json!({
            "delivery_id": d, "subscription_id": by_name, "attempt": 1, "queue": "orders",
            "message": {"id": message, "type": "order.paid", "body": {"total": 12},
                        "created_at": created_at},
            "sent_at": envelope["sent_at"],
        })
    );
    let sent_at = ms(&envelope["sent_at"]);
    assert!((before..=after).contains(&sent_at), "sent_at {sent_at}");
    let webhook_id = request.header("webhook-id");
    assert_eq!(webhook_id, format!("dlv_{d}"));
    let timestamp: u64 = request.header("webhook-timestamp").parse().unwrap();
    assert_eq!(timestamp, sent_at / 1000);
    let key = signing::secret_key(SECRET).unwrap();
    let signature = request.header("webhook-signature");
    assert!(
        signing::verify(&key, &webhook_id, timestamp, &request.body, &signature),
        "{signature} does not verify"
    );
    assert_eq!(request.header("content-type"), "application/json");
    assert_eq!(request.header("tenax-attempt"), "1");
    assert_eq!(request.header("x-team"), "billing");
    assert!(request.header("user-agent").starts_with("Tenax-Webhooks/"));
    assert_eq!(
        request.header("host"),
        format!("localhost:{}", secure.address.port())
    );
    assert_eq!(message_of(request_of(&received, by_ip)), message);
    assert_eq!(message_of(&plain.wait_for(1, ARRIVAL).await[0]), message);

    for sub in [by_name, by_ip, by_http] {
        let d = only_delivery(&server, sub).await;
        wait_delivery(&server, d, "completed").await;
        let tries = wait_attempts(&server, d, 1).await;
        assert_eq!(tries[0]["result"], json!("delivered"), "{tries:?}");
        assert_eq!(tries[0]["error"], Value::Null, "{tries:?}");
    }
    let tries = wait_attempts(&server, d, 1).await;
    assert_eq!(tries[0]["status"], json!(200), "{tries:?}");
    assert_eq!(tries[0]["response"], json!("thanks"), "{tries:?}");
    assert_eq!(secure.failed_handshakes(), 0);
    assert_eq!(secure.count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_over_https_follow_the_phased_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Tenax test CA");
    let server = server_trusting(&ca, &dir, &[]).await;
    let certificate = ca.leaf(&["localhost", "127.0.0.1"]);
    let mut cases = Vec::new();
    for function in ["linear", "exponential"] {
        // One retry at once, two at MIN, a backoff of four, one at MAX, as over http.
        let policy = json!({
            "type": "phased", "min_delay": 100, "max_delay": 400, "num_retries": 8,
            "num_no_delay_retries": 1, "num_min_delay_retries": 2, "num_max_delay_retries": 1,
            "function": function, "jitter": "none",
        });
        let expected = schedule_of(&policy);
        assert_eq!(
            expected[..4],
            [0, 100, 100, 100],
            "{function}: {expected:?}"
        );
        assert_eq!(expected[6..], [400, 400], "{function}: {expected:?}");
        let receiver = Receiver::start_tls(Vec::new(), Reply::status(500), &certificate).await;
        let sub = subscribe(&server, "events", &receiver, json!({ "policy": policy })).await;
        cases.push((function, expected, receiver, id(&sub)));
    }
    assert_ne!(cases[0].1, cases[1].1, "the two functions are told apart");

    publish(&server, "events", json!({"n": 1})).await;
    for (function, expected, receiver, sub) in &cases {
        let attempts_made = expected.len() + 1;
        let received = receiver.wait_for(attempts_made, ARRIVAL).await;
        assert_schedule(&format!("{function} over https"), &received, expected);
        let d = only_delivery(&server, *sub).await;
        assert!(received.iter().all(|r| delivery_of(r) == d));
        let dead = wait_delivery(&server, d, "dead").await;
        let exhausted = format!("all {} retries were used", expected.len());
        assert!(text(&dead["dead_reason"]).contains(&exhausted), "{dead}");
        let tries = wait_attempts(&server, d, attempts_made).await;
        assert!(
            tries.iter().all(|a| a["status"] == json!(500)),
            "{function}: {tries:?}"
        );
        assert_eq!(receiver.count(), attempts_made, "{function}");
        assert_eq!(receiver.failed_handshakes(), 0, "{function}");
    }
}

/// Waits until delivery `d` is dead after `attempts` attempts that all failed at the TLS
/// handshake, each retried; returns their errors.
async fn tls_failures(server: &TestServer, d: u64, attempts: usize) -> Vec<String> {
    let dead = wait_delivery(server, d, "dead").await;
    assert_eq!(dead["failures"], json!(attempts), "{dead}");
    let exhausted = format!("all {} retries were used", attempts - 1);
    assert!(
        text(&dead["dead_reason"]).contains(&exhausted),
        "retried until the policy gave up: {dead}"
    );
    let tries = wait_attempts(server, d, attempts).await;
    tries
        .iter()
        .map(|attempt| {
            assert_eq!(attempt["result"], json!("retryable"), "{attempt}");
            assert_eq!(attempt["status"], Value::Null, "{attempt}");
            assert_eq!(attempt["response"], Value::Null, "{attempt}");
            let error = text(&attempt["error"]);
            assert!(
                error.starts_with("could not connect: TLS handshake failed: "),
                "{error}"
            );
            error.to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_the_server_does_not_trust_is_a_retried_connection_failure() {
    // No --delivery-ca-file: the test CA is in none of the platform's roots.
    let server = server(&[]).await;
    let ca = TestCa::new("Tenax test CA");
    let receiver = Receiver::start_tls(
        Vec::new(),
        Reply::ok(),
        &ca.leaf(&["localhost", "127.0.0.1"]),
    )
    .await;
    let sub = id(&subscribe(
        &server,
        "orders",
        &receiver,
        json!({ "policy": fixed(20, 2) }),
    )
    .await);
    publish(&server, "orders", json!({"n": 1})).await;
    let d = wait_deliveries(&server, sub, "dead", 1).await;
    for error in tls_failures(&server, id(&d[0]), 3).await {
        assert!(
            error.contains("the certificate is not signed by a CA this server trusts"),
            "{error}"
        );
        assert!(error.contains("--delivery-ca-file"), "{error}");
    }
    // Each attempt reached the receiver and hung up in the handshake: no request got through.
    receiver.wait_for_failed_handshakes(3, ARRIVAL).await;
    assert_eq!(receiver.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_ca_another_name_and_an_expired_certificate_are_named_in_the_attempt_log() {
    let dir = tempfile::tempdir().unwrap();
    let trusted = TestCa::new("Tenax test CA");
    let server = server_trusting(&trusted, &dir, &[]).await;
    let other = TestCa::new("Another CA");
    let cases = [
        (
            "another CA",
            other.leaf(&["localhost", "127.0.0.1"]),
            "the certificate is not signed by a CA this server trusts",
        ),
        (
            "another name",
            trusted.leaf(&["hooks.example.com"]),
            "the certificate is made out to",
        ),
        (
            "expired",
            trusted.expired_leaf(&["localhost", "127.0.0.1"]),
            "the certificate expired on 2001-01-01T00:00:00.000Z",
        ),
    ];
    let mut subs = Vec::new();
    for (what, certificate, expected) in cases {
        let receiver = Receiver::start_tls(Vec::new(), Reply::ok(), &certificate).await;
        let sub = subscribe(
            &server,
            "orders",
            &receiver,
            json!({ "policy": fixed(20, 2) }),
        )
        .await;
        subs.push((what, expected, receiver, id(&sub)));
    }
    publish(&server, "orders", json!({"n": 1})).await;
    for (what, expected, receiver, sub) in &subs {
        let d = wait_deliveries(&server, *sub, "dead", 1).await;
        for error in tls_failures(&server, id(&d[0]), 3).await {
            assert!(error.contains(expected), "{what}: {error}");
        }
        receiver.wait_for_failed_handshakes(3, ARRIVAL).await;
        assert_eq!(receiver.count(), 0, "{what}");
    }
}

/// A receiver whose certificate is its own CA (as `openssl req -x509` makes one), listed in
/// `--delivery-ca-file`: trusted as it is, by its alternative names or, without any, by its
/// common name; an unlisted one is refused with what to do about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_certificate_listed_in_the_ca_file_is_trusted_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let named = receiver::self_signed(&["localhost", "127.0.0.1"], "test receiver", false);
    let common = receiver::self_signed(&[], "localhost", false);
    let unlisted = receiver::self_signed(&["localhost", "127.0.0.1"], "unlisted", false);
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, format!("{}{}", named.pem(), common.pem())).unwrap();
    let server = server(&["--delivery-ca-file", ca_file.to_str().unwrap()]).await;
    let named_receiver = Receiver::start_tls(Vec::new(), Reply::ok(), &named).await;
    let common_receiver = Receiver::start_tls(Vec::new(), Reply::ok(), &common).await;
    let unlisted_receiver = Receiver::start_tls(Vec::new(), Reply::ok(), &unlisted).await;
    let by_ip = id(&subscribe(&server, "orders", &named_receiver, json!({})).await);
    let by_name = id(&subscribe_to(
        &server,
        "orders",
        &common_receiver.localhost_url("/hook"),
        json!({}),
    )
    .await);
    let refused = id(&subscribe(
        &server,
        "orders",
        &unlisted_receiver,
        json!({ "policy": fixed(20, 2) }),
    )
    .await);
    publish(&server, "orders", json!({"n": 1})).await;
    named_receiver.wait_for(1, ARRIVAL).await;
    common_receiver.wait_for(1, ARRIVAL).await;
    for sub in [by_ip, by_name] {
        wait_delivery(&server, only_delivery(&server, sub).await, "completed").await;
    }
    let d = wait_deliveries(&server, refused, "dead", 1).await;
    for error in tls_failures(&server, id(&d[0]), 3).await {
        assert!(
            error.contains("is a CA's, not a server's: list this very certificate"),
            "{error}"
        );
    }
    assert_eq!(unlisted_receiver.count(), 0);
}
