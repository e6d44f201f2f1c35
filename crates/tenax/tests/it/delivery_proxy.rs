//! Deliveries and HTTP proxies: a proxy named in the server's environment (`HTTP_PROXY` and
//! the like) is never used, since it would carry deliveries past the address checks; one given
//! by `--delivery-proxy` is, after the checks have judged the endpoint. The proxy here is a
//! real HTTP server that records what it is asked to forward.

use std::process::{Command, Stdio};

use common::{Api, Options, PATIENCE, TestServer};
use receiver::{Receiver, Reply};
use serde_json::{Value, json};

use crate::common;
use crate::common::receiver;

/// Subscribes `endpoint` to a queue of its own and publishes one message there; returns the
/// subscription's id.
async fn subscribe_and_publish(api: &Api, endpoint: &str) -> u64 {
    let queue: String = endpoint
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let body = json!({"endpoint": endpoint,
                      "policy": {"type": "fixed", "delay": "1h", "retry_limit": 1}});
    let made = api.subscribe(&queue, body, json!({})).await;
    let id = made["id"].as_u64().unwrap_or_else(|| panic!("{made}"));
    api.enqueue(json!({"queue": queue, "type": "order.paid"}))
        .await;
    id
}

/// The first attempt of subscription `id`'s only delivery, once it is logged.
async fn first_attempt(api: &Api, id: u64) -> Value {
    let delivery = api.only_delivery(id).await;
    api.wait_attempts(delivery, 1).await.remove(0)
}

/// A proxy in the environment is not a way past the address checks: the delivery to a name
/// that does not resolve fails here, and the proxy never hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_in_the_environment_is_never_used() {
    let proxy = Receiver::start(Vec::new(), Reply::ok()).await;
    let proxy_url = proxy.url("");
    let dir = tempfile::tempdir().expect("a directory");
    let port = common::ports::spare_port();
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
    // The test's own client: no proxy from this process's environment either.
    let api = Api::new(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    api.wait_until_up().await;
    let id = subscribe_and_publish(&api, "http://hooks.invalid/hook").await;
    let attempt = first_attempt(&api, id).await;
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
    // A public address the test machine cannot reach itself: only the proxy can deliver it.
    let public = subscribe_and_publish(&server, "http://93.184.216.34/hook").await;
    let forwarded = proxy.wait_for(1, PATIENCE).await;
    assert_eq!(forwarded[0].header("host"), "93.184.216.34");
    assert!(forwarded[0].header("webhook-signature").starts_with("v1,"));
    let attempt = first_attempt(&server, public).await;
    assert_eq!(attempt["result"], "delivered", "{attempt}");

    let unjudged = subscribe_and_publish(&server, "http://hooks.invalid/hook").await;
    let attempt = first_attempt(&server, unjudged).await;
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
