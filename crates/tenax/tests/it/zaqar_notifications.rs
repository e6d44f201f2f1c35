//! Zaqar's notifications beyond the plain webhook, on the real server and a real receiver:
//! subscription confirmation (`--zaqar-require-confirmation`: the notice with its pre-signed
//! confirm URL, nothing delivered before the confirmation, delivered after it, stopped again by
//! `{"confirmed": false}`, the state stored across a restart), `options.post_data` body
//! templates, and `mailto:` subscribers mailed through a real SMTP server started here
//! (`--smtp-url`), retried by their policy.

use common::{Options, PATIENCE, TestServer};
use receiver::Receiver;
use reqwest::Method;
use serde_json::{Value, json};
use smtp::SmtpServer;

use crate::common;
use crate::common::receiver;
use crate::common::smtp;

const CLIENT: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";
const PROJECT: &str = "proj-n";

/// A `/v2` request of project [`PROJECT`] with `headers` besides Zaqar's own; the status and
/// the JSON answer (`null` when empty).
async fn zaqar(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
    headers: &[(String, String)],
) -> (u16, Value) {
    let mut request = server
        .api
        .http()
        .request(method.clone(), server.url(path))
        .header("Client-ID", CLIENT)
        .header("X-Project-ID", PROJECT);
    if let Some(body) = body {
        request = request.json(&body);
    }
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let status = response.status().as_u16();
    let bytes = response.bytes().await.expect("an answer");
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, json)
}

/// Subscribes `subscriber` to queue `queue` with `options`; the subscription's id.
async fn subscribe(server: &TestServer, queue: &str, subscriber: &str, options: Value) -> u64 {
    subscribe_to(server, "queues", queue, subscriber, options).await
}

/// Subscribes `subscriber` to `/v2/{collection}/{name}` (a queue or a topic) with `options`;
/// the subscription's id.
async fn subscribe_to(
    server: &TestServer,
    collection: &str,
    name: &str,
    subscriber: &str,
    options: Value,
) -> u64 {
    let path = format!("/v2/{collection}/{name}/subscriptions");
    let body = json!({"subscriber": subscriber, "ttl": 3600, "options": options});
    let (status, answer) = zaqar(server, Method::POST, &path, Some(body), &[]).await;
    assert_eq!(status, 201, "{answer}");
    answer["subscription_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .expect("a subscription id")
}

async fn post_message(server: &TestServer, queue: &str, body: Value) {
    let path = format!("/v2/queues/{queue}/messages");
    let messages = json!({"messages": [{"body": body, "ttl": 300}]});
    let (status, answer) = zaqar(server, Method::POST, &path, Some(messages), &[]).await;
    assert_eq!(status, 201, "{answer}");
}

/// The subscription as `/v2` shows it.
async fn shown(server: &TestServer, queue: &str, sid: u64) -> Value {
    let path = format!("/v2/queues/{queue}/subscriptions/{sid}");
    let (status, answer) = zaqar(server, Method::GET, &path, None, &[]).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The ids of subscription `sub`'s deliveries listed with `query` (`status=dead`, or ""), once
/// there are at least `n`.
async fn delivery_ids(server: &TestServer, sub: u64, query: &str, n: usize) -> Vec<u64> {
    let answer = server
        .poll(
            &format!("/api/subscriptions/{sub}/deliveries?{query}"),
            &format!("{n} deliveries ({query})"),
            |a| a["deliveries"].as_array().is_some_and(|d| d.len() >= n),
        )
        .await;
    answer["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| d["id"].as_u64().expect("a delivery id"))
        .collect()
}

/// Waits until subscription `sub` has `n` dead deliveries, each ended unsent with one attempt
/// that says the subscription is not confirmed.
async fn wait_unsent(server: &TestServer, sub: u64, n: usize) {
    let dead = delivery_ids(server, sub, "status=dead", n).await;
    assert_eq!(dead.len(), n, "{dead:?}");
    for id in dead {
        let attempts = server.wait_attempts(id, 1).await;
        let error = attempts[0]["error"].as_str().unwrap_or_default();
        assert!(error.contains("not confirmed"), "{attempts:?}");
        assert_eq!(
            attempts[0]["status"],
            Value::Null,
            "no request: {attempts:?}"
        );
    }
}

/// `PUT` of subscription confirm path `path` with `{"confirmed": confirmed}` and `headers`;
/// the status and the answer.
async fn confirm_as(
    server: &TestServer,
    path: &str,
    confirmed: bool,
    headers: &[(String, String)],
) -> (u16, Value) {
    let body = json!({ "confirmed": confirmed });
    zaqar(server, Method::PUT, path, Some(body), headers).await
}

/// The signed headers a confirmation notice carries, as a subscriber sends them back.
fn signed_headers(notice: &Value) -> Vec<(String, String)> {
    ["URL-Signature", "URL-Methods", "URL-Paths", "URL-Expires"]
        .iter()
        .map(|name| {
            let value = notice[*name]
                .as_str()
                .expect("a signed header in the notice");
            ((*name).to_owned(), value.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_that_must_be_confirmed_gets_messages_only_while_confirmed() {
    let mut server = TestServer::start(
        Options::manual().flags(&["--allow-private-endpoints", "--zaqar-require-confirmation"]),
    )
    .await;
    let receiver = Receiver::ok().await;
    let sid = subscribe(
        &server,
        "orders",
        &receiver.url("/hook"),
        json!({"post_headers": {"X-Custom": "1"}}),
    )
    .await;

    // The confirmation notice: Zaqar's body and headers, the confirm path signed for PUT.
    let notice = receiver.wait_for(1, PATIENCE).await[0].clone();
    assert_eq!(notice.header("content-type"), "application/json");
    assert_eq!(notice.header("x-custom"), "1");
    let body = notice.json();
    let confirm = format!("/v2/queues/orders/subscriptions/{sid}/confirm");
    assert_eq!(
        body["Message_Type"],
        json!("SubscriptionConfirmation"),
        "{body}"
    );
    assert_eq!(
        body["Message"],
        json!("You have chosen to subscribe to the queue: orders")
    );
    assert_eq!(body["URL-Paths"], json!(confirm));
    assert_eq!(body["URL-Methods"], json!("PUT"));
    assert_eq!(body["X-Project-ID"], json!(PROJECT));
    assert_eq!(body["SubscribeBody"], json!({"confirmed": true}));
    assert_eq!(body["UnsubscribeBody"], json!({"confirmed": false}));
    assert_eq!(body["queue_name"], json!("orders"));
    assert_eq!(
        shown(&server, "orders", sid).await["confirmed"],
        json!(false)
    );
    let native = server.get(&format!("/api/subscriptions/{sid}")).await;
    assert_eq!(native["confirmed"], json!(false), "{native}");

    // Posting the subscriber again sends the notice again (it is still unconfirmed).
    assert_eq!(
        subscribe(&server, "orders", &receiver.url("/hook"), json!({})).await,
        sid
    );
    let again = receiver.wait_for(2, PATIENCE).await[1].json();
    assert_eq!(again["Message_Type"], json!("SubscriptionConfirmation"));

    // Nothing is delivered before the confirmation: the message's delivery ends unsent.
    post_message(&server, "orders", json!({"n": 1})).await;
    wait_unsent(&server, sid, 1).await;
    server.settle(&[sid], "before the confirmation").await;
    assert_eq!(receiver.count(), 2, "only the two notices");

    // A confirm URL whose signature was altered is refused as Zaqar refuses it.
    let mut altered = signed_headers(&body);
    let flipped = if altered[0].1.starts_with('0') {
        '1'
    } else {
        '0'
    };
    altered[0].1 = format!("{flipped}{}", &altered[0].1[1..]);
    let (status, _) = confirm_as(&server, &confirm, true, &altered).await;
    assert_eq!(status, 404);
    assert_eq!(
        shown(&server, "orders", sid).await["confirmed"],
        json!(false)
    );

    // The notice's confirm URL, PUT with its signed headers, confirms.
    let (status, answer) = confirm_as(&server, &confirm, true, &signed_headers(&body)).await;
    assert_eq!(status, 204, "{answer}");
    assert_eq!(
        shown(&server, "orders", sid).await["confirmed"],
        json!(true)
    );
    // Confirmed, the subscriber is a conflict when posted again, as in Zaqar.
    let (status, answer) = zaqar(
        &server,
        Method::POST,
        "/v2/queues/orders/subscriptions",
        Some(json!({"subscriber": receiver.url("/hook")})),
        &[],
    )
    .await;
    assert_eq!(status, 409, "{answer}");
    post_message(&server, "orders", json!({"n": 2})).await;
    let delivered = receiver.wait_for(3, PATIENCE).await[2].json();
    assert_eq!(
        delivered,
        json!({"ttl": 300, "body": {"n": 2}, "queue_name": "orders",
               "Message_Type": "Notification"})
    );

    // `false` stops deliveries again, with Zaqar's unsubscribe notice.
    let (status, answer) = confirm_as(&server, &confirm, false, &signed_headers(&body)).await;
    assert_eq!(status, 204, "{answer}");
    let stopped = receiver.wait_for(4, PATIENCE).await[3].json();
    assert_eq!(
        stopped["Message_Type"],
        json!("UnsubscribeConfirmation"),
        "{stopped}"
    );
    post_message(&server, "orders", json!({"n": 3})).await;
    wait_unsent(&server, sid, 2).await;
    server
        .settle(&[sid], "after the subscriber stopped it")
        .await;
    assert_eq!(receiver.count(), 4, "nothing after the unsubscribe notice");

    // A topic's subscription is confirmed the same way, at its own path.
    let topic_receiver = Receiver::ok().await;
    let topic_sub = subscribe_to(
        &server,
        "topics",
        "alerts",
        &topic_receiver.url("/t"),
        json!({}),
    )
    .await;
    let notice = topic_receiver.wait_for(1, PATIENCE).await[0].json();
    let topic_confirm = format!("/v2/topics/alerts/subscriptions/{topic_sub}/confirm");
    assert_eq!(notice["URL-Paths"], json!(topic_confirm), "{notice}");
    assert_eq!(notice["queue_name"], json!("alerts"), "{notice}");
    let (status, answer) =
        confirm_as(&server, &topic_confirm, true, &signed_headers(&notice)).await;
    assert_eq!(status, 204, "{answer}");
    let (status, topic_view) = zaqar(
        &server,
        Method::GET,
        &format!("/v2/topics/alerts/subscriptions/{topic_sub}"),
        None,
        &[],
    )
    .await;
    assert_eq!(
        (status, &topic_view["confirmed"]),
        (200, &json!(true)),
        "{topic_view}"
    );

    // The state is stored: a restart keeps it, and so does the native API.
    server.restart().await;
    assert_eq!(
        shown(&server, "orders", sid).await["confirmed"],
        json!(false)
    );
    let native = server.get(&format!("/api/subscriptions/{sid}")).await;
    assert_eq!(native["confirmed"], json!(false), "{native}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_option_subscriptions_are_confirmed_and_confirm_changes_nothing() {
    let server = TestServer::start(Options::manual().flags(&["--allow-private-endpoints"])).await;
    let receiver = Receiver::ok().await;
    let sid = subscribe(&server, "q", &receiver.url("/hook"), json!({})).await;
    assert_eq!(shown(&server, "q", sid).await["confirmed"], json!(true));
    let confirm = format!("/v2/queues/q/subscriptions/{sid}/confirm");
    let (status, _) = confirm_as(&server, &confirm, false, &[]).await;
    assert_eq!(status, 204);
    post_message(&server, "q", json!("hello")).await;
    let first = receiver.wait_for(1, PATIENCE).await[0].json();
    assert_eq!(
        first["Message_Type"],
        json!("Notification"),
        "no notice: {first}"
    );
    assert_eq!(first["body"], json!("hello"));
    assert_eq!(shown(&server, "q", sid).await["confirmed"], json!(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_data_templates_shape_the_body() {
    let server = TestServer::start(Options::manual().flags(&["--allow-private-endpoints"])).await;
    let receiver = Receiver::ok().await;
    let template =
        r#"{"text": "new order", "event": "$zaqar_message$", "keep": "$zaqar_message$ as is"}"#;
    let sid = subscribe(
        &server,
        "q",
        &receiver.url("/hook"),
        json!({"post_data": template}),
    )
    .await;
    // Accepted, so shown as given.
    assert_eq!(
        shown(&server, "q", sid).await["options"]["post_data"],
        json!(template)
    );
    post_message(&server, "q", json!({"order": 7})).await;
    let got = receiver.wait_for(1, PATIENCE).await[0].clone();
    assert_eq!(got.header("content-type"), "application/json");
    assert_eq!(
        got.json(),
        json!({"text": "new order",
               "event": {"ttl": 300, "body": {"order": 7}, "queue_name": "q",
                         "Message_Type": "Notification"},
               "keep": "$zaqar_message$ as is"})
    );
    // A template that is not text is refused with Zaqar's shape.
    let (status, answer) = zaqar(
        &server,
        Method::POST,
        "/v2/queues/q/subscriptions",
        Some(json!({"subscriber": receiver.url("/other"), "options": {"post_data": {"x": 1}}})),
        &[],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["title"], json!("Invalid API request"));
    assert!(
        answer["description"]
            .as_str()
            .is_some_and(|d| d.contains("post_data")),
        "{answer}"
    );
}

/// A mailto subscriber of the test's recipient, with a subject and a sender.
const MAILTO: &str =
    "mailto:ops@example.com?subject=New%20order&from=Orders%20%3Cqueue@example.com%3E";

/// A Zaqar retry policy whose first two retries come at once (and then none).
fn two_quick_retries() -> Value {
    json!({"retries_with_no_delay": 2, "minimum_delay_retries": 0, "minimum_delay": 1,
           "maximum_delay": 11, "maximum_delay_retries": 0})
}

/// Waits until delivery `delivery` is `status`; returns its attempts.
async fn ended(server: &TestServer, delivery: u64, status: &str, attempts: usize) -> Vec<Value> {
    server
        .poll(
            &format!("/api/deliveries/{delivery}"),
            &format!("delivery {delivery} {status}"),
            |d| d["status"] == json!(status),
        )
        .await;
    server.wait_attempts(delivery, attempts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailto_subscribers_are_mailed_through_the_smtp_server_and_retried() {
    // The first mail is refused for now (451), the second accepted, the third refused for good.
    let smtp = SmtpServer::start(vec![451, 250, 550], 250).await;
    let server = TestServer::start(Options::manual().flags(&[
        "--allow-private-endpoints",
        "--smtp-url",
        &smtp.url(),
    ]))
    .await;
    let sid = subscribe(
        &server,
        "orders",
        MAILTO,
        json!({"_retry_policy": two_quick_retries()}),
    )
    .await;
    let view = shown(&server, "orders", sid).await;
    assert_eq!(view["subscriber"], json!(MAILTO));
    assert_eq!(view["confirmed"], json!(true));

    // Refused with 451, retried by the policy at once, accepted.
    post_message(&server, "orders", json!({"order": 7})).await;
    let mail = smtp.wait_for(1, PATIENCE).await[0].clone();
    assert_eq!(mail.to, ["<ops@example.com>"]);
    assert_eq!(mail.from, "<queue@example.com>");
    assert_eq!(mail.header("Subject").as_deref(), Some("New order"));
    assert_eq!(mail.header("To").as_deref(), Some("ops@example.com"));
    let sender = mail.header("From").unwrap_or_default();
    assert!(sender.contains("queue@example.com"), "{sender}");
    let text: Value = serde_json::from_str(mail.text().trim()).expect("the text is JSON");
    assert_eq!(
        text,
        json!({"ttl": 300, "body": {"order": 7}, "queue_name": "orders",
               "Message_Type": "Notification"})
    );
    let delivery = server.only_delivery(sid).await;
    let attempts = ended(&server, delivery, "completed", 2).await;
    assert_eq!(attempts[0]["result"], json!("retryable"), "{attempts:?}");
    let refusal = attempts[0]["error"].as_str().unwrap_or_default();
    assert!(refusal.contains("451"), "{attempts:?}");
    assert_eq!(attempts[1]["result"], json!("delivered"), "{attempts:?}");
    let accepted = attempts[1]["response"].as_str().unwrap_or_default();
    assert!(accepted.starts_with("250"), "{attempts:?}");

    // Refused for good (550): dead after one attempt, and the endpoint's health says so.
    post_message(&server, "orders", json!({"order": 8})).await;
    let dead_id = delivery_ids(&server, sid, "status=dead", 1).await[0];
    let attempts = ended(&server, dead_id, "dead", 1).await;
    assert_eq!(attempts[0]["result"], json!("permanent"), "{attempts:?}");
    assert_eq!(smtp.refused(), [451, 550]);
    let native = server.get(&format!("/api/subscriptions/{sid}")).await;
    assert_eq!(native["health"]["healthy"], json!(false), "{native}");
    assert_eq!(
        native["health"]["endpoint"]["origin"],
        json!("mailto:"),
        "{native}"
    );

    // The server down: retried by the policy, each attempt failing to connect.
    smtp.shut();
    post_message(&server, "orders", json!({"order": 9})).await;
    let down = delivery_ids(&server, sid, "", 3)
        .await
        .into_iter()
        .max()
        .expect("the delivery sent while the server was down");
    // Three attempts (the first and two quick retries); the rest of the policy's retries are
    // later, so the delivery is still scheduled: wait for the third attempt.
    let attempts = server.wait_attempts(down, 3).await;
    assert!(
        attempts.iter().all(|a| a["result"] == json!("retryable")),
        "{attempts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailto_subscribers_are_checked() {
    // Without an SMTP server, refused with a clear Zaqar error.
    let server = TestServer::start(Options::manual().flags(&["--allow-private-endpoints"])).await;
    let refuse = |server: &TestServer, subscriber: &str, options: Value| {
        let body = json!({"subscriber": subscriber, "options": options});
        let server = server.api.clone();
        async move {
            let answer = server
                .http()
                .post(server.url("/v2/queues/q/subscriptions"))
                .header("Client-ID", CLIENT)
                .header("X-Project-ID", PROJECT)
                .json(&body)
                .send()
                .await
                .expect("an answer");
            assert_eq!(answer.status().as_u16(), 400);
            let answer: Value = answer.json().await.expect("JSON");
            assert_eq!(answer["title"], json!("Invalid API request"), "{answer}");
            answer["description"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
    };
    let none = refuse(&server, MAILTO, json!({})).await;
    assert!(none.contains("--smtp-url"), "{none}");

    let smtp = SmtpServer::start(Vec::new(), 250).await;
    let server = TestServer::start(Options::manual().flags(&[
        "--allow-private-endpoints",
        "--smtp-url",
        &smtp.url(),
    ]))
    .await;
    let bad = refuse(&server, "mailto:nobody?from=a@example.com", json!({})).await;
    assert!(bad.contains("not an email address"), "{bad}");
    let no_sender = refuse(&server, "mailto:ops@example.com", json!({})).await;
    assert!(no_sender.contains("sender"), "{no_sender}");
    let trust = refuse(&server, "trust+https://example.com/", json!({})).await;
    assert!(trust.contains("['http', 'https', 'mailto']"), "{trust}");
    // The sender may come from the options, as Zaqar's `from`.
    let sid = subscribe(
        &server,
        "q",
        "mailto:ops@example.com",
        json!({"from": "queue@example.com", "subject": "From options"}),
    )
    .await;
    // An update that leaves it without a sender is refused, and changes nothing.
    let path = format!("/v2/queues/q/subscriptions/{sid}");
    let (status, answer) = zaqar(
        &server,
        Method::PATCH,
        &path,
        Some(json!({"options": {}})),
        &[],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(
        shown(&server, "q", sid).await["options"]["from"],
        json!("queue@example.com")
    );
    post_message(&server, "q", json!(1)).await;
    let mail = smtp.wait_for(1, PATIENCE).await[0].clone();
    assert_eq!(mail.header("Subject").as_deref(), Some("From options"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mailto_subscriber_is_mailed_its_confirmation_and_confirms_with_it() {
    let smtp = SmtpServer::start(Vec::new(), 250).await;
    let mut server = TestServer::start(Options::manual().flags(&[
        "--allow-private-endpoints",
        "--zaqar-require-confirmation",
        "--smtp-url",
        &smtp.url(),
    ]))
    .await;
    let sid = subscribe(&server, "orders", MAILTO, json!({})).await;
    let mail = smtp.wait_for(1, PATIENCE).await[0].clone();
    assert_eq!(
        mail.header("Subject").as_deref(),
        Some("Zaqar Notification - Subscription Confirmation")
    );
    let text = mail.text();
    let confirm = format!("/v2/queues/orders/subscriptions/{sid}/confirm");
    assert!(text.contains(&format!("PUT {confirm}")), "{text}");
    assert!(
        text.starts_with(&format!(
            "You have chosen to subscribe to the queue: orders. This queue belongs to project: \
             {PROJECT}."
        )),
        "{text}"
    );
    // The headers the mail names confirm, as a confirmation page would send them.
    let headers: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| line.split_once(": "))
        .filter(|(name, _)| name.starts_with("URL-"))
        .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
        .collect();
    assert_eq!(headers.len(), 4, "{text}");
    post_message(&server, "orders", json!({"n": 1})).await;
    wait_unsent(&server, sid, 1).await;
    let (status, answer) = confirm_as(&server, &confirm, true, &headers).await;
    assert_eq!(status, 204, "{answer}");
    post_message(&server, "orders", json!({"n": 2})).await;
    let mail = smtp.wait_for(2, PATIENCE).await[1].clone();
    assert_eq!(mail.header("Subject").as_deref(), Some("New order"));
    let text: Value = serde_json::from_str(mail.text().trim()).expect("JSON");
    assert_eq!(text["body"], json!({"n": 2}));

    // The server stops cleanly with its SMTP connections pooled, and starts confirmed.
    server.restart().await;
    assert_eq!(
        shown(&server, "orders", sid).await["confirmed"],
        json!(true)
    );
    post_message(&server, "orders", json!({"n": 3})).await;
    let mail = smtp.wait_for(3, PATIENCE).await[2].clone();
    let text: Value = serde_json::from_str(mail.text().trim()).expect("JSON");
    assert_eq!(text["body"], json!({"n": 3}));
}
