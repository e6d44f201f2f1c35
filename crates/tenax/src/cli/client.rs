//! The HTTP client behind the client commands: one place that sends a request, and turns a
//! Tenax error response into a one-line message.

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;

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

impl ServerArgs {
    pub fn client_options(&self) -> tenax_net::http::ClientOptions {
        tenax_net::http::ClientOptions {
            token: self.token.clone(),
            ca_file: self.ca_file.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    pub fn new(server: &ServerArgs) -> Result<Self, CliError> {
        let prepared = server
            .client_options()
            .prepare()
            .map_err(CliError::Invalid)?;
        let make = || prepared.builder(reqwest::header::HeaderMap::new());
        let (http, _) = tenax_net::http::build(make).context("building the HTTP client")?;
        Ok(Self {
            http,
            base: server.url.trim_end_matches('/').to_owned(),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.send(self.http.put(format!("{}{path}", self.base)).json(body))
            .await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.send(self.http.patch(format!("{}{path}", self.base)).json(body))
            .await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, CliError> {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, CliError> {
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach the server at {}", self.base))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        let error = &body["error"];
        let message = error["message"].as_str().unwrap_or("request failed");
        let text = match error["field"].as_str() {
            Some(field) => format!("{field}: {message}"),
            None => message.to_owned(),
        };
        if status.is_client_error() {
            Err(CliError::Invalid(format!("{} ({status})", text)))
        } else {
            Err(CliError::Failed(anyhow::anyhow!("{text} ({status})")))
        }
    }
}

/// Runs a client command on a small runtime.
pub fn block_on<F: std::future::Future<Output = Result<(), CliError>>>(
    future: F,
) -> Result<(), CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}
