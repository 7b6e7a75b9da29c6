//! The physical-layer source end to end: a sysfs tree with a NIC function
//! and the root port above it (AER files as `drivers/pci/pcie/aer.c`
//! prints them) and carrier
//! counters, FEC, module EEPROM and devlink replies replayed from
//! `crates/netdev/tests/fixtures/phys` (the `netdevs.replay` path for trees
//! that are not the running kernel), through the exposition. Exact lines of
//! the Prometheus text.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use roce_exporter::config::Config;
use roce_exporter::exposition::{encode, BuildInfo, Format};
use roce_exporter::host::HostPaths;
use roce_exporter::snapshot::{Snapshot, SourceState};
use roce_exporter::sources::netdev::NetdevSource;
use roce_exporter::sources::phys::PhysSource;
use roce_exporter::sources::{Input, Part, Source};

fn replay() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/netdev/tests/fixtures/phys")
}

fn tree(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-phys-e2e-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let nic = dir.join("devices/pci0000:16/0000:16:01.0/0000:17:00.0");
    std::fs::create_dir_all(&nic).unwrap();
    let w = |p: &Path, t: &str| std::fs::write(p, t).unwrap();
    w(
        &nic.join("aer_dev_correctable"),
        "RxErr 0\nBadTLP 3\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 4\n",
    );
    w(
        &nic.join("aer_dev_nonfatal"),
        "Undefined 0\nDLP 0\nTOTAL_ERR_NONFATAL 0\n",
    );
    // The root port above the NIC received the NIC's writes with errors:
    // the kernel counts them on the port, not on the NIC.
    let port = dir.join("devices/pci0000:16/0000:16:01.0");
    w(
        &port.join("aer_dev_correctable"),
        "RxErr 17\nBadTLP 0\nBadDLLP 2\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 19\n",
    );
    w(
        &port.join("aer_dev_nonfatal"),
        "Undefined 0\nDLP 0\nTOTAL_ERR_NONFATAL 0\n",
    );
    for n in ["ens1np0", "ens2np0"] {
        let net = dir.join("class/net").join(n);
        std::fs::create_dir_all(&net).unwrap();
        w(&net.join("mtu"), "9000\n");
        w(&net.join("carrier_changes"), "5\n");
        // ens2np0 as a kernel before 4.16 shows it: carrier_changes only
        if n == "ens1np0" {
            w(&net.join("carrier_up_count"), "3\n");
            w(&net.join("carrier_down_count"), "2\n");
        }
    }
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:16/0000:16:01.0/0000:17:00.0",
        dir.join("class/net/ens1np0/device"),
    )
    .unwrap();
    dir
}

fn rdma() -> roce_rdma::RdmaSnapshot {
    roce_rdma::RdmaSnapshot {
        devices: vec![roce_rdma::Device {
            name: "mlx5_0".into(),
            ports: vec![roce_rdma::Port {
                number: 1,
                netdev: Some("ens1np0".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        errors: vec![],
    }
}

fn has(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "missing {line:?} in:\n{text}"
    );
}

/// The netdev and phys parts of the replayed tree `tag`.
fn replayed_snapshot(tag: &str) -> Snapshot {
    let dir = tree(tag);
    let mut config = Config::default();
    config.netdevs.replay = Some(replay());
    config.netdevs.extra = vec!["ens2np0".into()];
    let paths = HostPaths {
        sysfs: dir.clone(),
        procfs: PathBuf::from("/proc"),
    };
    let input = Input {
        rdma: Some(Arc::new(rdma())),
        previous: None,
    };
    let mut errors = Vec::new();
    let mut phys = PhysSource::new(&config, &paths);
    let reading = phys.sample(&input, &mut errors);
    assert_eq!(reading.state, SourceState::Ok);
    let Some(Part::Phys(part)) = reading.part else {
        panic!("no phys part")
    };
    let mut netdev = NetdevSource::new(&config, &paths);
    let Some(Part::Netdev(nd)) = netdev.sample(&input, &mut errors).part else {
        panic!("no netdev part")
    };
    assert!(errors.is_empty(), "{errors:?}");
    let _ = std::fs::remove_dir_all(&dir);
    Snapshot {
        netdev: Some(nd),
        phys: Some(part),
        ..Default::default()
    }
}

#[test]
fn replayed_physical_layer_exposes_every_family() {
    let snapshot = replayed_snapshot("all");
    // Every group on: the per-lane, threshold and AER kind detail too.
    let mut build = BuildInfo::current(Duration::from_secs(5));
    build.groups = roce_exporter::exposition::groups::Groups::all();
    let text = encode(Arc::new(snapshot), &build, Format::Text);
    let l = r#"netdev="ens1np0",device="mlx5_0",port="1""#;
    let x = r#"netdev="ens2np0",device="",port="""#;
    // the directions where the kernel counts them, else their sum
    has(
        &text,
        &format!(r#"roce_netdev_carrier_transitions_total{{{l},direction="down"}} 2"#),
    );
    assert!(
        !text.contains(&format!("roce_netdev_carrier_changes_total{{{l}}}")),
        "{text}"
    );
    has(
        &text,
        &format!("roce_netdev_carrier_changes_total{{{x}}} 5"),
    );
    has(&text, &format!(r#"roce_fec_mode_info{{{l},mode="rs"}} 1"#));
    has(&text, &format!(r#"roce_fec_mode_info{{{x},mode="off"}} 1"#));
    has(
        &text,
        &format!(r#"roce_fec_corrected_blocks_total{{{l},lane=""}} 123456789"#),
    );
    has(
        &text,
        &format!(r#"roce_fec_uncorrectable_blocks_total{{{l},lane=""}} 42"#),
    );
    has(
        &text,
        &format!(r#"roce_fec_corrected_bits_total{{{l},lane="2"}} 246913581"#),
    );
    // ens2np0's driver sets no FEC statistics: no series, not 0.
    assert!(!text.contains(&format!("roce_fec_corrected_blocks_total{{{x}")));
    has(
        &text,
        &format!(
            r#"roce_module_info{{{l},type="QSFP28",standard="sff8636",vendor="Mellanox",part="MMA1B00-C100D",revision="A2",serial="MT2031FT04567"}} 1"#
        ),
    );
    has(
        &text,
        &format!("roce_module_temperature_celsius{{{l}}} 35.5"),
    );
    has(
        &text,
        &format!(r#"roce_module_rx_power_watts{{{l},lane="3"}} 0.00004"#),
    );
    has(
        &text,
        &format!(
            r#"roce_module_threshold{{{l},monitor="rx_power_watts",level="low_warning"}} 0.0001"#
        ),
    );
    has(
        &text,
        &format!(r#"roce_module_tx_bias_amperes{{{x},lane="7"}} 0.01"#),
    );
    has(
        &text,
        r#"roce_pcie_aer_errors_total{pci="0000:17:00.0",role="nic",netdev="ens1np0",severity="correctable"} 4"#,
    );
    has(
        &text,
        r#"roce_pcie_aer_error_kinds_total{pci="0000:17:00.0",role="nic",netdev="ens1np0",severity="correctable",kind="BadTLP"} 3"#,
    );
    // The NIC's upstream port, once, with what it serves; its kinds with
    // the pcie_aer_kinds group.
    has(
        &text,
        r#"roce_pcie_bridge_aer_errors_total{pci="0000:16:01.0",link="nic",netdevs="ens1np0",gpus="",severity="correctable"} 19"#,
    );
    has(
        &text,
        r#"roce_pcie_bridge_aer_errors_total{pci="0000:16:01.0",link="nic",netdevs="ens1np0",gpus="",severity="nonfatal"} 0"#,
    );
    has(
        &text,
        r#"roce_pcie_aer_error_kinds_total{pci="0000:16:01.0",role="bridge",netdev="",severity="correctable",kind="RxErr"} 17"#,
    );
    // No aer_dev_fatal file: absent, not 0.
    assert!(!text.contains(r#"severity="fatal""#));
    has(
        &text,
        r#"roce_devlink_reporter_healthy{netdev="ens1np0",pci="0000:17:00.0",reporter="tx",devlink_port="65535"} 0"#,
    );
    has(
        &text,
        r#"roce_devlink_reporter_errors_total{netdev="ens1np0",pci="0000:17:00.0",reporter="tx",devlink_port="65535"} 3"#,
    );
    has(
        &text,
        r#"roce_devlink_reporter_recoveries_total{netdev="ens1np0",pci="0000:17:00.0",reporter="fw_fatal",devlink_port=""} 1"#,
    );
}

/// By default a zero AER kind, per-lane FEC counters, each lane's Tx bias
/// and Tx power and the thresholds other than Rx power's stay out; the
/// totals, a kind that counted, each lane's Rx power and its thresholds
/// stay in.
#[test]
fn default_exposition_keeps_totals_and_leaves_out_zero_detail() {
    let snapshot = replayed_snapshot("default");
    let text = encode(
        Arc::new(snapshot),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    );
    let l = r#"netdev="ens1np0",device="mlx5_0",port="1""#;
    has(
        &text,
        &format!(r#"roce_fec_corrected_bits_total{{{l},lane=""}} 987654321"#),
    );
    assert!(!text.contains(&format!(r#"roce_fec_corrected_bits_total{{{l},lane="2"}}"#)));
    has(
        &text,
        &format!(r#"roce_module_rx_power_watts{{{l},lane="3"}} 0.00004"#),
    );
    assert!(!text.contains("roce_module_tx_bias_amperes{"));
    assert!(!text.contains("roce_module_tx_power_watts{"));
    assert!(text.contains(r#"monitor="rx_power_watts",level="low_alarm"}"#));
    assert!(!text.contains(r#"monitor="temperature_celsius""#));
    let aer = r#"pci="0000:17:00.0",role="nic",netdev="ens1np0""#;
    has(
        &text,
        &format!(r#"roce_pcie_aer_errors_total{{{aer},severity="correctable"}} 4"#),
    );
    has(
        &text,
        &format!(
            r#"roce_pcie_aer_error_kinds_total{{{aer},severity="correctable",kind="BadTLP"}} 3"#
        ),
    );
    assert!(
        !text.contains(r#"role="nic",netdev="ens1np0",severity="correctable",kind="RxErr""#),
        "zero kinds stay out:\n{text}"
    );
    // A bridge port: one series per severity, no kinds, even those that
    // counted.
    has(
        &text,
        r#"roce_pcie_bridge_aer_errors_total{pci="0000:16:01.0",link="nic",netdevs="ens1np0",gpus="",severity="correctable"} 19"#,
    );
    assert!(!text.contains(r#"role="bridge""#), "{text}");
}
