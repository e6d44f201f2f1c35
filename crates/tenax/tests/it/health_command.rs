//! `tenax health` against a real server: `ok` and exit 0 while it runs, exit 1 once it is gone
//! (the container image's HEALTHCHECK runs it).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::ports;

const BIN: &str = env!("CARGO_BIN_EXE_tenax");

fn health(url: &str) -> Output {
    Command::new(BIN)
        .args(["health", "--url", url])
        .env_remove("TENAX_TOKEN")
        .output()
        .expect("run tenax health")
}

#[test]
fn health_says_ok_while_the_server_runs_and_fails_once_it_is_gone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = ports::spare_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(dir.path())
        .env("TENAX_LOG", "warn")
        .spawn()
        .expect("spawn tenax serve");

    // Until the server listens, `health` fails; it must succeed within the bound.
    let deadline = Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let output = health(&url);
        if output.status.success() {
            break output;
        }
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(
            Instant::now() < deadline,
            "tenax health never succeeded: {output:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(String::from_utf8_lossy(&answered.stdout), "ok\n");

    child.kill().expect("kill the server");
    child.wait().expect("wait for the server");
    let gone = health(&url);
    assert_eq!(gone.status.code(), Some(1), "{gone:?}");
    assert!(gone.stdout.is_empty(), "{gone:?}");
    let said = String::from_utf8_lossy(&gone.stderr);
    assert!(said.starts_with("error: "), "{said}");
}
