//! How the client commands reach the server: a [`tenax_client::Client`] made from the
//! `--url`, `--token` and `--ca-file` flags, and its errors as one-line messages in the
//! command line's terms.
//!
//! Invariant: a refusal of the server that names a field and a rule (a 4xx) is
//! [`CliError::Invalid`] (exit status 2), and says the field, the rule and the status; anything
//! else is [`CliError::Failed`].

use std::future::Future;

use anyhow::Context as _;
use clap::Args;
use tenax_client::Error;

use super::CliError;

/// Where the server is.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Base URL of the Tenax server.
    #[arg(
        long,
        env = "TENAX_URL",
        default_value = "http://127.0.0.1:7890",
        global = true
    )]
    pub url: String,
    /// The API token, sent as `Authorization: Bearer <token>`.
    #[arg(long, env = "TENAX_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// A PEM file of CA certificates to trust (an https server whose certificate a private CA
    /// signed).
    #[arg(long, env = "TENAX_CA_FILE", global = true)]
    pub ca_file: Option<std::path::PathBuf>,
}

/// The typed client of the server the flags name, and what is needed to word its errors.
/// Derefs to the client: `server.ask(server.get_job(id))`.
#[derive(Debug, Clone)]
pub struct Server {
    client: tenax_client::Client,
    url: String,
    /// Whether `--token` (or `TENAX_TOKEN`) gave a token: a 401 means a missing one, or a bad
    /// one.
    token_given: bool,
}

impl std::ops::Deref for Server {
    type Target = tenax_client::Client;

    fn deref(&self) -> &Self::Target {
        &self.client
    }
}

impl Server {
    /// Reads the CA file and checks the flags; a bad one is named.
    pub fn connect(args: &ServerArgs) -> Result<Self, CliError> {
        let mut builder = tenax_client::Client::builder().url(&args.url);
        if let Some(token) = &args.token {
            builder = builder.token(token);
        }
        if let Some(path) = &args.ca_file {
            builder = builder.ca_file(path);
        }
        let client = builder.build().map_err(|e| match e {
            Error::Config(message) => CliError::Invalid(flag_named(&message)),
            other => CliError::Failed(other.into()),
        })?;
        Ok(Self {
            client,
            url: args.url.trim_end_matches('/').to_owned(),
            token_given: args.token.is_some(),
        })
    }

    /// The typed client, for what needs one of its own (the worker runtime).
    pub fn client(&self) -> &tenax_client::Client {
        &self.client
    }

    /// Awaits a request; its error as the command line says it.
    pub async fn ask<T>(
        &self,
        request: impl Future<Output = tenax_client::Result<T>>,
    ) -> Result<T, CliError> {
        request.await.map_err(|e| self.error(e))
    }

    /// A client error as a one-line message: `field: rule (400 Bad Request)`.
    pub fn error(&self, error: Error) -> CliError {
        match error {
            // The server speaks of the Authorization header; the user gives a flag.
            Error::Api {
                status: 401,
                message,
                ..
            } => CliError::Invalid(if self.token_given {
                format!("{message}: check --token or TENAX_TOKEN (401 Unauthorized)")
            } else {
                "this server needs an API token: give it with --token or TENAX_TOKEN \
                 (401 Unauthorized)"
                    .to_owned()
            }),
            Error::Api {
                status,
                field,
                message,
                ..
            } => {
                let text = match field {
                    Some(field) => format!("{field}: {message}"),
                    None => message,
                };
                let line = format!("{text} ({})", status_line(status));
                if (400..500).contains(&status) {
                    CliError::Invalid(line)
                } else {
                    CliError::Failed(anyhow::anyhow!(line))
                }
            }
            Error::Transport(error) => CliError::Failed(
                anyhow::Error::new(error)
                    .context(format!("cannot reach the server at {}", self.url)),
            ),
            Error::Config(message) => CliError::Invalid(flag_named(&message)),
            other => CliError::Failed(other.into()),
        }
    }
}

/// `400 Bad Request`: the status and its reason, as HTTP names it.
fn status_line(status: u16) -> String {
    reqwest::StatusCode::from_u16(status).map_or_else(|_| status.to_string(), |s| s.to_string())
}

/// A message of the client builder, which names its settings (`url`, `token`, `ca_file`,
/// `ca`), with the flag the user knows instead.
fn flag_named(message: &str) -> String {
    let flags = [
        ("url:", "--url:"),
        ("token:", "--token:"),
        ("ca_file:", "--ca-file:"),
        ("ca:", "--ca-file:"),
    ];
    flags
        .iter()
        .find_map(|(setting, flag)| {
            message
                .strip_prefix(setting)
                .map(|rest| format!("{flag}{rest}"))
        })
        .unwrap_or_else(|| message.to_owned())
}

/// Runs a command's async work on a small runtime.
pub fn block_on<T, F: Future<Output = Result<T, CliError>>>(future: F) -> Result<T, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_settings_are_named_as_flags() {
        assert_eq!(
            flag_named("ca_file: cannot read /x: gone"),
            "--ca-file: cannot read /x: gone"
        );
        assert_eq!(
            flag_named("ca: /x holds no certificate"),
            "--ca-file: /x holds no certificate"
        );
        assert_eq!(
            flag_named("token: must be printable ASCII"),
            "--token: must be printable ASCII"
        );
        assert_eq!(flag_named("something else"), "something else");
        assert_eq!(status_line(400), "400 Bad Request");
    }
}
