//! The load test's control exchange (`POST /load-test/session`,
//! `/load-test/end`) attacked through the real server on 127.0.0.1, as a
//! hostile client would (the attack table in `attack.rs` lists what each
//! case holds): the responder behind TLS and basic auth, its streams on the
//! in-memory fabric of `roce_probe::load::fake`, so that "nothing opened"
//! is `FakeLoadFabric::opened() == 0`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::load_http::{plain, port, serve, Served};
use crate::support::connect;
use crate::tls::{tls_files, Ca};
use roce_fleet::load::wire::{session_query, Grant, SessionRequest};
use roce_fleet::load::LoadRefusal;
use roce_probe::load::fake::FakeLoadFabric;

const PASSWORD: &str = "s3cr3t";

/// A grantable request from 10.0.2.15 (the responder's port is
/// 10.0.2.16/24).
fn request(from: [u8; 4]) -> SessionRequest {
    SessionRequest {
        qps: roce_probe::load::QpSet {
            gid: Ipv4Addr::from(from).to_ipv6_mapped(),
            lid: 0,
            qpns: vec![100, 101],
            psn: 1,
            mtu: 1024,
        },
        seconds: 20,
        bytes: 1 << 30,
        message: 1 << 20,
        force: false,
    }
}

fn basic(user_pass: &str) -> String {
    use base64::Engine as _;
    format!(
        "Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

/// The responder behind TLS and basic auth (`prober`, `other`).
struct Protected {
    served: Served,
    ca: Ca,
    fabric: FakeLoadFabric,
}

fn protected(name: &str) -> Protected {
    let dir = crate::tls::temp_dir(name);
    let ca = Ca::new("attack-load-ca");
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let web = tls_files(
        &dir,
        &ca,
        &format!("basic_auth_users:\n  prober: {hash}\n  other: {hash}\n"),
    );
    let fabric = FakeLoadFabric::new();
    let served = serve(&fabric, Some(&web));
    Protected { served, ca, fabric }
}

impl Protected {
    /// One raw request over TLS: `head` is the request line and headers
    /// up to (not including) the blank line; `tail` what follows it.
    fn raw(&self, head: &str, tail: &[u8]) -> (u16, String) {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(self.ca.pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let tcp = connect(self.served.addr, Duration::from_secs(30)).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let mut bytes = format!("{head}Host: localhost\r\nConnection: close\r\n\r\n").into_bytes();
        bytes.extend_from_slice(tail);
        tls.write_all(&bytes).unwrap();
        let mut buf = Vec::new();
        let _ = tls.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf).to_string();
        (crate::http_pressure::status_of(&text), text)
    }

    /// `POST target` as `user` with the right password, over TLS.
    fn post(&self, user: &str, target: &str, extra: &str) -> (u16, String) {
        let head = format!(
            "POST {target} HTTP/1.1\r\n{}{extra}",
            basic(&format!("{user}:{PASSWORD}"))
        );
        self.raw(&head, b"")
    }

    fn refused(&self, why: LoadRefusal) -> u64 {
        let v = self.served.responder.view();
        v.refused.get(&why).copied().unwrap_or(0)
    }
}

fn session_target(r: &SessionRequest) -> String {
    format!("/load-test/session?{}", session_query(r))
}

#[test]
fn a_body_or_a_chunked_body_on_a_grantable_session_request_starts_nothing() {
    let p = protected("load-body");
    let target = session_target(&request([10, 0, 2, 15]));
    let auth = basic(&format!("prober:{PASSWORD}"));
    let bodies: [(&str, &[u8]); 4] = [
        ("Content-Length: 5\r\n", b"hello"),
        ("Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
        // An empty chunked body is still a body the server did not read.
        ("Transfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
        ("Content-Length: 5\r\nExpect: 100-continue\r\n", b"hello"),
    ];
    for (headers, tail) in bodies {
        let (status, text) = p.raw(&format!("POST {target} HTTP/1.1\r\n{auth}{headers}"), tail);
        assert_eq!(status, 413, "{headers}: {text}");
        assert!(text.contains("\"refused\":\"malformed\""), "{text}");
    }
    let v = p.served.responder.view();
    assert!(
        v.active.is_empty(),
        "a refused request holds {:?}",
        v.active
    );
    assert_eq!(p.fabric.opened(), 0, "a refused request opened a port");
    assert_eq!(p.refused(LoadRefusal::Malformed), 4, "{v:?}");
    // The same request without a body is granted: the body alone refused it.
    let (status, text) = p.post("prober", &target, "");
    assert_eq!(status, 200, "{text}");
}

#[test]
fn hostile_queries_are_refused_by_reason_counted_and_open_nothing() {
    let p = protected("load-queries");
    let good = session_query(&request([10, 0, 2, 15]));
    let thousands = "a=1&".repeat(1000);
    let cases: Vec<(String, u16)> = vec![
        // Duplicate keys, unknown keys, thousands of parameters.
        (format!("{good}&gid=::ffff:10.0.2.99"), 400),
        (format!("{good}&gid=::ffff:10.0.2.15"), 400),
        (format!("{good}&evil=1"), 400),
        (thousands.clone(), 400),
        (format!("{good}&{}", "&".repeat(3000)), 200),
        // Huge and signed numbers, zero time and bytes.
        (
            good.replace("seconds=20", "seconds=99999999999999999999999"),
            400,
        ),
        (good.replace("seconds=20", "seconds=4294967296"), 400),
        (good.replace("seconds=20", "seconds=-1"), 400),
        (good.replace("seconds=20", "seconds=%2B20"), 200),
        (good.replace("seconds=20", "seconds=0"), 400),
        (good.replace("bytes=1073741824", "bytes=0"), 400),
        (
            good.replace("message=1048576", "message=18446744073709551615"),
            400,
        ),
        (good.replace("lid=0", "lid=65536"), 400),
        // Percent-escapes that are no UTF-8, no hex, cut short, a sign.
        (good.replace("gid=", "gid=%ff%fe"), 400),
        (good.replace("gid=", "gid=%C0%80"), 400),
        (good.replace("gid=", "gid=%zz"), 400),
        (format!("{good}%"), 400),
        (good.replace("gid=", "gid=%+3a"), 400),
        // A GID that is the responder's own, the subnet's broadcast, off
        // the rail, not an address.
        (good.replace("10.0.2.15", "10.0.2.16"), 422),
        (good.replace("10.0.2.15", "10.0.2.255"), 422),
        (good.replace("10.0.2.15", "10.9.2.15"), 422),
        (good.replace("10.0.2.15", "127.0.0.1"), 422),
        // Over 4 KiB of query: the server's 414, counted all the same.
        (format!("{good}&pad={}", "x".repeat(5000)), 414),
    ];
    let mut granted = 0;
    for (query, want) in &cases {
        let (status, text) = p.post("prober", &format!("/load-test/session?{query}"), "");
        assert_eq!(status, *want, "{query:.120}: {text}");
        if status == 200 {
            // A grant: end it, so the next case finds the port free.
            let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
            let grant: Grant = serde_json::from_str(body).expect("a grant");
            let end = format!("/load-test/end?session={}", grant.session);
            assert_eq!(p.post("prober", &end, "").0, 200);
            granted += 1;
        }
    }
    assert_eq!(granted, 2);
    // End requests: duplicated, extra keys, not hex, too long.
    for q in [
        "session=0123456789abcdef0123456789abcdef&session=0123456789abcdef0123456789abcdef",
        "session=0123456789abcdef0123456789abcdef&x=1",
        "session=0123456789abcdef0123456789abcdeg",
        "session=0123456789abcdef0123456789abcdef0",
        "session=%30123456789abcdef0123456789abcde",
    ] {
        let (status, text) = p.post("prober", &format!("/load-test/end?{q}"), "");
        assert!(status == 400 || status == 404, "{q}: {text}");
    }
    // Bytes that are no ASCII in the request target: hyper passes them
    // on; the parser refuses them.
    let (status, text) = p.raw(
        &format!(
            "POST /load-test/session?gid=\u{e9} HTTP/1.1\r\n{}",
            basic(&format!("prober:{PASSWORD}"))
        ),
        b"",
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("\"refused\":\"malformed\""), "{text}");
    let refused_by_request = cases.iter().filter(|(_, s)| *s != 200).count() as u64;
    let v = p.served.responder.view();
    let counted: u64 = v.refused.values().sum();
    assert_eq!(counted, refused_by_request + 6, "{v:?}");
    assert_eq!(p.fabric.opened(), granted, "only the grants opened a port");
}

#[test]
fn other_methods_on_the_load_test_paths_reach_no_responder() {
    let p = protected("load-methods");
    let target = session_target(&request([10, 0, 2, 15]));
    for path in [
        target.as_str(),
        "/load-test/end?session=0",
        "/load-test/session",
    ] {
        for method in ["GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH"] {
            let head = format!(
                "{method} {path} HTTP/1.1\r\n{}",
                basic(&format!("prober:{PASSWORD}"))
            );
            let (status, text) = p.raw(&head, b"");
            assert!(status == 404 || status == 405, "{method} {path}: {text}");
        }
    }
    // Paths that only look like the action's.
    for path in [
        "/load-test/session/",
        "//load-test/session",
        "/load-test/%73ession",
        "/load-test/session;x",
        "/LOAD-TEST/SESSION",
    ] {
        let (status, text) = p.post("prober", &format!("{path}?{}", &target[19..]), "");
        assert!(status == 404 || status == 405, "{path}: {text}");
    }
    let v = p.served.responder.view();
    assert!(v.refused.is_empty() && v.active.is_empty(), "{v:?}");
    assert_eq!(p.fabric.opened(), 0);
}

#[test]
fn concurrent_requests_get_one_session_per_port_and_only_its_holder_ends_it() {
    let p = protected("load-concurrent");
    // Two rails: 10.0.2.16/24 and 10.0.3.16/24.
    let mut second = port([10, 0, 3, 16]);
    second.device = "mlx5_1".into();
    p.served
        .responder
        .set_ports(vec![port([10, 0, 2, 16]), second]);
    // The password checked once (cached): 16 checks from one source at
    // once would otherwise meet the bcrypt queue's 2 per source (503).
    let head = format!("GET / HTTP/1.1\r\n{}", basic(&format!("prober:{PASSWORD}")));
    assert_eq!(p.raw(&head, b"").0, 200);
    let statuses: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16u8)
            .map(|i| {
                let p = &p;
                scope.spawn(move || {
                    let rail = if i % 2 == 0 { 2 } else { 3 };
                    let target = session_target(&request([10, 0, rail, 20 + i]));
                    p.post("prober", &target, "")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let grants: Vec<Grant> = statuses
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, t)| serde_json::from_str(t.split("\r\n\r\n").nth(1).unwrap()).unwrap())
        .collect();
    let others: Vec<u16> = statuses
        .iter()
        .map(|(s, _)| *s)
        .filter(|s| *s != 200)
        .collect();
    assert_eq!(grants.len(), 2, "{statuses:?}");
    assert_ne!(grants[0].device, grants[1].device);
    assert!(others.iter().all(|s| *s == 409), "{others:?}");
    assert_eq!(p.refused(LoadRefusal::Busy), 14);
    // Another authenticated user, guessing: every id refused, both
    // sessions still run.
    let mut near = grants[0].session.clone().into_bytes();
    near[0] = if near[0] == b'0' { b'1' } else { b'0' };
    for guess in [String::from_utf8(near).unwrap(), "f".repeat(32)] {
        let (status, _) = p.post("other", &format!("/load-test/end?session={guess}"), "");
        assert_eq!(status, 404);
    }
    assert_eq!(p.served.responder.view().active.len(), 2);
    // Its holder ends each; the id is spent after.
    for g in &grants {
        let end = format!("/load-test/end?session={}", g.session);
        assert_eq!(p.post("prober", &end, "").0, 200);
        assert_eq!(p.post("prober", &end, "").0, 404);
    }
    assert!(p.served.responder.view().active.is_empty());
    assert_eq!(p.refused(LoadRefusal::UnknownSession), 4);
}

/// One POST over plain TCP from `from` (any 127/8 address) with
/// basic-auth `user:pass`, on `rt`; the status, 0 when the connection
/// failed.
fn post_from(
    rt: &tokio::runtime::Runtime,
    from: IpAddr,
    to: SocketAddr,
    target: &str,
    user_pass: &str,
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\n{}Connection: close\r\n\r\n",
        basic(user_pass)
    );
    rt.block_on(async move {
        let Ok(socket) = tokio::net::TcpSocket::new_v4() else {
            return 0;
        };
        if socket.bind(SocketAddr::new(from, 0)).is_err() {
            return 0;
        }
        let Ok(mut s) = socket.connect(to).await else {
            return 0;
        };
        if s.write_all(req.as_bytes()).await.is_err() {
            return 0;
        }
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut buf));
        let _ = read.await;
        crate::http_pressure::status_of(&String::from_utf8_lossy(&buf))
    })
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Wrong passwords at a high rate on the load-test paths, over plain HTTP
/// with basic auth (the server's auth runs before any action): each a 401
/// or a 503 from the server, none reaching the responder; a requester
/// whose password was never checked is authenticated within two tries
/// (the bcrypt queue's fairness by source holds on these paths too), and
/// the responder then refuses it as `unauthenticated` (no TLS).
#[test]
fn a_flood_of_wrong_passwords_on_the_load_test_paths_never_reaches_the_responder() {
    let dir = crate::tls::temp_dir("load-flood");
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prober: {hash}\n")).unwrap();
    let fabric = FakeLoadFabric::new();
    let s = serve(&fabric, Some(&web));
    let target = session_target(&request([10, 0, 2, 15]));
    let halt = std::sync::atomic::AtomicBool::new(false);
    let denied = std::sync::atomic::AtomicU64::new(0);
    let (tries, flood) = std::thread::scope(|scope| {
        // 50 sources, 2 requests each in flight, every password new.
        let flood: Vec<_> = (0..100u32)
            .map(|k| {
                let (halt, denied, target, addr) = (&halt, &denied, &target, s.addr);
                scope.spawn(move || {
                    let rt = current_thread();
                    let from = IpAddr::from([127, 2, 0, (k / 2 + 1) as u8]);
                    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
                    let mut n = 0;
                    while !halt.load(std::sync::atomic::Ordering::Relaxed) {
                        n += 1;
                        let path = if n % 2 == 0 {
                            target.as_str()
                        } else {
                            "/load-test/end?session=0123456789abcdef0123456789abcdef"
                        };
                        let status = post_from(&rt, from, addr, path, &format!("prober:w-{k}-{n}"));
                        if status == 401 {
                            denied.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        *statuses.entry(status).or_default() += 1;
                    }
                    statuses
                })
            })
            .collect();
        // Every flooding source failed about twice (counted, no clock).
        while denied.load(std::sync::atomic::Ordering::Relaxed) < 100 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut tries = Vec::new();
        let rt = current_thread();
        for _ in 0..2 {
            let status = post_from(
                &rt,
                IpAddr::from([127, 0, 0, 3]),
                s.addr,
                &target,
                &format!("prober:{PASSWORD}"),
            );
            tries.push(status);
            if status == 403 {
                break;
            }
        }
        halt.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut by_status = std::collections::BTreeMap::<u16, u64>::new();
        for f in flood {
            for (st, n) in f.join().unwrap() {
                *by_status.entry(st).or_default() += n;
            }
        }
        (tries, by_status)
    });
    eprintln!("requester {tries:?}; flood {flood:?}");
    assert_eq!(tries.last(), Some(&403), "requester got {tries:?}");
    assert!(
        flood.keys().all(|st| [0, 401, 503].contains(st)),
        "{flood:?}"
    );
    // Only the requester reached the responder.
    let v = s.responder.view();
    assert_eq!(
        v.refused.get(&LoadRefusal::Unauthenticated),
        Some(&1),
        "{v:?}"
    );
    assert_eq!(v.refused.values().sum::<u64>(), 1, "{v:?}");
    assert_eq!(fabric.opened(), 0);
    // Plain HTTP without credentials: the server's cheap 401.
    assert_eq!(plain(s.addr, "POST", &target, "").0, 401);
    let _ = std::fs::remove_dir_all(&dir);
}
