//! `tenax serve`: validate the configuration, set up logging, run the server.

use std::io::IsTerminal as _;

use anyhow::Context as _;
use tenax_core::clock::Clock;

use super::CliError;
use crate::config::{LogFormat, ServeArgs};

pub fn run(args: ServeArgs) -> Result<(), CliError> {
    let config = args.validate().map_err(CliError::Invalid)?;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TENAX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tower_http=warn"));
    // Colour codes only for a person at a terminal: never into a file or a pipe.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(crate::api::request_log::LogWriter);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    log_panics();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        crate::server::run(
            listener,
            config,
            Clock::System,
            crate::server::shutdown_signal(),
        )
        .await
    })?;
    Ok(())
}

/// Panics (in a handler, which answers 500, or in a background task) are logged as error events
/// in the server's log format, with where they happened, instead of raw text on stderr.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let backtrace = std::backtrace::Backtrace::capture();
        match backtrace.status() {
            std::backtrace::BacktraceStatus::Captured => {
                tracing::error!(%message, %location, %backtrace, "panic");
            }
            _ => tracing::error!(%message, %location, "panic"),
        }
    }));
}
