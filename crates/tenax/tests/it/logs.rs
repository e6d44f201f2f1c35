//! What `tenax serve` writes to its log, read from a file as an operator's would be: the real
//! binary, its stderr redirected to a file (so not a terminal), in the text and JSON formats.
//!
//! Checked: no colour codes; the start-up line states the address, store, durability, auth,
//! default policies and private-endpoint mode as the flags spell them; one line per request
//! with method, route template, status, latency and request id (none with `--log-requests
//! false`), dropped and counted rather than waited for when stderr is blocked; dead jobs, dead deliveries and a subscription disabled automatically at warn; no
//! Rust debug forms (`Some(…)`, `Sync`).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use receiver::{Receiver, Reply};
use serde_json::{Value, json};

use crate::common::ports;
use crate::common::receiver;

const PATIENCE: Duration = Duration::from_secs(15);

/// The binary, serving on a free loopback port with its stderr in `log`; killed when dropped.
struct Served {
    child: Child,
    base: String,
    port: u16,
    log: PathBuf,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Served {
    async fn start(format: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let port = ports::spare_port();
        // Everything that can fail comes before the spawn: from there on, `Served` owns the
        // process and kills it when dropped, whatever panics.
        let http = tenax_net::http::client_builder().build().unwrap();
        let stderr = File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_tenax"))
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--log-format", format, "--allow-private-endpoints"])
            .args(extra)
            .env("TENAX_LOG", "info")
            .env_remove("TENAX_LOG_REQUESTS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap();
        let served = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            log,
            http,
            _dir: dir,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let up = served.http.get(served.url("/healthz")).send().await;
            if up.is_ok_and(|r| r.status() == 200) {
                return served;
            }
            assert!(Instant::now() < deadline, "no start:\n{}", served.text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let answer = self
            .http
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
        answer.json().await.unwrap()
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }

    /// Waits until the log has a line containing each of `needles`.
    async fn wait_for_line(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self.text();
            if let Some(line) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
                return line.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "no line with {needles:?}:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A job that dies (no retry allowed), a delivery that dies (the endpoint answers 410,
    /// which is not retried), and a subscription whose endpoint keeps failing until it is
    /// disabled.
    async fn workload(&self, gone: &Receiver, failing: &Receiver) {
        self.post(
            "/api/jobs",
            json!({"queue": "mail", "type": "welcome", "payload": {},
                   "policy": {"type": "fixed", "delay": "1s", "retry_limit": 0}}),
        )
        .await;
        let taken = self.post("/api/take", json!({"queues": ["mail"]})).await;
        let job = &taken["jobs"][0];
        self.post(
            &format!("/api/jobs/{}/fail", job["id"]),
            json!({"lease_token": job["lease_token"], "error": "SMTP said no"}),
        )
        .await;
        self.post(
            "/api/queues/orders/subscriptions",
            json!({"endpoint": gone.url("/hook")}),
        )
        .await;
        self.post(
            "/api/queues/flaky/subscriptions",
            json!({"endpoint": failing.url("/hook"), "auto_disable_after": "50ms",
                   "policy": {"type": "fixed", "delay": "20ms", "retry_limit": 50}}),
        )
        .await;
        for queue in ["orders", "flaky"] {
            self.post(
                "/api/jobs",
                json!({"queue": queue, "type": "event", "payload": {}}),
            )
            .await;
        }
        // A worker on a misspelt queue, twice: warned of once.
        for _ in 0..2 {
            self.post("/api/take", json!({"queues": ["mial", "mail"]}))
                .await;
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn path_of(log: &Path) -> String {
    log.display().to_string()
}

/// What every log must not hold, whatever its format.
fn check_plain(text: &str, log: &Path) {
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in {}:\n{text}",
        path_of(log)
    );
    for debug in ["Some(", "None", "Sync", "Relaxed"] {
        assert!(
            !text.contains(debug),
            "a debug form {debug:?} in the log:\n{text}"
        );
    }
}

#[tokio::test]
async fn text_logs_read_as_written() {
    let gone = Receiver::start(Vec::new(), Reply::status(410)).await;
    let failing = Receiver::start(Vec::new(), Reply::status(500)).await;
    let served = Served::start("text", &[]).await;
    served.workload(&gone, &failing).await;

    let start = served.wait_for_line(&["tenax listening"]).await;
    for field in [
        &format!("address=127.0.0.1:{}", served.port) as &str,
        "store=embedded",
        "durability=sync",
        "auth=off",
        "tls=off",
        "private_endpoints=allowed",
        r#"default_policy={"base":15000,"exponent":4.0,"#,
        r#""type":"polynomial"} default_delivery_policy={"delays":[5000,300000,"#,
    ] {
        assert!(start.contains(field), "{field} not in {start}");
    }
    assert!(
        start.starts_with(|c: char| c.is_ascii_digit()),
        "a timestamp first: {start}"
    );
    assert!(start.contains(" INFO "), "{start}");

    let request = served
        .wait_for_line(&["request", "route=/api/jobs/{id}/fail"])
        .await;
    for field in ["method=POST", "status=200", "latency_ms=", "request_id="] {
        assert!(request.contains(field), "{field} not in {request}");
    }
    assert!(
        !request.contains("/api/jobs/1/fail"),
        "the path, not the template: {request}"
    );

    let dead = served.wait_for_line(&["job dead"]).await;
    assert!(dead.contains(" WARN "), "{dead}");
    assert!(
        dead.contains("queue=mail") && dead.contains("job=1"),
        "{dead}"
    );
    let delivery = served.wait_for_line(&["delivery dead"]).await;
    assert!(
        delivery.contains(" WARN ") && delivery.contains("410"),
        "{delivery}"
    );
    let disabled = served.wait_for_line(&["subscription disabled"]).await;
    assert!(
        disabled.contains(" WARN ") && disabled.contains("subscription="),
        "{disabled}"
    );
    let misspelt = served
        .wait_for_line(&["takes from queue \"mial\", which has never existed"])
        .await;
    assert!(
        misspelt.contains(" WARN ") && misspelt.contains("did you mean \"mail\"?"),
        "{misspelt}"
    );
    let text = served.text();
    assert_eq!(text.matches("which has never existed").count(), 1, "{text}");
    assert!(!text.contains("queue \"mail\", which"), "{text}");
    check_plain(&text, &served.log);
}

#[tokio::test]
async fn json_logs_carry_the_same_fields_as_values() {
    let gone = Receiver::start(Vec::new(), Reply::status(410)).await;
    let failing = Receiver::start(Vec::new(), Reply::status(500)).await;
    let served = Served::start("json", &[]).await;
    served.workload(&gone, &failing).await;
    served.wait_for_line(&["subscription disabled"]).await;
    served.wait_for_line(&["delivery dead"]).await;
    let text = served.text();
    check_plain(&text, &served.log);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} in:\n{text}"))
    };
    let start = &find("tenax listening")["fields"];
    assert_eq!(
        start["address"],
        json!(format!("127.0.0.1:{}", served.port))
    );
    assert_eq!(start["store"], json!("embedded"));
    assert_eq!(start["durability"], json!("sync"));
    assert_eq!(start["auth"], json!("off"));
    assert_eq!(start["private_endpoints"], json!("allowed"));
    let policy: Value = serde_json::from_str(start["default_policy"].as_str().unwrap()).unwrap();
    assert_eq!(policy["type"], json!("polynomial"));

    let request = lines
        .iter()
        .find(|l| l["fields"]["message"] == "request" && l["fields"]["route"] == "/api/take")
        .unwrap_or_else(|| panic!("no request line for /api/take:\n{text}"));
    assert_eq!(request["level"], json!("INFO"));
    let fields = &request["fields"];
    assert_eq!(fields["method"], json!("POST"));
    assert_eq!(fields["status"], json!(200));
    assert!(fields["latency_ms"].is_f64(), "{fields}");
    assert_eq!(fields["request_id"].as_str().unwrap().len(), 16, "{fields}");

    let dead = find("job dead");
    assert_eq!(dead["level"], json!("WARN"));
    assert_eq!(dead["fields"]["queue"], json!("mail"));
    assert_eq!(dead["fields"]["job"], json!(1));
    assert_eq!(find("delivery dead")["level"], json!("WARN"));
    assert_eq!(find("subscription disabled")["level"], json!("WARN"));
}

#[tokio::test]
async fn request_lines_can_be_turned_off() {
    let served = Served::start("text", &["--log-requests", "false"]).await;
    served
        .post(
            "/api/jobs",
            json!({"queue": "q", "type": "t", "payload": {}}),
        )
        .await;
    served.wait_for_line(&["tenax listening"]).await;
    let text = served.text();
    assert!(
        !text
            .lines()
            .any(|l| l.contains(" request ") || l.contains("route=")),
        "{text}"
    );
}

/// Request lines are written by a thread of their own: every answered request still has its
/// line, and the lines of requests answered as the server stops (long polls, which the stop
/// ends) are in the log before the server says goodbye.
#[tokio::test]
async fn every_request_has_its_line_before_the_server_exits() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let mut served = Served::start("json", &[]).await;
    let enqueues = 200;
    let posting = (0..enqueues).map(|n| {
        let served = &served;
        async move {
            served
                .post(
                    "/api/jobs",
                    json!({"queue": "q", "type": "t", "payload": {"n": n}}),
                )
                .await;
        }
    });
    futures_util::future::join_all(posting).await;
    // Long polls on an empty queue, answered only by the stop.
    let polls = 8;
    let polling: Vec<_> = (0..polls)
        .map(|n| {
            served
                .http
                .post(served.url("/api/take"))
                .json(&json!({"queues": ["empty"], "wait": "30s", "worker": format!("poll-{n}")}))
                .send()
        })
        .collect();
    let polling = tokio::spawn(futures_util::future::join_all(polling));
    // The server shows a taking worker as its take starts to wait.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let cluster: Value = served
            .http
            .get(served.url("/api/cluster"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if cluster["servers"][0]["workers"]
            .as_array()
            .map_or(0, Vec::len)
            == polls
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the polls never waited: {cluster}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = Pid::from_raw(i32::try_from(served.child.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let answered = polling.await.unwrap();
    assert!(answered.iter().all(Result::is_ok), "{answered:?}");
    let deadline = Instant::now() + PATIENCE;
    while served.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no exit:\n{}", served.text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let text = served.text();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bye = lines
        .iter()
        .position(|l| l["fields"]["message"] == "store flushed; bye")
        .unwrap_or_else(|| panic!("no goodbye:\n{text}"));
    for (route, count) in [("/api/jobs", enqueues), ("/api/take", polls)] {
        let at: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l["fields"]["message"] == "request" && l["fields"]["route"] == route)
            .map(|(at, _)| at)
            .collect();
        assert_eq!(at.len(), count, "{route}:\n{text}");
        assert!(at.iter().all(|&at| at < bye), "{route}:\n{text}");
    }
}

/// A request never waits for its log line. With stderr blocked (a pipe nobody reads, full), the
/// server goes on answering; once the log's queue is full its lines are dropped and counted,
/// and when stderr flows again the log says how many: the lines written and the lines counted
/// as dropped add up to the requests answered.
#[tokio::test]
async fn a_blocked_log_drops_and_counts_lines_but_never_holds_a_request() {
    use std::io::{BufRead as _, BufReader};

    let dir = tempfile::tempdir().unwrap();
    let port = ports::spare_port();
    let http = tenax_net::http::client_builder().build().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--log-format", "json"])
        .env("TENAX_LOG", "info")
        .env_remove("TENAX_LOG_REQUESTS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    // Killed whatever happens below.
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Kill(child);
    let url = format!("http://127.0.0.1:{port}/healthz");
    let mut answered = 0_usize;
    let deadline = Instant::now() + PATIENCE;
    while !http.get(&url).send().await.is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "no start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    answered += 1;

    // More requests than the log's queue holds (32 768) and the pipe's buffer together, all
    // answered while nobody reads stderr.
    let requests = 40_000;
    let connections = 8;
    let answering = (0..connections).map(|_| {
        let http = http.clone();
        let url = url.clone();
        async move {
            for _ in 0..requests / connections {
                let answer = http.get(&url).send().await.unwrap();
                assert_eq!(answer.status(), 200);
            }
        }
    });
    tokio::time::timeout(
        Duration::from_secs(120),
        futures_util::future::join_all(answering),
    )
    .await
    .expect("requests are answered while stderr is blocked");
    answered += requests;

    // Now read stderr: the queued lines come, then the count of the dropped ones.
    let reading = tokio::task::spawn_blocking(move || {
        let mut lines = 0_usize;
        let mut dropped = 0_usize;
        for line in BufReader::new(stderr).lines() {
            let line: Value = serde_json::from_str(&line.unwrap()).unwrap();
            let fields = &line["fields"];
            if fields["message"] == "request" && fields["route"] == "/healthz" {
                lines += 1;
            }
            if let Some(n) = fields["dropped"].as_u64() {
                dropped += usize::try_from(n).unwrap();
            }
            if lines + dropped >= answered {
                return (lines, dropped);
            }
        }
        panic!("stderr ended with {lines} request lines and {dropped} dropped of {answered}");
    });
    // On a timeout the server is killed as the test ends, which ends the reading.
    let (lines, dropped) = tokio::time::timeout(PATIENCE, reading)
        .await
        .expect("every request line is written or counted as dropped")
        .unwrap();
    assert_eq!(
        lines + dropped,
        answered,
        "{lines} lines and {dropped} dropped"
    );
    assert!(dropped > 0, "nothing was dropped: {lines} lines");
    assert!(
        lines > 32_768,
        "only {lines} lines written, {dropped} dropped"
    );
}
