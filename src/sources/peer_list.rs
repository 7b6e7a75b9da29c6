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

/// GETs a peer's `/peer-probe/endpoints` over plain HTTP/1.1 with a
/// deadline on every step and a bounded body. `https://` peers are
/// refused (`unsupported`): the TLS client is not written yet.
pub fn fetch_endpoints(
    peer: &PeerAddress,
    timeout: std::time::Duration,
) -> Result<Vec<roce_probe::peer::Endpoint>, FetchError> {
    use std::io::{Read, Write};
    let Some(authority) = peer.0.strip_prefix("http://") else {
        return Err(fetch_error(
            "unsupported",
            format!("{}: only http:// peers can be fetched for now", peer.0),
        ));
    };
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| fetch_error("resolve", format!("{authority}: {e}")))?
        .next()
        .ok_or_else(|| fetch_error("resolve", format!("{authority}: no address")))?;
    let timeout = timeout.max(std::time::Duration::from_millis(1));
    let io = |e: std::io::Error| {
        if matches!(
            e.kind(),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ) {
            fetch_error("timeout", format!("{authority}: {e}"))
        } else {
            fetch_error("connect", format!("{authority}: {e}"))
        }
    };
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let request = format!(
        "GET /peer-probe/endpoints HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream
        .take((MAX_DOCUMENT_BYTES + 4096) as u64)
        .read_to_end(&mut raw)
        .map_err(io)?;
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
        let https = PeerAddress("https://127.0.0.1:1".into());
        assert_eq!(
            fetch_endpoints(&https, t).unwrap_err().reason,
            "unsupported"
        );
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
