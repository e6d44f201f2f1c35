//! Backups of the embedded store while the server serves, and restoring them
//! (docs/operations.md, "Backups"): `tenax backup` and `tenax restore` as an operator runs
//! them, against a real server on a loopback port, on real disk.
//!
//! - Under load (producers enqueueing, a worker completing), every job acknowledged before the
//!   backup was asked for is in the restored store, in its state then or a later one.
//! - A restore refuses a damaged backup, a target that holds anything, a missing or wrong
//!   secrets key, and leaves the target as it found it.
//! - Only an unscoped admin token may take a backup; on PostgreSQL the route says to use the
//!   database's own tools.
//! - A webhook subscription's secret survives: the restored server signs with it.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use common::{Options, PATIENCE, TestServer, on_postgres};
use parking_lot::Mutex;
use receiver::Receiver;
use reqwest::Method;
use serde_json::{Value, json};
use tenax::delivery::signing;

use crate::common;
use crate::common::receiver;

const BIN: &str = env!("CARGO_BIN_EXE_tenax");
const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Runs the `tenax` binary with `args`; answers its exit code, stdout and stderr.
async fn tenax(args: &[&str]) -> (i32, String, String) {
    let output = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("TENAX_URL")
        .env_remove("TENAX_TOKEN")
        .env_remove("TENAX_DATA_DIR")
        .env_remove("TENAX_SECRETS_KEY_FILE")
        .output()
        .await
        .expect("the tenax binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `tenax backup --url <server> --to <to>`, expected to succeed.
async fn backup(server: &TestServer, to: &Path) -> String {
    let (code, out, err) = tenax(&[
        "backup",
        "--url",
        &server.api.base,
        "--to",
        to.to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 0, "tenax backup failed: {err}");
    out
}

/// Restores `from` into a new directory with the key of `server`'s data directory (copied
/// where serve looks for it), expected to succeed. Answers the directory and what restore said.
async fn restore(server: &TestServer, from: &Path) -> (tempfile::TempDir, String) {
    let target = tempfile::tempdir().unwrap();
    std::fs::copy(
        server.data_dir().join("secrets.key"),
        target.path().join("secrets.key"),
    )
    .unwrap();
    let (code, out, err) = tenax(&[
        "restore",
        "--from",
        from.to_str().unwrap(),
        "--data-dir",
        target.path().to_str().unwrap(),
    ])
    .await;
    assert_eq!(code, 0, "tenax restore failed: {err}");
    (target, out)
}

/// What the load saw: each job's id and when its enqueue, or its completion, was acknowledged.
#[derive(Debug, Default)]
struct Seen {
    enqueued: Vec<(u64, Instant)>,
    completed: Vec<(u64, Instant)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_holds_every_job_acknowledged_before_it_was_asked_for() {
    if on_postgres() {
        return;
    }
    let mut server = TestServer::start(Options::system()).await;
    // Something to copy besides the load: completed jobs (on disk only) and a backlog.
    let mut seeded = Vec::new();
    for batch in 0..10 {
        let jobs = (0..200)
            .map(|i| json!({"queue": "seed", "type": "t", "payload": {"batch": batch, "i": i}}))
            .collect();
        seeded.extend(server.enqueue_batch(jobs).await);
    }
    let mut done_before = Vec::new();
    for job in server.take(&["seed"], 300).await {
        server.complete(&job).await;
        done_before.push(job.id);
    }

    let seen = Arc::new(Mutex::new(Seen::default()));
    let progress = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for producer in 0..2 {
        let (api, seen, stop) = (server.api.clone(), seen.clone(), stop.clone());
        let progress = progress.clone();
        load.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let id = api
                    .enqueue(
                        json!({"queue": "load", "type": "t", "payload": {"p": producer, "n": n}}),
                    )
                    .await;
                seen.lock().enqueued.push((id, Instant::now()));
                progress.notify_one();
                n += 1;
            }
        }));
    }
    {
        let (api, seen, stop) = (server.api.clone(), seen.clone(), stop.clone());
        let progress = progress.clone();
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let jobs = api
                    .take_with(json!({"queues": ["load"], "max": 20, "wait": "100ms"}))
                    .await;
                for job in jobs {
                    api.complete(&job).await;
                    seen.lock().completed.push((job.id, Instant::now()));
                    progress.notify_one();
                }
            }
        }));
    }
    // The load is under way: some of its enqueues and completions are acknowledged.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (e, c) = {
            let seen = seen.lock();
            (seen.enqueued.len(), seen.completed.len())
        };
        if e >= 200 && c >= 50 {
            break;
        }
        assert!(
            tokio::time::timeout_at(deadline.into(), progress.notified())
                .await
                .is_ok(),
            "the load did not get going: {e} enqueued, {c} completed"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("backup");
    let asked = Instant::now();
    let said = backup(&server, &to).await;
    let finished = Instant::now();
    stop.store(true, Ordering::SeqCst);
    for task in load {
        task.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock());
    let during = seen
        .enqueued
        .iter()
        .filter(|(_, at)| *at > asked && *at < finished)
        .count();
    eprintln!(
        "backup took {:?} with {during} enqueues acknowledged meanwhile; it said: {said}",
        finished - asked
    );
    assert!(said.contains("(checked)"), "{said}");
    assert!(
        !to.join("secrets.key").exists(),
        "a backup never holds the key"
    );
    server.stop().await;

    let (restored, said) = restore(&server, &to).await;
    assert!(said.contains("Restored"), "{said}");
    let restored = TestServer::start_in(restored, Options::system()).await;
    let before: Vec<u64> = seeded
        .iter()
        .copied()
        .chain(
            seen.enqueued
                .iter()
                .filter(|(_, at)| *at < asked)
                .map(|(id, _)| *id),
        )
        .collect();
    let completed_before: Vec<u64> = done_before
        .iter()
        .copied()
        .chain(
            seen.completed
                .iter()
                .filter(|(_, at)| *at < asked)
                .map(|(id, _)| *id),
        )
        .collect();
    let mut statuses = HashMap::new();
    for id in &before {
        let job = restored.job(*id).await;
        statuses.insert(*id, job["status"].as_str().unwrap().to_owned());
    }
    for id in &completed_before {
        assert_eq!(
            statuses[id], "completed",
            "job {id} was completed before the backup was asked for"
        );
    }
    // Every job acknowledged before is there (`job` asserts 200), and none later than the
    // backup exists in a state it never had: an in-flight job returns to ready.
    assert!(
        statuses.values().all(|s| s == "ready" || s == "completed"),
        "{statuses:?}"
    );
}

/// `tenax restore --from <from> --data-dir <to>`, with `--secrets-key-file <key>` if given.
async fn restore_with(from: &Path, to: &Path, key: Option<&Path>) -> (i32, String, String) {
    let mut args = vec![
        "restore",
        "--from",
        from.to_str().unwrap(),
        "--data-dir",
        to.to_str().unwrap(),
    ];
    if let Some(key) = key {
        args.extend(["--secrets-key-file", key.to_str().unwrap()]);
    }
    tenax(&args).await
}

/// A backup of a small server with one job, into `dir/backup`.
async fn small_backup(dir: &Path) -> (TestServer, std::path::PathBuf) {
    let server = TestServer::start(Options::manual()).await;
    server
        .enqueue(json!({"queue": "q", "type": "t", "payload": 1}))
        .await;
    let to = dir.join("backup");
    backup(&server, &to).await;
    (server, to)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_refuses_a_damaged_backup_a_used_target_and_a_wrong_key() {
    if on_postgres() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut server, to) = small_backup(dir.path()).await;
    let key = server.data_dir().join("secrets.key");
    let key = key.as_path();
    let path = |p: &Path| p.to_str().unwrap().to_owned();

    // A backup is written into an empty directory only.
    let (code, _, err) = tenax(&["backup", "--url", &server.api.base, "--to", &path(&to)]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--to:") && err.contains("is not empty"),
        "{err}"
    );

    // A damaged file.
    let damaged = dir.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    for name in ["tenax.redb", "backup.json"] {
        std::fs::copy(to.join(name), damaged.join(name)).unwrap();
    }
    let mut bytes = std::fs::read(damaged.join("tenax.redb")).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(damaged.join("tenax.redb"), bytes).unwrap();
    let target = dir.path().join("from-damaged");
    let (code, _, err) = restore_with(&damaged, &target, Some(key)).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("SHA-256"), "{err}");
    assert!(!target.exists(), "nothing is written for a damaged backup");

    // A target that holds something.
    let used = dir.path().join("used");
    std::fs::create_dir(&used).unwrap();
    std::fs::write(used.join("notes.txt"), "mine").unwrap();
    let (code, _, err) = restore_with(&to, &used, Some(key)).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is not empty") && err.contains("notes.txt"),
        "{err}"
    );

    // No key where serve would look for it.
    let keyless = dir.path().join("keyless");
    let (code, _, err) = restore_with(&to, &keyless, None).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{}/secrets.key", keyless.display())) && err.contains("kept"),
        "{err}"
    );

    // Another key.
    let other = dir.path().join("other.key");
    let (code, _, err) = tenax(&["secrets", "generate-key", &path(&other)]).await;
    assert_eq!(code, 0, "{err}");
    let wrong = dir.path().join("wrong");
    let (code, _, err) = restore_with(&to, &wrong, Some(&other)).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("does not open with the secrets key file") && err.contains(&path(&other)),
        "{err}"
    );
    assert!(
        !wrong.join("tenax.redb").exists() && !wrong.join("tenax.wal").exists(),
        "a store that did not open is removed again"
    );

    // The right key, named, restores; the target then serves the job.
    let right = dir.path().join("right");
    let (code, out, err) = restore_with(&to, &right, Some(key)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Jobs: 0 scheduled, 1 ready"), "{out}");

    // A stopped server's data directory is backed up without it; a running one's is refused.
    let offline = dir.path().join("offline");
    let data = path(server.data_dir());
    let (code, _, err) = tenax(&["backup", "--data-dir", &data, "--to", &path(&offline)]).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("open") && err.contains("stop it first"),
        "{err}"
    );
    server.stop().await;
    let (code, out, err) = tenax(&["backup", "--data-dir", &data, "--to", &path(&offline)]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Jobs: 1 (0 completed)"), "{out}");
    let again = dir.path().join("again");
    let (code, out, err) = restore_with(&offline, &again, Some(key)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Jobs: 0 scheduled, 1 ready"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_unscoped_admin_takes_a_backup_and_postgres_is_sent_to_its_own_tools() {
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let http = server.api.http().clone();
    let scoped = server
        .api
        .make_token(
            ADMIN,
            &json!({"name": "team admin", "role": "admin", "queues": ["team.*"]}),
        )
        .await;
    let producer = server
        .api
        .make_token(ADMIN, &json!({"name": "producer", "role": "producer"}))
        .await;
    for token in [&scoped, &producer] {
        let answer = http
            .post(server.api.url("/api/admin/backup"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 403);
        let body: Value = answer.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("may not take a backup")
                && message.contains("an admin token that is not scoped"),
            "{message}"
        );
    }
    let answer = http
        .post(server.api.url("/api/admin/backup"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    if on_postgres() {
        assert_eq!(answer.status(), 409);
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_embedded", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("pg_dump"), "{message}");
        // The command line says the same, as a refusal.
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("backup");
        let (code, _, err) = tenax(&[
            "backup",
            "--url",
            &server.api.base,
            "--token",
            ADMIN,
            "--to",
            to.to_str().unwrap(),
        ])
        .await;
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("pg_dump") && err.contains("409"), "{err}");
        assert!(!to.exists(), "{err}");
    } else {
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "application/x-tar");
        let bytes = answer.bytes().await.unwrap();
        let mut archive = tar::Archive::new(&bytes[..]);
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["tenax.redb", "backup.json"]);
        // Once sent, the server keeps no copy.
        let left: Vec<_> = std::fs::read_dir(server.data_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".backup-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// While one backup is taken or sent, another is refused; once it is read whole, the next is
/// taken. The store is larger than every buffer between the server and the client, so the
/// first answer, unread, holds the server's copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_backup_at_a_time() {
    if on_postgres() {
        return;
    }
    let server = TestServer::start(Options::manual()).await;
    let payload = "x".repeat(2000);
    for batch in 0..60 {
        let jobs = (0..200)
            .map(|i| json!({"queue": "q", "type": "t", "payload": {"b": batch, "i": i, "pad": payload}}))
            .collect();
        server.enqueue_batch(jobs).await;
    }
    let http = server.api.http().clone();
    let url = server.api.url("/api/admin/backup");
    let first = http.post(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let second = http.post(&url).send().await.unwrap();
    assert_eq!(second.status(), 409);
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["error"]["code"], "backup_in_progress", "{body}");
    let archive = first.bytes().await.unwrap();
    assert!(archive.len() > 20_000_000, "{} bytes", archive.len());
    let third = http.post(&url).send().await.unwrap();
    assert_eq!(third.status(), 200);
    assert!(third.bytes().await.unwrap().len() > 20_000_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_keeps_its_secret_through_backup_and_restore() {
    if on_postgres() {
        return;
    }
    let receiver = Receiver::ok().await;
    let flags = ["--allow-private-endpoints"];
    let mut server = TestServer::start(Options::system().flags(&flags)).await;
    let sub = server
        .subscribe(
            "orders",
            json!({"endpoint": receiver.url("/hook")}),
            json!({"secret": SECRET}),
        )
        .await;
    let sub = sub["id"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let to = dir.path().join("backup");
    backup(&server, &to).await;
    server.stop().await;
    let (restored, said) = restore(&server, &to).await;
    assert!(said.contains("Subscriptions: 1"), "{said}");
    let restored = TestServer::start_in(restored, Options::system().flags(&flags)).await;
    let view = restored
        .api
        .expect(Method::GET, &format!("/api/subscriptions/{sub}"), None, 200)
        .await;
    assert_eq!(view["endpoint"], json!(receiver.url("/hook")), "{view}");
    restored
        .enqueue(json!({"queue": "orders", "type": "order.paid", "payload": {"total": 3}}))
        .await;
    let received = receiver.wait_for(1, PATIENCE).await;
    let request = &received[0];
    let key = signing::secret_key(SECRET).unwrap();
    let timestamp: u64 = request.header("webhook-timestamp").parse().unwrap();
    assert!(
        signing::verify(
            &key,
            &request.header("webhook-id"),
            timestamp,
            &request.body,
            &request.header("webhook-signature"),
        ),
        "the restored server signs with the subscription's secret"
    );
}
