//! Where the peer exporters are (`peer_probes:`): the static list, the
//! A/AAAA records of a DNS name, the SRV records of DNS names (a
//! Kubernetes headless Service's named port:
//! `_<port>._tcp.<service>.<namespace>.svc.cluster.local`), and a file
//! re-read when its modification time changes. Only these peers' endpoints
//! are fetched, and only their responders are answered. Bounded: at most
//! [`MAX_PEERS`] addresses, whatever the sources hold.

use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use roce_host::named::NamedFileErrorKind;

use crate::config::PeerProbeConfig;
use crate::error::FleetError;
use crate::peer_dns::{DnsError, Resolver};

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

    /// The base URL (scheme and authority).
    pub fn url(&self) -> Option<super::peer_http::Url> {
        super::peer_http::Url::parse(&self.0)
    }

    /// The host the address names (a name or an address literal).
    pub fn host(&self) -> &str {
        let authority = self.0.split_once("://").map_or(self.0.as_str(), |(_, a)| a);
        super::peer_http::host_of(authority)
    }
}

/// The configured peers, with the file's state kept between calls.
#[derive(Debug)]
pub struct PeerList {
    statics: Vec<String>,
    dns: Option<String>,
    srv: Vec<String>,
    /// Asks the SRV names; `None` when no SRV name is configured, an error
    /// when `/etc/resolv.conf` names no server (said in `errors` at each
    /// refresh).
    resolver: Option<Result<Resolver, DnsError>>,
    file: Option<PathBuf>,
    scheme: &'static str,
    file_seen: Option<SystemTime>,
    file_peers: Vec<String>,
    /// Why the last read of a source failed (for the log), by source.
    pub errors: Vec<FleetError>,
}

impl PeerList {
    pub fn new(config: &PeerProbeConfig, tls: bool) -> Self {
        PeerList {
            statics: config.peers.clone(),
            dns: config.dns.clone(),
            srv: config.srv.clone(),
            // Read only when SRV names are configured.
            resolver: (!config.srv.is_empty()).then(|| {
                Resolver::from_resolv_conf(Path::new("/etc/resolv.conf"), config.fetch_timeout)
            }),
            file: config.file.clone(),
            scheme: if tls { "https" } else { "http" },
            file_seen: None,
            file_peers: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// A resolver other than the system's for the SRV names (tests).
    pub fn with_resolver(mut self, resolver: Resolver) -> Self {
        self.resolver = Some(Ok(resolver));
        self
    }

    /// DNS queries one [`PeerList::current`] makes (for the request counts).
    pub fn dns_queries(&self) -> usize {
        usize::from(self.dns.is_some()) + self.srv.len()
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
                Err(e) => self.errors.push(FleetError::Resolve {
                    name: name.clone(),
                    error: e.into(),
                }),
            }
        }
        for name in &self.srv {
            let records = match &self.resolver {
                Some(Ok(r)) => r.srv(name),
                Some(Err(e)) => Err(e.clone()),
                // `srv` is not empty, so the resolver was made.
                None => continue,
            };
            match records {
                Ok(records) => texts.extend(records.into_iter().map(|r| {
                    if r.target.contains(':') {
                        format!("[{}]:{}", r.target, r.port)
                    } else {
                        format!("{}:{}", r.target, r.port)
                    }
                })),
                Err(error) => self.errors.push(FleetError::Srv {
                    name: name.clone(),
                    error,
                }),
            }
        }
        if let Some(path) = self.file.clone() {
            if let Err(e) = self.refresh_file(&path) {
                self.errors.push(FleetError::PeerFile {
                    path: path.clone(),
                    error: e.into(),
                });
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

    /// Reads the file again when its modification time changed; the
    /// error is that of its metadata (as an open) or of its read.
    fn refresh_file(&mut self, path: &Path) -> Result<(), NamedFileErrorKind> {
        let meta = std::fs::metadata(path).map_err(NamedFileErrorKind::Open)?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(NamedFileErrorKind::TooLarge(MAX_FILE_BYTES));
        }
        let modified = meta.modified().ok();
        if modified.is_some() && modified == self.file_seen {
            return Ok(());
        }
        // A FIFO or a device swapped in for the file is refused, never read;
        // a read that hangs is abandoned after 5 s.
        let text = roce_host::named::read_text(path, roce_host::named::Limits::LIST)
            .map_err(|e| e.kind)?;
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
fn resolve(name_port: &str) -> std::io::Result<Vec<String>> {
    let addrs = name_port.to_socket_addrs()?;
    Ok(addrs.take(MAX_PEERS).map(|a| a.to_string()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
