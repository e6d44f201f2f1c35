//! Text from the server, made safe to print on a terminal. Job types, error messages, dead
//! reasons, endpoints and response excerpts are written by other people; printed raw, an
//! escape sequence in one could rewrite the screen, and a bidirectional-override mark could make
//! a line read differently from what it holds.
//!
//! Invariant: what [`safe`] returns holds no character of [`is_unsafe`], and a table row stays
//! one line (a newline or tab in a value is escaped too). [`safe_json`] keeps JSON valid.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Control characters (C0, DEL, C1) and the invisible marks that reorder text.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every unsafe character written as `\u{..}`.
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// JSON text with every unsafe character inside its strings written as a JSON `\uXXXX` escape
/// (serde_json escapes C0 controls itself, but not DEL, C1 or the reordering marks). Outside
/// strings, JSON text holds none of them.
pub fn safe_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 8);
    for c in json.chars() {
        if is_unsafe(c) && c != '\n' {
            // Every unsafe character is in the Basic Multilingual Plane: one escape each.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_reordering_characters_are_escaped() {
        assert_eq!(safe("plain: é ☃"), "plain: é ☃");
        assert_eq!(safe("\u{1b}[2J\u{1b}[31mred"), "\\u{1b}[2J\\u{1b}[31mred");
        assert_eq!(safe("a\nb\tc\u{7f}\u{9b}"), "a\\u{a}b\\u{9}c\\u{7f}\\u{9b}");
        assert_eq!(safe("abc\u{202e}fed"), "abc\\u{202e}fed");
    }

    #[test]
    fn json_stays_json() {
        let value = serde_json::json!({"type": "x\u{7f}\u{9b}\u{202e}y", "e": "\u{1b}"});
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let shown = safe_json(&pretty);
        assert!(!shown.chars().any(|c| is_unsafe(c) && c != '\n'), "{shown}");
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
    }
}
