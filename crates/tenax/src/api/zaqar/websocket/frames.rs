//! Zaqar's websocket frames: a request `{"action", "headers", "body"}` checked against the
//! action's schema (`zaqar/api/v2/request.py`, Draft 4 JSON Schema), and an answer
//! `{"request": {"action", "body", "headers", "api": "v2"}, "body", "headers": {"status"}}`
//! (`zaqar/common/api/response.py`), which always echoes the request it answers.

use serde_json::{Map, Value, json};

use super::actions::kind_of;

/// A JSON type of Zaqar's schemas (Draft 4: an integer is a number without a fraction, and a
/// boolean is not one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    String,
    Integer,
    Boolean,
    Array,
    Object,
}

impl Kind {
    fn admits(self, value: &Value) -> bool {
        match self {
            Kind::String => value.is_string(),
            Kind::Integer => value.is_i64() || value.is_u64(),
            Kind::Boolean => value.is_boolean(),
            Kind::Array => value.is_array(),
            Kind::Object => value.is_object(),
        }
    }
}

/// An action's schema: the headers it requires, whether it requires a body, and the body's
/// fields, space-separated, each required one marked `!` (`"queue_name! limit"`), typed by
/// [`super::actions::kind_of`].
#[derive(Debug)]
pub(super) struct Schema {
    pub headers: &'static [&'static str],
    pub body: bool,
    pub fields: &'static str,
}

impl Schema {
    pub const fn new(headers: &'static [&'static str], body: bool, fields: &'static str) -> Self {
        Self {
            headers,
            body,
            fields,
        }
    }

    /// The fields: name, and whether it is required.
    fn fields(&self) -> impl Iterator<Item = (&'static str, bool)> {
        self.fields
            .split_whitespace()
            .map(|field| match field.strip_suffix('!') {
                Some(name) => (name, true),
                None => (field, false),
            })
    }
}

/// The headers every schema types (as strings) when they are present.
const TYPED_HEADERS: [&str; 6] = [
    "User-Agent",
    "Date",
    "Accept",
    "Client-ID",
    "X-Project-ID",
    "X-Auth-Token",
];

impl Schema {
    /// Whether `payload` (an object) satisfies the schema.
    pub fn admits(&self, payload: &Map<String, Value>) -> bool {
        let Some(Value::Object(headers)) = payload.get("headers") else {
            return false;
        };
        let headers_ok = TYPED_HEADERS
            .iter()
            .all(|name| headers.get(*name).is_none_or(Value::is_string))
            && self.headers.iter().all(|name| headers.contains_key(*name));
        if !headers_ok {
            return false;
        }
        match payload.get("body") {
            None => !self.body && self.fields().all(|(_, required)| !required),
            Some(Value::Object(body)) => {
                self.fields().all(|(name, required)| match body.get(name) {
                    None => !required,
                    Some(value) => kind_of(name).admits(value),
                })
            }
            Some(_) => false,
        }
    }
}

/// A frame as Zaqar reads it, before its schema is checked: the parts it echoes.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    pub action: Value,
    pub body: Value,
    pub headers: Value,
}

impl Frame {
    /// The request Zaqar echoes for a frame it could not read (`create_request()`).
    pub fn unread() -> Self {
        Self {
            action: Value::Null,
            body: json!({}),
            headers: json!({}),
        }
    }

    /// The parts of a payload (an object): a missing body echoes as `{}`, missing or null
    /// headers as `{}`, as Zaqar's `Request` keeps them.
    pub fn of(payload: &Map<String, Value>) -> Self {
        let headers = match payload.get("headers") {
            None | Some(Value::Null) => json!({}),
            Some(headers) => headers.clone(),
        };
        Self {
            action: payload.get("action").cloned().unwrap_or(Value::Null),
            body: payload.get("body").cloned().unwrap_or_else(|| json!({})),
            headers,
        }
    }

    /// The action's name, when it is a string.
    pub fn action(&self) -> Option<&str> {
        self.action.as_str()
    }

    /// A field of the body.
    pub fn field(&self, name: &str) -> Option<&Value> {
        self.body.get(name)
    }

    /// A string field of the body (the schema has checked the type of those it names).
    pub fn text(&self, name: &str) -> Option<&str> {
        self.field(name).and_then(Value::as_str)
    }

    /// A header of the frame, when it is a string.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(Value::as_str)
    }

    /// The answer to this frame.
    pub fn answer(&self, status: u16, body: Value) -> String {
        json!({
            "request": {
                "action": self.action,
                "body": self.body,
                "headers": self.headers,
                "api": "v2",
            },
            "body": body,
            "headers": {"status": status},
        })
        .to_string()
    }
}

/// The action's name as Python's `str.format` shows it in "... is not a valid action".
pub(super) fn python_repr(action: &Value) -> String {
    match action {
        Value::Null => "None".to_owned(),
        Value::String(text) => text.clone(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: Schema = Schema::new(&["Client-ID", "X-Project-ID"], true, "queue_name! limit");

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_schema_checks_headers_body_and_types_as_draft_4_does() {
        let headers = json!({"Client-ID": "c", "X-Project-ID": "p"});
        let ok = object(
            json!({"action": "a", "headers": headers, "body": {"queue_name": "q", "limit": 3}}),
        );
        assert!(SCHEMA.admits(&ok));
        for bad in [
            json!({"action": "a", "headers": headers}),
            json!({"action": "a", "headers": {"Client-ID": "c"}, "body": {"queue_name": "q"}}),
            json!({"action": "a", "headers": headers, "body": {}}),
            json!({"action": "a", "headers": headers, "body": {"queue_name": 1}}),
            json!({"action": "a", "headers": headers, "body": {"queue_name": "q", "limit": 1.5}}),
            json!({"action": "a", "headers": headers, "body": {"queue_name": "q", "limit": true}}),
            json!({"action": "a", "headers": {"Client-ID": 1, "X-Project-ID": "p"}, "body": {"queue_name": "q"}}),
            json!({"action": "a", "headers": headers, "body": []}),
        ] {
            assert!(!SCHEMA.admits(&object(bad.clone())), "{bad}");
        }
    }

    #[test]
    fn an_answer_echoes_its_request() {
        let frame = Frame::of(&object(
            json!({"action": "queue_list", "headers": {"a": "b"}}),
        ));
        let answer: Value =
            serde_json::from_str(&frame.answer(200, json!({"queues": []}))).unwrap();
        assert_eq!(
            answer,
            json!({"request": {"action": "queue_list", "body": {}, "headers": {"a": "b"}, "api": "v2"},
                   "body": {"queues": []}, "headers": {"status": 200}})
        );
        assert_eq!(python_repr(&Value::Null), "None");
    }
}
