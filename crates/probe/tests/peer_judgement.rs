//! How fast faults are judged with 1,000 peers at the default rate, on a
//! virtual clock: each probe costs what the runner spends on it (the
//! spacing of 5 probes/s when answered, the 500 ms timeout when lost), so
//! the figures are the prober's own schedule, whatever the machine.
//!
//! - A dead peer: every other node of a 1,000-node rail probes it from its
//!   own random place in the walk. The fleet names a node once at least two
//!   probers report it and more than half of those reporting it lost at
//!   least two of their last probes (the fleet rules' default votes); a
//!   single prober judges it once its last 4 small probes were lost.
//! - A black-holed local port: every probe of one node is lost; the node
//!   judges its port isolated once two peers were judged (4 probes each,
//!   all lost).
//!
//! `cargo test -p roce-probe --release --test peer_judgement -- --nocapture`
//! prints the figures that docs/peer-probes.md states.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use roce_probe::peer::{
    spacing, Endpoint, PeerPort, PeerSettings, PortProber, Probe, ProbeOutcome, ProberId,
    Responder, Served, DEFAULT_PACKETS_PER_SECOND, QKEY,
};

const NODES: u32 = 1000;
/// What the fleet rules need (alerts/generate.py `peer_loss_min`,
/// `peer_min_witnesses`) and the exporter's own rules (`MIN_OUTCOMES`).
const LOSS_MIN: u32 = 2;
const WITNESSES: usize = 2;
const JUDGED: u32 = 4;

fn ep(i: u32) -> Endpoint {
    Endpoint {
        node: format!("node{i:04}"),
        device: "mlx5_0".into(),
        device_index: 0,
        port: 1,
        gid: Ipv4Addr::new(10, 0, (i / 250) as u8, (i % 250) as u8 + 2).to_ipv6_mapped(),
        gid_index: 3,
        qpn: 100 + i,
        qkey: QKEY,
        mtu: 4096,
        subnet: Some("10.0.0.0/16".into()),
        rail: None,
        incarnation: u64::from(i) + 1,
        wire: roce_probe::peer_wire::WIRE_VERSION,
        learning: false,
    }
}

/// A port whose probes to `dead` nodes (or to everyone, when `isolated`)
/// are lost; the virtual clock advances by what each probe costs.
struct SimPort {
    dead: Option<String>,
    isolated: bool,
    timeout: f64,
    clock: Arc<Mutex<f64>>,
}

impl PeerPort for SimPort {
    fn local(&self) -> (Ipv6Addr, u32, u32) {
        (Ipv6Addr::LOCALHOST, 1, 4096)
    }
    fn ping(
        &mut self,
        to: &Endpoint,
        _probe: &Probe,
        _timeout: Duration,
        _responder: &mut Responder,
        _served: &mut Served,
    ) -> ProbeOutcome {
        let lost = self.isolated || self.dead.as_deref() == Some(to.node.as_str());
        let mut clock = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        if lost {
            *clock += self.timeout;
            ProbeOutcome::Lost
        } else {
            *clock += 50e-6;
            ProbeOutcome::Answered {
                rtt: Duration::from_micros(50),
                incarnation: to.incarnation,
            }
        }
    }
    fn serve(&mut self, _: &mut Responder, _: &mut Served) {}
}

/// One prober's view of `peer` over time: (virtual seconds, lost of the
/// last small probes, outcomes held), after each of its rounds.
type Track = Vec<(f64, u32, u32)>;

/// Runs `node`'s prober over the rail until `horizon` virtual seconds;
/// calls `each` after every round with the time and the prober.
fn run(
    node: u32,
    port: SimPort,
    peers: &[Endpoint],
    horizon: f64,
    mut each: impl FnMut(f64, &PortProber<SimPort>),
) {
    let clock = Arc::clone(&port.clock);
    let settings = PeerSettings::default();
    let pps = settings.packets_per_second;
    let id = ProberId {
        // A random start per node, as the runner's seed gives.
        nonce: (u64::from(node)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(17)
            >> 32) as u32,
        incarnation: 1,
    };
    let mut prober = PortProber::new(ep(node), port, settings, id);
    loop {
        let mut mark = *clock.lock().unwrap_or_else(|e| e.into_inner());
        prober.round_with(peers, &mut || {
            // The runner waits what is left of the spacing after a probe.
            let mut c = clock.lock().unwrap_or_else(|e| e.into_inner());
            let gap = (spacing(pps, 0.5).as_secs_f64() - (*c - mark)).max(0.0);
            *c += gap;
            mark = *c;
            Some(Duration::ZERO)
        });
        let now = *clock.lock().unwrap_or_else(|e| e.into_inner());
        each(now, &prober);
        if now >= horizon {
            return;
        }
    }
}

/// When the fleet names the dead node, and when the first single prober
/// judges it (virtual seconds).
fn dead_peer(horizon: f64) -> (Option<f64>, Option<f64>) {
    let all: Vec<Endpoint> = (0..NODES).map(ep).collect();
    let dead = all[NODES as usize / 2].clone();
    let mut tracks: Vec<Track> = Vec::new();
    for node in 0..NODES {
        if node == NODES / 2 {
            continue;
        }
        let peers = others(&all, node);
        let port = SimPort {
            dead: Some(dead.node.clone()),
            isolated: false,
            timeout: PeerSettings::default().timeout.as_secs_f64(),
            clock: Arc::new(Mutex::new(0.0)),
        };
        let mut track = Track::new();
        run(node, port, &peers, horizon, |t, p| {
            if let Some(s) = p.stats.peers.get(&dead.key()) {
                track.push((t, s.recent_small.lost(), s.recent_small.len()));
            }
        });
        tracks.push(track);
    }
    // Step through time: who reports the dead node, who lost enough.
    let mut events: Vec<f64> = tracks.iter().flatten().map(|(t, _, _)| *t).collect();
    events.sort_by(f64::total_cmp);
    let state_at = |track: &Track, t: f64| track.iter().rev().find(|(at, _, _)| *at <= t).copied();
    let mut fleet = None;
    let mut single = None;
    for t in events {
        let states: Vec<(f64, u32, u32)> = tracks.iter().filter_map(|tr| state_at(tr, t)).collect();
        let losing = states
            .iter()
            .filter(|(_, lost, _)| *lost >= LOSS_MIN)
            .count();
        if single.is_none()
            && states
                .iter()
                .any(|(_, lost, len)| *len >= JUDGED && lost == len)
        {
            single = Some(t);
        }
        if fleet.is_none() && losing >= WITNESSES && 2 * losing > states.len() {
            fleet = Some(t);
        }
        if fleet.is_some() && single.is_some() {
            break;
        }
    }
    (fleet, single)
}

/// When a node whose port loses everything judges it isolated.
fn black_holed_port(horizon: f64) -> Option<f64> {
    let all: Vec<Endpoint> = (0..NODES).map(ep).collect();
    let peers: Vec<Endpoint> = all[1..].to_vec();
    let port = SimPort {
        dead: None,
        isolated: true,
        timeout: PeerSettings::default().timeout.as_secs_f64(),
        clock: Arc::new(Mutex::new(0.0)),
    };
    let mut judged_at = None;
    run(0, port, &peers, horizon, |t, p| {
        let judged: Vec<_> = p
            .stats
            .peers
            .values()
            .filter(|s| s.recent_small.len() >= JUDGED)
            .collect();
        if judged_at.is_none()
            && judged.len() >= 2
            && judged.iter().all(|s| s.recent_small.answered() == 0)
        {
            judged_at = Some(t);
        }
    });
    judged_at
}

/// Every endpoint of `all` but those of `node`.
fn others(all: &[Endpoint], node: u32) -> Vec<Endpoint> {
    all.iter()
        .filter(|e| e.node != ep(node).node)
        .cloned()
        .collect()
}

fn a_dead_peer_among_a_thousand_is_named_within_three_minutes() {
    // Simulated for one minute: the verdicts come well within it, and a
    // shorter horizon keeps the debug-build test short.
    let (fleet, single) = dead_peer(60.0);
    println!(
        "dead peer, 1,000 nodes, {DEFAULT_PACKETS_PER_SECOND} probes/s: fleet verdict after {:?} s, first single-prober verdict after {:?} s",
        fleet.map(|t| (t * 10.0).round() / 10.0),
        single.map(|t| (t * 10.0).round() / 10.0)
    );
    assert!(fleet.is_some_and(|t| t <= 180.0), "{fleet:?}");
    assert!(single.is_some_and(|t| t <= 180.0), "{single:?}");
}

#[test]
fn a_black_holed_port_is_judged_within_a_minute() {
    let t = black_holed_port(60.0);
    println!("black-holed port, 999 peers: isolated after {t:?} s");
    assert!(t.is_some_and(|t| t <= 60.0), "{t:?}");
}

#[test]
fn every_prober_meets_the_dead_peer_at_its_own_time() {
    // The first visits of the dead peer spread over the walk instead of
    // all probers meeting it at the same moment (one sorted order).
    let all: Vec<Endpoint> = (0..200).map(ep).collect();
    let dead = all[100].key();
    let mut firsts: BTreeMap<u64, usize> = BTreeMap::new();
    for node in 0..40u32 {
        let peers = others(&all, node);
        let port = SimPort {
            dead: Some(all[100].node.clone()),
            isolated: false,
            timeout: 0.5,
            clock: Arc::new(Mutex::new(0.0)),
        };
        let mut first = None;
        run(node, port, &peers, 200.0, |t, p| {
            if first.is_none() && p.stats.peers.contains_key(&dead) {
                first = Some(t);
            }
        });
        if let Some(t) = first {
            *firsts.entry((t / 10.0) as u64).or_default() += 1;
        }
    }
    assert!(firsts.len() >= 4, "first visits by 10 s bucket: {firsts:?}");
}

/// The slow tests of this file: run by .ci/run's full suite
/// (`cargo test --workspace --tests -- --ignored full_suite::`), not by the
/// quick `cargo test --workspace`.
mod full_suite {
    #[test]
    #[ignore = "full suite (.ci/run): a thousand peers judged over simulated minutes in a debug build"]
    fn a_dead_peer_among_a_thousand_is_named_within_three_minutes() {
        super::a_dead_peer_among_a_thousand_is_named_within_three_minutes();
    }
}
