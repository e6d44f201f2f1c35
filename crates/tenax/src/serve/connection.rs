//! One connection's life, from accept to close:
//!
//! 1. set-up, all within the header bound counted from accept: the first byte (within
//!    [`super::FIRST_BYTE_TIMEOUT`] or the header bound, whichever is shorter), the TLS
//!    handshake, and the protocol's first bytes ([`super::detect`]);
//! 2. HTTP/1.1 or HTTP/2 by hyper, watched by the bounds of [`Activity::check`]: a request head
//!    that does not complete, a connection with nothing in flight for the idle bound, a
//!    response the client stops reading.
//!
//! A connection closed for a late head, a stalled write, or to make room before it began a
//! request is dropped at once: nothing is in flight on it. An idle connection, one evicted
//! after it was served, and every connection at shutdown are closed gracefully (HTTP/2 sends
//! GOAWAY; a request that raced the close is finished), then dropped if the close has not
//! finished [`CLOSE_GRACE`](super::activity::CLOSE_GRACE) after nothing is in flight.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::activity::{Activity, Bounds, Due, Expiry};
use super::detect::{Protocol, detect, first_byte};
use super::io::{Prefixed, Watched};
use super::lazy::Lazy;
use super::service::Service;
use super::slots::Slot;
use super::upgrade::Holds;

/// What every connection of a listener shares.
pub(super) struct Shared {
    pub router: Router,
    pub bounds: Bounds,
    pub tls: Option<TlsAcceptor>,
    pub http1: http1::Builder,
    pub http2: http2::Builder<TokioExecutor>,
}

/// A connection after its set-up.
enum Ready {
    Plain(Protocol, Prefixed<Watched<TcpStream>>),
    /// Boxed: a TLS session is large, and moves in and out of futures.
    Tls(Protocol, Box<Prefixed<TlsStream<Watched<TcpStream>>>>),
}

/// Why a connection ended before hyper served it, for the debug log.
#[derive(Debug)]
enum Unready {
    Closed,
    Silent,
    Late,
    Evicted,
    Shutdown,
    Failed(std::io::Error),
}

/// Serves one accepted connection until it closes; its place in the table is given up when
/// this returns.
pub(super) async fn run(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    slot: Slot,
    mut shutdown: watch::Receiver<bool>,
) {
    let activity = slot.activity().clone();
    let holds = Holds::new(activity.clone(), shared.bounds.idle, shutdown.clone());
    let ready = tokio::select! {
        ready = set_up(stream, &shared, &activity) => ready,
        () = activity.evicted() => Err(Unready::Evicted),
        _ = shutdown.changed() => Err(Unready::Shutdown),
    };
    let service = Service::new(
        shared.router.clone(),
        activity.clone(),
        peer,
        holds.handle(),
    );
    let ended = match ready {
        Ok(Ready::Plain(protocol, io)) => {
            serve(protocol, io, service, &shared, &activity, &mut shutdown).await
        }
        Ok(Ready::Tls(protocol, io)) => {
            serve(protocol, io, service, &shared, &activity, &mut shutdown).await
        }
        Err(Unready::Failed(error)) => {
            tracing::debug!(%peer, %error, "connection failed before a request");
            return;
        }
        Err(unready) => {
            tracing::debug!(%peer, reason = ?unready, "connection closed before a request");
            return;
        }
    };
    match ended {
        Ok(Some(Closed::Expired(expiry))) => {
            tracing::debug!(%peer, reason = ?expiry, "connection closed by its bounds");
        }
        Ok(Some(Closed::Evicted)) => {
            tracing::debug!(%peer, "connection closed to make room");
        }
        Ok(None) => {}
        Err(error) => tracing::debug!(%peer, %error, "connection ended with an error"),
    }
    // An upgraded connection (a websocket) keeps its place until its protocol lets it go.
    holds.released().await;
    drop(slot);
}

/// The first byte, the TLS handshake and the protocol, within the header bound from accept.
async fn set_up(
    stream: TcpStream,
    shared: &Shared,
    activity: &Arc<Activity>,
) -> Result<Ready, Unready> {
    let head_due = activity.accepted() + shared.bounds.header_read;
    let first_due = activity.accepted() + shared.bounds.header_read.min(super::FIRST_BYTE_TIMEOUT);
    match timeout_at(first_due, first_byte(&stream)).await {
        Ok(Ok(true)) => {}
        Ok(Ok(false)) => return Err(Unready::Closed),
        Ok(Err(error)) => return Err(Unready::Failed(error)),
        Err(_) => return Err(Unready::Silent),
    }
    let watched = Watched::new(stream, activity.clone());
    let detected = async {
        match &shared.tls {
            None => Ok(detect(watched)
                .await?
                .map(|(protocol, io)| Ready::Plain(protocol, io))),
            Some(acceptor) => {
                let tls = acceptor.accept(watched).await?;
                Ok(detect(tls)
                    .await?
                    .map(|(protocol, io)| Ready::Tls(protocol, Box::new(io))))
            }
        }
    };
    match timeout_at(head_due, detected).await {
        Ok(Ok(Some(ready))) => Ok(ready),
        Ok(Ok(None)) => Err(Unready::Closed),
        Ok(Err(error)) => Err(Unready::Failed(error)),
        Err(_) => Err(Unready::Late),
    }
}

/// hyper's connection for either protocol.
enum Connection<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> {
    /// With upgrades: a request may hand the connection to another protocol (`upgrade`).
    Http1(Pin<Box<http1::UpgradeableConnection<TokioIo<I>, Service>>>),
    Http2(Pin<Box<http2::Connection<TokioIo<I>, Service, TokioExecutor>>>),
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> Connection<I> {
    fn graceful_shutdown(&mut self) {
        match self {
            Self::Http1(connection) => connection.as_mut().graceful_shutdown(),
            Self::Http2(connection) => connection.as_mut().graceful_shutdown(),
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin + Send + 'static> Future for Connection<I> {
    type Output = hyper::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Self::Http1(connection) => connection.as_mut().poll(cx),
            Self::Http2(connection) => connection.as_mut().poll(cx),
        }
    }
}

/// Why the server closed a connection it served.
#[derive(Debug)]
enum Closed {
    Expired(Expiry),
    /// To make room, before it began a request.
    Evicted,
}

/// What a connection's watch saw.
enum Watch {
    /// A bound may have passed: look again.
    Look,
    Evicted,
    Shutdown,
}

/// Serves HTTP on a set-up connection within its bounds. `Ok(Some(why))` when the server closed
/// it before the client did.
async fn serve<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    protocol: Protocol,
    io: I,
    service: Service,
    shared: &Shared,
    activity: &Arc<Activity>,
    shutdown: &mut watch::Receiver<bool>,
) -> hyper::Result<Option<Closed>> {
    let io = TokioIo::new(io);
    let mut connection = match protocol {
        Protocol::Http1 => Connection::Http1(Box::pin(
            shared.http1.serve_connection(io, service).with_upgrades(),
        )),
        Protocol::Http2 => Connection::Http2(Box::pin(shared.http2.serve_connection(io, service))),
    };
    let http1 = protocol == Protocol::Http1;
    // When the graceful close began, if it has.
    let mut closing: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let due = match activity.check(now, shared.bounds, http1, closing) {
            Due::At(due) => due,
            Due::Now(Expiry::Idle) => {
                connection.graceful_shutdown();
                closing = Some(now);
                continue;
            }
            // Nothing is in flight, or what is cannot reach the client.
            Due::Now(expiry) => return Ok(Some(Closed::Expired(expiry))),
        };
        let open = closing.is_none();
        let stop = &mut *shutdown;
        let watch = std::pin::pin!(async move {
            tokio::select! {
                () = sleep_until(due) => Watch::Look,
                () = activity.evicted(), if open => Watch::Evicted,
                _ = stop.changed(), if open => Watch::Shutdown,
            }
        });
        // Polled only on its own wake-ups: see `lazy`.
        let mut watch = Lazy::new(watch);
        let event = std::future::poll_fn(|cx| {
            if let Poll::Ready(ended) = Pin::new(&mut connection).poll(cx) {
                return Poll::Ready(Err(ended));
            }
            watch.poll_woken(cx).map(Ok)
        })
        .await;
        match event {
            Err(ended) => return ended.map(|()| None),
            Ok(Watch::Look) => {}
            Ok(Watch::Evicted) => {
                if !activity.served() {
                    return Ok(Some(Closed::Evicted));
                }
                connection.graceful_shutdown();
                closing = Some(Instant::now());
            }
            Ok(Watch::Shutdown) => {
                connection.graceful_shutdown();
                closing = Some(Instant::now());
            }
        }
    }
}
