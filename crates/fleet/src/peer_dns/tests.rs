use super::*;
// The test name servers' messages: simple-dns, another library than
// the one the resolver decodes them with.
use simple_dns::rdata::{RData, A, OPT, SRV};
use simple_dns::{Name, Packet, PacketFlag, Question, ResourceRecord, CLASS, QCLASS, QTYPE, TYPE};
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
