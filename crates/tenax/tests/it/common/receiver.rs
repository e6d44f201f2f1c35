//! A scripted webhook receiver: a real HTTP server on a loopback port whose answers the test
//! chooses (fail N times then succeed, always 500, 404, 429 with `Retry-After`, slow beyond the
//! timeout), and which records every request with the moment it arrived.
//!
//! It serves plain http, or https with a certificate from a [`TestCa`] made at run time
//! ([`Receiver::start_tls`]); over https it also counts the TLS handshakes that failed (a client
//! that does not trust the certificate hangs up during the handshake).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// One answer the receiver gives.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub delay: Duration,
    pub retry_after: Option<String>,
    pub body: String,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            delay: Duration::ZERO,
            retry_after: None,
            body: String::new(),
        }
    }

    pub fn ok() -> Self {
        Self::status(204)
    }

    pub fn slow(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::ok()
        }
    }

    pub fn retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.to_owned());
        self
    }

    pub fn body(mut self, body: &str) -> Self {
        self.body = body.to_owned();
        self
    }
}

/// A request as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the delivery body is JSON")
    }

    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }
}

#[derive(Debug)]
struct Script {
    /// Answers in order; when empty, `then` is given forever.
    replies: VecDeque<Reply>,
    then: Reply,
    received: Vec<Received>,
    /// TLS handshakes that did not complete.
    failed_handshakes: usize,
}

#[derive(Debug, Clone)]
struct Shared {
    script: Arc<Mutex<Script>>,
    arrived: Arc<Notify>,
}

#[derive(Debug)]
pub struct Receiver {
    pub address: SocketAddr,
    scheme: &'static str,
    shared: Shared,
    server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Answers `replies` in order, then `then` to every later request, over plain http.
    pub async fn start(replies: Vec<Reply>, then: Reply) -> Self {
        Self::serve(replies, then, None).await
    }

    /// The same over https, presenting `certificate`.
    pub async fn start_tls(replies: Vec<Reply>, then: Reply, certificate: &ServerCert) -> Self {
        Self::serve(replies, then, Some(certificate)).await
    }

    async fn serve(replies: Vec<Reply>, then: Reply, tls: Option<&ServerCert>) -> Self {
        let shared = Shared {
            script: Arc::new(Mutex::new(Script {
                replies: replies.into(),
                then,
                received: Vec::new(),
                failed_handshakes: 0,
            })),
            arrived: Arc::new(Notify::new()),
        };
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let address = listener.local_addr().expect("receiver address");
        let app = axum::Router::new()
            .fallback(receive)
            .with_state(shared.clone());
        let server = match tls {
            None => tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }),
            Some(certificate) => {
                let listener = TlsListener {
                    tcp: listener,
                    acceptor: certificate.acceptor(),
                    shared: shared.clone(),
                };
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                })
            }
        };
        Self {
            address,
            scheme: if tls.is_some() { "https" } else { "http" },
            shared,
            server,
        }
    }

    /// Succeeds every time.
    pub async fn ok() -> Self {
        Self::start(Vec::new(), Reply::ok()).await
    }

    /// Fails `n` times with `status`, then succeeds.
    pub async fn failing(n: usize, status: u16) -> Self {
        Self::start(vec![Reply::status(status); n], Reply::ok()).await
    }

    /// The URL of `path` here, by IP address: `http://127.0.0.1:port/path` (or https).
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.address)
    }

    /// The URL of `path` here by the name `localhost`.
    pub fn localhost_url(&self, path: &str) -> String {
        format!("{}://localhost:{}{path}", self.scheme, self.address.port())
    }

    /// TLS handshakes that did not complete so far.
    pub fn failed_handshakes(&self) -> usize {
        self.shared.script.lock().failed_handshakes
    }

    /// Waits until `n` TLS handshakes have failed, or panics after `within`.
    pub async fn wait_for_failed_handshakes(&self, n: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if self.failed_handshakes() >= n {
                return;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!(
                    "{} TLS handshakes failed within {within:?}, expected {n}",
                    self.failed_handshakes()
                );
            }
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.script.lock().received.clone()
    }

    pub fn count(&self) -> usize {
        self.shared.script.lock().received.len()
    }

    /// Waits until `n` requests have arrived, or panics after `within`.
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.shared.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let received = self.received();
            if received.len() >= n {
                return received;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                panic!(
                    "the receiver got {} requests within {within:?}, expected {n}",
                    self.count()
                );
            }
        }
    }

    /// Stops answering: later connections are refused.
    pub fn shut(&self) {
        self.server.abort();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let reply = {
        let mut script = shared.script.lock();
        script.received.push(Received {
            at: Instant::now(),
            headers,
            body,
        });
        let then = script.then.clone();
        script.replies.pop_front().unwrap_or(then)
    };
    shared.arrived.notify_waiters();
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let status = StatusCode::from_u16(reply.status).expect("a valid status");
    let mut response = (status, reply.body).into_response();
    if let Some(value) = reply.retry_after {
        response
            .headers_mut()
            .insert("retry-after", value.parse().expect("a header value"));
    }
    response
}

// --- TLS --------------------------------------------------------------------------------------

/// A certificate authority made at run time for one test, which signs the receivers'
/// certificates.
pub struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    certificate: rcgen::Certificate,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A self-signed CA named `name`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let certificate = params.self_signed(&key).expect("a self-signed CA");
        Self {
            params,
            key,
            certificate,
        }
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.certificate.pem()
    }

    /// Writes the CA certificate (PEM) to `dir/file`; returns the path.
    pub fn write_pem(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.pem()).expect("write the CA certificate");
        path
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid now.
    pub fn leaf(&self, names: &[&str]) -> ServerCert {
        self.sign(names, false)
    }

    /// A server certificate for `names` that expired in 2001.
    pub fn expired_leaf(&self, names: &[&str]) -> ServerCert {
        self.sign(names, true)
    }

    fn sign(&self, names: &[&str], expired: bool) -> ServerCert {
        let key = KeyPair::generate().expect("a server key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server certificate parameters");
        params.is_ca = IsCa::NoCa;
        params
            .distinguished_name
            .push(DnType::CommonName, "tenax test receiver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let issuer = Issuer::from_params(&self.params, &self.key);
        let certificate = params
            .signed_by(&key, &issuer)
            .expect("a signed certificate");
        ServerCert {
            chain: vec![certificate.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
            chain_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A certificate that is its own CA (`CA:TRUE`), as `openssl req -x509` makes one with its
/// defaults: made out to `names` (as subject alternative names), or, with no names, only to
/// the common name `common_name` (no alternative names at all). Valid now, or expired in 2001.
pub fn self_signed(names: &[&str], common_name: &str, expired: bool) -> ServerCert {
    let key = KeyPair::generate().expect("a key");
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).expect("certificate parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if expired {
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let certificate = params.self_signed(&key).expect("a self-signed certificate");
    ServerCert {
        chain: vec![certificate.der().clone()],
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        chain_pem: certificate.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// A server certificate and its private key, for [`Receiver::start_tls`].
#[derive(Debug)]
pub struct ServerCert {
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
    chain_pem: String,
    key_pem: String,
}

impl ServerCert {
    /// The certificate (the first of the chain), PEM.
    pub fn pem(&self) -> &str {
        &self.chain_pem
    }

    /// Writes the certificate chain and the key as PEM files in `dir` (for `--tls-cert` and
    /// `--tls-key`); returns their paths.
    pub fn write_pem(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let cert = dir.join("server.crt");
        let key = dir.join("server.key");
        std::fs::write(&cert, &self.chain_pem).expect("write the certificate");
        std::fs::write(&key, &self.key_pem).expect("write the key");
        (cert, key)
    }

    fn acceptor(&self) -> TlsAcceptor {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                self.chain.clone(),
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .expect("a TLS server configuration");
        TlsAcceptor::from(Arc::new(config))
    }
}

/// A listener that completes each connection's TLS handshake before axum sees it, and counts
/// the handshakes that fail.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    shared: Shared,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, address)) = self.tcp.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            // One handshake at a time is plenty for a test; a stuck one must not stop the rest.
            let handshake = self.acceptor.accept(tcp);
            match tokio::time::timeout(Duration::from_secs(5), handshake).await {
                Ok(Ok(tls)) => return (tls, address),
                Ok(Err(_)) | Err(_) => {
                    self.shared.script.lock().failed_handshakes += 1;
                    self.shared.arrived.notify_waiters();
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
