//! The HTTP listener: accepts connections, serves each with HTTP/1.1 or HTTP/2 (h2c, or
//! either over TLS by ALPN), and stops gracefully. Its own loop rather than `axum::serve`, for
//! the limits that a server on a network needs, so that no client, silent or slow, can hold
//! the server's connections from the others:
//!
//! - accepting never stops while a connection could be closed to make room: at
//!   `--max-connections`, or past a client address's `--max-connections-per-address`, a new
//!   connection takes the place of the oldest one that has not begun a request, else of the
//!   one idle the longest (`slots`). Only when every connection in its way has a request in
//!   flight does a new one wait (in the kernel's backlog) or, past its client's share, get
//!   closed;
//! - a new connection must send its first byte within [`FIRST_BYTE_TIMEOUT`] (or the header
//!   timeout, if shorter), and complete its TLS handshake and its first request's head within
//!   `--header-read-timeout` of being accepted; HTTP/1.1 or HTTP/2 is told from its first
//!   bytes here (`detect`), under the same bound, because hyper-util's automatic detection
//!   waits for them without one;
//! - a connection with no request in flight (HTTP/1.1 between requests, HTTP/2 without an open
//!   stream) is closed after `--idle-timeout`; on HTTP/1.1, a next request's head, once begun,
//!   must complete within `--header-read-timeout`. A request is in flight from its complete
//!   head to the end of its response, so long polls and streaming takes are never idle;
//! - a response the client accepts no byte of for `--idle-timeout` closes its connection;
//! - a peer that has vanished is found by the kernel (TCP keep-alive, and a timeout on data
//!   never acknowledged: `socket`) within about 40 s, on either protocol;
//! - at most [`H2_MAX_STREAMS`] streams are open at once on one HTTP/2 connection;
//! - an HTTP/1.1 connection may be upgraded (Zaqar's websocket at `/`): it keeps its place in
//!   the table until the upgraded protocol ends, may be closed to make room between two of
//!   its frames, and bounds its own idleness (`upgrade`);
//! - (the request timeout, for a body that trickles in, and the size limit, are in
//!   `api::guard`, which answers them in the API's error shape).
//!
//! Invariants: a connection holds one place in the table from its admission (at accept, or
//! when a place frees) until it ends or is closed to make room; every connection's time from
//! admission to its first request's head is bounded, and so is every stretch with nothing in
//! flight.

mod activity;
mod connection;
mod detect;
mod io;
mod lazy;
mod service;
mod slots;
pub mod socket;
mod upgrade;

pub use upgrade::{Busy, Upgraded};

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use activity::Bounds;
use axum::Router;
use connection::Shared;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::TokioExecutor;
use slots::{Admission, Slots};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How long a new connection may stay silent before its first byte (at most the header
/// timeout): a client connects to send a request, and sends its first byte (a request line,
/// an HTTP/2 preface or a TLS ClientHello) at once.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most streams open at once on one HTTP/2 connection (hyper's default, stated here so
/// that an upgrade cannot change it).
pub const H2_MAX_STREAMS: u32 = 200;

/// Connection limits of the listener, and its TLS.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// How long a new connection may take to complete its TLS handshake and its first
    /// request's line and headers, counted from accept; and on HTTP/1.1 how long a later
    /// request's head may take once its first byte has arrived.
    pub header_read_timeout: Duration,
    /// How long a connection with no request in flight stays open, and how long a response may
    /// wait for the client to accept any of its bytes.
    pub idle_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one client address (an IPv4 address or an IPv6
    /// /64); at least 1, at most `max_connections`.
    pub max_connections_per_address: usize,
    /// With a TLS configuration the listener speaks HTTPS only (HTTP/2 or HTTP/1.1 by ALPN).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// The defaults of `tenax serve`.
impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_address: 2048,
            tls: None,
        }
    }
}

/// The certificate chain and key of the API's TLS, as read and checked at start-up.
#[derive(Clone)]
pub struct TlsFiles {
    pub cert_path: PathBuf,
    pub certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    pub key: std::sync::Arc<rustls::pki_types::PrivateKeyDer<'static>>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("cert_path", &self.cert_path)
            .field("certs", &self.certs.len())
            .finish_non_exhaustive()
    }
}

/// The TLS configuration of the API: the certificate chain and key, and ALPN offering HTTP/2
/// then HTTP/1.1.
pub fn tls_config(files: &TlsFiles) -> Result<rustls::ServerConfig, rustls::Error> {
    tenax_net::http::install_crypto_provider();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(files.certs.clone(), files.key.clone_key())?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// How long in-flight requests may take to finish once shutdown begins; then the remaining
/// connections are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Pause after an accept error (out of file descriptors, say) before trying again, so that the
/// loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, closes
/// idle connections, lets requests in flight finish (at most [`SHUTDOWN_GRACE`]) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let slots = Slots::new(limits.max_connections, limits.max_connections_per_address);
    let mut http1 = http1::Builder::new();
    // The connection's own watch bounds request heads (hyper's timer would also close an
    // idle keep-alive connection at the header timeout, not the idle one).
    http1.header_read_timeout(None);
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    // No keep-alive pings: dead peers are found by the kernel (`socket`).
    http2.max_concurrent_streams(H2_MAX_STREAMS);
    let shared = Arc::new(Shared {
        router,
        bounds: Bounds {
            header_read: limits.header_read_timeout,
            idle: limits.idle_timeout,
        },
        tls: limits.tls.clone().map(tokio_rustls::TlsAcceptor::from),
        http1,
        http2,
    });
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    'accepting: loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next() => continue,
            () = slots.room() => {}
        }
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next() => continue,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        socket::tune(&stream);
        let slot = loop {
            // Its bounds count from when it has a place.
            match slots.admit(peer.ip(), Instant::now()) {
                Admission::Admitted(slot) => break Some(slot),
                Admission::Refused => {
                    tracing::debug!(%peer, "connection refused: its address holds its share");
                    break None;
                }
                // Every connection became busy between the wait for room and this accept:
                // this one waits, accepted, for the next place.
                Admission::Full => tokio::select! {
                    () = &mut shutdown => break 'accepting,
                    Some(_) = connections.join_next() => {}
                    () = slots.room() => {}
                },
            }
        };
        if let Some(slot) = slot {
            connections.spawn(connection::run(
                stream,
                peer,
                shared.clone(),
                slot,
                stopping.clone(),
            ));
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            grace_s = SHUTDOWN_GRACE.as_secs(),
            "requests still in flight after the shutdown grace period; closing their connections"
        );
        connections.shutdown().await;
    }
}
