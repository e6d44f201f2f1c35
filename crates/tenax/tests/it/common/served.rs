//! `tenax serve` and the other commands as the real binary, for tests of what an operator runs:
//! a server on a free loopback port with its stderr in a file, stopped by SIGTERM, and one-shot
//! commands with their output.

// As in the suites that use it (copy.rs, secrets.rs), whose allowance covered it while each
// compiled a copy of its own.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const PATIENCE: Duration = Duration::from_secs(20);

/// `tenax serve` on a free loopback port, its stderr in a file; killed when dropped.
pub struct Served {
    child: Child,
    base: String,
    log: PathBuf,
    http: reqwest::Client,
}

impl Served {
    /// Starts the binary on `data_dir` with `extra` flags, its log in `log`, and waits until it
    /// answers.
    pub async fn start(data_dir: &Path, log: &Path, extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let http = tenax_net::http::client_builder()
            .no_proxy()
            .build()
            .unwrap();
        let mut served = Self {
            child: serve(data_dir, log, &format!("127.0.0.1:{port}"), extra),
            base: format!("http://127.0.0.1:{port}"),
            log: log.to_owned(),
            http,
        };
        let deadline = Instant::now() + PATIENCE;
        loop {
            let up = served.http.get(served.url("/healthz")).send().await;
            if up.is_ok_and(|r| r.status() == 200) {
                return served;
            }
            if let Some(status) = served.child.try_wait().unwrap() {
                panic!("the server ended ({status}):\n{}", served.text());
            }
            assert!(Instant::now() < deadline, "no start:\n{}", served.text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn post(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> Value {
        let mut request = self.http.post(self.url(path)).json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "POST {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// Stops the server as an operator does (SIGTERM) and waits for it.
    pub fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}:\n{}", self.text());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `tenax serve` (private endpoints allowed: the receiver is on loopback).
pub fn serve(data_dir: &Path, log: &Path, listen: &str, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(["serve", "--listen", listen, "--allow-private-endpoints"])
        .arg("--data-dir")
        .arg(data_dir)
        .args(extra)
        .env("TENAX_LOG", "info")
        .env_remove("TENAX_SECRETS_KEY_FILE")
        .env_remove("TENAX_DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

impl Served {
    /// `PUT path` with `body` and `headers`, expecting a success: its JSON.
    pub async fn put(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> Value {
        let mut request = self.http.put(self.url(path)).json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "PUT {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// `GET path` with `headers`: its status.
    pub async fn status_of(&self, path: &str, headers: &[(&str, &str)]) -> u16 {
        let mut request = self.http.get(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap().status().as_u16()
    }

    /// `GET path`, expecting a success: its JSON.
    pub async fn get(&self, path: &str) -> Value {
        self.get_with(path, &[]).await
    }

    /// `GET path` with `headers`, expecting a success: its JSON.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Value {
        let mut request = self.http.get(self.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "GET {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

/// Runs `tenax` with `args` (no server environment).
pub fn tenax(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(args)
        .env_remove("TENAX_SECRETS_KEY_FILE")
        .env_remove("TENAX_DATABASE_URL")
        .env_remove("TENAX_DATA_DIR")
        .output()
        .unwrap()
}

pub fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
