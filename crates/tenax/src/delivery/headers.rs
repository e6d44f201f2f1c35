//! Which request headers a subscription may add to its deliveries: the one rule both APIs
//! (native `headers`, Zaqar's `options.post_headers`) check against.
//!
//! Invariant: a delivery's own headers (`webhook-*` of Standard Webhooks, `tenax-*`) and those
//! that belong to the connection rather than the message are never a subscription's to set; the
//! sender sets or leaves them. `Content-Type` is set by the subscription's own field (which
//! Zaqar's API fills from `post_headers`), not as an extra header.

/// Headers that belong to the connection, not to the message.
const CONNECTION: [&str; 10] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-connection",
    "expect",
];

/// Prefixes of the headers a delivery carries of its own.
const OWN_PREFIXES: [&str; 2] = ["webhook-", "tenax-"];

/// Whether a subscription may not add header `name` (any case): the connection's, a
/// delivery's own, or `Content-Type`.
pub fn is_reserved(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    CONNECTION.contains(&lower.as_str())
        || OWN_PREFIXES.iter().any(|p| lower.starts_with(p))
        || lower == "content-type"
}

/// The rule in words, for error messages.
pub fn rule() -> String {
    format!(
        "is set by Tenax or by the connection and cannot be given; reserved: {}, content-type, \
         and every header starting with {}",
        CONNECTION.join(", "),
        OWN_PREFIXES.join(" or ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_and_connection_headers_are_reserved_in_any_case() {
        for name in [
            "Host",
            "content-LENGTH",
            "Expect",
            "Webhook-Signature",
            "webhook-anything",
            "Tenax-Attempt",
            "Content-Type",
        ] {
            assert!(is_reserved(name), "{name}");
        }
        for name in ["Authorization", "X-Team", "Webhooks", "Tenaxes"] {
            assert!(!is_reserved(name), "{name}");
        }
    }
}
