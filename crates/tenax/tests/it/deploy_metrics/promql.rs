//! The metric names a PromQL expression selects, read by a small lexer: what is left once
//! strings, label matchers (`{…}`), ranges and subqueries (`[…]`), Grafana variables (`$queue`,
//! `${queue}`, `$__rate_interval`), numbers and durations, keywords, function and aggregation
//! names (a word followed by `(`, or by `by` or `without`) and the label lists of `by`, `without`, `on`, `ignoring`,
//! `group_left` and `group_right` are skipped. Enough for the expressions Tenax ships, which
//! `promtool` also checks; the names are returned in order, repeated as they occur.

/// Words that group or modify, whose parenthesised list (if any) names labels.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Binary operators and modifiers spelt as words.
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "atan2"];

pub fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = past_string(&chars, i);
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                i = past_closing(&chars, i, '{', '}');
            } else {
                while i < chars.len() && is_word_char(chars[i]) {
                    i += 1;
                }
            }
        } else if c == '{' {
            i = past_closing(&chars, i, '{', '}');
        } else if c == '[' {
            i = past_closing(&chars, i, '[', ']');
        } else if c.is_ascii_digit() || c == '.' {
            // A number or a duration (`5m`, `1e3`, `0.99`).
            while i < chars.len() && (is_word_char(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if is_word_start(c) {
            let start = i;
            while i < chars.len() && is_word_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let after: String = chars[next..]
                .iter()
                .take_while(|c| is_word_char(**c))
                .collect();
            // A function or an aggregation (`sum(…)`, `sum by (…) (…)`), not a metric.
            let called = chars.get(next) == Some(&'(') || after == "by" || after == "without";
            if LABEL_LISTS.contains(&word.as_str()) {
                if called {
                    i = past_closing(&chars, next, '(', ')');
                }
            } else if !called && !KEYWORDS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

fn is_word_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index just past the string that opens at `open` (escapes skipped, except in raw
/// backquoted strings).
fn past_string(chars: &[char], open: usize) -> usize {
    let quote = chars[open];
    let mut i = open + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    panic!(
        "an unterminated string in {:?}",
        chars.iter().collect::<String>()
    );
}

/// The index just past the `close` that matches the `open` at `at`, strings inside skipped.
fn past_closing(chars: &[char], at: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = at;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = past_string(chars, i);
            continue;
        }
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    panic!(
        "an unclosed {open:?} in {:?}",
        chars.iter().collect::<String>()
    );
}

#[test]
fn names_are_read_past_functions_matchers_ranges_and_groupings() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (instance, le) (rate(a_seconds_bucket{queue=~"$queue", x="}"}[$__rate_interval])))"#
        ),
        ["a_seconds_bucket"]
    );
    assert_eq!(
        metric_names(
            r#"sum without (type) (increase(b_total[15m] offset 1h)) / on (queue) group_left (x) c and ${v} unless d{s!="(other)"} == bool 0 or vector(0)"#
        ),
        ["b_total", "c", "d"]
    );
    assert_eq!(
        metric_names("max(x) by (queue) > 1e3 and rate(y:recorded[5m:1m]) > .5"),
        ["x", "y:recorded"]
    );
}
