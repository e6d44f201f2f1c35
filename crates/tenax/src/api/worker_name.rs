//! Which worker sent a request (a take, a stream or a heartbeat), for the list of connected
//! workers (`GET /api/cluster`): the name it gives, else its address and User-Agent.
//!
//! The name is, first found: the body's `worker` (a take or a stream), the `X-Tenax-Worker`
//! header (any of them), or the peer's IP address followed by its `User-Agent`. Given names are
//! checked (1 to [`MAX_NAME_CHARS`] characters, none of them a control character); a name made
//! from the peer is cut to that length.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::USER_AGENT;
use axum::http::request::Parts;

use super::error::ApiError;

/// The header that names the worker.
pub const WORKER_HEADER: &str = "x-tenax-worker";
/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 128;

/// What a request's head says of its worker: the header's name (checked), and the name made
/// from the peer for when neither the body nor the header gives one.
#[derive(Debug, Clone)]
pub struct WorkerHead {
    header: Option<String>,
    peer: String,
}

impl<S: Send + Sync> FromRequestParts<S> for WorkerHead {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let header = match parts.headers.get(WORKER_HEADER) {
            None => None,
            Some(value) => {
                let field = "X-Tenax-Worker";
                let text = value.to_str().map_err(|_| {
                    ApiError::invalid(
                        field,
                        "must be visible ASCII characters and spaces (give other names as the \
                         body's `worker` of a take or a stream)",
                    )
                })?;
                Some(checked(field, text)?.to_owned())
            }
        };
        let address = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(
                || "unknown".to_owned(),
                |ConnectInfo(peer)| peer.ip().to_string(),
            );
        let agent = parts
            .headers
            .get(USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|agent| !agent.is_empty());
        let peer = match agent {
            Some(agent) => format!("{address} {agent}"),
            None => address,
        };
        let peer = peer
            .chars()
            .filter(|c| !c.is_control())
            .take(MAX_NAME_CHARS)
            .collect();
        Ok(Self { header, peer })
    }
}

impl WorkerHead {
    /// The worker's name: `given` (the body's `worker`, checked here), else the header's, else
    /// the peer's.
    pub fn name(self, given: Option<&str>) -> Result<String, ApiError> {
        match given {
            Some(name) => Ok(checked("worker", name)?.to_owned()),
            None => Ok(self.header.unwrap_or(self.peer)),
        }
    }
}

/// `name` if it is 1 to [`MAX_NAME_CHARS`] characters, none of them a control character;
/// else the refusal, naming `field`.
fn checked<'a>(field: &str, name: &'a str) -> Result<&'a str, ApiError> {
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(ApiError::invalid(
            field,
            format!("must be 1 to {MAX_NAME_CHARS} characters, got {chars}"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            field,
            "must not hold control characters (line breaks, tabs, ...)",
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(header: Option<&str>) -> WorkerHead {
        WorkerHead {
            header: header.map(str::to_owned),
            peer: "10.0.0.7 tenax-python/0.1.0".into(),
        }
    }

    #[test]
    fn the_body_then_the_header_then_the_peer_name_the_worker() {
        assert_eq!(head(Some("h")).name(Some("b")).unwrap(), "b");
        assert_eq!(head(Some("h")).name(None).unwrap(), "h");
        assert_eq!(
            head(None).name(None).unwrap(),
            "10.0.0.7 tenax-python/0.1.0"
        );
        assert_eq!(head(None).name(Some("é-1")).unwrap(), "é-1");
        let refused = head(None).name(Some("")).unwrap_err();
        assert_eq!(refused.field.as_deref(), Some("worker"));
        assert!(refused.message.contains("1 to 128"), "{}", refused.message);
        let long = "x".repeat(129);
        assert!(head(None).name(Some(&long)).is_err());
        assert!(
            head(None).name(Some(&"é".repeat(128))).is_ok(),
            "characters, not bytes"
        );
        let refused = head(None).name(Some("a\nb")).unwrap_err();
        assert!(refused.message.contains("control"), "{}", refused.message);
    }
}
