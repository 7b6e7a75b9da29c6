//! The bounded HTTP/1.1 GET client of the peer-probe sources: the peers'
//! endpoint documents (`/peer-probe/endpoints`) and the Prometheus HTTP
//! API query (`/api/v1/query`). The protocol is hyper's client connection
//! (`hyper::client::conn::http1`: framing, `chunked`, the head's parser)
//! over a connection made here; every answer is hostile input:
//!
//! - one absolute deadline covers name resolution, connect, TLS handshake,
//!   request and the whole answer (a peer sending one byte a second gets
//!   the deadline, not a read timeout per byte);
//! - the status must be `200` of `HTTP/1.0` or `HTTP/1.1`; a redirect is
//!   refused (never followed), any other status too;
//! - the head is bounded by [`MAX_HEAD_BYTES`] and [`MAX_HEADERS`], the
//!   body by the caller's bound, before and after a `gzip` decoding;
//! - credentials (basic auth, a bearer token) are never sent over plain
//!   `http://`: such a request is refused before any connection.
//!
//! TLS (rustls, ring) trusts only the CA certificates configured for it
//! (no system store) and checks the certificate against the URL's host.
//! Each fetch runs on a current-thread runtime of its own, on the calling
//! thread (a fetch-pool worker), dropped with everything it holds when the
//! fetch ends.

pub use roce_model::peer::FetchReason;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod response;
pub use response::{parse_answer, MAX_HEADERS, MAX_HEAD_BYTES};

/// A failed GET: its reason and a message naming the address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct FetchError {
    pub reason: FetchReason,
    pub message: String,
}

pub fn fetch_error(reason: FetchReason, message: impl Into<String>) -> FetchError {
    FetchError {
        reason,
        message: message.into(),
    }
}

/// A configuration of the client that cannot be used (said once at
/// start, not per request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("{key} {path}: {message}")]
    File {
        key: &'static str,
        path: String,
        message: String,
    },
    #[error("TLS client: {0}")]
    Tls(String),
}

/// `http://authority` or `https://authority` and the rest of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    /// `host:port` (`[v6]:port`).
    pub authority: String,
    /// A path prefix without a trailing `/` (`""` or `/prometheus`).
    pub prefix: String,
}

impl Url {
    /// `http(s)://host:port[/prefix]`; a missing port is 80 or 443. No
    /// user info, query or fragment.
    pub fn parse(text: &str) -> Option<Url> {
        let t = text.trim();
        if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return None;
        }
        let (tls, rest) = if let Some(r) = t.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = t.strip_prefix("http://") {
            (false, r)
        } else {
            return None;
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty()
            || authority.contains('@')
            || path.contains(['?', '#'])
            || path.contains("//")
        {
            return None;
        }
        let has_port = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once("]:").is_some(),
            None => authority.contains(':'),
        };
        let authority = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        Some(Url {
            tls,
            authority,
            prefix: path.trim_end_matches('/').to_string(),
        })
    }

    /// The host of the authority (`[v6]:port` without the brackets).
    pub fn host(&self) -> &str {
        host_of(&self.authority)
    }
}

/// The host of `host:port` (`[v6]:port` without the brackets).
pub fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

/// The client: a deadline per request, the CA to trust for `https://`,
/// and the `Authorization` header value when credentials are configured.
#[derive(Clone)]
pub struct HttpClient {
    /// The absolute deadline of one request, from resolution to the last
    /// byte of the answer.
    pub deadline: Duration,
    tls: Option<Arc<rustls::ClientConfig>>,
    authorization: Option<String>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credentials are never printed.
        f.debug_struct("HttpClient")
            .field("deadline", &self.deadline)
            .field("tls", &self.tls.is_some())
            .field("authorization", &self.authorization.is_some())
            .finish()
    }
}

/// What a GET asks for besides the URL.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Path and query, starting with `/` (after the URL's prefix).
    pub path: &'a str,
    pub accept: &'a str,
    /// Largest body taken (after decoding).
    pub max_body: usize,
    /// Ask for (and accept) a gzip-encoded body.
    pub gzip: bool,
}

impl HttpClient {
    pub fn new(
        deadline: Duration,
        tls: Option<Arc<rustls::ClientConfig>>,
        authorization: Option<String>,
    ) -> Self {
        HttpClient {
            deadline: deadline.max(Duration::from_millis(1)),
            tls,
            authorization,
        }
    }

    /// Whether a CA is configured (addresses without a scheme are `https`).
    pub fn has_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether requests carry credentials.
    pub fn has_credentials(&self) -> bool {
        self.authorization.is_some()
    }

    /// GETs `url` + `request.path` within the deadline; the body.
    pub fn get(&self, url: &Url, request: &Request) -> Result<Vec<u8>, FetchError> {
        self.exchange(url, request, false).map(|(_, body)| body)
    }

    /// POSTs to `url` + `request.path` (parameters in the query, no body)
    /// within the deadline; the status (any but a redirect) and the body,
    /// bounded and decoded as [`HttpClient::get`]'s.
    pub fn post(&self, url: &Url, request: &Request) -> Result<(u16, Vec<u8>), FetchError> {
        self.exchange(url, request, true)
    }

    /// One request and its answer, within the deadline.
    fn exchange(
        &self,
        url: &Url,
        request: &Request,
        post: bool,
    ) -> Result<(u16, Vec<u8>), FetchError> {
        let until = Instant::now() + self.deadline;
        let authority = url.authority.as_str();
        let tls = match (url.tls, &self.tls) {
            (false, _) => None,
            (true, Some(t)) => Some(t),
            (true, None) => {
                return Err(fetch_error(
                    FetchReason::Unsupported,
                    format!("https://{authority}: https needs a CA file (tls_ca_file)"),
                ))
            }
        };
        if !url.tls && self.authorization.is_some() {
            return Err(fetch_error(
                FetchReason::PlainHttpCredentials,
                format!("http://{authority}: credentials are never sent over plain http"),
            ));
        }
        let addr = resolve(authority, until)?;
        let target = format!("{}{}", url.prefix, request.path);
        let exchange = response::Exchange {
            authority,
            target: &target,
            authorization: self.authorization.as_deref(),
            request,
            post,
        };
        let fetch = async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| connect_error(authority, e))?;
            let Some(config) = tls else {
                return exchange.run(tcp).await;
            };
            let host = url.host();
            let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
                fetch_error(
                    FetchReason::Tls,
                    format!("{authority}: server name {host}: {e}"),
                )
            })?;
            let stream = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| connect_error(authority, e))?;
            exchange.run(stream).await
        };
        run_until(until, fetch)
            .map_err(|e| fetch_error(FetchReason::Connect, format!("{authority}: {e}")))?
            .unwrap_or_else(|| {
                Err(fetch_error(
                    FetchReason::Timeout,
                    format!("{authority}: no whole answer within {:?}", self.deadline),
                ))
            })
    }
}

/// Runs `work` on a current-thread runtime of its own until it ends or
/// `until` passes (`None`). Whatever it started (connections, the tasks
/// that drive them) ends with the runtime, when this returns. Fails only
/// when the runtime cannot be made (out of file descriptors).
pub(crate) fn run_until<F: Future>(until: Instant, work: F) -> std::io::Result<Option<F::Output>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    Ok(runtime.block_on(async {
        tokio::time::timeout_at(tokio::time::Instant::from_std(until), work)
            .await
            .ok()
    }))
}

/// `host:port` to one address, within the deadline: a literal address
/// needs no lookup; a name is looked up on a thread of its own, given up
/// on at the deadline (the lookup itself ends within the resolver's own
/// timeouts).
fn resolve(authority: &str, until: Instant) -> Result<SocketAddr, FetchError> {
    if let Ok(a) = authority.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let name = authority.to_string();
    std::thread::Builder::new()
        .name("roce-peer-resolve".into())
        .spawn(move || {
            let r = name
                .to_socket_addrs()
                .map(|mut a| a.next())
                .map_err(|e| e.to_string());
            let _ = tx.send(r);
        })
        .map_err(|e| fetch_error(FetchReason::Resolve, format!("{authority}: {e}")))?;
    let wait = until.saturating_duration_since(Instant::now());
    match rx.recv_timeout(wait) {
        Ok(Ok(Some(a))) => Ok(a),
        Ok(Ok(None)) => Err(fetch_error(
            FetchReason::Resolve,
            format!("{authority}: no address"),
        )),
        Ok(Err(e)) => Err(fetch_error(
            FetchReason::Resolve,
            format!("{authority}: {e}"),
        )),
        Err(_) => Err(fetch_error(
            FetchReason::Timeout,
            format!("{authority}: name not resolved within the deadline"),
        )),
    }
}

/// A failed connect or TLS handshake.
fn connect_error(authority: &str, e: std::io::Error) -> FetchError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        return fetch_error(FetchReason::Timeout, format!("{authority}: {e}"));
    }
    // tokio-rustls reports a refused certificate or handshake as InvalidData.
    if e.kind() == std::io::ErrorKind::InvalidData {
        return fetch_error(FetchReason::Tls, format!("{authority}: {e}"));
    }
    fetch_error(FetchReason::Connect, format!("{authority}: {e}"))
}

/// `Basic base64(user:password)`.
pub fn basic_authorization(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// The first line of a small secret file (a password, a bearer token);
/// never logged. `key` names the setting in errors.
pub fn read_secret(key: &'static str, path: &Path) -> Result<String, ClientError> {
    let err = |message: String| ClientError::File {
        key,
        path: path.display().to_string(),
        message,
    };
    // A FIFO, a device or a file over 4 KiB is refused, never read.
    let text = roce_host::named::read_text(path, roce_host::named::Limits::SECRET)
        .map_err(|e| err(e.to_string()))?;
    let first = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if first.chars().any(|c| c.is_control()) {
        return Err(err("control characters in it".into()));
    }
    Ok(first.to_string())
}

/// A TLS client trusting the CA certificates of `path` (PEM) only.
pub fn client_config(
    key: &'static str,
    path: &Path,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let err = |message: String| ClientError::File {
        key,
        path: path.display().to_string(),
        message,
    };
    let mut roots = rustls::RootCertStore::empty();
    let pem = roce_host::named::read_bytes(path, roce_host::named::Limits::PEM)
        .map_err(|e| err(e.to_string()))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| err(e.to_string()))?;
        roots.add(cert).map_err(|e| err(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(err("no certificate in it".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Percent-encodes a query parameter value (RFC 3986 unreserved kept).
pub fn query_escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len() * 3);
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
