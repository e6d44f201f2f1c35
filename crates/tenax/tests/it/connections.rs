//! Connections and slow clients, over real sockets: silent connections (no byte, part of the
//! HTTP/2 preface, all of it, a TLS handshake and nothing more) cannot lock other clients out
//! of a full listener, and are closed once their bounds pass; idle connections are closed after
//! the idle timeout while a long poll, a held request and a streaming take outlive it; one
//! client address cannot take every place.
//!
//! Several clients are simulated by binding the test's sockets to different loopback
//! addresses (Linux routes all of 127/8 to the loopback interface). Every wait is for an event
//! (an answer, a close), capped by [`PATIENCE`] only so that a broken server fails the test
//! rather than hanging it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use bytes::Bytes;
use common::{Options, PATIENCE, TestServer};
use futures_util::StreamExt as _;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tenax::serve::ConnectionLimits;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::common;
use crate::common::receiver;

/// The HTTP/2 client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty HTTP/2 SETTINGS frame.
const SETTINGS: &[u8] = b"\0\0\0\x04\0\0\0\0\0";
/// What each kind of silent client sends before falling silent.
const SILENT: [&[u8]; 4] = [
    b"",
    b"PRI * HTTP/2.0\r\n",
    PREFACE,
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0",
];

// --- a listener with a router of its own -----------------------------------------------------

/// Requests held open until the test releases them, and each one's start announced.
#[derive(Clone)]
struct Holds {
    started: mpsc::UnboundedSender<()>,
    release: Arc<Semaphore>,
}

async fn hold(State(holds): State<Holds>) -> &'static str {
    let _ = holds.started.send(());
    holds
        .release
        .acquire()
        .await
        .expect("the semaphore stays open")
        .forget();
    "released"
}

/// `tenax::serve::serve` with a small router: `/fine` answers at once, `/hold` when released.
struct Listener {
    address: SocketAddr,
    started: mpsc::UnboundedReceiver<()>,
    release: Arc<Semaphore>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    async fn start(limits: ConnectionLimits) -> Self {
        let (started_tx, started) = mpsc::unbounded_channel();
        let release = Arc::new(Semaphore::new(0));
        let router = Router::new()
            .route("/fine", get(|| async { "fine" }))
            .route("/hold", get(hold))
            .with_state(Holds {
                started: started_tx,
                release: release.clone(),
            });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("the address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tenax::serve::serve(listener, router, &limits, async move {
                let _ = stopped.await;
            })
            .await;
        });
        Self {
            address,
            started,
            release,
            stop: Some(stop),
            task,
        }
    }

    /// Waits until `n` more held requests have started.
    async fn held(&mut self, n: usize) {
        for _ in 0..n {
            tokio::time::timeout(PATIENCE, self.started.recv())
                .await
                .expect("a held request starts")
                .expect("the router is alive");
        }
    }

    async fn stop(mut self) {
        self.release.add_permits(1_000);
        let _ = self.stop.take().expect("running").send(());
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the listener stops in time")
            .expect("the listener does not panic");
    }
}

fn limits(
    max: usize,
    per_address: usize,
    header_read: Duration,
    idle: Duration,
) -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: header_read,
        idle_timeout: idle,
        max_connections: max,
        max_connections_per_address: per_address,
        tls: None,
    }
}

/// A bound no test waits for.
const LONG: Duration = Duration::from_secs(3_600);
/// A header bound that tests wait for; long enough for a request (or a TLS handshake) that the
/// test means to complete within it, on a loaded machine.
const HEADER: Duration = Duration::from_secs(1);
/// An idle bound that tests wait for.
const IDLE: Duration = Duration::from_millis(300);

// --- raw clients -------------------------------------------------------------------------------

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(from.parse().expect("an address"), 0))
        .expect("bind a loopback address");
    socket.connect(to).await.expect("connect")
}

/// `count` connections from `from`, each of which sends one of the [`SILENT`] prefixes in turn
/// and nothing more.
async fn silent(from: &str, to: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::with_capacity(count);
    for i in 0..count {
        let mut socket = connect_from(from, to).await;
        let sent = SILENT[i % SILENT.len()];
        if !sent.is_empty() {
            // The server may already have closed it to make room: that is fine.
            let _ = socket.write_all(sent).await;
        }
        sockets.push(socket);
    }
    sockets
}

/// Reads until the peer closes; `false` if it has not within [`PATIENCE`].
async fn closed_by_server(stream: &mut (impl AsyncRead + Unpin)) -> bool {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Sends `request` and reads one HTTP/1.1 response (head and `Content-Length` body); `None` if
/// the connection closed first.
async fn exchange(
    stream: &mut (impl AsyncRead + AsyncWrite + Unpin),
    request: &str,
) -> Option<String> {
    stream.write_all(request.as_bytes()).await.ok()?;
    read_response(stream).await
}

async fn read_response(stream: &mut (impl AsyncRead + Unpin)) -> Option<String> {
    let mut got = Vec::new();
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + length {
                    return Some(text);
                }
            }
            let mut buf = [0u8; 4096];
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("an answer or a close in time")
}

fn get_request(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
}

/// A plain HTTP/1.1 request on a new connection from `from`: the answer's status line.
async fn fine_from(from: &str, to: SocketAddr) -> String {
    let mut stream = connect_from(from, to).await;
    let answer = exchange(&mut stream, &get_request("/fine"))
        .await
        .unwrap_or_else(|| panic!("{from}: closed without an answer"));
    answer.lines().next().unwrap_or_default().to_owned()
}

/// An HTTP/2 request sender over `io`, its connection driven by a task whose end (the server
/// closed it) the returned receiver reports.
async fn h2_client<I>(
    io: I,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    oneshot::Receiver<()>,
)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("an HTTP/2 handshake");
    let (ended_tx, ended) = oneshot::channel();
    tokio::spawn(async move {
        let _ = connection.await;
        let _ = ended_tx.send(());
    });
    (sender, ended)
}

async fn h2_get(
    sender: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    authority: &str,
    path: &str,
) -> (u16, String) {
    let request = hyper::Request::get(format!("http://{authority}{path}"))
        .body(Empty::<Bytes>::new())
        .expect("a request");
    let response = sender.send_request(request).await.expect("an answer");
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

// --- silent connections ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_do_not_lock_other_clients_out() {
    // Bounds far away: only making room can let the others in.
    let server = Listener::start(limits(20, 10, LONG, LONG)).await;
    let address = server.address;
    // Ten times the limit, from one address and then from another: no byte, part of the h2c
    // preface, all of it, the preface and SETTINGS.
    let mut held = silent("127.0.0.1", address, 200).await;
    held.extend(silent("127.0.0.2", address, 200).await);
    assert_eq!(fine_from("127.0.0.1", address).await, "HTTP/1.1 200 OK");
    assert_eq!(fine_from("127.0.0.2", address).await, "HTTP/1.1 200 OK");
    assert_eq!(fine_from("127.0.0.3", address).await, "HTTP/1.1 200 OK");
    // HTTP/2 with prior knowledge, too.
    let (mut h2, _) = h2_client(connect_from("127.0.0.4", address).await).await;
    assert_eq!(
        h2_get(&mut h2, &address.to_string(), "/fine").await,
        (200, "fine".to_owned())
    );
    // The server closed all but its share of the silent ones: those closed first are the
    // oldest.
    assert!(closed_by_server(&mut held[0]).await);
    assert!(closed_by_server(&mut held[200]).await);
    drop(held);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_and_unfinished_heads_are_closed_after_the_header_timeout() {
    let server = Listener::start(limits(100, 100, HEADER, LONG)).await;
    let address = server.address;
    // A keep-alive connection served before the silent ones are opened: idle, not silent.
    let mut kept = connect_from("127.0.0.1", address).await;
    assert!(exchange(&mut kept, &get_request("/fine")).await.is_some());
    let mut sockets = silent("127.0.0.1", address, SILENT.len()).await;
    let mut unfinished = connect_from("127.0.0.1", address).await;
    unfinished
        .write_all(b"GET /fine HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .expect("write");
    sockets.push(unfinished);
    // A next request's head begun on a served connection, never finished.
    let mut next = connect_from("127.0.0.1", address).await;
    assert!(exchange(&mut next, &get_request("/fine")).await.is_some());
    next.write_all(b"GET /fine HTTP/1.1\r\n")
        .await
        .expect("write");
    sockets.push(next);
    for (i, socket) in sockets.iter_mut().enumerate() {
        assert!(closed_by_server(socket).await, "socket {i} is still open");
    }
    // The idle connection outlived them all: idleness has its own bound.
    let answer = exchange(&mut kept, &get_request("/fine")).await;
    assert!(
        answer.is_some_and(|a| a.starts_with("HTTP/1.1 200")),
        "the idle connection was closed with the silent ones"
    );
    server.stop().await;
}

// --- idle connections and long requests --------------------------------------------------------

/// Waits for a full idle timeout to pass: a connection made idle now is closed by the server.
async fn an_idle_timeout_passes(address: SocketAddr) {
    let mut sibling = connect_from("127.0.0.9", address).await;
    let answer = exchange(&mut sibling, &get_request("/fine")).await;
    assert!(answer.is_some(), "the sibling is answered");
    assert!(
        closed_by_server(&mut sibling).await,
        "an idle connection is closed after the idle timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_but_requests_in_flight_are_not() {
    let mut server = Listener::start(limits(100, 100, LONG, IDLE)).await;
    let address = server.address;
    // A held request, in flight from before the idle timeout until after it.
    let mut holding = connect_from("127.0.0.1", address).await;
    holding
        .write_all(get_request("/hold").as_bytes())
        .await
        .expect("write");
    server.held(1).await;
    // Idle on HTTP/1.1 and on HTTP/2 (h2c): closed.
    let mut h1 = connect_from("127.0.0.1", address).await;
    assert!(exchange(&mut h1, &get_request("/fine")).await.is_some());
    let (mut h2, h2_ended) = h2_client(connect_from("127.0.0.1", address).await).await;
    assert_eq!(h2_get(&mut h2, &address.to_string(), "/fine").await.0, 200);
    assert!(closed_by_server(&mut h1).await);
    tokio::time::timeout(PATIENCE, h2_ended)
        .await
        .expect("the idle HTTP/2 connection is closed")
        .expect("its task reports");
    an_idle_timeout_passes(address).await;
    // The held request is answered on its connection.
    server.release.add_permits(1);
    let answer = read_response(&mut holding).await.expect("the held answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("released"), "{answer}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_and_streaming_takes_outlive_the_idle_timeout() {
    let server = TestServer::start(Options::manual().flags(&["--idle-timeout", "300ms"])).await;
    let address: SocketAddr = server
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("an address");
    // A fresh connection per request: the server closes idle pooled ones.
    let http = tenax_net::http::client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client");
    let enqueue = |queue: &'static str| {
        let http = http.clone();
        let url = server.url("/api/jobs");
        async move {
            let response = http
                .post(url)
                .json(&json!({"queue": queue, "payload": {}}))
                .send()
                .await
                .expect("an answer");
            assert_eq!(response.status(), 201);
        }
    };
    // A stream, shown to be open by its first job.
    enqueue("streamed").await;
    let stream = http
        .post(server.url("/api/take/stream"))
        .json(&json!({"queues": ["streamed"], "max": 10}))
        .send()
        .await
        .expect("a stream");
    assert_eq!(stream.status(), 200);
    let mut lines = stream.bytes_stream();
    let mut text = String::new();
    let mut jobs = 0;
    // Complete lines that hold a job (the others are empty keep-alive lines).
    let jobs_in = |text: &str| {
        let complete = text.rsplit_once('\n').map_or("", |(lines, _)| lines);
        complete
            .lines()
            .filter(|line| line.starts_with('{'))
            .count()
    };
    let mut next_job = async || {
        while jobs == jobs_in(&text) {
            let chunk = tokio::time::timeout(PATIENCE, lines.next())
                .await
                .expect("a line in time")
                .expect("the stream is open")
                .expect("a chunk");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        jobs += 1;
    };
    next_job().await;
    // A long poll.
    let polling = tokio::spawn({
        let http = http.clone();
        let url = server.url("/api/take");
        async move {
            http.post(url)
                .json(&json!({"queues": ["polled"], "wait": "30s"}))
                .send()
                .await
                .expect("an answer to the long poll")
                .json::<Value>()
                .await
                .expect("JSON")
        }
    });
    an_idle_timeout_passes(address).await;
    an_idle_timeout_passes(address).await;
    enqueue("streamed").await;
    next_job().await;
    enqueue("polled").await;
    let taken = tokio::time::timeout(PATIENCE, polling)
        .await
        .expect("the long poll answers")
        .expect("the task");
    assert_eq!(taken["jobs"].as_array().map(Vec::len), Some(1), "{taken}");
}

// --- one client's share ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_place() {
    let mut server = Listener::start(limits(20, 5, LONG, LONG)).await;
    let address = server.address;
    // 127.0.0.2 holds its whole share with requests in flight.
    let mut busy = Vec::new();
    for _ in 0..5 {
        let mut stream = connect_from("127.0.0.2", address).await;
        stream
            .write_all(get_request("/hold").as_bytes())
            .await
            .expect("write");
        busy.push(stream);
    }
    server.held(5).await;
    // Its next connection is closed unanswered; other addresses are served, even while a third
    // opens ten times the limit of silent connections.
    let mut sixth = connect_from("127.0.0.2", address).await;
    assert_eq!(exchange(&mut sixth, &get_request("/fine")).await, None);
    let _silent = silent("127.0.0.4", address, 200).await;
    assert_eq!(fine_from("127.0.0.3", address).await, "HTTP/1.1 200 OK");
    // Its held requests were never cut.
    server.release.add_permits(5);
    for stream in &mut busy {
        let answer = read_response(stream).await.expect("the held answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // Its place is its own again.
    assert_eq!(fine_from("127.0.0.2", address).await, "HTTP/1.1 200 OK");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_limit_with_every_connection_busy_new_ones_wait() {
    let mut server = Listener::start(limits(4, 4, LONG, LONG)).await;
    let address = server.address;
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut stream = connect_from("127.0.0.1", address).await;
        stream
            .write_all(get_request("/hold").as_bytes())
            .await
            .expect("write");
        busy.push(stream);
    }
    server.held(4).await;
    // Queued by the kernel, not refused: answered once a place frees.
    let mut fifth = connect_from("127.0.0.2", address).await;
    fifth
        .write_all(get_request("/fine").as_bytes())
        .await
        .expect("write");
    server.release.add_permits(1);
    let answer = read_response(&mut fifth).await.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    server.stop().await;
}

// --- TLS ---------------------------------------------------------------------------------------

struct Tls {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    ca_pem: String,
}

fn tls() -> Tls {
    tenax_net::http::install_crypto_provider();
    let dir = tempfile::tempdir().expect("a directory");
    let ca = receiver::TestCa::new("tenax connections test ca");
    let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"]).write_pem(dir.path());
    let files = tenax::serve::TlsFiles {
        cert_path: cert.clone(),
        certs: {
            use rustls::pki_types::pem::PemObject as _;
            rustls::pki_types::CertificateDer::pem_file_iter(&cert)
                .expect("the certificate")
                .collect::<Result<_, _>>()
                .expect("PEM")
        },
        key: Arc::new({
            use rustls::pki_types::pem::PemObject as _;
            rustls::pki_types::PrivateKeyDer::from_pem_file(&key).expect("the key")
        }),
    };
    let server = tenax::serve::tls_config(&files).expect("a TLS configuration");
    let mut roots = rustls::RootCertStore::empty();
    {
        use rustls::pki_types::pem::PemObject as _;
        roots
            .add(
                rustls::pki_types::CertificateDer::from_pem_slice(ca.pem().as_bytes())
                    .expect("PEM"),
            )
            .expect("a root");
    }
    let mut client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];
    Tls {
        server: Arc::new(server),
        client: Arc::new(client),
        ca_pem: ca.pem(),
    }
}

/// A TLS connection from `from`, handshake done (ALPN h2).
async fn tls_from(
    tls: &Tls,
    from: &str,
    to: SocketAddr,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = connect_from(from, to).await;
    let connector = tokio_rustls::TlsConnector::from(tls.client.clone());
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("a name");
    tokio::time::timeout(PATIENCE, connector.connect(name, tcp))
        .await
        .expect("a handshake in time")
        .expect("a handshake")
}

/// TCP and TLS connections that fall silent at each step: before the handshake, after part of
/// a ClientHello, after the handshake, after the h2 preface.
async fn silent_tls(
    tls: &Tls,
    from: &str,
    to: SocketAddr,
    count: usize,
) -> Vec<Box<dyn AsyncReadWrite>> {
    let mut sockets: Vec<Box<dyn AsyncReadWrite>> = Vec::with_capacity(count);
    for i in 0..count {
        match i % 4 {
            0 => sockets.push(Box::new(connect_from(from, to).await)),
            1 => {
                let mut tcp = connect_from(from, to).await;
                let _ = tcp.write_all(b"\x16\x03\x01\x02\x00\x01").await;
                sockets.push(Box::new(tcp));
            }
            2 => sockets.push(Box::new(tls_from(tls, from, to).await)),
            _ => {
                let mut stream = tls_from(tls, from, to).await;
                let _ = stream.write_all(PREFACE).await;
                let _ = stream.write_all(SETTINGS).await;
                let _ = stream.flush().await;
                sockets.push(Box::new(stream));
            }
        }
    }
    sockets
}

trait AsyncReadWrite: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncReadWrite for T {}

fn https_client(tls: &Tls, from: &str, to: SocketAddr, http1: bool) -> reqwest::Client {
    let mut builder = tenax_net::http::client_builder()
        .resolve("localhost", to)
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(tls.ca_pem.as_bytes()).expect("PEM"))
        .local_address(from.parse::<IpAddr>().expect("an address"));
    if http1 {
        builder = builder.http1_only();
    }
    builder.build().expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_tls_connections_do_not_lock_others_out_and_are_closed_after_their_bounds() {
    let tls = tls();
    // Bounds far away: making room lets a client in past 200 silent connections.
    let mut far = limits(20, 10, LONG, LONG);
    far.tls = Some(tls.server.clone());
    let server = Listener::start(far).await;
    let address = server.address;
    let _held = silent_tls(&tls, "127.0.0.1", address, 200).await;
    let url = format!("https://localhost:{}/fine", address.port());
    for (from, http1, version) in [
        ("127.0.0.1", false, reqwest::Version::HTTP_2),
        ("127.0.0.2", true, reqwest::Version::HTTP_11),
    ] {
        let response = https_client(&tls, from, address, http1)
            .get(&url)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
        assert_eq!(response.version(), version);
    }
    server.stop().await;

    // Bounds near: each silent connection is closed; so is an idle HTTP/2 connection.
    let mut near = limits(100, 100, HEADER, IDLE);
    near.tls = Some(tls.server.clone());
    let server = Listener::start(near).await;
    let address = server.address;
    let (mut h2, h2_ended) = h2_client(tls_from(&tls, "127.0.0.1", address).await).await;
    assert_eq!(h2_get(&mut h2, "localhost", "/fine").await.0, 200);
    for (i, socket) in silent_tls(&tls, "127.0.0.1", address, 4)
        .await
        .iter_mut()
        .enumerate()
    {
        assert!(closed_by_server(socket).await, "kind {i} is still open");
    }
    tokio::time::timeout(PATIENCE, h2_ended)
        .await
        .expect("the idle HTTP/2 connection is closed")
        .expect("its task reports");
    server.stop().await;
}
