//! The load test's control exchange through the real server on
//! 127.0.0.1: the requester side's HTTPS client with the peer probes'
//! CA and credentials against a responder behind TLS and basic auth (the
//! streams on the in-memory fabric of `roce_probe::load::fake`), and what
//! the server and the responder refuse: a request the server did not
//! authenticate over TLS (the responder's `unauthenticated`), one without
//! credentials (the server's 401), one with a body (413), an overlong query
//! (414), a plain-http requester holding credentials (refused before it
//! connects). Every port a session opened is gone when it ends.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::connect;
use crate::tls::{temp_dir, tls_files, Ca};
use roce_exporter::app::App;
use roce_exporter::config::{Config, PeerProbeConfig, WebLimits};
use roce_exporter::exposition::BuildInfo;
use roce_exporter::load_responder::Responder;
use roce_exporter::server::{self, Action, ServeOptions};
use roce_exporter::snapshot::Snapshot;
use roce_exporter::webconfig::WebConfigWatcher;
use roce_fleet::load::client::{self, Control, HttpControl, LoadPlan};
use roce_fleet::load::{LoadRefusal, LocalLoadPort};
use roce_fleet::peer_rails::Net;
use roce_probe::load::fake::{FakeLoadFabric, FakeLoadVerbs};

pub(crate) fn port(ip: [u8; 4]) -> LocalLoadPort {
    let v4 = Ipv4Addr::from(ip);
    LocalLoadPort {
        device: "mlx5_0".into(),
        port: 1,
        netdev: Some("ens1np0".into()),
        gid_index: 3,
        gid: v4.to_ipv6_mapped(),
        subnet: Some(Net::of(v4, 24)),
        traffic_class: 106,
        rate_bytes_per_second: Some(50e9),
        carried_bytes_per_second: Some(0.0),
        gpu: None,
    }
}

pub(crate) struct Served {
    #[allow(dead_code)]
    runtime: tokio::runtime::Runtime,
    pub(crate) addr: SocketAddr,
    pub(crate) responder: Arc<Responder<FakeLoadVerbs>>,
}

/// The exporter's server with its responder on `fabric`, behind
/// `web_config` (none: plain HTTP, nobody authenticated).
pub(crate) fn serve(fabric: &FakeLoadFabric, web_config: Option<&Path>) -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listeners = runtime
        .block_on(server::bind(&["127.0.0.1:0".to_string()]))
        .unwrap();
    let addr = listeners[0].local_addr().unwrap();
    let config = Config::parse("load_test: {responder: true}\n", "test").unwrap();
    let verbs = fabric.node(Ipv4Addr::new(10, 0, 2, 16).to_ipv6_mapped());
    let responder = Arc::new(Responder::new(verbs, "node-b".into(), &config));
    responder.set_ports(vec![port([10, 0, 2, 16])]);
    let r = responder.clone();
    let app = App::new(
        BuildInfo::current(Duration::from_secs(5)),
        Arc::new(Snapshot::default()),
    )
    .with_actions(Arc::new(move |a: &Action| r.action(a)));
    let mut options = ServeOptions::new(WebLimits::default());
    options.web_config =
        web_config.map(|p| Arc::new(WebConfigWatcher::load(p).expect("valid web config")));
    runtime.spawn(server::serve_with(
        listeners,
        Arc::new(app),
        options,
        std::future::pending(),
    ));
    Served {
        runtime,
        addr,
        responder,
    }
}

/// One raw HTTP/1.1 request over plain TCP; the status.
pub(crate) fn plain(addr: SocketAddr, method: &str, path: &str, extra: &str) -> (u16, String) {
    let mut s = connect(addr, Duration::from_secs(10)).unwrap();
    let r = format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}\r\n");
    s.write_all(r.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    (crate::http_pressure::status_of(&text), text)
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

fn until(what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < end, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_responder_behind_a_server_that_authenticates_nobody_refuses_every_session() {
    let fabric = FakeLoadFabric::new();
    let s = serve(&fabric, None);
    let (status, body) = plain(
        s.addr,
        "POST",
        "/load-test/session?gid=::ffff:10.0.2.15",
        "",
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"refused\":\"unauthenticated\""), "{body}");
    assert_eq!(
        s.responder
            .view()
            .refused
            .get(&LoadRefusal::Unauthenticated),
        Some(&1)
    );
    // Not an action: the routes answer as before.
    assert_eq!(plain(s.addr, "GET", "/load-test/session", "").0, 404);
    assert_eq!(plain(s.addr, "POST", "/metrics", "").0, 405);
    assert_eq!(fabric.opened(), 0);
}

#[test]
fn a_whole_test_over_https_with_the_peer_probes_credentials() {
    let dir = temp_dir("load");
    let ca = Ca::new("load-ca");
    let hash = bcrypt::hash("s3cr3t", 4).unwrap();
    let web = tls_files(&dir, &ca, &format!("basic_auth_users:\n  prober: {hash}\n"));
    std::fs::write(dir.join("ca.pem"), &ca.pem).unwrap();
    std::fs::write(dir.join("password"), "s3cr3t\n").unwrap();
    let fabric = FakeLoadFabric::new();
    let s = serve(&fabric, Some(&web));
    let peer = format!("localhost:{}", s.addr.port());

    // The server's own answers: no credentials, a body, a long query.
    let unauth = HttpControl::new(&PeerProbeConfig {
        tls_ca_file: Some(dir.join("ca.pem")),
        ..PeerProbeConfig::default()
    })
    .unwrap();
    let requester = fabric.node(Ipv4Addr::new(10, 0, 2, 15).to_ipv6_mapped());
    let e = client::prepare(
        &requester,
        &unauth,
        &port([10, 0, 2, 15]),
        std::slice::from_ref(&peer),
        &plan(),
    )
    .err()
    .expect("refused");
    assert!(e.why.contains("HTTP 401"), "{}", e.why);

    let control = HttpControl::new(&PeerProbeConfig {
        tls_ca_file: Some(dir.join("ca.pem")),
        username: Some("prober".into()),
        password_file: Some(dir.join("password")),
        ..PeerProbeConfig::default()
    })
    .unwrap();
    // Plain http with credentials never leaves the host.
    let e = control
        .start(
            &format!("http://127.0.0.1:{}", s.addr.port()),
            &roce_fleet::load::wire::SessionRequest {
                qps: roce_probe::load::QpSet {
                    gid: Ipv4Addr::new(10, 0, 2, 15).to_ipv6_mapped(),
                    lid: 0,
                    qpns: vec![20],
                    psn: 1,
                    mtu: 4096,
                },
                seconds: 10,
                bytes: 1 << 30,
                message: 65536,
                force: false,
            },
        )
        .unwrap_err();
    assert!(e.message.contains("never sent over plain http"), "{e}");

    let mut prepared = vec![client::prepare(
        &requester,
        &control,
        &port([10, 0, 2, 15]),
        std::slice::from_ref(&peer),
        &plan(),
    )
    .expect("granted")];
    assert_eq!(prepared[0].grant.node, "node-b");
    let reports = client::run(&mut prepared, &plan(), &AtomicBool::new(false));
    assert!(reports[0].failure.is_none(), "{:?}", reports[0].failure);
    let written = reports[0].bytes;
    let ends = client::finish(prepared, &control);
    let end = ends[0].as_ref().expect("the end answered");
    assert_eq!((end.bytes, end.ended.as_str()), (written, "stopped"));
    until("every port released", || fabric.open() == 0);
    let v = s.responder.view();
    assert_eq!((v.bytes, v.sessions.get("stopped")), (written, Some(&1)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_body_and_an_overlong_query_are_refused_by_the_server() {
    let fabric = FakeLoadFabric::new();
    let s = serve(&fabric, None);
    let (status, _) = plain(
        s.addr,
        "POST",
        "/load-test/session?gid=x",
        "Content-Length: 5\r\n\r\nhello",
    );
    assert_eq!(status, 413);
    let long = format!("/load-test/session?{}", "a".repeat(5000));
    let (status, _) = plain(s.addr, "POST", &long, "");
    assert!(status == 414 || status == 431, "{status}");
    assert_eq!(fabric.opened(), 0);
}

/// The ports `check --load` and the responder see: active ones only, the
/// RoCE v2 GID NCCL would pick, the line rate, the RoCE traffic class,
/// what each carried between two samples, and the GPU beside the NIC
/// (PIX or PXB) for GPU memory.
#[test]
fn local_ports_are_the_active_ones_with_their_gid_rate_load_and_gpu() {
    use roce_rdma::PortState;
    use roce_testkit::snapshot::{mlx5, roce_port, SnapshotBuilder};
    use roce_topology::path::PathClass;
    use roce_topology::{GpuNicPath, TopologySnapshot};

    let sample = |i: u64, xmit: u64| {
        let down = roce_rdma::Port {
            state: Some(PortState::Down),
            ..roce_port(1)
        };
        SnapshotBuilder::new()
            .sample(i)
            .device(mlx5("mlx5_0", vec![roce_port(1)]))
            .counter("port_xmit_data", xmit)
            .counter("port_rcv_data", 0)
            .device(mlx5("mlx5_1", vec![down]))
            .topology(TopologySnapshot {
                gpus: vec![crate::support::h100(0, "0000:17:00.0")],
                paths: vec![GpuNicPath {
                    gpu: 0,
                    nic: "mlx5_0".into(),
                    class: PathClass::Pix,
                    bridges: vec![],
                }],
                ..TopologySnapshot::default()
            })
            .build()
    };
    let config = Config::parse("expect: {nccl_ib_tc: 106}\n", "test").unwrap();
    let before = sample(0, 0);
    // 10 s later, 5e9 four-octet units: 2 GB/s, 4% of the line rate.
    let after = sample(1, 5_000_000_000);
    let ports = roce_exporter::load::local_ports(Some(&before), &after, &config);
    assert_eq!(ports.len(), 1, "{ports:?}");
    let p = &ports[0];
    assert_eq!((p.device.as_str(), p.port, p.gid_index), ("mlx5_0", 1, 3));
    assert_eq!(p.gid, Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped());
    assert_eq!(p.rate_bytes_per_second, Some(50e9));
    assert_eq!(p.traffic_class, 106);
    assert_eq!(p.carried_bytes_per_second, Some(2e9));
    assert_eq!(p.gpu.as_deref(), Some("0000:17:00.0"));
    // The first sample says nothing of the load: not measured.
    let first = roce_exporter::load::local_ports(None, &after, &config);
    assert_eq!(first[0].carried_bytes_per_second, None);
}
