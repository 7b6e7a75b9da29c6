//! The QoS rules that need ETS, buffers and the switch's DCBX view, and
//! the CNP classification verdict: each fires on a realistic
//! misconfiguration and stays silent on the configuration NVIDIA's RoCE
//! guides give an mlx5 port (trust dscp, DSCP 26 -> priority 3 with PFC
//! and DCQCN, priority 3 alone in TC 3 with an ETS share, CNPs DSCP 48 /
//! priority 6 in a strict TC). The switch's DCBX view comes only from a
//! driver with peer callbacks (qede's `qed_dcbnl_ieee_peer_getpfc`, ...):
//! mlx5 reports firmware DCBX as 0x0c and never a peer
//! (`drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c`).

use std::sync::Arc;

use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::rules::{self, Finding, Severity};
use roce_exporter::snapshot::Snapshot;
use roce_host::Priorities;
use roce_netdev::dcb::{
    Buffers, DcbPeer, Ets, DCB_CAP_DCBX_VER_CEE, DCB_CAP_DCBX_VER_IEEE, TSA_ETS, TSA_STRICT,
};
use roce_netdev::qos::RoceQos;
use roce_netdev::{DcbConfig, DcbOutcome, Netdev, RdmaPortRef};
use roce_testkit::snapshot::{dscp_app as dscp, NetdevBuilder, SnapshotBuilder};

fn sample(netdev: Netdev) -> Snapshot {
    SnapshotBuilder::new()
        .rdma_ok()
        .port("mlx5_0", 1)
        .netdev(netdev)
        .build()
}

fn eval(n: Netdev, rule: &str) -> Vec<Finding> {
    let h = vec![Arc::new(sample(n))];
    rules::evaluate(&h, &RulesConfig::default(), &Expectations::default())
        .into_iter()
        .filter(|f| f.rule == rule)
        .collect()
}

fn config(n: &mut Netdev) -> &mut DcbConfig {
    match &mut n.dcb {
        DcbOutcome::Ok(c) => c,
        _ => unreachable!(),
    }
}

/// The healthy configuration on a driver that reports the switch's DCBX
/// view (qede: `ieee_peer_getpfc`, `peer_getapptable`), firmware DCBX with
/// a switch that agrees.
fn healthy() -> Netdev {
    let e = TSA_ETS;
    NetdevBuilder::new("ens1np0")
        .rdma("mlx5_0", 1)
        .mtu(9000)
        .driver("qede")
        .ecn(&[3])
        .qos(RoceQos {
            rdma_cm_tos: Some(106),
            ofed_tclass: None,
            cnp_dscp: Some(48),
            cnp_prio: Some(6),
        })
        .pfc(&[3])
        .dscp(26, 3)
        .dscp(48, 6)
        .trust_dscp()
        .firmware_dcbx(&[3])
        .edit_dcb(|c| {
            c.ets = Some(Ets {
                willing: false,
                ets_cap: 8,
                tc_tx_bw: [50, 0, 0, 50, 0, 0, 0, 0],
                tc_tsa: [e, e, e, e, e, e, TSA_STRICT, e],
                prio_tc: [0, 0, 0, 3, 0, 0, 6, 0],
            });
            c.buffers = Some(Buffers {
                prio2buffer: [0, 0, 0, 1, 0, 0, 0, 0],
                buffer_size: [130_944, 130_944, 0, 0, 0, 0, 0, 0],
                total_size: 262_144,
            });
            c.peer.apps = Some(vec![dscp(26, 3), dscp(48, 6)]);
            c.peer.prio_tc = Some([0, 0, 0, 3, 0, 0, 6, 0]);
        })
        .build()
}

/// The same configuration as upstream mlx5 reports it: firmware DCBX
/// (`DCB_ATTR_DCBX` 0x0c, `DCB_CAP_DCBX_VER_CEE | DCB_CAP_DCBX_VER_IEEE`
/// from `mlx5e_dcbnl_initialize`) and no peer attribute at all.
fn mlx5_healthy() -> Netdev {
    let mut n = healthy();
    n.driver = Some("mlx5_core".into());
    let c = config(&mut n);
    c.dcbx = Some(DCB_CAP_DCBX_VER_CEE | DCB_CAP_DCBX_VER_IEEE);
    c.peer = DcbPeer::default();
    n
}

const QOS_RULES: &[&str] = &[
    "roce_tc_shared",
    "roce_tc_no_bandwidth",
    "lossless_buffer_no_headroom",
    "switch_pfc_mismatch",
    "switch_dscp_mismatch",
    "switch_view_unavailable",
    "cnp_priority_best_effort",
    "pfc_without_ecn",
];

#[test]
fn healthy_roce_port_fires_none_of_the_qos_rules() {
    for rule in QOS_RULES {
        assert_eq!(eval(healthy(), rule), vec![], "{rule}");
    }
    // mlx5's own default ETS (priority i in TC i, 0 and 1 swapped, all ets
    // with equal shares) is healthy too.
    let mut n = healthy();
    config(&mut n).ets = Some(Ets {
        willing: false,
        ets_cap: 8,
        tc_tx_bw: [13, 12, 13, 12, 13, 12, 13, 12],
        tc_tsa: [TSA_ETS; 8],
        prio_tc: [1, 0, 2, 3, 4, 5, 6, 7],
    });
    assert_eq!(eval(n.clone(), "roce_tc_shared"), vec![]);
    assert_eq!(eval(n, "roce_tc_no_bandwidth"), vec![]);
}

#[test]
fn roce_priority_in_the_tc_of_lossy_priorities() {
    // `dcb ets set dev ens1np0 prio-tc all:0`: everything in TC 0.
    let mut n = healthy();
    config(&mut n).ets.as_mut().unwrap().prio_tc = [0; 8];
    let f = eval(n, "roce_tc_shared");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].finding
            .contains("priority 3 shares TC 0 with priority 0, 6"),
        "{}",
        f[0].finding
    );
    assert!(f[0].fix.contains("prio-tc 0:0 1:0 2:0 3:3"), "{}", f[0].fix);
    // Two lossless priorities sharing a TC with each other only: fine.
    let mut n = healthy();
    let c = config(&mut n);
    c.pfc_enabled = Some(Priorities::from_iter([3, 4]));
    c.ets.as_mut().unwrap().prio_tc = [0, 0, 0, 3, 3, 0, 6, 0];
    assert_eq!(eval(n, "roce_tc_shared"), vec![]);
    // Lossy priorities nothing maps to (no APP entry, not the CNPs', not
    // rdma_cm's, not 0) grouped with RoCE: no traffic of this host queues
    // there.
    let mut n = healthy();
    config(&mut n).ets.as_mut().unwrap().prio_tc = [0, 0, 3, 3, 3, 3, 6, 3];
    assert_eq!(eval(n, "roce_tc_shared"), vec![]);
    // The same class with a DSCP mapped to priority 4 (AF41 34 -> 4):
    // that traffic does queue with RoCE.
    let mut n = healthy();
    let c = config(&mut n);
    c.ets.as_mut().unwrap().prio_tc = [0, 0, 3, 3, 3, 3, 6, 3];
    c.apps.push(dscp(34, 4));
    let f = eval(n, "roce_tc_shared");
    assert_eq!(f.len(), 1);
    assert!(
        f[0].finding
            .contains("priority 3 shares TC 3 with priority 4"),
        "{}",
        f[0].finding
    );
    // A port shared with TCP on priority 0 in its own class: fine.
    let mut n = healthy();
    config(&mut n).ets.as_mut().unwrap().prio_tc = [0, 1, 1, 3, 1, 1, 6, 1];
    assert_eq!(eval(n, "roce_tc_shared"), vec![]);
    // ... and priority 0 put in RoCE's class fires, whatever maps to it.
    let mut n = healthy();
    config(&mut n).ets.as_mut().unwrap().prio_tc = [3, 1, 1, 3, 1, 1, 6, 1];
    assert_eq!(eval(n, "roce_tc_shared").len(), 1);
    // Trust pcp: the VLAN tag picks the priority, any may carry traffic.
    let mut n = healthy();
    let c = config(&mut n);
    c.trust_order = Some(vec![roce_netdev::dcb::DCB_APP_SEL_PCP]);
    c.ets.as_mut().unwrap().prio_tc = [0, 0, 3, 3, 3, 3, 6, 3];
    assert_eq!(eval(n, "roce_tc_shared").len(), 1);
}

#[test]
fn roce_tc_without_bandwidth_share_or_below_a_strict_bulk_class() {
    let mut n = healthy();
    config(&mut n).ets.as_mut().unwrap().tc_tx_bw = [100, 0, 0, 0, 0, 0, 0, 0];
    let f = eval(n, "roce_tc_no_bandwidth");
    assert_eq!(f.len(), 1);
    assert!(
        f[0].finding.contains("TC 3 is ets with 0% bandwidth"),
        "{}",
        f[0].finding
    );
    assert!(f[0]
        .evidence
        .contains("tc_tsa ets,ets,ets,ets,ets,ets,strict,ets; tc_bw 100,0,0,0,0,0,0,0"));
    // Priority 0's class strict: bulk traffic is served before RoCE.
    let mut n = healthy();
    config(&mut n).ets.as_mut().unwrap().tc_tsa[0] = TSA_STRICT;
    let f = eval(n, "roce_tc_no_bandwidth");
    assert_eq!(f.len(), 1);
    assert!(f[0]
        .finding
        .contains("TC 0, which holds priority 0, is strict"));
    // The RoCE class itself strict is a guarantee, not a lack of one, even
    // with no ets share (strict classes report 0%) and priority 0 strict
    // below it.
    let mut n = healthy();
    let ets = config(&mut n).ets.as_mut().unwrap();
    ets.tc_tsa[3] = TSA_STRICT;
    ets.tc_tx_bw = [100, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(eval(n.clone(), "roce_tc_no_bandwidth"), vec![]);
    config(&mut n).ets.as_mut().unwrap().tc_tsa[0] = TSA_STRICT;
    assert_eq!(eval(n, "roce_tc_no_bandwidth"), vec![]);
}

#[test]
fn lossless_priority_on_a_buffer_of_zero_bytes() {
    let mut n = healthy();
    config(&mut n).buffers.as_mut().unwrap().prio2buffer = [0, 0, 0, 2, 0, 0, 0, 0];
    let f = eval(n, "lossless_buffer_no_headroom");
    assert_eq!(f.len(), 1);
    assert!(f[0].finding.contains("priority 3 on buffer 2 of 0 bytes"));
    assert!(f[0].evidence.contains("(buffer 0 has 130944 bytes)"));
    // A driver without DCB buffers: nothing to judge.
    let mut n = healthy();
    config(&mut n).buffers = None;
    assert_eq!(eval(n, "lossless_buffer_no_headroom"), vec![]);
    // A driver that gives every buffer size as 0 (one shared pool, or
    // sizes it does not report): no buffer is known to lack headroom.
    let mut n = healthy();
    config(&mut n).buffers.as_mut().unwrap().buffer_size = [0; 8];
    assert_eq!(eval(n, "lossless_buffer_no_headroom"), vec![]);
}

#[test]
fn switch_pfc_on_other_priorities_than_the_nic() {
    // The switch pauses priority 4, the NIC expects pauses on 3: RoCE on 3
    // is lossy across the switch.
    let mut n = healthy();
    config(&mut n).peer.pfc_enabled = Some(Priorities::one(4));
    let f = eval(n, "switch_pfc_mismatch");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].evidence,
        "NIC PFC enabled priorities: 3 (pfc_en 0x08); switch port (DCBX ieee peer): 4 (0x10); no expect.pfc_priority says which side is right"
    );
    // Nothing says which side is right: both fixes.
    assert!(
        f[0].fix
            .contains("either enable PFC on priority 3 on the switch port (DCBX ieee peer)"),
        "{}",
        f[0].fix
    );
    assert!(
        f[0].fix
            .contains("dcb pfc set dev ens1np0 prio-pfc all:off 4:on"),
        "{}",
        f[0].fix
    );
    // The switch has PFC on 3 and 4 (both fabric lossless classes): the
    // NIC's lossless priority is safe and nothing of this host uses 4.
    let mut n = healthy();
    config(&mut n).peer.pfc_enabled = Some(Priorities::from_iter([3, 4]));
    assert_eq!(eval(n, "switch_pfc_mismatch"), vec![]);
    // The switch pauses priority 0, where this host's TCP runs, and the
    // NIC does not honour those pauses: a warning.
    let mut n = healthy();
    config(&mut n).peer.pfc_enabled = Some(Priorities::from_iter([0, 3]));
    let f = eval(n, "switch_pfc_mismatch");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0].finding.contains("the switch port pauses priority 0"));
    // The switch lacks the NIC's priority 3 and has an extra one: critical.
    let mut n = healthy();
    config(&mut n).peer.pfc_enabled = Some(Priorities::from_iter([0, 4]));
    assert_eq!(
        eval(n, "switch_pfc_mismatch")[0].severity,
        Severity::Critical
    );
    // No peer PFC advertised: nothing to compare.
    let mut n = healthy();
    config(&mut n).peer.pfc_enabled = None;
    assert_eq!(eval(n, "switch_pfc_mismatch"), vec![]);
}

fn eval_expecting(n: Netdev, rule: &str, e: &Expectations) -> Vec<Finding> {
    let h = vec![Arc::new(sample(n))];
    rules::evaluate(&h, &RulesConfig::default(), e)
        .into_iter()
        .filter(|f| f.rule == rule)
        .collect()
}

/// With `expect.pfc_priority`, the fix moves the side that differs from it
/// and never copies the other side's setting.
#[test]
fn switch_pfc_fix_moves_the_side_that_differs_from_the_expected_priority() {
    let expect = |p: u8| Expectations {
        pfc_priority: Some(p),
        ..Expectations::default()
    };
    // NIC on 3, switch on 4, the fabric's RoCE priority 3: the switch is off.
    let mut n = healthy();
    config(&mut n).peer.pfc_enabled = Some(Priorities::one(4));
    let f = eval_expecting(n.clone(), "switch_pfc_mismatch", &expect(3));
    assert_eq!(f.len(), 1);
    assert!(
        f[0].evidence
            .ends_with("expect.pfc_priority 3: the switch differs"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].fix.starts_with("The switch port differs from the fabric's RoCE priority 3 (expect.pfc_priority): enable PFC on priority 3 on the switch port"),
        "{}",
        f[0].fix
    );
    assert!(
        !f[0].fix.contains("dcb pfc set"),
        "the NIC is right: {}",
        f[0].fix
    );
    // The same link where the fabric's priority is 4: this port is off.
    let f = eval_expecting(n, "switch_pfc_mismatch", &expect(4));
    assert!(
        f[0].evidence
            .ends_with("expect.pfc_priority 4: this port differs"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].fix.contains("dcb pfc set dev ens1np0 prio-pfc all:off 4:on (or mlnx_qos -i ens1np0 --pfc 0,0,0,0,1,0,0,0)"),
        "{}",
        f[0].fix
    );
    assert!(!f[0].fix.contains("on the switch port"), "{}", f[0].fix);
    // Neither on the expected 5: both fixed toward it.
    let mut n = healthy();
    config(&mut n).peer.pfc_enabled = Some(Priorities::one(4));
    let f = eval_expecting(n, "switch_pfc_mismatch", &expect(5));
    assert!(f[0].fix.contains("prio-pfc all:off 5:on"), "{}", f[0].fix);
    assert!(
        f[0].fix
            .contains("enable PFC on priority 5 on the switch port"),
        "{}",
        f[0].fix
    );
    // Healthy, with the expectation: nothing.
    assert_eq!(
        eval_expecting(healthy(), "switch_pfc_mismatch", &expect(3)),
        vec![]
    );
}

#[test]
fn switch_dscp_fix_moves_the_side_that_maps_the_roce_dscp_off_the_expected_priority() {
    // DSCP 26 is the RoCE DSCP (NCCL_IB_TC 106); the NIC maps it to 3, the
    // switch to 4.
    let e = Expectations {
        pfc_priority: Some(3),
        nccl_ib_tc: Some(106),
        ..Expectations::default()
    };
    let mut n = healthy();
    config(&mut n).peer.apps = Some(vec![dscp(26, 4), dscp(48, 6)]);
    let f = eval_expecting(n.clone(), "switch_dscp_mismatch", &e);
    assert_eq!(f.len(), 1);
    assert!(
        f[0].evidence.ends_with("the RoCE DSCP 26 (expect.nccl_ib_tc 106): the switch differs from expect.pfc_priority 3"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].fix.contains(
            "map the RoCE DSCP 26 (expect.nccl_ib_tc 106) to priority 3 on the switch port"
        ),
        "{}",
        f[0].fix
    );
    assert!(!f[0].fix.contains("dcb app replace"), "{}", f[0].fix);
    // Where the fabric's RoCE priority is 4, this port is the one off.
    let e4 = Expectations {
        pfc_priority: Some(4),
        ..e.clone()
    };
    let f = eval_expecting(n.clone(), "switch_dscp_mismatch", &e4);
    assert!(
        f[0].fix
            .contains("dcb app replace dev ens1np0 dscp-prio 26:4"),
        "{}",
        f[0].fix
    );
    // Without expectations: both fixes.
    let f = eval_expecting(n, "switch_dscp_mismatch", &Expectations::default());
    assert!(
        f[0].fix.contains(
            "either on this port dcb app replace dev ens1np0 dscp-prio 26:4, or on the switch port"
        ),
        "{}",
        f[0].fix
    );
}

#[test]
fn switch_maps_the_roce_dscp_to_another_priority() {
    let mut n = healthy();
    config(&mut n).peer.apps = Some(vec![dscp(26, 4), dscp(48, 6)]);
    let f = eval(n, "switch_dscp_mismatch");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding
            .contains("DSCP 26: switch priority 4, NIC priority 3 (DSCP APP table)"),
        "{}",
        f[0].finding
    );
    // A difference away from the lossless priority on a DSCP the host
    // maps (AF41 34 -> 4 here, 5 on the switch): a warning.
    let mut n = healthy();
    let c = config(&mut n);
    c.apps.push(dscp(34, 4));
    c.peer.apps = Some(vec![dscp(26, 3), dscp(34, 5), dscp(48, 6)]);
    let f = eval(n, "switch_dscp_mismatch");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].finding
            .contains("DSCP 34: switch priority 5, NIC priority 4 (DSCP APP table)"),
        "{}",
        f[0].finding
    );
    // The switch advertises its whole map (DSCP 10 -> 2 where the NIC's
    // default would give 1; 46 -> 5): DSCPs this host neither maps nor
    // marks are not compared.
    let mut n = healthy();
    config(&mut n).peer.apps = Some(vec![dscp(10, 2), dscp(26, 3), dscp(46, 5), dscp(48, 6)]);
    assert_eq!(eval(n, "switch_dscp_mismatch"), vec![]);
    // A partial table without the RoCE DSCP: nothing the host uses differs.
    let mut n = healthy();
    config(&mut n).peer.apps = Some(vec![dscp(48, 6)]);
    assert_eq!(eval(n, "switch_dscp_mismatch"), vec![]);
    // rdma_cm's ToS (DSCP 24 here) relies on the default map (24 >> 3 =
    // 3); the switch puts it on 0: compared, and on the lossless priority.
    let mut n = healthy();
    n.qos.rdma_cm_tos = Some(24 << 2);
    config(&mut n).peer.apps = Some(vec![dscp(24, 0), dscp(26, 3), dscp(48, 6)]);
    let f = eval(n, "switch_dscp_mismatch");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(f[0]
        .finding
        .contains("DSCP 24: switch priority 0, NIC priority 3 (default DSCP >> 3 mapping)"));
    // The switch advertises no DSCP entries: nothing to compare.
    let mut n = healthy();
    config(&mut n).peer.apps = Some(vec![]);
    assert_eq!(eval(n, "switch_dscp_mismatch"), vec![]);
}

#[test]
fn host_without_the_switch_view_is_info_only() {
    // Host DCBX on upstream mlx5: the mode is there, the peer is not.
    let mut n = healthy();
    let c = config(&mut n);
    c.peer = DcbPeer::default();
    c.dcbx = Some(roce_netdev::dcb::DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_IEEE);
    let f = eval(n, "switch_view_unavailable");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info);
    assert!(f[0]
        .finding
        .contains("DCBX is host_ieee but the switch advertised nothing"));
    let mut n = healthy();
    let c = config(&mut n);
    c.peer = DcbPeer::default();
    c.dcbx = Some(0);
    let f = eval(n, "switch_view_unavailable");
    assert!(f[0].finding.contains("(DCBX is off)"), "{}", f[0].finding);
    assert_eq!(f[0].severity, Severity::Info);
    // A port without lossless priorities is not meant to agree with anything.
    let mut n = healthy();
    let c = config(&mut n);
    c.peer = DcbPeer::default();
    c.pfc_enabled = Some(Priorities::NONE);
    assert_eq!(eval(n, "switch_view_unavailable"), vec![]);
}

#[test]
fn cnps_classified_differently_by_the_switch_or_by_their_pcp() {
    // The switch maps the CNP DSCP 48 to priority 5, the NIC to 6.
    let mut n = healthy();
    config(&mut n).peer.apps = Some(vec![dscp(26, 3), dscp(48, 5)]);
    // One verdict, in one place: not a DSCP table difference as well.
    assert_eq!(eval(n.clone(), "switch_dscp_mismatch"), vec![]);
    let f = eval(n, "cnp_priority_best_effort");
    assert_eq!(f.len(), 1);
    assert!(
        f[0].finding
            .contains("the switch maps their DSCP 48 to priority 5, this port to 6"),
        "{}",
        f[0].finding
    );
    // cnp_802p_prio 3 against DSCP 48 -> 6.
    let mut n = healthy();
    n.qos.cnp_prio = Some(3);
    let f = eval(n, "cnp_priority_best_effort");
    assert_eq!(f.len(), 1);
    assert!(f[0].finding.contains(
        "they carry 802.1p priority 3 (cnp_802p_prio) but their DSCP maps to priority 6"
    ));
}

/// Two ConnectX ports of one host, as upstream mlx5 reports them.
fn mlx5_host() -> Snapshot {
    let mut second = mlx5_healthy();
    second.name = "ens2np0".into();
    second.rdma = Some(RdmaPortRef {
        device: "mlx5_1".into(),
        port: 1,
    });
    SnapshotBuilder::new()
        .rdma_ok()
        .port("mlx5_0", 1)
        .port("mlx5_1", 1)
        .netdev(mlx5_healthy())
        .netdev(second)
        .build()
}

#[test]
fn mlx5_without_a_peer_view_is_said_once_per_host_at_info() {
    let h = vec![Arc::new(mlx5_host())];
    let all = rules::evaluate(&h, &RulesConfig::default(), &Expectations::default());
    let f: Vec<&Finding> = all
        .iter()
        .filter(|f| f.rule == "switch_view_unavailable")
        .collect();
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Info);
    assert_eq!(f[0].subject, rules::Subject::default());
    assert!(
        f[0].finding.starts_with(
            "this host: the mlx5 driver gives no DCBX peer view, so the switch ports' PFC and DSCP settings cannot be read through DCB netlink on ens1np0, ens2np0"
        ),
        "{}",
        f[0].finding
    );
    // Firmware DCBX (0x0c) is named so, not "off".
    assert!(
        f[0].evidence
            .contains("ens1np0 DCBX firmware PFC 3; ens2np0 DCBX firmware PFC 3"),
        "{}",
        f[0].evidence
    );
    // mlxconfig's parameter names (`mlxconfig query`: LLDP_NB_DCBX_P1,
    // LLDP_NB_RX_MODE_P1, LLDP_NB_TX_MODE_P1), and no host-side DCBX fix
    // that cannot bring the view.
    assert!(f[0].fix.contains("LLDP_NB_RX_MODE_P1=ALL"), "{}", f[0].fix);
    assert!(!f[0].fix.contains("LLDP_NB_RX_P1"), "{}", f[0].fix);
    assert!(!f[0].fix.contains("dcb dcbx set"), "{}", f[0].fix);
    assert!(!f[0].fix.contains("lldpad"), "{}", f[0].fix);
}

#[test]
fn healthy_mlx5_host_raises_nothing_above_info() {
    for expect in [
        Expectations::default(),
        Expectations {
            nccl_ib_tc: Some(106),
            ..Expectations::default()
        },
    ] {
        let h = vec![Arc::new(mlx5_host()), Arc::new(mlx5_host())];
        let above: Vec<Finding> = rules::evaluate(&h, &RulesConfig::default(), &expect)
            .into_iter()
            .filter(|f| {
                let qos = QOS_RULES.contains(&f.rule.as_str())
                    || ["pfc_priority_mismatch", "roce_trust_pcp"].contains(&f.rule.as_str());
                qos && f.severity != Severity::Info
            })
            .collect();
        assert_eq!(above, vec![], "{expect:?}");
    }
}

#[test]
fn a_driver_without_peer_view_keeps_its_per_port_finding_without_mlxconfig() {
    let mut n = healthy();
    let c = config(&mut n);
    c.peer = DcbPeer::default();
    let f = eval(n, "switch_view_unavailable");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info);
    assert_eq!(f[0].subject.netdev.as_deref(), Some("ens1np0"));
    assert!(!f[0].fix.contains("mlxconfig"), "{}", f[0].fix);
    // With the peer's view, nothing to say.
    assert_eq!(eval(healthy(), "switch_view_unavailable"), vec![]);
}
