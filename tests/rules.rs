//! Every rule: a snapshot sequence that fires it (exact finding, evidence and
//! severity) and sequences that must not (healthy values, counter reset,
//! missing inputs, first sample).

use std::net::Ipv6Addr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use roce_exporter::config::{Config, Expectations, RulesConfig};
use roce_exporter::rules::{self, Engine, Finding, Severity};
use roce_exporter::snapshot::{Snapshot, SourceState, SourceStatus};
use roce_rdma::{
    Counter, Device, Gid, GidType, LinkLayer, PhysState, Port, PortState, RdmaSnapshot,
};

fn gid(index: u32, text: &str, gid_type: GidType) -> Gid {
    Gid {
        index,
        gid: text.parse::<Ipv6Addr>().unwrap(),
        gid_type,
        netdev: Some("ens1np0".into()),
    }
}

fn roce_port() -> Port {
    Port {
        number: 1,
        state: Some(PortState::Active),
        phys_state: Some(PhysState::LinkUp),
        rate_bytes_per_second: Some(50_000_000_000),
        link_layer: Some(LinkLayer::Ethernet),
        lid: Some(0),
        netdev: Some("ens1np0".into()),
        gids: vec![
            gid(0, "fe80::1", GidType::IbRoceV1),
            gid(1, "fe80::1", GidType::RoceV2),
            gid(2, "::ffff:10.0.0.1", GidType::IbRoceV1),
            gid(3, "::ffff:10.0.0.1", GidType::RoceV2),
        ],
        ..Port::default()
    }
}

fn mlx5(port: Port) -> Device {
    Device {
        name: "mlx5_0".into(),
        driver: Some("mlx5_core".into()),
        ports: vec![port],
        ..Device::default()
    }
}

/// Snapshots 10 s apart, one per port state given.
fn history(ports: Vec<Port>) -> Vec<Arc<Snapshot>> {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    ports
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            Arc::new(Snapshot {
                sequence: i as u64 + 1,
                taken_at: Some(t0 + Duration::from_secs(10 * i as u64)),
                rdma: Some(RdmaSnapshot {
                    devices: vec![mlx5(p)],
                    errors: vec![],
                }),
                ..Snapshot::default()
            })
        })
        .collect()
}

fn with_counter(mut p: Port, name: &str, value: u64) -> Port {
    p.counters.push(Counter {
        name: name.into(),
        value,
    });
    p
}

fn with_hw(mut p: Port, name: &str, value: u64) -> Port {
    p.hw_counters.push(Counter {
        name: name.into(),
        value,
    });
    p
}

fn run(h: &[Arc<Snapshot>]) -> Vec<Finding> {
    rules::evaluate(h, &RulesConfig::default(), &Expectations::default())
}

fn only(findings: Vec<Finding>, rule: &str) -> Vec<Finding> {
    findings.into_iter().filter(|f| f.rule == rule).collect()
}

#[test]
fn a_healthy_port_has_no_finding() {
    let h = history(vec![roce_port(), roce_port()]);
    assert_eq!(run(&h), vec![]);
}

#[test]
fn no_snapshot_and_no_rdma_are_silent() {
    assert_eq!(run(&[]), vec![]);
    let empty = vec![Arc::new(Snapshot {
        sequence: 1,
        ..Snapshot::default()
    })];
    assert_eq!(run(&empty), vec![]);
}

#[test]
fn port_down() {
    let mut p = roce_port();
    p.state = Some(PortState::Down);
    p.phys_state = Some(PhysState::Polling);
    let f = only(run(&history(vec![p])), "port_down");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0) is down (DOWN, Polling)"
    );
    assert_eq!(
        f[0].evidence,
        "state 1: DOWN, phys_state 2: Polling; expected 4: ACTIVE, 5: LinkUp"
    );
    assert_eq!(f[0].verify, "cat /sys/class/infiniband/mlx5_0/ports/1/state /sys/class/infiniband/mlx5_0/ports/1/phys_state");
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_0"));
    assert_eq!(f[0].subject.port, Some(1));
}

#[test]
fn port_down_without_subnet_manager_on_infiniband() {
    let mut p = roce_port();
    p.link_layer = Some(LinkLayer::InfiniBand);
    p.state = Some(PortState::Init);
    p.netdev = None;
    let f = only(run(&history(vec![p])), "port_down");
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 has a physical link but is INIT: no subnet manager has configured it"
    );
    assert!(f[0].fix.contains("opensm"));
}

#[test]
fn port_state_unknown_is_silent() {
    let mut p = roce_port();
    p.state = None;
    assert_eq!(only(run(&history(vec![p])), "port_down"), vec![]);
}

#[test]
fn link_rate_below_expected() {
    let h = history(vec![roce_port()]);
    let expect = |gbps| Expectations {
        link_rate_gbps: Some(gbps),
        ..Expectations::default()
    };
    let f = only(
        rules::evaluate(&h, &RulesConfig::default(), &expect(800.0)),
        "link_rate_below_expected",
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0) runs at 400 Gb/s, below the expected 800 Gb/s"
    );
    assert_eq!(
        f[0].evidence,
        "rate 400 Gb/s; expected 800 Gb/s (expect.link_rate_gbps)"
    );
    assert_eq!(f[0].verify, "cat /sys/class/infiniband/mlx5_0/ports/1/rate");
    // At the expected rate, without an expectation, or on a down port: silent.
    assert_eq!(
        only(
            rules::evaluate(&h, &RulesConfig::default(), &expect(400.0)),
            "link_rate_below_expected"
        ),
        vec![]
    );
    assert_eq!(only(run(&h), "link_rate_below_expected"), vec![]);
    let mut down = roce_port();
    down.state = Some(PortState::Down);
    let h = history(vec![down]);
    assert_eq!(
        only(
            rules::evaluate(&h, &RulesConfig::default(), &expect(800.0)),
            "link_rate_below_expected"
        ),
        vec![]
    );
}

#[test]
fn rocev2_gid_missing_with_only_v1() {
    let mut p = roce_port();
    p.gids.retain(|g| g.gid_type == GidType::IbRoceV1);
    let f = only(run(&history(vec![p])), "rocev2_gid_missing");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0) has only RoCE v1 GIDs: RoCEv2 (routable, what NCCL uses) is not possible"
    );
    assert_eq!(
        f[0].evidence,
        "2 populated GIDs: 2 RoCE v1, 0 RoCE v2; expected at least one RoCE v2 GID"
    );
}

#[test]
fn rocev2_gid_missing_with_no_gid() {
    let mut p = roce_port();
    p.gids.clear();
    let f = only(run(&history(vec![p])), "rocev2_gid_missing");
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0) has no GID at all: RDMA connections cannot be addressed"
    );
    assert!(f[0].fix.starts_with("Give ens1np0 an IPv4 or IPv6 address"));
}

#[test]
fn gid_rules_ignore_infiniband_and_down_ports() {
    let mut ib = roce_port();
    ib.link_layer = Some(LinkLayer::InfiniBand);
    ib.gids.clear();
    let mut down = roce_port();
    down.state = Some(PortState::Down);
    down.gids.clear();
    for p in [ib, down] {
        let f = run(&history(vec![p]));
        assert!(f.iter().all(|f| !f.rule.starts_with("rocev2_gid")), "{f:?}");
    }
}

#[test]
fn rocev2_gid_link_local_only() {
    let mut p = roce_port();
    p.gids.retain(|g| g.gid.segments()[0] == 0xfe80);
    let f = only(run(&history(vec![p])), "rocev2_gid_link_local_only");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0) has only link-local RoCE v2 GIDs: traffic cannot be routed beyond the local subnet"
    );
    assert_eq!(
        f[0].evidence,
        "RoCE v2 GIDs at index 1: all fe80::/10; expected an IPv4-mapped or global GID"
    );
    // A global IPv6 RoCE v2 GID is routable.
    let mut p = roce_port();
    p.gids = vec![
        gid(1, "fe80::1", GidType::RoceV2),
        gid(2, "2001:db8::1", GidType::RoceV2),
    ];
    assert_eq!(
        only(run(&history(vec![p])), "rocev2_gid_link_local_only"),
        vec![]
    );
}

#[test]
fn link_flap_fires_on_increment_and_not_on_first_sample_or_reset() {
    let p = |v| with_counter(roce_port(), "link_downed", v);
    let f = only(run(&history(vec![p(3), p(3), p(5)])), "link_flap");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0) went down 2 time(s) in the last 20s"
    );
    assert_eq!(f[0].evidence, "link_downed +2 over 20s; expected 0");
    assert_eq!(
        only(run(&history(vec![p(3)])), "link_flap"),
        vec![],
        "first sample"
    );
    assert_eq!(
        only(run(&history(vec![p(3), p(3)])), "link_flap"),
        vec![],
        "steady"
    );
    assert_eq!(
        only(run(&history(vec![p(7), p(0), p(0)])), "link_flap"),
        vec![],
        "driver reload resets to 0"
    );
    // rxe counts link_downed among its hw counters.
    let rxe = |v| with_hw(roce_port(), "link_downed", v);
    assert_eq!(
        only(run(&history(vec![rxe(0), rxe(1)])), "link_flap").len(),
        1
    );
}

#[test]
fn symbol_errors_above_ber() {
    // 400 Gb/s for 10 s = 4e12 bits; 100 errors = BER 2.5e-11 > 1e-12.
    let p = |v| with_counter(roce_port(), "symbol_error", v);
    let f = only(run(&history(vec![p(0), p(100)])), "symbol_errors");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0) has a bit error rate of 2.5e-11, above 1e-12"
    );
    assert_eq!(
        f[0].evidence,
        "symbol_error +100 over 10s at 400 Gb/s = BER 2.50e-11; expected <= 1e-12"
    );
    // 3 errors = 7.5e-13: below the limit.
    assert_eq!(
        only(run(&history(vec![p(0), p(3)])), "symbol_errors"),
        vec![]
    );
    assert_eq!(
        only(run(&history(vec![p(500), p(2)])), "symbol_errors"),
        vec![],
        "reset"
    );
    let mut no_rate = p(100);
    no_rate.rate_bytes_per_second = None;
    assert_eq!(
        only(run(&history(vec![p(0), no_rate])), "symbol_errors"),
        vec![],
        "no rate, no BER"
    );
}

#[test]
fn retransmissions_from_mlx5_ack_timeouts() {
    let p = |v| with_hw(roce_port(), "local_ack_timeout_err", v);
    let f = only(run(&history(vec![p(0), p(1000)])), "retransmissions");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): transport retransmissions at 100/s, above 10/s"
    );
    assert_eq!(
        f[0].evidence,
        "+1000 over 10s = 100/s; expected <= 10/s (rules.retransmissions.per_second)"
    );
    assert_eq!(
        f[0].verify,
        "rdma statistic show link mlx5_0/1  # twice, a few seconds apart"
    );
    assert_eq!(
        only(run(&history(vec![p(0), p(50)])), "retransmissions"),
        vec![],
        "5/s is below 10/s"
    );
    assert_eq!(
        only(run(&history(vec![p(5000), p(0)])), "retransmissions"),
        vec![],
        "reset"
    );
}

#[test]
fn sequence_errors_sum_the_meanings() {
    let p = |a, b| {
        with_hw(
            with_hw(roce_port(), "out_of_sequence", a),
            "packet_seq_err",
            b,
        )
    };
    let f = only(run(&history(vec![p(0, 0), p(100, 50)])), "sequence_errors");
    assert_eq!(
        f[0].evidence,
        "+150 over 10s = 15/s; expected <= 10/s (rules.sequence_errors.per_second)"
    );
}

#[test]
fn out_of_buffer_and_congestion_spikes() {
    let p = |v| with_hw(roce_port(), "out_of_buffer", v);
    let f = only(run(&history(vec![p(0), p(20)])), "out_of_buffer");
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): receive drops for lack of posted buffers at 2/s, above 1/s"
    );
    let cnp = |v| with_hw(with_hw(roce_port(), "np_cnp_sent", v), "rp_cnp_handled", v);
    let f = only(run(&history(vec![cnp(0), cnp(100_000)])), "cnp_spike");
    assert_eq!(
        f[0].evidence,
        "+200000 over 10s = 20000/s; expected <= 10000/s (rules.cnp_spike.per_second)"
    );
    let ecn = |v| with_hw(roce_port(), "np_ecn_marked_roce_packets", v);
    assert_eq!(
        only(run(&history(vec![ecn(0), ecn(200_000)])), "ecn_spike").len(),
        1
    );
    assert_eq!(
        only(run(&history(vec![ecn(0), ecn(1000)])), "ecn_spike"),
        vec![]
    );
}

#[test]
fn unknown_driver_counters_have_no_meaning() {
    let mut d = mlx5(with_hw(roce_port(), "out_of_buffer", 0));
    d.name = "foo0".into();
    d.driver = Some("foo".into());
    let mut d2 = d.clone();
    d2.ports[0].hw_counters[0].value = 1_000_000;
    let t0 = SystemTime::UNIX_EPOCH;
    let h: Vec<Arc<Snapshot>> = [d, d2]
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            Arc::new(Snapshot {
                taken_at: Some(t0 + Duration::from_secs(10 * i as u64)),
                rdma: Some(RdmaSnapshot {
                    devices: vec![d],
                    errors: vec![],
                }),
                ..Snapshot::default()
            })
        })
        .collect();
    assert_eq!(run(&h), vec![]);
}

#[test]
fn collector_failing() {
    let mut s = Snapshot {
        sequence: 1,
        ..Snapshot::default()
    };
    s.sources.push(SourceStatus {
        name: "netdev",
        state: SourceState::Failed("netlink socket: Permission denied".into()),
        duration: Duration::ZERO,
        errors: vec![],
        errors_total: 0,
    });
    s.sources.push(SourceStatus {
        name: "rdma",
        state: SourceState::Ok,
        duration: Duration::ZERO,
        errors: vec![],
        errors_total: 0,
    });
    let f = run(&[Arc::new(s)]);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].rule, "collector_failing");
    assert_eq!(
        f[0].finding,
        "The netdev collector failed: its metrics are missing"
    );
    assert_eq!(
        f[0].evidence,
        "roce_collector_success{collector=\"netdev\"} 0: netlink socket: Permission denied"
    );
}

#[test]
fn disabled_rules_do_not_run() {
    let mut p = roce_port();
    p.state = Some(PortState::Down);
    let h = history(vec![p]);
    let cfg = RulesConfig {
        disabled: vec!["port_down".into()],
        ..RulesConfig::default()
    };
    assert_eq!(
        only(
            rules::evaluate(&h, &cfg, &Expectations::default()),
            "port_down"
        ),
        vec![]
    );
    assert!(Config::parse("rules: {disabled: [no_such_rule]}\n", "t").is_err());
    assert!(Config::parse(
        "rules: {disabled: [port_down], link_flap: {window: 1m}}\n",
        "t"
    )
    .is_ok());
}

#[test]
fn findings_are_held_until_the_condition_stays_false() {
    // 10 s between samples, hold 25 s: a finding true at t=10 stays through
    // t=30 and is gone at t=40.
    let cfg = RulesConfig {
        hold: Duration::from_secs(25),
        ..RulesConfig::default()
    };
    let up = roce_port();
    let mut down = roce_port();
    down.state = Some(PortState::Down);
    let h = history(vec![up.clone(), down, up.clone(), up.clone(), up]);
    let mut engine = Engine::new();
    let active: Vec<usize> = (1..=h.len())
        .map(|n| {
            engine
                .evaluate(&h[..n], &cfg, &Expectations::default())
                .len()
        })
        .collect();
    assert_eq!(active, vec![0, 1, 1, 1, 0]);
}

#[test]
fn rdma_device_missing_only_when_the_source_ran_empty() {
    let status = |state| SourceStatus {
        name: "rdma",
        state,
        duration: Duration::ZERO,
        errors: vec![],
        errors_total: 0,
    };
    let mut s = Snapshot {
        sequence: 1,
        rdma: Some(RdmaSnapshot::default()),
        ..Snapshot::default()
    };
    s.sources.push(status(SourceState::Unavailable(
        "no RDMA device in /sys/class/infiniband".into(),
    )));
    let f = run(&[Arc::new(s.clone())]);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].rule, "rdma_device_missing");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "No RDMA device on this host: NCCL falls back to NET/Socket (TCP)"
    );
    s.sources[0] = status(SourceState::Disabled("off".into()));
    assert_eq!(run(&[Arc::new(s)]), vec![]);
}
