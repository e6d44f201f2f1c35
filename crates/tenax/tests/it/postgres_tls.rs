//! TLS to PostgreSQL: a real server with `ssl = on` and a certificate made here (rcgen), and the
//! real `tenax serve` and `tenax migrate` on it. With the right CA every session Tenax opens is
//! encrypted (the pool's, the listener's, the lead's); a wrong CA, or a certificate for another
//! host under `verify-full`, is refused; `sslmode=disable` still connects in plain text to a
//! server that allows it.
//!
//! The private cluster is this suite's own ([`POSTGRES`]), so turning TLS on here touches no
//! other suite.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::postgres;
use serde_json::{Value, json};
use tenax_postgres::Database;
use tokio::sync::OnceCell;

use crate::common;

/// The CAs and the server's certificate, made once for the suite: its tests share the cluster.
struct Pki {
    /// The CA that signed the server's certificate.
    ca: String,
    /// A CA that signed nothing the server has.
    wrong_ca: String,
}

static TLS_ON: OnceCell<Pki> = OnceCell::const_new();

/// This suite's own PostgreSQL, the one it turns TLS on for.
static POSTGRES: postgres::OwnCluster = postgres::OwnCluster::new();

/// A self-signed CA, which can sign certificates.
fn ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    rcgen::CertifiedIssuer::self_signed(params, key).expect("a CA")
}

/// A fresh database on the suite's server, with TLS on (once for the suite); `None` when the
/// harness skips. The server's certificate is for `localhost` and `127.0.0.1`.
async fn database() -> Option<(String, &'static Pki)> {
    let url = POSTGRES.fresh_database().await?;
    if std::env::var_os("TENAX_TEST_DATABASE_URL").is_some() {
        eprintln!("SKIPPED: turning TLS on needs the private test cluster");
        return None;
    }
    let pki = TLS_ON
        .get_or_init(|| async {
            let issuer = ca("Tenax test CA");
            let wrong = ca("Another CA");
            let key = rcgen::KeyPair::generate().expect("a key");
            let params =
                rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                    .expect("params");
            let cert = params.signed_by(&key, &issuer).expect("a certificate");
            POSTGRES.serve_tls(&cert.pem(), &key.serialize_pem()).await;
            Pki {
                ca: issuer.pem(),
                wrong_ca: wrong.pem(),
            }
        })
        .await;
    Some((url, pki))
}

/// `pem` in a file of `dir`: its path.
fn file(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).expect("a PEM file");
    path
}

/// `url` with `query` added (`key=value&...`).
fn with(url: &str, query: &str) -> String {
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}{query}")
}

/// A `tenax serve` on the database, killed when dropped.
struct Server {
    child: Child,
    base: String,
    log: PathBuf,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `tenax serve` with `args`; its stderr goes to a log.
    fn spawn(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log = dir.path().join("server.log");
        let child = Command::new(env!("CARGO_BIN_EXE_tenax"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--secrets-key-file")
            .arg(postgres::secrets_key_file())
            .args(args)
            .env("TENAX_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("tenax serve starts");
        Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            http: tenax_net::http::client_builder()
                .no_proxy()
                .timeout(Duration::from_secs(20))
                .build()
                .expect("an HTTP client"),
            _dir: dir,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until it answers, panicking with its log if it exits or takes too long.
    async fn ready(self) -> Self {
        let started = Instant::now();
        let mut server = self;
        loop {
            if server
                .http
                .get(format!("{}/healthz", server.base))
                .send()
                .await
                .is_ok()
            {
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "tenax serve exited ({status}); its log:\n{}",
                    server.log_text()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "tenax serve did not start; its log:\n{}",
                server.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until it exits by itself: its status and log.
    async fn exits(mut self) -> (std::process::ExitStatus, String) {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (status, self.log_text());
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "tenax serve kept running; its log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Enqueues, takes and completes one job.
    async fn works(&self) {
        let (status, job) = self.post("/api/jobs", json!({"queue": "tls"})).await;
        assert_eq!(status, 201, "{job}");
        let (status, taken) = self
            .post("/api/take", json!({"queues": ["tls"], "max": 1}))
            .await;
        assert_eq!(status, 200, "{taken}");
        assert_eq!(taken["jobs"][0]["id"], job["id"], "{taken}");
        let (status, done) = self
            .post(
                &format!("/api/jobs/{}/complete", job["id"]),
                json!({"lease_token": taken["jobs"][0]["lease_token"]}),
            )
            .await;
        assert_eq!(status, 200, "{done}");
    }

    async fn wait_until_leading(&self) {
        let started = Instant::now();
        while !self.log_text().contains("leads the maintenance") {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the server never took the lead; its log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The sessions on `url`'s database other than the asking one: (pid, encrypted).
async fn sessions(url: &str) -> Vec<(i32, bool)> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("an admin connection");
    tokio::spawn(connection);
    client
        .query(
            "SELECT a.pid, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .expect("the sessions")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// The session holding Tenax's lead (an advisory lock), if one does.
async fn leader(url: &str) -> Option<i32> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("an admin connection");
    tokio::spawn(connection);
    client
        .query_opt(
            "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
             WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()",
            &[],
        )
        .await
        .expect("the locks")
        .map(|row| row.get(0))
}

/// Whether a session made by `database` is encrypted, or the error connecting.
async fn encrypted(database: &Database) -> Result<bool, String> {
    let (client, connection) = database
        .connect()
        .await
        .map_err(|e| tenax_core::errors::chain(&e))?;
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_right_ca_every_session_is_encrypted_and_the_server_works() {
    let Some((url, pki)) = database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = file(dir.path(), "ca.pem", &pki.ca);
    // `tenax migrate` with the CA named in the URL, checking the host name too.
    let migrate = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args([
            "migrate",
            "--database-url",
            &with(
                &url,
                &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
            ),
        ])
        .output()
        .expect("tenax migrate runs");
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    // `tenax serve` with sslmode=require and the CA as a flag: the certificate is checked.
    let ca_flag = ca.display().to_string();
    let server = Server::spawn(&[
        "--database-url",
        &with(&url, "sslmode=require"),
        "--database-ca-file",
        &ca_flag,
    ])
    .ready()
    .await;
    server.works().await;
    server.wait_until_leading().await;
    assert!(
        server.log_text().contains(&format!(
            "connected to PostgreSQL over TLS, its certificate checked against the CAs of \
             {ca_flag}, not its host name (sslmode=require)"
        )),
        "{}",
        server.log_text()
    );
    let sessions = sessions(&url).await;
    // The pool's, the listener's and the lead's at least; every one encrypted.
    assert!(sessions.len() >= 3, "{sessions:?}");
    assert!(sessions.iter().all(|(_, ssl)| *ssl), "{sessions:?}");
    let leader = leader(&url).await.expect("a leader");
    assert!(
        sessions.iter().any(|(pid, _)| *pid == leader),
        "{sessions:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused_at_start_with_a_clear_error() {
    let Some((url, pki)) = database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let wrong = file(dir.path(), "wrong-ca.pem", &pki.wrong_ca);
    let wrong_text = wrong.display().to_string();
    let (status, log) = Server::spawn(&[
        "--database-url",
        &with(&url, "sslmode=verify-ca"),
        "--database-ca-file",
        &wrong_text,
    ])
    .exits()
    .await;
    assert!(!status.success());
    for said in [
        "connecting to PostgreSQL over TLS, its certificate checked against the CAs of",
        &wrong_text,
        "error performing TLS handshake",
        "invalid peer certificate: UnknownIssuer",
    ] {
        assert!(log.contains(said), "{said:?} in:\n{log}");
    }
    let migrate = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args([
            "migrate",
            "--database-url",
            &with(
                &url,
                &format!("sslmode=verify-full&sslrootcert={wrong_text}"),
            ),
        ])
        .output()
        .expect("tenax migrate runs");
    assert!(!migrate.status.success());
    let error = String::from_utf8_lossy(&migrate.stderr);
    assert!(error.contains("UnknownIssuer"), "{error}");
    assert!(error.contains(&wrong_text), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let Some((url, pki)) = database().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ca = file(dir.path(), "ca.pem", &pki.ca);
    let wrong = file(dir.path(), "wrong.pem", &pki.wrong_ca);
    let parsed = url::Url::parse(&url).expect("a URL");
    let port = parsed.port().expect("a port");
    let dbname = parsed.path().trim_start_matches('/');
    // The certificate is for localhost and 127.0.0.1, not for this name.
    let elsewhere = |mode: &str, ca: &Path| {
        format!(
            "host=db.elsewhere.invalid hostaddr=127.0.0.1 port={port} user=postgres \
             dbname={dbname} sslmode={mode} sslrootcert='{}'",
            ca.display()
        )
    };
    let connect = |text: String| async move {
        encrypted(&Database::new(&text, None).expect("a database")).await
    };
    let refused = connect(elsewhere("verify-full", &ca)).await.unwrap_err();
    assert!(refused.contains("not valid for name"), "{refused}");
    assert_eq!(connect(elsewhere("verify-ca", &ca)).await, Ok(true));
    let refused = connect(elsewhere("verify-ca", &wrong)).await.unwrap_err();
    assert!(refused.contains("UnknownIssuer"), "{refused}");
    // Named as in its certificate, the host passes verify-full.
    let full = with(
        &url.replace("127.0.0.1", "localhost"),
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    assert_eq!(connect(full).await, Ok(true));
    // Without CAs, prefer (the default) and require encrypt without checking; disable does not
    // encrypt.
    assert_eq!(connect(url.clone()).await, Ok(true));
    assert_eq!(connect(with(&url, "sslmode=require")).await, Ok(true));
    assert_eq!(connect(with(&url, "sslmode=disable")).await, Ok(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_disable_works_in_plain_text() {
    let Some((url, _)) = database().await else {
        return;
    };
    let server = Server::spawn(&["--database-url", &with(&url, "sslmode=disable")])
        .ready()
        .await;
    server.works().await;
    server.wait_until_leading().await;
    assert!(
        server
            .log_text()
            .contains("connected to PostgreSQL without TLS (sslmode=disable)")
    );
    let sessions = sessions(&url).await;
    assert!(sessions.len() >= 3, "{sessions:?}");
    assert!(sessions.iter().all(|(_, ssl)| !*ssl), "{sessions:?}");
}
