//! Cancellation (issue 30, docs/workflows.md#cancellation), end to end on the real server and
//! the real store (embedded, or PostgreSQL with `TENAX_TEST_STORE=postgres`): a scheduled or
//! ready job is cancelled at once; a finished one is refused with 409 naming its status; a job
//! in flight has its lease marked, which its worker's next heartbeat answers with
//! `"cancelled": true`, and then a failure or an expiry of that lease finishes it as
//! cancelled while a completion completes it; a selection cancels many; a token scoped to one
//! project cannot cancel another's jobs; a cancelled job is replayed like a dead one.

use std::time::Duration;

use common::{T0, Taken, TestServer, ms};
use reqwest::Method;
use serde_json::{Value, json};

use crate::common;

const SECOND: u64 = 1_000;

/// `POST /api/jobs/{id}/cancel`, expecting 200: the answer.
async fn cancel(server: &TestServer, id: u64) -> Value {
    server
        .post(&format!("/api/jobs/{id}/cancel"), json!({}))
        .await
}

/// A heartbeat of `job`'s lease, expecting 200: whether the job was cancelled.
async fn heartbeat(server: &TestServer, job: &Taken) -> bool {
    let answer = server
        .post(
            &format!("/api/jobs/{}/heartbeat", job.id),
            json!({"lease_token": job.lease_token}),
        )
        .await;
    answer["cancelled"]
        .as_bool()
        .unwrap_or_else(|| panic!("a heartbeat says whether the job was cancelled: {answer}"))
}

fn totals_cancelled(stats: &Value) -> u64 {
    stats["totals"]["cancelled"].as_u64().expect("a count")
}

#[tokio::test]
async fn a_ready_or_scheduled_job_is_cancelled_at_once_and_a_finished_one_is_refused() {
    let server = TestServer::manual().await;
    let ready = server.enqueue(json!({"queue": "c", "type": "t"})).await;
    let scheduled = server
        .enqueue(json!({"queue": "c", "type": "t", "delay": "1h"}))
        .await;
    assert_eq!(server.status(scheduled).await, "scheduled");

    for id in [ready, scheduled] {
        let answer = cancel(&server, id).await;
        assert_eq!(answer["outcome"], "cancelled", "{answer}");
        let job = &answer["job"];
        assert_eq!(job["id"], json!(id));
        assert_eq!(job["status"], "cancelled", "{answer}");
        assert_eq!(ms(&job["finished_at"]), T0, "{answer}");
        assert_eq!(job["dead_reason"], "cancelled by request", "{answer}");
        assert_eq!(server.job(id).await["status"], "cancelled");
    }
    // Neither runs: not now, and not once the scheduled one's time has come.
    server.advance_to(T0 + 2 * 3_600 * SECOND).await;
    server.assert_nothing_to_take("c", "50ms").await;
    assert_eq!(totals_cancelled(&server.stats().await), 2);
    let counts = server.get("/api/queues/c").await;
    assert_eq!(counts["counts"]["cancelled"], json!(2), "{counts}");

    // A finished job is refused, naming its status: cancelled, completed, dead.
    let error = server
        .error(
            Method::POST,
            &format!("/api/jobs/{ready}/cancel"),
            None,
            409,
        )
        .await;
    assert!(error.message.contains("is cancelled"), "{error:?}");
    let done = server.enqueue(json!({"queue": "d"})).await;
    let taken = server.take_one("d").await;
    server.complete(&taken).await;
    let error = server
        .error(Method::POST, &format!("/api/jobs/{done}/cancel"), None, 409)
        .await;
    assert!(error.message.contains("is completed"), "{error:?}");
    let dying = server
        .enqueue(json!({"queue": "d", "retry_limit": 0}))
        .await;
    let taken = server.take_one("d").await;
    assert_eq!(
        server.fail(&taken, "boom", json!({})).await["status"],
        "dead"
    );
    let error = server
        .error(
            Method::POST,
            &format!("/api/jobs/{dying}/cancel"),
            None,
            409,
        )
        .await;
    assert!(error.message.contains("is dead"), "{error:?}");

    // No such job: 404; not an id: 400 naming it.
    server
        .error(Method::POST, "/api/jobs/999999/cancel", None, 404)
        .await;
    let error = server
        .error(Method::POST, "/api/jobs/abc/cancel", None, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("id"), "{error:?}");
}

#[tokio::test]
async fn a_job_in_flight_is_marked_and_its_worker_learns_it_then_its_failure_cancels_it() {
    let server = TestServer::manual().await;
    let id = server
        .enqueue(json!({"queue": "f", "retry_limit": 5}))
        .await;
    let taken = server.take_one("f").await;
    assert!(!heartbeat(&server, &taken).await, "not cancelled yet");

    let answer = cancel(&server, id).await;
    assert_eq!(answer["outcome"], "marked", "{answer}");
    assert_eq!(answer["job"]["status"], "in_flight", "{answer}");
    assert!(
        heartbeat(&server, &taken).await,
        "the heartbeat says cancelled"
    );
    // Marking again is no error: it is still marked.
    assert_eq!(cancel(&server, id).await["outcome"], "marked");

    // The worker stops and fails the job: cancelled, though retries were left.
    let failed = server.fail(&taken, "stopped: cancelled", json!({})).await;
    assert_eq!(failed["status"], "cancelled", "{failed}");
    let job = server.job(id).await;
    assert_eq!(job["status"], "cancelled", "{job}");
    assert_eq!(job["errors"].as_array().map(Vec::len), Some(1), "{job}");
    assert_eq!(job["dead_reason"], "cancelled by request while in flight");
    server.assert_nothing_to_take("f", "50ms").await;
}

#[tokio::test]
async fn a_marked_job_that_completes_is_completed() {
    let server = TestServer::manual().await;
    let id = server.enqueue(json!({"queue": "k"})).await;
    let taken = server.take_one("k").await;
    assert_eq!(cancel(&server, id).await["outcome"], "marked");
    let answer = server
        .post(
            &format!("/api/jobs/{id}/complete"),
            json!({"lease_token": taken.lease_token, "result": {"done": true}}),
        )
        .await;
    assert_eq!(answer["status"], "completed", "{answer}");
    let job = server.job(id).await;
    assert_eq!(job["status"], "completed", "{job}");
    assert_eq!(job["result"], json!({"done": true}), "{job}");
}

#[tokio::test]
async fn a_marked_lease_that_expires_ends_cancelled_not_ready() {
    let server = TestServer::manual().await;
    let marked = server.enqueue(json!({"queue": "e"})).await;
    let unmarked = server.enqueue(json!({"queue": "e"})).await;
    let taken = server
        .take_with(json!({"queues": ["e"], "max": 2, "lease": "30s"}))
        .await;
    assert_eq!(taken.len(), 2);
    assert_eq!(cancel(&server, marked).await["outcome"], "marked");

    // Both leases end: the unmarked job is ready again, the marked one cancelled.
    server.advance(Duration::from_secs(31));
    let job = server.wait_for(marked, "cancelled").await;
    assert_eq!(job["dead_reason"], "cancelled by request while in flight");
    server.wait_for(unmarked, "ready").await;
    let again = server.take_one("e").await;
    assert_eq!(again.id, unmarked, "only the unmarked job runs again");
    // A new lease on a job starts unmarked.
    assert!(!heartbeat(&server, &again).await);
}

#[tokio::test]
async fn a_selection_cancels_its_unfinished_jobs_and_marks_those_in_flight() {
    let server = TestServer::manual().await;
    let a: Vec<u64> = server
        .enqueue_batch(vec![
            json!({"queue": "sa", "type": "x"}),
            json!({"queue": "sa", "type": "x", "delay": "1m"}),
            json!({"queue": "sa", "type": "y"}),
            json!({"queue": "sa", "type": "x"}),
        ])
        .await;
    let b = server.enqueue(json!({"queue": "sb", "type": "x"})).await;
    // The first is taken (in flight), the last completed (finished: left alone).
    let taken = server
        .take_with(json!({"queues": ["sa"], "max": 1}))
        .await
        .remove(0);
    assert_eq!(taken.id, a[0]);
    let last = server.take_one("sa").await;
    assert_eq!(last.id, a[2]);
    let done = server.take_one("sa").await;
    assert_eq!(done.id, a[3]);
    server.complete(&done).await;

    // By queue and type: the x jobs of sa that are not finished.
    let answer = server
        .post("/api/jobs/cancel", json!({"queue": "sa", "type": "x"}))
        .await;
    assert_eq!(
        answer,
        json!({"cancelled": 1, "marked": 1, "cancelled_ids": [a[1]], "marked_ids": [a[0]]})
    );
    assert_eq!(server.status(a[1]).await, "cancelled");
    assert_eq!(server.status(a[0]).await, "in_flight");
    assert!(heartbeat(&server, &taken).await);
    assert_eq!(server.status(a[2]).await, "in_flight", "another type");
    assert!(!heartbeat(&server, &last).await, "another type: not marked");
    assert_eq!(server.status(a[3]).await, "completed");
    assert_eq!(server.status(b).await, "ready", "another queue");

    // By ids: the named ones, whatever their queue.
    let answer = server
        .post("/api/jobs/cancel", json!({"ids": [b, a[3]]}))
        .await;
    assert_eq!(answer["cancelled_ids"], json!([b]), "{answer}");
    assert_eq!(server.status(b).await, "cancelled");

    // Nothing narrows it: refused, naming the field; all: true cancels every unfinished job.
    server.invalid("/api/jobs/cancel", json!({}), "ids").await;
    server
        .invalid("/api/jobs/cancel", json!({"ids": []}), "ids")
        .await;
    let error = server
        .error(
            Method::POST,
            "/api/jobs/cancel",
            Some(json!({"queue": "sa", "status": "ready"})),
            400,
        )
        .await;
    assert!(error.message.contains("status"), "{error:?}");
    let answer = server.post("/api/jobs/cancel", json!({"all": true})).await;
    assert_eq!(answer["cancelled"], json!(0), "{answer}");
    assert_eq!(answer["marked_ids"], json!([a[0], a[2]]), "{answer}");
}

#[tokio::test]
async fn a_cancelled_job_is_replayed_like_a_dead_one() {
    let server = TestServer::manual().await;
    let id = server.enqueue(json!({"queue": "r"})).await;
    cancel(&server, id).await;
    // A replay of dead jobs leaves it: it is not dead.
    let answer = server.post("/api/dead/replay", json!({"ids": [id]})).await;
    assert_eq!(answer["replayed"], json!(0), "{answer}");
    assert_eq!(server.status(id).await, "cancelled");
    // A replay of cancelled jobs brings it back.
    let answer = server
        .post(
            "/api/dead/replay",
            json!({"queue": "r", "status": "cancelled"}),
        )
        .await;
    assert_eq!(answer["ids"], json!([id]), "{answer}");
    let job = server.job(id).await;
    assert_eq!(job["status"], "ready", "{job}");
    assert!(job.get("dead_reason").is_none_or(Value::is_null), "{job}");
    assert_eq!(server.take_one("r").await.id, id);
    server
        .invalid(
            "/api/dead/replay",
            json!({"ids": [id], "status": "completed"}),
            "status",
        )
        .await;
}

const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";

/// `POST path` with `body` as `token`: the status.
async fn post_as(server: &TestServer, token: &str, path: &str, body: Value) -> u16 {
    server
        .api
        .http()
        .post(server.api.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("an answer")
        .status()
        .as_u16()
}

/// `GET /api/jobs/{id}` as the admin: the job's status.
async fn status_as_admin(server: &TestServer, id: u64) -> String {
    let job: Value = server
        .api
        .http()
        .get(server.api.url(&format!("/api/jobs/{id}")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .expect("a job");
    job["status"].as_str().expect("a status").to_owned()
}

#[tokio::test]
async fn a_scoped_token_cancels_only_its_own_projects_jobs() {
    let server = TestServer::start(common::Options::manual().flags(&[
        "--auth",
        "on",
        "--admin-token",
        ADMIN,
    ]))
    .await;
    let enqueue = |queue: &'static str| {
        let server = &server;
        async move {
            let response = server
                .api
                .http()
                .post(server.api.url("/api/jobs"))
                .bearer_auth(ADMIN)
                .json(&json!({"queue": queue}))
                .send()
                .await
                .expect("an answer");
            assert_eq!(response.status(), 201);
            let answer: Value = response.json().await.expect("JSON");
            answer["id"].as_u64().expect("an id")
        }
    };
    let mine = enqueue("p1:orders").await;
    let theirs = enqueue("p2:orders").await;
    let token = server
        .api
        .make_token(
            ADMIN,
            &json!({"name": "p1 admin", "role": "admin", "projects": ["p1"]}),
        )
        .await;

    let one = |id: u64| format!("/api/jobs/{id}/cancel");
    assert_eq!(post_as(&server, &token, &one(theirs), json!({})).await, 403);
    for body in [
        json!({"ids": [theirs]}),
        json!({"queue": "p2:orders"}),
        json!({"all": true}),
    ] {
        assert_eq!(
            post_as(&server, &token, "/api/jobs/cancel", body.clone()).await,
            403,
            "{body}"
        );
    }
    assert_eq!(status_as_admin(&server, theirs).await, "ready");

    assert_eq!(post_as(&server, &token, &one(mine), json!({})).await, 200);
    assert_eq!(status_as_admin(&server, mine).await, "cancelled");
}
