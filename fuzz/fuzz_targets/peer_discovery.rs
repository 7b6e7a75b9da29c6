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
//!   for a peer host taken from the input.
//!
//! Whatever the input: no panic, bodies within their bounds, and every
//! admitted endpoint one a probe may be aimed at.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_exporter::config::RailConfig;
use roce_exporter::sources::peer_dns::parse_srv;
use roce_exporter::sources::peer_endpoints::{
    check_endpoint, endpoint_of_labels, parse_query_response, Admission, MAX_ENDPOINTS_PER_PEER,
};
use roce_exporter::sources::peer_http::{parse_answer, Request};
use roce_exporter::sources::peer_rails::Rails;

const NAME: &str = "_metrics._tcp.roce-exporter.monitoring.svc.cluster.local";

fn admit(host: &str, endpoints: Vec<roce_probe::peer::Endpoint>) {
    let rails = Rails::new(&RailConfig::default()).expect("default rails");
    let a = Admission {
        rails: rails.clone(),
        allow_link_local: false,
    };
    let out = a.admit(host, endpoints, &|_| false);
    assert!(out.endpoints.len() <= MAX_ENDPOINTS_PER_PEER);
    for e in &out.endpoints {
        assert_eq!(check_endpoint(e, &rails, false), Ok(()));
        assert!((2..=0xFF_FFFF).contains(&e.qpn));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    match kind % 4 {
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
                    assert!(answer.records.iter().all(|r| r.port != 0 && !r.target.is_empty()));
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
        _ => {
            let (host, doc) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (String::from_utf8_lossy(&rest[..i]).to_string(), &rest[i + 1..]),
                None => ("node-b".to_string(), rest),
            };
            if let Ok(eps) = roce_probe::peer::parse_endpoints(doc) {
                admit(&host, eps);
            }
        }
    }
});
