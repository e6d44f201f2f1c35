//! Whose clock decides on PostgreSQL: the database's. Two `tenax serve` processes share one
//! database, one of them under libfaketime with its wall clock two minutes off. When it is
//! ahead, it leads the maintenance and judges the other's times; when it is behind, the other
//! leads and judges its times. Either way no lease is expired early and no scheduled job is
//! promoted early, and the times both servers answer agree with the database's clock within
//! the stated bound (docs/postgres.md, "Whose clock decides what").
//!
//! Needs PostgreSQL's server programs (as every PostgreSQL test) and Debian's `faketime`
//! package (`/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1`); skipped with a note
//! without it, unless `TENAX_REQUIRE_POSTGRES=1` (CI, which installs it).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::ms;
use common::postgres;
use node::Node;
use serde_json::{Value, json};

use crate::common;
use crate::common::node;

/// Where Debian's `faketime` package puts the library.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How far off the skewed server's wall clock is, ahead or behind.
const SKEW_MS: u64 = 120_000;

/// How far a time a server answers may be from the database's clock (the test's own: one
/// machine). The bound the servers state (`tenax_clock_error_seconds`, checked below) is half
/// a sample's round trip plus 0.1 % of its age: milliseconds on loopback. The rest is for a
/// busy machine.
const AGREE_MS: u64 = 100;

/// How long a background change (a lease expiry, a promotion) may take to be seen.
const PATIENCE: Duration = Duration::from_secs(20);

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("a time in range")
}

/// Asserts that `at`, answered between `before` and `after` plus `ahead`, agrees with the
/// database's clock.
fn assert_agrees(what: &str, at: &Value, before: u64, after: u64, ahead: u64) {
    let at = ms(at);
    assert!(
        at + AGREE_MS >= before + ahead && at <= after + ahead + AGREE_MS,
        "{what}: {at} is not within {AGREE_MS} ms of [{}, {}] (off by {} ms)",
        before + ahead,
        after + ahead,
        i128::from(at) - i128::from(before + ahead)
    );
}

/// Waits until job `id` has `status` on `node`.
async fn wait_for(node: &Node, id: u64, status: &str) {
    let started = Instant::now();
    loop {
        let now = node.status(id).await;
        if now.as_deref() == Some(status) {
            return;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "job {id} is {now:?}, never {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A gauge's value in a `/metrics` text.
fn gauge(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Takes one job of `queue` with a lease of `lease`: the job as answered.
async fn take_one(node: &Node, queue: &str, lease: &str) -> Value {
    let answer = node
        .must_post(
            "/api/take",
            json!({"queues": [queue], "max": 1, "lease": lease, "wait": "5s"}),
            200,
        )
        .await;
    answer["jobs"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_clock_is_ahead_decides_by_the_databases_clock() {
    skewed_cluster(Skew::Ahead).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_written_by_a_server_whose_clock_is_behind_are_the_databases() {
    skewed_cluster(Skew::Behind).await;
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Skew {
    /// The skewed server is ahead, and leads: it judges the times the other writes.
    Ahead,
    /// The skewed server is behind, and the other leads: it judges the times the skewed one
    /// writes.
    Behind,
}

async fn skewed_cluster(skew: Skew) {
    if !Path::new(LIBFAKETIME).is_file() {
        let required = std::env::var("TENAX_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "TENAX_REQUIRE_POSTGRES=1 and {LIBFAKETIME} is missing (apt-get install faketime)"
        );
        eprintln!("SKIPPED: {LIBFAKETIME} is missing (Debian: apt-get install faketime)");
        return;
    }
    let Some(url) = postgres::fresh_database().await else {
        return;
    };
    let seconds = SKEW_MS / 1_000;
    let faketime = match skew {
        Skew::Ahead => format!("+{seconds}s"),
        Skew::Behind => format!("-{seconds}s"),
    };
    // The skewed server's monotonic clock is left alone, so its timers run at the real rate.
    let env = [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", faketime.as_str()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    // The first server to start leads.
    let (skewed, normal) = match skew {
        Skew::Ahead => {
            let skewed = Node::start(&url, &[], &env).await;
            skewed.wait_until_leading().await;
            (skewed, Node::start(&url, &[], &[]).await)
        }
        Skew::Behind => {
            let normal = Node::start(&url, &[], &[]).await;
            normal.wait_until_leading().await;
            (Node::start(&url, &[], &env).await, normal)
        }
    };
    let (leader, writer) = match skew {
        Skew::Ahead => (&skewed, &normal),
        Skew::Behind => (&normal, &skewed),
    };

    // libfaketime is in effect: the skewed server's HTTP Date header is its own wall clock.
    let date = skewed.get("/healthz").await.date.expect("a Date header");
    let date = httpdate::parse_http_date(&date).expect("an HTTP date");
    let date_ms = u64::try_from(
        date.duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis(),
    )
    .expect("a time in range");
    let skewed_now = match skew {
        Skew::Ahead => now_ms() + SKEW_MS,
        Skew::Behind => now_ms() - SKEW_MS,
    };
    assert!(
        date_ms.abs_diff(skewed_now) < 5_000,
        "the skewed server's wall clock is not {SKEW_MS} ms off: Date {date_ms}, now {}",
        now_ms()
    );

    // A 30 s lease handed out by the writer outlives a 1 s one the leader expires: it is not
    // expired two minutes early.
    let long = writer
        .must_post("/api/jobs", json!({"queue": "long"}), 201)
        .await["id"]
        .as_u64()
        .expect("an id");
    let short = writer
        .must_post("/api/jobs", json!({"queue": "short"}), 201)
        .await["id"]
        .as_u64()
        .expect("an id");
    assert_eq!(take_one(writer, "long", "30s").await["id"], long);
    assert_eq!(take_one(writer, "short", "1s").await["id"], short);
    wait_for(leader, short, "ready").await;
    assert_eq!(
        leader.status(long).await.as_deref(),
        Some("in_flight"),
        "a lease was expired 29 s before its end"
    );

    // A job due in 20 s is still scheduled when one due in 1 s has been promoted.
    let later = writer
        .must_post("/api/jobs", json!({"queue": "later", "delay": "20s"}), 201)
        .await["id"]
        .as_u64()
        .expect("an id");
    let soon = writer
        .must_post("/api/jobs", json!({"queue": "soon", "delay": "1s"}), 201)
        .await["id"]
        .as_u64()
        .expect("an id");
    wait_for(leader, soon, "ready").await;
    assert_eq!(
        leader.status(later).await.as_deref(),
        Some("scheduled"),
        "a job was promoted 19 s early"
    );
    assert_eq!(leader.status(long).await.as_deref(), Some("in_flight"));

    // The times both servers answer agree with the database's clock.
    for (node, name) in [(&skewed, "skewed"), (&normal, "normal")] {
        let before = now_ms();
        let now = node
            .must_post("/api/jobs", json!({"queue": "now"}), 201)
            .await;
        let delayed = node
            .must_post("/api/jobs", json!({"queue": "later", "delay": "20s"}), 201)
            .await;
        let after = now_ms();
        assert_agrees(
            &format!("{name}: run_at of a job for now"),
            &now["run_at"],
            before,
            after,
            0,
        );
        assert_agrees(
            &format!("{name}: run_at of a job in 20 s"),
            &delayed["run_at"],
            before,
            after,
            20_000,
        );
        let before = now_ms();
        let leased = take_one(node, "now", "30s").await;
        let after = now_ms();
        assert_agrees(
            &format!("{name}: a 30 s lease's end"),
            &leased["lease_expires_at"],
            before,
            after,
            30_000,
        );
    }

    // Each server says how far the database's clock is from its own, and how well it knows it.
    #[allow(clippy::cast_precision_loss)]
    let skew_s = SKEW_MS as f64 / 1_000.0;
    let skewed_metrics = skewed.metrics().await;
    let offset = gauge(&skewed_metrics, "tenax_clock_offset_seconds");
    let expected = if skew == Skew::Ahead { -skew_s } else { skew_s };
    assert!((offset - expected).abs() < 1.0, "skewed offset {offset}");
    let normal_metrics = normal.metrics().await;
    let offset = gauge(&normal_metrics, "tenax_clock_offset_seconds");
    assert!(offset.abs() < 0.1, "normal offset {offset}");
    for (metrics, name) in [(&skewed_metrics, "skewed"), (&normal_metrics, "normal")] {
        let error = gauge(metrics, "tenax_clock_error_seconds");
        assert!(error > 0.0 && error < 0.1, "error bound {error}");
        eprintln!(
            "{name}: offset {} s, error bound {error} s",
            gauge(metrics, "tenax_clock_offset_seconds")
        );
    }
    // And says so in its log when it starts.
    let log = skewed.log_text();
    let said = log
        .split("this server decides by PostgreSQL's clock, which is ")
        .nth(1)
        .unwrap_or_else(|| panic!("no offset in the log:\n{log}"));
    let (seconds, rest) = said.split_once("s ").expect("seconds");
    let seconds: f64 = seconds.parse().expect("a number of seconds");
    assert!((seconds - skew_s).abs() < 1.0, "{said}");
    let side = if skew == Skew::Ahead {
        "behind its own"
    } else {
        "ahead of its own"
    };
    assert!(rest.starts_with(side), "{said}");
    assert!(
        !writer.leads(),
        "the writer took the lead; its log:\n{}\nthe leader's:\n{}",
        writer.log_text(),
        leader.log_text()
    );
}
