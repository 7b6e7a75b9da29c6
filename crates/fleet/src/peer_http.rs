//! The bounded HTTP/1.1 GET client of the peer-probe sources: the peers'
//! endpoint documents (`/peer-probe/endpoints`) and the Prometheus HTTP
//! API query (`/api/v1/query`). Every answer is hostile input:
//!
//! - one absolute deadline covers name resolution, connect, TLS handshake,
//!   request and the whole answer (a peer sending one byte a second gets
//!   the deadline, not a read timeout per byte);
//! - the status line must be `HTTP/1.0 200` or `HTTP/1.1 200`; a redirect
//!   is refused (never followed), any other status too;
//! - the head is bounded by [`MAX_HEAD_BYTES`], the body by the caller's
//!   bound, before and after a `chunked` or `gzip` decoding;
//! - credentials (basic auth, a bearer token) are never sent over plain
//!   `http://`: such a request is refused before any connection.
//!
//! TLS trusts only the CA certificates configured for it (no system store).

pub use roce_model::peer::FetchReason;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod response;
pub use response::parse_answer;
use response::{complete, decode};

/// Bytes of a response head (status line and headers) at most.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

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
        let raw = self.exchange_raw("GET", url, request)?;
        decode(&raw, &url.authority, request)
    }

    /// POSTs to `url` + `request.path` (parameters in the query, no body)
    /// within the deadline; the status (any but a redirect) and the body,
    /// bounded and decoded as [`HttpClient::get`]'s.
    pub fn post(&self, url: &Url, request: &Request) -> Result<(u16, Vec<u8>), FetchError> {
        let raw = self.exchange_raw("POST", url, request)?;
        response::decode_status(&raw, &url.authority, request)
    }

    /// One request and its whole raw answer, within the deadline.
    fn exchange_raw(
        &self,
        method: &str,
        url: &Url,
        request: &Request,
    ) -> Result<Vec<u8>, FetchError> {
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
        let left = left(until).map_err(|e| io_error(authority, e))?;
        let stream = TcpStream::connect_timeout(&addr, left).map_err(|e| io_error(authority, e))?;
        let stream = DeadlineStream { stream, until };
        let auth = self
            .authorization
            .as_deref()
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let encoding = if request.gzip {
            "Accept-Encoding: gzip\r\n"
        } else {
            ""
        };
        let length = if method == "GET" {
            ""
        } else {
            "Content-Length: 0\r\n"
        };
        let text = format!(
            "{method} {}{} HTTP/1.1\r\nHost: {authority}\r\nAccept: {}\r\n{encoding}{auth}{length}User-Agent: roce_exporter\r\nConnection: close\r\n\r\n",
            url.prefix, request.path, request.accept
        );
        let limit = raw_limit(request.max_body);
        Ok(match tls {
            None => exchange(stream, &text, authority, limit)?,
            Some(config) => {
                let host = url.host();
                let name =
                    rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
                        fetch_error(
                            FetchReason::Tls,
                            format!("{authority}: server name {host}: {e}"),
                        )
                    })?;
                let conn = rustls::ClientConnection::new(config.clone(), name)
                    .map_err(|e| fetch_error(FetchReason::Tls, format!("{authority}: {e}")))?;
                exchange(
                    rustls::StreamOwned::new(conn, stream),
                    &text,
                    authority,
                    limit,
                )?
            }
        })
    }
}

/// Raw bytes read at most for a body bound: the head, chunk framing.
fn raw_limit(max_body: usize) -> usize {
    MAX_HEAD_BYTES
        .saturating_add(max_body)
        .saturating_add(max_body / 8)
        .saturating_add(1024)
}

fn left(until: Instant) -> std::io::Result<Duration> {
    let l = until.saturating_duration_since(Instant::now());
    if l.is_zero() {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "deadline passed",
        ))
    } else {
        Ok(l)
    }
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

/// A TCP stream whose every read and write gets what is left of one
/// absolute deadline, and fails once it passed.
struct DeadlineStream {
    stream: TcpStream,
    until: Instant,
}

impl Read for DeadlineStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.stream.set_read_timeout(Some(left(self.until)?))?;
        self.stream.read(buf)
    }
}

impl Write for DeadlineStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.stream.set_write_timeout(Some(left(self.until)?))?;
        self.stream.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.stream.flush()
    }
}

fn io_error(authority: &str, e: std::io::Error) -> FetchError {
    if matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    ) {
        return fetch_error(FetchReason::Timeout, format!("{authority}: {e}"));
    }
    // rustls reports a refused certificate or handshake as InvalidData.
    if e.kind() == std::io::ErrorKind::InvalidData {
        return fetch_error(FetchReason::Tls, format!("{authority}: {e}"));
    }
    fetch_error(FetchReason::Connect, format!("{authority}: {e}"))
}

/// Writes the request and reads the answer until it is complete (by its
/// length, its last chunk, or the end of the connection), bounded by
/// `limit` bytes.
fn exchange<S: Read + Write>(
    mut stream: S,
    request: &str,
    authority: &str,
    limit: usize,
) -> Result<Vec<u8>, FetchError> {
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| io_error(authority, e))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.len() > limit {
                    return Err(fetch_error(
                        FetchReason::TooLarge,
                        format!("{authority}: answer larger than {limit} bytes"),
                    ));
                }
                if complete(&raw) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A TLS peer that closes without close_notify after a complete
            // answer: the body is checked anyway (length, chunks, JSON).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => break,
            Err(e) => return Err(io_error(authority, e)),
        }
    }
    Ok(raw)
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
mod tests {
    use super::*;

    fn req(max: usize) -> Request<'static> {
        Request {
            path: "/peer-probe/endpoints",
            accept: "application/json",
            max_body: max,
            gzip: true,
        }
    }

    #[test]
    fn only_http_1x_200_is_an_answer_and_redirects_are_refused() {
        let d = |raw: &[u8]| decode(raw, "b:1", &req(1024)).map_err(|e| e.reason);
        assert_eq!(d(b"HTTP/1.1 200 OK\r\n\r\n{}"), Ok(b"{}".to_vec()));
        assert_eq!(d(b"HTTP/1.0 200 OK\r\n\r\n{}"), Ok(b"{}".to_vec()));
        assert_eq!(
            d(b"HTTP/1.1 302 Found\r\nLocation: http://evil/\r\n\r\n"),
            Err(FetchReason::Redirect)
        );
        assert_eq!(d(b"HTTP/1.1 301 Moved\r\n\r\n"), Err(FetchReason::Redirect));
        assert_eq!(
            d(b"HTTP/1.1 404 Not Found\r\n\r\n"),
            Err(FetchReason::Status)
        );
        // Not HTTP/1.x, or a status that is not three digits.
        for bad in [
            &b"HTTP/2 200\r\n\r\n{}"[..],
            b"ICY 200 OK\r\n\r\n{}",
            b"HTTP/1.1 2000 OK\r\n\r\n{}",
            b"HTTP/1.1 200OK\r\n\r\n{}",
            b"garbage",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        ] {
            assert_eq!(
                d(bad),
                Err(FetchReason::Parse),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // Bounds: a body over the bound, before and after decoding.
        let big = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n{}",
            "x".repeat(2000)
        );
        assert_eq!(d(big.as_bytes()), Err(FetchReason::TooLarge));
        let head = format!(
            "HTTP/1.1 200 OK\r\nX: {}\r\n\r\n",
            "y".repeat(MAX_HEAD_BYTES)
        );
        assert_eq!(d(head.as_bytes()), Err(FetchReason::TooLarge));
    }

    #[test]
    fn chunked_and_gzip_bodies_are_decoded_within_their_bounds() {
        let d = |raw: &[u8], max| decode(raw, "b:1", &req(max)).map_err(|e| e.reason);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
        assert!(complete(chunked));
        assert_eq!(d(chunked, 1024), Ok(b"{\"a\":1}".to_vec()));
        assert_eq!(d(chunked, 5), Err(FetchReason::TooLarge));
        let cut = &chunked[..chunked.len() - 7];
        assert!(!complete(cut));
        assert_eq!(d(cut, 1024), Err(FetchReason::Parse));
        let huge = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nx";
        assert_eq!(d(huge, 1024), Err(FetchReason::TooLarge));
        let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert_eq!(d(bad, 1024), Err(FetchReason::Parse));

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&vec![b'a'; 100_000]).unwrap();
        let gz = gz.finish().unwrap();
        let mut raw = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            gz.len()
        )
        .into_bytes();
        raw.extend_from_slice(&gz);
        assert_eq!(d(&raw, 200_000).map(|b| b.len()), Ok(100_000));
        // A small compressed body that inflates past the bound.
        assert_eq!(d(&raw, 50_000), Err(FetchReason::TooLarge));
        let unasked = decode(
            &raw,
            "b:1",
            &Request {
                gzip: false,
                ..req(200_000)
            },
        );
        assert_eq!(unasked.map_err(|e| e.reason), Err(FetchReason::Parse));
    }

    #[test]
    fn urls_parse_with_default_ports_and_no_user_info() {
        let u = Url::parse("http://prom:9090/prometheus/").unwrap();
        assert_eq!(
            (u.tls, u.authority.as_str(), u.prefix.as_str()),
            (false, "prom:9090", "/prometheus")
        );
        let u = Url::parse("https://[fd00::1]").unwrap();
        assert_eq!(
            (u.authority.as_str(), u.host()),
            ("[fd00::1]:443", "fd00::1")
        );
        assert_eq!(Url::parse("http://prom").unwrap().authority, "prom:80");
        for bad in [
            "ftp://x",
            "http://",
            "http://u:p@x:1",
            "http://x/?q",
            "x:1",
            "http://a b",
        ] {
            assert_eq!(Url::parse(bad), None, "{bad}");
        }
        assert_eq!(query_escape("a{b=\"c\"} x"), "a%7Bb%3D%22c%22%7D%20x");
    }

    #[test]
    fn credentials_never_leave_over_plain_http() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let client = HttpClient::new(
            Duration::from_secs(2),
            None,
            Some(basic_authorization("u", "p")),
        );
        let e = client.get(&url, &req(1024)).unwrap_err();
        assert_eq!(e.reason, FetchReason::PlainHttpCredentials);
        // Nothing connected.
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err());
    }

    /// A peer that sends its answer one byte a second (a slow loris)
    /// costs the fetch deadline, not a read timeout per byte: the answer
    /// would take minutes; the fetch ends at its deadline with `timeout`,
    /// having taken a few bytes.
    #[test]
    fn a_peer_sending_one_byte_a_second_costs_at_most_the_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = sent.clone();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let body = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: 300\r\n\r\n{}",
                "x".repeat(300)
            );
            for b in body.bytes() {
                if s.write_all(&[b]).is_err() {
                    return;
                }
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(1));
            }
        });
        let client = HttpClient::new(Duration::from_secs(2), None, None);
        let e = client.get(&url, &req(1024)).unwrap_err();
        assert_eq!(e.reason, FetchReason::Timeout, "{e}");
        let taken = sent.load(std::sync::atomic::Ordering::SeqCst);
        // Two seconds of a byte a second (and the one in flight), of the
        // answer's 340 bytes.
        assert!(taken <= 4, "{taken} bytes taken before the deadline");
        drop(client);
        // The server notices the closed connection at its next byte.
        server.join().unwrap();
    }

    /// A name that never resolves costs the deadline too (the lookup runs
    /// on its own thread, given up on at the deadline).
    #[test]
    fn an_unresolvable_name_is_a_resolve_error_within_the_deadline() {
        let client = HttpClient::new(Duration::from_secs(5), None, None);
        let url = Url::parse("http://no-such-peer.invalid:9879").unwrap();
        let e = client.get(&url, &req(1024)).unwrap_err();
        assert!(
            matches!(e.reason, FetchReason::Resolve | FetchReason::Timeout),
            "{e}"
        );
    }

    /// A secret file that is a FIFO (a read would block forever) or
    /// /dev/zero (endless) is refused at start, never read.
    #[test]
    fn secrets_are_small_regular_files_never_a_fifo_or_a_device() {
        let dir = std::env::temp_dir().join(format!("peer-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_secret("peer_probes.password_file", &fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_secret("peer_probes.password_file", Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let big = dir.join("big");
        std::fs::write(&big, vec![b'a'; 5000]).unwrap();
        assert!(read_secret("k", &big).is_err());
        let ok = dir.join("ok");
        std::fs::write(&ok, "s3cret\r\nsecond line\n").unwrap();
        assert_eq!(read_secret("k", &ok).unwrap(), "s3cret");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
