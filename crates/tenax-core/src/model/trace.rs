//! W3C trace context (<https://www.w3.org/TR/trace-context/>): the `traceparent` a job is
//! enqueued with, kept verbatim and handed on, so that one trace covers the producer, the
//! queue, the worker and the webhook endpoint.

/// The longest `traceparent` kept: version 00 is 55 characters; later versions may append
/// fields, which are kept within this bound.
pub const MAX_TRACEPARENT_LEN: usize = 512;

/// Checks a `traceparent`: `version-traceid-parentid-flags` in lowercase hex (2-32-16-2), the
/// version not `ff`, neither id all zeros; version 00 has nothing after the flags, a later
/// version may have more fields after a `-`. The error is the rule, for an API error.
pub fn check_traceparent(text: &str) -> Result<(), &'static str> {
    const RULE: &str = "must be a W3C traceparent: 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lowercase, ids not all zeros";
    let bytes = text.as_bytes();
    if bytes.len() < 55 || bytes.len() > MAX_TRACEPARENT_LEN {
        return Err(RULE);
    }
    let hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let dashes = [2, 35, 52].iter().all(|&i| bytes[i] == b'-');
    if !dashes || !hex(0..2) || !hex(3..35) || !hex(36..52) || !hex(53..55) {
        return Err(RULE);
    }
    let zeros = |range: std::ops::Range<usize>| bytes[range].iter().all(|&b| b == b'0');
    if &text[0..2] == "ff" || zeros(3..35) || zeros(36..52) {
        return Err(RULE);
    }
    match (&text[0..2], bytes.get(55)) {
        (_, None) => Ok(()),
        ("00", Some(_)) => Err(RULE),
        (_, Some(b'-')) if text.is_ascii() => Ok(()),
        _ => Err(RULE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_spec_examples_pass_and_broken_ones_do_not() {
        assert_eq!(check_traceparent(GOOD), Ok(()));
        assert_eq!(
            check_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            Ok(())
        );
        // A later version may append fields.
        assert_eq!(
            check_traceparent(&format!("01{}-extra", &GOOD[2..])),
            Ok(())
        );
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more",
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "0g-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert!(check_traceparent(bad).is_err(), "{bad:?} passed");
        }
        assert!(check_traceparent(&format!("01{}-{}", &GOOD[2..], "x".repeat(500))).is_err());
        assert!(check_traceparent(&format!("01{}-é", &GOOD[2..])).is_err());
    }
}
