//! A `tenax serve` process on a PostgreSQL database, for the tests that need real processes
//! (several servers, a server under libfaketime, a server through a failover): started on a
//! free loopback port, its log in a file, killed with SIGKILL when dropped.
//!
//! Used as `crate::common::node`.

// Each suite uses a different subset of the helpers.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use crate::common::postgres;

/// How long a server may take to answer after it starts.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// One `tenax serve` child.
pub struct Node {
    child: Child,
    base: String,
    log: PathBuf,
    http: reqwest::Client,
    _dir: TempDir,
}

/// An answer: its status, its `Date` header, its body as JSON (`Null` when it is not).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub date: Option<String>,
    pub body: Value,
}

impl Node {
    /// Starts a server on `database` with `flags` and the environment `env` added, and waits
    /// until it answers `/healthz`.
    pub async fn start(database: &str, flags: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("tenax-node-")
            .tempdir()
            .expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = dir.path().join("server.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_tenax"));
        command
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--database-url", database])
            .arg("--secrets-key-file")
            .arg(postgres::secrets_key_file())
            .args(flags)
            .env("TENAX_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"));
        let child = command.spawn().expect("tenax serve starts");
        let mut node = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            http: tenax_net::http::client_builder()
                .no_proxy()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("an HTTP client"),
            _dir: dir,
        };
        let started = Instant::now();
        while node.http.get(node.url("/healthz")).send().await.is_err() {
            let exited = node.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && started.elapsed() < START_TIMEOUT,
                "the server did not start ({exited:?}); its log:\n{}",
                node.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        node
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the server's log says it leads the maintenance.
    pub async fn wait_until_leading(&self) {
        let started = Instant::now();
        while !self.leads() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "the server never took the lead; its log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether the server's log says it led the maintenance at some time.
    pub fn leads(&self) -> bool {
        self.log_text().contains("leads the maintenance")
    }

    /// The server's process id, for signals (SIGSTOP to pause it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no shutdown, no goodbye to PostgreSQL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends a request; `Err` when no answer came (the connection failed, or the client's
    /// timeout passed).
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, String> {
        let mut request = self.http.request(method.clone(), self.url(path));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = response.status().as_u16();
        let date = response
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|d| d.to_str().ok())
            .map(str::to_owned);
        let text = response.text().await.unwrap_or_default();
        Ok(Answer {
            status,
            date,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        })
    }

    pub async fn post(&self, path: &str, body: Value) -> Result<Answer, String> {
        self.send(reqwest::Method::POST, path, Some(&body)).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(reqwest::Method::GET, path, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A request that must answer `expected`; the body.
    pub async fn must(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        expected: u16,
    ) -> Value {
        let answer = self
            .send(method.clone(), path, body)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(answer.status, expected, "{method} {path}: {}", answer.body);
        answer.body
    }

    /// `POST` that must answer `expected`; the body.
    pub async fn must_post(&self, path: &str, body: Value, expected: u16) -> Value {
        self.must(reqwest::Method::POST, path, Some(&body), expected)
            .await
    }

    /// `PUT` that must answer `expected`; the body.
    pub async fn must_put(&self, path: &str, body: Value, expected: u16) -> Value {
        self.must(reqwest::Method::PUT, path, Some(&body), expected)
            .await
    }

    /// `GET` that must answer `expected`; the body.
    pub async fn must_get(&self, path: &str, expected: u16) -> Value {
        self.must(reqwest::Method::GET, path, None, expected).await
    }

    /// A job's status, `None` when there is no such job.
    pub async fn status(&self, id: u64) -> Option<String> {
        let answer = self.get(&format!("/api/jobs/{id}")).await;
        match answer.status {
            200 => Some(answer.body["status"].as_str().expect("a status").to_owned()),
            404 => None,
            other => panic!("GET /api/jobs/{id}: {other} {}", answer.body),
        }
    }

    /// The text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        let response = self
            .http
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(response.status(), 200, "GET /metrics");
        response.text().await.expect("the metrics")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}
