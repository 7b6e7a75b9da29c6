//! Every rule: a snapshot sequence that fires it (exact finding, evidence and
//! severity) and sequences that must not (healthy values, counter reset,
//! missing inputs, first sample).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use roce_exporter::config::{Config, Expectations, RulesConfig};
use roce_exporter::rules::{self, Engine, Finding, Severity};
use roce_exporter::snapshot::{Snapshot, SourceState, SourceStatus};
use roce_rdma::{Counter, GidType, LinkLayer, PhysState, Port, PortState, RdmaSnapshot};
use roce_testkit::snapshot::{
    self as testkit, gid, mlx5, roce_port, NetdevBuilder, SnapshotBuilder,
};

/// Snapshots 10 s apart, one per state of mlx5_0 port 1 given.
fn history(ports: Vec<Port>) -> Vec<Arc<Snapshot>> {
    testkit::history(
        ports
            .into_iter()
            .map(|p| SnapshotBuilder::new().with_port("mlx5_0", p)),
    )
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
    let h = history(vec![roce_port(1), roce_port(1)]);
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
    let mut p = roce_port(1);
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
    let mut p = roce_port(1);
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
    let mut p = roce_port(1);
    p.state = None;
    assert_eq!(only(run(&history(vec![p])), "port_down"), vec![]);
}

#[test]
fn link_rate_below_expected() {
    let h = history(vec![roce_port(1)]);
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
    let mut down = roce_port(1);
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
    let mut p = roce_port(1);
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
    // rdma_cm's default RoCE mode adds no GID: the fix does not send the
    // operator there, and names the device.
    assert!(f[0].fix.contains("so mlx5_0 does not"), "{}", f[0].fix);
    assert!(
        f[0].fix
            .contains("only chooses among existing GIDs and adds none"),
        "{}",
        f[0].fix
    );
    assert!(!f[0].fix.contains("<netdev>"), "{}", f[0].fix);
}

/// Fixes name the port's netdev, or say which netdev they mean where the
/// port has none: never a `<netdev>` placeholder.
#[test]
fn port_fixes_name_the_netdev() {
    let mut down = roce_port(1);
    down.state = Some(PortState::Down);
    down.phys_state = Some(roce_rdma::PhysState::Polling);
    let f = only(run(&history(vec![down.clone()])), "port_down");
    assert!(f[0].fix.contains("ip link set ens1np0 up"), "{}", f[0].fix);
    down.netdev = None;
    let f = only(run(&history(vec![down])), "port_down");
    assert!(
        f[0].fix
            .contains("ip link set <the netdev of mlx5_0 port 1> up"),
        "{}",
        f[0].fix
    );
    let mut p = roce_port(1);
    p.gids.clear();
    p.netdev = None;
    let f = only(run(&history(vec![p])), "rocev2_gid_missing");
    assert!(!f[0].fix.contains("<netdev>"), "{}", f[0].fix);
    assert!(
        f[0].fix
            .starts_with("Find the netdev of mlx5_0 port 1 (rdma link show mlx5_0/1"),
        "{}",
        f[0].fix
    );
}

#[test]
fn rocev2_gid_missing_with_no_gid() {
    let mut p = roce_port(1);
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
    let mut ib = roce_port(1);
    ib.link_layer = Some(LinkLayer::InfiniBand);
    ib.gids.clear();
    let mut down = roce_port(1);
    down.state = Some(PortState::Down);
    down.gids.clear();
    for p in [ib, down] {
        let f = run(&history(vec![p]));
        assert!(
            f.iter().all(|f| !f.rule.as_str().starts_with("rocev2_gid")),
            "{f:?}"
        );
    }
}

#[test]
fn rocev2_gid_link_local_only() {
    let mut p = roce_port(1);
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
    let mut p = roce_port(1);
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
    let p = |v| with_counter(roce_port(1), "link_downed", v);
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
    let rxe = |v| with_hw(roce_port(1), "link_downed", v);
    assert_eq!(
        only(run(&history(vec![rxe(0), rxe(1)])), "link_flap").len(),
        1
    );
}

#[test]
fn symbol_errors_above_ber() {
    // 400 Gb/s for 10 s = 4e12 bits; 100 errors = BER 2.5e-11 > 1e-12.
    let p = |v| with_counter(roce_port(1), "symbol_error", v);
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
fn mlx5_ack_timeouts_are_not_counted_as_retransmissions() {
    // local_ack_timeout_err is its own rule (ack_timeouts, rules_congestion.rs).
    let p = |v| with_hw(roce_port(1), "local_ack_timeout_err", v);
    assert_eq!(
        only(run(&history(vec![p(0), p(1000)])), "retransmissions"),
        vec![]
    );
    assert_eq!(
        only(run(&history(vec![p(0), p(1000)])), "ack_timeouts").len(),
        1
    );
}

/// mlx5's RoCE accelerator counters (`roce_accl_cnts`,
/// drivers/infiniband/hw/mlx5/counters.c): `roce_adp_retrans` is its count
/// of retransmissions, judged by the retransmissions rule; the other
/// retransmission-side counters keep their own families.
#[test]
fn mlx5_adaptive_retransmissions_feed_the_retransmissions_rule() {
    // 600 adaptive retransmissions in 10 s: 60/s, above the default 10/s.
    let p = |v| with_hw(roce_port(1), "roce_adp_retrans", v);
    let f = only(run(&history(vec![p(0), p(600)])), "retransmissions");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].evidence.starts_with("+600 over 10s = 60/s"),
        "{}",
        f[0].evidence
    );
    // A healthy port: a handful over the window.
    assert_eq!(
        only(run(&history(vec![p(0), p(20)])), "retransmissions"),
        vec![]
    );
    // Slow-restart and adaptive-timeout counters are no retransmissions.
    for name in [
        "roce_adp_retrans_to",
        "roce_slow_restart",
        "roce_slow_restart_cnps",
        "roce_slow_restart_trans",
    ] {
        let p = |v| with_hw(roce_port(1), name, v);
        assert_eq!(
            only(run(&history(vec![p(0), p(10_000)])), "retransmissions"),
            vec![],
            "{name}"
        );
    }
}

#[test]
fn mlx5_rnr_nak_retry_err_is_the_rnr_naks_received_family() {
    use roce_exporter::meaning::{hw_meaning, HwMeaning, Provider};
    assert_eq!(
        hw_meaning(Some(Provider::Mlx5), "rnr_nak_retry_err"),
        Some(HwMeaning::RnrNaksReceived)
    );
    assert_eq!(
        hw_meaning(Some(Provider::Mlx5), "roce_adp_retrans"),
        Some(HwMeaning::Retransmissions)
    );
    // Slow restart has its own meaning, not a retransmission.
    assert_eq!(
        hw_meaning(Some(Provider::Mlx5), "roce_slow_restart"),
        Some(HwMeaning::SlowRestarts)
    );
    assert_eq!(hw_meaning(Some(Provider::Mlx5), "no_such_counter"), None);
}

#[test]
fn sequence_errors_sum_the_meanings() {
    let p = |a, b| {
        with_hw(
            with_hw(roce_port(1), "out_of_sequence", a),
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
fn out_of_buffer_drops() {
    let p = |v| with_hw(roce_port(1), "out_of_buffer", v);
    let f = only(run(&history(vec![p(0), p(20)])), "out_of_buffer");
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): receive drops for lack of posted buffers at 2/s, above 1/s"
    );
    // CNPs and ECN marks are judged per role against the traffic:
    // rules_congestion.rs.
}

#[test]
fn unknown_driver_counters_have_no_meaning() {
    let mut d = mlx5("mlx5_0", vec![with_hw(roce_port(1), "out_of_buffer", 0)]);
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
        errors_by_kind: Default::default(),
        kernel_requests: None,
    });
    s.sources.push(SourceStatus {
        name: "rdma",
        state: SourceState::Ok,
        duration: Duration::ZERO,
        errors: vec![],
        errors_total: 0,
        errors_by_kind: Default::default(),
        kernel_requests: None,
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
    let mut p = roce_port(1);
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
    let up = roce_port(1);
    let mut down = roce_port(1);
    down.state = Some(PortState::Down);
    let h = history(vec![up.clone(), down, up.clone(), up.clone(), up]);
    let mut engine = Engine::new();
    let active: Vec<usize> = h
        .iter()
        .map(|s| engine.evaluate(s, &cfg, &Expectations::default()).len())
        .collect();
    assert_eq!(active, vec![0, 1, 1, 1, 0]);
}

#[test]
fn rdma_device_missing_only_when_the_source_ran_empty() {
    let status = |state| roce_testkit::snapshot::source("rdma", state);
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

// ---------------------------------------------------------------------------
// Netdev rules: PFC, ECN, MTU, PFC storms, discards.

mod netdev_rules {
    use super::*;
    use roce_netdev::{
        DcbConfig, DcbOutcome, EcnConfig, FrameDirection, MappedStat, Meaning, Netdev, StatValue,
    };

    /// mlx5 RoCE netdev: MTU 9000, PFC on 3, ECN on for 3 in both roles.
    pub fn healthy() -> Netdev {
        NetdevBuilder::mlx5("ens1np0", "mlx5_0", 1)
            .up()
            .ecn(&[3])
            .dcb(pfc(&[3]))
            .build()
    }

    /// PFC on `priorities`, firmware DCBX, and a switch port that agrees.
    pub fn pfc(priorities: &[u8]) -> DcbConfig {
        testkit::lossless(priorities)
    }

    pub fn with_stat(mut n: Netdev, meaning: Meaning, value: StatValue) -> Netdev {
        n.stats.push(MappedStat { meaning, value });
        n
    }

    /// Snapshots 10 s apart with the healthy RoCE port and one netdev each.
    pub fn history_nd(netdevs: Vec<Netdev>) -> Vec<Arc<Snapshot>> {
        testkit::history(netdevs.into_iter().map(|n| {
            SnapshotBuilder::new()
                .with_port("mlx5_0", roce_port(1))
                .netdev(n)
        }))
    }

    fn expect_pfc(p: u8) -> Expectations {
        Expectations {
            pfc_priority: Some(p),
            ..Expectations::default()
        }
    }

    fn eval(h: &[Arc<Snapshot>], expect: &Expectations, rule: &str) -> Vec<Finding> {
        only(rules::evaluate(h, &RulesConfig::default(), expect), rule)
    }

    #[test]
    fn a_healthy_netdev_has_no_finding() {
        let h = history_nd(vec![healthy(), healthy()]);
        assert_eq!(
            rules::evaluate(&h, &RulesConfig::default(), &expect_pfc(3)),
            vec![]
        );
    }

    #[test]
    fn pfc_without_ecn() {
        let mut n = healthy();
        if let Some(e) = n.ecn.as_mut() {
            e.np[3].1 = false;
        }
        let f = eval(
            &history_nd(vec![n]),
            &Expectations::default(),
            "pfc_without_ecn",
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): PFC is on without ECN (priority 3: roce_np off): congestion is handled by pausing alone, which spreads it (head-of-line blocking, pause storms)"
        );
        assert_eq!(
            f[0].evidence,
            "PFC on priority 3; ecn/roce_np/enable/3 0; expected 1 for roce_np and roce_rp on every PFC priority"
        );
        assert_eq!(
            f[0].fix,
            "Turn DCQCN on for the PFC priority, both roles: echo 1 > /sys/class/net/ens1np0/ecn/roce_np/enable/3; echo 1 > /sys/class/net/ens1np0/ecn/roce_rp/enable/3; and ECN marking on the switches' RoCE queue, so that senders slow down before PFC has to pause the link"
        );
        assert_eq!(
            f[0].verify,
            "grep -H . /sys/class/net/ens1np0/ecn/roce_np/enable/3 /sys/class/net/ens1np0/ecn/roce_rp/enable/3  # expect 1"
        );
        assert_eq!(f[0].subject.netdev.as_deref(), Some("ens1np0"));
    }

    #[test]
    fn pfc_without_ecn_when_the_priority_file_is_absent_but_others_exist() {
        let mut n = healthy();
        if let Some(e) = n.ecn.as_mut() {
            e.rp.retain(|(p, _)| *p != 3);
        }
        let f = eval(
            &history_nd(vec![n]),
            &Expectations::default(),
            "pfc_without_ecn",
        );
        assert_eq!(
            f[0].evidence,
            "PFC on priority 3; ecn/roce_rp/enable/3 absent; expected 1 for roce_np and roce_rp on every PFC priority"
        );
    }

    #[test]
    fn pfc_without_ecn_is_silent_without_its_inputs() {
        // No ECN folder (not mlx5), no DCB support, PFC off, an empty role.
        let mut no_ecn = healthy();
        no_ecn.ecn = None;
        let mut no_dcb = healthy();
        no_dcb.ecn.as_mut().unwrap().np[3].1 = false;
        no_dcb.dcb = DcbOutcome::Unsupported;
        let mut pfc_off = healthy();
        pfc_off.ecn.as_mut().unwrap().np[3].1 = false;
        pfc_off.dcb = DcbOutcome::Ok(pfc(&[]));
        let mut empty_roles = healthy();
        empty_roles.ecn = Some(EcnConfig::default());
        for n in [no_ecn, no_dcb, pfc_off, empty_roles] {
            let h = history_nd(vec![n.clone()]);
            assert_eq!(
                eval(&h, &Expectations::default(), "pfc_without_ecn"),
                vec![],
                "{n:?}"
            );
        }
        // An InfiniBand port's netdev (IPoIB) is not a RoCE netdev.
        let mut n = healthy();
        n.ecn.as_mut().unwrap().np[3].1 = false;
        let mut h = (*history_nd(vec![n])[0]).clone();
        h.rdma.as_mut().unwrap().devices[0].ports[0].link_layer = Some(LinkLayer::InfiniBand);
        assert_eq!(
            eval(&[Arc::new(h)], &Expectations::default(), "pfc_without_ecn"),
            vec![]
        );
    }

    #[test]
    fn pfc_priority_mismatch_against_the_expectation() {
        let mut n = healthy();
        n.dcb = DcbOutcome::Ok(pfc(&[4]));
        let f = eval(
            &history_nd(vec![n]),
            &expect_pfc(3),
            "pfc_priority_mismatch",
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): PFC is on priority 4 but not on the expected RoCE priority 3: RoCE traffic is not lossless"
        );
        assert_eq!(
            f[0].evidence,
            "PFC enabled priorities: 4 (pfc_en 0x10); expected 3 only (expect.pfc_priority)"
        );
        assert_eq!(
            f[0].fix,
            "Put PFC on the RoCE priority only, as on the switch port: dcb pfc set dev ens1np0 prio-pfc all:off 3:on (or mlnx_qos -i ens1np0 --pfc 0,0,0,1,0,0,0,0), and make the switch's PFC priority the same"
        );
        assert_eq!(f[0].verify, "dcb pfc show dev ens1np0; mlnx_qos -i ens1np0");

        let mut n = healthy();
        n.dcb = DcbOutcome::Ok(pfc(&[]));
        let f = eval(
            &history_nd(vec![n]),
            &expect_pfc(3),
            "pfc_priority_mismatch",
        );
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): PFC is off on every priority, but RoCE is expected on priority 3: RoCE traffic is not lossless"
        );
        assert_eq!(
            f[0].evidence,
            "PFC enabled priorities: none (pfc_en 0x00); expected 3 only (expect.pfc_priority)"
        );

        let mut n = healthy();
        n.dcb = DcbOutcome::Ok(pfc(&[3, 4]));
        let f = eval(
            &history_nd(vec![n]),
            &expect_pfc(3),
            "pfc_priority_mismatch",
        );
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): PFC is on priorities 3, 4, not only on the expected RoCE priority 3: other traffic can pause the link too"
        );
    }

    #[test]
    fn pfc_priority_mismatch_is_silent_when_matching_or_unknown() {
        let h = history_nd(vec![healthy()]);
        assert_eq!(eval(&h, &expect_pfc(3), "pfc_priority_mismatch"), vec![]);
        let mut n = healthy();
        n.dcb = DcbOutcome::Failed("netlink: Permission denied".into());
        assert_eq!(
            eval(
                &history_nd(vec![n]),
                &expect_pfc(3),
                "pfc_priority_mismatch"
            ),
            vec![]
        );
        // PFC on 4 without an expectation and without pause data: no guess.
        let mut n = healthy();
        n.dcb = DcbOutcome::Ok(pfc(&[4]));
        assert_eq!(
            eval(
                &history_nd(vec![n.clone(), n]),
                &Expectations::default(),
                "pfc_priority_mismatch"
            ),
            vec![]
        );
    }

    fn pause_frames(priority: u8, v: u64) -> Netdev {
        with_stat(
            healthy(),
            Meaning::PfcPauseFrames {
                priority,
                direction: FrameDirection::Rx,
            },
            StatValue::Count(v),
        )
    }

    #[test]
    fn pfc_priority_mismatch_from_pauses_on_a_priority_without_pfc() {
        let h = history_nd(vec![pause_frames(5, 100), pause_frames(5, 400)]);
        let f = eval(&h, &Expectations::default(), "pfc_priority_mismatch");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): pause frames on priority 5 where PFC is off here: the link partner uses another PFC priority"
        );
        assert_eq!(
            f[0].evidence,
            "PFC enabled priorities: 3; pause frames priority 5 +300 over 10s; expected pauses only on PFC priorities"
        );
        // First sample, a reset, and steady counters: silent.
        for h in [
            history_nd(vec![pause_frames(5, 100)]),
            history_nd(vec![pause_frames(5, 900), pause_frames(5, 0)]),
            history_nd(vec![pause_frames(5, 100), pause_frames(5, 100)]),
            history_nd(vec![pause_frames(3, 100), pause_frames(3, 900)]),
        ] {
            assert_eq!(
                eval(&h, &Expectations::default(), "pfc_priority_mismatch"),
                vec![]
            );
        }
    }

    #[test]
    fn mtu_below_jumbo_critical_below_roce_4096() {
        let mut n = healthy();
        n.mtu = Some(1500);
        let f = eval(
            &history_nd(vec![n]),
            &Expectations::default(),
            "mtu_below_jumbo",
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): netdev MTU 1500 limits RoCE to MTU 1024, below 4096: every message takes 4x the packets"
        );
        assert_eq!(
            f[0].evidence,
            "mtu 1500: RoCE MTU 1024 (1500 - 96 header bytes, rounded down to 4096/2048/1024/...); expected >= 4192 (rules.mtu_below_jumbo.min_mtu)"
        );
        assert_eq!(
            f[0].fix,
            "Raise the MTU: ip link set dev ens1np0 mtu 9000, the same on every peer and at least as large on the switch ports; make it persistent in the host's network configuration"
        );
        assert_eq!(
            f[0].verify,
            "ip -d link show ens1np0 | grep -o 'mtu [0-9]*'; ibv_devinfo -d mlx5_0 -i 1 | grep active_mtu"
        );
    }

    #[test]
    fn mtu_below_the_expected_but_enough_for_4096_is_a_warning() {
        let mut n = healthy();
        n.mtu = Some(4200);
        let expect = Expectations {
            mtu: Some(9000),
            ..Expectations::default()
        };
        let h = history_nd(vec![n]);
        let f = eval(&h, &expect, "mtu_below_jumbo");
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): netdev MTU 4200 is below the expected 9000"
        );
        assert_eq!(
            f[0].evidence,
            "mtu 4200: RoCE MTU 4096 (4200 - 96 header bytes, rounded down to 4096/2048/1024/...); expected >= 9000 (expect.mtu)"
        );
        // Without the expectation, 4200 carries RoCE MTU 4096: silent.
        assert_eq!(
            eval(&h, &Expectations::default(), "mtu_below_jumbo"),
            vec![]
        );
        // The boundary: 4191 gives RoCE MTU 2048, 4192 gives 4096.
        for (mtu, fires) in [(4191, true), (4192, false), (9000, false)] {
            let mut n = healthy();
            n.mtu = Some(mtu);
            assert_eq!(
                eval(
                    &history_nd(vec![n]),
                    &Expectations::default(),
                    "mtu_below_jumbo"
                )
                .len(),
                usize::from(fires),
                "mtu {mtu}"
            );
        }
        let mut n = healthy();
        n.mtu = None;
        assert_eq!(
            eval(&history_nd(vec![n]), &expect, "mtu_below_jumbo"),
            vec![]
        );
    }

    fn paused(seconds: f64) -> Netdev {
        with_stat(
            healthy(),
            Meaning::PfcPauseDuration {
                priority: 3,
                direction: FrameDirection::Rx,
            },
            StatValue::Seconds(seconds),
        )
    }

    #[test]
    fn pfc_storm_from_pause_time() {
        // 9.5 s paused in 10 s = 95% > 90%: the priority is blocked.
        let f = eval(
            &history_nd(vec![paused(1.0), paused(10.5)]),
            &Expectations::default(),
            "pfc_storm",
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): priority 3 was paused 95% of the last 10s (rx, paused by the link partner): a PFC storm, the priority is blocked"
        );
        assert_eq!(
            f[0].evidence,
            "rx priority 3 paused 9.5s of 10s (95%); expected <= 90% paused (rules.pfc_storm.pause_ratio) and no storm error events"
        );
        assert_eq!(
            f[0].verify,
            "ethtool -S ens1np0 | grep -iE 'pause|storm'  # twice, a few seconds apart: the durations must stop growing"
        );
        // 4 s of 10 s (40%) is pausing, not a storm (pfc_pause_received);
        // 1 s of 10 s is 10%; first sample; a reset (driver reload).
        for h in [
            history_nd(vec![paused(1.0), paused(5.0)]),
            history_nd(vec![paused(1.0), paused(2.0)]),
            history_nd(vec![paused(1.0)]),
            history_nd(vec![paused(900.0), paused(0.5)]),
        ] {
            assert_eq!(eval(&h, &Expectations::default(), "pfc_storm"), vec![]);
        }
    }

    #[test]
    fn pfc_storm_from_storm_events() {
        let storm = |v| {
            with_stat(
                paused(0.0),
                Meaning::PauseStormEvents { severity: "error" },
                StatValue::Count(v),
            )
        };
        let f = eval(
            &history_nd(vec![storm(1), storm(3)]),
            &Expectations::default(),
            "pfc_storm",
        );
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): the NIC's pause storm detector stopped its pause frames (error +2): traffic on the lossless priority can be dropped"
        );
        assert_eq!(
            f[0].evidence,
            "pause storm events error +2 over 10s; expected <= 90% paused (rules.pfc_storm.pause_ratio) and no storm error events"
        );
        assert_eq!(
            eval(
                &history_nd(vec![storm(3), storm(3)]),
                &Expectations::default(),
                "pfc_storm"
            ),
            vec![]
        );
    }

    fn discards(total: u64, prio3: u64) -> Netdev {
        let n = with_stat(
            healthy(),
            Meaning::Discards {
                reason: "rx_port",
                priority: None,
            },
            StatValue::Count(total),
        );
        with_stat(
            n,
            Meaning::Discards {
                reason: "rx_port",
                priority: Some(3),
            },
            StatValue::Count(prio3),
        )
    }

    #[test]
    fn discards_growing() {
        // The port-wide counter is used, not added to the per-priority one.
        // Priority 3 here has PFC on: its discards are lossless_discards too
        // (rules_congestion.rs); this rule is the port-wide info.
        let f = eval(
            &history_nd(vec![discards(0, 0), discards(2000, 2000)]),
            &Expectations::default(),
            "discards_growing",
        );
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Info);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): the NIC discards packets at 200/s (rx_port)"
        );
        assert_eq!(
            f[0].evidence,
            "rx_port +2000 over 10s = 200/s; expected <= 100/s (rules.discards_growing.per_second); drops on a lossless priority are lossless_discards"
        );
        assert_eq!(
            f[0].verify,
            "ethtool -S ens1np0 | grep -iE 'discard|drop'  # twice, a few seconds apart"
        );
        for h in [
            history_nd(vec![discards(0, 0), discards(500, 500)]),
            history_nd(vec![discards(7, 7)]),
            history_nd(vec![discards(1000, 1000), discards(3, 3)]),
        ] {
            assert_eq!(
                eval(&h, &Expectations::default(), "discards_growing"),
                vec![]
            );
        }
    }

    #[test]
    fn netdev_rule_keys_in_the_config() {
        let c = Config::parse(
            "rules: {pfc_storm: {pause_ratio: 0.5}, mtu_below_jumbo: {min_mtu: 9000}, discards_growing: {per_second: 100}}\n",
            "t",
        )
        .unwrap();
        let d = RulesConfig::default();
        assert_eq!(c.rules.pfc_storm.pause_ratio, 0.5);
        assert_eq!(c.rules.pfc_storm.window, d.pfc_storm.window);
        assert_eq!(c.rules.mtu_below_jumbo.min_mtu, 9000);
        assert_eq!(c.rules.discards_growing.per_second, 100.0);
        assert_eq!(c.rules.discards_growing.window, d.discards_growing.window);
        let e = Config::parse("rules: {mtu_below_jumbo: {window: 1m}}\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "rules.mtu_below_jumbo.window is not a setting of this rule (it takes: min_mtu)"
            ),
            "{e}"
        );
        assert!(Config::parse("rules: {pfc_storm: {pause_ratio: 1.5}}\n", "t").is_err());
        // The threshold from the config: 9000 turns 4200 into a finding.
        let mut n = healthy();
        n.mtu = Some(4200);
        let f = only(
            rules::evaluate(&history_nd(vec![n]), &c.rules, &Expectations::default()),
            "mtu_below_jumbo",
        );
        assert_eq!(f.len(), 1);
    }
}

// ---------------------------------------------------------------------------
// Topology rules: GPU-NIC distance, GPUDirect, ACS, PCIe downtraining.

mod topology_rules {
    use super::*;
    use crate::support::{gpudirect_ready as ready, h100, pci as addr};
    use roce_topology::gpudirect::{Libibverbs, NvidiaModule};
    use roce_topology::{
        AcsState, BridgeAcs, FunctionRole, GpuDirect, GpuNicPath, Link, LinkSpeed, Nic, NvmlState,
        PathClass, PciFunction, TopologySnapshot,
    };

    fn function(a: &str, role: FunctionRole, parents: &[&str]) -> PciFunction {
        PciFunction {
            address: addr(a),
            role,
            rdma_device: (role == FunctionRole::Nic).then(|| "mlx5_0".to_string()),
            gpu: (role == FunctionRole::Gpu).then_some(0),
            host_bridge: "pci0000:00".into(),
            parents: parents.iter().map(|p| addr(p)).collect(),
            numa_node: Some(0),
            port_type: None,
            current_speed: Some(LinkSpeed(32000)),
            max_speed: Some(LinkSpeed(32000)),
            current_width: Some(16),
            max_width: Some(16),
        }
    }

    fn link(down: &str, up: &str, nic: bool, cur: (u32, u32)) -> Link {
        Link {
            downstream: addr(down),
            upstream: Some(addr(up)),
            rdma_device: nic.then(|| "mlx5_0".to_string()),
            current_speed: Some(LinkSpeed(cur.0)),
            current_width: Some(cur.1),
            capable_speed: Some(LinkSpeed(32000)),
            capable_width: Some(16),
        }
    }

    /// GPU 0 at 0000:03:00.0 and mlx5_0 at 0000:04:00.0 under one switch
    /// (upstream 0000:01:00.0, downstream ports 0000:02:00.0, 0000:02:01.0).
    fn topo(class: PathClass) -> TopologySnapshot {
        TopologySnapshot {
            gpus: vec![h100(0, "0000:03:00.0")],
            nics: vec![Nic {
                name: "mlx5_0".into(),
                address: addr("0000:04:00.0"),
                numa_node: Some(0),
            }],
            paths: vec![GpuNicPath {
                gpu: 0,
                nic: "mlx5_0".into(),
                class,
                bridges: vec![
                    addr("0000:02:00.0"),
                    addr("0000:01:00.0"),
                    addr("0000:02:01.0"),
                ],
            }],
            functions: vec![
                function("0000:01:00.0", FunctionRole::Bridge, &["0000:00:01.0"]),
                function(
                    "0000:03:00.0",
                    FunctionRole::Gpu,
                    &["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"],
                ),
                function(
                    "0000:04:00.0",
                    FunctionRole::Nic,
                    &["0000:00:01.0", "0000:01:00.0", "0000:02:01.0"],
                ),
            ],
            links: vec![
                link("0000:01:00.0", "0000:00:01.0", false, (32000, 16)),
                link("0000:03:00.0", "0000:02:00.0", false, (32000, 16)),
                link("0000:04:00.0", "0000:02:01.0", true, (32000, 16)),
            ],
            acs: vec![
                BridgeAcs {
                    address: addr("0000:02:00.0"),
                    state: AcsState::RedirectDisabled,
                },
                BridgeAcs {
                    address: addr("0000:02:01.0"),
                    state: AcsState::RedirectDisabled,
                },
            ],
            gpudirect: Some(ready()),
            nvml: NvmlState::default(),
            errors: vec![],
        }
    }

    fn eval(t: TopologySnapshot, rule: &str) -> Vec<Finding> {
        let s = Snapshot {
            sequence: 1,
            taken_at: Some(SystemTime::UNIX_EPOCH),
            topology: Some(t),
            ..Snapshot::default()
        };
        only(run(&[Arc::new(s)]), rule)
    }

    #[test]
    fn a_healthy_gpu_node_has_no_finding() {
        let s = Snapshot {
            sequence: 1,
            topology: Some(topo(PathClass::Pix)),
            ..Snapshot::default()
        };
        assert_eq!(run(&[Arc::new(s)]), vec![]);
    }

    #[test]
    fn gpu_nic_path_far() {
        let f = eval(topo(PathClass::Sys), "gpu_nic_path_far");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "GPU 0's nearest RDMA NIC (mlx5_0) is SYS away: every transfer crosses the CPU interconnect (UPI/xGMI) to the other socket, and NCCL does not use GPUDirect RDMA beyond PXB by default"
        );
        assert_eq!(
            f[0].evidence,
            "GPU 0 (0000:03:00.0) -> mlx5_0 (0000:04:00.0): SYS; expected PIX or PXB (a shared PCIe switch), PHB at worst"
        );
        assert_eq!(f[0].verify, "nvidia-smi topo -m");
        assert_eq!(f[0].subject.gpu, Some(0));
        assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_0"));
        let f = eval(topo(PathClass::Node), "gpu_nic_path_far");
        assert_eq!(f[0].severity, Severity::Warning);
        for class in [PathClass::Pix, PathClass::Pxb, PathClass::Phb] {
            assert_eq!(eval(topo(class), "gpu_nic_path_far"), vec![], "{class:?}");
        }
        // No GPU, or no NIC with a PCI function: nothing to judge.
        let mut t = topo(PathClass::Sys);
        t.paths.clear();
        assert_eq!(eval(t, "gpu_nic_path_far"), vec![]);
    }

    #[test]
    fn gpudirect_unavailable() {
        let mut t = topo(PathClass::Pix);
        t.gpudirect = Some(GpuDirect {
            peermem_loaded: false,
            kernel: Some((5, 4)),
            libibverbs: Some(Libibverbs {
                file: "libibverbs.so.1.8.28.0".into(),
                abi_minor: 8,
                rdma_core: Some(28),
            }),
            ..ready()
        });
        let f = eval(t, "gpudirect_unavailable");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "GPUDirect RDMA is unavailable: neither nvidia-peermem nor dma-buf is usable, so NCCL stages GPU data through host memory"
        );
        assert_eq!(
            f[0].evidence,
            "1 GPU(s), 1 RDMA NIC(s); nvidia_peermem not loaded; dma-buf: kernel 5.4 (needs >= 5.12), proprietary NVIDIA kernel module (exports no dma-buf; needs the open module), libibverbs.so.1.8.28.0 (ABI 1.8; needs >= 1.12, rdma-core >= 34); expected one mechanism ready"
        );
        assert_eq!(
            f[0].verify,
            "lsmod | grep -E 'nvidia_peermem|nv_peer_mem'; cat /proc/driver/nvidia/version; uname -r"
        );
        // dma-buf alone is enough.
        let mut t = topo(PathClass::Pix);
        t.gpudirect = Some(GpuDirect {
            peermem_loaded: false,
            nvidia_module: NvidiaModule::Open,
            ..ready()
        });
        assert_eq!(eval(t, "gpudirect_unavailable"), vec![]);
        // No GPU (gpudirect None), or no RDMA NIC: silent.
        let mut t = topo(PathClass::Pix);
        t.gpus.clear();
        t.gpudirect = None;
        assert_eq!(eval(t, "gpudirect_unavailable"), vec![]);
        let mut t = topo(PathClass::Pix);
        t.nics.clear();
        t.gpudirect = Some(GpuDirect {
            peermem_loaded: false,
            ..ready()
        });
        assert_eq!(eval(t, "gpudirect_unavailable"), vec![]);
    }

    #[test]
    fn acs_on_gpu_nic_path() {
        let mut t = topo(PathClass::Pix);
        t.acs[1].state = AcsState::RedirectEnabled;
        let f = eval(t, "acs_on_gpu_nic_path");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "ACS redirects peer-to-peer traffic between GPU 0 and mlx5_0 up to the root complex: GPUDirect RDMA loses bandwidth or hangs"
        );
        assert_eq!(
            f[0].evidence,
            "ACS P2P Request Redirect enabled on 0000:02:01.0 (between GPU 0 0000:03:00.0 and mlx5_0); expected disabled"
        );
        assert_eq!(
            f[0].fix,
            "Turn ACS redirect off on bare metal: setpci -s 0000:02:01.0 ECAP_ACS+0x6.w=0000 (until reboot); for good, turn ACS off in the BIOS or boot with pci=disable_acs_redir=0000:02:01.0 (not on hosts that pass devices through to VMs, which need ACS for IOMMU isolation)"
        );
        assert_eq!(
            f[0].verify,
            "lspci -vvv -s 0000:02:01.0 | grep ACSCtl  # ReqRedir- expected"
        );
        // Unknown (config space not readable without root) says nothing.
        let mut t = topo(PathClass::Pix);
        t.acs[1].state = AcsState::Unknown;
        assert_eq!(eval(t, "acs_on_gpu_nic_path"), vec![]);
    }

    #[test]
    fn pcie_downtrained() {
        let mut t = topo(PathClass::Pix);
        t.links[2] = link("0000:04:00.0", "0000:02:01.0", true, (16000, 8));
        let f = eval(t, "pcie_downtrained");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].finding,
            "mlx5_0's PCIe link runs at 16.0 GT/s x8, below the 32.0 GT/s x16 both ends support (speed and width)"
        );
        assert_eq!(
            f[0].evidence,
            "0000:04:00.0: current 16.0 GT/s x8; capable 32.0 GT/s x16 (the lower of both ends' max_link_speed/max_link_width)"
        );
        assert_eq!(
            f[0].verify,
            "lspci -vvv -s 0000:04:00.0 | grep -E 'LnkCap|LnkSta'"
        );
        assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_0"));
        // A GPU at a lower speed is idle power saving; a narrower GPU link is not.
        let mut t = topo(PathClass::Pix);
        t.links[1] = link("0000:03:00.0", "0000:02:00.0", false, (2500, 16));
        assert_eq!(eval(t, "pcie_downtrained"), vec![]);
        let mut t = topo(PathClass::Pix);
        t.links[1] = link("0000:03:00.0", "0000:02:00.0", false, (2500, 8));
        let f = eval(t, "pcie_downtrained");
        assert_eq!(
            f[0].finding,
            "GPU 0's PCIe link runs at 2.5 GT/s x8, below the 32.0 GT/s x16 both ends support (width)"
        );
        // The switch's uplink names what is below it.
        let mut t = topo(PathClass::Pix);
        t.links[0] = link("0000:01:00.0", "0000:00:01.0", false, (32000, 4));
        let f = eval(t, "pcie_downtrained");
        assert_eq!(
            f[0].finding,
            "The PCIe link to switch 0000:01:00.0 (above GPU 0, mlx5_0) runs at 32.0 GT/s x4, below the 32.0 GT/s x16 both ends support (width)"
        );
        assert_eq!(f[0].subject.gpu, Some(0));
        // Unknown speeds say nothing.
        let mut t = topo(PathClass::Pix);
        t.links[2].current_speed = None;
        t.links[2].current_width = None;
        assert_eq!(eval(t, "pcie_downtrained"), vec![]);
    }

    /// The NIC's link with the NIC's 400 GbE port: the verdict says whether
    /// the trained link still carries the line rate.
    fn eval_with_port(t: TopologySnapshot, gbps: u64) -> Vec<Finding> {
        let mut port = roce_testkit::snapshot::roce_port(1);
        port.rate_bytes_per_second = Some(gbps * 1_000_000_000 / 8);
        let s = roce_testkit::snapshot::SnapshotBuilder::new()
            .with_port("mlx5_0", port)
            .topology(t)
            .build();
        only(run(&[Arc::new(s)]), "pcie_downtrained")
    }

    #[test]
    fn pcie_downtrained_against_the_nics_line_rate() {
        // Gen5 x8: 252 Gb/s after 128b/130b, about 214 Gb/s of payload:
        // cannot feed 400 GbE.
        let mut t = topo(PathClass::Pix);
        t.links[2] = link("0000:04:00.0", "0000:02:01.0", true, (32000, 8));
        let f = eval_with_port(t.clone(), 400);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "mlx5_0's PCIe link runs at 32.0 GT/s x8, below the 32.0 GT/s x16 both ends support (width); 32.0 GT/s x8 cannot feed mlx5_0's 400 Gb/s line rate: about 214 Gb/s of payload, 54% of it"
        );
        assert!(
            f[0].evidence.ends_with("; 32.0 GT/s x8 carries 252 Gb/s after line encoding, about 214 Gb/s of payload (85% TLP efficiency)"),
            "{}",
            f[0].evidence
        );
        // The same link under a 200 GbE port still carries it: a warning.
        let f = eval_with_port(t, 200);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(
            f[0].finding
                .ends_with("; 32.0 GT/s x8 still carries mlx5_0's 200 Gb/s line rate"),
            "{}",
            f[0].finding
        );
        // Gen4 x16 (a slot forced to Gen4) under 400 GbE: critical too.
        let mut t = topo(PathClass::Pix);
        t.links[2] = link("0000:04:00.0", "0000:02:01.0", true, (16000, 16));
        assert_eq!(eval_with_port(t, 400)[0].severity, Severity::Critical);
        // Healthy Gen5 x16 at 400 GbE: nothing.
        assert_eq!(eval_with_port(topo(PathClass::Pix), 400), vec![]);
    }
}

// ---------------------------------------------------------------------------
// Probe rules: failures and latency regressions.

mod probe_rules {
    use super::*;
    use roce_probe::{
        Failure, Histogram, ProbeResults, ProbeState, ProbeTarget, Reason, TargetStats,
    };

    /// Cumulative statistics: `requests` rounds, `failed` of them failed,
    /// `rtt_us` the mean RTT of the successes.
    fn stats(requests: u64, failed: u64, rtt_us: f64, last_ok: bool) -> TargetStats {
        let successes = requests - failed;
        let rtt = Histogram {
            count: successes,
            sum_seconds: successes as f64 * rtt_us * 1e-6,
            ..Histogram::default()
        };
        TargetStats {
            requests,
            successes,
            failures: if failed > 0 {
                [("timeout", failed)].into_iter().collect()
            } else {
                Default::default()
            },
            rtt,
            last_ok: Some(last_ok),
            last_failure: (!last_ok)
                .then(|| Failure::new(Reason::Timeout, "no completion within 1s")),
            sessions_opened: 1,
            ..TargetStats::default()
        }
    }

    fn history_probes(samples: Vec<TargetStats>) -> Vec<Arc<Snapshot>> {
        let ports = samples.iter().map(|_| roce_port(1)).collect();
        history(ports)
            .into_iter()
            .zip(samples)
            .map(|(s, st)| {
                let mut s = (*s).clone();
                s.probes = Some(ProbeResults {
                    state: ProbeState::Running,
                    targets: vec![(ProbeTarget::loopback("mlx5_0", 1, 3), st)],
                });
                Arc::new(s)
            })
            .collect()
    }

    fn eval(h: &[Arc<Snapshot>], rule: &str) -> Vec<Finding> {
        only(run(h), rule)
    }

    #[test]
    fn probe_failures() {
        // 10 rounds in the window, 3 failed (30% > 20%), the last succeeded.
        let h = history_probes(vec![stats(100, 0, 5.0, true), stats(110, 3, 5.0, true)]);
        let f = eval(&h, "probe_failures");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): 30% of RDMA probes failed in the last 10s"
        );
        assert_eq!(
            f[0].evidence,
            "3 of 10 probe rounds failed (GID index 3); expected <= 20% (rules.probe_failures.max_ratio)"
        );
        // Every round failed and the last one too: the port is unusable.
        let h = history_probes(vec![stats(100, 0, 5.0, true), stats(110, 10, 5.0, false)]);
        let f = eval(&h, "probe_failures");
        assert_eq!(f[0].severity, Severity::Critical);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): every RDMA probe in the last 10s failed: the port cannot complete RDMA operations"
        );
        assert_eq!(
            f[0].evidence,
            "10 of 10 probe rounds failed (GID index 3); last failure timeout: no completion within 1s; expected <= 20% (rules.probe_failures.max_ratio)"
        );
        // First sample, old failures only, a restarted probe thread, 1 in 10.
        for h in [
            history_probes(vec![stats(110, 10, 5.0, false)]),
            history_probes(vec![stats(100, 50, 5.0, true), stats(110, 50, 5.0, true)]),
            history_probes(vec![stats(500, 90, 5.0, true), stats(10, 1, 5.0, true)]),
            history_probes(vec![stats(100, 0, 5.0, true), stats(110, 1, 5.0, true)]),
        ] {
            assert_eq!(eval(&h, "probe_failures"), vec![]);
        }
        // No probe results (probes off): silent.
        assert_eq!(
            eval(&history(vec![roce_port(1), roce_port(1)]), "probe_failures"),
            vec![]
        );
    }

    #[test]
    fn probe_latency_regression() {
        // 100 rounds at 5 us, then 10 rounds at 50 us: the window's mean is
        // 10x the earlier mean.
        let mut late = stats(110, 0, 5.0, true);
        late.rtt.sum_seconds = 100.0 * 5e-6 + 10.0 * 50e-6;
        let h = history_probes(vec![stats(100, 0, 5.0, true), late]);
        let f = eval(&h, "probe_latency_regression");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(
            f[0].finding,
            "mlx5_0 port 1 (ens1np0): RDMA probe round trips take 10x their earlier average"
        );
        assert_eq!(
            f[0].evidence,
            "mean RTT 50 us over the last 10s (10 rounds) vs 5 us before (100 rounds); expected <= 3x (rules.probe_latency_regression.factor)"
        );
        // 2x is within the factor; too little baseline; a restart; steady.
        let mut double = stats(110, 0, 5.0, true);
        double.rtt.sum_seconds = 100.0 * 5e-6 + 10.0 * 10e-6;
        let mut young = stats(20, 0, 5.0, true);
        young.rtt.sum_seconds = 10.0 * 5e-6 + 10.0 * 50e-6;
        for h in [
            history_probes(vec![stats(100, 0, 5.0, true), double]),
            history_probes(vec![stats(10, 0, 5.0, true), young]),
            history_probes(vec![stats(100, 0, 5.0, true), stats(10, 0, 50.0, true)]),
            history_probes(vec![stats(100, 0, 5.0, true), stats(110, 0, 5.0, true)]),
            history_probes(vec![stats(100, 0, 5.0, true)]),
        ] {
            assert_eq!(eval(&h, "probe_latency_regression"), vec![]);
        }
    }
}

/// docs/rules.json is the rule table the alert generator reads.
#[test]
fn rules_json_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/rules.json");
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == rules::table::render(),
        "docs/rules.json is stale or missing: regenerate it with \
         `cargo run -- docs rules > docs/rules.json`, then `python3 alerts/generate.py` \
         and `python3 tests/monitoring/gen_rule_tests.py`"
    );
}

/// Every rule has a `## <id>` section in docs/runbook.md with the parts the
/// exporter's /runbook/<id> serves.
#[test]
fn every_rule_has_a_runbook_section() {
    for id in rules::RuleId::ALL {
        let section = roce_exporter::runbook::section(id.as_str())
            .unwrap_or_else(|| panic!("docs/runbook.md: no `## {id}` section"));
        for part in ["**Meaning", "**Confirm", "**Fix"] {
            assert!(
                section.contains(part),
                "docs/runbook.md: {id} has no {part}** part"
            );
        }
    }
}

/// Every rule's default thresholds and windows are in the export, equal to
/// `RulesConfig::default()`.
#[test]
fn rules_json_carries_the_config_defaults() {
    let json = rules::table::export();
    let defaults = rules::table::defaults_json(&RulesConfig::default());
    let listed = json["rules"].as_array().expect("rules array");
    assert_eq!(listed.len(), rules::RuleId::ALL.len());
    for r in listed {
        let id: rules::RuleId = r["id"].as_str().unwrap().parse().unwrap();
        match id.spec().config {
            Some(section) => {
                assert_eq!(r["config"]["defaults"], defaults[section], "{id}");
                assert_eq!(r["config"]["section"], format!("rules.{section}"));
            }
            None => assert!(r["config"].is_null(), "{id}"),
        }
        assert_eq!(r["severity"], id.spec().severities[0].as_str());
    }
    assert_eq!(
        rules::table::defaults_json(&RulesConfig::default())["retransmissions"]["per_second"],
        serde_json::json!(10.0)
    );
}
