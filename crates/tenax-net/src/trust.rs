//! Trusting a server's certificate when an operator listed that very certificate as a trust
//! anchor (`--delivery-ca-file`, PostgreSQL's `sslrootcert`), as OpenSSL and Go do.
//!
//! A certificate made with `openssl req -x509` and its defaults is its own CA (`CA:TRUE`), and
//! operators hand exactly that file to the client: PostgreSQL's documentation does so for its
//! server certificate, and a test receiver's self-signed certificate is trusted that way.
//! WebPKI refuses a CA certificate as an end entity (`CaUsedAsEndEntity`) even when it is the
//! trust anchor itself. [`ListedOrElse`] accepts it instead, still checking what a path check
//! would: that it is valid now and, where names are checked, made out to the host.
//!
//! Invariants:
//! - Only a byte-for-byte copy of a listed certificate is trusted this way; every other
//!   certificate goes to the wrapped verifier unchanged.
//! - The handshake's signatures are always checked with the certificate's key, so the session is
//!   with whoever holds the listed certificate's private key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use x509_cert::der::Decode as _;
use x509_cert::der::asn1::{ObjectIdentifier, PrintableStringRef, Utf8StringRef};

/// A file of CA certificates an operator trusts (`--delivery-ca-file`, `--database-ca-file`,
/// libpq's `sslrootcert`), read and checked at start-up.
#[derive(Clone)]
pub struct CaFile {
    pub path: PathBuf,
    /// DER, each one usable as a trust anchor.
    pub certificates: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for CaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

impl CaFile {
    /// Reads the PEM file at `path`: one or more `CERTIFICATE` blocks, each a certificate that
    /// can serve as a trust anchor. The message says what is wrong, not which flag gave it.
    pub fn read(path: &Path) -> Result<Self, String> {
        let shown = path.display();
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        let mut certificates = Vec::new();
        for (n, certificate) in CertificateDer::pem_slice_iter(&bytes).enumerate() {
            let n = n + 1;
            let certificate = certificate
                .map_err(|e| format!("{shown}: certificate {n} is not valid PEM: {e}"))?;
            rustls::RootCertStore::empty()
                .add(certificate.clone())
                .map_err(|e| {
                    format!("{shown}: certificate {n} is not a usable CA certificate: {e}")
                })?;
            certificates.push(certificate);
        }
        if certificates.is_empty() {
            return Err(format!(
                "{shown} holds no PEM certificate (a -----BEGIN CERTIFICATE----- block)"
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            certificates,
        })
    }
}

/// A verifier that trusts a listed certificate as itself and asks `inner` about the rest.
#[derive(Debug)]
pub struct ListedOrElse {
    /// The certificates trusted as they are (every certificate of the CA file).
    pub listed: Vec<CertificateDer<'static>>,
    /// Whether a listed certificate must also be made out to the host (libpq's `verify-ca`
    /// does not check names).
    pub check_name: bool,
    /// What judges every other certificate; `None` when no root certificate could be loaded:
    /// every other certificate then has an unknown issuer.
    pub inner: Option<Arc<dyn ServerCertVerifier>>,
    pub provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ListedOrElse {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self
            .listed
            .iter()
            .any(|listed| listed.as_ref() == end_entity.as_ref())
        {
            return match &self.inner {
                Some(inner) => inner.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                ),
                None => Err(rustls::Error::InvalidCertificate(
                    CertificateError::UnknownIssuer,
                )),
            };
        }
        let certificate = x509_cert::Certificate::from_der(end_entity.as_ref())
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        check_validity(&certificate, now)?;
        if self.check_name {
            let parsed = ParsedCertificate::try_from(end_entity)?;
            if let Err(error) = rustls::client::verify_server_name(&parsed, server_name) {
                // As OpenSSL: a certificate without alternative names is made out to its
                // common name.
                if has_alternative_names(&certificate)
                    || !common_name(&certificate).is_some_and(|cn| {
                        cn.eq_ignore_ascii_case(server_name.to_str().trim_end_matches('.'))
                    })
                {
                    return Err(error);
                }
            }
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

/// Refuses a certificate outside its validity period, as a path check would.
fn check_validity(
    certificate: &x509_cert::Certificate,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    let validity = certificate.tbs_certificate.validity;
    let now = now.as_secs();
    if now < validity.not_before.to_unix_duration().as_secs() {
        return Err(rustls::Error::InvalidCertificate(
            CertificateError::NotValidYet,
        ));
    }
    if now > validity.not_after.to_unix_duration().as_secs() {
        return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
    }
    Ok(())
}

/// Whether a certificate has a subject alternative name extension.
fn has_alternative_names(certificate: &x509_cert::Certificate) -> bool {
    const SUBJECT_ALT_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");
    certificate
        .tbs_certificate
        .extensions
        .iter()
        .flatten()
        .any(|extension| extension.extn_id == SUBJECT_ALT_NAME)
}

/// The certificate's subject common name, if it has one that is a string.
fn common_name(certificate: &x509_cert::Certificate) -> Option<String> {
    const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
    certificate
        .tbs_certificate
        .subject
        .0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .find(|attribute| attribute.oid == COMMON_NAME)
        .and_then(|attribute| {
            attribute
                .value
                .decode_as::<Utf8StringRef<'_>>()
                .map(|s| s.as_str().to_owned())
                .or_else(|_| {
                    attribute
                        .value
                        .decode_as::<PrintableStringRef<'_>>()
                        .map(|s| s.as_str().to_owned())
                })
                .ok()
        })
}

/// A TLS failure as a sentence a user understands, for attempt logs and errors.
pub fn explain(error: &rustls::Error) -> String {
    use rustls::Error as E;
    match error {
        E::InvalidCertificate(problem) => format!("the certificate {}", certificate(problem)),
        E::NoCertificatesPresented => "the endpoint presented no certificate".into(),
        E::AlertReceived(alert) => format!(
            "the endpoint refused the handshake (TLS alert {alert:?}): it may want a client \
             certificate, another TLS version, or another host name"
        ),
        E::PeerIncompatible(why) => {
            format!("the endpoint and this server share no TLS version or cipher suite ({why:?})")
        }
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. } => {
            "the endpoint did not answer in TLS (is it plain http on this port?)".into()
        }
        E::PeerMisbehaved(why) => format!("the endpoint broke the TLS protocol ({why:?})"),
        other => format!("TLS failed: {other}"),
    }
}

/// What is wrong with a certificate, after "the certificate ".
fn certificate(problem: &CertificateError) -> String {
    use CertificateError as C;
    let when = |at: &UnixTime| tenax_core::clock::rfc3339(at.as_secs().saturating_mul(1000));
    match problem {
        C::UnknownIssuer => "is not signed by a CA this server trusts".into(),
        C::Expired => "has expired".into(),
        C::ExpiredContext { not_after, .. } => format!("expired on {}", when(not_after)),
        C::NotValidYet => "is not valid yet".into(),
        C::NotValidYetContext { not_before, .. } => {
            format!("is not valid before {}", when(not_before))
        }
        C::NotValidForName => "is made out to another host name".into(),
        C::NotValidForNameContext {
            expected,
            presented,
        } => format!(
            "is made out to {} but the endpoint is {}",
            if presented.is_empty() {
                "no host name".to_owned()
            } else {
                presented.join(", ")
            },
            expected.to_str()
        ),
        C::Revoked => "has been revoked".into(),
        C::BadEncoding => "could not be read (it is not a valid X.509 certificate)".into(),
        C::BadSignature
        | C::UnsupportedSignatureAlgorithmContext { .. }
        | C::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "has a signature this server cannot verify".into()
        }
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "is not for TLS servers (its extended key usage says otherwise)".into()
        }
        C::Other(other) if format!("{other:?}").contains("CaUsedAsEndEntity") => {
            "is a CA's, not a server's: list this very certificate in the CA file to trust it \
             as it is, or have the endpoint present one its CA signed"
                .into()
        }
        other => format!("was refused ({other:?})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_as_sentences() {
        let cases = [
            (
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                "the certificate is not signed by a CA this server trusts",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::Expired),
                "the certificate has expired",
            ),
            (
                rustls::Error::InvalidCertificate(CertificateError::NotValidForName),
                "the certificate is made out to another host name",
            ),
            (
                rustls::Error::NoCertificatesPresented,
                "the endpoint presented no certificate",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(explain(&error), want);
        }
        let ca = rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(
            Arc::new(webpki_error()),
        )));
        assert!(
            explain(&ca).contains("is a CA's, not a server's"),
            "{}",
            explain(&ca)
        );
    }

    /// A self-signed certificate that is its own CA, as `openssl req -x509` makes one.
    fn self_signed(names: &[&str], common_name: &str, expired: bool) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().expect("a key");
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        params
            .self_signed(&key)
            .expect("a certificate")
            .der()
            .clone()
    }

    fn verifier(listed: &[CertificateDer<'static>], check_name: bool) -> ListedOrElse {
        crate::http::install_crypto_provider();
        let provider = CryptoProvider::get_default().cloned().expect("a provider");
        let mut roots = rustls::RootCertStore::empty();
        for certificate in listed {
            roots.add(certificate.clone()).expect("a root");
        }
        ListedOrElse {
            listed: listed.to_vec(),
            check_name,
            inner: Some(
                rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider.clone(),
                )
                .build()
                .expect("a verifier"),
            ),
            provider,
        }
    }

    fn verify(
        verifier: &ListedOrElse,
        certificate: &CertificateDer<'_>,
        name: &str,
    ) -> Result<(), rustls::Error> {
        let name = ServerName::try_from(name.to_owned()).expect("a name");
        verifier
            .verify_server_cert(certificate, &[], &name, &[], UnixTime::now())
            .map(drop)
    }

    #[test]
    fn a_listed_certificate_is_trusted_as_it_is() {
        let with_names = self_signed(&["localhost", "127.0.0.1"], "test", false);
        let common_name_only = self_signed(&[], "hooks.internal", false);
        let expired = self_signed(&["localhost"], "test", true);
        let unlisted = self_signed(&["localhost"], "test", false);
        let listed = [
            with_names.clone(),
            common_name_only.clone(),
            expired.clone(),
        ];
        let checked = verifier(&listed, true);
        assert_eq!(verify(&checked, &with_names, "localhost"), Ok(()));
        assert_eq!(verify(&checked, &with_names, "127.0.0.1"), Ok(()));
        // As OpenSSL: without alternative names, the common name is the name.
        assert_eq!(
            verify(&checked, &common_name_only, "hooks.internal"),
            Ok(())
        );
        assert_eq!(
            verify(&checked, &common_name_only, "HOOKS.internal"),
            Ok(())
        );
        for (certificate, name) in [
            (&with_names, "elsewhere.example"),
            (&common_name_only, "elsewhere.example"),
        ] {
            let error = verify(&checked, certificate, name).expect_err(name);
            assert!(
                explain(&error).contains("made out to"),
                "{}",
                explain(&error)
            );
        }
        assert_eq!(
            verify(&checked, &expired, "localhost"),
            Err(rustls::Error::InvalidCertificate(CertificateError::Expired))
        );
        // Not listed: the wrapped verifier's answer, unchanged, and what to do about it.
        let error = verify(&checked, &unlisted, "localhost").expect_err("not listed");
        assert!(
            explain(&error).contains("list this very certificate"),
            "{}",
            explain(&error)
        );
        // Without the listing, WebPKI alone refuses the listed one (what this module is for).
        let alone = checked
            .inner
            .as_ref()
            .expect("a verifier")
            .verify_server_cert(
                &with_names,
                &[],
                &ServerName::try_from("localhost").expect("a name"),
                &[],
                UnixTime::now(),
            );
        let error = alone.expect_err("WebPKI refuses a CA as a server");
        assert!(
            explain(&error).contains("is a CA's, not a server's"),
            "{}",
            explain(&error)
        );
        // verify-ca: names are not checked.
        let unnamed = verifier(&listed, false);
        assert_eq!(verify(&unnamed, &with_names, "elsewhere.example"), Ok(()));
    }

    /// An error whose text is webpki's for a CA certificate used as a server's.
    fn webpki_error() -> std::io::Error {
        std::io::Error::other("CaUsedAsEndEntity")
    }
}
