//! The HTTP listener: accepts connections, serves each with HTTP/1.1 or HTTP/2 (h2c), and
//! stops gracefully. Its own loop rather than `axum::serve`, for the limits that a server on a
//! network needs and `axum::serve` does not set:
//!
//! - a header-read timeout: a client that opens a connection and never finishes its request
//!   line and headers (slowloris), or leaves a keep-alive connection idle, is disconnected;
//! - a connection limit: past it, new connections wait in the kernel's backlog instead of
//!   taking file descriptors and memory;
//! - (the request timeout, for a body that trickles in, is in `api::guard`, which answers it
//!   in the API's error shape);
//! - TLS (`--tls-cert`, `--tls-key`), whose handshake is bounded by the header-read timeout.
//!
//! Invariant: a connection holds one permit of the limit from accept to close.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

/// Connection limits of the listener, and its TLS.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's line and headers, counted from when the
    /// server starts waiting for them (so it is also how long a keep-alive connection may idle).
    pub header_read_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// With a TLS configuration the listener speaks HTTPS only (HTTP/2 or HTTP/1.1 by ALPN);
    /// the handshake must finish within the header-read timeout.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// The TLS configuration of the API: the certificate chain and key, and ALPN offering HTTP/2
/// then HTTP/1.1.
pub fn tls_config(files: &crate::config::TlsFiles) -> Result<rustls::ServerConfig, rustls::Error> {
    crate::http::install_crypto_provider();
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

/// Serves `router` on `listener` until `shutdown` completes, then stops accepting, lets
/// requests in flight finish (at most [`SHUTDOWN_GRACE`]) and returns.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit,
            () = &mut shutdown => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = router
            .clone()
            .map_request(|request: hyper::Request<Incoming>| request.map(Body::new));
        let service = TowerToHyperService::new(service);
        let builder = builder.clone();
        match &limits.tls {
            None => {
                let connection =
                    builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                let connection = graceful.watch(connection.into_owned());
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%peer, error = %error, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
                let handshake_timeout = limits.header_read_timeout;
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let handshake =
                        tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await;
                    let stream = match handshake {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let connection =
                        builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
                    if let Err(error) = watcher.watch(connection.into_owned()).await {
                        tracing::debug!(%peer, error = %error, "connection ended with an error");
                    }
                    drop(permit);
                });
            }
        }
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_s = SHUTDOWN_GRACE.as_secs(),
            "requests still in flight after the shutdown grace period; closing their connections"
        );
    }
}
