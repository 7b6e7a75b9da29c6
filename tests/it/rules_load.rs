//! The load test's rules (`load_test_below_line_rate`,
//! `load_test_node_below_line_rate`, `load_test_aborted`) through the rule
//! engine, on 400 GbE ports (50e9 bytes/s): each fires on the figures of a
//! real shortfall with the cause its data points at, and stays silent on a
//! healthy node (ib_write_bw's usual 48-49 GB/s at 8 MiB on ConnectX-7);
//! the line rate after encoding per link layer and speed; what a port's
//! counters moved over a run.

use std::sync::Arc;

use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::rules::{self, Finding, RuleId, Severity};
use roce_exporter::snapshot::Snapshot;
use roce_model::load::{
    LoadRun, LoadTestResults, LoadTestSnapshot, Outcome, PortLoad, RunCounters, RunScope, SizeLoad,
};
use roce_netdev::{FrameDirection, Meaning};
use roce_rdma::{LinkLayer, Port, RdmaSnapshot};
use roce_rules::load_test::{carried_bytes_per_second, line_rate, run_counters};
use roce_testkit::snapshot::{mlx5, roce_port, NetdevBuilder, SnapshotBuilder};
use roce_topology::{Link, LinkSpeed, PciAddress, TopologySnapshot};

const LINE: f64 = 50e9;

fn size(size: u64, gb: f64) -> SizeLoad {
    SizeLoad {
        size,
        bytes_per_second: Some(gb * 1e9),
        sample_seconds: 2.5,
        bytes: (gb * 1e9 * 5.0) as u64,
    }
}

fn port(device: &str, at_8mib: f64) -> PortLoad {
    PortLoad {
        device: device.into(),
        port: 1,
        netdev: Some(format!("ens{}np0", &device[5..])),
        peer: Some("node-b:9879".into()),
        peer_node: Some("node-b".into()),
        peer_device: Some(device.into()),
        peer_port: Some(1),
        expected_bytes_per_second: Some(LINE),
        sizes: vec![
            size(65536, 44.8),
            size(1 << 20, 48.1),
            size(8 << 20, at_8mib),
        ],
        bytes: 700_000_000_000,
        responder_bytes: Some(700_000_000_000),
        counters: Some(RunCounters {
            seconds: 16.0,
            tx_bytes: Some(700_000_000_000),
            rx_bytes: Some(900_000_000),
            pause_rx_seconds: Some(0.0),
            pause_tx_seconds: Some(0.0),
            ecn_marked: Some(0),
            cnp_sent: Some(0),
            cnp_handled: Some(0),
            retransmissions: Some(0),
            sequence_errors: Some(0),
            ..RunCounters::default()
        }),
        outcome: Outcome::Completed,
        memory: "host".into(),
        memory_note: None,
    }
}

fn run(scope: RunScope, ports: Vec<PortLoad>) -> LoadRun {
    LoadRun {
        scope,
        started_at: 1.8e9,
        seconds: 16.0,
        ports,
    }
}

/// Two 400 GbE ports, their netdevs at MTU 9000, and the runs given.
fn judge(
    runs: Vec<LoadRun>,
    edit: impl FnOnce(SnapshotBuilder) -> SnapshotBuilder,
) -> Vec<Finding> {
    let rdma = RdmaSnapshot {
        devices: vec![
            mlx5("mlx5_0", vec![roce_port(1)]),
            mlx5("mlx5_1", vec![roce_port(1)]),
        ],
        errors: vec![],
    };
    let b = SnapshotBuilder::new()
        .rdma(rdma)
        .netdev(NetdevBuilder::mlx5("ens0np0", "mlx5_0", 1).build())
        .netdev(NetdevBuilder::mlx5("ens1np0", "mlx5_1", 1).build());
    let s = edit(b)
        .edit(|s| {
            s.load_test = Some(LoadTestSnapshot {
                results: Some(Arc::new(LoadTestResults {
                    version: 1,
                    finished_at: 1.8e9,
                    runs,
                })),
                ..LoadTestSnapshot::default()
            })
        })
        .arc();
    rules::evaluate(&[s], &RulesConfig::default(), &Expectations::default())
        .into_iter()
        .filter(|f| f.rule.spec().area == rules::Area::LoadTest)
        .collect()
}

fn only(fs: &[Finding], rule: RuleId) -> Vec<&Finding> {
    fs.iter().filter(|f| f.rule == rule).collect()
}

#[test]
fn a_healthy_node_at_ib_write_bw_figures_raises_nothing() {
    let fs = judge(
        vec![
            run(
                RunScope::All,
                vec![port("mlx5_0", 48.7), port("mlx5_1", 48.9)],
            ),
            run(RunScope::Alone, vec![port("mlx5_0", 49.0)]),
            run(RunScope::Alone, vec![port("mlx5_1", 48.8)]),
        ],
        |b| b,
    );
    assert!(fs.is_empty(), "{fs:#?}");
}

#[test]
fn a_port_below_its_line_rate_is_a_warning_and_far_below_critical() {
    let fs = judge(
        vec![run(RunScope::Alone, vec![port("mlx5_0", 40.0)])],
        |b| b,
    );
    let f = only(&fs, RuleId::LoadTestBelowLineRate);
    assert_eq!(f.len(), 1, "{fs:#?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].finding.contains("80%") && f[0].finding.contains("8 MiB"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].evidence.starts_with("40.0 GB/s vs expected 50.0 GB/s"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].evidence
            .contains("nothing read on this node explains it"),
        "{}",
        f[0].evidence
    );
    let fs = judge(
        vec![run(RunScope::Alone, vec![port("mlx5_0", 20.0)])],
        |b| b,
    );
    assert_eq!(
        only(&fs, RuleId::LoadTestBelowLineRate)[0].severity,
        Severity::Critical
    );
}

#[test]
fn the_cause_is_what_the_data_points_at() {
    // The NIC's PCIe link at Gen5 x8 where both ends do x16.
    let link = Link {
        downstream: PciAddress {
            domain: 0,
            bus: 0x17,
            device: 0,
            function: 0,
        },
        upstream: None,
        rdma_device: Some("mlx5_0".into()),
        current_speed: Some(LinkSpeed(32000)),
        current_width: Some(8),
        capable_speed: Some(LinkSpeed(32000)),
        capable_width: Some(16),
    };
    let fs = judge(
        vec![run(RunScope::Alone, vec![port("mlx5_0", 30.0)])],
        |b| {
            b.topology(TopologySnapshot {
                links: vec![link],
                ..TopologySnapshot::default()
            })
        },
    );
    let f = &only(&fs, RuleId::LoadTestBelowLineRate)[0];
    assert!(
        f.evidence
            .contains("PCIe link trained at 32 GT/s x8, below the 32 GT/s x16"),
        "{}",
        f.evidence
    );
    assert!(f.fix.contains("Reseat the NIC"), "{}", f.fix);
    assert!(
        f.verify.contains("lspci -vvv -s 0000:17:00.0"),
        "{}",
        f.verify
    );

    // The switch paused the port a fifth of the run, with ECN marks.
    let mut p = port("mlx5_1", 35.0);
    if let Some(c) = &mut p.counters {
        c.pause_rx_seconds = Some(3.2);
        c.ecn_marked = Some(120_000);
        c.cnp_handled = Some(40_000);
    }
    let fs = judge(vec![run(RunScope::Alone, vec![p])], |b| b);
    let f = &only(&fs, RuleId::LoadTestBelowLineRate)[0];
    assert!(
        f.evidence
            .contains("the switch paused the port 20% of the run"),
        "{}",
        f.evidence
    );
    assert!(
        f.evidence.contains("120000 ECN-marked packets"),
        "{}",
        f.evidence
    );
    assert!(f.verify.contains("ethtool -S ens1np0"), "{}", f.verify);

    // A netdev MTU that keeps RoCE below 4096.
    let fs = judge(
        vec![run(RunScope::Alone, vec![port("mlx5_0", 42.0)])],
        |b| {
            b.edit(|s| {
                if let Some(n) = s.netdev.as_mut().and_then(|n| n.netdevs.first_mut()) {
                    n.mtu = Some(1500);
                }
            })
        },
    );
    let f = &only(&fs, RuleId::LoadTestBelowLineRate)[0];
    assert!(f.evidence.contains("MTU is 1500"), "{}", f.evidence);
    assert!(f.fix.contains("ip link set ens0np0 mtu 9000"), "{}", f.fix);
}

#[test]
fn the_node_short_with_every_port_alone_fine_is_a_shared_limit() {
    let fs = judge(
        vec![
            run(
                RunScope::All,
                vec![port("mlx5_0", 46.5), port("mlx5_1", 30.0)],
            ),
            run(RunScope::Alone, vec![port("mlx5_0", 48.9)]),
            run(RunScope::Alone, vec![port("mlx5_1", 48.7)]),
        ],
        |b| b,
    );
    let node = only(&fs, RuleId::LoadTestNodeBelowLineRate);
    assert_eq!(node.len(), 1, "{fs:#?}");
    assert!(
        node[0]
            .evidence
            .starts_with("76.5 GB/s vs expected 100.0 GB/s"),
        "{}",
        node[0].evidence
    );
    assert!(
        node[0].fix.contains("a resource they share"),
        "{}",
        node[0].fix
    );
    // A healthy node together says nothing of the node.
    let fs = judge(
        vec![run(
            RunScope::All,
            vec![port("mlx5_0", 48.5), port("mlx5_1", 48.6)],
        )],
        |b| b,
    );
    assert!(
        only(&fs, RuleId::LoadTestNodeBelowLineRate).is_empty(),
        "{fs:#?}"
    );
}

#[test]
fn a_stream_that_stopped_is_critical_and_one_not_run_a_warning() {
    let mut stopped = port("mlx5_0", 48.0);
    stopped.outcome = Outcome::Aborted {
        reason: "wc_retry_exc_err".into(),
        message: "work completion IBV_WC_RETRY_EXC_ERR on a 8388608-byte RDMA WRITE".into(),
    };
    let mut not = port("mlx5_1", 0.0);
    not.sizes.clear();
    not.outcome = Outcome::NotRun {
        message: "node-b:9879: refused (port_loaded): ...".into(),
    };
    let fs = judge(vec![run(RunScope::All, vec![stopped, not])], |b| b);
    let a = only(&fs, RuleId::LoadTestAborted);
    assert_eq!(a.len(), 2, "{fs:#?}");
    let by = |d: &str| {
        a.iter()
            .find(|f| f.subject.device.as_deref() == Some(d))
            .unwrap()
    };
    assert_eq!(by("mlx5_0").severity, Severity::Critical);
    assert!(by("mlx5_0").evidence.contains("IBV_WC_RETRY_EXC_ERR"));
    assert_eq!(by("mlx5_1").severity, Severity::Warning);
    assert!(by("mlx5_1").fix.contains("load_test.responder"));
}

fn rate(link: LinkLayer, gbps: u64) -> Port {
    Port {
        link_layer: Some(link),
        rate_bytes_per_second: Some(gbps * 125_000_000),
        ..Port::default()
    }
}

#[test]
fn the_line_rate_is_after_the_links_encoding() {
    // Ethernet: the MAC's data rate (mlx5 maps the ethtool speed).
    assert_eq!(line_rate(&rate(LinkLayer::Ethernet, 400)), Some(50e9));
    // InfiniBand: QDR 8b/10b, FDR 64b/66b, EDR and NDR print their data rate.
    assert_eq!(line_rate(&rate(LinkLayer::InfiniBand, 40)), Some(4e9));
    let fdr = line_rate(&rate(LinkLayer::InfiniBand, 56)).unwrap();
    assert!((fdr - 7e9 * 64.0 / 66.0).abs() < 1.0, "{fdr}");
    assert_eq!(line_rate(&rate(LinkLayer::InfiniBand, 100)), Some(12.5e9));
    assert_eq!(line_rate(&rate(LinkLayer::InfiniBand, 400)), Some(50e9));
    assert_eq!(line_rate(&Port::default()), None);
}

/// A 400 GbE port whose counters are `xmit` and `rcv` (the kernel's
/// units: octets divided by four) and whose netdev paused `paused_us`.
fn sample(i: u64, xmit: u64, rcv: u64, paused_us: f64) -> Snapshot {
    SnapshotBuilder::new()
        .sample(i)
        .device(mlx5("mlx5_0", vec![roce_port(1)]))
        .counter("port_xmit_data", xmit)
        .counter("port_rcv_data", rcv)
        .counter("port_xmit_packets", xmit / 1024)
        .counter("port_rcv_packets", rcv / 1024)
        .port_netdev("ens1np0")
        .netdev(
            NetdevBuilder::mlx5("ens1np0", "mlx5_0", 1)
                .stat_value(
                    Meaning::PfcPauseDuration {
                        priority: 3,
                        direction: FrameDirection::Rx,
                    },
                    roce_netdev::StatValue::Seconds(paused_us / 1e6),
                )
                .build(),
        )
        .build()
}

#[test]
fn a_runs_counters_are_what_the_port_moved_between_its_samples() {
    let before = sample(0, 1_000, 500, 0.0);
    // 10 s later: 500 GB sent (125e9 four-octet units), 2.5 s paused.
    let after = sample(1, 1_000 + 125_000_000_000, 500 + 250_000, 2_500_000.0);
    let c = run_counters(&before, &after, "mlx5_0", 1);
    assert_eq!(c.tx_bytes, Some(500_000_000_000));
    assert_eq!(c.rx_bytes, Some(1_000_000));
    assert_eq!(c.pause_rx_seconds, Some(2.5));
    assert!((c.seconds - 10.0).abs() < 1e-9, "{}", c.seconds);
    let carried = carried_bytes_per_second(&before, &after, "mlx5_0", 1).unwrap();
    assert!((carried - 50e9).abs() < 1.0, "{carried}");
    // A counter that went down (a driver reload) moved nothing known.
    let c = run_counters(&after, &before, "mlx5_0", 1);
    assert_eq!(c.tx_bytes, None);
}
