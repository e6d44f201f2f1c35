//! `tenax serve` configuration: one source of truth, from flags and their `TENAX_…`
//! environment twins, validated before anything starts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tenax_core::metrics::commits::CommitMetrics;
use tenax_core::store::CommitObserver;
use tenax_embedded::EmbeddedOptions;
use tenax_net::trust::CaFile;
use tenax_policy::spelling::native;
use tenax_policy::{Jitter, RetryPolicy, Shape, parse_duration, polynomial::Polynomial};

use crate::delivery::backpressure::BreakerSettings;
use crate::delivery::{DeliveryConfig, default_delivery_policy};
use crate::serve::TlsFiles;
use crate::storage::StoreConfig;

/// Flags of `tenax serve`. Durations are milliseconds or a number with a unit (`12.5s`, `5m`).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TENAX_LISTEN", default_value = "127.0.0.1:7890")]
    pub listen: SocketAddr,
    /// Directory of the embedded store (created if missing).
    #[arg(long, env = "TENAX_DATA_DIR", default_value = "./tenax-data")]
    pub data_dir: PathBuf,
    /// Keep everything in PostgreSQL instead of the embedded store, so that any number of
    /// servers can share it (docs/postgres.md): a `postgres://` URL or a libpq connection
    /// string. The schema is created or migrated at start.
    #[arg(long, env = "TENAX_DATABASE_URL")]
    pub database_url: Option<String>,
    /// A PEM file of CA certificates that the database's TLS certificate must be signed by
    /// (libpq's `sslrootcert`, which the URL may name instead); `sslmode` in the URL says what
    /// is checked.
    #[arg(long, env = "TENAX_DATABASE_CA_FILE", requires = "database_url")]
    pub database_ca_file: Option<PathBuf>,
    /// Connections this server keeps open to PostgreSQL.
    #[arg(long, env = "TENAX_DATABASE_POOL", default_value_t = 16)]
    pub database_pool: usize,
    /// Hear of other servers' changes by looking again this often, instead of LISTEN/NOTIFY
    /// (which does not pass through a pooler in transaction mode). Without it, servers are
    /// woken by notifications, and poll every second only while their listener is down.
    #[arg(long, env = "TENAX_DATABASE_POLL", value_parser = duration_flag)]
    pub database_poll: Option<u64>,
    /// How long to keep trying to reach PostgreSQL at start (it may be starting, failing over,
    /// or cut off for a moment) before giving up; `0s` gives up at once. A refusal that trying
    /// again cannot mend (a password, a certificate, a newer schema) ends the start at once.
    #[arg(long, env = "TENAX_DATABASE_WAIT", value_parser = duration_flag, default_value = "60s")]
    pub database_wait: u64,
    /// `sync`: acknowledge a change only once it is on disk (group commit shares each fsync).
    /// `relaxed`: acknowledge at once and sync at most 500 ms later; any crash (even of the
    /// process alone) may lose the changes of those last 500 ms.
    #[arg(long, env = "TENAX_DURABILITY", value_enum, default_value_t = Durability::Sync)]
    pub durability: Durability,
    /// Retries allowed by the server-wide default policy.
    #[arg(long, env = "TENAX_DEFAULT_RETRY_LIMIT")]
    pub default_retry_limit: Option<u32>,
    /// Base delay of the default polynomial policy (with exponent and jitter).
    #[arg(long, env = "TENAX_DEFAULT_BACKOFF_BASE", value_parser = duration_flag)]
    pub default_backoff_base: Option<u64>,
    /// Exponent of the default polynomial policy (with base and jitter).
    #[arg(long, env = "TENAX_DEFAULT_BACKOFF_EXPONENT")]
    pub default_backoff_exponent: Option<f64>,
    /// Jitter of the default polynomial policy (with base and exponent).
    #[arg(long, env = "TENAX_DEFAULT_BACKOFF_JITTER", value_parser = duration_flag)]
    pub default_backoff_jitter: Option<u64>,
    /// Any other default policy, in the native JSON spelling (see docs/policies.md).
    #[arg(long, env = "TENAX_DEFAULT_POLICY")]
    pub default_policy: Option<String>,
    /// Lease given to a taken job when the worker does not ask for one.
    #[arg(long, env = "TENAX_DEFAULT_LEASE", value_parser = duration_flag, default_value = "30s")]
    pub default_lease: u64,
    /// The longest lease a worker may ask for.
    #[arg(long, env = "TENAX_MAX_LEASE", value_parser = duration_flag, default_value = "12h")]
    pub max_lease: u64,
    /// The longest heartbeats may keep one attempt of a job leased, from its take: a heartbeat
    /// never extends the lease past it, and the job is then handled as any expired lease.
    #[arg(long, env = "TENAX_MAX_ATTEMPT_TIME", value_parser = duration_flag, default_value = "24h")]
    pub max_attempt_time: u64,
    /// How long completed jobs are kept before they are purged (0 purges at once).
    #[arg(long, env = "TENAX_COMPLETED_RETENTION", value_parser = duration_flag, default_value = "1d")]
    pub completed_retention: u64,
    /// How long dead and cancelled jobs are kept before they are purged.
    #[arg(long, env = "TENAX_DEAD_RETENTION", value_parser = duration_flag, default_value = "30d")]
    pub dead_retention: u64,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "TENAX_MAX_REQUEST_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_request_bytes: usize,
    /// Largest job payload accepted, in bytes.
    #[arg(long, env = "TENAX_MAX_PAYLOAD_BYTES", default_value_t = 1024 * 1024)]
    pub max_payload_bytes: usize,
    /// Page cache of the embedded store, in MiB.
    #[arg(long, env = "TENAX_CACHE_MB", default_value_t = tenax_embedded::DEFAULT_CACHE_MB)]
    pub cache_mb: usize,
    /// The policy of deliveries whose subscription and queue name none, in any spelling
    /// (native, SNS `DeliveryPolicy`, Zaqar `_retry_policy`). Default: retries after 5 s, 5 m,
    /// 30 m, 2 h, 5 h, 10 h and 10 h (about 28 hours), each ±10 %.
    #[arg(long, env = "TENAX_DEFAULT_DELIVERY_POLICY")]
    pub default_delivery_policy: Option<String>,
    /// Allow webhook endpoints that resolve to loopback, private, link-local or other
    /// non-global addresses. Off by default: a subscription must not reach the internal network.
    #[arg(long, env = "TENAX_ALLOW_PRIVATE_ENDPOINTS")]
    pub allow_private_endpoints: bool,
    /// How long a webhook request may take before it counts as a failed attempt.
    #[arg(long, env = "TENAX_DELIVERY_TIMEOUT", value_parser = duration_flag, default_value = "15s")]
    pub delivery_timeout: u64,
    /// Most webhook requests in flight to one endpoint (scheme, host and port) at once.
    #[arg(long, env = "TENAX_DELIVERY_CONCURRENCY", default_value_t = 32)]
    pub delivery_concurrency: u32,
    /// Disable a subscription whose endpoint has failed for this long without one success
    /// (0: never). A subscription may set its own.
    #[arg(long, env = "TENAX_DELIVERY_AUTO_DISABLE_AFTER", value_parser = duration_flag, default_value = "5d")]
    pub delivery_auto_disable_after: u64,
    /// Failed webhook requests in a row (no answer, 5xx, 408, 429 without Retry-After) that
    /// open an endpoint's circuit breaker: no delivery is sent to it for a cool-down, then one
    /// probe. 0: no breaker.
    #[arg(long, env = "TENAX_DELIVERY_BREAKER_FAILURES", default_value_t = 10)]
    pub delivery_breaker_failures: u32,
    /// How long an endpoint's circuit breaker stays open before a probe; each failed probe
    /// doubles it, up to --delivery-breaker-max-cooldown.
    #[arg(long, env = "TENAX_DELIVERY_BREAKER_COOLDOWN", value_parser = duration_flag, default_value = "30s")]
    pub delivery_breaker_cooldown: u64,
    /// The longest an endpoint's circuit breaker stays open before a probe.
    #[arg(long, env = "TENAX_DELIVERY_BREAKER_MAX_COOLDOWN", value_parser = duration_flag, default_value = "10m")]
    pub delivery_breaker_max_cooldown: u64,
    /// How long a new connection may take to send its first request's line and headers (TLS
    /// handshake included), counted from accept; on HTTP/1.1, also how long a later request's
    /// head may take once it has begun.
    #[arg(long, env = "TENAX_HEADER_READ_TIMEOUT", value_parser = duration_flag, default_value = "30s")]
    pub header_read_timeout: u64,
    /// How long a connection with no request in flight stays open (HTTP/1.1 keep-alive
    /// between requests, HTTP/2 without an open stream); also how long a response may wait for
    /// the client to read any of it. Long polls and streams are in flight, never idle.
    #[arg(long, env = "TENAX_IDLE_TIMEOUT", value_parser = duration_flag, default_value = "60s")]
    pub idle_timeout: u64,
    /// How long a client may take to send a request's body once its headers are in; a slower
    /// one is answered 408.
    #[arg(long, env = "TENAX_REQUEST_TIMEOUT", value_parser = duration_flag, default_value = "30s")]
    pub request_timeout: u64,
    /// Most connections open at once. Past it, a new connection takes the place of a silent or
    /// idle one; when every one has a request in flight, new ones wait to be accepted. Each
    /// takes a file descriptor.
    #[arg(long, env = "TENAX_MAX_CONNECTIONS", default_value_t = 4096)]
    pub max_connections: usize,
    /// Most connections open at once from one client address (an IPv4 address, or an IPv6
    /// /64). Default: half of --max-connections. Behind a reverse proxy every connection comes
    /// from the proxy: raise it to --max-connections there.
    #[arg(long, env = "TENAX_MAX_CONNECTIONS_PER_ADDRESS")]
    pub max_connections_per_address: Option<usize>,
    /// A PEM file of CA certificates that https endpoints may be signed by, trusted in addition
    /// to the platform's root certificates (for endpoints with a private CA).
    #[arg(long, env = "TENAX_DELIVERY_CA_FILE")]
    pub delivery_ca_file: Option<PathBuf>,
    /// An HTTP proxy that webhook deliveries go through (http:// or https://). The address
    /// checks still judge every endpoint first. Proxies named by HTTP_PROXY and the like in
    /// the environment are never used for deliveries.
    #[arg(long, env = "TENAX_DELIVERY_PROXY")]
    pub delivery_proxy: Option<String>,
    /// The SMTP server that Zaqar's `mailto:` subscribers are mailed through:
    /// `smtp://user:password@host:port` (plain; `?tls=required` for STARTTLS) or `smtps://...`
    /// (TLS). Without it, `mailto:` subscriptions are refused. It is the operator's: the
    /// address rules of webhook endpoints do not apply to it.
    #[arg(long, env = "TENAX_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<String>,
    /// Whether requests need an API token. `auto`: yes unless the server listens on a loopback
    /// address only. `off` is refused on any other address.
    #[arg(long, env = "TENAX_AUTH", value_enum, default_value_t = AuthFlag::Auto)]
    pub auth: AuthFlag,
    /// An admin token accepted besides the stored ones (at least 32 characters). Without it,
    /// the first start with authentication on makes one and writes it to `admin-token` in the
    /// data directory (mode 0600).
    #[arg(long, env = "TENAX_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// The key file that seals webhook secrets and header values in the store (docs/security.md):
    /// one key per line, the first sealing (`tenax secrets generate-key` makes one). Required
    /// with --database-url, the same file on every server. Without it, the embedded store uses
    /// `secrets.key` in the data directory, made at the first start.
    #[arg(long, env = "TENAX_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// The key that signs Zaqar's pre-signed URLs (`POST /v2/queues/{name}/share`), as Zaqar's
    /// `[signed_url] secret_key`: give every server that shares a store the same one. Without
    /// it, a key derived from the secrets key (--secrets-key-file, or the embedded store's
    /// `secrets.key`) signs them, so rotating that key voids the URLs signed before.
    #[arg(long, env = "TENAX_ZAQAR_SIGNING_KEY", hide_env_values = true)]
    pub zaqar_signing_key: Option<String>,
    /// Also serve Zaqar's websocket on this address (as Zaqar's own port 9000), with the API's
    /// TLS, tokens and connection limits. The API's listener serves it at `/` either way.
    #[arg(long, env = "TENAX_ZAQAR_WEBSOCKET_LISTEN")]
    pub zaqar_websocket_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub zaqar_limits: crate::api::zaqar::limits::Limits,
    /// Zaqar's `[notification] require_confirmation`: a subscription made through `/v2` is
    /// sent a confirmation notice carrying a pre-signed confirm URL, and no message until its
    /// subscriber confirms it (`PUT .../subscriptions/{id}/confirm {"confirmed": true}`).
    #[arg(long, env = "TENAX_ZAQAR_REQUIRE_CONFIRMATION")]
    pub zaqar_require_confirmation: bool,
    /// The TLS certificate chain (PEM) of the API: with `--tls-key`, the server speaks HTTPS
    /// (HTTP/1.1 and HTTP/2 by ALPN).
    #[arg(long, env = "TENAX_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM) matching `--tls-cert`.
    #[arg(long, env = "TENAX_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Host names the server answers to besides IP addresses and `localhost`, comma-separated
    /// (queue.example.com). A server that needs no token checks `Host` always (against DNS
    /// rebinding); one that needs tokens, only when this is given.
    #[arg(long, env = "TENAX_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Origins of web pages (other than the server's own) that may send requests from a
    /// browser, comma-separated (https://app.example.com); they get CORS answers.
    #[arg(long, env = "TENAX_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// Log format.
    #[arg(long, env = "TENAX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log one line per request at info (method, route, status, latency, request id).
    #[arg(long, env = "TENAX_LOG_REQUESTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub log_requests: bool,
    /// Also serve `GET /metrics` on this address, without tokens, for scrapers on a private
    /// network. The API's listener serves it either way, to tokens that may read metrics.
    #[arg(long, env = "TENAX_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// How many distinct queues, job types and subscriptions (each) get series of their own in
    /// the metrics; the rest are counted under `(other)`.
    #[arg(long, env = "TENAX_METRICS_LABEL_LIMIT", default_value_t = tenax_core::metrics::DEFAULT_LABEL_LIMIT)]
    pub metrics_label_limit: usize,
    /// Export spans (requests, and enqueue, take, complete, fail and delivery attempts of each
    /// job, in the job's trace) by OTLP over HTTP to this receiver's base URL
    /// (`http://collector:4318`; spans go to its `/v1/traces`). Off when not given.
    #[arg(long, env = "TENAX_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    Sync,
    Relaxed,
}

/// As the flag spells it.
impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sync => "sync",
            Self::Relaxed => "relaxed",
        })
    }
}

/// `--auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthFlag {
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl ServeArgs {
    /// The secrets key file's keys, if `--secrets-key-file` names one.
    fn secrets(&self) -> Result<Option<std::sync::Arc<tenax_core::secrets::Keyring>>, String> {
        let Some(path) = &self.secrets_key_file else {
            return Ok(None);
        };
        let keys = tenax_core::secrets::Keyring::read_file(path)
            .map_err(|e| format!("--secrets-key-file: {e}"))?;
        Ok(Some(std::sync::Arc::new(keys)))
    }

    /// The PostgreSQL store's options, if `--database-url` asks for it.
    fn database_options(
        &self,
        secrets: Option<&std::sync::Arc<tenax_core::secrets::Keyring>>,
    ) -> Result<Option<tenax_postgres::PostgresOptions>, String> {
        let Some(url) = &self.database_url else {
            return Ok(None);
        };
        // Servers sharing a database must share the key; a data directory is each server's own.
        let secrets = secrets.cloned().ok_or(
            "--secrets-key-file: required with --database-url, the same file on every server \
             sharing the database (`tenax secrets generate-key PATH` makes one; \
             docs/security.md)",
        )?;
        // The URL may hold a password: the message says why without repeating it.
        let database = tenax_postgres::Database::new(url, self.database_ca_file.as_deref())?;
        if self.database_pool < 2 {
            return Err("--database-pool: must be at least 2".into());
        }
        if self.database_poll == Some(0) {
            return Err("--database-poll: must be longer than 0".into());
        }
        let mut options = tenax_postgres::PostgresOptions::new(database, secrets);
        options.ca_file.clone_from(&self.database_ca_file);
        options.pool_size = self.database_pool;
        options.start_wait = std::time::Duration::from_millis(self.database_wait);
        if let Some(every) = self.database_poll {
            options.listening.listen = false;
            options.listening.poll_interval = std::time::Duration::from_millis(every);
        }
        Ok(Some(options))
    }
}

fn duration_flag(text: &str) -> Result<u64, String> {
    parse_duration("duration", text).map_err(|e| e.rule)
}

/// The validated configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// PostgreSQL instead of the embedded store in `data_dir`.
    pub database: Option<tenax_postgres::PostgresOptions>,
    pub durability: Durability,
    pub default_policy: RetryPolicy,
    pub default_lease_ms: u64,
    pub max_lease_ms: u64,
    pub max_attempt_ms: u64,
    pub completed_retention_ms: u64,
    pub dead_retention_ms: u64,
    pub max_request_bytes: usize,
    pub max_payload_bytes: usize,
    pub cache_bytes: usize,
    pub header_read_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub request_timeout_ms: u64,
    pub max_connections: usize,
    pub max_connections_per_address: usize,
    /// Whether requests need an API token.
    pub auth: bool,
    /// An admin token accepted besides the stored ones.
    pub admin_token: Option<String>,
    /// The keys of `--secrets-key-file`; `None`: the embedded store's own key file.
    pub secrets: Option<std::sync::Arc<tenax_core::secrets::Keyring>>,
    /// Where `secrets` were read from.
    pub secrets_key_file: Option<PathBuf>,
    /// `--zaqar-signing-key`; `None`: a key derived from the secrets key.
    pub zaqar_signing_key: Option<String>,
    /// A second listener serving only Zaqar's websocket.
    pub zaqar_websocket_listen: Option<SocketAddr>,
    /// Zaqar's transport limits (`--zaqar-max-…`).
    pub zaqar_limits: crate::api::zaqar::limits::Limits,
    /// `--zaqar-require-confirmation`.
    pub zaqar_require_confirmation: bool,
    /// The API's TLS certificate and key files, when it speaks HTTPS.
    pub tls: Option<TlsFiles>,
    pub delivery: DeliveryConfig,
    /// Log one line per request.
    pub log_requests: bool,
    /// A second listener serving only `/metrics`, without tokens.
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_label_limit: usize,
    /// The OTLP/HTTP receiver spans are exported to, if any.
    pub otlp_endpoint: Option<url::Url>,
    /// Host names accepted besides IP addresses and `localhost` (`--allowed-hosts`).
    pub allowed_hosts: Vec<String>,
    /// Foreign origins that browsers may send requests from (`--cors-origins`).
    pub cors_origins: Vec<String>,
}

/// How long after the delivery timeout a half-open breaker's probe counts as lost.
const PROBE_MARGIN_MS: u64 = 5_000;

impl ServeArgs {
    /// Checks every rule that spans flags; the message names the flags.
    pub fn validate(&self) -> Result<Config, String> {
        let backoff = (
            self.default_backoff_base,
            self.default_backoff_exponent,
            self.default_backoff_jitter,
        );
        let mut policy = match (backoff, &self.default_policy) {
            ((None, None, None), None) => RetryPolicy::default(),
            ((None, None, None), Some(json)) => {
                let value: serde_json::Value = serde_json::from_str(json)
                    .map_err(|e| format!("--default-policy: not valid JSON: {e}"))?;
                native::parse(&value).map_err(|e| format!("--default-policy: {e}"))?
            }
            ((Some(base_ms), Some(exponent), Some(jitter_ms)), None) => {
                if !exponent.is_finite() || exponent < 0.0 {
                    return Err(format!(
                        "--default-backoff-exponent: must be a finite number at least 0, got {exponent}"
                    ));
                }
                RetryPolicy::new(Shape::Polynomial(Polynomial { base_ms, exponent })).with_jitter(
                    Jitter::Additive {
                        amount_ms: jitter_ms,
                    },
                )
            }
            (_, Some(_)) => {
                return Err(
                    "--default-policy cannot be combined with --default-backoff-base, \
                            --default-backoff-exponent or --default-backoff-jitter"
                        .into(),
                );
            }
            ((base, exponent, jitter), None) => {
                let missing: Vec<&str> = [
                    (base.is_none(), "--default-backoff-base"),
                    (exponent.is_none(), "--default-backoff-exponent"),
                    (jitter.is_none(), "--default-backoff-jitter"),
                ]
                .into_iter()
                .filter_map(|(missing, name)| missing.then_some(name))
                .collect();
                return Err(format!(
                    "the backoff formula needs base, exponent and jitter together: also give {}",
                    missing.join(" and ")
                ));
            }
        };
        if let Some(limit) = self.default_retry_limit {
            if limit > tenax_policy::MAX_RETRY_LIMIT {
                return Err(format!(
                    "--default-retry-limit: must be at most {}, got {limit}",
                    tenax_policy::MAX_RETRY_LIMIT
                ));
            }
            policy = policy.with_retry_limit(limit);
        }
        if self.default_lease == 0 || self.default_lease > self.max_lease {
            return Err(format!(
                "--default-lease: must be above 0 and at most --max-lease ({} ms), got {} ms",
                self.max_lease, self.default_lease
            ));
        }
        if self.max_attempt_time < self.max_lease {
            return Err(format!(
                "--max-attempt-time: must be at least --max-lease ({} ms), got {} ms",
                self.max_lease, self.max_attempt_time
            ));
        }
        let delivery_policy = match &self.default_delivery_policy {
            None => default_delivery_policy(),
            Some(json) => tenax_policy::spelling::parse_policy_str(json)
                .map(|parsed| parsed.retry)
                .map_err(|e| format!("--default-delivery-policy: {e}"))?,
        };
        if self.delivery_timeout == 0 {
            return Err("--delivery-timeout: must be above 0".into());
        }
        if self.delivery_breaker_failures > 0 && self.delivery_breaker_cooldown == 0 {
            return Err(
                "--delivery-breaker-cooldown: must be above 0 (or turn the breaker off \
                        with --delivery-breaker-failures 0)"
                    .into(),
            );
        }
        if self.delivery_breaker_max_cooldown < self.delivery_breaker_cooldown {
            return Err(format!(
                "--delivery-breaker-max-cooldown: must be at least --delivery-breaker-cooldown \
                 ({} ms), got {} ms",
                self.delivery_breaker_cooldown, self.delivery_breaker_max_cooldown
            ));
        }
        if self.delivery_concurrency == 0 {
            return Err("--delivery-concurrency: must be at least 1".into());
        }
        for (flag, ms) in [
            ("--header-read-timeout", self.header_read_timeout),
            ("--idle-timeout", self.idle_timeout),
            ("--request-timeout", self.request_timeout),
        ] {
            if ms == 0 {
                return Err(format!("{flag}: must be above 0"));
            }
        }
        let loopback = self.listen.ip().is_loopback();
        let auth = match self.auth {
            AuthFlag::On => true,
            AuthFlag::Auto => !loopback,
            AuthFlag::Off if loopback => false,
            AuthFlag::Off => {
                return Err(format!(
                    "--auth off: refused on {}, which is not a loopback address: anyone who can \
                     reach it could read and change every job. Leave --auth at auto (tokens \
                     required there), or listen on 127.0.0.1",
                    self.listen
                ));
            }
        };
        if let Some(token) = &self.admin_token {
            tenax_core::auth::token::check_given(token)
                .map_err(|rule| format!("--admin-token: {rule}"))?;
        }
        if self
            .zaqar_signing_key
            .as_ref()
            .is_some_and(|k| k.trim().is_empty())
        {
            return Err("--zaqar-signing-key: must not be empty".into());
        }
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(read_tls(cert, key)?),
            _ => None,
        };
        if self.max_connections == 0 {
            return Err("--max-connections: must be at least 1".into());
        }
        let max_connections_per_address = match self.max_connections_per_address {
            None => (self.max_connections / 2).max(1),
            Some(0) => return Err("--max-connections-per-address: must be at least 1".into()),
            Some(n) if n > self.max_connections => {
                return Err(format!(
                    "--max-connections-per-address: must be at most --max-connections ({}), \
                     got {n}",
                    self.max_connections
                ));
            }
            Some(n) => n,
        };
        if self.max_request_bytes < 1024 {
            return Err("--max-request-bytes: must be at least 1024".into());
        }
        let ca_file = self
            .delivery_ca_file
            .as_deref()
            .map(CaFile::read)
            .transpose()
            .map_err(|e| format!("--delivery-ca-file: {e}"))?;
        let proxy = self
            .delivery_proxy
            .as_deref()
            .map(delivery_proxy)
            .transpose()?;
        let smtp = self
            .smtp_url
            .as_deref()
            .map(crate::delivery::mailto::SmtpUrl::parse)
            .transpose()
            .map_err(|e| format!("--smtp-url: {e}"))?;
        let secrets = self.secrets()?;
        let database = self.database_options(secrets.as_ref())?;
        if self.metrics_label_limit == 0 {
            return Err("--metrics-label-limit: must be at least 1".into());
        }
        if let Some(at) = self.zaqar_websocket_listen
            && (at == self.listen || Some(at) == self.metrics_listen)
        {
            return Err(format!(
                "--zaqar-websocket-listen: must differ from --listen and --metrics-listen ({at})"
            ));
        }
        if self.metrics_listen == Some(self.listen) {
            return Err(format!(
                "--metrics-listen: must differ from --listen ({})",
                self.listen
            ));
        }
        let otlp_endpoint = self
            .otlp_endpoint
            .as_deref()
            .map(otlp_endpoint)
            .transpose()?;
        let allowed_hosts = self
            .allowed_hosts
            .iter()
            .filter(|h| !h.trim().is_empty())
            .map(|h| crate::api::browser::allowed_host(h))
            .collect::<Result<Vec<_>, _>>()?;
        let cors_origins = self
            .cors_origins
            .iter()
            .filter(|o| !o.trim().is_empty())
            .map(|o| crate::api::browser::cors_origin(o))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Config {
            listen: self.listen,
            data_dir: self.data_dir.clone(),
            database,
            durability: self.durability,
            default_policy: policy,
            default_lease_ms: self.default_lease,
            max_lease_ms: self.max_lease,
            max_attempt_ms: self.max_attempt_time,
            completed_retention_ms: self.completed_retention,
            dead_retention_ms: self.dead_retention,
            max_request_bytes: self.max_request_bytes,
            max_payload_bytes: self.max_payload_bytes.min(self.max_request_bytes),
            cache_bytes: self.cache_mb.saturating_mul(1024 * 1024),
            header_read_timeout_ms: self.header_read_timeout,
            idle_timeout_ms: self.idle_timeout,
            request_timeout_ms: self.request_timeout,
            max_connections: self.max_connections,
            max_connections_per_address,
            auth,
            admin_token: self.admin_token.clone(),
            secrets,
            secrets_key_file: self.secrets_key_file.clone(),
            zaqar_signing_key: self.zaqar_signing_key.clone(),
            zaqar_websocket_listen: self.zaqar_websocket_listen,
            zaqar_limits: self.zaqar_limits.check()?,
            zaqar_require_confirmation: self.zaqar_require_confirmation,
            tls,
            delivery: DeliveryConfig {
                default_policy: delivery_policy,
                allow_private_endpoints: self.allow_private_endpoints,
                timeout_ms: self.delivery_timeout,
                concurrency_per_endpoint: self.delivery_concurrency,
                auto_disable_after_ms: self.delivery_auto_disable_after,
                ca_file,
                breaker: BreakerSettings {
                    failures: self.delivery_breaker_failures,
                    cooldown_ms: self.delivery_breaker_cooldown,
                    max_cooldown_ms: self.delivery_breaker_max_cooldown,
                    // A probe answers within the delivery timeout; past it and a margin, its
                    // server is gone and another may probe.
                    probe_ms: self.delivery_timeout.saturating_add(PROBE_MARGIN_MS),
                },
                proxy,
                smtp,
            },
            log_requests: self.log_requests,
            metrics_listen: self.metrics_listen,
            metrics_label_limit: self.metrics_label_limit,
            otlp_endpoint,
            allowed_hosts,
            cors_origins,
        })
    }
}

/// Checks `--delivery-proxy`: an http or https URL of a host, without a path.
fn delivery_proxy(text: &str) -> Result<url::Url, String> {
    const RULE: &str =
        "must be the http:// or https:// URL of an HTTP proxy, such as http://proxy.internal:3128";
    let url = url::Url::parse(text).map_err(|e| format!("--delivery-proxy: {RULE} ({e})"))?;
    if !matches!(url.scheme(), "http" | "https")
        || url.host().is_none()
        || !matches!(url.path(), "" | "/")
        || url.query().is_some()
    {
        return Err(format!("--delivery-proxy: {RULE}, got {text:?}"));
    }
    Ok(url)
}

/// Checks `--otlp-endpoint`: an http or https URL without a query or fragment.
fn otlp_endpoint(text: &str) -> Result<url::Url, String> {
    const RULE: &str = "must be the http:// or https:// base URL of an OTLP/HTTP receiver, such as http://127.0.0.1:4318";
    let url = url::Url::parse(text).map_err(|e| format!("--otlp-endpoint: {RULE} ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("--otlp-endpoint: {RULE}"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "--otlp-endpoint: {RULE}, without a query or fragment"
        ));
    }
    Ok(url)
}

/// Reads and checks the API's certificate chain and key, naming the flag at fault.
fn read_tls(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsFiles, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--tls-cert: cannot read {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| {
            format!(
                "--tls-cert: {} is not PEM certificates: {e}",
                cert.display()
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert: {} holds no PEM certificate",
            cert.display()
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "--tls-key: {} holds no usable PEM private key: {e}",
            key.display()
        )
    })?;
    // The pair must make a server configuration; checked here so a mismatch stops the start.
    tenax_net::http::install_crypto_provider();
    rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs.clone(), private.clone_key())
        .map_err(|e| format!("--tls-key: does not fit --tls-cert: {e}"))?;
    Ok(TlsFiles {
        cert_path: cert.to_owned(),
        certs,
        key: std::sync::Arc::new(private),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn config(flags: &[&str]) -> Result<Config, String> {
        let mut argv = vec!["tenax"];
        argv.extend_from_slice(flags);
        Wrapper::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .args
            .validate()
    }

    #[test]
    fn defaults_are_the_polynomial_policy() {
        let config = config(&[]).unwrap();
        assert_eq!(config.default_policy, RetryPolicy::default());
        assert_eq!(config.default_lease_ms, 30_000);
        assert_eq!(config.durability, Durability::Sync);
    }

    #[test]
    fn backoff_flags_only_together() {
        let err = config(&["--default-backoff-base", "10s"]).unwrap_err();
        assert!(
            err.contains("--default-backoff-exponent and --default-backoff-jitter"),
            "{err}"
        );
        let ok = config(&[
            "--default-backoff-base",
            "1.5s",
            "--default-backoff-exponent",
            "2",
            "--default-backoff-jitter",
            "250",
            "--default-retry-limit",
            "5",
        ])
        .unwrap();
        assert_eq!(ok.default_policy.retry_limit, 5);
        assert_eq!(ok.default_policy.delay_ms(2), 1_500 + 4_000);
        let err = config(&["--default-backoff-base", "50000d"]).unwrap_err();
        assert!(err.contains("100 years"), "{err}");
    }

    /// A self-signed CA certificate, PEM.
    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn delivery_ca_file_holds_pem_certificates() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, contents: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, contents).unwrap();
            path.display().to_string()
        };
        assert!(config(&[]).unwrap().delivery.ca_file.is_none());

        let two = file("two.pem", format!("{}\n{}", ca_pem(), ca_pem()).as_bytes());
        let ok = config(&["--delivery-ca-file", &two]).unwrap();
        let ca_file = ok.delivery.ca_file.unwrap();
        assert_eq!(ca_file.certificates.len(), 2);
        assert_eq!(ca_file.path.display().to_string(), two);

        let missing = dir.path().join("missing.pem").display().to_string();
        let cases = [
            (missing.clone(), "cannot read"),
            (file("empty.pem", b""), "holds no PEM certificate"),
            (
                file("text.pem", b"not a certificate\n"),
                "holds no PEM certificate",
            ),
            (
                file("der.pem", &[0x30, 0x82, 0x01, 0x0a, 0xff]),
                "holds no PEM certificate",
            ),
            (
                file(
                    "key.pem",
                    rcgen::KeyPair::generate()
                        .unwrap()
                        .serialize_pem()
                        .as_bytes(),
                ),
                "holds no PEM certificate",
            ),
            (
                file(
                    "garbage.pem",
                    b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                ),
                "certificate 1 is not a usable CA certificate",
            ),
        ];
        for (path, rule) in cases {
            let err = config(&["--delivery-ca-file", &path]).unwrap_err();
            assert!(err.starts_with("--delivery-ca-file: "), "{path}: {err}");
            assert!(err.contains(rule), "{path}: {err}");
            assert!(err.contains(&path), "{path}: {err}");
        }
    }

    #[test]
    fn authentication_is_on_beyond_loopback_and_cannot_be_turned_off_there() {
        assert!(!config(&[]).unwrap().auth, "loopback: off by default");
        assert!(config(&["--auth", "on"]).unwrap().auth);
        for listen in ["0.0.0.0:7890", "192.168.1.10:7890", "[::]:7890"] {
            assert!(config(&["--listen", listen]).unwrap().auth, "{listen}");
            let refused = config(&["--listen", listen, "--auth", "off"]).unwrap_err();
            assert!(refused.starts_with("--auth off: refused on"), "{refused}");
        }
        assert!(
            !config(&["--listen", "127.0.0.2:7890", "--auth", "off"])
                .unwrap()
                .auth
        );
        assert!(!config(&["--listen", "[::1]:7890"]).unwrap().auth);
        let weak = config(&["--admin-token", "short"]).unwrap_err();
        assert!(
            weak.starts_with("--admin-token: must be at least 32"),
            "{weak}"
        );
    }

    #[test]
    fn the_secrets_key_file_is_read_at_start_and_required_on_postgres() {
        let url = "postgres://tenax@127.0.0.1/tenax";
        let missing = config(&["--database-url", url]).unwrap_err();
        assert!(
            missing.starts_with("--secrets-key-file: required with --database-url"),
            "{missing}"
        );
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent.key");
        let absent = absent.to_str().unwrap();
        let unreadable = config(&["--secrets-key-file", absent]).unwrap_err();
        assert!(
            unreadable.starts_with(&format!("--secrets-key-file: cannot read {absent}")),
            "{unreadable}"
        );
        let bad = dir.path().join("bad.key");
        std::fs::write(&bad, "not a key\n").unwrap();
        let bad = config(&["--secrets-key-file", bad.to_str().unwrap()]).unwrap_err();
        assert!(bad.contains("line 1 is not a key"), "{bad}");
        let good = dir.path().join("good.key");
        let keys = tenax_core::secrets::Keyring::generate("t").unwrap();
        keys.write_file(&good).unwrap();
        let good = good.to_str().unwrap();
        let on_postgres = config(&["--database-url", url, "--secrets-key-file", good]).unwrap();
        let held = on_postgres.database.unwrap().secrets;
        assert_eq!(held.current().id(), keys.current().id());
        assert!(
            config(&["--secrets-key-file", good])
                .unwrap()
                .secrets
                .is_some()
        );
        assert!(config(&[]).unwrap().secrets.is_none());
    }

    #[test]
    fn tls_files_are_checked_at_start() {
        let missing =
            config(&["--tls-cert", "/no/such.crt", "--tls-key", "/no/such.key"]).unwrap_err();
        assert!(missing.starts_with("--tls-cert: cannot read"), "{missing}");
        let half = config(&["--tls-cert", "/no/such.crt"]).unwrap_err();
        assert!(half.contains("--tls-key"), "{half}");
    }

    #[test]
    fn connection_flags() {
        let defaults = config(&[]).unwrap();
        assert_eq!(defaults.idle_timeout_ms, 60_000);
        assert_eq!(defaults.max_connections_per_address, 2048);
        let small = config(&["--max-connections", "1"]).unwrap();
        assert_eq!(small.max_connections_per_address, 1);
        let set = config(&[
            "--max-connections",
            "20",
            "--max-connections-per-address",
            "20",
            "--idle-timeout",
            "2m",
        ])
        .unwrap();
        assert_eq!(set.max_connections_per_address, 20);
        assert_eq!(set.idle_timeout_ms, 120_000);
        for (flags, rule) in [
            (
                &["--max-connections-per-address", "0"][..],
                "--max-connections-per-address: must be at least 1",
            ),
            (
                &[
                    "--max-connections",
                    "20",
                    "--max-connections-per-address",
                    "21",
                ],
                "--max-connections-per-address: must be at most --max-connections (20), got 21",
            ),
            (&["--idle-timeout", "0"], "--idle-timeout: must be above 0"),
        ] {
            let err = config(flags).unwrap_err();
            assert_eq!(err, rule, "{flags:?}");
        }
    }

    #[test]
    fn default_policy_flag() {
        let ok = config(&["--default-policy", r#"{"type": "fixed", "delay": "5s"}"#]).unwrap();
        assert_eq!(ok.default_policy.delay_ms(3), 5_000);
        let err = config(&["--default-policy", r#"{"type": "fixed"}"#]).unwrap_err();
        assert!(err.starts_with("--default-policy: delay"), "{err}");
    }
}

impl Config {
    /// The store this configuration names, reporting its commits to `commits`, and where it is
    /// (for messages).
    pub fn store(&self, commits: Arc<CommitMetrics>) -> (StoreConfig, String) {
        let commits: Arc<dyn CommitObserver> = Arc::new(ReportCommits(commits));
        match &self.database {
            Some(options) => {
                let mut options = options.clone();
                options.commits = Some(commits);
                (StoreConfig::Postgres(options), "PostgreSQL".to_owned())
            }
            None => (
                StoreConfig::Embedded {
                    dir: self.data_dir.clone(),
                    options: EmbeddedOptions {
                        sync: self.durability == Durability::Sync,
                        cache_bytes: self.cache_bytes,
                        commits: Some(commits),
                        secrets: self.secrets.clone(),
                        ..EmbeddedOptions::default()
                    },
                },
                self.data_dir.display().to_string(),
            ),
        }
    }
}

/// The store's commits, counted in the server's metrics: the wire between the two layers, which
/// know nothing of each other.
#[derive(Debug)]
struct ReportCommits(Arc<CommitMetrics>);

impl CommitObserver for ReportCommits {
    fn committed(&self, requests: usize, elapsed: Duration) {
        self.0.committed(requests, elapsed);
    }
}
