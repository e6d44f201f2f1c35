//! Field types shared by requests: durations and times in their accepted spellings.

use serde::{Deserialize, Deserializer, de};
use tenax_core::clock::{UnixMs, parse_rfc3339};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::{PartialSchema, ToSchema};

/// A duration: integer milliseconds or a human string (`"12.5s"`, `"5m"`, `"1h30m"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Millis(pub u64);

impl<'de> Deserialize<'de> for Millis {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        let ms = match &value {
            serde_json::Value::String(text) => {
                tenax_policy::parse_duration("", text).map_err(|e| e.rule)
            }
            serde_json::Value::Number(n) => n.as_u64().ok_or_else(|| {
                format!("must be a whole, non-negative number of milliseconds, got {n}")
            }),
            _ => Err(format!(
                "must be milliseconds or a duration such as \"12.5s\", got {value}"
            )),
        };
        let ms = ms.map_err(de::Error::custom)?;
        if ms > tenax_policy::MAX_DELAY_MS {
            return Err(de::Error::custom("must be at most 100 years"));
        }
        Ok(Self(ms))
    }
}

impl PartialSchema for Millis {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0))
                    .maximum(Some(tenax_policy::MAX_DELAY_MS))
                    .description(Some("milliseconds")),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some(
                        "a number with a unit: ms, s, m, h, d (\"12.5s\", \"1h30m\")",
                    )),
            )
            .description(Some("A duration of at most 100 years."))
            .into()
    }
}

impl ToSchema for Millis {}

/// A point in time: RFC 3339 (`"2026-11-21T12:00:00Z"`) or integer milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time(pub UnixMs);

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        match &value {
            serde_json::Value::String(text) => parse_rfc3339(text).map(Time).ok_or_else(|| {
                de::Error::custom(format!(
                    "must be an RFC 3339 time such as \"2026-11-21T12:00:00Z\", got \"{text}\""
                ))
            }),
            serde_json::Value::Number(n) => n.as_u64().map(Time).ok_or_else(|| {
                de::Error::custom(format!(
                    "must be milliseconds since 1970 or an RFC 3339 time, got {n}"
                ))
            }),
            _ => Err(de::Error::custom(format!(
                "must be an RFC 3339 time, got {value}"
            ))),
        }
    }
}

/// The longest queue name. A Zaqar queue is the native queue `project:name` or
/// `:escaped-project:name`, so this is the longest escaped project id, two `:` and the longest
/// Zaqar queue name: the two APIs agree on every queue.
pub const MAX_QUEUE_NAME: usize =
    1 + super::zaqar::names::MAX_ESCAPED_PROJECT + 1 + super::zaqar::names::MAX_QUEUE_NAME;

impl PartialSchema for Time {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0))
                    .description(Some("milliseconds since 1970")),
            )
            .description(Some("A time, at most 100 years after now."))
            .into()
    }
}

impl ToSchema for Time {}

/// Checks a queue name: 1 to [`MAX_QUEUE_NAME`] characters of letters, digits, `-`, `_`, `.`
/// and `:`.
pub fn check_queue_name(field: &str, name: &str) -> Result<(), super::error::ApiError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_QUEUE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if valid {
        Ok(())
    } else {
        Err(super::error::ApiError::invalid(
            field,
            format!(
                "must be 1 to {MAX_QUEUE_NAME} characters of letters, digits, '-', '_', '.' or \
                 ':', got {name:?}"
            ),
        ))
    }
}

/// A policy field in any spelling, as the engine keeps it. Only the retry part counts: what an
/// SNS policy says besides (throttle, content type) is for subscriptions to read.
pub fn stored_policy(
    field: &str,
    value: &serde_json::Value,
) -> Result<tenax_core::model::StoredPolicy, super::error::ApiError> {
    let parsed =
        tenax_policy::parse_policy(value).map_err(|e| super::error::ApiError::policy(field, &e))?;
    Ok(tenax_core::model::StoredPolicy::new(parsed.retry))
}
