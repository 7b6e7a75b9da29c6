//! The netdev source end to end on a fixture tree: sysfs from
//! `crates/netdev/tests/fixtures/netdev-mlx5/sys`, ethtool statistics and DCB replayed
//! from `crates/netdev/tests/fixtures/netdev-mlx5/replay` (the documented replay path for
//! trees that are not the running kernel), through the exposition. Exact
//! lines of the Prometheus text.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::support::promtool_check;
use roce_exporter::config::{Config, Toggle};
use roce_exporter::exposition::groups::{Group, Groups};
use roce_exporter::exposition::{encode, BuildInfo, Format};
use roce_exporter::host::HostPaths;
use roce_exporter::snapshot::{Snapshot, SourceState};
use roce_exporter::sources::netdev::NetdevSource;
use roce_exporter::sources::{Input, Part, Source};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("crates/netdev/tests/fixtures")
        .join(rel)
}

fn rdma_with_netdev(netdev: &str) -> roce_rdma::RdmaSnapshot {
    roce_rdma::RdmaSnapshot {
        devices: vec![roce_rdma::Device {
            name: "mlx5_0".into(),
            ports: vec![roce_rdma::Port {
                number: 1,
                netdev: Some(netdev.into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        errors: vec![],
    }
}

fn run(config: &Config) -> (SourceState, Vec<String>, String) {
    let paths = HostPaths {
        sysfs: fixture("netdev-mlx5/sys"),
        procfs: PathBuf::from("/proc"),
    };
    let mut source = NetdevSource::new(config, &paths);
    let input = Input {
        rdma: Some(Arc::new(rdma_with_netdev("ens1f0np0"))),
        previous: None,
    };
    let mut errors = Vec::new();
    let reading = source.sample(&input, &mut errors);
    let Some(Part::Netdev(netdev)) = reading.part else {
        panic!("no netdev part: {:?}", reading.state)
    };
    let state = reading.state;
    let snapshot = Snapshot {
        rdma: input.rdma.as_deref().cloned(),
        netdev: Some(netdev),
        ..Default::default()
    };
    let mut build = BuildInfo::current(Duration::from_secs(5));
    build.groups = config.metrics;
    let text = encode(Arc::new(snapshot), &build, Format::Text);
    (
        state,
        errors.iter().map(ToString::to_string).collect(),
        text,
    )
}

/// Each line is a series of the netdev whose labels are `l`, written with
/// `@` in their place.
fn has_all(text: &str, l: &str, lines: &[&str]) {
    for line in lines {
        has(text, &line.replace('@', l));
    }
}

fn has(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "missing {line:?} in:\n{text}"
    );
}

#[test]
fn replayed_mlx5_netdev_exposes_every_family() {
    let mut config = Config {
        metrics: Groups::all(),
        ..Config::default()
    };
    config.netdevs.replay = Some(fixture("netdev-mlx5/replay"));
    config.netdevs.export_raw_ethtool = vec!["rx_vport_rdma_unicast_packets".into()];
    let (state, errors, text) = run(&config);
    assert_eq!(state, SourceState::Ok);
    assert!(errors.is_empty(), "{errors:?}");
    let l = r#"netdev="ens1f0np0",device="mlx5_0",port="1""#;
    has_all(
        &text,
        l,
        &[
            r#"roce_pfc_pause_frames_total{@,priority="3",direction="rx"} 1003"#,
            r#"roce_pfc_pause_frames_total{@,priority="3",direction="tx"} 2003"#,
            r#"roce_pfc_pause_duration_seconds_total{@,priority="3",direction="rx"} 6.0"#,
            r#"roce_pfc_pause_transitions_total{@,priority="0",direction="rx"} 300"#,
            r#"roce_link_pause_frames_total{@,direction="rx"} 11"#,
            r#"roce_pause_storm_events_total{@,severity="error"} 1"#,
            r#"roce_netdev_discards_total{@,reason="rx_port"} 77"#,
            // The per-priority parts of rx_port (rx_prioN_discards, 90..97
            // in the replay) are a family of their own: a sum over one
            // family never adds the port-wide total to its parts.
            r#"roce_netdev_priority_discards_total{@,reason="rx_port",priority="3"} 93"#,
            r#"roce_netdev_priority_discards_total{@,reason="rx_no_buffer",priority="7"} 47"#,
            r#"roce_netdev_discards_total{@,reason="rx_out_of_buffer"} 4242"#,
        ],
    );
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("roce_netdev_discards_total{") && l.contains("priority=")),
        "port-wide discards carry no priority"
    );
    // The NIC's own marks (mlx5 rx_prioN_marked), not the switches' CE marks.
    has_all(
        &text,
        l,
        &[r#"roce_netdev_nic_ecn_marked_packets_total{@,priority="2"} 60002"#],
    );
    assert!(!text.contains("roce_netdev_ecn_marked_packets"));
    // The 64-bit physical counters the rate rules prefer to the PMA's.
    has(
        &text,
        &format!(
            r#"roce_netdev_phy_symbol_errors_total{{{l}}} {}"#,
            raw_value("rx_symbol_err_phy")
        ),
    );
    has(
        &text,
        &format!(
            r#"roce_netdev_link_down_events_total{{{l}}} {}"#,
            raw_value("link_down_events_phy")
        ),
    );
    let raw = raw_value("rx_vport_rdma_unicast_packets");
    has(
        &text,
        &format!(
            r#"roce_netdev_ethtool_stat_total{{{l},stat="rx_vport_rdma_unicast_packets"}} {raw}"#
        ),
    );
    has_all(
        &text,
        l,
        &[
            r#"roce_netdev_mtu_bytes{@} 9000"#,
            r#"roce_netdev_speed_bytes_per_second{@} 50000000000"#,
            r#"roce_netdev_info{@,driver="",operstate="up",dcb="supported"} 1"#,
            r#"roce_pfc_enabled{@,priority="3"} 1"#,
            r#"roce_pfc_enabled{@,priority="4"} 0"#,
            r#"roce_ecn_info{@,np="3,5",rp="3"} 1"#,
            r#"roce_qos_info{@,trust="dscp",pfc="3",dscp_priority="26=3,48=6",prio_tc="",tc_tsa="",tc_bw="",prio_buffer="",buffer_size="",buffer_total="",dcbx="",rdma_cm_tos=""} 1"#,
        ],
    );
    // unknown counters are not exported
    assert!(!text.contains("rx_global_pause"));
    assert!(!text.contains("tx0_packets"));
    if let Some(report) = promtool_check(&text) {
        assert!(report.trim().is_empty(), "promtool: {report}");
    }
}

fn raw_value(name: &str) -> u64 {
    let text = std::fs::read_to_string(fixture("netdev-mlx5/replay/ens1f0np0.txt")).unwrap();
    text.lines()
        .filter_map(|l| l.trim().split_once(": "))
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap()
}

#[test]
fn fixture_tree_without_replay_reads_sysfs_only() {
    let (state, errors, text) = run(&Config::default());
    assert_eq!(state, SourceState::Ok);
    assert!(errors.is_empty(), "{errors:?}");
    has(
        &text,
        r#"roce_netdev_mtu_bytes{netdev="ens1f0np0",device="mlx5_0",port="1"} 9000"#,
    );
    // ethtool and DCB ask the running kernel: off on a fixture tree
    assert!(!text.contains("roce_pfc_pause_frames_total"));
    assert!(text.contains(r#"operstate="up",dcb=""}"#), "{text}");
}

#[test]
fn extra_netdevs_have_empty_device_and_port() {
    let mut config = Config::default();
    config.netdevs.extra = vec!["eth9".into()];
    config.sources.ethtool = Toggle::Off;
    let (_, errors, text) = run(&config);
    assert!(errors.is_empty(), "{errors:?}");
    has(
        &text,
        r#"roce_netdev_mtu_bytes{netdev="eth9",device="",port=""} 1500"#,
    );
    has(
        &text,
        r#"roce_netdev_info{netdev="eth9",device="",port="",driver="",operstate="down",dcb=""} 1"#,
    );
}

#[test]
fn no_netdev_behind_rdma_is_unavailable() {
    let paths = HostPaths {
        sysfs: fixture("netdev-mlx5/sys"),
        procfs: PathBuf::from("/proc"),
    };
    let mut source = NetdevSource::new(&Config::default(), &paths);
    let mut errors = Vec::new();
    assert!(matches!(
        source.sample(&Input::default(), &mut errors).state,
        SourceState::Unavailable(_)
    ));
}

#[test]
fn standard_pause_statistics_win_over_driver_counters() {
    use roce_netdev::{
        FrameDirection, MappedStat, Meaning, Netdev, NetdevSnapshot, PauseStats, StatValue,
    };
    let link = |direction, v| MappedStat {
        meaning: Meaning::LinkPauseFrames { direction },
        value: StatValue::Count(v),
    };
    let netdev = |pause| Netdev {
        name: "eth0".into(),
        stats: vec![link(FrameDirection::Rx, 5), link(FrameDirection::Tx, 6)],
        pause,
        ..Default::default()
    };
    let text_of = |n: Netdev| {
        let snapshot = Snapshot {
            netdev: Some(NetdevSnapshot { netdevs: vec![n] }),
            ..Default::default()
        };
        encode(
            Arc::new(snapshot),
            &BuildInfo::current(Duration::from_secs(5)),
            Format::Text,
        )
    };
    let l = r#"netdev="eth0",device="",port="""#;
    let text = text_of(netdev(Some(PauseStats {
        tx_frames: Some(41),
        rx_frames: Some(42),
    })));
    has_all(
        &text,
        l,
        &[
            r#"roce_link_pause_frames_total{@,direction="rx"} 42"#,
            r#"roce_link_pause_frames_total{@,direction="tx"} 41"#,
        ],
    );
    assert_eq!(
        text.matches("roce_link_pause_frames_total{").count(),
        2,
        "{text}"
    );
    // without standard statistics the driver's counters are the source
    let text = text_of(netdev(None));
    has_all(
        &text,
        l,
        &[r#"roce_link_pause_frames_total{@,direction="rx"} 5"#],
    );
}

/// By default a priority with PFC off and no DSCP mapped to it shows its
/// per-priority counters only once they count, and no ECN enable; the
/// priorities in use (PFC on, a DSCP mapped) show everything, zeros too.
#[test]
fn idle_priorities_are_left_out_by_default() {
    let mut config = Config::default();
    config.netdevs.replay = Some(fixture("netdev-mlx5/replay"));
    let (_, _, lean) = run(&config);
    config.metrics.set(Group::IdlePriorities, true);
    let (_, _, full) = run(&config);
    let series = |text: &str, prefix: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_string)
            .collect()
    };
    let l = r#"netdev="ens1f0np0",device="mlx5_0",port="1""#;
    // priority 3: PFC on in the fixture, 6: a DSCP maps to it; their zeros stay
    for text in [&lean, &full] {
        has(text, &format!(r#"roce_pfc_enabled{{{l},priority="3"}} 1"#));
        has(text, &format!(r#"roce_pfc_enabled{{{l},priority="6"}} 0"#));
        has(
            text,
            &format!(
                r#"roce_netdev_priority_discards_total{{{l},reason="rx_port",priority="3"}} 93"#
            ),
        );
    }
    // a counting priority stays whatever its configuration
    has(
        &lean,
        &format!(
            r#"roce_netdev_priority_discards_total{{{l},reason="rx_no_buffer",priority="7"}} 47"#
        ),
    );
    // an idle one: its PFC enable and its zero counters only with the
    // group
    let idle = format!(r#"roce_pfc_enabled{{{l},priority="4"}} 0"#);
    has(&full, &idle);
    assert!(!lean.contains(&idle), "{lean}");
    // nothing else differs: every lean series is in the full exposition
    let stable = |l: &&str| {
        l.starts_with("roce_")
            && !l.starts_with("roce_collector_duration")
            && !l.starts_with("roce_sample_timestamp")
    };
    for line in lean.lines().filter(stable) {
        assert!(full.lines().any(|f| f == line), "{line} only by default");
    }
    // PFC enable of the priorities in use (3, and 6 which a DSCP maps to);
    // all 8 with the group
    assert_eq!(series(&lean, "roce_pfc_enabled").len(), 2, "{lean}");
    assert_eq!(series(&full, "roce_pfc_enabled").len(), 8, "{full}");
}
