//! Where the peer exporters are (`peer_probes:`): the static list, the
//! A/AAAA records of a DNS name (a Kubernetes headless Service works
//! through this), and a file re-read when its modification time changes.
//! Only these peers are probed and only their responders are answered.
//! Bounded: at most [`MAX_PEERS`] addresses, whatever the sources hold.

use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::config::PeerProbeConfig;

/// Peer exporters taken from all sources together, at most.
pub const MAX_PEERS: usize = 10_000;
/// A peers file larger than this is refused (10,000 addresses fit).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A peer exporter's base URL (`http://host:port` or `https://host:port`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerAddress(pub String);

impl PeerAddress {
    /// `host:port`, `http://host:port` or `https://host:port`; `scheme` is
    /// used when none is given (the exporter's own: `https` behind TLS).
    pub fn parse(text: &str, scheme: &str) -> Option<PeerAddress> {
        let t = text.trim().trim_end_matches('/');
        if t.is_empty() || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return None;
        }
        let (scheme, rest) = match t.split_once("://") {
            Some((s @ ("http" | "https"), rest)) => (s, rest),
            Some(_) => return None,
            None => (scheme, t),
        };
        if rest.is_empty() || rest.contains('/') {
            return None;
        }
        Some(PeerAddress(format!("{scheme}://{rest}")))
    }

    /// The endpoints document of this peer.
    pub fn endpoints_url(&self) -> String {
        format!("{}/peer-probe/endpoints", self.0)
    }
}

/// The configured peers, with the file's state kept between calls.
#[derive(Debug)]
pub struct PeerList {
    statics: Vec<String>,
    dns: Option<String>,
    file: Option<PathBuf>,
    scheme: &'static str,
    file_seen: Option<SystemTime>,
    file_peers: Vec<String>,
    /// Why the last read of a source failed (for the log), by source.
    pub errors: Vec<String>,
}

impl PeerList {
    pub fn new(config: &PeerProbeConfig, tls: bool) -> Self {
        PeerList {
            statics: config.peers.clone(),
            dns: config.dns.clone(),
            file: config.file.clone(),
            scheme: if tls { "https" } else { "http" },
            file_seen: None,
            file_peers: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The peers now: the static list, the DNS records (resolved now) and
    /// the file (read again only when it changed; kept when it cannot be
    /// read, so a transient error does not drop every peer).
    pub fn current(&mut self) -> Vec<PeerAddress> {
        self.errors.clear();
        let mut texts: Vec<String> = self.statics.clone();
        if let Some(name) = &self.dns {
            match resolve(name) {
                Ok(addrs) => texts.extend(addrs),
                Err(e) => self.errors.push(format!("peer_probes.dns {name}: {e}")),
            }
        }
        if let Some(path) = self.file.clone() {
            if let Err(e) = self.refresh_file(&path) {
                self.errors
                    .push(format!("peer_probes.file {}: {e}", path.display()));
            }
            texts.extend(self.file_peers.iter().cloned());
        }
        let mut out: Vec<PeerAddress> = texts
            .iter()
            .filter_map(|t| PeerAddress::parse(t, self.scheme))
            .collect();
        out.sort();
        out.dedup();
        out.truncate(MAX_PEERS);
        out
    }

    fn refresh_file(&mut self, path: &Path) -> Result<(), String> {
        let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
        }
        let modified = meta.modified().ok();
        if modified.is_some() && modified == self.file_seen {
            return Ok(());
        }
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        self.file_peers = parse_file(&text);
        self.file_seen = modified;
        Ok(())
    }
}

/// One address a line; `#` starts a comment; blank lines are skipped.
pub fn parse_file(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .take(MAX_PEERS)
        .map(str::to_string)
        .collect()
}

/// `name:port` to one `ip:port` per A/AAAA record (IPv6 in brackets).
fn resolve(name_port: &str) -> Result<Vec<String>, String> {
    let addrs = name_port.to_socket_addrs().map_err(|e| e.to_string())?;
    Ok(addrs.take(MAX_PEERS).map(|a| a.to_string()).collect())
}

/// Largest endpoints document read from a peer (64 endpoints fit).
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;

/// Why fetching a peer's endpoints failed: the `reason` label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchError {
    pub reason: &'static str,
    pub message: String,
}

fn fetch_error(reason: &'static str, message: impl Into<String>) -> FetchError {
    FetchError {
        reason,
        message: message.into(),
    }
}

/// How peers' endpoint documents are fetched: the deadline of every
/// step, and for peers behind the same TLS and basic auth as their
/// `/metrics`, the CA that signed their certificates and the credentials
/// (`peer_probes.tls_ca_file`, `username`, `password_file`).
#[derive(Clone)]
pub struct Fetcher {
    pub timeout: std::time::Duration,
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// The `Authorization` header value, when credentials are configured.
    authorization: Option<String>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credentials are never printed.
        f.debug_struct("Fetcher")
            .field("timeout", &self.timeout)
            .field("tls", &self.tls.is_some())
            .field("authorization", &self.authorization.is_some())
            .finish()
    }
}

impl Fetcher {
    /// From the configuration; an unreadable CA or password file is an
    /// error (said once at start, not per fetch).
    pub fn new(config: &PeerProbeConfig) -> Result<Fetcher, String> {
        let tls = match &config.tls_ca_file {
            Some(path) => Some(client_config(path)?),
            None => None,
        };
        let authorization = match (&config.username, &config.password_file) {
            (Some(user), Some(path)) => {
                let meta = std::fs::metadata(path)
                    .map_err(|e| format!("peer_probes.password_file {}: {e}", path.display()))?;
                if meta.len() > 4096 {
                    return Err(format!(
                        "peer_probes.password_file {}: larger than 4096 bytes",
                        path.display()
                    ));
                }
                let pass = std::fs::read_to_string(path)
                    .map_err(|e| format!("peer_probes.password_file {}: {e}", path.display()))?;
                Some(basic_authorization(
                    user,
                    pass.trim_end_matches(['\r', '\n']),
                ))
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err("peer_probes.username and peer_probes.password_file go together".into())
            }
            (None, None) => None,
        };
        Ok(Fetcher {
            // Each step of a fetch (connect, TLS, request, answer) gets at
            // most this long: a dead peer costs a few seconds per refresh.
            timeout: config.timeout.max(std::time::Duration::from_secs(2)),
            tls,
            authorization,
        })
    }

    /// Whether addresses without a scheme mean `https` (a CA is configured).
    pub fn default_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn fetch(&self, peer: &PeerAddress) -> Result<Vec<roce_probe::peer::Endpoint>, FetchError> {
        fetch_with(
            peer,
            self.timeout,
            self.tls.as_ref(),
            self.authorization.as_deref(),
        )
    }
}

impl crate::sources::peer_probe::Fetch for Fetcher {
    fn fetch(&self, peer: &PeerAddress) -> Result<Vec<roce_probe::peer::Endpoint>, FetchError> {
        Fetcher::fetch(self, peer)
    }
}

/// `Basic base64(user:password)`.
pub fn basic_authorization(user: &str, password: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// A TLS client trusting the CA certificates of `path` (PEM) only.
fn client_config(path: &Path) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("peer_probes.tls_ca_file {}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("peer_probes.tls_ca_file {}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("peer_probes.tls_ca_file {}: {e}", path.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "peer_probes.tls_ca_file {}: no certificate in it",
            path.display()
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS client: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}

/// GETs a peer's `/peer-probe/endpoints` over plain HTTP/1.1, without
/// credentials (see [`Fetcher`] for TLS and basic auth).
pub fn fetch_endpoints(
    peer: &PeerAddress,
    timeout: std::time::Duration,
) -> Result<Vec<roce_probe::peer::Endpoint>, FetchError> {
    fetch_with(peer, timeout, None, None)
}

/// GETs a peer's `/peer-probe/endpoints` over HTTP/1.1, or HTTPS with
/// `tls`, with a deadline on every step and a bounded body.
fn fetch_with(
    peer: &PeerAddress,
    timeout: std::time::Duration,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    authorization: Option<&str>,
) -> Result<Vec<roce_probe::peer::Endpoint>, FetchError> {
    let (authority, tls) = if let Some(a) = peer.0.strip_prefix("http://") {
        (a, None)
    } else if let Some(a) = peer.0.strip_prefix("https://") {
        match tls {
            Some(t) => (a, Some(t)),
            None => {
                return Err(fetch_error(
                    "unsupported",
                    format!("{}: https:// peers need peer_probes.tls_ca_file", peer.0),
                ))
            }
        }
    } else {
        return Err(fetch_error(
            "unsupported",
            format!("{}: no http(s) scheme", peer.0),
        ));
    };
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| fetch_error("resolve", format!("{authority}: {e}")))?
        .next()
        .ok_or_else(|| fetch_error("resolve", format!("{authority}: no address")))?;
    let timeout = timeout.max(std::time::Duration::from_millis(1));
    let io = |e: std::io::Error| io_error(authority, e);
    let stream = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET /peer-probe/endpoints HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n{auth}Connection: close\r\n\r\n"
    );
    let raw = match tls {
        None => exchange(stream, &request, authority)?,
        Some(config) => {
            let host = host_of(authority);
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|e| fetch_error("tls", format!("{authority}: server name {host}: {e}")))?;
            let conn = rustls::ClientConnection::new(config.clone(), name)
                .map_err(|e| fetch_error("tls", format!("{authority}: {e}")))?;
            exchange(rustls::StreamOwned::new(conn, stream), &request, authority)?
        }
    };
    parse_response(&raw, authority)
}

/// The host of `host:port` (`[v6]:port` without the brackets).
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

fn io_error(authority: &str, e: std::io::Error) -> FetchError {
    if matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    ) {
        return fetch_error("timeout", format!("{authority}: {e}"));
    }
    // rustls reports a refused certificate or handshake as InvalidData.
    if e.kind() == std::io::ErrorKind::InvalidData {
        return fetch_error("tls", format!("{authority}: {e}"));
    }
    fetch_error("connect", format!("{authority}: {e}"))
}

/// Writes the request and reads the answer, bounded.
fn exchange<S: std::io::Read + std::io::Write>(
    mut stream: S,
    request: &str,
    authority: &str,
) -> Result<Vec<u8>, FetchError> {
    use std::io::Read;
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| io_error(authority, e))?;
    let mut raw = Vec::new();
    match stream
        .take((MAX_DOCUMENT_BYTES + 4096) as u64)
        .read_to_end(&mut raw)
    {
        Ok(_) => {}
        // A TLS peer that closes without close_notify after a complete
        // answer: the body is checked (JSON) anyway, so a truncation shows.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(io_error(authority, e)),
    }
    Ok(raw)
}

fn parse_response(
    raw: &[u8],
    authority: &str,
) -> Result<Vec<roce_probe::peer::Endpoint>, FetchError> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| fetch_error("parse", format!("{authority}: no complete response head")))?;
    let (head, body) = raw.split_at(split + 4);
    let head = String::from_utf8_lossy(head);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| fetch_error("parse", format!("{authority}: no status line")))?;
    if status != 200 {
        return Err(fetch_error(
            "status",
            format!("{authority}: HTTP {status} for /peer-probe/endpoints"),
        ));
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(fetch_error("parse", format!("{authority}: chunked body")));
    }
    if body.len() > MAX_DOCUMENT_BYTES {
        return Err(fetch_error(
            "parse",
            format!("{authority}: document larger than {MAX_DOCUMENT_BYTES} bytes"),
        ));
    }
    roce_probe::peer::parse_endpoints(body)
        .map_err(|e| fetch_error("parse", format!("{authority}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves one connection with `reply` (or holds it silent) on a local port.
    fn serve_once(reply: Option<Vec<u8>>) -> (PeerAddress, std::thread::JoinHandle<()>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                match reply {
                    Some(r) => {
                        let _ = s.write_all(&r);
                    }
                    None => std::thread::sleep(std::time::Duration::from_millis(300)),
                }
            }
        });
        (PeerAddress(format!("http://{addr}")), handle)
    }

    #[test]
    fn endpoints_are_fetched_and_bad_answers_are_classified() {
        let doc = br#"{"version":1,"endpoints":[{"node":"b","device":"rxe0","device_index":0,"port":1,"gid":"::ffff:10.0.2.16","gid_index":1,"qpn":17,"qkey":1380994353,"mtu":1024,"subnet":"10.0.2.0/24"}]}"#;
        let mut ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n".to_vec();
        ok.extend_from_slice(doc);
        let t = std::time::Duration::from_secs(5);
        let (peer, h) = serve_once(Some(ok));
        let got = fetch_endpoints(&peer, t).unwrap();
        h.join().unwrap();
        assert_eq!((got.len(), got[0].qpn, got[0].mtu), (1, 17, 1024));

        let (peer, h) = serve_once(Some(b"HTTP/1.1 401 Unauthorized\r\n\r\n".to_vec()));
        assert_eq!(fetch_endpoints(&peer, t).unwrap_err().reason, "status");
        h.join().unwrap();
        let (peer, h) = serve_once(Some(b"HTTP/1.1 200 OK\r\n\r\n{nope".to_vec()));
        assert_eq!(fetch_endpoints(&peer, t).unwrap_err().reason, "parse");
        h.join().unwrap();
        let (peer, h) = serve_once(None);
        let e = fetch_endpoints(&peer, std::time::Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.reason, "timeout", "{e:?}");
        h.join().unwrap();
        // Without a CA, https peers are refused before any connection.
        let https = PeerAddress("https://127.0.0.1:1".into());
        assert_eq!(
            fetch_endpoints(&https, t).unwrap_err().reason,
            "unsupported"
        );
    }

    /// A TLS server on a local port with a self-signed certificate for
    /// 127.0.0.1 (`identity`: PEM, DER, key), answering one request with
    /// `reply` when its `Authorization` header is `want_auth`, else 401.
    fn self_signed() -> (String, Vec<u8>, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), cert.der().to_vec(), key.serialize_der())
    }

    fn serve_tls_once(
        identity: &(String, Vec<u8>, Vec<u8>),
        reply: Vec<u8>,
        want_auth: &'static str,
    ) -> (PeerAddress, std::thread::JoinHandle<()>) {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        use std::io::{Read, Write};
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(identity.1.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.2.clone())),
            )
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = std::thread::spawn(move || {
            let Ok((tcp, _)) = listener.accept() else {
                return;
            };
            let conn = rustls::ServerConnection::new(std::sync::Arc::new(config)).unwrap();
            let mut tls = rustls::StreamOwned::new(conn, tcp);
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&req).to_string();
            let authorized = text
                .lines()
                .any(|l| l.eq_ignore_ascii_case(&format!("authorization: {want_auth}")));
            let answer = if authorized {
                reply
            } else {
                b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n".to_vec()
            };
            let _ = tls.write_all(&answer);
            tls.conn.send_close_notify();
            let _ = tls.flush();
        });
        (PeerAddress(format!("https://{addr}")), handle)
    }

    #[test]
    fn https_peers_behind_basic_auth_are_fetched_with_the_configured_ca_and_credentials() {
        let dir = std::env::temp_dir().join(format!("peer-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let doc = br#"{"version":1,"endpoints":[{"node":"b","device":"rxe0","device_index":0,"port":1,"gid":"::ffff:10.0.2.16","gid_index":1,"qpn":17,"qkey":1380994353,"mtu":1024}]}"#;
        let mut ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n".to_vec();
        ok.extend_from_slice(doc);
        let want = "Basic cHJvYmVyOnMzY3JldA=="; // prober:s3cret
        assert_eq!(basic_authorization("prober", "s3cret"), want);
        let identity = self_signed();
        let (peer, h) = serve_tls_once(&identity, ok.clone(), want);
        std::fs::write(dir.join("ca.pem"), &identity.0).unwrap();
        std::fs::write(dir.join("password"), "s3cret\n").unwrap();
        let config = PeerProbeConfig {
            tls_ca_file: Some(dir.join("ca.pem")),
            username: Some("prober".into()),
            password_file: Some(dir.join("password")),
            ..PeerProbeConfig::default()
        };
        let fetcher = Fetcher::new(&config).unwrap();
        assert!(fetcher.default_tls());
        assert!(!format!("{fetcher:?}").contains("s3cret"));
        let got = fetcher.fetch(&peer).unwrap();
        h.join().unwrap();
        assert_eq!((got.len(), got[0].qpn), (1, 17));

        // Wrong credentials: the peer's 401 is a status error.
        let (peer, h) = serve_tls_once(&identity, ok.clone(), "Basic b3RoZXI6eA==");
        assert_eq!(fetcher.fetch(&peer).unwrap_err().reason, "status");
        h.join().unwrap();

        // A server whose certificate another CA signed: refused as TLS.
        let (peer, h) = serve_tls_once(&self_signed(), ok, want);
        let e = fetcher.fetch(&peer).unwrap_err();
        assert_eq!(e.reason, "tls", "{e:?}");
        h.join().unwrap();

        // A user without a password file is a configuration error.
        let half = PeerProbeConfig {
            username: Some("prober".into()),
            ..PeerProbeConfig::default()
        };
        assert!(Fetcher::new(&half).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn addresses_take_the_default_scheme_and_refuse_paths_and_odd_schemes() {
        let p = |t| PeerAddress::parse(t, "https").map(|a| a.0);
        assert_eq!(p("node-b:9879").as_deref(), Some("https://node-b:9879"));
        assert_eq!(
            p("http://10.0.0.2:9879/").as_deref(),
            Some("http://10.0.0.2:9879")
        );
        assert_eq!(
            p("[fd00::2]:9879").as_deref(),
            Some("https://[fd00::2]:9879")
        );
        assert_eq!(p("ftp://x:1"), None);
        assert_eq!(p("x:1/metrics"), None);
        assert_eq!(p("a b:1"), None);
        assert_eq!(p(""), None);
        assert_eq!(
            PeerAddress::parse("b:9879", "http")
                .unwrap()
                .endpoints_url(),
            "http://b:9879/peer-probe/endpoints"
        );
    }

    #[test]
    fn the_file_is_read_again_when_it_changes_and_kept_when_it_vanishes() {
        let dir = std::env::temp_dir().join(format!("peer-list-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("peers.txt");
        std::fs::write(&file, "# fleet\nnode-b:9879\n\nnode-c:9879  # rack 2\n").unwrap();
        let config = PeerProbeConfig {
            peers: vec!["node-a:9879".into()],
            file: Some(file.clone()),
            ..PeerProbeConfig::default()
        };
        let mut list = PeerList::new(&config, false);
        let names = |v: Vec<PeerAddress>| v.into_iter().map(|a| a.0).collect::<Vec<_>>();
        assert_eq!(
            names(list.current()),
            [
                "http://node-a:9879",
                "http://node-b:9879",
                "http://node-c:9879"
            ]
        );
        // A new modification time: read again (set explicitly, so that a
        // coarse file-system clock cannot hide the change).
        std::fs::write(&file, "node-d:9879\n").unwrap();
        let later = SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_eq!(
            names(list.current()),
            ["http://node-a:9879", "http://node-d:9879"]
        );
        std::fs::remove_file(&file).unwrap();
        assert_eq!(
            names(list.current()),
            ["http://node-a:9879", "http://node-d:9879"]
        );
        assert_eq!(list.errors.len(), 1, "{:?}", list.errors);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dns_records_are_peers() {
        let config = PeerProbeConfig {
            dns: Some("localhost:9879".into()),
            ..PeerProbeConfig::default()
        };
        let got = PeerList::new(&config, true).current();
        assert!(!got.is_empty());
        assert!(got
            .iter()
            .all(|a| a.0.starts_with("https://") && a.0.ends_with(":9879")));
        let bad = PeerProbeConfig {
            dns: Some("no-port-given".into()),
            ..PeerProbeConfig::default()
        };
        let mut list = PeerList::new(&bad, true);
        assert!(list.current().is_empty());
        assert_eq!(list.errors.len(), 1);
    }
}
