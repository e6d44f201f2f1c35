//! What a web page can make a server do, over real HTTP: a server that needs no token (on
//! loopback) obeys only its own pages. Cross-site bodies that a browser sends without a
//! preflight (`text/plain`, forms) are refused with 415, foreign `Origin`s and `Host` names
//! (DNS rebinding) with 403, on both APIs and the dashboard; `--cors-origins` and
//! `--allowed-hosts` let chosen ones through; nothing refused is stored.

use common::{Options, TestServer};
use reqwest::header::{ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN, HOST, ORIGIN};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::common;

const CLIENT_ID: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";

/// A request to `path` with the given headers and body; its status and JSON answer.
async fn send(
    server: &TestServer,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let mut request = server.http().request(method, server.url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.body(body.to_owned());
    }
    let response = request.send().await.expect("an answer");
    let status = response.status();
    let headers = response.headers().clone();
    let text = response.text().await.expect("text");
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// The field a native refusal names.
fn field(answer: &Value) -> &str {
    answer["error"]["field"].as_str().unwrap_or_default()
}

fn authority(server: &TestServer) -> String {
    server.api.base.trim_start_matches("http://").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_tokens_obeys_only_its_own_pages() {
    let server = TestServer::manual().await;
    let own = format!("http://{}", authority(&server));
    let job = r#"{"queue": "emails"}"#;
    let json_type = ("content-type", "application/json");

    // A cross-site form or text/plain POST: no preflight in a browser, so refused by type.
    for media in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=b",
    ] {
        let (status, _, answer) = send(
            &server,
            Method::POST,
            "/api/jobs",
            &[("content-type", media)],
            Some(job),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{media}: {answer}"
        );
        assert_eq!(field(&answer), "Content-Type", "{answer}");
    }
    // No type at all, with a body.
    let (status, _, _) = send(&server, Method::POST, "/api/jobs", &[], Some(job)).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // A page of another site, even with a JSON body (CORS would let it send one after a
    // preflight this server does not answer; an old browser might not ask).
    let (status, _, answer) = send(
        &server,
        Method::POST,
        "/api/jobs",
        &[json_type, ("origin", "http://evil.example")],
        Some(job),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(field(&answer), "Origin");
    // Another port of this machine is another origin.
    let (status, _, _) = send(
        &server,
        Method::POST,
        "/api/jobs",
        &[json_type, ("origin", "http://127.0.0.1:1")],
        Some(job),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // DNS rebinding: the attacker's name pointed at 127.0.0.1; the browser sends that name.
    let port = authority(&server)
        .rsplit_once(':')
        .map(|(_, p)| p.to_owned())
        .expect("a port");
    let rebound = format!("evil.example:{port}");
    for (method, path) in [
        (Method::GET, "/api/stats"),
        (Method::GET, "/api/jobs?queue=emails"),
        (Method::GET, "/ui"),
        (Method::GET, "/metrics"),
    ] {
        let (status, _, answer) = send(
            &server,
            method.clone(),
            path,
            &[(HOST.as_str(), &rebound)],
            None,
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        if path.starts_with("/api") {
            assert_eq!(field(&answer), "Host");
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("--allowed-hosts"), "{message}");
        }
    }
    // Zaqar's answer is in Zaqar's shape.
    let (status, _, answer) = send(
        &server,
        Method::POST,
        "/v2/queues/q/messages",
        &[
            (HOST.as_str(), &rebound),
            json_type,
            ("client-id", CLIENT_ID),
            ("x-project-id", "p"),
        ],
        Some(r#"{"messages": [{"body": 1}]}"#),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(answer["title"], "Forbidden", "{answer}");
    // A health probe by any name is answered: nothing is behind it.
    let (status, _, _) = send(
        &server,
        Method::GET,
        "/healthz",
        &[(HOST.as_str(), &rebound)],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // The dashboard: a form posted from another site, or a login from one.
    let (status, _, _) = send(
        &server,
        Method::POST,
        "/ui/jobs/act",
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("sec-fetch-site", "cross-site"),
        ],
        Some("action=delete&id=1"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = send(
        &server,
        Method::POST,
        "/ui/login",
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", "http://evil.example"),
        ],
        Some("token=x"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Nothing refused was stored.
    let stats = server.stats().await;
    assert_eq!(stats["totals"]["ready"], 0, "{stats}");

    // The server's own pages (and clients that are no browser) go on working: by address, by
    // localhost, and from its own origin; Zaqar's clients too.
    let localhost = format!("localhost:{port}");
    for headers in [
        vec![json_type],
        vec![json_type, ("origin", own.as_str())],
        vec![json_type, (HOST.as_str(), localhost.as_str())],
        vec![("content-type", "application/json; charset=utf-8")],
    ] {
        let (status, _, answer) =
            send(&server, Method::POST, "/api/jobs", &headers, Some(job)).await;
        assert_eq!(status, StatusCode::CREATED, "{headers:?}: {answer}");
    }
    let (status, _, answer) = send(
        &server,
        Method::POST,
        "/v2/queues/q/messages",
        &[json_type, ("client-id", CLIENT_ID), ("x-project-id", "p")],
        Some(r#"{"messages": [{"body": 1}]}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    // A link followed from another site to the dashboard: a read, let through.
    let (status, _, _) = send(
        &server,
        Method::GET,
        "/ui/jobs",
        &[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chosen_origins_and_hosts_are_let_through() {
    let server = TestServer::start(Options::manual().flags(&[
        "--cors-origins",
        "https://app.example.com,http://localhost:3000",
        "--allowed-hosts",
        "queue.internal",
    ]))
    .await;
    let port = authority(&server)
        .rsplit_once(':')
        .map(|(_, p)| p.to_owned())
        .expect("a port");
    // A preflight from an allowed origin is answered at once.
    let (status, headers, _) = send(
        &server,
        Method::OPTIONS,
        "/api/jobs",
        &[
            ("origin", "https://app.example.com"),
            ("access-control-request-method", "POST"),
            ("access-control-request-headers", "content-type"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        headers
            .get(ACCESS_CONTROL_ALLOW_ORIGIN)
            .and_then(|v| v.to_str().ok()),
        Some("https://app.example.com")
    );
    assert!(
        headers
            .get(ACCESS_CONTROL_ALLOW_METHODS)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| m.contains("POST"))
    );
    // Its request is handled, and the answer may be read by it.
    let (status, headers, _) = send(
        &server,
        Method::POST,
        "/api/jobs",
        &[
            ("content-type", "application/json"),
            (ORIGIN.as_str(), "http://localhost:3000"),
        ],
        Some(r#"{"queue": "emails"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        headers
            .get(ACCESS_CONTROL_ALLOW_ORIGIN)
            .and_then(|v| v.to_str().ok()),
        Some("http://localhost:3000")
    );
    // Others are not.
    let (status, headers, _) = send(
        &server,
        Method::OPTIONS,
        "/api/jobs",
        &[
            ("origin", "https://other.example.com"),
            ("access-control-request-method", "POST"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(headers.get(ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
    // An allowed name, and only that one.
    let named = format!("queue.internal:{port}");
    let (status, _, _) = send(
        &server,
        Method::GET,
        "/api/stats",
        &[(HOST.as_str(), &named)],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let other = format!("queue.external:{port}");
    let (status, _, _) = send(
        &server,
        Method::GET,
        "/api/stats",
        &[(HOST.as_str(), &other)],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_needs_tokens_checks_names_only_when_told_and_metrics_always() {
    let admin = "browser-test-admin-token-0123456789abcdef";
    let metrics_port = common::ports::spare_port();
    let metrics_at = format!("127.0.0.1:{metrics_port}");
    let server = TestServer::start(Options::manual().flags(&[
        "--auth",
        "on",
        "--admin-token",
        admin,
        "--metrics-listen",
        &metrics_at,
    ]))
    .await;
    let bearer = format!("Bearer {admin}");
    // A token is what guards this server: any name is answered to it.
    let (status, _, _) = send(
        &server,
        Method::GET,
        "/api/stats",
        &[
            ("authorization", &bearer),
            (HOST.as_str(), "queue.example.com"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // Still, a foreign page may not drive it, token or not.
    let (status, _, _) = send(
        &server,
        Method::POST,
        "/api/jobs",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
            ("origin", "http://evil.example"),
        ],
        Some(r#"{"queue": "emails"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The metrics listener needs no token, so it checks names.
    let http = server.http();
    let scrape = |host: &'static str| {
        http.get(format!("http://{metrics_at}/metrics"))
            .header(HOST, host)
            .send()
    };
    let refused = scrape("evil.example").await.expect("an answer");
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let answered = scrape("127.0.0.1").await.expect("an answer");
    assert_eq!(answered.status(), StatusCode::OK);
}
