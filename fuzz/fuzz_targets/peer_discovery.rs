//! Fuzz target: what the peer-probe discovery reads from the network
//! (`src/sources/peer_*.rs`), each as hostile input:
//! - byte 0 = 0: an HTTP answer (status line, headers, chunked and gzip
//!   bodies) through the client's exchange (`peer_http::parse_answer`:
//!   hyper's HTTP/1.1 client connection over the answer held in memory and
//!   the bounds around it), then the body as an endpoints document,
//!   admitted (`peer_endpoints`);
//! - 1: a DNS message decoded by hickory as the answer to an SRV query,
//!   and the records taken from it (`peer_dns::parse_srv`);
//! - 2: a Prometheus `/api/v1/query` answer (`parse_query_response`), each
//!   series admitted as the coordinator does;
//! - 3: an endpoints document (`roce_probe::peer::parse_endpoints`) admitted
//!   for a peer host taken from the input;
//! - 4: a datagram received by a responder (`roce_probe::peer_admit::handle`),
//!   from a sender taken from the input, with or without the cookie.
//!
//! Whatever the input: no panic, bodies within their bounds, every
//! admitted endpoint one a probe may be aimed at (a unicast host of the
//! fabric), and no answer to a sender outside the admitted set, nor an
//! echo to one without its cookie, nor an answer larger than what asked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_exporter::config::RailConfig;
use roce_exporter::sources::peer_address::{admit_gid, AddressPolicy, PortSubnet};
use roce_exporter::sources::peer_dns::parse_srv;
use roce_exporter::sources::peer_endpoints::{
    endpoint_of_labels, parse_query_response, Admission, Claim, MAX_ENDPOINTS_PER_PEER,
};
use roce_exporter::sources::peer_http::{parse_answer, Request};
use roce_exporter::sources::peer_rails::Rails;
use roce_probe::peer_admit::{handle, Datagram, Handled, Responder, Served};
use roce_probe::peer_wire::{MessageKind, HEADER_LEN};

const NAME: &str = "_metrics._tcp.roce-exporter.monitoring.svc.cluster.local";

/// This node's fabric in the target: 10.0.0.0/8 on one link.
fn ports() -> Vec<PortSubnet> {
    vec![PortSubnet::of(
        "10.0.0.1".parse().expect("address"),
        8,
        true,
    )]
}

fn admit(host: &str, endpoints: Vec<roce_probe::peer::Endpoint>) {
    let rails = Rails::new(&RailConfig::default()).expect("default rails");
    let a = Admission {
        rails,
        policy: AddressPolicy::default(),
        fabric: Vec::new(),
    };
    let claim = Claim {
        host,
        target_node: None,
    };
    let out = a.admit(claim, endpoints, &ports());
    assert!(out.endpoints.len() <= MAX_ENDPOINTS_PER_PEER);
    for e in &out.endpoints {
        assert_eq!(a.check(e, &ports()), Ok(()));
        assert_eq!(
            admit_gid(&e.gid, &ports(), &AddressPolicy::default()),
            Ok(())
        );
        assert!((2..=0xFF_FFFF).contains(&e.qpn));
    }
}

/// A datagram from the sender the input's first 20 bytes name (GID, QPN)
/// to a responder admitting one peer (10.0.0.2, QPN 17), with the peer's
/// cookie put in when the input's 21st byte is odd.
fn datagram(rest: &[u8]) {
    let Some((sender, payload)) = rest.split_first_chunk::<21>() else {
        return;
    };
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&sender[..16]);
    let gid = std::net::Ipv6Addr::from(gid);
    let qpn = u32::from_be_bytes([sender[16], sender[17], sender[18], sender[19]]) & 0xFF_FFFF;
    let peer = std::net::Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped();
    let now = std::time::Instant::now();
    let mut r = Responder::new(1, now);
    r.set_admitted(vec![(peer, 17)]);
    let mut payload = payload.to_vec();
    if sender[20] & 1 == 1 && payload.len() >= HEADER_LEN {
        // The peer's cookie, as a challenge gives it.
        if let roce_probe::peer_admit::Verdict::Challenge { cookie } =
            r.admit(&peer, 17, 0, 64, now)
        {
            payload[32..40].copy_from_slice(&cookie.to_be_bytes());
        }
    }
    let d = Datagram {
        payload: &payload,
        gid,
        qpn,
        traffic_class: sender[20],
    };
    let mut served = Served::default();
    if let Handled::Answer(m, _) = handle(&d, None, &mut r, now, &mut served) {
        assert_eq!((gid, qpn), (peer, 17), "answered a sender not admitted");
        assert!(payload.len() >= HEADER_LEN);
        match m.kind {
            // Echoed only with the peer's own cookie in the probe.
            MessageKind::Echo => assert_eq!(&payload[32..40], &m.cookie.to_be_bytes()),
            MessageKind::Challenge => {}
            MessageKind::Probe => panic!("a probe is never an answer"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 5 {
        0 => {
            let max_body = 4096;
            for gzip in [false, true] {
                let request = Request {
                    path: "/peer-probe/endpoints",
                    accept: "application/json",
                    max_body,
                    gzip,
                };
                let (_, body) = parse_answer(rest, &request);
                if let Ok(body) = body {
                    assert!(body.len() <= max_body);
                    if let Ok(eps) = roce_probe::peer::parse_endpoints(&body) {
                        admit("node-b", eps);
                    }
                }
            }
        }
        1 => {
            if let Some((id, msg)) = rest.split_first_chunk::<2>() {
                if let Ok(answer) = parse_srv(msg, u16::from_be_bytes(*id), NAME) {
                    assert!(answer.records.len() <= roce_exporter::sources::peer_dns::MAX_RECORDS);
                    assert!(answer
                        .records
                        .iter()
                        .all(|r| r.port != 0 && !r.target.is_empty()));
                }
            }
        }
        2 => {
            if let Ok(series) = parse_query_response(rest) {
                for s in series {
                    if let Ok(e) = s.endpoint {
                        admit(&s.instance, vec![e]);
                    }
                }
            }
            // Labels straight from the input too.
            let text = String::from_utf8_lossy(rest);
            let labels = text
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            if let Ok(e) = endpoint_of_labels(&labels) {
                admit("10.0.0.1", vec![e]);
            }
        }
        4 => datagram(rest),
        _ => {
            let (host, doc) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (
                    String::from_utf8_lossy(&rest[..i]).to_string(),
                    &rest[i + 1..],
                ),
                None => ("node-b".to_string(), rest),
            };
            if let Ok(eps) = roce_probe::peer::parse_endpoints(doc) {
                admit(&host, eps);
            }
        }
    }
});
