//! `tenax health`: whether a server answers `GET /healthz`, as the exit status, for health
//! checks where no HTTP client is installed (the container image's `HEALTHCHECK`).

use super::CliError;
use super::client::{Server, ServerArgs, block_on};

/// Prints `ok` and succeeds when the server answers; fails (exit status 1) when it cannot be
/// reached or answers anything but success.
pub fn run(server: ServerArgs) -> Result<(), CliError> {
    block_on(async move {
        let server = Server::connect(&server)?;
        server.ask(server.health()).await?;
        println!("ok");
        Ok(())
    })
}
