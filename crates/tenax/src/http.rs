//! Building the program's HTTP clients, so that every one of them can speak TLS.
//!
//! reqwest is built with rustls and without a crypto provider of its own (the
//! `rustls-no-provider` feature): ring is the provider, installed here as the process default.
//! reqwest panics when it builds a client before a provider is installed, so every client is
//! built from [`client_builder`]; clippy's `disallowed-methods` (clippy.toml) refuses the other
//! ways of making one.
//!
//! Certificates are verified by rustls-platform-verifier against the platform's root
//! certificates, which it reads when a client is built. [`build`] keeps a machine without any
//! (a minimal container) working over plain http.

use std::sync::Once;

/// Installs ring as the process's default rustls crypto provider, once.
pub fn install_crypto_provider() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        // An error means another provider was installed first, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder, with the crypto provider installed.
#[allow(clippy::disallowed_methods)]
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

/// Whether the platform's root certificates could be loaded when a client was built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlatformRoots {
    Loaded,
    /// None could be loaded (the reason): the client trusts only the roots it was given, so
    /// https fails at the handshake unless it was given some.
    Missing(String),
}

/// Builds the client that `make` configures. When that fails because the platform has no root
/// certificates to verify with, the client is built again trusting only the roots `make` gives
/// it (none, unless it adds some), so that plain http keeps working.
pub fn build(
    make: impl Fn() -> reqwest::ClientBuilder,
) -> Result<(reqwest::Client, PlatformRoots), reqwest::Error> {
    match make().build() {
        Ok(client) => Ok((client, PlatformRoots::Loaded)),
        Err(error) => match make().tls_certs_only([]).build() {
            Ok(client) => Ok((client, PlatformRoots::Missing(chain(&error)))),
            Err(_) => Err(error),
        },
    }
}

/// An error and its causes, one after the other.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_build_with_the_provider_installed() {
        let (client, _) = build(client_builder).expect("a client");
        drop(client);
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
