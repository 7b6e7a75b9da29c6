//! `--web.config.file`: TLS, mutual TLS, basic auth and extra response
//! headers, in the Prometheus exporter-toolkit `web-config.yml` format.
//! Owns parsing, validation (certificates and keys are loaded, bcrypt hashes
//! checked, before a file is accepted), the TLS server configuration
//! (rustls with the `ring` provider: TLS 1.0 and 1.1 are never offered),
//! basic-auth checks, and reloading when the file or a file it names changes.
//!
//! PEM is parsed with `rustls-pki-types`: `rustls-pemfile` is flagged by
//! RUSTSEC-2025-0134.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use base64::Engine as _;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use serde::Deserialize;

/// The realm named in `WWW-Authenticate`.
pub const REALM: &str = "roce_exporter";
/// The files are looked at no more often than this (on new connections).
const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// The highest bcrypt cost accepted, htpasswd's own maximum (`-C 4..17`):
/// one verification at 17 takes seconds already.
const MAX_BCRYPT_COST: u32 = 17;

#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// The file as written (exporter-toolkit key names).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct WebConfigFile {
    tls_server_config: Option<TlsFile>,
    http_server_config: HttpFile,
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_auth_type: ClientAuth,
    #[serde(default)]
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    min_version: Option<TlsVersion>,
    #[serde(default)]
    max_version: Option<TlsVersion>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct HttpFile {
    headers: BTreeMap<String, String>,
    /// Accepted for compatibility with exporter-toolkit files; only
    /// HTTP/1.1 is served.
    http2: Option<bool>,
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

/// A validated web configuration, ready to serve with.
pub struct WebConfig {
    tls: Option<Arc<rustls::ServerConfig>>,
    users: BTreeMap<String, String>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Passwords already verified against the current hash of each user, so
    /// that repeated scrapes do not pay a bcrypt verification each (tens of
    /// milliseconds). A reload builds a new `WebConfig`, emptying it.
    verified: Mutex<HashMap<String, Vec<u8>>>,
    /// The files this configuration was read from, for change detection.
    files: Vec<PathBuf>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish()
    }
}

impl WebConfig {
    /// No TLS, no authentication, no extra headers.
    pub fn plain() -> WebConfig {
        WebConfig {
            tls: None,
            users: BTreeMap::new(),
            headers: Vec::new(),
            verified: Mutex::new(HashMap::new()),
            files: Vec::new(),
        }
    }

    /// Parses YAML text; relative file names resolve against `base_dir`.
    pub fn parse(text: &str, origin: &str, base_dir: &Path) -> Result<WebConfig, WebConfigError> {
        let invalid = |message: String| WebConfigError::Invalid {
            path: origin.to_string(),
            message,
        };
        let meaningful = text.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && t != "---"
        });
        let file: WebConfigFile = if meaningful {
            serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?
        } else {
            WebConfigFile::default()
        };
        let mut files = Vec::new();
        let tls = match &file.tls_server_config {
            Some(t) => Some(Arc::new(
                build_tls(t, base_dir, &mut files).map_err(invalid)?,
            )),
            None => None,
        };
        for (user, hash) in &file.basic_auth_users {
            if user.contains(':') {
                return Err(invalid(format!(
                    "basic_auth_users: user name {user:?} contains ':', which basic auth cannot carry"
                )));
            }
            let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
                return Err(invalid(format!(
                    "basic_auth_users: the password of {user:?} is not a bcrypt hash (expected $2y$..., e.g. from htpasswd -nBC 10)"
                )));
            };
            // Each check of a wrong or uncached password runs bcrypt at the
            // hash's cost, 2^cost rounds: cost 10 takes ~60 ms, 31 (which
            // the format allows) about a day and a half, so every scrape
            // would hang. Above htpasswd's own limit is refused.
            if parts.get_cost() > MAX_BCRYPT_COST {
                return Err(invalid(format!(
                    "basic_auth_users: the bcrypt cost of {user:?} is {}, above {MAX_BCRYPT_COST} (each check would take 15 s or more); use htpasswd -nBC 10",
                    parts.get_cost()
                )));
            }
        }
        let mut headers = Vec::new();
        for (name, value) in &file.http_server_config.headers {
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                invalid(format!(
                    "http_server_config.headers: {name:?} is not a valid header name"
                ))
            })?;
            if RESERVED_HEADERS.contains(&n) {
                return Err(invalid(format!(
                    "http_server_config.headers: {name:?} is set by the server and cannot be configured"
                )));
            }
            let v = HeaderValue::from_str(value).map_err(|_| {
                invalid(format!(
                    "http_server_config.headers: the value of {name:?} is not a valid header value"
                ))
            })?;
            headers.push((n, v));
        }
        if file.http_server_config.http2 == Some(true) {
            tracing::info!(
                "web config: http2 is accepted for compatibility; only HTTP/1.1 is served"
            );
        }
        Ok(WebConfig {
            tls,
            users: file.basic_auth_users,
            headers,
            verified: Mutex::new(HashMap::new()),
            files,
        })
    }

    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| WebConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut config = WebConfig::parse(&text, &path.display().to_string(), base)?;
        config.files.insert(0, path.to_path_buf());
        Ok(config)
    }

    /// The TLS configuration, when TLS is on.
    pub fn tls(&self) -> Option<&Arc<rustls::ServerConfig>> {
        self.tls.as_ref()
    }

    /// Headers added to every response.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }

    /// Whether requests must carry basic-auth credentials.
    pub fn requires_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether the request's `Authorization` header names a configured user
    /// with the right password (always true without `basic_auth_users`).
    /// May run a bcrypt verification: call it off the async workers.
    pub fn authorize(&self, headers: &HeaderMap) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some((user, password)) = basic_credentials(headers) else {
            return false;
        };
        let known = self.users.get(&user);
        if known.is_some() {
            if let Ok(cache) = self.verified.lock() {
                if cache
                    .get(&user)
                    .is_some_and(|p| constant_time_eq(p, password.as_bytes()))
                {
                    return true;
                }
            }
        }
        // An unknown user is checked against a real hash too, so that the
        // answer takes as long as for a known user with a wrong password.
        let Some(hash) = known.or_else(|| self.users.values().next()) else {
            return false;
        };
        let ok = bcrypt::verify(password.as_bytes(), hash).unwrap_or(false) && known.is_some();
        if ok {
            if let Ok(mut cache) = self.verified.lock() {
                cache.insert(user, password.into_bytes());
            }
        }
        ok
    }
}

/// Headers the server owns; configuring them would corrupt responses.
const RESERVED_HEADERS: [HeaderName; 6] = [
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::CONTENT_ENCODING,
    header::TRANSFER_ENCODING,
    header::CONNECTION,
    header::WWW_AUTHENTICATE,
];

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    let n = a.len().max(b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// `Authorization: Basic base64(user:password)`.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
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

fn build_tls(
    t: &TlsFile,
    base: &Path,
    files: &mut Vec<PathBuf>,
) -> Result<rustls::ServerConfig, String> {
    let min = t.min_version.unwrap_or(TlsVersion::TLS12);
    let max = t.max_version.unwrap_or(TlsVersion::TLS13);
    for (key, v) in [
        ("min_version", t.min_version),
        ("max_version", t.max_version),
    ] {
        if matches!(v, Some(TlsVersion::TLS10 | TlsVersion::TLS11)) {
            return Err(format!(
                "tls_server_config.{key}: TLS 1.0 and 1.1 are not supported; use TLS12 or TLS13"
            ));
        }
    }
    if min > max {
        return Err("tls_server_config: min_version is above max_version".into());
    }
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    if min <= TlsVersion::TLS12 && max >= TlsVersion::TLS12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= TlsVersion::TLS13 {
        versions.push(&rustls::version::TLS13);
    }

    let cert_path = resolve(base, &t.cert_file);
    let key_path = resolve(base, &t.key_file);
    files.push(cert_path.clone());
    files.push(key_path.clone());
    let certs = CertificateDer::pem_file_iter(&cert_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls_server_config.cert_file {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "tls_server_config.cert_file {}: no certificate in the file",
            cert_path.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path)
        .map_err(|e| format!("tls_server_config.key_file {}: {e}", key_path.display()))?;

    let verifying = matches!(
        t.client_auth_type,
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
    );
    let roots = match &t.client_ca_file {
        Some(ca) => {
            let ca_path = resolve(base, ca);
            files.push(ca_path.clone());
            let mut roots = RootCertStore::empty();
            let cas = CertificateDer::pem_file_iter(&ca_path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    format!(
                        "tls_server_config.client_ca_file {}: {e}",
                        ca_path.display()
                    )
                })?;
            let (added, _) = roots.add_parsable_certificates(cas);
            if added == 0 {
                return Err(format!(
                    "tls_server_config.client_ca_file {}: no usable CA certificate in the file",
                    ca_path.display()
                ));
            }
            Some(roots)
        }
        None if verifying => {
            return Err(format!(
                "tls_server_config: client_auth_type {:?} needs client_ca_file",
                t.client_auth_type
            ))
        }
        None => None,
    };

    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let verifier: Option<Arc<dyn ClientCertVerifier>> = match (t.client_auth_type, roots) {
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
            return Err("tls_server_config: client_ca_file is required".into())
        }
        (mode, Some(roots)) => {
            let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let b = if mode == ClientAuth::VerifyClientCertIfGiven {
                b.allow_unauthenticated()
            } else {
                b
            };
            Some(
                b.build()
                    .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?,
            )
        }
    };
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls_server_config: certificate and key do not work together: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
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

/// What identifies a file's version: a rewrite or a rename changes it.
type Fingerprint = Vec<Option<(SystemTime, u64, u64)>>;

fn fingerprint(files: &[PathBuf]) -> Fingerprint {
    use std::os::unix::fs::MetadataExt;
    files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.modified().ok()?, m.len(), m.ino()))
        })
        .collect()
}

struct WatchState {
    checked: Instant,
    files: Vec<PathBuf>,
    seen: Fingerprint,
}

/// The web configuration in force, re-read when its file or a certificate,
/// key or CA file it names changes (looked at on new connections, at most
/// once per [`RECHECK_EVERY`]), so certificates rotate without a restart.
/// A changed file that does not validate is refused with an error in the
/// log and the last good configuration stays.
pub struct WebConfigWatcher {
    path: PathBuf,
    current: ArcSwap<WebConfig>,
    state: Mutex<WatchState>,
}

impl std::fmt::Debug for WebConfigWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfigWatcher")
            .field("path", &self.path)
            .finish()
    }
}

impl WebConfigWatcher {
    /// Loads the file; an invalid file is an error (the caller exits).
    pub fn load(path: &Path) -> Result<WebConfigWatcher, WebConfigError> {
        let config = WebConfig::load(path)?;
        let files = config.files.clone();
        let seen = fingerprint(&files);
        Ok(WebConfigWatcher {
            path: path.to_path_buf(),
            current: ArcSwap::from_pointee(config),
            state: Mutex::new(WatchState {
                checked: Instant::now(),
                files,
                seen,
            }),
        })
    }

    /// The configuration for a new connection, after reloading it if a
    /// file changed since the last look.
    pub fn current(&self) -> Arc<WebConfig> {
        self.recheck(false);
        self.current.load_full()
    }

    /// Looks at the files now (`force`) or if the last look is old enough.
    pub fn recheck(&self, force: bool) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if !force && state.checked.elapsed() < RECHECK_EVERY {
            return;
        }
        state.checked = Instant::now();
        let now = fingerprint(&state.files);
        if now == state.seen {
            return;
        }
        // Remembered even when refused, so a bad file is reported once, not
        // on every check; the next edit is looked at again.
        state.seen = now;
        match WebConfig::load(&self.path) {
            Ok(config) => {
                state.files = config.files.clone();
                state.seen = fingerprint(&state.files);
                self.current.store(Arc::new(config));
                tracing::info!(file = %self.path.display(), "web configuration reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "web configuration change refused; keeping the running one");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        WebConfig::parse(text, "web.yml", Path::new("/nonexistent-dir"))
    }

    fn message(text: &str) -> String {
        match parse(text) {
            Ok(_) => panic!("{text:?} should be refused"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn empty_file_is_plain_http() {
        let c = parse("# nothing\n").unwrap();
        assert!(c.tls().is_none());
        assert!(!c.requires_auth());
        assert!(c.authorize(&HeaderMap::new()));
    }

    #[test]
    fn unknown_keys_are_errors_with_position() {
        let m = message("basic_auth_users: {}\nhttp_server_config:\n  headerz: {}\n");
        assert!(m.starts_with("web.yml: "), "{m}");
        assert!(m.contains("headerz"), "{m}");
        assert!(m.contains("line 3"), "{m}");
        assert!(m.contains("column 3"), "{m}");
    }

    #[test]
    fn bad_client_auth_type_is_refused() {
        let m = message(
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_auth_type: RequireClientCert\n",
        );
        assert!(m.contains("RequireClientCert"), "{m}");
        assert!(m.contains("line 4"), "{m}");
    }

    #[test]
    fn missing_files_are_named() {
        let m = message("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n");
        assert!(
            m.contains("tls_server_config.cert_file /nonexistent-dir/a.crt"),
            "{m}"
        );
    }

    #[test]
    fn old_tls_versions_are_refused() {
        let m = message(
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  min_version: TLS11\n",
        );
        assert!(m.contains("TLS 1.0 and 1.1 are not supported"), "{m}");
    }

    #[test]
    fn bad_hashes_and_headers_are_refused() {
        let m = message("basic_auth_users:\n  alice: plaintext\n");
        assert!(m.contains("not a bcrypt hash"), "{m}");
        let m = message("http_server_config:\n  headers:\n    Content-Type: x\n");
        assert!(m.contains("set by the server"), "{m}");
        let ok =
            parse("http_server_config:\n  headers:\n    X-Frame-Options: deny\n  http2: true\n")
                .unwrap();
        assert_eq!(ok.headers().len(), 1);
    }

    /// Found while writing fuzz/fuzz_targets/web_config.rs and confirmed
    /// with it (a libFuzzer timeout): a hash of cost 31 was accepted, and
    /// the first request with a wrong password then ran bcrypt with 2^31
    /// rounds, a scrape blocked for about a day and a half.
    #[test]
    fn bcrypt_cost_31_hash_is_refused() {
        let salt_and_hash = "N9Rv4oZ8QhVJ0xq3s0dKxeqE6A6bCUVo2yD6gG0rX8eO6gO1Hc1bC";
        let m = message(&format!(
            "basic_auth_users:\n  u: '$2y$31${salt_and_hash}'\n"
        ));
        assert!(m.contains("bcrypt cost"), "{m}");
        let ok = parse(&format!(
            "basic_auth_users:\n  u: '$2y$04${salt_and_hash}'\n"
        ))
        .unwrap();
        assert!(ok.requires_auth());
    }

    #[test]
    fn credentials_are_parsed_and_compared() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic YWxpY2U6czNjcjN0OmV4dHJh"),
        );
        assert_eq!(
            basic_credentials(&h),
            Some(("alice".into(), "s3cr3t:extra".into()))
        );
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert_eq!(basic_credentials(&h), None);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
