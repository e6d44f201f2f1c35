//! Zaqar's websocket transport against a real server on a loopback port, with a real websocket
//! client: every action family with Zaqar's websocket answers, frames Zaqar refuses, tokens and
//! scopes as `/v2` has them, the listener's limits (size, connection table, idle peers), the
//! listener of `--zaqar-websocket-listen`, and the push of posted messages to a websocket
//! subscriber.

use std::net::TcpListener as StdListener;

use common::{Options, PATIENCE, TestServer};
use futures_util::{SinkExt, StreamExt};
use receiver::Receiver;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::common;
use crate::common::receiver;

const CLIENT: &str = "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11";
const ADMIN: &str = "admin-token-for-the-websocket-tests-0123456789";

/// One websocket connection speaking Zaqar's frames as one project.
struct Ws {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    headers: Value,
}

/// The `ws://` URL of a server's root.
fn ws_url(server: &TestServer) -> String {
    server.api.url("/").replacen("http://", "ws://", 1)
}

impl Ws {
    async fn open(url: &str, project: &str) -> Self {
        let (socket, _) = tokio::time::timeout(PATIENCE, tokio_tungstenite::connect_async(url))
            .await
            .expect("the handshake in time")
            .expect("a websocket");
        Self {
            socket,
            headers: json!({"Client-ID": CLIENT, "X-Project-ID": project}),
        }
    }

    /// The next text frame, as JSON (pings are answered by the client as they are read).
    async fn next(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(PATIENCE, self.socket.next())
                .await
                .expect("a frame in time")
                .expect("the connection is open")
                .expect("a frame");
            match message {
                Message::Text(text) => return serde_json::from_str(&text).expect("JSON"),
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    async fn send_text(&mut self, text: String) {
        self.send_text_checked(text).await.expect("sent");
    }

    async fn send_text_checked(
        &mut self,
        text: String,
    ) -> Result<(), tokio_tungstenite::tungstenite::Error> {
        self.socket.send(Message::Text(text.into())).await
    }

    /// Waits for the server to close the connection: the close frame's code, if it sent one.
    async fn closed(&mut self) -> Option<u16> {
        tokio::time::timeout(PATIENCE, async {
            loop {
                match self.socket.next().await {
                    None | Some(Err(_)) => return None,
                    Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                    Some(Ok(_)) => {}
                }
            }
        })
        .await
        .expect("the server closes the connection in time")
    }

    /// Sends a frame and reads its answer.
    async fn frame(&mut self, frame: Value) -> Value {
        self.send_text(frame.to_string()).await;
        self.next().await
    }

    /// Sends `action` with this connection's headers and `body`: the answer's status and body,
    /// after checking that it echoes the request.
    async fn ask(&mut self, action: &str, body: Value) -> (u64, Value) {
        let answer = self
            .frame(json!({"action": action, "headers": self.headers, "body": body}))
            .await;
        assert_eq!(
            answer["request"],
            json!({"action": action, "body": body, "headers": self.headers, "api": "v2"}),
            "{answer}"
        );
        (
            answer["headers"]["status"].as_u64().expect("a status"),
            answer["body"].clone(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_actions_answer_as_zaqars_websocket() {
    let server = TestServer::start(Options::system()).await;
    let mut ws = Ws::open(&ws_url(&server), "p1").await;

    // Zaqar's own functional test (zaqar/tests/functional/websocket/test_queues.py).
    assert_eq!(
        ws.ask("queue_list", json!({})).await,
        (200, json!({"queues": []}))
    );
    assert_eq!(
        ws.ask("queue_create", json!({"queue_name": "my_queue"}))
            .await,
        (201, json!("Queue my_queue created."))
    );
    assert_eq!(
        ws.ask("queue_create", json!({"queue_name": "my_queue"}))
            .await,
        (204, json!("Queue my_queue created."))
    );
    assert_eq!(
        ws.ask("queue_list", json!({})).await,
        (200, json!({"queues": [{"name": "my_queue"}]}))
    );
    let (status, body) = ws
        .ask(
            "queue_create",
            json!({"queue_name": "meta", "metadata": {"k": "v"}}),
        )
        .await;
    assert_eq!((status, body), (201, json!("Queue meta created.")));
    let (status, listed) = ws.ask("queue_list", json!({"detailed": true})).await;
    assert_eq!(status, 200);
    assert_eq!(listed["queues"][0]["name"], "meta");
    assert_eq!(listed["queues"][0]["metadata"]["k"], "v");
    let (status, shown) = ws.ask("queue_get", json!({"queue_name": "meta"})).await;
    assert_eq!(status, 200);
    assert_eq!(shown["k"], "v");
    ws.ask(
        "message_post",
        json!({"queue_name": "meta", "messages": [{"body": 1}]}),
    )
    .await;
    let (status, stats) = ws
        .ask("queue_get_stats", json!({"queue_name": "meta"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(stats["messages"]["free"], 1);
    assert_eq!(
        ws.ask(
            "queue_purge",
            json!({"queue_name": "meta", "resource_types": ["messages"]})
        )
        .await,
        (204, json!({}))
    );
    let (_, stats) = ws
        .ask("queue_get_stats", json!({"queue_name": "meta"}))
        .await;
    assert_eq!(stats["messages"]["total"], 0);
    assert_eq!(
        ws.ask("queue_delete", json!({"queue_name": "meta"})).await,
        (204, json!("Queue meta removed."))
    );
    // Another project sees nothing of p1's.
    let mut other = Ws::open(&ws_url(&server), "p2").await;
    assert_eq!(
        other.ask("queue_list", json!({})).await,
        (200, json!({"queues": []}))
    );
    // GET / without an upgrade is still Zaqar's version document.
    let versions = server
        .api
        .http()
        .get(server.api.url("/"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(versions.status(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_and_claim_actions_answer_as_zaqars_websocket() {
    let server = TestServer::start(Options::system()).await;
    let mut ws = Ws::open(&ws_url(&server), "p1").await;
    let q = json!({"queue_name": "jobs"});
    let (status, posted) = ws
        .ask(
            "message_post",
            json!({"queue_name": "jobs", "messages": [{"body": {"n": 1}, "ttl": 300},
                                                      {"body": {"n": 2}}, {"body": {"n": 3}}]}),
        )
        .await;
    assert_eq!(status, 201);
    let ids: Vec<String> = posted["message_ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_str().expect("a string id").to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    // Without echo the poster's own messages are not listed (as over HTTP).
    assert_eq!(
        ws.ask("message_list", q.clone()).await,
        (200, json!({"messages": []}))
    );
    let (status, listed) = ws
        .ask(
            "message_list",
            json!({"queue_name": "jobs", "echo": true, "limit": 2}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["messages"].as_array().map(Vec::len), Some(2));
    let first = &listed["messages"][0];
    assert_eq!(first["id"], ids[0].as_str());
    assert_eq!(first["claim_id"], Value::Null);
    assert_eq!(first["ttl"], 300);
    assert_eq!(first["body"], json!({"n": 1}));
    let keys: Vec<&String> = first.as_object().expect("an object").keys().collect();
    assert_eq!(keys, ["age", "body", "claim_id", "id", "ttl"]);
    let (status, one) = ws
        .ask(
            "message_get",
            json!({"queue_name": "jobs", "message_id": ids[1]}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(one["messages"]["body"], json!({"n": 2}));
    let (status, many) = ws
        .ask(
            "message_get_many",
            json!({"queue_name": "jobs", "message_ids": [ids[0], ids[2]]}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(many["messages"].as_array().map(Vec::len), Some(2));

    // Claims.
    let (status, claimed) = ws
        .ask(
            "claim_create",
            json!({"queue_name": "jobs", "ttl": 60, "grace": 60, "limit": 2}),
        )
        .await;
    assert_eq!(status, 201);
    let claim = claimed["claim_id"].as_str().expect("a claim id").to_owned();
    assert_eq!(claimed["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(claimed["messages"][0]["claim_id"], claim.as_str());
    let claim_ref = json!({"queue_name": "jobs", "claim_id": claim});
    let (status, shown) = ws.ask("claim_get", claim_ref.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(shown["ttl"], 60);
    assert_eq!(shown["messages"][0]["claim_id"], claim.as_str());
    assert!(shown.get("href").is_none(), "{shown}");
    assert_eq!(
        ws.ask(
            "claim_update",
            json!({"queue_name": "jobs", "claim_id": claim, "ttl": 120})
        )
        .await,
        (204, json!(format!("Claim {claim} updated.")))
    );
    // A claimed message is deleted with its claim.
    let claimed_id = claimed["messages"][0]["id"].clone();
    let (status, refused) = ws
        .ask(
            "message_delete",
            json!({"queue_name": "jobs", "message_id": claimed_id}),
        )
        .await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(
        ws.ask(
            "message_delete",
            json!({"queue_name": "jobs", "message_id": claimed_id, "claim_id": claim})
        )
        .await,
        (204, json!({}))
    );
    assert_eq!(
        ws.ask("claim_delete", claim_ref.clone()).await,
        (204, json!(format!("Claim {claim} deleted.")))
    );
    let (status, gone) = ws.ask("claim_get", claim_ref).await;
    assert_eq!(status, 404);
    assert_eq!(
        gone["error"],
        json!(format!("Claim {claim} does not exist."))
    );
    assert!(gone["exception"].is_string(), "{gone}");

    // Delete by ids, then pop, then a claim that finds nothing.
    assert_eq!(
        ws.ask(
            "message_delete_many",
            json!({"queue_name": "jobs", "message_ids": [ids[1]]})
        )
        .await,
        (204, json!({}))
    );
    let (status, popped) = ws
        .ask(
            "message_delete_many",
            json!({"queue_name": "jobs", "pop": 5}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(popped["messages"].as_array().map(Vec::len), Some(1));
    assert_eq!(popped["messages"][0]["body"], json!({"n": 3}));
    assert_eq!(
        ws.ask(
            "claim_create",
            json!({"queue_name": "jobs", "ttl": 60, "grace": 60})
        )
        .await,
        (204, json!({"claim_id": null}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_and_node_actions_answer_as_zaqars_websocket() {
    let server = TestServer::start(Options::system().flags(&["--allow-private-endpoints"])).await;
    let receiver = Receiver::ok().await;
    let mut ws = Ws::open(&ws_url(&server), "p1").await;
    let (status, created) = ws
        .ask(
            "subscription_create",
            json!({"queue_name": "events", "subscriber": receiver.url("/hook"), "ttl": 3600,
                   "options": {"k": "v"}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["message"], "Subscription events created.");
    let id = created["subscription_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let (status, listed) = ws
        .ask("subscription_list", json!({"queue_name": "events"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["subscriptions"][0]["id"], id.as_str());
    let sub = json!({"queue_name": "events", "subscription_id": id});
    let (status, shown) = ws.ask("subscription_get", sub.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(shown["subscriber"], receiver.url("/hook").as_str());
    assert_eq!(shown["options"]["k"], "v");
    // A message posted over the websocket is delivered to the webhook subscriber.
    ws.ask(
        "message_post",
        json!({"queue_name": "events", "messages": [{"body": "hook"}]}),
    )
    .await;
    let delivered = receiver.wait_for(1, PATIENCE).await;
    assert_eq!(delivered[0].json()["body"], "hook");
    assert_eq!(
        ws.ask("subscription_delete", sub.clone()).await,
        (204, json!(format!("Subscription {id} removed.")))
    );
    let (status, gone) = ws.ask("subscription_get", sub).await;
    assert_eq!(status, 404);
    assert_eq!(
        gone["error"],
        json!(format!(
            "Subscription {id} for queue events does not exist."
        ))
    );
    let (status, refused) = ws
        .ask(
            "subscription_create",
            json!({"queue_name": "events", "subscriber": "ftp://example.com/x"}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        refused["exception"]
            .as_str()
            .is_some_and(|text| text.contains("subscriber type")),
        "{refused}"
    );
    assert_eq!(ws.ask("ping_node", json!({})).await, (204, json!({})));
    let (status, health) = ws.ask("check_node_health", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(health["storage_reachable"], true);
    let (status, home) = ws.ask("get_home_doc", json!({})).await;
    assert_eq!(status, 200);
    assert!(home["resources"].is_object(), "{home}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_zaqar_refuses_are_answered_and_the_connection_stays() {
    let server = TestServer::start(Options::system()).await;
    let mut ws = Ws::open(&ws_url(&server), "p1").await;
    let unread = json!({"action": null, "body": {}, "headers": {}, "api": "v2"});

    ws.send_text("{not json".to_owned()).await;
    let answer = ws.next().await;
    assert_eq!(answer["request"], unread);
    assert_eq!(answer["headers"]["status"], 400);
    assert!(
        answer["body"]["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Can't decode text (JSON) request.")),
        "{answer}"
    );
    let answer = ws.frame(json!([1, 2])).await;
    assert_eq!(
        (
            answer["headers"]["status"].clone(),
            answer["body"].clone(),
            answer["request"].clone()
        ),
        (
            json!(400),
            json!({"error": "Unexpected body type. Expected dict or dict like."}),
            unread.clone()
        )
    );
    let answer = ws
        .frame(json!({"action": "queue_fly", "headers": {}}))
        .await;
    assert_eq!(
        answer["body"],
        json!({"error": "queue_fly is not a valid action"})
    );
    assert_eq!(answer["request"]["action"], "queue_fly");
    let answer = ws.frame(json!({"headers": {}})).await;
    assert_eq!(
        answer["body"],
        json!({"error": "None is not a valid action"})
    );
    let schema_failures = [
        json!({"action": "queue_list"}),
        json!({"action": "queue_list", "headers": {"X-Project-ID": "p1"}}),
        json!({"action": "queue_create", "headers": ws.headers, "body": {}}),
        json!({"action": "queue_create", "headers": ws.headers}),
        json!({"action": "queue_create", "headers": ws.headers, "body": {"queue_name": 7}}),
        json!({"action": "message_list", "headers": ws.headers,
               "body": {"queue_name": "q", "limit": "3"}}),
        json!({"action": "queue_list", "headers": {"Client-ID": 1, "X-Project-ID": "p1"}}),
    ];
    for frame in schema_failures {
        let answer = ws.frame(frame.clone()).await;
        assert_eq!(answer["headers"]["status"], 400, "{frame}");
        assert_eq!(
            answer["body"],
            json!({"error": "Schema validation failed."}),
            "{frame}"
        );
    }
    // /v2's own checks, in Zaqar's websocket error shape.
    let (status, body) = ws
        .ask("queue_create", json!({"queue_name": "bad name!"}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], Value::Null);
    assert!(
        body["exception"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
    let (status, body) = ws
        .ask(
            "message_post",
            json!({"queue_name": "q", "messages": [{"body": 1, "ttl": 5}]}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        body["exception"]
            .as_str()
            .is_some_and(|e| e.contains("The TTL for a message may not exceed")),
        "{body}"
    );
    let bad_client = json!({"Client-ID": "not-a-uuid", "X-Project-ID": "p1"});
    let answer = ws
        .frame(json!({"action": "queue_list", "headers": bad_client}))
        .await;
    assert_eq!(answer["headers"]["status"], 400);
    assert_eq!(answer["body"]["exception"], "Malformed hexadecimal UUID.");
    // Binary (MessagePack) frames are refused in a text answer.
    ws.socket
        .send(Message::Binary(vec![0x80].into()))
        .await
        .expect("sent");
    let answer = ws.next().await;
    assert_eq!(answer["headers"]["status"], 400);
    assert_eq!(answer["request"], unread);
    // The connection still works.
    assert_eq!(ws.ask("queue_list", json!({})).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_scopes_hold_over_the_websocket() {
    let server =
        TestServer::start(Options::system().flags(&["--auth", "on", "--admin-token", ADMIN])).await;
    let scoped = {
        let response = server
            .api
            .http()
            .post(server.api.url("/api/tokens"))
            .bearer_auth(ADMIN)
            .json(&json!({"name": "p1 only", "role": "admin", "projects": ["p1"]}))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 201);
        let made: Value = response.json().await.expect("JSON");
        made["token"].as_str().expect("a token").to_owned()
    };
    let mut ws = Ws::open(&ws_url(&server), "p1").await;
    // Without a token: Zaqar's websocket answer.
    assert_eq!(
        ws.ask("queue_list", json!({})).await,
        (403, json!({"error": "Not authentified."}))
    );
    let authenticate = |token: &str| {
        json!({"action": "authenticate",
               "headers": {"X-Project-ID": "p1", "X-Auth-Token": token}})
    };
    let made = json!({"action": "authenticate", "body": {}, "headers": {}, "api": "v2"});
    let answer = ws.frame(authenticate("not-a-token")).await;
    assert_eq!(answer["headers"]["status"], 401);
    assert_eq!(answer["body"], json!({"error": "Authentication failed."}));
    assert_eq!(answer["request"], made);
    assert_eq!(ws.ask("queue_list", json!({})).await.0, 403);
    let answer = ws.frame(authenticate(&scoped)).await;
    assert_eq!(answer["headers"]["status"], 200);
    assert_eq!(answer["body"], json!({"message": "Authentified."}));
    assert_eq!(
        ws.ask("queue_create", json!({"queue_name": "mine"})).await,
        (201, json!("Queue mine created."))
    );
    // The scope holds: project p2 is out of this token's reach.
    ws.headers["X-Project-ID"] = json!("p2");
    let (status, body) = ws
        .ask("queue_create", json!({"queue_name": "theirs"}))
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, _) = ws
        .ask("subscription_create", json!({"queue_name": "theirs"}))
        .await;
    assert_eq!(status, 403);
    // A token given with the upgrade request counts as authenticated.
    let mut request = ws_url(&server).into_client_request().expect("a request");
    request
        .headers_mut()
        .insert("X-Auth-Token", ADMIN.parse().expect("a header"));
    let (socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("a websocket");
    let mut admin = Ws {
        socket,
        headers: json!({"Client-ID": CLIENT, "X-Project-ID": "p2"}),
    };
    assert_eq!(
        admin
            .ask("queue_create", json!({"queue_name": "theirs"}))
            .await,
        (201, json!("Queue theirs created."))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_subscriber_gets_each_message_posted_after_it_subscribed() {
    let server = TestServer::start(Options::system()).await;
    let url = ws_url(&server);
    let mut subscriber = Ws::open(&url, "p1").await;
    let mut poster = Ws::open(&url, "p1").await;
    poster
        .ask(
            "message_post",
            json!({"queue_name": "feed", "messages": [{"body": "before"}]}),
        )
        .await;
    let (status, created) = subscriber
        .ask(
            "subscription_create",
            json!({"queue_name": "feed", "ttl": 600}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["message"], "Subscription feed created.");
    let id = created["subscription_id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let sub = json!({"queue_name": "feed", "subscription_id": id});
    let (status, shown) = subscriber.ask("subscription_get", sub.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(shown["ttl"], 600);
    assert_eq!(shown["source"], "feed");

    // Posted over the websocket and over HTTP; another project's queue of the same name is
    // not this subscription's.
    poster
        .ask(
            "message_post",
            json!({"queue_name": "feed", "messages": [{"body": {"n": 1}, "ttl": 120}, {"body": {"n": 2}}]}),
        )
        .await;
    let mut stranger = Ws::open(&url, "p2").await;
    stranger
        .ask(
            "message_post",
            json!({"queue_name": "feed", "messages": [{"body": "p2"}]}),
        )
        .await;
    let http = server
        .api
        .http()
        .post(server.api.url("/v2/queues/feed/messages"))
        .header("Client-ID", CLIENT)
        .header("X-Project-ID", "p1")
        .json(&json!({"messages": [{"body": {"n": 3}}]}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(http.status(), 201);
    let pushed = [
        subscriber.next().await,
        subscriber.next().await,
        subscriber.next().await,
    ];
    assert_eq!(
        pushed[0],
        json!({"body": {"n": 1}, "ttl": 120, "queue_name": "feed", "Message_Type": "Notification"})
    );
    assert_eq!(pushed[1]["body"], json!({"n": 2}));
    assert_eq!(pushed[1]["ttl"], 3600);
    assert_eq!(pushed[2]["body"], json!({"n": 3}));

    // Unsubscribed: the next message is not pushed; the next frame is the answer to a request.
    assert_eq!(
        subscriber.ask("subscription_delete", sub.clone()).await,
        (204, json!(format!("Subscription {id} removed.")))
    );
    assert_eq!(subscriber.ask("subscription_get", sub).await.0, 404);
    poster
        .ask(
            "message_post",
            json!({"queue_name": "feed", "messages": [{"body": "after"}]}),
        )
        .await;
    let (status, listed) = subscriber
        .ask(
            "message_list",
            json!({"queue_name": "feed", "echo": true, "limit": 20}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(listed["messages"].as_array().map(Vec::len), Some(5));
    let (status, refused) = subscriber
        .ask(
            "subscription_create",
            json!({"queue_name": "feed", "ttl": 5}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
}

/// A free loopback port, for a second listener.
fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_websocket_listener_serves_the_same_frames() {
    let port = free_port();
    let at = format!("127.0.0.1:{port}");
    let server =
        TestServer::start(Options::system().flags(&["--zaqar-websocket-listen", &at])).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    // The listener is bound before the server answers; a refused connect means not yet.
    let mut ws = loop {
        match tokio_tungstenite::connect_async(format!("ws://{at}/")).await {
            Ok((socket, _)) => {
                break Ws {
                    socket,
                    headers: json!({"Client-ID": CLIENT, "X-Project-ID": "p1"}),
                };
            }
            Err(error) => {
                assert!(tokio::time::Instant::now() < deadline, "{error}");
                tokio::task::yield_now().await;
            }
        }
    };
    assert_eq!(
        ws.ask("queue_create", json!({"queue_name": "nine"})).await,
        (201, json!("Queue nine created."))
    );
    // Same store as the API's listener.
    let mut main = Ws::open(&ws_url(&server), "p1").await;
    assert_eq!(
        main.ask("queue_list", json!({})).await,
        (200, json!({"queues": [{"name": "nine"}]}))
    );
    let plain = server
        .api
        .http()
        .get(format!("http://{at}/"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(plain.status(), 426);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_larger_than_the_request_limit_closes_the_websocket() {
    let server = TestServer::start(Options::system().flags(&["--max-request-bytes", "4096"])).await;
    let mut ws = Ws::open(&ws_url(&server), "p1").await;
    let big = "x".repeat(8192);
    ws.send_text(
        json!({"action": "message_post", "headers": ws.headers,
               "body": {"queue_name": "q", "messages": [{"body": big}]}})
        .to_string(),
    )
    .await;
    let ended = ws.closed().await;
    // 1009: message too big (or the connection is simply dropped).
    assert!(matches!(ended, None | Some(1009)), "{ended:?}");
    // Nothing was posted.
    let mut other = Ws::open(&ws_url(&server), "p1").await;
    let (_, listed) = other
        .ask("message_list", json!({"queue_name": "q", "echo": true}))
        .await;
    assert_eq!(listed, json!({"messages": []}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_websocket_makes_room_for_a_new_connection() {
    let server = TestServer::start(Options::system().flags(&[
        "--max-connections",
        "2",
        "--max-connections-per-address",
        "2",
    ]))
    .await;
    let mut first = Ws::open(&ws_url(&server), "p1").await;
    assert_eq!(first.ask("queue_list", json!({})).await.0, 200);
    let mut second = Ws::open(&ws_url(&server), "p1").await;
    assert_eq!(second.ask("queue_list", json!({})).await.0, 200);
    // The table is full of websockets: a third connection takes the place of the idlest.
    let mut third = Ws::open(&ws_url(&server), "p1").await;
    // 1001: going away.
    assert_eq!(first.closed().await, Some(1001));
    assert_eq!(third.ask("queue_list", json!({})).await.0, 200);
    assert_eq!(second.ask("queue_list", json!({})).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_answers_no_ping_is_closed_after_the_idle_timeout() {
    let server = TestServer::start(Options::system().flags(&["--idle-timeout", "1s"])).await;
    // A client that answers nothing: the handshake by hand, then only reading.
    let address = server.api.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).await.expect("connected");
    let handshake = format!(
        "GET / HTTP/1.1\r\nHost: {address}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    stream
        .write_all(handshake.as_bytes())
        .await
        .expect("handshake sent");
    let mut seen = Vec::new();
    let ended = tokio::time::timeout(PATIENCE, async {
        let mut buffer = [0_u8; 1024];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the server closes a silent websocket");
    let text = String::from_utf8_lossy(&seen);
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    // After the head: a ping (0x89), then a close (0x88) with 1001.
    let head_end = text.find("\r\n\r\n").expect("a head") + 4;
    let frames = &seen[head_end..];
    assert_eq!(frames.first(), Some(&0x89), "{frames:?}");
    let close = frames
        .iter()
        .position(|b| *b == 0x88)
        .expect("a close frame");
    assert_eq!(&frames[close + 2..close + 4], &1001_u16.to_be_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_answers_pings_stays_open_past_the_idle_timeout() {
    // The client answers each ping as it reads it, and has the other half of the timeout to
    // do so: 1.5 s here, so that a busy machine's pause does not close it.
    let server = TestServer::start(Options::system().flags(&["--idle-timeout", "3s"])).await;
    let mut ws = Ws::open(&ws_url(&server), "p1").await;
    // Two pings answered: past the idle timeout.
    let mut pings = 0;
    while pings < 2 {
        let message = tokio::time::timeout(PATIENCE, ws.socket.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .expect("a frame");
        match message {
            Message::Ping(_) => pings += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    // Flushes the last pong, and the connection still answers.
    assert_eq!(ws.ask("queue_list", json!({})).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_site_gets_nothing_through_the_websocket() {
    let server = TestServer::start(Options::system()).await;
    // A browser names the page's origin in the upgrade request; every frame carries it, so the
    // browser rules of /v2 hold (a server without tokens would otherwise obey any page).
    let mut request = ws_url(&server).into_client_request().expect("a request");
    request
        .headers_mut()
        .insert("Origin", "http://evil.example".parse().expect("a header"));
    let (socket, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("a websocket");
    let mut page = Ws {
        socket,
        headers: json!({"Client-ID": CLIENT, "X-Project-ID": "p1"}),
    };
    let (status, body) = page
        .ask("queue_create", json!({"queue_name": "stolen"}))
        .await;
    assert_eq!(status, 403, "{body}");
    let mut own = Ws::open(&ws_url(&server), "p1").await;
    assert_eq!(
        own.ask("queue_list", json!({})).await,
        (200, json!({"queues": []}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_stops_reading_is_closed_after_the_idle_timeout() {
    let server = TestServer::start(Options::system().flags(&["--idle-timeout", "1s"])).await;
    let mut ws = Ws::open(&ws_url(&server), "p1").await;
    // Each answer echoes its frame's body: sending without ever reading fills the server's
    // socket, then its writes wait on a peer that accepts nothing, and the server gives up.
    let frame = json!({"action": "unknown", "headers": {}, "body": {"pad": "x".repeat(32 * 1024)}})
        .to_string();
    let dropped = tokio::time::timeout(PATIENCE, async {
        loop {
            if ws.send_text_checked(frame.clone()).await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(
        dropped.is_ok(),
        "the server closes a connection whose peer stops reading"
    );
}
