//! TLS to PostgreSQL with libpq's meanings of `sslmode` and `sslrootcert`, on rustls (ring, the
//! process's provider: [`tenax_net::http::install_crypto_provider`]).
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | if the server offers it | not checked; checked as for `verify-ca` when CAs are given |
//! | `require` | always | the same as `prefer` |
//! | `verify-ca` | always | signed by a given CA |
//! | `verify-full` | always | signed by a given CA, and made out to the host connected to |
//!
//! `sslrootcert=system` trusts the platform's root certificates and, as in libpq, asks for
//! `verify-full` (a weaker mode with it is refused: the public CAs sign anyone's name).
//! Where libpq, in `prefer` mode, falls back to a plain connection after a failed
//! certificate check, Tenax fails the connection.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use tenax_net::trust::{CaFile, ListedOrElse};

/// libpq's `sslmode`, less `allow` (which tries a plain connection first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: use prefer (TLS when the server \
                            offers it) or disable"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "sslmode must be disable, prefer, require, verify-ca or verify-full, got \
                     {other:?}"
                ));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether to ask for TLS, and whether to insist.
    pub fn negotiation(self) -> tokio_postgres::config::SslMode {
        match self {
            Self::Disable => tokio_postgres::config::SslMode::Disable,
            Self::Prefer => tokio_postgres::config::SslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// Whom the server's certificate must be signed by.
#[derive(Debug, Clone)]
pub enum Roots {
    /// Nobody named: the certificate is not checked.
    None,
    /// The CAs of a PEM file (`sslrootcert=<file>` or `--database-ca-file`).
    File(CaFile),
    /// The platform's root certificates (`sslrootcert=system`).
    System,
}

/// What is checked of the server's certificate, once `sslmode` and the roots are put together.
#[derive(Debug, Clone)]
pub enum Check {
    Nothing,
    /// Signed by one of the CAs.
    Signed(CaFile),
    /// Signed by one of the CAs, for the host connected to.
    SignedForHost(CaFile),
    /// The platform's roots, for the host connected to.
    Platform,
}

impl Check {
    /// libpq's rules: `verify-*` need roots; roots make `prefer` and `require` check the
    /// signature; `sslrootcert=system` needs (and defaults to) `verify-full`. `mode` is `None`
    /// when the URL names no `sslmode`. Returns the mode in force and the check.
    pub fn of(mode: Option<SslMode>, roots: Roots) -> Result<(SslMode, Check), String> {
        if let Roots::System = roots {
            return match mode {
                None | Some(SslMode::VerifyFull) => Ok((SslMode::VerifyFull, Check::Platform)),
                Some(SslMode::Disable) => Ok((SslMode::Disable, Check::Nothing)),
                Some(weak) => Err(format!(
                    "sslmode={} may not be used with sslrootcert=system (the platform's CAs sign \
                     certificates for anyone's name): use sslmode=verify-full",
                    weak.name()
                )),
            };
        }
        let mode = mode.unwrap_or(SslMode::Prefer);
        let check = match (mode, roots) {
            (SslMode::Disable, _) => Check::Nothing,
            (SslMode::VerifyCa | SslMode::VerifyFull, Roots::None) => {
                return Err(format!(
                    "sslmode={} checks the server's certificate against CA certificates: give \
                     them with sslrootcert=<PEM file> in --database-url or --database-ca-file, or \
                     use sslrootcert=system for the platform's",
                    mode.name()
                ));
            }
            (SslMode::Prefer | SslMode::Require, Roots::None) => Check::Nothing,
            (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, Roots::File(file)) => {
                Check::Signed(file)
            }
            (SslMode::VerifyFull, Roots::File(file)) => Check::SignedForHost(file),
            (_, Roots::System) => Check::Platform,
        };
        Ok((mode, check))
    }

    /// The check in words, for messages.
    pub fn describe(&self) -> String {
        match self {
            Check::Nothing => "its certificate not checked".into(),
            Check::Signed(file) => format!(
                "its certificate checked against the CAs of {}, not its host name",
                file.path.display()
            ),
            Check::SignedForHost(file) => format!(
                "its certificate checked against the CAs of {} and for the host name",
                file.path.display()
            ),
            Check::Platform => {
                "its certificate checked against the platform's CAs and for the host name".into()
            }
        }
    }

    /// The rustls client configuration that makes this check. PostgreSQL's ALPN name is
    /// offered, as libpq 17 does (servers of 17 and later want it for a direct TLS start).
    pub fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        tenax_net::http::install_crypto_provider();
        let provider = CryptoProvider::get_default()
            .cloned()
            .ok_or("no rustls crypto provider is installed")?;
        let builder = rustls::ClientConfig::builder();
        let mut config = match self {
            Check::Nothing => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Lenient {
                    roots: None,
                    provider,
                }))
                .with_no_client_auth(),
            // A certificate listed in the CA file is trusted as it is, as libpq (OpenSSL)
            // does: PostgreSQL's documentation makes a self-signed server certificate and
            // hands that very file to clients as `root.crt`.
            Check::Signed(file) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ListedOrElse {
                    listed: file.certificates.clone(),
                    check_name: false,
                    inner: Some(Arc::new(Lenient {
                        roots: Some(Arc::new(roots(file)?)),
                        provider: provider.clone(),
                    })),
                    provider,
                }))
                .with_no_client_auth(),
            Check::SignedForHost(file) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ListedOrElse {
                    listed: file.certificates.clone(),
                    check_name: true,
                    inner: Some(
                        rustls::client::WebPkiServerVerifier::builder_with_provider(
                            Arc::new(roots(file)?),
                            provider.clone(),
                        )
                        .build()
                        .map_err(|e| format!("{}: {e}", file.path.display()))?,
                    ),
                    provider,
                }))
                .with_no_client_auth(),
            Check::Platform => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(
                    rustls_platform_verifier::Verifier::new(provider).map_err(|e| {
                        format!("the platform's root certificates cannot be used: {e}")
                    })?,
                ))
                .with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(config)
    }
}

fn roots(file: &CaFile) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for certificate in &file.certificates {
        roots
            .add(certificate.clone())
            .map_err(|e| format!("{}: {e}", file.path.display()))?;
    }
    Ok(roots)
}

/// The checks libpq makes short of a host name. Without `roots` (`prefer` and `require`
/// without CAs): any certificate, as libpq; the handshake's signatures are still checked, so the
/// session is with the holder of the certificate's key. With `roots` (`verify-ca`): the chain
/// must lead to one of the CAs, and be valid now; the name on the certificate is not looked at.
#[derive(Debug)]
struct Lenient {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let certificate = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &certificate,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
