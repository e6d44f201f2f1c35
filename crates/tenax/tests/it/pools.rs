//! A pooled deployment, end to end: pools registered with `tenax pools` in a catalogue
//! database, real `tenax serve` processes on the catalogue, and the queues' jobs in the pools'
//! databases (docs/postgres.md, "Pools"). Runs where the PostgreSQL test harness runs
//! (`tests/it/common/postgres.rs`), and skips, saying so, where it does not.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{Value, json};

use crate::common;
use crate::common::node::Node;
use crate::common::postgres;

const BIN: &str = env!("CARGO_BIN_EXE_tenax");

/// Runs `tenax pools ARGS` on the catalogue `catalogue`: exit code, stdout, stderr.
fn pools(catalogue: &str, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BIN)
        .arg("pools")
        .args(args)
        .args(["--database-url", catalogue])
        .arg("--secrets-key-file")
        .arg(postgres::secrets_key_file())
        .output()
        .expect("tenax pools runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A catalogue and two pool databases, the pools registered (weights 1 and 1); `None` where
/// the harness skips.
async fn deployment() -> Option<(String, [String; 2])> {
    let catalogue = postgres::fresh_database().await?;
    let one = postgres::fresh_database().await?;
    let two = postgres::fresh_database().await?;
    for (name, uri) in [("one", &one), ("two", &two)] {
        let (code, out, err) = pools(&catalogue, &["add", name, "--uri", uri, "--weight", "1"]);
        assert_eq!(code, 0, "{out}{err}");
    }
    Some((catalogue, [one, two]))
}

async fn query_one(url: &str, sql: &str) -> tokio_postgres::Row {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connected");
    tokio::spawn(connection);
    client.query_one(sql, &[]).await.expect("queried")
}

async fn jobs_in(url: &str) -> i64 {
    query_one(
        url,
        "SELECT (SELECT count(*) FROM tenax_jobs) + (SELECT count(*) FROM tenax_finished)",
    )
    .await
    .get(0)
}

#[tokio::test]
async fn pools_are_registered_listed_and_refused_with_their_reasons() {
    let Some((catalogue, [one, _two])) = deployment().await else {
        eprintln!("skipped: no PostgreSQL here (tests/it/common/postgres.rs)");
        return;
    };
    let (code, out, err) = pools(&catalogue, &["list"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[1].starts_with("one  1  1  -  0  "), "{out}");
    assert!(lines[2].starts_with("two  2  1  -  0  "), "{out}");
    assert!(
        !out.contains("postgres://"),
        "no URL (nor password) is printed: {out}"
    );

    // Every refusal names its field, and changes nothing.
    for (args, field) in [
        (vec!["add", "bad name", "--uri", &one], "name:"),
        (
            vec!["add", "three", "--uri", &one],
            "uri: pool \"one\" has this database",
        ),
        (vec!["add", "three", "--uri", "not a url"], "uri:"),
        (
            vec!["add", "three", "--uri", &one, "--options", "[1]"],
            "options: must be a JSON object",
        ),
        (vec!["remove", "nine"], "name: no pool"),
    ] {
        let (code, out, err) = pools(&catalogue, &args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(field), "{args:?}: {err}");
    }
    assert_eq!(pools(&catalogue, &["list"]).1.lines().count(), 3);

    // The URIs are sealed at rest: they may hold passwords.
    let stored: String = query_one(&catalogue, "SELECT string_agg(uri, ' ') FROM tenax_pools")
        .await
        .get(0);
    assert!(!stored.contains("postgres"), "{stored}");

    // A pool without queues goes; a pool's weight changes in place.
    let (code, out, err) = pools(&catalogue, &["add", "two", "--uri", &_two, "--weight", "5"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("number 2, weight 5"), "{out}");
    let (code, _, err) = pools(&catalogue, &["remove", "two"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(pools(&catalogue, &["list"]).1.lines().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_on_a_catalogue_spread_queues_over_its_pools() {
    let Some((catalogue, [one, two])) = deployment().await else {
        eprintln!("skipped: no PostgreSQL here (tests/it/common/postgres.rs)");
        return;
    };
    let a = Node::start(&catalogue, &[], &[]).await;
    let b = Node::start(&catalogue, &[], &[]).await;

    let queues: Vec<String> = (0..16).map(|i| format!("q{i}")).collect();
    let mut enqueued = BTreeSet::new();
    let mut pool_of = Vec::new();
    for queue in &queues {
        let answer = a
            .must_post(
                "/api/jobs",
                json!({"queue": queue, "payload": {"q": queue}}),
                201,
            )
            .await;
        let id = answer["id"].as_u64().expect("an id");
        enqueued.insert(id);
        // An id's remainder modulo 64 is its pool's number.
        pool_of.push((queue.clone(), id % 64));
    }
    let on = |number: u64| {
        pool_of
            .iter()
            .find(|(_, n)| *n == number)
            .map(|(q, _)| q.clone())
            .expect("a queue on the pool")
    };

    // One request that would change two pools is refused whole, naming why.
    let refused = a
        .must_post(
            "/api/jobs/batch",
            json!({"jobs": [{"queue": on(1)}, {"queue": on(2)}]}),
            409,
        )
        .await;
    assert_eq!(refused["error"]["code"], "across_pools", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("different pools")),
        "{refused}"
    );
    let (in_one, in_two) = (jobs_in(&one).await, jobs_in(&two).await);
    assert_eq!(in_one + in_two, 16);
    assert!(
        in_one > 0 && in_two > 0,
        "both pools hold queues: {in_one} / {in_two}"
    );
    assert_eq!(jobs_in(&catalogue).await, 0, "the catalogue holds no job");

    // The other server takes from every pool, and acknowledges by id wherever the job is.
    let taken = b
        .must_post("/api/take", json!({"queues": queues, "max": 100}), 200)
        .await;
    let taken: Vec<&Value> = taken["jobs"].as_array().expect("jobs").iter().collect();
    let ids: BTreeSet<u64> = taken
        .iter()
        .map(|j| j["id"].as_u64().expect("id"))
        .collect();
    assert_eq!(ids, enqueued);
    for job in &taken {
        let path = format!("/api/jobs/{}/complete", job["id"]);
        a.must_post(&path, json!({"lease_token": job["lease_token"]}), 200)
            .await;
    }
    let stats = b.must_get("/api/stats", 200).await;
    assert_eq!(stats["totals"]["completed"], 16, "{stats}");

    // A pool that holds queues cannot be forgotten.
    let (code, _, err) = pools(&catalogue, &["remove", "one"]);
    assert_eq!(code, 2);
    assert!(err.contains("holds") && err.contains("queue"), "{err}");

    // Pool two goes away: its queues are unavailable, pool one's are served.
    let name = two.rsplit('/').next().expect("a database name").to_owned();
    let admin = postgres::admin_url().await.expect("the admin URL");
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .expect("connected");
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false;
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        ))
        .await
        .expect("pool two cut off");
    let mut on_one = Vec::new();
    let mut on_two = Vec::new();
    for queue in &queues {
        let answer = a
            .post("/api/jobs", json!({"queue": queue}))
            .await
            .expect("answered");
        match answer.status {
            201 => on_one.push(queue.clone()),
            503 => on_two.push(queue.clone()),
            other => panic!("enqueue into {queue}: {other} {}", answer.body),
        }
    }
    assert_eq!(
        (on_one.len(), on_two.len()),
        (
            usize::try_from(in_one).unwrap(),
            usize::try_from(in_two).unwrap()
        ),
        "one: {on_one:?}, two: {on_two:?}"
    );
    let taken = b
        .must_post("/api/take", json!({"queues": queues, "max": 100}), 200)
        .await;
    let from: BTreeSet<&str> = taken["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["queue"].as_str().expect("a queue"))
        .collect();
    let expected: BTreeSet<&str> = on_one.iter().map(String::as_str).collect();
    assert_eq!(from, expected, "pool one's queues are served");
}

/// A Zaqar request (its headers: a client id and a project) to `node`: status and body.
async fn zaqar(
    node: &Node,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = tenax_net::http::client_builder()
        .build()
        .expect("a client")
        .request(method, node.url(path))
        .header("Client-ID", "4f9d0d35-5d6b-4a30-9c4a-2f56a3c1d1a0")
        .header("X-Project-ID", "ops");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("answered");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Waits until `node` says pool `name` takes queues: once every live server has loaded it.
async fn until_ready(node: &Node, name: &str) {
    let started = std::time::Instant::now();
    loop {
        let pool = node.must_get(&format!("/api/pools/{name}"), 200).await;
        if pool["ready"] == true {
            return;
        }
        assert!(
            started.elapsed() < common::PATIENCE,
            "pool {name} never became ready: {pool}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_registered_over_http_takes_queues_on_every_server_without_a_restart() {
    let Some(catalogue) = postgres::fresh_database().await else {
        eprintln!("skipped: no PostgreSQL here (tests/it/common/postgres.rs)");
        return;
    };
    // The pool's database does not exist yet: registering it makes it.
    let pool_url = format!(
        "{}_pool",
        postgres::fresh_database().await.expect("a database")
    );
    let a = Node::start(&catalogue, &[], &[]).await;
    let b = Node::start(&catalogue, &[], &[]).await;

    // Before any pool: a queue in the catalogue, which stays there.
    let before = a
        .must_post("/api/jobs", json!({"queue": "before"}), 201)
        .await;
    assert_eq!(a.must_get("/api/pools", 200).await["pools"], json!([]));

    let registered = a
        .must_put(
            "/api/pools/one",
            json!({"uri": pool_url, "weight": 10, "options": {"rack": "b"}}),
            201,
        )
        .await;
    assert_eq!(registered["name"], "one");
    assert_eq!(registered["number"], 1);
    assert_eq!(registered["options"], json!({"rack": "b"}));
    // Whatever is accepted shows again.
    let shown = a.must_get("/api/pools/one", 200).await;
    assert_eq!(shown["uri"], json!(pool_url));
    until_ready(&a, "one").await;

    // The other server routes to it without a restart: new queues go to the pool (its ids'
    // remainder modulo 64 is its number), the queue from before stays in the catalogue.
    for i in 0..4 {
        let job = b
            .must_post("/api/jobs", json!({"queue": format!("new{i}")}), 201)
            .await;
        assert_eq!(job["id"].as_u64().expect("an id") % 64, 1, "{job}");
        a.must_get(&format!("/api/jobs/{}", job["id"]), 200).await;
    }
    let again = b
        .must_post("/api/jobs", json!({"queue": "before"}), 201)
        .await;
    assert_eq!(again["id"].as_u64().expect("an id") % 64, 0, "{again}");
    assert_eq!(jobs_in(&pool_url).await, 4);
    assert_eq!(jobs_in(&catalogue).await, 2);
    let listed = b.must_get("/api/pools", 200).await;
    assert_eq!(listed["pools"][0]["queues"], 4, "{listed}");
    let _ = before;

    // Zaqar's flavors place a queue on their pools; an unknown one is refused.
    let (status, body) = zaqar(
        &b,
        reqwest::Method::PUT,
        "/v2/flavors/gold",
        Some(json!({"pool_list": ["one"]})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, flavor) = zaqar(&a, reqwest::Method::GET, "/v2/flavors/gold", None).await;
    assert_eq!(status, 200);
    assert_eq!(flavor["pool_list"], json!(["one"]), "{flavor}");
    let (status, body) = zaqar(
        &a,
        reqwest::Method::PUT,
        "/v2/queues/golden",
        Some(json!({"_flavor": "gold"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = zaqar(
        &a,
        reqwest::Method::PUT,
        "/v2/queues/nowhere",
        Some(json!({"_flavor": "tin"})),
    )
    .await;
    assert_eq!(
        (status, body["description"].clone()),
        (400, json!("Flavor tin does not exist"))
    );
    let (status, placed) = zaqar(&a, reqwest::Method::GET, "/v2/queues/golden", None).await;
    assert_eq!((status, placed["_flavor"].clone()), (200, json!("gold")));

    // A native queue names its flavor too, and shows it again.
    let native = b
        .must_put(
            "/api/queues/ingots?create=true",
            json!({"flavor": "gold"}),
            200,
        )
        .await;
    assert_eq!(native["flavor"], "gold", "{native}");
    let job = a
        .must_post("/api/jobs", json!({"queue": "ingots"}), 201)
        .await;
    assert_eq!(job["id"].as_u64().expect("an id") % 64, 1, "{job}");
    let refused = a
        .must_put("/api/queues/tin?create=true", json!({"flavor": "tin"}), 400)
        .await;
    assert_eq!(refused["error"]["field"], "flavor", "{refused}");

    // A pool that holds queues is not forgotten, nor moved to another database.
    let refused = a
        .must(reqwest::Method::DELETE, "/api/pools/one", None, 409)
        .await;
    assert_eq!(refused["error"]["code"], "pool_in_use", "{refused}");
    let moved = a
        .must_put(
            "/api/pools/one",
            json!({"uri": format!("{pool_url}_elsewhere")}),
            409,
        )
        .await;
    assert_eq!(moved["error"]["code"], "pool_in_use", "{moved}");
    // Its weight may change.
    let changed = a
        .must_put("/api/pools/one", json!({"uri": pool_url, "weight": 3}), 200)
        .await;
    assert_eq!(changed["weight"], 3);
}

/// The rows `queue` has in the database `url`: jobs (finished ones too), settings and
/// subscriptions.
async fn rows_of(url: &str, queue: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connected");
    tokio::spawn(connection);
    client
        .query_one(
            "SELECT (SELECT count(*) FROM tenax_all_jobs WHERE queue = $1)
                  + (SELECT count(*) FROM tenax_queues WHERE name = $1)
                  + (SELECT count(*) FROM tenax_subscriptions WHERE queue = $1)",
            &[&queue],
        )
        .await
        .expect("counted")
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_moves_to_another_pool_with_all_it_holds_while_producers_write() {
    let Some((catalogue, [one, two])) = deployment().await else {
        eprintln!("skipped: no PostgreSQL here (tests/it/common/postgres.rs)");
        return;
    };
    let flags = ["--allow-private-endpoints"];
    let a = Node::start(&catalogue, &flags, &[]).await;
    let b = Node::start(&catalogue, &flags, &[]).await;

    // A batch places its queues together: "orders" is tied to "invoices".
    let batch = a
        .must_post(
            "/api/batches",
            json!({"jobs": [{"queue": "orders"}], "on_complete": {"queue": "invoices"}}),
            201,
        )
        .await;
    let first = batch["jobs"][0]["id"].as_u64().expect("an id");
    let (source, target, source_url, target_url) = match first % 64 {
        1 => ("one", "two", &one, &two),
        _ => ("two", "one", &two, &one),
    };
    a.must_put("/api/queues/orders", json!({"concurrency": 7}), 200)
        .await;
    let subscription = a
        .must_post(
            "/api/queues/orders/subscriptions",
            json!({"endpoint": "http://127.0.0.1:9/hook"}),
            201,
        )
        .await;
    // A schedule lives with the queue it enqueues into.
    a.must_put(
        "/api/schedules/yearly",
        json!({"cron": "0 0 0 1 1 *", "job": {"queue": "orders", "type": "report"}}),
        201,
    )
    .await;
    let mut acknowledged = BTreeSet::new();
    for i in 0..6 {
        let job = a
            .must_post(
                "/api/jobs",
                json!({"queue": "orders", "payload": {"n": i}}),
                201,
            )
            .await;
        acknowledged.insert(job["id"].as_u64().expect("an id"));
    }
    let taken = a
        .must_post("/api/take", json!({"queues": ["orders"], "max": 2}), 200)
        .await;
    let leases: Vec<Value> = taken["jobs"].as_array().expect("jobs").clone();
    assert_eq!(leases.len(), 2, "{taken}");
    a.must_post(
        &format!("/api/jobs/{}/fail", leases[0]["id"]),
        json!({"lease_token": leases[0]["lease_token"], "error": "no", "retryable": false}),
        200,
    )
    .await;

    // What ties it to a queue that stays is named, and nothing moves.
    let refused = a
        .must_post("/api/queues/orders/move", json!({"to": target}), 409)
        .await;
    assert_eq!(refused["error"]["code"], "queues_tied", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("invoices") && m.contains("batch")),
        "{refused}"
    );
    let unknown = a
        .must_post("/api/queues/orders/move", json!({"to": "nine"}), 404)
        .await;
    assert_eq!(unknown["error"]["code"], "not_found", "{unknown}");

    // A producer writes through the other server all along: every job it was told is stored
    // is there after, once.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let stop = stop.clone();
        let url = b.url("/api/jobs");
        tokio::spawn(async move {
            let http = tenax_net::http::client_builder().build().expect("a client");
            let (mut stored, mut waited) = (Vec::new(), 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || stored.len() < 20 {
                let answer = http
                    .post(&url)
                    .json(&json!({"queue": "orders"}))
                    .send()
                    .await
                    .expect("answered");
                match answer.status().as_u16() {
                    201 => {
                        let body: Value = answer.json().await.expect("a body");
                        stored.push(body["id"].as_u64().expect("an id"));
                    }
                    503 => waited += 1,
                    other => panic!("enqueue while moving: {other} {:?}", answer.text().await),
                }
            }
            (stored, waited)
        })
    };
    let moved = a
        .post(
            "/api/queues/orders/move",
            json!({"to": target, "with": ["invoices", "fresh"]}),
        )
        .await
        .expect("answered");
    assert_eq!(moved.status, 200, "{}\n{}", moved.body, a.log_text());
    let moved = moved.body;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (stored, waited) = producer.await.expect("the producer");
    eprintln!(
        "moved: {moved}; {} enqueues stored, {waited} answered 503",
        stored.len()
    );
    assert_eq!(moved["from"], source, "{moved}");
    // A queue never written to is placed on the target, with nothing to move.
    assert_eq!(moved["queues"], json!(["orders", "invoices"]), "{moved}");
    assert_eq!(moved["to"], target, "{moved}");
    assert_eq!(moved["subscriptions"], 1, "{moved}");
    assert!(moved["jobs"].as_u64().expect("jobs") >= 8, "{moved}");
    acknowledged.extend(stored);

    // Everything is on the target; nothing of it is left on the source.
    for queue in ["orders", "invoices"] {
        assert_eq!(
            rows_of(source_url, queue).await,
            0,
            "{queue} left on {source}"
        );
    }
    let delivery_queue = format!("{}", subscription["id"]);
    let leftover: i64 = query_one(
        source_url,
        &format!("SELECT count(*) FROM tenax_all_jobs WHERE queue LIKE '%{delivery_queue}'"),
    )
    .await
    .get(0);
    assert_eq!(leftover, 0, "the deliveries moved with their subscription");
    for id in &acknowledged {
        let found: i64 = query_one(
            target_url,
            &format!("SELECT count(*) FROM tenax_all_jobs WHERE id = {id}"),
        )
        .await
        .get(0);
        assert_eq!(found, 1, "job {id} is on {target} once");
        // Found by its id from either server, though its id names the pool it left.
        b.must_get(&format!("/api/jobs/{id}"), 200).await;
    }

    // The settings, the schedule, the subscription, the dead job and the lease moved with it.
    let schedules_left: i64 = query_one(source_url, "SELECT count(*) FROM tenax_schedules")
        .await
        .get(0);
    assert_eq!(schedules_left, 0, "the schedule moved with its queue");
    let schedule = b.must_get("/api/schedules/yearly", 200).await;
    assert_eq!(schedule["job"]["queue"], "orders", "{schedule}");
    let queue = b.must_get("/api/queues/orders", 200).await;
    assert_eq!(queue["concurrency"], 7, "{queue}");
    b.must_get(&format!("/api/subscriptions/{}", subscription["id"]), 200)
        .await;
    let dead = b.must_get("/api/dead?queue=orders", 200).await;
    assert_eq!(dead["jobs"].as_array().map(Vec::len), Some(1), "{dead}");
    b.must_post(
        &format!("/api/jobs/{}/complete", leases[1]["id"]),
        json!({"lease_token": leases[1]["lease_token"]}),
        200,
    )
    .await;
    let job = b
        .must_post("/api/jobs", json!({"queue": "orders"}), 201)
        .await;
    let target_number = if target == "one" { 1 } else { 2 };
    assert_eq!(
        job["id"].as_u64().expect("an id") % 64,
        target_number,
        "{job}"
    );

    // Asked again, there is nothing to move; moved back, the ids are found at home.
    let again = a
        .must_post(
            "/api/queues/orders/move",
            json!({"to": target, "with": ["invoices"]}),
            200,
        )
        .await;
    assert_eq!(
        (again["from"].clone(), again["jobs"].clone()),
        (Value::Null, json!(0))
    );
    a.must_post(
        "/api/queues/orders/move",
        json!({"to": source, "with": ["invoices"]}),
        200,
    )
    .await;
    assert_eq!(rows_of(target_url, "orders").await, 0);
    for id in acknowledged.iter().chain([&first]) {
        a.must_get(&format!("/api/jobs/{id}"), 200).await;
    }
}
