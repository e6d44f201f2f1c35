//! Queue metadata: Zaqar's reserved keys, their checks (in Zaqar's order, with its texts), their
//! defaults, and what they mean to the Tenax queue.
//!
//! Invariants:
//! - Metadata is stored verbatim in `QueueConfig::metadata`; defaults are added only when it is
//!   shown, never stored.
//! - Stored metadata passed [`check`]. The settings that the engine acts on are derived from it
//!   whenever it is stored: `_retry_policy` (Zaqar's default one when absent) is the queue's
//!   policy (canonical native JSON) and `ignore_subscription_override` its `disable_overrides`; `_max_claim_count` with
//!   `_dead_letter_queue` (and `_dead_letter_queue_messages_ttl`) is its dead-letter rule.
//! - `_default_message_ttl`, `_default_message_delay` and `_max_messages_post_size` are read
//!   from the metadata when messages are posted ([`MessageSettings`]); `_default_message_ttl`
//!   is also the queue's `message_ttl_ms`, for jobs enqueued into it through the native API.
//! - `_flavor` is the queue's `flavor`: on a pooled deployment, it is placed on one of the
//!   flavor's pools (which must exist: the store refuses it otherwise).

use serde_json::{Map, Value, json};
use tenax_core::model::{DeadLetter, QueueConfig, StoredPolicy};
use tenax_policy::spelling::{ParsedPolicy, zaqar};

use super::limits::Limits;
use super::names::{is_queue_name, tenax_queue};
use super::request::json_int;

/// Zaqar's fixed limits and defaults (`zaqar/transport/validation.py`); the settable ones are
/// in [`Limits`].
pub const DEFAULT_MESSAGE_TTL: u64 = 3_600;
pub const MIN_MESSAGE_TTL: u64 = 60;
pub const MAX_MESSAGE_DELAY: u64 = 900;

/// Zaqar's default retry policy bounds, used by its `_retry_policy` checks.
const MINIMUM_DELAY: i64 = 5;
const MAXIMUM_DELAY: i64 = 30;
const LINEAR_INTERVAL: i64 = 5;
const BACKOFF_FUNCTIONS: [&str; 4] = ["linear", "arithmetic", "exponential", "geometric"];

/// The reserved keys shown with their defaults when a queue's metadata has no (truthy) value.
pub fn reserved_defaults(limits: &Limits) -> [(&'static str, Value); 7] {
    [
        (
            "_max_messages_post_size",
            json!(limits.max_messages_post_size),
        ),
        ("_default_message_ttl", json!(DEFAULT_MESSAGE_TTL)),
        ("_default_message_delay", json!(0)),
        ("_dead_letter_queue", Value::Null),
        ("_dead_letter_queue_messages_ttl", Value::Null),
        ("_max_claim_count", Value::Null),
        ("_enable_encrypt_messages", json!(false)),
    ]
}

/// Whether `key` is one of the reserved keys of [`reserved_defaults`].
pub fn is_reserved(key: &str) -> bool {
    reserved_defaults(&Limits::default())
        .iter()
        .any(|(k, _)| *k == key)
}

/// Python's truthiness, which Zaqar's checks rely on.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The metadata as Zaqar shows it: the stored keys, and each reserved key without a truthy
/// value set to its default (the post size's is the server's limit, as in Zaqar).
pub fn with_defaults(metadata: Option<&Map<String, Value>>, limits: &Limits) -> Map<String, Value> {
    fill(metadata, reserved_defaults(limits))
}

/// A topic's metadata as Zaqar shows it (`topic.py`): only the first three reserved keys, those
/// of its messages, have defaults.
pub fn with_topic_defaults(
    metadata: Option<&Map<String, Value>>,
    limits: &Limits,
) -> Map<String, Value> {
    fill(metadata, reserved_defaults(limits).into_iter().take(3))
}

fn fill(
    metadata: Option<&Map<String, Value>>,
    defaults: impl IntoIterator<Item = (&'static str, Value)>,
) -> Map<String, Value> {
    let mut shown = metadata.cloned().unwrap_or_default();
    for (key, default) in defaults {
        if !shown.get(key).is_some_and(truthy) {
            shown.insert(key.to_owned(), default);
        }
    }
    shown
}

/// What a message post reads from its queue's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageSettings {
    /// The ttl of a message that names none, in seconds.
    pub default_ttl_s: u64,
    /// The queue's own `_default_message_ttl`, if it has one.
    pub explicit_ttl_s: Option<u64>,
    /// The queue's own post size limit, if it has one.
    pub max_post_bytes: Option<u64>,
    /// The queue's default delay, if it has a truthy one: then delayed messages are hidden
    /// from listings unless `include_delayed` asks for them.
    pub default_delay_s: Option<u64>,
}

impl MessageSettings {
    pub fn of(metadata: Option<&Map<String, Value>>) -> Self {
        let positive = |key: &str| {
            metadata
                .and_then(|m| m.get(key))
                .and_then(json_int)
                .and_then(|n| u64::try_from(n).ok())
                .filter(|n| *n > 0)
        };
        let explicit_ttl_s = positive("_default_message_ttl");
        Self {
            default_ttl_s: explicit_ttl_s.unwrap_or(DEFAULT_MESSAGE_TTL),
            explicit_ttl_s,
            max_post_bytes: positive("_max_messages_post_size"),
            default_delay_s: positive("_default_message_delay"),
        }
    }
}

/// An optional integer field: absent or null is `None`; anything but an integer is refused
/// with Zaqar's "must be integer" text.
fn int_field(metadata: &Map<String, Value>, key: &str) -> Result<Option<i64>, String> {
    match metadata.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => json_int(value)
            .map(Some)
            .ok_or_else(|| format!("{key} must be integer.")),
    }
}

fn in_range(value: Option<i64>, min: u64, max: u64) -> bool {
    value.is_none_or(|v| u64::try_from(v).is_ok_and(|v| (min..=max).contains(&v)))
}

/// Zaqar's checks of the reserved keys (`Validator.queue_metadata_putting`), in its order and
/// with its texts, then Tenax's own: `_dead_letter_queue` must name a queue. The error is the
/// description of a 400.
pub fn check(metadata: &Map<String, Value>, limits: &Limits) -> Result<(), String> {
    let max_ttl = limits.max_message_ttl;
    let max_size = limits.max_messages_post_size;
    for (key, value) in metadata {
        tenax_core::model::payload::check_value(value)
            .map_err(|rule| format!("The value of metadata key {key:?} {rule}."))?;
    }
    let ttl = int_field(metadata, "_default_message_ttl")?;
    if !in_range(ttl, MIN_MESSAGE_TTL, max_ttl) {
        return Err(format!(
            "_default_message_ttl can not exceed {max_ttl} seconds, and must be at \
             least {MIN_MESSAGE_TTL} seconds long."
        ));
    }
    let size = int_field(metadata, "_max_messages_post_size")?;
    if !in_range(size, 1, max_size) {
        return Err(format!(
            "_max_messages_post_size can not exceed {max_size},  and must be at \
             least greater than 0."
        ));
    }
    int_field(metadata, "_max_claim_count")?;
    let dead_ttl = int_field(metadata, "_dead_letter_queue_messages_ttl")?;
    if !in_range(dead_ttl, MIN_MESSAGE_TTL, max_ttl) {
        return Err(format!(
            "The TTL for a message may not exceed {max_ttl} seconds, and must be at \
             least {MIN_MESSAGE_TTL} seconds long."
        ));
    }
    let delay = int_field(metadata, "_default_message_delay")?;
    if !in_range(delay, 0, MAX_MESSAGE_DELAY) {
        return Err(format!(
            "The TTL can not exceed {MAX_MESSAGE_DELAY} seconds, and must be at least 0 seconds \
             long."
        ));
    }
    match metadata.get("_enable_encrypt_messages") {
        None | Some(Value::Null | Value::Bool(_)) => {}
        Some(_) => return Err("_enable_encrypt_messages must be boolean.".into()),
    }
    check_retry_policy(metadata)?;
    match metadata.get("_flavor") {
        None | Some(Value::Null | Value::String(_)) => {}
        Some(other) => return Err(format!("_flavor must be the name of a flavor, got {other}")),
    }
    match metadata.get("_dead_letter_queue") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) if is_queue_name(name) => {}
        Some(other) => {
            return Err(format!(
                "_dead_letter_queue must be the name of a queue: 1 to 64 ASCII letters, digits, \
                 '_', '-' or '.', got {other}"
            ));
        }
    }
    Ok(())
}

/// Zaqar's checks of `_retry_policy` in queue metadata or subscription options
/// (`Validator._validate_retry_policy`), with its texts.
pub fn check_retry_policy(container: &Map<String, Value>) -> Result<(), String> {
    let Some(policy) = container.get("_retry_policy").filter(|v| truthy(v)) else {
        return Ok(());
    };
    let Value::Object(policy) = policy else {
        return Err("retry_policy must be a dict.".into());
    };
    for key in zaqar::KEYS {
        let Some(value) = policy.get(key).filter(|v| truthy(v)) else {
            continue;
        };
        match key {
            "retry_backoff_function" => {
                let Value::String(name) = value else {
                    return Err("retry_backoff_function must be a string.".into());
                };
                if !BACKOFF_FUNCTIONS.contains(&name.as_str()) {
                    return Err("invalid retry_backoff_function.".into());
                }
            }
            "ignore_subscription_override" => {
                if !value.is_boolean() {
                    return Err("ignore_subscription_override must be a boolean.".into());
                }
            }
            _ => {
                if json_int(value).is_none() {
                    return Err(format!("Retry policy: {key} must be a integer."));
                }
            }
        }
    }
    let bound = |key: &str, default: i64| policy.get(key).and_then(json_int).unwrap_or(default);
    let (min, max) = (
        bound("minimum_delay", MINIMUM_DELAY),
        bound("maximum_delay", MAXIMUM_DELAY),
    );
    if max < min {
        return Err("minimum_delay must less than maximum_delay.".into());
    }
    if max.saturating_sub(min) < 2 * LINEAR_INTERVAL {
        return Err("invalid minimum_delay and maximum_delay.".into());
    }
    Ok(())
}

/// The Tenax policy of a `_retry_policy` that passed [`check_retry_policy`]: `None` when it is
/// absent or falsy. Only the keys Zaqar knows, with values of their type, are read (Zaqar
/// ignores the rest). The error names the field and the rule.
pub fn parse_retry_policy(container: &Map<String, Value>) -> Result<Option<ParsedPolicy>, String> {
    let Some(Value::Object(policy)) = container.get("_retry_policy").filter(|v| truthy(v)) else {
        return Ok(None);
    };
    let known: Map<String, Value> = policy
        .iter()
        .filter(|(key, value)| match key.as_str() {
            "retry_backoff_function" => value.as_str().is_some_and(|s| !s.is_empty()),
            "ignore_subscription_override" => value.is_boolean(),
            key => zaqar::KEYS.contains(&key) && json_int(value).is_some(),
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    zaqar::parse(&Value::Object(known))
        .map(Some)
        .map_err(|e| format!("_retry_policy.{}: {}", e.field, e.rule))
}

/// Stores `metadata` (which passed [`check`]) in `config` with the settings it implies. The
/// queue's policy is its `_retry_policy`, or Zaqar's
/// default retry policy when it has none, so that a subscription without a policy of its own
/// is notified on Zaqar's default schedule. The error is the description of a 400.
pub fn install(
    config: &mut QueueConfig,
    project: &str,
    metadata: Map<String, Value>,
) -> Result<(), String> {
    let parsed = match parse_retry_policy(&metadata)? {
        Some(parsed) => parsed,
        None => zaqar::parse(&json!({}))
            .map_err(|e| format!("_retry_policy.{}: {}", e.field, e.rule))?,
    };
    config.disable_overrides = parsed.disable_overrides;
    config.policy = Some(StoredPolicy::new(parsed.retry));
    config.dead_letter = dead_letter(project, &metadata);
    // Zaqar encrypts the messages posted while the key is true; so does the engine.
    config.encrypt_payloads = metadata.get("_enable_encrypt_messages") == Some(&Value::Bool(true));
    // Jobs enqueued through the native API into a Zaqar queue expire as its messages do.
    config.message_ttl_ms = MessageSettings::of(Some(&metadata))
        .explicit_ttl_s
        .map(|s| s.saturating_mul(1_000));
    // On a pooled deployment the queue is placed on one of the flavor's pools.
    config.flavor = metadata
        .get("_flavor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    config.metadata = Some(metadata);
    Ok(())
}

/// The dead-letter rule of metadata that names both `_max_claim_count` and
/// `_dead_letter_queue` (as Zaqar requires both).
fn dead_letter(project: &str, metadata: &Map<String, Value>) -> Option<DeadLetter> {
    let max_claims = metadata.get("_max_claim_count").and_then(json_int)?;
    let queue = metadata.get("_dead_letter_queue")?.as_str()?;
    let ttl_ms = metadata
        .get("_dead_letter_queue_messages_ttl")
        .and_then(json_int)
        .and_then(|s| u64::try_from(s).ok())
        .map(|s| s.saturating_mul(1_000));
    Some(DeadLetter {
        queue: tenax_queue(project, queue),
        max_claims: u32::try_from(max_claims.max(0)).unwrap_or(u32::MAX),
        ttl_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn defaults_fill_falsy_reserved_keys() {
        let shown = with_defaults(
            Some(&map(json!({"a": 1, "_default_message_ttl": 0}))),
            &Limits::default(),
        );
        assert_eq!(shown["_default_message_ttl"], json!(3600));
        assert_eq!(shown["a"], json!(1));
        assert_eq!(shown.len(), 8);
    }

    #[test]
    fn topics_show_the_defaults_of_their_messages_only() {
        let shown = with_topic_defaults(Some(&map(json!({"a": 1}))), &Limits::default());
        assert_eq!(
            Value::Object(shown),
            json!({"a": 1, "_max_messages_post_size": 262_144, "_default_message_ttl": 3600,
                   "_default_message_delay": 0})
        );
    }

    #[test]
    fn reserved_keys_are_checked_in_zaqars_words() {
        let err = |v: Value| check(&map(v), &Limits::default()).unwrap_err();
        assert_eq!(
            err(json!({"_default_message_ttl": "3600"})),
            "_default_message_ttl must be integer."
        );
        assert!(err(json!({"_max_messages_post_size": 0})).contains("at least greater than 0"));
        assert_eq!(
            err(json!({"_retry_policy": {"minimum_delay": 1, "maximum_delay": 5}})),
            "invalid minimum_delay and maximum_delay."
        );
        assert_eq!(
            err(json!({"_retry_policy": {"minimum_delay": 1.5}})),
            "Retry policy: minimum_delay must be a integer."
        );
        assert!(err(json!({"_dead_letter_queue": 5})).starts_with("_dead_letter_queue"));
        assert!(
            check(
                &map(json!({"_default_message_delay": 0, "x": [1]})),
                &Limits::default()
            )
            .is_ok()
        );
        let lower = Limits {
            max_message_ttl: 120,
            ..Limits::default()
        };
        assert_eq!(
            check(&map(json!({"_default_message_ttl": 121})), &lower).unwrap_err(),
            "_default_message_ttl can not exceed 120 seconds, and must be at least 60 seconds long."
        );
    }

    #[test]
    fn metadata_sets_the_queue_policy_and_dead_letters() {
        let mut config = QueueConfig::default();
        let metadata = map(json!({
            "_retry_policy": {"retries_with_no_delay": 1, "ignore_subscription_override": true,
                              "unknown": "ignored"},
            "_max_claim_count": 2, "_dead_letter_queue": "dlq",
            "_dead_letter_queue_messages_ttl": 120, "_default_message_ttl": 600,
        }));
        install(&mut config, "p", metadata).unwrap();
        assert_eq!(config.message_ttl_ms, Some(600_000));
        assert!(config.policy.is_some() && config.disable_overrides);
        assert_eq!(
            config.dead_letter,
            Some(DeadLetter {
                queue: "p:dlq".into(),
                max_claims: 2,
                ttl_ms: Some(120_000)
            })
        );
        install(&mut config, "p", map(json!({"_max_claim_count": 2}))).unwrap();
        let defaults = zaqar::parse(&json!({})).unwrap().retry;
        assert_eq!(
            config.policy.as_ref().map(|p| &**p.policy()),
            Some(&defaults)
        );
        assert!(!config.disable_overrides && config.dead_letter.is_none());
        assert!(!config.encrypt_payloads);
        install(
            &mut config,
            "p",
            map(json!({"_enable_encrypt_messages": true})),
        )
        .unwrap();
        assert!(config.encrypt_payloads);
        assert_eq!(
            check(
                &map(json!({"_enable_encrypt_messages": "yes"})),
                &Limits::default()
            )
            .unwrap_err(),
            "_enable_encrypt_messages must be boolean."
        );
    }

    #[test]
    fn message_settings_read_truthy_values() {
        let settings = MessageSettings::of(Some(&map(json!({
            "_default_message_ttl": 120, "_default_message_delay": 0,
            "_max_messages_post_size": 1000,
        }))));
        assert_eq!(
            settings,
            MessageSettings {
                default_ttl_s: 120,
                explicit_ttl_s: Some(120),
                max_post_bytes: Some(1000),
                default_delay_s: None
            }
        );
    }
}
