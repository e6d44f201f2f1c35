//! The client's error: the server's typed refusal, or a failure to talk to it.

use std::time::Duration;

/// What went wrong with a request.
///
/// [`Error::Api`] is the server's own answer (`{"error": {"status", "code", "field",
/// "message"}}`): match on its `code`, or use the helpers ([`Error::is_lease_lost`], ...).
/// Every other variant means no such answer came: the request may or may not have been acted
/// on ([`Error::is_transient`] says whether trying again may help).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server refused the request.
    #[error("{}", api_text(*.status, .code, .field.as_deref(), .message))]
    Api {
        /// The HTTP status (400, 401, 403, 404, 408, 409, 413, 500, 503).
        status: u16,
        /// The machine-readable reason: `invalid`, `not_found`, `unauthorized`, `forbidden`,
        /// `duplicate`, `not_in_flight`, `lease_lost`, `not_dead`, `too_large`, `timeout`,
        /// `internal`, `storage_unavailable`, ...
        code: String,
        /// The field at fault, as a JSON path (`jobs[2].policy.max_delay`), for a 400.
        field: Option<String>,
        /// The rule that was broken, in words.
        message: String,
        /// The request's id (from the answer, or its `X-Request-Id` header): the server's log
        /// lines about the request carry it.
        request_id: Option<String>,
    },
    /// An answer that is not the one the API describes (a proxy's error page, a body that is
    /// not the expected JSON).
    #[error("unexpected answer from the server (HTTP {status}): {message}")]
    UnexpectedAnswer {
        status: u16,
        message: String,
        request_id: Option<String>,
    },
    /// The request did not get an answer: no connection, TLS refused, a timeout, a broken
    /// connection.
    #[error("cannot talk to the Tenax server: {}", chain(.0))]
    Transport(#[source] reqwest::Error),
    /// A job stream sent nothing, not even its keep-alive line (one a second), for this long:
    /// the connection is taken for dead.
    #[error("the job stream sent nothing for {0:?}")]
    StreamStalled(Duration),
    /// A request body could not be made (a payload whose `Serialize` failed).
    #[error("cannot encode the request: {0}")]
    Encode(#[source] serde_json::Error),
    /// The client or worker was configured wrongly (a bad URL, an unreadable CA file, ...).
    #[error("{0}")]
    Config(String),
}

fn api_text(status: u16, code: &str, field: Option<&str>, message: &str) -> String {
    match field {
        Some(field) => format!("{code} ({status}): {field}: {message}"),
        None => format!("{code} ({status}): {message}"),
    }
}

/// An error and its causes on one line, `outer: inner: innermost`.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        // reqwest and hyper often repeat their cause's text in their own.
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

impl Error {
    /// The HTTP status of an answer, if one came.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } | Self::UnexpectedAnswer { status, .. } => Some(*status),
            Self::Transport(error) => error.status().map(|s| s.as_u16()),
            _ => None,
        }
    }

    /// The server's error code (`"lease_lost"`, `"invalid"`, ...), for [`Error::Api`].
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The field the server named (a JSON path such as `jobs[2].queue`), for [`Error::Api`].
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Api { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    /// The request id of the answer, to find the request in the server's log.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Self::Api { request_id, .. } | Self::UnexpectedAnswer { request_id, .. } => {
                request_id.as_deref()
            }
            _ => None,
        }
    }

    fn has_code(&self, wanted: &str) -> bool {
        self.code() == Some(wanted)
    }

    /// `409 lease_lost`: the lease token is stale (the lease expired, or the stream that held
    /// the job closed); the job may be running elsewhere.
    pub fn is_lease_lost(&self) -> bool {
        self.has_code("lease_lost")
    }

    /// `409 not_in_flight`: the job is not leased to anyone (it completed, failed or went
    /// back to ready).
    pub fn is_not_in_flight(&self) -> bool {
        self.has_code("not_in_flight")
    }

    /// `404 not_found`: no such job, queue, subscription, delivery or token.
    pub fn is_not_found(&self) -> bool {
        self.has_code("not_found")
    }

    /// `409 duplicate`: an unfinished job holds the unique key (`on_duplicate: refuse`).
    pub fn is_duplicate(&self) -> bool {
        self.has_code("duplicate")
    }

    /// `400 invalid`: a field breaks a rule; [`Error::field`] names it.
    pub fn is_invalid(&self) -> bool {
        self.has_code("invalid")
    }

    /// `401 unauthorized`: no token, or an unknown or revoked one.
    pub fn is_unauthorized(&self) -> bool {
        self.has_code("unauthorized")
    }

    /// `403 forbidden`: the token's role or scopes do not allow the request.
    pub fn is_forbidden(&self) -> bool {
        self.has_code("forbidden")
    }

    /// The job is no longer this worker's to report on: its lease was lost, it is not in
    /// flight, or it was deleted.
    pub fn is_gone(&self) -> bool {
        self.is_lease_lost() || self.is_not_in_flight() || self.is_not_found()
    }

    /// Whether the same request may succeed later: no answer came, the server failed (5xx),
    /// timed out reading the body (408) or asked to slow down (429).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport(_) | Self::StreamStalled(_) => true,
            Self::Api { status, .. } | Self::UnexpectedAnswer { status, .. } => {
                *status >= 500 || *status == 408 || *status == 429
            }
            Self::Encode(_) | Self::Config(_) => false,
        }
    }
}

/// `Result<T, tenax_client::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
