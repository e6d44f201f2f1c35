//! Webhook delivery over real HTTP and HTTPS: the real server delivering to a scripted receiver
//! on a loopback port (`common/receiver.rs`), with millisecond policies.
//!
//! Every test but one runs the server on a manual clock at [`T0`] that only the test moves, so
//! every retry schedule is checked exactly, by the engine's own clock ([`follow`]): an attempt
//! is made at the very millisecond it is due, and its failure schedules the next at exactly
//! the failure's time plus the policy's delay. "Nothing is sent" is shown by the delivery
//! runners' own signals ([`TestServer::settle`]), never by letting real time pass. The one test
//! on the system clock is [`real_time_smoke_test_retries_reach_the_receiver_on_the_system_clock`].
//! Two measure real time because what they test is in real time, and say what they bound: the
//! throttle (rates are per real second) and an idle runner's hold on an endpoint (its
//! real-time wait for ready deliveries).
//!
//! Every test has its own server and its own receivers, so the tests run in parallel.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{Options, PATIENCE, T0, TestServer, ms};
use futures_util::future::join_all;
use receiver::{Received, Receiver, Reply, TestCa};
use reqwest::Method;
use serde_json::{Value, json};
use tenax::delivery::admission::Wait;
use tenax::delivery::signals::{Event, Signal};
use tenax::delivery::signing;
use tenax_core::model::SubscriptionId;
use tokio::sync::broadcast;

use crate::common;
use crate::common::receiver;

/// The Standard Webhooks reference secret.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

// --- helpers ---------------------------------------------------------------------------------

/// A server on a manual clock at [`T0`] that may deliver to loopback receivers, plus `extra`
/// flags.
async fn server(extra: &[&str]) -> TestServer {
    let mut flags = vec!["--allow-private-endpoints"];
    flags.extend_from_slice(extra);
    TestServer::start(Options::manual().flags(&flags)).await
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

/// The view of `delivery` once it shows its `n`th attempt and that attempt's outcome: a
/// failure counted (`n` failures) or the delivery completed. A view is read in parts (the
/// status, then the attempt log), so one may show an attempt whose outcome it read a moment
/// before. The attempt after it may be on its way already when it was due at once.
async fn attempt_made(server: &TestServer, delivery: u64, n: usize) -> Value {
    server
        .poll(
            &format!("/api/deliveries/{delivery}"),
            &format!("attempt {n} and its outcome"),
            |d| {
                let logged = d["attempts"].as_array().is_some_and(|a| a.len() >= n);
                let failed = d["failures"]
                    .as_u64()
                    .is_some_and(|f| f >= u64::try_from(n).unwrap());
                logged && (failed || d["status"] == json!("completed"))
            },
        )
        .await
}

/// Waits until delivery `delivery` has `status`; returns it.
async fn wait_delivery(server: &TestServer, delivery: u64, status: &str) -> Value {
    server
        .poll(
            &format!("/api/deliveries/{delivery}"),
            &format!("status {status}"),
            |d| d["status"] == json!(status),
        )
        .await
}

/// Waits until subscription `sub` has at least `n` deliveries with `status`; returns them.
async fn wait_deliveries(server: &TestServer, sub: u64, status: &str, n: usize) -> Vec<Value> {
    let answer = server
        .poll(
            &format!("/api/subscriptions/{sub}/deliveries?status={status}"),
            &format!("{n} deliveries {status}"),
            |a| a["deliveries"].as_array().is_some_and(|d| d.len() >= n),
        )
        .await;
    let found = answer["deliveries"].as_array().unwrap().clone();
    assert!(
        found.iter().all(|d| d["status"] == json!(status)),
        "status={status} listed others: {found:?}"
    );
    found
}

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

/// The engine's time at which a request of subscription `sub` got its answer, as its runner
/// signals it ([`Event::Answered`]) among the signals `listener` hears: before the bookkeeping
/// the answer sets off is stored.
async fn answered(listener: &mut broadcast::Receiver<Signal>, sub: u64) -> u64 {
    let heard = async {
        loop {
            match listener.recv().await {
                Ok(Signal {
                    subscription,
                    event: Event::Answered { at_ms },
                }) if subscription == SubscriptionId(sub) => return at_ms,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("the server stopped"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, heard)
        .await
        .unwrap_or_else(|_| panic!("no request of subscription {sub} was answered"))
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

/// The delivery a request was for, from its envelope.
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

/// The time a request was sent at by the engine's clock, from its envelope.
fn sent_at(received: &Received) -> u64 {
    ms(&received.json()["sent_at"])
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).expect("a short duration")
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

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("expected a string, got {value}"))
}

/// A fixed-delay native policy.
fn fixed(delay_ms: u64, retry_limit: u32) -> Value {
    json!({ "type": "fixed", "delay": delay_ms, "retry_limit": retry_limit })
}

// --- following a retry schedule on the manual clock ------------------------------------------

/// The one delivery of subscription `sub`, followed through its attempts by [`follow`]: the
/// attempts are `gaps` apart by the engine's clock (the delay its policy, or a `Retry-After`,
/// gives each failure), and each request of `sub` that reaches `receiver` is one of them
/// (`None`: no request gets through, as with a refused connection or a failed handshake).
struct Followed<'a> {
    what: String,
    sub: u64,
    receiver: Option<&'a Receiver>,
    gaps: Vec<u64>,
    /// Attempts made before the first one followed.
    before: usize,
    /// When the first one followed is due; `None`: at once.
    first_at: Option<u64>,
    /// The last attempt followed disables the subscription.
    disables: bool,
}

impl<'a> Followed<'a> {
    fn new(what: &str, sub: u64, receiver: Option<&'a Receiver>, gaps: &[u64]) -> Self {
        Self {
            what: what.to_owned(),
            sub,
            receiver,
            gaps: gaps.to_vec(),
            before: 0,
            first_at: None,
            disables: false,
        }
    }

    /// The last attempt followed disables the subscription automatically: the disable is
    /// stored before the attempt's outcome, so a read of the subscription after a view that
    /// shows the outcome finds it disabled.
    fn disabling(mut self) -> Self {
        self.disables = true;
        self
    }

    /// The first attempt followed is the one after `before` made already, due at `at_ms`.
    fn resumed(mut self, before: usize, at_ms: u64) -> Self {
        self.before = before;
        self.first_at = Some(at_ms);
        self
    }

    /// The requests of this delivery's subscription that reached its receiver, if it has one.
    fn requests(&self) -> Option<usize> {
        let sub = self.sub.to_string();
        self.receiver.map(|receiver| {
            receiver
                .received()
                .iter()
                .filter(|r| r.header("tenax-subscription") == sub)
                .count()
        })
    }
}

/// Follows the deliveries of `cases` (one each, all made by now) through their attempts on the
/// manual clock, all at once; returns each delivery's view after its last attempt followed.
///
/// Each attempt is made at the very time it is due: the attempt log has it at that time, and
/// when it fails, the delivery is scheduled at exactly that time plus its gap (the clock stands
/// still meanwhile, so the failure's time is the attempt's). Before the clock reaches the next
/// due time it stops one millisecond short ([`TestServer::advance_to`]: what is due by then is
/// promoted), and nothing is sent: every runner settles ([`TestServer::settle`]), no delivery
/// has an attempt or a status more than it had, and no receiver a request more. Then the clock
/// moves by the last millisecond. A gap of 0 is an attempt due at once, made without the clock
/// moving (and a gap of 1 ms has no millisecond before it to stop at).
async fn follow(server: &TestServer, cases: &[Followed<'_>]) -> Vec<Value> {
    let ids = join_all(cases.iter().map(|case| server.only_delivery(case.sub))).await;
    let start = server.now_ms();
    let mut made: Vec<usize> = cases.iter().map(|c| c.before).collect();
    let mut due: Vec<Option<u64>> = cases
        .iter()
        .map(|c| Some(c.first_at.unwrap_or(start)))
        .collect();
    // Replaced by each delivery's view after its attempts; a delivery resumed later keeps this.
    let mut last = join_all(ids.iter().map(|&id| delivery(server, id))).await;
    loop {
        let now = server.now_ms();
        let steps = (0..cases.len()).filter(|&i| due[i] == Some(now)).map(|i| {
            let step = attempts_due(server, &cases[i], ids[i], made[i], now);
            async move { (i, step.await) }
        });
        for (i, (n, next, view)) in join_all(steps).await {
            made[i] = n;
            due[i] = next;
            last[i] = view;
        }
        let Some(next) = due.iter().flatten().min().copied() else {
            return last;
        };
        if next - now > 1 {
            server.advance_to(next - 1).await;
            nothing_sent(server, cases, &ids, &made, &last, next - 1).await;
        }
        server.advance(Duration::from_millis(1));
    }
}

/// Follows `case`'s delivery `id`, which has `made` attempts, through those due at `now` (the
/// clock standing still): each is made at `now`, and a failure is scheduled exactly its gap
/// later. Returns the attempts made, when the next is due (`None`: the last was followed) and
/// the delivery's view after the last.
async fn attempts_due(
    server: &TestServer,
    case: &Followed<'_>,
    id: u64,
    mut made: usize,
    now: u64,
) -> (usize, Option<u64>, Value) {
    loop {
        let n = made + 1;
        let view = attempt_made(server, id, n).await;
        let what = format!("{}, attempt {n}", case.what);
        assert_eq!(ms(&view["attempts"][n - 1]["at"]), now, "{what}: {view}");
        made = n;
        let due = case.gaps.get(n - 1 - case.before).map(|gap| now + gap);
        if due == Some(now) {
            // A gap of 0: the next is due at once.
            continue;
        }
        if let Some(at) = due {
            // Nothing can take it before the clock moves: the view shows it as stored.
            assert_eq!(view["status"], json!("scheduled"), "{what}: {view}");
            assert_eq!(ms(&view["run_at"]), at, "{what}: due {at}: {view}");
            assert_eq!(view["attempts"].as_array().unwrap().len(), n, "{view}");
        } else if case.disables {
            let subscription = subscription(server, case.sub).await;
            assert_eq!(
                subscription["enabled"],
                json!(false),
                "{what}: the disable is not stored before the attempt's outcome: {subscription}"
            );
        }
        return (made, due, view);
    }
}

/// Asserts that nothing of `cases` was sent at the engine's time `at_ms`: their runners settle,
/// and each delivery `ids[i]` still has `made[i]` attempts and the status of `last[i]`, and
/// each receiver no request more.
async fn nothing_sent(
    server: &TestServer,
    cases: &[Followed<'_>],
    ids: &[u64],
    made: &[usize],
    last: &[Value],
    at_ms: u64,
) {
    let subs: Vec<u64> = cases.iter().map(|c| c.sub).collect();
    let when = format!("at T0 + {} ms", at_ms - T0);
    server.settle(&subs, &when).await;
    let views = join_all(ids.iter().map(|&id| delivery(server, id))).await;
    for (i, (case, view)) in cases.iter().zip(views).enumerate() {
        let what = format!("{}, {when}", case.what);
        assert_eq!(
            view["attempts"].as_array().unwrap().len(),
            made[i],
            "{what}: an attempt too early: {view}"
        );
        assert_eq!(view["status"], last[i]["status"], "{what}: {view}");
        assert_eq!(view["failures"], last[i]["failures"], "{what}: {view}");
        if let Some(requests) = case.requests() {
            assert_eq!(
                requests,
                made[i] - case.before,
                "{what}: a request too early"
            );
        }
    }
}

// --- the envelope and signature ----------------------------------------------------------------

/// Every attempt of a delivery carries the envelope, the headers asked for and a signature
/// that verifies, with the same webhook id; each is stamped with the engine's time it left at:
/// the first at once, the retry exactly its 20 ms later.
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
    let message = publish(&server, "orders", json!({"total": 12, "items": ["a", "b"]})).await;
    let followed = [Followed::new("the envelope", sub, Some(&receiver), &[20])];
    let done = follow(&server, &followed).await.remove(0);
    let received = receiver.received();
    assert_eq!(received.len(), 2);
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
        let at = sent_at(request);
        assert_eq!(at, T0 + 20 * (attempt - 1), "attempt {attempt}");
        // The same id on every attempt: receivers deduplicate by it.
        let webhook_id = request.header("webhook-id");
        assert_eq!(webhook_id, format!("dlv_{d}"), "attempt {attempt}");
        let timestamp: u64 = request
            .header("webhook-timestamp")
            .parse()
            .expect("webhook-timestamp is whole seconds");
        assert_eq!(timestamp, at / 1000, "attempt {attempt}");
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
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(done["message_id"], json!(message), "{done}");
    assert_eq!(done["subscription"], json!(sub), "{done}");
    assert_eq!(done["queue"], json!("orders"), "{done}");
}

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
    let received = receiver.wait_for(1, PATIENCE).await;
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
    let received = receiver.wait_for(2, PATIENCE).await;
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

// --- retry schedules -------------------------------------------------------------------------

/// Each phased backoff function's schedule, through its four phases (retries at once, at the
/// minimum, the backoff, at the maximum), exactly as the policy's own preview computes it: four
/// subscriptions of one queue, one delivery each from one message, followed together.
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
    let followed: Vec<Followed> = cases
        .iter()
        .map(|(function, expected, receiver, sub)| {
            Followed::new(function, *sub, Some(receiver), expected)
        })
        .collect();
    let ends = follow(&server, &followed).await;
    for ((function, expected, receiver, _), dead) in cases.iter().zip(ends) {
        let attempts_made = expected.len() + 1;
        let received = receiver.received();
        let d = delivery_of(&received[0]);
        assert!(received.iter().all(|r| delivery_of(r) == d));
        assert_eq!(dead["status"], json!("dead"), "{function}: {dead}");
        let exhausted = format!("all {} retries were used", expected.len());
        assert!(
            text(&dead["dead_reason"]).contains(&exhausted),
            "{function}: {dead}"
        );
        assert_eq!(dead["failures"], json!(attempts_made), "{dead}");
    }
    // No attempt after the last retry.
    let subs: Vec<u64> = cases.iter().map(|c| c.3).collect();
    server.settle(&subs, "after the last retries").await;
    for (function, expected, receiver, _) in &cases {
        assert_eq!(receiver.count(), expected.len() + 1, "{function}");
    }
}

/// A verbatim SNS delivery policy (fractional seconds) gives its schedule exactly, its
/// throttle and its content type: 1 immediate retry, 1 at the minimum, 1 at the maximum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sns_delivery_policy_is_obeyed_with_its_throttle_and_content_type() {
    let server = server(&[]).await;
    // SNS's minimum is 1 s; no backoff phase is left between the minimum and the maximum.
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
    // Four attempts in 2.5 s of the engine's time: the throttle (7 a second of real time,
    // whose burst is 7) holds none of them back.
    let followed = [Followed::new("SNS", id(&sub), Some(&receiver), &expected)];
    let dead = follow(&server, &followed).await.remove(0);
    assert!(
        receiver
            .received()
            .iter()
            .all(|r| r.header("content-type") == "text/plain")
    );
    assert_eq!(dead["status"], json!("dead"), "{dead}");
    assert!(
        text(&dead["dead_reason"]).contains("all 3 retries were used"),
        "{dead}"
    );
    assert_eq!(receiver.count(), 4);
}

/// A Zaqar retry policy, wrapped in `_retry_policy` and bare (fractional seconds), gives its
/// schedule exactly: the wrapped one's delivery succeeds at its last retry, the bare one's dies
/// when its retries are used.
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
    let followed = [
        Followed::new("wrapped", id(&a), Some(&succeeds), &schedule_of(&wrapped)),
        Followed::new("bare", id(&b), Some(&fails), &schedule_of(&bare)),
    ];
    let [done, dead] = <[Value; 2]>::try_from(follow(&server, &followed).await).unwrap();
    assert_eq!(done["status"], json!("completed"), "{done}");
    assert_eq!(done["failures"], json!(3), "{done}");
    assert_eq!(dead["status"], json!("dead"), "{dead}");
    assert!(
        text(&dead["dead_reason"]).contains("all 3 retries were used"),
        "{dead}"
    );
    assert_eq!(succeeds.count(), 4);
    assert_eq!(fails.count(), 4);
}

// --- outcomes --------------------------------------------------------------------------------

/// A client error is not retried (the delivery dies of it, its status named), a transient
/// status is (exactly its 20 ms later), and `retryable_statuses` replaces the default list.
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
    // The permanent failures have no retry: they are followed (and shown to send nothing more)
    // while the transient ones wait for theirs.
    let followed: Vec<Followed> = subs
        .iter()
        .map(|(status, retried, receiver, sub)| {
            let gaps: &[u64] = if *retried { &[20] } else { &[] };
            Followed::new(&format!("HTTP {status}"), *sub, Some(receiver), gaps)
        })
        .collect();
    let ends = follow(&server, &followed).await;

    for ((status, retried, receiver, _), view) in subs.iter().zip(ends) {
        let what = format!("HTTP {status}");
        let tries = view["attempts"].as_array().unwrap();
        assert_eq!(tries[0]["status"], json!(status), "{what}");
        if *retried {
            assert_eq!(view["status"], json!("completed"), "{what}: {view}");
            assert_eq!(view["failures"], json!(1), "{what}: {view}");
            assert_eq!(tries.len(), 2, "{what}: {tries:?}");
            assert_eq!(tries[0]["result"], json!("retryable"), "{what}");
            assert_eq!(tries[1]["status"], json!(200), "{what}");
            assert_eq!(tries[1]["result"], json!("delivered"), "{what}");
        } else {
            assert_eq!(view["status"], json!("dead"), "{what}: {view}");
            assert_eq!(view["failures"], json!(1), "{what}: {view}");
            let reason = text(&view["dead_reason"]);
            assert!(
                reason.contains(&status.to_string()),
                "{what}: the reason should name the status: {reason}"
            );
            assert_eq!(tries.len(), 1, "{what}: {tries:?}");
            assert_eq!(tries[0]["result"], json!("permanent"), "{what}");
        }
        assert_eq!(receiver.count(), tries.len(), "{what}");
    }
}

/// A `Retry-After` of 1 s on a 429 or a 503 puts the retry exactly 1 s after the answer, past
/// the policy's 50 ms (which decides without one), and the attempt log keeps it.
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
    let cases = [
        ("429 + Retry-After: 1", &too_many, subs[0], Some(1_000)),
        ("503 + Retry-After: 1", &unavailable, subs[1], Some(1_000)),
        ("429", &plain, subs[2], None),
    ];
    let followed: Vec<Followed> = cases
        .iter()
        .map(|(name, receiver, sub, wait)| {
            Followed::new(name, *sub, Some(receiver), &[wait.unwrap_or(50)])
        })
        .collect();
    let ends = follow(&server, &followed).await;
    for ((name, _, _, wait), view) in cases.iter().zip(ends) {
        assert_eq!(view["status"], json!("completed"), "{name}: {view}");
        let tries = &view["attempts"];
        assert_eq!(tries[0]["retry_after_ms"], json!(wait), "{name}: {tries}");
    }
}

/// A retry's delay counts from the endpoint's answer, not from the end of the bookkeeping the
/// answer sets off: here a pause asked for (stored for every server), the subscription's first
/// failure mark, and the attempt's own commit.
///
/// The clock moves by `BOOKKEEPING_MS` as soon as the runner signals the answer
/// ([`Event::Answered`]), while that bookkeeping is under way; the retry (and the pause) must be
/// due exactly the delay after the answer, where a delay counted after the bookkeeping would be
/// due that much later. On a fast disk the bookkeeping may be over before the clock moves, and
/// then only the exact due time is shown; tests/slow-disk/run.sh makes every sync 60 ms slow, so
/// the move lands inside the bookkeeping there. Then the retry is sent at exactly that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_counts_from_the_answer_not_from_the_bookkeeping_after_it() {
    const DELAY_MS: u64 = 2_000;
    const BOOKKEEPING_MS: u64 = 500;
    let server = server(&[]).await;
    let asked = Receiver::start(vec![Reply::status(503).retry_after("2")], Reply::ok()).await;
    let failed = Receiver::failing(1, 500).await;
    let asked_sub =
        id(&subscribe(&server, "asked", &asked, json!({ "policy": fixed(50, 3) })).await);
    let policy = fixed(DELAY_MS, 3);
    let failed_sub = id(&subscribe(&server, "failed", &failed, json!({ "policy": policy })).await);
    // One after the other: the clock moves for one answer at a time.
    for (name, queue, receiver, sub) in [
        ("503 + Retry-After: 2", "asked", &asked, asked_sub),
        ("500, policy 2 s", "failed", &failed, failed_sub),
    ] {
        let mut signals = server.listen();
        publish(&server, queue, json!({"n": 1})).await;
        let answer = answered(&mut signals, sub).await;
        server.advance(Duration::from_millis(BOOKKEEPING_MS));
        let d = server.only_delivery(sub).await;
        let view = attempt_made(&server, d, 1).await;
        assert_eq!(ms(&view["attempts"][0]["at"]), answer, "{name}: {view}");
        assert_eq!(view["status"], json!("scheduled"), "{name}: {view}");
        let due = ms(&view["run_at"]);
        assert_eq!(
            due,
            answer + DELAY_MS,
            "{name}: the retry is due {} ms after the answer, expected {DELAY_MS}",
            due.saturating_sub(answer)
        );
        if sub == asked_sub {
            let endpoint = &subscription(&server, sub).await["health"]["endpoint"];
            assert_eq!(ms(&endpoint["paused_until"]), due, "{name}: {endpoint}");
        }

        server.advance_to(due - 1).await;
        server.settle(&[sub], name).await;
        assert_eq!(receiver.count(), 1, "{name}: the retry came early");
        server.advance(Duration::from_millis(1));
        let received = receiver.wait_for(2, PATIENCE).await;
        assert_eq!(sent_at(&received[1]), due, "{name}");
        wait_delivery(&server, d, "completed").await;
    }
}

/// A delivery's attempts show every attempt its status tells of, in the same answer: one
/// seen completed shows its delivered attempt, and it never counts more failures than it
/// shows failed attempts, even while the attempt's commit is being written (the embedded
/// store shows a change in memory as it is submitted, and reads the attempt log from its
/// file). The delivery is watched through all three attempts, the clock moved on to each
/// retry once the failure before it shows. On a fast disk that window is a fraction of a
/// millisecond; tests/slow-disk/run.sh makes every sync 60 ms slow.
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
    let d = server.only_delivery(sub).await;
    let consistent = |view: &Value| {
        let attempts = view["attempts"].as_array().expect("attempts");
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
        }
    };
    let url = format!("/api/deliveries/{d}");
    for failures in 1..=2 {
        server
            .poll(&url, &format!("failure {failures}"), |view| {
                consistent(view);
                view["status"] == json!("scheduled") && view["failures"] == json!(failures)
            })
            .await;
        server.advance(Duration::from_millis(100));
    }
    server
        .poll(&url, "completed", |view| {
            consistent(view);
            view["status"] == json!("completed")
        })
        .await;
}

/// An answer slower than `--delivery-timeout` and a refused connection are failed attempts,
/// retried on their policies' schedules exactly: the timed-out attempt ends when the timeout
/// (real time, 300 ms) runs out, the clock standing still, so its retry is due its 50 ms after
/// the attempt's time.
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
    let followed = [
        Followed::new("timed out", slow_sub, Some(&slow), &[50]),
        Followed::new("refused", id(&refused), None, &[20, 20]),
    ];
    let [done, dead] = <[Value; 2]>::try_from(follow(&server, &followed).await).unwrap();

    // The slow answer is abandoned at the timeout; the retry succeeds.
    assert_eq!(done["status"], json!("completed"), "{done}");
    let tries = done["attempts"].as_array().unwrap();
    assert_eq!(tries.len(), 2, "{tries:?}");
    assert_eq!(tries[0]["status"], Value::Null, "{tries:?}");
    assert_eq!(tries[0]["result"], json!("retryable"), "{tries:?}");
    let error = text(&tries[0]["error"]);
    assert!(error.contains("timed out"), "{error}");
    // Cut at the timeout, before the answer's 2 s.
    let latency = tries[0]["latency_ms"].as_u64().unwrap();
    assert!((300..2_000).contains(&latency), "latency {latency} ms");
    assert_eq!(tries[1]["result"], json!("delivered"), "{tries:?}");
    assert_eq!(slow.count(), 2);

    // Nobody listens: every attempt is an error, retried until the policy gives up.
    assert_eq!(dead["status"], json!("dead"), "{dead}");
    assert!(
        text(&dead["dead_reason"]).contains("all 2 retries were used"),
        "{dead}"
    );
    let tries = dead["attempts"].as_array().unwrap();
    assert_eq!(tries.len(), 3, "{tries:?}");
    for attempt in tries {
        assert_eq!(attempt["status"], Value::Null, "{attempt}");
        assert_eq!(attempt["result"], json!("retryable"), "{attempt}");
        let error = text(&attempt["error"]);
        assert!(error.contains("connect"), "{error}");
    }
}

// --- durability ------------------------------------------------------------------------------

/// A retry scheduled before a restart is sent after it at exactly the time it was due: not at
/// once (the runners' first looks after the restart send nothing a millisecond before), and
/// not lost. The manual clock is the server's across the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_retry_schedule_resumes_it() {
    let mut server = server(&[]).await;
    let receiver = Receiver::failing(1, 500).await;
    let sub = id(&subscribe(
        &server,
        "orders",
        &receiver,
        json!({ "policy": fixed(1_500, 3) }),
    )
    .await);
    publish(&server, "orders", json!({"n": 1})).await;
    let d = server.only_delivery(sub).await;
    // The failure is on disk once the attempt is logged (one commit); stop right then.
    let scheduled = attempt_made(&server, d, 1).await;
    assert_eq!(scheduled["status"], json!("scheduled"), "{scheduled}");
    assert_eq!(scheduled["failures"], json!(1), "{scheduled}");
    let due = ms(&scheduled["run_at"]);
    assert_eq!(due, T0 + 1_500, "{scheduled}");
    server.restart().await;

    // The retry comes when it was due: not at once, not lost.
    server.advance_to(due - 1).await;
    server.settle(&[sub], "after the restart").await;
    assert_eq!(receiver.count(), 1, "the retry came early");
    server.advance(Duration::from_millis(1));
    let received = receiver.wait_for(2, PATIENCE).await;
    assert_eq!(delivery_of(&received[1]), d);
    assert_eq!(received[1].json()["attempt"], json!(2));
    assert_eq!(received[1].header("webhook-id"), format!("dlv_{d}"));
    assert_eq!(sent_at(&received[1]), due);
    wait_delivery(&server, d, "completed").await;
    let tries = server.wait_attempts(d, 2).await;
    assert_eq!(
        tries.len(),
        2,
        "the first attempt survives the restart: {tries:?}"
    );
    assert_eq!(tries[0]["status"], json!(500));
    assert_eq!(receiver.count(), 2);
}

// --- throttling, fan-out, the address guard ----------------------------------------------------

/// A throttle of 20 a second holds 100 deliveries back, and they wait: none is dropped, none
/// sent twice, and the runner waits for the throttle's tokens, each wait at most one token's
/// interval (50 ms).
///
/// The throttle counts real time by design (rates are per real second, whatever the engine's
/// clock says), so the rate is bounded in real time, from below only: its bucket holds one
/// second's worth and refills at the rate, so over any span of `t` ms it grants at most
/// `20 + 20 t / 1000` tokens, and 100 deliveries take at least 4 s from before they were
/// enqueued to the last one's arrival (less the 1 ms the runner's whole-millisecond time may
/// gain). No upper bound on the time: a loaded machine only makes it slower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_throttle_holds_and_throttled_deliveries_wait() {
    const RATE: u64 = 20;
    const MESSAGES: usize = 100;
    let server = server(&[]).await;
    let receiver = Receiver::ok().await;
    let sub = id(&subscribe(
        &server,
        "bulk",
        &receiver,
        json!({ "throttle_per_second": RATE }),
    )
    .await);
    let jobs = (0..MESSAGES)
        .map(|i| json!({"queue": "bulk", "type": "t", "payload": {"i": i}}))
        .collect();
    let mut signals = server.listen();
    let before = Instant::now();
    let messages = server.enqueue_batch(jobs).await;
    let received = receiver.wait_for(MESSAGES, Duration::from_secs(30)).await;

    // Nothing dropped, nothing twice.
    let delivered: BTreeSet<u64> = received.iter().map(message_of).collect();
    assert_eq!(delivered, messages.iter().copied().collect());
    assert_eq!(received.len(), MESSAGES);

    // Held back by the throttle: the runner waited for its tokens, one interval at the most.
    let mut token_waits = Vec::new();
    while let Ok(signal) = signals.try_recv() {
        if let Signal {
            subscription,
            event: Event::Waits(Wait::Token { for_ms }),
        } = signal
        {
            assert_eq!(subscription, SubscriptionId(sub));
            token_waits.push(for_ms);
        }
    }
    assert!(
        !token_waits.is_empty(),
        "the runner never waited for a token"
    );
    assert!(
        token_waits.iter().all(|ms| (1..=1_000 / RATE).contains(ms)),
        "{token_waits:?}"
    );
    let spent = millis(received[MESSAGES - 1].at.duration_since(before));
    let least = (u64::try_from(MESSAGES).unwrap() - RATE) * 1_000 / RATE - 1;
    assert!(
        spent >= least,
        "{MESSAGES} deliveries took only {spent} ms at {RATE} a second"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_endpoint_is_refused_by_default() {
    let server = TestServer::manual().await;
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
        let received = receiver.wait_for(messages.len(), PATIENCE).await;
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
    server.advance(Duration::from_millis(2));
    let since = server.now_ms();
    assert!(since > finished + 1, "{dead:?}");
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
    receiver.wait_for(4, PATIENCE).await;
    let view = wait_delivery(&server, d1, "completed").await;
    assert_eq!(view["policy"]["type"], json!("fixed"), "{view}");
    assert_eq!(view["policy"]["delay"], json!(10), "{view}");
    let tries = server.wait_attempts(d1, 2).await;
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
    receiver.wait_for(5, PATIENCE).await;
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
    receiver.wait_for(6, PATIENCE).await;
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
    let received = receiver.wait_for(3, PATIENCE).await;
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
    let received = receiver.wait_for(4, PATIENCE).await;
    assert_eq!(message_of(&received[3]), late);
}

/// An endpoint that fails every attempt for `auto_disable_after` (300 ms) makes its
/// subscription unhealthy and then disabled, at exactly the attempt that has failed for that
/// long: with a retry every 20 ms, the sixteenth, at T0 + 300 ms. Disabled, it sends nothing
/// more and its delivery is held, not dead. Re-enabled on a mended endpoint that fails once
/// more, a fresh failure period begins: the delivery is retried and delivered rather than
/// disabled again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_endpoint_is_unhealthy_and_disabled_automatically() {
    const AFTER_MS: u64 = 300;
    const RETRY_MS: u64 = 20;
    // No circuit breaker: its cool-down would stop the attempts that disabling counts on.
    let server = server(&["--delivery-breaker-failures", "0"]).await;
    let failing = Receiver::start(Vec::new(), Reply::status(500).body("down")).await;
    let sub = id(&subscribe(
        &server,
        "orders",
        &failing,
        json!({ "auto_disable_after": AFTER_MS, "policy": fixed(RETRY_MS, 1_000) }),
    )
    .await);
    publish(&server, "orders", json!({"n": 1})).await;
    // Attempts at T0, T0 + 20 ms, ..., T0 + 300 ms: the last has failed for 300 ms.
    let attempts = usize::try_from(AFTER_MS / RETRY_MS).unwrap() + 1;
    let gaps = vec![RETRY_MS; attempts - 1];
    let followed = [Followed::new("failing", sub, Some(&failing), &gaps).disabling()];
    let held = follow(&server, &followed).await.remove(0);
    let disabled_at = T0 + AFTER_MS;

    // The disable is stored before the attempt's outcome is: it shows with the attempt.
    let url = format!("/api/subscriptions/{sub}");
    let view = subscription(&server, sub).await;
    assert_eq!(view["enabled"], json!(false), "{view}");
    let reason = text(&view["disabled_reason"]);
    assert!(reason.contains("disabled automatically"), "{reason}");
    let health = &view["health"];
    assert_eq!(health["healthy"], json!(false), "{view}");
    assert_eq!(health["consecutive_failures"], json!(attempts), "{view}");
    assert_eq!(health["recent_attempts"], json!(attempts), "{view}");
    assert_eq!(health["recent_failure_rate"], json!(1.0), "{view}");
    assert_eq!(health["last_success_at"], Value::Null, "{view}");
    assert_eq!(ms(&health["failing_since"]), T0, "{view}");
    assert_eq!(ms(&health["last_failure_at"]), disabled_at, "{view}");
    // Its retry is scheduled as ever, and held: the delivery is not dead.
    assert_eq!(held["status"], json!("scheduled"), "{held}");
    assert_eq!(ms(&held["run_at"]), disabled_at + RETRY_MS, "{held}");

    // Disabled, it sends nothing more, even once the retry is due.
    server.advance_to(disabled_at + RETRY_MS).await;
    settles_disabled(&server, sub).await;
    assert_eq!(failing.count(), attempts, "delivery went on while disabled");
    let view = delivery(&server, id(&held)).await;
    assert_ne!(view["status"], json!("dead"), "{view}");
    assert_eq!(view["failures"], json!(attempts), "{view}");

    // Re-enabled on a mended endpoint that fails once more: retried 20 ms later, delivered.
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
    let again = disabled_at + RETRY_MS;
    let followed =
        [Followed::new("mended", sub, Some(&mended), &[RETRY_MS]).resumed(attempts, again)];
    let done = follow(&server, &followed).await.remove(0);
    assert_eq!(done["status"], json!("completed"), "{done}");
    // The health marks are stored before the attempt's outcome: they show with it.
    let view = subscription(&server, sub).await;
    assert_eq!(view["enabled"], json!(true), "{view}");
    assert_eq!(view["health"]["healthy"], json!(true), "{view}");
    assert_eq!(view["health"]["consecutive_failures"], json!(0), "{view}");
    assert_eq!(
        ms(&view["health"]["last_success_at"]),
        again + RETRY_MS,
        "{view}"
    );
    assert_eq!(view["health"]["failing_since"], Value::Null, "{view}");
}

/// Changes made through the API while the runner stores a subscription's health keep both:
/// the runner's failure marks and its automatic disabling survive a PATCH in flight. A PATCH
/// once wrote back the whole subscription it had read after checking the endpoint's
/// addresses, undoing a disable stored meanwhile (so the endpoint got another attempt) or a
/// failure mark (so the failure period began again).
///
/// The count is exact: attempts are 200 ms apart and the subscription is disabled after
/// failing for 300 ms, so the third attempt (at T0 + 400 ms) disables it. Its retry is due at
/// once (the policy's third delay is 0), so the disable must be stored before the retry is:
/// stored after it, the retry goes while the disable's commit is under way (which
/// tests/slow-disk/run.sh makes 60 ms long). A lost failure mark leaves the subscription
/// enabled after its third attempt, a lost disable once the PATCHes have stopped; either sends
/// a fourth attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_marks_and_disabling_survive_concurrent_changes() {
    const SUBSCRIPTIONS: u64 = 24;
    // No circuit breaker: it would hold the attempts counted here.
    let server = server(&["--delivery-breaker-failures", "0"]).await;
    let failing = Receiver::start(Vec::new(), Reply::status(500)).await;
    let mut subs = Vec::new();
    for n in 0..SUBSCRIPTIONS {
        let queue = format!("race{n}");
        let policy = json!({ "type": "list", "delays": [200, 200, 0, 200] });
        let fields = json!({ "auto_disable_after": 300, "policy": policy });
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
    let followed: Vec<Followed> = subs
        .iter()
        .map(|&sub| {
            Followed::new(
                &format!("subscription {sub}"),
                sub,
                Some(&failing),
                &[200, 200],
            )
            .disabling()
        })
        .collect();
    follow(&server, &followed).await;
    // Every PATCH that read a subscription before its disable was stored ends here.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for patcher in patchers {
        patcher.await.expect("the PATCH loop");
    }
    for &sub in &subs {
        let view = subscription(&server, sub).await;
        assert_eq!(
            view["enabled"],
            json!(false),
            "a health change was lost: {view}"
        );
    }
    // The fourth attempts are due: each runner settles disabled, and sent nothing more.
    join_all(subs.iter().map(|&sub| settles_disabled(&server, sub))).await;
    for &sub in &subs {
        let attempts = failing
            .received()
            .iter()
            .filter(|r| r.json()["subscription_id"] == json!(sub))
            .count();
        assert_eq!(
            attempts, 3,
            "subscription {sub}: a health change was lost, or stored after the retry"
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
    let received = receiver.wait_for(2, PATIENCE).await;
    let traces: Vec<Option<&str>> = received
        .iter()
        .map(|r| r.headers.get("traceparent").and_then(|v| v.to_str().ok()))
        .collect();
    assert!(traces.contains(&Some(TRACE)), "{traces:?}");
    assert!(traces.contains(&None), "{traces:?}");
}

// --- the attempt log -------------------------------------------------------------------------

/// Each attempt is logged with its status, its result, the endpoint's answer (cut when long)
/// and the engine's time it was made at (each exactly when due), per delivery and per
/// subscription.
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
    publish(&server, "orders", json!({"n": 1})).await;
    let followed = [Followed::new(
        "three attempts",
        sub,
        Some(&receiver),
        &[20, 20],
    )];
    let done = follow(&server, &followed).await.remove(0);
    assert_eq!(done["status"], json!("completed"), "{done}");
    let d1 = id(&done);

    let tries = server.wait_attempts(d1, 3).await;
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
    for (i, attempt) in tries.iter().enumerate() {
        assert_eq!(attempt["delivery"], json!(d1), "{attempt}");
        assert_eq!(attempt["attempt"], json!(i + 1), "{attempt}");
        assert_eq!(attempt["error"], Value::Null, "{attempt}");
        let at = T0 + 20 * u64::try_from(i).unwrap();
        assert_eq!(ms(&attempt["at"]), at, "{attempt}");
        assert!(attempt["latency_ms"].is_u64(), "{attempt}");
    }
    assert_eq!(tries[0]["response"], json!("boom: database down"));
    let cut = text(&tries[1]["response"]);
    assert!(cut.ends_with('…') && cut.len() < 600, "{cut}");
    assert_eq!(tries[2]["response"], json!("thanks"));
    // The delivery's own view carries the same list.
    assert_eq!(delivery(&server, d1).await["attempts"], json!(tries));

    // A second delivery: the subscription's list holds both deliveries' attempts.
    publish(&server, "orders", json!({"n": 2})).await;
    let d2 = delivery_of(&receiver.wait_for(4, PATIENCE).await[3]);
    wait_delivery(&server, d2, "completed").await;
    server.wait_attempts(d2, 1).await;
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

/// Two subscriptions to one endpoint that takes one request at a time: each message arrives
/// without waiting for the other subscription's runner, which, idle, must not sit on the
/// endpoint's one permit.
///
/// This test measures real time, as no signal can stand in for it: sitting on the permit holds
/// the next message until the idle runner's wait for ready deliveries runs out (its
/// `IDLE_POLL`, a second of real time: 1.0 s measured with the permit held through that wait),
/// while the other runner, which would take it, waits for the permit; the correct runners let
/// it go before they wait, and a delivery merely slow on a loaded machine takes a fraction of
/// that second. So the bound lies between the two. The engine's clock plays no part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_sharing_an_endpoint_do_not_wait_for_each_other() {
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
        let received = receiver.wait_for(n, PATIENCE).await;
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
    let message = publish(&server, "orders", json!({"total": 12})).await;
    let received = secure.wait_for(2, PATIENCE).await;

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
    let at = sent_at(request);
    assert_eq!(at, T0, "sent at once");
    let webhook_id = request.header("webhook-id");
    assert_eq!(webhook_id, format!("dlv_{d}"));
    let timestamp: u64 = request.header("webhook-timestamp").parse().unwrap();
    assert_eq!(timestamp, at / 1000);
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
    assert_eq!(message_of(&plain.wait_for(1, PATIENCE).await[0]), message);

    for sub in [by_name, by_ip, by_http] {
        let d = server.only_delivery(sub).await;
        wait_delivery(&server, d, "completed").await;
        let tries = server.wait_attempts(d, 1).await;
        assert_eq!(tries[0]["result"], json!("delivered"), "{tries:?}");
        assert_eq!(tries[0]["error"], Value::Null, "{tries:?}");
    }
    let tries = server.wait_attempts(d, 1).await;
    assert_eq!(tries[0]["status"], json!(200), "{tries:?}");
    assert_eq!(tries[0]["response"], json!("thanks"), "{tries:?}");
    assert_eq!(secure.failed_handshakes(), 0);
    assert_eq!(secure.count(), 2);
}

/// The phased schedule over https as over http, exactly: linear and exponential, told apart.
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
    let followed: Vec<Followed> = cases
        .iter()
        .map(|(function, expected, receiver, sub)| {
            Followed::new(
                &format!("{function} over https"),
                *sub,
                Some(receiver),
                expected,
            )
        })
        .collect();
    let ends = follow(&server, &followed).await;
    for ((function, expected, receiver, _), dead) in cases.iter().zip(ends) {
        let attempts_made = expected.len() + 1;
        let d = id(&dead);
        assert!(receiver.received().iter().all(|r| delivery_of(r) == d));
        assert_eq!(dead["status"], json!("dead"), "{function}: {dead}");
        let exhausted = format!("all {} retries were used", expected.len());
        assert!(text(&dead["dead_reason"]).contains(&exhausted), "{dead}");
        let tries = dead["attempts"].as_array().unwrap();
        assert_eq!(tries.len(), attempts_made, "{function}: {tries:?}");
        assert!(
            tries.iter().all(|a| a["status"] == json!(500)),
            "{function}: {tries:?}"
        );
        assert_eq!(receiver.count(), attempts_made, "{function}");
        assert_eq!(receiver.failed_handshakes(), 0, "{function}");
    }
}

/// A TLS failure's delivery, followed to its death: three attempts 20 ms apart (a policy of
/// `fixed(20, 2)`), each failed at the TLS handshake and retried until the policy gave up;
/// returns their errors.
fn tls_failures(dead: &Value) -> Vec<String> {
    assert_eq!(dead["status"], json!("dead"), "{dead}");
    assert_eq!(dead["failures"], json!(3), "{dead}");
    assert!(
        text(&dead["dead_reason"]).contains("all 2 retries were used"),
        "retried until the policy gave up: {dead}"
    );
    let tries = dead["attempts"].as_array().unwrap();
    assert_eq!(tries.len(), 3, "{dead}");
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
    let followed = [Followed::new("untrusted", sub, None, &[20, 20])];
    for error in tls_failures(&follow(&server, &followed).await[0]) {
        assert!(
            error.contains("the certificate is not signed by a CA this server trusts"),
            "{error}"
        );
        assert!(error.contains("--delivery-ca-file"), "{error}");
    }
    // Each attempt reached the receiver and hung up in the handshake: no request got through.
    receiver.wait_for_failed_handshakes(3, PATIENCE).await;
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
    let followed: Vec<Followed> = subs
        .iter()
        .map(|(what, _, _, sub)| Followed::new(what, *sub, None, &[20, 20]))
        .collect();
    let ends = follow(&server, &followed).await;
    for ((what, expected, receiver, _), dead) in subs.iter().zip(&ends) {
        for error in tls_failures(dead) {
            assert!(error.contains(expected), "{what}: {error}");
        }
        receiver.wait_for_failed_handshakes(3, PATIENCE).await;
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
    let followed = [
        Followed::new("by IP address", by_ip, Some(&named_receiver), &[]),
        Followed::new("by common name", by_name, Some(&common_receiver), &[]),
        Followed::new("unlisted", refused, None, &[20, 20]),
    ];
    let ends = follow(&server, &followed).await;
    let [named_done, common_done, dead] = <[Value; 3]>::try_from(ends).unwrap();
    assert_eq!(named_done["status"], json!("completed"), "{named_done}");
    assert_eq!(common_done["status"], json!("completed"), "{common_done}");
    for error in tls_failures(&dead) {
        assert!(
            error.contains("is a CA's, not a server's: list this very certificate"),
            "{error}"
        );
    }
    assert_eq!(unlisted_receiver.count(), 0);
}

// --- real time -------------------------------------------------------------------------------

/// The one test on the system clock, a smoke test of real time end to end: a delivery that
/// fails twice is retried when the server's own time says so. Every other test moves a manual
/// clock, which the server's loops look at every few milliseconds; only here do the
/// maintenance loop's sleep until the next due time and the runner's wake-up on the promotion
/// run as they do in production. So it has a generous deadline and no timing assertion but
/// what the server's own clock shows: each attempt at least the policy's delay after the one
/// before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_time_smoke_test_retries_reach_the_receiver_on_the_system_clock() {
    const DELAY_MS: u64 = 100;
    let flags = ["--allow-private-endpoints"];
    let server = TestServer::start(Options::system().flags(&flags)).await;
    let receiver = Receiver::failing(2, 500).await;
    let sub = id(&subscribe(
        &server,
        "orders",
        &receiver,
        json!({ "policy": fixed(DELAY_MS, 3) }),
    )
    .await);
    publish(&server, "orders", json!({"n": 1})).await;
    receiver.wait_for(3, Duration::from_secs(60)).await;
    let d = server.only_delivery(sub).await;
    let done = wait_delivery(&server, d, "completed").await;
    assert_eq!(done["failures"], json!(2), "{done}");
    let tries = server.wait_attempts(d, 3).await;
    let at: Vec<u64> = tries.iter().map(|a| ms(&a["at"])).collect();
    assert!(
        at.windows(2).all(|pair| pair[1] >= pair[0] + DELAY_MS),
        "attempts at {at:?}, {DELAY_MS} ms apart at the least"
    );
    assert_eq!(receiver.count(), 3);
}
