//! TLS to the PostgreSQL server, with libpq's `sslmode` and `sslrootcert`
//! (from the URL, else `PGSSLMODE` and `PGSSLROOTCERT`), through rustls and
//! `tokio-postgres-rustls`.
//!
//! | sslmode | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | when the server offers it; a failed handshake is retried in the clear | not checked |
//! | `require` | always | not checked; with `sslrootcert=FILE`, checked as `verify-ca` (as libpq does when the file exists) |
//! | `verify-ca` | always | signed by a root of `sslrootcert` |
//! | `verify-full` | always | signed by such a root, and names the host connected to |
//!
//! The roots are the file `sslrootcert` names (PEM), else the system's
//! (`sslrootcert=system`, the default: what `rustls-native-certs` finds,
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` included). libpq's `allow` (plain
//! first) is not accepted: tokio-postgres can only ask for TLS first.
//! A Unix socket never uses TLS, as in libpq.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`, less `allow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The modes accepted, for messages.
pub const ACCEPTED: &str = "disable, prefer, require, verify-ca, verify-full";

impl SslMode {
    pub fn parse(s: &str) -> Result<SslMode, String> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(format!(
                    "sslmode=allow is not accepted (this client cannot try a plain connection \
                     first): give one of {ACCEPTED}"
                ))
            }
            other => return Err(format!("sslmode={other} is not one of {ACCEPTED}")),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is asked for: it knows disable, prefer and
    /// require; verifying is this module's verifier's part.
    pub fn wire(self) -> postgres::config::SslMode {
        match self {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        }
    }
}

/// Where trusted roots come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Roots {
    System,
    File(PathBuf),
}

impl std::fmt::Display for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Roots::System => f.write_str("the system's root certificates"),
            Roots::File(p) => write!(f, "sslrootcert {}", p.display()),
        }
    }
}

/// The TLS settings of one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    pub mode: SslMode,
    pub roots: Roots,
}

impl Tls {
    /// From the URL's `sslmode` and `sslrootcert` (each `None` when the URL
    /// has none) and, failing those, the environment's.
    pub fn resolve(
        sslmode: Option<&str>,
        sslrootcert: Option<&str>,
        env_sslmode: Option<&str>,
        env_sslrootcert: Option<&str>,
    ) -> Result<Tls, String> {
        let mut mode = match sslmode.or(env_sslmode) {
            Some(m) => SslMode::parse(m)?,
            None => SslMode::Prefer,
        };
        let roots = match sslrootcert.or(env_sslrootcert) {
            None | Some("") => Roots::System,
            Some("system") => {
                // libpq refuses this too: trusting every public CA without
                // checking the name would trust any certificate one issued.
                if mode != SslMode::VerifyFull {
                    return Err(format!(
                        "sslrootcert=system needs sslmode=verify-full, not {}",
                        mode.name()
                    ));
                }
                Roots::System
            }
            Some(file) => {
                if mode == SslMode::Require {
                    mode = SslMode::VerifyCa;
                }
                Roots::File(PathBuf::from(file))
            }
        };
        Ok(Tls { mode, roots })
    }

    /// The connector for these settings (roots are read here).
    pub fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?;
        let config = match self.mode {
            SslMode::Disable | SslMode::Prefer | SslMode::Require => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
                .with_no_client_auth(),
            SslMode::VerifyCa => {
                let webpki = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(self.root_store()?),
                    provider,
                )
                .build()
                .map_err(|e| format!("{}: {e}", self.roots))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
                    .with_no_client_auth()
            }
            SslMode::VerifyFull => builder
                .with_root_certificates(self.root_store()?)
                .with_no_client_auth(),
        };
        Ok(MakeRustlsConnect::new(config))
    }

    fn root_store(&self) -> Result<RootCertStore, String> {
        let certs: Vec<CertificateDer<'static>> = match &self.roots {
            Roots::File(path) => CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| {
                    format!(
                        "cannot read sslrootcert {} ({e}): give a PEM file of the CA \
                         certificates to trust",
                        path.display()
                    )
                })?,
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                if found.certs.is_empty() {
                    let why: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                    return Err(format!(
                        "no system root certificates were found ({}): give \
                         sslrootcert=FILE, a PEM file of the CA that signed the server's \
                         certificate",
                        if why.is_empty() {
                            "none installed".to_string()
                        } else {
                            why.join("; ")
                        }
                    ));
                }
                found.certs
            }
        };
        let mut store = RootCertStore::empty();
        let (added, _) = store.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!(
                "{} holds no usable CA certificate: give a PEM file of the CA that signed the \
                 server's certificate",
                self.roots
            ));
        }
        Ok(store)
    }
}

/// Why a connection failed in its TLS part.
#[derive(Debug)]
pub enum Failure {
    /// The server answered that it does not speak TLS.
    Refused,
    /// The handshake failed: rustls's error, when it was that.
    Handshake(Option<rustls::Error>, String),
}

/// What of `e` is a TLS failure. tokio-postgres gives no error kind to test;
/// its TLS errors print as "error performing TLS handshake", and the cause
/// is the connector's error or its own text.
pub fn failure(e: &postgres::Error) -> Option<Failure> {
    if e.to_string() != "error performing TLS handshake" {
        return None;
    }
    let cause = std::error::Error::source(e)?;
    if cause.to_string() == "server does not support TLS" {
        return Some(Failure::Refused);
    }
    // tokio-rustls wraps rustls's error in an io::Error (whose `source`
    // skips it: `get_ref` reaches it).
    let rustls_error = cause
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned();
    Some(Failure::Handshake(rustls_error, cause.to_string()))
}

/// Checks nothing of the certificate (`prefer`, `require`), as libpq with no
/// root certificate; the handshake's signatures are still checked, so the
/// peer holds the key of the certificate it showed.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root, the name may be any.
/// rustls's verifier checks the chain before the name, so "not valid for
/// name" means the chain passed.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_the_url_wins_over_the_environment() {
        for m in ["disable", "prefer", "require", "verify-ca", "verify-full"] {
            assert_eq!(SslMode::parse(m).unwrap().name(), m);
        }
        for bad in ["allow", "Require", "on", ""] {
            let e = SslMode::parse(bad).unwrap_err();
            assert!(e.contains(ACCEPTED), "{e}");
        }
        let t = |m, r, em, er| Tls::resolve(m, r, em, er);
        assert_eq!(t(None, None, None, None).unwrap().mode, SslMode::Prefer);
        assert_eq!(
            t(None, None, Some("require"), None).unwrap().mode,
            SslMode::Require
        );
        assert_eq!(
            t(Some("disable"), None, Some("verify-full"), None)
                .unwrap()
                .mode,
            SslMode::Disable
        );
        assert!(t(None, None, Some("allow"), None).is_err());
    }

    #[test]
    fn roots_are_a_file_or_the_systems() {
        let t = |m, r, er| Tls::resolve(m, r, None, er).unwrap();
        assert_eq!(t(Some("verify-full"), None, None).roots, Roots::System);
        assert_eq!(
            t(Some("verify-full"), None, Some("/ca.pem")).roots,
            Roots::File("/ca.pem".into())
        );
        assert_eq!(
            t(Some("verify-ca"), Some("/a.pem"), Some("/b.pem")).roots,
            Roots::File("/a.pem".into())
        );
        // require with a root file checks the chain, as libpq.
        assert_eq!(
            t(Some("require"), Some("/a.pem"), None).mode,
            SslMode::VerifyCa
        );
        assert_eq!(t(Some("require"), None, None).mode, SslMode::Require);
        assert_eq!(
            t(Some("verify-full"), Some("system"), None).roots,
            Roots::System
        );
        let e = Tls::resolve(Some("require"), Some("system"), None, None).unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
    }

    #[test]
    fn a_root_file_that_is_no_certificate_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        for (file, says) in [(&missing, "cannot read sslrootcert"), (&junk, "no usable")] {
            let tls = Tls {
                mode: SslMode::VerifyFull,
                roots: Roots::File(file.clone()),
            };
            let e = tls.connector().err().unwrap();
            assert!(
                e.contains(says) && e.contains(&file.display().to_string()),
                "{e}"
            );
        }
    }
}
