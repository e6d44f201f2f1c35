//! What every Zaqar request carries: the headers Zaqar checks on every `/v2` route (in Zaqar's
//! order), its query parameters read the way Falcon reads them, and JSON bodies read the way
//! Zaqar reads them.
//!
//! Header checks, in order (`zaqar/common/transport/wsgi/helpers.py`):
//! 1. a body must not be `application/x-www-form-urlencoded`;
//! 2. the client must accept `application/json`;
//! 3. `Client-ID` is required and must be a UUID in any of Python's spellings (with or without
//!    dashes, braces or a `urn:uuid:` prefix); it is kept as 32 lowercase hex digits, so two
//!    spellings of one UUID are one client;
//! 4. `X-Project-ID` is required and must not be empty; any characters (its bytes read as
//!    Latin-1), up to 256.

use axum::extract::FromRequestParts;
use axum::http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};

use super::error::ZaqarError;
use super::names::check_project;

/// The caller: its project and its client id (32 lowercase hex digits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ctx {
    pub project: String,
    pub client: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Ctx {
    type Rejection = ZaqarError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ZaqarError> {
        check(&parts.headers)
    }
}

/// Checks a request's headers in Zaqar's order.
pub fn check(headers: &HeaderMap) -> Result<Ctx, ZaqarError> {
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let content_type = header(CONTENT_TYPE.as_str()).unwrap_or_default();
    if headers.contains_key(CONTENT_LENGTH)
        && content_type.eq_ignore_ascii_case("application/x-www-form-urlencoded")
    {
        return Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Invalid Content-Type",
            "Endpoint does not accept `application/x-www-form-urlencoded` content; currently \
             supported media type is `application/json`; specify proper client-side media type \
             with the \"Content-Type\" header.",
        ));
    }
    if !accepts_json(header(ACCEPT.as_str())) {
        return Err(ZaqarError::new(
            StatusCode::NOT_ACCEPTABLE,
            "406 Not Acceptable",
            "Endpoint only serves `application/json`; specify client-side media type support \
             with the \"Accept\" header.",
        ));
    }
    let Some(client) = header("client-id") else {
        return Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Missing header value",
            "The \"Client-Id\" header is required.",
        ));
    };
    let Some(client) = parse_uuid(client) else {
        return Err(ZaqarError::new(
            StatusCode::BAD_REQUEST,
            "Wrong UUID value",
            "Malformed hexadecimal UUID.",
        ));
    };
    let project = project_header(headers);
    let project = match project.as_deref() {
        None => {
            return Err(ZaqarError::new(
                StatusCode::BAD_REQUEST,
                "Project-Id Missing",
                "The header X-PROJECT-ID was missing",
            ));
        }
        Some("") => {
            return Err(ZaqarError::new(
                StatusCode::BAD_REQUEST,
                "Empty project header not allowed",
                "X-PROJECT-ID cannot be an empty string. Specify the right header X-PROJECT-ID \
                 and retry.",
            ));
        }
        Some(project) => project,
    };
    check_project(project)?;
    Ok(Ctx {
        project: project.to_owned(),
        client,
    })
}

/// `X-Project-ID` as Zaqar reads it: WSGI's Latin-1, one character per byte, so that every
/// byte string is a project id and the ids python-zaqarclient sends (Latin-1) read as sent.
/// Everything that reads the project (the handlers, the token scopes, pre-signed URLs) reads
/// it through this, so they agree on which project a request acts for.
pub fn project_header(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-project-id")
        .map(|v| v.as_bytes().iter().copied().map(char::from).collect())
}

/// Whether an `Accept` header admits JSON (absent or empty: anything goes).
fn accepts_json(accept: Option<&str>) -> bool {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return true;
    };
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or_default().trim();
        let refused = parts.any(|param| {
            let param = param.trim();
            param
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        !refused
            && ["*/*", "application/*", "application/json"]
                .iter()
                .any(|m| media.eq_ignore_ascii_case(m))
    })
}

/// A UUID in any spelling Python's `uuid.UUID` accepts, as 32 lowercase hex digits.
pub fn parse_uuid(text: &str) -> Option<String> {
    let text = text.replace("urn:", "").replace("uuid:", "");
    let hex: String = text
        .trim_matches(|c| c == '{' || c == '}')
        .chars()
        .filter(|c| *c != '-')
        .collect();
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hex.to_lowercase())
}

/// Query parameters as Falcon reads them for Zaqar: `a=1,2` is the list `[1, 2]`, blank values
/// are left out, and a repeated name collects every value.
#[derive(Debug, Default, Clone)]
pub struct Params {
    pairs: Vec<(String, Vec<String>)>,
}

impl Params {
    pub fn parse(query: Option<&str>) -> Self {
        let mut params = Self::default();
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let values: Vec<String> = value
                .split(',')
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect();
            if values.is_empty() {
                continue;
            }
            match params.pairs.iter_mut().find(|(n, _)| *n == name) {
                Some((_, existing)) => existing.extend(values),
                None => params.pairs.push((name.into_owned(), values)),
            }
        }
        params
    }

    fn values(&self, name: &str) -> Option<&[String]> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Names of every parameter given, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.pairs.iter().map(|(n, _)| n.as_str())
    }

    /// A single value.
    pub fn str(&self, name: &str) -> Result<Option<&str>, ZaqarError> {
        match self.values(name) {
            None => Ok(None),
            Some([one]) => Ok(Some(one)),
            Some(_) => Err(ZaqarError::param(
                name,
                "It may not have more than one value.",
            )),
        }
    }

    /// An integer, as Python's `int()` reads one (values past `i64` saturate, so that a range
    /// check refuses them).
    pub fn int(&self, name: &str) -> Result<Option<i64>, ZaqarError> {
        let Some(text) = self.str(name)? else {
            return Ok(None);
        };
        parse_int(text)
            .map(Some)
            .ok_or_else(|| ZaqarError::param(name, "The value must be an integer."))
    }

    /// A boolean in one of Falcon's spellings.
    pub fn bool(&self, name: &str) -> Result<Option<bool>, ZaqarError> {
        let Some(text) = self.str(name)? else {
            return Ok(None);
        };
        match text {
            "true" | "True" | "t" | "yes" | "y" | "1" | "on" => Ok(Some(true)),
            "false" | "False" | "f" | "no" | "n" | "0" | "off" => Ok(Some(false)),
            _ => Err(ZaqarError::param(
                name,
                "The value of the parameter must be \"true\" or \"false\".",
            )),
        }
    }

    /// Every value, comma-separated ones split.
    pub fn list(&self, name: &str) -> Option<Vec<String>> {
        self.values(name).map(<[String]>::to_vec)
    }
}

fn parse_int(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.parse::<i64>().unwrap_or(i64::MAX);
    Some(if negative { -magnitude } else { magnitude })
}

/// A query string as Falcon's `to_query_str` writes one (`?a=1&b=true`), for `next` links:
/// a name set twice keeps its first place.
#[derive(Debug, Default, Clone)]
pub struct Query {
    pairs: Vec<(&'static str, String)>,
}

impl Query {
    pub fn set(&mut self, name: &'static str, value: impl ToString) {
        let value = value.to_string();
        match self.pairs.iter_mut().find(|(n, _)| *n == name) {
            Some((_, existing)) => *existing = value,
            None => self.pairs.push((name, value)),
        }
    }

    pub fn set_bool(&mut self, name: &'static str, value: bool) {
        self.set(name, if value { "true" } else { "false" });
    }

    /// `?a=1&b=2`, or nothing when empty.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, (name, value)) in self.pairs.iter().enumerate() {
            out.push(if i == 0 { '?' } else { '&' });
            out.push_str(name);
            out.push('=');
            out.extend(url::form_urlencoded::byte_serialize(value.as_bytes()));
        }
        out
    }
}

/// A JSON body as Zaqar reads one: empty, unparsable, or not an object or array is
/// "Request body could not be parsed.".
pub fn json_body(bytes: &[u8]) -> Result<serde_json::Value, ZaqarError> {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(value) if value.is_object() || value.is_array() => Ok(value),
        _ => Err(ZaqarError::unparsable()),
    }
}

/// A JSON integer (not a float, not a boolean) as `i64`; past `i64` it saturates.
pub fn json_int(value: &serde_json::Value) -> Option<i64> {
    let serde_json::Value::Number(n) = value else {
        return None;
    };
    n.as_i64().or_else(|| n.as_u64().map(|_| i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_in_every_python_spelling() {
        let want = Some("3e5c6b3a1f0e4a519d3b2b9c0a9f7e11".to_owned());
        for text in [
            "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11",
            "3E5C6B3A1F0E4A519D3B2B9C0A9F7E11",
            "{3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11}",
            "urn:uuid:3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e11",
        ] {
            assert_eq!(parse_uuid(text), want, "{text}");
        }
        for bad in [
            "",
            "not-a-uuid",
            "1234",
            "3e5c6b3a-1f0e-4a51-9d3b-2b9c0a9f7e1",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
        assert_eq!(parse_uuid(&"g".repeat(32)), None);
    }

    #[test]
    fn accept_headers() {
        assert!(accepts_json(None));
        assert!(accepts_json(Some("*/*")));
        assert!(accepts_json(Some("text/html, application/json;q=0.5")));
        assert!(!accepts_json(Some("text/html")));
        assert!(!accepts_json(Some("application/json;q=0")));
    }

    #[test]
    fn params_read_like_falcon() {
        let params = Params::parse(Some("ids=1,2&ids=3&echo=True&limit=+5&blank=&marker=a%20b"));
        assert_eq!(params.list("ids").unwrap(), ["1", "2", "3"]);
        assert_eq!(params.bool("echo").unwrap(), Some(true));
        assert_eq!(params.int("limit").unwrap(), Some(5));
        assert!(params.list("blank").is_none());
        assert_eq!(params.str("marker").unwrap(), Some("a b"));
        assert!(params.str("ids").is_err());
        assert!(Params::parse(Some("limit=ten")).int("limit").is_err());
        assert!(Params::parse(Some("echo=maybe")).bool("echo").is_err());
        assert_eq!(
            Params::parse(Some("limit=99999999999999999999"))
                .int("limit")
                .unwrap(),
            Some(i64::MAX)
        );
    }

    #[test]
    fn queries_keep_first_places() {
        let mut query = Query::default();
        query.set("marker", 3);
        query.set("limit", 2);
        query.set_bool("echo", true);
        query.set("marker", 9);
        assert_eq!(query.render(), "?marker=9&limit=2&echo=true");
        assert_eq!(Query::default().render(), "");
    }
}
