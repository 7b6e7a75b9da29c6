//! `roce_exporter check` over trees that show the host-configuration
//! errors: a GPU whose nearest NIC is PHB (GPUDirect RDMA not used though
//! the drivers are ready), and the demo node without its expectations,
//! where MLNX_OFED's global traffic class gives the RoCE DSCP and
//! ens8np0's PFC priority does not match it.

use crate::support::{check, check_demo_tree};
use std::process::Output;

fn text(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

#[test]
fn phb_gpus_are_not_gpudirect_ready() {
    // Two GPUs and one NIC flat on a VM's root bus (PHB), nvidia-peermem
    // loaded: the drivers are ready, NCCL still stages through host memory.
    let out = check(&[
        "--path.sysfs",
        "crates/topology/tests/fixtures/pci-cloud-vm/sys",
        "--path.procfs",
        "crates/topology/tests/fixtures/pci-gpudirect/peermem/proc",
    ]);
    let t = text(&out);
    assert!(t.contains("[ok]   nvidia_peermem: loaded"), "{t}");
    assert!(!t.contains("[ok]   verdict"), "{t}");
    for gpu in [0, 1] {
        assert!(
            t.contains(&format!(
                "[warn] verdict GPU {gpu} -> mlx5_0 PHB: GPU {gpu} runs without GPUDirect RDMA"
            )),
            "{t}"
        );
        assert!(
            t.contains(&format!(
                "[warning] gpudirect_not_used: GPU {gpu} runs without GPUDirect RDMA"
            )),
            "{t}"
        );
    }
    assert!(
        t.contains("NCCL_NET_GDR_LEVEL=PHB, if measured faster (choose)"),
        "{t}"
    );
}

#[test]
fn demo_without_expectations_finds_the_priority_mismatch_from_the_roce_dscp() {
    let dir = std::env::temp_dir().join(format!("roce-check-host-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("demo-no-expectations.yml");
    std::fs::write(
        &config,
        "netdevs: {replay: examples/demo-gpu-node/netdev-replay}\n",
    )
    .unwrap();
    let out = check_demo_tree(config.to_str().unwrap(), &[]);
    let t = text(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1), "{t}");
    // Without the demo's LLDP neighbours the switch side is unknown: mlx5
    // has no DCBX peer view (info, once for the host).
    assert!(t.contains("Findings: 1 critical, 0 warning, 1 info"), "{t}");
    assert!(
        t.contains(
            "[info] switch_view_unavailable: this host: the mlx5 driver gives no DCBX peer view"
        ),
        "{t}"
    );
    assert!(
        t.contains("[critical] pfc_priority_mismatch: mlx5_7 port 1 (ens8np0): RoCE traffic with DSCP 26 (MLNX_OFED tc traffic_class Global tclass=106) lands on priority 3, where PFC is off: RoCE traffic is not lossless"),
        "{t}"
    );
    assert!(
        t.contains("Measured: trust dscp; DSCP 26 -> priority 3 (DSCP APP table); PFC enabled priorities: 4 (pfc_en 0x10); expected the RoCE DSCP on a PFC priority"),
        "{t}"
    );
    // The DSCP the host is configured for, not one picked from the map.
    assert!(t.contains("export NCCL_IB_TC=106"), "{t}");
}

#[test]
fn the_demo_node_has_only_its_known_faults() {
    let out = check_demo_tree("examples/demo-gpu-node/demo.yml", &[]);
    let t = text(&out);
    // ens8np0's PFC on priority 4 (against the expected 3 and its switch
    // port's 3), ens4np0's switch port, as its LLDP frames say, on other PFC
    // priorities and DSCP map: healthy GPUs (PIX), ECN, CNPs (DSCP 48,
    // priority 6), ETS, buffers, RoCE DSCP, cabling and devices give nothing
    // else; the switch view of mlx5 comes from LLDP, so none is missing.
    assert!(t.contains("Findings: 4 critical, 0 warning, 0 info"), "{t}");
    assert!(
        t.contains("[critical] switch_pfc_mismatch: mlx5_7 port 1 (ens8np0)"),
        "{t}"
    );
    assert!(!t.contains("switch_view_unavailable"), "{t}");
    assert!(
        t.contains("[critical] switch_pfc_mismatch: mlx5_3 port 1 (ens4np0)"),
        "{t}"
    );
    assert!(
        t.contains("[critical] switch_dscp_mismatch: mlx5_3 port 1 (ens4np0)"),
        "{t}"
    );
    assert_eq!(t.matches("[ok]   verdict GPU").count(), 8, "{t}");
}
