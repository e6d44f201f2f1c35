//! Durations as whole milliseconds, and the human spelling shared by the policy JSON and the CLI.
//!
//! Accepted spellings: a non-negative integer (milliseconds), or a number with a unit, units may be
//! chained: `250ms`, `12.5s`, `5m`, `1h30m`, `2d`, `1w`. Units: `ms`, `s`, `m`, `h`, `d`, `w`
//! (also the long forms `sec`, `min`, `hour`, `day`, `week` and plurals). Spaces between parts
//! are allowed. Results are rounded to the millisecond, half up, and must not exceed
//! [`MAX_DELAY_MS`].

use crate::error::PolicyError;

/// Milliseconds in one second, minute, hour, day and (Julian) year.
pub const SECOND_MS: u64 = 1_000;
pub const MINUTE_MS: u64 = 60 * SECOND_MS;
pub const HOUR_MS: u64 = 60 * MINUTE_MS;
pub const DAY_MS: u64 = 24 * HOUR_MS;
pub const YEAR_MS: u64 = 365 * DAY_MS + DAY_MS / 4;

/// The documented ceiling of any single delay, cap or window parameter: 100 years.
///
/// Every computation saturates here instead of overflowing; 100 years is "never" for a job queue
/// while leaving room to add a timestamp (ms since 1970) without overflow in `u64`.
pub const MAX_DELAY_MS: u64 = 100 * YEAR_MS;

/// Rounds a non-negative millisecond value to a whole millisecond (half up) and clamps it into
/// `0..=MAX_DELAY_MS`. NaN becomes 0, +∞ becomes the ceiling: no input can wrap or go negative.
pub fn clamp_ms(ms: f64) -> u64 {
    if ms.is_nan() || ms <= 0.0 {
        return 0;
    }
    let rounded = (ms + 0.5).floor();
    if rounded >= MAX_DELAY_MS as f64 {
        MAX_DELAY_MS
    } else {
        // In range 0..MAX_DELAY_MS (< 2^52) and integral, so the cast is exact.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = rounded as u64;
        whole
    }
}

/// Parses a human duration (see the module docs) into milliseconds.
///
/// `field` names the parameter in error messages.
pub fn parse_duration(field: &str, text: &str) -> Result<u64, PolicyError> {
    let text = text.trim();
    let fail = |rule: String| PolicyError::new(field, rule);
    if text.is_empty() {
        return Err(fail("must be a duration such as 500, \"250ms\", \"12.5s\" or \"1h30m\", got an empty string".into()));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .ok()
            .filter(|ms| *ms <= MAX_DELAY_MS)
            .ok_or_else(|| {
                fail(format!(
                    "must be at most 100 years ({MAX_DELAY_MS} ms), got {text}"
                ))
            });
    }
    let mut total = 0.0_f64;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let value: f64 = number.parse().map_err(|_| {
            fail(format!("must be a duration such as \"12.5s\" or \"1h30m\": \"{text}\" has no number where one is expected"))
        })?;
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let scale = unit_ms(unit).ok_or_else(|| {
            if unit.is_empty() {
                fail(format!(
                    "\"{text}\" needs a unit after {number} (ms, s, m, h, d or w)"
                ))
            } else {
                fail(format!(
                    "unknown unit \"{unit}\" in \"{text}\" (use ms, s, m, h, d or w)"
                ))
            }
        })?;
        total += value * scale;
        rest = after.trim_start();
    }
    if !total.is_finite() || total > MAX_DELAY_MS as f64 {
        return Err(fail(format!("must be at most 100 years, got \"{text}\"")));
    }
    Ok(clamp_ms(total))
}

fn unit_ms(unit: &str) -> Option<f64> {
    let ms = match unit.to_ascii_lowercase().as_str() {
        "ms" | "msec" | "msecs" | "millis" | "millisecond" | "milliseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => SECOND_MS,
        "m" | "min" | "mins" | "minute" | "minutes" => MINUTE_MS,
        "h" | "hr" | "hrs" | "hour" | "hours" => HOUR_MS,
        "d" | "day" | "days" => DAY_MS,
        "w" | "week" | "weeks" => 7 * DAY_MS,
        _ => return None,
    };
    #[allow(clippy::cast_precision_loss)] // all of these are far below 2^53
    Some(ms as f64)
}

/// Formats milliseconds for people: `0ms`, `250ms`, `12.5s`, `5m`, `1h 30m`, `24d 22h 6m`.
///
/// Shows at most three units and drops the milliseconds once the value passes a minute; it is a
/// display form, not an exact one (use the millisecond figure for that).
pub fn format_duration(ms: u64) -> String {
    if ms < SECOND_MS {
        return format!("{ms}ms");
    }
    if ms < MINUTE_MS {
        let secs = ms / SECOND_MS;
        let frac = ms % SECOND_MS;
        return if frac == 0 {
            format!("{secs}s")
        } else {
            format!("{secs}.{}s", format!("{frac:03}").trim_end_matches('0'))
        };
    }
    let units = [
        ("y", YEAR_MS),
        ("d", DAY_MS),
        ("h", HOUR_MS),
        ("m", MINUTE_MS),
        ("s", SECOND_MS),
    ];
    let mut rest = ms;
    let mut parts = Vec::new();
    for (name, size) in units {
        if rest >= size {
            parts.push(format!("{}{name}", rest / size));
            rest %= size;
        }
        if parts.len() == 3 {
            break;
        }
    }
    parts.join(" ")
}

/// A duration in JSON: an integer (or finite non-negative number) of milliseconds, or a string in
/// the human spelling. Used by the native policy spelling.
pub(crate) fn duration_from_json(
    field: &str,
    value: &serde_json::Value,
) -> Result<u64, PolicyError> {
    match value {
        serde_json::Value::String(text) => parse_duration(field, text),
        serde_json::Value::Number(n) => {
            let ms = n.as_f64().unwrap_or(f64::NAN);
            if !ms.is_finite() || ms < 0.0 {
                Err(PolicyError::new(
                    field,
                    format!("must be a non-negative number of milliseconds, got {n}"),
                ))
            } else if ms > MAX_DELAY_MS as f64 {
                Err(PolicyError::new(
                    field,
                    format!("must be at most 100 years ({MAX_DELAY_MS} ms), got {n}"),
                ))
            } else {
                Ok(clamp_ms(ms))
            }
        }
        other => Err(PolicyError::new(
            field,
            format!(
                "must be milliseconds (a number) or a duration string such as \"12.5s\", got {}",
                json_kind(other)
            ),
        )),
    }
}

/// Seconds in JSON (the SNS and Zaqar spellings): a finite, non-negative number.
pub(crate) fn seconds_from_json(
    field: &str,
    value: &serde_json::Value,
) -> Result<u64, PolicyError> {
    let secs = value.as_f64().filter(|s| s.is_finite()).ok_or_else(|| {
        PolicyError::new(
            field,
            format!("must be a number of seconds, got {}", json_kind(value)),
        )
    })?;
    if secs < 0.0 {
        return Err(PolicyError::new(
            field,
            format!("must be at least 0 seconds, got {value}"),
        ));
    }
    if secs * 1000.0 > MAX_DELAY_MS as f64 {
        return Err(PolicyError::new(
            field,
            format!("must be at most 100 years, got {value} seconds"),
        ));
    }
    Ok(clamp_ms(secs * 1000.0))
}

/// A short name for a JSON value's kind, for error messages.
pub(crate) fn json_kind(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "null".into(),
        serde_json::Value::Bool(b) => format!("the boolean {b}"),
        serde_json::Value::Number(n) => format!("the number {n}"),
        serde_json::Value::String(s) => format!("the string \"{s}\""),
        serde_json::Value::Array(_) => "an array".into(),
        serde_json::Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_spelling() {
        let cases = [
            ("0", 0),
            ("1500", 1_500),
            ("250ms", 250),
            ("12.5s", 12_500),
            ("5m", 300_000),
            ("1h30m", 5_400_000),
            ("1h 30m", 5_400_000),
            ("2d", 2 * DAY_MS),
            ("1w", 7 * DAY_MS),
            ("0.0005s", 1), // half a millisecond rounds up
            ("0.0004s", 0),
            ("1.5 minutes", 90_000),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration("d", text), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_bad_spellings_naming_the_field() {
        for text in ["", "-5s", "5x", "s", "1.2.3s", "12.5", "abc"] {
            let err = parse_duration("backoff.base", text).unwrap_err();
            assert_eq!(err.field, "backoff.base", "{text}");
        }
        let err = parse_duration("cap", "36525d 1ms").unwrap_err();
        assert!(err.rule.contains("100 years"), "{err}");
        let err = parse_duration("cap", "99999999999999999999").unwrap_err();
        assert!(err.rule.contains("100 years"), "{err}");
    }

    #[test]
    fn clamp_never_wraps() {
        assert_eq!(clamp_ms(f64::NAN), 0);
        assert_eq!(clamp_ms(-1.0), 0);
        assert_eq!(clamp_ms(f64::INFINITY), MAX_DELAY_MS);
        assert_eq!(clamp_ms(1e300), MAX_DELAY_MS);
        assert_eq!(clamp_ms(0.5), 1);
        assert_eq!(clamp_ms(0.49), 0);
        assert_eq!(clamp_ms(33_333.333), 33_333);
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_duration(0), "0ms");
        assert_eq!(format_duration(250), "250ms");
        assert_eq!(format_duration(12_500), "12.5s");
        assert_eq!(format_duration(5 * MINUTE_MS), "5m");
        assert_eq!(format_duration(5_400_000), "1h 30m");
        assert_eq!(format_duration(2_154_020_000), "24d 22h 20m");
    }

    #[test]
    fn json_durations() {
        assert_eq!(duration_from_json("x", &serde_json::json!(1500)), Ok(1500));
        assert_eq!(
            duration_from_json("x", &serde_json::json!("1.5s")),
            Ok(1500)
        );
        assert!(duration_from_json("x", &serde_json::json!(-1)).is_err());
        assert!(duration_from_json("x", &serde_json::json!(true)).is_err());
        assert_eq!(seconds_from_json("x", &serde_json::json!(2.5)), Ok(2500));
        assert!(seconds_from_json("x", &serde_json::json!("5")).is_err());
    }
}
