//! Zaqar's websocket actions (`zaqar/common/consts.py`, schemas in `zaqar/api/v2/request.py`,
//! answers in `zaqar/api/v2/endpoints.py`), each as the `/v2` HTTP request that does the same,
//! and the HTTP answer reshaped as the websocket endpoint answers. The HTTP request runs through
//! the server's whole router, so every rule of `/v2` (checks, limits, tokens, scopes,
//! pre-signed URLs) holds over the websocket as it does over HTTP.

use axum::http::Method;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use super::frames::{Frame, Kind, Schema};

/// What a path segment leaves as it is: RFC 3986's unreserved characters.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

const IDS: &[&str] = &["Client-ID", "X-Project-ID"];

/// Every action Tenax answers: the headers it requires, whether it requires a body, and the
/// body's fields (`!`: required). A field has one type in every action ([`kind_of`]).
pub(super) const ACTIONS: &[(&str, Schema)] = &[
    (
        "authenticate",
        Schema::new(&["X-Project-ID", "X-Auth-Token"], false, ""),
    ),
    ("get_home_doc", Schema::new(&[], false, "")),
    ("check_node_health", Schema::new(&[], false, "")),
    ("ping_node", Schema::new(&[], false, "")),
    (
        "queue_list",
        Schema::new(IDS, false, "marker limit detailed"),
    ),
    ("queue_create", Schema::new(IDS, true, "queue_name!")),
    ("queue_delete", Schema::new(IDS, true, "queue_name!")),
    ("queue_get", Schema::new(IDS, true, "queue_name!")),
    ("queue_get_stats", Schema::new(IDS, true, "queue_name!")),
    (
        "queue_purge",
        Schema::new(IDS, true, "queue_name! resource_types"),
    ),
    (
        "message_list",
        Schema::new(IDS, true, "queue_name! marker limit echo include_claimed"),
    ),
    (
        "message_get",
        Schema::new(IDS, true, "queue_name! message_id!"),
    ),
    (
        "message_get_many",
        Schema::new(IDS, true, "queue_name! message_ids!"),
    ),
    (
        "message_post",
        Schema::new(IDS, true, "queue_name! messages!"),
    ),
    (
        "message_delete",
        Schema::new(IDS, true, "queue_name! message_id! claim_id"),
    ),
    (
        "message_delete_many",
        Schema::new(IDS, true, "queue_name! message_ids claim_ids pop"),
    ),
    (
        "claim_create",
        Schema::new(IDS, true, "queue_name! limit ttl grace"),
    ),
    ("claim_get", Schema::new(IDS, true, "queue_name! claim_id!")),
    (
        "claim_update",
        Schema::new(IDS, true, "queue_name! claim_id! ttl"),
    ),
    (
        "claim_delete",
        Schema::new(IDS, true, "queue_name! claim_id!"),
    ),
    ("subscription_list", Schema::new(IDS, true, "queue_name!")),
    (
        "subscription_create",
        Schema::new(IDS, true, "queue_name! subscriber ttl options"),
    ),
    (
        "subscription_get",
        Schema::new(IDS, true, "queue_name! subscription_id!"),
    ),
    (
        "subscription_delete",
        Schema::new(IDS, true, "queue_name! subscription_id!"),
    ),
];

/// The type of a body field in Zaqar's schemas (the same in every action that has it).
pub(super) fn kind_of(field: &str) -> Kind {
    match field {
        "limit" | "ttl" | "grace" | "pop" => Kind::Integer,
        "detailed" | "echo" | "include_claimed" => Kind::Boolean,
        "resource_types" | "message_ids" | "messages" | "claim_ids" => Kind::Array,
        "options" => Kind::Object,
        // queue_name, marker, message_id, claim_id, subscriber, subscription_id
        _ => Kind::String,
    }
}

/// The schema of an action Tenax answers.
pub(super) fn schema_of(action: &str) -> Option<&'static Schema> {
    ACTIONS
        .iter()
        .find(|(name, _)| *name == action)
        .map(|(_, schema)| schema)
}

/// A `/v2` request: method, path and query, and a JSON body.
#[derive(Debug, Clone)]
pub(super) struct Call {
    pub method: Method,
    pub path_and_query: String,
    pub json: Option<Value>,
}

/// The path of a queue's resource: `/v2/queues/{q}` and `rest` below it.
fn queue_path(frame: &Frame, rest: &[&str]) -> String {
    let mut path = String::from("/v2/queues/");
    path.push_str(&segment(frame.text("queue_name").unwrap_or_default()));
    for part in rest {
        path.push('/');
        path.push_str(part);
    }
    path
}

fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// The body field as a query value (strings as they are, numbers and booleans as JSON spells
/// them), if present and not null.
fn query_value(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        other => Some(other.to_string()),
    }
}

/// Appends `?name=value&...` for the body's fields `names` that are present, and for each item
/// of the list fields `lists` (as `name=item`, which `/v2` reads as a list).
fn with_query(path: String, frame: &Frame, names: &[&str], lists: &[(&str, &str)]) -> String {
    let mut pairs = url::form_urlencoded::Serializer::new(String::new());
    for name in names {
        if let Some(value) = frame.field(name).and_then(query_value) {
            pairs.append_pair(name, &value);
        }
    }
    for (field, name) in lists {
        for item in frame
            .field(field)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(value) = query_value(item) {
                pairs.append_pair(name, &value);
            }
        }
    }
    let query = pairs.finish();
    if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    }
}

/// The body's fields `names` that are present, as an object.
fn fields(frame: &Frame, names: &[&str]) -> Value {
    let object = names
        .iter()
        .filter_map(|name| Some(((*name).to_owned(), frame.field(name)?.clone())))
        .collect();
    Value::Object(object)
}

/// The `/v2` request that does what `action` does (`subscription_create` with a subscriber:
/// the connection's own subscriptions are not HTTP requests).
pub(super) fn call(action: &str, frame: &Frame) -> Option<Call> {
    let item = |field: &str| segment(frame.text(field).unwrap_or_default());
    let (method, path_and_query, json) = match action {
        "get_home_doc" => (Method::GET, "/v2/".to_owned(), None),
        "ping_node" => (Method::GET, "/v2/ping".to_owned(), None),
        "check_node_health" => (Method::GET, "/v2/health".to_owned(), None),
        "queue_list" => (
            Method::GET,
            with_query(
                "/v2/queues".to_owned(),
                frame,
                &["marker", "limit", "detailed"],
                &[],
            ),
            None,
        ),
        "queue_create" => (
            Method::PUT,
            queue_path(frame, &[]),
            Some(
                frame
                    .field("metadata")
                    .cloned()
                    .unwrap_or_else(|| json!({})),
            ),
        ),
        "queue_delete" => (Method::DELETE, queue_path(frame, &[]), None),
        "queue_get" => (Method::GET, queue_path(frame, &[]), None),
        "queue_get_stats" => (Method::GET, queue_path(frame, &["stats"]), None),
        "queue_purge" => (
            Method::POST,
            queue_path(frame, &["purge"]),
            Some(json!({"resource_types": frame
                .field("resource_types")
                .cloned()
                .unwrap_or_else(|| json!(["messages", "subscriptions"]))})),
        ),
        "message_list" => (
            Method::GET,
            with_query(
                queue_path(frame, &["messages"]),
                frame,
                &[
                    "marker",
                    "limit",
                    "echo",
                    "include_claimed",
                    "include_delayed",
                ],
                &[],
            ),
            None,
        ),
        "message_get" => (
            Method::GET,
            queue_path(frame, &["messages", &item("message_id")]),
            None,
        ),
        "message_get_many" => (
            Method::GET,
            with_query(
                queue_path(frame, &["messages"]),
                frame,
                &[],
                &[("message_ids", "ids")],
            ),
            None,
        ),
        "message_post" => (
            Method::POST,
            queue_path(frame, &["messages"]),
            Some(fields(frame, &["messages"])),
        ),
        "message_delete" => (
            Method::DELETE,
            with_query(
                queue_path(frame, &["messages", &item("message_id")]),
                frame,
                &["claim_id"],
                &[],
            ),
            None,
        ),
        "message_delete_many" => (
            Method::DELETE,
            with_query(
                queue_path(frame, &["messages"]),
                frame,
                &["pop"],
                &[("message_ids", "ids")],
            ),
            None,
        ),
        "claim_create" => (
            Method::POST,
            with_query(queue_path(frame, &["claims"]), frame, &["limit"], &[]),
            Some(fields(frame, &["ttl", "grace"])),
        ),
        "claim_get" => (
            Method::GET,
            queue_path(frame, &["claims", &item("claim_id")]),
            None,
        ),
        "claim_update" => (
            Method::PATCH,
            queue_path(frame, &["claims", &item("claim_id")]),
            Some(fields(frame, &["ttl", "grace"])),
        ),
        "claim_delete" => (
            Method::DELETE,
            queue_path(frame, &["claims", &item("claim_id")]),
            None,
        ),
        "subscription_list" => (Method::GET, queue_path(frame, &["subscriptions"]), None),
        "subscription_create" => (
            Method::POST,
            queue_path(frame, &["subscriptions"]),
            Some(fields(frame, &["subscriber", "ttl", "options"])),
        ),
        "subscription_get" => (
            Method::GET,
            queue_path(frame, &["subscriptions", &item("subscription_id")]),
            None,
        ),
        "subscription_delete" => (
            Method::DELETE,
            queue_path(frame, &["subscriptions", &item("subscription_id")]),
            None,
        ),
        _ => return None,
    };
    Some(Call {
        method,
        path_and_query,
        json,
    })
}

/// A message as the websocket endpoint shows it (`format_message`): `claim_id` is the claim
/// only in a claim's answers, null elsewhere.
fn message(http: &Value, claim_id: Option<&str>) -> Value {
    json!({
        "id": http.get("id").cloned().unwrap_or(Value::Null),
        "claim_id": claim_id,
        "ttl": http.get("ttl").cloned().unwrap_or(Value::Null),
        "age": http.get("age").cloned().unwrap_or(Value::Null),
        "body": http.get("body").cloned().unwrap_or(Value::Null),
    })
}

fn messages(http: &Value, claim_id: Option<&str>) -> Value {
    let list = http
        .get("messages")
        .and_then(Value::as_array)
        .map(|list| list.iter().map(|m| message(m, claim_id)).collect())
        .unwrap_or_default();
    Value::Array(list)
}

/// The claim of a claimed message's href (`...?claim_id={cid}`).
fn claim_of_href(message: &Value) -> Option<&str> {
    message
        .get("href")?
        .as_str()?
        .rsplit_once("claim_id=")
        .map(|(_, claim)| claim)
}

/// The websocket answer (status and body) to a successful `/v2` answer.
pub(super) fn success(action: &str, frame: &Frame, status: u16, http: Value) -> (u16, Value) {
    let queue = frame.text("queue_name").unwrap_or_default();
    match action {
        "queue_list" => {
            let queues = http
                .get("queues")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .map(|q| {
                            let mut item =
                                json!({"name": q.get("name").cloned().unwrap_or(Value::Null)});
                            if let Some(metadata) = q.get("metadata") {
                                item["metadata"] = metadata.clone();
                            }
                            item
                        })
                        .collect()
                })
                .unwrap_or_default();
            (200, json!({"queues": Value::Array(queues)}))
        }
        "queue_create" => (status, json!(format!("Queue {queue} created."))),
        "queue_delete" => (204, json!(format!("Queue {queue} removed."))),
        "queue_purge" | "message_delete" => (204, json!({})),
        "message_list" | "message_get_many" => (200, json!({"messages": messages(&http, None)})),
        "message_get" => (200, json!({"messages": message(&http, None)})),
        "message_post" => {
            let ids = http
                .get("resources")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(Value::as_str)
                        .map(|href| json!(href.rsplit('/').next().unwrap_or(href)))
                        .collect()
                })
                .unwrap_or_default();
            (201, json!({"message_ids": Value::Array(ids)}))
        }
        "message_delete_many" => {
            if frame.field("message_ids").is_some_and(|ids| !ids.is_null()) {
                (204, json!({}))
            } else {
                (
                    200,
                    json!({"messages": http.get("messages").cloned().unwrap_or(json!([]))}),
                )
            }
        }
        "claim_create" => {
            let claim = http
                .get("messages")
                .and_then(Value::as_array)
                .and_then(|list| list.first())
                .and_then(claim_of_href)
                .map(str::to_owned);
            match claim {
                Some(claim) => (
                    201,
                    json!({"claim_id": claim, "messages": messages(&http, Some(&claim))}),
                ),
                None => (204, json!({"claim_id": null})),
            }
        }
        "claim_get" => {
            let claim = frame.text("claim_id");
            let mut body = http;
            if let Some(object) = body.as_object_mut() {
                object.remove("href");
                object.remove("id");
            }
            let shown = messages(&body, claim);
            body["messages"] = shown;
            (200, body)
        }
        "claim_update" => (
            204,
            json!(format!(
                "Claim {} updated.",
                frame.text("claim_id").unwrap_or_default()
            )),
        ),
        "claim_delete" => (
            204,
            json!(format!(
                "Claim {} deleted.",
                frame.text("claim_id").unwrap_or_default()
            )),
        ),
        "subscription_list" => (
            200,
            json!({"subscriptions": http.get("subscriptions").cloned().unwrap_or(json!([]))}),
        ),
        "subscription_create" => (
            201,
            json!({"subscription_id": http.get("subscription_id").cloned().unwrap_or(Value::Null),
                   "message": format!("Subscription {queue} created.")}),
        ),
        "subscription_delete" => (
            204,
            json!(format!(
                "Subscription {} removed.",
                frame.text("subscription_id").unwrap_or_default()
            )),
        ),
        "ping_node" => (204, json!({})),
        // queue_get, queue_get_stats, subscription_get, get_home_doc, check_node_health
        _ => (status, http),
    }
}

/// The websocket answer to a `/v2` error `{"title", "description"}`: Zaqar's endpoints answer
/// `{"exception": <the error's text>, "error": <what failed, or null>}`.
pub(super) fn failure(action: &str, frame: &Frame, status: u16, http: &Value) -> (u16, Value) {
    let text = |name: &str| http.get(name).and_then(Value::as_str);
    let exception = text("description")
        .filter(|d| !d.is_empty())
        .or_else(|| text("title"))
        .unwrap_or("")
        .to_owned();
    let queue = frame.text("queue_name").unwrap_or_default();
    let error = match (action, status) {
        ("queue_get", 404) => Some(format!("Queue {queue} does not exist.")),
        ("claim_get" | "claim_update", 404) => Some(format!(
            "Claim {} does not exist.",
            frame.text("claim_id").unwrap_or_default()
        )),
        ("subscription_get", 404) => Some(format!(
            "Subscription {} for queue {queue} does not exist.",
            frame.text("subscription_id").unwrap_or_default()
        )),
        ("subscription_create", 409) => {
            return (409, json!(format!("Subscription {queue} not created.")));
        }
        (_, 500..) => Some("Unexpected error.".to_owned()),
        _ => None,
    };
    (status, json!({"exception": exception, "error": error}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: Value) -> Frame {
        let payload = json!({"action": "x", "headers": {}, "body": body});
        Frame::of(payload.as_object().unwrap())
    }

    #[test]
    fn every_action_has_a_request_but_authenticate() {
        let f = frame(
            json!({"queue_name": "q", "message_id": "1", "claim_id": "a",
                             "subscription_id": "2", "message_ids": ["1", "2"]}),
        );
        for (name, _) in ACTIONS {
            assert_eq!(call(name, &f).is_some(), *name != "authenticate", "{name}");
        }
    }

    #[test]
    fn names_and_ids_are_path_segments_and_lists_repeat() {
        let f = frame(json!({"queue_name": "a/b?c", "message_ids": ["1", "2"], "limit": 5}));
        let get_many = call("message_get_many", &f).unwrap();
        assert_eq!(
            get_many.path_and_query,
            "/v2/queues/a%2Fb%3Fc/messages?ids=1&ids=2"
        );
        let claim = call("claim_create", &f).unwrap();
        assert_eq!(claim.path_and_query, "/v2/queues/a%2Fb%3Fc/claims?limit=5");
        assert_eq!(claim.json, Some(json!({})));
    }

    #[test]
    fn answers_take_zaqars_websocket_shapes() {
        let f = frame(json!({"queue_name": "q"}));
        let claimed = json!({"messages": [{"id": "1", "href": "/v2/queues/q/messages/1?claim_id=ab",
                                           "ttl": 60, "age": 0, "body": 1}]});
        assert_eq!(
            success("claim_create", &f, 201, claimed),
            (
                201,
                json!({"claim_id": "ab", "messages": [{"id": "1", "claim_id": "ab", "ttl": 60, "age": 0, "body": 1}]})
            )
        );
        let posted = json!({"resources": ["/v2/queues/q/messages/7"]});
        assert_eq!(
            success("message_post", &f, 201, posted),
            (201, json!({"message_ids": ["7"]}))
        );
        assert_eq!(
            failure(
                "queue_get",
                &f,
                404,
                &json!({"title": "Not found", "description": ""})
            ),
            (
                404,
                json!({"exception": "Not found", "error": "Queue q does not exist."})
            )
        );
    }
}
