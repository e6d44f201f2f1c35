//! `tenax bench` against the real server: the scenarios that send one request at a time, each
//! load task on a connection of its own (`bench::lane`), with the API token on every request.

use std::time::Duration;

use common::{Options, TestServer};
use tenax_bench::{BenchConfig, BenchReport, Scenario};
use tenax_net::http::ClientOptions;

use crate::common;

const ADMIN: &str = "bench-admin-token-0123456789abcdefghijklmnop";

fn config(server: &TestServer, scenarios: Vec<Scenario>, token: Option<&str>) -> BenchConfig {
    BenchConfig {
        url: server.api.url(""),
        scenarios,
        jobs: Some(200),
        max_seconds: 30,
        server_pid: None,
        connections: None,
        workers: 4,
        take_max: 1_000,
        promotion_lead: Duration::from_secs(5),
        progress: false,
        http2: false,
        client: ClientOptions {
            token: token.map(str::to_owned),
            ca_file: None,
        },
        encrypt_payloads: false,
        data_dir: std::env::temp_dir(),
        relaxed_url: None,
        fanout_sizes: tenax_bench::FANOUT_SIZES.to_vec(),
        queue: None,
    }
}

async fn secured() -> TestServer {
    TestServer::start(Options::system().flags(&["--auth", "on", "--admin-token", ADMIN])).await
}

fn scenario<'a>(report: &'a BenchReport, name: &str) -> &'a tenax_bench::ScenarioReport {
    report
        .scenarios
        .iter()
        .find(|s| s.scenario == name)
        .unwrap_or_else(|| panic!("{name} ran"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_request_scenarios_store_and_finish_every_job_with_the_token() {
    let server = secured().await;
    let report = tenax_bench::run(&config(
        &server,
        vec![Scenario::Enqueue8, Scenario::TakeOne8],
        Some(ADMIN),
    ))
    .await
    .expect("the bench runs");

    let enqueue = scenario(&report, "enqueue-8");
    assert_eq!(enqueue.error, None);
    assert_eq!(enqueue.jobs, 200, "every job acknowledged");
    assert_eq!(enqueue.requests[0].count, 200, "one request per job");
    let take_one = scenario(&report, "take-one-8");
    assert_eq!(take_one.error, None);
    assert_eq!(take_one.jobs, 200, "every job taken and completed");

    // The server holds what the bench says: the enqueued jobs wait, the taken ones are done.
    let stats = server
        .api
        .http()
        .get(server.api.url("/api/stats"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("stats")
        .json::<serde_json::Value>()
        .await
        .expect("stats JSON");
    let counts = |queue: &str| {
        stats["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .find(|q| q["queue"] == queue)
            .cloned()
            .unwrap_or_else(|| panic!("{queue} in {stats}"))
    };
    assert_eq!(counts(&enqueue.queue)["ready"], 200);
    assert_eq!(counts(&take_one.queue)["completed"], 200);
    assert_eq!(counts(&take_one.queue)["ready"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_stops_the_scenario_with_the_servers_answer() {
    let server = secured().await;
    // A token the server does not know: the load's first request is refused.
    let wrong = "not-a-token-of-this-server-0123456789abcdef";
    let config = config(&server, vec![Scenario::Enqueue1], Some(wrong));
    let report = tenax_bench::run(&config).await.expect("the bench runs");
    let error = scenario(&report, "enqueue-1")
        .error
        .clone()
        .expect("the scenario stopped");
    assert!(error.contains("401"), "{error}");
}

/// `--encrypt-payloads`: each scenario's queue (a Zaqar scenario's too) stores its payloads
/// encrypted before the load starts, and the report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypt_payloads_sets_each_scenarios_queue_first() {
    let server = secured().await;
    let config = BenchConfig {
        encrypt_payloads: true,
        ..config(
            &server,
            vec![Scenario::TakeOne8, Scenario::ZaqarPost1],
            Some(ADMIN),
        )
    };
    let report = tenax_bench::run(&config).await.expect("the bench runs");
    for (name, queue) in [
        ("take-one-8", scenario(&report, "take-one-8").queue.clone()),
        (
            "zaqar-post-1",
            format!(
                "bench:{}",
                scenario(&report, "zaqar-post-1").queue.replace(':', "-")
            ),
        ),
    ] {
        let ran = scenario(&report, name);
        assert_eq!(ran.error, None, "{name}");
        assert_eq!(ran.jobs, 200, "{name}");
        assert!(
            ran.notes.iter().any(|n| n.contains("encrypt_payloads")),
            "{name}: {:?}",
            ran.notes
        );
        let view = server
            .api
            .http()
            .get(server.api.url(&format!("/api/queues/{queue}")))
            .bearer_auth(ADMIN)
            .send()
            .await
            .expect("the queue")
            .json::<serde_json::Value>()
            .await
            .expect("JSON");
        assert_eq!(view["encrypt_payloads"], true, "{name}: {view}");
    }
}

/// `floor`: the round trips and a sync in the server's data directory, then enqueue-1 and
/// enqueue-8 on the server and enqueue-8 on a second one (`--relaxed-url`), with the shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floor_measures_the_round_trips_the_sync_and_both_shares() {
    let durable = secured().await;
    let relaxed = TestServer::start(Options::system().flags(&[
        "--auth",
        "on",
        "--admin-token",
        ADMIN,
        "--durability",
        "relaxed",
    ]))
    .await;
    let config = BenchConfig {
        data_dir: durable.data_dir().to_path_buf(),
        relaxed_url: Some(relaxed.api.url("")),
        ..config(&durable, vec![Scenario::Floor], Some(ADMIN))
    };
    let report = tenax_bench::run(&config).await.expect("the bench runs");
    let floor = scenario(&report, "floor");
    assert_eq!(floor.error, None);
    assert_eq!(
        floor.jobs, 400,
        "enqueue-1 and enqueue-8 on the durable server"
    );
    let figures = floor.floor.as_ref().expect("the floor's figures");
    assert!(figures.healthz_1_per_sec > 0.0 && figures.healthz_8_per_sec > 0.0);
    assert!(figures.fdatasync_us > 0.0);
    let expected = 1e6 / (figures.healthz_1_round_trip_us + figures.fdatasync_us);
    assert!((figures.floor_1_per_sec - expected).abs() < 1e-6);
    assert!(figures.enqueue_1_share > 0.0);
    assert!(figures.enqueue_8_share.is_some_and(|s| s > 0.0));
    let names: Vec<&str> = floor.requests.iter().map(|r| r.request.as_str()).collect();
    assert_eq!(
        names,
        [
            "GET /healthz (1 connection)",
            "GET /healthz (8 connections)",
            "fdatasync of 4096 B written",
            "POST /api/jobs (1 connection)",
            "POST /api/jobs (8 connections)",
            "POST /api/jobs (8 connections, relaxed)",
        ]
    );
    let leftovers: Vec<_> = std::fs::read_dir(durable.data_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .contains("tenax-bench-floor")
        })
        .collect();
    assert!(leftovers.is_empty(), "the sync's file is removed");
    let table = tenax_bench::table(&report);
    assert!(
        table.contains("floor: 1 / (round trip + fdatasync)"),
        "{table}"
    );
    assert!(table.contains("% of relaxed"), "{table}");
}

/// `deliveries-fanout`: each size alone, with the spare endpoint and with the slow one, the
/// healthy receivers counting exactly their own deliveries (not the spare's nor the slow
/// one's), and every bench subscription removed afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_fanout_counts_the_healthy_deliveries_of_each_size() {
    let server = TestServer::start(Options::system().flags(&["--allow-private-endpoints"])).await;
    let config = BenchConfig {
        jobs: Some(30),
        fanout_sizes: vec![1, 3],
        queue: None,
        ..config(&server, vec![Scenario::DeliveriesFanout], None)
    };
    let report = tenax_bench::run(&config).await.expect("the bench runs");
    let fanout = scenario(&report, "deliveries-fanout");
    assert_eq!(fanout.error, None);
    let cases = fanout.fanout.as_ref().expect("the fanout's figures");
    let shape: Vec<(usize, &str, u64, u64)> = cases
        .iter()
        .map(|c| {
            (
                c.subscriptions,
                c.extra.name(),
                c.burst_deliveries,
                c.paced_latency.count,
            )
        })
        .collect();
    // 30 messages to one subscription, 10 to each of three.
    assert_eq!(
        shape,
        [
            (1, "none", 30, 30),
            (1, "spare", 30, 30),
            (1, "slow", 30, 30),
            (3, "none", 30, 30),
            (3, "spare", 30, 30),
            (3, "slow", 30, 30)
        ]
    );
    assert!(cases.iter().all(|c| c.burst_per_sec > 0.0));
    for size in [1, 3] {
        let listed = server
            .api
            .get(&format!(
                "/api/queues/{}-{size}/subscriptions",
                fanout.queue
            ))
            .await;
        assert_eq!(listed["subscriptions"], serde_json::json!([]), "{listed}");
    }
    let table = tenax_bench::table(&report);
    assert!(table.contains("p99, slow against spare"), "{table}");
}
