//! `--web.config.file`: TLS, mutual TLS, basic auth and extra response
//! headers, in the Prometheus exporter-toolkit `web-config.yml` format.
//! Owns parsing, validation (certificates and keys are loaded, bcrypt hashes
//! checked, before a file is accepted), the TLS server configuration
//! (built by the `tls` module: rustls with the `ring` provider, never TLS 1.0 or 1.1),
//! basic-auth checks, and reloading when the file or a file it names changes.
//!
//! Reloads fail closed: a changed file that is empty, does not parse, or
//! would lower the protection in force (TLS to none, a required client
//! certificate to not required, users to none) is refused with an error in
//! the log and the running configuration stays; lowering it takes a
//! restart. A refused file's named certificate, key and CA files are
//! watched too, so one that appears later is picked up.
//!
//! Basic auth: bcrypt runs on one dedicated thread whose queue is fair by
//! source, every outcome cached ([`auth`]): clients repeating wrong
//! passwords are answered from the cache, a flood of distinct ones takes at
//! most that one core and its bounded queue, and a scraper that sends no
//! wrong password goes before the flood, cached or not.
//!
//! PEM is parsed with `rustls-pki-types`: `rustls-pemfile` is flagged by
//! RUSTSEC-2025-0134.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use base64::Engine as _;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;

pub mod auth;
mod watch;
pub use auth::{auth_counts, AuthCounts};
use auth::{AuthState, BcryptJob, CredentialKey, SourceKey, COUNTS};
pub use watch::WebConfigWatcher;
use watch::{stamp, Stamp};

pub use crate::tls::ClientAuth;
use crate::tls::TlsFile;

/// The realm named in `WWW-Authenticate`.
pub const REALM: &str = "roce_exporter";
/// The files are looked at no more often than this (on new connections).
const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// The highest bcrypt cost accepted, htpasswd's own maximum (`-C 4..17`):
/// one verification at 17 takes seconds already.
const MAX_BCRYPT_COST: u32 = 17;
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    /// Absent, not a regular file, over 4 MiB or not read within 5 s
    /// (roce_host::named).
    #[error("cannot read the web configuration: {0}")]
    Read(roce_host::named::NamedFileError),
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

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct HttpFile {
    headers: BTreeMap<String, String>,
    /// Accepted for compatibility with exporter-toolkit files; only
    /// HTTP/1.1 is served.
    http2: Option<bool>,
}

/// A validated web configuration, ready to serve with.
pub struct WebConfig {
    tls: Option<Arc<rustls::ServerConfig>>,
    users: BTreeMap<String, String>,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// `client_auth_type` when TLS is on, for the protection comparison.
    client_auth: Option<ClientAuth>,
    /// Outcomes of earlier checks. Keyed by the configured hash too, so a
    /// reload hands it on to the new configuration unchanged.
    auth: Arc<AuthState>,
    /// The files this configuration was read from, for change detection.
    files: Vec<PathBuf>,
}

/// The outcome of [`WebConfig::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthOutcome {
    Allowed,
    Denied,
    /// The credentials were not seen before and their source's share of
    /// the bcrypt queue, or the queue, is full: not checked (the server
    /// answers 503).
    Busy,
}

/// `None` when the SHA-256 is unavailable: then nothing is cached.
fn credential_key(user: &str, password: &str, hash: Option<&str>) -> Option<CredentialKey> {
    // Lengths first: ("ab", "c") and ("a", "bc") must not share a key.
    let mut input = Vec::with_capacity(24 + user.len() + password.len() + 64);
    for part in [
        user.as_bytes(),
        password.as_bytes(),
        hash.unwrap_or("").as_bytes(),
    ] {
        input.extend_from_slice(&(part.len() as u64).to_be_bytes());
        input.extend_from_slice(part);
    }
    // rustls's own SHA-256 (ring): no extra dependency for one hash.
    let suite = rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13()?;
    let digest = suite.common.hash_provider.hash(&input);
    CredentialKey::try_from(digest.as_ref()).ok()
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
            client_auth: None,
            auth: Arc::default(),
            files: Vec::new(),
        }
    }

    /// Parses YAML text; relative file names resolve against `base_dir`.
    pub fn parse(text: &str, origin: &str, base_dir: &Path) -> Result<WebConfig, WebConfigError> {
        let file = parse_file(text, origin)?;
        let named = named_files(&file, base_dir);
        build(file, origin, base_dir, named)
    }

    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        attempt(path, false).result
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

    /// Whether every request is authenticated before it reaches a route:
    /// basic auth is configured, or TLS requires and verifies a client
    /// certificate.
    pub fn authenticates(&self) -> bool {
        self.requires_auth()
            || (self.tls.is_some()
                && self.client_auth == Some(ClientAuth::RequireAndVerifyClientCert))
    }

    /// bcrypt verifications run for this configuration (and those it was
    /// reloaded from) so far; cached outcomes are not counted.
    pub fn bcrypt_verifications(&self) -> u64 {
        self.auth.verifications.load(Ordering::Relaxed)
    }

    /// The presented credentials, their cache key, the hash to verify
    /// against and whether the user exists; `None`: no usable credentials.
    fn credentials(&self, headers: &HeaderMap) -> Option<Presented> {
        let (user, password) = basic_credentials(headers)?;
        let known = self.users.get(&user);
        // An unknown user is checked against a real hash too, so that the
        // answer takes as long as for a known user with a wrong password.
        let hash = known.or_else(|| self.users.values().next())?.clone();
        let key = credential_key(&user, &password, known.map(String::as_str));
        Some(Presented {
            password,
            hash,
            known: known.is_some(),
            key,
        })
    }

    /// Whether the request's `Authorization` header names a configured user
    /// with the right password (always true without `basic_auth_users`).
    /// May run a bcrypt verification on the calling thread; the server
    /// uses [`WebConfig::check`].
    pub fn authorize(&self, headers: &HeaderMap) -> bool {
        if self.users.is_empty() {
            return true;
        }
        let Some(p) = self.credentials(headers) else {
            return false;
        };
        if let Some(ok) = p.key.and_then(|k| self.auth.lookup(&k)) {
            return ok;
        }
        let ok = self.auth.verify(p.password.as_bytes(), &p.hash, p.known);
        if let Some(k) = p.key {
            self.auth.remember(k, ok);
        }
        ok
    }

    /// [`WebConfig::authorize`] for the async server: an outcome cached for
    /// these exact credentials answers at once; otherwise the check waits
    /// for the one bcrypt thread, which serves sources fairly ([`auth`]),
    /// or is `Busy` when `peer`'s share of its queue, or the queue, is
    /// full. Counted ([`auth_counts`]).
    pub async fn check(&self, headers: &HeaderMap, peer: IpAddr) -> AuthOutcome {
        if self.users.is_empty() {
            return AuthOutcome::Allowed;
        }
        COUNTS.used.store(true, Ordering::Relaxed);
        let outcome = self.check_users(headers, peer).await;
        let counter = match outcome {
            AuthOutcome::Allowed => &COUNTS.allowed,
            AuthOutcome::Denied => &COUNTS.denied,
            AuthOutcome::Busy => &COUNTS.refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        outcome
    }

    async fn check_users(&self, headers: &HeaderMap, peer: IpAddr) -> AuthOutcome {
        let allowed = |ok: bool| {
            if ok {
                AuthOutcome::Allowed
            } else {
                AuthOutcome::Denied
            }
        };
        let Some(p) = self.credentials(headers) else {
            return AuthOutcome::Denied;
        };
        let Some(key) = p.key else {
            // No SHA-256 to key a cache with: nothing is ever cached, and
            // every check would queue; refuse rather than burn the thread.
            return AuthOutcome::Busy;
        };
        if let Some(ok) = self.auth.lookup(&key) {
            return allowed(ok);
        }
        let Some(queue) = auth::queue() else {
            return AuthOutcome::Busy;
        };
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = BcryptJob {
            password: p.password.into_bytes(),
            hash: p.hash,
            known: p.known,
            key,
            state: self.auth.clone(),
            reply,
        };
        if queue.push(SourceKey::of(peer), job).is_err() {
            return AuthOutcome::Busy;
        }
        match answer.await {
            Ok(ok) => allowed(ok),
            Err(_) => AuthOutcome::Busy,
        }
    }

    /// Why `next` would lower the protection this configuration gives, if
    /// it would: TLS off, a required client certificate no longer required
    /// (or no longer verified), basic auth off.
    fn lowered_by(&self, next: &WebConfig) -> Option<String> {
        let mut why = Vec::new();
        if self.tls.is_some() && next.tls.is_none() {
            why.push("it turns TLS off (tls_server_config removed)".to_string());
        }
        let rank = |c: Option<ClientAuth>| match c {
            Some(ClientAuth::RequireAndVerifyClientCert) => 2,
            Some(ClientAuth::RequireAnyClientCert) => 1,
            _ => 0,
        };
        if next.tls.is_some() && rank(next.client_auth) < rank(self.client_auth) {
            why.push(format!(
                "it lowers tls_server_config.client_auth_type from {:?} to {:?}",
                self.client_auth.unwrap_or_default(),
                next.client_auth.unwrap_or_default()
            ));
        }
        if !self.users.is_empty() && next.users.is_empty() {
            why.push("it turns basic auth off (no basic_auth_users)".to_string());
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// Credentials taken from a request, ready to check.
struct Presented {
    password: String,
    hash: String,
    known: bool,
    key: Option<CredentialKey>,
}

/// Whether a file has any content besides blank lines, comments and a
/// document marker.
fn meaningful(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && t != "---"
    })
}

fn parse_file(text: &str, origin: &str) -> Result<WebConfigFile, WebConfigError> {
    if !meaningful(text) {
        return Ok(WebConfigFile::default());
    }
    serde_saphyr::from_str(text).map_err(|e| WebConfigError::Invalid {
        path: origin.to_string(),
        message: e.to_string(),
    })
}

/// Every file the configuration names, resolved (whether or not it exists).
fn named_files(file: &WebConfigFile, base: &Path) -> Vec<PathBuf> {
    file.tls_server_config
        .as_ref()
        .map(|t| t.named_files(base))
        .unwrap_or_default()
}

fn build(
    file: WebConfigFile,
    origin: &str,
    base_dir: &Path,
    files: Vec<PathBuf>,
) -> Result<WebConfig, WebConfigError> {
    let invalid = |message: String| WebConfigError::Invalid {
        path: origin.to_string(),
        message,
    };
    let tls = match &file.tls_server_config {
        Some(t) => Some(Arc::new(
            t.build(base_dir).map_err(|e| invalid(e.to_string()))?,
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
        tracing::info!("web config: http2 is accepted for compatibility; only HTTP/1.1 is served");
    }
    Ok(WebConfig {
        client_auth: file.tls_server_config.as_ref().map(|t| t.client_auth_type),
        tls,
        users: file.basic_auth_users,
        headers,
        auth: Arc::default(),
        files,
    })
}

/// One read of the file: the configuration or why not, and every file it
/// names with the version of each seen before it was read (so a change
/// made during the read is seen by the next look).
struct Attempt {
    files: Vec<(PathBuf, Stamp)>,
    result: Result<WebConfig, WebConfigError>,
}

/// `reload`: an empty file is refused (at start it means plain HTTP, as
/// for exporter-toolkit; on a running server it is a file being written).
fn attempt(path: &Path, reload: bool) -> Attempt {
    let mut files = vec![(path.to_path_buf(), stamp(path))];
    let origin = path.display().to_string();
    let text = match roce_host::named::read_text(path, roce_host::named::Limits::CONFIG) {
        Ok(t) => t,
        Err(e) => {
            return Attempt {
                files,
                result: Err(WebConfigError::Read(e)),
            }
        }
    };
    if reload && !meaningful(&text) {
        return Attempt {
            files,
            result: Err(WebConfigError::Invalid {
                path: origin,
                message: "the file is empty (or only comments)".into(),
            }),
        };
    }
    let file = match parse_file(&text, &origin) {
        Ok(f) => f,
        Err(e) => {
            return Attempt {
                files,
                result: Err(e),
            }
        }
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let named = named_files(&file, base);
    files.extend(named.iter().map(|f| (f.clone(), stamp(f))));
    let mut all = vec![path.to_path_buf()];
    all.extend(named.iter().cloned());
    let result = build(file, &origin, base, all);
    Attempt { files, result }
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

#[cfg(test)]
mod tests;
