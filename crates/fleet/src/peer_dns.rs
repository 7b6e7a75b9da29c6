//! DNS SRV lookups for the peer list (`peer_probes.srv`): the exporters
//! behind a name, each as its target host and port. A Kubernetes headless
//! Service publishes its named ports this way
//! (`_<port>._tcp.<service>.<namespace>.svc.cluster.local`), so one query
//! per refresh lists the DaemonSet's exporters without asking each of them.
//!
//! A minimal stub resolver, bounded in every way: the name servers of
//! `/etc/resolv.conf` (at most three), one absolute deadline per lookup
//! over every server tried, an answer over UDP (EDNS0, 4096 bytes) and, when
//! the server says it is truncated, again over TCP (at most 65,535 bytes,
//! the DNS limit), answers accepted only from the server asked with the
//! query's id and question, at most [`MAX_RECORDS`] records kept. Packets
//! are parsed by `simple-dns` (no panics on malformed input: fuzzed by
//! `fuzz/fuzz_targets/dns_srv.rs` through [`parse_srv`]).
//!
//! The name is taken as fully qualified (no search domains): give the
//! whole name.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use simple_dns::rdata::{RData, OPT};
use simple_dns::{Name, Packet, PacketFlag, Question, CLASS, QCLASS, QTYPE, RCODE, TYPE};

/// SRV records kept from one answer at most (the peer list's bound).
pub const MAX_RECORDS: usize = super::peer_list::MAX_PEERS;
/// The UDP payload size this resolver advertises (EDNS0).
pub const UDP_PAYLOAD: u16 = 4096;
/// Name servers tried at most (as glibc).
pub const MAX_SERVERS: usize = 3;

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
    #[error("{name}: {server}: {message}")]
    Io {
        name: String,
        server: SocketAddr,
        message: String,
    },
    #[error("{name}: {server} answered {rcode}")]
    Rcode {
        name: String,
        server: SocketAddr,
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
        let id = query_id();
        let query = build_query(id, name)?;
        let mut last = None;
        for server in &self.servers {
            if Instant::now() >= until {
                break;
            }
            match ask(*server, &query, id, name, until) {
                Ok(records) => return Ok(records),
                // NXDOMAIN is an answer: no other server is asked.
                Err(e @ DnsError::Rcode { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e @ DnsError::Io { .. } | e @ DnsError::Malformed(_)) => e,
            _ => DnsError::Timeout {
                name: name.to_string(),
                deadline: self.deadline,
                servers: self
                    .servers
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        })
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

fn query_id() -> u16 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (t ^ (t >> 16) ^ std::process::id()) as u16
}

/// A recursive SRV query for `name` with an EDNS0 payload size.
pub fn build_query(id: u16, name: &str) -> Result<Vec<u8>, DnsError> {
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

fn left(until: Instant) -> Option<Duration> {
    Some(until.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

/// One server: UDP, then TCP when the answer is truncated.
fn ask(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    name: &str,
    until: Instant,
) -> Result<Vec<Srv>, DnsError> {
    let io = |e: std::io::Error| DnsError::Io {
        name: name.to_string(),
        server,
        message: e.to_string(),
    };
    let timeout = || DnsError::Timeout {
        name: name.to_string(),
        deadline: Duration::ZERO,
        servers: server.to_string(),
    };
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().map_err(|_| timeout())?
    } else {
        "[::]:0".parse().map_err(|_| timeout())?
    };
    let socket = UdpSocket::bind(bind).map_err(io)?;
    socket.connect(server).map_err(io)?;
    socket.send(query).map_err(io)?;
    let mut buf = vec![0u8; usize::from(UDP_PAYLOAD)];
    let answer = loop {
        let wait = left(until).ok_or_else(timeout)?;
        socket.set_read_timeout(Some(wait)).map_err(io)?;
        match socket.recv(&mut buf) {
            Ok(n) => match parse_srv(&buf[..n], id, name) {
                // A datagram that is no answer to this query (another id,
                // another question): ignored, the wait goes on.
                Err(DnsError::Malformed(_)) => continue,
                other => break other?,
            },
            Err(e) if timed_out(&e) => return Err(timeout()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    };
    if !answer.truncated {
        return rcode(answer, name, server);
    }
    // Truncated: the whole answer over TCP (two-byte length prefix).
    let wait = left(until).ok_or_else(timeout)?;
    let mut tcp = TcpStream::connect_timeout(&server, wait).map_err(io)?;
    let len = u16::try_from(query.len()).map_err(|_| DnsError::Name(name.to_string()))?;
    let mut framed = len.to_be_bytes().to_vec();
    framed.extend_from_slice(query);
    tcp.set_write_timeout(Some(left(until).ok_or_else(timeout)?))
        .map_err(io)?;
    tcp.write_all(&framed).map_err(io)?;
    let mut read_exact = |out: &mut [u8]| -> Result<(), DnsError> {
        let mut got = 0;
        while got < out.len() {
            tcp.set_read_timeout(Some(left(until).ok_or_else(timeout)?))
                .map_err(io)?;
            match tcp.read(&mut out[got..]) {
                Ok(0) => {
                    return Err(DnsError::Malformed(format!(
                        "{server}: connection closed after {got} of {} bytes",
                        out.len()
                    )))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if timed_out(&e) => return Err(timeout()),
                Err(e) => return Err(io(e)),
            }
        }
        Ok(())
    };
    let mut len = [0u8; 2];
    read_exact(&mut len)?;
    let mut msg = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_exact(&mut msg)?;
    rcode(parse_srv(&msg, id, name)?, name, server)
}

fn rcode(answer: Answer, name: &str, server: SocketAddr) -> Result<Vec<Srv>, DnsError> {
    match answer.rcode {
        None => Ok(answer.records),
        Some(rcode) => Err(DnsError::Rcode {
            name: name.to_string(),
            server,
            rcode,
        }),
    }
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

/// The SRV records answering query `id` for `name` in `msg`: `Malformed`
/// when `msg` is no answer to that query. Records of other names or types
/// (and targets of `.`, "no service") are skipped; at most
/// [`MAX_RECORDS`] are kept, sorted and without duplicates.
pub fn parse_srv(msg: &[u8], id: u16, name: &str) -> Result<Answer, DnsError> {
    let p = Packet::parse(msg).map_err(|e| DnsError::Malformed(e.to_string()))?;
    if p.id() != id || !p.has_flags(PacketFlag::RESPONSE) {
        return Err(DnsError::Malformed("not the answer to this query".into()));
    }
    let asked = |n: &Name| {
        n.to_string()
            .trim_end_matches('.')
            .eq_ignore_ascii_case(name)
    };
    if p.questions.len() != 1 || !asked(&p.questions[0].qname) {
        return Err(DnsError::Malformed("another question".into()));
    }
    let truncated = p.has_flags(PacketFlag::TRUNCATION);
    let rc = p.rcode();
    let rcode = if rc == RCODE::NoError {
        None
    } else {
        Some(format!("{rc:?}"))
    };
    // CNAME chains: records of any owner name that is the question or an
    // alias of it in this answer.
    let mut owners = vec![name.to_ascii_lowercase()];
    for rr in &p.answers {
        if let RData::CNAME(c) = &rr.rdata {
            let owner = rr.name.to_string();
            let owner = owner.trim_end_matches('.').to_ascii_lowercase();
            if owners.contains(&owner) && owners.len() < 8 {
                owners.push(c.0.to_string().trim_end_matches('.').to_ascii_lowercase());
            }
        }
    }
    let mut records = Vec::new();
    for rr in &p.answers {
        let RData::SRV(srv) = &rr.rdata else {
            continue;
        };
        let owner = rr.name.to_string();
        if !owners.contains(&owner.trim_end_matches('.').to_ascii_lowercase()) {
            continue;
        }
        let target = srv.target.to_string();
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
    Ok(Answer {
        records,
        truncated,
        rcode,
    })
}

/// A read or write that gave up at the socket's timeout.
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use simple_dns::rdata::{A, SRV};
    use simple_dns::ResourceRecord;

    const NAME: &str = "_metrics._tcp.roce-exporter.monitoring.svc.cluster.local";

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
        // The TCP listener takes a free port first and the UDP socket the
        // same number: the other way round, a port the kernel gave a UDP
        // socket may be the local port of another test's TCP connection
        // (EADDRINUSE for the listener). A UDP port in use is tried again.
        let (udp, tcp, addr) = (0..100)
            .find_map(|_| {
                let tcp = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
                let addr = tcp.local_addr().ok()?;
                UdpSocket::bind(addr).ok().map(|udp| (udp, tcp, addr))
            })
            .unwrap();
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
}
