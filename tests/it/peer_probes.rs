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
use roce_probe::peer::fake::FakePort;
use roce_probe::peer::{Endpoint, PeerResults, PeerSettings, PortProber, QKEY};
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
            7,
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
        peers_configured: 4,
        peers_fetched: 4,
        fetch_errors: Default::default(),
    }
}

fn findings(r: PeerResults) -> Vec<Finding> {
    let s = Snapshot {
        sequence: 1,
        peer_probes: Some(r),
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
}

#[test]
fn large_lost_small_answered_is_the_path_mtu() {
    let f = findings(run(20, |_, p| {
        p.mtu_limit.insert("peer3".into(), 1500 - 40);
    }));
    assert_eq!(rules_of(&f), ["peer_probe_path_mtu"]);
    assert!(f.iter().all(|f| f.evidence.contains("peer3")));
}

#[test]
fn rtt_far_above_the_baseline_is_congestion() {
    let peers = peers();
    let local = ep("me", 0, 1);
    let mut prober = PortProber::new(
        local.clone(),
        FakePort {
            rtt: Duration::from_micros(20),
            ..FakePort::default()
        },
        PeerSettings::default(),
        7,
    );
    for _ in 0..20 {
        prober.round(&peers, &mut || {});
    }
    let healthy = PeerResults {
        ports: vec![(local.clone(), prober.stats.clone())],
        ..PeerResults::default()
    };
    assert!(findings(healthy).is_empty());
    // The same port's statistics, now answered at 2 ms (100 times slower).
    let slow = FakePort {
        rtt: Duration::from_millis(2),
        ..FakePort::default()
    };
    let mut congested = PortProber::new(local.clone(), slow, PeerSettings::default(), 7);
    congested.stats = prober.stats.clone();
    for _ in 0..3 {
        congested.round(&peers, &mut || {});
    }
    let f = findings(PeerResults {
        ports: vec![(local, congested.stats.clone())],
        ..PeerResults::default()
    });
    assert_eq!(rules_of(&f), ["peer_probe_rtt_above_baseline"]);
}

#[test]
fn families_are_per_port_and_per_peer_bounded() {
    let r = run(20, |_, p| {
        p.dead.insert("peer2".into());
    });
    let s = Snapshot {
        sequence: 1,
        peer_probes: Some(r),
        ..Snapshot::default()
    };
    let text = exposition::encode(
        Arc::new(s),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    );
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
    let mut prober = PortProber::new(local.clone(), port, PeerSettings::default(), 7);
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
        peers_configured: 1000,
        peers_fetched: 1000,
        fetch_errors: Default::default(),
    };
    let s = Snapshot {
        sequence: 1,
        peer_probes: Some(r),
        ..Snapshot::default()
    };
    let text = exposition::encode(
        Arc::new(s),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    );
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
