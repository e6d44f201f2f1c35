//! Who is looking: the session cookie, login and logout, and the CSRF check of every action.
//!
//! With authentication on, `/ui/login` takes an API token and, if the server knows it, keeps it
//! in the cookie `tenax_session` (HttpOnly: page scripts cannot read it; SameSite=Strict: no
//! other site's page can make the browser send it; Secure under TLS; Path=/ui). Each request
//! authenticates the token again, so a revoked token ends its sessions at once. With
//! authentication off, everyone is the anonymous principal and no login is asked for.
//!
//! Every POST must carry the session's CSRF token (a form field `csrf`, or the header
//! `X-CSRF-Token`): a MAC of the session made with a key drawn at start, which only pages this
//! server rendered for the session hold.

use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Query, RawForm, Request, State};
use axum::http::header::{COOKIE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tenax_core::auth::{Capability, Principal};

use super::{UiError, UiKeys, layout};
use crate::api::AppState;

const COOKIE_NAME: &str = "tenax_session";
/// What is escaped in the cookie's value: everything but letters, digits and `-_.~`.
const COOKIE_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
/// What identifies the session of everyone when authentication is off.
const ANONYMOUS: &str = "anonymous";

/// The session of a request, in its extensions.
#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Principal,
    /// The token pages put in their forms.
    pub csrf: String,
    /// Whether a logout makes sense (authentication is on).
    pub signed_in: bool,
}

impl Session {
    /// Refuses unless the session may change things.
    pub fn must_manage(&self) -> Result<(), UiError> {
        if self.principal.may(Capability::Manage) {
            Ok(())
        } else {
            Err(UiError::forbidden(format!(
                "this token ({}, role {}) may not change queues, jobs or subscriptions",
                self.principal.name,
                self.principal.role.name()
            )))
        }
    }

    /// Refuses unless the session's token may touch `queue`.
    pub fn must_admit(&self, queue: &str) -> Result<(), UiError> {
        if self.principal.admits_queue(queue) {
            Ok(())
        } else {
            Err(UiError::forbidden(self.principal.refusal(queue)))
        }
    }
}

/// The token in the request's session cookie.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| {
            percent_encoding::percent_decode_str(value)
                .decode_utf8_lossy()
                .into_owned()
        })
        .filter(|value| !value.is_empty())
}

/// The middleware: see the module documentation.
pub async fn require(
    State(state): State<AppState>,
    State(keys): State<Arc<UiKeys>>,
    request: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let (principal, identity) = if state.auth_required {
        let known = cookie_token(&parts.headers)
            .and_then(|token| state.engine.authenticate(&token).map(|p| (p, token)));
        match known {
            Some(found) => found,
            None if parts.method == Method::GET => {
                let next = parts
                    .uri
                    .path_and_query()
                    .map_or("/ui", |p| p.as_str())
                    .to_owned();
                let target = format!(
                    "/ui/login?next={}",
                    url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
                );
                return Redirect::to(&target).into_response();
            }
            None => {
                return UiError {
                    status: StatusCode::UNAUTHORIZED,
                    message: "sign in first: your session has ended or its token was revoked"
                        .into(),
                }
                .into_response();
            }
        }
    } else {
        (Principal::anyone(), ANONYMOUS.to_owned())
    };
    if !principal.may(Capability::Read) {
        return UiError::forbidden(format!(
            "this token ({}, role {}) may not read",
            principal.name,
            principal.role.name()
        ))
        .into_response();
    }
    let session = Session {
        principal,
        csrf: keys.csrf(&identity),
        signed_in: state.auth_required,
    };
    let body = if parts.method == Method::POST {
        // The guard has read the body whole already: reading it again costs a copy.
        let bytes = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(bytes) => bytes,
            Err(_) => return UiError::invalid("the body could not be read").into_response(),
        };
        let sent = parts
            .headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| {
                url::form_urlencoded::parse(&bytes)
                    .find(|(name, _)| name == "csrf")
                    .map(|(_, value)| value.into_owned())
            });
        let matches = sent.is_some_and(|sent| {
            use subtle_eq::ConstantTimeEq as _;
            sent.as_bytes().ct_eq(session.csrf.as_bytes())
        });
        if !matches {
            return UiError::forbidden(
                "this form's CSRF token is missing or stale: reload the page and try again",
            )
            .into_response();
        }
        Body::from(bytes)
    } else {
        body
    };
    parts.extensions.insert(session);
    next.run(Request::from_parts(parts, body)).await
}

/// Equality in time that does not depend on where two strings differ.
mod subtle_eq {
    pub trait ConstantTimeEq {
        fn ct_eq(&self, other: &Self) -> bool;
    }

    impl ConstantTimeEq for [u8] {
        fn ct_eq(&self, other: &[u8]) -> bool {
            self.len() == other.len()
                && self
                    .iter()
                    .zip(other)
                    .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                    == 0
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    failed: Option<String>,
}

/// Where a login may send the browser: a dashboard page, never another site.
/// Whether `path` is a dashboard path that may go into a `Location` header: under `/ui`, and
/// of visible ASCII only (no control character, space or backslash).
pub(crate) fn is_dashboard_path(path: &str) -> bool {
    path.starts_with("/ui")
        && !path.starts_with("//")
        && path.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
}

/// Where to go after signing in: a dashboard path, else the overview. A `next` with a control
/// character is no link anyone followed: refused (400), naming the field.
fn safe_next(next: Option<&str>) -> Result<String, UiError> {
    match next {
        Some(path) if path.chars().any(char::is_control) => Err(UiError::invalid(
            "next: must be a dashboard path without control characters",
        )),
        Some(path) if is_dashboard_path(path) => Ok(path.to_owned()),
        _ => Ok("/ui".to_owned()),
    }
}

pub async fn login_page(
    State(state): State<AppState>,
    Query(query): Query<LoginQuery>,
) -> Response {
    if !state.auth_required {
        return Redirect::to("/ui").into_response();
    }
    let next = match safe_next(query.next.as_deref()) {
        Ok(next) => next,
        Err(error) => return error.into_response(),
    };
    let body = html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Tenax — sign in" }
                link rel="stylesheet" href="/ui/assets/app.css";
                link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml";
            }
            body.login {
                main {
                    h1 { "Tenax" }
                    p { "This server needs an API token. Paste one to open the dashboard; it is kept in a cookie that only this server can read, until you sign out." }
                    @if query.failed.is_some() {
                        p.error role="alert" { "That token is not valid (unknown or revoked)." }
                    }
                    form method="post" action="/ui/login" {
                        input type="hidden" name="next" value=(next);
                        label for="token" { "API token" }
                        input #token type="password" name="token" autocomplete="current-password" required autofocus;
                        button type="submit" { "Sign in" }
                    }
                    p.hint { "The first admin token of a new server is in " code { "admin-token" } " in its data directory; make others with " code { "tenax tokens create" } "." }
                }
            }
        }
    };
    (layout::headers(), Html(body.into_string())).into_response()
}

pub async fn login(
    State(state): State<AppState>,
    State(keys): State<Arc<UiKeys>>,
    RawForm(form): RawForm,
) -> Response {
    let field = |name: &str| {
        url::form_urlencoded::parse(&form)
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.into_owned())
    };
    let next = match safe_next(field("next").as_deref()) {
        Ok(next) => next,
        Err(error) => return error.into_response(),
    };
    let token = field("token").unwrap_or_default();
    let token = token.trim();
    if state.engine.authenticate(token).is_none() {
        let target = format!(
            "/ui/login?failed=1&next={}",
            url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
        );
        return Redirect::to(&target).into_response();
    }
    // Percent-encoded: any token the API accepts (`openssl rand -base64 32` gives `+`, `/`,
    // `=`) is kept whole in the cookie, and read back by `cookie_token`.
    let kept = percent_encoding::utf8_percent_encode(token, COOKIE_ESCAPES);
    let secure = if keys.secure { "; Secure" } else { "" };
    let cookie = format!("{COOKIE_NAME}={kept}; Path=/ui; HttpOnly; SameSite=Strict{secure}");
    let mut response = Redirect::to(&next).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    response
}

pub async fn logout(
    State(keys): State<Arc<UiKeys>>,
    Extension(_session): Extension<Session>,
) -> Response {
    let secure = if keys.secure { "; Secure" } else { "" };
    let cookie = format!("{COOKIE_NAME}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0{secure}");
    let mut response = (StatusCode::SEE_OTHER, [(LOCATION, "/ui/login")]).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(SET_COOKIE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_and_next_pages() {
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_static("a=1; tenax_session=tnx_abc; b=2"),
        );
        assert_eq!(cookie_token(&headers).as_deref(), Some("tnx_abc"));
        assert_eq!(cookie_token(&HeaderMap::new()), None);
        let next = |path: Option<&str>| safe_next(path).expect("a place");
        assert_eq!(next(Some("/ui/jobs?queue=a")), "/ui/jobs?queue=a");
        assert_eq!(next(Some("https://evil.example/")), "/ui");
        assert_eq!(next(Some("//evil.example/ui")), "/ui");
        assert_eq!(next(None), "/ui");
        for elsewhere in ["/ui x", "/ui\\evil", "/uié"] {
            assert_eq!(next(Some(elsewhere)), "/ui", "{elsewhere:?}");
        }
        for bad in ["/ui\r\nSet-Cookie: x=1", "/ui\u{1}", "/ui\u{7f}"] {
            assert!(safe_next(Some(bad)).is_err(), "{bad:?}");
        }
        // Tokens with any characters survive the cookie.
        let token = "Zm9v+YmFy/YmF6==";
        let kept = percent_encoding::utf8_percent_encode(token, COOKIE_ESCAPES).to_string();
        let mut headers = HeaderMap::new();
        headers.insert(
            COOKIE,
            HeaderValue::from_str(&format!("tenax_session={kept}")).expect("a header"),
        );
        assert_eq!(cookie_token(&headers).as_deref(), Some(token));
    }
}
