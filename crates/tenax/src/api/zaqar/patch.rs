//! Queue metadata updates: Zaqar's JSON-patch dialect (`application/openstack-messaging-v2.0-
//! json-patch`, draft 10): `add`, `replace` and `remove` of `/metadata/<key>`.
//!
//! Invariant: changes are checked as a whole before any is applied ([`parse`], Zaqar's
//! `Validator.queue_patching`), then applied in order to a copy ([`apply`]); a conflict leaves
//! the stored metadata as it was.

use serde_json::{Map, Value};

use super::error::ZaqarError;
use super::metadata::is_reserved;

/// The media type a metadata PATCH must carry.
pub const MEDIA_TYPE: &str = "application/openstack-messaging-v2.0-json-patch";

const OPERATIONS: &str = "add, remove, replace";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Add,
    Remove,
    Replace,
}

/// One checked change of one metadata key.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub op: Op,
    pub key: String,
    /// `None` for `remove`.
    pub value: Option<Value>,
}

/// Checks a PATCH document in Zaqar's order and with its texts (400 "Invalid request body").
pub fn parse(document: Value) -> Result<Vec<Change>, ZaqarError> {
    let Value::Array(changes) = document else {
        return Err(ZaqarError::body(
            "Request body must be a JSON array of operation objects.",
        ));
    };
    changes.into_iter().map(parse_one).collect()
}

fn parse_one(raw: Value) -> Result<Change, ZaqarError> {
    let Value::Object(mut raw) = raw else {
        return Err(ZaqarError::body("Operations must be JSON objects."));
    };
    let op = match raw.get("op") {
        None | Some(Value::Null) => {
            return Err(ZaqarError::body(format!(
                "Unable to find `op` in JSON Schema change. It must be one of the following: \
                 {OPERATIONS}."
            )));
        }
        Some(Value::String(op)) if op == "add" => Op::Add,
        Some(Value::String(op)) if op == "remove" => Op::Remove,
        Some(Value::String(op)) if op == "replace" => Op::Replace,
        Some(other) => {
            let shown = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_owned);
            return Err(ZaqarError::body(format!(
                "Invalid operation: `{shown}`. It must be one of the following: {OPERATIONS}."
            )));
        }
    };
    let pointer = match raw.get("path") {
        None => {
            return Err(ZaqarError::body(
                "Unable to find 'path' in JSON Schema change",
            ));
        }
        Some(Value::String(pointer)) => pointer.clone(),
        Some(other) => {
            return Err(ZaqarError::body(format!(
                "Pointer `{other}` does not start with \"/\"."
            )));
        }
    };
    let path = decode_pointer(&pointer)?;
    if path.len() != 2 {
        return Err(ZaqarError::body(format!(
            "Invalid JSON pointer for this resource: '/{}, e.g /metadata/key'",
            path.join("/")
        )));
    }
    let value = if op == Op::Remove {
        None
    } else {
        let name = if op == Op::Add { "add" } else { "replace" };
        let value = raw.remove("value").ok_or_else(|| {
            ZaqarError::body(format!(
                "Operation \"{name}\" requires a member named \"value\"."
            ))
        })?;
        if !path[0].eq_ignore_ascii_case("metadata") {
            return Err(ZaqarError::body(
                "The root of path must be metadata, e.g /metadata/key.",
            ));
        }
        Some(value)
    };
    let key = path.into_iter().nth(1).unwrap_or_default();
    Ok(Change { op, key, value })
}

/// The tokens of a JSON pointer, with Zaqar's restrictions.
fn decode_pointer(pointer: &str) -> Result<Vec<String>, ZaqarError> {
    let bad = |rule: &str| ZaqarError::body(format!("Pointer `{pointer}` {rule}"));
    if !pointer.starts_with('/') {
        return Err(bad("does not start with \"/\"."));
    }
    if has_adjacent_slashes(&pointer[1..]) {
        return Err(bad("contains adjacent \"/\"."));
    }
    if pointer.len() > 1 && pointer.ends_with('/') {
        return Err(bad("end with \"/\"."));
    }
    let bad_escape = pointer.ends_with('~')
        || pointer
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'~' && w[1] != b'0' && w[1] != b'1');
    if bad_escape {
        return Err(bad(
            "contains \"~\" not part of a recognized escape sequence.",
        ));
    }
    Ok(pointer
        .trim_start_matches('/')
        .split('/')
        .map(|part| part.replace("~1", "/").replace("~0", "~").trim().to_owned())
        .collect())
}

/// Python's `re.search(r'/\s*?/', text)`.
fn has_adjacent_slashes(text: &str) -> bool {
    let mut after_slash = false;
    for c in text.chars() {
        match c {
            '/' if after_slash => return true,
            '/' => after_slash = true,
            c if c.is_whitespace() => {}
            _ => after_slash = false,
        }
    }
    false
}

/// Applies checked changes in order. `replace` and `remove` of a key that is neither stored nor
/// reserved are conflicts (409).
pub fn apply(metadata: &mut Map<String, Value>, changes: Vec<Change>) -> Result<(), ZaqarError> {
    for Change { op, key, value } in changes {
        match op {
            Op::Add => {
                metadata.insert(key, value.unwrap_or(Value::Null));
            }
            Op::Replace => {
                if !metadata.contains_key(&key) && !is_reserved(&key) {
                    return Err(ZaqarError::conflict(format!(
                        "Can't replace non-existent object {key}."
                    )));
                }
                metadata.insert(key, value.unwrap_or(Value::Null));
            }
            Op::Remove => {
                if metadata.remove(&key).is_none() && !is_reserved(&key) {
                    return Err(ZaqarError::conflict(format!(
                        "Can't remove non-existent object {key}."
                    )));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn description(document: Value) -> String {
        parse(document).unwrap_err().description.unwrap()
    }

    #[test]
    fn changes_are_checked_with_zaqars_texts() {
        assert_eq!(
            description(json!([{"op": "move", "path": "/metadata/a"}])),
            "Invalid operation: `move`. It must be one of the following: add, remove, replace."
        );
        assert_eq!(
            description(json!([{"op": "add", "path": "/color", "value": 1}])),
            "Invalid JSON pointer for this resource: '/color, e.g /metadata/key'"
        );
        assert_eq!(
            description(json!([{"op": "add", "path": "/other/a", "value": 1}])),
            "The root of path must be metadata, e.g /metadata/key."
        );
        assert_eq!(
            description(json!([{"op": "add", "path": "/metadata/a"}])),
            "Operation \"add\" requires a member named \"value\"."
        );
        assert!(
            description(json!([{"op": "add", "path": "/metadata//a", "value": 1}]))
                .contains("adjacent")
        );
        assert!(
            description(json!([{"op": "add", "path": "/metadata/~2", "value": 1}]))
                .contains("escape")
        );
    }

    #[test]
    fn changes_apply_in_order() {
        let changes = parse(json!([
            {"op": "add", "path": "/metadata/a~1b", "value": 1},
            {"op": "replace", "path": "/metadata/_max_claim_count", "value": 5},
            {"op": "remove", "path": "/metadata/x"},
        ]))
        .unwrap();
        let mut metadata = json!({"x": 0}).as_object().cloned().unwrap();
        apply(&mut metadata, changes).unwrap();
        assert_eq!(
            Value::Object(metadata),
            json!({"a/b": 1, "_max_claim_count": 5})
        );
        let conflict = parse(json!([{"op": "remove", "path": "/metadata/absent"}])).unwrap();
        let error = apply(&mut Map::new(), conflict).unwrap_err();
        assert_eq!(error.status.as_u16(), 409);
    }
}
