//! The server: open the store, start maintenance, serve HTTP until shutdown, then drain and
//! flush. [`run`] takes a bound listener and a shutdown future, so tests bind port 0.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tenax_core::clock::Clock;
use tenax_core::engine::{Engine, EngineSettings, maintenance};
use tenax_core::metrics::Metrics;
use tenax_policy::spelling::native;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::request_log::RequestLog;
use crate::api::zaqar::signed::{self, SigningKey};
use crate::api::{self, AppState, Limits};
use crate::config::Config;
use crate::delivery::signals::Signals;
use crate::delivery::{self, Deliveries};
use crate::serve::ConnectionLimits;
use crate::ui::UiKeys;

/// Serves until `shutdown` completes: stops accepting, lets in-flight requests finish, stops
/// maintenance, and flushes the store.
pub async fn run(
    listener: TcpListener,
    config: Config,
    clock: Clock,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with_signals(listener, config, clock, shutdown, Signals::default()).await
}

/// [`run`], with the delivery runners telling `signals` what they decide: tests wait for
/// those events ([`delivery::signals`]).
pub async fn run_with_signals(
    listener: TcpListener,
    config: Config,
    clock: Clock,
    shutdown: impl Future<Output = ()> + Send + 'static,
    signals: Signals,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new(config.metrics_label_limit));
    let spans = match &config.otlp_endpoint {
        Some(endpoint) => Some(Arc::new(
            crate::otlp::start(endpoint).context("starting the OTLP span exporter")?,
        )),
        None => None,
    };
    let (store_config, place) = config.store(metrics.commits.clone());
    if let Some(path) = &config.secrets_key_file {
        tenax_core::secrets::files::warn_if_loose(path, "the secrets key file");
    }
    let clock = store_config.deciding_clock(clock);
    let store = store_config
        .open(&clock)
        .await
        .with_context(|| format!("opening the store in {place}"))?;
    let engine = Arc::new(
        Engine::new(
            store,
            clock,
            EngineSettings {
                default_policy: Arc::new(config.default_policy.clone()),
                delivery_policy: Arc::new(config.delivery.default_policy.clone()),
                completed_retention_ms: config.completed_retention_ms,
                dead_retention_ms: config.dead_retention_ms,
                max_attempt_ms: config.max_attempt_ms,
            },
        )
        .with_metrics(metrics)
        .with_tracing(spans.clone()),
    );
    engine
        .load_tokens()
        .await
        .context("loading the API tokens")?;
    if config.auth {
        first_admin_token(&engine, &config).await?;
    }
    let (stop, stopped) = watch::channel(false);
    let maintenance = tokio::spawn(maintenance::run(engine.clone(), stopped.clone()));
    let following = tokio::spawn(tenax_core::engine::tokens::follow(
        engine.clone(),
        stopped.clone(),
    ));
    let deliveries = Arc::new(Deliveries::new(config.delivery.clone()).with_signals(signals));
    let delivering = tokio::spawn(delivery::run(engine.clone(), deliveries.clone(), stopped));

    let request_log = if config.log_requests {
        Some(RequestLog::start().context("starting the request log's thread")?)
    } else {
        None
    };
    let state = AppState {
        engine: engine.clone(),
        limits: Arc::new(Limits {
            max_request_bytes: config.max_request_bytes,
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            max_payload_bytes: config.max_payload_bytes,
            default_lease_ms: config.default_lease_ms,
            max_lease_ms: config.max_lease_ms,
        }),
        deliveries,
        auth_required: config.auth,
        request_log: request_log.clone(),
        browser: Arc::new(crate::api::browser::BrowserPolicy {
            // A server that needs no token is what DNS rebinding reaches for.
            check_host: !config.auth || !config.allowed_hosts.is_empty(),
            allowed_hosts: config.allowed_hosts.clone(),
            cors_origins: config.cors_origins.clone(),
            tls: config.tls.is_some(),
        }),
        zaqar_signing: Arc::new(zaqar_signing_key(&config)?),
        zaqar_limits: config.zaqar_limits,
        zaqar_require_confirmation: config.zaqar_require_confirmation,
    };
    let address = listener.local_addr().unwrap_or(config.listen);
    // What this server says of itself to the others (`GET /api/cluster`).
    engine.identify(env!("CARGO_PKG_VERSION"), Some(address.to_string()));
    let metrics_serving = match config.metrics_listen {
        Some(at) => {
            let metrics_listener = TcpListener::bind(at)
                .await
                .with_context(|| format!("listening on {at} (--metrics-listen)"))?;
            let bound = metrics_listener.local_addr().unwrap_or(at);
            // Scrapers are few: a small table, half of it for any one address.
            let limits = ConnectionLimits {
                header_read_timeout: Duration::from_millis(config.header_read_timeout_ms),
                idle_timeout: Duration::from_millis(config.idle_timeout_ms),
                max_connections: 64,
                max_connections_per_address: 32,
                tls: None,
            };
            let router = api::metrics::router(state.clone());
            let stopper = engine.clone();
            Some((
                bound,
                tokio::spawn(async move {
                    crate::serve::serve(metrics_listener, router, &limits, stopper.stopped()).await;
                }),
            ))
        }
        None => None,
    };
    log_start(
        &config,
        address,
        metrics_serving.as_ref().map(|(at, _)| *at),
    );
    if !config.listen.ip().is_loopback() && config.tls.is_none() {
        tracing::warn!(
            listen = %config.listen,
            "listening beyond this machine without TLS: API tokens and payloads cross the \
             network in clear text (--tls-cert, --tls-key)"
        );
    }
    let max_request_bytes = state.limits.max_request_bytes;
    let app = crate::app::router(state, Arc::new(UiKeys::new(config.tls.is_some())));
    let stopper = engine.clone();
    let shutdown = async move {
        shutdown.await;
        // Ends long polls and streams, so that graceful shutdown does not wait on them.
        stopper.begin_stop();
    };
    let tls = match &config.tls {
        Some(files) => Some(Arc::new(
            crate::serve::tls_config(files).context("configuring TLS")?,
        )),
        None => None,
    };
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_millis(config.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(config.idle_timeout_ms),
        max_connections: config.max_connections,
        max_connections_per_address: config.max_connections_per_address,
        tls,
    };
    let websocket_serving = match config.zaqar_websocket_listen {
        Some(at) => {
            let websocket_listener = TcpListener::bind(at)
                .await
                .with_context(|| format!("listening on {at} (--zaqar-websocket-listen)"))?;
            let bound = websocket_listener.local_addr().unwrap_or(at);
            tracing::info!(address = %bound, "zaqar websocket listening");
            let router = crate::api::zaqar::websocket::listener(
                app.clone(),
                engine.clone(),
                max_request_bytes,
            );
            // The API's limits, TLS included: a table of its own of the same size.
            let limits = limits.clone();
            let stopper = engine.clone();
            Some(tokio::spawn(async move {
                crate::serve::serve(websocket_listener, router, &limits, stopper.stopped()).await;
            }))
        }
        None => None,
    };
    crate::serve::serve(listener, app, &limits, shutdown).await;
    if let Some(serving) = websocket_serving {
        let _ = serving.await;
    }
    if let Some((_, serving)) = metrics_serving {
        let _ = serving.await;
    }

    let _ = stop.send(true);
    let _ = maintenance.await;
    let _ = following.await;
    let _ = delivering.await;
    // Every request has finished (a stream still noticing the shutdown gets refusals from
    // here on): flush what is pending, and stop.
    engine.close().await;
    if let Some(log) = request_log {
        // The last requests' lines; blocking, so off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || log.flush(Duration::from_secs(1))).await;
    }
    if let Some(spans) = spans {
        // Exports the spans still waiting; blocking, so off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || spans.shutdown()).await;
    }
    tracing::info!("store flushed; bye");
    Ok(())
}

/// The start-up line: where the server listens, and what it runs with, each value as the flags
/// spell it.
fn log_start(config: &Config, address: SocketAddr, metrics: Option<SocketAddr>) {
    let on_off = |on: bool| if on { "on" } else { "off" };
    let policy = |p: &tenax_policy::RetryPolicy| native::to_json(p).to_string();
    let embedded = config.database.is_none();
    tracing::info!(
        %address,
        store = %if embedded { "embedded" } else { "postgres" },
        data_dir = embedded.then(|| tracing::field::display(config.data_dir.display())),
        // PostgreSQL commits as the database is configured to: --durability is the embedded
        // store's.
        durability = embedded.then(|| tracing::field::display(config.durability)),
        auth = %on_off(config.auth),
        tls = %on_off(config.tls.is_some()),
        default_policy = %policy(&config.default_policy),
        default_delivery_policy = %policy(&config.delivery.default_policy),
        private_endpoints = %if config.delivery.allow_private_endpoints { "allowed" } else { "refused" },
        metrics_listen = metrics.map(tracing::field::display),
        otlp_endpoint = config.otlp_endpoint.as_ref().map(|url| tracing::field::display(crate::otlp::traces_url(url))),
        "tenax listening"
    );
}

/// The first admin token, with authentication on: `--admin-token` if given; else, when the
/// store holds no admin token yet, a new one, written to `admin-token` in the data directory
/// (readable by its owner only) and announced in the log by its path, never by its value.
async fn first_admin_token(engine: &Engine, config: &Config) -> anyhow::Result<()> {
    if let Some(token) = &config.admin_token {
        engine.accept_admin_token(token);
        tracing::info!("authentication is on; --admin-token is an admin token");
        return Ok(());
    }
    if engine.has_admin_token().await? {
        tracing::info!("authentication is on");
        return Ok(());
    }
    let made = engine
        .create_token(
            "admin (first start)".into(),
            tenax_core::auth::Role::Admin,
            Vec::new(),
            Vec::new(),
        )
        .await
        .context("making the first admin token")?;
    let path = config.data_dir.join("admin-token");
    // On PostgreSQL nothing else makes the data directory.
    tenax_core::secrets::files::private_dir(&config.data_dir)
        .with_context(|| format!("making the data directory {}", config.data_dir.display()))?;
    tenax_core::secrets::files::write_private(&path, &format!("{}\n", made.secret))
        .with_context(|| format!("writing the first admin token to {}", path.display()))?;
    tracing::warn!(
        path = %path.display(),
        "authentication is on and there was no admin token: made one, in this file (mode 0600); \
         make scoped tokens with `tenax tokens create`, then delete the file"
    );
    Ok(())
}

/// Completes on SIGINT or SIGTERM. The handlers are installed by this call, not when the
/// future is first polled (which the accept loop may do only after serving requests): a signal
/// that comes while the server starts is heard, instead of taking its default action, which
/// ends the process at once, without flushing the store.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::interrupt()).and_then(|i| Ok((i, signal(SignalKind::terminate())?)))
    };
    async move {
        #[cfg(unix)]
        match handlers {
            Ok((mut interrupt, mut terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown requested: finishing requests in progress");
    }
}

/// The key of Zaqar's pre-signed URLs: `--zaqar-signing-key`, else one derived from the secrets
/// key (`--secrets-key-file`, or the embedded store's `secrets.key`, which the store has made
/// by now), so that every server given the same key file signs alike.
fn zaqar_signing_key(config: &Config) -> anyhow::Result<SigningKey> {
    if let Some(key) = &config.zaqar_signing_key {
        return Ok(SigningKey::new(key.as_bytes()));
    }
    let keys = match &config.secrets {
        Some(keys) => keys.clone(),
        None => {
            let path = config.data_dir.join(tenax_core::secrets::SECRETS_KEY_FILE);
            Arc::new(
                tenax_core::secrets::Keyring::read_file(&path)
                    .map_err(anyhow::Error::msg)
                    .context("reading the secrets key to derive the Zaqar signing key")?,
            )
        }
    };
    Ok(SigningKey::new(keys.derive(signed::DERIVE_PURPOSE)))
}
