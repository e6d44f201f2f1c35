//! reqwest is built with rustls and no crypto provider of its own (`rustls-no-provider`); it
//! panics when a client is built before a provider is installed. This crate installs ring as
//! the process default before it builds any client, so a program need not know.

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
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}
