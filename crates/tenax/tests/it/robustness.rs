//! Input that once broke the server for everyone, each tried over real HTTP: every one now gets a
//! clear 4xx that names the field and the rule (or the documented behaviour), and the server
//! stays healthy for everyone else afterwards, across a restart.

use std::sync::Arc;

use common::TestServer;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common;

const CLIENT: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";

/// The server still answers every read that shows jobs, and enqueues and takes as before.
async fn still_healthy(server: &TestServer) {
    let id = server
        .enqueue(json!({"queue": "health", "payload": {"still": "fine"}}))
        .await;
    let job = server.job(id).await;
    assert_eq!(job["payload"], json!({"still": "fine"}));
    for path in [
        "/api/jobs",
        "/api/jobs?queue=a",
        "/api/dead",
        "/api/stats",
        "/api/queues",
    ] {
        server.get(path).await;
    }
    server.take_one("health").await;
}

/// A Zaqar request with the headers Zaqar requires.
async fn zaqar(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<Vec<u8>>,
) -> (u16, Value) {
    let mut request = server
        .api
        .http()
        .request(method, server.api.url(path))
        .header("Client-ID", CLIENT)
        .header("X-Project-ID", "robust");
    if let Some(body) = body {
        request = request
            .header("Content-Type", "application/json")
            .body(body);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let bytes = response.bytes().await.expect("a body");
    let json = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{path}: not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        })
    };
    (status, json)
}

#[tokio::test]
async fn times_past_what_can_be_printed_are_refused_by_field() {
    let mut server = TestServer::manual().await;
    // A year after 9999: once accepted, and then every read of the job panicked.
    let rule = server
        .invalid(
            "/api/jobs",
            json!({"queue": "a", "run_at": 253_402_300_800_000u64}),
            "run_at",
        )
        .await;
    assert!(
        rule.starts_with("must be at most 100 years from now"),
        "{rule}"
    );
    // The same rule as delays: 100 years ahead is the limit, whichever way it is written.
    let hundred_years_ms: u64 = 100 * 31_557_600_000;
    let at = server.now_ms() + hundred_years_ms + 1;
    server
        .invalid("/api/jobs", json!({"queue": "a", "run_at": at}), "run_at")
        .await;
    server
        .invalid(
            "/api/jobs/batch",
            json!({"jobs": [{"queue": "a"}, {"queue": "a", "run_at": "9999-12-31T00:00:00Z"}]}),
            "jobs[1].run_at",
        )
        .await;
    let ok = server
        .enqueue(json!({"queue": "a", "run_at": server.now_ms() + hundred_years_ms}))
        .await;
    assert_eq!(server.status(ok).await, "scheduled");
    // A worker's retry time follows the same rule.
    let id = server.enqueue(json!({"queue": "b"})).await;
    let job = server.take_one("b").await;
    assert_eq!(job.id, id);
    let rule = server
        .invalid(
            &format!("/api/jobs/{id}/fail"),
            json!({"lease_token": job.lease_token, "error": "x", "retry_at": u64::MAX}),
            "retry_at",
        )
        .await;
    assert!(rule.contains("100 years"), "{rule}");
    still_healthy(&server).await;
    server.restart().await;
    still_healthy(&server).await;
}

/// JSON text that serde_json accepts as text but cannot hold as a value.
fn unreadable_payloads() -> Vec<(&'static str, String)> {
    vec![
        (
            "nesting",
            format!("{}1{}", "[".repeat(200), "]".repeat(200)),
        ),
        (
            "nesting past 64",
            format!("{}1{}", "[".repeat(65), "]".repeat(65)),
        ),
        ("1e999", "{\"n\": 1e999}".to_owned()),
        ("lone surrogate", "\"\\ud800\"".to_owned()),
        ("lone surrogate key", "{\"\\udc00\": 1}".to_owned()),
    ]
}

#[tokio::test]
async fn payloads_must_be_json_that_can_be_shown_again() {
    let mut server = TestServer::manual().await;
    for (what, payload) in unreadable_payloads() {
        let body = format!("{{\"queue\": \"a\", \"payload\": {payload}}}");
        let error = server
            .error_raw(Method::POST, "/api/jobs", body.into_bytes(), 400)
            .await;
        assert_eq!(error.field.as_deref(), Some("payload"), "{what}: {error:?}");
        assert!(error.message.starts_with("must "), "{what}: {error:?}");
        let batch = format!(
            "{{\"jobs\": [{{\"queue\": \"a\"}}, {{\"queue\": \"a\", \"payload\": {payload}}}]}}"
        );
        let error = server
            .error_raw(Method::POST, "/api/jobs/batch", batch.into_bytes(), 400)
            .await;
        assert_eq!(error.field.as_deref(), Some("jobs[1].payload"), "{what}");
        // The Zaqar message post refuses them too, naming the message.
        let post = format!("{{\"messages\": [{{\"body\": 1}}, {{\"body\": {payload}}}]}}");
        let (status, answer) = zaqar(
            &server,
            Method::POST,
            "/v2/queues/q/messages",
            Some(post.into_bytes()),
        )
        .await;
        assert_eq!(status, 400, "{what}: {answer}");
        let description = answer["description"].as_str().unwrap_or_default();
        assert!(
            description.starts_with("messages[1].body must "),
            "{what}: {answer}"
        );
    }
    // What is accepted comes out byte for byte, however it was spaced.
    let exact = r#"{"b" :[1, 2.50,  "\u00e9"],"a":{ }}"#;
    let body = format!("{{\"queue\": \"exact\", \"payload\": {exact}}}");
    let (status, answer) = server
        .send_raw(Method::POST, "/api/jobs", Some(body.into_bytes()))
        .await;
    assert_eq!(status, 201, "{answer}");
    let id = answer["id"].as_u64().expect("an id");
    let raw = server
        .api
        .http()
        .get(server.api.url(&format!("/api/jobs/{id}")))
        .send()
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    assert!(raw.contains(exact), "{raw}");
    // Error details are free-form JSON too.
    server.enqueue(json!({"queue": "d"})).await;
    let job = server.take_one("d").await;
    let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
    let body = format!(
        "{{\"lease_token\": {}, \"error\": {{\"message\": \"m\", \"detail\": {deep}}}}}",
        job.lease_token
    );
    let error = server
        .error_raw(
            Method::POST,
            &format!("/api/jobs/{}/fail", job.id),
            body.into_bytes(),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("error.detail"));
    still_healthy(&server).await;
    server.restart().await;
    still_healthy(&server).await;
}

#[tokio::test]
async fn bodies_that_are_not_one_json_object_are_refused_as_the_body() {
    let server = TestServer::manual().await;
    // A valid object for each path, to which the defects are added.
    let valid = [
        ("/api/jobs", r#"{"queue":"a"}"#),
        ("/api/jobs/batch", r#"{"jobs":[{"queue":"a"}]}"#),
        ("/api/take", r#"{"queues":["a"]}"#),
        ("/api/dead/replay", r#"{"all":true}"#),
    ];
    for (path, object) in valid {
        for (body, rule) in [
            (
                format!("{object}}}"),
                "must hold one JSON object and nothing after it",
            ),
            (
                format!("{object} {object}"),
                "must hold one JSON object and nothing after it",
            ),
            ("[]".to_owned(), "must be a JSON object, got an array"),
            (r#"["a"]"#.to_owned(), "must be a JSON object, got an array"),
            ("null".to_owned(), "must be a JSON object, got null"),
            (
                object[..object.len() - 3].to_owned(),
                "must be complete JSON, but it ends early",
            ),
            (String::new(), "must be a JSON object, got nothing"),
        ] {
            let error = server
                .error_raw(Method::POST, path, body.clone().into_bytes(), 400)
                .await;
            assert_eq!(
                error.field.as_deref(),
                Some("body"),
                "{path} {body}: {error:?}"
            );
            assert!(error.message.starts_with(rule), "{path} {body}: {error:?}");
        }
    }
    // Field errors speak JSON, not Rust.
    let rule = server
        .invalid(
            "/api/jobs",
            json!({"queue": "a", "retry_limit": "x"}),
            "retry_limit",
        )
        .await;
    assert!(
        rule.contains("whole number") && !rule.contains("u32"),
        "{rule}"
    );
    let rule = server
        .invalid(
            "/api/jobs",
            json!({"queue": "a", "priority": 1e10}),
            "priority",
        )
        .await;
    assert!(!rule.contains("i32"), "{rule}");
    still_healthy(&server).await;
}

/// Reads from a raw connection until the server closes it or `within` passes; returns what it
/// read and whether it was closed.
async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    within: std::time::Duration,
) -> (String, bool) {
    use tokio::io::AsyncReadExt as _;
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut buf = [0u8; 4096];
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
        }
    }
}

#[tokio::test]
async fn slow_clients_are_cut_off_and_connections_are_limited() {
    use tokio::io::AsyncWriteExt as _;
    let server = TestServer::start(common::Options::manual().flags(&[
        "--header-read-timeout",
        "300ms",
        "--request-timeout",
        "300ms",
    ]))
    .await;
    let address = server.api.base.trim_start_matches("http://").to_owned();
    // Slowloris: headers that never finish. The server hangs up.
    let mut slow = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    slow.write_all(b"POST /api/jobs HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1\r\n")
        .await
        .expect("write");
    let (_, closed) = read_until_closed(&mut slow, std::time::Duration::from_secs(5)).await;
    assert!(
        closed,
        "a request whose headers never finish must not hold its connection"
    );
    // A body that trickles in: 408 in the API's shape, naming the body.
    let mut trickle = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    trickle
        .write_all(
            b"POST /api/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"queue\":",
        )
        .await
        .expect("write");
    let (answer, _) = read_until_closed(&mut trickle, std::time::Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""field":"body""#), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("x-request-id:"),
        "{answer}"
    );
    still_healthy(&server).await;
}

/// A handler with a bug.
async fn boom() -> &'static str {
    let items: Vec<&'static str> = Vec::new();
    // Out of bounds, as a bug would be.
    items[items.len()]
}

/// A failure answered as axum answers its own: a plain-text 500.
async fn plain_failure() -> (axum::http::StatusCode, &'static str) {
    (
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "failed to parse header value",
    )
}

/// A log writer into memory, for a test that reads what the server logged.
#[derive(Clone)]
struct Captured(Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// One thread: the server's tasks log through the test's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn a_panicking_handler_answers_500_with_a_request_id() {
    use axum::routing::get;
    let captured = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let writer = Captured(captured.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let limits = Arc::new(tenax::api::Limits {
        max_request_bytes: 1024,
        request_timeout: std::time::Duration::from_secs(5),
        max_payload_bytes: 1024,
        default_lease_ms: 1_000,
        max_lease_ms: 1_000,
    });
    let router = axum::Router::new()
        .route("/api/boom", get(boom))
        .route("/v2/boom", get(boom))
        .route("/api/fine", get(|| async { "fine" }))
        // A 500 built below the handlers, as axum's own are: plain text, logged nowhere.
        .route("/api/plain", get(plain_failure))
        .route("/ui/plain", get(plain_failure))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(tenax::api::guard::Guard {
                limits,
                metrics: Arc::new(tenax_core::metrics::Metrics::default()),
                request_log: Some(tenax::api::request_log::RequestLog::start().unwrap()),
                tracing: None,
                browser: Arc::default(),
            }),
            tenax::api::guard::guard,
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        let limits = tenax::serve::ConnectionLimits {
            header_read_timeout: std::time::Duration::from_secs(5),
            max_connections: 16,
            max_connections_per_address: 16,
            ..tenax::serve::ConnectionLimits::default()
        };
        tenax::serve::serve(listener, router, &limits, async move {
            let _ = stopped.await;
        })
        .await;
    });
    let client = tenax_net::http::client_builder()
        .build()
        .expect("an HTTP client");
    for _ in 0..3 {
        let response = client
            .get(format!("{base}/api/boom"))
            .header("x-request-id", "trace-me-1")
            .send()
            .await
            .expect("an answer, not a dropped connection");
        assert_eq!(response.status(), 500);
        assert_eq!(response.headers()["x-request-id"], "trace-me-1");
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"]["code"], "internal", "{body}");
        assert_eq!(body["error"]["request_id"], "trace-me-1", "{body}");
        let response = client
            .get(format!("{base}/v2/boom"))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 500);
        let id = response.headers()["x-request-id"]
            .to_str()
            .expect("text")
            .to_owned();
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["title"], "Internal server error", "{body}");
        assert!(
            body["description"]
                .as_str()
                .unwrap_or_default()
                .contains(&id),
            "{body}"
        );
    }
    // Every 500 carries its request id and logs its cause, whoever built it.
    for path in ["/api/plain", "/ui/plain"] {
        let response = client
            .get(format!("{base}{path}"))
            .header("x-request-id", "plain-500")
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 500);
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"]["request_id"], "plain-500", "{path}: {body}");
        assert!(
            !body.to_string().contains("failed to parse"),
            "the cause is for the log, not the client: {body}"
        );
    }
    let logged = String::from_utf8_lossy(&captured.lock()).into_owned();
    let causes: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("failed to parse header value") && l.contains("plain-500"))
        .collect();
    assert_eq!(causes.len(), 2, "{logged}");
    assert!(
        logged
            .lines()
            .any(|l| l.contains("panicked") && l.contains("trace-me-1")),
        "{logged}"
    );
    let fine = client
        .get(format!("{base}/api/fine"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(fine.status(), 200);
    let _ = stop.send(());
    serving.await.expect("the server stops");
}

#[tokio::test]
async fn transport_errors_are_in_each_apis_shape() {
    let server =
        TestServer::start(common::Options::manual().flags(&["--max-request-bytes", "2048"])).await;
    // Too large: native.
    let big = format!(
        "{{\"queue\": \"a\", \"payload\": \"{}\"}}",
        "x".repeat(4096)
    );
    let error = server
        .error_raw(Method::POST, "/api/jobs", big.clone().into_bytes(), 413)
        .await;
    assert_eq!(error.field.as_deref(), Some("body"), "{error:?}");
    // Too large: Zaqar's shape, not plain text.
    let (status, answer) = zaqar(
        &server,
        Method::POST,
        "/v2/queues/q/messages",
        Some(big.into_bytes()),
    )
    .await;
    assert_eq!(status, 413, "{answer}");
    assert!(
        answer["title"].is_string() && answer["description"].is_string(),
        "{answer}"
    );
    // A path that is not UTF-8 once decoded, on both APIs.
    let (status, answer) = server.send_raw(Method::GET, "/api/queues/%FF", None).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["field"], "path", "{answer}");
    let (status, answer) = zaqar(&server, Method::GET, "/v2/queues/%FF/stats", None).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["description"]
            .as_str()
            .unwrap_or_default()
            .contains("path"),
        "{answer}"
    );
    let (status, answer) = zaqar(
        &server,
        Method::DELETE,
        "/v2/queues/q/messages/%FF%FE",
        None,
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    // Every answer carries a request id.
    let response = server
        .api
        .http()
        .get(server.api.url("/api/stats"))
        .send()
        .await
        .expect("an answer");
    assert!(response.headers().contains_key("x-request-id"));
    still_healthy(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_announced_over_the_limit_is_refused_before_it_is_sent() {
    use http_body_util::BodyExt as _;
    use tokio::io::AsyncWriteExt as _;
    let server = TestServer::start(common::Options::manual().flags(&[
        "--max-request-bytes",
        "2048",
        // Were the server to wait for the body, it would answer 408 only after this.
        "--request-timeout",
        "1h",
    ]))
    .await;
    let address = server.api.base.trim_start_matches("http://").to_owned();
    let patience = common::PATIENCE;
    // Headers only, over HTTP/1.1: native and Zaqar shapes; with `Expect: 100-continue`, no
    // `100 Continue` first.
    for (path, extra, shape) in [
        ("/api/jobs", "", r#""field":"body""#),
        ("/api/jobs", "Expect: 100-continue\r\n", r#""field":"body""#),
        (
            "/v2/queues/q/messages",
            "Client-ID: 3381af92-2b9e-11e3-b191-71861300734c\r\n",
            "Request Entity Too Large",
        ),
    ] {
        let mut stream = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: 1000000\r\nConnection: close\r\n{extra}\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        let (answer, closed) = read_until_closed(&mut stream, patience).await;
        assert!(closed, "{path}: no answer in time: {answer}");
        assert!(answer.starts_with("HTTP/1.1 413"), "{path}: {answer}");
        assert!(answer.contains(shape), "{path}: {answer}");
    }
    // Chunked: refused once what arrived passes the limit, without waiting for the end.
    let mut stream = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    let mut chunked =
        "POST /api/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                       Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n1000\r\n"
            .to_owned();
    chunked.push_str(&"x".repeat(0x1000));
    chunked.push_str("\r\n");
    stream.write_all(chunked.as_bytes()).await.expect("write");
    let (answer, closed) = read_until_closed(&mut stream, patience).await;
    assert!(closed && answer.starts_with("HTTP/1.1 413"), "{answer}");
    // HTTP/2 (h2c): the headers announce it; the body never comes.
    let tcp = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    let never = http_body_util::StreamBody::new(futures_util::stream::pending::<
        Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>,
    >());
    let request = hyper::Request::post(format!("http://{address}/api/jobs"))
        .header("content-type", "application/json")
        .header("content-length", "1000000")
        .body(never)
        .expect("a request");
    let response = tokio::time::timeout(patience, sender.send_request(request))
        .await
        .expect("an answer in time")
        .expect("an answer");
    assert_eq!(response.status(), 413);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    let body: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(body["error"]["field"], "body", "{body}");
    still_healthy(&server).await;
}

#[tokio::test]
async fn a_replay_respects_unique_keys_and_says_why_it_skipped() {
    let mut server = TestServer::manual().await;
    let old = server
        .enqueue(json!({"queue": "u", "unique_key": "k"}))
        .await;
    let job = server.take_one("u").await;
    let dead = server
        .fail(&job, "fatal", json!({"retryable": false}))
        .await;
    assert_eq!(dead["status"], "dead");
    let new = server
        .enqueue(json!({"queue": "u", "unique_key": "k"}))
        .await;
    let answer = server
        .post("/api/dead/replay", json!({"ids": [old, new, 999_999]}))
        .await;
    assert_eq!(answer["replayed"], 0, "{answer}");
    let skipped = answer["skipped"].as_array().expect("skipped").clone();
    let reasons: Vec<(u64, String)> = skipped
        .iter()
        .map(|s| {
            (
                s["id"].as_u64().expect("an id"),
                s["reason"].as_str().expect("a reason").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            (
                old,
                format!("its unique key \"k\" is held by unfinished job {new} of its queue")
            ),
            (new, "it is ready, not dead".to_owned()),
            (999_999, "there is no such job".to_owned()),
        ]
    );
    // Still one unfinished job per key, after a restart too.
    assert_eq!(server.status(old).await, "dead");
    server.restart().await;
    let error = server
        .error(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "u", "unique_key": "k"})),
            409,
        )
        .await;
    assert!(error.message.contains(&format!("job {new}")), "{error:?}");
    // Once the key is free, the replay goes through and the key is held again.
    let job = server.take_one("u").await;
    server.complete(&job).await;
    let answer = server.post("/api/dead/replay", json!({"ids": [old]})).await;
    assert_eq!(answer["ids"], json!([old]), "{answer}");
    let error = server
        .error(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "u", "unique_key": "k"})),
            409,
        )
        .await;
    assert!(error.message.contains(&format!("job {old}")), "{error:?}");
    still_healthy(&server).await;
}

#[tokio::test]
async fn a_small_preview_request_gets_a_bounded_answer() {
    let server = TestServer::manual().await;
    // 60 bytes that once answered 13 MB.
    let policy = br#"{"type":"fixed","delay":"1s","retry_limit":100000}"#.to_vec();
    let response = server
        .api
        .http()
        .post(server.api.url("/api/policy/preview"))
        .header("content-type", "application/json")
        .body(policy.clone())
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 200);
    let bytes = response.bytes().await.expect("a body");
    assert!(bytes.len() < 20_000, "{} bytes", bytes.len());
    let answer: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(answer["retries"].as_array().map(Vec::len), Some(100));
    assert_eq!(answer["retry_count"], 100_000);
    assert_eq!(answer["truncated"], true);
    assert_eq!(answer["window_ms"], 100_000_000u64);
    // More when asked, up to a bound.
    let (status, answer) = server
        .send_raw(
            Method::POST,
            "/api/policy/preview?rows=10000",
            Some(policy.clone()),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(answer["retries"].as_array().map(Vec::len), Some(10_000));
    let error = server
        .error_raw(Method::POST, "/api/policy/preview?rows=10001", policy, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("rows"));
}

#[tokio::test]
async fn zaqar_subscribers_that_do_not_resolve_yet_are_accepted_private_ones_are_not() {
    let server = TestServer::manual().await;
    // Zaqar's own functional tests subscribe `http://fake:8080`.
    let (status, answer) = zaqar(
        &server,
        Method::POST,
        "/v2/queues/q/subscriptions",
        Some(br#"{"subscriber": "http://fake:8080", "ttl": 3600}"#.to_vec()),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert!(answer["subscription_id"].is_string(), "{answer}");
    for subscriber in [
        "http://127.0.0.1:8080",
        "http://localhost:8080/x",
        "http://[::1]/",
    ] {
        let body = format!("{{\"subscriber\": \"{subscriber}\"}}");
        let (status, answer) = zaqar(
            &server,
            Method::POST,
            "/v2/queues/q/subscriptions",
            Some(body.into_bytes()),
        )
        .await;
        assert_eq!(status, 400, "{subscriber}: {answer}");
        let description = answer["description"].as_str().unwrap_or_default();
        assert!(
            description.contains("--allow-private-endpoints"),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn the_root_answers_zaqars_version_document() {
    let server = TestServer::manual().await;
    // As Zaqar's own functional tests ask: no Zaqar headers.
    let (status, answer) = server.send_raw(Method::GET, "/", None).await;
    assert_eq!(status, 300, "{answer}");
    let versions = answer["versions"].as_array().expect("versions");
    let v2 = versions
        .iter()
        .find(|v| v["id"] == "2")
        .expect("the v2 entry");
    assert_eq!(v2["status"], "CURRENT");
    assert_eq!(v2["links"], json!([{"href": "/v2/", "rel": "self"}]));
}

#[tokio::test]
async fn what_a_batch_and_a_snooze_need() {
    let server = TestServer::manual().await;
    // `on_duplicate` is for the whole batch; in a job it would be ignored, so it is refused.
    server
        .invalid(
            "/api/jobs/batch",
            json!({"jobs": [{"queue": "a"}, {"queue": "a", "unique_key": "k", "on_duplicate": "existing"}]}),
            "jobs[1].on_duplicate",
        )
        .await;
    // A snooze is not a failure: it needs no error message; anything else does.
    server.enqueue(json!({"queue": "s"})).await;
    let job = server.take_one("s").await;
    let path = format!("/api/jobs/{}/fail", job.id);
    server
        .invalid(&path, json!({"lease_token": job.lease_token}), "error")
        .await;
    let snoozed = server
        .post(
            &path,
            json!({"lease_token": job.lease_token, "snooze": "1m"}),
        )
        .await;
    assert_eq!(
        (snoozed["status"].as_str(), snoozed["failures"].as_u64()),
        (Some("scheduled"), Some(0))
    );
    assert_eq!(server.job(job.id).await["errors"], json!([]));
}
