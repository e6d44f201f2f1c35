//! How pages write times, durations and JSON.

use tenax_core::clock::{UnixMs, rfc3339};

/// A duration as people read it: "250ms", "1m 30s", "2d 3h".
pub fn duration(ms: u64) -> String {
    tenax_policy::format_duration(ms)
}

/// How long ago `at_ms` was, or how far ahead it is.
pub fn relative(at_ms: UnixMs, now_ms: UnixMs) -> String {
    if at_ms <= now_ms {
        format!("{} ago", duration(round(now_ms - at_ms)))
    } else {
        format!("in {}", duration(round(at_ms - now_ms)))
    }
}

/// Whole seconds past a minute: "1m 30s", not "1m 30.127s".
fn round(ms: u64) -> u64 {
    if ms >= 60_000 { ms / 1_000 * 1_000 } else { ms }
}

/// A time as RFC 3339 (UTC), for a tooltip beside a relative one.
pub fn time(at_ms: UnixMs) -> String {
    rfc3339(at_ms)
}

/// JSON text, indented for reading (as given when it is not JSON).
pub fn pretty(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| json.to_owned())
}

/// The start of JSON text on one line, without the spaces it was sent with: at most `max`
/// characters, with an ellipsis when cut. Reads only as far as it shows, so a list of large
/// payloads costs what its previews do.
pub fn preview(json: &str, max: usize) -> String {
    let mut out = String::new();
    let mut shown = 0;
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if !in_string && c.is_whitespace() {
            continue;
        }
        if shown == max {
            out.push('…');
            break;
        }
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        }
        out.push(c);
        shown += 1;
    }
    out
}

/// At most `max` characters of `text`, with an ellipsis when cut.
pub fn excerpt(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_text_read_well() {
        assert_eq!(relative(1_000, 91_500), "1m 30s ago");
        assert_eq!(relative(5_000, 4_750), "in 250ms");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
        assert_eq!(pretty(r#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(pretty("not json"), "not json");
        assert_eq!(
            preview("{ \"a b\" :\n [1, \"x\\\" y\"] }", 99),
            r#"{"a b":[1,"x\" y"]}"#
        );
        assert_eq!(preview(r#"{"a": 1}"#, 4), r#"{"a"…"#);
    }
}
