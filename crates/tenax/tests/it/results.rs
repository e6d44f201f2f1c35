//! Job results (issue 30), end to end on the real server and the real store (embedded, or
//! PostgreSQL with `TENAX_TEST_STORE=postgres`): a completion may carry a `result`, kept with
//! the completed job and shown again byte for byte by a read and a listing; one over the
//! payload limit is refused naming it; `GET /api/jobs/{id}?wait=` answers when the job
//! finishes, or as it is when the wait ends; an encrypted queue's results are nowhere in clear
//! in the store.

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Options, PATIENCE, TestServer};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common;

/// `GET path`'s status and text, as the server wrote it.
async fn get_text(server: &TestServer, path: &str) -> (u16, String) {
    let response = server
        .api
        .http()
        .get(server.api.url(path))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// `POST path` with a raw JSON body, expecting 200.
async fn post_raw(server: &TestServer, path: &str, body: &str) -> Value {
    let (status, answer) = server
        .api
        .send_raw(Method::POST, path, Some(body.as_bytes().to_vec()))
        .await;
    assert_eq!(status.as_u16(), 200, "POST {path} {body}: {answer}");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_keep_results_and_show_them_byte_for_byte() {
    let server = TestServer::manual().await;
    for _ in 0..4 {
        server
            .enqueue(json!({"queue": "q", "type": "sum", "payload": {"a": 1}}))
            .await;
    }
    let taken = server.take(&["q"], 4).await;
    assert_eq!(taken.len(), 4);
    // Spacing, key order and number spelling are the worker's, and come back as they went.
    let result = r#"{ "sum": 3.50, "by":"w1" ,"parts": [1, 2.5e0] }"#;
    let answer = post_raw(
        &server,
        &format!("/api/jobs/{}/complete", taken[0].id),
        &format!(
            r#"{{"lease_token": {}, "result": {result}}}"#,
            taken[0].lease_token
        ),
    )
    .await;
    assert_eq!(answer["status"], "completed", "{answer}");
    // A batch: a result, none, a plain string.
    let batch = format!(
        r#"{{"jobs": [
            {{"id": {}, "lease_token": {}, "result": [ 1,2 ]}},
            {{"id": {}, "lease_token": {}}},
            {{"id": {}, "lease_token": {}, "result": "done"}}
        ]}}"#,
        taken[1].id,
        taken[1].lease_token,
        taken[2].id,
        taken[2].lease_token,
        taken[3].id,
        taken[3].lease_token
    );
    let answer = post_raw(&server, "/api/jobs/complete", &batch).await;
    let completed: Vec<bool> = answer["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["completed"] == json!(true))
        .collect();
    assert_eq!(completed, [true, true, true], "{answer}");

    let (status, text) = get_text(&server, &format!("/api/jobs/{}", taken[0].id)).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains(&format!(r#""result":{result}"#)),
        "the result byte for byte: {text}"
    );
    let (_, text) = get_text(&server, &format!("/api/jobs/{}", taken[1].id)).await;
    assert!(text.contains(r#""result":[ 1,2 ]"#), "{text}");
    let shown = server.job(taken[2].id).await;
    assert!(
        shown.get("result").is_none(),
        "no result, no field: {shown}"
    );
    assert_eq!(server.job(taken[3].id).await["result"], json!("done"));

    // The listing shows them too.
    let (_, text) = get_text(&server, "/api/jobs?queue=q&status=completed").await;
    assert!(text.contains(&format!(r#""result":{result}"#)), "{text}");
    let listed = server.get("/api/jobs?queue=q&status=completed").await;
    let results: Vec<&Value> = listed["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| &j["result"])
        .collect();
    assert_eq!(
        results,
        [
            &json!({"sum": 3.5, "by": "w1", "parts": [1, 2.5]}),
            &json!([1, 2]),
            &Value::Null,
            &json!("done")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_over_the_payload_limit_are_refused_naming_them() {
    let server = TestServer::start(Options::manual().flags(&["--max-payload-bytes", "64"])).await;
    server.enqueue(json!({"queue": "q", "type": "t"})).await;
    server.enqueue(json!({"queue": "q", "type": "t"})).await;
    let taken = server.take(&["q"], 2).await;
    let big = json!({"text": "x".repeat(100)});
    let message = server
        .api
        .invalid(
            &format!("/api/jobs/{}/complete", taken[0].id),
            json!({"lease_token": taken[0].lease_token, "result": big}),
            "result",
        )
        .await;
    assert!(
        message.contains("--max-payload-bytes") && message.contains("64"),
        "the rule: {message}"
    );
    let message = server
        .api
        .invalid(
            "/api/jobs/complete",
            json!({"jobs": [
                {"id": taken[0].id, "lease_token": taken[0].lease_token, "result": 1},
                {"id": taken[1].id, "lease_token": taken[1].lease_token, "result": big},
            ]}),
            "jobs[1].result",
        )
        .await;
    assert!(message.contains("--max-payload-bytes"), "{message}");
    // Refused as a whole: nothing completed.
    for job in &taken {
        assert_eq!(server.status(job.id).await, "in_flight");
    }
    // At the limit is fine.
    let at_limit = json!({"text": "x".repeat(64 - 11)});
    assert_eq!(at_limit.to_string().len(), 64);
    server
        .post(
            &format!("/api/jobs/{}/complete", taken[0].id),
            json!({"lease_token": taken[0].lease_token, "result": at_limit}),
        )
        .await;
    assert_eq!(server.job(taken[0].id).await["result"], at_limit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_a_job_answers_when_it_finishes_or_when_the_wait_ends() {
    let server = TestServer::manual().await;
    let id = server.enqueue(json!({"queue": "q", "type": "t"})).await;
    let job = server.take_one("q").await;

    // Unfinished when the wait's own bound ends: shown as it is.
    let started = Instant::now();
    let shown = server.get(&format!("/api/jobs/{id}?wait=1s")).await;
    assert_eq!(shown["status"], "in_flight", "{shown}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "it waited its second"
    );

    // Waiting first, then completed: the wait answers with the result, long before its end.
    let waiting = {
        let api = server.api.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let shown = api.get(&format!("/api/jobs/{id}?wait=30s")).await;
            (shown, started.elapsed())
        })
    };
    server
        .post(
            &format!("/api/jobs/{id}/complete"),
            json!({"lease_token": job.lease_token, "result": {"ok": true}}),
        )
        .await;
    let (shown, took) = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the wait answers")
        .expect("the waiter does not panic");
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["result"], json!({"ok": true}));
    assert!(
        took < Duration::from_secs(20),
        "woken, not timed out: {took:?}"
    );

    // A finished job is answered at once; a dead one too.
    let shown = server.get(&format!("/api/jobs/{id}?wait=60s")).await;
    assert_eq!(shown["result"], json!({"ok": true}));
    let other = server.enqueue(json!({"queue": "q", "type": "t"})).await;
    let job = server.take_one("q").await;
    let waiting = {
        let api = server.api.clone();
        tokio::spawn(async move { api.get(&format!("/api/jobs/{other}?wait=30s")).await })
    };
    server
        .fail(&job, "broken", json!({"retryable": false}))
        .await;
    let shown = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("the wait answers")
        .expect("the waiter does not panic");
    assert_eq!(shown["status"], "dead", "{shown}");
    assert!(shown.get("result").is_none(), "{shown}");

    // The bound, and a job that does not exist.
    let error = server
        .api
        .error(Method::GET, &format!("/api/jobs/{id}?wait=61s"), None, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("wait"), "{error:?}");
    assert!(error.message.contains("60000"), "{error:?}");
    let error = server
        .api
        .error(Method::GET, &format!("/api/jobs/{id}?wait=soon"), None, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("wait"), "{error:?}");
    server
        .api
        .error(Method::GET, "/api/jobs/999999?wait=1s", None, 404)
        .await;
}

/// Texts that must never be in the store in clear, and one that must (so the scan can fail).
const SECRET: &str = "result-canary-5e0b8d27c4";
const PLAIN_TEXT: &str = "plain-result-canary-93a1f6";

/// A server with, on PostgreSQL, a key file of its own.
async fn encrypting_server(key_dir: &Path) -> TestServer {
    let mut flags = Vec::new();
    if common::on_postgres() {
        let key = key_dir.join("secrets.key");
        tenax_core::secrets::Keyring::generate("test")
            .and_then(|keys| keys.write_file(&key))
            .expect("a key file");
        flags.extend(["--secrets-key-file".to_owned(), key.display().to_string()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    TestServer::start(Options::manual().flags(&flags)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_queues_results_are_not_in_the_store() {
    let keys = tempfile::tempdir().expect("a directory");
    let mut server = encrypting_server(keys.path()).await;
    server
        .put(
            "/api/queues/secret?create=true",
            json!({"encrypt_payloads": true}),
        )
        .await;
    let sealed = server
        .enqueue(json!({"queue": "secret", "type": "card", "payload": {"n": 1}}))
        .await;
    let plain = server
        .enqueue(json!({"queue": "plain", "type": "note", "payload": {"n": 2}}))
        .await;
    for (queue, text) in [("secret", SECRET), ("plain", PLAIN_TEXT)] {
        let job = server.take_one(queue).await;
        server
            .post(
                &format!("/api/jobs/{}/complete", job.id),
                json!({"lease_token": job.lease_token, "result": {"token": text}}),
            )
            .await;
    }
    assert_eq!(
        server.job(sealed).await["result"],
        json!({"token": SECRET}),
        "read back plain"
    );
    let listed = server.get("/api/jobs?queue=secret").await.to_string();
    assert!(listed.contains(SECRET), "the listing: {listed}");
    assert_eq!(
        server.job(plain).await["result"],
        json!({"token": PLAIN_TEXT})
    );

    let copy = server.store_copy().await;
    assert!(copy.contains(PLAIN_TEXT), "the scan finds a plain result");
    assert!(!copy.contains(SECRET), "the sealed result is not in clear");
    // And still read back after a restart.
    assert_eq!(server.job(sealed).await["result"], json!({"token": SECRET}));
}
