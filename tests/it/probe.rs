//! The probe families: a snapshot carrying known probe results encodes to
//! exactly these lines (text 0.0.4), and the probe source stays disabled
//! when the paths are not this host's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::snapshot::Snapshot;
use roce_probe::{Failure, Histogram, ProbeResults, ProbeState, ProbeTarget, Reason, TargetStats};

fn results() -> ProbeResults {
    let mut rtt = Histogram::default();
    rtt.observe(Duration::from_micros(3));
    rtt.observe(Duration::from_micros(40));
    rtt.observe(Duration::from_millis(2));
    let ok = TargetStats {
        requests: 4,
        successes: 3,
        failures: BTreeMap::from([("wc_retry_exc_err", 1)]),
        rtt,
        last_rtt: Some(Duration::from_millis(2)),
        last_success: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        last_failure: None,
        last_ok: Some(true),
        sessions_opened: 2,
    };
    let bad = TargetStats {
        requests: 2,
        successes: 0,
        failures: BTreeMap::from([("gid_index", 2)]),
        last_failure: Some(Failure::new(
            Reason::GidIndex,
            "GID index 77 of mlx5_1/1 is empty",
        )),
        last_ok: Some(false),
        ..TargetStats::default()
    };
    ProbeResults {
        state: ProbeState::Running,
        targets: vec![
            (ProbeTarget::loopback("mlx5_0", 1, 3), ok),
            (ProbeTarget::loopback("mlx5_1", 1, 77), bad),
        ],
    }
}

fn probe_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("roce_probe_") || l.starts_with("# TYPE roce_probe_"))
        .collect()
}

#[test]
fn probe_families_encode_exactly() {
    let snapshot = Snapshot {
        sequence: 1,
        taken_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_005)),
        probes: Some(results()),
        ..Snapshot::default()
    };
    let text = exposition::encode(
        Arc::new(snapshot),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    );
    let got = probe_lines(&text);
    let want = [
        "# TYPE roce_probe_rtt_seconds histogram",
        r#"roce_probe_rtt_seconds_sum{device="mlx5_0",port="1",gid_index="3",op="write_send"} 0.002043"#,
        r#"roce_probe_rtt_seconds_count{device="mlx5_0",port="1",gid_index="3",op="write_send"} 3"#,
        r#"roce_probe_rtt_seconds_bucket{device="mlx5_0",port="1",gid_index="3",op="write_send",le="1e-06"} 0"#,
    ];
    for w in want {
        assert!(got.contains(&w), "missing {w}\n{}", got.join("\n"));
    }
    let bucket = |le: &str, dev: &str, gid: &str| {
        got.iter()
            .find(|l| {
                l.starts_with("roce_probe_rtt_seconds_bucket{")
                    && l.contains(&format!("le=\"{le}\""))
                    && l.contains(&format!("device=\"{dev}\""))
                    && l.contains(&format!("gid_index=\"{gid}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_string)
    };
    assert_eq!(bucket("2.5e-06", "mlx5_0", "3").as_deref(), Some("0"));
    assert_eq!(bucket("5e-06", "mlx5_0", "3").as_deref(), Some("1"));
    assert_eq!(bucket("5e-05", "mlx5_0", "3").as_deref(), Some("2"));
    assert_eq!(bucket("0.0025", "mlx5_0", "3").as_deref(), Some("3"));
    assert_eq!(bucket("+Inf", "mlx5_0", "3").as_deref(), Some("3"));
    assert_eq!(bucket("+Inf", "mlx5_1", "77").as_deref(), Some("0"));
    for w in [
        "# TYPE roce_probe_requests_total counter",
        r#"roce_probe_requests_total{device="mlx5_0",port="1"} 4"#,
        r#"roce_probe_requests_total{device="mlx5_1",port="1"} 2"#,
        "# TYPE roce_probe_failures_total counter",
        r#"roce_probe_failures_total{device="mlx5_0",port="1",reason="wc_retry_exc_err"} 1"#,
        r#"roce_probe_failures_total{device="mlx5_1",port="1",reason="gid_index"} 2"#,
        "# TYPE roce_probe_success gauge",
        r#"roce_probe_success{device="mlx5_0",port="1"} 1"#,
        r#"roce_probe_success{device="mlx5_1",port="1"} 0"#,
        "# TYPE roce_probe_last_success_timestamp_seconds gauge",
        r#"roce_probe_last_success_timestamp_seconds{device="mlx5_0",port="1"} 1700000000.0"#,
    ] {
        assert!(got.contains(&w), "missing {w}\n{}", got.join("\n"));
    }
    // no success yet: no timestamp for mlx5_1
    assert!(!got
        .iter()
        .any(|l| l.starts_with("roce_probe_last_success_timestamp_seconds{device=\"mlx5_1\"")));
    // 16 bounds + +Inf per target
    assert_eq!(
        got.iter()
            .filter(|l| l.starts_with("roce_probe_rtt_seconds_bucket{"))
            .count(),
        2 * 17
    );
}

#[test]
fn no_probe_results_no_probe_families() {
    let text = exposition::encode(
        Arc::new(Snapshot::default()),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    );
    assert!(probe_lines(&text).is_empty());
}

fn rxe_port(up: bool, gids: &[(u32, &str, roce_rdma::GidType)]) -> roce_rdma::Port {
    use roce_rdma::{LinkLayer, PhysState, PortState};
    roce_rdma::Port {
        number: 1,
        state: Some(if up {
            PortState::Active
        } else {
            PortState::Down
        }),
        phys_state: Some(if up {
            PhysState::LinkUp
        } else {
            PhysState::Disabled
        }),
        link_layer: Some(LinkLayer::Ethernet),
        gids: gids
            .iter()
            .map(|(i, g, t)| roce_rdma::Gid {
                index: *i,
                gid: g.parse().unwrap(),
                gid_type: t.clone(),
                netdev: Some("eth0".into()),
            })
            .collect(),
        ..Default::default()
    }
}

fn rdma(ports: Vec<(&str, roce_rdma::Port)>) -> roce_rdma::RdmaSnapshot {
    roce_rdma::RdmaSnapshot {
        devices: ports
            .into_iter()
            .map(|(name, p)| roce_rdma::Device {
                name: name.into(),
                ports: vec![p],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn targets_follow_active_ports_with_the_nccl_gid() {
    use roce_exporter::config::GidIndex;
    use roce_exporter::sources::probe::TargetChooser;
    use roce_rdma::GidType::{IbRoceV1, RoceV2};
    // rxe as the VM has it: link-local at 0, IPv4-mapped at 1 (both v2)
    let rxe = [
        (0, "fe80::5054:ff:fe00:1", RoceV2),
        (1, "::ffff:10.0.2.15", RoceV2),
    ];
    // mlx5 style: v1 and v2 pairs, IPv4-mapped v2 at 3
    let mlx = [
        (0, "fe80::1", IbRoceV1),
        (1, "fe80::1", RoceV2),
        (2, "::ffff:10.0.0.1", IbRoceV1),
        (3, "::ffff:10.0.0.1", RoceV2),
    ];
    let mut auto = TargetChooser::new(GidIndex::Auto);
    let t = auto.choose(&rdma(vec![
        ("mlx5_0", rxe_port(true, &mlx)),
        ("rxe0", rxe_port(true, &rxe)),
        ("rxe1", rxe_port(false, &rxe)),
        // active but only link-local GIDs: nothing NCCL would use
        ("rxe2", rxe_port(true, &rxe[..1])),
    ]));
    assert_eq!(
        t,
        vec![
            ProbeTarget::loopback("mlx5_0", 1, 3),
            ProbeTarget::loopback("rxe0", 1, 1)
        ]
    );
    // rxe0 goes down (its GID may vanish too): still probed, to say port_down
    let t = auto.choose(&rdma(vec![("rxe0", rxe_port(false, &[]))]));
    assert_eq!(t, vec![ProbeTarget::loopback("rxe0", 1, 1)]);
    // a device that disappears is forgotten
    assert!(auto.choose(&rdma(vec![])).is_empty());
    assert!(auto
        .choose(&rdma(vec![("rxe0", rxe_port(false, &rxe))]))
        .is_empty());
    // a configured index is used as is, populated or not
    let mut fixed = TargetChooser::new(GidIndex::Index(77));
    assert_eq!(
        fixed.choose(&rdma(vec![("rxe0", rxe_port(true, &rxe))])),
        vec![ProbeTarget::loopback("rxe0", 1, 77)]
    );
}
