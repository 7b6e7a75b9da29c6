//! The responder and the requester side together on the fake fabric
//! (`roce_probe::load::fake`): what is granted, what is refused and why,
//! what each side counts, and that every port a session opened is gone
//! when it ends, whichever way it ends.

use std::net::Ipv6Addr;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use roce_probe::load::fake::{FakeLoadFabric, FakeLoadVerbs};

use super::*;
use crate::load::client::{self, Control, ControlError, LoadPlan};
use crate::load::wire::{self, session_query, EndReport, Grant, Refused, SessionRequest};
use crate::peer_rails::Net;

const B: [u8; 4] = [10, 0, 2, 16];
const A: [u8; 4] = [10, 0, 2, 15];

fn gid(ip: [u8; 4]) -> Ipv6Addr {
    std::net::Ipv4Addr::from(ip).to_ipv6_mapped()
}

fn port(ip: [u8; 4], carried: Option<f64>) -> LocalLoadPort {
    LocalLoadPort {
        device: "rxe0".into(),
        port: 1,
        netdev: Some("eth0".into()),
        gid_index: 1,
        gid: gid(ip),
        subnet: Some(Net::of(ip.into(), 24)),
        traffic_class: 0,
        rate_bytes_per_second: Some(50e9),
        carried_bytes_per_second: carried,
        gpu: None,
    }
}

fn config() -> LoadTestConfig {
    LoadTestConfig {
        responder: true,
        ..LoadTestConfig::default()
    }
}

fn responder(fabric: &FakeLoadFabric, config: LoadTestConfig) -> LoadResponder<FakeLoadVerbs> {
    let r = LoadResponder::new(fabric.node(gid(B)), "node-b".into(), config)
        .with_silence(Duration::from_millis(300), Duration::from_millis(300));
    r.set_ports(vec![port(B, Some(0.0))]);
    r
}

/// Asks the responder as the server would, and waits for its answer.
fn ask(r: &LoadResponder<FakeLoadVerbs>, path: &str, query: &str, auth: bool) -> (u16, String) {
    let (tx, rx) = mpsc::channel();
    let claimed = r.handle(
        path,
        query,
        auth,
        Box::new(move |s, b| tx.send((s, b)).is_ok()),
    );
    assert!(claimed, "{path} not claimed");
    rx.recv_timeout(Duration::from_secs(10)).expect("an answer")
}

/// The requester's control exchange, in process.
struct Local<'a>(&'a LoadResponder<FakeLoadVerbs>);

impl Control for Local<'_> {
    fn start(&self, peer: &str, request: &SessionRequest) -> Result<Grant, ControlError> {
        let (status, body) = ask(self.0, wire::SESSION_PATH, &session_query(request), true);
        answer(peer, status, &body)
    }

    fn end(&self, peer: &str, session: &str) -> Result<EndReport, ControlError> {
        let (status, body) = ask(self.0, wire::END_PATH, &format!("session={session}"), true);
        answer(peer, status, &body)
    }
}

fn answer<T: serde::de::DeserializeOwned>(
    peer: &str,
    status: u16,
    body: &str,
) -> Result<T, ControlError> {
    if status == 200 {
        return Ok(serde_json::from_str(body).expect("a 200 answer parses"));
    }
    let r: Refused = serde_json::from_str(body).expect("a refusal parses");
    Err(ControlError {
        peer: peer.into(),
        refused: Some(r.refused),
        message: r.message,
    })
}

fn plan() -> LoadPlan {
    LoadPlan {
        sizes: vec![65536, 1 << 20],
        per_size: Duration::from_millis(200),
        qps: 2,
        depth: 4,
        force: false,
        gpu: false,
    }
}

fn request(force: bool, seconds: u32) -> SessionRequest {
    SessionRequest {
        qps: roce_probe::load::QpSet {
            gid: gid(A),
            lid: 0,
            qpns: vec![100, 101],
            psn: 1,
            mtu: 1024,
        },
        seconds,
        bytes: 1 << 30,
        message: 1 << 20,
        force,
    }
}

fn until(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_whole_test_moves_bytes_both_sides_count_and_every_port_is_released() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config());
    let requester = fabric.node(gid(A));
    let mut prepared = vec![client::prepare(
        &requester,
        &Local(&r),
        &port(A, None),
        &["b:9879".into()],
        &plan(),
    )
    .expect("granted")];
    assert_eq!(prepared[0].grant.node, "node-b");
    assert_eq!(fabric.open(), 2, "a requester and a receiver");
    let reports = client::run(&mut prepared, &plan(), &AtomicBool::new(false));
    assert!(reports[0].failure.is_none(), "{:?}", reports[0].failure);
    let written = reports[0].bytes;
    assert!(written > 0);
    let ends = client::finish(prepared, &Local(&r));
    let end = ends[0].as_ref().expect("ended");
    assert_eq!((end.bytes, end.ended.as_str()), (written, "stopped"));
    until("the session's port is released", || fabric.open() == 0);
    let c = r.counts();
    assert_eq!(c.sessions.get("stopped"), Some(&1));
    assert_eq!(c.bytes, written);
    assert!(c.refused.is_empty() && c.active.is_empty());
}

#[test]
fn every_refusal_has_its_reason_status_and_count() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config());
    let q = session_query(&request(false, 20));
    let cases: Vec<(String, bool, LoadRefusal)> = vec![
        (q.clone(), false, LoadRefusal::Unauthenticated),
        ("gid=::1".into(), true, LoadRefusal::Malformed),
        (
            q.replace("10.0.2.15", "10.0.9.15"),
            true,
            LoadRefusal::OffRail,
        ),
        (q.replace("10.0.2.15", "10.0.2.255"), true, LoadRefusal::Gid),
        (q.replace("10.0.2.15", "10.0.2.16"), true, LoadRefusal::Gid),
        (
            session_query(&request(false, 100_000)),
            true,
            LoadRefusal::OverCap,
        ),
    ];
    for (query, auth, want) in &cases {
        let (status, body) = ask(&r, wire::SESSION_PATH, query, *auth);
        assert_eq!(status, want.status(), "{body}");
        assert!(body.contains(want.as_str()), "{body}");
    }
    let (status, _) = ask(
        &r,
        wire::END_PATH,
        "session=0123456789abcdef0123456789abcdef",
        true,
    );
    assert_eq!(status, 404);
    let c = r.counts();
    for (_, _, want) in &cases {
        assert!(
            c.refused.get(want).copied().unwrap_or(0) >= 1,
            "{want:?}: {c:?}"
        );
    }
    assert_eq!(c.refused.get(&LoadRefusal::UnknownSession), Some(&1));
    assert_eq!(fabric.opened(), 0, "no refused request opened anything");
    assert!(!r.handle("/metrics", "", true, Box::new(|_, _| false)));
}

#[test]
fn a_disabled_responder_refuses_everything() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, LoadTestConfig::default());
    let (status, body) = ask(
        &r,
        wire::SESSION_PATH,
        &session_query(&request(false, 20)),
        true,
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(r.counts().refused.get(&LoadRefusal::Disabled), Some(&1));
}

#[test]
fn a_second_request_for_a_busy_port_is_refused_and_a_loaded_port_unless_forced() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config());
    let q = session_query(&request(false, 20));
    let (status, _) = ask(&r, wire::SESSION_PATH, &q, true);
    assert_eq!(status, 200);
    let (status, body) = ask(&r, wire::SESSION_PATH, &q, true);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("busy"), "{body}");
    // The first one, never written to, ends on its own.
    until("the silent session ends", || r.counts().active.is_empty());
    // A port carrying 30% of its rate (above the 10% default).
    r.set_ports(vec![port(B, Some(15e9))]);
    let (status, body) = ask(&r, wire::SESSION_PATH, &q, true);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("port_loaded"), "{body}");
    // Not measured yet: not loaded either.
    r.set_ports(vec![port(B, None)]);
    let (status, _) = ask(&r, wire::SESSION_PATH, &q, true);
    assert_eq!(status, 409);
    r.set_ports(vec![port(B, Some(15e9))]);
    let (status, _) = ask(
        &r,
        wire::SESSION_PATH,
        &session_query(&request(true, 20)),
        true,
    );
    assert_eq!(status, 200, "forced");
    let c = r.counts();
    assert_eq!(c.refused.get(&LoadRefusal::Busy), Some(&1));
    assert_eq!(c.refused.get(&LoadRefusal::PortLoaded), Some(&2));
}

#[test]
fn a_requester_that_dies_mid_run_leaves_nothing_behind() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config());
    let requester = fabric.node(gid(A));
    let mut prepared = vec![client::prepare(
        &requester,
        &Local(&r),
        &port(A, None),
        &["b".into()],
        &plan(),
    )
    .expect("granted")];
    let mut p = plan();
    p.sizes = vec![65536];
    p.per_size = Duration::from_millis(50);
    client::run(&mut prepared, &p, &AtomicBool::new(false));
    // Killed: its queue pairs vanish, no end request is sent.
    drop(prepared);
    // Its port is released first, then the session's end counted.
    until("the session ends idle and its port is released", || {
        fabric.open() == 0 && r.counts().sessions.contains_key("idle")
    });
    assert_eq!(r.counts().sessions.get("idle"), Some(&1));
}

#[test]
fn a_reload_ends_the_running_sessions() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config());
    let (status, _) = ask(
        &r,
        wire::SESSION_PATH,
        &session_query(&request(false, 20)),
        true,
    );
    assert_eq!(status, 200);
    assert_eq!(r.counts().active.len(), 1);
    r.reconfigure(LoadTestConfig::default());
    until("released and counted", || {
        fabric.open() == 0 && r.counts().sessions.contains_key("stopped")
    });
    assert_eq!(r.counts().sessions.get("stopped"), Some(&1));
}

#[test]
fn a_failed_set_up_is_refused_and_counted() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config());
    fabric.fail_open(Some("ibv_create_qp: Cannot allocate memory"));
    let (status, body) = ask(
        &r,
        wire::SESSION_PATH,
        &session_query(&request(false, 20)),
        true,
    );
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Cannot allocate memory"), "{body}");
    assert_eq!(r.counts().refused.get(&LoadRefusal::SetupFailed), Some(&1));
    assert!(r.counts().active.is_empty());
}

#[test]
fn a_request_the_server_refuses_is_counted_and_starts_nothing() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config());
    // A body on an otherwise grantable request, and an overlong query.
    assert!(r.refused_by_server(wire::SESSION_PATH, true, "a body"));
    assert!(r.refused_by_server(wire::END_PATH, true, "query too long"));
    assert!(!r.refused_by_server("/metrics", true, "a body"));
    let c = r.counts();
    assert_eq!(c.refused.get(&LoadRefusal::Malformed), Some(&2));
    assert!(c.active.is_empty());
    assert_eq!(fabric.opened(), 0);
    // Unauthenticated first, as for any other request.
    assert!(r.refused_by_server(wire::SESSION_PATH, false, "a body"));
    assert_eq!(
        r.counts().refused.get(&LoadRefusal::Unauthenticated),
        Some(&1)
    );
}

#[test]
fn a_grant_nobody_waits_for_ends_its_session_at_once() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config()).with_silence(Duration::from_secs(60), IDLE);
    // The server stopped waiting (the client closed its connection).
    let claimed = r.handle(
        wire::SESSION_PATH,
        &session_query(&request(false, 20)),
        true,
        Box::new(|_, _| false),
    );
    assert!(claimed);
    // Well before the 60 s first-message wait.
    until(
        "the undelivered session ends and its port is released",
        || fabric.open() == 0 && r.counts().sessions.contains_key("stopped"),
    );
    assert!(r.counts().active.is_empty());
    // The port is free for the next requester.
    let (status, body) = ask(
        &r,
        wire::SESSION_PATH,
        &session_query(&request(false, 20)),
        true,
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn an_end_with_a_guessed_or_spent_id_ends_nothing() {
    let fabric = FakeLoadFabric::new();
    let r = responder(&fabric, config()).with_silence(Duration::from_secs(60), IDLE);
    let (status, body) = ask(
        &r,
        wire::SESSION_PATH,
        &session_query(&request(false, 20)),
        true,
    );
    assert_eq!(status, 200, "{body}");
    let grant: Grant = serde_json::from_str(&body).unwrap();
    // Guesses: another id, the id with one digit changed, a prefix.
    let mut near = grant.session.clone().into_bytes();
    near[31] = if near[31] == b'0' { b'1' } else { b'0' };
    let near = String::from_utf8(near).unwrap();
    for guess in [
        "0".repeat(32),
        near,
        format!("{}0", &grant.session[..31]),
        grant.session[..16].to_string(),
    ] {
        let (status, body) = ask(&r, wire::END_PATH, &format!("session={guess}"), true);
        assert!(status == 404 || status == 400, "{guess}: {status} {body}");
    }
    assert_eq!(r.counts().active.len(), 1, "still running");
    // Its holder ends it (upper case too); then the id is spent.
    let (status, body) = ask(
        &r,
        wire::END_PATH,
        &format!("session={}", grant.session.to_ascii_uppercase()),
        true,
    );
    assert_eq!(status, 200, "{body}");
    let (status, _) = ask(
        &r,
        wire::END_PATH,
        &format!("session={}", grant.session),
        true,
    );
    assert_eq!(status, 404);
    let c = r.counts();
    assert!(c.refused.get(&LoadRefusal::UnknownSession).copied() >= Some(3));
}
