//! `tls_server_config` of the web configuration: the section as written,
//! the files it names, and the rustls server configuration built from it
//! (the `ring` provider; TLS 1.0 and 1.1 are never offered), including
//! exporter-toolkit's client certificate modes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme,
    SupportedProtocolVersion,
};
use serde::Deserialize;

/// `tls_server_config:` as written (exporter-toolkit key names).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    pub(crate) client_auth_type: ClientAuth,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    min_version: Option<TlsVersion>,
    #[serde(default)]
    max_version: Option<TlsVersion>,
}

/// Go's `tls.ClientAuthType` names, as exporter-toolkit spells them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ClientAuth {
    #[default]
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
enum TlsVersion {
    TLS10,
    TLS11,
    TLS12,
    TLS13,
}

impl TlsFile {
    /// The certificate, key and CA files, resolved against `base`.
    pub(crate) fn named_files(&self, base: &Path) -> Vec<PathBuf> {
        let mut files = vec![
            resolve(base, &self.cert_file),
            resolve(base, &self.key_file),
        ];
        if let Some(ca) = &self.client_ca_file {
            files.push(resolve(base, ca));
        }
        files
    }

    /// The server configuration: protocol versions, certificate and key,
    /// client certificate verification; relative files resolve against
    /// `base`.
    pub(crate) fn build(&self, base: &Path) -> Result<rustls::ServerConfig, TlsError> {
        let versions = self.protocol_versions()?;
        let (certs, key) = self.identity(base)?;
        let roots = self.client_roots(base)?;
        let provider = provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(TlsError::Versions)?;
        let builder = match client_verifier(self.client_auth_type, roots, &provider)? {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(TlsError::KeyMismatch)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// `min_version` to `max_version` (TLS 1.2 to 1.3 unless narrowed).
    fn protocol_versions(&self) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
        let min = self.min_version.unwrap_or(TlsVersion::TLS12);
        let max = self.max_version.unwrap_or(TlsVersion::TLS13);
        for (key, v) in [
            ("min_version", self.min_version),
            ("max_version", self.max_version),
        ] {
            if matches!(v, Some(TlsVersion::TLS10 | TlsVersion::TLS11)) {
                return Err(TlsError::OldVersion { key });
            }
        }
        if min > max {
            return Err(TlsError::VersionOrder);
        }
        let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
        if min <= TlsVersion::TLS12 && max >= TlsVersion::TLS12 {
            versions.push(&rustls::version::TLS12);
        }
        if max >= TlsVersion::TLS13 {
            versions.push(&rustls::version::TLS13);
        }
        Ok(versions)
    }

    /// The server's certificate chain and private key.
    fn identity(
        &self,
        base: &Path,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        let cert_path = resolve(base, &self.cert_file);
        let key_path = resolve(base, &self.key_file);
        let certs = pem_certificates(&cert_path, "cert_file")?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate { path: cert_path });
        }
        let pem = read_pem(&key_path, "key_file")?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|error| TlsError::Pem {
            key: "key_file",
            path: key_path,
            error,
        })?;
        Ok((certs, key))
    }

    /// The CAs client certificates are verified against (`client_ca_file`),
    /// required by the verifying modes.
    fn client_roots(&self, base: &Path) -> Result<Option<RootCertStore>, TlsError> {
        let verifying = matches!(
            self.client_auth_type,
            ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
        );
        let Some(ca) = &self.client_ca_file else {
            if verifying {
                return Err(TlsError::NeedsCa(self.client_auth_type));
            }
            return Ok(None);
        };
        let ca_path = resolve(base, ca);
        let mut roots = RootCertStore::empty();
        let (added, _) =
            roots.add_parsable_certificates(pem_certificates(&ca_path, "client_ca_file")?);
        if added == 0 {
            return Err(TlsError::NoCa { path: ca_path });
        }
        Ok(Some(roots))
    }
}

/// Why `tls_server_config` does not give a server configuration; each
/// message names the key concerned.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("tls_server_config: {0}")]
    Versions(rustls::Error),
    #[error("tls_server_config.{key}: TLS 1.0 and 1.1 are not supported; use TLS12 or TLS13")]
    OldVersion { key: &'static str },
    #[error("tls_server_config: min_version is above max_version")]
    VersionOrder,
    #[error("tls_server_config.{key} {}: {}", error.path.display(), error.kind)]
    File {
        key: &'static str,
        error: roce_host::named::NamedFileError,
    },
    #[error("tls_server_config.{key} {}: {error}", path.display())]
    Pem {
        key: &'static str,
        path: PathBuf,
        error: rustls::pki_types::pem::Error,
    },
    #[error("tls_server_config.cert_file {}: no certificate in the file", path.display())]
    NoCertificate { path: PathBuf },
    #[error("tls_server_config: certificate and key do not work together: {0}")]
    KeyMismatch(rustls::Error),
    #[error("tls_server_config: client_auth_type {0:?} needs client_ca_file")]
    NeedsCa(ClientAuth),
    #[error("tls_server_config: client_ca_file is required")]
    CaRequired,
    #[error(
        "tls_server_config.client_ca_file {}: no usable CA certificate in the file",
        path.display()
    )]
    NoCa { path: PathBuf },
    #[error("tls_server_config.client_ca_file: {0}")]
    Verifier(rustls::server::VerifierBuilderError),
}

/// Every certificate of a PEM file; an error names the file and its key.
fn pem_certificates(
    path: &Path,
    key: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path, key)?;
    CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Pem {
            key,
            path: path.to_path_buf(),
            error,
        })
}

/// The bytes of a PEM file, read within roce_host::named's bounds (a FIFO
/// or a device is refused, never read).
fn read_pem(path: &Path, key: &'static str) -> Result<Vec<u8>, TlsError> {
    roce_host::named::read_bytes(path, roce_host::named::Limits::PEM)
        .map_err(|error| TlsError::File { key, error })
}

/// How client certificates are asked for and checked in `mode`; `None`:
/// not asked for.
fn client_verifier(
    mode: ClientAuth,
    roots: Option<RootCertStore>,
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, TlsError> {
    Ok(match (mode, roots) {
        (ClientAuth::NoClientCert, _) => None,
        (ClientAuth::RequestClientCert, _) => Some(Arc::new(AnyClientCert {
            mandatory: false,
            provider: provider.clone(),
        })),
        (ClientAuth::RequireAnyClientCert, _) => Some(Arc::new(AnyClientCert {
            mandatory: true,
            provider: provider.clone(),
        })),
        (ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert, None) => {
            return Err(TlsError::CaRequired)
        }
        (mode, Some(roots)) => {
            let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let b = if mode == ClientAuth::VerifyClientCertIfGiven {
                b.allow_unauthenticated()
            } else {
                b
            };
            Some(b.build().map_err(TlsError::Verifier)?)
        }
    })
}

fn resolve(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Go's `RequestClientCert` / `RequireAnyClientCert`: a client certificate
/// is asked for (and, when mandatory, required) but not checked against any
/// CA; the handshake signature still proves the client holds its key.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
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
            &self.provider.signature_verification_algorithms,
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
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
