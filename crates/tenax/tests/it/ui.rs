//! The dashboard at `/ui`, over real HTTP against the real server: every page renders what the
//! store holds; every action goes through the engine and is refused without the session's CSRF
//! token; with authentication on, a token signs in to an HttpOnly, SameSite=Strict cookie.
//! (The browser tests in `tests/ui/` click through the same pages in Chromium.)

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use common::{Options, PATIENCE, TestServer};
use receiver::{Receiver, Reply};
use reqwest::header::{CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common;
use crate::common::receiver;

const ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";

const FORM: &str = "application/x-www-form-urlencoded";

/// A form's fields as its body.
fn encode(fields: &[(&str, &str)]) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

/// A browser-like client that does not follow redirects (the tests look at them).
fn browser() -> reqwest::Client {
    tenax_net::http::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a client")
}

/// A page's status and text.
async fn page(
    client: &reqwest::Client,
    server: &TestServer,
    path: &str,
    cookie: Option<&str>,
) -> (StatusCode, String) {
    let mut request = client.get(server.url(path));
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    let response = request.send().await.expect("the page answers");
    let status = response.status();
    (status, response.text().await.expect("text"))
}

/// A page that must render (200), with its text.
async fn html(server: &TestServer, path: &str) -> String {
    let (status, text) = page(&browser(), server, path, None).await;
    assert_eq!(status, StatusCode::OK, "GET {path}: {text}");
    assert!(text.starts_with("<!DOCTYPE html>"), "GET {path}: {text}");
    text
}

/// The CSRF token a page carries for its session.
fn csrf_of(page: &str) -> String {
    let start = page
        .find(r#"name="csrf-token" content=""#)
        .expect("the page has a CSRF token")
        + r#"name="csrf-token" content=""#.len();
    page[start..]
        .split('"')
        .next()
        .expect("the token ends")
        .to_owned()
}

/// POSTs a form; returns the status and where it redirects (if it does).
async fn submit(
    server: &TestServer,
    path: &str,
    fields: &[(&str, &str)],
    cookie: Option<&str>,
) -> (StatusCode, String) {
    let mut request = browser()
        .post(server.url(path))
        .header(CONTENT_TYPE, FORM)
        .body(encode(fields));
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    let response = request.send().await.expect("the action answers");
    let status = response.status();
    let location = response
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, location)
}

/// Signs in with `token`; returns the session cookie (`name=value`).
async fn sign_in(server: &TestServer, token: &str) -> String {
    let response = browser()
        .post(server.url("/ui/login"))
        .header(CONTENT_TYPE, FORM)
        .body(encode(&[("token", token), ("next", "/ui/queues")]))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    response
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .expect("a cookie")
        .to_owned()
}

/// POSTs an action's form, which must succeed (a redirect); returns where to.
async fn acted(server: &TestServer, path: &str, fields: &[(&str, &str)]) -> String {
    let (status, location) = submit(server, path, fields, None).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{path}: {location}");
    location
}

/// An action without the page's CSRF token, or with a forged one, is refused.
async fn refused_without_csrf(server: &TestServer, path: &str) {
    for fields in [&[][..], &[("csrf", "forged")][..]] {
        let (status, _) = submit(server, path, fields, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path} with {fields:?}");
    }
}

async fn enqueue(server: &TestServer, job: Value) -> u64 {
    let answer = server
        .expect(Method::POST, "/api/jobs", Some(job), 201)
        .await;
    answer["id"].as_u64().expect("an id")
}

/// Takes the job of `queue` and fails it with `message`.
async fn fail_next(server: &TestServer, queue: &str, message: &str) -> u64 {
    let taken = server
        .post("/api/take", json!({"queues": [queue], "wait": "5s"}))
        .await;
    let job = &taken["jobs"][0];
    let id = job["id"].as_u64().expect("a job was taken");
    server
        .post(
            &format!("/api/jobs/{id}/fail"),
            json!({"lease_token": job["lease_token"], "error": message}),
        )
        .await;
    id
}

#[tokio::test]
async fn pages_show_the_store_and_actions_go_through_the_engine() {
    let server = TestServer::manual().await;
    let no_retry = json!({"type": "fixed", "delay": "1s", "retry_limit": 0});
    let doomed = enqueue(
        &server,
        json!({"queue": "emails", "type": "welcome", "payload": {"to": "ada@example.com"}, "policy": no_retry}),
    )
    .await;
    let other = enqueue(
        &server,
        json!({"queue": "emails", "type": "digest", "payload": {"to": "bob"}}),
    )
    .await;
    let later = enqueue(
        &server,
        json!({"queue": "reports", "type": "daily", "delay": "1h"}),
    )
    .await;
    assert_eq!(fail_next(&server, "emails", "SMTP said <no>").await, doomed);

    // Every page renders, and shows what the store holds (escaped).
    let overview = html(&server, "/ui").await;
    assert!(overview.contains("Throughput and failures") && overview.contains("Slowest queues"));
    // A waiting queue links to its own page, its ready count to its ready jobs.
    assert!(
        !overview.contains("No queue has a job waiting."),
        "{overview}"
    );
    assert!(
        overview.contains(r#"href="/ui/queues/emails""#),
        "{overview}"
    );
    assert!(
        overview.contains(r#"href="/ui/jobs?status=ready&amp;queue=emails""#),
        "{overview}"
    );
    let queues = html(&server, "/ui/queues").await;
    assert!(
        queues.contains(r#"data-queue="emails""#) && queues.contains(r#"data-queue="reports""#)
    );
    let dead = html(&server, "/ui/dead").await;
    assert!(dead.contains(&format!(r#"data-id="{doomed}""#)), "{dead}");
    assert!(
        dead.contains("SMTP said &lt;no&gt;"),
        "errors are escaped: {dead}"
    );
    assert!(!dead.contains(&format!(r#"data-id="{other}""#)));
    let detail = html(&server, &format!("/ui/jobs/{doomed}")).await;
    assert!(
        detail.contains("ada@example.com") && detail.contains("SMTP said &lt;no&gt;"),
        "{detail}"
    );
    assert!(detail.contains("the first failure is final"), "{detail}");
    let waiting = html(&server, &format!("/ui/jobs/{later}")).await;
    assert!(
        waiting.contains("Attempt timeline") && waiting.contains("<svg"),
        "{waiting}"
    );
    assert!(waiting.contains("the delays to come"), "{waiting}");
    html(&server, "/ui/subscriptions").await;
    let designer = html(&server, "/ui/policy").await;
    assert!(
        designer.contains("<svg") && designer.contains("healthyRetryPolicy"),
        "the designer draws and spells"
    );
    let (status, _) = page(&browser(), &server, "/ui/jobs/999999", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, text) = page(&browser(), &server, "/ui/jobs?status=sleeping", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("status must be one of"), "{text}");

    // Filters: by queue and type; by text in a payload; by id.
    let filtered = html(&server, "/ui/jobs?queue=emails&type=digest").await;
    assert!(filtered.contains(&format!(r#"data-id="{other}""#)));
    assert!(!filtered.contains(&format!(r#"data-id="{doomed}""#)));
    assert!(filtered.contains("1 matching"), "{filtered}");
    let found = html(&server, "/ui/jobs?q=ADA%40EXAMPLE").await;
    assert!(found.contains(&format!(r#"data-id="{doomed}""#)), "{found}");
    assert!(found.contains("Found 1 while looking at 3 jobs"), "{found}");
    let (status, location) = page(&browser(), &server, &format!("/ui/jobs?id={later}"), None).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{location}");

    // An action without the page's CSRF token changes nothing.
    let csrf = csrf_of(&queues);
    refused_without_csrf(&server, "/ui/queues/emails/pause").await;
    assert_eq!(
        server.get("/api/queues/emails").await["paused"],
        json!(false)
    );
    // With it: pause, and resume.
    let (status, location) =
        submit(&server, "/ui/queues/emails/pause", &[("csrf", &csrf)], None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.starts_with("/ui/queues?note="), "{location}");
    assert_eq!(
        server.get("/api/queues/emails").await["paused"],
        json!(true)
    );
    submit(
        &server,
        "/ui/queues/emails/resume",
        &[("csrf", &csrf)],
        None,
    )
    .await;
    assert_eq!(
        server.get("/api/queues/emails").await["paused"],
        json!(false)
    );

    // Replay the dead job with another policy; run the scheduled one now.
    let policy = r#"{"type": "fixed", "delay": "1m", "retry_limit": 3}"#;
    let doomed_id = doomed.to_string();
    let (status, location) = submit(
        &server,
        "/ui/jobs/act",
        &[
            ("csrf", &csrf),
            ("action", "replay"),
            ("scope", "selected"),
            ("id", &doomed_id),
            ("policy", policy),
            ("reset_attempts", "true"),
            ("back", "/ui/dead"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.contains("1+replayed"), "{location}");
    let replayed = server.get(&format!("/api/jobs/{doomed}")).await;
    assert_eq!(replayed["status"], json!("ready"));
    assert_eq!(replayed["policy"]["type"], json!("fixed"), "{replayed}");
    assert_eq!(replayed["failures"], json!(0));
    // A bad policy is refused, naming the field and the rule.
    let (status, _) = submit(
        &server,
        "/ui/jobs/act",
        &[
            ("csrf", &csrf),
            ("action", "replay"),
            ("id", &doomed_id),
            ("policy", r#"{"type": "fixed", "delay": "-1s"}"#),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, location) = submit(
        &server,
        "/ui/jobs/act",
        &[
            ("csrf", &csrf),
            ("action", "run_now"),
            ("scope", "matching"),
            ("queue", "reports"),
            ("back", "/ui/jobs"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.contains("1+of+1+jobs+run+now"), "{location}");
    assert_eq!(
        server.get(&format!("/api/jobs/{later}")).await["status"],
        json!("ready")
    );
    let page_of_later = html(&server, &format!("/ui/jobs/{later}")).await;
    assert!(
        page_of_later.contains("an operator's request (manual)"),
        "{page_of_later}"
    );
    // Cancel it (ready: cancelled at once); then its page offers a replay, not a cancel.
    assert!(
        page_of_later.contains(r#"value="cancel""#),
        "{page_of_later}"
    );
    let later_id = later.to_string();
    let (status, location) = submit(
        &server,
        "/ui/jobs/act",
        &[
            ("csrf", &csrf),
            ("action", "cancel"),
            ("scope", "selected"),
            ("id", &later_id),
            ("back", "/ui/jobs"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        location.contains("1+cancelled%2C+0+in+flight"),
        "{location}"
    );
    assert_eq!(
        server.get(&format!("/api/jobs/{later}")).await["status"],
        json!("cancelled")
    );
    let page_of_later = html(&server, &format!("/ui/jobs/{later}")).await;
    assert!(
        !page_of_later.contains(r#"value="cancel""#),
        "{page_of_later}"
    );
    assert!(
        page_of_later.contains(r#"value="replay""#),
        "{page_of_later}"
    );

    // Delete everything the filter matches.
    let (status, location) = submit(
        &server,
        "/ui/jobs/act",
        &[
            ("csrf", &csrf),
            ("action", "delete"),
            ("scope", "matching"),
            ("queue", "emails"),
            ("back", "/ui/jobs"),
        ],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.contains("2+deleted"), "{location}");
    let (status, _) = server
        .send_raw(Method::GET, &format!("/api/jobs/{other}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The overview counted what this server did.
    let overview = html(&server, "/ui").await;
    assert!(
        overview.contains("<th>last hour</th><td>3</td>"),
        "3 enqueued: {overview}"
    );
}

#[tokio::test]
async fn signing_in_keeps_the_token_in_a_strict_http_only_cookie() {
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let client = browser();
    // Without a session: to the login page, remembering where one was going.
    let (status, _) = page(&client, &server, "/ui/queues", None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let response = client
        .get(server.url("/ui/queues"))
        .send()
        .await
        .expect("answer");
    assert_eq!(
        response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok()),
        Some("/ui/login?next=%2Fui%2Fqueues")
    );
    let (status, login) = page(&client, &server, "/ui/login", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(login.contains(r#"type="password""#), "{login}");
    // The assets need no session.
    let (status, _) = page(&client, &server, "/ui/assets/app.js", None).await;
    assert_eq!(status, StatusCode::OK);

    // A wrong token: back to the login page, told so.
    let response = client
        .post(server.url("/ui/login"))
        .header(CONTENT_TYPE, FORM)
        .body(encode(&[("token", "not-a-token"), ("next", "/ui/queues")]))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert!(response.headers().get(SET_COOKIE).is_none());
    // The right one: a cookie only this server's pages get, then where one was going.
    let response = client
        .post(server.url("/ui/login"))
        .header(CONTENT_TYPE, FORM)
        .body(encode(&[("token", ADMIN), ("next", "/ui/queues")]))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok()),
        Some("/ui/queues")
    );
    let set = response
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .expect("a cookie")
        .to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(part), "{set}");
    }
    let cookie = set.split(';').next().expect("name=value").to_owned();
    // A login never sends one to another site.
    let response = client
        .post(server.url("/ui/login"))
        .header(CONTENT_TYPE, FORM)
        .body(encode(&[
            ("token", ADMIN),
            ("next", "https://evil.example/"),
        ]))
        .send()
        .await
        .expect("answer");
    assert_eq!(
        response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok()),
        Some("/ui")
    );

    let (status, queues) = page(&client, &server, "/ui/queues", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK, "{queues}");
    let csrf = csrf_of(&queues);
    // The API does not take the cookie: it still wants its bearer token.
    let (status, _) = page(&client, &server, "/api/stats", Some(&cookie)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A read-only token may look but not act.
    let made = server
        .http()
        .post(server.url("/api/tokens"))
        .bearer_auth(ADMIN)
        .json(&json!({"name": "viewer", "role": "reader"}))
        .send()
        .await
        .expect("answer");
    assert_eq!(made.status(), StatusCode::CREATED);
    let made: Value = made.json().await.expect("json");
    let viewer = made["token"].as_str().expect("a secret").to_owned();
    let viewer_cookie = sign_in(&server, &viewer).await;
    let (status, viewer_page) = page(&client, &server, "/ui/queues", Some(&viewer_cookie)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = submit(
        &server,
        "/ui/queues/emails/pause",
        &[("csrf", &csrf_of(&viewer_page))],
        Some(&viewer_cookie),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // One session's CSRF token is no good in another's.
    let (status, _) = submit(
        &server,
        "/ui/queues/emails/pause",
        &[("csrf", &csrf)],
        Some(&viewer_cookie),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = submit(
        &server,
        "/ui/queues/emails/pause",
        &[("csrf", &csrf)],
        Some(&cookie),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);

    // Revoking the token ends its sessions at once.
    let id = made["id"].as_u64().expect("an id");
    let revoked = server
        .http()
        .delete(server.url(&format!("/api/tokens/{id}")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("answer");
    assert!(revoked.status().is_success());
    let (status, _) = page(&client, &server, "/ui/queues", Some(&viewer_cookie)).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    // Signing out clears the cookie.
    let response = client
        .post(server.url("/ui/logout"))
        .header(COOKIE, &cookie)
        .header(CONTENT_TYPE, FORM)
        .body(encode(&[("csrf", csrf.as_str())]))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cleared = response
        .headers()
        .get(SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
}

/// Any token the API accepts signs in: an `--admin-token` made as the docs say
/// (`openssl rand -base64 32`: `+`, `/`, `=`) is kept whole in the cookie. A `next` with a
/// control character is a 400 that names it, not a 500.
#[tokio::test]
async fn any_token_signs_in_and_a_bad_next_is_named() {
    const BASE64: &str = "q83vEjRWeJq8/+3vAQIDBAUGBwgJCgsMDQ4PEBESE3s=";
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", BASE64]))
            .await;
    let client = browser();
    let cookie = sign_in(&server, BASE64).await;
    let (status, queues) = page(&client, &server, "/ui/queues", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK, "{queues}");

    for next in ["/ui\r\nSet-Cookie: x=1", "/ui\u{1}"] {
        let response = client
            .post(server.url("/ui/login"))
            .header(CONTENT_TYPE, FORM)
            .body(encode(&[("token", BASE64), ("next", next)]))
            .send()
            .await
            .expect("answer");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{next:?}");
        assert!(response.headers().get(SET_COOKIE).is_none());
        let text = response.text().await.expect("text");
        assert!(text.contains("next: must be a dashboard path"), "{text}");
        let encoded: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
        let (status, text) =
            page(&client, &server, &format!("/ui/login?next={encoded}"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{next:?}: {text}");
    }
}

#[tokio::test]
async fn a_test_event_is_delivered_and_attempts_say_what_started_them() {
    let receiver = Receiver::start(vec![Reply::status(404)], Reply::ok()).await;
    let server = TestServer::start(Options::system().flags(&["--allow-private-endpoints"])).await;
    let created = server
        .expect(
            Method::POST,
            "/api/queues/orders/subscriptions",
            Some(json!({"endpoint": receiver.url("/hook"), "policy": {"type": "fixed", "delay": "100ms", "retry_limit": 2}})),
            201,
        )
        .await;
    let sub = created["id"].as_u64().expect("an id");
    // A message whose delivery dies at once (404 is not retried).
    enqueue(
        &server,
        json!({"queue": "orders", "type": "order.paid", "payload": {"n": 1}}),
    )
    .await;
    receiver.wait_for(1, PATIENCE).await;
    let dead = wait_for_attempts(&server, sub, 1).await;
    assert_eq!(dead[0]["trigger"], json!("scheduled"), "{dead:?}");
    let delivery = dead[0]["delivery"].as_u64().expect("a delivery");

    let list = html(&server, "/ui/subscriptions").await;
    let csrf = csrf_of(&list);
    // A test event, sent from the page: its first attempt is an operator's.
    let (status, location) = submit(
        &server,
        &format!("/ui/subscriptions/{sub}/test"),
        &[("csrf", &csrf)],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
    let arrived = receiver.wait_for(2, PATIENCE).await;
    let body = arrived[1].json();
    assert_eq!(body["message"]["type"], json!("tenax.test"), "{body}");
    // Replaying the dead delivery: its next attempt says so.
    let delivery_id = delivery.to_string();
    submit(
        &server,
        "/ui/jobs/act",
        &[("csrf", &csrf), ("action", "replay"), ("id", &delivery_id)],
        None,
    )
    .await;
    receiver.wait_for(3, PATIENCE).await;
    let attempts = wait_for_attempts(&server, sub, 3).await;
    let mut triggers: Vec<(u64, String)> = attempts
        .iter()
        .map(|a| {
            (
                a["delivery"].as_u64().unwrap_or(0),
                a["trigger"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    triggers.sort();
    let test_delivery = triggers
        .iter()
        .find(|(d, _)| *d != delivery)
        .map(|(d, _)| *d)
        .expect("the test's delivery");
    assert_eq!(
        triggers,
        [
            (delivery, "replay".to_owned()),
            (delivery, "scheduled".to_owned()),
            (test_delivery, "manual".to_owned()),
        ]
    );
    // The subscription's page shows each attempt with its trigger.
    let detail = html(&server, &format!("/ui/subscriptions/{sub}")).await;
    for trigger in ["trigger manual", "trigger replay", "trigger scheduled"] {
        assert!(detail.contains(trigger), "{trigger}: {detail}");
    }
    // Disable and enable.
    submit(
        &server,
        &format!("/ui/subscriptions/{sub}/disable"),
        &[("csrf", &csrf)],
        None,
    )
    .await;
    assert_eq!(
        server.get(&format!("/api/subscriptions/{sub}")).await["enabled"],
        json!(false)
    );
    submit(
        &server,
        &format!("/ui/subscriptions/{sub}/enable"),
        &[("csrf", &csrf)],
        None,
    )
    .await;
    assert_eq!(
        server.get(&format!("/api/subscriptions/{sub}")).await["enabled"],
        json!(true)
    );
}

/// A subscription's attempts, once there are at least `n`.
async fn wait_for_attempts(server: &TestServer, sub: u64, n: usize) -> Vec<Value> {
    let path = format!("/api/subscriptions/{sub}/attempts");
    let answer = server
        .poll(&path, &format!("{n} attempts"), |a| {
            a["attempts"].as_array().is_some_and(|list| list.len() >= n)
        })
        .await;
    answer["attempts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_designer_draws_each_policy_and_spells_it_three_ways() {
    let server = TestServer::manual().await;
    let designer = html(&server, "/ui/policy").await;
    let csrf = csrf_of(&designer);
    let sns = r#"{"healthyRetryPolicy": {"minDelayTarget": 5, "maxDelayTarget": 260, "numRetries": 10, "backoffFunction": "geometric"}}"#;
    let response = browser()
        .post(server.url("/ui/policy/chart"))
        .header("X-CSRF-Token", &csrf)
        .header(CONTENT_TYPE, FORM)
        .body(encode(&[
            ("on0", "1"),
            ("policy0", sns),
            ("on1", "1"),
            ("policy1", r#"{"type": "fixed", "delay": "abc"}"#),
        ]))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::OK);
    let fragment = response.text().await.expect("text");
    assert!(fragment.contains("<svg"), "{fragment}");
    assert!(
        fragment.contains("Policy 2: delay"),
        "the broken one names its field: {fragment}"
    );
    let spelled = &fragment[fragment.find("spelled").expect("a spelled policy")..];
    assert!(spelled.contains("10 retries"), "{spelled}");
    assert!(spelled.contains("12m 2s"), "the window: {spelled}");
    assert!(
        fragment.contains("&quot;type&quot;: &quot;phased&quot;")
            || fragment.contains(r#""type": "phased""#),
        "native: {fragment}"
    );
    assert!(
        fragment.contains("_retry_policy") || fragment.contains("Cannot be written this way"),
        "{fragment}"
    );
    // Without the token: refused.
    let response = browser()
        .post(server.url("/ui/policy/chart"))
        .header(CONTENT_TYPE, FORM)
        .body(encode(&[("on0", "1"), ("policy0", sns)]))
        .send()
        .await
        .expect("answer");
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
}

/// The schedules page: each schedule's timetable, next ticks, last job and counts; pause,
/// resume and run now through the engine; refused without the CSRF token, and a 404 for a
/// schedule that does not exist.
#[tokio::test]
async fn the_schedules_page_shows_ticks_and_pauses_resumes_and_runs_now() {
    let server = TestServer::manual().await;
    server
        .expect(
            Method::PUT,
            "/api/schedules/nightly",
            Some(json!({"cron": "30 2 * * *", "job": {"queue": "reports", "type": "nightly", "payload": {"full": true}}})),
            201,
        )
        .await;
    server
        .expect(
            Method::PUT,
            "/api/schedules/hourly",
            Some(json!({"cron": "@hourly", "timezone": "Europe/Berlin", "overlap": "skip", "paused": true,
                   "job": {"queue": "reports", "type": "hourly"}})),
            201,
        )
        .await;
    let page_text = html(&server, "/ui/schedules").await;
    assert!(
        page_text.contains("<main data-live"),
        "a live page: {page_text}"
    );
    assert!(
        page_text.contains(r#"href="/ui/schedules""#),
        "in the navigation"
    );
    let nightly = row(&page_text, r#"data-schedule="nightly""#);
    // T0 is 2027-01-15 08:00 UTC: the next 02:30 is the next day's.
    has_all(
        nightly,
        &[
            "2027-01-16T02:30:00+00:00",
            "in 18h 30m",
            "none yet",
            "running",
            "0 missed",
            "(skipped)",
        ],
    );
    let hourly = row(&page_text, r#"data-schedule="hourly""#);
    has_all(hourly, &["paused", "if resumed:"]);
    assert!(
        hourly.contains("+01:00"),
        "ticks in the schedule's zone: {hourly}"
    );
    assert!(hourly.contains("(while the last job runs)"), "{hourly}");
    let csrf = csrf_of(&page_text);

    // Without the page's token: refused, nothing changes.
    refused_without_csrf(&server, "/ui/schedules/nightly/pause").await;
    refused_without_csrf(&server, "/ui/schedules/nightly/run").await;
    assert_eq!(
        server.get("/api/schedules/nightly").await["last_job"],
        Value::Null
    );
    // A schedule that does not exist.
    for action in ["pause", "resume", "run"] {
        let (status, _) = submit(
            &server,
            &format!("/ui/schedules/nowhere/{action}"),
            &[("csrf", &csrf)],
            None,
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{action}");
    }

    // Run now: the job is enqueued at once and is the schedule's last job; no tick was
    // handled, so the counts and the next tick stay.
    let location = acted(&server, "/ui/schedules/nightly/run", &[("csrf", &csrf)]).await;
    assert!(location.starts_with("/ui/schedules?note="), "{location}");
    let schedule = server.get("/api/schedules/nightly").await;
    let job = schedule["last_job"].as_u64().expect("a last job");
    assert!(location.contains(&format!("%23{job}")), "{location}");
    assert_eq!(schedule["counts"]["enqueued"], json!(0), "{schedule}");
    assert_eq!(
        schedule["next_tick"],
        json!("2027-01-16T02:30:00.000Z"),
        "{schedule}"
    );
    let ran = server.get(&format!("/api/jobs/{job}")).await;
    assert_eq!(ran["status"], json!("ready"), "{ran}");
    assert_eq!(ran["queue"], json!("reports"), "{ran}");
    let after_run = html(&server, "/ui/schedules").await;
    let nightly = row(&after_run, r#"data-schedule="nightly""#);
    has_all(nightly, &[&format!(r#"href="/ui/jobs/{job}""#), "ready"]);

    // Pause and resume.
    acted(&server, "/ui/schedules/nightly/pause", &[("csrf", &csrf)]).await;
    assert_eq!(
        server.get("/api/schedules/nightly").await["paused"],
        json!(true)
    );
    let location = acted(&server, "/ui/schedules/hourly/resume", &[("csrf", &csrf)]).await;
    assert!(location.contains("running+again"), "{location}");
    assert_eq!(
        server.get("/api/schedules/hourly").await["paused"],
        json!(false)
    );
}

/// Asserts that `text` holds every one of `parts`, naming the one it lacks.
fn has_all(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "{part:?} is not in {text}");
    }
}

/// The part of `page` from the element carrying `marker` to the end of its row.
fn row<'a>(page: &'a str, marker: &str) -> &'a str {
    let start = page
        .find(marker)
        .unwrap_or_else(|| panic!("{marker} in {page}"));
    let rest = &page[start..];
    &rest[..rest.find("</tr>").unwrap_or(rest.len())]
}

/// A queue's page: counts, limits with their use, its policy and subscriptions; the limits
/// form sets and clears them by the API's rules; pause comes back to the page.
#[tokio::test]
async fn a_queue_page_shows_its_limits_and_edits_them() {
    let server = TestServer::start(Options::manual().flags(&["--allow-private-endpoints"])).await;
    for n in 0..3 {
        enqueue(
            &server,
            json!({"queue": "emails", "type": "digest", "payload": {"n": n}}),
        )
        .await;
    }
    server
        .put(
            "/api/queues/emails",
            json!({"concurrency": 2, "rate": {"limit": 10, "period": "1m"},
                   "policy": {"type": "fixed", "delay": "5s", "retry_limit": 3}}),
        )
        .await;
    let taken = server.take(&["emails"], 1).await;
    assert_eq!(taken.len(), 1);
    let subscription = server
        .subscribe(
            "emails",
            json!({"endpoint": "http://127.0.0.1:9/hook"}),
            json!({}),
        )
        .await;
    let sub = subscription["id"].as_u64().expect("an id");

    let list = html(&server, "/ui/queues").await;
    assert!(list.contains(r#"href="/ui/queues/emails""#), "{list}");
    let page_text = html(&server, "/ui/queues/emails").await;
    assert!(page_text.contains("<main data-live"), "{page_text}");
    assert!(
        page_text.contains(r#"href="/ui/jobs?queue=emails&amp;status=ready" data-status="ready"><span class="count">2</span>"#),
        "{page_text}"
    );
    let concurrency = row(&page_text, r#"data-limit="concurrency""#);
    has_all(concurrency, &["1 in flight", "2 at once"]);
    let rate = row(&page_text, r#"data-limit="rate""#);
    has_all(rate, &["1 started in the last 1m", "10 per 1m"]);
    has_all(
        &page_text,
        &[
            r#"name="concurrency" inputmode="numeric" value="2""#,
            r#"name="rate_period" value="1m""#,
        ],
    );
    assert!(
        page_text.contains("fixed, 3 retries over 15s"),
        "the policy: {page_text}"
    );
    has_all(
        &page_text,
        &[&format!(r#"data-subscription="{sub}""#), "accepting"],
    );
    let (status, _) = page(&browser(), &server, "/ui/queues/nothing-here", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = page(&browser(), &server, "/ui/queues/bad%20name", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let csrf = csrf_of(&page_text);

    // Set concurrency, clear the rate.
    let fields = [
        ("csrf", csrf.as_str()),
        ("concurrency", "5"),
        ("rate_limit", ""),
        ("rate_period", "1m"),
    ];
    let (status, location) = submit(&server, "/ui/queues/emails/limits", &fields, None).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        location.starts_with("/ui/queues/emails?note="),
        "{location}"
    );
    let queue = server.get("/api/queues/emails").await;
    assert_eq!(queue["concurrency"], json!(5), "{queue}");
    assert_eq!(queue["rate"], Value::Null, "{queue}");
    assert_eq!(
        queue["policy"]["type"],
        json!("fixed"),
        "the rest stays: {queue}"
    );
    // Clear concurrency, set a rate (its period defaults to a second).
    let fields = [
        ("csrf", csrf.as_str()),
        ("concurrency", " "),
        ("rate_limit", "7"),
        ("rate_period", ""),
    ];
    submit(&server, "/ui/queues/emails/limits", &fields, None).await;
    let queue = server.get("/api/queues/emails").await;
    assert_eq!(queue["concurrency"], Value::Null, "{queue}");
    assert_eq!(queue["rate"]["limit"], json!(7), "{queue}");
    assert_eq!(queue["rate"]["period_ms"], json!(1_000), "{queue}");
    // The API's rules, in its words.
    for (fields, says) in [
        (
            vec![("concurrency", "0")],
            "concurrency: must be 1 to 1000000",
        ),
        (
            vec![("concurrency", "many")],
            "concurrency: must be a whole number",
        ),
        (
            vec![("rate_limit", "3"), ("rate_period", "soon")],
            "rate_period: ",
        ),
    ] {
        let mut body = vec![("csrf", csrf.as_str())];
        body.extend(fields);
        let response = browser()
            .post(server.url("/ui/queues/emails/limits"))
            .header(CONTENT_TYPE, FORM)
            .body(encode(&body))
            .send()
            .await
            .expect("answer");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body:?}");
        let text = response.text().await.expect("text");
        assert!(text.contains(says), "{says}: {text}");
    }
    refused_without_csrf(&server, "/ui/queues/emails/limits").await;
    assert_eq!(
        server.get("/api/queues/emails").await["concurrency"],
        Value::Null
    );

    // Pausing from the queue's page comes back to it.
    let location = acted(
        &server,
        "/ui/queues/emails/pause",
        &[("csrf", &csrf), ("back", "/ui/queues/emails")],
    )
    .await;
    assert!(
        location.starts_with("/ui/queues/emails?note="),
        "{location}"
    );
    // A `back` to another site is not followed.
    let (_, location) = submit(
        &server,
        "/ui/queues/emails/resume",
        &[("csrf", &csrf), ("back", "https://evil.example/")],
        None,
    )
    .await;
    assert!(location.starts_with("/ui/queues?note="), "{location}");
}

/// Where a subscription is shown, so is its endpoint's state: paused by `Retry-After` (until
/// when), or its circuit breaker open (why, and until when).
#[tokio::test]
async fn subscriptions_show_their_endpoint_paused_or_its_breaker_open() {
    let server = TestServer::start(Options::manual().flags(&[
        "--allow-private-endpoints",
        "--delivery-breaker-failures",
        "1",
        "--delivery-breaker-cooldown",
        "10s",
    ]))
    .await;
    let pausing = Receiver::start(vec![Reply::status(429).retry_after("60")], Reply::ok()).await;
    let failing = Receiver::start(vec![Reply::status(500)], Reply::ok()).await;
    let policy = json!({"type": "fixed", "delay": "1s", "retry_limit": 5});
    let mut ids = Vec::new();
    for (queue, receiver) in [("a", &pausing), ("b", &failing)] {
        let endpoint = receiver.url(&format!("/{queue}"));
        let view = server
            .subscribe(
                queue,
                json!({"endpoint": endpoint, "policy": policy}),
                json!({}),
            )
            .await;
        ids.push(view["id"].as_u64().expect("an id"));
        enqueue(&server, json!({"queue": queue, "type": "t"})).await;
    }
    let (paused, open) = (ids[0], ids[1]);
    pausing.wait_for(1, PATIENCE).await;
    failing.wait_for(1, PATIENCE).await;
    wait_for_endpoint(&server, paused, |e| e["paused_until"].is_string()).await;
    wait_for_endpoint(&server, open, |e| e["breaker"] == json!("open")).await;

    let list = html(&server, "/ui/subscriptions").await;
    let row_paused = row(&list, &format!(r#"data-subscription="{paused}""#));
    assert!(
        row_paused.contains("paused by Retry-After (429), resumes <span title=\"2027-01-15T08:01:00.000Z\">in 1m</span>"),
        "{row_paused}"
    );
    let row_open = row(&list, &format!(r#"data-subscription="{open}""#));
    has_all(
        row_open,
        &[
            "circuit open: the endpoint answered HTTP 500; a probe may go",
            "in 10s",
        ],
    );
    let detail = html(&server, &format!("/ui/subscriptions/{open}")).await;
    assert!(detail.contains("circuit open"), "{detail}");
    assert!(detail.contains("<main data-live"), "{detail}");
}

/// The subscription's endpoint state once `ready` holds of it.
async fn wait_for_endpoint(server: &TestServer, sub: u64, ready: impl Fn(&Value) -> bool) {
    let path = format!("/api/subscriptions/{sub}");
    server
        .poll(&path, "the endpoint's state", |view| {
            ready(&view["health"]["endpoint"])
        })
        .await;
}

/// A failed job's page shows its errors first; lists preview payloads; a finished job's page
/// stays still, a running one's is live.
#[tokio::test]
async fn failed_jobs_show_their_errors_first_and_lists_preview_payloads() {
    let server = TestServer::manual().await;
    let no_retry = json!({"type": "fixed", "delay": "1s", "retry_limit": 0});
    let doomed = enqueue(
        &server,
        json!({"queue": "emails", "type": "welcome", "payload": {"to": "ada@example.com", "n": 1}, "policy": no_retry}),
    )
    .await;
    let waiting = enqueue(
        &server,
        json!({"queue": "reports", "type": "daily", "delay": "1h"}),
    )
    .await;
    fail_next(&server, "emails", "SMTP 550").await;
    let dead = html(&server, &format!("/ui/jobs/{doomed}")).await;
    let errors = dead.find(r#"id="errors""#).expect("an errors section");
    let timeline = dead.find("Attempt timeline").expect("a timeline");
    let payload = dead.find("<h2>Payload").expect("a payload");
    assert!(
        errors < timeline && errors < payload,
        "errors first: {dead}"
    );
    assert!(
        !dead.contains("<main data-live"),
        "a dead job does not change: {dead}"
    );
    let scheduled = html(&server, &format!("/ui/jobs/{waiting}")).await;
    let errors = scheduled.find(r#"id="errors""#).expect("an errors section");
    assert!(
        errors > scheduled.find("<h2>Payload").expect("a payload"),
        "{scheduled}"
    );
    assert!(scheduled.contains("<main data-live"), "{scheduled}");
    let list = html(&server, "/ui/jobs").await;
    assert!(
        list.contains("{&quot;n&quot;:1,&quot;to&quot;:&quot;ada@example.com&quot;}"),
        "a payload preview: {list}"
    );
    // Newest first.
    let first = list
        .find(&format!(r#"data-id="{waiting}""#))
        .expect("the newer");
    assert!(
        first
            < list
                .find(&format!(r#"data-id="{doomed}""#))
                .expect("the older")
    );
}

/// With authentication on, a reader sees the new pages but may not act on them.
#[tokio::test]
async fn a_reader_sees_schedules_and_queues_but_may_not_act() {
    let server =
        TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let admin = |method: Method, path: &str, body: Value| {
        server
            .http()
            .request(method, server.url(path))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
    };
    let made = admin(
        Method::PUT,
        "/api/schedules/nightly",
        json!({"cron": "30 2 * * *", "job": {"queue": "reports", "type": "nightly"}}),
    )
    .await
    .expect("answer");
    assert_eq!(made.status(), StatusCode::CREATED);
    admin(
        Method::PUT,
        "/api/queues/reports",
        json!({"concurrency": 3}),
    )
    .await
    .expect("answer");
    let token: Value = admin(
        Method::POST,
        "/api/tokens",
        json!({"name": "viewer", "role": "reader"}),
    )
    .await
    .expect("answer")
    .json()
    .await
    .expect("json");
    let cookie = sign_in(&server, token["token"].as_str().expect("a token")).await;
    let (status, schedules) = page(&browser(), &server, "/ui/schedules", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK, "{schedules}");
    assert!(
        schedules.contains(r#"data-schedule="nightly""#) && !schedules.contains(r#"/run""#),
        "no actions: {schedules}"
    );
    let (status, queue) = page(&browser(), &server, "/ui/queues/reports", Some(&cookie)).await;
    assert_eq!(status, StatusCode::OK, "{queue}");
    assert!(
        queue.contains("3 at once") && !queue.contains("Save limits"),
        "{queue}"
    );
    let csrf = csrf_of(&schedules);
    for (path, fields) in [
        ("/ui/schedules/nightly/pause", vec![]),
        ("/ui/schedules/nightly/run", vec![]),
        ("/ui/queues/reports/limits", vec![("concurrency", "9")]),
    ] {
        let mut body = vec![("csrf", csrf.as_str())];
        body.extend(fields);
        let (status, _) = submit(&server, path, &body, Some(&cookie)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}");
    }
    let schedule: Value = server
        .http()
        .get(server.url("/api/schedules/nightly"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .expect("answer")
        .json()
        .await
        .expect("json");
    assert_eq!(schedule["paused"], json!(false));
    assert_eq!(schedule["last_job"], Value::Null);
}

/// A job run now is the schedule's last job: with `overlap: skip`, the next tick waits for it
/// (left out while it is unfinished), as it would for a tick's job.
#[tokio::test]
async fn a_job_run_now_holds_the_next_tick_of_a_schedule_that_skips_overlaps() {
    let server = TestServer::manual().await;
    server
        .expect(
            Method::PUT,
            "/api/schedules/minutely",
            Some(
                json!({"cron": "* * * * *", "overlap": "skip", "job": {"queue": "q", "type": "t"}}),
            ),
            201,
        )
        .await;
    let csrf = csrf_of(&html(&server, "/ui/schedules").await);
    acted(&server, "/ui/schedules/minutely/run", &[("csrf", &csrf)]).await;
    let job = server.get("/api/schedules/minutely").await["last_job"]
        .as_u64()
        .expect("the job run now");
    // T0 is on the minute: the next tick comes a minute later, while the job is still ready.
    server.advance(Duration::from_secs(61));
    let schedule = server
        .poll("/api/schedules/minutely", "the tick", |schedule| {
            schedule["counts"] != json!({"enqueued": 0, "missed": 0, "overlapped": 0})
        })
        .await;
    assert_eq!(
        schedule["counts"],
        json!({"enqueued": 0, "missed": 0, "overlapped": 1}),
        "{schedule}"
    );
    assert_eq!(schedule["last_job"], json!(job), "{schedule}");
}

/// The servers and workers page: this server with its version, and each worker named by its
/// take, with the queue it takes from and the jobs it holds. (Which workers a scoped token sees
/// is the API's rule, tested with `/api/cluster` in api.rs.)
#[tokio::test]
async fn the_workers_page_shows_the_servers_and_the_workers_they_have_seen() {
    let server = TestServer::manual().await;
    enqueue(&server, json!({"queue": "mail", "type": "welcome"})).await;
    server
        .post(
            "/api/take",
            json!({"queues": ["mail"], "max": 1, "worker": "mailer-1"}),
        )
        .await;
    server
        .post(
            "/api/take",
            json!({"queues": ["reports"], "max": 1, "worker": "reporter-1"}),
        )
        .await;
    let page = html(&server, "/ui/workers").await;
    has_all(
        &page,
        &[
            "Servers and workers",
            "(this one)",
            env!("CARGO_PKG_VERSION"),
        ],
    );
    let mailer = row(&page, "data-worker=\"mailer-1\"");
    has_all(mailer, &["mailer-1", "/ui/queues/mail", "<td>1</td>"]);
    let reporter = row(&page, "data-worker=\"reporter-1\"");
    has_all(reporter, &["reports", "<td>0</td>"]);
    assert!(page.contains("href=\"/ui/workers\""), "the nav links it");
}
