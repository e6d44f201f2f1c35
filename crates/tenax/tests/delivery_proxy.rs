//! Deliveries and HTTP proxies: a proxy named in the server's environment (`HTTP_PROXY` and
//! the like) is never used, since it would carry deliveries past the address checks; one given
//! by `--delivery-proxy` is, after the checks have judged the endpoint. The proxy here is a
//! real HTTP server that records what it is asked to forward.

mod common;
#[path = "common/receiver.rs"]
#[allow(dead_code)]
mod receiver;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Options, PATIENCE, TestServer};
use receiver::{Receiver, Reply};
use serde_json::{Value, json};

/// Polls `GET url` on `base` until `ready` holds, at most [`PATIENCE`].
async fn poll(http: &reqwest::Client, url: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer: Value = http
            .get(url)
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .unwrap_or(Value::Null);
        if ready(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{url} never got there: {answer}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Subscribes `endpoint` to a queue of its own and publishes one message there; returns the
/// subscription's id.
async fn subscribe_and_publish(http: &reqwest::Client, base: &str, endpoint: &str) -> u64 {
    let queue: String = endpoint
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let made: Value = http
        .post(format!("{base}/api/queues/{queue}/subscriptions"))
        .json(&json!({"endpoint": endpoint,
                      "policy": {"type": "fixed", "delay": "1h", "retry_limit": 1}}))
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    let id = made["id"].as_u64().unwrap_or_else(|| panic!("{made}"));
    let posted = http
        .post(format!("{base}/api/jobs"))
        .json(&json!({"queue": queue, "type": "order.paid"}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(posted.status(), 201);
    id
}

/// The first attempt of subscription `id`'s only delivery, once it is logged.
async fn first_attempt(http: &reqwest::Client, base: &str, id: u64) -> Value {
    let deliveries = poll(
        http,
        &format!("{base}/api/subscriptions/{id}/deliveries"),
        |d| d["deliveries"].as_array().is_some_and(|l| !l.is_empty()),
    )
    .await;
    let delivery = deliveries["deliveries"][0]["id"].as_u64().expect("an id");
    let attempts = poll(
        http,
        &format!("{base}/api/deliveries/{delivery}/attempts"),
        |a| a["attempts"].as_array().is_some_and(|l| !l.is_empty()),
    )
    .await;
    attempts["attempts"][0].clone()
}

/// A proxy in the environment is not a way past the address checks: the delivery to a name
/// that does not resolve fails here, and the proxy never hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_in_the_environment_is_never_used() {
    let proxy = Receiver::start(Vec::new(), Reply::ok()).await;
    let proxy_url = proxy.url("");
    let dir = tempfile::tempdir().expect("a directory");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--delivery-timeout", "2s"])
        .env("HTTP_PROXY", &proxy_url)
        .env("http_proxy", &proxy_url)
        .env("HTTPS_PROXY", &proxy_url)
        .env("ALL_PROXY", &proxy_url)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tenax serve starts");
    let base = format!("http://127.0.0.1:{port}");
    let http = tenax_net::http::client_builder()
        .no_proxy()
        .build()
        .expect("a client");
    let deadline = Instant::now() + PATIENCE;
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = subscribe_and_publish(&http, &base, "http://hooks.invalid/hook").await;
    let attempt = first_attempt(&http, &base, id).await;
    let error = attempt["error"].as_str().unwrap_or_default();
    assert!(error.contains("hooks.invalid"), "{attempt}");
    assert_eq!(
        proxy.count(),
        0,
        "the environment's proxy was used: {attempt}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `--delivery-proxy` carries deliveries to public endpoints; a name the checks cannot judge
/// (it does not resolve) is not handed to the proxy to resolve instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_go_through_the_delivery_proxy_after_the_checks() {
    let proxy = Receiver::start(Vec::new(), Reply::ok()).await;
    // By name: the proxy's own name may resolve to a private address; it is the operator's.
    let proxy_url = proxy.localhost_url("");
    let server =
        TestServer::start(Options::system().flags(&["--delivery-proxy", &proxy_url])).await;
    let (http, base) = (server.http().clone(), server.api.base.clone());
    // A public address the test machine cannot reach itself: only the proxy can deliver it.
    let public = subscribe_and_publish(&http, &base, "http://93.184.216.34/hook").await;
    let forwarded = proxy.wait_for(1, PATIENCE).await;
    assert_eq!(forwarded[0].header("host"), "93.184.216.34");
    assert!(forwarded[0].header("webhook-signature").starts_with("v1,"));
    let attempt = first_attempt(&http, &base, public).await;
    assert_eq!(attempt["result"], "delivered", "{attempt}");

    let unjudged = subscribe_and_publish(&http, &base, "http://hooks.invalid/hook").await;
    let attempt = first_attempt(&http, &base, unjudged).await;
    assert_eq!(attempt["result"], "retryable", "{attempt}");
    assert!(
        attempt["error"]
            .as_str()
            .unwrap_or_default()
            .contains("hooks.invalid"),
        "{attempt}"
    );
    // Two messages went out (one per subscription), and only the public one reached the proxy.
    assert_eq!(proxy.count(), 1);
}
