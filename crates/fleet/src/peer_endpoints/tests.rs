use super::*;
use crate::config::{RailBy, RailConfig};
use crate::peer_address::{AddressPolicy, AddressRefusal, PortSubnet};
use std::net::Ipv4Addr;

fn ep(node: &str, gid: Ipv6Addr, qpn: u32) -> Endpoint {
    Endpoint {
        node: node.into(),
        device: "mlx5_0".into(),
        device_index: 0,
        port: 1,
        gid,
        gid_index: 3,
        qpn,
        qkey: QKEY,
        mtu: 4096,
        subnet: None,
        rail: None,
        incarnation: 0,
        wire: roce_probe::peer_wire::WIRE_VERSION,
        learning: false,
    }
}

fn admission() -> Admission {
    Admission {
        rails: Rails::new(&RailConfig::default()).unwrap(),
        policy: AddressPolicy::default(),
        fabric: Vec::new(),
    }
}

/// This node's port subnets in the tests: 10.0.1.0/24.
fn ports() -> Vec<PortSubnet> {
    vec![PortSubnet::of("10.0.1.5".parse().unwrap(), 24, true)]
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> Ipv6Addr {
    Ipv4Addr::new(a, b, c, d).to_ipv6_mapped()
}

#[test]
fn hostile_endpoint_values_are_refused_by_reason() {
    let a = admission();
    let check = |e: Endpoint| a.check(&e, &ports());
    let mut good = ep("b", v4(10, 0, 1, 2), 17);
    good.subnet = Some("10.0.1.0/24".into());
    good.rail = Some("10.0.1.0/24".into());
    assert_eq!(check(good.clone()), Ok(()));
    let mut e = good.clone();
    e.rail = Some("rail 0\n".into());
    assert_eq!(check(e), Err(Refusal::Name));
    for (gid, reason) in [
        ("ff02::1", Refusal::Address(AddressRefusal::Multicast)),
        ("::", Refusal::Address(AddressRefusal::Unspecified)),
        ("::1", Refusal::Address(AddressRefusal::Loopback)),
        ("fe80::1", Refusal::Address(AddressRefusal::LinkLocal)),
        (
            "::ffff:127.0.0.1",
            Refusal::Address(AddressRefusal::Loopback),
        ),
        (
            "::ffff:255.255.255.255",
            Refusal::Address(AddressRefusal::Broadcast),
        ),
        (
            "::ffff:240.0.0.1",
            Refusal::Address(AddressRefusal::Reserved),
        ),
        (
            "2001:db8::1",
            Refusal::Address(AddressRefusal::Documentation),
        ),
        (
            "::ffff:8.8.8.8",
            Refusal::Address(AddressRefusal::OffFabric),
        ),
        (
            "::ffff:0.0.0.0",
            Refusal::Address(AddressRefusal::Unspecified),
        ),
        (
            "::ffff:224.0.0.1",
            Refusal::Address(AddressRefusal::Multicast),
        ),
        (
            "::ffff:169.254.0.9",
            Refusal::Address(AddressRefusal::LinkLocal),
        ),
        // The port subnet's own network and broadcast addresses.
        ("::ffff:10.0.1.0", Refusal::Address(AddressRefusal::Network)),
        (
            "::ffff:10.0.1.255",
            Refusal::Address(AddressRefusal::Broadcast),
        ),
        (
            "::ffff:192.0.2.1",
            Refusal::Address(AddressRefusal::Documentation),
        ),
        (
            "::ffff:10.0.2.16",
            Refusal::Address(AddressRefusal::OffFabric),
        ),
    ] {
        let e = ep("b", gid.parse().unwrap(), 17);
        assert_eq!(check(e), Err(reason), "{gid}");
    }
    assert!(HOSTILE_GIDS
        .iter()
        .all(|g| check(ep("b", g.parse().unwrap(), 17)).is_err()));
    // Link-local only where configured.
    let ll = ep("b", "fe80::1".parse().unwrap(), 17);
    let lenient = Admission {
        policy: AddressPolicy {
            allow_link_local: true,
        },
        ..admission()
    };
    assert_eq!(lenient.check(&ll, &ports()), Ok(()));
    // A routed fabric's network, configured.
    let routed = Admission {
        fabric: vec![PortSubnet::parse("10.8.0.0/16").unwrap()],
        ..admission()
    };
    assert_eq!(
        routed.check(&ep("b", v4(10, 8, 3, 1), 17), &ports()),
        Ok(())
    );
    // A responder of the wire version before (no "wire" in its document).
    let mut old = good.clone();
    old.wire = 1;
    assert_eq!(check(old), Err(Refusal::WireVersion));
    for qpn in [0, 1, u32::MAX, 0x100_0000] {
        assert_eq!(
            check(ep("b", v4(10, 0, 1, 2), qpn)),
            Err(Refusal::Qpn),
            "{qpn}"
        );
    }
    assert_eq!(check(ep("b", v4(10, 0, 1, 2), 2)), Ok(()));
    assert_eq!(check(ep("b", v4(10, 0, 1, 2), 0xFF_FFFF)), Ok(()));
    let mut e = good.clone();
    e.mtu = 0;
    assert_eq!(check(e), Err(Refusal::Mtu));
    let mut e = good.clone();
    e.qkey = 0x1111_1111;
    assert_eq!(check(e), Err(Refusal::Qkey));
    let mut e = good.clone();
    e.device = "mlx5_0\"} 1\nroce_fake 1".into();
    assert_eq!(check(e), Err(Refusal::Name));
    let mut e = good.clone();
    e.node = "n".repeat(MAX_NAME_BYTES + 1);
    assert_eq!(check(e), Err(Refusal::Name));
    // A fabric address whose document claims another subnet than its own.
    let mut e = ep("b", v4(10, 0, 1, 7), 17);
    e.subnet = Some("10.0.9.0/24".into());
    assert_eq!(check(e), Err(Refusal::OffRail));
    // Configured rail networks: a GID outside all of them (but on the
    // fabric of this node's ports).
    let mut c = RailConfig {
        by: RailBy::Networks,
        ..RailConfig::default()
    };
    c.networks.insert("rail0".into(), "10.0.0.0/16".into());
    let nets = Admission {
        rails: Rails::new(&c).unwrap(),
        ..admission()
    };
    let wide = [PortSubnet::of("10.0.0.0".parse().unwrap(), 8, true)];
    assert_eq!(
        nets.check(&ep("b", v4(10, 9, 0, 1), 17), &wide),
        Err(Refusal::OffRail)
    );
}

fn claim(host: &str) -> Claim<'_> {
    Claim {
        host,
        target_node: None,
    }
}

#[test]
fn the_node_must_be_the_peer_it_came_from_and_says_what_proves_it() {
    let a = admission();
    let doc = vec![ep("node-b", v4(10, 0, 1, 2), 17)];
    let admit = |host: &str| a.admit(claim(host), doc.clone(), &ports());
    for host in ["node-b", "node-b.example.com", "NODE-B.example.com"] {
        let r = admit(host);
        assert_eq!((r.endpoints.len(), r.proof), (1, Proof::Name), "{host}");
    }
    // Addressed by IP (or a pod name made of one): admitted, nothing
    // proves the name (a DNS lookup may, should another address claim it).
    for host in [
        "10.1.2.3",
        "fd00::3",
        "10-1-2-3.roce.monitoring.svc.cluster.local",
    ] {
        let r = admit(host);
        assert_eq!((r.endpoints.len(), r.proof), (1, Proof::None), "{host}");
    }
    // The Prometheus target's own node label.
    let r = a.admit(
        Claim {
            host: "10.1.2.3",
            target_node: Some("node-b"),
        },
        doc.clone(),
        &ports(),
    );
    assert_eq!(r.proof, Proof::TargetLabel);
    let r = admit("node-c");
    assert!(r.endpoints.is_empty());
    assert_eq!(r.refused.get(&Refusal::NodeMismatch), Some(&1));
    // One document naming two nodes.
    let two = vec![
        ep("node-b", v4(10, 0, 1, 2), 17),
        ep("node-x", v4(10, 0, 1, 3), 18),
    ];
    let r = a.admit(claim("10.1.2.3"), two, &ports());
    assert_eq!(r.refused.get(&Refusal::NodeMismatch), Some(&2));
    // More endpoints than a node has ports: refused whole, not cut.
    let many = (0..65)
        .map(|i| ep("node-b", v4(10, 0, 1, 2), 17 + i))
        .collect();
    assert_eq!(
        a.admit(claim("node-b"), many, &ports())
            .refused
            .get(&Refusal::TooMany),
        Some(&65)
    );
}

#[test]
fn prometheus_answers_become_endpoints_and_bad_series_are_refused() {
    // The shape of a real /api/v1/query answer (Prometheus 2.x/3.x).
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[
          {"metric":{"__name__":"roce_peer_probe_endpoint_info","instance":"10.1.0.7:9879","job":"roce",
            "node":"node-b","device":"mlx5_0","device_index":"0","port":"1","gid":"::ffff:10.0.1.7",
            "gid_index":"3","qpn":"4711","mtu":"4096","subnet":"10.0.1.0/24","rail":"10.0.1.0/24"},
           "value":[1700000000.123,"1"]},
          {"metric":{"instance":"node-c:9879","exported_node":"node-c","node":"k8s-node-7",
            "device":"mlx5_1","device_index":"1","port":"1","gid":"::ffff:10.0.2.8",
            "gid_index":"3","qpn":"99","mtu":"4096"},"value":[1700000000.123,"1"]},
          {"metric":{"instance":"node-d:9879","node":"node-d","device":"mlx5_0","port":"x"},
           "value":[1700000000.123,"1"]}
        ]}}"#;
    let got = parse_query_response(body).unwrap();
    assert_eq!(got.len(), 3);
    let b = got[0].endpoint.as_ref().unwrap();
    assert_eq!((b.node.as_str(), b.qpn, b.qkey), ("node-b", 4711, QKEY));
    assert_eq!(b.rail.as_deref(), Some("10.0.1.0/24"));
    assert_eq!(instance_host(&got[0].instance), "10.1.0.7");
    assert_eq!(got[1].endpoint.as_ref().unwrap().node, "node-c");
    assert_eq!(got[2].endpoint, Err(Refusal::Malformed));
    let refused = |bad: &[u8]| parse_query_response(bad).unwrap_err();
    assert_eq!(
        refused(br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#),
        FleetError::QueryStatus {
            status: "error".into(),
            error: "parse error".into()
        }
    );
    assert_eq!(
        refused(br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#).to_string(),
        "query result \"matrix\", expected an instant vector"
    );
    assert_eq!(
        refused(br#"{"status":"success"}"#),
        FleetError::QueryWithoutData
    );
    assert!(matches!(refused(b"[1,2"), FleetError::QueryAnswer(_)));
    assert_eq!(instance_host("[fd00::1]:9879"), "fd00::1");
    assert_eq!(instance_host("node-b"), "node-b");
}

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

fn plain(timeout_ms: u64) -> DocumentFetcher {
    DocumentFetcher::new(&PeerProbeConfig {
        fetch_timeout: std::time::Duration::from_millis(timeout_ms),
        ..PeerProbeConfig::default()
    })
    .unwrap()
}

#[test]
fn documents_are_fetched_and_bad_answers_are_classified() {
    let doc = br#"{"version":1,"endpoints":[{"node":"b","device":"rxe0","device_index":0,"port":1,"gid":"::ffff:10.0.2.16","gid_index":1,"qpn":17,"qkey":1380994353,"mtu":1024,"subnet":"10.0.2.0/24"}]}"#;
    let mut ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n".to_vec();
    ok.extend_from_slice(doc);
    let f = plain(5000);
    let (peer, h) = serve_once(Some(ok));
    let got = f.fetch(&peer).unwrap();
    h.join().unwrap();
    assert_eq!((got.len(), got[0].qpn, got[0].mtu), (1, 17, 1024));

    let reason = |reply: &[u8]| {
        let (peer, h) = serve_once(Some(reply.to_vec()));
        let r = f.fetch(&peer).unwrap_err().reason;
        h.join().unwrap();
        r
    };
    assert_eq!(
        reason(b"HTTP/1.1 401 Unauthorized\r\n\r\n"),
        FetchReason::Status
    );
    assert_eq!(
        reason(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://10.0.0.1/\r\n\r\n"),
        FetchReason::Redirect
    );
    assert_eq!(reason(b"HTTP/1.1 200 OK\r\n\r\n{nope"), FetchReason::Parse);
    let mut big = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    big.extend(std::iter::repeat_n(b' ', MAX_DOCUMENT_BYTES + 1));
    assert_eq!(reason(&big), FetchReason::TooLarge);
    let (peer, h) = serve_once(None);
    let e = plain(50).fetch(&peer).unwrap_err();
    assert_eq!(e.reason, FetchReason::Timeout, "{e:?}");
    h.join().unwrap();
    // Without a CA, https peers are refused before any connection.
    let https = PeerAddress("https://127.0.0.1:1".into());
    assert_eq!(
        f.fetch(&https).unwrap_err().reason,
        FetchReason::Unsupported
    );
}

/// A self-signed certificate for 127.0.0.1: (PEM, DER, key).
fn self_signed() -> (String, Vec<u8>, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), cert.der().to_vec(), key.serialize_der())
}

/// A TLS server on a local port answering one request with `reply`
/// when its `Authorization` header is `want_auth`, else 401.
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
    let fetcher = DocumentFetcher::new(&config).unwrap();
    assert!(fetcher.default_tls());
    assert!(!format!("{fetcher:?}").contains("s3cret"));
    let got = fetcher.fetch(&peer).unwrap();
    h.join().unwrap();
    assert_eq!((got.len(), got[0].qpn), (1, 17));

    // Wrong credentials: the peer's 401 is a status error.
    let (peer, h) = serve_tls_once(&identity, ok.clone(), "Basic b3RoZXI6eA==");
    assert_eq!(
        fetcher.fetch(&peer).unwrap_err().reason,
        FetchReason::Status
    );
    h.join().unwrap();

    // A server whose certificate another CA signed: refused as TLS.
    let (peer, h) = serve_tls_once(&self_signed(), ok, want);
    let e = fetcher.fetch(&peer).unwrap_err();
    assert_eq!(e.reason, FetchReason::Tls, "{e:?}");
    h.join().unwrap();

    // The same credentials toward a plain http peer (a peers file may
    // list one): refused before connecting.
    let (peer, h) = serve_once(Some(b"HTTP/1.1 200 OK\r\n\r\n{}".to_vec()));
    assert_eq!(
        fetcher.fetch(&peer).unwrap_err().reason,
        FetchReason::PlainHttpCredentials
    );
    let _ = std::net::TcpStream::connect(peer.0.trim_start_matches("http://"));
    h.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
