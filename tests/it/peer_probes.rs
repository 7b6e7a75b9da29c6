//! Probes between hosts end to end on the fake verbs port: the prober's
//! rounds over an in-memory fabric, the families they expose, and each
//! peer-probe rule firing on its fault and staying silent on a healthy
//! fabric.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::rules::{evaluate, Finding};
use roce_exporter::snapshot::Snapshot;
use roce_exporter::sources::peer_probe::PeerDiscovery;
use roce_probe::peer::fake::FakePort;
use roce_probe::peer::{Endpoint, PeerResults, PeerSettings, PortProber, ProberId, QKEY};

const ID: ProberId = ProberId {
    nonce: 7,
    incarnation: 3,
};
use roce_probe::ProbeState;

fn ep(node: &str, device_index: u32, host: u8) -> Endpoint {
    Endpoint {
        node: node.into(),
        device: format!("mlx5_{device_index}"),
        device_index,
        port: 1,
        gid: Ipv4Addr::new(10, 0, device_index as u8, host).to_ipv6_mapped(),
        gid_index: 3,
        qpn: 100 + u32::from(host),
        qkey: QKEY,
        mtu: 4096,
        subnet: Some(format!("10.0.{device_index}.0/24")),
        rail: None,
        incarnation: 9,
        wire: roce_probe::peer_wire::WIRE_VERSION,
        learning: false,
    }
}

/// Two local ports (two rails), four peers with a port on each rail.
fn peers() -> Vec<Endpoint> {
    (0..4u8)
        .flat_map(|i| {
            [
                ep(&format!("peer{i}"), 0, 10 + i),
                ep(&format!("peer{i}"), 1, 10 + i),
            ]
        })
        .collect()
}

/// Runs `rounds` rounds on both local ports; `fault` shapes each port's
/// fake fabric (by local device index).
fn run(rounds: usize, fault: impl Fn(u32, &mut FakePort)) -> PeerResults {
    let peers = peers();
    let mut ports = Vec::new();
    for dev in 0..2u32 {
        let local = ep("me", dev, 1);
        let mut port = FakePort {
            rtt: Duration::from_micros(20),
            ..FakePort::default()
        };
        fault(dev, &mut port);
        let mut prober = PortProber::new(
            local.clone(),
            port,
            PeerSettings {
                sample: 4,
                ..PeerSettings::default()
            },
            ID,
        );
        for _ in 0..rounds {
            prober.round(&peers, &mut || {});
        }
        ports.push((local, prober.stats.clone()));
    }
    PeerResults {
        state: ProbeState::Running,
        endpoints: ports.iter().map(|(e, _)| e.clone()).collect(),
        ports,
    }
}

/// The discovery of a node whose peer list was read and whose fetches
/// all came back: 4 peers listed and admitted, each port on its subnet.
fn settled(r: &PeerResults) -> PeerDiscovery {
    PeerDiscovery {
        peers_configured: 4,
        peers_known: 4,
        endpoints: 8,
        passes: 1,
        rails: r
            .ports
            .iter()
            .map(|(e, _)| (e.device.clone(), e.port, e.subnet.clone()))
            .collect(),
        ..PeerDiscovery::default()
    }
}

fn findings(r: PeerResults) -> Vec<Finding> {
    let d = settled(&r);
    findings_with(r, d)
}

fn findings_with(r: PeerResults, d: PeerDiscovery) -> Vec<Finding> {
    let s = Snapshot {
        sequence: 1,
        peer_probes: Some(r),
        peer_discovery: Some(d),
        ..Snapshot::default()
    };
    evaluate(
        &[Arc::new(s)],
        &RulesConfig::default(),
        &Expectations::default(),
    )
    .into_iter()
    .filter(|f| f.rule.as_str().starts_with("peer_probe_"))
    .collect()
}

/// The text exposition of a snapshot holding only the peer probes.
fn exposition_of(r: PeerResults, d: Option<PeerDiscovery>) -> String {
    let s = Snapshot {
        sequence: 1,
        peer_probes: Some(r),
        peer_discovery: d,
        ..Snapshot::default()
    };
    exposition::encode(
        Arc::new(s),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    )
}

fn rules_of(f: &[Finding]) -> Vec<&'static str> {
    let mut v: Vec<&str> = f.iter().map(|f| f.rule.as_str()).collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn healthy_fabric_fires_nothing() {
    let r = run(20, |_, _| {});
    assert_eq!(r.ports[0].1.peers_known, 4, "rail-aware: 4 of 8 peer ports");
    assert!(findings(r).is_empty());
}

/// A port whose rail no admitted peer is on (a /31 fabric with the
/// default subnet rails: every port is alone in its subnet) probes
/// nobody: said as an info finding, never silence.
#[test]
fn a_port_with_no_peer_on_its_rail_is_said_not_silent() {
    let mut r = run(20, |_, _| {});
    r.ports[1].1 = Default::default();
    let mut d = settled(&r);
    d.rails[1].2 = Some("10.0.1.0/31".into());
    let f = findings_with(r.clone(), d.clone());
    assert_eq!(rules_of(&f), ["peer_probe_no_peer_on_rail"]);
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_1"));
    assert!(
        f[0].finding
            .contains("no admitted peer port is on its rail 10.0.1.0/31"),
        "{}",
        f[0].finding
    );
    assert_eq!(f[0].severity.as_str(), "info");
    // No rail at all (a netdev the pattern does not match), or no peer
    // listed: said with its reason.
    d.rails[1].2 = None;
    let f = findings_with(r.clone(), d.clone());
    assert!(
        f[0].finding.contains("cannot compute the port's rail"),
        "{}",
        f[0].finding
    );
    let mut none = settled(&r);
    none.peers_configured = 0;
    none.peers_known = 0;
    let f = findings_with(r, none);
    assert!(
        f[0].finding.contains("no peer is listed"),
        "{}",
        f[0].finding
    );
}

/// Before the first pass over the peer list ended, or while fetches it
/// started are in flight, a port knowing no peer yet is starting, not
/// alone.
#[test]
fn a_port_still_fetching_its_first_peers_is_not_alone() {
    let mut r = run(20, |_, _| {});
    r.ports[1].1 = Default::default();
    let mut d = settled(&r);
    d.passes = 0;
    assert!(findings_with(r.clone(), d.clone()).is_empty());
    d.passes = 1;
    d.in_flight = 16;
    assert!(findings_with(r, d).is_empty());
}

#[test]
fn a_port_reaching_no_peer_is_the_local_port() {
    let f = findings(run(20, |dev, p| {
        if dev == 1 {
            for i in 0..4 {
                p.dead.insert(format!("peer{i}"));
            }
        }
    }));
    assert_eq!(rules_of(&f), ["peer_probe_port_isolated"]);
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_1"));
}

#[test]
fn a_peer_no_port_reaches_is_that_peer() {
    let f = findings(run(20, |_, p| {
        p.dead.insert("peer2".into());
    }));
    assert_eq!(rules_of(&f), ["peer_probe_peer_unreachable"]);
    assert!(f[0].finding.contains("peer2"), "{}", f[0].finding);
}

#[test]
fn one_lossy_pair_is_the_path() {
    // Every third probe to peer1 from rail 0 only; the rest pass.
    let f = findings(run(20, |dev, p| {
        if dev == 0 {
            p.lossy.insert("peer1".into(), 3);
        }
    }));
    assert_eq!(rules_of(&f), ["peer_probe_path_loss"]);
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_0"));
    assert!(f[0].evidence.contains("peer1"), "{}", f[0].evidence);
    assert!(
        f[0].finding.contains("3 other peer port(s) lose none"),
        "{}",
        f[0].finding
    );
}

#[test]
fn a_lossy_path_to_the_only_peer_does_not_claim_others_pass() {
    let peers = vec![ep("peer0", 0, 10)];
    let local = ep("me", 0, 1);
    let mut port = FakePort::default();
    port.lossy.insert("peer0".into(), 3);
    let mut prober = PortProber::new(local.clone(), port, PeerSettings::default(), ID);
    for _ in 0..20 {
        prober.round(&peers, &mut || {});
    }
    let f = findings(PeerResults {
        ports: vec![(local, prober.stats.clone())],
        ..PeerResults::default()
    });
    assert_eq!(rules_of(&f), ["peer_probe_path_loss"]);
    assert!(!f[0].finding.contains("other"), "{}", f[0].finding);
    assert!(f[0].finding.contains("1 peer port(s)"), "{}", f[0].finding);
}

#[test]
fn large_lost_small_answered_is_the_path_mtu() {
    let f = findings(run(20, |_, p| {
        p.mtu_limit.insert("peer3".into(), 1500 - 40);
    }));
    assert_eq!(rules_of(&f), ["peer_probe_path_mtu"]);
    assert!(f.iter().all(|f| f.evidence.contains("peer3")));
}

/// `n` RTTs of a log-normal spread around `median` (σ = 0.4 of the log,
/// deterministic) with one `outlier` answer in every 50: what a healthy
/// but busy 400G RoCE fabric answers.
fn jittery(n: usize, median: Duration, outlier: Duration) -> Vec<Duration> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut unit = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|i| {
            if i % 50 == 49 {
                return outlier;
            }
            // Box–Muller: a standard normal from two uniforms.
            let z = (-2.0 * unit().ln()).sqrt() * (std::f64::consts::TAU * unit()).cos();
            Duration::from_secs_f64(median.as_secs_f64() * (0.4 * z).exp())
        })
        .collect()
}

/// One local port on rail 0 (4 peers, 4 small answers per round): `rounds`
/// rounds per phase, each phase answering with its own RTT series.
fn rtt_phases(phases: &[(usize, Vec<Duration>)]) -> PeerResults {
    let peers = peers();
    let local = ep("me", 0, 1);
    let mut prober = PortProber::new(
        local.clone(),
        FakePort::default(),
        PeerSettings::default(),
        ID,
    );
    for (rounds, series) in phases {
        // Same statistics, the fabric's answers change.
        let mut next = PortProber::new(
            local.clone(),
            FakePort {
                rtt_series: series.clone(),
                ..FakePort::default()
            },
            PeerSettings::default(),
            ID,
        );
        next.stats = prober.stats.clone();
        prober = next;
        for _ in 0..*rounds {
            prober.round(&peers, &mut || {});
        }
    }
    PeerResults {
        ports: vec![(local, prober.stats.clone())],
        ..PeerResults::default()
    }
}

#[test]
fn sustained_congestion_far_above_the_baseline_is_congestion() {
    // 400G RoCE: a 4 µs baseline; then every answer ~20 times slower
    // (80 µs: deep queues on a congested spine) for 60 rounds (≈3 minutes
    // at the default rate) after 200 healthy rounds (≈10 minutes).
    let healthy = jittery(997, Duration::from_micros(4), Duration::from_micros(300));
    let congested = jittery(997, Duration::from_micros(80), Duration::from_micros(2000));
    let r = rtt_phases(&[(200, healthy), (60, congested)]);
    let stats = &r.ports[0].1;
    let (base, recent) = (
        stats.baseline_seconds.unwrap(),
        stats.recent_seconds.unwrap(),
    );
    assert!(base < 6e-6, "baseline stays at the healthy level: {base}");
    assert!(recent > 50e-6, "recent shows the congestion: {recent}");
    let f = findings(r);
    assert_eq!(rules_of(&f), ["peer_probe_rtt_above_baseline"]);
}

#[test]
fn jittery_rtt_with_outliers_and_short_bursts_is_not_congestion() {
    // Healthy 400G RoCE with a log-normal spread and a 300 µs outlier in
    // every 50 answers (75 times the median): no finding.
    let healthy = jittery(997, Duration::from_micros(4), Duration::from_micros(300));
    let r = rtt_phases(&[(300, healthy.clone())]);
    assert!(findings(r).is_empty());
    // A burst of 3 slow rounds (≈10 s at the default rate) is jitter, not
    // sustained congestion.
    let burst = vec![Duration::from_micros(200); 7];
    let r = rtt_phases(&[(200, healthy.clone()), (3, burst), (1, healthy)]);
    assert!(findings(r).is_empty());
}

#[test]
fn fastest_answers_do_not_make_the_baseline_on_a_loaded_host() {
    // The healthy but TCG-loaded two-VM run: answers mostly 10–50 ms, a
    // few at 0.5 ms. The old low-RTT tracker followed the 0.5 ms answers
    // and called the typical ones congestion.
    let mut series: Vec<Duration> = (0..97)
        .map(|i| Duration::from_millis(10 + (i * 7) % 41))
        .collect();
    for i in (0..97).step_by(6) {
        series[i] = Duration::from_micros(500);
    }
    let r = rtt_phases(&[(100, series)]);
    assert!(findings(r).is_empty());
}

#[test]
fn families_are_per_port_and_per_peer_bounded() {
    let r = run(20, |_, p| {
        p.dead.insert("peer2".into());
    });
    let text = exposition_of(r, None);
    assert!(text.contains("# TYPE roce_peer_probe_rtt_seconds histogram"));
    assert!(
        text.contains("roce_peer_probe_sent_total{device=\"mlx5_0\",port=\"1\",size=\"small\"} 80")
    );
    assert!(text.contains("roce_peer_probe_peer_lost{device=\"mlx5_0\",port=\"1\",peer=\"peer2\",peer_device=\"mlx5_0/1\",size=\"small\"} 16"));
    // The RTT histogram carries no peer label.
    assert!(text
        .lines()
        .filter(|l| l.starts_with("roce_peer_probe_rtt_seconds"))
        .all(|l| !l.contains("peer=")));
}

/// This node's own endpoints (what the Prometheus discovery of the
/// others reads back) and the discovery's counters, every reason present
/// from the start.
#[test]
fn own_endpoints_and_discovery_counts_are_exported() {
    use roce_exporter::sources::peer_endpoints::Refusal;
    use roce_exporter::sources::peer_http::FetchReason;
    use roce_exporter::sources::peer_probe::RequestKind;
    let mut r = run(2, |_, _| {});
    for (e, _) in r.ports.iter_mut() {
        e.rail = e.subnet.clone();
    }
    r.endpoints = r.ports.iter().map(|(e, _)| e.clone()).collect();
    let mut d = settled(&r);
    d.refused.insert(
        Refusal::Address(roce_exporter::sources::peer_address::AddressRefusal::Broadcast),
        6,
    );
    d.fetch_errors.insert(FetchReason::Redirect, 2);
    d.requests.insert(RequestKind::Document, 12);
    let text = exposition_of(r, Some(d));
    for line in [
        "roce_peer_probe_endpoint_info{node=\"me\",device=\"mlx5_1\",port=\"1\",device_index=\"1\",gid=\"::ffff:10.0.1.1\",gid_index=\"3\",qpn=\"101\",mtu=\"4096\",subnet=\"10.0.1.0/24\",rail=\"10.0.1.0/24\",incarnation=\"9\",wire=\"2\"} 1",
        "roce_peer_probe_responder_refused_total{device=\"mlx5_1\",port=\"1\",reason=\"stray_answer\"} 0",
        "roce_peer_probe_responder_refused_total{device=\"mlx5_1\",port=\"1\",reason=\"total_budget\"} 0",
        "roce_peer_probe_responder_challenged_total{device=\"mlx5_1\",port=\"1\"} 0",
        "roce_peer_probe_rtt_clock_info{device=\"mlx5_1\",port=\"1\",clock=\"host\"} 1",
        "roce_peer_probe_pending_total{device=\"mlx5_1\",port=\"1\"} 0",
        "roce_peer_probe_endpoints_refused_total{reason=\"broadcast\"} 6",
        "roce_peer_probe_endpoints_refused_total{reason=\"off_fabric\"} 0",
        "roce_peer_probe_endpoints_refused_total{reason=\"wire_version\"} 0",
        "roce_peer_probe_endpoints_refused_total{reason=\"node_mismatch\"} 0",
        "roce_peer_probe_endpoint_fetch_errors_total{reason=\"redirect\"} 2",
        "roce_peer_probe_endpoint_fetch_errors_total{reason=\"plain_http_credentials\"} 0",
        "roce_peer_probe_discovery_requests_total{kind=\"document\"} 12",
        "roce_peer_probe_peers_configured 4",
        "roce_peer_probe_peers_admitted 4",
    ] {
        assert!(text.contains(line), "{line} not in:\n{text}");
    }
}

/// The figures of docs/performance.md: series per node and the prober's
/// own CPU and memory with 1,000 configured peers on the fake verbs port
/// (`cargo test --test it peer_probes::thousand -- --nocapture` prints them).
/// The assertions are the series bound only, never a time.
#[test]
fn a_thousand_peers_keep_the_series_bounded() {
    let peers: Vec<Endpoint> = (0..1000u32)
        .map(|i| {
            let mut e = ep(&format!("node{i:04}"), 0, (i % 250) as u8 + 2);
            e.qpn = 1000 + i;
            e
        })
        .collect();
    let local = ep("me", 0, 1);
    let mut port = FakePort {
        rtt: Duration::from_micros(20),
        ..FakePort::default()
    };
    for i in (0..1000).step_by(37) {
        port.dead.insert(format!("node{i:04}"));
    }
    let mut prober = PortProber::new(local.clone(), port, PeerSettings::default(), ID);
    let rounds = 500;
    let cpu = |_: ()| {
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                let f: Vec<&str> = s.rsplit(')').next()?.split_whitespace().collect();
                Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
            })
            .unwrap_or(0)
    };
    let before = cpu(());
    let started = std::time::Instant::now();
    for _ in 0..rounds {
        prober.round(&peers, &mut || {});
    }
    let wall = started.elapsed();
    let ticks = cpu(()).saturating_sub(before);
    let r = PeerResults {
        state: ProbeState::Running,
        endpoints: vec![local.clone()],
        ports: vec![(local, prober.stats.clone())],
    };
    let text = exposition_of(r, None);
    let series = text
        .lines()
        .filter(|l| l.starts_with("roce_peer_probe_"))
        .count();
    let per_peer = text
        .lines()
        .filter(|l| l.starts_with("roce_peer_probe_peer_lost"))
        .count();
    println!(
        "1000 peers, one port: {series} series ({per_peer} per-peer), {} pairs kept, \
         {rounds} rounds in {wall:?} wall, {ticks} CPU ticks, {} bytes of pair state",
        prober.stats.peers.len(),
        prober.stats.peers.len() * std::mem::size_of::<roce_probe::peer::PairStats>()
    );
    // Per port: the sample (8) and the top failing (8) peers, two sizes.
    assert!(per_peer <= 2 * (8 + roce_probe::peer::TOP_FAILING));
    assert!(series < 80, "{series}");
}
