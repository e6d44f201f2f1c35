//! The subscriptions and deliveries API over HTTP: create, show, list, change and delete
//! subscriptions; their effective policy in every spelling and its precedence; every refused
//! field named; internal delivery queues hidden from queue listings; the deliveries and attempts
//! views and replay's refusals.
//!
//! No test here needs an endpoint to answer: subscriptions that receive messages are disabled, so
//! their deliveries wait; what deliveries do over HTTP is the delivery tests' business.
//! Servers run on a manual clock (`common::T0`) so times in answers are exact.

use common::{Options, T0, TestServer};
use reqwest::Method;
use serde_json::{Value, json};
use tenax::delivery::default_delivery_policy;
use tenax_core::clock::rfc3339;
use tenax_policy::parse_policy;
use tenax_policy::spelling::native;

use crate::common;

/// A loopback endpoint nothing listens on (the discard port).
const LOCAL: &str = "http://127.0.0.1:9/hook";
/// A public address, given as a literal so that checking it needs no DNS.
const PUBLIC: &str = "http://8.8.8.8/hook";

/// A server that accepts loopback endpoints, as the tests' receivers are.
async fn server() -> TestServer {
    TestServer::start(Options::manual().flags(&["--allow-private-endpoints"])).await
}

/// The canonical native JSON of a policy in any spelling.
fn canonical(policy: &Value) -> Value {
    native::to_json(&parse_policy(policy).expect("a valid policy").retry)
}

/// Creates a subscription of `queue`, expecting 201; returns its view.
async fn subscribe(server: &TestServer, queue: &str, body: Value) -> Value {
    server
        .expect(
            Method::POST,
            &format!("/api/queues/{queue}/subscriptions"),
            Some(body),
            201,
        )
        .await
}

fn id(view: &Value) -> u64 {
    view["id"].as_u64().expect("an id")
}

async fn patch(server: &TestServer, id: u64, body: Value) -> Value {
    server
        .expect(
            Method::PATCH,
            &format!("/api/subscriptions/{id}"),
            Some(body),
            200,
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_show_list_update_and_delete() {
    let server = server().await;
    let created = subscribe(&server, "orders", json!({"endpoint": LOCAL})).await;
    let sub = id(&created);
    let secret = created["secret"].as_str().expect("a generated secret");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert!(created["health"].is_object(), "{created}");
    let mut expected = json!({
        "id": sub, "queue": "orders", "endpoint": LOCAL, "enabled": true, "confirmed": true,
        "disabled_reason": null, "policy": null,
        "effective_policy": native::to_json(&default_delivery_policy()),
        "policy_source": "server", "throttle_per_second": null,
        "content_type": "application/json", "secret": secret, "headers": {},
        "previous_secret_until": null,
        "retryable_statuses": null, "max_concurrency": null,
        "auto_disable_after_ms": 5 * 24 * 3_600_000_u64, "retry_budget": null,
        "format": "tenax", "created_at": rfc3339(T0), "updated_at": rfc3339(T0), "health": created["health"],
        "deliveries": {"scheduled": 0, "ready": 0, "in_flight": 0, "completed": 0, "dead": 0, "cancelled": 0, "waiting": 0},
    });
    assert_eq!(created, expected);
    // The secret is shown once, in the answer to the create; never again.
    expected["secret"] = json!("[redacted]");
    assert_eq!(
        server.get(&format!("/api/subscriptions/{sub}")).await,
        expected
    );

    // Every field at once; the endpoint is normalised.
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let full = subscribe(
        &server,
        "orders",
        json!({"endpoint": "http://127.0.0.1:9", "policy": {"type": "fixed", "delay": "2s"},
               "throttle_per_second": 50, "content_type": "application/cloudevents+json",
               "secret": secret, "headers": {"Authorization": "Bearer t", "X-Team": "billing"},
               "enabled": false, "retryable_statuses": [503, 409, 503],
               "max_concurrency": 4, "auto_disable_after": "3d", "format": "zaqar",
               "retry_budget": {"percent": 25, "window": "2m"}}),
    )
    .await;
    let other = id(&full);
    assert_ne!(other, sub);
    for (field, value) in [
        ("endpoint", json!("http://127.0.0.1:9/")),
        (
            "policy",
            canonical(&json!({"type": "fixed", "delay": 2000})),
        ),
        (
            "effective_policy",
            canonical(&json!({"type": "fixed", "delay": 2000})),
        ),
        ("policy_source", json!("subscription")),
        ("throttle_per_second", json!(50)),
        ("content_type", json!("application/cloudevents+json")),
        ("secret", json!(secret)),
        (
            "headers",
            json!({"Authorization": "Bearer t", "X-Team": "billing"}),
        ),
        ("enabled", json!(false)),
        ("retryable_statuses", json!([409, 503])),
        ("max_concurrency", json!(4)),
        ("auto_disable_after_ms", json!(3 * 24 * 3_600_000_u64)),
        ("format", json!("zaqar")),
        (
            "retry_budget",
            json!({"percent": 25, "window_ms": 120_000, "min_retries": 10}),
        ),
    ] {
        assert_eq!(full[field], value, "{field} in {full}");
    }

    // Lists: per queue and all, in id order.
    subscribe(&server, "invoices", json!({"endpoint": LOCAL})).await;
    let of_orders = server.get("/api/queues/orders/subscriptions").await;
    let ids = |list: &Value| -> Vec<u64> {
        list["subscriptions"]
            .as_array()
            .expect("subscriptions")
            .iter()
            .map(id)
            .collect()
    };
    assert_eq!(ids(&of_orders), [sub, other]);
    assert_eq!(of_orders["subscriptions"][0], expected);
    assert_eq!(ids(&server.get("/api/subscriptions").await).len(), 3);
    assert_eq!(
        ids(&server.get("/api/queues/nobody/subscriptions").await),
        Vec::<u64>::new()
    );

    // An update changes only what it names; null resets to the default.
    server.advance(std::time::Duration::from_secs(60));
    let updated = patch(
        &server,
        sub,
        json!({"throttle_per_second": 10, "headers": {"X-A": "1"}, "enabled": false}),
    )
    .await;
    expected["throttle_per_second"] = json!(10);
    // Header values are write-only too.
    expected["headers"] = json!({"X-A": "[redacted]"});
    expected["enabled"] = json!(false);
    expected["updated_at"] = json!(rfc3339(T0 + 60_000));
    expected["health"] = updated["health"].clone();
    assert_eq!(updated, expected);
    let reset = patch(
        &server,
        other,
        json!({"policy": null, "throttle_per_second": null, "retryable_statuses": null,
               "max_concurrency": null, "auto_disable_after": null, "retry_budget": null}),
    )
    .await;
    for field in [
        "policy",
        "throttle_per_second",
        "retryable_statuses",
        "max_concurrency",
        "retry_budget",
    ] {
        assert_eq!(reset[field], Value::Null, "{field} in {reset}");
    }
    assert_eq!(reset["policy_source"], "server");
    assert_eq!(
        reset["auto_disable_after_ms"],
        json!(5 * 24 * 3_600_000_u64)
    );
    assert_eq!(reset["secret"], "[redacted]");
    assert_eq!(
        reset["headers"],
        json!({"Authorization": "[redacted]", "X-Team": "[redacted]"})
    );
    // A secret is changed by rotating it, not by an update.
    server
        .error(
            Method::PATCH,
            &format!("/api/subscriptions/{other}"),
            Some(json!({"secret": secret})),
            400,
        )
        .await;
    for list in [
        server.get("/api/subscriptions").await,
        server.get("/api/queues/orders/subscriptions").await,
    ] {
        let text = list.to_string();
        assert!(
            !text.contains(secret) && !text.contains("Bearer t"),
            "{text}"
        );
    }
    assert_eq!(reset["format"], "zaqar");

    // Enable and disable.
    let enabled = server
        .post(&format!("/api/subscriptions/{sub}/enable"), json!({}))
        .await;
    assert_eq!(enabled["enabled"], true);
    assert_eq!(enabled["disabled_reason"], Value::Null);
    let disabled = server
        .post(&format!("/api/subscriptions/{sub}/disable"), json!({}))
        .await;
    assert_eq!(disabled["enabled"], false);

    // Delete takes the subscription's deliveries with it. (Disabled: they wait.)
    server.enqueue(json!({"queue": "orders"})).await;
    server.enqueue(json!({"queue": "orders"})).await;
    let shown = server.get(&format!("/api/subscriptions/{sub}")).await;
    assert_eq!(shown["deliveries"]["ready"], 2, "{shown}");
    let deleted = server
        .expect(
            Method::DELETE,
            &format!("/api/subscriptions/{sub}"),
            None,
            200,
        )
        .await;
    assert_eq!(deleted, json!({"deleted": sub, "deliveries_deleted": 2}));
    for (method, path) in [
        (Method::GET, format!("/api/subscriptions/{sub}")),
        (Method::PATCH, format!("/api/subscriptions/{sub}")),
        (Method::DELETE, format!("/api/subscriptions/{sub}")),
        (Method::POST, format!("/api/subscriptions/{sub}/enable")),
        (Method::GET, format!("/api/subscriptions/{sub}/deliveries")),
    ] {
        let body = (method == Method::PATCH).then(|| json!({"enabled": true}));
        let error = server.error(method.clone(), &path, body, 404).await;
        assert_eq!(error.code, "not_found", "{method} {path}");
        assert!(error.message.contains("subscription"), "{error:?}");
    }
    assert_eq!(
        ids(&server.get("/api/queues/orders/subscriptions").await),
        [other]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_effective_policy_of_each_spelling() {
    let server = server().await;
    let native_policy = json!({"type": "phased", "min_delay": "1s", "max_delay": "20s",
                               "num_retries": 6, "function": "geometric"});
    let sns = json!({
        "healthyRetryPolicy": {"minDelayTarget": 1, "maxDelayTarget": 60, "numRetries": 8,
                               "numNoDelayRetries": 1, "numMinDelayRetries": 1,
                               "numMaxDelayRetries": 1, "backoffFunction": "exponential"},
        "throttlePolicy": {"maxReceivesPerSecond": 5},
        "requestPolicy": {"headerContentType": "text/plain"},
    });
    let zaqar = json!({"_retry_policy": {"retries_with_no_delay": 1, "minimum_delay_retries": 1,
                       "minimum_delay": 2, "maximum_delay": 22, "maximum_delay_retries": 1,
                       "retry_backoff_function": "arithmetic"}});
    for policy in [&native_policy, &sns, &zaqar] {
        let view = subscribe(
            &server,
            "spelt",
            json!({"endpoint": LOCAL, "policy": policy}),
        )
        .await;
        assert_eq!(view["policy"], canonical(policy), "{policy}");
        assert_eq!(view["effective_policy"], canonical(policy), "{policy}");
        assert_eq!(view["policy_source"], "subscription");
        // A stored policy is canonical native JSON, which parses back to itself.
        assert_eq!(canonical(&view["policy"]), view["policy"]);
    }

    // SNS's throttle and content type fill the fields the request leaves out...
    let from_sns = subscribe(&server, "spelt", json!({"endpoint": LOCAL, "policy": sns})).await;
    assert_eq!(from_sns["throttle_per_second"], 5);
    assert_eq!(from_sns["content_type"], "text/plain");
    // ...but not the ones it gives.
    let explicit = subscribe(
        &server,
        "spelt",
        json!({"endpoint": LOCAL, "policy": sns, "throttle_per_second": 7,
               "content_type": "application/json"}),
    )
    .await;
    assert_eq!(explicit["throttle_per_second"], 7);
    assert_eq!(explicit["content_type"], "application/json");
    // A later update with an SNS policy fills them too.
    let plain = subscribe(&server, "spelt", json!({"endpoint": LOCAL})).await;
    let changed = patch(&server, id(&plain), json!({"policy": sns})).await;
    assert_eq!(changed["throttle_per_second"], 5);
    assert_eq!(changed["content_type"], "text/plain");
    assert_eq!(changed["effective_policy"], canonical(&sns));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precedence_is_subscription_then_queue_then_server_unless_the_queue_forbids_overrides() {
    let server = server().await;
    let own = json!({"type": "fixed", "delay": "3s", "retry_limit": 2});
    let queue_policy = json!({"type": "fixed", "delay": "1m", "retry_limit": 9});
    let with_own = id(&subscribe(&server, "q", json!({"endpoint": LOCAL, "policy": own})).await);
    let without = id(&subscribe(&server, "q", json!({"endpoint": LOCAL})).await);
    let server_default = native::to_json(&default_delivery_policy());
    let expect = |pairs: [(u64, (&'static str, Value)); 2]| {
        let server = &server;
        async move {
            for (sub, (source, effective)) in pairs {
                let view = server.get(&format!("/api/subscriptions/{sub}")).await;
                assert_eq!(view["policy_source"], source, "{view}");
                assert_eq!(view["effective_policy"], effective, "{view}");
            }
        }
    };
    expect([
        (with_own, ("subscription", canonical(&own))),
        (without, ("server", server_default.clone())),
    ])
    .await;

    // The queue's policy comes before the server's, after the subscription's.
    let queue = server
        .put("/api/queues/q?create=true", json!({"policy": queue_policy}))
        .await;
    assert_eq!(queue.get("disable_overrides"), None, "{queue}");
    expect([
        (with_own, ("subscription", canonical(&own))),
        (without, ("queue", canonical(&queue_policy))),
    ])
    .await;

    // A queue that forbids overrides imposes its policy on every subscription.
    let queue = server
        .put("/api/queues/q", json!({"disable_overrides": true}))
        .await;
    assert_eq!(queue["disable_overrides"], true, "{queue}");
    assert_eq!(server.get("/api/queues/q").await["disable_overrides"], true);
    expect([
        (with_own, ("queue", canonical(&queue_policy))),
        (without, ("queue", canonical(&queue_policy))),
    ])
    .await;
    // Without a policy of its own, such a queue imposes the server's default.
    server.put("/api/queues/q", json!({"policy": null})).await;
    expect([
        (with_own, ("server", server_default.clone())),
        (without, ("server", server_default.clone())),
    ])
    .await;
    // Allowing overrides again gives the subscription its own back.
    server
        .put(
            "/api/queues/q?create=true",
            json!({"disable_overrides": false}),
        )
        .await;
    expect([
        (with_own, ("subscription", canonical(&own))),
        (without, ("server", server_default)),
    ])
    .await;

    // A queue policy spelt to forbid overrides (SNS topic, Zaqar) sets disable_overrides.
    let sns_topic = json!({"http": {"defaultHealthyRetryPolicy": {"numRetries": 3},
                                    "disableSubscriptionOverrides": true}});
    let zaqar = json!({"_retry_policy": {"minimum_delay": 5, "maximum_delay": 10,
                                         "ignore_subscription_override": true}});
    for (queue, policy) in [("sns", &sns_topic), ("zaqar", &zaqar)] {
        let own = id(&subscribe(
            &server,
            queue,
            json!({"endpoint": LOCAL, "policy": {"type": "fixed", "delay": 1}}),
        )
        .await);
        let shown = server
            .put(&format!("/api/queues/{queue}"), json!({"policy": policy}))
            .await;
        assert_eq!(shown["disable_overrides"], true, "{shown}");
        let view = server.get(&format!("/api/subscriptions/{own}")).await;
        assert_eq!(view["policy_source"], "queue", "{view}");
        assert_eq!(view["effective_policy"], canonical(policy), "{view}");
        // Contradicting the policy's own word is refused.
        let error = server
            .error(
                Method::PUT,
                &format!("/api/queues/{queue}"),
                Some(json!({"policy": policy, "disable_overrides": false})),
                400,
            )
            .await;
        assert_eq!(
            error.field.as_deref(),
            Some("disable_overrides"),
            "{error:?}"
        );
    }
    // A subscription cannot forbid overrides: only a queue can.
    let error = server
        .error(
            Method::POST,
            "/api/queues/q/subscriptions",
            Some(json!({"endpoint": LOCAL, "policy": sns_topic})),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("policy"), "{error:?}");
    assert!(error.message.contains("queue"), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_endpoints_are_refused_without_the_flag() {
    let server = TestServer::manual().await;
    for endpoint in [
        "http://127.0.0.1:8080/hook",
        "http://localhost:8080/hook",
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
    ] {
        let message = server
            .invalid(
                "/api/queues/q/subscriptions",
                json!({"endpoint": endpoint}),
                "endpoint",
            )
            .await;
        assert!(
            message.contains("--allow-private-endpoints"),
            "{endpoint}: {message}"
        );
    }
    // A name that does not resolve (yet) is accepted: addresses change, and the connect-time
    // guard judges whatever it resolves to when a delivery is sent.
    for endpoint in ["http://fake:8080/hook", "https://no-such-host.invalid/hook"] {
        let view = subscribe(
            &server,
            "q",
            json!({"endpoint": endpoint, "enabled": false}),
        )
        .await;
        assert_eq!(view["endpoint"], endpoint);
    }
    // A public address is fine (given as a literal: no DNS needed, and nothing is sent).
    let view = subscribe(&server, "q", json!({"endpoint": PUBLIC, "enabled": false})).await;
    assert_eq!(view["endpoint"], PUBLIC);
    // An update is checked the same way.
    let error = server
        .error(
            Method::PATCH,
            &format!("/api/subscriptions/{}", id(&view)),
            Some(json!({"endpoint": "http://127.0.0.1/"})),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("endpoint"));
    assert!(
        error.message.contains("--allow-private-endpoints"),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refused_field_is_named() {
    let server = TestServer::manual().await;
    let path = "/api/queues/q/subscriptions";
    let with = |field: &str, value: Value| {
        let mut body = json!({"endpoint": PUBLIC});
        body[field] = value;
        body
    };
    let too_many: serde_json::Map<String, Value> =
        (0..33).map(|i| (format!("X-{i}"), json!("v"))).collect();
    for (body, field) in [
        // The endpoint.
        (json!({}), "endpoint"),
        (json!({"endpoint": "not a url"}), "endpoint"),
        (json!({"endpoint": "ftp://example.com/x"}), "endpoint"),
        (json!({"endpoint": "http://user:pw@8.8.8.8/"}), "endpoint"),
        (json!({"endpoint": 7}), "endpoint"),
        // Unknown fields, wrong types.
        (with("endpiont", json!("x")), "endpiont"),
        (with("enabled", json!("yes")), "enabled"),
        (with("format", json!("xml")), "format"),
        // The policy, named down to its own field.
        (with("policy", json!({"type": "fixed"})), "policy.delay"),
        (with("policy", json!({"type": "bouncy"})), "policy.type"),
        // The secret.
        (with("secret", json!("s3cr3t")), "secret"),
        (with("secret", json!("whsec_c2hvcnQ=")), "secret"),
        (with("secret", json!("whsec_not*base64")), "secret"),
        // Headers.
        (with("headers", json!({"Host": "evil"})), "headers.Host"),
        (
            with("headers", json!({"content-type": "x/y"})),
            "headers.content-type",
        ),
        (
            with("headers", json!({"Webhook-Signature": "v1,x"})),
            "headers.Webhook-Signature",
        ),
        (
            with("headers", json!({"Transfer-Encoding": "chunked"})),
            "headers.Transfer-Encoding",
        ),
        (
            with("headers", json!({"bad name": "x"})),
            "headers.bad name",
        ),
        (
            with("headers", json!({"X-A": "line\nbreak"})),
            "headers.X-A",
        ),
        (with("headers", json!({"X-A": 1})), "headers.X-A"),
        (with("headers", Value::Object(too_many)), "headers"),
        // Statuses, rates, durations, media types.
        (
            with("retryable_statuses", json!([500, 700])),
            "retryable_statuses[1]",
        ),
        (
            with("retryable_statuses", json!([99])),
            "retryable_statuses[0]",
        ),
        (
            with("retryable_statuses", json!([200])),
            "retryable_statuses[0]",
        ),
        (
            with("retryable_statuses", json!(["500"])),
            "retryable_statuses[0]",
        ),
        (with("retryable_statuses", json!(500)), "retryable_statuses"),
        (with("throttle_per_second", json!(0)), "throttle_per_second"),
        (
            with("throttle_per_second", json!(100_001)),
            "throttle_per_second",
        ),
        (with("max_concurrency", json!(0)), "max_concurrency"),
        (with("max_concurrency", json!(1001)), "max_concurrency"),
        (
            with("auto_disable_after", json!("soon")),
            "auto_disable_after",
        ),
        (with("auto_disable_after", json!(-1)), "auto_disable_after"),
        (with("content_type", json!("json")), "content_type"),
        (with("content_type", json!("")), "content_type"),
        // Retry budgets.
        (
            with("retry_budget", json!({"percent": 0, "window": "1m"})),
            "retry_budget.percent",
        ),
        (
            with("retry_budget", json!({"percent": 101, "window": "1m"})),
            "retry_budget.percent",
        ),
        (
            with("retry_budget", json!({"percent": 20, "window": "500ms"})),
            "retry_budget.window",
        ),
        (
            with("retry_budget", json!({"percent": 20, "window": "2d"})),
            "retry_budget.window",
        ),
        (
            with(
                "retry_budget",
                json!({"percent": 20, "window": "1m", "min_retries": 0}),
            ),
            "retry_budget.min_retries",
        ),
        (
            with(
                "retry_budget",
                json!({"percent": 20, "window": "1m", "burst": 3}),
            ),
            "retry_budget.burst",
        ),
        (
            with("retry_budget", json!({"window": "1m"})),
            "retry_budget.percent",
        ),
        (with("retry_budget", json!(20)), "retry_budget"),
    ] {
        server.invalid(path, body, field).await;
    }
    let message = server
        .invalid(path, with("headers", json!({"Host": "x"})), "headers.Host")
        .await;
    assert!(message.contains("reserved"), "{message}");

    // The queue name in the path, ids, and the list's query.
    server
        .invalid(
            "/api/queues/b@d/subscriptions",
            json!({"endpoint": PUBLIC}),
            "queue",
        )
        .await;
    for path in ["/api/subscriptions/x", "/api/deliveries/x"] {
        let error = server.error(Method::GET, path, None, 400).await;
        assert_eq!(error.field.as_deref(), Some("id"), "{path}");
    }
    let sub = id(&subscribe(&server, "q", json!({"endpoint": PUBLIC, "enabled": false})).await);
    for (query, field) in [
        ("status=lost", "status"),
        ("limit=0", "limit"),
        ("colour=red", "query"),
    ] {
        let path = format!("/api/subscriptions/{sub}/deliveries?{query}");
        let error = server.error(Method::GET, &path, None, 400).await;
        assert_eq!(error.field.as_deref(), Some(field), "{path}: {error:?}");
    }
    // An update is held to the same rules, and changes nothing when refused.
    let before = server.get(&format!("/api/subscriptions/{sub}")).await;
    for (body, field) in [
        (json!({"secret": "nope"}), "secret"),
        (
            json!({"headers": {"Connection": "close"}}),
            "headers.Connection",
        ),
        (json!({"endpoint": null, "colour": 1}), "colour"),
    ] {
        let error = server
            .error(
                Method::PATCH,
                &format!("/api/subscriptions/{sub}"),
                Some(body),
                400,
            )
            .await;
        assert_eq!(error.field.as_deref(), Some(field), "{error:?}");
    }
    assert_eq!(
        server.get(&format!("/api/subscriptions/{sub}")).await,
        before
    );
    assert_eq!(
        server.get("/api/subscriptions").await["subscriptions"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "no refused request created anything"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivery_queues_are_hidden_and_deliveries_are_shown_per_subscription() {
    let server = server().await;
    let sub = id(&subscribe(
        &server,
        "orders",
        json!({"endpoint": LOCAL, "enabled": false}),
    )
    .await);
    let first = server
        .enqueue(json!({"queue": "orders", "type": "order.paid", "payload": {"n": 1}}))
        .await;
    let second = server.enqueue(json!({"queue": "orders"})).await;

    // Only the user's queue is listed and counted.
    let queues = server.get("/api/queues").await;
    let names: Vec<&str> = queues["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["orders"], "{queues}");
    let stats = server.stats().await;
    let listed: Vec<&str> = stats["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["queue"].as_str().expect("a name"))
        .collect();
    assert_eq!(listed, ["orders"], "{stats}");
    assert_eq!(server.totals().await, (0, 2, 0, 0, 0));

    // The subscription's deliveries, one per message, waiting while it is disabled.
    let page = server
        .get(&format!("/api/subscriptions/{sub}/deliveries"))
        .await;
    let deliveries = page["deliveries"].as_array().expect("deliveries").clone();
    assert_eq!(deliveries.len(), 2, "{page}");
    assert_eq!(page["next_after"], Value::Null);
    let delivery = deliveries[0]["id"].as_u64().expect("a delivery id");
    assert_eq!(
        deliveries[0],
        json!({"id": delivery, "subscription": sub, "message_id": first, "queue": "orders",
               "type": "order.paid", "status": "ready", "failures": 0,
               "run_at": rfc3339(T0), "created_at": rfc3339(T0), "finished_at": null,
               "dead_reason": null, "policy": null})
    );
    assert_eq!(deliveries[1]["message_id"], second);
    let paged = server
        .get(&format!("/api/subscriptions/{sub}/deliveries?limit=1"))
        .await;
    assert_eq!(paged["next_after"], delivery);
    let rest = server
        .get(&format!(
            "/api/subscriptions/{sub}/deliveries?limit=1&after={delivery}"
        ))
        .await;
    assert_eq!(rest["deliveries"][0]["message_id"], second);
    let dead = server
        .get(&format!("/api/subscriptions/{sub}/deliveries?status=dead"))
        .await;
    assert_eq!(dead["deliveries"], json!([]));

    // One delivery, with its (no) attempts.
    let mut shown = deliveries[0].clone();
    shown["attempts"] = json!([]);
    assert_eq!(
        server.get(&format!("/api/deliveries/{delivery}")).await,
        shown
    );
    assert_eq!(
        server
            .get(&format!("/api/deliveries/{delivery}/attempts"))
            .await,
        json!({"attempts": []})
    );
    assert_eq!(
        server
            .get(&format!("/api/subscriptions/{sub}/attempts"))
            .await,
        json!({"attempts": [], "next_after": null})
    );

    // A message is not a delivery.
    for path in [
        format!("/api/deliveries/{first}"),
        format!("/api/deliveries/{first}/attempts"),
        "/api/deliveries/999999".to_owned(),
    ] {
        let error = server.error(Method::GET, &path, None, 404).await;
        assert!(error.message.contains("delivery"), "{path}: {error:?}");
    }
    let error = server
        .error(
            Method::POST,
            &format!("/api/deliveries/{first}/replay"),
            None,
            404,
        )
        .await;
    assert_eq!(error.code, "not_found");

    // Only dead deliveries are replayed.
    let error = server
        .error(
            Method::POST,
            &format!("/api/deliveries/{delivery}/replay"),
            None,
            409,
        )
        .await;
    assert_eq!(error.code, "not_dead", "{error:?}");
    let none = server
        .post(
            &format!("/api/subscriptions/{sub}/replay"),
            json!({"since": rfc3339(T0), "policy": {"type": "fixed", "delay": "1s"}}),
        )
        .await;
    assert_eq!(none, json!({"replayed": []}));
    let error = server
        .error(
            Method::POST,
            &format!("/api/subscriptions/{sub}/replay"),
            Some(json!({"policy": {"type": "fixed"}})),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("policy.delay"));
    let error = server
        .error(
            Method::POST,
            &format!("/api/subscriptions/{sub}/replay"),
            Some(json!({"ids": [1]})),
            400,
        )
        .await;
    assert_eq!(error.field.as_deref(), Some("ids"));
}

/// Runs the `tenax` binary against `server`; returns stdout, asserting the exit status.
async fn cli(server: &TestServer, args: &[&str], want: i32) -> String {
    let url = server.api.base.clone();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tenax"))
            .args(&args)
            .env("TENAX_URL", url)
            .output()
            .expect("run tenax")
    })
    .await
    .expect("the command runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        output.status.code(),
        Some(want),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_creates_lists_updates_and_deletes() {
    let server = server().await;
    let created = cli(
        &server,
        &[
            "subscriptions",
            "create",
            "orders",
            LOCAL,
            "--disabled",
            "--throttle",
            "5",
            "--header",
            "X-Team=billing",
            "--envelope",
            "zaqar",
            "--retryable-statuses",
            "409,503",
            "--policy",
            r#"{"healthyRetryPolicy": {"numRetries": 3}}"#,
            "--format",
            "json",
        ],
        0,
    )
    .await;
    let view: Value = serde_json::from_str(&created).expect("JSON");
    let sub = id(&view).to_string();
    assert_eq!(view["throttle_per_second"], 5);
    assert_eq!(view["headers"], json!({"X-Team": "billing"}));
    assert_eq!(view["format"], "zaqar");
    assert_eq!(view["retryable_statuses"], json!([409, 503]));
    assert_eq!(view["enabled"], false);

    let list = cli(&server, &["subscriptions", "list", "orders"], 0).await;
    assert!(list.contains(LOCAL), "{list}");
    let shown = cli(&server, &["subscriptions", "show", &sub], 0).await;
    assert!(shown.contains("from the subscription"), "{shown}");
    let updated = cli(
        &server,
        &[
            "subscriptions",
            "update",
            &sub,
            "--no-policy",
            "--enable",
            "--format",
            "json",
        ],
        0,
    )
    .await;
    let updated: Value = serde_json::from_str(&updated).expect("JSON");
    assert_eq!(updated["policy"], Value::Null);
    assert_eq!(updated["enabled"], true);

    // A refused field: exit status 2, and the field named.
    let refused = cli(
        &server,
        &["subscriptions", "update", &sub, "--secret", "x"],
        2,
    )
    .await;
    assert!(refused.is_empty());

    cli(&server, &["subscriptions", "update", &sub, "--disable"], 0).await;
    server.enqueue(json!({"queue": "orders"})).await;
    let deliveries = cli(
        &server,
        &["deliveries", "list", &sub, "--format", "json"],
        0,
    )
    .await;
    let page: Value = serde_json::from_str(&deliveries).expect("JSON");
    let delivery = page["deliveries"][0]["id"].to_string();
    let shown = cli(&server, &["deliveries", "show", &delivery], 0).await;
    assert!(shown.contains("attempt"), "{shown}");
    cli(&server, &["deliveries", "replay", &delivery], 2).await;
    let replayed = cli(
        &server,
        &["deliveries", "replay", "--subscription", &sub],
        0,
    )
    .await;
    assert!(replayed.starts_with("replayed 0"), "{replayed}");

    let deleted = cli(&server, &["subscriptions", "delete", &sub], 0).await;
    assert!(deleted.contains("1 deliveries"), "{deleted}");
    cli(&server, &["subscriptions", "show", &sub], 2).await;
}
