//! The options of an accepted socket: no Nagle delay, and a bound on how long a peer that has
//! vanished (its host gone, a cable pulled, a NAT that forgot the connection) keeps its
//! connection open, whatever the protocol and whether or not a request is in flight.
//!
//! Done by the kernel, which costs nothing per request: TCP keep-alive probes after
//! [`KEEPALIVE_IDLE`] of silence, every [`KEEPALIVE_INTERVAL`], [`KEEPALIVE_PROBES`] times,
//! and a [`USER_TIMEOUT`] on data sent and never acknowledged (a response or a stream's lines to
//! a peer that is gone, which keep-alive probes do not cover). hyper's HTTP/2 keep-alive pings
//! would do the same for HTTP/2 only, and their bookkeeping (a lock and a clock read for every
//! frame) cost 3 to 10 % of the CPU of small HTTP/2 requests, measured (docs/benchmarks.md).

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// Silence after which the kernel probes the peer.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(20);
/// Time between probes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Unanswered probes after which the connection is closed: a silent dead peer is found about
/// 40 s after its last packet.
pub const KEEPALIVE_PROBES: u32 = 4;
/// How long sent data may stay unacknowledged before the connection is closed.
pub const USER_TIMEOUT: Duration = Duration::from_secs(40);

/// Sets the options; one that the platform refuses is logged and left as it was, since a
/// connection serves without it.
pub(super) fn tune(stream: &TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "setting TCP_NODELAY failed");
    }
    let socket = SockRef::from(stream);
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    if let Err(error) = socket.set_tcp_keepalive(&keepalive) {
        tracing::debug!(%error, "setting TCP keep-alive failed");
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(error) = socket.set_tcp_user_timeout(Some(USER_TIMEOUT)) {
        tracing::debug!(%error, "setting TCP_USER_TIMEOUT failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_accepted_socket_has_its_options() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let _client = TcpStream::connect(address).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        tune(&stream);
        let socket = SockRef::from(&stream);
        assert!(stream.nodelay().unwrap());
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert_eq!(socket.tcp_user_timeout().unwrap(), Some(USER_TIMEOUT));
    }
}
