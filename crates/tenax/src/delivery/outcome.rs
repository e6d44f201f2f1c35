//! Classifying a delivery attempt by the endpoint's answer.
//!
//! Invariants:
//! - A 2xx status is always [`Verdict::Delivered`]; no override can turn success into failure.
//! - Without an override, only statuses that say "try again later" are retryable: every 5xx,
//!   408 Request Timeout and 429 Too Many Requests. Every other status (1xx, 3xx, other 4xx) is
//!   permanent: sending the same request again would get the same answer. Redirects are not
//!   followed, so a 3xx is the endpoint's mistake, not a reason to retry.
//! - Connection errors and timeouts never reach [`classify_status`]: the caller treats them as
//!   retryable.
//! - A `Retry-After` delay is honoured only for 429 and 503, and never exceeds
//!   [`MAX_RETRY_AFTER_MS`], so an endpoint cannot park a delivery for a year.

use std::time::UNIX_EPOCH;

/// What an attempt's answer means for the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The endpoint accepted the message: the delivery is done.
    Delivered,
    /// The endpoint may accept it later: the retry policy decides when.
    Retryable,
    /// Retrying would get the same answer: the delivery is dead.
    Permanent,
}

/// The longest `Retry-After` delay honoured: one hour.
pub const MAX_RETRY_AFTER_MS: u64 = 3_600_000;

/// The number of response-body bytes kept with an attempt.
pub const SNIPPET_BYTES: usize = 512;

/// The verdict for an HTTP status. `retryable_override`, when given, lists the only non-2xx
/// statuses that are retryable; every other non-2xx status is then permanent.
pub fn classify_status(status: u16, retryable_override: Option<&[u16]>) -> Verdict {
    if (200..300).contains(&status) {
        return Verdict::Delivered;
    }
    let retryable = match retryable_override {
        Some(statuses) => statuses.contains(&status),
        None => (500..600).contains(&status) || status == 408 || status == 429,
    };
    if retryable {
        Verdict::Retryable
    } else {
        Verdict::Permanent
    }
}

/// The delay in ms that a 429 or 503 response asks for in its `Retry-After` header, clamped to
/// [`MAX_RETRY_AFTER_MS`]. The header is either a whole number of seconds or an HTTP date (a
/// date already past asks for 0). `None` for other statuses, a missing header or one that is
/// neither form.
pub fn retry_after_ms(status: u16, header: Option<&str>, now_ms: u64) -> Option<u64> {
    if status != 429 && status != 503 {
        return None;
    }
    let text = header?.trim();
    let delay_ms = if is_delta_seconds(text) {
        delta_seconds_ms(text)
    } else {
        date_ms(text)?.saturating_sub(now_ms)
    };
    Some(delay_ms.min(MAX_RETRY_AFTER_MS))
}

/// Whether `text` is delta-seconds: one or more ASCII digits.
fn is_delta_seconds(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// Delta-seconds in ms, saturating: only overflow can make an all-digit text fail to parse.
fn delta_seconds_ms(digits: &str) -> u64 {
    digits
        .parse::<u64>()
        .unwrap_or(u64::MAX)
        .saturating_mul(1000)
}

/// An HTTP date in ms since 1970 (saturating), or `None` if `text` is not an HTTP date.
fn date_ms(text: &str) -> Option<u64> {
    let time = httpdate::parse_http_date(text).ok()?;
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    Some(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}

/// At most `max` bytes of `body` as text, for showing an endpoint's answer: invalid UTF-8 is
/// replaced, the cut never splits a character, and "…" (3 more bytes) marks a cut.
pub fn snippet(body: &[u8], max: usize) -> String {
    if body.len() <= max {
        return String::from_utf8_lossy(body).into_owned();
    }
    let cut = char_boundary_at_or_before(body, max);
    let mut text = String::from_utf8_lossy(body.get(..cut).unwrap_or_default()).into_owned();
    text.push('…');
    text
}

/// The largest index at most `index` that does not fall inside a UTF-8 sequence, looking back at
/// most 3 bytes (the longest sequence is 4 bytes). In invalid input with no boundary that close,
/// `index` itself: the bytes around it are replaced anyway.
fn char_boundary_at_or_before(bytes: &[u8], index: usize) -> usize {
    (index.saturating_sub(3)..=index)
        .rev()
        .find(|&i| bytes.get(i).is_none_or(|&b| !is_continuation_byte(b)))
        .unwrap_or(index)
}

/// Whether `byte` continues a multi-byte UTF-8 sequence (`0b10xx_xxxx`).
fn is_continuation_byte(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;

    #[test]
    fn classifies_statuses_by_default() {
        let cases = [
            (100, Verdict::Permanent),
            (200, Verdict::Delivered),
            (201, Verdict::Delivered),
            (204, Verdict::Delivered),
            (299, Verdict::Delivered),
            (301, Verdict::Permanent),
            (304, Verdict::Permanent),
            (400, Verdict::Permanent),
            (401, Verdict::Permanent),
            (404, Verdict::Permanent),
            (408, Verdict::Retryable),
            (410, Verdict::Permanent),
            (413, Verdict::Permanent),
            (429, Verdict::Retryable),
            (500, Verdict::Retryable),
            (502, Verdict::Retryable),
            (503, Verdict::Retryable),
            (599, Verdict::Retryable),
            (600, Verdict::Permanent),
        ];
        for (status, verdict) in cases {
            assert_eq!(classify_status(status, None), verdict, "{status}");
        }
    }

    #[test]
    fn an_override_lists_the_only_retryable_statuses() {
        let retryable: &[u16] = &[409, 503];
        let cases = [
            (200, Verdict::Delivered),
            (204, Verdict::Delivered),
            (409, Verdict::Retryable),
            (503, Verdict::Retryable),
            (500, Verdict::Permanent),
            (429, Verdict::Permanent),
            (408, Verdict::Permanent),
            (404, Verdict::Permanent),
        ];
        for (status, verdict) in cases {
            assert_eq!(
                classify_status(status, Some(retryable)),
                verdict,
                "{status}"
            );
        }
    }

    #[test]
    fn an_override_cannot_make_success_retryable() {
        assert_eq!(classify_status(200, Some(&[200])), Verdict::Delivered);
        assert_eq!(classify_status(500, Some(&[])), Verdict::Permanent);
    }

    const NOW_MS: u64 = 1_700_000_000_000;

    fn http_date(ms: u64) -> String {
        httpdate::fmt_http_date(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }

    #[test]
    fn reads_delta_seconds() {
        let cases = [
            ("0", 0),
            ("1", 1_000),
            ("120", 120_000),
            (" 30 ", 30_000),
            ("3600", MAX_RETRY_AFTER_MS),
            ("3601", MAX_RETRY_AFTER_MS),
            ("99999999999999999999999", MAX_RETRY_AFTER_MS),
        ];
        for (header, ms) in cases {
            assert_eq!(
                retry_after_ms(429, Some(header), NOW_MS),
                Some(ms),
                "{header:?}"
            );
        }
    }

    #[test]
    fn reads_http_dates() {
        let in_90_s = http_date(NOW_MS + 90_000);
        assert_eq!(retry_after_ms(503, Some(&in_90_s), NOW_MS), Some(90_000));
        let past = http_date(NOW_MS - 5_000);
        assert_eq!(retry_after_ms(503, Some(&past), NOW_MS), Some(0));
        let next_week = http_date(NOW_MS + 7 * 86_400_000);
        assert_eq!(
            retry_after_ms(429, Some(&next_week), NOW_MS),
            Some(MAX_RETRY_AFTER_MS)
        );
    }

    #[test]
    fn a_date_counts_from_now_with_second_precision() {
        // HTTP dates have whole seconds: 1.5 s from a now of x.500 s is the date at x+2 s.
        let now = NOW_MS + 500;
        let date = http_date(now + 1_500);
        assert_eq!(retry_after_ms(429, Some(&date), now), Some(1_500));
    }

    #[test]
    fn ignores_unparseable_headers() {
        for header in [
            "",
            " ",
            "-1",
            "1.5",
            "+5",
            "soon",
            "0x10",
            "Wed, 32 Foo 2024",
        ] {
            assert_eq!(
                retry_after_ms(429, Some(header), NOW_MS),
                None,
                "{header:?}"
            );
        }
        assert_eq!(retry_after_ms(429, None, NOW_MS), None);
    }

    #[test]
    fn only_429_and_503_ask_for_a_delay() {
        for status in [200, 408, 500, 502, 504] {
            assert_eq!(retry_after_ms(status, Some("10"), NOW_MS), None, "{status}");
        }
        assert_eq!(retry_after_ms(429, Some("10"), NOW_MS), Some(10_000));
        assert_eq!(retry_after_ms(503, Some("10"), NOW_MS), Some(10_000));
    }

    #[test]
    fn keeps_short_bodies_whole() {
        assert_eq!(snippet(b"", 10), "");
        assert_eq!(snippet(b"ok", 10), "ok");
        assert_eq!(snippet(b"0123456789", 10), "0123456789");
        assert_eq!(snippet("héllo".as_bytes(), 6), "héllo");
    }

    #[test]
    fn cuts_long_bodies_with_an_ellipsis() {
        assert_eq!(snippet(b"0123456789", 4), "0123…");
        assert_eq!(snippet(b"abc", 0), "…");
    }

    #[test]
    fn never_splits_a_character() {
        // "é" is 2 bytes, "€" 3, "𝄞" 4.
        let text = "aé€𝄞z";
        let cases = [
            (1, "a…"),
            (2, "a…"),
            (3, "aé…"),
            (4, "aé…"),
            (5, "aé…"),
            (6, "aé€…"),
            (7, "aé€…"),
            (8, "aé€…"),
            (9, "aé€…"),
            (10, "aé€𝄞…"),
            (11, "aé€𝄞z"),
        ];
        for (max, expected) in cases {
            assert_eq!(snippet(text.as_bytes(), max), expected, "max {max}");
        }
    }

    #[test]
    fn replaces_invalid_utf8() {
        assert_eq!(snippet(b"a\xffb", 10), "a\u{fffd}b");
        // A run of stray continuation bytes: no boundary within 3 bytes, cut where asked.
        assert_eq!(
            snippet(b"\x80\x80\x80\x80\x80\x80", 5),
            "\u{fffd}\u{fffd}\u{fffd}\u{fffd}\u{fffd}…"
        );
    }

    #[test]
    fn snippet_bytes_keeps_a_useful_amount() {
        let body = vec![b'x'; 10_000];
        let text = snippet(&body, SNIPPET_BYTES);
        assert_eq!(text.len(), SNIPPET_BYTES + '…'.len_utf8());
    }
}
