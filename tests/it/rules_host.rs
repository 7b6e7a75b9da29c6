//! The host-configuration rules and judgments: GPUDirect RDMA per GPU (a
//! PHB NIC is beyond NCCL's default GDR level), the DSCP of the host's RoCE
//! traffic against the port's trust mode and PFC priorities (without
//! `expect.pfc_priority`), RDMA devices and ports that went away, the
//! probes' traffic class, and the NCCL advice. Each: a sequence that fires
//! (exact text where it matters) and healthy ones that must not.

use std::sync::Arc;

use roce_exporter::config::{Config, Expectations, ExpectedDevices, RulesConfig};
use roce_exporter::rules::fabric::{dscp_priority, port_traffic_class, roce_dscp, DscpSource};
use roce_exporter::rules::nccl_advice::{advice, NcclAdvice, NcclValue};
use roce_exporter::rules::topology::gdr_per_gpu;
use roce_exporter::rules::{self, Engine, Finding, Severity};
use roce_exporter::snapshot::{Snapshot, SourceState};
use roce_netdev::dcb::{DcbApp, IEEE_8021QAZ_APP_SEL_DSCP};
use roce_netdev::qos::RoceQos;
use roce_netdev::{DcbConfig, DcbOutcome, Netdev};
use roce_rdma::{Device, GidType, LinkLayer, RdmaSnapshot};
use roce_testkit::snapshot::{
    at, gid, mlx5 as device, roce_port, source, NetdevBuilder, SnapshotBuilder,
};

/// One sample of one mlx5 RoCE port behind `netdev`.
fn sample(i: u64, netdev: Netdev) -> Snapshot {
    SnapshotBuilder::new()
        .sample(i)
        .rdma_ok()
        .with_port("mlx5_0", roce_port(1))
        .netdev(netdev)
        .build()
}

fn eval(s: Snapshot, expect: &Expectations) -> Vec<Finding> {
    let h = vec![Arc::new(s)];
    rules::evaluate(&h, &RulesConfig::default(), expect)
}

fn only(findings: Vec<Finding>, rule: &str) -> Vec<Finding> {
    findings.into_iter().filter(|f| f.rule == rule).collect()
}

/// The DSCP APP table mlx5 publishes under DSCP trust: all 64 DSCPs, the
/// default DSCP >> 3 mapping, with `overrides` applied (26 -> 3 on a RoCE
/// fabric).
fn mlx5_dscp_map(overrides: &[(u8, u8)]) -> Vec<DcbApp> {
    (0..64u8)
        .map(|d| DcbApp {
            selector: IEEE_8021QAZ_APP_SEL_DSCP,
            priority: overrides
                .iter()
                .find(|(o, _)| *o == d)
                .map_or(d >> 3, |(_, p)| *p),
            protocol: u16::from(d),
        })
        .collect()
}

fn dcb(pfc: &[u8], apps: Vec<DcbApp>, trust_order: Option<Vec<u8>>) -> DcbConfig {
    DcbConfig {
        pfc_cap: Some(8),
        pfc_enabled: Some(pfc.iter().copied().collect()),
        apps,
        trust_order,
        ..DcbConfig::default()
    }
}

/// mlx5 RoCE netdev as NVIDIA's RoCE guides configure it: trust dscp,
/// DSCP 26 -> priority 3 with PFC and ECN on 3, CNPs with DSCP 48
/// (priority 6 by the default mapping).
fn healthy_netdev() -> Netdev {
    NetdevBuilder::mlx5("ens1np0", "mlx5_0", 1)
        .up()
        .ecn(&[3])
        .qos(RoceQos {
            rdma_cm_tos: None,
            ofed_tclass: None,
            cnp_dscp: Some(48),
            cnp_prio: Some(6),
        })
        .dcb(dcb(
            &[3],
            mlx5_dscp_map(&[(26, 3)]),
            Some(vec![IEEE_8021QAZ_APP_SEL_DSCP]),
        ))
        // Firmware DCBX, and a switch port that agrees.
        .firmware_dcbx(&[3])
        .edit_dcb(|c| c.peer.apps = Some(mlx5_dscp_map(&[(26, 3)])))
        .build()
}

fn tc(nccl_ib_tc: u8) -> Expectations {
    Expectations {
        nccl_ib_tc: Some(nccl_ib_tc),
        ..Expectations::default()
    }
}

// ---------------------------------------------------------------------------
// Item 2: the RoCE DSCP against trust and PFC, without expect.pfc_priority.

#[test]
fn roce_dscp_comes_from_the_config_then_mlnx_ofed_traffic_class_then_nccl_default() {
    let mut n = healthy_netdev();
    let d = roce_dscp(&n, None);
    assert_eq!((d.dscp, d.source, d.tos), (0, DscpSource::NcclDefault, 0));
    assert!(!d.configured());
    // rdma_cm's default ToS does not stand in for NCCL's: NCCL does not
    // use rdma_cm.
    n.qos.rdma_cm_tos = Some(106);
    let d = roce_dscp(&n, None);
    assert_eq!((d.dscp, d.source), (0, DscpSource::NcclDefault));
    // MLNX_OFED `tc/1/traffic_class` holding "Global tclass=106".
    n.qos.ofed_tclass = Some(106);
    let d = roce_dscp(&n, None);
    assert_eq!(
        (d.dscp, d.source, d.tos),
        (26, DscpSource::OfedTrafficClass, 106)
    );
    assert_eq!(
        d.describe(),
        "DSCP 26 (MLNX_OFED tc traffic_class Global tclass=106)"
    );
    let d = roce_dscp(&n, Some(98));
    assert_eq!((d.dscp, d.source), (24, DscpSource::Config));
    assert_eq!(d.describe(), "DSCP 24 (expect.nccl_ib_tc 98)");
}

#[test]
fn dscp_priority_follows_the_app_table_then_the_default_mapping() {
    let full = dcb(&[3], mlx5_dscp_map(&[(26, 3)]), None);
    assert_eq!(dscp_priority(&full, 26), Some((3, "DSCP APP table")));
    assert_eq!(dscp_priority(&full, 0), Some((0, "DSCP APP table")));
    let partial = dcb(
        &[3],
        vec![DcbApp {
            selector: IEEE_8021QAZ_APP_SEL_DSCP,
            priority: 3,
            protocol: 26,
        }],
        None,
    );
    assert_eq!(
        dscp_priority(&partial, 48),
        Some((6, "default DSCP >> 3 mapping"))
    );
    // PCP trust: the DSCP does not choose the priority.
    assert_eq!(dscp_priority(&dcb(&[3], vec![], None), 26), None);
}

#[test]
fn the_roce_dscp_on_a_priority_without_pfc_is_found_without_expect_pfc_priority() {
    // The switch and the jobs use DSCP 26 -> priority 3, but PFC is on 4
    // here: mlx5 lists pause counters only for priority 4, so no pause
    // counter can show it.
    let mut n = healthy_netdev();
    n.dcb = DcbOutcome::Ok(dcb(&[4], mlx5_dscp_map(&[(26, 3)]), None));
    let f = only(
        eval(sample(0, n.clone()), &tc(106)),
        "pfc_priority_mismatch",
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): RoCE traffic with DSCP 26 (expect.nccl_ib_tc 106) lands on priority 3, where PFC is off: RoCE traffic is not lossless"
    );
    assert_eq!(
        f[0].evidence,
        "trust dscp; DSCP 26 -> priority 3 (DSCP APP table); PFC enabled priorities: 4 (pfc_en 0x10); expected the RoCE DSCP on a PFC priority"
    );
    assert!(
        f[0].fix.contains("dcb app add dev ens1np0 dscp-prio 26:4"),
        "{}",
        f[0].fix
    );
    assert_eq!(
        f[0].verify,
        "dcb app show dev ens1np0; dcb pfc show dev ens1np0; mlnx_qos -i ens1np0"
    );

    // The same from MLNX_OFED's global traffic class.
    n.qos.ofed_tclass = Some(106);
    let f = only(
        eval(sample(0, n), &Expectations::default()),
        "pfc_priority_mismatch",
    );
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(f[0]
        .finding
        .contains("DSCP 26 (MLNX_OFED tc traffic_class Global tclass=106)"));
}

#[test]
fn nccl_default_dscp_0_on_priority_0_is_info_that_says_it_assumed() {
    // Nothing configured: NCCL's default traffic class 0 lands on priority
    // 0 (the default mapping), PFC is on 3.
    let f = only(
        eval(sample(0, healthy_netdev()), &Expectations::default()),
        "pfc_priority_mismatch",
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): RoCE traffic with DSCP 0 (assumed: NCCL's default NCCL_IB_TC 0; expect.nccl_ib_tc unset, no MLNX_OFED global traffic class) lands on priority 0, where PFC is off: RoCE traffic is not lossless"
    );
    assert!(f[0].fix.contains("expect.nccl_ib_tc"));
    // With expect.pfc_priority matching PFC, the DSCP still has to land there.
    let expect = Expectations {
        pfc_priority: Some(3),
        nccl_ib_tc: Some(0),
        ..Expectations::default()
    };
    let f = only(
        eval(sample(0, healthy_netdev()), &expect),
        "pfc_priority_mismatch",
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].evidence.ends_with("(3, expect.pfc_priority)"),
        "{}",
        f[0].evidence
    );
}

#[test]
fn a_healthy_roce_qos_configuration_gives_no_finding() {
    for expect in [
        tc(106),
        tc(104),
        Expectations {
            pfc_priority: Some(3),
            nccl_ib_tc: Some(106),
            ..Expectations::default()
        },
    ] {
        let h = vec![
            Arc::new(sample(0, healthy_netdev())),
            Arc::new(sample(1, healthy_netdev())),
        ];
        assert_eq!(
            rules::evaluate(&h, &RulesConfig::default(), &expect),
            vec![],
            "{expect:?}"
        );
    }
    // MLNX_OFED's global traffic class says the same as the config would.
    let mut n = healthy_netdev();
    n.qos.ofed_tclass = Some(106);
    assert_eq!(eval(sample(0, n), &Expectations::default()), vec![]);
    // A port without DCB, or without PFC, is not judged.
    let mut n = healthy_netdev();
    n.dcb = DcbOutcome::Unsupported;
    assert_eq!(eval(sample(0, n), &tc(106)), vec![]);
}

#[test]
fn pcp_trust_under_dscp_marked_roce() {
    let mut n = healthy_netdev();
    n.dcb = DcbOutcome::Ok(dcb(&[3], vec![], None));
    let f = only(eval(sample(0, n.clone()), &tc(106)), "roce_trust_pcp");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): RoCE traffic is DSCP-marked (DSCP 26 (expect.nccl_ib_tc 106)) but the port trusts PCP: untagged RoCE packets are classified to priority 0, not the PFC priority 3"
    );
    assert_eq!(
        f[0].evidence,
        "no DSCP APP entry, so the port trusts PCP; PFC enabled priorities: 3; expected trust dscp for DSCP-marked RoCE"
    );
    // Reported by the kernel's trust table.
    n.dcb = DcbOutcome::Ok(dcb(
        &[3],
        vec![],
        Some(vec![roce_netdev::dcb::DCB_APP_SEL_PCP]),
    ));
    let f = only(eval(sample(0, n.clone()), &tc(106)), "roce_trust_pcp");
    assert!(f[0]
        .evidence
        .starts_with("trust order reported by the kernel: pcp"));
    // Unmarked traffic (nothing configured, NCCL's DSCP 0) is not judged.
    assert_eq!(
        only(
            eval(sample(0, n), &Expectations::default()),
            "roce_trust_pcp"
        ),
        vec![]
    );
}

#[test]
fn cnps_on_the_best_effort_priority() {
    let mut n = healthy_netdev();
    n.qos.cnp_dscp = Some(0);
    let f = only(eval(sample(0, n), &tc(106)), "cnp_priority_best_effort");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].evidence,
        "ecn/roce_np/cnp_dscp 0; trust dscp; DSCP 0 -> priority 0 (DSCP APP table); switch (DCBX peer) DSCP 0 -> priority 0; ecn/roce_np/cnp_802p_prio 6; PFC enabled priorities: 3; expected CNPs on one priority of their own at every hop (commonly DSCP 48, priority 6, strict priority)"
    );
    // NVIDIA's default CNP DSCP 48 (priority 6, no PFC) is healthy; so is
    // a netdev without the mlx5 file.
    assert_eq!(
        only(
            eval(sample(0, healthy_netdev()), &tc(106)),
            "cnp_priority_best_effort"
        ),
        vec![]
    );
    let mut n = healthy_netdev();
    n.qos.cnp_dscp = None;
    assert_eq!(
        only(eval(sample(0, n), &tc(106)), "cnp_priority_best_effort"),
        vec![]
    );
}

// ---------------------------------------------------------------------------
// Item 11: the probes' traffic class.

#[test]
fn probes_carry_the_roce_tos_byte_unchanged() {
    // NCCL_IB_TC=106: DSCP 26 with ECT(0), 0x6a on the wire like NCCL's
    // own packets (an ECN-marking switch marks them, never drops them
    // as not ECN-capable).
    let s = sample(0, healthy_netdev());
    assert_eq!(port_traffic_class(&s, "mlx5_0", 1, Some(106)), 0x6a);
    assert_eq!(port_traffic_class(&s, "mlx5_0", 1, None), 0);
    let mut n = healthy_netdev();
    n.qos.ofed_tclass = Some(106);
    assert_eq!(port_traffic_class(&sample(0, n), "mlx5_0", 1, None), 106);
    // A RoCE port whose netdev was not read: the configured byte still.
    let mut s = sample(0, healthy_netdev());
    s.netdev = None;
    assert_eq!(port_traffic_class(&s, "mlx5_0", 1, Some(106)), 106);
    // InfiniBand: no DSCP.
    if let Some(r) = s.rdma.as_mut() {
        r.devices[0].ports[0].link_layer = Some(LinkLayer::InfiniBand);
    }
    assert_eq!(port_traffic_class(&s, "mlx5_0", 1, Some(106)), 0);
}

// ---------------------------------------------------------------------------
// Item 10: devices and ports that went away.

fn devices_sample(i: u64, devices: Vec<Device>) -> Snapshot {
    let state = if devices.is_empty() {
        SourceState::Unavailable("no RDMA device in /sys/class/infiniband".into())
    } else {
        SourceState::Ok
    };
    SnapshotBuilder::new()
        .sample(i)
        .source("rdma", state)
        .rdma(RdmaSnapshot {
            devices,
            errors: vec![],
        })
        .build()
}

fn two_nics() -> Vec<Device> {
    vec![
        device("mlx5_0", vec![roce_port(1)]),
        device("mlx5_1", vec![roce_port(1)]),
    ]
}

#[test]
fn a_nic_that_falls_off_the_bus_is_critical_until_it_returns() {
    let rules = RulesConfig::default();
    let expect = Expectations::default();
    let mut engine = Engine::new();
    assert_eq!(
        engine.evaluate(&devices_sample(0, two_nics()), &rules, &expect),
        vec![]
    );
    let one = vec![device("mlx5_0", vec![roce_port(1)])];
    let f = engine.evaluate(&devices_sample(1, one.clone()), &rules, &expect);
    // Its series vanish and port_down has nothing to say: only this.
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].rule, "rdma_device_gone");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_1"));
    assert_eq!(
        f[0].evidence,
        "/sys/class/infiniband/mlx5_1 absent; seen since the exporter started; 1 RDMA device(s) present: mlx5_0"
    );
    // Still missing a sample later; every NIC gone is one finding per NIC,
    // not also rdma_device_missing.
    let f = engine.evaluate(&devices_sample(2, vec![]), &rules, &expect);
    let rules_fired: Vec<(&str, Option<&str>)> = f
        .iter()
        .map(|f| (f.rule.as_str(), f.subject.device.as_deref()))
        .collect();
    assert_eq!(
        rules_fired,
        [
            ("rdma_device_gone", Some("mlx5_0")),
            ("rdma_device_gone", Some("mlx5_1"))
        ]
    );
    // Back: the finding clears after the hold time.
    let mut later = devices_sample(20, two_nics());
    later.taken_at = Some(at(20));
    assert_eq!(engine.evaluate(&later, &rules, &expect), vec![]);
}

#[test]
fn a_port_that_goes_away_on_a_present_device() {
    let rules = RulesConfig::default();
    let expect = Expectations::default();
    let mut engine = Engine::new();
    let both = vec![device("mlx5_0", vec![roce_port(1), roce_port(2)])];
    engine.evaluate(&devices_sample(0, both), &rules, &expect);
    let f = engine.evaluate(
        &devices_sample(1, vec![device("mlx5_0", vec![roce_port(1)])]),
        &rules,
        &expect,
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].rule, "rdma_port_gone");
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 2 is gone: the device is still there, its port is no longer reported"
    );
    assert_eq!(
        (f[0].subject.device.as_deref(), f[0].subject.port),
        (Some("mlx5_0"), Some(2))
    );
}

#[test]
fn expected_devices_by_count_or_name() {
    let one = vec![device("mlx5_0", vec![roce_port(1)])];
    let expect = Expectations {
        devices: Some(ExpectedDevices::Count(2)),
        ..Expectations::default()
    };
    let f = only(
        eval(devices_sample(0, one.clone()), &expect),
        "rdma_device_gone",
    );
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].finding,
        "1 RDMA device(s) present where 2 are expected, and the missing ones were never seen since the exporter started"
    );
    let expect = Expectations {
        devices: Some(ExpectedDevices::Names(vec![
            "mlx5_0".into(),
            "mlx5_1".into(),
        ])),
        ..Expectations::default()
    };
    let f = only(eval(devices_sample(0, one), &expect), "rdma_device_gone");
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_1"));
    assert!(f[0].evidence.contains("named in expect.devices"));
    // Met expectations are silent.
    for devices in [
        ExpectedDevices::Count(2),
        ExpectedDevices::Names(vec!["mlx5_1".into()]),
    ] {
        let expect = Expectations {
            devices: Some(devices),
            ..Expectations::default()
        };
        assert_eq!(eval(devices_sample(0, two_nics()), &expect), vec![]);
    }
    // The config takes a count or a list.
    let c = Config::parse("expect: {devices: 8}\n", "t").unwrap();
    assert_eq!(c.expect.devices, Some(ExpectedDevices::Count(8)));
    let c = Config::parse(
        "expect: {devices: [mlx5_0, mlx5_1], nccl_ib_tc: 106}\n",
        "t",
    )
    .unwrap();
    assert_eq!(
        c.expect.devices,
        Some(ExpectedDevices::Names(vec![
            "mlx5_0".into(),
            "mlx5_1".into()
        ]))
    );
    assert_eq!(c.expect.nccl_ib_tc, Some(106));
    assert!(Config::parse("expect: {devices: 0}\n", "t").is_err());
    assert!(Config::parse("expect: {nccl_ib_tc: 256}\n", "t").is_err());
}

#[test]
fn devices_are_not_judged_when_the_rdma_source_did_not_run() {
    let rules = RulesConfig::default();
    let expect = Expectations::default();
    let mut engine = Engine::new();
    engine.evaluate(&devices_sample(0, two_nics()), &rules, &expect);
    let mut failed = devices_sample(1, vec![]);
    failed.sources = vec![source("rdma", SourceState::Failed("EACCES".into()))];
    failed.rdma = None;
    let f = engine.evaluate(&failed, &rules, &expect);
    assert!(
        f.iter().all(|f| !f.rule.as_str().ends_with("_gone")),
        "{f:#?}"
    );
    // A reload forgets what was seen (a device now excluded is not gone).
    engine.forget_devices();
    let f = engine.evaluate(
        &devices_sample(2, vec![device("mlx5_0", vec![roce_port(1)])]),
        &rules,
        &expect,
    );
    assert!(f.iter().all(|f| f.rule != "rdma_device_gone"), "{f:#?}");
}

#[test]
fn the_remembered_devices_are_bounded() {
    let mut h = rules::History::default();
    for i in 0..300u64 {
        let d = device(&format!("mlx5_{i}"), vec![roce_port(1)]);
        h.push(&devices_sample(i, vec![d]));
    }
    assert_eq!(h.seen().len(), rules::history::SEEN_MAX_DEVICES);
}

// ---------------------------------------------------------------------------
// Item 12: NCCL advice.

fn advised(s: &Snapshot, expect: &Expectations, name: &str) -> Option<NcclAdvice> {
    advice(s, expect).into_iter().find(|a| a.name == name)
}

#[test]
fn gid_index_default_is_right_with_an_ipv4_rocev2_gid() {
    let s = sample(0, healthy_netdev());
    let a = advised(&s, &tc(106), "NCCL_IB_GID_INDEX").unwrap();
    assert_eq!(a.value, NcclValue::DefaultIsRight);
    assert_eq!(
        a.why,
        "NCCL 2.21 and later pick the RoCE v2 GID with an IPv4 address themselves (NCCL_IB_ROCE_VERSION_NUM=2, NCCL_IB_ADDR_FAMILY=AF_INET by default): index 3 on every active RoCE port; NCCL before 2.21 takes index 0 by default: there, export NCCL_IB_GID_INDEX=3"
    );
    // IPv6 only: the address family is what NCCL's default gets wrong.
    let mut s = sample(0, healthy_netdev());
    if let Some(r) = s.rdma.as_mut() {
        r.devices[0].ports[0].gids = vec![
            gid(0, "fe80::1", GidType::IbRoceV1),
            gid(1, "fe80::1", GidType::RoceV2),
            gid(2, "2001:db8::1", GidType::IbRoceV1),
            gid(3, "2001:db8::1", GidType::RoceV2),
        ];
    }
    assert_eq!(advised(&s, &tc(106), "NCCL_IB_GID_INDEX"), None);
    let a = advised(&s, &tc(106), "NCCL_IB_ADDR_FAMILY").unwrap();
    assert_eq!(a.value, NcclValue::Set("AF_INET6".into()));
}

#[test]
fn ib_tc_is_the_configured_dscp_never_one_picked_from_the_full_map() {
    // mlx5 under DSCP trust maps 24..31 to priority 3: no single DSCP to
    // pick; the host's configured one is the answer.
    let s = sample(0, healthy_netdev());
    let a = advised(&s, &tc(106), "NCCL_IB_TC").unwrap();
    assert_eq!(a.value, NcclValue::Set("106".into()));
    assert_eq!(
        a.why,
        "NCCL's default traffic class 0 puts RoCE on DSCP 0, which lands on a priority without PFC on ens1np0; this host is configured for DSCP 26 (expect.nccl_ib_tc 106), which lands on PFC priority 3"
    );
    let a = advised(&s, &Expectations::default(), "NCCL_IB_TC").unwrap();
    assert_eq!(a.value, NcclValue::Choose("<DSCP << 2>".into()));
    assert!(
        a.why
            .contains("on ens1np0 DSCP 24, 25, 26, 27, 28, 29, 30, 31 reach PFC priority 3"),
        "{}",
        a.why
    );
    // DSCP 0 on a PFC priority: NCCL's default is right.
    let mut n = healthy_netdev();
    n.dcb = DcbOutcome::Ok(dcb(&[0, 3], mlx5_dscp_map(&[(26, 3)]), None));
    let a = advised(&sample(0, n), &Expectations::default(), "NCCL_IB_TC").unwrap();
    assert_eq!(a.value, NcclValue::DefaultIsRight);
    // PCP trust: the DSCP does not choose the priority, nothing to advise.
    let mut n = healthy_netdev();
    n.dcb = DcbOutcome::Ok(dcb(&[3], vec![], None));
    assert_eq!(advised(&sample(0, n), &tc(106), "NCCL_IB_TC"), None);
}

// ---------------------------------------------------------------------------
// Item 1: GPUDirect RDMA per GPU.

mod gdr {
    use super::*;
    use crate::support::{gpudirect_ready as ready, h100, pci as addr};
    use roce_topology::{GpuNicPath, Nic, PathClass, TopologySnapshot};

    /// GPU 0 with mlx5_0 at `class`, GPU 1 with mlx5_1 under its switch.
    fn topo(class: PathClass) -> TopologySnapshot {
        let nic = |name: &str, a: &str| Nic {
            name: name.into(),
            address: addr(a),
            numa_node: Some(0),
        };
        let path = |gpu: usize, nic: &str, class| GpuNicPath {
            gpu,
            nic: nic.into(),
            class,
            bridges: vec![],
        };
        TopologySnapshot {
            gpus: vec![h100(0, "0000:03:00.0"), h100(1, "0000:13:00.0")],
            nics: vec![nic("mlx5_0", "0000:00:05.0"), nic("mlx5_1", "0000:14:00.0")],
            paths: vec![
                path(0, "mlx5_0", class),
                path(0, "mlx5_1", PathClass::Sys),
                path(1, "mlx5_0", PathClass::Sys),
                path(1, "mlx5_1", PathClass::Pix),
            ],
            gpudirect: Some(ready()),
            ..TopologySnapshot::default()
        }
    }

    fn snap(t: TopologySnapshot) -> Snapshot {
        SnapshotBuilder::new().topology(t).build()
    }

    #[test]
    fn a_gpu_whose_nearest_nic_is_phb_runs_without_gpudirect() {
        let t = topo(PathClass::Phb);
        let v = gdr_per_gpu(&t);
        assert_eq!(
            v.iter().map(|g| (g.gpu, g.used())).collect::<Vec<_>>(),
            [(0, false), (1, true)],
            "drivers ready, yet GPU 0 is PHB from its NIC"
        );
        let f = only(
            eval(snap(t), &Expectations::default()),
            "gpudirect_not_used",
        );
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(f[0].severity, Severity::Warning);
        assert_eq!(f[0].subject.gpu, Some(0));
        assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_0"));
        assert_eq!(
            f[0].finding,
            "GPU 0 runs without GPUDirect RDMA: its nearest RDMA NIC (mlx5_0) is PHB away (through the CPU's host bridge), beyond NCCL's default NCCL_NET_GDR_LEVEL PXB, so its network traffic is staged through host memory"
        );
        assert_eq!(
            f[0].evidence,
            "GPU 0 (0000:03:00.0) -> mlx5_0: PHB; NCCL uses GPUDirect RDMA up to PXB by default; GPUDirect RDMA drivers ready"
        );
        let a = advised(
            &snap(topo(PathClass::Phb)),
            &Expectations::default(),
            "NCCL_NET_GDR_LEVEL",
        )
        .unwrap();
        assert_eq!(a.value, NcclValue::Choose("PHB, if measured faster".into()));
    }

    #[test]
    fn pix_and_pxb_are_within_nccls_default_and_node_sys_are_gpu_nic_path_far() {
        for class in [PathClass::Pix, PathClass::Pxb] {
            let f = eval(snap(topo(class)), &Expectations::default());
            assert_eq!(f, vec![], "{class:?}");
            assert!(gdr_per_gpu(&topo(class)).iter().all(|g| g.used()));
            let a = advised(
                &snap(topo(class)),
                &Expectations::default(),
                "NCCL_NET_GDR_LEVEL",
            )
            .unwrap();
            assert_eq!(a.value, NcclValue::DefaultIsRight);
        }
        for class in [PathClass::Node, PathClass::Sys] {
            let f = eval(snap(topo(class)), &Expectations::default());
            let fired: Vec<&str> = f.iter().map(|f| f.rule.as_str()).collect();
            assert_eq!(
                fired,
                ["gpu_nic_path_far"],
                "{class:?}: one finding per condition"
            );
        }
    }
}
