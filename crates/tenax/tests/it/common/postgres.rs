//! A real PostgreSQL for the tests: no mocks, no containers.
//!
//! [`fresh_database`] hands a test the URL of a new, empty database. The server comes from, in
//! this order:
//!
//! 1. `TENAX_TEST_DATABASE_URL`: the admin URL of an existing server (for example
//!    `postgres://postgres@127.0.0.1:5432/postgres`); each fresh database is a
//!    `CREATE DATABASE tenax_test_<random hex>` there (nothing drops them afterwards).
//! 2. A private cluster, started on first use, made with PostgreSQL's own server binaries
//!    (`pg_config --bindir` when that directory has `initdb`, `pg_ctl` and `postgres`, else the
//!    highest `/usr/lib/postgresql/*/bin`): `initdb` in a temporary directory, a free loopback
//!    port, trust authentication, superuser `postgres`. When the tests run as root, every server
//!    program runs as the `postgres` user through `runuser`. A shell watchdog (see
//!    [`WATCHDOG`]) owns the postmaster: when the test process is gone, it stops the server
//!    (immediate shutdown) and removes the temporary directory, so no server outlives the tests.
//! 3. Neither: the test is skipped (one line on stderr says so and how to run it), unless
//!    `TENAX_REQUIRE_POSTGRES=1`, which turns that into a failure (CI sets it).
//!
//! Tests run on many threads, each `#[tokio::test]` on its own runtime, so nothing here keeps a
//! connection across calls: each call opens (and drops) its own admin connection.
//!
//! Every suite runs in the one test process (`tests/it/main.rs`), and [`fresh_database`] and
//! [`admin_url`] are on the private cluster they all share. A suite that restarts its server or
//! changes its configuration has a cluster of its own instead, an [`OwnCluster`] (a static of
//! the suite), whose [`OwnCluster::restart_server`] restarts it the way an operator would (a
//! fast shutdown, then a start on the same directory and port) and [`OwnCluster::serve_tls`]
//! turns TLS on: every connection to it breaks, or sees the change, including those of the
//! suite's other tests running at that moment (they take turns, by a lock of the suite's), but
//! none of another suite's. With `TENAX_TEST_DATABASE_URL`, every one of them is that server.

// The helpers that run PostgreSQL's programs (`find_bindir`, `program`, `spawn_watchdog`, …)
// are public for `replicated.rs`, which starts clusters of its own.

// Each suite uses a different subset of the helpers.
#![allow(dead_code)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The admin URL of an existing server to use instead of a private cluster.
const URL_VAR: &str = "TENAX_TEST_DATABASE_URL";
/// Set to `1` to fail, rather than skip, when no PostgreSQL can be had.
const REQUIRE_VAR: &str = "TENAX_REQUIRE_POSTGRES";
/// How long the private server may take to accept connections after a start.
const START_PATIENCE: Duration = Duration::from_secs(30);
/// How long a fresh database's admin connection keeps trying (it may meet a restart).
const CONNECT_PATIENCE: Duration = Duration::from_secs(30);

/// The watchdog that owns the private cluster's postmaster, run by `sh -c` (as the `postgres`
/// user when the tests run as root) with the arguments: the server binaries' directory, the data
/// directory, the port, the test process's id, and the temporary directory to remove.
///
/// It starts `postgres` in the background, and a monitor that checks every 0.5 s whether the
/// test process still lives: when it is gone, the monitor sends the postmaster SIGQUIT
/// (immediate shutdown). The monitor ends when the postmaster has exited, whatever the reason.
/// The watchdog itself waits for the postmaster to exit (it reaps it, so the monitor's `kill -0`
/// sees it gone), then for the monitor. Then, if the test process is gone, it removes the
/// temporary directory; if the test process still lives (a `pg_ctl stop` for
/// [`restart_server`], which starts a new watchdog, or a crash), it leaves everything as it is
/// and exits quietly. It kills nothing but the postmaster, and leaves no process behind.
///
/// The test process's liveness is read from `/proc/<pid>` (`kill -0` where there is no `/proc`):
/// `kill -0` from the `postgres` user on a process of root's fails with EPERM, not only when the
/// process is gone.
const WATCHDOG: &str = r#"
bindir=$1 data=$2 port=$3 tpid=$4 top=$5
alive() {
    if [ -d /proc/self ]; then [ -d "/proc/$1" ]; else kill -0 "$1" 2>/dev/null; fi
}
"$bindir/postgres" -D "$data" -p "$port" </dev/null >>"$top/server.log" 2>&1 &
pg=$!
(
    while kill -0 "$pg" 2>/dev/null; do
        if ! alive "$tpid"; then
            kill -QUIT "$pg"
            exit 0
        fi
        sleep 0.5
    done
) </dev/null >/dev/null 2>&1 &
monitor=$!
wait "$pg"
wait "$monitor"
if ! alive "$tpid"; then
    rm -rf "$top"
fi
"#;

/// Where this process's PostgreSQL comes from.
#[derive(Debug)]
enum Server {
    /// `TENAX_TEST_DATABASE_URL`: an existing server.
    External { admin_url: url::Url },
    /// The private cluster this process started.
    Private(Cluster),
}

/// The private cluster: one per test process, alive until the process ends.
#[derive(Debug)]
struct Cluster {
    /// The directory with `initdb`, `pg_ctl` and `postgres`.
    bindir: PathBuf,
    /// The temporary directory: `data/` (the cluster), `socket/`, `server.log`, `initdb.log`.
    top: PathBuf,
    /// The loopback port the server listens on.
    port: u16,
    /// Whether the server programs run as the `postgres` user (the tests run as root).
    as_postgres: bool,
    /// The current watchdog (its `runuser`, or itself).
    watchdog: Mutex<Child>,
    /// Held for the whole of a restart, so that two restarts do not interleave.
    restarting: Mutex<()>,
}

/// A test PostgreSQL server of its own for a suite: a private cluster of its own (started on
/// first use, like the shared one), or the server of `TENAX_TEST_DATABASE_URL`. For the suites
/// that restart their server or change its configuration, which must touch no other suite's
/// tests: `static POSTGRES: OwnCluster = OwnCluster::new();`.
#[derive(Debug, Default)]
pub struct OwnCluster {
    /// The server, or why there is none; found (and the private cluster started) at most once.
    server: OnceLock<Result<Server, String>>,
}

/// The server every suite shares: [`fresh_database`], [`admin_url`].
static SHARED: OwnCluster = OwnCluster::new();

/// The secrets key file the servers of these tests share (`--secrets-key-file`, required with
/// `--database-url`): every server of one database must hold the same key. One file for the
/// test binary, made on first use in the target's temporary directory.
pub fn secrets_key_file() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("secrets-{}.key", env!("CARGO_CRATE_NAME")));
        if tenax_core::secrets::Keyring::read_file(&path).is_err() {
            tenax_core::secrets::Keyring::generate("test")
                .and_then(|keys| keys.write_file(&path))
                .expect("a test key file");
        }
        path
    })
    .clone()
}

/// A fresh, empty database on the test PostgreSQL server every suite shares: its connection URL
/// (`postgres://…`).
///
/// `None` (after one line on stderr saying the test is skipped and how to run it) when no server
/// can be had and `TENAX_REQUIRE_POSTGRES` is not set; panics with a clear message when
/// `TENAX_REQUIRE_POSTGRES=1` and none can be had, or when the server cannot create a database.
pub async fn fresh_database() -> Option<String> {
    SHARED.fresh_database().await
}

/// The URL of the shared test server's `postgres` database (for administrative statements),
/// with the same skip rules as [`fresh_database`].
pub async fn admin_url() -> Option<String> {
    SHARED.admin_url().await
}

impl OwnCluster {
    pub const fn new() -> Self {
        Self {
            server: OnceLock::new(),
        }
    }

    /// A fresh, empty database on this server, as [`fresh_database`] on the shared one.
    pub async fn fresh_database(&'static self) -> Option<String> {
        let server = self.server().await?;
        let admin = server.admin_url();
        let name = format!("tenax_test_{:016x}", rand::random::<u64>());
        let client = admin_connect(&admin).await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name} on {admin} failed: {e:?}"));
        let mut url = admin;
        url.set_path(&format!("/{name}"));
        Some(url.to_string())
    }

    /// The URL of this server's `postgres` database, as [`admin_url`] on the shared one.
    pub async fn admin_url(&'static self) -> Option<String> {
        Some(self.server().await?.admin_url().to_string())
    }

    /// Restarts this server the way an operator would (`pg_ctl stop -m fast`, then a start on
    /// the same directory and port), and returns once it accepts connections again. Every
    /// connection made before breaks; data committed before survives.
    ///
    /// Only for a private cluster: panics when the server came from `TENAX_TEST_DATABASE_URL`,
    /// or when there is no server at all (call [`OwnCluster::fresh_database`] first and return
    /// on `None`).
    pub async fn restart_server(&'static self) {
        let server = self.server().await.unwrap_or_else(|| {
            panic!("restart_server(): there is no test PostgreSQL server (see the message above)")
        });
        let cluster = match server {
            Server::Private(cluster) => cluster,
            Server::External { .. } => panic!(
                "restart_server() only restarts a private test cluster, and the server came \
                 from {URL_VAR}: unset it to run this test on a private cluster"
            ),
        };
        tokio::task::spawn_blocking(move || cluster.restart())
            .await
            .unwrap_or_else(|e| panic!("restarting the test PostgreSQL server failed: {e}"));
    }

    /// Makes this private cluster accept TLS (`ssl = on`, by a configuration reload) with the
    /// PEM certificate chain `cert` and its private key `key`; plain connections are accepted as
    /// before (the `host` lines of `pg_hba.conf` allow both). Returns once a new session sees
    /// `ssl` on. Every test of the suite shares the cluster, so the suite's tests should all
    /// expect TLS to be on from then on.
    ///
    /// Only for a private cluster: panics when the server came from `TENAX_TEST_DATABASE_URL`
    /// (whose TLS is its operator's), or when there is none (call [`OwnCluster::fresh_database`]
    /// first).
    pub async fn serve_tls(&'static self, cert: &str, key: &str) {
        let server = self.server().await.unwrap_or_else(|| {
            panic!("serve_tls(): there is no test PostgreSQL server (see the message above)")
        });
        let cluster = match server {
            Server::Private(cluster) => cluster,
            Server::External { .. } => panic!(
                "serve_tls() configures only a private test cluster, and the server came from \
                 {URL_VAR}: unset it to run this test on a private cluster"
            ),
        };
        let cert_path = cluster.top.join("server.crt");
        let key_path = cluster.top.join("server.key");
        for (path, text) in [(&cert_path, cert), (&key_path, key)] {
            std::fs::write(path, text)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
            // PostgreSQL refuses a key that others may read.
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap_or_else(|e| panic!("cannot restrict {}: {e}", path.display()));
            if cluster.as_postgres {
                let out = Command::new("chown")
                    .arg("postgres:")
                    .arg(path)
                    .output()
                    .unwrap_or_else(|e| panic!("cannot run chown: {e}"));
                assert!(out.status.success(), "chown {}: {out:?}", path.display());
            }
        }
        let admin = cluster.admin_url();
        let client = admin_connect(&admin).await;
        // One statement at a time: ALTER SYSTEM refuses a transaction block, and a simple query
        // of several statements is one.
        for statement in [
            format!("ALTER SYSTEM SET ssl_cert_file = '{}'", cert_path.display()),
            format!("ALTER SYSTEM SET ssl_key_file = '{}'", key_path.display()),
            "ALTER SYSTEM SET ssl = on".to_owned(),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            client
                .batch_execute(&statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e:?}"));
        }
        let started = Instant::now();
        loop {
            let client = admin_connect(&admin).await;
            let on = client
                .simple_query("SHOW ssl")
                .await
                .ok()
                .into_iter()
                .flatten()
                .any(|message| match message {
                    tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0) == Some("on"),
                    _ => false,
                });
            if on {
                return;
            }
            assert!(
                started.elapsed() < START_PATIENCE,
                "the test PostgreSQL server did not turn TLS on; the end of its log:\n{}",
                tail(&cluster.top.join("server.log"))
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The server, or `None` after the skip line (or a panic when PostgreSQL is required).
    async fn server(&'static self) -> Option<&'static Server> {
        let found = match self.server.get() {
            Some(found) => found,
            None => tokio::task::spawn_blocking(move || self.server.get_or_init(find_server))
                .await
                .unwrap_or_else(|e| panic!("starting the test PostgreSQL server failed: {e}")),
        };
        match found {
            Ok(server) => Some(server),
            Err(why) => {
                let required = std::env::var(REQUIRE_VAR)
                    .is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"));
                if required {
                    panic!("{REQUIRE_VAR} is set and there is no test PostgreSQL server: {why}");
                }
                let test = std::thread::current()
                    .name()
                    .unwrap_or("this test")
                    .to_owned();
                eprintln!(
                    "SKIPPED {test}: it needs PostgreSQL, and {why}. To run it, install \
                     PostgreSQL's server binaries (Debian: apt-get install postgresql) or set \
                     {URL_VAR} to an admin URL (postgres://postgres@127.0.0.1:5432/postgres); \
                     {REQUIRE_VAR}=1 makes this a failure instead of a skip."
                );
                None
            }
        }
    }
}

impl Server {
    /// The URL of the server's `postgres` database (the external URL as given).
    fn admin_url(&self) -> url::Url {
        match self {
            Server::External { admin_url } => admin_url.clone(),
            Server::Private(cluster) => cluster.admin_url(),
        }
    }
}

/// Blocking: `TENAX_TEST_DATABASE_URL`, else a private cluster, else why there is neither.
fn find_server() -> Result<Server, String> {
    if let Ok(raw) = std::env::var(URL_VAR) {
        let admin_url = url::Url::parse(&raw).unwrap_or_else(|e| {
            panic!("{URL_VAR}={raw:?} is not a URL (postgres://user@host:port/postgres): {e}")
        });
        return Ok(Server::External { admin_url });
    }
    let bindir = find_bindir().ok_or_else(|| {
        format!(
            "{URL_VAR} is not set and no PostgreSQL server binaries (initdb, pg_ctl, postgres) \
             were found (neither in `pg_config --bindir` nor in /usr/lib/postgresql/*/bin)"
        )
    })?;
    Cluster::start(bindir)
        .map(Server::Private)
        .map_err(|e| format!("the private PostgreSQL cluster could not be started: {e}"))
}

/// The directory with PostgreSQL's server programs, if there is one.
pub fn find_bindir() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|dir| complete(dir)) {
        return Some(dir);
    }
    // Debian's layout: /usr/lib/postgresql/<version>/bin; the highest version wins.
    let version = |dir: &Path| -> Vec<u64> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.split('.')
            .map(|part| part.parse().unwrap_or(0))
            .collect()
    };
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|dir| complete(&dir.join("bin")))
        .max_by_key(|dir| version(dir))
        .map(|dir| dir.join("bin"))
}

/// Whether this process runs as root (PostgreSQL refuses to).
pub fn running_as_root() -> bool {
    // /proc/self belongs to the process's effective user.
    match std::fs::metadata("/proc/self") {
        Ok(meta) => meta.uid() == 0,
        Err(_) => Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0"),
    }
}

impl Cluster {
    /// Blocking: `initdb` in a new temporary directory, then the server under a watchdog on a
    /// free loopback port; returns once it accepts connections.
    fn start(bindir: PathBuf) -> Result<Cluster, String> {
        let as_postgres = running_as_root();
        // The `postgres` user must be able to reach the directory: /tmp, not a $TMPDIR of root's.
        let parent = if as_postgres {
            PathBuf::from("/tmp")
        } else {
            std::env::temp_dir()
        };
        let top = tempfile::Builder::new()
            .prefix("tenax-pg-")
            .tempdir_in(&parent)
            .map_err(|e| {
                format!(
                    "cannot make a temporary directory in {}: {e}",
                    parent.display()
                )
            })?
            .keep();
        let data = top.join("data");
        let socket = top.join("socket");
        std::fs::create_dir(&socket)
            .map_err(|e| format!("cannot make {}: {e}", socket.display()))?;
        if as_postgres {
            let out = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(&top)
                .output()
                .map_err(|e| format!("cannot run chown: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "the tests run as root, and {} cannot be given to the `postgres` user (is \
                     there one?): {}",
                    top.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        let log = top.join("initdb.log");
        let log_file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot make {}: {e}", log.display()))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let status = program(&bindir, "initdb", as_postgres)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .current_dir(&top)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .status()
            .map_err(|e| format!("cannot run initdb from {}: {e}", bindir.display()))?;
        if !status.success() {
            let why = format!("initdb failed ({status}): {}", tail(&log));
            let _ = std::fs::remove_dir_all(&top);
            return Err(why);
        }
        // Everything but the port, which each start passes (`-p`), so that a start that lost
        // its port to another process can retry on a new one.
        let conf = format!(
            "\n# tests/it/common/postgres.rs\n\
             listen_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\n\
             max_connections = 200\n\
             fsync = off\n\
             full_page_writes = off\n\
             logging_collector = off\n",
            socket.display()
        );
        append(&data.join("postgresql.conf"), &conf)?;

        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let watchdog = spawn_watchdog(&bindir, &top, port, as_postgres)?;
            let cluster = Cluster {
                bindir: bindir.clone(),
                top: top.clone(),
                port,
                as_postgres,
                watchdog: Mutex::new(watchdog),
                restarting: Mutex::new(()),
            };
            match cluster.wait_until_ready() {
                Ok(()) => return Ok(cluster),
                Err(e) => {
                    // Another try only when the server exited because another process took
                    // its port in the meantime.
                    let exited = cluster.watchdog_exited();
                    let lost_port = e.contains("could not bind") || e.contains("in use");
                    last_error = e;
                    if !(exited && lost_port) {
                        if exited {
                            let _ = std::fs::remove_dir_all(&top);
                        }
                        return Err(last_error);
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(&top);
        Err(last_error)
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    fn admin_url(&self) -> url::Url {
        url::Url::parse(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            self.port
        ))
        .expect("the private cluster's URL is a URL")
    }

    /// Blocking: a fast shutdown with `pg_ctl`, then a start under a new watchdog on the same
    /// directory and port; returns once the server accepts connections again.
    fn restart(&self) {
        let _restarting = self
            .restarting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut watchdog = self
            .watchdog
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let out = program(&self.bindir, "pg_ctl", self.as_postgres)
            .arg("-D")
            .arg(self.top.join("data"))
            .args(["-m", "fast", "-w", "-t", "60", "stop"])
            .current_dir(&self.top)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run pg_ctl: {e}"));
        assert!(
            out.status.success(),
            "pg_ctl stop -m fast failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The old watchdog has seen its postmaster exit while the test process lives, and exits
        // without touching anything.
        let waited = Instant::now();
        while watchdog.try_wait().ok().flatten().is_none() && waited.elapsed() < START_PATIENCE {
            std::thread::sleep(Duration::from_millis(20));
        }
        *watchdog = spawn_watchdog(&self.bindir, &self.top, self.port, self.as_postgres)
            .unwrap_or_else(|e| panic!("cannot start the test PostgreSQL server again: {e}"));
        drop(watchdog);
        self.wait_until_ready()
            .unwrap_or_else(|e| panic!("the test PostgreSQL server did not come back: {e}"));
    }

    /// Whether the watchdog (and so the server) has exited.
    fn watchdog_exited(&self) -> bool {
        let mut watchdog = self
            .watchdog
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        watchdog.try_wait().ok().flatten().is_some()
    }

    /// Blocking: until the server answers a TCP connect and then a real query, or an error
    /// (with the server log's tail) when it exits or does not answer within 30 s.
    fn wait_until_ready(&self) -> Result<(), String> {
        let url = self.admin_url().to_string();
        let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port);
        let log = self.top.join("server.log");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot build a tokio runtime: {e}"))?;
        let started = Instant::now();
        loop {
            if self.watchdog_exited() {
                return Err(format!(
                    "the server exited before it accepted connections; the end of \
                     {}:\n{}",
                    log.display(),
                    tail(&log)
                ));
            }
            let last_error =
                if TcpStream::connect_timeout(&address.into(), Duration::from_secs(1)).is_ok() {
                    match runtime.block_on(query_once(&url)) {
                        Ok(()) => return Ok(()),
                        Err(e) => e,
                    }
                } else {
                    format!("nothing accepts TCP connections on {address}")
                };
            if started.elapsed() > START_PATIENCE {
                return Err(format!(
                    "the server did not accept connections on {address} within {}s (last: \
                     {last_error}); the end of {}:\n{}",
                    START_PATIENCE.as_secs(),
                    log.display(),
                    tail(&log)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `SELECT 1` on a new connection to `url`, which is then dropped.
async fn query_once(url: &str) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("connecting to {url}: {e}"))?;
    let connection = tokio::spawn(connection);
    let answer = client.simple_query("SELECT 1").await;
    drop(client);
    let _ = connection.await;
    answer
        .map(|_| ())
        .map_err(|e| format!("SELECT 1 on {url}: {e}"))
}

/// A new admin connection (its connection task on the caller's runtime), retried for a while:
/// the server may be in the middle of a restart.
async fn admin_connect(admin: &url::Url) -> tokio_postgres::Client {
    let started = Instant::now();
    loop {
        match tokio_postgres::connect(admin.as_str(), tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                return client;
            }
            Err(e) if started.elapsed() > CONNECT_PATIENCE => {
                panic!("cannot connect to the test PostgreSQL server at {admin}: {e:?}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// One of the server programs, run as the `postgres` user when `as_postgres`.
pub fn program(bindir: &Path, name: &str, as_postgres: bool) -> Command {
    let path = bindir.join(name);
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(path);
        command
    } else {
        Command::new(path)
    }
}

/// Starts the [`WATCHDOG`] (and through it the postmaster) in a process group of its own, so
/// that a Ctrl-C on the tests reaches neither it nor the server, with no inherited output: the
/// server writes `server.log`.
pub fn spawn_watchdog(
    bindir: &Path,
    top: &Path,
    port: u16,
    as_postgres: bool,
) -> Result<Child, String> {
    let mut command = if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--", "sh", "-c", WATCHDOG]);
        command
    } else {
        let mut command = Command::new("sh");
        command.args(["-c", WATCHDOG]);
        command
    };
    command
        .arg("tenax-pg-watchdog")
        .arg(bindir)
        .arg(top.join("data"))
        .arg(port.to_string())
        .arg(std::process::id().to_string())
        .arg(top)
        .current_dir(top)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the server's watchdog: {e}"))
}

/// A loopback port nothing listens on (the moment it is asked).
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| format!("cannot find a free loopback port: {e}"))
}

/// Appends `text` to the file at `path`.
pub fn append(path: &Path, text: &str) -> Result<(), String> {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// The last few kilobytes of a log file, for an error message.
pub fn tail(path: &Path) -> String {
    const KEEP: u64 = 4096;
    match std::fs::File::open(path) {
        Ok(mut file) => {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = file.seek(SeekFrom::Start(len.saturating_sub(KEEP)));
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        }
        Err(e) => format!("({} cannot be read: {e})", path.display()),
    }
}
