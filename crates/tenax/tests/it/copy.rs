//! `tenax copy`, end to end with the real binary: a data directory with every kind of record
//! (jobs in each state with their errors and results, a delivered webhook with its attempts, an encrypted
//! queue, queue settings, a schedule, an open batch, an API token) copied into a PostgreSQL database and back
//! into a new data directory; servers started on each copy show the same jobs, settings,
//! schedule and attempts, accept the same token, and sign deliveries with the same secret. A
//! target that holds records, and data a server is using, are refused.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use receiver::Receiver;
use serde_json::{Value, json};
use served::{PATIENCE, Served, said, tenax};
use tenax::delivery::signing;

use crate::common::postgres;
use crate::common::receiver;
use crate::common::served;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// A Zaqar client's headers.
const ZAQAR: [(&str, &str); 2] = [
    ("Client-ID", "3381af92-2b9e-11e3-b191-71861300734c"),
    ("X-Project-ID", "p1"),
];
const PLAIN_SECRET_BODY: &str = "the-launch-code-is-0000";
/// More jobs than one batch of the copy holds.
const BULK: usize = 2_500;

/// The records the test made on the source, by what it checks.
struct Made {
    jobs: Vec<u64>,
    in_flight: u64,
    encrypted: u64,
    delivery: u64,
    token: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_moves_into_postgres_and_back_with_everything() {
    let Some(url) = postgres::fresh_database().await else {
        return;
    };
    let receiver = Receiver::ok().await;
    let top = tempfile::tempdir().unwrap();
    let source = top.path().join("source");
    let log = top.path().join("server.log");
    let key = postgres::secrets_key_file();
    let key = key.to_str().unwrap();

    let served = Served::start(&source, &log, &[]).await;
    let made = fill(&served, &receiver).await;
    let before = snapshot(&served, &made).await;
    // Not while a server uses the source.
    let busy = tenax(&["copy", "--from", source.to_str().unwrap(), "--to", &url]);
    assert_eq!(busy.status.code(), Some(2), "{}", said(&busy));
    assert!(said(&busy).contains("stop it first"), "{}", said(&busy));
    served.stop();

    let into_postgres = [
        "copy",
        "--from",
        source.to_str().unwrap(),
        "--to",
        &url,
        "--to-secrets-key-file",
        key,
    ];
    let copied = tenax(&into_postgres);
    assert!(copied.status.success(), "{}", said(&copied));
    let text = said(&copied);
    assert!(text.contains("counts match on both sides"), "{text}");
    assert!(
        text.contains(&format!("copied {} jobs", BULK + 12)),
        "every job, deliveries included: {text}"
    );

    // A database dump holds the encrypted queue's payload and the webhook secret sealed only.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let dump: String = client
        .query(
            "SELECT t::text FROM tenax_all_jobs t UNION ALL SELECT s::text FROM tenax_subscriptions s",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    assert!(
        !dump.contains(PLAIN_SECRET_BODY),
        "an encrypted payload in clear"
    );
    assert!(!dump.contains(SECRET), "a webhook secret in clear");
    drop(client);

    let on_postgres = top.path().join("pg-node");
    let pg_flags = ["--database-url", url.as_str(), "--secrets-key-file", key];
    let served = Served::start(&on_postgres, &log, &pg_flags).await;
    assert_same(&before, &snapshot(&served, &made).await, &made);
    deliveries_still_signed(&served, &receiver, 2).await;
    let after_pg = snapshot(&served, &made).await;
    served.stop();

    // Into the database again: it holds records now.
    let again = tenax(&into_postgres);
    assert_eq!(again.status.code(), Some(2), "{}", said(&again));
    assert!(
        said(&again).contains("the target is not empty"),
        "{}",
        said(&again)
    );

    // And back into a new data directory, with a key of its own.
    let back = top.path().join("back");
    let copied = tenax(&[
        "copy",
        "--from",
        &url,
        "--from-secrets-key-file",
        key,
        "--to",
        back.to_str().unwrap(),
    ]);
    assert!(copied.status.success(), "{}", said(&copied));
    let served = Served::start(&back, &log, &[]).await;
    assert_same(&after_pg, &snapshot(&served, &made).await, &made);
    deliveries_still_signed(&served, &receiver, 3).await;
    // The batch's pending member is still counted on the copy: its completion fires.
    let pending = made.jobs[made.jobs.len() - 1];
    let taken = served
        .post(
            "/api/take",
            json!({"queues": ["batched"], "lease": "1h"}),
            &[],
        )
        .await;
    assert_eq!(taken["jobs"][0]["id"].as_u64(), Some(pending), "{taken}");
    served
        .post(
            &format!("/api/jobs/{pending}/complete"),
            json!({"lease_token": taken["jobs"][0]["lease_token"]}),
            &[],
        )
        .await;
    let batches = served.get("/api/batches").await;
    assert_eq!(batches["batches"][0]["counts"]["completed"], 2, "{batches}");
    let closed = served.post("/api/batches/1/close", json!({}), &[]).await;
    assert_eq!(closed["state"], "finished", "{closed}");
    let callbacks = served.get("/api/jobs?queue=batch-cb").await;
    assert_eq!(
        callbacks["jobs"].as_array().map(Vec::len),
        Some(1),
        "{callbacks}"
    );
    // The token made on the first server still opens the API of the last.
    served.stop();
    let served = Served::start(&back, &log, &["--auth", "on"]).await;
    let bearer = format!("Bearer {}", made.token);
    let path = format!("/api/jobs/{}", made.jobs[0]);
    assert_eq!(served.status_of(&path, &[]).await, 401);
    assert_eq!(
        served
            .status_of(&path, &[("Authorization", bearer.as_str())])
            .await,
        200
    );
    served.stop();
}

/// Makes a job in every state, a delivered webhook, an encrypted queue, settings, a schedule,
/// a token, and many plain jobs.
async fn fill(served: &Served, receiver: &Receiver) -> Made {
    let token = served
        .post(
            "/api/tokens",
            json!({"name": "dashboard", "role": "reader"}),
            &[],
        )
        .await["token"]
        .as_str()
        .unwrap()
        .to_owned();
    served
        .put(
            "/api/queues/work?create=true",
            json!({"concurrency": 7, "policy": {"type": "fixed", "delay": "1h"}}),
            &[],
        )
        .await;
    served
        .put(
            "/api/queues/vault?create=true",
            json!({"encrypt_payloads": true}),
            &[],
        )
        .await;
    served
        .put(
            "/api/schedules/nightly",
            json!({"cron": "0 3 * * *", "job": {"queue": "work", "type": "report"}}),
            &[],
        )
        .await;
    // Zaqar's queue with its metadata and a message.
    served
        .put(
            "/v2/queues/zq",
            json!({"_default_message_ttl": 3600, "team": "billing"}),
            &ZAQAR,
        )
        .await;
    served
        .post(
            "/v2/queues/zq/messages",
            json!({"messages": [{"body": {"event": "paid"}, "ttl": 600}]}),
            &ZAQAR,
        )
        .await;
    served
        .post(
            "/api/queues/orders/subscriptions",
            json!({"endpoint": receiver.url("/native"), "secret": SECRET}),
            &[],
        )
        .await;
    let enqueue = |body: Value| async move {
        served.post("/api/jobs", body, &[]).await["id"]
            .as_u64()
            .unwrap()
    };
    let take = |queue: &'static str| async move {
        let taken = served
            .post("/api/take", json!({"queues": [queue], "lease": "1h"}), &[])
            .await;
        let job = &taken["jobs"][0];
        (job["id"].as_u64().unwrap(), job["lease_token"].clone())
    };

    let completed = enqueue(json!({"queue": "done", "type": "t", "payload": {"n": 1}})).await;
    let (id, lease) = take("done").await;
    assert_eq!(id, completed);
    served
        .post(
            &format!("/api/jobs/{id}/complete"),
            json!({"lease_token": lease, "result": {"sum": 3,  "spaced": true}}),
            &[],
        )
        .await;
    // An encrypted queue's completed job: its result sealed, and re-sealed by the copy.
    let sealed_result = enqueue(json!({"queue": "vault", "type": "t", "payload": {"n": 0}})).await;
    let (id, lease) = take("vault").await;
    assert_eq!(id, sealed_result);
    served
        .post(
            &format!("/api/jobs/{id}/complete"),
            json!({"lease_token": lease, "result": {"s": PLAIN_SECRET_BODY}}),
            &[],
        )
        .await;
    let dead = enqueue(
        json!({"queue": "graveyard", "type": "t", "payload": {"n": 2},
                              "unique_key": "only-one"}),
    )
    .await;
    let (id, lease) = take("graveyard").await;
    served
        .post(
            &format!("/api/jobs/{id}/fail"),
            json!({"lease_token": lease, "retryable": false,
                   "error": {"message": "no such user", "detail": {"user": 42}}}),
            &[],
        )
        .await;
    let retrying = enqueue(json!({"queue": "work", "type": "t", "payload": {"n": 3}})).await;
    let (id, lease) = take("work").await;
    assert_eq!(id, retrying);
    served
        .post(
            &format!("/api/jobs/{id}/fail"),
            json!({"lease_token": lease, "error": "timeout"}),
            &[],
        )
        .await;
    let in_flight = enqueue(json!({"queue": "busy", "type": "t", "payload": {"n": 4},
                                   "priority": 5}))
    .await;
    take("busy").await;
    let scheduled = enqueue(json!({"queue": "later", "type": "t", "payload": {"n": 5},
                                   "run_at": "2099-01-01T00:00:00Z"}))
    .await;
    let encrypted =
        enqueue(json!({"queue": "vault", "type": "t", "payload": {"s": PLAIN_SECRET_BODY}})).await;
    let message =
        enqueue(json!({"queue": "orders", "type": "order.paid", "payload": {"round": 1}})).await;
    receiver.wait_for(1, PATIENCE).await;
    let deliveries = served.get("/api/subscriptions/1/deliveries").await;
    let delivery = deliveries["deliveries"][0]["id"].as_u64().unwrap();
    // Its attempt is logged with its completion: wait until the delivery says so.
    let deadline = std::time::Instant::now() + PATIENCE;
    while served.get(&format!("/api/deliveries/{delivery}")).await["status"] != "completed" {
        assert!(
            std::time::Instant::now() < deadline,
            "the delivery did not complete"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // An open batch with one member completed and one pending: copied with its counts, and
    // still counting on the copy.
    let made_batch = served
        .post(
            "/api/batches",
            json!({"on_complete": {"queue": "batch-cb", "type": "cb"}, "open": true,
                   "jobs": [{"queue": "batched", "type": "t"}, {"queue": "batched", "type": "t"}]}),
            &[],
        )
        .await;
    let members: Vec<u64> = made_batch["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    let (id, lease) = take("batched").await;
    assert_eq!(id, members[0]);
    served
        .post(
            &format!("/api/jobs/{id}/complete"),
            json!({"lease_token": lease}),
            &[],
        )
        .await;
    let bulk: Vec<Value> = (0..BULK)
        .map(|n| json!({"queue": "bulk", "type": "t", "payload": {"n": n}}))
        .collect();
    served
        .post("/api/jobs/batch", json!({"jobs": bulk}), &[])
        .await;
    Made {
        jobs: vec![
            completed,
            sealed_result,
            dead,
            retrying,
            in_flight,
            scheduled,
            encrypted,
            message,
            delivery,
            members[0],
            members[1],
        ],
        in_flight,
        encrypted,
        delivery,
        token,
    }
}

/// What the checks compare, as the API shows it.
#[derive(Debug)]
struct Snapshot {
    jobs: Vec<Value>,
    queues: Value,
    schedule: Value,
    subscriptions: Value,
    attempts: Value,
    stats: Value,
    zaqar_queue: Value,
    zaqar_messages: Value,
    batches: Value,
}

async fn snapshot(served: &Served, made: &Made) -> Snapshot {
    let mut jobs = Vec::new();
    for id in &made.jobs {
        jobs.push(served.get(&format!("/api/jobs/{id}")).await);
    }
    let mut schedule = served.get("/api/schedules/nightly").await;
    // How many times it was written is the store's own count.
    schedule.as_object_mut().unwrap().remove("revision");
    let mut subscriptions = served.get("/api/subscriptions").await;
    for subscription in subscriptions["subscriptions"].as_array_mut().unwrap() {
        // Health is what the serving server's memory saw lately (and writes back now and
        // then), not a record a copy moves.
        subscription.as_object_mut().unwrap().remove("health");
    }
    let mut zaqar_messages = served
        .get_with("/v2/queues/zq/messages?echo=true", &ZAQAR)
        .await;
    for message in zaqar_messages["messages"].as_array_mut().unwrap() {
        // Seconds since it was posted: the clock's, not the record's.
        message.as_object_mut().unwrap().remove("age");
    }
    Snapshot {
        jobs,
        queues: served.get("/api/queues").await,
        schedule,
        subscriptions,
        attempts: served
            .get(&format!("/api/deliveries/{}/attempts", made.delivery))
            .await,
        stats: served.get("/api/stats").await,
        zaqar_queue: served.get_with("/v2/queues/zq", &ZAQAR).await,
        zaqar_messages,
        batches: served.get("/api/batches").await,
    }
}

/// Compares two snapshots; the in-flight job arrives ready, its lease not carried over.
fn assert_same(before: &Snapshot, after: &Snapshot, made: &Made) {
    for (old, new) in before.jobs.iter().zip(&after.jobs) {
        let id = old["id"].as_u64().unwrap();
        if id == made.in_flight && old["status"] == "in_flight" {
            assert_eq!(new["status"], "ready", "{new}");
            for field in [
                "queue",
                "type",
                "payload",
                "priority",
                "created_at",
                "attempt",
            ] {
                assert_eq!(old[field], new[field], "job {id}'s {field}");
            }
            continue;
        }
        assert_eq!(old, new, "job {id}");
    }
    let encrypted = after
        .jobs
        .iter()
        .find(|j| j["id"] == made.encrypted)
        .unwrap();
    assert_eq!(encrypted["payload"]["s"], PLAIN_SECRET_BODY);
    let results: Vec<&Value> = after.jobs.iter().map(|j| &j["result"]).collect();
    assert_eq!(
        results[0],
        &json!({"sum": 3, "spaced": true}),
        "a result copied"
    );
    assert_eq!(
        results[1],
        &json!({"s": PLAIN_SECRET_BODY}),
        "a sealed result copied and opened"
    );
    assert_eq!(at_rest(&before.queues), at_rest(&after.queues));
    assert_eq!(before.schedule, after.schedule);
    assert_eq!(before.batches, after.batches);
    assert_eq!(
        before.batches["batches"][0]["counts"],
        json!({"total": 2, "pending": 1, "completed": 1, "dead": 0, "deleted": 0, "cancelled": 0}),
        "{}",
        before.batches
    );
    assert_eq!(before.zaqar_queue, after.zaqar_queue);
    assert_eq!(before.zaqar_queue["team"], "billing");
    assert_eq!(before.zaqar_messages, after.zaqar_messages);
    assert_eq!(
        before.zaqar_messages["messages"][0]["body"]["event"], "paid",
        "{}",
        before.zaqar_messages
    );
    assert_eq!(before.subscriptions, after.subscriptions);
    assert_eq!(before.attempts, after.attempts);
    let attempts = after.attempts["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{}", after.attempts);
    assert_eq!(attempts[0]["result"], "delivered", "{}", after.attempts);
    assert_eq!(at_rest(&before.stats), at_rest(&after.stats));
}

/// `value` with its counts as a copy keeps them: a job in flight is ready.
fn at_rest(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut map: serde_json::Map<String, Value> =
                map.iter().map(|(k, v)| (k.clone(), at_rest(v))).collect();
            if let (Some(in_flight), Some(ready)) = (
                map.get("in_flight").and_then(Value::as_u64),
                map.get("ready").and_then(Value::as_u64),
            ) {
                map.insert("ready".into(), json!(ready + in_flight));
                map.insert("in_flight".into(), json!(0));
            }
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(items.iter().map(at_rest).collect()),
        other => other.clone(),
    }
}

/// A message published on the copy is signed with the secret the subscription had.
async fn deliveries_still_signed(served: &Served, receiver: &Receiver, round: usize) {
    served
        .post(
            "/api/jobs",
            json!({"queue": "orders", "type": "order.paid", "payload": {"round": round}}),
            &[],
        )
        .await;
    let all = receiver.wait_for(round, PATIENCE).await;
    let native = all
        .iter()
        .find(|r| r.json().to_string().contains(&format!("\"round\":{round}")))
        .unwrap_or_else(|| panic!("no delivery of round {round} in {all:?}"));
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
        "round {round}: the copy signs with the subscription's secret"
    );
}
