//! Input that once broke the server for everyone, each tried over real HTTP: every one now gets a
//! clear 4xx that names the field and the rule (or the documented behaviour), and the server
//! stays healthy for everyone else afterwards, across a restart.

mod common;

use common::TestServer;
use reqwest::Method;
use serde_json::{Value, json};

const CLIENT: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";

/// The server still answers every read that shows jobs, and enqueues and takes as before.
async fn still_healthy(server: &TestServer) {
    let id = server
        .enqueue(json!({"queue": "health", "payload": {"still": "fine"}}))
        .await;
    let job = server.job(id).await;
    assert_eq!(job["payload"], json!({"still": "fine"}));
    for path in ["/api/jobs", "/api/jobs?queue=a", "/api/dead", "/api/stats", "/api/queues"] {
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
    assert!(rule.starts_with("must be at most 100 years from now"), "{rule}");
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
        ("nesting", format!("{}1{}", "[".repeat(200), "]".repeat(200))),
        ("nesting past 64", format!("{}1{}", "[".repeat(65), "]".repeat(65))),
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
        let batch = format!("{{\"jobs\": [{{\"queue\": \"a\"}}, {{\"queue\": \"a\", \"payload\": {payload}}}]}}");
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
            (format!("{object}}}"), "must hold one JSON object and nothing after it"),
            (format!("{object} {object}"), "must hold one JSON object and nothing after it"),
            ("[]".to_owned(), "must be a JSON object, got an array"),
            (r#"["a"]"#.to_owned(), "must be a JSON object, got an array"),
            ("null".to_owned(), "must be a JSON object, got null"),
            (object[..object.len() - 3].to_owned(), "must be complete JSON, but it ends early"),
            (String::new(), "must be a JSON object, got nothing"),
        ] {
            let error = server
                .error_raw(Method::POST, path, body.clone().into_bytes(), 400)
                .await;
            assert_eq!(error.field.as_deref(), Some("body"), "{path} {body}: {error:?}");
            assert!(error.message.starts_with(rule), "{path} {body}: {error:?}");
        }
    }
    // Field errors speak JSON, not Rust.
    let rule = server
        .invalid("/api/jobs", json!({"queue": "a", "retry_limit": "x"}), "retry_limit")
        .await;
    assert!(rule.contains("whole number") && !rule.contains("u32"), "{rule}");
    let rule = server
        .invalid("/api/jobs", json!({"queue": "a", "priority": 1e10}), "priority")
        .await;
    assert!(!rule.contains("i32"), "{rule}");
    still_healthy(&server).await;
}
