//! Which HTTP a connection speaks, from its first bytes: HTTP/2 begins with its 24-byte
//! preface, anything else is HTTP/1.1. Done here rather than by hyper-util's automatic builder
//! so that the wait for those bytes is bounded like the rest of a request's head (the caller
//! bounds [`detect`]), and so that the first byte can be awaited without reading it
//! ([`first_byte`]).

use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::net::TcpStream;

use super::io::Prefixed;

/// The client connection preface of HTTP/2 (RFC 9113, section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    Http1,
    Http2,
}

/// Waits until the client has sent a byte, without reading it. `false` if it closed first.
pub(super) async fn first_byte(stream: &TcpStream) -> io::Result<bool> {
    let mut byte = [0u8; 1];
    Ok(stream.peek(&mut byte).await? > 0)
}

/// Reads until the bytes differ from the HTTP/2 preface (HTTP/1.1) or complete it (HTTP/2);
/// returns the protocol and the stream with those bytes given back. `None` if the client
/// closed first.
pub(super) async fn detect<S: AsyncRead + Unpin>(
    mut io: S,
) -> io::Result<Option<(Protocol, Prefixed<S>)>> {
    let mut read = [0u8; PREFACE.len()];
    let mut filled = 0;
    let protocol = loop {
        let n = io.read(&mut read[filled..]).await?;
        if n == 0 {
            return Ok(None);
        }
        filled += n;
        if read[..filled] != PREFACE[..filled] {
            break Protocol::Http1;
        }
        if filled == PREFACE.len() {
            break Protocol::Http2;
        }
    };
    let prefix = Bytes::copy_from_slice(&read[..filled]);
    Ok(Some((protocol, Prefixed::new(prefix, io))))
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    async fn detected(chunks: &[&[u8]]) -> Option<(Protocol, Vec<u8>)> {
        let (mut client, server) = tokio::io::duplex(64);
        for chunk in chunks {
            client.write_all(chunk).await.unwrap();
        }
        drop(client);
        let (protocol, mut io) = detect(server).await.unwrap()?;
        let mut all = Vec::new();
        io.read_to_end(&mut all).await.unwrap();
        Some((protocol, all))
    }

    #[tokio::test]
    async fn the_preface_means_http2_and_anything_else_http1() {
        let h1 = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(detected(&[h1]).await, Some((Protocol::Http1, h1.to_vec())));
        // "PR" then a difference: HTTP/1.1 (a method that starts like the preface).
        assert_eq!(
            detected(&[b"P", b"RX"]).await,
            Some((Protocol::Http1, b"PRX".to_vec()))
        );
        let mut h2 = PREFACE.to_vec();
        h2.extend_from_slice(b"\0\0\0\x04");
        assert_eq!(
            detected(&[&h2[..10], &h2[10..]]).await,
            Some((Protocol::Http2, h2.clone()))
        );
        // Closed before a request, or within the preface.
        assert_eq!(detected(&[]).await, None);
        assert_eq!(detected(&[&PREFACE[..5]]).await, None);
    }
}
