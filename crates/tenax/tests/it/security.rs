//! Authentication and authorisation over real HTTP: every route of both APIs against every role
//! (the table below is the specification: a route the server has and the table lacks fails the
//! test), scoped tokens held to their queues and projects, the token life cycle, the first
//! admin token, TLS with a generated certificate, and secrets that never reach a log.

use std::collections::HashSet;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Options, TestServer};
use futures_util::StreamExt as _;
use receiver::TestCa;
use reqwest::Method;
use routes::{Who, table};
use serde_json::{Value, json};

use crate::common;
use crate::common::receiver;
use crate::common::routes;

const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";
const CLIENT_ID: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";

/// A request to `route` with its parameters filled in, a body for the methods that take one,
/// and Zaqar's headers under `/v2`.
fn request(
    http: &reqwest::Client,
    base: &str,
    method: &str,
    route: &str,
    token: Option<&str>,
) -> reqwest::RequestBuilder {
    // Ids of nothing: an allowed request gets 404, and none changes anything (revoking token 1,
    // say, would lock out a role the test goes on to try).
    let path = route
        .replace("{id}", "999999")
        .replace("{name}", "q")
        .replace("{queue_name}", "q")
        .replace("{topic_name}", "t")
        .replace("{message_id}", "999999")
        .replace("{claim_id}", "a")
        .replace("{subscription_id}", "999999")
        .replace("{*rest}", "nothing/here");
    let method = Method::from_bytes(method.as_bytes()).expect("a method");
    let mut request = http.request(method.clone(), format!("{base}{path}"));
    if path.starts_with("/v2") {
        request = request
            .header("Client-ID", CLIENT_ID)
            .header("X-Project-ID", "p");
    }
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    if [Method::POST, Method::PUT, Method::PATCH].contains(&method) {
        request = request
            .header("Content-Type", "application/json")
            .body("{}");
    }
    request
}

async fn make_token(server: &TestServer, role: &str, extra: Value) -> String {
    let mut body = json!({"name": format!("{role} for the test"), "role": role});
    if let Value::Object(fields) = extra {
        for (k, v) in fields {
            body[k] = v;
        }
    }
    server.api.make_token(ADMIN, &body).await
}

async fn secured() -> TestServer {
    TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_against_every_role() {
    let server = secured().await;
    let routes: HashSet<(String, String)> = tenax::api::all_routes()
        .into_iter()
        .map(|(m, r)| (m.to_string(), r))
        .collect();
    let table = table();
    let specified: HashSet<(String, String)> = table
        .keys()
        .map(|(m, r)| ((*m).to_owned(), (*r).to_owned()))
        .collect();
    let missing: Vec<_> = routes.difference(&specified).collect();
    assert!(
        missing.is_empty(),
        "routes without a line in this test's table (say who may call them): {missing:?}"
    );
    let stale: Vec<_> = specified
        .difference(&routes)
        .filter(|(m, _)| m != "HEAD")
        .collect();
    assert!(
        stale.is_empty(),
        "the table names routes the server does not have: {stale:?}"
    );

    let mut tokens = vec![("admin", ADMIN.to_owned())];
    for role in ["producer", "worker", "reader"] {
        tokens.push((role, make_token(&server, role, json!({})).await));
    }
    let http = server.api.http().clone();
    let base = server.api.base.clone();
    let mut failures = Vec::new();
    for ((method, route), who) in &table {
        let check = |status: u16, allowed: bool, as_who: &str| {
            let denied = status == 401 || status == 403;
            (allowed == denied)
                .then(|| format!("{method} {route} as {as_who}: {status} (allowed: {allowed})"))
        };
        // Without a token, and with one that is not valid.
        for (as_who, token) in [("no token", None), ("a bad token", Some("tnx_not-a-token"))] {
            let response = request(&http, &base, method, route, token)
                .send()
                .await
                .expect("an answer");
            let status = response.status().as_u16();
            let public = *who == Who::Public;
            failures.extend(check(status, public, as_who));
            if !public && status == 401 && !route.starts_with("/v2") {
                let body: Value = response.json().await.unwrap_or(Value::Null);
                if body["error"]["code"] != "unauthorized" {
                    failures.push(format!(
                        "{method} {route}: 401 without the native shape: {body}"
                    ));
                }
            }
        }
        for (role, token) in &tokens {
            let response = request(&http, &base, method, route, Some(token))
                .send()
                .await
                .expect("an answer");
            let status = response.status().as_u16();
            failures.extend(check(status, who.admits(role), role));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Zaqar's own header carries the same tokens.
    let response = http
        .get(format!("{base}/v2/queues"))
        .header("Client-ID", CLIENT_ID)
        .header("X-Project-ID", "p")
        .header("X-Auth-Token", &tokens[3].1)
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 200);
}

/// A schedule belongs to the queue of its job: a scoped token makes, reads and changes only
/// those of its queues, cannot take over another team's by name, and lists only its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_tokens_manage_only_their_schedules() {
    let server = secured().await;
    let http = server.api.http().clone();
    let scoped = make_token(&server, "admin", json!({"queues": ["team-a.*"]})).await;
    let send = |method: Method, path: &str, token: &str, body: Option<Value>| {
        let mut request = http
            .request(method, server.api.url(path))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move { request.send().await.expect("an answer").status().as_u16() }
    };
    let of = |queue: &str| Some(json!({"cron": "@daily", "job": {"queue": queue}}));
    assert_eq!(
        send(Method::PUT, "/api/schedules/a", &scoped, of("team-a.x")).await,
        201
    );
    assert_eq!(
        send(Method::PUT, "/api/schedules/b", &scoped, of("team-b.x")).await,
        403
    );
    assert_eq!(
        send(Method::PUT, "/api/schedules/theirs", ADMIN, of("team-b.x")).await,
        201
    );
    // Not by replacing it with a job of its own queue either.
    assert_eq!(
        send(
            Method::PUT,
            "/api/schedules/theirs",
            &scoped,
            of("team-a.y")
        )
        .await,
        403
    );
    for (method, path) in [
        (Method::GET, "/api/schedules/theirs"),
        (Method::GET, "/api/schedules/theirs/ticks"),
        (Method::DELETE, "/api/schedules/theirs"),
        (Method::POST, "/api/schedules/theirs/pause"),
        (Method::POST, "/api/schedules/theirs/resume"),
    ] {
        assert_eq!(
            send(method.clone(), path, &scoped, None).await,
            403,
            "{method} {path}"
        );
    }
    assert_eq!(
        send(Method::GET, "/api/schedules/a", &scoped, None).await,
        200
    );
    let listed: Value = http
        .get(server.api.url("/api/schedules"))
        .bearer_auth(&scoped)
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    let names: Vec<&str> = listed["schedules"]
        .as_array()
        .expect("schedules")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["a"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_tokens_stay_in_their_queues_and_projects() {
    let server = secured().await;
    let http = server.api.http().clone();
    let url = |path: &str| server.api.url(path);
    let producer = make_token(&server, "producer", json!({"queues": ["team-a.*"]})).await;
    let worker = make_token(&server, "worker", json!({"queues": ["team-a.*"]})).await;
    let zaqar = make_token(&server, "admin", json!({"projects": ["alpha"]})).await;
    let send = |method: Method, path: &str, token: &str, body: Option<Value>| {
        let mut request = http.request(method, url(path)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let status = |r: reqwest::Response| r.status().as_u16();

    let answer = send(
        Method::POST,
        "/api/jobs",
        &producer,
        Some(json!({"queue": "team-a.mail"})),
    )
    .await
    .expect("an answer");
    assert_eq!(answer.status(), 201);
    let a: Value = answer.json().await.expect("JSON");
    let response = send(
        Method::POST,
        "/api/jobs",
        &producer,
        Some(json!({"queue": "team-b.mail"})),
    )
    .await
    .expect("an answer");
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.expect("JSON");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("team-b.mail"),
        "{body}"
    );
    let batch = json!({"jobs": [{"queue": "team-a.x"}, {"queue": "elsewhere"}]});
    assert_eq!(
        status(
            send(Method::POST, "/api/jobs/batch", &producer, Some(batch))
                .await
                .expect("answer")
        ),
        403
    );
    // The admin puts a job in another team's queue.
    server
        .api
        .http()
        .post(url("/api/jobs"))
        .bearer_auth(ADMIN)
        .json(&json!({"queue": "team-b.mail"}))
        .send()
        .await
        .expect("an answer");
    // Listing needs a queue in scope; stats show only the scope.
    assert_eq!(
        status(
            send(Method::GET, "/api/jobs", &producer, None)
                .await
                .expect("answer")
        ),
        403
    );
    assert_eq!(
        status(
            send(Method::GET, "/api/jobs?queue=team-b.mail", &producer, None)
                .await
                .expect("answer")
        ),
        403
    );
    assert_eq!(
        status(
            send(Method::GET, "/api/jobs?queue=team-a.mail", &producer, None)
                .await
                .expect("answer")
        ),
        200
    );
    let stats: Value = send(Method::GET, "/api/stats", &producer, None)
        .await
        .expect("answer")
        .json()
        .await
        .expect("JSON");
    let queues: Vec<&str> = stats["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["queue"].as_str())
        .collect();
    assert_eq!(queues, ["team-a.mail"], "{stats}");
    // A worker takes only from its queues, and acts only on their jobs.
    let take = |queue: &str| json!({"queues": [queue]});
    assert_eq!(
        status(
            send(
                Method::POST,
                "/api/take",
                &worker,
                Some(take("team-b.mail"))
            )
            .await
            .expect("answer")
        ),
        403
    );
    let taken: Value = send(
        Method::POST,
        "/api/take",
        &worker,
        Some(take("team-a.mail")),
    )
    .await
    .expect("answer")
    .json()
    .await
    .expect("JSON");
    assert_eq!(taken["jobs"][0]["id"], a["id"]);
    let other_job = 2;
    let complete = json!({"lease_token": 1});
    assert_eq!(
        status(
            send(
                Method::POST,
                &format!("/api/jobs/{other_job}/complete"),
                &worker,
                Some(complete)
            )
            .await
            .expect("answer")
        ),
        403
    );
    // Zaqar: a token scoped to project alpha acts for alpha only.
    let zaqar_get = |project: &'static str, token: String| {
        http.get(url("/v2/queues"))
            .header("Client-ID", CLIENT_ID)
            .header("X-Project-ID", project)
            .header("X-Auth-Token", token)
            .send()
    };
    assert_eq!(
        zaqar_get("alpha", zaqar.clone())
            .await
            .expect("answer")
            .status(),
        200
    );
    let response = zaqar_get("beta", zaqar.clone()).await.expect("answer");
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["title"], "Forbidden", "{body}");
    // A scoped admin cannot make tokens (it could make itself an unscoped one).
    assert_eq!(
        status(
            send(Method::GET, "/api/tokens", &zaqar, None)
                .await
                .expect("answer")
        ),
        403
    );
}

/// Revoking a token ends what it holds open at once: its stream closes and gives its leased
/// job back, its long poll is answered 401, and neither gets the jobs enqueued after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_ends_its_streams_and_long_polls() {
    let server = secured().await;
    let http = server.api.http().clone();
    let url = |path: &str| server.api.url(path);
    let made: Value = http
        .post(url("/api/tokens"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "worker", "role": "worker"}))
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    let (worker, id) = (
        made["token"].as_str().expect("a token").to_owned(),
        made["id"].as_u64().expect("an id"),
    );
    let enqueue = |queue: &'static str| {
        http.post(url("/api/jobs"))
            .bearer_auth(ADMIN)
            .json(&json!({"queue": queue}))
            .send()
    };
    let waiting = || async {
        let text = http
            .get(url("/metrics"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("an answer")
            .text()
            .await
            .expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix("tenax_http_takes_waiting "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };

    // A stream that holds one job, and a long poll on an empty queue.
    let response = http
        .post(url("/api/take/stream"))
        .bearer_auth(&worker)
        .json(&json!({"queues": ["rq"]}))
        .send()
        .await
        .expect("a stream");
    assert_eq!(response.status(), 200);
    let mut stream = Box::pin(response.bytes_stream());
    let first: Value = enqueue("rq")
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    let mut lines = String::new();
    let held = loop {
        let chunk = tokio::time::timeout(common::PATIENCE, stream.next())
            .await
            .expect("the stream sends the job")
            .expect("the stream is open")
            .expect("bytes");
        lines.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(line) = lines.lines().find(|l| !l.trim().is_empty()) {
            break serde_json::from_str::<Value>(line).expect("a job");
        }
    };
    assert_eq!(held["id"], first["id"]);
    let long_poll = tokio::spawn({
        let (http, url, worker) = (http.clone(), url("/api/take"), worker.clone());
        async move {
            http.post(url)
                .bearer_auth(&worker)
                .json(&json!({"queues": ["lp"], "wait": "60s"}))
                .send()
                .await
                .expect("an answer")
                .status()
        }
    });
    // Both wait for a job (the gauge counts them): then the token goes.
    let deadline = Instant::now() + common::PATIENCE;
    while waiting().await < 2 {
        assert!(
            Instant::now() < deadline,
            "the stream and the long poll never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let revoked = http
        .delete(url(&format!("/api/tokens/{id}")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("an answer");
    assert_eq!(revoked.status(), 204);

    // Well before its 60 s wait is over, the long poll is refused; the stream ends.
    let status = tokio::time::timeout(common::PATIENCE, long_poll)
        .await
        .expect("the long poll ends at once")
        .expect("the task");
    assert_eq!(status, 401);
    loop {
        match tokio::time::timeout(common::PATIENCE, stream.next())
            .await
            .expect("the stream ends at once")
        {
            None | Some(Err(_)) => break,
            Some(Ok(chunk)) => assert!(
                chunk.iter().all(|b| *b == b'\n'),
                "a revoked stream sent {chunk:?}"
            ),
        }
    }
    // Jobs enqueued now go to nobody; the stream's job is ready again.
    for queue in ["rq", "rq", "lp"] {
        assert_eq!(enqueue(queue).await.expect("an answer").status(), 201);
    }
    let take = |queue: &'static str| {
        http.post(url("/api/take"))
            .bearer_auth(ADMIN)
            .json(&json!({"queues": [queue], "max": 10, "wait": "5s"}))
            .send()
    };
    let mut ids = Vec::new();
    while ids.len() < 3 {
        let taken: Value = take("rq")
            .await
            .expect("an answer")
            .json()
            .await
            .expect("JSON");
        ids.extend(common::ids(&taken["jobs"]));
    }
    assert!(
        ids.contains(&held["id"].as_u64().expect("an id")),
        "{ids:?}"
    );
    let taken: Value = take("lp")
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    assert_eq!(common::ids(&taken["jobs"]).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_shown_once_listed_without_secret_and_revoked() {
    let mut server = secured().await;
    let http = server.api.http().clone();
    let response = http
        .post(server.api.url("/api/tokens"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "ci", "role": "reader", "queues": ["p1:a.*"], "projects": ["p1"]}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), 201);
    let made: Value = response.json().await.expect("JSON");
    let token = made["token"].as_str().expect("a token").to_owned();
    assert!(token.starts_with("tnx_") && token.len() >= 47, "{token}");
    let id = made["id"].as_u64().expect("an id");
    assert_eq!(made["role"], "reader");
    // Used, then listed: no secret, a last use.
    let used = http
        .get(server.api.url("/api/jobs?queue=p1:a.x"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("an answer");
    assert_eq!(used.status(), 200);
    let listed = || async {
        http.get(server.api.url("/api/tokens"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("an answer")
            .text()
            .await
            .expect("text")
    };
    let text = listed().await;
    assert!(!text.contains(&token), "a listing shows a token: {text}");
    let list: Value = serde_json::from_str(&text).expect("JSON");
    let entry = list["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .find(|t| t["id"] == id)
        .expect("the new token is listed")
        .clone();
    assert!(
        entry.get("token").is_none() && entry.get("hash").is_none(),
        "{entry}"
    );
    assert_eq!(entry["queues"], json!(["p1:a.*"]));
    assert!(entry["last_used_at"].is_string(), "{entry}");
    // Bad requests name the field.
    for (body, field) in [
        (json!({"name": "", "role": "reader"}), "name"),
        (json!({"name": "x", "role": "root"}), "role"),
        (
            json!({"name": "x", "role": "reader", "queues": ["bad name"]}),
            "queues[0]",
        ),
    ] {
        let response = http
            .post(server.api.url("/api/tokens"))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.expect("JSON");
        assert_eq!(error["error"]["field"], field, "{error}");
    }
    // Tokens survive a restart; a revoked one is refused at once.
    server.restart().await;
    let http = server.api.http().clone();
    let get = |token: String| {
        http.get(server.api.url("/api/jobs?queue=p1:a.x"))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(get(token.clone()).await.expect("answer").status(), 200);
    let revoked = http
        .delete(server.api.url(&format!("/api/tokens/{id}")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("an answer");
    assert_eq!(revoked.status(), 204);
    assert_eq!(get(token).await.expect("answer").status(), 401);
}

/// A `tenax serve` child process, killed when dropped, with its standard error in a file.
struct Child {
    child: std::process::Child,
    base: String,
    log: std::path::PathBuf,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Child {
    fn start(data: &std::path::Path, args: &[&str], scheme: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = data.join("server.log");
        let stderr = std::fs::File::create(&log).expect("the log file");
        let child = Command::new(env!("CARGO_BIN_EXE_tenax"))
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data.join("store"))
            .args(args)
            .env("TENAX_LOG", "debug")
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("tenax serve starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            base: format!("{scheme}://127.0.0.1:{port}"),
            log,
        }
    }

    fn log(&self) -> String {
        let file = std::fs::File::open(&self.log).expect("the log");
        BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_makes_an_admin_token_in_a_private_file() {
    let dir = tempfile::tempdir().expect("a directory");
    let server = Child::start(dir.path(), &["--auth", "on"], "http");
    let file = dir.path().join("store").join("admin-token");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !file.exists() {
        assert!(Instant::now() < deadline, "no admin-token file");
        std::thread::sleep(Duration::from_millis(20));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let token = std::fs::read_to_string(&file)
        .expect("the token")
        .trim()
        .to_owned();
    let http = tenax_net::http::client_builder().build().expect("a client");
    let without = http
        .get(format!("{}/api/stats", server.base))
        .send()
        .await
        .expect("an answer");
    assert_eq!(without.status(), 401);
    let with = http
        .get(format!("{}/api/tokens", server.base))
        .bearer_auth(&token)
        .send()
        .await
        .expect("an answer");
    assert_eq!(with.status(), 200);
    let log = server.log();
    assert!(log.contains("admin-token"), "the log names the file: {log}");
    assert!(!log.contains(&token), "the log shows the token");
    // The CLI takes the token too.
    let output = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(["tokens", "list", "--url", &server.base])
        .env("TENAX_TOKEN", &token)
        .output()
        .expect("tenax runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("first start"));
    let output = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(["stats", "--url", &server.base])
        .env_remove("TENAX_TOKEN")
        .output()
        .expect("tenax runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_speaks_tls_with_a_generated_certificate() {
    let dir = tempfile::tempdir().expect("a directory");
    let ca = TestCa::new("tenax api test ca");
    let ca_file = ca.write_pem(dir.path(), "ca.pem");
    let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"]).write_pem(dir.path());
    let server = Child::start(
        dir.path(),
        &[
            "--tls-cert",
            cert.to_str().expect("a path"),
            "--tls-key",
            key.to_str().expect("a path"),
        ],
        "https",
    );
    let pem = std::fs::read(&ca_file).expect("the CA");
    let trusting = || {
        tenax_net::http::client_builder()
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(&pem).expect("PEM"))
    };
    // HTTP/1.1 and HTTP/2, chosen by ALPN.
    for (client, version) in [
        (
            trusting().http1_only().build().expect("a client"),
            reqwest::Version::HTTP_11,
        ),
        (
            trusting().build().expect("a client"),
            reqwest::Version::HTTP_2,
        ),
    ] {
        let response = client
            .get(format!("{}/healthz", server.base))
            .send()
            .await
            .expect("an https answer");
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), version);
    }
    // A client that does not trust the CA is refused at the handshake; plain http gets nothing.
    let untrusting = tenax_net::http::client_builder()
        .tls_certs_only([])
        .build()
        .expect("a client");
    assert!(
        untrusting
            .get(format!("{}/healthz", server.base))
            .send()
            .await
            .is_err()
    );
    let plain = server.base.replace("https://", "http://");
    let served_plain = tenax_net::http::client_builder()
        .timeout(Duration::from_secs(3))
        .build()
        .expect("a client")
        .get(format!("{plain}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    assert!(!served_plain, "a TLS listener answered plain http");
    // The CLI over https with --ca-file.
    let output = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(["enqueue", "-q", "tls", "--url", &server.base])
        .arg("--ca-file")
        .arg(&ca_file)
        .output()
        .expect("tenax runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_and_tokens_never_reach_the_log() {
    let dir = tempfile::tempdir().expect("a directory");
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const HEADER: &str = "Bearer very-secret-header-value";
    let server = Child::start(
        dir.path(),
        &[
            "--auth",
            "on",
            "--admin-token",
            ADMIN,
            "--allow-private-endpoints",
            "--log-format",
            "json",
        ],
        "http",
    );
    let http = tenax_net::http::client_builder().build().expect("a client");
    let post = |path: &str, body: Value| {
        http.post(format!("{}{path}", server.base))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
    };
    let made: Value = post("/api/tokens", json!({"name": "w", "role": "reader"}))
        .await
        .expect("an answer")
        .json()
        .await
        .expect("JSON");
    let token = made["token"].as_str().expect("a token").to_owned();
    let sub: Value = post(
        "/api/queues/q/subscriptions",
        json!({"endpoint": "http://127.0.0.1:9/hook", "secret": SECRET,
               "headers": {"Authorization": HEADER}}),
    )
    .await
    .expect("an answer")
    .json()
    .await
    .expect("JSON");
    let sub = sub["id"].as_u64().expect("an id");
    post("/api/jobs", json!({"queue": "q"}))
        .await
        .expect("an answer");
    // The reader token is used once, so that it passes through the server.
    let used = http
        .get(format!("{}/api/stats", server.base))
        .bearer_auth(&token)
        .send()
        .await
        .expect("an answer");
    assert_eq!(used.status(), 200);
    post(
        &format!("/api/subscriptions/{sub}/rotate-secret"),
        json!({}),
    )
    .await
    .expect("an answer");
    // A delivery fails (nothing listens on port 9) and is logged; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let shown: Value = http
            .get(format!("{}/api/subscriptions/{sub}", server.base))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("an answer")
            .json()
            .await
            .expect("JSON");
        if shown["health"]["consecutive_failures"]
            .as_u64()
            .unwrap_or(0)
            > 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "no delivery attempt: {shown}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = server.log();
    assert!(log.contains("request"), "the log has request events: {log}");
    for secret in [SECRET, HEADER, "very-secret", ADMIN, token.as_str()] {
        assert!(!log.contains(secret), "the log holds {secret:?}");
    }
}
