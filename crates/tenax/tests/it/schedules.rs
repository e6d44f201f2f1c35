//! Schedules over real HTTP on a manual clock: one job per tick, daylight-saving changes in
//! Europe/Berlin (a skipped hour, a repeated hour), restarts across ticks with both choices for
//! missed ticks, overlap, pause and resume, the next ticks of an expression, and every refusal
//! naming its field. With `TENAX_TEST_STORE=postgres` the same on PostgreSQL.

use std::time::{Duration, Instant};

use common::{Api, PATIENCE, T0, TestServer, ms};
use reqwest::Method;
use serde_json::{Value, json};
use tenax_core::clock::parse_rfc3339;

use crate::common;

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

/// Makes (201) or replaces (200) a schedule.
async fn put(api: &Api, name: &str, body: Value, status: u16) -> Value {
    api.expect(
        Method::PUT,
        &format!("/api/schedules/{name}"),
        Some(body),
        status,
    )
    .await
}

fn minutely(queue: &str) -> Value {
    json!({"cron": "* * * * *", "job": {"queue": queue, "type": "tick", "payload": {"n": 1},
        "priority": 4}})
}

/// The jobs of `queue`, oldest first.
async fn jobs_of(api: &Api, queue: &str) -> Vec<Value> {
    let page = api
        .get(&format!("/api/jobs?queue={queue}&limit=1000"))
        .await;
    page["jobs"].as_array().expect("jobs").clone()
}

/// Waits until `queue` has `n` jobs, then checks that no more come (the maintenance loop looks
/// at a manual clock every few milliseconds); returns them.
async fn expect_jobs(api: &Api, queue: &str, n: usize) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let jobs = jobs_of(api, queue).await;
        assert!(jobs.len() <= n, "{queue}: more than {n} jobs: {jobs:#?}");
        if jobs.len() == n {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{queue}: {} jobs, expected {n}",
            jobs.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let jobs = jobs_of(api, queue).await;
    assert_eq!(jobs.len(), n, "{queue}: {jobs:#?}");
    jobs
}

/// The run-at times of jobs, as RFC 3339.
fn run_ats(jobs: &[Value]) -> Vec<String> {
    jobs.iter()
        .map(|j| j["run_at"].as_str().expect("run_at").to_owned())
        .collect()
}

/// Moves the manual clock to `at` (RFC 3339).
fn move_to(server: &TestServer, at: &str) {
    let target = parse_rfc3339(at).expect("a time");
    let now = server.now_ms();
    assert!(target >= now, "the clock only moves forward: {at}");
    server.advance(Duration::from_millis(target - now));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_enqueues_one_job() {
    let server = TestServer::manual().await;
    let made = put(&server, "every-minute", minutely("ticks"), 201).await;
    assert_eq!(made["next_tick"], "2027-01-15T08:01:00.000Z");
    assert_eq!(made["timezone"], "UTC");
    assert_eq!(made["missed"], "skip");
    assert_eq!(made["overlap"], "allow");
    assert!(made["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert_eq!(
        made["counts"],
        json!({"enqueued": 0, "missed": 0, "overlapped": 0})
    );
    expect_jobs(&server, "ticks", 0).await;

    server.advance(Duration::from_millis(MINUTE));
    let jobs = expect_jobs(&server, "ticks", 1).await;
    let job = &jobs[0];
    assert_eq!(job["type"], "tick");
    assert_eq!(job["payload"], json!({"n": 1}));
    assert_eq!(job["priority"], 4);
    assert_eq!(job["run_at"], "2027-01-15T08:01:00.000Z");
    let shown = server.get("/api/schedules/every-minute").await;
    assert_eq!(shown["last_job"], job["id"]);
    assert_eq!(shown["last_tick"], "2027-01-15T08:01:00.000Z");
    assert_eq!(shown["next_tick"], "2027-01-15T08:02:00.000Z");
    assert_eq!(shown["counts"]["enqueued"], 1);
    let taken = server.take_one("ticks").await;
    assert_eq!(taken.id, job["id"].as_u64().expect("an id"));
    server.complete(&taken).await;

    // Half a minute on: nothing more. A minute on: the next tick's job.
    server.advance(Duration::from_millis(MINUTE / 2));
    expect_jobs(&server, "ticks", 1).await;
    server.advance(Duration::from_millis(MINUTE / 2));
    let jobs = expect_jobs(&server, "ticks", 2).await;
    assert_eq!(
        run_ats(&jobs),
        ["2027-01-15T08:01:00.000Z", "2027-01-15T08:02:00.000Z"]
    );
    let list = server.get("/api/schedules").await;
    assert_eq!(list["schedules"][0]["name"], "every-minute");
    assert_eq!(list["schedules"][0]["counts"]["enqueued"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_fields_tick_by_the_second() {
    let server = TestServer::manual().await;
    let body = json!({"cron": "*/10 * * * * *", "job": {"queue": "fast"}});
    let made = put(&server, "ten-seconds", body, 201).await;
    assert_eq!(made["next_tick"], "2027-01-15T08:00:10.000Z");
    for n in 1..=3 {
        server.advance(Duration::from_secs(10));
        expect_jobs(&server, "fast", n).await;
    }
    let jobs = jobs_of(&server, "fast").await;
    assert_eq!(jobs[0]["payload"], Value::Null);
    assert_eq!(
        run_ats(&jobs),
        [
            "2027-01-15T08:00:10.000Z",
            "2027-01-15T08:00:20.000Z",
            "2027-01-15T08:00:30.000Z"
        ]
    );
}

/// Europe/Berlin springs forward on 2027-03-28 (02:00 CET becomes 03:00 CEST, 01:00 UTC): a
/// job at 02:30 runs once that day, at 03:00. It falls back on 2027-10-31 (03:00 CEST becomes
/// 02:00 CET, 01:00 UTC): the job at 02:30 runs once, on the first pass, while a job every 30
/// minutes runs on both passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daylight_saving_changes_neither_repeat_nor_lose_a_tick() {
    let server = TestServer::manual().await;
    move_to(&server, "2027-03-27T12:00:00Z");
    let nightly = json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin",
        "job": {"queue": "spring"}});
    let made = put(&server, "nightly", nightly, 201).await;
    assert_eq!(made["next_tick"], "2027-03-28T01:00:00.000Z");
    let ticks = server.get("/api/schedules/nightly/ticks?count=3").await;
    assert_eq!(
        ticks["ticks"],
        json!([
            {"at": "2027-03-28T01:00:00.000Z", "local": "2027-03-28T03:00:00+02:00",
             "shifted": true},
            {"at": "2027-03-29T00:30:00.000Z", "local": "2027-03-29T02:30:00+02:00"},
            {"at": "2027-03-30T00:30:00.000Z", "local": "2027-03-30T02:30:00+02:00"},
        ])
    );
    move_to(&server, "2027-03-28T00:59:59Z");
    expect_jobs(&server, "spring", 0).await;
    move_to(&server, "2027-03-28T01:00:00Z");
    expect_jobs(&server, "spring", 1).await;
    move_to(&server, "2027-03-29T00:30:00Z");
    let jobs = expect_jobs(&server, "spring", 2).await;
    assert_eq!(
        run_ats(&jobs),
        ["2027-03-28T01:00:00.000Z", "2027-03-29T00:30:00.000Z"]
    );

    move_to(&server, "2027-10-30T12:00:00Z");
    let fixed = json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin",
        "job": {"queue": "autumn"}});
    put(&server, "autumn", fixed, 201).await;
    move_to(&server, "2027-10-30T23:45:00Z");
    let half_hourly = json!({"cron": "*/30 * * * *", "timezone": "Europe/Berlin",
        "job": {"queue": "halves"}});
    put(&server, "halves", half_hourly, 201).await;
    for (at, fixed_jobs, halves) in [
        ("2027-10-31T00:00:00Z", 0, 1), // 02:00 CEST
        ("2027-10-31T00:30:00Z", 1, 2), // 02:30 CEST: the fixed time, once
        ("2027-10-31T01:00:00Z", 1, 3), // 02:00 CET: the hour again
        ("2027-10-31T01:30:00Z", 1, 4), // 02:30 CET: not again for the fixed time
        ("2027-10-31T02:00:00Z", 1, 5), // 03:00 CET
    ] {
        move_to(&server, at);
        expect_jobs(&server, "autumn", fixed_jobs).await;
        expect_jobs(&server, "halves", halves).await;
    }
    move_to(&server, "2027-11-01T01:30:00Z");
    let jobs = expect_jobs(&server, "autumn", 2).await;
    assert_eq!(
        run_ats(&jobs),
        ["2027-10-31T00:30:00.000Z", "2027-11-01T01:30:00.000Z"]
    );
    let shown = server.get("/api/schedules/autumn").await;
    assert_eq!(shown["counts"]["missed"], 0);
}

/// A restart across ticks: with `skip` the missed ticks enqueue nothing (and are counted),
/// with `run_once` they enqueue one job together; a tick less than a minute late still runs;
/// and no restart enqueues a tick twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_across_ticks_skip_or_run_once_and_never_twice() {
    let mut server = TestServer::manual().await;
    for (name, missed) in [("skipper", "skip"), ("catcher", "run_once")] {
        let body = json!({"cron": "0 * * * *", "missed": missed,
            "job": {"queue": name, "type": "hourly"}});
        put(&server, name, body, 201).await;
    }
    server.stop().await;
    // Down from 08:00 to 11:30: the ticks of 09:00, 10:00 and 11:00 are missed.
    server.advance(Duration::from_millis(3 * HOUR + 30 * MINUTE));
    server.start_again().await;
    expect_jobs(&server, "skipper", 0).await;
    let caught = expect_jobs(&server, "catcher", 1).await;
    assert_eq!(run_ats(&caught), ["2027-01-15T11:00:00.000Z"]);
    for (name, enqueued) in [("skipper", 0), ("catcher", 1)] {
        let shown = server.get(&format!("/api/schedules/{name}")).await;
        assert_eq!(
            shown["counts"],
            json!({"enqueued": enqueued, "missed": 3, "overlapped": 0}),
            "{name}"
        );
        assert_eq!(shown["next_tick"], "2027-01-15T12:00:00.000Z");
    }

    // Down across 12:00 for less than a minute: the tick is late, not missed.
    server.advance(Duration::from_millis(30 * MINUTE - 10_000));
    server.stop().await;
    server.advance(Duration::from_secs(40));
    server.start_again().await;
    expect_jobs(&server, "skipper", 1).await;
    expect_jobs(&server, "catcher", 2).await;
    // Restarted again: the tick handled before is not enqueued again.
    server.restart().await;
    server.advance(Duration::from_secs(1));
    expect_jobs(&server, "skipper", 1).await;
    let caught = expect_jobs(&server, "catcher", 2).await;
    assert_eq!(
        run_ats(&caught),
        ["2027-01-15T11:00:00.000Z", "2027-01-15T12:00:00.000Z"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_leaves_out_ticks_while_the_last_job_runs() {
    let server = TestServer::manual().await;
    let mut body = minutely("busy");
    body["overlap"] = json!("skip");
    put(&server, "busy", body, 201).await;
    server.advance(Duration::from_millis(MINUTE));
    expect_jobs(&server, "busy", 1).await;
    let mut running = server
        .take_with(json!({"queues": ["busy"], "max": 1, "lease": "10m"}))
        .await;
    let running = running.pop().expect("the tick's job");
    server.advance(Duration::from_millis(MINUTE));
    expect_jobs(&server, "busy", 1).await;
    let shown = server.get("/api/schedules/busy").await;
    assert_eq!(shown["counts"]["overlapped"], 1);
    assert_eq!(shown["next_tick"], "2027-01-15T08:03:00.000Z");
    server.complete(&running).await;
    server.advance(Duration::from_millis(MINUTE));
    let jobs = expect_jobs(&server, "busy", 2).await;
    assert_eq!(jobs[1]["run_at"], "2027-01-15T08:03:00.000Z");
    // With overlap allowed (a replace keeps the counts), an unfinished job does not hold.
    let mut allowed = minutely("busy");
    allowed["overlap"] = json!("allow");
    let replaced = put(&server, "busy", allowed, 200).await;
    assert_eq!(replaced["counts"]["enqueued"], 2);
    assert_eq!(replaced["overlap"], "allow");
    server.advance(Duration::from_millis(MINUTE));
    expect_jobs(&server, "busy", 3).await;
}

/// Run now enqueues the schedule's job at once, outside the timetable: the next tick and the
/// tick counts stay, the job is the schedule's last (so `overlap: skip` holds the next tick
/// while it runs), and an unknown schedule is a 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_enqueues_the_job_outside_the_timetable() {
    let server = TestServer::manual().await;
    let mut body = minutely("now");
    body["overlap"] = json!("skip");
    let made = put(&server, "r", body, 201).await;
    let ran = server.post("/api/schedules/r/run", json!({})).await;
    assert_eq!(ran["next_tick"], made["next_tick"], "{ran}");
    assert_eq!(ran["counts"], made["counts"], "{ran}");
    let jobs = expect_jobs(&server, "now", 1).await;
    assert_eq!(ran["last_job"], jobs[0]["id"], "{ran}");
    // The job run now is unfinished: the first tick is left out.
    server.advance(Duration::from_millis(MINUTE));
    let shown = server
        .poll("/api/schedules/r", "the first tick handled", |s| {
            s["next_tick"] != made["next_tick"]
        })
        .await;
    assert_eq!(shown["counts"]["overlapped"], 1, "{shown}");
    assert_eq!(shown["counts"]["enqueued"], 0, "{shown}");
    assert_eq!(jobs_of(&server, "now").await.len(), 1);
    let error = server
        .error(
            Method::POST,
            "/api/schedules/nope/run",
            Some(json!({})),
            404,
        )
        .await;
    assert_eq!(error.message, "schedule \"nope\" does not exist");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_schedules_enqueue_nothing_and_resume_from_now() {
    let server = TestServer::manual().await;
    put(&server, "p", minutely("paused"), 201).await;
    let paused = server.post("/api/schedules/p/pause", json!({})).await;
    assert_eq!(paused["paused"], true);
    server.advance(Duration::from_millis(3 * MINUTE));
    expect_jobs(&server, "paused", 0).await;
    server.advance(Duration::from_millis(MINUTE / 2));
    let resumed = server.post("/api/schedules/p/resume", json!({})).await;
    assert_eq!(resumed["paused"], false);
    assert_eq!(resumed["next_tick"], "2027-01-15T08:04:00.000Z");
    assert_eq!(resumed["counts"]["missed"], 0);
    server.advance(Duration::from_millis(MINUTE / 2));
    let jobs = expect_jobs(&server, "paused", 1).await;
    // Deleting the schedule leaves its jobs.
    let deleted = server
        .expect(Method::DELETE, "/api/schedules/p", None, 200)
        .await;
    assert_eq!(deleted, json!({"deleted": "p"}));
    server
        .error(Method::GET, "/api/schedules/p", None, 404)
        .await;
    server
        .error(Method::DELETE, "/api/schedules/p", None, 404)
        .await;
    server
        .error(Method::POST, "/api/schedules/p/pause", Some(json!({})), 404)
        .await;
    server.advance(Duration::from_millis(MINUTE));
    let left = expect_jobs(&server, "paused", 1).await;
    assert_eq!(left[0]["id"], jobs[0]["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_expression_starts_from_the_change() {
    let server = TestServer::manual().await;
    put(&server, "c", minutely("changed"), 201).await;
    server.advance(Duration::from_millis(MINUTE + MINUTE / 2));
    expect_jobs(&server, "changed", 1).await;
    let body = json!({"cron": "0 9 * * *", "job": {"queue": "changed"}, "paused": false});
    let replaced = put(&server, "c", body, 200).await;
    assert_eq!(replaced["cron"], "0 9 * * *");
    assert_eq!(replaced["next_tick"], "2027-01-15T09:00:00.000Z");
    assert_eq!(replaced["counts"]["enqueued"], 1);
    assert_eq!(
        ms(&replaced["created_at"]),
        T0,
        "made at T0, changed later: {replaced}"
    );
    server.advance(Duration::from_millis(MINUTE));
    expect_jobs(&server, "changed", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_ticks_of_any_expression() {
    let server = TestServer::manual().await;
    let preview = server
        .post(
            "/api/schedules/preview",
            json!({"cron": "@hourly", "count": 2}),
        )
        .await;
    assert_eq!(
        preview["ticks"],
        json!([
            {"at": "2027-01-15T09:00:00.000Z", "local": "2027-01-15T09:00:00+00:00"},
            {"at": "2027-01-15T10:00:00.000Z", "local": "2027-01-15T10:00:00+00:00"},
        ])
    );
    let tokyo = server
        .post(
            "/api/schedules/preview",
            json!({"cron": "0 9 * * MON-FRI", "timezone": "Asia/Tokyo",
                   "after": "2027-01-15T00:00:00Z", "count": 2}),
        )
        .await;
    // Friday the 15th, 09:00 in Tokyo (00:00 UTC) is not after the start; Monday the 18th is.
    assert_eq!(tokyo["ticks"][0]["at"], "2027-01-18T00:00:00.000Z");
    assert_eq!(tokyo["ticks"][0]["local"], "2027-01-18T09:00:00+09:00");
    assert_eq!(tokyo["timezone"], "Asia/Tokyo");
    let default = server
        .post("/api/schedules/preview", json!({"cron": "* * * * *"}))
        .await;
    assert_eq!(default["ticks"].as_array().map(Vec::len), Some(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_schedules_are_refused_naming_the_field() {
    let server = TestServer::manual().await;
    let cases = [
        (
            json!({"cron": "* * * *", "job": {"queue": "q"}}),
            "cron",
            "got 4",
        ),
        (
            json!({"cron": "99 * * * *", "job": {"queue": "q"}}),
            "cron",
            "field 1 (minute) must be 0-59, or a list, range or step of them, got \"99\"",
        ),
        (
            json!({"cron": "0 0 30 2 *", "job": {"queue": "q"}}),
            "cron",
            "never matches",
        ),
        (
            json!({"cron": "* * * * *", "timezone": "Mars/Base", "job": {"queue": "q"}}),
            "timezone",
            "IANA",
        ),
        (json!({"cron": "* * * * *"}), "job", "missing"),
        (
            json!({"cron": "* * * * *", "job": {"queue": "no spaces"}}),
            "job.queue",
            "letters",
        ),
        (
            json!({"cron": "* * * * *", "job": {"queue": "q", "run_at": "2027-01-01T00:00:00Z"}}),
            "job.run_at",
            "unknown field",
        ),
        (
            json!({"cron": "* * * * *", "job": {"queue": "q", "policy": {"type": "nope"}}}),
            "job.policy.type",
            "",
        ),
        (
            json!({"cron": "* * * * *", "job": {"queue": "q"}, "missed": "later"}),
            "missed",
            "unknown variant",
        ),
        (
            json!({"cron": "* * * * *", "job": {"queue": "q"}, "overlap": 1}),
            "overlap",
            "",
        ),
    ];
    for (body, field, words) in cases {
        let error = server
            .error(Method::PUT, "/api/schedules/s", Some(body.clone()), 400)
            .await;
        assert_eq!(error.field.as_deref(), Some(field), "{body}: {error:?}");
        assert!(error.message.contains(words), "{body}: {error:?}");
    }
    let error = server
        .error(
            Method::PUT,
            "/api/schedules/bad%20name",
            Some(minutely("q")),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("name"));
    let preview = server
        .invalid(
            "/api/schedules/preview",
            json!({"cron": "* * * * *", "count": 0}),
            "count",
        )
        .await;
    assert!(preview.contains("1 to 1000"), "{preview}");
    put(&server, "s", minutely("q"), 201).await;
    let error = server
        .error(Method::GET, "/api/schedules/s/ticks?count=5000", None, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("count"));
    // Nothing refused was stored.
    let list = server.get("/api/schedules").await;
    assert_eq!(list["schedules"].as_array().map(Vec::len), Some(1));
}
