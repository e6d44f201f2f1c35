//! Encrypted queues (issue 26), end to end on the real server and the real store (embedded, or
//! PostgreSQL with `TENAX_TEST_STORE=postgres`): a payload enqueued to a queue whose settings
//! say `encrypt_payloads` (native) or whose metadata says `_enable_encrypt_messages` (Zaqar)
//! reads back plain through every read path (job, listing, take, streaming take, dead jobs and
//! replay, a webhook delivery to a real receiver, Zaqar's get, list, claim and pop), and is
//! nowhere in a copy of the store, while a plain queue's payload is (so the scan can fail).
//! Turning the setting off leaves sealed payloads readable and stores new ones plain; a
//! rotation of the secrets key (`tenax secrets rotate-key`) leaves sealed payloads readable;
//! servers sharing a PostgreSQL database share one data key.

use std::path::Path;
use std::process::Command;

use common::{Options, PATIENCE, TestServer, postgres};
use node::Node;
use receiver::Receiver;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common;
use crate::common::node;
use crate::common::receiver;

/// Texts that must never be in the store in clear: each test's own.
const NATIVE_SECRET: &str = "native-canary-4f1d9c0e7b";
const ZAQAR_SECRET: &str = "zaqar-canary-8a27e5d3c1";
const POPPED_SECRET: &str = "popped-canary-61b0f2a9de";
/// A plain queue's text: in the store in clear, which shows the scan finds what is there.
const PLAIN_TEXT: &str = "plain-canary-0c93b7e4a5";

const PROJECT: &str = "p1";
const CLIENT: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";

/// A server that can POST to a receiver on loopback; on PostgreSQL, with a key file of its own
/// (so that a rotation here changes no other test's key).
async fn server(key_dir: &Path) -> TestServer {
    let mut flags = vec!["--allow-private-endpoints".to_owned()];
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

/// A Zaqar request with its project and client headers; the answer's status and text.
async fn zaqar(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, String) {
    let mut request = server
        .api
        .http()
        .request(method.clone(), server.api.url(path))
        .header("Client-ID", CLIENT)
        .header("X-Project-ID", PROJECT);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// A Zaqar request that must answer `expected`; the answer's text.
async fn zaqar_must(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
    expected: u16,
) -> String {
    let (status, text) = zaqar(server, method.clone(), path, body).await;
    assert_eq!(status, expected, "{method} {path}: {text}");
    text
}

#[track_caller]
fn shows(text: &str, secret: &str, what: &str) {
    assert!(
        text.contains(secret),
        "{what} does not show {secret}: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_payloads_read_back_plain_everywhere_and_are_not_in_the_store() {
    let keys = tempfile::tempdir().expect("a directory");
    let mut server = server(keys.path()).await;
    let receiver = Receiver::ok().await;

    // The native setting, shown back.
    let view = server
        .put(
            "/api/queues/secret?create=true",
            json!({"encrypt_payloads": true}),
        )
        .await;
    assert_eq!(view["encrypt_payloads"], json!(true), "{view}");
    assert_eq!(
        server.get("/api/queues/secret").await["encrypt_payloads"],
        json!(true)
    );
    server
        .subscribe(
            "secret",
            json!({"endpoint": receiver.url("/hook")}),
            json!({}),
        )
        .await;
    let id = server
        .enqueue(json!({"queue": "secret", "type": "card", "payload": {"pan": NATIVE_SECRET}}))
        .await;
    server
        .enqueue(json!({"queue": "plain", "type": "note", "payload": {"text": PLAIN_TEXT}}))
        .await;
    assert!(
        server
            .get("/api/queues/plain")
            .await
            .get("encrypt_payloads")
            .is_none()
    );

    // Get and list.
    assert_eq!(
        server.job(id).await["payload"],
        json!({"pan": NATIVE_SECRET})
    );
    shows(
        &server.get("/api/jobs?queue=secret").await.to_string(),
        NATIVE_SECRET,
        "the list",
    );
    // The webhook delivery, to a real receiver.
    let received = receiver.wait_for(1, PATIENCE).await;
    shows(
        &String::from_utf8_lossy(&received[0].body),
        NATIVE_SECRET,
        "the delivery",
    );
    // Take, then fail for good: the dead job; replayed, the streaming take.
    let taken = server.take_one("secret").await;
    assert_eq!(
        taken.json["payload"],
        json!({"pan": NATIVE_SECRET}),
        "the take"
    );
    server
        .fail(&taken, "declined", json!({"retryable": false}))
        .await;
    shows(
        &server.get("/api/dead?queue=secret").await.to_string(),
        NATIVE_SECRET,
        "the dead jobs",
    );
    let replayed = server.post("/api/dead/replay", json!({"ids": [id]})).await;
    assert_eq!(replayed["replayed"], json!(1), "{replayed}");
    let mut stream = server.stream(json!({"queues": ["secret"]})).await;
    let streamed = stream.next_n(1).await;
    assert_eq!(
        streamed[0].json["payload"],
        json!({"pan": NATIVE_SECRET}),
        "the stream"
    );
    drop(stream);

    // Zaqar: the metadata, shown back; get, list, claim and pop.
    zaqar_must(
        &server,
        Method::PUT,
        "/v2/queues/zq",
        Some(json!({"_enable_encrypt_messages": true})),
        201,
    )
    .await;
    let shown = zaqar_must(&server, Method::GET, "/v2/queues/zq", None, 200).await;
    let shown: Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(shown["_enable_encrypt_messages"], json!(true), "{shown}");
    let posted = zaqar_must(
        &server,
        Method::POST,
        "/v2/queues/zq/messages",
        Some(json!({"messages": [{"body": {"z": ZAQAR_SECRET}, "ttl": 300}]})),
        201,
    )
    .await;
    let posted: Value = serde_json::from_str(&posted).expect("JSON");
    let href = posted["resources"][0].as_str().expect("a message href");
    let message = href.rsplit('/').next().expect("an id");
    for (path, read) in [
        (format!("/v2/queues/zq/messages/{message}"), "Zaqar's get"),
        (
            format!("/v2/queues/zq/messages?ids={message}"),
            "Zaqar's get by ids",
        ),
        (
            "/v2/queues/zq/messages?echo=true".to_owned(),
            "Zaqar's list",
        ),
    ] {
        let got = zaqar_must(&server, Method::GET, &path, None, 200).await;
        shows(&got, ZAQAR_SECRET, read);
    }
    let claimed = zaqar_must(
        &server,
        Method::POST,
        "/v2/queues/zq/claims",
        Some(json!({"ttl": 60, "grace": 60})),
        201,
    )
    .await;
    shows(&claimed, ZAQAR_SECRET, "Zaqar's claim");
    zaqar_must(
        &server,
        Method::POST,
        "/v2/queues/zq/messages",
        Some(json!({"messages": [{"body": {"z": POPPED_SECRET}, "ttl": 300}]})),
        201,
    )
    .await;
    let popped = zaqar_must(
        &server,
        Method::DELETE,
        "/v2/queues/zq/messages?pop=1",
        None,
        200,
    )
    .await;
    shows(&popped, POPPED_SECRET, "Zaqar's pop");

    // A copy of the store shows the plain queue's payload, and none of the sealed ones.
    let copy = server.store_copy().await;
    shows(&copy, PLAIN_TEXT, "the store");
    for secret in [NATIVE_SECRET, ZAQAR_SECRET, POPPED_SECRET] {
        assert!(!copy.contains(secret), "{secret} is in the store in clear");
    }
    // Read again after the restart (the embedded store's) or from the database.
    assert_eq!(
        server.job(id).await["payload"],
        json!({"pan": NATIVE_SECRET})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turned_off_sealed_payloads_stay_readable_and_new_ones_are_plain() {
    let keys = tempfile::tempdir().expect("a directory");
    let mut server = server(keys.path()).await;
    server
        .put(
            "/api/queues/q?create=true",
            json!({"encrypt_payloads": true}),
        )
        .await;
    let sealed = server
        .enqueue(json!({"queue": "q", "type": "t", "payload": NATIVE_SECRET}))
        .await;
    let view = server
        .put("/api/queues/q", json!({"encrypt_payloads": false}))
        .await;
    assert!(view.get("encrypt_payloads").is_none(), "{view}");
    let plain = server
        .enqueue(json!({"queue": "q", "type": "t", "payload": PLAIN_TEXT}))
        .await;
    assert_eq!(server.job(sealed).await["payload"], json!(NATIVE_SECRET));
    assert_eq!(server.job(plain).await["payload"], json!(PLAIN_TEXT));
    let copy = server.store_copy().await;
    shows(&copy, PLAIN_TEXT, "the store");
    assert!(
        !copy.contains(NATIVE_SECRET),
        "the sealed payload is in the store in clear"
    );
    // Both still read, in one listing, after the restart.
    let listed = server.get("/api/jobs?queue=q").await.to_string();
    shows(&listed, NATIVE_SECRET, "the list");
    shows(&listed, PLAIN_TEXT, "the list");

    // A payload that looks like a sealed one (a JSON string of base64) is a payload like any
    // other: whether a payload is sealed is the job's record, not its text.
    let lookalike = server
        .enqueue(json!({"queue": "plain2", "type": "t", "payload": "AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA="}))
        .await;
    assert_eq!(
        server.job(lookalike).await["payload"],
        json!("AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=")
    );
}

/// `tenax secrets rotate-key` on the stopped server's store: the data key is sealed again with
/// the new key, and the payloads it sealed read as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_payloads_stay_readable_after_a_key_rotation() {
    let keys = tempfile::tempdir().expect("a directory");
    let mut server = server(keys.path()).await;
    server
        .put(
            "/api/queues/q?create=true",
            json!({"encrypt_payloads": true}),
        )
        .await;
    let before = server
        .enqueue(json!({"queue": "q", "type": "t", "payload": {"s": NATIVE_SECRET}}))
        .await;
    server.stop().await;
    let key_file = match server.database() {
        Some(_) => keys.path().join("secrets.key"),
        None => server.data_dir().join("secrets.key"),
    };
    let old = tenax_core::secrets::Keyring::read_file(&key_file).expect("the key file");
    let mut rotate = Command::new(env!("CARGO_BIN_EXE_tenax"));
    rotate
        .args(["secrets", "rotate-key"])
        .env_remove("TENAX_DATABASE_URL");
    match server.database() {
        Some(url) => rotate
            .args(["--database-url", url, "--secrets-key-file"])
            .arg(&key_file),
        None => rotate.arg("--data-dir").arg(server.data_dir()),
    };
    let rotated = rotate.output().expect("tenax runs");
    assert!(
        rotated.status.success(),
        "{}{}",
        String::from_utf8_lossy(&rotated.stdout),
        String::from_utf8_lossy(&rotated.stderr)
    );
    let new = tenax_core::secrets::Keyring::read_file(&key_file).expect("the key file");
    assert_ne!(new.current().id(), old.current().id(), "a new key seals");
    assert!(
        !new.holds(old.current().id()),
        "the old key is gone from the file"
    );

    server.start_again().await;
    assert_eq!(
        server.job(before).await["payload"],
        json!({"s": NATIVE_SECRET})
    );
    let after = server
        .enqueue(json!({"queue": "q", "type": "t", "payload": {"s": ZAQAR_SECRET}}))
        .await;
    let taken = server.take(&["q"], 2).await;
    let payloads: Vec<&Value> = taken.iter().map(|t| &t.json["payload"]).collect();
    assert_eq!(
        payloads,
        [&json!({"s": NATIVE_SECRET}), &json!({"s": ZAQAR_SECRET})]
    );
    assert_eq!(taken[1].id, after);
    let copy = server.store_copy().await;
    for secret in [NATIVE_SECRET, ZAQAR_SECRET] {
        assert!(!copy.contains(secret), "{secret} is in the store in clear");
    }
}

/// Servers starting together on one database make one data key between them, and each reads
/// what the other sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_one_database_share_one_data_key() {
    let Some(url) = postgres::fresh_database().await else {
        return;
    };
    let (a, b) = tokio::join!(Node::start(&url, &[], &[]), Node::start(&url, &[], &[]));
    a.must_put(
        "/api/queues/q?create=true",
        json!({"encrypt_payloads": true}),
        200,
    )
    .await;
    let on_a = a
        .must_post(
            "/api/jobs",
            json!({"queue": "q", "type": "t", "payload": NATIVE_SECRET}),
            201,
        )
        .await;
    // B's queue settings come from its cache, but an insert made from settings older than the
    // database's is made again from fresh ones: B seals too.
    let on_b = b
        .must_post(
            "/api/jobs",
            json!({"queue": "q", "type": "t", "payload": ZAQAR_SECRET}),
            201,
        )
        .await;
    for (node, id, secret) in [(&b, &on_a, NATIVE_SECRET), (&a, &on_b, ZAQAR_SECRET)] {
        let job = node.must_get(&format!("/api/jobs/{}", id["id"]), 200).await;
        assert_eq!(job["payload"], json!(secret), "{job}");
    }
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("a connection");
    tokio::spawn(connection);
    let keys: i64 = client
        .query_one("SELECT count(*) FROM tenax_payload_key", &[])
        .await
        .expect("the data key's row")
        .get(0);
    assert_eq!(keys, 1);
    let rows: String = client
        .query("SELECT t::text FROM tenax_all_jobs t", &[])
        .await
        .expect("the job rows")
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    for secret in [NATIVE_SECRET, ZAQAR_SECRET] {
        assert!(!rows.contains(secret), "{secret} in {rows}");
    }
    let sealed: i64 = client
        .query_one(
            "SELECT count(*) FROM tenax_all_jobs WHERE payload_sealed",
            &[],
        )
        .await
        .expect("the count")
        .get(0);
    assert_eq!(sealed, 2, "both jobs are sealed");
}
