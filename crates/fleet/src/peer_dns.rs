//! DNS SRV lookups for the peer list (`peer_probes.srv`): the exporters
//! behind a name, each as its target host and port. A Kubernetes headless
//! Service publishes its named ports this way
//! (`_<port>._tcp.<service>.<namespace>.svc.cluster.local`), so one query
//! per refresh lists the DaemonSet's exporters without asking each of them.
//!
//! The lookup is hickory-resolver's, bounded in every way: the name
//! servers of `/etc/resolv.conf` (at most three, read here as a bounded
//! file, asked in their order, one at a time), one absolute deadline per
//! lookup over every server tried, an answer over UDP (EDNS0, 4096 bytes)
//! and, when the server says it is truncated, again over TCP (at most
//! 65,535 bytes, the DNS limit), answers accepted only from the server
//! asked with the query's id and question (hickory's checks), at most
//! [`MAX_RECORDS`] records kept, and nothing kept between lookups (no
//! cache: each refresh asks). The records taken from an answer are those
//! of the question's name or of its aliases in the answer
//! ([`srv_records`]; fuzzed through [`parse_srv`] by
//! `fuzz/fuzz_targets/peer_discovery.rs`).
//!
//! The name is taken as fully qualified (no search domains): give the
//! whole name.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use hickory_resolver::config::{
    ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
    ServerOrderingStrategy,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError as Negative, NetError};
use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::{Name, RData, Record};

/// SRV records kept from one answer at most (the peer list's bound).
pub const MAX_RECORDS: usize = super::peer_list::MAX_PEERS;
/// The UDP payload size this resolver advertises (EDNS0).
pub const UDP_PAYLOAD: u16 = 4096;
/// Name servers tried at most (as glibc).
pub const MAX_SERVERS: usize = 3;
/// CNAMEs followed within one answer at most.
const MAX_ALIASES: usize = 8;

/// One SRV record: where an exporter listens.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Srv {
    /// The target host, without the final dot.
    pub target: String,
    pub port: u16,
}

/// Why a lookup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("no name server in {0}")]
    NoServer(String),
    #[error("{0}: not a valid DNS name")]
    Name(String),
    #[error("{name}: no answer within {deadline:?} from {servers}")]
    Timeout {
        name: String,
        deadline: Duration,
        servers: String,
    },
    #[error("{name}: {servers}: {message}")]
    Io {
        name: String,
        servers: String,
        message: String,
    },
    #[error("{name}: {servers} answered {rcode}")]
    Rcode {
        name: String,
        servers: String,
        rcode: String,
    },
    #[error("malformed answer: {0}")]
    Malformed(String),
}

/// A stub resolver asking `servers` in turn.
#[derive(Debug, Clone)]
pub struct Resolver {
    pub servers: Vec<SocketAddr>,
    pub deadline: Duration,
}

impl Resolver {
    /// The name servers of `resolv_conf` (`nameserver` lines).
    pub fn from_resolv_conf(
        resolv_conf: &std::path::Path,
        deadline: Duration,
    ) -> Result<Resolver, DnsError> {
        let text = roce_host::named::read_text(resolv_conf, roce_host::named::Limits::LIST)
            .map_err(|e| DnsError::NoServer(e.to_string()))?;
        let servers = name_servers(&text);
        if servers.is_empty() {
            return Err(DnsError::NoServer(resolv_conf.display().to_string()));
        }
        Ok(Resolver { servers, deadline })
    }

    /// The SRV records of `name`, sorted (priority and weight are not
    /// used: every target is a peer).
    pub fn srv(&self, name: &str) -> Result<Vec<Srv>, DnsError> {
        let name = name.trim_end_matches('.');
        let until = Instant::now() + self.deadline;
        let mut qname = Name::from_ascii(name).map_err(|_| DnsError::Name(name.to_string()))?;
        qname.set_fqdn(true);
        let servers = || {
            self.servers
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let timeout = || DnsError::Timeout {
            name: name.to_string(),
            deadline: self.deadline,
            servers: servers(),
        };
        let lookup = async {
            // Built on this lookup's runtime: its connections and their
            // tasks end with it.
            let resolver = hickory_resolver::Resolver::builder_with_config(
                self.config(),
                TokioRuntimeProvider::default(),
            )
            .with_options(self.options())
            .build()?;
            resolver.srv_lookup(qname).await
        };
        let answer = crate::peer_http::run_until(until, lookup)
            .map_err(|e| DnsError::Io {
                name: name.to_string(),
                servers: servers(),
                message: e.to_string(),
            })?
            .ok_or_else(timeout)?;
        match answer {
            Ok(lookup) => Ok(srv_records(name, lookup.answers())),
            // The name exists without SRV records: no peer.
            Err(NetError::Dns(Negative::NoRecordsFound(none)))
                if none.response_code == ResponseCode::NoError =>
            {
                Ok(Vec::new())
            }
            // NXDOMAIN is an answer: no other server is asked.
            Err(NetError::Dns(Negative::NoRecordsFound(none))) => Err(DnsError::Rcode {
                name: name.to_string(),
                servers: servers(),
                rcode: format!("{:?}", none.response_code),
            }),
            Err(NetError::Dns(Negative::ResponseCode(code))) => Err(DnsError::Rcode {
                name: name.to_string(),
                servers: servers(),
                rcode: format!("{code:?}"),
            }),
            Err(NetError::Timeout | NetError::NoConnections) => Err(timeout()),
            Err(NetError::Proto(e)) => Err(DnsError::Malformed(e.to_string())),
            Err(e) => Err(DnsError::Io {
                name: name.to_string(),
                servers: servers(),
                message: e.to_string(),
            }),
        }
    }

    /// Each server over UDP and TCP on its port, in the order given.
    fn config(&self) -> ResolverConfig {
        let servers = self
            .servers
            .iter()
            .map(|s| {
                let on_port = |mut c: ConnectionConfig| {
                    c.port = s.port();
                    c
                };
                // An NXDOMAIN of one server is the answer.
                NameServerConfig::new(
                    s.ip(),
                    true,
                    vec![
                        on_port(ConnectionConfig::udp()),
                        on_port(ConnectionConfig::tcp()),
                    ],
                )
            })
            .collect();
        ResolverConfig::from_name_servers(servers)
    }

    /// One query at a time, each server given the whole deadline (the
    /// lookup's deadline cuts them off), no retry of a server that did
    /// not answer, no cache, no hosts file.
    fn options(&self) -> ResolverOpts {
        let mut o = ResolverOpts::default();
        o.timeout = self.deadline;
        o.attempts = 0;
        o.num_concurrent_reqs = 1;
        o.server_ordering_strategy = ServerOrderingStrategy::UserProvidedOrder;
        o.cache_size = 0;
        o.use_hosts_file = ResolveHosts::Never;
        o.edns_payload_len = UDP_PAYLOAD;
        o.ndots = 0;
        o
    }
}

/// `nameserver` addresses of a resolv.conf, at most [`MAX_SERVERS`].
pub fn name_servers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next()) {
                (Some("nameserver"), Some(a)) => {
                    // A scoped link-local address (fe80::1%eth0) is not supported.
                    a.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
                }
                _ => None,
            }
        })
        .take(MAX_SERVERS)
        .collect()
}

/// A name as text, lower case, without the final dot.
fn plain(n: &Name) -> String {
    n.to_ascii().trim_end_matches('.').to_ascii_lowercase()
}

/// The SRV records of `name` among `answers`: those whose owner is the
/// name or an alias of it (a CNAME chain in the answers, at most
/// [`MAX_ALIASES`] long). Targets of `.` ("no service") and port 0 are
/// skipped; at most [`MAX_RECORDS`] are kept, sorted and without
/// duplicates.
pub fn srv_records(name: &str, answers: &[Record]) -> Vec<Srv> {
    let mut owners = vec![name.trim_end_matches('.').to_ascii_lowercase()];
    for rr in answers {
        if let RData::CNAME(c) = &rr.data {
            if owners.contains(&plain(&rr.name)) && owners.len() < MAX_ALIASES {
                owners.push(plain(&c.0));
            }
        }
    }
    let mut records = Vec::new();
    for rr in answers {
        let RData::SRV(srv) = &rr.data else {
            continue;
        };
        if !owners.contains(&plain(&rr.name)) {
            continue;
        }
        let target = srv.target.to_ascii();
        let target = target.trim_end_matches('.');
        if target.is_empty() || srv.port == 0 {
            continue;
        }
        records.push(Srv {
            target: target.to_string(),
            port: srv.port,
        });
        if records.len() >= MAX_RECORDS {
            break;
        }
    }
    records.sort();
    records.dedup();
    records
}

/// What one DNS message said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub records: Vec<Srv>,
    /// The TC bit: ask again over TCP.
    pub truncated: bool,
    /// A response code other than NOERROR (NXDOMAIN, SERVFAIL, ...).
    pub rcode: Option<String>,
}

/// The SRV records answering query `id` for `name` in the DNS message
/// `msg`, decoded by hickory as a lookup decodes it: `Malformed` when
/// `msg` is no answer to that query (another id, not a response, another
/// question). For the fuzz target and tests; a lookup's own checks are
/// hickory's.
pub fn parse_srv(msg: &[u8], id: u16, name: &str) -> Result<Answer, DnsError> {
    let m = Message::from_vec(msg).map_err(|e| DnsError::Malformed(e.to_string()))?;
    if m.metadata.id != id || m.metadata.message_type != MessageType::Response {
        return Err(DnsError::Malformed("not the answer to this query".into()));
    }
    let asked = name.trim_end_matches('.').to_ascii_lowercase();
    if m.queries.len() != 1 || plain(&m.queries[0].name) != asked {
        return Err(DnsError::Malformed("another question".into()));
    }
    let rc = m.metadata.response_code;
    Ok(Answer {
        records: srv_records(name, &m.answers),
        truncated: m.metadata.truncation,
        rcode: (rc != ResponseCode::NoError).then(|| format!("{rc:?}")),
    })
}

#[cfg(test)]
mod tests;
