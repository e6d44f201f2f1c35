//! Batches with callbacks over real HTTP: one callback of each kind with the counts once every
//! member has finished, none on success when a member died, jobs added to an open batch until
//! it is closed, a restart in the middle, scoped tokens held to their queues, every refusal
//! naming its field; on PostgreSQL, two servers finishing the members at once. With
//! `TENAX_TEST_STORE=postgres` the same on PostgreSQL.

use std::sync::Arc;

use common::{Api, Options, Taken, TestServer, on_postgres};
use node::Node;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common;
use crate::common::node;

const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";

/// Makes a batch (201); returns the answer.
async fn create(api: &Api, body: Value) -> Value {
    api.expect(Method::POST, "/api/batches", Some(body), 201)
        .await
}

fn callbacks() -> Value {
    json!({
        "on_complete": {"queue": "done", "type": "report", "payload": {"to": "ops"}, "priority": 2},
        "on_success": {"queue": "ok", "type": "celebrate"},
    })
}

/// A batch body: the callbacks, `n` jobs of queue `work`, and `fields` laid over.
fn body(n: usize, fields: Value) -> Value {
    let mut body = callbacks();
    body["jobs"] =
        json!((0..n)
        .map(|i| json!({"queue": "work", "type": "step", "payload": {"i": i}, "retry_limit": 0}))
        .collect::<Vec<_>>());
    body["description"] = json!("import 42");
    if let Value::Object(fields) = fields {
        for (k, v) in fields {
            body[k] = v;
        }
    }
    body
}

fn ids_of(answer: &Value) -> Vec<u64> {
    common::ids(&answer["jobs"])
}

/// The jobs of `queue`.
async fn jobs_of(api: &Api, queue: &str) -> Vec<Value> {
    api.get(&format!("/api/jobs?queue={queue}&limit=100")).await["jobs"]
        .as_array()
        .expect("jobs")
        .clone()
}

async fn batch(api: &Api, id: u64) -> Value {
    api.get(&format!("/api/batches/{id}")).await
}

async fn complete_all(api: &Api, n: usize) {
    let taken = api.take(&["work"], n).await;
    assert_eq!(taken.len(), n);
    for job in &taken {
        api.complete(job).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_are_enqueued_once_with_the_counts() {
    let server = TestServer::manual().await;
    let api = &server.api;
    let made = create(api, body(3, json!({}))).await;
    let id = made["batch"]["id"].as_u64().expect("an id");
    assert_eq!(made["batch"]["state"], "closed", "{made}");
    assert_eq!(made["batch"]["counts"]["total"], 3);
    assert_eq!(made["batch"]["counts"]["pending"], 3);
    assert_eq!(made["batch"]["queues"], json!(["done", "ok", "work"]));
    let members = ids_of(&made);
    assert_eq!(members.len(), 3);
    assert_eq!(api.job(members[0]).await["batch"], json!(id));

    let taken = api.take(&["work"], 3).await;
    api.complete(&taken[0]).await;
    api.complete(&taken[1]).await;
    assert_eq!(batch(api, id).await["counts"]["pending"], 1);
    assert!(jobs_of(api, "done").await.is_empty(), "not before the last");
    api.complete(&taken[2]).await;

    // The last completion's commit enqueued the callbacks: visible as it answers.
    let finished = batch(api, id).await;
    assert_eq!(finished["state"], "finished", "{finished}");
    assert_eq!(
        finished["counts"],
        json!({"total": 3, "pending": 0, "completed": 3, "dead": 0, "deleted": 0, "cancelled": 0})
    );
    let done = jobs_of(api, "done").await;
    let ok = jobs_of(api, "ok").await;
    assert_eq!((done.len(), ok.len()), (1, 1), "{done:?} {ok:?}");
    assert_eq!(finished["on_complete_job"], done[0]["id"]);
    assert_eq!(finished["on_success_job"], ok[0]["id"]);
    let callback: Taken = api.take_one("done").await;
    assert_eq!(callback.json["type"], "report");
    assert_eq!(callback.priority, 2);
    assert_eq!(
        callback.json["payload"],
        json!({"batch": {"id": id, "description": "import 42", "total": 3, "completed": 3,
                         "dead": 0, "deleted": 0, "cancelled": 0, "succeeded": true},
               "payload": {"to": "ops"}})
    );
    assert_eq!(
        api.take_one("ok").await.json["payload"]["payload"],
        Value::Null
    );
    assert!(api.job(callback.id).await.get("batch").is_none());

    let listed = api.get("/api/batches").await;
    assert_eq!(listed["batches"][0]["id"], json!(id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_fires_on_complete_and_not_on_success() {
    let server = TestServer::manual().await;
    let api = &server.api;
    let made = create(api, body(2, json!({}))).await;
    let id = made["batch"]["id"].as_u64().expect("an id");
    let taken = api.take(&["work"], 2).await;
    let failed = api.fail(&taken[0], "no such customer", json!({})).await;
    assert_eq!(failed["status"], "dead", "{failed}");
    api.complete(&taken[1]).await;
    let finished = batch(api, id).await;
    assert_eq!(finished["state"], "finished");
    assert_eq!(finished["counts"]["dead"], 1);
    assert_eq!(finished["counts"]["completed"], 1);
    assert!(finished.get("on_success_job").is_none(), "{finished}");
    let done = jobs_of(api, "done").await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["payload"]["batch"]["succeeded"], false);
    assert!(jobs_of(api, "ok").await.is_empty());

    // Replayed after the batch finished: it runs, and fires nothing again.
    api.post("/api/dead/replay", json!({"ids": [taken[0].id]}))
        .await;
    complete_all(api, 1).await;
    assert_eq!(batch(api, id).await["counts"], finished["counts"]);
    assert_eq!(jobs_of(api, "done").await.len(), 1);
    assert!(jobs_of(api, "ok").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_member_counts_as_cancelled() {
    let server = TestServer::manual().await;
    let api = &server.api;
    let made = create(api, body(2, json!({}))).await;
    let id = made["batch"]["id"].as_u64().expect("an id");
    let members: Vec<u64> = made["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| j["id"].as_u64().expect("an id"))
        .collect();
    let cancelled = api
        .post(&format!("/api/jobs/{}/cancel", members[0]), json!({}))
        .await;
    assert_eq!(cancelled["outcome"], "cancelled", "{cancelled}");
    assert_eq!(batch(api, id).await["counts"]["pending"], 1);
    complete_all(api, 1).await;
    let finished = batch(api, id).await;
    assert_eq!(finished["state"], "finished", "{finished}");
    assert_eq!(finished["counts"]["cancelled"], 1);
    assert_eq!(finished["counts"]["completed"], 1);
    let done = jobs_of(api, "done").await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["payload"]["batch"]["cancelled"], 1);
    assert_eq!(done[0]["payload"]["batch"]["succeeded"], false);
    assert!(jobs_of(api, "ok").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_batch_takes_jobs_until_it_is_closed() {
    let server = TestServer::manual().await;
    let api = &server.api;
    let made = create(api, body(1, json!({"open": true}))).await;
    let id = made["batch"]["id"].as_u64().expect("an id");
    assert_eq!(made["batch"]["state"], "open");
    complete_all(api, 1).await;
    assert_eq!(batch(api, id).await["state"], "open", "open: it waits");
    assert!(jobs_of(api, "done").await.is_empty());

    let added = api
        .expect(
            Method::POST,
            &format!("/api/batches/{id}/jobs"),
            Some(json!({"jobs": [{"queue": "work"}, {"queue": "other"}]})),
            201,
        )
        .await;
    assert_eq!(ids_of(&added).len(), 2);
    assert_eq!(added["batch"]["counts"]["total"], 3);
    assert_eq!(
        added["batch"]["queues"],
        json!(["done", "ok", "other", "work"])
    );
    let closed = api
        .post(&format!("/api/batches/{id}/close"), json!({}))
        .await;
    assert_eq!(closed["state"], "closed");
    let refused = api
        .error(
            Method::POST,
            &format!("/api/batches/{id}/jobs"),
            Some(json!({"jobs": [{"queue": "work"}]})),
            409,
        )
        .await;
    assert_eq!(refused.code, "batch_closed");
    complete_all(api, 1).await;
    let other = api.take(&["other"], 1).await;
    api.complete(&other[0]).await;
    let finished = batch(api, id).await;
    assert_eq!(finished["state"], "finished");
    assert_eq!(finished["counts"]["completed"], 3);
    assert_eq!(jobs_of(api, "done").await.len(), 1);
    assert_eq!(jobs_of(api, "ok").await.len(), 1);

    // Closing a batch whose members all finished fires at once; deleting it keeps its jobs.
    let made = create(api, body(1, json!({"open": true}))).await;
    let second = made["batch"]["id"].as_u64().expect("an id");
    complete_all(api, 1).await;
    let closed = api
        .post(&format!("/api/batches/{second}/close"), json!({}))
        .await;
    assert_eq!(closed["state"], "finished", "{closed}");
    assert_eq!(jobs_of(api, "done").await.len(), 2);
    api.expect(Method::DELETE, &format!("/api/batches/{second}"), None, 200)
        .await;
    api.error(Method::GET, &format!("/api/batches/{second}"), None, 404)
        .await;
    let member = ids_of(&made)[0];
    assert_eq!(api.job(member).await["batch"], json!(second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_still_gives_one_callback() {
    let mut server = TestServer::manual().await;
    let made = create(&server.api, body(3, json!({}))).await;
    let id = made["batch"]["id"].as_u64().expect("an id");
    complete_all(&server.api, 1).await;
    // Taken but not acknowledged when the server stops: it comes back ready (or leased).
    let held = server.api.take(&["work"], 1).await;
    assert_eq!(held.len(), 1);
    server.restart().await;
    let api = &server.api;
    assert_eq!(batch(api, id).await["counts"]["pending"], 2);
    if on_postgres() {
        api.complete(&held[0]).await;
        complete_all(api, 1).await;
    } else {
        complete_all(api, 2).await;
    }
    assert_eq!(batch(api, id).await["state"], "finished");
    assert_eq!(jobs_of(api, "done").await.len(), 1);
    server.restart().await;
    let api = &server.api;
    let after = batch(api, id).await;
    assert_eq!(after["state"], "finished");
    assert_eq!(after["counts"]["completed"], 3);
    assert_eq!(jobs_of(api, "done").await.len(), 1);
    assert_eq!(jobs_of(api, "ok").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_field_and_the_rule() {
    let server = TestServer::manual().await;
    let api = &server.api;
    let cases = [
        (json!({"jobs": [{"queue": "work"}]}), "on_complete"),
        (
            body(1, json!({"on_complete": {"queue": ""}})),
            "on_complete.queue",
        ),
        (
            body(
                1,
                json!({"on_success": {"queue": "q", "type": "x".repeat(200)}}),
            ),
            "on_success.type",
        ),
        (
            body(
                1,
                json!({"on_complete": {"queue": "q", "policy": {"type": "nope"}}}),
            ),
            "on_complete.policy.type",
        ),
        (
            body(
                1,
                json!({"jobs": [{"queue": "work"}, {"queue": "bad queue"}]}),
            ),
            "jobs[1].queue",
        ),
        (
            body(
                1,
                json!({"jobs": [{"queue": "work", "on_duplicate": "existing"}]}),
            ),
            "jobs[0].on_duplicate",
        ),
        (
            body(1, json!({"description": "d".repeat(1025)})),
            "description",
        ),
    ];
    for (request, field) in cases {
        let message = api.invalid("/api/batches", request, field).await;
        assert!(!message.is_empty());
    }
    let error = api
        .error(Method::POST, "/api/batches", Some(json!({"jobs": 3})), 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("jobs"), "{error:?}");
    // A callback into an encrypted queue: its payload would be stored in clear.
    api.put(
        "/api/queues/secret?create=true",
        json!({"encrypt_payloads": true}),
    )
    .await;
    api.invalid(
        "/api/batches",
        body(1, json!({"on_success": {"queue": "secret"}})),
        "on_success.queue",
    )
    .await;
    api.invalid("/api/batches/x/close", json!({}), "id").await;
    api.invalid("/api/batches/1/jobs", json!({"jobs": []}), "jobs")
        .await;
    let error = api
        .error(Method::GET, "/api/batches?limit=0", None, 400)
        .await;
    assert_eq!(error.field.as_deref(), Some("limit"));
    api.error(Method::GET, "/api/batches/777", None, 404).await;
    api.error(
        Method::POST,
        "/api/batches/777/jobs",
        Some(json!({"jobs": [{"queue": "work"}]})),
        404,
    )
    .await;
    // Nothing was stored by any refusal.
    assert_eq!(api.get("/api/batches").await["batches"], json!([]));
    assert!(jobs_of(api, "work").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_tokens_reach_only_their_batches() {
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let api = &server.api;
    let token = api
        .make_token(
            ADMIN,
            &json!({"name": "p1 producer", "role": "producer", "projects": ["p1"]}),
        )
        .await;
    let http = api.http().clone();
    let send = |method: Method, path: &str, token: &str, body: Option<Value>| {
        let mut request = http.request(method, api.url(path)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.expect("an answer");
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let of = |jobs: &str, callback: &str| json!({"jobs": [{"queue": jobs}], "on_complete": {"queue": callback}, "open": true});
    // Its own project's queues only, the callback's too.
    assert_eq!(
        send(
            Method::POST,
            "/api/batches",
            &token,
            Some(of("p2:w", "p1:done"))
        )
        .await
        .0,
        403
    );
    assert_eq!(
        send(
            Method::POST,
            "/api/batches",
            &token,
            Some(of("p1:w", "p2:done"))
        )
        .await
        .0,
        403
    );
    let (status, own) = send(
        Method::POST,
        "/api/batches",
        &token,
        Some(of("p1:w", "p1:done")),
    )
    .await;
    assert_eq!(status, 201, "{own}");
    let own = own["batch"]["id"].as_u64().expect("an id");
    let (status, theirs) = send(
        Method::POST,
        "/api/batches",
        ADMIN,
        Some(of("p2:w", "p2:done")),
    )
    .await;
    assert_eq!(status, 201);
    let theirs = theirs["batch"]["id"].as_u64().expect("an id");
    for (method, path, body) in [
        (Method::GET, format!("/api/batches/{theirs}"), None),
        (Method::POST, format!("/api/batches/{theirs}/close"), None),
        (
            Method::POST,
            format!("/api/batches/{theirs}/jobs"),
            Some(json!({"jobs": [{"queue": "p1:w"}]})),
        ),
        // Its own batch, but another project's queue for the new job.
        (
            Method::POST,
            format!("/api/batches/{own}/jobs"),
            Some(json!({"jobs": [{"queue": "p2:w"}]})),
        ),
    ] {
        let (status, answer) = send(method.clone(), &path, &token, body).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
    }
    assert_eq!(
        send(
            Method::POST,
            &format!("/api/batches/{own}/jobs"),
            &token,
            Some(json!({"jobs": [{"queue": "p1:w"}]}))
        )
        .await
        .0,
        201
    );
    let (status, listed) = send(Method::GET, "/api/batches", &token, None).await;
    assert_eq!(status, 200);
    let ids: Vec<u64> = listed["batches"]
        .as_array()
        .expect("batches")
        .iter()
        .filter_map(|b| b["id"].as_u64())
        .collect();
    assert_eq!(ids, [own]);
    // Theirs is unchanged.
    let (_, theirs) = send(Method::GET, &format!("/api/batches/{theirs}"), ADMIN, None).await;
    assert_eq!(
        (theirs["state"].clone(), theirs["counts"]["total"].clone()),
        (json!("open"), json!(1))
    );
}

/// Two servers on one database finish the members at once, each its half: one callback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_finishing_members_at_once_enqueue_one_callback() {
    let Some(url) = common::postgres::fresh_database().await else {
        return;
    };
    let a = Arc::new(Node::start(&url, &[], &[]).await);
    let b = Arc::new(Node::start(&url, &[], &[]).await);
    let made = a.must_post("/api/batches", body(40, json!({})), 201).await;
    let id = made["batch"]["id"].as_u64().expect("an id");
    let take = |node: Arc<Node>| async move {
        let answer = node
            .must_post("/api/take", json!({"queues": ["work"], "max": 20}), 200)
            .await;
        answer["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| {
                (
                    j["id"].as_u64().expect("id"),
                    j["lease_token"].as_u64().expect("token"),
                )
            })
            .collect::<Vec<_>>()
    };
    let on_a = take(a.clone()).await;
    let on_b = take(b.clone()).await;
    assert_eq!(on_a.len() + on_b.len(), 40);
    let mut tasks = Vec::new();
    for (node, jobs) in [(a.clone(), on_a), (b.clone(), on_b)] {
        for (job, lease) in jobs {
            let node = node.clone();
            tasks.push(tokio::spawn(async move {
                node.must_post(
                    &format!("/api/jobs/{job}/complete"),
                    json!({"lease_token": lease}),
                    200,
                )
                .await
            }));
        }
    }
    for task in tasks {
        task.await.expect("a completion");
    }
    for node in [&a, &b] {
        let shown = node.must_get(&format!("/api/batches/{id}"), 200).await;
        assert_eq!(shown["state"], "finished", "{shown}");
        assert_eq!(shown["counts"]["completed"], 40);
        let done = node.must_get("/api/jobs?queue=done", 200).await;
        assert_eq!(done["jobs"].as_array().map(Vec::len), Some(1), "{done}");
        let ok = node.must_get("/api/jobs?queue=ok", 200).await;
        assert_eq!(ok["jobs"].as_array().map(Vec::len), Some(1), "{ok}");
        assert_eq!(shown["on_complete_job"], done["jobs"][0]["id"]);
    }
}
