//! Job dependencies (issue 30), end to end on the real server and the real store (embedded, or
//! PostgreSQL with `TENAX_TEST_STORE=postgres`): a batch enqueues a DAG by its steps, a job
//! waits (`waiting`) until every parent has completed and is then handed its parents' results,
//! a parent that dies cancels its waiting children (or they run, if they asked to), and
//! `GET /api/workflows/{id}` shows the jobs and their edges. Requests that name no job, repeat
//! one or form a cycle are refused naming the field; a scoped token cannot wait for another
//! project's job.

use common::{Options, Taken, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common;

const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";

/// Completes a taken job with `result`.
async fn complete_with(server: &TestServer, job: &Taken, result: Value) {
    let answer = server
        .api
        .post(
            &format!("/api/jobs/{}/complete", job.id),
            json!({"lease_token": job.lease_token, "result": result}),
        )
        .await;
    assert_eq!(answer["status"], "completed", "{answer}");
}

/// The `(id, status, result)` of each parent a taken job was handed.
fn parents(job: &Taken) -> Vec<(u64, String, Value)> {
    job.json["parents"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|p| {
                    (
                        p["id"].as_u64().expect("an id"),
                        p["status"].as_str().expect("a status").to_owned(),
                        p["result"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_enqueues_a_dag_that_runs_in_order_with_its_parents_results() {
    let server = TestServer::manual().await;
    let api = &server.api;
    // Fan-out and fan-in, given out of order: load waits for both transforms, which wait for
    // extract; the answer is in the request's order.
    let ids = api
        .enqueue_batch(vec![
            json!({"queue": "etl", "type": "load", "step": "load",
                   "after": [{"step": "a"}, {"step": "b"}]}),
            json!({"queue": "etl", "type": "transform", "step": "a", "after": [{"index": 3}]}),
            json!({"queue": "etl", "type": "transform", "step": "b", "after": [{"step": "extract"}]}),
            json!({"queue": "etl", "type": "extract", "step": "extract"}),
        ])
        .await;
    let [load, a, b, extract] = [ids[0], ids[1], ids[2], ids[3]];
    assert!(
        extract < a && a < b && b < load,
        "parents are stored first: {ids:?}"
    );
    for id in [load, a, b] {
        assert_eq!(api.status(id).await, "waiting");
    }
    assert_eq!(api.job(load).await["after"], json!([a, b]));
    assert_eq!(api.job(a).await["on_parent_dead"], "cancel");
    let stats = api.stats().await;
    assert_eq!(stats["totals"]["waiting"], 3, "{stats}");

    // Only extract can be taken.
    let first = api.take(&["etl"], 10).await;
    assert_eq!(first.iter().map(|t| t.id).collect::<Vec<_>>(), [extract]);
    assert!(first[0].json.get("parents").is_none(), "{}", first[0].json);
    complete_with(&server, &first[0], json!({"rows": 3})).await;

    let transforms = api.take(&["etl"], 10).await;
    assert_eq!(transforms.iter().map(|t| t.id).collect::<Vec<_>>(), [a, b]);
    for t in &transforms {
        assert_eq!(
            parents(t),
            [(extract, "completed".to_owned(), json!({"rows": 3}))]
        );
        assert_eq!(t.json["parents"][0]["type"], "extract");
    }
    let running = api.get(&format!("/api/workflows/{load}")).await;
    assert_eq!(running["status"], "running", "{running}");
    assert_eq!(
        running["edges"],
        json!([[extract, a], [extract, b], [a, load], [b, load]])
    );
    assert_eq!(
        running["counts"],
        json!({"completed": 1, "in_flight": 2, "waiting": 1})
    );

    complete_with(&server, &transforms[0], json!("A")).await;
    assert_eq!(api.status(load).await, "waiting");
    complete_with(&server, &transforms[1], json!("B")).await;
    let last = api.take_one("etl").await;
    assert_eq!(last.id, load);
    assert_eq!(
        parents(&last),
        [
            (a, "completed".to_owned(), json!("A")),
            (b, "completed".to_owned(), json!("B"))
        ]
    );
    api.complete(&last).await;
    let done = api.get(&format!("/api/workflows/{extract}")).await;
    assert_eq!(done["status"], "completed", "{done}");
    let shown: Vec<u64> = done["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_u64().expect("an id"))
        .collect();
    assert_eq!(shown, [extract, a, b, load]);
    assert_eq!(done["jobs"][3]["after"], json!([a, b]));
    assert_eq!(done["truncated"], false);

    // A later job may wait for a stored one: completed already, it is ready at once.
    let after_done = api
        .expect(
            Method::POST,
            "/api/jobs",
            Some(json!({"queue": "etl", "type": "report", "after": [load]})),
            201,
        )
        .await;
    assert_eq!(after_done["status"], "ready", "{after_done}");
    // A job that waits for none is a workflow of one.
    let alone = api.enqueue(json!({"queue": "solo"})).await;
    let one = api.get(&format!("/api/workflows/{alone}")).await;
    assert_eq!(one["jobs"].as_array().map(Vec::len), Some(1));
    assert_eq!(one["edges"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_parent_cancels_its_children_unless_they_run_anyway() {
    let server = TestServer::manual().await;
    let api = &server.api;
    let ids = api
        .enqueue_batch(vec![
            json!({"queue": "d", "type": "fetch", "step": "fetch"}),
            json!({"queue": "d", "type": "parse", "step": "parse", "after": [{"step": "fetch"}]}),
            json!({"queue": "d", "type": "store", "after": [{"step": "parse"}]}),
            json!({"queue": "d", "type": "cleanup", "after": [{"step": "fetch"}],
                   "on_parent_dead": "run"}),
        ])
        .await;
    let fetch = api.take_one("d").await;
    assert_eq!(fetch.id, ids[0]);
    let failed = api.fail(&fetch, "404", json!({"retryable": false})).await;
    assert_eq!(failed["status"], "dead", "{failed}");
    for id in [ids[1], ids[2]] {
        let job = api.job(id).await;
        assert_eq!(job["status"], "cancelled", "{job}");
        assert!(
            job["dead_reason"]
                .as_str()
                .is_some_and(|r| r.contains("did not complete")),
            "{job}"
        );
    }
    let cleanup = api.take_one("d").await;
    assert_eq!(cleanup.id, ids[3]);
    assert_eq!(
        parents(&cleanup),
        [(ids[0], "dead".to_owned(), Value::Null)]
    );
    let workflow = api.get(&format!("/api/workflows/{}", ids[2])).await;
    assert_eq!(workflow["jobs"].as_array().map(Vec::len), Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_dead_step_resumes_its_workflow_and_cancelling_one_ends_it() {
    let mut server = TestServer::manual().await;
    let ids = server
        .api
        .enqueue_batch(vec![
            json!({"queue": "r", "type": "fetch", "step": "fetch"}),
            json!({"queue": "r", "type": "parse", "step": "parse", "after": [{"step": "fetch"}]}),
            json!({"queue": "r", "type": "store", "after": [{"step": "parse"}]}),
        ])
        .await;
    let fetch = server.api.take_one("r").await;
    server
        .api
        .fail(&fetch, "503", json!({"retryable": false}))
        .await;
    for id in &ids[1..] {
        assert_eq!(server.api.status(*id).await, "cancelled");
    }
    // What a restart keeps: a replay after it still resumes the workflow.
    server.restart().await;
    let replayed = server
        .api
        .post("/api/dead/replay", json!({"ids": [ids[0]]}))
        .await;
    assert_eq!(replayed["replayed"], 1, "{replayed}");
    for id in &ids[1..] {
        let job = server.api.job(*id).await;
        assert_eq!(job["status"], "waiting", "{job}");
        assert!(job.get("dead_reason").is_none(), "{job}");
    }
    let fetch = server.api.take_one("r").await;
    assert_eq!(fetch.id, ids[0]);
    server.api.complete(&fetch).await;
    let parse = server.api.take_one("r").await;
    assert_eq!(parse.id, ids[1]);
    // Cancelling a step ends what waits for it, down the graph.
    let cancelled = server
        .api
        .post(&format!("/api/jobs/{}/cancel", ids[2]), json!({}))
        .await;
    assert_eq!(cancelled["outcome"], "cancelled", "{cancelled}");
    server.api.complete(&parse).await;
    server.api.assert_nothing_to_take("r", "0").await;
    let workflow = server.api.get(&format!("/api/workflows/{}", ids[0])).await;
    assert_eq!(workflow["status"], "failed", "{workflow}");
    assert_eq!(workflow["counts"], json!({"completed": 2, "cancelled": 1}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_dependencies_are_refused_naming_the_field() {
    let server = TestServer::manual().await;
    let api = &server.api;
    let stored = api.enqueue(json!({"queue": "q"})).await;
    let missing = stored + 1_000;
    let message = api
        .invalid(
            "/api/jobs",
            json!({"queue": "q", "after": [stored, missing]}),
            "after[1]",
        )
        .await;
    assert!(
        message.contains(&format!("job {missing} does not exist")),
        "{message}"
    );
    api.invalid(
        "/api/jobs",
        json!({"queue": "q", "after": [stored, stored]}),
        "after[1]",
    )
    .await;
    api.invalid(
        "/api/jobs",
        json!({"queue": "q", "after": ["x"]}),
        "after[0]",
    )
    .await;
    api.invalid(
        "/api/jobs",
        json!({"queue": "q", "after": [{"index": 0}]}),
        "after[0]",
    )
    .await;
    api.invalid("/api/jobs", json!({"queue": "q", "step": "s"}), "step")
        .await;
    let cycle = api
        .invalid(
            "/api/jobs/batch",
            json!({"jobs": [
                {"queue": "q", "step": "x", "after": [{"step": "y"}]},
                {"queue": "q", "step": "y", "after": [{"step": "x"}]},
            ]}),
            "jobs[0].after",
        )
        .await;
    assert!(cycle.contains("jobs[0] → jobs[1] → jobs[0]"), "{cycle}");
    api.invalid(
        "/api/jobs/batch",
        json!({"jobs": [{"queue": "q"}, {"queue": "q", "after": [{"index": 5}]}]}),
        "jobs[1].after[0]",
    )
    .await;
    api.invalid(
        "/api/jobs/batch",
        json!({"jobs": [{"queue": "q"}, {"queue": "q", "after": [stored, missing]}]}),
        "jobs[1].after[1]",
    )
    .await;
    // A refused batch stores nothing.
    let jobs = api.get("/api/jobs?queue=q").await;
    assert_eq!(jobs["jobs"].as_array().map(Vec::len), Some(1), "{jobs}");
    // A schedule's job cannot wait for others.
    api.error(
        Method::PUT,
        "/api/schedules/nightly",
        Some(json!({"cron": "0 3 * * *", "job": {"queue": "q", "after": [stored]}})),
        400,
    )
    .await;
    // A webhook delivery is not a job to wait for.
    let subscription = api
        .subscribe(
            "hooked",
            json!({"endpoint": "http://hooks.invalid/hook"}),
            json!({}),
        )
        .await;
    api.enqueue(json!({"queue": "hooked"})).await;
    let delivery = api
        .only_delivery(subscription["id"].as_u64().expect("an id"))
        .await;
    let refused = api
        .invalid(
            "/api/jobs",
            json!({"queue": "q", "after": [delivery]}),
            "after[0]",
        )
        .await;
    assert!(refused.contains("webhook delivery"), "{refused}");
    assert_eq!(
        api.error(Method::GET, &format!("/api/workflows/{missing}"), None, 404)
            .await
            .code,
        "not_found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_token_waits_only_for_its_own_projects_jobs() {
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let api = &server.api;
    let theirs = {
        let response = api
            .http()
            .post(api.url("/api/jobs"))
            .bearer_auth(ADMIN)
            .json(&json!({"queue": "p2:jobs"}))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), StatusCode::CREATED);
        response.json::<Value>().await.expect("JSON")["id"]
            .as_u64()
            .expect("an id")
    };
    let token = api
        .make_token(
            ADMIN,
            &json!({"name": "p1-producer", "role": "producer", "projects": ["p1"]}),
        )
        .await;
    for (path, body) in [
        ("/api/jobs", json!({"queue": "p1:jobs", "after": [theirs]})),
        (
            "/api/jobs/batch",
            json!({"jobs": [{"queue": "p1:jobs"}, {"queue": "p1:jobs", "after": [theirs]}]}),
        ),
    ] {
        let response = api
            .http()
            .post(api.url(path))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{path}");
    }
    let reader = api
        .make_token(
            ADMIN,
            &json!({"name": "p1-reader", "role": "reader", "projects": ["p1"]}),
        )
        .await;
    let response = api
        .http()
        .get(api.url(&format!("/api/workflows/{theirs}")))
        .bearer_auth(&reader)
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}
