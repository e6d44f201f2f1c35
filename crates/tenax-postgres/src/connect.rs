//! How every connection to the database is made: the pool's, the listener's, the lead's and
//! `tenax migrate`'s all come from one [`Database`], so they share its TLS and its rules.
//!
//! - TLS follows libpq's `sslmode` and `sslrootcert` ([`super::tls`]).
//! - Connections are to a server that accepts writes (`target_session_attrs=read-write`,
//!   unless the URL names its own): after a failover, a host name that still leads to the old
//!   primary, now a standby, is refused at connect, and with several hosts
//!   (`host=a,b`) the writable one is chosen.
//! - A connection may take at most [`CONNECT_TIMEOUT`], and a silent host is given up within
//!   [`TCP_USER_TIMEOUT`] ([`KEEPALIVES_IDLE`] for an idle connection), unless the URL says
//!   otherwise.

use std::path::Path;
use std::time::Duration;

use tenax_net::trust::CaFile;
use tokio_postgres::Socket;
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::dsn;
use super::statements::statements;
use super::tls::{Check, Roots, SslMode};

/// The longest a new connection may take, unless the URL names a `connect_timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long data sent on a connection may go unacknowledged by the database's host before the
/// connection is given up (`TCP_USER_TIMEOUT`), unless the URL names a `tcp_user_timeout`. A
/// host that went silent without closing its connections (a machine lost, a network
/// partition) otherwise holds the statements sent to it for as long as TCP retransmits, about
/// 15 minutes on Linux; with this they fail (503) within it. Only an unreachable host leaves
/// data unacknowledged that long: a slow statement does not.
pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection may sit idle before TCP probes its host, unless the URL names
/// `keepalives_idle`: with [`TCP_USER_TIMEOUT`], an idle connection to a silent host is given
/// up within both, rather than handed to a request by the pool.
pub const KEEPALIVES_IDLE: Duration = Duration::from_secs(5);

/// A connection's driver: it must be polled (spawned) for its client to work.
pub type Connection =
    tokio_postgres::Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>;

/// A database to connect to, and how.
#[derive(Clone)]
pub struct Database {
    /// Shared: a Database is cloned for each task that connects.
    config: std::sync::Arc<tokio_postgres::Config>,
    tls: MakeRustlsConnect,
    /// How connections are made, in words (no secrets), for messages.
    said: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // tokio-postgres's Config leaves the password out.
        f.debug_struct("Database")
            .field("config", &self.config)
            .field("tls", &self.said)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Reads `url` (a `postgres://` URL or a libpq connection string) and the CA file of
    /// `--database-ca-file`. The error names the flag and the rule, never the URL (it may hold
    /// a password).
    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<Self, String> {
        let invalid = |e: &dyn std::fmt::Display| {
            format!("--database-url: not a PostgreSQL connection URL or string ({e})")
        };
        let split = match dsn::split(url) {
            Ok(split) => split,
            // tokio-postgres says what is wrong with it.
            Err(()) => {
                return Err(match url.parse::<tokio_postgres::Config>() {
                    Err(e) => invalid(&tenax_core::errors::chain(&e)),
                    Ok(_) => invalid(&"it cannot be read"),
                });
            }
        };
        if let Some(key) = split.keywords.iter().find(|k| unsupported_tls(k)) {
            return Err(format!(
                "--database-url: {key} is not supported: Tenax reads sslmode and sslrootcert \
                 (no client certificates)"
            ));
        }
        let mut config: tokio_postgres::Config = split
            .rest
            .parse()
            .map_err(|e| invalid(&tenax_core::errors::chain(&e)))?;
        check_hosts(&config)?;
        let mode = split
            .sslmode
            .as_deref()
            .map(SslMode::parse)
            .transpose()
            .map_err(|e| format!("--database-url: {e}"))?;
        let roots = match (split.sslrootcert.as_deref(), ca_file) {
            (Some(_), Some(_)) => {
                return Err(
                    "--database-ca-file: the URL names its own sslrootcert; give the \
                            CA certificates once"
                        .into(),
                );
            }
            (Some("system"), None) => Roots::System,
            (Some(path), None) => Roots::File(
                CaFile::read(Path::new(path))
                    .map_err(|e| format!("--database-url: sslrootcert: {e}"))?,
            ),
            (None, Some(path)) => {
                Roots::File(CaFile::read(path).map_err(|e| format!("--database-ca-file: {e}"))?)
            }
            (None, None) => Roots::None,
        };
        let (mode, check) = Check::of(mode, roots).map_err(|e| format!("--database-url: {e}"))?;
        let tls = MakeRustlsConnect::new(
            check
                .client_config()
                .map_err(|e| format!("--database-url: {e}"))?,
        );
        config.ssl_mode(mode.negotiation());
        if !split.keywords.iter().any(|k| k == "target_session_attrs") {
            config.target_session_attrs(TargetSessionAttrs::ReadWrite);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        if !split.keywords.iter().any(|k| k == "keepalives_idle") {
            config.keepalives_idle(KEEPALIVES_IDLE);
        }
        let said = match mode {
            SslMode::Disable => "without TLS (sslmode=disable)".to_owned(),
            SslMode::Prefer => format!(
                "over TLS if the server offers it, {} (sslmode=prefer)",
                check.describe()
            ),
            mode => format!("over TLS, {} (sslmode={})", check.describe(), mode.name()),
        };
        Ok(Self {
            config: std::sync::Arc::new(config),
            tls,
            said,
        })
    }

    /// tokio-postgres's settings (the TLS mode among them).
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The TLS connector, for a pool's manager.
    pub fn tls(&self) -> MakeRustlsConnect {
        self.tls.clone()
    }

    /// How connections are made, in words: the TLS mode and what is checked.
    pub fn said(&self) -> &str {
        &self.said
    }

    /// What a refusal at connection means to the operator, when PostgreSQL refused for a reason
    /// that waiting cannot mend: no such database, a role or password it does not accept, a
    /// role without the right to connect. `None` for anything else.
    pub fn refusal(&self, error: &tokio_postgres::Error) -> Option<String> {
        let server = error.as_db_error()?;
        // libpq's defaults: the login name for the role, the role's name for the database.
        let role = self.config.get_user().unwrap_or("(your login name)");
        let database = self.config.get_dbname().unwrap_or(role);
        let code = server.code();
        let text = if *code == SqlState::INVALID_CATALOG_NAME {
            let owner = self
                .config
                .get_user()
                .map(|role| format!("--owner {role} "))
                .unwrap_or_default();
            format!(
                "PostgreSQL has no database {database:?}: create it (`createdb {owner}\
                 {database}`, docs/postgres.md, \"A role and a database\") or name another \
                 in --database-url"
            )
        } else if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            format!(
                "PostgreSQL does not accept role {role:?}: {} (check the role and password in \
                 --database-url, and pg_hba.conf; docs/postgres.md, \"A role and a \
                 database\")",
                server.message()
            )
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            format!(
                "role {role:?} may not use database {database:?}: {} (`GRANT CONNECT, CREATE \
                 ON DATABASE {database} TO {role}`; docs/postgres.md, \"A role and a \
                 database\")",
                server.message()
            )
        } else {
            return None;
        };
        Some(text)
    }

    /// Makes the database this names when its server has none of that name (a pool's, named
    /// by the operator: `CREATE DATABASE` through the server's `postgres` database, with this
    /// role, which must be allowed to create databases). True if it made it.
    pub async fn create_if_missing(&self) -> Result<bool, tokio_postgres::Error> {
        match self.connect().await {
            Ok((client, connection)) => {
                drop(client);
                drop(connection);
                return Ok(false);
            }
            Err(error)
                if error
                    .as_db_error()
                    .is_some_and(|e| *e.code() == SqlState::INVALID_CATALOG_NAME) => {}
            Err(error) => return Err(error),
        }
        let role = self.config.get_user().unwrap_or_default().to_owned();
        let name = self.config.get_dbname().unwrap_or(&role).to_owned();
        let mut maintenance = (*self.config).clone();
        maintenance.dbname("postgres");
        let (client, connection) = maintenance.connect(self.tls.clone()).await?;
        let driver = tokio::spawn(connection);
        // An identifier, not a parameter: quoted, its quotes doubled.
        let made = client
            .batch_execute(&format!(
                "CREATE DATABASE \"{}\"",
                name.replace('"', "\"\"")
            ))
            .await;
        drop(client);
        driver.abort();
        match made {
            Ok(()) => Ok(true),
            // Made meanwhile by another.
            Err(error)
                if error
                    .as_db_error()
                    .is_some_and(|e| *e.code() == SqlState::DUPLICATE_DATABASE) =>
            {
                Ok(false)
            }
            Err(error) => Err(error),
        }
    }

    /// A new connection: the client, and its driver, which the caller must spawn.
    pub async fn connect(
        &self,
    ) -> Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        self.config.connect(self.tls.clone()).await
    }
}

/// Refuses at start what tokio-postgres would refuse at every connect: with several hosts
/// (`postgres://h1:p1,h2:p2/db`, `host=h1,h2 port=p1,p2`), one port for all or one per host,
/// and as many `hostaddr`s as hosts.
fn check_hosts(config: &tokio_postgres::Config) -> Result<(), String> {
    let (hosts, addresses) = (config.get_hosts().len(), config.get_hostaddrs().len());
    if hosts > 0 && addresses > 0 && hosts != addresses {
        return Err(format!(
            "--database-url: {hosts} hosts and {addresses} hostaddrs: give one address per host"
        ));
    }
    let (hosts, ports) = (hosts.max(addresses), config.get_ports().len());
    if ports > 1 && ports != hosts {
        return Err(format!(
            "--database-url: {hosts} hosts and {ports} ports: give one port for all the hosts, \
             or one per host"
        ));
    }
    Ok(())
}

/// Whether the session of `client` still answers, within [`CONNECT_TIMEOUT`], and is on a
/// server that accepts writes. The lead's and the listener's sessions ask it now and then:
/// they make no writes of their own that a demotion would refuse.
pub async fn writable(client: &tokio_postgres::Client) -> bool {
    if client.is_closed() {
        return false;
    }
    let asked = tokio::time::timeout(CONNECT_TIMEOUT, client.simple_query(READ_ONLY.text())).await;
    let Ok(Ok(messages)) = asked else {
        return false;
    };
    messages.iter().any(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0) == Some("off"),
        _ => false,
    })
}

/// libpq's TLS keywords that Tenax does not read. tokio-postgres would call them unknown;
/// this says what is read instead.
fn unsupported_tls(keyword: &str) -> bool {
    matches!(
        keyword,
        "sslcert"
            | "sslkey"
            | "sslpassword"
            | "sslcertmode"
            | "sslcrl"
            | "sslcrldir"
            | "sslsni"
            | "sslcompression"
            | "ssl_min_protocol_version"
            | "ssl_max_protocol_version"
            | "requiressl"
    )
}

statements! {
    /// Whether the session's server refuses writes (`on` for a standby).
    READ_ONLY = "SHOW transaction_read_only";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn said(url: &str, ca_file: Option<&Path>) -> String {
        match Database::new(url, ca_file) {
            Ok(database) => database.said().to_owned(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn sslmode_and_the_cas_make_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, ca_pem()).unwrap();
        let ca_text = ca.display().to_string();
        let with_ca = |mode: &str| format!("postgres://db/t?sslmode={mode}&sslrootcert={ca_text}");

        assert_eq!(
            said("postgres://db/t?sslmode=disable", None),
            "without TLS (sslmode=disable)"
        );
        assert!(
            said("postgres://db/t", None).contains("its certificate not checked (sslmode=prefer)")
        );
        assert!(
            said("host=db sslmode=require", None)
                .contains("over TLS, its certificate not checked (sslmode=require)")
        );
        // CAs make prefer and require check the signature, as in libpq.
        for mode in ["prefer", "require", "verify-ca"] {
            let text = said(&with_ca(mode), None);
            assert!(
                text.contains(&format!(
                    "checked against the CAs of {ca_text}, not its host name"
                )),
                "{mode}: {text}"
            );
        }
        let full = said(&with_ca("verify-full"), None);
        assert!(
            full.contains("and for the host name (sslmode=verify-full)"),
            "{full}"
        );
        let flag = said("postgres://db/t?sslmode=verify-full", Some(&ca));
        assert_eq!(flag, full);
        let system = said("postgres://db/t?sslrootcert=system", None);
        assert!(
            system.contains("platform's CAs and for the host name (sslmode=verify-full)"),
            "{system}"
        );

        let refused = [
            (
                said("postgres://db/t?sslmode=verify-full", None),
                "--database-url: sslmode=verify-full checks the server's certificate against CA certificates",
            ),
            (
                said("host=db sslmode=verify-ca", None),
                "sslmode=verify-ca checks",
            ),
            (
                said("postgres://db/t?sslmode=bogus", None),
                "--database-url: sslmode must be disable, prefer, require, verify-ca or verify-full, got \"bogus\"",
            ),
            (
                said("postgres://db/t?sslmode=allow", None),
                "sslmode=allow is not supported",
            ),
            (
                said("postgres://db/t?sslmode=require&sslrootcert=system", None),
                "sslmode=require may not be used with sslrootcert=system",
            ),
            (
                said(&with_ca("require"), Some(&ca)),
                "--database-ca-file: the URL names its own sslrootcert",
            ),
            (
                said("postgres://db/t?sslrootcert=/no/such.pem", None),
                "--database-url: sslrootcert: cannot read /no/such.pem",
            ),
            (
                said("postgres://db/t", Some(Path::new("/no/such.pem"))),
                "--database-ca-file: cannot read /no/such.pem",
            ),
            (
                said("host=db sslcert=/c.pem", None),
                "--database-url: sslcert is not supported",
            ),
            (
                said("postgres://u:secret@db/t?bogus=1", None),
                "--database-url: not a PostgreSQL connection URL or string (invalid connection string: unknown option `bogus`)",
            ),
            (
                said("host=db password='secret", None),
                "--database-url: not a PostgreSQL connection URL or string",
            ),
        ];
        for (error, rule) in refused {
            assert!(error.starts_with("error: "), "{rule}: {error}");
            assert!(error.contains(rule), "{rule}: {error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }

    #[test]
    fn several_hosts_are_read_in_both_spellings() {
        use tokio_postgres::config::Host;
        let tcp = |name: &str| Host::Tcp(name.to_owned());
        for text in [
            "postgres://tenax:pw@db1:5432,db2:5433/tenax?sslmode=disable",
            "host=db1,db2 port=5432,5433 user=tenax password=pw dbname=tenax sslmode=disable",
        ] {
            let database = Database::new(text, None).unwrap_or_else(|e| panic!("{text}: {e}"));
            let config = database.config();
            assert_eq!(config.get_hosts(), [tcp("db1"), tcp("db2")], "{text}");
            assert_eq!(config.get_ports(), [5432, 5433], "{text}");
            assert_eq!(config.get_dbname(), Some("tenax"), "{text}");
            // The primary is chosen among them.
            assert_eq!(
                config.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite,
                "{text}"
            );
        }
        let one_port = Database::new("host=db1,db2,db3 port=6432 dbname=t", None).unwrap();
        assert_eq!(one_port.config().get_hosts().len(), 3);
        assert_eq!(one_port.config().get_ports(), [6432]);
        // A URL names each host's port, 5432 when it does not.
        let v6 = Database::new(
            "postgresql://[::1]:5433,db2/t?target_session_attrs=read-write",
            None,
        )
        .unwrap();
        assert_eq!(v6.config().get_hosts(), [tcp("::1"), tcp("db2")]);
        assert_eq!(v6.config().get_ports(), [5433, 5432]);
        assert_eq!(
            said("host=a,b,c port=1,2 dbname=t", None),
            "error: --database-url: 3 hosts and 2 ports: give one port for all the hosts, or \
             one per host"
        );
        assert_eq!(
            said("host=a,b hostaddr=10.0.0.1 dbname=t", None),
            "error: --database-url: 2 hosts and 1 hostaddrs: give one address per host"
        );
    }

    #[test]
    fn connections_want_a_writable_server_and_a_timeout() {
        let database = Database::new("postgres://db/t", None).unwrap();
        assert_eq!(
            database.config().get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(
            database.config().get_connect_timeout(),
            Some(&CONNECT_TIMEOUT)
        );
        assert_eq!(
            database.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
        assert_eq!(
            database.config().get_tcp_user_timeout(),
            Some(&TCP_USER_TIMEOUT)
        );
        assert!(database.config().get_keepalives());
        assert_eq!(database.config().get_keepalives_idle(), KEEPALIVES_IDLE);
        let own = Database::new("host=db target_session_attrs=any connect_timeout=9 tcp_user_timeout=30 keepalives_idle=60 sslmode=verify-full sslrootcert=system", None).unwrap();
        assert_eq!(
            own.config().get_tcp_user_timeout(),
            Some(&Duration::from_secs(30))
        );
        assert_eq!(own.config().get_keepalives_idle(), Duration::from_secs(60));
        assert_eq!(
            own.config().get_target_session_attrs(),
            TargetSessionAttrs::Any
        );
        assert_eq!(
            own.config().get_connect_timeout(),
            Some(&Duration::from_secs(9))
        );
        assert_eq!(
            own.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }
}
