//! The harness: the real server (`tenax::server::run`) in-process on a loopback port, with the
//! system clock and a temporary data directory; polling with a deadline; and a proxy that
//! counts the requests that cross it.

// Each suite uses a different subset of the helpers.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use tempfile::TempDir;
use tenax::config::ServeArgs;
use tenax_client::{Client, JobInfo, JobStatus};
use tenax_core::clock::Clock;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a helper that polls for a background change waits before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// An admin token for servers started with `--auth on`.
pub const ADMIN: &str = "client-test-admin-token-0123456789abcdef";

#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    serve: ServeArgs,
}

/// The real server on 127.0.0.1 and a port of its own; stopped when dropped.
#[derive(Debug)]
pub struct Server {
    pub url: String,
    pub address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
    _data: TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

impl Server {
    /// A server with `tenax serve` flags (the system clock).
    pub async fn start(flags: &[&str]) -> Self {
        Self::start_with_scheme(flags, "http").await
    }

    pub async fn start_with_scheme(flags: &[&str], scheme: &str) -> Self {
        let data = tempfile::Builder::new()
            .prefix("tenax-client-test-")
            .tempdir()
            .expect("a temporary directory");
        let mut argv = vec![
            "tenax".to_owned(),
            "--data-dir".to_owned(),
            data.path().display().to_string(),
        ];
        argv.extend(flags.iter().map(|f| (*f).to_owned()));
        let config = Flags::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("flags {flags:?}: {e}"))
            .serve
            .validate()
            .unwrap_or_else(|e| panic!("flags {flags:?}: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("the address");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(error) = tenax::server::run(listener, config, Clock::System, shutdown).await
            {
                panic!("the server failed: {error:#}");
            }
        });
        let server = Self {
            url: format!("{scheme}://{address}"),
            address,
            stop: Some(stop),
            task,
            _data: data,
        };
        let deadline = Instant::now() + PATIENCE;
        while TcpStream::connect(address).await.is_err() {
            assert!(Instant::now() < deadline, "the server did not come up");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        server
    }

    /// A client of this server without a token.
    pub fn client(&self) -> Client {
        Client::new(&self.url).expect("a client")
    }

    /// A client of this server with a token.
    pub fn client_with(&self, token: &str) -> Client {
        Client::builder()
            .url(&self.url)
            .token(token)
            .build()
            .expect("a client")
    }
}

/// Polls `check` until it gives a value, at most [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls a job until its status is `status`; returns it.
pub async fn wait_for_status(client: &Client, id: u64, status: JobStatus) -> JobInfo {
    wait_until(client, id, &format!("{status:?}"), |job| {
        job.status == status
    })
    .await
}

/// Polls a job until its status is `status` and `errors` failures are recorded (the status
/// changes in memory at once, the error entry once it is written); returns it.
pub async fn wait_for_errors(
    client: &Client,
    id: u64,
    status: JobStatus,
    errors: usize,
) -> JobInfo {
    wait_until(
        client,
        id,
        &format!("{status:?} with {errors} errors"),
        |job| job.status == status && job.errors.len() == errors,
    )
    .await
}

/// Polls a job until `ready(job)` holds, at most [`PATIENCE`]; returns it.
pub async fn wait_until(
    client: &Client,
    id: u64,
    what: &str,
    ready: impl Fn(&JobInfo) -> bool,
) -> JobInfo {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let job = client.get_job(id).await.expect("the job");
        if ready(&job) {
            return job;
        }
        assert!(
            Instant::now() < deadline,
            "job {id} never became {what}: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for a worker's `run` to end, at most [`PATIENCE`].
pub async fn joined<T>(task: JoinHandle<T>) -> T {
    tokio::time::timeout(PATIENCE, task)
        .await
        .expect("the worker stops in time")
        .expect("the worker task does not panic")
}

/// A TCP proxy in front of a server that counts the HTTP/1.1 requests crossing it, by request
/// line (`"POST /api/jobs/complete"`).
#[derive(Debug, Clone)]
pub struct CountingProxy {
    pub url: String,
    counts: Arc<Mutex<HashMap<String, u64>>>,
}

impl CountingProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("the address");
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let shared = counts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let counts = shared.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (mut server_read, mut server_write) = server.into_split();
                    let answers = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                        let _ = client_write.shutdown().await;
                    });
                    let mut seen: Vec<u8> = Vec::new();
                    let mut chunk = vec![0u8; 16 * 1024];
                    loop {
                        let n = match client_read.read(&mut chunk).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        seen.extend_from_slice(&chunk[..n]);
                        count_request_lines(&mut seen, &counts);
                        if server_write.write_all(&chunk[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = server_write.shutdown().await;
                    let _ = answers.await;
                });
            }
        });
        Self {
            url: format!("http://{address}"),
            counts,
        }
    }

    /// Requests seen with this request line (`"POST /api/jobs/complete"`).
    pub fn count(&self, line: &str) -> u64 {
        self.counts
            .lock()
            .expect("the counts")
            .get(line)
            .copied()
            .unwrap_or(0)
    }

    /// Requests seen whose request line starts with `prefix` and ends with `suffix`.
    pub fn count_matching(&self, prefix: &str, suffix: &str) -> u64 {
        self.counts
            .lock()
            .expect("the counts")
            .iter()
            .filter(|(line, _)| line.starts_with(prefix) && line.ends_with(suffix))
            .map(|(_, n)| n)
            .sum()
    }
}

/// Counts every complete request line (`METHOD /path HTTP/1.1`) in `seen`, keeping only the
/// unscanned tail.
fn count_request_lines(seen: &mut Vec<u8>, counts: &Mutex<HashMap<String, u64>>) {
    const MARK: &[u8] = b" HTTP/1.1\r\n";
    let mut scanned = 0;
    while let Some(at) = seen[scanned..]
        .windows(MARK.len())
        .position(|w| w == MARK)
        .map(|p| p + scanned)
    {
        // A body has no line end of its own: the request line starts at its method.
        let start = ["GET /", "POST /", "PUT /", "PATCH /", "DELETE /"]
            .iter()
            .filter_map(|method| {
                seen[..at]
                    .windows(method.len())
                    .rposition(|w| w == method.as_bytes())
            })
            .max()
            .unwrap_or(0);
        let line = String::from_utf8_lossy(&seen[start..at]).into_owned();
        *counts.lock().expect("the counts").entry(line).or_default() += 1;
        scanned = at + MARK.len();
    }
    // Keep enough of the tail to find a request line cut by the chunk boundary.
    let keep_from = scanned.max(seen.len().saturating_sub(512));
    seen.drain(..keep_from);
}
