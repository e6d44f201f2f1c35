//! Secrets at rest, end to end with the real binary (`tenax serve`, `tenax secrets`): the data
//! directory and its files are readable by their owner only (and looser ones are named at
//! start); webhook secrets and header values are nowhere in the files in clear, yet deliveries
//! carry the right signature and headers, before and after `tenax secrets rotate-key`; a wrong
//! or lost key is refused at start with a message that says what to do; on PostgreSQL every
//! server needs the key file, and a rotation runs on the database with its servers stopped.
//!
//! What each backend keeps sealed, and how sealing survives a rotation stopped half-way or an
//! upgrade from a release that kept secrets in clear, is in the conformance suite
//! (`conformance/secrets.rs`).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use receiver::{Received, Receiver};
use serde_json::json;
use served::{PATIENCE, Served, said, serve, tenax};
use tenax::delivery::signing;
use tenax_core::secrets::{Keyring, SECRETS_KEY_FILE};

use crate::common::postgres;
use crate::common::receiver;
use crate::common::served;

/// The subscription's signing secret and its extra header's value: never on disk in clear.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const HEADER_VALUE: &str = "Bearer hunter2-at-rest";
const ZAQAR_HEADER_VALUE: &str = "zaqar-header-at-rest";

/// Runs `tenax serve` expecting it to refuse to start: its exit status and log.
async fn refused_start(data_dir: &Path, extra: &[&str]) -> String {
    let log = data_dir.with_extension("refused.log");
    let mut child = serve(data_dir, &log, "127.0.0.1:0", extra);
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("it started:\n{}", std::fs::read_to_string(&log).unwrap());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{text}");
    text
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Whether any file under `dir` holds `text`.
fn found_in(dir: &Path, text: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(found_in(&path, text));
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(text.len()).any(|w| w == text.as_bytes()) {
                found.push(path);
            }
        }
    }
    found
}

/// The key id a key file seals with.
fn key_id(path: &Path) -> String {
    Keyring::read_file(path).unwrap().current().id().to_string()
}

/// Creates a native subscription of `orders` (with the known secret and an extra header) and
/// a Zaqar one of `zq` (with a `post_headers` value), both delivering to `receiver`.
async fn subscribe(served: &Served, receiver: &Receiver) {
    served
        .post(
            "/api/queues/orders/subscriptions",
            json!({"endpoint": receiver.url("/native"), "secret": SECRET,
                   "headers": {"Authorization": HEADER_VALUE}}),
            &[],
        )
        .await;
    served
        .post(
            "/v2/queues/zq/subscriptions",
            json!({"subscriber": receiver.url("/zaqar"), "ttl": 3600,
                   "options": {"post_headers": {"X-Zaqar-Key": ZAQAR_HEADER_VALUE}}}),
            &zaqar_headers(),
        )
        .await;
}

fn zaqar_headers() -> [(&'static str, &'static str); 2] {
    [
        ("Client-ID", "3381af92-2b9e-11e3-b191-71861300734c"),
        ("X-Project-ID", "p1"),
    ]
}

/// Publishes one message to each subscription and checks what `receiver` gets: the native
/// delivery signed with [`SECRET`] and carrying its header, the Zaqar one its `post_headers`.
async fn deliveries_are_signed_and_carry_their_headers(
    served: &Served,
    receiver: &Receiver,
    round: usize,
) {
    served
        .post(
            "/api/jobs",
            json!({"queue": "orders", "type": "order.paid", "payload": {"round": round}}),
            &[],
        )
        .await;
    served
        .post(
            "/v2/queues/zq/messages",
            json!({"messages": [{"body": {"round": round}, "ttl": 300}]}),
            &zaqar_headers(),
        )
        .await;
    let all = receiver.wait_for(2 * round, PATIENCE).await;
    let newest = |path: &str| -> Received {
        all.iter()
            .rev()
            .find(|r| {
                let body = r.json();
                // The native envelope names its delivery; Zaqar's notification its queue.
                body.to_string().contains(&format!("\"round\":{round}"))
                    && body.get("delivery_id").is_some() == (path == "native")
            })
            .unwrap_or_else(|| panic!("no {path} delivery of round {round} in {all:?}"))
            .clone()
    };
    let native = newest("native");
    let key = signing::secret_key(SECRET).unwrap();
    let timestamp: u64 = native.header("webhook-timestamp").parse().unwrap();
    assert!(
        signing::verify(
            &key,
            &native.header("webhook-id"),
            timestamp,
            &native.body,
            &native.header("webhook-signature"),
        ),
        "round {round}: the signature does not verify"
    );
    assert_eq!(native.header("authorization"), HEADER_VALUE);
    let zaqar = newest("zaqar");
    assert_eq!(zaqar.header("x-zaqar-key"), ZAQAR_HEADER_VALUE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_and_its_files_are_private_and_looser_ones_are_named() {
    let top = tempfile::tempdir().unwrap();
    let data = top.path().join("nested/data");
    let log = top.path().join("server.log");
    // Authentication on: the first admin token is written too.
    let served = Served::start(&data, &log, &["--auth", "on"]).await;
    served.stop();
    assert_eq!(mode(&data), 0o700, "the data directory");
    for file in ["tenax.redb", "tenax.wal", SECRETS_KEY_FILE, "admin-token"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("may be read by other users"), "{text}");
    assert!(text.contains("made the secrets key"), "{text}");

    // Loosened by someone: named at the next start, left as they are.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let redb = data.join("tenax.redb");
    std::fs::set_permissions(&redb, std::fs::Permissions::from_mode(0o644)).unwrap();
    let served = Served::start(&data, &log, &["--auth", "on"]).await;
    let text = served.text();
    served.stop();
    for (path, shown) in [(&data, "0755"), (&redb, "0644")] {
        let line = text
            .lines()
            .find(|l| l.contains("WARN") && l.contains(&format!("path={} ", path.display())))
            .unwrap_or_else(|| panic!("no warning naming {}:\n{text}", path.display()));
        assert!(line.contains(&format!("mode={shown}")), "{line}");
        assert!(line.contains("may be read by other users"), "{line}");
    }
    assert_eq!((mode(&data), mode(&redb)), (0o755, 0o644));

    // A key file others may read is named too (this one is not the store's key: refused).
    let loose = top.path().join("loose.key");
    Keyring::generate("t").unwrap().write_file(&loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = refused_start(&data, &["--secrets-key-file", loose.to_str().unwrap()]).await;
    assert!(
        text.lines().any(|l| l.contains("WARN")
            && l.contains("the secrets key file may be read by other users")
            && l.contains(&format!("path={} mode=0644", loose.display()))),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_never_on_disk_in_clear_and_deliveries_survive_a_key_rotation() {
    let receiver = Receiver::ok().await;
    let top = tempfile::tempdir().unwrap();
    let data = top.path().join("data");
    let log = top.path().join("server.log");
    let served = Served::start(&data, &log, &[]).await;
    subscribe(&served, &receiver).await;
    deliveries_are_signed_and_carry_their_headers(&served, &receiver, 1).await;
    served.stop();
    for secret in [SECRET, HEADER_VALUE, ZAQAR_HEADER_VALUE] {
        assert_eq!(found_in(&data, secret), Vec::<PathBuf>::new(), "{secret}");
    }

    let key_file = data.join(SECRETS_KEY_FILE);
    let old_key = key_id(&key_file);
    let old_copy = top.path().join("old.key");
    std::fs::copy(&key_file, &old_copy).unwrap();
    let rotated = tenax(&[
        "secrets",
        "rotate-key",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(rotated.status.success(), "{}", said(&rotated));
    let new_key = key_id(&key_file);
    assert_ne!(new_key, old_key);
    assert!(said(&rotated).contains(&new_key), "{}", said(&rotated));
    assert_eq!(
        Keyring::read_file(&key_file).unwrap().ids(),
        new_key,
        "the key file holds the new key alone"
    );
    assert_eq!(mode(&key_file), 0o600);
    for secret in [SECRET, HEADER_VALUE, ZAQAR_HEADER_VALUE] {
        assert_eq!(found_in(&data, secret), Vec::<PathBuf>::new(), "{secret}");
    }

    // The old key no longer opens the store; the rotated one does, and nothing changed for
    // the receivers.
    let text = refused_start(&data, &["--secrets-key-file", old_copy.to_str().unwrap()]).await;
    assert!(
        text.contains(&format!("sealed with key {new_key}")) && text.contains("old.key"),
        "{text}"
    );
    let served = Served::start(&data, &log, &[]).await;
    deliveries_are_signed_and_carry_their_headers(&served, &receiver, 2).await;

    // A rotation is refused while a server has the store open, and changes nothing.
    let busy = tenax(&[
        "secrets",
        "rotate-key",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert_eq!(busy.status.code(), Some(2), "{}", said(&busy));
    assert!(said(&busy).contains("stop it first"), "{}", said(&busy));
    assert_eq!(key_id(&key_file), new_key);
    served.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_key_file_is_refused_not_replaced() {
    let top = tempfile::tempdir().unwrap();
    let data = top.path().join("data");
    let log = top.path().join("server.log");
    let served = Served::start(&data, &log, &[]).await;
    served.stop();
    let key = key_id(&data.join(SECRETS_KEY_FILE));
    std::fs::remove_file(data.join(SECRETS_KEY_FILE)).unwrap();
    let text = refused_start(&data, &[]).await;
    assert!(
        text.contains(&format!("sealed with key {key}")) && text.contains("is missing"),
        "{text}"
    );
    assert!(!data.join(SECRETS_KEY_FILE).exists(), "no new key was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_key_writes_a_private_key_file_and_never_replaces_one() {
    let top = tempfile::tempdir().unwrap();
    let path = top.path().join("k.key");
    let made = tenax(&["secrets", "generate-key", path.to_str().unwrap()]);
    assert!(made.status.success(), "{}", said(&made));
    assert_eq!(mode(&path), 0o600);
    let id = key_id(&path);
    assert!(said(&made).contains(&id), "{}", said(&made));
    let again = tenax(&["secrets", "generate-key", path.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "{}", said(&again));
    assert!(said(&again).contains("exists"), "{}", said(&again));
    assert_eq!(key_id(&path), id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_servers_share_a_key_file_and_a_rotation_runs_on_the_database() {
    let Some(url) = postgres::fresh_database().await else {
        return;
    };
    let receiver = Receiver::ok().await;
    let top = tempfile::tempdir().unwrap();
    let log = top.path().join("server.log");
    let data = top.path().join("data");
    let on_db = ["--database-url", url.as_str()];

    let text = refused_start(&data, &on_db).await;
    assert!(
        text.contains("--secrets-key-file: required with --database-url"),
        "{text}"
    );

    let key_file = top.path().join("cluster.key");
    let key_text = key_file.to_str().unwrap();
    assert!(
        tenax(&["secrets", "generate-key", key_text])
            .status
            .success()
    );
    let old_key = key_id(&key_file);
    let old_copy = top.path().join("old.key");
    std::fs::copy(&key_file, &old_copy).unwrap();
    let flags = [
        "--database-url",
        url.as_str(),
        "--secrets-key-file",
        key_text,
    ];
    let served = Served::start(&data, &log, &flags).await;
    subscribe(&served, &receiver).await;
    deliveries_are_signed_and_carry_their_headers(&served, &receiver, 1).await;

    // What a dump of the database shows.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let dump: String = client
        .query("SELECT t::text FROM tenax_subscriptions t", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    assert!(dump.contains(&receiver.url("/native")), "{dump}");
    for secret in [SECRET, HEADER_VALUE, ZAQAR_HEADER_VALUE] {
        assert!(!dump.contains(secret), "{secret} in {dump}");
    }

    // Not while a server uses the database.
    let rotate = [
        "secrets",
        "rotate-key",
        "--database-url",
        url.as_str(),
        "--secrets-key-file",
        key_text,
    ];
    let busy = tenax(&rotate);
    assert_eq!(busy.status.code(), Some(2), "{}", said(&busy));
    assert!(
        said(&busy).contains("using the database"),
        "{}",
        said(&busy)
    );
    assert_eq!(key_id(&key_file), old_key);
    served.stop();

    let rotated = tenax(&rotate);
    assert!(rotated.status.success(), "{}", said(&rotated));
    let new_key = key_id(&key_file);
    assert_ne!(new_key, old_key);
    let text = refused_start(
        &data,
        &[
            "--database-url",
            url.as_str(),
            "--secrets-key-file",
            old_copy.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        text.contains(&format!("sealed with key {new_key}")),
        "{text}"
    );
    let served = Served::start(&data, &log, &flags).await;
    deliveries_are_signed_and_carry_their_headers(&served, &receiver, 2).await;
    served.stop();
}
