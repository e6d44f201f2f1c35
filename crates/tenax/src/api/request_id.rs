//! A request's id: the client's `X-Request-Id` when it is a sane one, else a new one. The guard
//! ([`super::guard`]) gives every request its id and handles the request within the id's scope,
//! so that an error answer built deep in a handler (either API's, or a dashboard page's) can
//! name the id under which the log has the details.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderName, HeaderValue};

/// The header that carries a request's id, both ways.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    /// The id of the request being handled, for error answers built deep in a handler.
    static CURRENT: Arc<str>;
}

/// The id of the request this task is handling, if any.
pub fn current() -> Option<Arc<str>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// `handling`, run as the handling of the request `id`.
pub fn scope<F: Future>(id: Arc<str>, handling: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(id, handling)
}

/// `handling`, run at once as the handling of the request `id`.
pub fn sync_scope<R>(id: Arc<str>, handling: impl FnOnce() -> R) -> R {
    CURRENT.sync_scope(id, handling)
}

/// The client's request id if it is 1 to 64 characters of letters, digits, `-`, `_`, `.` or
/// `:`; else a new one.
pub fn given_or_new(given: Option<&HeaderValue>) -> Arc<str> {
    let sane = given.and_then(|v| v.to_str().ok()).filter(|v| {
        !v.is_empty()
            && v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
    });
    match sane {
        Some(id) => Arc::from(id),
        None => Arc::from(new_request_id()),
    }
}

/// 16 hex digits: a per-process random start, then counting up, so ids are unique within a
/// run and unlikely to repeat across runs.
fn new_request_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        // Truncation is fine: only the low bits vary between runs.
        #[allow(clippy::cast_possible_truncation)]
        let nanos = nanos as u64;
        nanos ^ u64::from(std::process::id()).rotate_left(32)
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:016x}",
        start.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_kept_when_sane_and_made_otherwise() {
        let given = HeaderValue::from_static("req-42.a:b_c");
        assert_eq!(&*given_or_new(Some(&given)), "req-42.a:b_c");
        for bad in ["", "has space", &"x".repeat(65), "semi;colon"] {
            let value = HeaderValue::from_str(bad).unwrap();
            let made = given_or_new(Some(&value));
            assert_eq!(made.len(), 16, "{bad:?} gave {made}");
        }
        assert_ne!(given_or_new(None), given_or_new(None));
    }
}
