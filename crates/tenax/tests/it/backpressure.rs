//! Endpoint backpressure over real HTTP, on a manual clock: a 429 with `Retry-After` pauses
//! every subscription sharing the endpoint's origin (and no other) without using their
//! attempts; a run of failures opens the endpoint's circuit breaker, which lets one probe
//! through after its cool-down, opens again for twice as long when the probe fails and closes
//! when one succeeds; a retry budget lets only its share of retries through and holds the rest
//! unsent. Each case reads the state where an operator would: the subscription's health and
//! `/metrics`.
//!
//! The server's clock is moved by the test; the receiver's requests are counted, not timed.
//! "Nothing is sent" is checked by the runners' own signals ([`settles`]): once a runner has
//! looked again after the act and decided to wait, with nothing of its subscription in flight,
//! whatever it would (wrongly) have sent has reached the receiver.
//!
//! Runs on the store `TENAX_TEST_STORE` names.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use common::{Options, PATIENCE, T0, TestServer, ms};
use prom_text_format_parser::{Scrape, ValueType};
use receiver::{Receiver, Reply};
use serde_json::{Value, json};

use crate::common;
use crate::common::receiver;

const SECOND: u64 = 1_000;

/// A server on a manual clock at [`T0`] that may deliver to loopback receivers.
async fn server(extra: &[&str]) -> TestServer {
    let mut flags = vec!["--allow-private-endpoints"];
    flags.extend_from_slice(extra);
    TestServer::start(Options::manual().flags(&flags)).await
}

/// Subscribes `queue` to `endpoint` with a fixed 1 s retry and the extra `fields`; returns its
/// id.
async fn subscribe(server: &TestServer, queue: &str, endpoint: &str, fields: Value) -> u64 {
    let body = json!({
        "endpoint": endpoint,
        "policy": { "type": "fixed", "delay": SECOND, "retry_limit": 100 },
    });
    let view = server.subscribe(queue, body, fields).await;
    view["id"].as_u64().unwrap()
}

async fn publish(server: &TestServer, queue: &str, n: u64) {
    server
        .enqueue(json!({ "queue": queue, "type": "order.paid", "payload": { "n": n } }))
        .await;
}

/// The subscription's endpoint health once `ready` holds of it.
async fn endpoint_health(
    server: &TestServer,
    sub: u64,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let view = server
        .poll(&format!("/api/subscriptions/{sub}"), what, |s| {
            ready(&s["health"]["endpoint"])
        })
        .await;
    view["health"]["endpoint"].clone()
}

/// Every delivery of `sub`.
async fn deliveries(server: &TestServer, sub: u64) -> Vec<Value> {
    let answer = server
        .get(&format!("/api/subscriptions/{sub}/deliveries"))
        .await;
    answer["deliveries"].as_array().unwrap().clone()
}

/// The logged attempts of every delivery of `sub`, summed, once there are at least `n` (an
/// attempt's log entry is written in the commit that ends it, which the delivery's status may
/// show a moment earlier).
async fn logged_attempts(server: &TestServer, sub: u64, n: usize) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut total = 0;
        for d in deliveries(server, sub).await {
            let attempts = server
                .get(&format!("/api/deliveries/{}/attempts", d["id"]))
                .await;
            total += attempts["attempts"].as_array().unwrap().len();
        }
        if total >= n || Instant::now() >= deadline {
            return total;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until `sub` has `n` completed deliveries.
async fn wait_completed(server: &TestServer, sub: u64, n: usize) {
    server
        .poll(
            &format!("/api/subscriptions/{sub}/deliveries?status=completed"),
            &format!("{n} completed"),
            |a| a["deliveries"].as_array().is_some_and(|d| d.len() >= n),
        )
        .await;
}

/// Asserts that the runners of `subs` settle without sending ([`TestServer::settle`]) and that
/// the receiver still has `count` requests.
async fn settles(server: &TestServer, subs: &[u64], receiver: &Receiver, count: usize, what: &str) {
    server.settle(subs, what).await;
    assert_eq!(receiver.count(), count, "{what}: {:?}", receiver.received());
}

async fn scrape(server: &TestServer) -> Scrape {
    let answer = server
        .http()
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "GET /metrics");
    let text = answer.text().await.unwrap();
    Scrape::parse(&text).unwrap_or_else(|e| panic!("not the Prometheus text format: {e:?}\n{text}"))
}

/// The value of the counter or gauge `name` whose labels include `labels`; 0 when none.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let Some(metric) = scrape.metrics.iter().find(|m| m.name == name) else {
        return 0.0;
    };
    let found: Vec<_> = metric
        .samples
        .iter()
        .filter(|s| {
            s.value.value_type == ValueType::Sample
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|l| l.key == *k && l.value == *v))
        })
        .collect();
    assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
    found.first().map_or(0.0, |s| s.value.value.as_f64())
}

/// A 429 with `Retry-After: 60` to one subscription holds the deliveries of another
/// subscription to the same origin (another path) for 60 s, unsent, while a third endpoint
/// (another origin) is delivered to at once; after the pause both go, the held one with its
/// first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_pauses_every_subscription_of_the_origin_without_using_attempts() {
    let server = server(&[]).await;
    let shared = Receiver::start(vec![Reply::status(429).retry_after("60")], Reply::ok()).await;
    let other = Receiver::ok().await;
    let asked = subscribe(&server, "a", &shared.url("/a"), json!({})).await;
    let sharing = subscribe(&server, "b", &shared.url("/b"), json!({})).await;
    let elsewhere = subscribe(&server, "c", &other.url("/c"), json!({})).await;

    publish(&server, "a", 1).await;
    shared.wait_for(1, PATIENCE).await;
    let endpoint = endpoint_health(&server, asked, "the pause", |e| {
        e["paused_until"].is_string()
    })
    .await;
    assert_eq!(
        ms(&endpoint["paused_until"]),
        T0 + 60 * SECOND,
        "{endpoint}"
    );
    assert_eq!(endpoint["paused_by_status"], json!(429), "{endpoint}");
    assert_eq!(endpoint["breaker"], json!("closed"), "{endpoint}");
    assert_eq!(
        endpoint["origin"],
        json!(shared.url("").trim_end_matches('/'))
    );
    // The other subscription of the origin shows the same pause.
    let view = server.get(&format!("/api/subscriptions/{sharing}")).await;
    assert_eq!(view["health"]["endpoint"], endpoint, "{view}");
    let scraped = scrape(&server).await;
    assert_eq!(value(&scraped, "tenax_webhook_endpoints_paused", &[]), 1.0);
    assert_eq!(
        value(&scraped, "tenax_webhook_endpoints", &[("state", "closed")]),
        1.0
    );

    publish(&server, "b", 2).await;
    publish(&server, "c", 3).await;
    other.wait_for(1, PATIENCE).await;
    settles(
        &server,
        &[asked, sharing],
        &shared,
        1,
        "the paused origin got a request",
    )
    .await;
    server.advance(Duration::from_millis(59_900));
    settles(
        &server,
        &[asked, sharing],
        &shared,
        1,
        "a request came before the pause was over",
    )
    .await;
    let [held] = &deliveries(&server, sharing).await[..] else {
        panic!("one delivery")
    };
    assert_eq!(
        held["failures"],
        json!(0),
        "the pause used no attempt: {held}"
    );

    server.advance(Duration::from_millis(100));
    let received = shared.wait_for(3, PATIENCE).await;
    let mut sent: Vec<_> = received
        .iter()
        .map(|r| r.json()["message"]["body"]["n"].as_u64().unwrap())
        .collect();
    sent.sort_unstable();
    assert_eq!(sent, [1, 1, 2], "the 429, its retry and the held one");
    wait_completed(&server, asked, 1).await;
    wait_completed(&server, sharing, 1).await;
    assert_eq!(logged_attempts(&server, asked, 2).await, 2);
    assert_eq!(
        logged_attempts(&server, sharing, 1).await,
        1,
        "its first attempt"
    );
    assert_eq!(logged_attempts(&server, elsewhere, 1).await, 1);
    let endpoint = endpoint_health(&server, sharing, "the pause is over", |e| {
        e["paused_until"].is_null()
    })
    .await;
    assert_eq!(endpoint["paused_by_status"], Value::Null, "{endpoint}");
    assert_eq!(
        value(
            &scrape(&server).await,
            "tenax_webhook_endpoints_paused",
            &[]
        ),
        0.0
    );
}

/// Three failures in a row open the breaker for 10 s: retries that fall due meanwhile wait,
/// unsent. After the cool-down exactly one probe goes; it fails, and the breaker opens for
/// 20 s; the next probe succeeds, the breaker closes, and the rest go. Every delivery's
/// attempts are exactly the requests the receiver got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_probes_once_reopens_for_longer_and_closes() {
    let server = server(&[
        "--delivery-breaker-failures",
        "3",
        "--delivery-breaker-cooldown",
        "10s",
        "--delivery-breaker-max-cooldown",
        "1m",
    ])
    .await;
    let receiver = Receiver::start(vec![Reply::status(500); 4], Reply::ok()).await;
    let sub = subscribe(&server, "orders", &receiver.url("/hook"), json!({})).await;
    for n in 0..3 {
        publish(&server, "orders", n).await;
    }
    receiver.wait_for(3, PATIENCE).await;
    let endpoint = endpoint_health(&server, sub, "the breaker opens", |e| {
        e["breaker"] == json!("open")
    })
    .await;
    assert_eq!(endpoint["breaker_trips"], json!(1), "{endpoint}");
    assert_eq!(
        ms(&endpoint["breaker_until"]),
        T0 + 10 * SECOND,
        "{endpoint}"
    );
    assert_eq!(ms(&endpoint["breaker_opened_at"]), T0, "{endpoint}");
    assert_eq!(
        endpoint["breaker_reason"],
        json!("the endpoint answered HTTP 500"),
        "{endpoint}"
    );
    assert_eq!(
        value(
            &scrape(&server).await,
            "tenax_webhook_endpoints",
            &[("state", "open")]
        ),
        1.0
    );

    // The retries fall due at T0 + 1 s; the breaker holds them.
    server.advance(Duration::from_secs(1));
    settles(
        &server,
        &[sub],
        &receiver,
        3,
        "a retry went through the open breaker",
    )
    .await;
    server.advance(Duration::from_secs(8));
    settles(
        &server,
        &[sub],
        &receiver,
        3,
        "a probe went before the cool-down was over",
    )
    .await;

    // T0 + 10 s: one probe, which fails: open again for twice as long.
    server.advance(Duration::from_secs(1));
    receiver.wait_for(4, PATIENCE).await;
    let endpoint = endpoint_health(&server, sub, "the breaker opens again", |e| {
        e["breaker"] == json!("open") && e["breaker_trips"] == json!(2)
    })
    .await;
    assert_eq!(
        ms(&endpoint["breaker_until"]),
        T0 + 30 * SECOND,
        "{endpoint}"
    );
    settles(&server, &[sub], &receiver, 4, "more than one probe").await;
    server.advance(Duration::from_secs(19));
    settles(
        &server,
        &[sub],
        &receiver,
        4,
        "a probe before the longer cool-down was over",
    )
    .await;

    // T0 + 30 s: the probe succeeds, the breaker closes, the others go.
    server.advance(Duration::from_secs(1));
    receiver.wait_for(7, PATIENCE).await;
    wait_completed(&server, sub, 3).await;
    let endpoint = endpoint_health(&server, sub, "the breaker closes", |e| {
        e["breaker"] == json!("closed")
    })
    .await;
    assert_eq!(endpoint["breaker_trips"], json!(0), "{endpoint}");
    assert_eq!(endpoint["breaker_until"], Value::Null, "{endpoint}");
    settles(&server, &[sub], &receiver, 7, "a delivery was sent twice").await;
    assert_eq!(
        logged_attempts(&server, sub, 7).await,
        7,
        "no attempt lost nor made up"
    );
    let scraped = scrape(&server).await;
    assert_eq!(
        value(&scraped, "tenax_webhook_endpoints", &[("state", "closed")]),
        1.0
    );
    assert_eq!(
        value(&scraped, "tenax_webhook_endpoints", &[("state", "open")]),
        0.0
    );
}

/// A budget of 10 % of attempts (at least one retry) in a minute: ten failed first attempts
/// allow one retry; the other nine wait unsent (held, counted in the metrics, no attempt
/// used) until the window has moved on. (The breaker is off: ten failures in a row would open
/// it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_over_the_budget_wait_unsent() {
    let server = server(&["--delivery-breaker-failures", "0"]).await;
    let receiver = Receiver::start(vec![Reply::status(500); 10], Reply::ok()).await;
    let sub = subscribe(
        &server,
        "orders",
        &receiver.url("/hook"),
        json!({ "retry_budget": { "percent": 10, "window": "1m", "min_retries": 1 } }),
    )
    .await;
    let view = server.get(&format!("/api/subscriptions/{sub}")).await;
    assert_eq!(
        view["retry_budget"],
        json!({ "percent": 10, "window_ms": 60_000, "min_retries": 1 }),
        "{view}"
    );
    for n in 0..10 {
        publish(&server, "orders", n).await;
    }
    receiver.wait_for(10, PATIENCE).await;
    server
        .poll(
            &format!("/api/subscriptions/{sub}/deliveries?status=scheduled"),
            "ten failed",
            |a| a["deliveries"].as_array().is_some_and(|d| d.len() == 10),
        )
        .await;

    server.advance(Duration::from_secs(1));
    receiver.wait_for(11, PATIENCE).await;
    let subscription_label = sub.to_string();
    let held = [
        ("subscription", subscription_label.as_str()),
        ("reason", "retry_budget"),
    ];
    let deadline = Instant::now() + PATIENCE;
    while value(
        &scrape(&server).await,
        "tenax_webhook_deliveries_held_total",
        &held,
    ) < 9.0
    {
        assert!(Instant::now() < deadline, "nine retries never held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settles(
        &server,
        &[sub],
        &receiver,
        11,
        "a retry over the budget was sent",
    )
    .await;
    assert_eq!(
        value(
            &scrape(&server).await,
            "tenax_webhook_deliveries_held_total",
            &held
        ),
        9.0
    );
    let all = deliveries(&server, sub).await;
    let failures: u64 = all.iter().map(|d| d["failures"].as_u64().unwrap()).sum();
    assert_eq!(failures, 10, "held retries used no attempt: {all:?}");
    let view = server.get(&format!("/api/subscriptions/{sub}")).await;
    assert_eq!(
        view["health"]["retry_budget"],
        json!({ "attempts": 11, "retries": 1 }),
        "{view}"
    );

    // Once the window has moved past the first attempts, the budget allows one more.
    server.advance(Duration::from_secs(70));
    receiver.wait_for(12, PATIENCE).await;
    settles(
        &server,
        &[sub],
        &receiver,
        12,
        "more retries than the budget allows",
    )
    .await;
}
