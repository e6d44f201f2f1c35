//! `tenax listen`: a webhook receiver for trying subscriptions out (as `svix listen` and
//! `stripe listen` are). It prints every request it receives — the delivery's headers that say
//! which message, subscription and attempt it is, whether its Standard Webhooks signature is
//! the subscription's, and the body — and answers with the status asked for, so that retries
//! can be watched too. It listens on loopback only: it is a tool for a developer's machine.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use clap::Args;
use serde_json::Value;
use tenax_core::clock::{Clock, rfc3339};

use super::CliError;
use super::terminal::safe;
use crate::delivery::signing;

/// Flags of `tenax listen`.
#[derive(Debug, Args)]
pub struct ListenArgs {
    /// The port to listen on, on 127.0.0.1; subscribe `http://127.0.0.1:PORT/` (any path).
    #[arg(long, default_value_t = 9000)]
    pub port: u16,
    /// The subscription's secret (`whsec_…`, shown when it is created): each request's
    /// signature is checked against it. Without it, signatures are shown unchecked.
    #[arg(long, env = "TENAX_LISTEN_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// The status to answer with (200 acknowledges; 500 or 503 make Tenax retry; 410 makes it
    /// give the delivery up).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u16).range(200..=599))]
    pub status: u16,
    /// Answer the first N requests with 500, then with --status: shows a delivery retried by its
    /// policy.
    #[arg(long, default_value_t = 0)]
    pub fail_first: u64,
}

/// What the handler needs: the key to check signatures with, and how to answer.
#[derive(Debug)]
struct Listening {
    key: Option<Vec<u8>>,
    status: StatusCode,
    fail_first: u64,
    received: AtomicU64,
}

pub fn run(args: ListenArgs) -> Result<(), CliError> {
    let key = args
        .secret
        .as_deref()
        .map(signing::secret_key)
        .transpose()
        .map_err(|rule| CliError::Invalid(format!("--secret: {rule}")))?;
    let status = StatusCode::from_u16(args.status)
        .map_err(|_| CliError::Invalid(format!("--status: not a status: {}", args.status)))?;
    let state = Arc::new(Listening {
        key,
        status,
        fail_first: args.fail_first,
        received: AtomicU64::new(0),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("listening on {address}"))?;
        println!(
            "listening on http://{address}/ (answering {}{}); Ctrl-C stops",
            state.status.as_u16(),
            if state.fail_first > 0 {
                format!(" after {} answered 500", state.fail_first)
            } else {
                String::new()
            }
        );
        let _ = std::io::stdout().flush();
        let app = Router::new().fallback(receive).with_state(state);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("serving")
    })?;
    Ok(())
}

/// Prints one request and answers it.
async fn receive(
    State(state): State<Arc<Listening>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let n = state.received.fetch_add(1, Ordering::Relaxed) + 1;
    let answer = if n <= state.fail_first {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        state.status
    };
    let text = describe(&state, n, &method, &uri, &headers, &body, answer);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
    answer
}

/// The lines printed for request `n`.
fn describe(
    state: &Listening,
    n: u64,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    answer: StatusCode,
) -> String {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let mut lines = vec![format!(
        "#{n} {} {method} {uri} → {}",
        rfc3339(Clock::System.now_ms()),
        answer.as_u16()
    )];
    let mut about = Vec::new();
    if let Some(id) = header("webhook-id") {
        about.push(format!("webhook-id {}", safe(id)));
    }
    if let Some(subscription) = header("tenax-subscription") {
        about.push(format!("subscription {}", safe(subscription)));
    }
    if let Some(attempt) = header("tenax-attempt") {
        about.push(format!("attempt {}", safe(attempt)));
    }
    about.push(signature(state, headers, body));
    lines.push(format!("   {}", about.join(", ")));
    let shown = match serde_json::from_slice::<Value>(body) {
        Ok(json) => serde_json::to_string_pretty(&json).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    for line in shown.lines() {
        lines.push(format!("   {}", safe(line)));
    }
    lines.join("\n")
}

/// What the request's signature is: checked against the secret, or not.
fn signature(state: &Listening, headers: &HeaderMap, body: &[u8]) -> String {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let (Some(id), Some(timestamp), Some(signed)) = (
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
    ) else {
        return "not signed (no webhook-id, webhook-timestamp and webhook-signature)".into();
    };
    let Some(key) = &state.key else {
        return "signature not checked (give --secret)".into();
    };
    let Ok(timestamp) = timestamp.parse::<u64>() else {
        return format!(
            "signature BAD: webhook-timestamp {:?} is not a number",
            safe(timestamp)
        );
    };
    if signing::verify(key, id, timestamp, body, signed) {
        "signature ok".into()
    } else {
        "signature BAD: not made with this secret".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn listening(secret: Option<&str>) -> Listening {
        Listening {
            key: secret.map(|s| signing::secret_key(s).unwrap()),
            status: StatusCode::OK,
            fail_first: 0,
            received: AtomicU64::new(0),
        }
    }

    fn signed(body: &[u8], secret: &str) -> HeaderMap {
        let key = signing::secret_key(secret).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("webhook-id", "msg_7".parse().unwrap());
        headers.insert("webhook-timestamp", "1700000000".parse().unwrap());
        let signature = signing::sign(&key, "msg_7", 1_700_000_000, body);
        headers.insert("webhook-signature", signature.parse().unwrap());
        headers
    }

    #[test]
    fn signatures_are_checked_against_the_secret() {
        let body = br#"{"n":1}"#;
        let headers = signed(body, SECRET);
        assert_eq!(
            signature(&listening(Some(SECRET)), &headers, body),
            "signature ok"
        );
        assert!(signature(&listening(Some(SECRET)), &headers, b"{}").starts_with("signature BAD"));
        let other = "whsec_dGhlIG90aGVyIHNlY3JldCBvZiB0aGlzIHRlc3Q=";
        assert!(signature(&listening(Some(other)), &headers, body).starts_with("signature BAD"));
        assert!(signature(&listening(None), &headers, body).contains("not checked"));
        assert!(signature(&listening(None), &HeaderMap::new(), body).starts_with("not signed"));
    }
}
