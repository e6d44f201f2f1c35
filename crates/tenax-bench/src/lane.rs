//! A load task's own connection, for the loads that send one request after another: each task
//! of `enqueue-*`, `bulk-*`, `floor` and the fills, and each worker of `take-one-*`, sends its requests
//! on one HTTP/1.1 connection of its own through hyper's connection API.
//!
//! Why not the shared client ([`Api`], reqwest): the load generator runs on the machine it
//! measures, and per request reqwest parses the URL (host and IDNA processing included), checks
//! a connection out of its pool and back, and clones its connector and middleware: about 44 µs
//! of CPU per single-job request on the 2-core benchmark machine, where `wrk` spends 17 µs. On
//! two cores shared with the server, every microsecond the client spends is one the server does
//! not get, so single-request figures measured the client as much as the server. A lane sends a
//! prepared request on a connection that is already its own.
//!
//! Over `https://`, or with `--http2` (every request on one shared connection), a lane is the
//! shared client: the same requests, at reqwest's cost.

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper_util::rt::TokioIo;

use super::{Api, success};

/// Where a lane connects, and what every request of it carries: made once per run.
#[derive(Debug, Clone)]
pub struct Target {
    /// The base URL, which the URLs of requests start with.
    base: String,
    /// `host:port`, to connect to.
    address: String,
    /// The `Host` header.
    host: HeaderValue,
    authorization: Option<HeaderValue>,
}

impl Target {
    /// The target of a plain `http://` base URL spoken in HTTP/1.1; `None` for any other (the
    /// lanes then use the shared client).
    pub fn of(base: &str, http2: bool, authorization: Option<HeaderValue>) -> Option<Self> {
        let url = reqwest::Url::parse(base).ok()?;
        if http2 || url.scheme() != "http" {
            return None;
        }
        // An IPv6 host comes in brackets, as both the address and the header need it.
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        let address = format!("{host}:{port}");
        let host_header = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        Some(Self {
            base: base.to_owned(),
            address,
            host: HeaderValue::from_str(&host_header).ok()?,
            authorization,
        })
    }
}

/// One load task's way of sending requests.
#[derive(Debug)]
pub enum Lane {
    Own(Own),
    Shared(Api),
}

/// A connection of the task's own.
#[derive(Debug)]
pub struct Own {
    sender: SendRequest<Full<Bytes>>,
    target: Target,
}

impl Lane {
    /// A lane of its own where the base URL allows one, else the shared client.
    pub async fn open(api: &Api) -> anyhow::Result<Self> {
        match api.lane_target() {
            Some(target) => Ok(Self::Own(Own {
                sender: connect(target).await?,
                target: target.clone(),
            })),
            None => Ok(Self::Shared(api.clone())),
        }
    }

    /// POSTs a JSON body to `url` (made by [`Api::url`]); any status but 2xx is an error
    /// carrying the server's answer, as [`Api::post`] says.
    pub async fn post(&mut self, url: &str, body: Bytes) -> anyhow::Result<Bytes> {
        self.send(Some(body), url).await
    }

    /// Sends a POST of `body`, or a GET without one, as [`Lane::post`] says.
    pub async fn send(&mut self, body: Option<Bytes>, url: &str) -> anyhow::Result<Bytes> {
        match (self, body) {
            (Self::Shared(api), Some(body)) => api.post(url, body).await,
            (Self::Shared(api), None) => api.get(url).await,
            (Self::Own(own), body) => own.send(body, url).await,
        }
    }
}

impl Own {
    async fn send(&mut self, body: Option<Bytes>, url: &str) -> anyhow::Result<Bytes> {
        let path = url.strip_prefix(&self.target.base).unwrap_or(url);
        let method = if body.is_some() { "POST" } else { "GET" };
        if self.sender.is_closed() {
            // The server closed the connection (a restart, an idle timeout): open another.
            self.sender = connect(&self.target).await?;
        }
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.target.host.clone());
        if body.is_some() {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        if let Some(authorization) = &self.target.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .with_context(|| format!("{method} {url}"))?;
        self.sender
            .ready()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .with_context(|| format!("reading the answer of {url}"))?
            .to_bytes();
        success(url, status, bytes)
    }
}

/// Opens a connection to `target` and drives it on a task of its own.
async fn connect(target: &Target) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(&target.address)
        .await
        .with_context(|| format!("connecting to {}", target.address))?;
    stream.set_nodelay(true)?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("opening HTTP/1.1 to {}", target.address))?;
    tokio::spawn(async move {
        // Ends when the lane is dropped or the server closes; a request in flight then fails
        // with the error, which the lane reports.
        let _ = connection.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http1_gets_lanes_of_its_own() {
        let target = Target::of("http://127.0.0.1:7890", false, None).expect("plain http");
        assert_eq!(target.address, "127.0.0.1:7890");
        assert_eq!(target.host, "127.0.0.1:7890");
        let target = Target::of("http://localhost", false, None).expect("default port");
        assert_eq!(target.address, "localhost:80");
        assert_eq!(target.host, "localhost");
        let target = Target::of("http://[::1]:7890", false, None).expect("IPv6");
        assert_eq!(target.address, "[::1]:7890");
        assert_eq!(target.host, "[::1]:7890");
        assert!(Target::of("https://127.0.0.1:7890", false, None).is_none());
        assert!(Target::of("http://127.0.0.1:7890", true, None).is_none());
        assert!(Target::of("not a url", false, None).is_none());
    }
}
