use super::*;
use crate::peer::fake::FakePort;
use std::collections::BTreeSet;

fn ep(node: &str, dev_index: u32, subnet: &str, qpn: u32) -> Endpoint {
    let octet = subnet
        .split('.')
        .nth(2)
        .and_then(|s| s.parse::<u8>().ok())
        .unwrap_or(0);
    let host = node.bytes().last().unwrap_or(1);
    Endpoint {
        node: node.into(),
        device: format!("mlx5_{dev_index}"),
        device_index: dev_index,
        port: 1,
        gid: std::net::Ipv4Addr::new(10, 0, octet, host).to_ipv6_mapped(),
        gid_index: 3,
        qpn,
        qkey: QKEY,
        mtu: 4096,
        subnet: Some(subnet.into()),
        rail: None,
        incarnation: 77,
        wire: crate::peer_wire::WIRE_VERSION,
        learning: false,
    }
}

const ID: ProberId = ProberId {
    nonce: 1,
    incarnation: 5,
};

fn settings(sample: usize) -> PeerSettings {
    PeerSettings {
        sample,
        ..PeerSettings::default()
    }
}

#[test]
fn rail_rule_prefers_the_subnet_and_falls_back_to_the_device_index() {
    let a = ep("a", 0, "10.0.1.0/24", 1);
    assert!(same_rail(&a, &ep("b", 3, "10.0.1.0/24", 1), false));
    assert!(!same_rail(&a, &ep("b", 0, "10.0.2.0/24", 1), false));
    assert!(same_rail(&a, &ep("b", 0, "10.0.2.0/24", 1), true));
    let mut ib = ep("b", 0, "x", 1);
    ib.subnet = None;
    assert!(same_rail(&a, &ib, false));
    ib.device_index = 1;
    assert!(!same_rail(&a, &ib, false));
}

#[test]
fn subnet_of_a_roce_v2_gid() {
    let gid: Ipv6Addr = "::ffff:10.0.1.17".parse().unwrap();
    assert_eq!(ipv4_subnet(&gid, 24).as_deref(), Some("10.0.1.0/24"));
    let link_local: Ipv6Addr = "fe80::1".parse().unwrap();
    assert_eq!(ipv4_subnet(&link_local, 64), None);
}

#[test]
fn the_walk_covers_every_peer_with_a_bounded_sample() {
    let peers: Vec<Endpoint> = (0..10)
        .map(|i| ep(&format!("n{i}"), 0, "10.0.1.0/24", i))
        .collect();
    let none = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut cursor = 7;
    for _ in 0..4 {
        let (s, next, _) = choose(&peers, 3, cursor, &none);
        assert_eq!(s.len(), 3);
        seen.extend(s.iter().map(|e| e.node.clone()));
        cursor = next;
    }
    assert_eq!(seen.len(), 10);
    assert!(choose(&peers, 0, 1, &none).0.is_empty());
    assert!(choose(&[], 3, 1, &none).0.is_empty());
    // Fewer peers than the sample: each once.
    assert_eq!(choose(&peers[..2], 8, 5, &none).0.len(), 2);
}

#[test]
fn spacing_bounds_the_rate_and_jitters() {
    assert_eq!(spacing(5.0, 0.5), Duration::from_millis(200));
    assert!(spacing(1e9, 0.5) >= Duration::from_millis(20));
    assert!(spacing(f64::NAN, 0.5) == Duration::from_millis(200));
    assert!(spacing(5.0, 0.0) < spacing(5.0, 0.99));
}

#[test]
fn flow_labels_vary_and_are_never_zero() {
    let labels: BTreeSet<u32> = (0..16).map(|n| flow_label(3, n, 16)).collect();
    assert_eq!(labels.len(), 16);
    assert!(labels.iter().all(|l| *l != 0 && *l <= 0xF_FFFF));
    let four: BTreeSet<u32> = (0..64).map(|n| flow_label(3, n, 4)).collect();
    assert_eq!(four.len(), 4);
}

#[test]
fn each_pair_walks_its_own_flow_labels_whatever_the_number_of_peers() {
    // 1,000 peers, a sample of 8: each pair is visited once every 125
    // rounds. After 16 visits of every pair, each has used 16 distinct
    // labels (a global sequence would hand each pair whatever label
    // the port's counter stood at).
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers: Vec<Endpoint> = (0..1000u32)
        .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i + 10))
        .collect();
    let mut p = PortProber::new(local, FakePort::default(), settings(8), ID);
    for _ in 0..(125 * 16) {
        p.round(&peers, &mut || {});
    }
    let mut per_pair: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for (node, probe) in &p.port.sent {
        per_pair
            .entry(node.clone())
            .or_default()
            .insert(probe.flow_label);
    }
    assert_eq!(per_pair.len(), 1000);
    assert!(per_pair.values().all(|l| l.len() == 16));
    // Pairs start their walks at different labels.
    let firsts: BTreeSet<u32> = p
        .port
        .sent
        .iter()
        .take(200)
        .map(|(_, pr)| pr.flow_label)
        .collect();
    assert!(firsts.len() > 8, "{firsts:?}");
}

#[test]
fn endpoints_document_round_trips_and_rejects_garbage() {
    let doc = Endpoints {
        version: ENDPOINTS_VERSION,
        endpoints: vec![ep("a", 0, "10.0.1.0/24", 17)],
    };
    let json = serde_json::to_vec(&doc).unwrap();
    assert_eq!(parse_endpoints(&json).unwrap(), doc.endpoints);
    assert!(parse_endpoints(b"{").is_err());
    assert_eq!(
        parse_endpoints(br#"{"version":4,"endpoints":[]}"#),
        Err(DocumentError::Version(4))
    );
    // A version 1 document (no incarnation, no wire version) is read with
    // incarnation 0 and wire version 1 (admission refuses it as such).
    let v1 = br#"{"version":1,"endpoints":[{"node":"a","device":"mlx5_0","device_index":0,"port":1,"gid":"::ffff:10.0.1.2","gid_index":3,"qpn":17,"qkey":1380994353,"mtu":4096}]}"#;
    let old = &parse_endpoints(v1).unwrap()[0];
    assert_eq!((old.incarnation, old.wire, old.learning), (0, 1, false));
    // This version's document says its wire version, and "learning" only
    // while it is true.
    let text = String::from_utf8(json).unwrap();
    assert!(
        text.contains(r#""wire":2"#) && !text.contains("learning"),
        "{text}"
    );
    // Every endpoint of a long document comes back: admission judges the
    // count (too_many), not a truncation.
    let many = Endpoints {
        version: ENDPOINTS_VERSION,
        endpoints: (0..100u32)
            .map(|i| ep("a", 0, "10.0.1.0/24", 17 + i))
            .collect(),
    };
    assert_eq!(
        parse_endpoints(&serde_json::to_vec(&many).unwrap())
            .unwrap()
            .len(),
        100
    );
}

#[test]
fn healthy_peers_answer_small_and_large_probes() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers = vec![
        ep("b", 0, "10.0.1.0/24", 11),
        ep("c", 0, "10.0.1.0/24", 12),
        ep("other-rail", 1, "10.0.2.0/24", 13),
    ];
    let port = FakePort {
        rtt: Duration::from_micros(20),
        ..FakePort::default()
    };
    let mut p = PortProber::new(local, port, settings(4), ID);
    p.round(&peers, &mut || {});
    assert_eq!(p.stats.peers_known, 2, "the other rail is not probed");
    assert_eq!(
        p.stats.small,
        Sent {
            sent: 2,
            answered: 2
        }
    );
    assert_eq!(
        p.stats.large,
        Sent {
            sent: 2,
            answered: 2
        }
    );
    assert_eq!(p.stats.rtt.count, 4);
    let sizes: BTreeSet<u32> = p.port.sent.iter().map(|(_, pr)| pr.size).collect();
    assert_eq!(
        sizes,
        BTreeSet::from([64, 4096]),
        "the large probe fills the MTU"
    );
    assert!(p.port.sent.iter().all(|(n, _)| n != "other-rail"));
    let labels: BTreeSet<u32> = p.port.sent.iter().map(|(_, pr)| pr.flow_label).collect();
    assert!(labels.len() >= 2, "flows vary: {labels:?}");
}

#[test]
fn path_mtu_shows_as_large_lost_small_answered() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers = vec![ep("b", 0, "10.0.1.0/24", 11)];
    let mut port = FakePort::default();
    port.mtu_limit.insert("b".into(), 1024);
    let mut p = PortProber::new(local, port, settings(4), ID);
    for _ in 0..3 {
        p.round(&peers, &mut || {});
    }
    let pair = &p.stats.peers[&peers[0].key()];
    assert_eq!(pair.small.lost(), 0);
    assert_eq!(pair.large.lost(), 3);
    assert_eq!(pair.last_large_ok, Some(false));
    assert_eq!(pair.last_small_ok, Some(true));
}

#[test]
fn strangers_are_dropped_and_counted_not_answered() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let port = FakePort {
        strangers: 3,
        ..FakePort::default()
    };
    let mut p = PortProber::new(local, port, settings(4), ID);
    p.round(&[ep("b", 0, "10.0.1.0/24", 11)], &mut || {});
    p.serve();
    // Never answered: not one of this port's peers.
    assert_eq!(
        p.stats
            .served
            .refused(crate::peer_admit::DatagramRefusal::NotAdmitted),
        3
    );
    assert_eq!((p.stats.served.answered, p.stats.served.challenged), (0, 0));
}

#[test]
fn per_peer_state_stays_bounded_with_a_thousand_peers() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers: Vec<Endpoint> = (0..1000u32)
        .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i))
        .collect();
    let mut port = FakePort::default();
    for i in (0..1000).step_by(50) {
        port.dead.insert(format!("n{i:04}"));
    }
    let mut p = PortProber::new(local, port, settings(8), ID);
    for _ in 0..200 {
        p.round(&peers, &mut || {});
        assert!(p.stats.peers.len() <= 8 + TOP_FAILING);
    }
    assert_eq!(p.stats.peers_known, 1000);
    // The kept non-sampled peers are failing ones.
    assert!(p
        .stats
        .peers
        .values()
        .filter(|s| s.rounds_since_sampled > 0)
        .all(|s| s.small.lost() > 0));
}

#[test]
fn a_lost_peer_is_probed_again_ahead_of_the_walk_until_judged() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers: Vec<Endpoint> = (0..1000u32)
        .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i + 10))
        .collect();
    let mut port = FakePort::default();
    port.dead.insert("n0003".into());
    let id = ProberId {
        nonce: 0,
        incarnation: 5,
    };
    let mut p = PortProber::new(local, port, settings(8), id);
    p.round(&peers, &mut || {});
    let key = peers[3].key();
    assert_eq!(p.stats.peers[&key].recent_small.len(), 1);
    // The next rounds visit it first, until its last probes were all
    // lost: judged in SUSPECT_PROBES rounds, not after a walk of 125.
    for _ in 1..SUSPECT_PROBES {
        p.round(&peers, &mut || {});
    }
    let pair = &p.stats.peers[&key];
    assert_eq!(pair.recent_small.len(), u32::from(SUSPECT_PROBES));
    assert!(pair.recent_small.last_all_lost(u32::from(SUSPECT_PROBES)));
    assert_eq!(pair.suspect_rounds, 0, "judged: back to the walk");
    p.round(&peers, &mut || {});
    assert_eq!(
        p.stats.peers[&key].recent_small.len(),
        4,
        "not probed again at once"
    );
    // The walk went on meanwhile: 5 rounds of 8, less the re-probes.
    let distinct: BTreeSet<&String> = p.port.sent.iter().map(|(n, _)| n).collect();
    assert!(distinct.len() >= 5 * 8 - 4, "{}", distinct.len());
}

#[test]
fn each_node_starts_its_walk_at_its_own_place() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers: Vec<Endpoint> = (0..1000u32)
        .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i + 10))
        .collect();
    let first = |nonce: u32| {
        let id = ProberId {
            nonce,
            incarnation: 1,
        };
        let mut p = PortProber::new(local.clone(), FakePort::default(), settings(8), id);
        p.round(&peers, &mut || {});
        p.port.sent[0].0.clone()
    };
    let starts: BTreeSet<String> = [0x1234_5678, 0x9abc_def0, 17, 400_001]
        .into_iter()
        .map(first)
        .collect();
    assert_eq!(starts.len(), 4, "{starts:?}");
}

#[test]
fn a_peer_still_learning_its_peers_is_pending_until_it_answers_then_lost() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let mut b = ep("b", 0, "10.0.1.0/24", 11);
    b.learning = true;
    let peers = vec![b.clone()];
    let mut port = FakePort::default();
    // It does not know this node yet: nothing comes back.
    port.dead.insert("b".into());
    let mut p = PortProber::new(local, port, settings(4), ID);
    for _ in 0..5 {
        p.round(&peers, &mut || {});
    }
    let pair = &p.stats.peers[&peers[0].key()];
    // Pending small probes, no large one after a silent small one.
    assert_eq!(
        (pair.pending, pair.small.sent, pair.small.lost()),
        (5, 0, 0)
    );
    assert!(pair.recent_small.is_empty() && pair.last_pending);
    assert_eq!(pair.suspect_rounds, 0);
    assert_eq!(p.stats.pending, 5);
    // Once it knows this node, it is answered.
    p.port.dead.clear();
    p.round(&peers, &mut || {});
    let pair = &p.stats.peers[&peers[0].key()];
    assert_eq!(pair.small.answered, 1);
    assert!(!pair.last_pending);
    assert_eq!(pair.answered_by, Some(77));
    // Silent again while still "learning": it answered this incarnation
    // once, so its silence is loss now.
    p.port.dead.insert("b".into());
    p.round(&peers, &mut || {});
    let pair = &p.stats.peers[&peers[0].key()];
    assert_eq!((pair.pending, pair.small.lost()), (5, 1));
}

#[test]
fn a_port_that_reaches_nobody_probes_two_suspects_until_they_are_judged() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers: Vec<Endpoint> = (0..1000u32)
        .map(|i| ep(&format!("n{i:04}"), 0, "10.0.1.0/24", i + 10))
        .collect();
    let mut port = FakePort::default();
    for p in &peers {
        port.dead.insert(p.node.clone());
    }
    let mut p = PortProber::new(local, port, settings(8), ID);
    p.round(&peers, &mut || {});
    // 8 small probes, no large one after a lost small one.
    assert_eq!(p.port.sent.len(), 8);
    for _ in 1..SUSPECT_PROBES {
        p.round(&peers, &mut || {});
    }
    // Then two suspects a round: judged after 3 more rounds of 2 probes.
    assert_eq!(p.port.sent.len(), 8 + 2 * 3);
    let judged: Vec<&PairStats> = p
        .stats
        .peers
        .values()
        .filter(|s| s.recent_small.last_all_lost(u32::from(SUSPECT_PROBES)))
        .collect();
    assert_eq!(judged.len(), 2);
    // One answer ends the focus: the walk goes on.
    p.port.dead.clear();
    p.round(&peers, &mut || {});
    p.round(&peers, &mut || {});
    assert!(p.port.sent.len() >= 8 + 6 + 2 + 8, "{}", p.port.sent.len());
}

#[test]
fn a_neighbour_that_never_resolves_is_lost_and_said_so() {
    let local = ep("me", 0, "10.0.1.0/24", 7);
    let peers = vec![ep("b", 0, "10.0.1.0/24", 11)];
    let mut port = FakePort::default();
    port.unresolved.insert("b".into());
    let mut p = PortProber::new(local, port, settings(4), ID);
    p.round(&peers, &mut || {});
    let pair = &p.stats.peers[&peers[0].key()];
    // The large probe is not sent after the small one found no way.
    assert_eq!(
        (pair.small.lost(), pair.large.sent, pair.unresolved),
        (1, 0, 1)
    );
    assert!(pair.errors.is_empty(), "a loss, not a send failure");
}

#[test]
fn a_restarted_peer_with_a_new_qpn_keeps_its_identity() {
    let a = ep("b", 0, "10.0.1.0/24", 11);
    let b = ep("b", 0, "10.0.1.0/24", 99);
    assert_eq!(a.key(), b.key());
}

#[test]
fn baseline_is_a_low_percentile_of_round_medians_not_the_fastest_answer() {
    let mut s = PortStats::default();
    // Rounds of answers between 10 and 50 ms with one 0.5 ms answer
    // each (a loaded VM): the old low-RTT tracker settled near 0.5 ms.
    for _ in 0..40 {
        end_round(&mut s, &mut [0.5e-3, 10e-3, 20e-3, 30e-3, 40e-3, 50e-3]);
    }
    let (b, r) = (s.baseline_seconds.unwrap(), s.recent_seconds.unwrap());
    assert_eq!(b, 30e-3);
    assert_eq!(r, 30e-3);
    // A round without answers changes nothing.
    end_round(&mut s, &mut []);
    assert_eq!(s.round_medians.len(), 40);
    // The history is bounded.
    for _ in 0..BASELINE_ROUNDS {
        end_round(&mut s, &mut [1e-3]);
    }
    assert_eq!(s.round_medians.len(), BASELINE_ROUNDS);
}
