use super::catalog::Catalog;
use super::pool::{FetchJob, Finished};
use super::*;
use crate::config::{PeerProbeConfig, RailConfig};
use crate::peer_endpoints::Refusal;
use crate::peer_rails::Rails;
use roce_model::snapshot::Snapshot;
use roce_probe::peer::{PeerPort, Probe, ProbeOutcome, Responder, Served};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::AtomicU32;

/// A fabric that records where every probe was aimed. node-b's
/// responder answers on `live_qpn` only (a restarted peer's old QPN is
/// gone); with `answer_all` every probe is answered.
#[derive(Clone, Default)]
struct Fabric {
    live_qpn: Arc<AtomicU32>,
    answer_all: Arc<AtomicBool>,
    /// Every n-th small probe is lost on the path (0: none).
    lose_every: Arc<AtomicU32>,
    pings: Arc<AtomicU32>,
    /// Fetches still to answer with an empty document (the peer's
    /// responder not open yet).
    empty_docs: Arc<AtomicU32>,
    aimed: Arc<Mutex<BTreeSet<(Ipv6Addr, u32)>>>,
    /// The traffic class of every probe, in order.
    classes: Arc<Mutex<Vec<u8>>>,
    /// Ports opened.
    opens: Arc<AtomicU32>,
}

struct FabricPort(Fabric);

impl PeerPort for FabricPort {
    fn local(&self) -> (Ipv6Addr, u32, u32) {
        (Ipv4Addr::new(10, 0, 2, 15).to_ipv6_mapped(), 7, 1024)
    }
    fn ping(
        &mut self,
        to: &Endpoint,
        probe: &Probe,
        _timeout: Duration,
        _responder: &mut Responder,
        _served: &mut Served,
    ) -> ProbeOutcome {
        lock(&self.0.aimed).insert((to.gid, to.qpn));
        lock(&self.0.classes).push(probe.traffic_class);
        let every = self.0.lose_every.load(Ordering::SeqCst);
        if every > 0 && probe.size == roce_probe::peer::SMALL_PAYLOAD {
            let n = self.0.pings.fetch_add(1, Ordering::SeqCst) + 1;
            if n.is_multiple_of(every) {
                return ProbeOutcome::Lost;
            }
        }
        if self.0.answer_all.load(Ordering::SeqCst)
            || to.qpn == self.0.live_qpn.load(Ordering::SeqCst)
        {
            ProbeOutcome::Answered {
                rtt: Duration::from_micros(30),
                incarnation: to.incarnation,
            }
        } else {
            ProbeOutcome::Lost
        }
    }
    fn serve(&mut self, _: &mut Responder, _: &mut Served) {}
}

impl PeerVerbs for Fabric {
    type Port = FabricPort;
    fn open_port(&mut self, _: &str, _: u8, _: u32) -> Result<FabricPort, OpenError> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        Ok(FabricPort(self.clone()))
    }
}

fn ep(node: &str, gid: Ipv6Addr, qpn: u32) -> Endpoint {
    Endpoint {
        node: node.into(),
        device: "rxe0".into(),
        device_index: 0,
        port: 1,
        gid,
        gid_index: 1,
        qpn,
        qkey: QKEY,
        mtu: 1024,
        subnet: None,
        rail: None,
        incarnation: 0,
        wire: roce_probe::peer_wire::WIRE_VERSION,
        learning: false,
    }
}

fn b_gid() -> Ipv6Addr {
    Ipv4Addr::new(10, 0, 2, 16).to_ipv6_mapped()
}

/// node-b's exporter: publishes the responder QPN it has now; not
/// started yet for its first `.1` fetches.
struct PeerExporter(Fabric, AtomicU32);

impl Fetch for PeerExporter {
    fn fetch(&self, _peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
        if self
            .1
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(FetchError {
                reason: FetchReason::Connect,
                message: "connection refused".into(),
            });
        }
        if self
            .0
            .empty_docs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Ok(Vec::new());
        }
        Ok(vec![ep(
            "node-b",
            b_gid(),
            self.0.live_qpn.load(Ordering::SeqCst),
        )])
    }
}

fn rx0() -> LocalTarget {
    LocalTarget {
        device: "rxe0".into(),
        port: 1,
        gid_index: 1,
        traffic_class: 104,
        device_index: 0,
        netdev: Some("eth0".into()),
    }
}

fn settings(all_to_all: bool, refresh: Duration) -> RunnerSettings {
    RunnerSettings {
        node: "node-a".into(),
        probe: PeerSettings {
            packets_per_second: 50.0,
            all_to_all,
            ..PeerSettings::default()
        },
        refresh,
        fetch_timeout: Duration::from_secs(1),
        resolve: hosts,
        pace: FetchPace::default(),
        subnet_of: |g| {
            g.to_ipv4_mapped()
                .map(|a| crate::peer_address::PortSubnet::of(a.into(), 24, true))
        },
        admission: admission(),
    }
}

fn admission() -> Admission {
    Admission {
        rails: Rails::new(&RailConfig::default()).unwrap(),
        policy: crate::peer_address::AddressPolicy::default(),
        fabric: Vec::new(),
    }
}

/// The tests' name table (no lookup leaves the process): node-b is
/// 10.1.0.2.
fn hosts(node: &str, _: Duration) -> Vec<std::net::IpAddr> {
    match node {
        "node-b" => vec!["10.1.0.2".parse().unwrap()],
        _ => Vec::new(),
    }
}

fn documents(peers: &[&str], fetcher: impl Fetch) -> EndpointSource {
    let config = PeerProbeConfig {
        enabled: true,
        peers: peers.iter().map(|p| p.to_string()).collect(),
        ..PeerProbeConfig::default()
    };
    EndpointSource::Documents {
        list: Box::new(PeerList::new(&config, false)),
        fetcher: Arc::new(fetcher),
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    // A bound against a hang, not a timing assertion.
    let until = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < until, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn answered(r: &PeerResults) -> u64 {
    r.ports.first().map_or(0, |(_, s)| s.small.answered)
}

/// Peers that each hold their fetch until `want` fetches are in flight
/// at once (or 2 s, against a hang): a sequential pass sees one.
struct Concurrency {
    in_flight: Mutex<usize>,
    max: AtomicU32,
    want: usize,
    cv: std::sync::Condvar,
}

impl Fetch for Concurrency {
    fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
        let mut n = lock(&self.in_flight);
        *n += 1;
        self.max.fetch_max(*n as u32, Ordering::SeqCst);
        self.cv.notify_all();
        let (mut n, _) = self
            .cv
            .wait_timeout_while(n, Duration::from_secs(2), |n| *n < self.want)
            .unwrap_or_else(PoisonError::into_inner);
        *n -= 1;
        drop(n);
        if peer.0.contains("dead") {
            return Err(FetchError {
                reason: FetchReason::Timeout,
                message: "no answer".into(),
            });
        }
        let i: u8 = peer.host().trim_start_matches('n').parse().unwrap_or(0);
        Ok(vec![ep(
            peer.host(),
            Ipv4Addr::new(10, 0, 2, 100 + i).to_ipv6_mapped(),
            5,
        )])
    }
}

#[test]
fn endpoint_fetches_run_concurrently_so_dead_peers_do_not_serialize_them() {
    let fabric = Fabric::default();
    let fetcher = Arc::new(Concurrency {
        in_flight: Mutex::new(0),
        max: AtomicU32::new(0),
        want: 8,
        cv: std::sync::Condvar::new(),
    });
    struct Shared(Arc<Concurrency>);
    impl Fetch for Shared {
        fn fetch(&self, p: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
            self.0.fetch(p)
        }
    }
    let peers: Vec<String> = (0..16)
        .map(|i| {
            if i % 4 == 0 {
                format!("dead{i}:9879")
            } else {
                format!("n{i}:9879")
            }
        })
        .collect();
    let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
    let runner = PeerRunner::spawn(
        fabric,
        documents(&peers, Shared(fetcher.clone())),
        settings(false, Duration::from_secs(3600)),
    )
    .unwrap();
    // Documents are admitted against the open ports' subnets: none is
    // fetched before a port is open.
    runner.set_targets(vec![rx0()]);
    wait_for("every live peer's endpoints", || {
        let (_, d) = runner.results();
        d.peers_known == 12 && d.fetch_errors.get(&FetchReason::Timeout) >= Some(&4)
    });
    let max = fetcher.max.load(Ordering::SeqCst);
    assert!(max >= 8, "fetches in flight at once: {max}");
    assert!(max as usize <= FETCH_WORKERS);
    let (_, d) = runner.results();
    assert_eq!((d.peers_configured, d.endpoints), (16, 12));
    assert_eq!(d.mode, DiscoveryMode::Documents);
}

/// A peer whose fetch never ends within the test holds one worker: the
/// others are fetched, probed and published meanwhile.
#[test]
fn one_slow_peer_never_freezes_the_others_or_the_published_results() {
    struct Slow(Arc<(Mutex<bool>, std::sync::Condvar)>);
    impl Fetch for Slow {
        fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
            if peer.host() == "slow" {
                let (m, cv) = &*self.0;
                let g = lock(m);
                let _ = cv.wait_timeout_while(g, Duration::from_secs(60), |released| !*released);
                return Err(FetchError {
                    reason: FetchReason::Timeout,
                    message: "deadline".into(),
                });
            }
            Ok(vec![ep("node-b", b_gid(), 11)])
        }
    }
    let fabric = Fabric::default();
    fabric.live_qpn.store(11, Ordering::SeqCst);
    let release = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
    let runner = PeerRunner::spawn(
        fabric.clone(),
        documents(&["slow:9879", "node-b:9879"], Slow(release.clone())),
        settings(false, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    wait_for("node-b probed while slow's fetch is in flight", || {
        answered(&runner.results().0) > 3
    });
    let (_, d) = runner.results();
    assert_eq!((d.peers_configured, d.peers_known), (2, 1));
    assert!(d.fetch_errors.is_empty(), "slow's fetch has not ended");
    *lock(&release.0) = true;
    release.1.notify_all();
    wait_for("slow's failure counted", || {
        runner.results().1.fetch_errors.get(&FetchReason::Timeout) == Some(&1)
    });
}

/// Each hostile value of a fetched document is refused, counted by
/// reason and never probed, even with all_to_all (no rail to hide
/// behind); the good peer is probed.
#[test]
fn hostile_documents_are_refused_counted_and_never_probed() {
    let v4 = |a, b, c, d| Ipv4Addr::new(a, b, c, d).to_ipv6_mapped();
    let mut docs: BTreeMap<String, Vec<Endpoint>> = BTreeMap::new();
    let mut hostile = |name: &str, f: &dyn Fn(&mut Endpoint)| {
        let mut e = ep(name, v4(10, 0, 2, 50 + docs.len() as u8), 17);
        f(&mut e);
        docs.insert(name.to_string(), vec![e]);
    };
    for (i, gid) in crate::peer_endpoints::HOSTILE_GIDS.iter().enumerate() {
        let g: Ipv6Addr = gid.parse().unwrap();
        hostile(&format!("gid{i}"), &move |e| e.gid = g);
    }
    for (i, qpn) in [0, 1, u32::MAX].iter().enumerate() {
        hostile(&format!("qpn{i}"), &move |e| e.qpn = *qpn);
    }
    hostile("mtu0", &|e| e.mtu = 0);
    // On the fabric, claiming a subnet its GID is not in.
    hostile("offrail", &|e| e.subnet = Some("10.0.9.0/24".into()));
    // The subnet's broadcast and network addresses.
    hostile("bcast", &|e| {
        e.gid = Ipv4Addr::new(10, 0, 2, 255).to_ipv6_mapped()
    });
    hostile("net", &|e| {
        e.gid = Ipv4Addr::new(10, 0, 2, 0).to_ipv6_mapped()
    });
    // A peer whose document names another node.
    docs.insert("liar".into(), vec![ep("good", v4(10, 0, 2, 99), 23)]);
    let mut good = ep("good", b_gid(), 17);
    good.subnet = Some("10.0.2.0/24".into());
    good.rail = Some("10.0.2.0/24".into());
    docs.insert("good".into(), vec![good]);
    struct Docs(BTreeMap<String, Vec<Endpoint>>);
    impl Fetch for Docs {
        fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
            Ok(self.0.get(peer.host()).cloned().unwrap_or_default())
        }
    }
    let peers: Vec<String> = docs.keys().map(|k| format!("{k}:9879")).collect();
    let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
    let fabric = Fabric::default();
    fabric.answer_all.store(true, Ordering::SeqCst);
    let runner = PeerRunner::spawn(
        fabric.clone(),
        documents(&peers, Docs(docs)),
        settings(true, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    // Every document fetched and admitted (17 endpoints refused: counted
    // as each ends, not as each is asked for), the good peer probed.
    wait_for("every document admitted and the good peer probed", || {
        let (r, d) = runner.results();
        d.refused.values().sum::<u64>() >= 17 && d.in_flight == 0 && answered(&r) > 4
    });
    let (_, d) = runner.results();
    let refused: Vec<(&str, u64)> = d.refused.iter().map(|(r, n)| (r.as_str(), *n)).collect();
    assert_eq!(
        refused,
        [
            ("node_mismatch", 1),
            ("unspecified", 1),
            ("loopback", 2),
            ("multicast", 1),
            ("broadcast", 2),
            ("network", 1),
            ("link_local", 1),
            ("reserved", 1),
            ("documentation", 1),
            ("off_fabric", 1),
            ("qpn", 3),
            ("mtu", 1),
            ("off_rail", 1)
        ]
    );
    assert_eq!(*lock(&fabric.aimed), BTreeSet::from([(b_gid(), 17)]));
    assert_eq!(d.peers_known, 1);
}

fn a_peer_started_late_or_restarted_with_a_new_qpn_is_fetched_again_without_a_restart() {
    let fabric = Fabric::default();
    fabric.live_qpn.store(11, Ordering::SeqCst);
    fabric.empty_docs.store(1, Ordering::SeqCst);
    let runner = PeerRunner::spawn(
        fabric.clone(),
        // The peer starts after this exporter: its first fetch fails,
        // the second finds its responder not open yet.
        documents(
            &["node-b:9879"],
            PeerExporter(fabric.clone(), AtomicU32::new(1)),
        ),
        // Far beyond the test: only a failure can trigger the re-fetch.
        settings(false, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    let sent = |r: &PeerResults| r.ports.first().map_or(0, |(_, s)| s.small.sent);
    wait_for("answers from the first QPN", || {
        answered(&runner.results().0) > 0
    });
    let (r, d) = runner.results();
    assert_eq!(r.endpoints.len(), 1);
    assert_eq!(r.endpoints[0].node, "node-a");
    assert_eq!(r.endpoints[0].rail.as_deref(), Some("10.0.2.0/24"));
    assert_eq!((d.peers_configured, d.peers_known), (1, 1));
    // The peer restarts: its old QPN is gone; its document is empty
    // at first (responder opening), then names the new QPN.
    fabric.empty_docs.store(2, Ordering::SeqCst);
    fabric.live_qpn.store(99, Ordering::SeqCst);
    let (before, _) = runner.results();
    wait_for("a probe to the old QPN lost", || {
        let (r, _) = runner.results();
        sent(&r) - answered(&r) > sent(&before) - answered(&before)
    });
    // The old QPN never answers again: any answer now is the new one's,
    // which only a re-fetch (not due for an hour) can have brought.
    let after_loss = answered(&runner.results().0);
    wait_for("answers from the new QPN", || {
        answered(&runner.results().0) > after_loss
    });
    let (_, d) = runner.results();
    assert_eq!(d.fetch_errors.get(&FetchReason::Connect), Some(&1));
    assert_eq!((d.peers_configured, d.peers_known), (1, 1));
}

#[test]
fn a_new_traffic_class_applies_without_reopening_the_port() {
    let fabric = Fabric::default();
    fabric.answer_all.store(true, Ordering::SeqCst);
    fabric.live_qpn.store(11, Ordering::SeqCst);
    let runner = PeerRunner::spawn(
        fabric.clone(),
        documents(
            &["node-b:9879"],
            PeerExporter(fabric.clone(), AtomicU32::new(0)),
        ),
        settings(false, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    wait_for("probes with class 104", || {
        lock(&fabric.classes).contains(&104)
    });
    let mut nccl = rx0();
    nccl.traffic_class = 106;
    runner.set_targets(vec![nccl]);
    wait_for("probes with class 106", || {
        lock(&fabric.classes).contains(&106)
    });
    let classes = lock(&fabric.classes).clone();
    let first = classes.iter().position(|c| *c == 106).unwrap_or(0);
    assert!(classes[first..].iter().all(|c| *c == 106), "{classes:?}");
    assert_eq!(
        fabric.opens.load(Ordering::SeqCst),
        1,
        "the port was not reopened"
    );
    // A change of the port itself (another GID index) does reopen it.
    let mut other = rx0();
    other.gid_index = 3;
    runner.set_targets(vec![other]);
    wait_for("the port opened again", || {
        fabric.opens.load(Ordering::SeqCst) == 2
    });
}

/// The findings of the rules on what the runner publishes now.
fn rule_findings(runner: &PeerRunner) -> Vec<&'static str> {
    let (results, discovery) = runner.results();
    let s = Snapshot {
        sequence: 1,
        peer_probes: Some(results),
        peer_discovery: Some(discovery),
        ..Snapshot::default()
    };
    let mut ids: Vec<&str> = roce_rules::evaluate(
        &[Arc::new(s)],
        &roce_rules::settings::RulesConfig::default(),
        &roce_rules::settings::Expectations::default(),
    )
    .into_iter()
    .map(|f| f.rule.as_str())
    .filter(|r| r.starts_with("peer_probe_"))
    .collect();
    ids.dedup();
    ids
}

/// A peer restarted with a new responder QPN: the probes lost to its
/// old QPN until its document is fetched again are not loss on the
/// path (its history starts afresh), while the same losses on a peer
/// that did not restart are.
#[test]
fn a_restarted_peer_is_not_path_loss_and_a_lossy_path_is() {
    let small_recent = |r: &PeerResults| {
        r.ports
            .first()
            .and_then(|(_, s)| s.peers.values().next().map(|p| p.recent_small))
            .unwrap_or_default()
    };
    // Must fire: every fourth small probe to node-b lost, same QPN.
    let fabric = Fabric::default();
    fabric.live_qpn.store(11, Ordering::SeqCst);
    fabric.lose_every.store(4, Ordering::SeqCst);
    let runner = PeerRunner::spawn(
        fabric.clone(),
        documents(
            &["node-b:9879"],
            PeerExporter(fabric.clone(), AtomicU32::new(0)),
        ),
        settings(false, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    wait_for("16 outcomes with losses", || {
        small_recent(&runner.results().0).len() == 16
    });
    assert_eq!(rule_findings(&runner), ["peer_probe_path_loss"]);
    drop(runner);

    // Must not: node-b restarts (new QPN); probes to the old one are
    // lost until the re-fetch, then all answered.
    let fabric = Fabric::default();
    fabric.live_qpn.store(11, Ordering::SeqCst);
    let runner = PeerRunner::spawn(
        fabric.clone(),
        documents(
            &["node-b:9879"],
            PeerExporter(fabric.clone(), AtomicU32::new(0)),
        ),
        settings(false, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    wait_for("16 answers from the first QPN", || {
        small_recent(&runner.results().0).answered() == 16
    });
    fabric.live_qpn.store(99, Ordering::SeqCst);
    wait_for("a probe to the old QPN lost", || {
        small_recent(&runner.results().0).lost() > 0
    });
    // The old QPN never answers again: the next answer is the new
    // one's. The pair's outcomes then hold no loss (without the fresh
    // start they would for the next 16 probes).
    let after_loss = answered(&runner.results().0);
    wait_for("an answer from the new QPN", || {
        answered(&runner.results().0) > after_loss
    });
    let r = small_recent(&runner.results().0);
    assert_eq!(r.lost(), 0, "{r:?}");
    assert!(
        rule_findings(&runner).is_empty(),
        "{:?}",
        rule_findings(&runner)
    );
}

/// A peer file that cannot be read is the collector's error (counted
/// and exposed every sample, as a file error is), not only a log line;
/// a refresh that reads it again clears it.
#[test]
fn an_unreadable_peer_file_is_a_collector_error_until_it_reads_again() {
    let dir = std::env::temp_dir().join(format!("roce-peer-file-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("peers.txt");
    std::fs::write(&file, [0xff_u8, 0xfe, b'\n']).unwrap();
    let fabric = Fabric::default();
    let config = PeerProbeConfig {
        enabled: true,
        file: Some(file.clone()),
        ..PeerProbeConfig::default()
    };
    let runner = PeerRunner::spawn(
        fabric.clone(),
        EndpointSource::Documents {
            list: Box::new(PeerList::new(&config, false)),
            fetcher: Arc::new(PeerExporter(fabric.clone(), AtomicU32::new(0))),
        },
        settings(false, Duration::from_secs(1)),
    )
    .unwrap();
    // not text: malformed, a kind the sampler counts as such
    wait_for("the file's error", || {
        runner.list_errors().iter().any(|e| {
            e.to_string().contains("peers.txt") && e.kind() == roce_host::ErrorKind::Malformed
        })
    });
    std::fs::write(&file, "node-b:9879\n").unwrap();
    wait_for("the error cleared", || runner.list_errors().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prometheus mode: one query brings the fleet; its series are
/// admitted as documents are; no document is fetched.
#[test]
fn the_fleet_comes_from_one_prometheus_query_admitted_like_documents() {
    struct Fleet(AtomicU32);
    impl Query for Fleet {
        fn query(&self) -> Result<Vec<FleetSeries>, FetchError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let mut bad = ep("node-c", Ipv4Addr::new(10, 0, 2, 17).to_ipv6_mapped(), 0);
            bad.device = "mlx5_0".into();
            Ok(vec![
                FleetSeries {
                    instance: "10.1.0.2:9879".into(),
                    target_node: None,
                    endpoint: Ok(ep("node-b", b_gid(), 11)),
                },
                FleetSeries {
                    instance: "node-c:9879".into(),
                    target_node: None,
                    endpoint: Ok(bad),
                },
                FleetSeries {
                    instance: "node-d:9879".into(),
                    target_node: None,
                    endpoint: Err(Refusal::Malformed),
                },
                // Another instance claiming node-b: refused.
                FleetSeries {
                    instance: "10.1.0.9:9879".into(),
                    target_node: None,
                    endpoint: Ok(ep(
                        "node-b",
                        Ipv4Addr::new(10, 0, 2, 66).to_ipv6_mapped(),
                        12,
                    )),
                },
            ])
        }
    }
    let fabric = Fabric::default();
    fabric.live_qpn.store(11, Ordering::SeqCst);
    let runner = PeerRunner::spawn(
        fabric.clone(),
        EndpointSource::Prometheus(Arc::new(Fleet(AtomicU32::new(0)))),
        settings(false, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    wait_for("node-b probed", || answered(&runner.results().0) > 2);
    let (_, d) = runner.results();
    assert_eq!(d.mode, DiscoveryMode::Prometheus);
    assert_eq!(d.requests.get(&RequestKind::Prometheus), Some(&1));
    assert_eq!(d.requests.get(&RequestKind::Document), None);
    let refused: Vec<(&str, u64)> = d.refused.iter().map(|(r, n)| (r.as_str(), *n)).collect();
    assert_eq!(refused, [("node_claimed", 1), ("qpn", 1), ("malformed", 1)]);
    assert_eq!((d.peers_configured, d.peers_known, d.endpoints), (4, 1, 1));
    assert_eq!(*lock(&fabric.aimed), BTreeSet::from([(b_gid(), 11)]));
}

#[test]
fn the_time_a_probe_took_comes_off_the_wait_after_it() {
    let spacing = Duration::from_millis(20);
    assert_eq!(
        gap_after(spacing, Duration::from_millis(3)),
        Duration::from_millis(17)
    );
    assert_eq!(
        gap_after(spacing, Duration::from_millis(500)),
        Duration::ZERO
    );
}

/// Requests of one node over simulated time with the catalog's own
/// planning: every job answered at once with the peer's document.
/// `dead` peers fail every fetch; `failing` peer ports fail probes.
pub(crate) fn simulate(
    peers: usize,
    refresh: Duration,
    horizon: Duration,
    dead: usize,
    failing_ports: usize,
    count_after: Duration,
    starting: bool,
) -> (u64, u64) {
    let admission = admission();
    let addrs: Vec<PeerAddress> = (0..peers)
        .map(|i| {
            PeerAddress(format!(
                "http://10.{}.{}.{}:9879",
                i >> 16,
                (i >> 8) & 255,
                i & 255
            ))
        })
        .collect();
    let mut c = Catalog::new(
        DiscoveryMode::Documents,
        refresh,
        12345,
        FetchPace::default(),
    );
    c.set_subnets(vec![
        crate::peer_address::PortSubnet::parse("10.0.0.0/8").unwrap()
    ]);
    let mut d = PeerDiscovery::default();
    let t0 = Instant::now();
    let tick = Duration::from_millis(200);
    let (mut documents, mut lists) = (0u64, 0u64);
    // The peers whose probes fail are live ones (after the dead).
    let failing: BTreeSet<PeerKey> = (dead..dead + failing_ports)
        .map(|i| PeerKey {
            node: format!("n{i}"),
            device: "mlx5_0".into(),
            port: 1,
        })
        .collect();
    let mut t = Duration::ZERO;
    while t < horizon {
        let now = t0 + t;
        for job in c.plan(now, FETCH_WORKERS.saturating_sub(c.in_flight), &failing) {
            let counted = t >= count_after;
            let done = match job {
                FetchJob::List => {
                    lists += u64::from(counted);
                    Finished::List(addrs.clone(), Vec::new())
                }
                FetchJob::Document(a) => {
                    documents += u64::from(counted);
                    let i = addrs.iter().position(|x| *x == a).unwrap_or(0);
                    if i < dead {
                        Finished::Document(
                            a,
                            Err(FetchError {
                                reason: FetchReason::Connect,
                                message: "refused".into(),
                            }),
                        )
                    } else {
                        let gid =
                            Ipv4Addr::new(10, 0, (i >> 8) as u8, (i & 255) as u8).to_ipv6_mapped();
                        let mut e = ep(&format!("n{i}"), gid, 17);
                        e.device = "mlx5_0".into();
                        e.learning = starting;
                        Finished::Document(a, Ok(vec![e]))
                    }
                }
                FetchJob::Query => Finished::Query(Ok(Vec::new())),
                FetchJob::Prove(n) => Finished::Proved(n, Vec::new()),
            };
            c.apply(done, now, &admission, &mut d);
        }
        t += tick;
    }
    (documents, lists)
}

fn documents_are_fetched_once_per_peer_at_a_bounded_pace_not_every_refresh() {
    // 1,000 peers, refresh 60 s, one hour: the walk fetches each peer
    // once (16 at once, then 50/s); every refresh re-fetching all
    // would be 60,000.
    let (docs, lists) = simulate(
        1000,
        Duration::from_secs(60),
        Duration::from_secs(3600),
        0,
        0,
        Duration::ZERO,
        false,
    );
    assert_eq!(docs, 1000);
    assert_eq!(lists, 60);
    // 10 s in, the walk has reached 16 + 50/s × 10 s of them: its peers
    // know theirs (a fleet running, this node started late).
    let (early, _) = simulate(
        1000,
        Duration::from_secs(60),
        Duration::from_secs(10),
        0,
        0,
        Duration::ZERO,
        false,
    );
    assert!((490..=520).contains(&early), "{early}");
    // A whole fleet starting at once: the peers read are learning theirs
    // too, so 16 + 3/s × 10 s (3,000 requests/s over 1,000 nodes).
    let (starting, _) = simulate(
        1000,
        Duration::from_secs(60),
        Duration::from_secs(10),
        0,
        0,
        Duration::ZERO,
        true,
    );
    assert!((40..=50).contains(&starting), "{starting}");
    // Every peer still tried once within its first walk: 999 peers in
    // 16 + 3/s × 330 s.
    let (walked, _) = simulate(
        1000,
        Duration::from_secs(60),
        Duration::from_secs(340),
        0,
        0,
        Duration::ZERO,
        true,
    );
    assert_eq!(walked, 1000);
    // A dead peer is asked again at 5, 10, 20, 40 s, then every minute.
    let (docs, _) = simulate(
        10,
        Duration::from_secs(60),
        Duration::from_secs(3600),
        1,
        0,
        Duration::ZERO,
        false,
    );
    assert!((10 + 58..10 + 64).contains(&docs), "{docs}");
    // A live peer whose probes keep failing: asked again at 5, 10, 20,
    // … s, then every 5 minutes at most.
    let (docs, _) = simulate(
        1,
        Duration::from_secs(60),
        Duration::from_secs(3600),
        0,
        1,
        Duration::ZERO,
        false,
    );
    assert!((12..=20).contains(&docs), "{docs}");
}

/// The slow tests of this file: run by .ci/run's full suite
/// (`cargo test --workspace --tests -- --ignored full_suite::`), not by the
/// quick `cargo test --workspace`.
mod full_suite {
    #[test]
    #[ignore = "full suite (.ci/run): an hour of simulated refreshes over many peers in a debug build"]
    fn a_peer_started_late_or_restarted_with_a_new_qpn_is_fetched_again_without_a_restart() {
        super::a_peer_started_late_or_restarted_with_a_new_qpn_is_fetched_again_without_a_restart();
    }

    #[test]
    #[ignore = "full suite (.ci/run): an hour of simulated refreshes over many peers in a debug build"]
    fn documents_are_fetched_once_per_peer_at_a_bounded_pace_not_every_refresh() {
        super::documents_are_fetched_once_per_peer_at_a_bounded_pace_not_every_refresh();
    }
}

/// Log lines of `f`, as the `fmt` subscriber writes them.
fn logged(f: impl FnOnce()) -> Vec<String> {
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&lock(&lines.0)).into_owned();
    text.lines().map(str::to_string).collect()
}

#[test]
fn a_peer_whose_endpoints_are_refused_the_same_way_is_logged_once_and_when_that_ends() {
    let admission = admission();
    let peer = PeerAddress("http://10.0.2.7:9879".into());
    let mut c = Catalog::new(
        DiscoveryMode::Documents,
        Duration::from_secs(60),
        1,
        FetchPace::default(),
    );
    c.set_subnets(vec![
        crate::peer_address::PortSubnet::parse("10.0.0.0/8").unwrap()
    ]);
    let mut d = PeerDiscovery::default();
    let now = Instant::now();
    c.apply(
        Finished::List(vec![peer.clone()], Vec::new()),
        now,
        &admission,
        &mut d,
    );
    let bad = ep("n7", "ff02::1".parse().unwrap(), 17);
    let good = ep("n7", Ipv4Addr::new(10, 0, 2, 7).to_ipv6_mapped(), 17);
    let lines = logged(|| {
        // A minute of fetches every second, all refused alike, then one
        // that is admitted, then refused again.
        for s in 0..60 {
            let done = Finished::Document(peer.clone(), Ok(vec![bad.clone()]));
            c.apply(done, now + Duration::from_secs(s), &admission, &mut d);
        }
        c.apply(
            Finished::Document(peer.clone(), Ok(vec![good.clone()])),
            now + Duration::from_secs(60),
            &admission,
            &mut d,
        );
        c.apply(
            Finished::Document(peer.clone(), Ok(vec![bad.clone()])),
            now + Duration::from_secs(61),
            &admission,
            &mut d,
        );
    });
    let refused = lines
        .iter()
        .filter(|l| l.contains("peer endpoints refused"))
        .count();
    let ended = lines
        .iter()
        .filter(|l| l.contains("peer endpoints no longer refused"))
        .count();
    assert_eq!((refused, ended), (2, 1), "{lines:#?}");
    // Counted every time all the same.
    assert_eq!(d.refused.values().sum::<u64>(), 61);
}

/// node-b's real exporter at 10.1.0.2 (node-b resolves there, see
/// [`hosts`]) and an impostor at 10.1.0.9 claiming node-b with a
/// responder of its own; the real one refuses connections for its first
/// `.0` fetches (started late).
struct TwoClaims(AtomicU32);

impl Fetch for TwoClaims {
    fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
        if peer.host() == "10.1.0.9" {
            return Ok(vec![ep(
                "node-b",
                Ipv4Addr::new(10, 0, 2, 66).to_ipv6_mapped(),
                99,
            )]);
        }
        if self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(FetchError {
                reason: FetchReason::Connect,
                message: "connection refused".into(),
            });
        }
        Ok(vec![ep("node-b", b_gid(), 11)])
    }
}

fn claims_settled(runner: &PeerRunner) -> bool {
    let (r, d) = runner.results();
    answered(&r) > 2
        && d.conflicts.len() == 1
        && d.conflicts[0].holder == "http://10.1.0.2:9879"
        && d.conflicts[0].holder_proof == "dns"
}

#[test]
fn a_claim_from_a_second_address_never_stops_the_real_node_being_probed() {
    for late in [0, 1] {
        // late 0: the real node-b is fetched first, the impostor's claim
        // comes second; late 1: the impostor holds node-b first, and the
        // real one takes it over once DNS proves its claim.
        let fabric = Fabric::default();
        fabric.live_qpn.store(11, Ordering::SeqCst);
        let runner = PeerRunner::spawn(
            fabric.clone(),
            documents(
                &["10.1.0.9:9879", "10.1.0.2:9879"],
                TwoClaims(AtomicU32::new(late)),
            ),
            settings(true, Duration::from_secs(3600)),
        )
        .unwrap();
        runner.set_targets(vec![rx0()]);
        wait_for("the real node-b probed and both claims reported", || {
            claims_settled(&runner)
        });
        let (_, d) = runner.results();
        let c = &d.conflicts[0];
        assert_eq!(
            (
                c.node.as_str(),
                c.claimant.as_str(),
                c.holder_proof,
                c.claimant_proof
            ),
            ("node-b", "http://10.1.0.9:9879", "dns", "none"),
            "late {late}"
        );
        assert!(
            d.refused.get(&Refusal::NodeClaimed) >= Some(&1),
            "late {late}"
        );
        // From the moment the real claim came in, only its responder is
        // probed; the impostor's is never aimed at once the real one is
        // known.
        lock(&fabric.aimed).clear();
        let before = answered(&runner.results().0);
        wait_for("more answers", || {
            answered(&runner.results().0) > before + 2
        });
        assert_eq!(
            *lock(&fabric.aimed),
            BTreeSet::from([(b_gid(), 11)]),
            "late {late}"
        );
        let node_b = runner
            .results()
            .0
            .ports
            .first()
            .map(|(_, s)| s.peers_known)
            .unwrap_or(0);
        assert_eq!(node_b, 1, "one node-b, not two");
    }
}

#[test]
fn without_a_proof_the_earlier_claim_keeps_the_node_and_both_are_reported() {
    // Neither claim proves node-c (it resolves nowhere): the first one
    // admitted holds it, the second never evicts it.
    struct Unproven;
    impl Fetch for Unproven {
        fn fetch(&self, peer: &PeerAddress) -> Result<Vec<Endpoint>, FetchError> {
            let last = peer.host().rsplit('.').next().unwrap_or("0");
            let qpn: u32 = last.parse().unwrap_or(0) + 100;
            Ok(vec![ep("node-c", b_gid(), qpn)])
        }
    }
    let fabric = Fabric::default();
    fabric.answer_all.store(true, Ordering::SeqCst);
    let runner = PeerRunner::spawn(
        fabric.clone(),
        documents(&["10.1.0.3:9879", "10.1.0.4:9879"], Unproven),
        settings(true, Duration::from_secs(3600)),
    )
    .unwrap();
    runner.set_targets(vec![rx0()]);
    wait_for("one holder, one refused claim", || {
        let (r, d) = runner.results();
        answered(&r) > 4 && d.conflicts.len() == 1
    });
    let (_, d) = runner.results();
    let c = &d.conflicts[0];
    assert_eq!((c.holder_proof, c.claimant_proof), ("none", "none"));
    let held: u32 = if c.holder.ends_with("10.1.0.3:9879") {
        103
    } else {
        104
    };
    lock(&fabric.aimed).clear();
    let before = answered(&runner.results().0);
    wait_for("more answers", || {
        answered(&runner.results().0) > before + 4
    });
    assert_eq!(*lock(&fabric.aimed), BTreeSet::from([(b_gid(), held)]));
}
