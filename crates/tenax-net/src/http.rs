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

/// How a client of the Tenax API reaches it: the token it sends and the CA it trusts.
#[derive(Clone, Default)]
pub struct ClientOptions {
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// A PEM file of CA certificates trusted besides the platform's (a server whose certificate
    /// a private CA signed).
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl ClientOptions {
    /// Reads the CA file and checks the token, once; the error names the flag.
    pub fn prepare(&self) -> Result<Prepared, String> {
        let authorization = match &self.token {
            Some(token) => {
                let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| "--token: must be printable ASCII".to_owned())?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let mut certificates = Vec::new();
        if let Some(path) = &self.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| format!("--ca-file: cannot read {}: {e}", path.display()))?;
            certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                format!("--ca-file: {} is not PEM certificates: {e}", path.display())
            })?;
            if certificates.is_empty() {
                return Err(format!(
                    "--ca-file: {} holds no certificate",
                    path.display()
                ));
            }
        }
        Ok(Prepared {
            authorization,
            certificates,
        })
    }
}

/// [`ClientOptions`] read and checked, ready to configure any number of clients.
#[derive(Clone)]
pub struct Prepared {
    authorization: Option<reqwest::header::HeaderValue>,
    certificates: Vec<reqwest::Certificate>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("authorization", &self.authorization.is_some())
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

impl Prepared {
    /// The `Authorization` header of the token, if there is one.
    pub fn authorization(&self) -> Option<&reqwest::header::HeaderValue> {
        self.authorization.as_ref()
    }

    /// A client builder (the crypto provider installed) with the token as a default header and
    /// the CA file's certificates trusted; `headers` are added to the defaults.
    pub fn builder(&self, mut headers: reqwest::header::HeaderMap) -> reqwest::ClientBuilder {
        if let Some(value) = &self.authorization {
            headers.insert(reqwest::header::AUTHORIZATION, value.clone());
        }
        let mut builder = client_builder().default_headers(headers);
        for certificate in &self.certificates {
            builder = builder.add_root_certificate(certificate.clone());
        }
        builder
    }
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
            Ok(client) => Ok((
                client,
                PlatformRoots::Missing(tenax_core::errors::chain(&error)),
            )),
            Err(_) => Err(error),
        },
    }
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
