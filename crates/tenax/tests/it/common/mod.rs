//! The integration-test harness: the real server (`tenax::server::run`) on a loopback port with
//! a temporary data directory and a clock the test chooses, and a small typed HTTP client that
//! asserts the status it expects and hands back JSON.
//!
//! A [`TestServer`] can be stopped and started again on the same data directory (restart tests);
//! each start binds a fresh port, and [`TestServer::api`] follows it.
//!
//! With `TENAX_TEST_STORE=postgres`, every server keeps its data in a fresh PostgreSQL database
//! instead (`--database-url`, on the server [`postgres`] provides), and a restart reopens that
//! database: CI runs the API, webhook and Zaqar suites once per store.

// Each suite uses a different subset of the helpers.
#![allow(dead_code)]

pub mod node;
pub mod ports;
pub mod postgres;
pub mod receiver;
pub mod replicated;
pub mod routes;
pub mod served;
pub mod smtp;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use futures_util::{Stream, StreamExt};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tempfile::TempDir;
use tenax::config::{Config, ServeArgs};
use tenax::delivery::signals::{Event, Signal, Signals};
use tenax_core::clock::{Clock, parse_rfc3339};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

/// The start of every manual clock: 2027-01-15T08:00:00Z, a round number far from the epoch.
pub const T0: u64 = 1_800_000_000_000;

/// How long a helper that polls for a background change waits before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The queue of the jobs the harness enqueues to move the server's loops along
/// ([`TestServer::poke`], [`TestServer::advance_to`]): no subscription reads it and no worker
/// takes from it.
pub const POKES: &str = "test-pokes";

/// `tenax serve`'s flags, parsed exactly as the binary parses them.
#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A validated configuration from `tenax serve` flags, with `--data-dir` set to `data_dir`.
pub fn config(data_dir: &Path, flags: &[String]) -> Config {
    let mut argv = vec![
        "tenax".to_owned(),
        "--data-dir".to_owned(),
        data_dir.display().to_string(),
    ];
    argv.extend(flags.iter().cloned());
    let parsed = Flags::try_parse_from(&argv)
        .unwrap_or_else(|e| panic!("flags {flags:?} do not parse: {e}"));
    parsed
        .serve
        .validate()
        .unwrap_or_else(|e| panic!("flags {flags:?} are invalid: {e}"))
}

/// What a server is started with.
#[derive(Debug, Clone)]
pub struct Options {
    pub clock: Clock,
    pub flags: Vec<String>,
}

impl Options {
    /// A manual clock at [`T0`] and default flags.
    pub fn manual() -> Self {
        Self {
            clock: Clock::manual(T0),
            flags: Vec::new(),
        }
    }

    /// The system clock and default flags.
    pub fn system() -> Self {
        Self {
            clock: Clock::System,
            flags: Vec::new(),
        }
    }

    /// Adds `tenax serve` flags, for example `&["--default-lease", "10s"]`.
    pub fn flags(mut self, flags: &[&str]) -> Self {
        self.flags.extend(flags.iter().map(|f| (*f).to_owned()));
        self
    }
}

/// The real server, on 127.0.0.1 and a port of its own.
#[derive(Debug)]
pub struct TestServer {
    /// The client for the running server (replaced on every start).
    pub api: Api,
    /// The server's clock; with [`Clock::manual`] the test moves it with `advance_ms`.
    pub clock: Clock,
    flags: Vec<String>,
    /// The server's database, when the suite runs on PostgreSQL.
    database: Option<String>,
    /// What its delivery runners decide, on every start ([`TestServer::listen`]).
    signals: Signals,
    /// Dropped last: the directory outlives every server started on it.
    data_dir: TempDir,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl TestServer {
    /// What a copy of the store shows: every file of the embedded store's data directory (the
    /// server stopped for the read, then started again), or every job row of the PostgreSQL
    /// database as text.
    pub async fn store_copy(&mut self) -> String {
        if let Some(url) = self.database() {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .expect("a connection to the test database");
            tokio::spawn(connection);
            let rows = client
                .query(
                    "SELECT t::text FROM tenax_jobs t UNION ALL SELECT t::text FROM tenax_finished t",
                    &[],
                )
                .await
                .expect("the job rows");
            return rows.iter().map(|row| row.get::<_, String>(0)).collect();
        }
        self.stop().await;
        let mut copy = String::new();
        for path in files_under(self.data_dir()) {
            let bytes = std::fs::read(&path).expect("a file of the store");
            copy.push_str(&String::from_utf8_lossy(&bytes));
        }
        self.start_again().await;
        copy
    }

    /// A server with a manual clock at [`T0`] and default flags.
    pub async fn manual() -> Self {
        Self::start(Options::manual()).await
    }

    pub async fn start(options: Options) -> Self {
        let data_dir = tempfile::Builder::new()
            .prefix("tenax-test-")
            .tempdir()
            .expect("a temporary data directory");
        let database = test_database().await;
        let signals = Signals::listened();
        let (api, running) = launch(data_dir.path(), &options, database.as_deref(), &signals).await;
        Self {
            api,
            clock: options.clock,
            flags: options.flags,
            database,
            signals,
            data_dir,
            running: Some(running),
        }
    }

    /// A server on the embedded store already in `data_dir` (a restored backup, say), which
    /// it keeps until it is dropped.
    pub async fn start_in(data_dir: TempDir, options: Options) -> Self {
        let signals = Signals::listened();
        let (api, running) = launch(data_dir.path(), &options, None, &signals).await;
        Self {
            api,
            clock: options.clock,
            flags: options.flags,
            database: None,
            signals,
            data_dir,
            running: Some(running),
        }
    }

    /// Stops the server gracefully (requests finish, the store flushes) and waits for it.
    pub async fn stop(&mut self) {
        let running = self.running.take().expect("the server is running");
        let _ = running.stop.send(());
        tokio::time::timeout(PATIENCE, running.task)
            .await
            .expect("the server stops in time")
            .expect("the server task does not panic")
            .expect("the server shuts down cleanly");
    }

    /// Starts the server again on the same data directory, with the same clock and flags.
    pub async fn start_again(&mut self) {
        assert!(self.running.is_none(), "stop the server first");
        let options = Options {
            clock: self.clock.clone(),
            flags: self.flags.clone(),
        };
        let (api, running) = launch(
            self.data_dir.path(),
            &options,
            self.database.as_deref(),
            &self.signals,
        )
        .await;
        self.api = api;
        self.running = Some(running);
    }

    /// Stop, then start on the same data directory.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.start_again().await;
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The data directory the server's embedded store (or its secrets key file) lives in.
    pub fn data_dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// The server's PostgreSQL database URL, when the suite runs on PostgreSQL.
    pub fn database(&self) -> Option<&str> {
        self.database.as_deref()
    }

    /// Hears what the server's delivery runners decide from now on: listen before the act
    /// whose effect a test waits for.
    pub fn listen(&self) -> broadcast::Receiver<Signal> {
        self.signals
            .listen()
            .expect("a test server's signals are listened")
    }

    /// Moves the manual clock. The maintenance loop looks at a manual clock every few
    /// milliseconds; use [`Api::wait_for`] or a long-polling take to see its effect.
    pub fn advance(&self, duration: Duration) {
        assert!(self.clock.is_manual(), "only a manual clock can be moved");
        self.clock
            .advance_ms(u64::try_from(duration.as_millis()).expect("a short duration"));
    }

    /// Moves the manual clock forward to `at_ms` and returns once the maintenance loop has
    /// looked at that time: a job on [`POKES`] due at `at_ms`, enqueued before the move, has been
    /// promoted. The pass that promoted it promoted whatever else was due by `at_ms` (one pass
    /// promotes all that is due), and left the rest scheduled: from now on a runner sees what
    /// it would take at `at_ms`.
    pub async fn advance_to(&self, at_ms: u64) {
        let now = self.now_ms();
        assert!(
            at_ms > now,
            "the clock moves forward: from {now} to {at_ms}"
        );
        let canary = self
            .enqueue(json!({ "queue": POKES, "type": "canary", "run_at": at_ms }))
            .await;
        self.advance(Duration::from_millis(at_ms - now));
        self.wait_for(canary, "ready").await;
    }

    /// Runs `request` while every write to the table `waiter` names is held behind a table
    /// lock: once `waiter` waits on the lock (its times are set by then), moves the manual
    /// clock by `advance`, then lets go. Answers what `request` answered. Only a shared
    /// database's commit can be held up from outside. The lock (`SHARE`) holds back updates,
    /// inserts and deletes, not reads that lock rows (`FOR UPDATE`).
    pub async fn held_up<T>(
        &self,
        waiter: Waiter,
        advance: Duration,
        request: impl std::future::Future<Output = T>,
    ) -> T {
        let url = self.database().expect("a database on PostgreSQL");
        let (holder, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("a connection to the test database");
        tokio::spawn(connection);
        holder
            .batch_execute(&format!(
                "BEGIN; LOCK TABLE {} IN SHARE MODE",
                waiter.table()
            ))
            .await
            .expect("the table locked");
        let hold_up = async {
            let started = Instant::now();
            loop {
                let (count, parameter) = waiter.count();
                let waiting = holder
                    .query_one(count, &[&parameter])
                    .await
                    .expect("the waiting backends")
                    .get::<_, i64>(0);
                if waiting > 0 {
                    break;
                }
                if started.elapsed() > PATIENCE {
                    let busy: Vec<String> = holder
                        .query(
                            "SELECT a.pid || ' ' || state || ' ' || coalesce(wait_event_type, '') \
                             || ' ' || coalesce(wait_event, '') || ' ' || coalesce((SELECT \
                             string_agg(l.relation::regclass || ' ' || l.mode || ' ' || \
                             l.granted, ', ') FROM pg_locks l WHERE l.pid = a.pid \
                             AND l.relation IS NOT NULL), '') || ' ' || (now() - state_change) || ': ' || right(query, 200) \
                             FROM pg_stat_activity a \
                             WHERE datname = current_database() \
                             AND pid <> pg_backend_pid()",
                            &[],
                        )
                        .await
                        .expect("the busy backends")
                        .iter()
                        .map(|row| row.get(0))
                        .collect();
                    panic!("{waiter:?} never waited on the lock; busy: {busy:#?}");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.advance(advance);
            holder
                .batch_execute("COMMIT")
                .await
                .expect("the lock let go");
        };
        let (answer, ()) = tokio::join!(request, hold_up);
        answer
    }

    /// Wakes every delivery runner that waits for a delivery to become ready (or for an
    /// endpoint, a permit or a token, which it looks at again anyway): a job enqueued on
    /// [`POKES`] tells the store's waiters that jobs may be ready. A disabled subscription's
    /// runner waits for a change of its subscription and does not wake.
    pub async fn poke(&self) {
        self.enqueue(json!({ "queue": POKES, "type": "poke" }))
            .await;
    }

    /// Waits until the runners of `subscriptions` have settled: each has signalled twice,
    /// heard from now on, that it waits (the second signal's look began after the first was
    /// sent, so after this call: it saw what the test did before), each round [`poke`]d so that
    /// a runner idle for ready deliveries looks again at once; and then none of their
    /// deliveries is in flight. A delivery a runner (wrongly) took meanwhile is in flight then,
    /// or its request has been made: a test that counts what its receiver got sees it.
    ///
    /// [`poke`]: TestServer::poke
    pub async fn settle(&self, subscriptions: &[u64], what: &str) {
        let mut listener = self.listen();
        let mut waits: HashMap<u64, usize> = subscriptions.iter().map(|&s| (s, 0)).collect();
        for round in 1..=2 {
            self.poke().await;
            let heard = async {
                while waits.values().any(|&n| n < round) {
                    match listener.recv().await {
                        Ok(Signal {
                            subscription,
                            event: Event::Waits(_),
                        }) => {
                            if let Some(n) = waits.get_mut(&subscription.0) {
                                *n += 1;
                            }
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => panic!("the server stopped"),
                    }
                }
            };
            let settled = tokio::time::timeout(PATIENCE, heard).await.is_ok();
            assert!(
                settled,
                "{what}: runners never waited twice (waits heard per subscription: {waits:?})"
            );
        }
        let in_flight = subscriptions.iter().map(|sub| async move {
            let path = format!("/api/subscriptions/{sub}/deliveries?status=in_flight");
            (sub, self.get(&path).await)
        });
        for (sub, in_flight) in futures_util::future::join_all(in_flight).await {
            assert_eq!(
                in_flight["deliveries"],
                json!([]),
                "{what}: subscription {sub} has a delivery in flight"
            );
        }
    }
}

impl std::ops::Deref for TestServer {
    type Target = Api;

    fn deref(&self) -> &Api {
        &self.api
    }
}

/// Whether the suites run on PostgreSQL (`TENAX_TEST_STORE=postgres`) rather than the embedded
/// store.
/// Who [`TestServer::held_up`] waits for, and the table it holds for them. A prepared
/// statement waits for its table locks before `pg_stat_activity` shows its text (when it is
/// bound), and the maintenance loop's writes wait on the held table too: a waiter is told
/// apart by the locks it holds while it waits, where its text cannot be relied on.
#[derive(Debug, Clone, Copy)]
pub enum Waiter {
    /// A take (`TAKE` in tenax-postgres/src/leases.rs, for a worker or a Zaqar claim), held
    /// on `tenax_jobs`: it reads `tenax_subscriptions` before it, which no maintenance
    /// statement reads.
    Take,
    /// A claim's renewal (`EXTEND` in tenax-postgres/src/claims.rs), held on `tenax_claims`:
    /// it writes `tenax_jobs` before it; the maintenance statement that writes `tenax_claims`
    /// comes first in its transaction, and holds nothing else while it waits.
    Renewal,
    /// The only statement containing this text, held on `tenax_jobs`, when its text shows
    /// while it waits.
    Statement(&'static str),
}

impl Waiter {
    /// The table held.
    fn table(self) -> &'static str {
        match self {
            Self::Take | Self::Statement(_) => "tenax_jobs",
            Self::Renewal => "tenax_claims",
        }
    }

    /// A query that counts the backends of the test's database that are this waiter, and its
    /// one parameter.
    fn count(self) -> (&'static str, &'static str) {
        const HOLDING: &str = "SELECT count(*) FROM pg_stat_activity a \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
             AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.granted \
                 AND l.relation = $1::text::regclass)";
        match self {
            Self::Take => (HOLDING, "tenax_subscriptions"),
            Self::Renewal => (HOLDING, "tenax_jobs"),
            Self::Statement(text) => (
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock' \
                 AND strpos(query, $1) > 0",
                text,
            ),
        }
    }
}

pub fn on_postgres() -> bool {
    match std::env::var("TENAX_TEST_STORE").as_deref() {
        Ok("postgres") => true,
        Ok("embedded") | Err(_) => false,
        Ok(other) => panic!("TENAX_TEST_STORE={other:?}: use embedded or postgres"),
    }
}

/// A fresh database for a server, when the suites run on PostgreSQL.
async fn test_database() -> Option<String> {
    if !on_postgres() {
        return None;
    }
    let url = postgres::fresh_database().await;
    assert!(
        url.is_some(),
        "TENAX_TEST_STORE=postgres, but there is no test PostgreSQL server"
    );
    url
}

async fn launch(
    data_dir: &Path,
    options: &Options,
    database: Option<&str>,
    signals: &Signals,
) -> (Api, Running) {
    let mut flags = options.flags.clone();
    if let Some(url) = database {
        flags.extend(["--database-url".to_owned(), url.to_owned()]);
        if !flags.iter().any(|f| f == "--secrets-key-file") {
            flags.push("--secrets-key-file".to_owned());
            flags.push(postgres::secrets_key_file().display().to_string());
        }
    }
    let config = config(data_dir, &flags);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("the bound address");
    let (stop, stopped) = oneshot::channel::<()>();
    let shutdown = async move {
        // A dropped sender (the test ended) stops the server too.
        let _ = stopped.await;
    };
    let mut task = tokio::spawn(tenax::server::run_with_signals(
        listener,
        config,
        options.clock.clone(),
        shutdown,
        signals.clone(),
    ));
    let api = Api::new(address);
    // A server that ends before it answers says why, instead of the wait running out.
    tokio::select! {
        () = api.wait_until_up() => {}
        ended = &mut task => panic!("the server ended before it came up: {ended:?}"),
    }
    (api, Running { stop, task })
}

/// Panics if `json` holds an integer that JavaScript's `JSON.parse` (and `jq`) would round:
/// beyond ±(2^53 − 1). Every answer the typed client reads passes through it, so every test
/// checks that the server's answers are exact in a JavaScript client.
pub fn assert_exact_in_javascript(json: &Value, what: &str) {
    const MAX: u64 = (1 << 53) - 1;
    match json {
        Value::Number(n) => {
            let exact = match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => u <= MAX,
                (None, Some(i)) => i.unsigned_abs() <= MAX,
                // A float: JavaScript reads it as it is written.
                (None, None) => true,
            };
            assert!(
                exact,
                "{what}: {n} is not exact in JavaScript (beyond 2^53 - 1)"
            );
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| assert_exact_in_javascript(v, what)),
        Value::Object(fields) => fields
            .values()
            .for_each(|v| assert_exact_in_javascript(v, what)),
        _ => {}
    }
}

/// A JSON error answer: `{"error": {"status", "code", "field", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub field: Option<String>,
    pub message: String,
}

/// A job handed to a worker by a take.
#[derive(Debug, Clone)]
pub struct Taken {
    pub id: u64,
    pub lease_token: u64,
    pub attempt: u64,
    pub queue: String,
    pub priority: i64,
    pub lease_expires_at_ms: u64,
    pub json: Value,
}

impl Taken {
    pub fn from_json(json: Value) -> Self {
        assert_exact_in_javascript(&json, "a taken job");
        Self {
            id: json["id"].as_u64().expect("a taken job has an id"),
            lease_token: json["lease_token"].as_u64().expect("a lease token"),
            attempt: json["attempt"].as_u64().expect("an attempt"),
            queue: json["queue"].as_str().expect("a queue").to_owned(),
            priority: json["priority"].as_i64().expect("a priority"),
            lease_expires_at_ms: ms(&json["lease_expires_at"]),
            json,
        }
    }
}

/// Milliseconds since the epoch of an RFC 3339 time in a JSON answer.
pub fn ms(time: &Value) -> u64 {
    let text = time
        .as_str()
        .unwrap_or_else(|| panic!("expected an RFC 3339 time, got {time}"));
    parse_rfc3339(text).unwrap_or_else(|| panic!("not an RFC 3339 time: {text}"))
}

/// The ids of a list of jobs (`[{"id": ...}, ...]`).
pub fn ids(jobs: &Value) -> Vec<u64> {
    jobs.as_array()
        .unwrap_or_else(|| panic!("expected an array of jobs, got {jobs}"))
        .iter()
        .map(|j| j["id"].as_u64().expect("a job id"))
        .collect()
}

/// The typed client. Every request helper asserts the status code it expects and panics with
/// the request and the answer otherwise.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    pub base: String,
}

impl Api {
    pub fn new(address: SocketAddr) -> Self {
        Self {
            // Only ever to a loopback server: never through a proxy of the environment.
            http: tenax_net::http::client_builder()
                .no_proxy()
                .timeout(Duration::from_secs(90))
                .build()
                .expect("an HTTP client"),
            base: format!("http://{address}"),
        }
    }

    /// Polls `/healthz` until the server answers 200, at most [`PATIENCE`].
    pub async fn wait_until_up(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = self.http.get(format!("{}/healthz", self.base)).send().await;
            if answer.is_ok_and(|r| r.status() == StatusCode::OK) {
                return;
            }
            assert!(Instant::now() < deadline, "the server did not come up");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Sends a request with a raw body (or none) and returns the status and the JSON answer
    /// (`null` for an empty body).
    pub async fn send_raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method.clone(), self.url(path));
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: reading the answer: {e}"));
        let json = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{method} {path}: the answer is not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        assert_exact_in_javascript(&json, &format!("{method} {path}"));
        (status, json)
    }

    /// Sends a request and asserts its status.
    pub async fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        want: u16,
    ) -> Value {
        let raw = body.as_ref().map(|b| serde_json::to_vec(b).expect("JSON"));
        let (status, answer) = self.send_raw(method.clone(), path, raw).await;
        assert_eq!(
            status.as_u16(),
            want,
            "{method} {path} with {body:?}: expected {want}, got {status}: {answer}"
        );
        answer
    }

    /// GET, expecting 200.
    pub async fn get(&self, path: &str) -> Value {
        self.expect(Method::GET, path, None, 200).await
    }

    /// Polls `GET path` until `ready` holds of the answer, at most [`PATIENCE`]; returns that
    /// answer. For a background change the API shows (`what`, for the message if it never
    /// comes).
    pub async fn poll(&self, path: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        self.poll_every(path, what, Duration::from_millis(10), ready)
            .await
    }

    /// [`Api::poll`], asking `every` so often.
    async fn poll_every(
        &self,
        path: &str,
        what: &str,
        every: Duration,
        ready: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let answer = self.get(path).await;
            if ready(&answer) {
                return answer;
            }
            assert!(
                Instant::now() < deadline,
                "{path}: {what} never happened: {answer}"
            );
            tokio::time::sleep(every).await;
        }
    }

    /// The attempts of `delivery` once there are `n` (no more). The log entry of an attempt is
    /// written in the commit that ends it, which the delivery's status (kept in memory) may show
    /// a moment earlier.
    pub async fn wait_attempts(&self, delivery: u64, n: usize) -> Vec<Value> {
        let path = format!("/api/deliveries/{delivery}/attempts");
        let answer = self
            .poll(&path, &format!("{n} attempts"), |a| {
                a["attempts"].as_array().is_some_and(|list| list.len() >= n)
            })
            .await;
        let attempts = answer["attempts"].as_array().expect("attempts").clone();
        assert_eq!(attempts.len(), n, "delivery {delivery}: {attempts:?}");
        attempts
    }

    /// The one delivery subscription `sub` has, once it is made (with the message, by the
    /// store: waited for, not raced).
    pub async fn only_delivery(&self, sub: u64) -> u64 {
        let answer = self
            .poll(
                &format!("/api/subscriptions/{sub}/deliveries"),
                "a delivery",
                |a| a["deliveries"].as_array().is_some_and(|d| !d.is_empty()),
            )
            .await;
        let all = answer["deliveries"].as_array().expect("deliveries");
        assert_eq!(all.len(), 1, "subscription {sub}: {all:?}");
        all[0]["id"].as_u64().expect("a delivery id")
    }

    /// POST, expecting 200.
    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.expect(Method::POST, path, Some(body), 200).await
    }

    /// PUT, expecting 200.
    pub async fn put(&self, path: &str, body: Value) -> Value {
        self.expect(Method::PUT, path, Some(body), 200).await
    }

    /// A request that must fail with `status`; checks the error's shape and returns it.
    pub async fn error(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        status: u16,
    ) -> ApiError {
        let answer = self.expect(method, path, body, status).await;
        parse_error(&answer, status)
    }

    /// A raw-body request that must fail with `status`.
    pub async fn error_raw(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
        status: u16,
    ) -> ApiError {
        let (got, answer) = self.send_raw(method.clone(), path, Some(body)).await;
        assert_eq!(got.as_u16(), status, "{method} {path}: {answer}");
        parse_error(&answer, status)
    }

    /// POST that must be refused with 400 naming `field`; returns the message.
    pub async fn invalid(&self, path: &str, body: Value, field: &str) -> String {
        let error = self
            .error(Method::POST, path, Some(body.clone()), 400)
            .await;
        assert_eq!(error.code, "invalid", "{path} {body}: {error:?}");
        assert_eq!(
            error.field.as_deref(),
            Some(field),
            "{path} {body}: wrong field in {error:?}"
        );
        assert!(!error.message.is_empty(), "{error:?}");
        error.message
    }

    // --- subscriptions --------------------------------------------------------------------

    /// Creates a subscription of `queue` from `body` with the `fields` (an object) laid over
    /// it, expecting 201; returns its view.
    pub async fn subscribe(&self, queue: &str, mut body: Value, fields: Value) -> Value {
        if let Value::Object(fields) = fields {
            for (k, v) in fields {
                body[k] = v;
            }
        }
        self.expect(
            Method::POST,
            &format!("/api/queues/{queue}/subscriptions"),
            Some(body),
            201,
        )
        .await
    }

    /// Makes an API token (`POST /api/tokens` with the admin token `admin`), expecting 201;
    /// returns the new token.
    pub async fn make_token(&self, admin: &str, body: &Value) -> String {
        let response = self
            .http
            .post(self.url("/api/tokens"))
            .bearer_auth(admin)
            .json(body)
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 201);
        let made: Value = response.json().await.expect("JSON");
        made["token"].as_str().expect("the token").to_owned()
    }

    // --- jobs -----------------------------------------------------------------------------

    /// Enqueues one job, expecting it to be created; returns its id.
    pub async fn enqueue(&self, job: Value) -> u64 {
        let answer = self.expect(Method::POST, "/api/jobs", Some(job), 201).await;
        assert_eq!(answer["created"], json!(true), "{answer}");
        answer["id"].as_u64().expect("an id")
    }

    /// Enqueues a batch, expecting 201; returns the ids in order.
    pub async fn enqueue_batch(&self, jobs: Vec<Value>) -> Vec<u64> {
        let answer = self
            .expect(
                Method::POST,
                "/api/jobs/batch",
                Some(json!({ "jobs": jobs })),
                201,
            )
            .await;
        ids(&answer["jobs"])
    }

    pub async fn job(&self, id: u64) -> Value {
        self.get(&format!("/api/jobs/{id}")).await
    }

    pub async fn status(&self, id: u64) -> String {
        self.job(id).await["status"]
            .as_str()
            .expect("a status")
            .to_owned()
    }

    /// Polls a job until its status is `status` (a background transition), at most
    /// [`PATIENCE`]; returns the job.
    pub async fn wait_for(&self, id: u64, status: &str) -> Value {
        self.wait_until(id, &format!("becoming {status}"), |job| {
            job["status"] == json!(status)
        })
        .await
    }

    /// Polls a job until `ready(job)` holds, at most [`PATIENCE`]; returns the job. For
    /// background transitions whose parts become visible one after the other (the status is
    /// in memory at once, the error entry once written).
    pub async fn wait_until(&self, id: u64, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let path = format!("/api/jobs/{id}");
        self.poll_every(&path, what, Duration::from_millis(5), ready)
            .await
    }

    pub async fn stats(&self) -> Value {
        self.get("/api/stats").await
    }

    /// The totals of `/api/stats` as (scheduled, ready, in_flight, completed, dead).
    pub async fn totals(&self) -> (u64, u64, u64, u64, u64) {
        let stats = self.stats().await;
        let t = &stats["totals"];
        let n = |k: &str| t[k].as_u64().expect("a count");
        (
            n("scheduled"),
            n("ready"),
            n("in_flight"),
            n("completed"),
            n("dead"),
        )
    }

    // --- worker side ----------------------------------------------------------------------

    /// `POST /api/take` with this body, expecting 200.
    pub async fn take_with(&self, body: Value) -> Vec<Taken> {
        let answer = self.post("/api/take", body).await;
        answer["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .cloned()
            .map(Taken::from_json)
            .collect()
    }

    /// Takes up to `max` jobs from `queues` without waiting.
    pub async fn take(&self, queues: &[&str], max: usize) -> Vec<Taken> {
        self.take_with(json!({ "queues": queues, "max": max }))
            .await
    }

    /// Takes exactly one job from `queue`, waiting up to two seconds for it (long poll).
    pub async fn take_one(&self, queue: &str) -> Taken {
        let mut jobs = self
            .take_with(json!({ "queues": [queue], "max": 1, "wait": "2s" }))
            .await;
        assert_eq!(jobs.len(), 1, "expected a job from {queue}");
        jobs.remove(0)
    }

    /// Asserts that `queue` has nothing to take, giving the maintenance loop `wait` to prove
    /// it wrong (with a manual clock it looks every few milliseconds).
    pub async fn assert_nothing_to_take(&self, queue: &str, wait: &str) {
        let jobs = self
            .take_with(json!({ "queues": [queue], "max": 10, "wait": wait }))
            .await;
        let got: Vec<u64> = jobs.iter().map(|j| j.id).collect();
        assert!(
            got.is_empty(),
            "expected nothing to take from {queue}, got {got:?}"
        );
    }

    /// Completes a taken job with its lease token.
    pub async fn complete(&self, job: &Taken) {
        let answer = self
            .post(
                &format!("/api/jobs/{}/complete", job.id),
                json!({ "lease_token": job.lease_token }),
            )
            .await;
        assert_eq!(answer["status"], "completed", "{answer}");
    }

    /// Fails a taken job with its lease token and `extra` fields of the failure report.
    pub async fn fail(&self, job: &Taken, message: &str, extra: Value) -> Value {
        let mut body = json!({ "lease_token": job.lease_token, "error": message });
        if let Value::Object(fields) = extra {
            for (k, v) in fields {
                body[k] = v;
            }
        }
        self.post(&format!("/api/jobs/{}/fail", job.id), body).await
    }

    /// Opens `POST /api/take/stream`; returns the NDJSON reader.
    pub async fn stream(&self, body: Value) -> JobStream {
        let response = self
            .http
            .post(self.url("/api/take/stream"))
            .json(&body)
            .send()
            .await
            .expect("the stream opens");
        assert_eq!(response.status(), StatusCode::OK, "take/stream {body}");
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert_eq!(content_type, "application/x-ndjson");
        JobStream {
            bytes: Box::pin(response.bytes_stream()),
            buffer: Vec::new(),
            keep_alives: 0,
        }
    }
}

fn parse_error(answer: &Value, status: u16) -> ApiError {
    let error = &answer["error"];
    assert!(error.is_object(), "not an error answer: {answer}");
    let error = ApiError {
        status: u16::try_from(error["status"].as_u64().expect("error.status")).expect("a status"),
        code: error["code"].as_str().expect("error.code").to_owned(),
        field: error["field"].as_str().map(str::to_owned),
        message: error["message"].as_str().expect("error.message").to_owned(),
    };
    assert_eq!(error.status, status, "error.status matches the HTTP status");
    error
}

/// The jobs of a streaming take, one JSON object a line; blank lines are keep-alives.
pub struct JobStream {
    bytes: Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>,
    buffer: Vec<u8>,
    /// Blank lines read so far.
    pub keep_alives: usize,
}

impl std::fmt::Debug for JobStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobStream")
            .field("buffered", &self.buffer.len())
            .finish()
    }
}

impl JobStream {
    /// The next job, or `None` if none arrives within `within`.
    pub async fn next_within(&mut self, within: Duration) -> Option<Taken> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let line = &line[..line.len() - 1];
                if line.iter().all(u8::is_ascii_whitespace) {
                    self.keep_alives += 1;
                    continue;
                }
                let json: Value = serde_json::from_slice(line).unwrap_or_else(|e| {
                    panic!(
                        "a stream line is not JSON ({e}): {}",
                        String::from_utf8_lossy(line)
                    )
                });
                return Some(Taken::from_json(json));
            }
            match tokio::time::timeout_at(deadline, self.bytes.next()).await {
                Err(_) => return None,
                Ok(None) => panic!("the stream ended"),
                Ok(Some(chunk)) => self
                    .buffer
                    .extend_from_slice(&chunk.expect("a stream chunk")),
            }
        }
    }

    /// The next `n` jobs, each within five seconds.
    pub async fn next_n(&mut self, n: usize) -> Vec<Taken> {
        let mut jobs = Vec::with_capacity(n);
        for i in 0..n {
            let job = self
                .next_within(Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("stream job {} of {n} did not arrive", i + 1));
            jobs.push(job);
        }
        jobs
    }
}

/// Every file under `dir`.
pub fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}
