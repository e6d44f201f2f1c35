//! A PostgreSQL primary with a synchronous streaming standby, private to one test, for
//! failover tests: both on loopback ports, made with PostgreSQL's own programs (`initdb`, then
//! `pg_basebackup -R` for the standby), each postmaster under the watchdog of
//! [`super::postgres`], which stops it and removes its directory when the test process is gone.
//!
//! The primary waits for the standby to flush every commit before it answers
//! (`synchronous_standby_names = '*'`, `synchronous_commit = on`): what the primary
//! acknowledged is on the standby. `fsync` is off on both, as in the other tests' cluster: the
//! processes are killed in these tests, never the machine.
//!
//! Used as `crate::common::replicated`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::postgres::{
    append, find_bindir, free_port, program, running_as_root, spawn_watchdog, tail,
};

/// How long a server may take to accept connections, or the standby to catch up.
const PATIENCE: Duration = Duration::from_secs(60);

/// One PostgreSQL server of the pair.
pub struct Instance {
    /// Its temporary directory: `data/`, `socket/`, `server.log`.
    top: PathBuf,
    pub port: u16,
    watchdog: Child,
}

/// The primary and its standby.
pub struct Replicated {
    bindir: PathBuf,
    as_postgres: bool,
    pub primary: Instance,
    pub standby: Instance,
}

impl Instance {
    /// `postgres://postgres@127.0.0.1:<port>/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn log(&self) -> String {
        tail(&self.top.join("server.log"))
    }
}

impl Replicated {
    /// Starts the pair and returns once the standby streams synchronously. `None` (after a
    /// line on stderr) when PostgreSQL's server programs are not installed, unless
    /// `TENAX_REQUIRE_POSTGRES=1`, which makes that a failure.
    pub async fn start() -> Option<Self> {
        let Some(bindir) = find_bindir().filter(|dir| dir.join("pg_basebackup").is_file()) else {
            let required = std::env::var("TENAX_REQUIRE_POSTGRES").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "TENAX_REQUIRE_POSTGRES=1 and PostgreSQL's server programs (initdb, pg_ctl, \
                 postgres, pg_basebackup) are not installed"
            );
            eprintln!(
                "SKIPPED: a failover needs PostgreSQL's server programs (initdb, pg_ctl, \
                 postgres, pg_basebackup); Debian: apt-get install postgresql"
            );
            return None;
        };
        let as_postgres = running_as_root();
        let top = new_top(as_postgres);
        let data = top.join("data");
        let out = program(&bindir, "initdb", as_postgres)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--encoding=UTF8"])
            .args(["--locale=C", "--no-sync"])
            .current_dir(&top)
            .stdin(Stdio::null())
            .output()
            .expect("initdb runs");
        assert!(out.status.success(), "initdb: {out:?}");
        append(&data.join("postgresql.conf"), &settings(&top)).expect("the primary's settings");
        let primary = start_instance(&bindir, top, as_postgres).await;

        // The standby: a base backup of the primary that follows it (`-R`).
        let top = new_top(as_postgres);
        let data = top.join("data");
        let out = program(&bindir, "pg_basebackup", as_postgres)
            .arg("-D")
            .arg(&data)
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string()])
            .args(["-U", "postgres", "-R", "-X", "stream", "--no-sync"])
            .current_dir(&top)
            .stdin(Stdio::null())
            .output()
            .expect("pg_basebackup runs");
        assert!(out.status.success(), "pg_basebackup: {out:?}");
        // The primary's settings came with the backup; later lines win.
        append(&data.join("postgresql.conf"), &settings(&top)).expect("the standby's settings");
        let standby = start_instance(&bindir, top, as_postgres).await;

        // Synchronous only now that the standby is there: until then every commit would wait.
        let admin = connect(&primary.url("postgres")).await;
        for statement in [
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
            "ALTER SYSTEM SET synchronous_commit = on",
            "SELECT pg_reload_conf()",
        ] {
            admin
                .batch_execute(statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
        let started = Instant::now();
        loop {
            let sync = admin
                .query_opt(
                    "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync' \
                     AND state = 'streaming'",
                    &[],
                )
                .await
                .expect("pg_stat_replication");
            if sync.is_some() {
                break;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "the standby never streamed synchronously; its log:\n{}",
                standby.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(Self {
            bindir,
            as_postgres,
            primary,
            standby,
        })
    }

    /// Makes a database on the primary (and so on the standby); its name.
    pub async fn create_database(&self, name: &str) {
        connect(&self.primary.url("postgres"))
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
    }

    /// Kills the primary's postmaster with SIGKILL (its backends end when they see it gone)
    /// and returns once it has exited.
    pub fn kill_primary(&mut self) {
        let pid_file = self.primary.top.join("data/postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).expect("postmaster.pid");
        let pid = text.lines().next().expect("a pid").trim().to_owned();
        let status = Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -KILL {pid}");
        // The watchdog reaps the postmaster, then exits (the test process lives on).
        let started = Instant::now();
        while self.primary.watchdog.try_wait().ok().flatten().is_none() {
            assert!(started.elapsed() < PATIENCE, "the primary did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Promotes the standby (`pg_ctl promote`, which waits until it accepts writes).
    pub fn promote_standby(&self) {
        let out = program(&self.bindir, "pg_ctl", self.as_postgres)
            .arg("-D")
            .arg(self.standby.top.join("data"))
            .args(["-w", "-t", "60", "promote"])
            .current_dir(&self.standby.top)
            .stdin(Stdio::null())
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "pg_ctl promote: {out:?}; the standby's log:\n{}",
            self.standby.log()
        );
    }
}

impl Drop for Replicated {
    /// A server whose watchdog has exited (the killed primary) left its directory, which
    /// nothing else removes; the running ones go with the test process.
    fn drop(&mut self) {
        for instance in [&mut self.primary, &mut self.standby] {
            if instance.watchdog.try_wait().ok().flatten().is_some() {
                let _ = std::fs::remove_dir_all(&instance.top);
            }
        }
    }
}

/// A new temporary directory with `socket/`, reachable by (and given to) the `postgres` user
/// when the tests run as root.
fn new_top(as_postgres: bool) -> PathBuf {
    let parent = if as_postgres {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let top = tempfile::Builder::new()
        .prefix("tenax-pg-failover-")
        .tempdir_in(&parent)
        .expect("a temporary directory")
        .keep();
    std::fs::create_dir(top.join("socket")).expect("the socket directory");
    if as_postgres {
        let out = Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(&top)
            .output()
            .expect("chown runs");
        assert!(out.status.success(), "chown: {out:?}");
    }
    top
}

/// The settings of a server in `top` (its port is given at start, `-p`).
fn settings(top: &Path) -> String {
    format!(
        "\n# tests/it/common/replicated.rs\n\
         listen_addresses = '127.0.0.1'\n\
         unix_socket_directories = '{}'\n\
         max_connections = 200\n\
         fsync = off\n\
         logging_collector = off\n",
        top.join("socket").display()
    )
}

/// Starts the server of `top` under a watchdog on a free port; returns once it answers.
async fn start_instance(bindir: &Path, top: PathBuf, as_postgres: bool) -> Instance {
    let port = free_port().expect("a free port");
    let watchdog = spawn_watchdog(bindir, &top, port, as_postgres).expect("the server starts");
    let instance = Instance {
        top,
        port,
        watchdog,
    };
    let started = Instant::now();
    loop {
        let answered =
            match tokio_postgres::connect(&instance.url("postgres"), tokio_postgres::NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    client.simple_query("SELECT 1").await.is_ok()
                }
                Err(_) => false,
            };
        if answered {
            return instance;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the server on port {port} did not start; its log:\n{}",
            instance.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An admin session on `url`.
pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(connection);
    client
}
