//! Zaqar's pre-signed URLs: `POST /v2/queues/{name}/share` signs a set of paths and methods of
//! a project until a time, and a request carrying that set in `URL-Signature`, `URL-Expires`,
//! `URL-Methods` and `URL-Paths` (with its `X-Project-ID`) may use those paths and methods
//! without a token ([`super::super::auth`] decides, with [`verify`]).
//!
//! The signature is Zaqar's (`zaqar/common/urls.py`): the hex HMAC-SHA256, under the signing
//! key, of `paths\nmethods\nproject\nexpires` where `\n` is a backslash and an `n` (Zaqar
//! formats a raw string), the paths and methods each sorted and joined with `,`, and `expires`
//! in UTC as `YYYY-MM-DDTHH:MM:SS`. A URL set made by Zaqar with the same key works here and
//! the other way round.
//!
//! Invariants:
//! - A request whose signed set does not hold, in any way (no or another method, a path
//!   outside the signed ones, expired, altered), is refused as Zaqar refuses it: Falcon's bare
//!   404, whatever the token.
//! - A signed path admits itself and what is below it (`.../messages` admits
//!   `.../messages/{id}`), never a sibling: Zaqar matches it as a regular expression anywhere in
//!   the path, Tenax as a whole prefix of path segments.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use hmac::{Hmac, Mac as _};
use serde_json::{Value, json};
use sha2::Sha256;

use super::error::ZaqarError;
use super::names::QueueRef;
use super::request::{Ctx, json_body};
use crate::api::AppState;

/// What [`tenax_core::secrets::Keyring::derive`] derives the signing key for.
pub const DERIVE_PURPOSE: &[u8] = b"tenax zaqar signed urls";

/// The keys a share document may hold.
const KNOWN_KEYS: [&str; 3] = ["methods", "expires", "paths"];
/// The resources a share may sign, below the queue.
const VALID_PATHS: [&str; 3] = ["messages", "subscriptions", "claims"];
/// The methods a share may sign.
const METHODS: [&str; 5] = ["DELETE", "GET", "HEAD", "PATCH", "POST"];
/// A share without `expires` lasts a day, as Zaqar's.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(86_400);

/// The key that signs and checks URL sets. Its `Debug` never shows it.
#[derive(Clone)]
pub struct SigningKey(Vec<u8>);

impl SigningKey {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// A verified URL set: what it admits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub project: String,
}

/// Why a URL set is refused (for the log; the answer is Zaqar's bare 404).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// The hex signature of a URL set (`paths` and `methods` are sorted here).
pub fn sign(
    key: &SigningKey,
    paths: &[String],
    methods: &[String],
    project: &str,
    expires: &str,
) -> String {
    let mut paths = paths.to_vec();
    paths.sort();
    let mut methods = methods.to_vec();
    methods.sort();
    let body = format!(
        "{}\\n{}\\n{project}\\n{expires}",
        paths.join(","),
        methods.join(",")
    );
    // HMAC takes a key of any length: this cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(&key.0).expect("HMAC takes any key length");
    mac.update(body.as_bytes());
    let tag = mac.finalize().into_bytes();
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks the URL set a request carries. `Ok(None)`: it carries none (no `URL-Signature`).
pub fn verify(
    key: &SigningKey,
    headers: &HeaderMap,
    method: &Method,
    path: &str,
    now: SystemTime,
) -> Result<Option<Grant>, Refusal> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(signature) = header("url-signature").filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let list = |name: &str| -> Vec<String> {
        header(name)
            .unwrap_or_default()
            .split(',')
            .map(str::to_owned)
            .collect()
    };
    let methods = list("url-methods");
    let paths = list("url-paths");
    if !methods.iter().any(|m| m == method.as_str()) {
        return Err(Refusal(format!(
            "URL-Methods: {method} is not one of the signed methods"
        )));
    }
    if !paths.iter().any(|p| admits(p, path)) {
        return Err(Refusal(format!(
            "URL-Paths: {path} is not within the signed paths"
        )));
    }
    let Some(project) = super::request::project_header(headers) else {
        return Err(Refusal("X-Project-ID: missing".into()));
    };
    let expires = header("url-expires").unwrap_or_default();
    let Some(at) = parse_expires(expires) else {
        return Err(Refusal(format!(
            "URL-Expires: {expires:?} is not a date such as 2016-01-01T00:00:00"
        )));
    };
    if at <= now {
        return Err(Refusal("URL-Expires: the signed URL has expired".into()));
    }
    let expected = sign(key, &paths, &methods, &project, &format_expires(at));
    if !equal_in_constant_time(expected.as_bytes(), signature.as_bytes()) {
        return Err(Refusal(
            "URL-Signature: does not match the signed paths, methods, project and expiry".into(),
        ));
    }
    Ok(Some(Grant { project }))
}

/// Whether the signed path `signed` admits the request path `path`: the same path, or one
/// below it.
fn admits(signed: &str, path: &str) -> bool {
    !signed.is_empty()
        && path
            .strip_prefix(signed)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// An ISO 8601 date and time as Zaqar reads `expires`: `YYYY-MM-DDTHH:MM:SS`, with optional
/// fractional seconds and an optional `Z` or `±HH:MM` offset (UTC without one). Fractions are
/// dropped, as Zaqar's format drops them.
pub fn parse_expires(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (local, offset_s) = split_offset(text)?;
    let at = humantime::parse_rfc3339_weak(local).ok()?;
    let at = if offset_s >= 0 {
        at.checked_sub(Duration::from_secs(offset_s.unsigned_abs()))?
    } else {
        at.checked_add(Duration::from_secs(offset_s.unsigned_abs()))?
    };
    let secs = at.duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// A date and time without its offset, and the offset in seconds east of UTC.
fn split_offset(text: &str) -> Option<(&str, i64)> {
    if let Some(local) = text.strip_suffix('Z').or_else(|| text.strip_suffix('z')) {
        return Some((local, 0));
    }
    let time_at = text.find(['T', 't', ' '])?;
    let time = &text[time_at..];
    let Some(sign_at) = time.rfind(['+', '-']) else {
        return Some((text, 0));
    };
    let offset = &time[sign_at + 1..];
    let (hours, minutes) = match offset.split_once(':') {
        Some((h, m)) => (h, m),
        None if offset.len() == 4 => offset.split_at(2),
        None => (offset, "0"),
    };
    let hours: i64 = hours.parse().ok().filter(|h| *h < 24)?;
    let minutes: i64 = minutes.parse().ok().filter(|m| *m < 60)?;
    let seconds = hours * 3600 + minutes * 60;
    let seconds = if time.as_bytes()[sign_at] == b'-' {
        -seconds
    } else {
        seconds
    };
    Some((&text[..time_at + sign_at], seconds))
}

/// `expires` as Zaqar writes it: UTC, `YYYY-MM-DDTHH:MM:SS`.
pub fn format_expires(at: SystemTime) -> String {
    let text = humantime::format_rfc3339_seconds(at).to_string();
    text.trim_end_matches('Z').to_owned()
}

/// `POST /v2/queues/{queue_name}/share`: a signed URL set for paths of the queue.
pub async fn share(
    ctx: Ctx,
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ZaqarError> {
    let queue = QueueRef::new(&ctx.project, &name)?;
    let document = if body.is_empty() {
        json!({})
    } else {
        json_body(&body)?
    };
    let Some(document) = document.as_object() else {
        return Err(ZaqarError::document_type());
    };
    let mut unknown: Vec<&str> = document
        .keys()
        .map(String::as_str)
        .filter(|k| !KNOWN_KEYS.contains(k))
        .collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        return Err(ZaqarError::api(format!(
            "Unknown keys: {}",
            python_set(&unknown)
        )));
    }
    let base = queue.href();
    let paths = match document.get("paths") {
        None | Some(Value::Null) => vec!["messages".to_owned()],
        Some(value) => {
            let paths = strings(value, "paths")?;
            if paths.is_empty() {
                vec!["messages".to_owned()]
            } else {
                let mut invalid: Vec<&str> = paths
                    .iter()
                    .map(String::as_str)
                    .filter(|p| !VALID_PATHS.contains(p))
                    .collect();
                if !invalid.is_empty() {
                    invalid.sort_unstable();
                    invalid.dedup();
                    return Err(ZaqarError::api(format!(
                        "Invalid paths: {}",
                        python_set(&invalid)
                    )));
                }
                paths
            }
        }
    };
    let mut paths: Vec<String> = paths.iter().map(|p| format!("{base}/{p}")).collect();
    paths.sort();
    paths.dedup();
    let mut methods = match document.get("methods") {
        None | Some(Value::Null) => vec!["GET".to_owned()],
        Some(value) => {
            let methods = strings(value, "methods")?;
            if methods.is_empty() {
                vec!["GET".to_owned()]
            } else {
                methods
            }
        }
    };
    if let Some(bad) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
        return Err(ZaqarError::api(format!(
            "methods: {bad:?} is not a method a URL can be signed for (one of {})",
            METHODS.join(", ")
        )));
    }
    methods.sort();
    methods.dedup();
    let now = UNIX_EPOCH + Duration::from_millis(state.engine.now_ms());
    let expires = match document.get("expires") {
        None | Some(Value::Null) => now + DEFAULT_LIFETIME,
        Some(Value::String(text)) => {
            if text.trim().parse::<i64>().is_ok_and(|n| n != 0) {
                return Err(ZaqarError::api(format!(
                    "`expires` should be date format, for example 2016-01-01T00:00:00, not \
                     integer value: {}",
                    text.trim()
                )));
            }
            parse_expires(text).ok_or_else(|| {
                ZaqarError::api(format!(
                    "expires: {text:?} is not a date and time such as 2016-01-01T00:00:00 \
                     (UTC unless it has an offset)"
                ))
            })?
        }
        Some(other) => {
            return Err(ZaqarError::api(format!(
                "`expires` should be date format, for example 2016-01-01T00:00:00, not \
                 integer value: {other}"
            )));
        }
    };
    if expires <= now {
        return Err(ZaqarError::api("`expires` is lower than the current time"));
    }
    let expires = format_expires(expires);
    let signature = sign(
        &state.zaqar_signing,
        &paths,
        &methods,
        &ctx.project,
        &expires,
    );
    Ok(Json(json!({
        "paths": paths,
        "methods": methods,
        "project": ctx.project,
        "expires": expires,
        "signature": signature,
    })))
}

/// A list of strings, or the 400 that names `field`.
fn strings(value: &Value, field: &str) -> Result<Vec<String>, ZaqarError> {
    let wrong = || ZaqarError::api(format!("`{field}` should be a list of strings"));
    let Value::Array(items) = value else {
        return Err(wrong());
    };
    items
        .iter()
        .map(|item| item.as_str().map(str::to_owned).ok_or_else(wrong))
        .collect()
}

/// Names as Python prints a set of strings: `{'a', 'b'}`.
fn python_set(names: &[&str]) -> String {
    let inner: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    format!("{{{}}}", inner.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        SigningKey::new(b"test-key".to_vec())
    }

    #[test]
    fn signs_as_zaqar() {
        // hmac.new(b'test-key', rb'/v2/queues/q/messages\nGET\np\n2030-01-01T00:00:00',
        //          hashlib.sha256).hexdigest()
        let signature = sign(
            &key(),
            &["/v2/queues/q/messages".into()],
            &["GET".into()],
            "p",
            "2030-01-01T00:00:00",
        );
        let mut mac = Hmac::<Sha256>::new_from_slice(b"test-key").unwrap();
        mac.update(b"/v2/queues/q/messages\\nGET\\np\\n2030-01-01T00:00:00");
        let want: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(signature, want);
        // Order does not matter: both lists are sorted before signing.
        assert_eq!(
            sign(
                &key(),
                &["/b".into(), "/a".into()],
                &["POST".into(), "GET".into()],
                "p",
                "x"
            ),
            sign(
                &key(),
                &["/a".into(), "/b".into()],
                &["GET".into(), "POST".into()],
                "p",
                "x"
            )
        );
    }

    #[test]
    fn reads_expires_as_zaqar() {
        let at = parse_expires("2030-01-01T00:00:00").unwrap();
        assert_eq!(format_expires(at), "2030-01-01T00:00:00");
        for same in [
            "2030-01-01T00:00:00Z",
            "2030-01-01T00:00:00.750",
            "2030-01-01T02:00:00+02:00",
            "2029-12-31T23:00:00-01:00",
            "2030-01-01T01:30:00+0130",
        ] {
            assert_eq!(parse_expires(same), Some(at), "{same}");
        }
        for bad in [
            "",
            "tomorrow",
            "2030-13-01T00:00:00",
            "2030-01-01T00:00:00+25:00",
        ] {
            assert_eq!(parse_expires(bad), None, "{bad}");
        }
    }

    #[test]
    fn checks_methods_paths_expiry_and_signature() {
        let now = parse_expires("2030-01-01T00:00:00").unwrap();
        let paths = vec!["/v2/queues/q/messages".to_owned()];
        let methods = vec!["GET".to_owned(), "POST".to_owned()];
        let expires = "2030-01-02T00:00:00";
        let signature = sign(&key(), &paths, &methods, "p", expires);
        let headers = |signature: &str, expires: &str| {
            let mut h = HeaderMap::new();
            h.insert("url-signature", signature.parse().unwrap());
            h.insert("url-expires", expires.parse().unwrap());
            h.insert("url-methods", "GET,POST".parse().unwrap());
            h.insert("url-paths", "/v2/queues/q/messages".parse().unwrap());
            h.insert("x-project-id", "p".parse().unwrap());
            h
        };
        let good = headers(&signature, expires);
        let grant = Grant {
            project: "p".into(),
        };
        let check =
            |h: &HeaderMap, m: Method, p: &str, at: SystemTime| verify(&key(), h, &m, p, at);
        assert_eq!(
            check(&good, Method::GET, "/v2/queues/q/messages", now),
            Ok(Some(grant.clone()))
        );
        assert_eq!(
            check(&good, Method::GET, "/v2/queues/q/messages/abc", now),
            Ok(Some(grant))
        );
        assert!(check(&good, Method::DELETE, "/v2/queues/q/messages", now).is_err());
        assert!(check(&good, Method::GET, "/v2/queues/q/claims", now).is_err());
        assert!(check(&good, Method::GET, "/v2/queues/q/messagesx", now).is_err());
        assert!(check(&good, Method::GET, "/v2/queues/q", now).is_err());
        let later = parse_expires("2030-01-03T00:00:00").unwrap();
        assert!(check(&good, Method::GET, "/v2/queues/q/messages", later).is_err());
        let altered = headers(&signature.replace('a', "b"), expires);
        assert!(check(&altered, Method::GET, "/v2/queues/q/messages", now).is_err());
        let extended = headers(&signature, "2030-01-05T00:00:00");
        assert!(check(&extended, Method::GET, "/v2/queues/q/messages", now).is_err());
        let mut other_project = good.clone();
        other_project.insert("x-project-id", "other".parse().unwrap());
        assert!(check(&other_project, Method::GET, "/v2/queues/q/messages", now).is_err());
        assert_eq!(
            check(&HeaderMap::new(), Method::GET, "/v2/queues/q/messages", now),
            Ok(None)
        );
    }
}
