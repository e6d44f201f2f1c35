//! What a web browser may make this server do. Any page a user visits can send requests to a
//! server the user's machine reaches, and a server that needs no token (on loopback, by
//! default) would obey them: cross-site `text/plain` and form POSTs need no preflight, and DNS
//! rebinding points a name the attacker owns at 127.0.0.1. So, before routing:
//!
//! - **Host**: a listener that answers without a token (and any listener given
//!   `--allowed-hosts`) refuses a request whose `Host` (or HTTP/2 `:authority`) is a name other
//!   than `localhost` (or `*.localhost`) and the names of `--allowed-hosts`. An IP address is
//!   always accepted: DNS rebinding needs a name, since a browser sends the name of the page's
//!   own URL. `GET /healthz` is exempt (nothing behind it).
//! - **Origin**: a request whose `Origin` is not the server's own (scheme and `Host`) nor one
//!   of `--cors-origins` is refused; without `Origin`, a request a browser marks as coming from
//!   another site (`Sec-Fetch-Site`) may only read (`GET`, `HEAD`: following a link to the
//!   dashboard works). Origins of `--cors-origins` get CORS answers (preflights included).
//! - **Body type**: under `/api` and `/v2`, a body must be declared JSON (`application/json`,
//!   `application/*+json`, Zaqar's JSON patch); anything else is 415. The dashboard's forms
//!   (`/ui`) carry a CSRF token and a SameSite cookie instead.
//!
//! Invariant: every refusal names the header and the rule, and how an operator allows it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_METHOD, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN, TRANSFER_ENCODING,
    VARY,
};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};

/// What the browser checks allow, from the configuration.
#[derive(Debug, Clone, Default)]
pub struct BrowserPolicy {
    /// Whether `Host` is checked: the listener needs no token, or `--allowed-hosts` was given.
    pub check_host: bool,
    /// Host names accepted besides IP addresses and `localhost` (lowercase, without port).
    pub allowed_hosts: Vec<String>,
    /// Origins other than the server's own that may send requests (`--cors-origins`):
    /// `scheme://host[:port]`, lowercase, without a default port.
    pub cors_origins: Vec<String>,
    /// Whether the listener speaks TLS: the scheme of the server's own origin.
    pub tls: bool,
}

/// A refusal: its status, the header it is about and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub field: &'static str,
    pub message: String,
}

fn forbidden(field: &'static str, message: String) -> Refusal {
    Refusal {
        status: StatusCode::FORBIDDEN,
        code: "forbidden",
        field,
        message,
    }
}

/// How a request that passed the checks is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Handle it; add CORS headers for this allowed foreign origin, if any.
    Handle(Option<HeaderValue>),
    /// A CORS preflight from an allowed origin: answer it at once.
    Preflight(HeaderValue),
}

/// The headers a browser may send cross-origin to an allowed origin's requests.
const ALLOWED_HEADERS: &str = "authorization, content-type, x-auth-token, x-project-id, \
                               client-id, x-request-id, traceparent, x-csrf-token";
/// The methods of both APIs.
const ALLOWED_METHODS: &str = "GET, HEAD, POST, PUT, PATCH, DELETE";

impl BrowserPolicy {
    /// Judges a request by its head; `has_body` says whether it carries a body.
    pub fn judge(&self, parts: &Parts) -> Result<Verdict, Refusal> {
        let path = parts.uri.path();
        let authority = authority(parts);
        if self.check_host && path != "/healthz" {
            self.check_host(authority.as_deref())?;
        }
        let foreign = self.check_origin(parts, authority.as_deref())?;
        if let Some(origin) = &foreign {
            if parts.method == Method::OPTIONS
                && parts.headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD)
            {
                return Ok(Verdict::Preflight(origin.clone()));
            }
        }
        let zaqar = path == "/v2" || path.starts_with("/v2/");
        if zaqar || path.starts_with("/api/") {
            check_body_type(parts, zaqar)?;
        }
        Ok(Verdict::Handle(foreign))
    }

    fn check_host(&self, authority: Option<&str>) -> Result<(), Refusal> {
        // Without either, the client is no browser.
        let Some(authority) = authority else {
            return Ok(());
        };
        let host = host_of(authority);
        if is_ip_literal(&host)
            || host == "localhost"
            || host.ends_with(".localhost")
            || self.allowed_hosts.contains(&host)
        {
            return Ok(());
        }
        Err(forbidden(
            "Host",
            format!(
                "{host:?} is not a name of this server: it answers to IP addresses, localhost \
                 and the names of --allowed-hosts (a page on another site may be using a name \
                 that points here; if this is a name you use, add it with --allowed-hosts)"
            ),
        ))
    }

    /// The request's `Origin` when it is an allowed foreign one; a refusal when it is foreign
    /// and not allowed.
    fn check_origin(
        &self,
        parts: &Parts,
        authority: Option<&str>,
    ) -> Result<Option<HeaderValue>, Refusal> {
        let Some(origin) = parts.headers.get(ORIGIN) else {
            // No Origin: a browser sends one on every request that could change something,
            // except in the oldest versions; Sec-Fetch-Site covers those.
            let site = parts
                .headers
                .get("sec-fetch-site")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let reads = parts.method == Method::GET || parts.method == Method::HEAD;
            if !reads && matches!(site, "cross-site" | "same-site") {
                return Err(forbidden(
                    "Sec-Fetch-Site",
                    format!(
                        "a browser sent this {} from another site ({site}): only this server's \
                         own pages and the origins of --cors-origins may",
                        parts.method
                    ),
                ));
            }
            return Ok(None);
        };
        let text = origin.to_str().unwrap_or("");
        let normal = normal_origin(text);
        let own = authority.map(|a| {
            let scheme = if self.tls { "https" } else { "http" };
            normal_origin(&format!("{scheme}://{a}"))
        });
        if normal.is_some() && normal == own.flatten() {
            return Ok(None);
        }
        match normal {
            Some(normal) if self.cors_origins.contains(&normal) => Ok(Some(origin.clone())),
            _ => Err(forbidden(
                "Origin",
                format!(
                    "a page of {text:?} may not send requests to this server: only its own \
                     pages and the origins of --cors-origins may"
                ),
            )),
        }
    }
}

/// Refuses a body that is not declared JSON (415). Under `/v2` a form body is left to Zaqar's
/// own refusal, which is a 400 ("Invalid Content-Type") that Zaqar's clients know, and a body
/// with no type at all is read as JSON, as Zaqar reads it (its own functional tests send
/// none), unless a browser sent it: a browser's request carries `Origin` or `Sec-Fetch-*`
/// headers, and a browser can send an untyped body (a `Blob`) to another site unasked.
fn check_body_type(parts: &Parts, zaqar: bool) -> Result<(), Refusal> {
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let declared = parts
        .headers
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not text)"));
    let has_body = parts.headers.contains_key(TRANSFER_ENCODING)
        || parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() != "0");
    let refused = match declared {
        Some(media) if zaqar && is_form(media) => false,
        Some(media) => !is_json(media),
        None => has_body && (!zaqar || from_a_browser(parts)),
    };
    if !refused {
        return Ok(());
    }
    // curl's -d sends a form: say what it needs instead.
    let hint = if declared.is_some_and(is_form) {
        " (curl -d sends a form: use curl --json)"
    } else {
        ""
    };
    Err(Refusal {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        code: "unsupported_media_type",
        field: "Content-Type",
        message: format!(
            "must be application/json (a JSON media type) for a request with a body, got \
             {}{hint}",
            declared.map_or_else(|| "none".to_owned(), |m| format!("{m:?}"))
        ),
    })
}

/// Whether a browser sent the request: browsers add `Origin` to every request that may change
/// something, and `Sec-Fetch-*` to every request; other clients send neither.
fn from_a_browser(parts: &Parts) -> bool {
    parts.headers.contains_key(ORIGIN)
        || parts
            .headers
            .keys()
            .any(|name| name.as_str().starts_with("sec-fetch-"))
}

/// Whether a media type is JSON: `application/json`, `application/<anything>+json`, or
/// Zaqar's `application/openstack-messaging-v2.0-json-patch`; parameters (`charset`) aside.
fn is_json(media: &str) -> bool {
    let essence = media
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let Some(subtype) = essence.strip_prefix("application/") else {
        return false;
    };
    subtype == "json" || subtype.ends_with("+json") || subtype.ends_with("-json-patch")
}

fn is_form(media: &str) -> bool {
    media.split(';').next().is_some_and(|essence| {
        essence
            .trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
    })
}

/// The request's authority: `Host`, else the URI's (HTTP/2's `:authority`).
fn authority(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get(HOST)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned())
        .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned()))
}

/// The host of an authority, lowercase and without the port (`[::1]:7890` → `[::1]`).
fn host_of(authority: &str) -> String {
    let host = if authority.starts_with('[') {
        authority
            .find(']')
            .map_or(authority, |end| &authority[..=end])
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn is_ip_literal(host: &str) -> bool {
    host.parse::<std::net::Ipv4Addr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
}

/// An origin as `scheme://host[:port]`, lowercase, without its scheme's default port; `None`
/// for `null` or anything that is not an http(s) origin.
pub fn normal_origin(text: &str) -> Option<String> {
    let url = url::Url::parse(text).ok()?;
    if !matches!(url.scheme(), "http" | "https") || !matches!(url.path(), "" | "/") {
        return None;
    }
    let origin = url.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// Checks a `--allowed-hosts` name: a host name without scheme, port or path.
pub fn allowed_host(text: &str) -> Result<String, String> {
    let name = text.trim().trim_end_matches('.').to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if valid {
        Ok(name)
    } else {
        Err(format!(
            "--allowed-hosts: {text:?} is not a host name (letters, digits, '-' and '.', \
             without a scheme, port or path: queue.example.com)"
        ))
    }
}

/// Checks a `--cors-origins` origin: `http(s)://host[:port]`, nothing after.
pub fn cors_origin(text: &str) -> Result<String, String> {
    normal_origin(text.trim()).ok_or_else(|| {
        format!(
            "--cors-origins: {text:?} is not an origin (http:// or https://, a host and an \
             optional port, nothing after: https://app.example.com)"
        )
    })
}

/// The browser checks as a middleware of their own, for a listener without the API's guard
/// (`--metrics-listen`): refusals in the native error shape.
pub async fn refuse_foreign(
    State(policy): State<Arc<BrowserPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    match policy.judge(&parts) {
        Ok(Verdict::Handle(_)) => next.run(Request::from_parts(parts, body)).await,
        Ok(Verdict::Preflight(origin)) => preflight(origin),
        Err(refusal) => super::error::ApiError {
            status: refusal.status,
            code: refusal.code,
            field: Some(refusal.field.to_owned()),
            message: refusal.message,
        }
        .into_response(),
    }
}

/// The answer to a CORS preflight from an allowed origin.
pub fn preflight(origin: HeaderValue) -> Response {
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::NO_CONTENT;
    let headers = response.headers_mut();
    allow(headers, origin);
    headers.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(ALLOWED_METHODS),
    );
    headers.insert(
        ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static(ALLOWED_HEADERS),
    );
    headers.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    response
}

/// Lets the allowed foreign `origin` read an answer (with the credentials it sent).
pub fn allow(headers: &mut HeaderMap, origin: HeaderValue) {
    headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.insert(
        ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("x-request-id"),
    );
    headers.append(VARY, HeaderValue::from_static("origin"));
}

#[cfg(test)]
mod tests {
    use axum::http::Request;

    use super::*;

    fn parts(method: &str, path: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("a request").into_parts().0
    }

    fn loopback() -> BrowserPolicy {
        BrowserPolicy {
            check_host: true,
            allowed_hosts: vec!["queue.internal".into()],
            cors_origins: vec!["https://app.example.com".into()],
            tls: false,
        }
    }

    #[test]
    fn hosts_are_addresses_localhost_or_allowed_names() {
        let policy = loopback();
        for host in [
            "127.0.0.1:7890",
            "[::1]:7890",
            "10.1.2.3",
            "localhost:7890",
            "LOCALHOST",
            "app.localhost:7890",
            "queue.internal:7890",
            "queue.internal.",
        ] {
            let p = parts("GET", "/api/stats", &[("host", host)]);
            assert!(policy.judge(&p).is_ok(), "{host}");
        }
        for host in [
            "evil.example:7890",
            "127.0.0.1.nip.io:7890",
            "localhost.evil.com",
        ] {
            let p = parts("GET", "/api/stats", &[("host", host)]);
            let refusal = policy.judge(&p).expect_err(host);
            assert_eq!(
                (refusal.status, refusal.field),
                (StatusCode::FORBIDDEN, "Host")
            );
            assert!(refusal.message.contains("--allowed-hosts"), "{refusal:?}");
        }
        // Nothing behind it: a probe by any name is answered.
        let health = parts("GET", "/healthz", &[("host", "evil.example")]);
        assert!(policy.judge(&health).is_ok());
        // A listener that needs a token, without --allowed-hosts, does not check.
        let open = BrowserPolicy {
            check_host: false,
            ..BrowserPolicy::default()
        };
        let p = parts("GET", "/api/stats", &[("host", "evil.example")]);
        assert!(open.judge(&p).is_ok());
    }

    #[test]
    fn foreign_origins_are_refused_unless_allowed() {
        let policy = loopback();
        let own = parts(
            "POST",
            "/api/jobs",
            &[
                ("host", "localhost:7890"),
                ("origin", "http://localhost:7890"),
                ("content-type", "application/json"),
            ],
        );
        assert_eq!(policy.judge(&own), Ok(Verdict::Handle(None)));
        for origin in [
            "http://evil.example",
            "null",
            "http://localhost:3000",
            "https://localhost:7890",
        ] {
            let p = parts(
                "POST",
                "/api/jobs",
                &[
                    ("host", "localhost:7890"),
                    ("origin", origin),
                    ("content-type", "application/json"),
                ],
            );
            let refusal = policy.judge(&p).expect_err(origin);
            assert_eq!(refusal.field, "Origin", "{origin}");
        }
        let allowed = parts(
            "POST",
            "/api/jobs",
            &[
                ("host", "localhost:7890"),
                ("origin", "https://APP.example.com:443"),
                ("content-type", "application/json"),
            ],
        );
        assert!(matches!(
            policy.judge(&allowed),
            Ok(Verdict::Handle(Some(_)))
        ));
        let preflight = parts(
            "OPTIONS",
            "/api/jobs",
            &[
                ("host", "localhost:7890"),
                ("origin", "https://app.example.com"),
                ("access-control-request-method", "POST"),
            ],
        );
        assert!(matches!(
            policy.judge(&preflight),
            Ok(Verdict::Preflight(_))
        ));
        // Without Origin: a cross-site POST is refused, following a link is not.
        let posted = parts(
            "POST",
            "/ui/jobs/act",
            &[("host", "localhost"), ("sec-fetch-site", "cross-site")],
        );
        assert_eq!(
            policy.judge(&posted).expect_err("refused").field,
            "Sec-Fetch-Site"
        );
        let link = parts(
            "GET",
            "/ui/jobs",
            &[("host", "localhost"), ("sec-fetch-site", "cross-site")],
        );
        assert!(policy.judge(&link).is_ok());
    }

    #[test]
    fn api_bodies_must_be_declared_json() {
        let policy = BrowserPolicy::default();
        let with = |method: &str, path: &str, headers: &[(&str, &str)]| {
            policy.judge(&parts(method, path, headers))
        };
        for media in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/merge-patch+json",
            "application/openstack-messaging-v2.0-json-patch",
        ] {
            assert!(
                with(
                    "POST",
                    "/api/jobs",
                    &[("content-type", media), ("content-length", "2")]
                )
                .is_ok(),
                "{media}"
            );
        }
        for (path, media) in [
            ("/v2/queues/q/messages", "text/plain"),
            ("/api/jobs", "application/x-www-form-urlencoded"),
            ("/v2/queues/q/messages", "multipart/form-data; boundary=x"),
        ] {
            let refusal = with("POST", path, &[("content-type", media)]).expect_err(media);
            assert_eq!(refusal.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
            assert_eq!(refusal.field, "Content-Type");
        }
        // No type: refused with a body, accepted without one.
        assert!(with("POST", "/api/jobs", &[("content-length", "2")]).is_err());
        // Under /v2 an untyped body is Zaqar's JSON, unless a browser sent it.
        let messages = "/v2/queues/q/messages";
        assert!(with("POST", messages, &[("content-length", "2")]).is_ok());
        for browser in [
            ("sec-fetch-mode", "no-cors"),
            ("origin", "http://127.0.0.1:7890"),
        ] {
            let headers = [("host", "127.0.0.1:7890"), ("content-length", "2"), browser];
            let refusal = with("POST", messages, &headers).expect_err("a browser's untyped body");
            assert_eq!(
                refusal.status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{browser:?}"
            );
        }
        assert!(with("POST", "/api/jobs", &[("transfer-encoding", "chunked")]).is_err());
        assert!(with("POST", "/api/queues/q/pause", &[("content-length", "0")]).is_ok());
        assert!(with("POST", "/api/queues/q/pause", &[]).is_ok());
        // Zaqar refuses forms itself, in its own words.
        assert!(
            with(
                "POST",
                "/v2/queues/q/messages",
                &[("content-type", "application/x-www-form-urlencoded")]
            )
            .is_ok()
        );
        // The dashboard's forms are not the API's.
        assert!(
            with(
                "POST",
                "/ui/jobs/act",
                &[("content-type", "application/x-www-form-urlencoded")]
            )
            .is_ok()
        );
    }

    #[test]
    fn flags_are_checked() {
        assert_eq!(
            allowed_host("Queue.Internal.").as_deref(),
            Ok("queue.internal")
        );
        assert!(allowed_host("https://queue.internal").is_err());
        assert!(allowed_host("queue.internal:7890").is_err());
        assert_eq!(
            cors_origin("https://App.example.com:443").as_deref(),
            Ok("https://app.example.com")
        );
        assert_eq!(
            cors_origin("http://localhost:3000").as_deref(),
            Ok("http://localhost:3000")
        );
        for bad in [
            "app.example.com",
            "https://app.example.com/path",
            "null",
            "ftp://x",
        ] {
            assert!(cors_origin(bad).is_err(), "{bad}");
        }
    }
}
