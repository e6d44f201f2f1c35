//! Request extraction that names the field: JSON bodies are decoded with the path of the first
//! bad field (`jobs[2].priority`), unknown fields are refused by the request types, and bodies
//! over the size limit get a clear 413.

use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON body of type `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(body_error)?;
        decode(&bytes).map(JsonBody)
    }
}

/// Decodes a JSON object naming the path of the first field that does not fit. The body as a
/// whole (empty, not an object, not complete JSON, trailing text after it) is the field `body`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    match first {
        None => {
            return Err(ApiError::invalid(
                "body",
                "must be a JSON object, got nothing",
            ));
        }
        Some(b'{') => {}
        Some(_) => {
            let shown = match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Ok(_) => json_kind(bytes),
                Err(_) => "text that is not JSON",
            };
            return Err(ApiError::invalid(
                "body",
                format!("must be a JSON object, got {shown}"),
            ));
        }
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        let mut field = if path == "." || path.contains('?') {
            String::new()
        } else {
            path
        };
        if inner.is_eof() || (inner.is_syntax() && field.is_empty()) {
            // The text is not (complete) JSON, and no field was being read.
            return ApiError::invalid("body", syntax_rule(&inner));
        }
        if inner.is_syntax() {
            return ApiError::invalid(
                field,
                format!(
                    "must be a JSON value of the right type ({})",
                    strip_position(&inner)
                ),
            );
        }
        let message = inner.to_string();
        // "missing field `queue`" is reported on the object that lacks it: name the field.
        if let Some(name) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
        {
            field = if field.is_empty() {
                name.to_owned()
            } else {
                format!("{field}.{name}")
            };
        }
        // serde_json appends " at line L column C"; the field path says more.
        let message = match message.find(" at line ") {
            Some(at) => &message[..at],
            None => &message,
        };
        let field = if field.is_empty() {
            "body".to_owned()
        } else {
            field
        };
        ApiError::invalid(field, humanize(message))
    })?;
    deserializer.end().map_err(|e| {
        ApiError::invalid(
            "body",
            format!(
                "must hold one JSON object and nothing after it ({})",
                strip_position(&e)
            ),
        )
    })?;
    Ok(value)
}

/// What kind of JSON value `value` is, in words.
pub fn json_kind_of(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// What kind of JSON value `bytes` holds, in words.
fn json_kind(bytes: &[u8]) -> &'static str {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b'n') => "null",
        Some(b't' | b'f') => "a boolean",
        _ => "a number",
    }
}

/// The rule broken by text that is not complete JSON, with where it broke.
fn syntax_rule(error: &serde_json::Error) -> String {
    if error.is_eof() {
        format!(
            "must be complete JSON, but it ends early (line {} column {})",
            error.line(),
            error.column()
        )
    } else {
        format!("must be valid JSON ({error})")
    }
}

/// A serde_json message without its " at line L column C".
fn strip_position(error: &serde_json::Error) -> String {
    let message = error.to_string();
    match message.find(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    }
}

/// serde's wording with the Rust type names it uses replaced by what a JSON user writes.
pub fn humanize(message: &str) -> String {
    const WORDS: [(&str, &str); 14] = [
        ("expected u16", "expected a whole number from 0 to 65535"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        (
            "expected u64",
            "expected a whole number from 0 to 18446744073709551615",
        ),
        (
            "expected usize",
            "expected a whole number from 0 to 18446744073709551615",
        ),
        (
            "expected i32",
            "expected a whole number from -2147483648 to 2147483647",
        ),
        (
            "expected i64",
            "expected a whole number from -9223372036854775808 to 9223372036854775807",
        ),
        ("expected f64", "expected a number"),
        ("expected a sequence", "expected an array"),
        ("expected a map", "expected an object"),
        ("expected a borrowed string", "expected a string"),
        ("expected unit", "expected null"),
        ("invalid type: sequence", "invalid type: array"),
        ("invalid type: map", "invalid type: object"),
        ("invalid type: unit value", "invalid type: null"),
    ];
    let mut text = message.to_owned();
    for (from, to) in WORDS {
        text = text.replace(from, to);
    }
    // "expected struct EnqueueRequest", "expected enum OnDuplicate": an object, one of a set.
    if let Some(at) = text.find("expected struct ") {
        text.truncate(at);
        text.push_str("expected an object");
    }
    text = text.replace("expected any valid JSON value", "expected JSON");
    text
}

fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "too_large",
            field: None,
            message: "the request body is larger than the server's limit (--max-request-bytes)"
                .into(),
        }
    } else {
        ApiError::invalid("body", rejection.body_text())
    }
}

/// A JSON body that may be left out: an empty body gives `T::default()`.
#[derive(Debug)]
pub struct JsonOrEmpty<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Default> FromRequest<S> for JsonOrEmpty<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(body_error)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(T::default()));
        }
        decode(&bytes).map(JsonOrEmpty)
    }
}

/// A request's query string as `T`, or a 400 naming `query` and what was wrong with it.
pub fn query<T>(
    query: Result<axum::extract::Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    query
        .map(|axum::extract::Query(q)| q)
        .map_err(|e| ApiError::invalid("query", e.body_text()))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        queue: String,
        #[serde(default)]
        priority: i32,
        limit: Option<u32>,
        on_duplicate: Option<tenax_core::model::OnDuplicate>,
        jobs: Option<Vec<Inner>>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        id: u64,
    }

    fn refused(body: &str) -> (String, String) {
        let error = decode::<Sample>(body.as_bytes()).unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST, "{body}");
        (error.field.unwrap_or_default(), error.message)
    }

    #[test]
    fn whole_body_errors_name_the_body() {
        for (body, rule) in [
            ("", "must be a JSON object, got nothing"),
            ("null", "must be a JSON object, got null"),
            ("[]", "must be a JSON object, got an array"),
            ("[\"q\"]", "must be a JSON object, got an array"),
            ("7", "must be a JSON object, got a number"),
            ("nope", "must be a JSON object, got text that is not JSON"),
        ] {
            assert_eq!(
                refused(body),
                ("body".to_owned(), rule.to_owned()),
                "{body}"
            );
        }
        let (field, rule) = refused(r#"{"queue": "a"}}"#);
        assert_eq!(field, "body");
        assert!(
            rule.starts_with("must hold one JSON object and nothing after it"),
            "{rule}"
        );
        let (field, rule) = refused(r#"{"queue": "a", "prio"#);
        assert_eq!(field, "body");
        assert!(
            rule.starts_with("must be complete JSON, but it ends early"),
            "{rule}"
        );
        let (field, rule) = refused(r#"{"queue": tru}"#);
        assert_eq!(field, "queue");
        assert!(rule.starts_with("must be a JSON value"), "{rule}");
        let (field, rule) = refused(r#"{"queue": "a",, "x": 1}"#);
        assert_eq!(field, "body");
        assert!(rule.starts_with("must be valid JSON"), "{rule}");
    }

    #[test]
    fn field_errors_name_the_field_in_json_words() {
        assert_eq!(refused("{}").0, "queue");
        let (field, rule) = refused(r#"{"queue": "a", "limit": "x"}"#);
        assert_eq!(field, "limit");
        assert!(!rule.contains("u32"), "{rule}");
        assert!(rule.contains("whole number"), "{rule}");
        let (field, rule) = refused(r#"{"queue": "a", "priority": 99999999999}"#);
        assert_eq!(field, "priority");
        assert!(!rule.contains("i32"), "{rule}");
        let (field, rule) = refused(r#"{"queue": "a", "on_duplicate": 3}"#);
        assert_eq!(field, "on_duplicate");
        assert!(!rule.contains("OnDuplicate"), "{rule}");
        let (field, rule) = refused(r#"{"queue": "a", "jobs": [{"id": 1}, {"id": -1}]}"#);
        assert_eq!(field, "jobs[1].id");
        assert!(!rule.contains("u64"), "{rule}");
        let (field, rule) = refused(r#"{"queue": "a", "jobs": {"id": 1}}"#);
        assert_eq!(field, "jobs");
        assert!(rule.contains("expected an array"), "{rule}");
        let (field, _) = refused(r#"{"queue": "a", "jobs": [null]}"#);
        assert_eq!(field, "jobs[0]");
        let (field, rule) = refused(r#"{"queue": "a", "extra": 1}"#);
        assert_eq!(field, "extra");
        assert!(rule.starts_with("unknown field"), "{rule}");
    }
}
