//! The Zaqar v2 API at the HTTP level: every route, every error case with Zaqar's exact status,
//! title and description, project isolation, echo and include_claimed, claims, pop, message
//! TTL expiry, delayed queues and dead letters (with the manual clock), and subscriptions.

use std::time::{Duration, Instant};

use common::{Options, PATIENCE, TestServer, Waiter};
use futures_util::future::join_all;
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::common;
use crate::common::receiver;

const JSON_PATCH: &str = "application/openstack-messaging-v2.0-json-patch";
const CLIENT: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";
const OTHER_CLIENT: &str = "9b2f4c1e-7a3d-4e8b-a6c5-0d1e2f3a4b5c";

/// One answer: status, headers and JSON (`null` for an empty body).
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HeaderMap,
    json: Value,
    raw: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a Zaqar error: the status, `title`, and `description` if given.
    #[track_caller]
    fn error(&self, status: u16, title: &str, description: Option<&str>) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        assert_eq!(self.json["title"], json!(title), "{self:?}");
        if let Some(description) = description {
            assert_eq!(self.json["description"], json!(description), "{self:?}");
        }
    }

    #[track_caller]
    fn ok(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "{self:?}");
        &self.json
    }
}

/// A Zaqar caller: a project and a client id.
#[derive(Debug, Clone)]
struct Zaqar {
    http: reqwest::Client,
    base: String,
    project: Option<String>,
    client: Option<String>,
}

impl Zaqar {
    fn new(server: &TestServer, project: &str, client: &str) -> Self {
        Self {
            http: server.api.http().clone(),
            base: server.api.base.clone(),
            project: Some(project.to_owned()),
            client: Some(client.to_owned()),
        }
    }

    fn with_project(&self, project: Option<&str>) -> Self {
        Self {
            project: project.map(str::to_owned),
            ..self.clone()
        }
    }

    fn with_client(&self, client: Option<&str>) -> Self {
        Self {
            client: client.map(str::to_owned),
            ..self.clone()
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(client) = &self.client {
            request = request.header("Client-ID", client);
        }
        if let Some(project) = &self.project {
            request = request.header("X-Project-ID", project);
        }
        if let Some(body) = body {
            let typed = headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
            if !typed {
                request = request.header("Content-Type", "application/json");
            }
            request = request.body(body);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let raw = response.bytes().await.expect("the body").to_vec();
        let json = if raw.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&raw).unwrap_or_else(|e| {
                panic!(
                    "{method} {path}: not JSON ({e}): {}",
                    String::from_utf8_lossy(&raw)
                )
            })
        };
        Answer {
            status,
            headers,
            json,
            raw,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None, &[]).await
    }

    async fn head(&self, path: &str) -> Answer {
        self.send(Method::HEAD, path, None, &[]).await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.send(Method::DELETE, path, None, &[]).await
    }

    async fn put(&self, path: &str, body: Value) -> Answer {
        self.send(Method::PUT, path, Some(body.to_string().into_bytes()), &[])
            .await
    }

    async fn put_empty(&self, path: &str) -> Answer {
        self.send(Method::PUT, path, None, &[]).await
    }

    async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(Method::POST, path, Some(body.to_string().into_bytes()), &[])
            .await
    }

    async fn post_raw(&self, path: &str, body: &str) -> Answer {
        self.send(Method::POST, path, Some(body.as_bytes().to_vec()), &[])
            .await
    }

    async fn patch(&self, path: &str, body: Value) -> Answer {
        self.send(
            Method::PATCH,
            path,
            Some(body.to_string().into_bytes()),
            &[],
        )
        .await
    }

    async fn patch_metadata(&self, queue: &str, changes: Value) -> Answer {
        self.send(
            Method::PATCH,
            &format!("/v2/queues/{queue}"),
            Some(changes.to_string().into_bytes()),
            &[("Content-Type", JSON_PATCH)],
        )
        .await
    }

    /// Posts messages and returns their ids.
    async fn post_messages(&self, queue: &str, messages: Value) -> Vec<String> {
        let answer = self
            .post(
                &format!("/v2/queues/{queue}/messages"),
                json!({ "messages": messages }),
            )
            .await;
        answer.ok(201)["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|href| {
                href.as_str()
                    .expect("an href")
                    .rsplit('/')
                    .next()
                    .expect("an id")
                    .to_owned()
            })
            .collect()
    }

    /// Claims with ttl and grace (and a limit); returns the answer.
    async fn claim(&self, queue: &str, ttl: u64, grace: u64, limit: Option<u64>) -> Answer {
        let query = limit.map(|l| format!("?limit={l}")).unwrap_or_default();
        self.post(
            &format!("/v2/queues/{queue}/claims{query}"),
            json!({ "ttl": ttl, "grace": grace }),
        )
        .await
    }

    /// Bodies of the queue's messages, listed with echo (and include_claimed if asked).
    async fn bodies(&self, queue: &str, include_claimed: bool) -> Vec<Value> {
        let answer = self
            .get(&format!(
                "/v2/queues/{queue}/messages?echo=true&include_claimed={include_claimed}&limit=20"
            ))
            .await;
        bodies(answer.ok(200))
    }

    async fn stats(&self, queue: &str) -> (u64, u64, u64) {
        let answer = self.get(&format!("/v2/queues/{queue}/stats")).await;
        let m = &answer.ok(200)["messages"];
        let n = |k: &str| m[k].as_u64().expect("a count");
        (n("free"), n("claimed"), n("total"))
    }
}

fn bodies(listing: &Value) -> Vec<Value> {
    listing["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["body"].clone())
        .collect()
}

/// The claim id at the end of a claim's `Location`.
fn claim_id(answer: &Answer) -> String {
    answer
        .header("location")
        .expect("a Location")
        .rsplit('/')
        .next()
        .expect("a claim id")
        .to_owned()
}

/// Zaqar's metadata defaults.
fn defaults() -> Value {
    json!({
        "_max_messages_post_size": 262144,
        "_default_message_ttl": 3600,
        "_default_message_delay": 0,
        "_dead_letter_queue": null,
        "_dead_letter_queue_messages_ttl": null,
        "_max_claim_count": null,
        "_enable_encrypt_messages": false,
    })
}

fn with_defaults(extra: Value) -> Value {
    let mut all = defaults();
    for (k, v) in extra.as_object().expect("an object") {
        all[k] = v.clone();
    }
    all
}

async fn server() -> (TestServer, Zaqar) {
    let server = TestServer::start(Options::manual().flags(&["--allow-private-endpoints"])).await;
    let zaqar = Zaqar::new(&server, "proj-a", CLIENT);
    (server, zaqar)
}

/// Polls until `check` holds (a background change), at most [`PATIENCE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// -- headers ----------------------------------------------------------------------------------

#[tokio::test]
async fn client_id_is_required_and_must_be_a_uuid() {
    let (_server, zaqar) = server().await;
    for path in [
        "/v2/",
        "/v2/ping",
        "/v2/health",
        "/v2/queues",
        "/v2/queues/q/messages",
    ] {
        zaqar.with_client(None).get(path).await.error(
            400,
            "Missing header value",
            Some("The \"Client-Id\" header is required."),
        );
    }
    for bad in [
        "not-a-uuid",
        "1234",
        "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e1",
        "",
        "gggg",
    ] {
        zaqar.with_client(Some(bad)).get("/v2/queues").await.error(
            400,
            "Wrong UUID value",
            Some("Malformed hexadecimal UUID."),
        );
    }
    for good in [
        CLIENT,
        "3E5C6B3A1F0E4A519D3B2B9C0A9F7E11",
        "{3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11}",
        "urn:uuid:3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11",
    ] {
        zaqar
            .with_client(Some(good))
            .get("/v2/queues")
            .await
            .ok(200);
    }
}

#[tokio::test]
async fn project_id_is_required_and_checked() {
    let (_server, zaqar) = server().await;
    zaqar.with_project(None).get("/v2/queues").await.error(
        400,
        "Project-Id Missing",
        Some("The header X-PROJECT-ID was missing"),
    );
    zaqar.with_project(Some("")).get("/v2/queues").await.error(
        400,
        "Empty project header not allowed",
        Some("X-PROJECT-ID cannot be an empty string. Specify the right header X-PROJECT-ID and retry."),
    );
    let long = "p".repeat(257);
    zaqar
        .with_project(Some(&long))
        .put_empty("/v2/queues/q")
        .await
        .error(
            400,
            "Invalid queue identification",
            Some("The format of the submitted queue name or project id is not valid."),
        );
    // Any other id up to 256 characters is Zaqar's to accept, and so Tenax's.
    for project in [
        "a:b",
        "JAM Project",
        &"p".repeat(191),
        &"p".repeat(256),
        ":x:",
    ] {
        let zaqar = zaqar.with_project(Some(project));
        zaqar.put_empty("/v2/queues/q").await.ok(201);
        zaqar.post_messages("q", json!([{"body": project}])).await;
        assert_eq!(zaqar.bodies("q", true).await, [json!(project)], "{project}");
        let listed = zaqar.get("/v2/queues").await;
        assert_eq!(listed.ok(200)["queues"][0]["name"], json!("q"), "{project}");
    }
}

#[tokio::test]
async fn projects_of_any_characters_are_separate_and_keep_their_native_names() {
    let (server, zaqar) = server().await;
    // Ids Tenax took before keep their native names; others are escaped after a leading `:`.
    for (project, native) in [
        ("proj.1", "proj.1:orders"),
        ("JAM Project", ":JAM.20Project:orders"),
        ("a:b", ":a.3ab:orders"),
        ("JAM.20Project", "JAM.20Project:orders"),
    ] {
        let zaqar = zaqar.with_project(Some(project));
        zaqar
            .put("/v2/queues/orders", json!({"owner": project}))
            .await
            .ok(201);
        let path = format!("/api/queues/{}", native.replace(':', "%3A"));
        let shown = zaqar.get(&path).await;
        assert_eq!(shown.ok(200)["name"], json!(native), "{project}");
    }
    // Each project sees its own queue only, with its own metadata.
    for project in ["proj.1", "JAM Project", "a:b", "JAM.20Project"] {
        let zaqar = zaqar.with_project(Some(project));
        let metadata = zaqar.get("/v2/queues/orders").await;
        assert_eq!(metadata.ok(200)["owner"], json!(project));
        let listed = zaqar.get("/v2/queues?detailed=true").await;
        let queues = listed.ok(200)["queues"].as_array().unwrap().clone();
        assert_eq!(queues.len(), 1, "{project}: {queues:?}");
        assert_eq!(queues[0]["metadata"]["owner"], json!(project));
    }
    // A header that is not UTF-8 is read as Latin-1, as Zaqar (WSGI) reads it: python-zaqarclient
    // sends `café` as the byte E9.
    let latin1 = reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap();
    let answer = server
        .api
        .http()
        .put(format!("{}/v2/queues/orders", server.api.base))
        .header("Client-ID", CLIENT)
        .header("X-Project-ID", latin1)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201);
    let native = zaqar.get("/api/queues/%3Acaf.c3.a9%3Aorders").await;
    assert_eq!(native.ok(200)["name"], json!(":caf.c3.a9:orders"));
}

#[tokio::test]
async fn accept_and_content_type_are_checked() {
    let (_server, zaqar) = server().await;
    zaqar
        .send(Method::GET, "/v2/queues", None, &[("Accept", "text/html")])
        .await
        .error(406, "406 Not Acceptable", None);
    zaqar
        .send(
            Method::GET,
            "/v2/queues",
            None,
            &[("Accept", "application/json")],
        )
        .await
        .ok(200);
    zaqar
        .send(
            Method::POST,
            "/v2/queues/q/messages",
            Some(b"a=1".to_vec()),
            &[("Content-Type", "application/x-www-form-urlencoded")],
        )
        .await
        .error(400, "Invalid Content-Type", None);
}

// -- home, ping, health, unknown paths --------------------------------------------------------

#[tokio::test]
async fn home_ping_health_and_unknown_paths() {
    let (_server, zaqar) = server().await;
    let home = zaqar.get("/v2/").await;
    assert_eq!(home.status, 200);
    assert_eq!(home.header("content-type"), Some("application/json-home"));
    assert_eq!(home.header("cache-control"), Some("max-age=86400"));
    let resources = home.json["resources"].as_object().expect("resources");
    for rel in [
        "rel/queues",
        "rel/queue",
        "rel/queue_stats",
        "rel/queue_purge",
        "rel/messages",
        "rel/post_messages",
        "rel/messages_delete",
        "rel/message_delete",
        "rel/message_get",
        "rel/claim",
        "rel/post_claim",
        "rel/patch_claim",
        "rel/delete_claim",
        "rel/subscriptions_get",
        "rel/subscriptions_post",
        "rel/subscription",
        "rel/subscription_patch",
        "rel/ping",
        "rel/health",
    ] {
        let resource = &resources[rel];
        let template = resource["href-template"]
            .as_str()
            .or(resource["href"].as_str())
            .unwrap_or_else(|| panic!("{rel} has an href"));
        assert!(template.starts_with("/v2/"), "{rel}: {template}");
        assert!(resource["hints"]["allow"].is_array(), "{rel}");
    }
    assert_eq!(
        resources["rel/messages"]["href-template"],
        json!("/v2/queues/{queue_name}/messages{?marker,limit,echo,include_claimed}")
    );

    let ping = zaqar.get("/v2/ping").await;
    assert_eq!((ping.status, ping.raw.len()), (204, 0));
    assert_eq!(zaqar.head("/v2/ping").await.status, 204);

    zaqar.post_messages("q", json!([{"body": 1}])).await;
    let health = zaqar.get("/v2/health").await;
    assert_eq!(health.ok(200)["storage_reachable"], json!(true));
    assert_eq!(
        health.json["message_volume"],
        json!({"free": 1, "claimed": 0, "total": 1})
    );
    // Another project's messages are its own business.
    let other = zaqar.with_project(Some("another-project"));
    other
        .post_messages("q", json!([{"body": 1}, {"body": 2}]))
        .await;
    let health = zaqar.get("/v2/health").await;
    assert_eq!(health.json["message_volume"]["total"], json!(1));
    let theirs = other.get("/v2/health").await;
    assert_eq!(theirs.json["message_volume"]["total"], json!(2));

    zaqar
        .get("/v2/nothing-here")
        .await
        .error(404, "404 Not Found", None);
    zaqar
        .get("/v2/queues/q/messages/1/more")
        .await
        .error(404, "404 Not Found", None);
    let wrong = zaqar.post("/v2/queues/q/stats", json!({})).await;
    wrong.error(405, "405 Method Not Allowed", None);
    assert_eq!(wrong.header("allow"), Some("GET"));
}

// -- queues -----------------------------------------------------------------------------------

#[tokio::test]
async fn put_creates_then_answers_204_without_changing_metadata() {
    let (_server, zaqar) = server().await;
    let created = zaqar
        .put("/v2/queues/orders", json!({"color": "blue"}))
        .await;
    assert_eq!(created.status, 201);
    assert_eq!(created.header("location"), Some("/v2/queues/orders"));
    assert!(created.raw.is_empty());
    let again = zaqar
        .put("/v2/queues/orders", json!({"color": "red"}))
        .await;
    assert_eq!(again.status, 204);
    assert_eq!(again.header("location"), Some("/v2/queues/orders"));
    assert_eq!(
        *zaqar.get("/v2/queues/orders").await.ok(200),
        with_defaults(json!({"color": "blue"}))
    );
    assert_eq!(zaqar.put_empty("/v2/queues/plain").await.status, 201);
    assert_eq!(*zaqar.get("/v2/queues/plain").await.ok(200), defaults());
    // A queue never created has the defaults too.
    assert_eq!(*zaqar.get("/v2/queues/never").await.ok(200), defaults());
}

#[tokio::test]
async fn queue_names_follow_zaqar() {
    let (_server, zaqar) = server().await;
    for name in ["has%20space", &"a".repeat(65), "caf%C3%A9", "semi;colon"] {
        zaqar.put_empty(&format!("/v2/queues/{name}")).await.error(
            400,
            "Invalid queue identification",
            Some("The format of the submitted queue name or project id is not valid."),
        );
    }
    for name in ["a", "A-b_c.9", &"x".repeat(64)] {
        assert_eq!(
            zaqar.put_empty(&format!("/v2/queues/{name}")).await.status,
            201,
            "{name}"
        );
    }
}

#[tokio::test]
async fn put_bodies_and_reserved_metadata_are_checked() {
    let (_server, zaqar) = server().await;
    zaqar.put("/v2/queues/q", json!([1])).await.error(
        400,
        "Invalid request body",
        Some("Document type not supported."),
    );
    zaqar
        .send(Method::PUT, "/v2/queues/q", Some(b"{bad".to_vec()), &[])
        .await
        .error(
            400,
            "Invalid request body",
            Some("Request body could not be parsed."),
        );
    zaqar
        .put("/v2/queues/q", json!({"big": "x".repeat(65536)}))
        .await
        .error(
            400,
            "Invalid API request",
            Some("Queue metadata is too large. Max size: 65536"),
        );
    let cases = [
        (
            json!({"_default_message_ttl": 59}),
            "_default_message_ttl can not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"_default_message_ttl": "3600"}),
            "_default_message_ttl must be integer.",
        ),
        (
            json!({"_max_messages_post_size": 0}),
            "_max_messages_post_size can not exceed 262144,  and must be at least greater than 0.",
        ),
        (
            json!({"_max_messages_post_size": 262145}),
            "_max_messages_post_size can not exceed 262144,  and must be at least greater than 0.",
        ),
        (
            json!({"_default_message_delay": 901}),
            "The TTL can not exceed 900 seconds, and must be at least 0 seconds long.",
        ),
        (
            json!({"_max_claim_count": "x"}),
            "_max_claim_count must be integer.",
        ),
        (
            json!({"_dead_letter_queue_messages_ttl": 59}),
            "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"_retry_policy": "linear"}),
            "retry_policy must be a dict.",
        ),
        (
            json!({"_retry_policy": {"retry_backoff_function": "fibonacci"}}),
            "invalid retry_backoff_function.",
        ),
        (
            json!({"_retry_policy": {"minimum_delay": 1, "maximum_delay": 5}}),
            "invalid minimum_delay and maximum_delay.",
        ),
        (
            json!({"_retry_policy": {"minimum_delay": 30, "maximum_delay": 5}}),
            "minimum_delay must less than maximum_delay.",
        ),
        (
            json!({"_retry_policy": {"minimum_delay": 1.5, "maximum_delay": 15}}),
            "Retry policy: minimum_delay must be a integer.",
        ),
        (
            json!({"_enable_encrypt_messages": "yes"}),
            "_enable_encrypt_messages must be boolean.",
        ),
    ];
    for (metadata, description) in cases {
        zaqar.put("/v2/queues/q", metadata.clone()).await.error(
            400,
            "Invalid API request",
            Some(description),
        );
    }
    // Tenax's own rule names the key.
    for metadata in [json!({"_dead_letter_queue": "bad name"})] {
        let answer = zaqar.put("/v2/queues/q", metadata.clone()).await;
        answer.error(400, "Invalid API request", None);
        let key = metadata.as_object().unwrap().keys().next().unwrap().clone();
        assert!(
            answer.json["description"]
                .as_str()
                .unwrap()
                .starts_with(&key),
            "{answer:?}"
        );
    }
    // Nothing was created by the refused requests.
    assert_eq!(zaqar.head("/v2/queues/q").await.status, 404);
}

/// `_enable_encrypt_messages: true` is kept and shown back as Zaqar does; the queue's messages
/// read back plain (that they are stored sealed is `tests/it/encrypted_queues.rs`'s).
#[tokio::test]
async fn encrypted_queues_are_shown_back_and_read_plain() {
    let (server, zaqar) = server().await;
    zaqar
        .put(
            "/v2/queues/enc",
            json!({"_enable_encrypt_messages": true, "a": 1}),
        )
        .await
        .ok(201);
    let shown = zaqar.get("/v2/queues/enc").await;
    assert_eq!(
        shown.ok(200),
        &with_defaults(json!({"_enable_encrypt_messages": true, "a": 1}))
    );
    let native = server.get("/api/queues/proj-a:enc").await;
    assert_eq!(native["encrypt_payloads"], json!(true), "{native}");
    let body = json!({"card": "4111 1111 1111 1111", "nested": [1, {"x": null}]});
    let posted = zaqar
        .post(
            "/v2/queues/enc/messages",
            json!({"messages": [{"body": body, "ttl": 300}]}),
        )
        .await;
    let id = posted.ok(201)["resources"][0]
        .as_str()
        .and_then(|href| href.rsplit('/').next())
        .expect("a message id")
        .to_owned();
    let one = zaqar.get(&format!("/v2/queues/enc/messages/{id}")).await;
    assert_eq!(one.ok(200)["body"], body);
    // Turned off: the message posted before still reads.
    zaqar
        .patch_metadata(
            "enc",
            json!([{"op": "replace", "path": "/metadata/_enable_encrypt_messages", "value": false}]),
        )
        .await
        .ok(200);
    assert_eq!(
        zaqar.get("/v2/queues/enc").await.ok(200)["_enable_encrypt_messages"],
        json!(false)
    );
    let native = server.get("/api/queues/proj-a:enc").await;
    assert!(native.get("encrypt_payloads").is_none(), "{native}");
    let claimed = zaqar
        .post("/v2/queues/enc/claims", json!({"ttl": 60, "grace": 60}))
        .await;
    assert_eq!(claimed.ok(201)["messages"][0]["body"], body, "{claimed:?}");
}

#[tokio::test]
async fn head_says_whether_a_queue_exists() {
    let (_server, zaqar) = server().await;
    zaqar.head("/v2/queues/q").await.error_without_body(404);
    zaqar.put_empty("/v2/queues/q").await;
    assert_eq!(zaqar.head("/v2/queues/q").await.status, 204);
    zaqar.post_messages("lazy", json!([{"body": 1}])).await;
    assert_eq!(zaqar.head("/v2/queues/lazy").await.status, 204);
}

trait NoBody {
    fn error_without_body(&self, status: u16);
}

impl NoBody for Answer {
    #[track_caller]
    fn error_without_body(&self, status: u16) {
        assert_eq!(self.status, status, "{self:?}");
        assert!(self.raw.is_empty(), "a HEAD answer has no body: {self:?}");
    }
}

#[tokio::test]
async fn patch_adds_replaces_and_removes_metadata() {
    let (_server, zaqar) = server().await;
    zaqar
        .put("/v2/queues/q", json!({"a": 1, "_default_message_ttl": 120}))
        .await;
    let answer = zaqar
        .patch_metadata(
            "q",
            json!([
                {"op": "replace", "path": "/metadata/a", "value": 2},
                {"op": "add", "path": "/metadata/b", "value": {"x": 1}},
                {"op": "remove", "path": "/metadata/_default_message_ttl"},
                {"op": "replace", "path": "/metadata/_max_claim_count", "value": 5},
            ]),
        )
        .await;
    assert_eq!(
        *answer.ok(200),
        with_defaults(json!({"a": 2, "b": {"x": 1}, "_max_claim_count": 5}))
    );
    assert_eq!(
        *zaqar.get("/v2/queues/q").await.ok(200),
        with_defaults(json!({"a": 2, "b": {"x": 1}, "_max_claim_count": 5}))
    );
    // Removing a reserved key that is not stored is fine.
    zaqar
        .patch_metadata(
            "q",
            json!([{"op": "remove", "path": "/metadata/_dead_letter_queue"}]),
        )
        .await
        .ok(200);
}

#[tokio::test]
async fn patch_errors_leave_metadata_unchanged() {
    let (_server, zaqar) = server().await;
    zaqar.put("/v2/queues/q", json!({"a": 1})).await;
    let cases = [
        (
            json!([{"op": "replace", "path": "/metadata/absent", "value": 1}]),
            409,
            "Resource conflict",
            "Can't replace non-existent object absent.",
        ),
        (
            json!([{"op": "remove", "path": "/metadata/absent"}]),
            409,
            "Resource conflict",
            "Can't remove non-existent object absent.",
        ),
        (
            json!([{"op": "move", "path": "/metadata/a"}]),
            400,
            "Invalid request body",
            "Invalid operation: `move`. It must be one of the following: add, remove, replace.",
        ),
        (
            json!([{"path": "/metadata/a", "value": 1}]),
            400,
            "Invalid request body",
            "Unable to find `op` in JSON Schema change. It must be one of the following: add, remove, replace.",
        ),
        (
            json!([{"op": "add", "value": 1}]),
            400,
            "Invalid request body",
            "Unable to find 'path' in JSON Schema change",
        ),
        (
            json!([{"op": "add", "path": "/color", "value": 1}]),
            400,
            "Invalid request body",
            "Invalid JSON pointer for this resource: '/color, e.g /metadata/key'",
        ),
        (
            json!([{"op": "add", "path": "/other/a", "value": 1}]),
            400,
            "Invalid request body",
            "The root of path must be metadata, e.g /metadata/key.",
        ),
        (
            json!([{"op": "add", "path": "/metadata/a/b", "value": 1}]),
            400,
            "Invalid request body",
            "Invalid JSON pointer for this resource: '/metadata/a/b, e.g /metadata/key'",
        ),
        (
            json!([{"op": "add", "path": "metadata/a", "value": 1}]),
            400,
            "Invalid request body",
            "Pointer `metadata/a` does not start with \"/\".",
        ),
        (
            json!([{"op": "add", "path": "/metadata/a"}]),
            400,
            "Invalid request body",
            "Operation \"add\" requires a member named \"value\".",
        ),
        (
            json!([{"op": "add", "path": "/metadata/_default_message_ttl", "value": 30}]),
            400,
            "Invalid request body",
            "_default_message_ttl can not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!([1]),
            400,
            "Invalid request body",
            "Operations must be JSON objects.",
        ),
        (
            json!({"op": "add"}),
            400,
            "Invalid request body",
            "Request body must be a JSON array of operation objects.",
        ),
    ];
    for (changes, status, title, description) in cases {
        zaqar
            .patch_metadata("q", changes.clone())
            .await
            .error(status, title, Some(description));
        assert_eq!(
            *zaqar.get("/v2/queues/q").await.ok(200),
            with_defaults(json!({"a": 1})),
            "{changes}"
        );
    }
    let wrong_type = zaqar
        .patch(
            "/v2/queues/q",
            json!([{"op": "add", "path": "/metadata/b", "value": 1}]),
        )
        .await;
    wrong_type.error(
        415,
        "415 Unsupported Media Type",
        Some(
            "Accepted media type for PATCH: {'Accept-Patch': 'application/openstack-messaging-v2.0-json-patch'}.",
        ),
    );
    assert_eq!(wrong_type.header("accept-patch"), Some(JSON_PATCH));
    zaqar
        .send(
            Method::PATCH,
            "/v2/queues/q",
            None,
            &[("Content-Type", JSON_PATCH)],
        )
        .await
        .error(
            400,
            "Invalid request body",
            Some("PATCH body could not be empty for update."),
        );
    zaqar
        .send(
            Method::PATCH,
            "/v2/queues/q",
            Some(b"{bad".to_vec()),
            &[("Content-Type", JSON_PATCH)],
        )
        .await
        .error(
            400,
            "Invalid request body",
            Some("Request body could not be parsed."),
        );
    zaqar
        .patch_metadata(
            "never",
            json!([{"op": "add", "path": "/metadata/a", "value": 1}]),
        )
        .await
        .error(
            404,
            "Not found",
            Some("Queue never does not exist for project proj-a"),
        );
}

#[tokio::test]
async fn list_pages_by_name_with_limit_marker_detailed_and_count() {
    let (_server, zaqar) = server().await;
    let empty = zaqar.get("/v2/queues").await;
    assert_eq!(*empty.ok(200), json!({"queues": [], "links": []}));
    for name in ["charlie", "alpha", "bravo", "delta", "echo"] {
        zaqar
            .put(
                &format!("/v2/queues/{name}"),
                json!({"n": name.len(), "team": "ops"}),
            )
            .await;
    }
    zaqar.put("/v2/queues/other", json!({"team": "dev"})).await;
    let first = zaqar.get("/v2/queues?limit=2").await;
    assert_eq!(
        *first.ok(200),
        json!({
            "queues": [
                {"name": "alpha", "href": "/v2/queues/alpha"},
                {"name": "bravo", "href": "/v2/queues/bravo"},
            ],
            "links": [{"rel": "next", "href": "/v2/queues?limit=2&marker=bravo"}],
        })
    );
    let second = zaqar.get("/v2/queues?limit=2&marker=bravo").await;
    assert_eq!(
        second.ok(200)["links"],
        json!([{"rel": "next", "href": "/v2/queues?marker=delta&limit=2"}])
    );
    let after_last = zaqar.get("/v2/queues?marker=zulu").await;
    assert_eq!(*after_last.ok(200), json!({"queues": [], "links": []}));

    let detailed = zaqar
        .get("/v2/queues?detailed=true&with_count=true&limit=1")
        .await;
    assert_eq!(
        *detailed.ok(200),
        json!({
            "queues": [{
                "name": "alpha", "href": "/v2/queues/alpha",
                "metadata": with_defaults(json!({"n": 5, "team": "ops"})),
            }],
            "links": [{"rel": "next",
                       "href": "/v2/queues?limit=1&detailed=true&with_count=true&marker=alpha"}],
            "count": 6,
        })
    );
    let named = zaqar.get("/v2/queues?name=ha").await;
    let names: Vec<&str> = named.ok(200)["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "charlie"]);
    let filtered = zaqar.get("/v2/queues?team=dev").await;
    assert_eq!(filtered.ok(200)["queues"][0]["name"], json!("other"));
    let by_number = zaqar.get("/v2/queues?n=4").await;
    assert_eq!(by_number.ok(200)["queues"][0]["name"], json!("echo"));
    for limit in ["0", "21", "-1"] {
        zaqar.get(&format!("/v2/queues?limit={limit}")).await.error(
            400,
            "Invalid API request",
            Some("Limit must be at least 1 and no greater than 20."),
        );
    }
    zaqar.get("/v2/queues?limit=ten").await.error(
        400,
        "Invalid parameter",
        Some("The \"limit\" parameter is invalid. The value must be an integer."),
    );
    zaqar.get("/v2/queues?detailed=maybe").await.error(
        400,
        "Invalid parameter",
        Some("The \"detailed\" parameter is invalid. The value of the parameter must be \"true\" or \"false\"."),
    );
}

#[tokio::test]
async fn list_defaults_to_ten_queues() {
    let (_server, zaqar) = server().await;
    for i in 0..12 {
        zaqar.put_empty(&format!("/v2/queues/many-{i:02}")).await;
    }
    let page = zaqar.get("/v2/queues").await;
    assert_eq!(page.ok(200)["queues"].as_array().unwrap().len(), 10);
}

#[tokio::test]
async fn stats_count_free_claimed_and_total_with_oldest_and_newest() {
    let (_server, zaqar) = server().await;
    assert_eq!(
        *zaqar.get("/v2/queues/never/stats").await.ok(200),
        json!({"messages": {"claimed": 0, "free": 0, "total": 0}})
    );
    let ids = zaqar
        .post_messages(
            "q",
            json!([{"ttl": 300, "body": 0}, {"body": 1}, {"body": 2}]),
        )
        .await;
    zaqar.claim("q", 60, 60, Some(1)).await.ok(201);
    let stats = zaqar.get("/v2/queues/q/stats").await;
    let m = &stats.ok(200)["messages"];
    assert_eq!(
        (m["claimed"].clone(), m["free"].clone(), m["total"].clone()),
        (json!(1), json!(2), json!(3))
    );
    assert_eq!(
        m["oldest"],
        json!({"age": 0, "created": "2027-01-15T08:00:00Z", "href": format!("/v2/queues/q/messages/{}", ids[0])})
    );
    assert_eq!(
        m["newest"]["href"],
        json!(format!("/v2/queues/q/messages/{}", ids[2]))
    );
}

#[tokio::test]
async fn purge_deletes_messages_subscriptions_or_both() {
    let (_server, zaqar) = server().await;
    let subscribe = |queue: &'static str| {
        let zaqar = zaqar.clone();
        async move {
            zaqar
                .post(
                    &format!("/v2/queues/{queue}/subscriptions"),
                    json!({"subscriber": "http://127.0.0.1:9/hook"}),
                )
                .await
                .ok(201);
        }
    };
    zaqar
        .post_messages("q", json!([{"body": 1}, {"body": 2}]))
        .await;
    subscribe("q").await;
    zaqar
        .post(
            "/v2/queues/q/purge",
            json!({"resource_types": ["messages"]}),
        )
        .await
        .ok(204);
    assert_eq!(zaqar.stats("q").await, (0, 0, 0));
    let subscriptions = zaqar.get("/v2/queues/q/subscriptions").await;
    assert_eq!(
        subscriptions.ok(200)["subscriptions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    zaqar.post_messages("q", json!([{"body": 3}])).await;
    assert_eq!(
        zaqar
            .send(Method::POST, "/v2/queues/q/purge", None, &[])
            .await
            .status,
        204
    );
    assert_eq!(zaqar.stats("q").await, (0, 0, 0));
    let subscriptions = zaqar.get("/v2/queues/q/subscriptions").await;
    assert_eq!(
        *subscriptions.ok(200),
        json!({"subscriptions": [], "links": []})
    );
    // The queue itself stays.
    assert_eq!(zaqar.head("/v2/queues/q").await.status, 204);

    zaqar.post("/v2/queues/q/purge", json!({})).await.error(
        400,
        "Invalid API request",
        Some("Post body must contain key \"resource_types\"."),
    );
    zaqar
        .post("/v2/queues/q/purge", json!({"resource_types": ["claims"]}))
        .await
        .error(
            400,
            "Invalid API request",
            Some("Resource types must be a sub set of {'subscriptions', 'messages'}."),
        );
}

#[tokio::test]
async fn delete_removes_the_queue_and_its_messages() {
    let (_server, zaqar) = server().await;
    zaqar.post_messages("q", json!([{"body": "gone"}])).await;
    assert_eq!(zaqar.delete("/v2/queues/q").await.status, 204);
    assert_eq!(zaqar.bodies("q", true).await, Vec::<Value>::new());
    assert_eq!(
        *zaqar.get("/v2/queues").await.ok(200),
        json!({"queues": [], "links": []})
    );
    assert_eq!(zaqar.delete("/v2/queues/never").await.status, 204);
}

// -- messages ---------------------------------------------------------------------------------

#[tokio::test]
async fn post_answers_hrefs_and_a_location_and_creates_the_queue() {
    let (_server, zaqar) = server().await;
    let answer = zaqar
        .post(
            "/v2/queues/q/messages",
            json!({"messages": [{"ttl": 300, "body": {"a": 1}}, {"body": "two"}]}),
        )
        .await;
    let hrefs: Vec<String> = answer.ok(201)["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap().to_owned())
        .collect();
    let ids: Vec<&str> = hrefs
        .iter()
        .map(|h| h.strip_prefix("/v2/queues/q/messages/").expect("an href"))
        .collect();
    assert!(ids.iter().all(|id| id.parse::<u64>().is_ok()), "{ids:?}");
    assert_eq!(
        answer.header("location"),
        Some(format!("/v2/queues/q/messages?ids={}", ids.join(",")).as_str())
    );
    let names = zaqar.get("/v2/queues").await;
    assert_eq!(names.ok(200)["queues"][0]["name"], json!("q"));
    let one = zaqar.get(&hrefs[0]).await;
    assert_eq!(
        *one.ok(200),
        json!({"id": ids[0], "href": hrefs[0], "ttl": 300, "age": 0, "body": {"a": 1}})
    );
    assert_eq!(zaqar.get(&hrefs[1]).await.json["ttl"], json!(3600));
}

#[tokio::test]
async fn invalid_posts_are_400() {
    let (_server, zaqar) = server().await;
    let cases = [
        (
            json!({"messages": []}),
            "Invalid API request",
            "No messages to enqueu.",
        ),
        (
            json!({"other": []}),
            "Invalid API request",
            "No messages were found in the request body.",
        ),
        (
            json!([{"body": 1}]),
            "Invalid API request",
            "No messages were found in the request body.",
        ),
        (
            json!({"messages": [{"ttl": 60}]}),
            "Invalid request body",
            "Missing \"body\" field.",
        ),
        (
            json!({"messages": [{"ttl": "60", "body": 1}]}),
            "Invalid request body",
            "The value of the \"ttl\" field must be a int.",
        ),
        (
            json!({"messages": [{"ttl": 59, "body": 1}]}),
            "Invalid API request",
            "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"messages": [{"ttl": 1209601, "body": 1}]}),
            "Invalid API request",
            "The TTL for a message may not exceed 1209600 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"messages": {"body": 1}}),
            "Invalid request body",
            "Document type not supported.",
        ),
        (
            json!({"messages": [5]}),
            "Invalid request body",
            "Document type not supported.",
        ),
    ];
    for (document, title, description) in cases {
        zaqar
            .post("/v2/queues/q/messages", document)
            .await
            .error(400, title, Some(description));
    }
    for raw in ["{not json", "", "3"] {
        zaqar.post_raw("/v2/queues/q/messages", raw).await.error(
            400,
            "Invalid request body",
            Some("Request body could not be parsed."),
        );
    }
    zaqar
        .post(
            "/v2/queues/q/messages",
            json!({"messages": [{"ttl": 60, "body": "x".repeat(262_144)}]}),
        )
        .await
        .error(
            400,
            "Invalid API request",
            Some("Message collection size is too large. Max size 262144"),
        );
    // Nothing was posted, and no queue was created.
    assert_eq!(zaqar.head("/v2/queues/q").await.status, 404);
}

#[tokio::test]
async fn queue_metadata_sets_post_size_default_ttl_and_delay() {
    let (server, zaqar) = server().await;
    zaqar
        .put(
            "/v2/queues/q",
            json!({"_max_messages_post_size": 1000, "_default_message_ttl": 120}),
        )
        .await;
    zaqar
        .post(
            "/v2/queues/q/messages",
            json!({"messages": [{"body": "x".repeat(2000)}]}),
        )
        .await
        .error(
            400,
            "Invalid API request",
            Some("Message collection size is too large. The max size for current queue is 1000. It is calculated by max size = min(max_messages_post_size_config: 262144, max_messages_post_size_queue: 1000)."),
        );
    let [id] = zaqar
        .post_messages("q", json!([{"body": "small"}]))
        .await
        .try_into()
        .unwrap();
    assert_eq!(
        zaqar.get(&format!("/v2/queues/q/messages/{id}")).await.json["ttl"],
        json!(120)
    );

    // A queue with a default delay hides new messages until it passes.
    zaqar
        .put("/v2/queues/slow", json!({"_default_message_delay": 30}))
        .await;
    zaqar
        .post_messages(
            "slow",
            json!([{"body": "later"}, {"body": "now", "delay": 0}]),
        )
        .await;
    assert_eq!(zaqar.bodies("slow", false).await, [json!("now")]);
    let delayed = zaqar
        .get("/v2/queues/slow/messages?echo=true&include_delayed=true")
        .await;
    assert_eq!(bodies(delayed.ok(200)), [json!("later"), json!("now")]);
    let claimed = zaqar.claim("slow", 60, 60, None).await;
    assert_eq!(bodies(claimed.ok(201)), [json!("now")]);
    assert_eq!(zaqar.claim("slow", 60, 60, None).await.status, 204);
    server.advance(Duration::from_secs(31));
    eventually("the delayed message becomes visible", || {
        let zaqar = zaqar.clone();
        async move { zaqar.bodies("slow", false).await == [json!("later")] }
    })
    .await;
    zaqar
        .post(
            "/v2/queues/slow/messages",
            json!({"messages": [{"body": 1, "delay": 901}]}),
        )
        .await
        .error(
            400,
            "Invalid API request",
            Some("The Delay TTL for a message may not exceed 900 seconds,and must be at least 0 seconds long."),
        );
    // A queue without a default delay does not read `delay`, as Zaqar (and says so in links).
    zaqar
        .post_messages("plain", json!([{"body": "at once", "delay": 901}]))
        .await;
    let listed = zaqar.get("/v2/queues/plain/messages?echo=true").await;
    assert_eq!(bodies(listed.ok(200)), [json!("at once")]);
    assert!(
        listed.json["links"][0]["href"]
            .as_str()
            .unwrap()
            .contains("include_delayed=true")
    );
    assert_eq!(zaqar.claim("plain", 60, 60, None).await.status, 201);
}

#[tokio::test]
async fn listing_hides_own_messages_unless_echo_and_claimed_unless_asked() {
    let (_server, zaqar) = server().await;
    let other = zaqar.with_client(Some(OTHER_CLIENT));
    let ids = zaqar
        .post_messages(
            "q",
            json!([{"ttl": 300, "body": "claimed"}, {"body": "free"}]),
        )
        .await;
    assert_eq!(
        *zaqar.get("/v2/queues/q/messages").await.ok(200),
        json!({"messages": [], "links": []})
    );
    // The same UUID spelt otherwise is the same client.
    let dashless = zaqar.with_client(Some("3E5C6B3A1F0E4A519D3B2B9C0A9F7E11"));
    assert_eq!(
        *dashless.get("/v2/queues/q/messages").await.ok(200),
        json!({"messages": [], "links": []})
    );
    let listed = other.get("/v2/queues/q/messages").await;
    assert_eq!(bodies(listed.ok(200)), [json!("claimed"), json!("free")]);
    assert_eq!(
        listed.json["messages"][0],
        json!({"id": ids[0], "href": format!("/v2/queues/q/messages/{}", ids[0]),
               "ttl": 300, "age": 0, "body": "claimed"})
    );
    let claim = zaqar.claim("q", 60, 60, Some(1)).await;
    let claim = claim_id(&claim);
    assert_eq!(zaqar.bodies("q", false).await, [json!("free")]);
    let all = zaqar
        .get("/v2/queues/q/messages?echo=true&include_claimed=true")
        .await;
    assert_eq!(bodies(all.ok(200)), [json!("claimed"), json!("free")]);
    assert_eq!(
        all.json["messages"][0]["href"],
        json!(format!("/v2/queues/q/messages/{}?claim_id={claim}", ids[0]))
    );
    for (value, shown) in [("True", 2), ("yes", 2), ("1", 2), ("False", 0), ("no", 0)] {
        let listed = zaqar
            .get(&format!(
                "/v2/queues/q/messages?include_claimed=true&echo={value}"
            ))
            .await;
        assert_eq!(bodies(listed.ok(200)).len(), shown, "{value}");
    }
}

#[tokio::test]
async fn listing_pages_follow_next_links() {
    let (_server, zaqar) = server().await;
    zaqar
        .post_messages(
            "q",
            json!((0..12).map(|i| json!({"body": i})).collect::<Vec<_>>()),
        )
        .await;
    let first = zaqar.get("/v2/queues/q/messages?limit=5&echo=true").await;
    assert_eq!(
        bodies(first.ok(200)),
        (0..5).map(|i| json!(i)).collect::<Vec<_>>()
    );
    let next = first.json["links"][0]["href"].as_str().unwrap().to_owned();
    assert!(
        next.starts_with("/v2/queues/q/messages?limit=5&echo=true&include_delayed=true&marker="),
        "{next}"
    );
    let second = zaqar.get(&next).await;
    assert_eq!(
        bodies(second.ok(200)),
        (5..10).map(|i| json!(i)).collect::<Vec<_>>()
    );
    let third = zaqar
        .get(second.json["links"][0]["href"].as_str().unwrap())
        .await;
    assert_eq!(bodies(third.ok(200)), [json!(10), json!(11)]);
    let after = zaqar
        .get(third.json["links"][0]["href"].as_str().unwrap())
        .await;
    assert_eq!(*after.ok(200), json!({"messages": [], "links": []}));
    let default_page = zaqar.get("/v2/queues/q/messages?echo=true").await;
    assert_eq!(bodies(default_page.ok(200)).len(), 10);
    let not_a_marker = zaqar
        .get("/v2/queues/q/messages?echo=true&marker=abc")
        .await;
    assert_eq!(*not_a_marker.ok(200), json!({"messages": [], "links": []}));
    for (query, title, description) in [
        (
            "limit=21",
            "Invalid API request",
            "Limit must be at least 1 and may not be greater than 20.",
        ),
        (
            "limit=0",
            "Invalid API request",
            "Limit must be at least 1 and may not be greater than 20.",
        ),
        (
            "limit=ten",
            "Invalid parameter",
            "The \"limit\" parameter is invalid. The value must be an integer.",
        ),
        (
            "echo=maybe",
            "Invalid parameter",
            "The \"echo\" parameter is invalid. The value of the parameter must be \"true\" or \"false\".",
        ),
        (
            "include_claimed=x",
            "Invalid parameter",
            "The \"include_claimed\" parameter is invalid. The value of the parameter must be \"true\" or \"false\".",
        ),
    ] {
        zaqar
            .get(&format!("/v2/queues/q/messages?{query}"))
            .await
            .error(400, title, Some(description));
    }
    assert_eq!(
        *zaqar.get("/v2/queues/never/messages").await.ok(200),
        json!({"messages": [], "links": []})
    );
}

#[tokio::test]
async fn get_one_and_several_messages() {
    let (_server, zaqar) = server().await;
    let ids = zaqar
        .post_messages("q", json!([{"body": 0}, {"body": 1}, {"body": 2}]))
        .await;
    let several = zaqar
        .get(&format!(
            "/v2/queues/q/messages?ids={},{},unknown",
            ids[2], ids[0]
        ))
        .await;
    assert_eq!(several.ok(200).as_object().unwrap().len(), 1);
    assert_eq!(bodies(&several.json), [json!(0), json!(2)]);
    zaqar
        .get("/v2/queues/q/messages?ids=unknown,999999")
        .await
        .error(
            404,
            "Not found",
            Some("No messages with IDs: ['unknown', '999999'] found in the queue q for project proj-a."),
        );
    let too_many: Vec<String> = (0..21).map(|i| format!("id{i}")).collect();
    zaqar
        .get(&format!("/v2/queues/q/messages?ids={}", too_many.join(",")))
        .await
        .error(
            400,
            "Invalid API request",
            Some("Limit must be at least 1 and may not be greater than 20."),
        );
    for id in ["nonexistent", "999999"] {
        zaqar
            .get(&format!("/v2/queues/q/messages/{id}"))
            .await
            .error(
                404,
                "Not found",
                Some(&format!(
                    "Message {id} does not exist in queue q for project proj-a"
                )),
            );
    }
    // A message of another queue is not found through this one.
    zaqar
        .get(&format!("/v2/queues/elsewhere/messages/{}", ids[0]))
        .await
        .error(404, "Not found", None);
    let claim = zaqar.claim("q", 60, 60, Some(1)).await;
    let claim = claim_id(&claim);
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/q/messages/{}", ids[0]))
            .await
            .json["href"],
        json!(format!("/v2/queues/q/messages/{}?claim_id={claim}", ids[0]))
    );
}

#[tokio::test]
async fn deleting_messages_respects_claims() {
    let (_server, zaqar) = server().await;
    let ids = zaqar
        .post_messages(
            "q",
            json!([{"body": "claimed"}, {"body": "free"}, {"body": "third"}]),
        )
        .await;
    let claim = zaqar.claim("q", 60, 60, Some(1)).await;
    let claim = claim_id(&claim);
    let path = |id: &str| format!("/v2/queues/q/messages/{id}");
    zaqar.delete(&path(&ids[0])).await.error(
        403,
        "Unable to delete",
        Some("This message is claimed; it cannot be deleted without a valid claim ID."),
    );
    zaqar
        .delete(&format!("{}?claim_id=no-such-claim", path(&ids[0])))
        .await
        .error(
            400,
            "Unable to delete",
            Some("The specified claim does not exist or has expired."),
        );
    zaqar
        .delete(&format!("{}?claim_id=abc123", path(&ids[0])))
        .await
        .error(
            403,
            "Unable to delete",
            Some("This message is claimed; it cannot be deleted without a valid claim ID."),
        );
    zaqar
        .delete(&format!("{}?claim_id={claim}", path(&ids[1])))
        .await
        .error(
            400,
            "Unable to delete",
            Some("A claim was specified, but the message is not currently claimed."),
        );
    let deleted = zaqar
        .delete(&format!("{}?claim_id={claim}", path(&ids[0])))
        .await;
    assert_eq!((deleted.status, deleted.raw.len()), (204, 0));
    assert_eq!(zaqar.get(&path(&ids[0])).await.status, 404);
    assert_eq!(zaqar.delete(&path(&ids[1])).await.status, 204);
    for missing in ["nonexistent", "999999"] {
        assert_eq!(zaqar.delete(&path(missing)).await.status, 204);
    }
    assert_eq!(zaqar.bodies("q", true).await, [json!("third")]);
    // The claim held only the deleted message: it is gone.
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/q/claims/{claim}"))
            .await
            .status,
        404
    );
}

/// Clients race for the same messages: some claim them while others delete them one by one
/// (without a claim, allowed while a message is unclaimed). For each message exactly one
/// side may win: either a claim holds it (and its delete is refused), or the delete removed
/// it (and no claim holds it). Checking for a claim and deleting were two steps once, so
/// both could win: microseconds apart in one process, a round trip apart on a shared
/// database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_claimed_or_deleted_never_both() {
    const SIDES: usize = 4;
    const EACH: usize = 10;
    let (_server, zaqar) = server().await;
    let deleter = zaqar.with_client(Some(OTHER_CLIENT));
    for round in 0..10 {
        let sent: Vec<Value> = (0..SIDES * EACH).map(|n| json!([round, n])).collect();
        let messages: Vec<Value> = sent.iter().map(|b| json!({ "body": b })).collect();
        let ids = zaqar.post_messages("race", json!(messages)).await;
        let paths: Vec<String> = ids
            .iter()
            .map(|id| format!("/v2/queues/race/messages/{id}"))
            .collect();
        // Each deleter goes through its share one message after another, so that the claims
        // land among the deletes.
        let deleter = &deleter;
        let deletes = join_all(paths.chunks(EACH).map(|share| async move {
            let mut answers = Vec::new();
            for path in share {
                answers.push(deleter.delete(path).await.status);
            }
            answers
        }));
        let claims = join_all((0..SIDES).map(|_| zaqar.claim("race", 60, 60, Some(EACH as u64))));
        let (claims, deleted) = tokio::join!(claims, deletes);
        let mut held: Vec<(Value, String)> = Vec::new();
        for claimed in &claims {
            match claimed.status {
                201 => {
                    let claim = claim_id(claimed);
                    held.extend(
                        bodies(&claimed.json)
                            .into_iter()
                            .map(|b| (b, claim.clone())),
                    );
                }
                204 => {}
                _ => panic!("round {round}: a claim answered {claimed:?}"),
            }
        }
        for ((path, body), deleted) in paths.iter().zip(&sent).zip(deleted.concat()) {
            let holder = held.iter().find(|(b, _)| b == body).map(|(_, c)| c);
            match deleted {
                204 => assert!(
                    holder.is_none(),
                    "round {round}: {body} was claimed and deleted"
                ),
                403 => assert!(
                    holder.is_some(),
                    "round {round}: {body}: refused, yet unclaimed"
                ),
                _ => panic!("round {round}: a delete answered {deleted}"),
            }
            // A claimed message exists until its holder deletes it.
            let shown = zaqar.get(path).await.status;
            assert_eq!(
                shown,
                if holder.is_some() { 200 } else { 404 },
                "round {round}: {body}"
            );
            if let Some(claim) = holder {
                let done = zaqar.delete(&format!("{path}?claim_id={claim}")).await;
                assert_eq!(done.status, 204, "round {round}: {done:?}");
            }
        }
    }
}

#[tokio::test]
async fn bulk_delete_and_pop() {
    let (_server, zaqar) = server().await;
    let ids = zaqar
        .post_messages(
            "q",
            json!([{"body": 0}, {"body": 1}, {"body": 2}, {"ttl": 300, "body": 3}]),
        )
        .await;
    zaqar.claim("q", 60, 60, Some(1)).await.ok(201);
    let answer = zaqar
        .delete(&format!("/v2/queues/q/messages?ids={},{}", ids[0], ids[1]))
        .await;
    assert_eq!(answer.status, 204);
    assert_eq!(zaqar.bodies("q", true).await, [json!(2), json!(3)]);
    let popped = zaqar.delete("/v2/queues/q/messages?pop=5").await;
    assert_eq!(
        *popped.ok(200),
        json!({"messages": [
            {"id": ids[2], "age": 0, "ttl": 3600, "body": 2, "claim_count": 0, "claim_id": null},
            {"id": ids[3], "age": 0, "ttl": 300, "body": 3, "claim_count": 0, "claim_id": null},
        ]})
    );
    assert_eq!(zaqar.stats("q").await, (0, 0, 0));
    assert_eq!(
        *zaqar.delete("/v2/queues/q/messages?pop=1").await.ok(200),
        json!({"messages": []})
    );
    let too_many: Vec<String> = (0..21).map(|i| i.to_string()).collect();
    for (query, description) in [
        (
            "",
            "The request should have either \"ids\" or \"pop\" parameter in the request, to be able to delete.",
        ),
        (
            "?ids=1&pop=1",
            "pop and id params cannot be present together in the delete request.",
        ),
        (
            "?pop=0",
            "Pop value must be at least 1 and may not be greater than 20.",
        ),
        (
            "?pop=21",
            "Pop value must be at least 1 and may not be greater than 20.",
        ),
        (
            &format!("?ids={}", too_many.join(",")),
            "ids parameter should have at least 1 and not greater than 20 values.",
        ),
    ] {
        zaqar
            .delete(&format!("/v2/queues/q/messages{query}"))
            .await
            .error(400, "Invalid API request", Some(description));
    }
    zaqar.delete("/v2/queues/q/messages?pop=x").await.error(
        400,
        "Invalid parameter",
        Some("The \"pop\" parameter is invalid. The value must be an integer."),
    );
}

#[tokio::test]
async fn messages_expire_after_their_ttl() {
    let (server, zaqar) = server().await;
    let ids = zaqar
        .post_messages(
            "q",
            json!([{"ttl": 60, "body": "short"}, {"ttl": 120, "body": "long"}]),
        )
        .await;
    server.advance(Duration::from_millis(59_999));
    assert_eq!(zaqar.stats("q").await, (2, 0, 2));
    server.advance(Duration::from_millis(1));
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/q/messages/{}", ids[0]))
            .await
            .status,
        404
    );
    assert_eq!(zaqar.bodies("q", true).await, [json!("long")]);
    eventually("the expired message is deleted", || {
        let server = &server;
        let id = ids[0].parse::<u64>().unwrap();
        async move {
            server
                .api
                .send_raw(Method::GET, &format!("/api/jobs/{id}"), None)
                .await
                .0
                == 404
        }
    })
    .await;
    // The age counts seconds.
    let long = zaqar
        .get(&format!("/v2/queues/q/messages/{}", ids[1]))
        .await;
    assert_eq!(long.ok(200)["age"], json!(60));
}

// -- claims -----------------------------------------------------------------------------------

#[tokio::test]
async fn claim_lifecycle() {
    let (server, zaqar) = server().await;
    let other = zaqar.with_client(Some(OTHER_CLIENT));
    let ids = zaqar
        .post_messages(
            "q",
            json!([{"ttl": 300, "body": 0}, {"body": 1}, {"body": 2}]),
        )
        .await;
    let created = zaqar.claim("q", 120, 60, Some(2)).await;
    let claim = claim_id(&created);
    assert_eq!(
        created.header("location"),
        Some(format!("/v2/queues/q/claims/{claim}").as_str())
    );
    assert_eq!(
        *created.ok(201),
        json!({"messages": [
            {"id": ids[0], "href": format!("/v2/queues/q/messages/{}?claim_id={claim}", ids[0]),
             "ttl": 300, "age": 0, "body": 0},
            {"id": ids[1], "href": format!("/v2/queues/q/messages/{}?claim_id={claim}", ids[1]),
             "ttl": 3600, "age": 0, "body": 1},
        ]})
    );
    // Claimed messages go to no other claim.
    let second = zaqar.claim("q", 60, 60, Some(2)).await;
    assert_eq!(bodies(second.ok(201)), [json!(2)]);
    assert_eq!(zaqar.claim("q", 60, 60, None).await.status, 204);

    server.advance(Duration::from_secs(10));
    let shown = zaqar.get(&format!("/v2/queues/q/claims/{claim}")).await;
    assert_eq!(
        *shown.ok(200),
        json!({
            "age": 10, "ttl": 120,
            "messages": [
                {"id": ids[0], "href": format!("/v2/queues/q/messages/{}?claim_id={claim}", ids[0]),
                 "ttl": 300, "age": 10, "body": 0},
                {"id": ids[1], "href": format!("/v2/queues/q/messages/{}?claim_id={claim}", ids[1]),
                 "ttl": 3600, "age": 10, "body": 1},
            ],
            "href": format!("/v2/queues/q/claims/{claim}"),
        })
    );
    let renewed = zaqar
        .patch(
            &format!("/v2/queues/q/claims/{claim}"),
            json!({"ttl": 600, "grace": 120}),
        )
        .await;
    assert_eq!((renewed.status, renewed.raw.len()), (204, 0));
    let shown = zaqar.get(&format!("/v2/queues/q/claims/{claim}")).await;
    assert_eq!(
        (shown.json["age"].clone(), shown.json["ttl"].clone()),
        (json!(0), json!(600))
    );
    // The renewed lease outlives the first ttl.
    server.advance(Duration::from_secs(300));
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/q/claims/{claim}"))
            .await
            .status,
        200
    );

    // Deleting the claim releases its messages.
    let released = zaqar.delete(&format!("/v2/queues/q/claims/{claim}")).await;
    assert_eq!(released.status, 204);
    // (The second claim, of 60 s, has long expired too.)
    let listed = other.get("/v2/queues/q/messages").await;
    assert_eq!(bodies(listed.ok(200)), [json!(0), json!(1), json!(2)]);
    assert_eq!(
        listed.json["messages"][0]["href"],
        json!(format!("/v2/queues/q/messages/{}", ids[0]))
    );
    zaqar
        .get(&format!("/v2/queues/q/claims/{claim}"))
        .await
        .error(
            404,
            "Not found",
            Some(&format!(
                "Claim {claim} does not exist in queue q for project proj-a"
            )),
        );
    assert_eq!(
        zaqar
            .delete(&format!("/v2/queues/q/claims/{claim}"))
            .await
            .status,
        204
    );
    zaqar
        .patch(&format!("/v2/queues/q/claims/{claim}"), json!({"ttl": 120}))
        .await
        .error(
            404,
            "Not found",
            Some(&format!(
                "Claim {claim} does not exist in queue q for project proj-a"
            )),
        );
    assert_eq!(zaqar.claim("q", 60, 60, None).await.status, 201);
}

#[tokio::test]
async fn claim_defaults_and_limits() {
    let (_server, zaqar) = server().await;
    assert_eq!(zaqar.claim("never", 60, 60, None).await.status, 204);
    zaqar.put_empty("/v2/queues/empty").await;
    let nothing = zaqar.claim("empty", 60, 60, None).await;
    assert_eq!((nothing.status, nothing.raw.len()), (204, 0));
    zaqar
        .post_messages(
            "q",
            json!((0..13).map(|i| json!({"body": i})).collect::<Vec<_>>()),
        )
        .await;
    let no_body = zaqar
        .send(Method::POST, "/v2/queues/q/claims?limit=1", None, &[])
        .await;
    let location = no_body.header("location").unwrap().to_owned();
    assert_eq!(no_body.status, 201);
    assert_eq!(zaqar.get(&location).await.json["ttl"], json!(300));
    let ttl_only = zaqar
        .post("/v2/queues/q/claims?limit=1", json!({"ttl": 90}))
        .await;
    let location = ttl_only.header("location").unwrap().to_owned();
    assert_eq!(zaqar.get(&location).await.json["ttl"], json!(90));
    let ten = zaqar.post("/v2/queues/q/claims", json!({})).await;
    assert_eq!(ten.ok(201)["messages"].as_array().unwrap().len(), 10);

    for (body, query, description) in [
        (
            json!({"ttl": 59, "grace": 60}),
            "",
            "The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"ttl": 43201, "grace": 60}),
            "",
            "The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"ttl": 60, "grace": 59}),
            "",
            "The grace for a claim may not exceed 43200 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"ttl": 60, "grace": 43201}),
            "",
            "The grace for a claim may not exceed 43200 seconds, and must be at least 60 seconds long.",
        ),
        (
            json!({"ttl": 60, "grace": 60}),
            "?limit=21",
            "Limit must be at least 1 and may not be greater than 20.",
        ),
        (
            json!({"ttl": 60, "grace": 60}),
            "?limit=0",
            "Limit must be at least 1 and may not be greater than 20.",
        ),
    ] {
        zaqar
            .post(&format!("/v2/queues/q/claims{query}"), body)
            .await
            .error(400, "Invalid API request", Some(description));
    }
    for body in [json!({"ttl": null, "grace": null}), json!({"ttl": "60"})] {
        zaqar.post("/v2/queues/q/claims", body).await.error(
            400,
            "Invalid request body",
            Some("The value of the \"ttl\" field must be a int."),
        );
    }
    zaqar
        .post("/v2/queues/q/claims", json!({"ttl": 60, "grace": "x"}))
        .await
        .error(
            400,
            "Invalid request body",
            Some("The value of the \"grace\" field must be a int."),
        );
    zaqar.post("/v2/queues/q/claims", json!([])).await.error(
        400,
        "Invalid request body",
        Some("Document type not supported."),
    );
    zaqar.post_raw("/v2/queues/q/claims", "{bad").await.error(
        400,
        "Invalid request body",
        Some("Request body could not be parsed."),
    );
    let claim = claim_id(&zaqar.claim("q", 60, 60, Some(1)).await);
    let path = format!("/v2/queues/q/claims/{claim}");
    zaqar.patch(&path, json!({"ttl": 10})).await.error(
        400,
        "Invalid API request",
        Some("The TTL for a claim may not exceed 43200 seconds, and must be at least 60 seconds long."),
    );
    zaqar.send(Method::PATCH, &path, None, &[]).await.error(
        400,
        "Invalid request body",
        Some("Request body could not be parsed."),
    );
    zaqar.get("/v2/queues/q/claims/no-such-claim").await.error(
        404,
        "Not found",
        Some("Claim no-such-claim does not exist in queue q for project proj-a"),
    );
    // A claim is found only through its own queue.
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/other/claims/{claim}"))
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn a_claim_keeps_messages_alive_for_its_ttl_and_grace() {
    let (server, zaqar) = server().await;
    zaqar
        .post_messages(
            "q",
            json!([{"ttl": 60, "body": "short"}, {"ttl": 3600, "body": "long"}]),
        )
        .await;
    let claimed = zaqar.claim("q", 120, 60, None).await;
    let ttls: Vec<Value> = claimed.ok(201)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["ttl"].clone())
        .collect();
    assert_eq!(ttls, [json!(180), json!(3600)]);
    server.advance(Duration::from_secs(100));
    assert_eq!(zaqar.stats("q").await, (0, 2, 2));
}

#[tokio::test]
async fn an_expired_claim_frees_its_messages() {
    let (server, zaqar) = server().await;
    zaqar.post_messages("q", json!([{"body": "a"}])).await;
    let claim = claim_id(&zaqar.claim("q", 60, 60, None).await);
    server.advance(Duration::from_secs(61));
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/q/claims/{claim}"))
            .await
            .status,
        404
    );
    eventually("the message is free again", || {
        let zaqar = zaqar.clone();
        async move { zaqar.stats("q").await == (1, 0, 1) }
    })
    .await;
    assert_eq!(zaqar.claim("q", 60, 60, None).await.status, 201);
}

// -- dead letters -----------------------------------------------------------------------------

async fn dead_letter_queue(zaqar: &Zaqar) -> String {
    zaqar
        .put(
            "/v2/queues/q",
            json!({"_max_claim_count": 2, "_dead_letter_queue": "dead",
                   "_dead_letter_queue_messages_ttl": 120}),
        )
        .await
        .ok(201);
    zaqar
        .post_messages("q", json!([{"ttl": 3600, "body": "poison"}]))
        .await
        .remove(0)
}

#[tokio::test]
async fn messages_whose_claims_expire_max_claim_count_times_move_to_the_dead_letter_queue() {
    let (server, zaqar) = server().await;
    let id = dead_letter_queue(&zaqar).await;
    for round in 1..=2 {
        assert_eq!(
            zaqar.claim("q", 60, 60, None).await.status,
            201,
            "claim {round}"
        );
        server.advance(Duration::from_secs(61));
        eventually("the claim expires", || {
            let zaqar = zaqar.clone();
            async move { zaqar.stats("q").await.1 == 0 }
        })
        .await;
    }
    // The next claim finds the message at its limit: it has moved, and nothing is claimed.
    assert_eq!(zaqar.claim("q", 60, 60, None).await.status, 204);
    assert_eq!(zaqar.stats("q").await, (0, 0, 0));
    let moved = zaqar.get("/v2/queues/dead/messages?echo=true").await;
    let message = &moved.ok(200)["messages"][0];
    assert_eq!(
        (message["id"].clone(), message["body"].clone()),
        (json!(id), json!("poison"))
    );
    // Its ttl is the dead-letter queue's, counted from the move.
    let expires_in = message["ttl"].as_u64().unwrap() - message["age"].as_u64().unwrap();
    assert_eq!(expires_in, 120);
}

#[tokio::test]
async fn released_claims_count_towards_max_claim_count() {
    let (_server, zaqar) = server().await;
    let id = dead_letter_queue(&zaqar).await;
    for _ in 0..2 {
        let claim = claim_id(&zaqar.claim("q", 60, 60, None).await);
        assert_eq!(
            zaqar
                .delete(&format!("/v2/queues/q/claims/{claim}"))
                .await
                .status,
            204
        );
    }
    assert_eq!(zaqar.claim("q", 60, 60, None).await.status, 204);
    assert_eq!(zaqar.stats("q").await, (0, 0, 0));
    let moved = zaqar.get(&format!("/v2/queues/dead/messages/{id}")).await;
    assert_eq!(moved.ok(200)["body"], json!("poison"));
}

// -- projects ---------------------------------------------------------------------------------

#[tokio::test]
async fn projects_are_separate_namespaces() {
    let (_server, alice) = server().await;
    let bob = alice.with_project(Some("proj-b"));
    alice
        .put("/v2/queues/q", json!({"owner": "alice"}))
        .await
        .ok(201);
    assert_eq!(bob.put_empty("/v2/queues/q").await.status, 201);
    let [alice_id] = alice
        .post_messages("q", json!([{"body": "a"}]))
        .await
        .try_into()
        .unwrap();
    bob.post_messages("q", json!([{"body": "b"}])).await;
    assert_eq!(*bob.get("/v2/queues/q").await.ok(200), defaults());
    assert_eq!(
        bob.get(&format!("/v2/queues/q/messages/{alice_id}"))
            .await
            .status,
        404
    );
    assert_eq!(
        bob.delete(&format!("/v2/queues/q/messages/{alice_id}"))
            .await
            .status,
        204
    );
    assert_eq!(
        bob.delete(&format!("/v2/queues/q/messages?ids={alice_id}"))
            .await
            .status,
        204
    );
    assert_eq!(alice.bodies("q", true).await, [json!("a")]);
    assert_eq!(bob.bodies("q", true).await, [json!("b")]);
    let claim = claim_id(&alice.claim("q", 60, 60, None).await);
    assert_eq!(
        bob.get(&format!("/v2/queues/q/claims/{claim}"))
            .await
            .status,
        404
    );
    assert_eq!(
        bob.delete(&format!("/v2/queues/q/claims/{claim}"))
            .await
            .status,
        204
    );
    assert_eq!(alice.stats("q").await, (0, 1, 1));
    bob.delete("/v2/queues/q").await;
    assert_eq!(alice.stats("q").await, (0, 1, 1));
    let listed = bob.get("/v2/queues").await;
    assert_eq!(*listed.ok(200), json!({"queues": [], "links": []}));
    let sid = alice
        .post(
            "/v2/queues/q/subscriptions",
            json!({"subscriber": "http://127.0.0.1:9/alice"}),
        )
        .await
        .ok(201)["subscription_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        *bob.get("/v2/queues/q/subscriptions").await.ok(200),
        json!({"subscriptions": [], "links": []})
    );
    assert_eq!(
        bob.get(&format!("/v2/queues/q/subscriptions/{sid}"))
            .await
            .status,
        404
    );
    // A project's queues are Tenax queues named `project:queue`.
    let native = alice.get("/api/queues/proj-a:q").await;
    assert_eq!(native.ok(200)["name"], json!("proj-a:q"));
}

// -- subscriptions ----------------------------------------------------------------------------

const NOWHERE: &str = "http://127.0.0.1:9/hook";

#[tokio::test]
async fn subscriptions_crud() {
    let (server, zaqar) = server().await;
    let created = zaqar
        .post(
            "/v2/queues/q/subscriptions",
            json!({"subscriber": NOWHERE, "ttl": 600, "options": {"x": "y"}}),
        )
        .await;
    assert_eq!(
        created.header("location"),
        Some("/v2/queues/q/subscriptions")
    );
    let sid = created.ok(201)["subscription_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(created.json.as_object().unwrap().len(), 1);
    // Subscribing created the queue.
    assert_eq!(zaqar.head("/v2/queues/q").await.status, 204);
    let path = format!("/v2/queues/q/subscriptions/{sid}");
    server.advance(Duration::from_secs(5));
    assert_eq!(
        *zaqar.get(&path).await.ok(200),
        json!({"id": sid, "source": "q", "subscriber": NOWHERE, "ttl": 600, "age": 5,
               "options": {"x": "y"}, "confirmed": true})
    );
    // The same subscriber again is the same subscription.
    let again = zaqar
        .post("/v2/queues/q/subscriptions", json!({"subscriber": NOWHERE}))
        .await;
    assert_eq!(again.ok(201)["subscription_id"], json!(sid));
    let defaulted = zaqar
        .post(
            "/v2/queues/q/subscriptions",
            json!({"subscriber": "https://127.0.0.1:9/secure"}),
        )
        .await;
    let second = defaulted.ok(201)["subscription_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = zaqar
        .get(&format!("/v2/queues/q/subscriptions/{second}"))
        .await;
    assert_eq!(
        (shown.json["ttl"].clone(), shown.json["options"].clone()),
        (json!(3600), json!({}))
    );

    let updated = zaqar
        .patch(&path, json!({"ttl": 7200, "options": {"new": true}}))
        .await;
    assert_eq!(updated.status, 204);
    assert_eq!(updated.header("location"), Some(path.as_str()));
    let shown = zaqar.get(&path).await;
    assert_eq!(
        (shown.json["ttl"].clone(), shown.json["options"].clone()),
        (json!(7200), json!({"new": true}))
    );
    zaqar
        .patch(&path, json!({"subscriber": "http://127.0.0.1:9/moved"}))
        .await;
    assert_eq!(
        zaqar.get(&path).await.json["subscriber"],
        json!("http://127.0.0.1:9/moved")
    );
    zaqar
        .patch(&path, json!({"subscriber": "https://127.0.0.1:9/secure"}))
        .await
        .error(
            409,
            "Resource conflict",
            Some("Such subscription already exists. Subscriptions are unique by project + queue + subscriber URI."),
        );

    let first_page = zaqar.get("/v2/queues/q/subscriptions?limit=1").await;
    assert_eq!(first_page.ok(200)["subscriptions"][0]["id"], json!(sid));
    assert_eq!(
        first_page.json["links"],
        json!([{"rel": "next", "href": format!("/v2/queues/q/subscriptions?limit=1&marker={sid}")}])
    );
    let second_page = zaqar
        .get(first_page.json["links"][0]["href"].as_str().unwrap())
        .await;
    assert_eq!(second_page.ok(200)["subscriptions"][0]["id"], json!(second));
    let third_page = zaqar
        .get(second_page.json["links"][0]["href"].as_str().unwrap())
        .await;
    assert_eq!(
        *third_page.ok(200),
        json!({"subscriptions": [], "links": []})
    );

    assert_eq!(zaqar.delete(&path).await.status, 204);
    zaqar.get(&path).await.error(
        404,
        "Not found",
        Some(&format!("Subscription {sid} does not exist")),
    );
    assert_eq!(zaqar.delete(&path).await.status, 204);
    zaqar.patch(&path, json!({"ttl": 120})).await.error(
        404,
        "Not found",
        Some(&format!("Subscription {sid} does not exist")),
    );
    // Another queue's subscription is not found through this one.
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/other/subscriptions/{second}"))
            .await
            .status,
        404
    );
}

/// Zaqar lists subscriptions by id as text, and a marker is compared as text: on a new server
/// the ids are 1 to 11, so "10" and "11" come between "1" and "2", and "9" is last.
#[tokio::test]
async fn subscriptions_page_in_the_string_order_of_their_ids() {
    let (_server, zaqar) = server().await;
    let mut ids = Vec::new();
    for n in 0..11 {
        let created = zaqar
            .post(
                "/v2/queues/q/subscriptions",
                json!({"subscriber": format!("http://127.0.0.1:9/hook{n}")}),
            )
            .await;
        ids.push(
            created.ok(201)["subscription_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert!(
        ids.contains(&"9".to_owned()) && ids.contains(&"10".to_owned()),
        "{ids:?}"
    );
    let mut expected = ids.clone();
    expected.sort();
    let page_ids = |answer: &Answer| -> Vec<String> {
        answer.json["subscriptions"]
            .as_array()
            .expect("subscriptions")
            .iter()
            .map(|s| s["id"].as_str().expect("an id").to_owned())
            .collect()
    };
    let mut seen = Vec::new();
    let mut next = "/v2/queues/q/subscriptions?limit=3".to_owned();
    loop {
        let page = zaqar.get(&next).await;
        page.ok(200);
        let ids = page_ids(&page);
        if ids.is_empty() {
            assert_eq!(page.json["links"], json!([]));
            break;
        }
        seen.extend(ids);
        next = page.json["links"][0]["href"].as_str().unwrap().to_owned();
    }
    assert_eq!(seen, expected, "every subscription once, in string order");
    assert_eq!(&seen[..4], ["1", "10", "11", "2"]);
    // A marker between ids, and one after every id.
    let after_9 = zaqar.get("/v2/queues/q/subscriptions?marker=9").await;
    assert_eq!(*after_9.ok(200), json!({"subscriptions": [], "links": []}));
    let after_10 = zaqar
        .get("/v2/queues/q/subscriptions?marker=10&limit=2")
        .await;
    assert_eq!(page_ids(&after_10), ["11", "2"]);
    let after_text = zaqar
        .get("/v2/queues/q/subscriptions?marker=5a&limit=2")
        .await;
    assert_eq!(page_ids(&after_text), ["6", "7"]);
}

#[tokio::test]
async fn subscriptions_expire_after_their_ttl() {
    let (server, zaqar) = server().await;
    let sid = zaqar
        .post(
            "/v2/queues/q/subscriptions",
            json!({"subscriber": NOWHERE, "ttl": 60}),
        )
        .await
        .ok(201)["subscription_id"]
        .as_str()
        .unwrap()
        .to_owned();
    server.advance(Duration::from_secs(61));
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/q/subscriptions/{sid}"))
            .await
            .status,
        404
    );
    assert_eq!(
        *zaqar.get("/v2/queues/q/subscriptions").await.ok(200),
        json!({"subscriptions": [], "links": []})
    );
}

#[tokio::test]
async fn invalid_subscriptions_are_400() {
    let (_server, zaqar) = server().await;
    let cases = [
        (
            json!({"ttl": 3600}),
            Some("Missing parameter subscriber in body."),
        ),
        (json!({}), Some("Missing parameter subscriber in body.")),
        (
            json!({"subscriber": NOWHERE, "ttl": 59}),
            Some("The TTL for a subscription must be at least 60 seconds long."),
        ),
        (
            json!({"subscriber": NOWHERE, "ttl": "3600"}),
            Some("TTL must be an integer."),
        ),
        (
            json!({"subscriber": NOWHERE, "options": "x"}),
            Some("Options must be a dict."),
        ),
        (
            json!({"subscriber": NOWHERE, "options": {"_retry_policy": 5}}),
            Some("retry_policy must be a dict."),
        ),
        (
            json!({"subscriber": NOWHERE, "options": {"_retry_policy": {"retry_backoff_function": "fibonacci"}}}),
            Some("invalid retry_backoff_function."),
        ),
        (
            json!({"subscriber": NOWHERE, "options": {"_retry_policy": {"minimum_delay": 30, "maximum_delay": 5}}}),
            Some("minimum_delay must less than maximum_delay."),
        ),
        (
            json!({"subscriber": "ftp://x/y"}),
            Some(
                "The subscriber type of subscription must be supported in the list ['http', 'https', 'mailto'].",
            ),
        ),
        (json!({"subscriber": "http://"}), None),
        (
            json!({"subscriber": NOWHERE, "options": {"post_headers": {"Host": "x"}}}),
            None,
        ),
    ];
    for (document, description) in cases {
        zaqar
            .post("/v2/queues/q/subscriptions", document.clone())
            .await
            .error(400, "Invalid API request", description);
    }
    // Without --smtp-url, a mailto subscriber is refused for want of an SMTP server
    // (zaqar_notifications.rs mails them).
    let answer = zaqar
        .post(
            "/v2/queues/q/subscriptions",
            json!({"subscriber": "mailto:ops@example.com?from=q@example.com"}),
        )
        .await;
    answer.error(400, "Invalid API request", None);
    assert!(
        answer.json["description"]
            .as_str()
            .is_some_and(|d| d.contains("--smtp-url")),
        "{answer:?}"
    );
    for subscriber in ["trust+http://127.0.0.1:9/t", "trust+https://127.0.0.1:9/t"] {
        let answer = zaqar
            .post(
                "/v2/queues/q/subscriptions",
                json!({"subscriber": subscriber}),
            )
            .await;
        answer.error(400, "Invalid API request", None);
        let description = answer.json["description"].as_str().unwrap();
        assert!(
            description
                .starts_with("The subscriber type of subscription must be supported in the list")
                && description.contains("not supported"),
            "{description}"
        );
    }
    zaqar
        .post_raw("/v2/queues/q/subscriptions", "{bad")
        .await
        .error(
            400,
            "Invalid request body",
            Some("Request body could not be parsed."),
        );
    let sid = zaqar
        .post("/v2/queues/q/subscriptions", json!({"subscriber": NOWHERE}))
        .await
        .ok(201)["subscription_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v2/queues/q/subscriptions/{sid}");
    zaqar.patch(&path, json!({})).await.error(
        400,
        "Invalid API request",
        Some("No subscription to create."),
    );
    zaqar.patch(&path, json!({"other": 1})).await.error(
        400,
        "Unable to update subscription",
        Some(&format!("Subscription {sid} could not be updated.")),
    );
    zaqar
        .get("/v2/queues/q/subscriptions?limit=21")
        .await
        .error(
            400,
            "Invalid API request",
            Some("Limit must be at least 1 and may not be greater than 20."),
        );
    // Confirmation: accepted, and every subscription is confirmed already.
    let confirm = format!("{path}/confirm");
    assert_eq!(
        zaqar
            .send(
                Method::PUT,
                &confirm,
                Some(br#"{"confirmed": true}"#.to_vec()),
                &[]
            )
            .await
            .status,
        204
    );
    zaqar
        .send(
            Method::PUT,
            &confirm,
            Some(br#"{"confirmed": "yes"}"#.to_vec()),
            &[],
        )
        .await
        .error(
            400,
            "Invalid API request",
            Some("The 'confirmed' should be boolean."),
        );
}

#[tokio::test]
async fn subscription_options_become_the_delivery_policy_and_headers() {
    let (_server, zaqar) = server().await;
    let sid = zaqar
        .post(
            "/v2/queues/q/subscriptions",
            json!({"subscriber": NOWHERE, "options": {
                "_retry_policy": {"retries_with_no_delay": 1, "minimum_delay_retries": 0,
                                  "minimum_delay": 1, "maximum_delay": 11,
                                  "maximum_delay_retries": 0},
                "post_headers": {"X-Custom": "1"},
            }}),
        )
        .await
        .ok(201)["subscription_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let native = zaqar.get(&format!("/api/subscriptions/{sid}")).await;
    let native = native.ok(200);
    assert_eq!(native["format"], json!("zaqar"), "{native}");
    assert_eq!(native["endpoint"], json!(NOWHERE), "{native}");
    assert!(native["policy"].is_object(), "{native}");
    // Header values are write-only: redacted in every show, native and Zaqar.
    assert_eq!(
        native["headers"]["X-Custom"],
        json!("[redacted]"),
        "{native}"
    );
    assert_eq!(native["secret"], json!("[redacted]"), "{native}");
    let shown = zaqar
        .get(&format!("/v2/queues/q/subscriptions/{sid}"))
        .await;
    assert_eq!(
        shown.ok(200)["options"]["post_headers"],
        json!({"X-Custom": "[redacted]"}),
        "{shown:?}"
    );
    assert!(shown.json["options"]["_retry_policy"].is_object());

    // The queue's `_retry_policy` with ignore_subscription_override is the queue's policy.
    zaqar
        .patch_metadata(
            "q",
            json!([{"op": "add", "path": "/metadata/_retry_policy",
                    "value": {"ignore_subscription_override": true}}]),
        )
        .await
        .ok(200);
    let queue = zaqar.get("/api/queues/proj-a:q").await;
    assert!(queue.ok(200)["policy"].is_object(), "{queue:?}");
    assert_eq!(queue.json["disable_overrides"], json!(true));
}

/// The URL-* headers of a share's answer, for a request made with them alone.
fn signed_headers(share: &Value) -> Vec<(String, String)> {
    let list = |key: &str| {
        share[key]
            .as_array()
            .expect("a list")
            .iter()
            .map(|v| v.as_str().expect("a string").to_owned())
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        (
            "URL-Signature".into(),
            share["signature"].as_str().expect("a signature").into(),
        ),
        (
            "URL-Expires".into(),
            share["expires"].as_str().expect("an expiry").into(),
        ),
        ("URL-Methods".into(), list("methods")),
        ("URL-Paths".into(), list("paths")),
    ]
}

async fn send_signed(
    zaqar: &Zaqar,
    method: Method,
    path: &str,
    body: Option<Value>,
    signed: &[(String, String)],
) -> Answer {
    let headers: Vec<(&str, &str)> = signed
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    zaqar
        .send(
            method,
            path,
            body.map(|b| b.to_string().into_bytes()),
            &headers,
        )
        .await
}

const SIGNING_ADMIN: &str = "test-admin-token-0123456789abcdefghijklmnop";

/// A server that needs a token on every request, with [`SIGNING_ADMIN`] an admin one.
async fn server_with_tokens() -> TestServer {
    TestServer::start(Options::manual().flags(&["--auth", "on", "--admin-token", SIGNING_ADMIN]))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_urls_admit_their_paths_and_methods_until_they_expire() {
    let server = server_with_tokens().await;
    let zaqar = Zaqar::new(&server, "proj-a", CLIENT);
    let admin = [("X-Auth-Token", SIGNING_ADMIN)];
    let share = |body: Value| {
        let zaqar = zaqar.clone();
        async move {
            zaqar
                .send(
                    Method::POST,
                    "/v2/queues/q/share",
                    Some(body.to_string().into_bytes()),
                    &admin,
                )
                .await
        }
    };
    // Without a token: no share, no messages.
    zaqar
        .post("/v2/queues/q/share", json!({}))
        .await
        .error(401, "Unauthorized", None);
    zaqar
        .get("/v2/queues/q/messages")
        .await
        .error(401, "Unauthorized", None);

    // Zaqar's rules on the document.
    share(json!({"paths": ["messages"], "nope": 1}))
        .await
        .error(400, "Invalid API request", Some("Unknown keys: {'nope'}"));
    share(json!({"paths": ["queues"]})).await.error(
        400,
        "Invalid API request",
        Some("Invalid paths: {'queues'}"),
    );
    share(json!({"expires": "2000-01-01T00:00:00"}))
        .await
        .error(
            400,
            "Invalid API request",
            Some("`expires` is lower than the current time"),
        );
    share(json!({"expires": "1234"})).await.error(
        400,
        "Invalid API request",
        Some(
            "`expires` should be date format, for example 2016-01-01T00:00:00, not integer \
             value: 1234",
        ),
    );
    share(json!({"methods": ["FETCH"]}))
        .await
        .error(400, "Invalid API request", None);

    // The default: GET on the queue's messages, for a day.
    let default = share(json!({})).await;
    let default = default.ok(200);
    assert_eq!(default["paths"], json!(["/v2/queues/q/messages"]));
    assert_eq!(default["methods"], json!(["GET"]));
    assert_eq!(default["project"], json!("proj-a"));
    // T0 (2027-01-15T08:00:00Z) and a day.
    assert_eq!(default["expires"], json!("2027-01-16T08:00:00"));
    assert_eq!(default["signature"].as_str().map(str::len), Some(64));

    let answer = share(json!({
        "methods": ["POST", "GET"],
        "paths": ["messages"],
        "expires": "2027-01-15T09:00:00",
    }))
    .await;
    let signed = signed_headers(answer.ok(200));
    assert_eq!(answer.json["methods"], json!(["GET", "POST"]));

    // With the URL-* headers alone: post, list and read one message.
    let posted = send_signed(
        &zaqar,
        Method::POST,
        "/v2/queues/q/messages",
        Some(json!({"messages": [{"body": {"n": 1}, "ttl": 300}]})),
        &signed,
    )
    .await;
    let id = posted.ok(201)["resources"][0]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let listed = send_signed(
        &zaqar,
        Method::GET,
        "/v2/queues/q/messages?echo=true",
        None,
        &signed,
    )
    .await;
    assert_eq!(listed.ok(200)["messages"][0]["body"], json!({"n": 1}));
    send_signed(
        &zaqar,
        Method::GET,
        &format!("/v2/queues/q/messages/{id}"),
        None,
        &signed,
    )
    .await
    .ok(200);

    // Nothing else: another method, another path, another queue or project.
    let refused = |answer: Answer| answer.error(404, "404 Not Found", None);
    refused(
        send_signed(
            &zaqar,
            Method::DELETE,
            &format!("/v2/queues/q/messages/{id}"),
            None,
            &signed,
        )
        .await,
    );
    refused(send_signed(&zaqar, Method::GET, "/v2/queues/q", None, &signed).await);
    refused(send_signed(&zaqar, Method::GET, "/v2/queues/q/stats", None, &signed).await);
    refused(
        send_signed(
            &zaqar,
            Method::POST,
            "/v2/queues/q/claims",
            Some(json!({})),
            &signed,
        )
        .await,
    );
    refused(
        send_signed(
            &zaqar,
            Method::GET,
            "/v2/queues/other/messages",
            None,
            &signed,
        )
        .await,
    );
    refused(send_signed(&zaqar, Method::GET, "/v2/queues", None, &signed).await);
    let other_project = zaqar.with_project(Some("proj-b"));
    refused(
        send_signed(
            &other_project,
            Method::GET,
            "/v2/queues/q/messages",
            None,
            &signed,
        )
        .await,
    );
    // Another queue named in URL-Paths: the signature no longer matches.
    let mut widened = signed.clone();
    widened[3].1 = "/v2/queues/q/messages,/v2/queues/other/messages".into();
    refused(
        send_signed(
            &zaqar,
            Method::GET,
            "/v2/queues/other/messages",
            None,
            &widened,
        )
        .await,
    );
    // An altered signature, a later expiry, another method list.
    let mut altered = signed.clone();
    let first = if altered[0].1.starts_with('0') {
        "1"
    } else {
        "0"
    };
    altered[0].1.replace_range(0..1, first);
    refused(send_signed(&zaqar, Method::GET, "/v2/queues/q/messages", None, &altered).await);
    let mut later = signed.clone();
    later[1].1 = "2027-01-15T10:00:00".into();
    refused(send_signed(&zaqar, Method::GET, "/v2/queues/q/messages", None, &later).await);
    let mut more = signed.clone();
    more[2].1 = "DELETE,GET,POST".into();
    refused(
        send_signed(
            &zaqar,
            Method::DELETE,
            &format!("/v2/queues/q/messages/{id}"),
            None,
            &more,
        )
        .await,
    );
    // A valid token does not rescue a set that does not hold.
    let mut with_token = altered.clone();
    with_token.push(("X-Auth-Token".into(), SIGNING_ADMIN.into()));
    refused(
        send_signed(
            &zaqar,
            Method::GET,
            "/v2/queues/q/messages",
            None,
            &with_token,
        )
        .await,
    );

    // At its expiry, the set no longer admits anything.
    send_signed(&zaqar, Method::GET, "/v2/queues/q/messages", None, &signed)
        .await
        .ok(200);
    server.clock.advance_ms(3_600_000);
    refused(send_signed(&zaqar, Method::GET, "/v2/queues/q/messages", None, &signed).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_urls_sign_with_the_given_key_as_zaqar_does() {
    let server =
        TestServer::start(Options::manual().flags(&["--zaqar-signing-key", "test-key"])).await;
    let zaqar = Zaqar::new(&server, "p", CLIENT);
    let answer = zaqar
        .post(
            "/v2/queues/q/share",
            json!({"paths": ["messages", "claims"], "methods": ["POST", "GET"],
                   "expires": "2030-01-01T01:00:00+01:00"}),
        )
        .await;
    let answer = answer.ok(200);
    assert_eq!(
        answer["paths"],
        json!(["/v2/queues/q/claims", "/v2/queues/q/messages"])
    );
    assert_eq!(answer["expires"], json!("2030-01-01T00:00:00"));
    // python3 -c "import hmac,hashlib; print(hmac.new(b'test-key',
    //   rb'/v2/queues/q/claims,/v2/queues/q/messages\nGET,POST\np\n2030-01-01T00:00:00',
    //   hashlib.sha256).hexdigest())"
    assert_eq!(answer["signature"], json!(ZAQAR_SIGNATURE));
    // With authentication off, a set that does not hold is refused all the same.
    let mut altered = signed_headers(answer);
    altered[1].1 = "2030-01-01T00:00:01".into();
    send_signed(&zaqar, Method::GET, "/v2/queues/q/messages", None, &altered)
        .await
        .error(404, "404 Not Found", None);
}

/// What Python's `hmac` makes of the set in [`signed_urls_sign_with_the_given_key_as_zaqar_does`].
const ZAQAR_SIGNATURE: &str = "7dce8b549457ddca9f8cadb5b111551df6303fe2eaa4e352e9956c9785b95445";

// -- settable limits and authentication -------------------------------------------------------

#[tokio::test]
async fn changed_limits_are_enforced_with_zaqars_errors() {
    let server = TestServer::start(Options::manual().flags(&[
        "--allow-private-endpoints",
        "--zaqar-max-queues-per-page",
        "2",
        "--zaqar-max-messages-per-page",
        "3",
        "--zaqar-max-subscriptions-per-page",
        "4",
        "--zaqar-max-messages-per-claim-or-pop",
        "2",
        "--zaqar-max-queue-metadata",
        "100",
        "--zaqar-max-messages-post-size",
        "1024",
        "--zaqar-max-message-ttl",
        "120",
        "--zaqar-max-claim-ttl",
        "100",
        "--zaqar-max-claim-grace",
        "90",
    ]))
    .await;
    let zaqar = Zaqar::new(&server, "proj-a", CLIENT);
    let api = |answer: Answer, description: &str| {
        answer.error(400, "Invalid API request", Some(description));
    };
    // Queues: the page size and the metadata size and its reserved keys.
    api(
        zaqar.get("/v2/queues?limit=3").await,
        "Limit must be at least 1 and no greater than 2.",
    );
    zaqar.get("/v2/queues?limit=2").await.ok(200);
    let big = json!({"pad": "x".repeat(100)});
    api(
        zaqar.put("/v2/queues/q", big).await,
        "Queue metadata is too large. Max size: 100",
    );
    api(
        zaqar
            .put("/v2/queues/q", json!({"_default_message_ttl": 121}))
            .await,
        "_default_message_ttl can not exceed 120 seconds, and must be at least 60 seconds long.",
    );
    api(
        zaqar
            .put("/v2/queues/q", json!({"_max_messages_post_size": 1025}))
            .await,
        "_max_messages_post_size can not exceed 1024,  and must be at least greater than 0.",
    );
    zaqar.put_empty("/v2/queues/q").await.ok(201);
    // The post size limit is the default shown for the queue, as Zaqar shows it.
    let shown = zaqar.get("/v2/queues/q").await;
    assert_eq!(shown.ok(200)["_max_messages_post_size"], json!(1024));
    // Messages: ttl, post size, page, ids and pop.
    api(
        zaqar
            .post(
                "/v2/queues/q/messages",
                json!({"messages": [{"body": 1, "ttl": 121}]}),
            )
            .await,
        "The TTL for a message may not exceed 120 seconds, and must be at least 60 seconds long.",
    );
    api(
        zaqar
            .post(
                "/v2/queues/q/messages",
                json!({"messages": [{"body": "x".repeat(1024)}]}),
            )
            .await,
        "Message collection size is too large. Max size 1024",
    );
    let ids = zaqar
        .post_messages(
            "q",
            json!([{"body": 1, "ttl": 120}, {"body": 2, "ttl": 60}, {"body": 3, "ttl": 60},
                   {"body": 4, "ttl": 60}]),
        )
        .await;
    api(
        zaqar.get("/v2/queues/q/messages?echo=true&limit=4").await,
        "Limit must be at least 1 and may not be greater than 3.",
    );
    let page = zaqar.get("/v2/queues/q/messages?echo=true&limit=3").await;
    assert_eq!(bodies(page.ok(200)), [json!(1), json!(2), json!(3)]);
    let all = ids.join(",");
    api(
        zaqar.get(&format!("/v2/queues/q/messages?ids={all}")).await,
        "Limit must be at least 1 and may not be greater than 3.",
    );
    api(
        zaqar
            .delete(&format!("/v2/queues/q/messages?ids={all}"))
            .await,
        "ids parameter should have at least 1 and not greater than 3 values.",
    );
    api(
        zaqar.delete("/v2/queues/q/messages?pop=3").await,
        "Pop value must be at least 1 and may not be greater than 2.",
    );
    // Claims: limit, ttl and grace.
    api(
        zaqar.claim("q", 60, 60, Some(3)).await,
        "Limit must be at least 1 and may not be greater than 2.",
    );
    api(
        zaqar.claim("q", 101, 60, None).await,
        "The TTL for a claim may not exceed 100 seconds, and must be at least 60 seconds long.",
    );
    api(
        zaqar.claim("q", 100, 91, None).await,
        "The grace for a claim may not exceed 90 seconds, and must be at least 60 seconds long.",
    );
    let claimed = zaqar.claim("q", 100, 90, Some(2)).await;
    assert_eq!(claimed.ok(201)["messages"].as_array().unwrap().len(), 2);
    // Subscriptions: the page size.
    api(
        zaqar.get("/v2/queues/q/subscriptions?limit=5").await,
        "Limit must be at least 1 and may not be greater than 4.",
    );
    zaqar
        .get("/v2/queues/q/subscriptions?limit=4")
        .await
        .ok(200);
}

#[tokio::test]
async fn a_limit_that_cannot_work_stops_the_server_with_its_flag() {
    let data = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tenax"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .args(["--zaqar-max-claim-ttl", "30"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--zaqar-max-claim-ttl: must be at least 60 (Zaqar's minimum), got 30"),
        "{stderr}"
    );
}

#[tokio::test]
async fn requests_without_a_token_are_401_when_tokens_are_required() {
    let server = server_with_tokens().await;
    let zaqar = Zaqar::new(&server, "proj-a", CLIENT);
    // As Zaqar's own test of a Keystone setup (only a Client-ID, a path of no route), and on
    // every kind of route, with or without Zaqar's headers: 401 before anything else.
    let bare = zaqar.with_project(None);
    bare.get("/v2/480924/queues/")
        .await
        .error(401, "Unauthorized", None);
    for caller in [&zaqar, &bare, &bare.with_client(None)] {
        for (method, path) in [
            (Method::GET, "/v2/queues"),
            (Method::PUT, "/v2/queues/q"),
            (Method::GET, "/v2/queues/q/messages"),
            (Method::POST, "/v2/queues/q/claims"),
            (Method::GET, "/v2/ping"),
        ] {
            let answer = caller.send(method.clone(), path, None, &[]).await;
            answer.error(401, "Unauthorized", None);
            assert!(answer.header("www-authenticate").is_some(), "{answer:?}");
        }
    }
    let forged = [("X-Auth-Token", "not-a-token")];
    zaqar
        .send(Method::GET, "/v2/queues", None, &forged)
        .await
        .error(401, "Unauthorized", None);
    let admin = [("X-Auth-Token", SIGNING_ADMIN)];
    zaqar
        .send(Method::GET, "/v2/queues", None, &admin)
        .await
        .ok(200);
}

// -- topics -----------------------------------------------------------------------------------

#[tokio::test]
async fn topics_are_created_shown_patched_listed_and_deleted_as_zaqar() {
    let (_server, zaqar) = server().await;
    let topic_defaults = json!({
        "_max_messages_post_size": 262144,
        "_default_message_ttl": 3600,
        "_default_message_delay": 0,
    });
    // Stats of a topic never created are zeros; the topic itself is not found.
    let stats = zaqar.get("/v2/topics/mars/stats").await;
    assert_eq!(
        *stats.ok(200),
        json!({"messages": {"claimed": 0, "free": 0, "total": 0}})
    );
    zaqar.get("/v2/topics/mars").await.error(
        404,
        "Not found",
        Some("Topic mars does not exist for project proj-a"),
    );
    let created = zaqar
        .put("/v2/topics/mars", json!({"messages": {"ttl": 600}}))
        .await;
    created.ok(201);
    assert_eq!(created.header("location"), Some("/v2/topics/mars"));
    assert_eq!(zaqar.put_empty("/v2/topics/mars").await.status, 204);
    let mut want = topic_defaults.clone();
    want["messages"] = json!({"ttl": 600});
    assert_eq!(*zaqar.get("/v2/topics/mars").await.ok(200), want);
    // PATCH as a queue's, with the topic's defaults.
    let patched = zaqar
        .send(
            Method::PATCH,
            "/v2/topics/mars",
            Some(
                json!([{"op": "add", "path": "/metadata/color", "value": "red"}])
                    .to_string()
                    .into_bytes(),
            ),
            &[("Content-Type", JSON_PATCH)],
        )
        .await;
    want["color"] = json!("red");
    assert_eq!(*patched.ok(200), want);
    // Reserved queue keys are checked on topics too.
    zaqar
        .put("/v2/topics/venus", json!({"_default_message_ttl": 59}))
        .await
        .error(400, "Invalid API request", None);
    zaqar.put_empty("/v2/topics/venus").await.ok(201);
    // Listings: topics under `topics`, queues under `queues`, neither in the other.
    zaqar.put_empty("/v2/queues/earth").await.ok(201);
    let listed = zaqar.get("/v2/topics?limit=1").await;
    assert_eq!(
        *listed.ok(200),
        json!({"topics": [{"name": "mars", "href": "/v2/topics/mars"}],
               "links": [{"rel": "next", "href": "/v2/topics?limit=1&marker=mars"}]})
    );
    let next = zaqar.get("/v2/topics?marker=mars&detailed=true").await;
    assert_eq!(
        *next.ok(200),
        json!({"topics": [{"name": "venus", "href": "/v2/topics/venus",
                           "metadata": topic_defaults}],
               "links": [{"rel": "next", "href": "/v2/topics?marker=venus&detailed=true"}]})
    );
    let queues = zaqar.get("/v2/queues").await;
    let names: Vec<&Value> = queues.ok(200)["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| &q["name"])
        .collect();
    assert_eq!(names, [&json!("earth")]);
    // Another project sees none of them; bad names are Zaqar's topic error.
    let other = zaqar.with_project(Some("proj-b"));
    assert_eq!(
        *other.get("/v2/topics").await.ok(200),
        json!({"topics": [], "links": []})
    );
    zaqar.put_empty("/v2/topics/a%20b").await.error(
        400,
        "Invalid topic identification",
        Some("The format of the submitted topic name or project id is not valid."),
    );
    // Topics have no claims.
    zaqar
        .post("/v2/topics/mars/claims", json!({"ttl": 60, "grace": 60}))
        .await
        .error(404, "404 Not Found", None);
    assert_eq!(zaqar.delete("/v2/topics/mars").await.status, 204);
    zaqar
        .get("/v2/topics/mars")
        .await
        .error(404, "Not found", None);
    assert_eq!(zaqar.delete("/v2/topics/mars").await.status, 204);
}

#[tokio::test]
async fn a_topic_and_a_queue_of_one_name_are_different_things() {
    let (_server, zaqar) = server().await;
    zaqar
        .put("/v2/topics/news", json!({"kind": "topic"}))
        .await
        .ok(201);
    zaqar
        .put("/v2/queues/news", json!({"kind": "queue"}))
        .await
        .ok(201);
    assert_eq!(
        zaqar.get("/v2/topics/news").await.ok(200)["kind"],
        json!("topic")
    );
    assert_eq!(
        zaqar.get("/v2/queues/news").await.ok(200)["kind"],
        json!("queue")
    );
    let posted = zaqar
        .post(
            "/v2/topics/news/messages",
            json!({"messages": [{"body": "to the topic", "ttl": 300}, {"body": 2}]}),
        )
        .await;
    let resources = posted.ok(201)["resources"].as_array().unwrap().clone();
    assert!(
        resources[0]
            .as_str()
            .unwrap()
            .starts_with("/v2/topics/news/messages/"),
        "{resources:?}"
    );
    zaqar
        .post_messages("news", json!([{"body": "to the queue"}]))
        .await;
    let listed = zaqar.get("/v2/topics/news/messages?echo=true").await;
    assert_eq!(bodies(listed.ok(200)), [json!("to the topic"), json!(2)]);
    let next = listed.json["links"][0]["href"].as_str().unwrap();
    assert!(next.starts_with("/v2/topics/news/messages?"), "{next}");
    assert_eq!(zaqar.bodies("news", true).await, [json!("to the queue")]);
    assert_eq!(
        zaqar.get("/v2/topics/news/stats").await.ok(200)["messages"]["total"],
        json!(2)
    );
    assert_eq!(zaqar.stats("news").await, (1, 0, 1));
    // One message, by its href; then deleted one by one and by ids.
    let first = resources[0].as_str().unwrap();
    let id = first.rsplit('/').next().unwrap();
    let one = zaqar.get(first).await;
    assert_eq!(one.ok(200)["body"], json!("to the topic"));
    assert_eq!(one.json["href"], json!(first));
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/news/messages/{id}"))
            .await
            .status,
        404
    );
    assert_eq!(zaqar.delete(first).await.status, 204);
    assert_eq!(zaqar.get(first).await.status, 404);
    let second = resources[1].as_str().unwrap().rsplit('/').next().unwrap();
    let deleted = zaqar
        .delete(&format!("/v2/topics/news/messages?ids={second}"))
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(
        zaqar.get("/v2/topics/news/stats").await.ok(200)["messages"]["total"],
        json!(0)
    );
    // Natively: two queues, `proj-a:news` and the topic's own `proj-a::news`.
    let topic = zaqar.get("/api/queues/proj-a::news").await;
    assert_eq!(topic.ok(200)["name"], json!("proj-a::news"));
    // The dashboard lists the topic's queue by that name and shows its page.
    let page = |path: &str| {
        let url = format!("{}{path}", zaqar.base);
        let http = zaqar.http.clone();
        async move {
            let answer = http.get(url).send().await.unwrap();
            assert_eq!(answer.status().as_u16(), 200);
            answer.text().await.unwrap()
        }
    };
    assert!(page("/ui/queues").await.contains("proj-a::news"));
    assert!(
        page("/ui/queues/proj-a::news")
            .await
            .contains("proj-a::news")
    );
    assert_eq!(zaqar.stats("news").await, (1, 0, 1));
    // Purging the topic leaves the queue alone.
    zaqar
        .post(
            "/v2/topics/news/messages",
            json!({"messages": [{"body": 3}]}),
        )
        .await
        .ok(201);
    assert_eq!(
        zaqar.post("/v2/topics/news/purge", json!({})).await.status,
        400
    );
    assert_eq!(
        zaqar
            .post(
                "/v2/topics/news/purge",
                json!({"resource_types": ["messages"]})
            )
            .await
            .status,
        204
    );
    assert_eq!(
        zaqar.get("/v2/topics/news/stats").await.ok(200)["messages"]["total"],
        json!(0)
    );
    assert_eq!(zaqar.stats("news").await, (1, 0, 1));
}

#[tokio::test]
async fn a_topic_message_is_delivered_to_the_topics_subscriptions_only() {
    let (_server, zaqar) = server().await;
    let topic_hook = receiver::Receiver::ok().await;
    let queue_hook = receiver::Receiver::ok().await;
    zaqar.put_empty("/v2/topics/alerts").await.ok(201);
    let subscribed = zaqar
        .post(
            "/v2/topics/alerts/subscriptions",
            json!({"subscriber": topic_hook.url("/topic"), "ttl": 3600,
                   "options": {"post_headers": {"X-From": "topic"}}}),
        )
        .await;
    let sid = subscribed.ok(201)["subscription_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        subscribed.header("location"),
        Some("/v2/topics/alerts/subscriptions")
    );
    zaqar
        .post(
            "/v2/queues/alerts/subscriptions",
            json!({"subscriber": queue_hook.url("/queue")}),
        )
        .await
        .ok(201);
    // The topic's subscriptions are its own.
    let listed = zaqar.get("/v2/topics/alerts/subscriptions").await;
    let subscriptions = listed.ok(200)["subscriptions"].as_array().unwrap().clone();
    assert_eq!(subscriptions.len(), 1, "{subscriptions:?}");
    assert_eq!(subscriptions[0]["id"], json!(sid));
    assert_eq!(subscriptions[0]["source"], json!("alerts"));
    assert_eq!(
        subscriptions[0]["subscriber"],
        json!(topic_hook.url("/topic"))
    );
    let shown = zaqar
        .get(&format!("/v2/topics/alerts/subscriptions/{sid}"))
        .await;
    assert_eq!(shown.ok(200)["id"], json!(sid));
    assert_eq!(
        zaqar
            .get(&format!("/v2/queues/alerts/subscriptions/{sid}"))
            .await
            .status,
        404
    );
    zaqar
        .post(
            "/v2/topics/alerts/messages",
            json!({"messages": [{"body": {"level": "high"}, "ttl": 300}]}),
        )
        .await
        .ok(201);
    let got = topic_hook.wait_for(1, PATIENCE).await;
    assert_eq!(
        got[0].json(),
        json!({"ttl": 300, "body": {"level": "high"}, "Message_Type": "Notification",
               "queue_name": "alerts"})
    );
    assert_eq!(got[0].header("x-from"), "topic");
    // The queue's subscriber gets the queue's message, and only it.
    zaqar
        .post_messages("alerts", json!([{"body": "queued"}]))
        .await;
    let got = queue_hook.wait_for(1, PATIENCE).await;
    assert_eq!(got[0].json()["body"], json!("queued"));
    assert_eq!(topic_hook.count(), 1);
    // Update, confirm and unsubscribe through the topic.
    let path = format!("/v2/topics/alerts/subscriptions/{sid}");
    assert_eq!(zaqar.patch(&path, json!({"ttl": 7200})).await.status, 204);
    assert_eq!(zaqar.get(&path).await.ok(200)["ttl"], json!(7200));
    let confirm = zaqar
        .send(
            Method::PUT,
            &format!("{path}/confirm"),
            Some(json!({"confirmed": true}).to_string().into_bytes()),
            &[],
        )
        .await;
    assert_eq!(confirm.status, 204);
    assert_eq!(zaqar.delete(&path).await.status, 204);
    assert_eq!(zaqar.get(&path).await.status, 404);
}

/// A claim's end counts from when the claim began, as a lease's does: a claim whose commit was
/// confirmed only after its ttl had passed hands out no message (`204`), and its messages are
/// claimed again once it is seen to have ended. Runs on PostgreSQL (as CI does), and says so on
/// the embedded store.
#[tokio::test]
async fn a_claim_that_ended_while_it_committed_hands_out_nothing() {
    if !common::on_postgres() {
        eprintln!(
            "skipped: the embedded store's claims cannot be held up (TENAX_TEST_STORE=postgres runs it)"
        );
        return;
    }
    let (server, zaqar) = server().await;
    zaqar.post_messages("q", json!([{ "body": 1 }])).await;
    let claim = zaqar.claim("q", 60, 60, None);
    let answer = server
        .held_up(Waiter::Take, Duration::from_secs(61), claim)
        .await;
    assert_eq!(answer.status, 204, "{answer:?}");

    // A claim ends the queue's ended leases before it takes: the message is free at once.
    let again = zaqar.claim("q", 60, 60, None).await;
    let messages = again.ok(201)["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{again:?}");
    assert_eq!(messages[0]["body"], json!(1));
}

/// A renewal's new end counts from when it began, as a heartbeat's does: a renewal confirmed
/// only after its new ttl had passed answers 404, as for an ended claim (its messages are free
/// by then), not 204. Runs on PostgreSQL, and says so on the embedded store.
#[tokio::test]
async fn a_renewal_that_ended_while_it_committed_is_not_found() {
    if !common::on_postgres() {
        eprintln!(
            "skipped: the embedded store's renewals cannot be held up (TENAX_TEST_STORE=postgres runs it)"
        );
        return;
    }
    let (server, zaqar) = server().await;
    zaqar.post_messages("q", json!([{ "body": 1 }])).await;
    let claimed = zaqar.claim("q", 60, 60, None).await;
    let location = claimed.headers["location"]
        .to_str()
        .expect("a location")
        .to_owned();
    let renew = zaqar.patch(&location, json!({ "ttl": 60, "grace": 60 }));
    let renewed = server
        .held_up(Waiter::Renewal, Duration::from_secs(61), renew)
        .await;
    assert_eq!(renewed.status, 404, "{renewed:?}");
    assert_eq!(zaqar.get(&location).await.status, 404);
    let again = zaqar.claim("q", 60, 60, None).await;
    let messages = again.ok(201)["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{again:?}");
}
