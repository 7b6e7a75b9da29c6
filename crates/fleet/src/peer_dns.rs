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
mod tests {
    use super::*;
    // The test name servers' messages: simple-dns, another library than
    // the one the resolver decodes them with.
    use simple_dns::rdata::{RData, A, OPT, SRV};
    use simple_dns::{
        Name, Packet, PacketFlag, Question, ResourceRecord, CLASS, QCLASS, QTYPE, TYPE,
    };
    use std::io::{Read, Write};
    use std::net::UdpSocket;

    const NAME: &str = "_metrics._tcp.roce-exporter.monitoring.svc.cluster.local";

    /// A recursive SRV query for `name` with an EDNS0 payload size, as a
    /// stub resolver sends it.
    fn build_query(id: u16, name: &str) -> Result<Vec<u8>, DnsError> {
        let qname = Name::new(name).map_err(|_| DnsError::Name(name.to_string()))?;
        let mut p = Packet::new_query(id);
        p.set_flags(PacketFlag::RECURSION_DESIRED);
        p.questions.push(Question::new(
            qname,
            QTYPE::TYPE(TYPE::SRV),
            QCLASS::CLASS(CLASS::IN),
            false,
        ));
        *p.opt_mut() = Some(OPT {
            opt_codes: Vec::new(),
            udp_packet_size: UDP_PAYLOAD,
            version: 0,
        });
        p.build_bytes_vec()
            .map_err(|e| DnsError::Name(format!("{name}: {e}")))
    }

    /// A server's answer to `query` with `n` SRV records (and, for a
    /// few, their A records in the additional section, as CoreDNS gives
    /// them).
    fn answer(query: &[u8], n: usize, truncate_at: Option<usize>) -> Vec<u8> {
        let q = Packet::parse(query).unwrap();
        let mut p = Packet::new_reply(q.id());
        p.questions = q.questions.clone();
        let targets: Vec<String> = (0..n)
            .map(|i| {
                format!(
                    "10-0-{}-{}.roce-exporter.monitoring.svc.cluster.local",
                    i / 250,
                    i % 250 + 1
                )
            })
            .collect();
        for (i, t) in targets.iter().enumerate() {
            p.answers.push(ResourceRecord::new(
                Name::new_unchecked(NAME),
                CLASS::IN,
                30,
                RData::SRV(SRV {
                    priority: 0,
                    weight: 100,
                    port: 9879,
                    target: Name::new_unchecked(t),
                }),
            ));
            if n > 10 {
                continue;
            }
            p.additional_records.push(ResourceRecord::new(
                Name::new_unchecked(t),
                CLASS::IN,
                30,
                RData::A(A {
                    address: u32::from(std::net::Ipv4Addr::new(
                        10,
                        0,
                        (i / 250) as u8,
                        (i % 250 + 1) as u8,
                    )),
                }),
            ));
        }
        if let Some(cut) = truncate_at {
            p.answers.truncate(cut);
            p.additional_records.clear();
            p.set_flags(PacketFlag::TRUNCATION);
        }
        p.build_bytes_vec_compressed().unwrap()
    }

    /// A name server on 127.0.0.1 (UDP and TCP on one port): over UDP it
    /// answers with the first `udp_records` only, truncated; over TCP the
    /// whole set. Serves until `stop`.
    fn server(records: usize, udp_records: usize) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let (udp, tcp) = udp_and_tcp();
        let addr = udp.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let (n, from) = udp.recv_from(&mut buf).unwrap();
            // First a stray datagram with another id: ignored by the client.
            let mut stray = answer(&buf[..n], 1, None);
            stray[0] ^= 0xff;
            udp.send_to(&stray, from).unwrap();
            let cut = (udp_records < records).then_some(udp_records);
            udp.send_to(&answer(&buf[..n], records, cut), from).unwrap();
            if cut.is_none() {
                return;
            }
            let (mut s, _) = tcp.accept().unwrap();
            let mut len = [0u8; 2];
            s.read_exact(&mut len).unwrap();
            let mut q = vec![0u8; usize::from(u16::from_be_bytes(len))];
            s.read_exact(&mut q).unwrap();
            let a = answer(&q, records, None);
            let mut framed = (a.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&a);
            s.write_all(&framed).unwrap();
        });
        (addr, h)
    }

    /// A UDP socket and a TCP listener on one port of 127.0.0.1, as a name
    /// server has them. The port the kernel picks for one may be taken for
    /// the other (by a connection of another test): another is picked.
    fn udp_and_tcp() -> (UdpSocket, std::net::TcpListener) {
        let mut last = None;
        for _ in 0..100 {
            let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            match UdpSocket::bind(tcp.local_addr().unwrap()) {
                Ok(udp) => return (udp, tcp),
                Err(e) => last = Some(e),
            }
        }
        panic!("no port free for both UDP and TCP: {last:?}");
    }

    /// The SRV records of [`NAME`] from [`server`].
    fn lookup(records: usize, udp_records: usize) -> Vec<Srv> {
        let (addr, h) = server(records, udp_records);
        let r = Resolver {
            servers: vec![addr],
            deadline: Duration::from_secs(10),
        };
        let got = r.srv(NAME).unwrap();
        h.join().unwrap();
        got
    }

    #[test]
    fn srv_records_come_over_udp_and_a_truncated_answer_again_over_tcp() {
        let got = lookup(3, 3);
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0],
            Srv {
                target: "10-0-0-1.roce-exporter.monitoring.svc.cluster.local".into(),
                port: 9879
            }
        );
        // 800 exporters: 20 records in the UDP answer, all over TCP. An SRV
        // target is never compressed (RFC 2782): with 52-byte targets a
        // DNS message (65,535 bytes) holds about 890 records.
        assert_eq!(lookup(800, 20).len(), 800);
    }

    /// SRV records are peers of the list: target and port, the default
    /// scheme; a name that does not answer is the list's error.
    #[test]
    fn srv_names_make_the_peer_list() {
        let (addr, h) = server(2, 2);
        let config = crate::config::PeerProbeConfig {
            srv: vec![NAME.into()],
            ..crate::config::PeerProbeConfig::default()
        };
        let mut list = crate::peer_list::PeerList::new(&config, true).with_resolver(Resolver {
            servers: vec![addr],
            deadline: Duration::from_secs(10),
        });
        let got: Vec<String> = list.current().into_iter().map(|a| a.0).collect();
        h.join().unwrap();
        assert_eq!(
            got,
            [
                "https://10-0-0-1.roce-exporter.monitoring.svc.cluster.local:9879",
                "https://10-0-0-2.roce-exporter.monitoring.svc.cluster.local:9879"
            ]
        );
        assert_eq!(list.dns_queries(), 1);
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut list = crate::peer_list::PeerList::new(&config, true).with_resolver(Resolver {
            servers: vec![silent.local_addr().unwrap()],
            deadline: Duration::from_millis(100),
        });
        assert!(list.current().is_empty());
        assert!(
            list.errors[0]
                .to_string()
                .starts_with("peer_probes.srv _metrics._tcp"),
            "{:?}",
            list.errors
        );
        assert_eq!(list.errors[0].kind(), roce_host::ErrorKind::Busy);
    }

    #[test]
    fn a_silent_server_costs_the_deadline_and_bad_answers_are_refused() {
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let r = Resolver {
            servers: vec![silent.local_addr().unwrap()],
            deadline: Duration::from_millis(200),
        };
        assert!(matches!(r.srv(NAME), Err(DnsError::Timeout { .. })));

        let query = build_query(7, NAME).unwrap();
        let ok = answer(&query, 2, None);
        assert_eq!(parse_srv(&ok, 7, NAME).unwrap().records.len(), 2);
        // Another id, another question, a query instead of an answer.
        assert!(matches!(
            parse_srv(&ok, 8, NAME),
            Err(DnsError::Malformed(_))
        ));
        assert!(matches!(
            parse_srv(&ok, 7, "_x._tcp.other.example"),
            Err(DnsError::Malformed(_))
        ));
        assert!(matches!(
            parse_srv(&query, 7, NAME),
            Err(DnsError::Malformed(_))
        ));
        // Every truncation of a real answer parses or is refused, never panics.
        for cut in 0..ok.len() {
            let _ = parse_srv(&ok[..cut], 7, NAME);
        }
        assert_eq!(
            name_servers("# x\nnameserver 10.96.0.10\nsearch svc.cluster.local\nnameserver ::1\nnameserver bogus\n"),
            vec![
                "10.96.0.10:53".parse::<SocketAddr>().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
    }

    /// The query a test name server got, and where from.
    fn query_on(udp: &UdpSocket) -> (Vec<u8>, SocketAddr) {
        let mut buf = [0u8; 4096];
        let (n, from) = udp.recv_from(&mut buf).unwrap();
        (buf[..n].to_vec(), from)
    }

    /// A flood before the answer: datagrams from the server's port with
    /// other ids, and with the query's id from another port (an off-path
    /// spoofer): each dropped, and the answer behind them taken. The
    /// answer follows each round of 100, so that a datagram the kernel
    /// drops under the flood does not decide the test.
    #[test]
    fn an_answer_flood_of_other_ids_and_other_ports_is_ignored() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (query, from) = query_on(&udp);
            let good = answer(&query, 2, None);
            let spoofer = UdpSocket::bind("127.0.0.1:0").unwrap();
            let forged = answer(&query, 1, None);
            for round in 0..20u16 {
                for i in 0..90u16 {
                    let mut stray = good.clone();
                    let id = u16::from_be_bytes([stray[0], stray[1]]);
                    let other = id.wrapping_add(1 + round * 90 + i);
                    stray[..2].copy_from_slice(&other.to_be_bytes());
                    let _ = udp.send_to(&stray, from);
                }
                for _ in 0..10 {
                    let _ = spoofer.send_to(&forged, from);
                }
                let _ = udp.send_to(&good, from);
            }
        });
        let r = Resolver {
            servers: vec![addr],
            deadline: Duration::from_secs(10),
        };
        assert_eq!(r.srv(NAME).unwrap().len(), 2);
        h.join().unwrap();
    }

    /// A truncated answer over UDP, then a TCP answer that comes a byte
    /// at a time and never ends: the lookup's deadline ends it.
    #[test]
    fn a_trickling_tcp_answer_costs_at_most_the_deadline() {
        let (udp, tcp) = udp_and_tcp();
        let addr = udp.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (query, from) = query_on(&udp);
            udp.send_to(&answer(&query, 30, Some(1)), from).unwrap();
            let Ok((mut s, _)) = tcp.accept() else {
                return;
            };
            // The length of a whole message, then its bytes one by one.
            if s.write_all(&[0xff, 0xff]).is_err() {
                return;
            }
            for _ in 0..600 {
                if s.write_all(&[0]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = Resolver {
            servers: vec![addr],
            deadline: Duration::from_millis(1500),
        };
        let e = r.srv(NAME).unwrap_err();
        assert!(matches!(e, DnsError::Timeout { .. }), "{e:?}");
        h.join().unwrap();
    }

    /// A server that never answers gets the query at most three times
    /// in the lookup (hickory sends it again after 333 ms at the soonest,
    /// twice at most), not once per try of a loop.
    #[test]
    fn an_unanswered_query_is_sent_at_most_three_times() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            udp.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
            let mut buf = [0u8; 4096];
            let mut got = 0;
            // Until the sockets of the lookup are long gone.
            while udp.recv_from(&mut buf).is_ok() {
                got += 1;
            }
            got
        });
        let r = Resolver {
            servers: vec![addr],
            deadline: Duration::from_secs(2),
        };
        assert!(matches!(r.srv(NAME), Err(DnsError::Timeout { .. })));
        let got = h.join().unwrap();
        assert!((1..=3).contains(&got), "{got} queries");
    }

    /// A datagram from the server with the query's id that is no DNS
    /// message ends the lookup as malformed (hickory's choice: the id and
    /// the source port are the spoofing screen, and they passed); the next
    /// refresh asks again.
    #[test]
    fn a_malformed_datagram_with_the_query_id_ends_the_lookup_as_malformed() {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (query, from) = query_on(&udp);
            let mut garbage = query[..2].to_vec();
            garbage.extend_from_slice(&[0xff; 9]);
            udp.send_to(&garbage, from).unwrap();
            let _ = udp.send_to(&answer(&query, 2, None), from);
        });
        let r = Resolver {
            servers: vec![addr],
            deadline: Duration::from_secs(10),
        };
        let e = r.srv(NAME).unwrap_err();
        assert!(matches!(e, DnsError::Malformed(_)), "{e:?}");
        h.join().unwrap();
    }

    /// NXDOMAIN is the answer (no other server is asked); a name without
    /// SRV records is no peer, not an error.
    #[test]
    fn nxdomain_is_an_answer_and_no_records_are_no_peers() {
        for (rcode, want) in [
            (simple_dns::RCODE::NameError, false),
            (simple_dns::RCODE::NoError, true),
        ] {
            let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
            let addr = udp.local_addr().unwrap();
            let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
            let h = std::thread::spawn(move || {
                let (query, from) = query_on(&udp);
                let q = Packet::parse(&query).unwrap();
                let mut p = Packet::new_reply(q.id());
                p.questions = q.questions.clone();
                *p.rcode_mut() = rcode;
                udp.send_to(&p.build_bytes_vec().unwrap(), from).unwrap();
            });
            let r = Resolver {
                servers: vec![addr, silent.local_addr().unwrap()],
                deadline: Duration::from_secs(10),
            };
            let got = r.srv(NAME);
            h.join().unwrap();
            if want {
                assert_eq!(got, Ok(Vec::new()));
            } else {
                assert!(matches!(got, Err(DnsError::Rcode { .. })), "{got:?}");
            }
        }
    }
}
