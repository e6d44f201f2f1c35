//! Free-form JSON that Tenax stores and shows again: job payloads, Zaqar message bodies, error
//! details, queue metadata and subscription options.
//!
//! Invariants:
//! - What the API accepts, it can show again, and any JSON reader can read what it shows.
//!   Payloads and message bodies are kept as the exact JSON text that was sent and are never
//!   re-parsed on a read path, so they come out byte-identical. To be accepted, the text must
//!   be JSON that readers can hold: at most [`MAX_DEPTH`] levels of nesting (answers wrap a
//!   payload in a few levels of their own, and common readers, serde_json among them, stop at
//!   128), finite numbers (`1e999` is not one), and strings of valid Unicode (no lone
//!   surrogate escape such as `"\ud800"`).
//! - [`check_text`] decides this in one pass without building a tree; [`check_value`] checks the
//!   depth of a tree that serde_json already parsed (which rules out the other two defects).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The deepest nesting accepted in stored free-form JSON: `[[1]]` is 2 levels deep.
pub const MAX_DEPTH: usize = 64;

/// Checks JSON text that is already known to be well-formed (for example a `RawValue`). The
/// error is the rule, for a 400 that names the field.
pub fn check_text(text: &str) -> Result<(), String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    Level { depth: 0 }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end())
        .map_err(|error| {
            let what = error.to_string();
            // serde_json says "... at line L column C": keep where, say what in words.
            let (what, at) = match what.find(" at line ") {
                Some(i) => (&what[..i], &what[i..]),
                None => (what.as_str(), ""),
            };
            let rule = if what.contains("recursion limit") || what == TOO_DEEP {
                format!("must be nested at most {MAX_DEPTH} levels deep")
            } else if what.contains("number out of range") {
                "must hold only finite numbers (this one is out of range)".to_owned()
            } else if what.contains("surrogate") || what.contains("hex escape") {
                "must hold only valid Unicode strings (a \\uD800-\\uDFFF escape must be one half of a pair)"
                    .to_owned()
            } else {
                format!("must be valid JSON ({what})")
            };
            format!("{rule}{at}")
        })
}

/// Checks a parsed JSON tree: its nesting depth.
pub fn check_value(value: &Value) -> Result<(), String> {
    if depth(value) > MAX_DEPTH {
        return Err(format!("must be nested at most {MAX_DEPTH} levels deep"));
    }
    Ok(())
}

/// Levels of nesting: a scalar is 0, `[]` is 1, `[[1]]` is 2.
fn depth(value: &Value) -> usize {
    // Iterative, so a deep tree cannot exhaust the stack here.
    let mut deepest = 0;
    let mut pending = vec![(value, 0usize)];
    while let Some((value, level)) = pending.pop() {
        match value {
            Value::Array(items) => {
                deepest = deepest.max(level + 1);
                pending.extend(items.iter().map(|item| (item, level + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(level + 1);
                pending.extend(map.values().map(|item| (item, level + 1)));
            }
            _ => {}
        }
        if deepest > MAX_DEPTH {
            break;
        }
    }
    deepest
}

const TOO_DEEP: &str = "too deep";

/// Visits every value at `depth`, decoding each number and string as a reader would, and
/// building nothing.
#[derive(Clone, Copy)]
struct Level {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Level {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Level {
    fn inner<E: de::Error>(self) -> Result<Self, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(TOO_DEEP));
        }
        Ok(Self {
            depth: self.depth + 1,
        })
    }
}

impl<'de> Visitor<'de> for Level {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<(), E> {
        if value.is_finite() {
            Ok(())
        } else {
            Err(E::custom("number out of range"))
        }
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while items.next_element_seed(inner)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        // Keys are decoded too (IgnoredAny still reads a key as a string).
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(inner)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn readable_json_passes() {
        for text in [
            "null",
            "-0",
            "12345678901234567890123",
            "1.5e300",
            r#"{"a": 1, "a": 2}"#,
            r#"{"é": "\ud83d\ude00", "k": [true, false, {}]}"#,
            &nested(MAX_DEPTH),
        ] {
            assert_eq!(check_text(text), Ok(()), "{text}");
        }
    }

    #[test]
    fn unreadable_json_is_refused_with_the_rule() {
        let deep = check_text(&nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(
            deep.starts_with("must be nested at most 64 levels deep"),
            "{deep}"
        );
        let deeper = check_text(&nested(500)).unwrap_err();
        assert!(deeper.starts_with("must be nested at most 64"), "{deeper}");
        let huge = check_text("[1e999]").unwrap_err();
        assert!(huge.starts_with("must hold only finite numbers"), "{huge}");
        assert!(huge.contains("line 1 column"), "{huge}");
        for lone in [r#""\ud800""#, r#""\udc00x""#, r#"{"\ud800": 1}"#] {
            let error = check_text(lone).unwrap_err();
            assert!(
                error.starts_with("must hold only valid Unicode"),
                "{lone}: {error}"
            );
        }
    }

    #[test]
    fn trees_are_checked_for_depth() {
        let ok: Value = serde_json::from_str(&nested(MAX_DEPTH)).unwrap();
        assert_eq!(check_value(&ok), Ok(()));
        let deep: Value = serde_json::from_str(&nested(MAX_DEPTH + 1)).unwrap();
        assert!(check_value(&deep).is_err());
        assert_eq!(check_value(&Value::Null), Ok(()));
    }
}
