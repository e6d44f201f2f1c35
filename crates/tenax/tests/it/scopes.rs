//! Tokens scoped to Zaqar projects, over real HTTP: every route of both APIs (the table of
//! `common/routes.rs`) with a token of every role scoped to project `p1`, aimed at project
//! `p2`'s queue, job, dead job, subscription, delivery and schedule (refused, and nothing of
//! `p2` changes) and at `p1`'s own (let through); listings that show `p1` only; and the same
//! on the dashboard. A project's queues are `project:name` on either API.

use common::{Options, TestServer};
use reqwest::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use reqwest::{Method, StatusCode};
use routes::{Who, table};
use serde_json::{Value, json};

use crate::common;
use crate::common::routes;

const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";
const CLIENT_ID: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";

/// What one project holds, made by the admin.
#[derive(Debug, Clone)]
struct Project {
    name: &'static str,
    job: u64,
    dead: u64,
    subscription: u64,
    delivery: u64,
    schedule: String,
    batch: u64,
}

impl Project {
    fn queue(&self) -> String {
        format!("{}:orders", self.name)
    }

    fn dying(&self) -> String {
        format!("{}:dying", self.name)
    }
}

/// How a route meets a project.
enum Case {
    /// A request that names the project's queue (or something of it): refused for another
    /// project, let through for the token's own.
    Names(String, Option<Value>),
    /// A listing: answered, showing only the token's project.
    Lists(String),
    /// Touches no queue (a policy preview): let through either way.
    NoQueue(String, Option<Value>),
    /// About every queue (tokens, metrics): refused to any scoped token.
    Unscoped(String),
}

/// The request of `method route` aimed at `project`, or `None` for a route this test does
/// not know (which fails it: say how the route names a queue).
fn case(method: &str, route: &str, p: &Project) -> Option<Case> {
    let q = p.queue();
    let enc = |text: &str| text.replace(':', "%3A");
    let names = Case::Names;
    let lease = Some(json!({"lease_token": 1}));
    Some(match (method, route) {
        ("GET", "/healthz" | "/api/openapi.json" | "/") => return None,
        ("GET", "/metrics") => Case::Unscoped("/metrics".into()),
        ("POST" | "GET", "/api/tokens") | ("DELETE", "/api/tokens/{id}") => {
            Case::Unscoped(route.replace("{id}", "1"))
        }
        ("POST", "/api/admin/backup") => Case::Unscoped(route.into()),
        // The deployment's databases: no scoped token sees or changes them.
        (_, r) if r.starts_with("/api/pools") || r.starts_with("/api/flavors") => {
            Case::Unscoped(route.replace("{name}", "one"))
        }
        // Moving a queue between databases, even one of the token's own projects.
        ("POST", "/api/queues/{name}/move") => Case::Unscoped(route.replace("{name}", &enc(&q))),
        (_, r) if r.starts_with("/v2/pools") || r.starts_with("/v2/flavors") => Case::Unscoped(
            route
                .replace("{pool_name}", "one")
                .replace("{flavor_name}", "one"),
        ),
        ("POST", "/api/policy/preview") => Case::NoQueue(
            route.into(),
            Some(json!({"policy": {"type": "fixed", "delay": "1s"}})),
        ),
        ("POST", "/api/schedules/preview") => {
            Case::NoQueue(route.into(), Some(json!({"cron": "0 3 * * *"})))
        }
        ("POST", "/api/jobs") => names(route.into(), Some(json!({"queue": q}))),
        ("POST", "/api/jobs/batch") => names(route.into(), Some(json!({"jobs": [{"queue": q}]}))),
        ("POST", "/api/batches") => names(
            route.into(),
            Some(json!({"jobs": [{"queue": q}], "on_complete": {"queue": q}, "open": true})),
        ),
        ("GET" | "DELETE", "/api/batches/{id}") | ("POST", "/api/batches/{id}/close") => {
            names(route.replace("{id}", &p.batch.to_string()), None)
        }
        ("POST", "/api/batches/{id}/jobs") => names(
            route.replace("{id}", &p.batch.to_string()),
            Some(json!({"jobs": [{"queue": q}]})),
        ),
        ("GET", "/api/jobs") => names(format!("/api/jobs?queue={}", enc(&q)), None),
        ("GET" | "DELETE", "/api/jobs/{id}") => names(format!("/api/jobs/{}", p.job), None),
        ("POST", "/api/jobs/{id}/cancel") => names(route.replace("{id}", &p.job.to_string()), None),
        ("POST", "/api/jobs/cancel") => names(route.into(), Some(json!({"queue": q}))),
        ("GET", "/api/workflows/{id}") => names(format!("/api/workflows/{}", p.job), None),
        ("POST", "/api/take" | "/api/take/stream") => {
            names(route.into(), Some(json!({"queues": [q]})))
        }
        ("POST", "/api/jobs/complete") => names(
            route.into(),
            Some(json!({"jobs": [{"id": p.job, "lease_token": 1}]})),
        ),
        (
            "POST",
            "/api/jobs/{id}/complete" | "/api/jobs/{id}/fail" | "/api/jobs/{id}/heartbeat",
        ) => names(route.replace("{id}", &p.job.to_string()), lease),
        ("GET", "/api/dead") => names(format!("/api/dead?queue={}", enc(&p.dying())), None),
        ("POST", "/api/dead/replay") => names(route.into(), Some(json!({"ids": [p.dead]}))),
        ("POST", "/api/dead/delete") => names(route.into(), Some(json!({"queue": p.dying()}))),
        ("GET", "/api/stats" | "/api/queues" | "/api/subscriptions" | "/api/schedules")
        | ("GET", "/api/batches")
        | ("GET", "/api/cluster") => Case::Lists(route.into()),
        // Counts of every queue together, as the metrics are: no scoped token reads them.
        ("GET", "/api/activity") => Case::Unscoped(route.into()),
        ("GET" | "PUT", "/api/queues/{name}")
        | ("POST", "/api/queues/{name}/pause" | "/api/queues/{name}/resume")
        | ("GET" | "POST", "/api/queues/{name}/subscriptions") => {
            let body = match (method, route.ends_with("subscriptions")) {
                ("GET", _) => None,
                (_, true) => Some(json!({"endpoint": format!("http://{}.invalid/", p.name)})),
                (_, false) => Some(json!({})),
            };
            names(route.replace("{name}", &enc(&q)), body)
        }
        ("GET" | "DELETE", "/api/schedules/{name}")
        | ("GET", "/api/schedules/{name}/ticks")
        | (
            "POST",
            "/api/schedules/{name}/pause"
            | "/api/schedules/{name}/resume"
            | "/api/schedules/{name}/run",
        ) => names(route.replace("{name}", &p.schedule), None),
        // Replacing another project's schedule by name, even to point it at one's own queue.
        ("PUT", "/api/schedules/{name}") => names(
            route.replace("{name}", &p.schedule),
            Some(json!({"cron": "0 3 * * *", "job": {"queue": "p1:orders", "type": "nightly"}})),
        ),
        (_, r) if r.starts_with("/api/subscriptions/{id}") => {
            let body = (method != "GET" && method != "DELETE").then(|| json!({}));
            names(route.replace("{id}", &p.subscription.to_string()), body)
        }
        (_, r) if r.starts_with("/api/deliveries/{id}") => {
            let body = (method == "POST").then(|| json!({}));
            names(route.replace("{id}", &p.delivery.to_string()), body)
        }
        (_, r) if r == "/v2" || r.starts_with("/v2/") => {
            let path = route
                .replace("{queue_name}", "orders")
                .replace("{topic_name}", "orders")
                .replace("{message_id}", "1")
                .replace("{claim_id}", "a")
                .replace("{subscription_id}", "1")
                .replace("{*rest}", "nothing/here");
            let body = ["POST", "PUT", "PATCH"]
                .contains(&method)
                .then(|| json!({}));
            if method == "GET" && (route == "/v2/queues" || route == "/v2/topics") {
                Case::Lists(path)
            } else {
                names(path, body)
            }
        }
        _ => return None,
    })
}

struct Client<'a> {
    server: &'a TestServer,
}

impl Client<'_> {
    /// Sends a request as `token` (Zaqar's headers for `project` under `/v2`); the status and
    /// the body (empty for a stream, which is not read).
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        token: &str,
        project: &str,
    ) -> (StatusCode, String) {
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self
            .server
            .api
            .http()
            .request(method, self.server.url(path))
            .bearer_auth(token);
        if path.starts_with("/v2") {
            request = request
                .header("Client-ID", CLIENT_ID)
                .header("X-Project-ID", project);
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.expect("an answer");
        let status = response.status();
        if path.ends_with("/stream") {
            return (status, String::new());
        }
        (status, response.text().await.unwrap_or_default())
    }

    async fn admin(&self, method: Method, path: &str, body: Value) -> Value {
        let response = self
            .server
            .api
            .http()
            .request(method.clone(), self.server.url(path))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .await
            .expect("an answer");
        let status = response.status();
        let text = response.text().await.expect("text");
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    async fn admin_get(&self, path: &str) -> Value {
        self.admin(Method::GET, path, Value::Null).await
    }

    /// Makes a project's queue, job, dead job, subscription, delivery and schedule.
    async fn project(&self, name: &'static str) -> Project {
        let queue = format!("{name}:orders");
        let subscription = self
            .admin(
                Method::POST,
                &format!("/api/queues/{queue}/subscriptions"),
                json!({"endpoint": format!("http://{name}.invalid/hooks")}),
            )
            .await["id"]
            .as_u64()
            .expect("a subscription id");
        let job = self
            .admin(
                Method::POST,
                "/api/jobs",
                json!({"queue": queue, "type": "order"}),
            )
            .await["id"]
            .as_u64()
            .expect("a job id");
        let dying = format!("{name}:dying");
        let dead = self
            .admin(
                Method::POST,
                "/api/jobs",
                json!({"queue": dying, "retry_limit": 0}),
            )
            .await["id"]
            .as_u64()
            .expect("a job id");
        let taken = self
            .admin(Method::POST, "/api/take", json!({"queues": [dying]}))
            .await;
        let lease = taken["jobs"][0]["lease_token"].clone();
        let failed = self
            .admin(
                Method::POST,
                &format!("/api/jobs/{dead}/fail"),
                json!({"lease_token": lease, "error": "no"}),
            )
            .await;
        assert_eq!(failed["status"], "dead", "{failed}");
        let deliveries = self
            .admin_get(&format!("/api/subscriptions/{subscription}/deliveries"))
            .await;
        let delivery = deliveries["deliveries"][0]["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("a delivery: {deliveries}"));
        let schedule = format!("{name}-nightly");
        self.admin(
            Method::PUT,
            &format!("/api/schedules/{schedule}"),
            json!({"cron": "0 3 * * *", "job": {"queue": queue, "type": "nightly"}}),
        )
        .await;
        let batch = self
            .admin(
                Method::POST,
                "/api/batches",
                json!({"jobs": [{"queue": queue}], "on_complete": {"queue": queue}, "open": true}),
            )
            .await["batch"]["id"]
            .as_u64()
            .expect("a batch id");
        Project {
            name,
            job,
            dead,
            subscription,
            delivery,
            schedule,
            batch,
        }
    }

    async fn token(&self, role: &str, projects: &[&str]) -> String {
        let made = self
            .admin(
                Method::POST,
                "/api/tokens",
                json!({"name": format!("{role} of {projects:?}"), "role": role, "projects": projects}),
            )
            .await;
        made["token"].as_str().expect("the token").to_owned()
    }
}

/// What the admin sees of a project: it must not change while another project's token tries.
async fn snapshot(client: &Client<'_>, p: &Project) -> Vec<Value> {
    let queue = p.queue().replace(':', "%3A");
    let mut seen = vec![
        client.admin_get(&format!("/api/jobs/{}", p.job)).await["status"].clone(),
        client.admin_get(&format!("/api/jobs/{}", p.dead)).await["status"].clone(),
        client.admin_get(&format!("/api/queues/{queue}")).await["paused"].clone(),
    ];
    let subscription = client
        .admin_get(&format!("/api/subscriptions/{}", p.subscription))
        .await;
    seen.push(subscription["enabled"].clone());
    seen.push(subscription["endpoint"].clone());
    let schedule = client
        .admin_get(&format!("/api/schedules/{}", p.schedule))
        .await;
    seen.push(schedule["paused"].clone());
    seen.push(schedule["job"]["queue"].clone());
    let subscriptions = client
        .admin_get(&format!("/api/queues/{queue}/subscriptions"))
        .await;
    seen.push(json!(
        subscriptions["subscriptions"].as_array().map(Vec::len)
    ));
    let jobs = client.admin_get(&format!("/api/jobs?queue={queue}")).await;
    seen.push(json!(jobs["jobs"].as_array().map(Vec::len)));
    let batch = client.admin_get(&format!("/api/batches/{}", p.batch)).await;
    seen.push(batch["state"].clone());
    seen.push(batch["counts"].clone());
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_holds_a_token_to_its_projects() {
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let client = Client { server: &server };
    let p1 = client.project("p1").await;
    let p2 = client.project("p2").await;
    let before = snapshot(&client, &p2).await;
    let table = table();

    let unknown: Vec<String> = table
        .iter()
        .filter(|(_, who)| **who != Who::Public)
        .filter(|((method, route), _)| case(method, route, &p1).is_none())
        .map(|((method, route), _)| format!("{method} {route}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "routes this test does not aim at a project (say how each names a queue): {unknown:?}"
    );

    let mut failures = Vec::new();
    // Readers first: the requests let through for p1 change p1's things, the admin's most.
    for role in ["reader", "producer", "worker", "admin"] {
        let token = client.token(role, &["p1"]).await;
        // Another project's things: refused, whatever the route.
        for ((method, route), who) in &table {
            let Some(case) = case(method, route, &p2) else {
                continue;
            };
            let (status, text) = match &case {
                Case::Names(path, body) | Case::NoQueue(path, body) => {
                    client.send(method, path, body.as_ref(), &token, "p2").await
                }
                Case::Lists(path) | Case::Unscoped(path) => {
                    client.send(method, path, None, &token, "p2").await
                }
            };
            let refused = status == StatusCode::FORBIDDEN;
            let want_refused = match case {
                Case::Names(..) => true,
                Case::Unscoped(_) => true,
                // Zaqar's queue list is for a project: p2's is refused.
                Case::Lists(ref path) if path.starts_with("/v2") => true,
                Case::Lists(_) | Case::NoQueue(..) => !who.admits(role),
            };
            if refused != want_refused {
                failures.push(format!(
                    "{role} of p1: {method} {route} aimed at p2: {status} {text}"
                ));
            } else if !refused && text.contains("p2") {
                failures.push(format!("{role} of p1: {method} {route} shows p2: {text}"));
            }
        }
        // Its own project's: let through where the role allows.
        for ((method, route), who) in &table {
            let Some(case) = case(method, route, &p1) else {
                continue;
            };
            let (status, text) = match &case {
                Case::Names(path, body) | Case::NoQueue(path, body) => {
                    client.send(method, path, body.as_ref(), &token, "p1").await
                }
                Case::Lists(path) | Case::Unscoped(path) => {
                    client.send(method, path, None, &token, "p1").await
                }
            };
            let refused = status == StatusCode::FORBIDDEN || status == StatusCode::UNAUTHORIZED;
            let want_refused = match case {
                Case::Unscoped(_) => true,
                _ => !who.admits(role),
            };
            if refused != want_refused {
                failures.push(format!(
                    "{role} of p1: {method} {route} aimed at p1: {status} {text}"
                ));
            }
            // (The admin's own requests deleted p1's schedule and subscription already.)
            if let (Case::Lists(path), false, false) = (&case, refused, role == "admin") {
                if !path.starts_with("/v2") && !text.contains("p1") {
                    failures.push(format!("{role} of p1: {path} does not show p1: {text}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        snapshot(&client, &p2).await,
        before,
        "p2 changed under p1's tokens"
    );
}

/// Signs in to the dashboard with `token`; the session cookie and a page's CSRF token.
async fn sign_in(server: &TestServer, token: &str) -> (String, String) {
    let browser = tenax_net::http::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("token", token)
        .append_pair("next", "/ui/queues")
        .finish();
    let response = browser
        .post(server.url("/ui/login"))
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .expect("an answer");
    let cookie = response
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned();
    let page = browser
        .get(server.url("/ui/queues"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .expect("an answer")
        .text()
        .await
        .expect("text");
    let marker = r#"name="csrf-token" content=""#;
    let csrf = page[page.find(marker).expect("a CSRF token") + marker.len()..]
        .split('"')
        .next()
        .expect("the token ends")
        .to_owned();
    (cookie, csrf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_holds_a_token_to_its_projects() {
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let client = Client { server: &server };
    let p1 = client.project("p1").await;
    let p2 = client.project("p2").await;
    let before = snapshot(&client, &p2).await;
    let token = client.token("admin", &["p1"]).await;
    let (cookie, csrf) = sign_in(&server, &token).await;
    let browser = tenax_net::http::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let get = |path: String| {
        browser
            .get(server.url(&path))
            .header(COOKIE, &cookie)
            .send()
    };
    let post = |path: String, fields: Vec<(&'static str, String)>| {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("csrf", &csrf);
        for (name, value) in &fields {
            form.append_pair(name, value);
        }
        browser
            .post(server.url(&path))
            .header(COOKIE, &cookie)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form.finish())
            .send()
    };
    let pages = |p: &Project| {
        vec![
            format!("/ui/jobs?queue={}", p.queue().replace(':', "%3A")),
            format!("/ui/jobs/{}", p.job),
            format!("/ui/jobs/{}", p.delivery),
            format!("/ui/dead?queue={}", p.dying().replace(':', "%3A")),
            format!("/ui/subscriptions/{}", p.subscription),
        ]
    };
    for path in pages(&p2) {
        let response = get(path.clone()).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "GET {path}");
    }
    for path in pages(&p1) {
        let response = get(path.clone()).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::OK, "GET {path}");
    }
    for path in ["/ui", "/ui/queues", "/ui/subscriptions"] {
        let response = get(path.into()).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::OK, "GET {path}");
        let text = response.text().await.expect("text");
        assert!(!text.contains("p2"), "GET {path} shows p2: {text}");
        assert!(text.contains("p1"), "GET {path} does not show p1");
        // The throughput counts every queue together (p2's too): the overview leaves it out.
        if path == "/ui" {
            assert!(
                text.contains(r#"id="activity-hidden""#) && !text.contains("last hour"),
                "the overview shows a scoped token the cluster's activity: {text}"
            );
        }
    }
    let actions = |p: &Project| {
        vec![
            (
                format!("/ui/queues/{}/pause", p.queue().replace(':', "%3A")),
                vec![],
            ),
            (
                format!("/ui/subscriptions/{}/disable", p.subscription),
                vec![],
            ),
            (format!("/ui/subscriptions/{}/test", p.subscription), vec![]),
            (
                "/ui/jobs/act".to_owned(),
                vec![("action", "delete".to_owned()), ("id", p.job.to_string())],
            ),
            (
                "/ui/jobs/act".to_owned(),
                vec![
                    ("action", "replay".to_owned()),
                    ("scope", "matching".to_owned()),
                    ("queue", p.dying()),
                ],
            ),
        ]
    };
    for (path, fields) in actions(&p2) {
        let response = post(path.clone(), fields).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "POST {path}");
    }
    assert_eq!(snapshot(&client, &p2).await, before, "p2 changed");
    for (path, fields) in actions(&p1) {
        let response = post(path.clone(), fields).await.expect("an answer");
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "POST {path}");
    }
}
