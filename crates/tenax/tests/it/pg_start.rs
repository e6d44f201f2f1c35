//! A server started while PostgreSQL cannot be reached waits for it (`--database-wait`), and
//! starts as soon as it can be reached; with no wait, or when the database refuses in a way
//! that waiting cannot mend, it ends the start at once with the reason.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::postgres;
use tempfile::TempDir;
use tokio::net::{TcpListener, TcpStream};

use crate::common;

/// Far longer than any case here needs; reached only when the server under test is broken.
const PATIENCE: Duration = Duration::from_secs(60);

/// `tenax serve` on `database_url` with `flags`, its stderr in `dir/server.log`, and the
/// address it listens on.
fn serve(dir: &TempDir, database_url: &str, flags: &[&str]) -> (Child, String) {
    let port = postgres::free_port().expect("a free port");
    let log = std::fs::File::create(dir.path().join("server.log")).expect("a log file");
    let child = Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--database-url", database_url])
        .arg("--secrets-key-file")
        .arg(postgres::secrets_key_file())
        .args(flags)
        .env("TENAX_LOG", "info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("tenax serve starts");
    (child, format!("http://127.0.0.1:{port}"))
}

fn log_of(dir: &TempDir) -> String {
    std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
}

/// Waits until the server's log holds `text`; fails if the server exits first.
async fn wait_for_log(dir: &TempDir, child: &mut Child, text: &str) {
    let started = Instant::now();
    while !log_of(dir).contains(text) {
        let exited = child.try_wait().expect("the server's status");
        assert!(
            exited.is_none() && started.elapsed() < PATIENCE,
            "no {text:?} in the log ({exited:?}):\n{}",
            log_of(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for the server to exit by itself.
async fn wait_for_exit(dir: &TempDir, child: &mut Child) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the server's status") {
            return status;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the server did not give up; its log:\n{}",
            log_of(dir)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `url` with its host and port replaced by 127.0.0.1:`port`.
fn at_port(url: &str, port: u16) -> String {
    let mut url = url::Url::parse(url).expect("the test database's URL");
    url.set_host(Some("127.0.0.1")).expect("a host");
    url.set_port(Some(port)).expect("a port");
    url.to_string()
}

/// Forwards every connection made to `listener` to `target`, until the test ends.
fn forward(listener: TcpListener, target: String) {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_waits_for_postgres_at_start_and_starts_when_it_is_reached() {
    let Some(url) = postgres::fresh_database().await else {
        return;
    };
    let real = url::Url::parse(&url).expect("the test database's URL");
    let target = format!(
        "{}:{}",
        real.host_str().expect("a host"),
        real.port().unwrap_or(5432)
    );
    // Nothing listens on this port yet: every connection is refused.
    let port = postgres::free_port().expect("a free port");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut child, base) = serve(&dir, &at_port(&url, port), &[]);
    wait_for_log(&dir, &mut child, "PostgreSQL cannot be used yet").await;
    // PostgreSQL appears on the port: the server starts without being restarted.
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the port is still free");
    forward(listener, target);
    wait_for_log(&dir, &mut child, "tenax listening").await;
    let http = tenax_net::http::client_builder()
        .no_proxy()
        .build()
        .expect("a client");
    let answer = http
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), 200);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_wait_or_with_a_refusal_waiting_cannot_mend_the_start_ends_at_once() {
    let Some(url) = postgres::fresh_database().await else {
        return;
    };
    let port = postgres::free_port().expect("a free port");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut child, _) = serve(&dir, &at_port(&url, port), &["--database-wait", "0s"]);
    let status = wait_for_exit(&dir, &mut child).await;
    assert!(!status.success());
    let log = log_of(&dir);
    assert!(log.contains("opening the store in PostgreSQL"), "{log}");
    assert!(!log.contains("trying again"), "{log}");

    // A database that does not exist is not worth waiting for, whatever the wait.
    let mut missing = url::Url::parse(&url).expect("the test database's URL");
    missing.set_path("/tenax_no_such_database");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut child, _) = serve(&dir, missing.as_str(), &["--database-wait", "10m"]);
    let status = wait_for_exit(&dir, &mut child).await;
    assert!(!status.success());
    let log = log_of(&dir);
    // One sentence that says what to do, not the server's words twice behind the TLS mode.
    assert!(
        log.contains("PostgreSQL has no database \"tenax_no_such_database\": create it (`createdb"),
        "{log}"
    );
    assert!(
        !log.contains("db error") && !log.contains("sslmode"),
        "{log}"
    );
    assert!(!log.contains("trying again"), "{log}");

    // Nor is a role the database does not accept.
    let mut refused = url::Url::parse(&url).expect("the test database's URL");
    if refused.password().is_some() {
        refused
            .set_password(Some("not-the-password"))
            .expect("a password");
    } else {
        refused.set_username("tenax_no_such_role").expect("a role");
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (mut child, _) = serve(&dir, refused.as_str(), &["--database-wait", "10m"]);
    let status = wait_for_exit(&dir, &mut child).await;
    assert!(!status.success());
    let log = log_of(&dir);
    assert!(log.contains("PostgreSQL does not accept role"), "{log}");
    assert!(!log.contains("trying again"), "{log}");
}
