//! What every request passes through before its handler, on both APIs:
//!
//! - a request id ([`super::request_id`]): the client's `X-Request-Id` when it is a sane one,
//!   else a new one; it is on every response (`X-Request-Id`), in the body of every 5xx, and on
//!   every log event of the request (a tracing span);
//! - the body, read whole within the size limit (`--max-request-bytes`, else 413) and the
//!   request timeout (`--request-timeout`, else 408), so a body that trickles in cannot hold a
//!   connection and a handler never sees a partial body. A body whose announced length
//!   (`Content-Length`, on HTTP/1.1 or HTTP/2) is over the limit is answered 413 at once,
//!   without reading it; one without (chunked) as soon as what arrived passes the limit;
//! - a path that is not valid UTF-8 once percent-decoded is refused before routing;
//! - a panic in a handler becomes a 500 with the request id and a logged error event, never a
//!   dropped connection;
//! - an answer that is not in the API's error shape (a rejection of one of axum's own
//!   extractors, which answer plain text) is put into it;
//! - every request is counted in the HTTP metrics by its route template and status, and
//!   logged at info in one line (unless `--log-requests false`): method, route, status,
//!   latency and request id, handed to the request log's thread ([`super::request_log`]). The route is the template the router matched (recorded by
//!   [`record_route`]); a request refused before routing, or matching no route, has
//!   [`UNMATCHED`];
//! - with tracing on, a span per request ([`tenax_core::otel::request`]).
//!
//! Invariant: every error answer is JSON in the shape of the API it belongs to: Zaqar's
//! `{"title", "description"}` under `/v2`, the native `{"error": {...}}` everywhere else.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::body::{Body, HttpBody as _};
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt as _;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use tenax_core::metrics::Metrics;
use tenax_core::metrics::http::UNMATCHED;
use tenax_core::otel::request::RequestSpan;
use tracing::Instrument as _;

use super::Limits;
use super::browser::{BrowserPolicy, Verdict};
use super::error::ApiError;
use super::request_id::{self, REQUEST_ID};
use super::request_log::RequestLog;
use super::zaqar::error::ZaqarError;

/// Which error shape a path's answers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Native,
    Zaqar,
}

impl Shape {
    fn of(path: &str) -> Self {
        if path == "/v2" || path.starts_with("/v2/") {
            Self::Zaqar
        } else {
            Self::Native
        }
    }

    /// An error answer in this shape. Zaqar titles are Falcon's for these statuses.
    fn error(
        self,
        status: StatusCode,
        code: &'static str,
        field: Option<&str>,
        message: String,
    ) -> Response {
        match self {
            Self::Native => ApiError {
                status,
                code,
                field: field.map(str::to_owned),
                message,
            }
            .into_response(),
            Self::Zaqar => {
                let title = match status {
                    StatusCode::PAYLOAD_TOO_LARGE => "Request Entity Too Large",
                    StatusCode::REQUEST_TIMEOUT => "Request Timeout",
                    StatusCode::INTERNAL_SERVER_ERROR => "Internal server error",
                    StatusCode::NOT_FOUND => "Not found",
                    StatusCode::FORBIDDEN => "Forbidden",
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => "Unsupported media type",
                    _ => "Invalid request",
                };
                let description = match field {
                    Some(field) => format!("{field}: {message}"),
                    None => message,
                };
                ZaqarError::new(status, title, description).into_response()
            }
        }
    }
}

/// What the middleware needs.
#[derive(Debug)]
pub struct Guard {
    pub limits: Arc<Limits>,
    pub metrics: Arc<Metrics>,
    /// Where each request's line goes (`None`: `--log-requests false`).
    pub request_log: Option<RequestLog>,
    /// The spans, when tracing is on.
    pub tracing: Option<Arc<tenax_core::otel::Tracing>>,
    /// What a browser may send ([`super::browser`]).
    pub browser: Arc<BrowserPolicy>,
}

/// The middleware: see the module documentation.
pub async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let id = request_id::given_or_new(request.headers().get(&REQUEST_ID));
    let shape = Shape::of(request.uri().path());
    let method = request.method().clone();
    let span =
        tracing::info_span!("request", request_id = %id, %method, path = %request.uri().path());
    let request_span = guard.tracing.as_ref().map(|tracing| {
        RequestSpan::start(
            tracing,
            &method,
            request.uri().path(),
            request.headers(),
            &id,
        )
    });
    let handling = run(&guard.limits, &guard.browser, shape, request, next, &id).instrument(span);
    let mut response = match &request_span {
        Some(request_span) => request_span.within(handling).await,
        None => handling.await,
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let elapsed = started.elapsed();
    let matched = response.extensions().get::<MatchedPath>();
    let route = matched.map_or(UNMATCHED, MatchedPath::as_str);
    let status = response.status().as_u16();
    guard.metrics.http.answered(&method, route, status, elapsed);
    if let Some(request_span) = request_span {
        request_span.end(&method, route, status);
    }
    if let Some(log) = &guard.request_log {
        log.record(method, matched.cloned(), status, elapsed, id);
    }
    response
}

/// Records the route template the router matched on the response, for [`guard`], which runs
/// before routing. A route layer: it runs only for requests that matched a route.
pub async fn record_route(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let mut response = next.run(request).await;
    if let Some(route) = route {
        response.extensions_mut().insert(route);
    }
    response
}

async fn run(
    limits: &Limits,
    browser: &BrowserPolicy,
    shape: Shape,
    request: Request,
    next: Next,
    id: &Arc<str>,
) -> Response {
    if percent_decoded_is_utf8(request.uri().path()).is_err() {
        return shape.error(
            StatusCode::BAD_REQUEST,
            "invalid",
            Some("path"),
            "must be valid UTF-8 once percent-decoded".into(),
        );
    }
    let (parts, body) = request.into_parts();
    let foreign = match browser.judge(&parts) {
        Ok(Verdict::Handle(foreign)) => foreign,
        Ok(Verdict::Preflight(origin)) => return super::browser::preflight(origin),
        Err(refusal) => {
            return shape.error(
                refusal.status,
                refusal.code,
                Some(refusal.field),
                refusal.message,
            );
        }
    };
    let mut response = read_and_handle(limits, shape, parts, body, next, id).await;
    if let Some(origin) = foreign {
        super::browser::allow(response.headers_mut(), origin);
    }
    response
}

/// Reads the body whole (within the limits), then hands the request to the router.
async fn read_and_handle(
    limits: &Limits,
    shape: Shape,
    parts: axum::http::request::Parts,
    body: Body,
    next: Next,
    id: &Arc<str>,
) -> Response {
    let too_large = || {
        shape.error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            Some("body"),
            format!(
                "must be at most {} bytes (--max-request-bytes)",
                limits.max_request_bytes
            ),
        )
    };
    // The lower bound of the size hint is the announced length, if any.
    if body.size_hint().lower() > u64::try_from(limits.max_request_bytes).unwrap_or(u64::MAX) {
        return too_large();
    }
    let read = Limited::new(body, limits.max_request_bytes).collect();
    let bytes = match tokio::time::timeout(limits.request_timeout, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return too_large();
        }
        Ok(Err(error)) => {
            return shape.error(
                StatusCode::BAD_REQUEST,
                "invalid",
                Some("body"),
                format!("could not be read: {error}"),
            );
        }
        Err(_) => {
            return shape.error(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                Some("body"),
                format!(
                    "must arrive within {} ms of the headers (--request-timeout)",
                    limits.request_timeout.as_millis()
                ),
            );
        }
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    // Shaped within the request's scope, so that a 500 built here carries its id.
    let handling = async {
        let response = next.run(request).await;
        let route = response.extensions().get::<MatchedPath>().cloned();
        let mut response = in_shape(shape, response).await;
        if let Some(route) = route {
            response.extensions_mut().insert(route);
        }
        response
    };
    let handled = AssertUnwindSafe(request_id::scope(id.clone(), handling))
        .catch_unwind()
        .await;
    match handled {
        Ok(response) => response,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            tracing::error!(panic = %message, "a request handler panicked; answered 500");
            request_id::sync_scope(id.clone(), || {
                shape.error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    None,
                    "the server failed to handle this request; the log has the details".into(),
                )
            })
        }
    }
}

/// A plain-text error (an extractor's rejection) put into the API's JSON error shape.
async fn in_shape(shape: Shape, response: Response) -> Response {
    let status = response.status();
    let plain = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let text = match axum::body::to_bytes(response.into_body(), 64 * 1024).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => status.canonical_reason().unwrap_or("error").to_owned(),
    };
    if status.is_server_error() {
        // Built by a layer below the handlers (axum's own), never logged there: its cause goes
        // to the log, under the request's id, and the answer says only that.
        tracing::error!(status = status.as_u16(), cause = %text, "answered a server error");
        return shape.error(
            status,
            "internal",
            None,
            "the server failed to handle this request; the log has the details under this \
             request's id"
                .into(),
        );
    }
    shape.error(status, "invalid", None, text)
}

/// Whether a path's percent-escapes decode to UTF-8.
fn percent_decoded_is_utf8(path: &str) -> Result<(), std::str::Utf8Error> {
    percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_decode_to_utf8() {
        assert!(percent_decoded_is_utf8("/api/jobs/1").is_ok());
        assert!(percent_decoded_is_utf8("/api/queues/caf%C3%A9").is_ok());
        assert!(percent_decoded_is_utf8("/api/queues/%FF").is_err());
        assert!(percent_decoded_is_utf8("/v2/queues/a%C3").is_err());
        assert!(percent_decoded_is_utf8("/v2/queues/100%").is_ok());
        assert!(percent_decoded_is_utf8("/v2/queues/%zz").is_ok());
    }

    #[test]
    fn shapes_by_path() {
        assert_eq!(Shape::of("/v2/queues"), Shape::Zaqar);
        assert_eq!(Shape::of("/v2"), Shape::Zaqar);
        assert_eq!(Shape::of("/v2x"), Shape::Native);
        assert_eq!(Shape::of("/api/jobs"), Shape::Native);
    }
}
