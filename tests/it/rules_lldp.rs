//! The LLDP view through the exporter: the source over lldpd's real json0
//! output and over captured frames, the families, and the rules. The mlx5
//! port of the tests runs host DCBX, where the driver offers no peer view
//! (as upstream mlx5), so the switch's PFC and APP come from its LLDP DCBX
//! TLVs only: "switch PFC on priority 4, NIC on 3" must be found there, and
//! a switch that agrees (PFC 3, DSCP 26 -> 3) must raise nothing above info.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::h100;
use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::exposition::{self, BuildInfo, Format};
use roce_exporter::rules::{self, Finding, Severity};
use roce_exporter::snapshot::{Snapshot, SourceState};
use roce_exporter::sources::lldp::{LldpPort, LldpSnapshot, LldpSource};
use roce_exporter::sources::{Input, Part, Source};
use roce_lldp::build::switch_frame;
use roce_lldp::capture::{CaptureError, FrameSource, QueuedFrames};
use roce_lldp::{Identity, Lldpdu};
use roce_netdev::dcb::{DCB_CAP_DCBX_HOST, DCB_CAP_DCBX_VER_IEEE};
use roce_netdev::{DcbOutcome, Netdev};
use roce_rdma::{PortState, RdmaSnapshot};
use roce_testkit::snapshot::{active_port, mlx5, NetdevBuilder, SnapshotBuilder};

const MAC: [u8; 6] = [0x1c, 0x34, 0xda, 0x5a, 0x01, 0x00];

fn rdma() -> RdmaSnapshot {
    RdmaSnapshot {
        devices: vec![mlx5("mlx5_0", vec![active_port(1)])],
        errors: vec![],
    }
}

/// mlx5 in host DCBX mode: PFC on 3, trust dscp, DSCP 26 -> 3, no peer.
fn netdev() -> Netdev {
    host_dcbx("ens1np0", "mlx5_0")
}

fn host_dcbx(name: &str, device: &str) -> Netdev {
    NetdevBuilder::mlx5(name, device, 1)
        .pfc(&[3])
        .dscp(26, 3)
        .dscp(48, 6)
        .trust_dscp()
        .dcbx(DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_IEEE)
        .build()
}

fn neighbour(sysname: &str, port: &str, pfc: u8, dscp: u16, app: u8) -> Lldpdu {
    roce_lldp::parse_frame(&switch_frame(sysname, port, pfc, dscp, app).frame(MAC)).unwrap()
}

fn lldp_port(neighbour: Option<Lldpdu>) -> LldpPort {
    LldpPort {
        netdev: "ens1np0".into(),
        rdma: Some(("mlx5_0".into(), 1)),
        neighbours: usize::from(neighbour.is_some()),
        neighbour,
        heard_age: Some(Duration::from_secs(12)),
        last_ttl: Some(120),
        watched_for: Duration::from_secs(3600),
        changed: None,
        frames_total: 120,
        rejected_total: 0,
        last_rejection: None,
    }
}

fn sample(n: Netdev, port: LldpPort) -> Snapshot {
    SnapshotBuilder::new()
        .rdma_ok()
        .port("mlx5_0", 1)
        .netdev(n)
        .lldp(LldpSnapshot {
            via: "capture",
            ports: vec![port],
        })
        .build()
}

fn eval(s: Snapshot) -> Vec<Finding> {
    rules::evaluate(
        &[Arc::new(s)],
        &RulesConfig::default(),
        &Expectations::default(),
    )
}

fn only(f: &[Finding], rule: &str) -> Vec<Finding> {
    f.iter().filter(|f| f.rule == rule).cloned().collect()
}

#[test]
fn healthy_switch_over_lldp_fires_none_of_the_switch_rules() {
    let s = sample(
        netdev(),
        lldp_port(Some(neighbour("leaf-r3-a", "swp17", 3, 26, 3))),
    );
    let f = eval(s);
    for rule in [
        "switch_pfc_mismatch",
        "switch_dscp_mismatch",
        "switch_view_unavailable",
        "lldp_neighbor_missing",
        "lldp_neighbor_changed",
        "switch_frame_below_mtu",
    ] {
        assert_eq!(only(&f, rule), vec![], "{rule}");
    }
}

/// A RoCE netdev at MTU 9000 behind a switch port advertising `mfs`
/// (LLDP IEEE 802.3 maximum frame size TLV).
fn frame_size(mfs: u16, expect: &Expectations) -> Vec<Finding> {
    let mut pdu = neighbour("leaf-r3-a", "swp17", 3, 26, 3);
    pdu.max_frame_size = Some(mfs);
    let mut n = netdev();
    n.mtu = Some(9000);
    let s = sample(n, lldp_port(Some(pdu)));
    rules::evaluate(&[Arc::new(s)], &RulesConfig::default(), expect)
        .into_iter()
        .filter(|f| f.rule == "switch_frame_below_mtu")
        .collect()
}

#[test]
fn switch_frame_size_below_what_the_port_sends() {
    // A switch port left at 1518-byte frames: RoCE at MTU 4096 needs 4192.
    let f = frame_size(1518, &Expectations::default());
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): the switch port's maximum frame size 1518 is below what this port sends: RoCE packets at the port's RoCE MTU 4096 need 4192 bytes and are dropped by the switch: RDMA messages larger than its frames never arrive"
    );
    assert!(
        f[0].fix
            .contains("raise the switch port's MTU (leaf-r3-a port swp17) to at least 9000"),
        "{}",
        f[0].fix
    );
    assert!(
        f[0].fix
            .contains("or lower ens1np0's to what the switch carries"),
        "{}",
        f[0].fix
    );
    // With expect.mtu 9000 the switch is the side that differs.
    let e = Expectations {
        mtu: Some(9000),
        ..Expectations::default()
    };
    let f = frame_size(1518, &e);
    assert!(f[0].fix.starts_with("Raise the switch port's MTU (leaf-r3-a port swp17) to the fabric's: at least 9000 (expect.mtu)"), "{}", f[0].fix);
    assert!(!f[0].fix.contains("ip link set"), "{}", f[0].fix);
    // 8192: RoCE fits, jumbo TCP at 9000 does not.
    let f = frame_size(8192, &Expectations::default());
    assert_eq!(f[0].severity, Severity::Warning);
    // Where the fabric is 8192 by design, the host is the side that differs.
    let e = Expectations {
        mtu: Some(8192),
        ..Expectations::default()
    };
    assert!(frame_size(8192, &e)[0]
        .fix
        .starts_with("Lower ens1np0's MTU to the expected 8192"));
    // Healthy: 9216 (a data-center switch's jumbo), and 9000 read either
    // way (a frame size, or the switch's IP MTU) raises nothing.
    assert_eq!(frame_size(9216, &Expectations::default()), vec![]);
    assert_eq!(frame_size(9000, &Expectations::default()), vec![]);
}

/// With expect.rails, a switch on another rail is not the one to match: the
/// fix is the cable, never its PFC copied into the NIC.
#[test]
fn switch_pfc_fix_on_a_wrong_rail_moves_the_cable_and_copies_nothing() {
    let s = sample(
        netdev(),
        lldp_port(Some(neighbour("leaf-p1-r3", "swp17", 4, 26, 4))),
    );
    let e = Expectations {
        pfc_priority: Some(3),
        ..rails("leaf-*-r{rail}")
    };
    let f = rules::evaluate(&[Arc::new(s)], &RulesConfig::default(), &e);
    let pfc = only(&f, "switch_pfc_mismatch");
    assert_eq!(pfc.len(), 1, "{f:#?}");
    assert!(
        pfc[0].fix.starts_with(
            "Move ens1np0's cable to its rail's switch (leaf-*-r0, lldp_rail_mismatch) first"
        ),
        "{}",
        pfc[0].fix
    );
    assert!(!pfc[0].fix.contains("dcb pfc set"), "{}", pfc[0].fix);
    let dscp = only(&f, "switch_dscp_mismatch");
    assert!(!dscp[0].fix.contains("dcb app replace"), "{}", dscp[0].fix);
    assert_eq!(only(&f, "lldp_rail_mismatch").len(), 1);
}

#[test]
fn switch_pfc_mismatch_from_lldp_on_mlx5() {
    let s = sample(
        netdev(),
        lldp_port(Some(neighbour("leaf-r3-a", "swp17", 4, 26, 4))),
    );
    let f = eval(s);
    let pfc = only(&f, "switch_pfc_mismatch");
    assert_eq!(pfc.len(), 1, "{f:#?}");
    assert_eq!(pfc[0].severity, Severity::Critical);
    assert_eq!(
        pfc[0].evidence,
        "NIC PFC enabled priorities: 3 (pfc_en 0x08); switch port (LLDP DCBX TLVs of leaf-r3-a port swp17): 4 (0x10); no expect.pfc_priority says which side is right"
    );
    let dscp = only(&f, "switch_dscp_mismatch");
    assert_eq!(dscp.len(), 1, "{f:#?}");
    assert_eq!(dscp[0].severity, Severity::Critical);
    assert!(
        dscp[0]
            .finding
            .contains("DSCP 26: switch priority 4, NIC priority 3"),
        "{}",
        dscp[0].finding
    );
    assert!(dscp[0]
        .evidence
        .contains("LLDP DCBX TLVs of leaf-r3-a port swp17"));
    // The LLDP view is the switch view: no "cannot see the switch".
    assert_eq!(only(&f, "switch_view_unavailable"), vec![]);
}

/// A RoCE netdev whose driver has no DCB netlink (Soft-RoCE on virtio-net
/// or e1000, as in the VM harness): the NIC's PFC cannot be read.
fn no_dcb() -> Netdev {
    NetdevBuilder::new("ens1np0")
        .rdma("mlx5_0", 1)
        .up()
        .edit(|n| n.dcb = DcbOutcome::Unsupported)
        .build()
}

fn expect_priority(p: u8) -> Expectations {
    Expectations {
        pfc_priority: Some(p),
        ..Expectations::default()
    }
}

#[test]
fn switch_pfc_against_the_expected_priority_where_the_nic_has_no_dcb() {
    // Switch PFC on 4, this host's RoCE priority 3: the switch drops it.
    let s = sample(
        no_dcb(),
        lldp_port(Some(neighbour("leaf-p1-r0", "swp1", 4, 26, 4))),
    );
    let f = only(
        &rules::evaluate(
            &[Arc::new(s.clone())],
            &RulesConfig::default(),
            &expect_priority(3),
        ),
        "switch_pfc_mismatch",
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].evidence,
        "switch port (LLDP DCBX TLVs of leaf-p1-r0 port swp1): PFC enabled priorities 4 (0x10); expected RoCE priority 3 (expect.pfc_priority); NIC PFC unknown (its driver offers no DCB netlink)"
    );
    assert!(
        f[0].finding.contains("does not run PFC on priority 3"),
        "{}",
        f[0].finding
    );
    // Without expect.pfc_priority there is nothing to compare with.
    assert_eq!(only(&eval(s), "switch_pfc_mismatch"), vec![]);
}

#[test]
fn switch_pausing_the_expected_priority_is_silent_where_the_nic_has_no_dcb() {
    for pfc in [3, 4] {
        let mut n = neighbour("leaf-p1-r0", "swp1", 4, 26, 3);
        if let Some(p) = &mut n.pfc {
            // 3 alone, or 3 beside a fabric-wide lossless 4.
            p.enable = roce_host::Priorities::from_iter([3, pfc]);
        }
        let s = sample(no_dcb(), lldp_port(Some(n)));
        let f = rules::evaluate(&[Arc::new(s)], &RulesConfig::default(), &expect_priority(3));
        assert_eq!(only(&f, "switch_pfc_mismatch"), vec![], "{pfc}");
    }
}

#[test]
fn driver_peer_view_wins_over_lldp() {
    let mut n = netdev();
    if let DcbOutcome::Ok(c) = &mut n.dcb {
        c.peer.pfc_enabled = Some(roce_host::Priorities::one(3));
    }
    let s = sample(
        n,
        lldp_port(Some(neighbour("leaf-r3-a", "swp17", 4, 26, 3))),
    );
    assert_eq!(only(&eval(s), "switch_pfc_mismatch"), vec![]);
}

#[test]
fn neighbour_missing_is_info_with_the_causes() {
    // Never heard in an hour of watching an active RoCE port.
    let mut p = lldp_port(None);
    p.heard_age = None;
    p.last_ttl = None;
    let f = only(&eval(sample(netdev(), p)), "lldp_neighbor_missing");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Info);
    for cause in [
        "LLDP_NB_RX_MODE_P<n>",
        "LLDP_NB_TX_MODE_P<n>",
        "LLDP_NB_DCBX_P<n>",
        "fw-lldp-agent",
    ] {
        assert!(f[0].fix.contains(cause), "{cause}: {}", f[0].fix);
    }
    // Heard 300 s ago with TTL 120: missing (3 x TTL = 360 s) not yet.
    let mut p = lldp_port(None);
    p.heard_age = Some(Duration::from_secs(300));
    assert_eq!(
        only(&eval(sample(netdev(), p)), "lldp_neighbor_missing"),
        vec![]
    );
    let mut p = lldp_port(None);
    p.heard_age = Some(Duration::from_secs(361));
    assert_eq!(
        only(&eval(sample(netdev(), p)), "lldp_neighbor_missing").len(),
        1
    );
    // Just started: not judged before 3 x the default TTL.
    let mut p = lldp_port(None);
    p.heard_age = None;
    p.watched_for = Duration::from_secs(30);
    assert_eq!(
        only(&eval(sample(netdev(), p)), "lldp_neighbor_missing"),
        vec![]
    );
    // A down port is not expected to hear anything.
    let mut s = sample(netdev(), lldp_port(None));
    s.rdma.as_mut().unwrap().devices[0].ports[0].state = Some(PortState::Down);
    assert_eq!(only(&eval(s), "lldp_neighbor_missing"), vec![]);
}

#[test]
fn neighbour_changed_is_a_warning_naming_both() {
    let mut p = lldp_port(Some(neighbour("leaf-r3-b", "swp9", 3, 26, 3)));
    p.changed = Some((
        Identity {
            chassis_id: "1c:34:da:5a:01:00".into(),
            port_id: "swp17".into(),
            system_name: Some("leaf-r3-a".into()),
        },
        Identity {
            chassis_id: "1c:34:da:5a:02:00".into(),
            port_id: "swp9".into(),
            system_name: Some("leaf-r3-b".into()),
        },
    ));
    let f = only(&eval(sample(netdev(), p)), "lldp_neighbor_changed");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].finding.contains("was leaf-r3-a port swp17"),
        "{}",
        f[0].finding
    );
    assert!(
        f[0].finding.contains("now leaf-r3-b port swp9"),
        "{}",
        f[0].finding
    );
}

fn input() -> Input {
    Input {
        rdma: Some(Arc::new(rdma())),
        previous: None,
    }
}

fn lldp_part(r: roce_exporter::sources::Sampled) -> LldpSnapshot {
    assert_eq!(r.state, SourceState::Ok);
    match r.part {
        Some(Part::Lldp(l)) => *l,
        other => panic!("{other:?}"),
    }
}

#[test]
fn source_over_lldpd_json0() {
    // lldpd's real output, its interface renamed to this port's netdev.
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/lldp/tests/fixtures/lldpcli-json0-neighbors-dcbx.json"
    );
    let doc = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("lv-host", "ens1np0");
    let dir = std::env::temp_dir().join(format!("roce-lldp-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("neighbors.json");
    std::fs::write(&file, doc).unwrap();
    let mut src = LldpSource::with_json_file(file.clone());
    let l = lldp_part(src.sample(&input(), &mut vec![]));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(l.via, "lldpd");
    assert_eq!(l.ports.len(), 1);
    let n = l.ports[0].neighbour.as_ref().expect("neighbour");
    assert_eq!(n.system_name.as_deref(), Some("leaf-r3-a"));
    assert_eq!(n.pfc.unwrap().enable, roce_host::Priorities::one(4));
    // And the rules see the mismatch the lldpd view shows.
    let mut s = sample(netdev(), l.ports[0].clone());
    s.lldp.as_mut().unwrap().via = "lldpd";
    assert_eq!(only(&eval(s), "switch_pfc_mismatch").len(), 1);
}

static FRAMES: Mutex<Vec<(String, Vec<u8>)>> = Mutex::new(Vec::new());

fn queued(_netdevs: &[String]) -> Result<(Box<dyn FrameSource>, Vec<CaptureError>), CaptureError> {
    struct Shared;
    impl FrameSource for Shared {
        fn drain(
            &mut self,
            max: usize,
            f: &mut dyn FnMut(&str, &[u8]),
        ) -> Result<roce_lldp::capture::DrainStats, CaptureError> {
            let frames = std::mem::take(&mut *FRAMES.lock().unwrap());
            QueuedFrames { frames }.drain(max, f)
        }
    }
    Ok((Box::new(Shared), vec![]))
}

fn denied(_netdevs: &[String]) -> Result<(Box<dyn FrameSource>, Vec<CaptureError>), CaptureError> {
    Err(CaptureError::Permission(std::io::Error::from_raw_os_error(
        libc::EPERM,
    )))
}

#[test]
fn source_over_captured_frames_sees_the_recabling_and_rejects_lies() {
    let mut src = LldpSource::with_capture(queued);
    let frame = |port: &str| switch_frame("leaf-r3-a", port, 4, 26, 4).frame(MAC);
    let mut lie = frame("swp17");
    lie[15] = 0xff; // chassis ID TLV claims 255+ bytes
    FRAMES.lock().unwrap().extend([
        ("ens1np0".to_string(), frame("swp17")),
        ("ens1np0".to_string(), lie),
        ("eth9".to_string(), frame("swp1")), // not an RDMA netdev: ignored
    ]);
    let l = lldp_part(src.sample(&input(), &mut vec![]));
    let p = &l.ports[0];
    assert_eq!(p.neighbour.as_ref().unwrap().port_id.value, "swp17");
    assert_eq!((p.frames_total, p.rejected_total), (1, 1));
    assert!(p.changed.is_none());
    FRAMES
        .lock()
        .unwrap()
        .push(("ens1np0".to_string(), frame("swp29")));
    let l = lldp_part(src.sample(&input(), &mut vec![]));
    let (old, new) = l.ports[0].changed.clone().expect("changed");
    assert_eq!(
        (old.port_id.as_str(), new.port_id.as_str()),
        ("swp17", "swp29")
    );
    // The exposition carries the neighbour and the switch's DCBX view.
    let s = sample(netdev(), l.ports[0].clone());
    let text = exposition::encode(
        Arc::new(s),
        &BuildInfo::current(Duration::from_secs(5)),
        Format::Text,
    );
    for line in [
        "roce_lldp_neighbor_info{device=\"mlx5_0\",port=\"1\",netdev=\"ens1np0\",chassis_id=\"1c:34:da:5a:01:00\",port_id=\"swp29\",system_name=\"leaf-r3-a\",port_description=\"leaf-r3-a swp29\",management_address=\"10.0.0.11\",ttl_seconds=\"120\"} 1",
        // PFC on 4, not willing; DSCP 26 -> 4; priority 4 alone in class
        // 1, classes 0 and 1 ETS with half each
        "roce_lldp_switch_qos_info{device=\"mlx5_0\",port=\"1\",netdev=\"ens1np0\",pfc=\"4\",pfc_willing=\"0\",dscp_priority=\"26=4\",prio_tc=\"0,0,0,0,1,0,0,0\",tc_tsa=\"ets,ets,strict,strict,strict,strict,strict,strict\",tc_bw=\"50,50,0,0,0,0,0,0\"} 1",
        "roce_lldp_frames_rejected_total{device=\"mlx5_0\",port=\"1\",netdev=\"ens1np0\"} 1",
    ] {
        assert!(text.contains(line), "missing {line}\n{text}");
    }
}

#[test]
fn capture_without_cap_net_raw_is_off_and_says_so() {
    let mut src = LldpSource::with_capture(denied);
    let r = src.sample(&input(), &mut vec![]);
    match r.state {
        SourceState::Disabled(why) => assert!(why.contains("CAP_NET_RAW"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(r.part.is_none());
}

/// Two RoCE NICs, mlx5_0 (rail 0, ens1np0) and mlx5_1 (rail 1, ens2np0),
/// with the given neighbours.
fn two_nics(a: Lldpdu, b: Lldpdu) -> Snapshot {
    let mut p = lldp_port(Some(b));
    p.netdev = "ens2np0".into();
    p.rdma = Some(("mlx5_1".into(), 1));
    SnapshotBuilder::new()
        .rdma_ok()
        .port("mlx5_0", 1)
        .port("mlx5_1", 1)
        .netdev(netdev())
        .netdev(host_dcbx("ens2np0", "mlx5_1"))
        .lldp(LldpSnapshot {
            via: "capture",
            ports: vec![lldp_port(Some(a)), p],
        })
        .build()
}

fn rails(pattern: &str) -> Expectations {
    Expectations {
        rails: Some(roce_exporter::rules::lldp::ExpectedRails {
            switch_pattern: Some(pattern.into()),
            map: Default::default(),
        }),
        ..Expectations::default()
    }
}

fn eval_with(s: Snapshot, e: &Expectations) -> Vec<Finding> {
    rules::evaluate(&[Arc::new(s)], &RulesConfig::default(), e)
        .into_iter()
        .filter(|f| f.rule == "lldp_rail_mismatch")
        .collect()
}

#[test]
fn rails_cabled_as_planned_are_silent() {
    // (The test switches share a chassis MAC, so their ports differ.)
    let s = two_nics(
        neighbour("leaf-p1-r0", "swp1", 3, 26, 3),
        neighbour("leaf-p1-r1", "swp2", 3, 26, 3),
    );
    assert_eq!(eval_with(s.clone(), &rails("leaf-*-r{rail}")), vec![]);
    // Without expect.rails nothing is judged.
    assert_eq!(eval_with(s, &Expectations::default()), vec![]);
}

#[test]
fn nic_on_the_other_rails_switch_is_critical() {
    let s = two_nics(
        neighbour("leaf-p1-r1", "swp7", 3, 26, 3),
        neighbour("leaf-p1-r1", "swp8", 3, 26, 3),
    );
    let f = eval_with(s, &rails("leaf-*-r{rail}"));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(f[0].finding.contains("mlx5_0 port 1 (ens1np0) (rail 0) is cabled to leaf-p1-r1 port swp7, the switch of rail 1 (mlx5_1)"), "{}", f[0].finding);
    assert!(
        f[0].evidence.contains("expected leaf-*-r0 (expect.rails)"),
        "{}",
        f[0].evidence
    );
}

#[test]
fn nics_on_each_others_rails_are_both_critical() {
    // The two cables swapped: each NIC reaches the other's leaf.
    let s = two_nics(
        neighbour("leaf-p1-r1", "swp7", 3, 26, 3),
        neighbour("leaf-p1-r0", "swp8", 3, 26, 3),
    );
    let f = eval_with(s, &rails("leaf-*-r{rail}"));
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(f.iter().all(|f| f.severity == Severity::Critical));
    assert!(f[0].finding.contains("mlx5_0 port 1 (ens1np0) (rail 0) is cabled to leaf-p1-r1 port swp7, the switch of rail 1 (mlx5_1)"), "{}", f[0].finding);
    assert!(f[1].finding.contains("mlx5_1 port 1 (ens2np0) (rail 1) is cabled to leaf-p1-r0 port swp8, the switch of rail 0 (mlx5_0)"), "{}", f[1].finding);
}

#[test]
fn the_explicit_map_wins_over_the_pattern() {
    let s = two_nics(
        neighbour("leaf-p1-r0", "swp1", 3, 26, 3),
        neighbour("spine-7", "swp2", 3, 26, 3),
    );
    let mut e = rails("leaf-*-r{rail}");
    let set = |e: &mut Expectations, dev: &str, name: &str| {
        if let Some(r) = &mut e.rails {
            r.map.insert(dev.into(), name.into());
        }
    };
    // mlx5_1 by the map (device name) on spine-7, as planned: silent.
    set(&mut e, "mlx5_1", "spine-7");
    assert_eq!(eval_with(s.clone(), &e), vec![]);
    // mlx5_0 by the map (netdev name) expected on leaf-p1-r9: critical,
    // naming the map's switch, though the pattern would pass it.
    set(&mut e, "ens1np0", "leaf-p1-r9");
    let f = eval_with(s, &e);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].evidence.contains("expected leaf-p1-r9 (expect.rails)"),
        "{}",
        f[0].evidence
    );
}

/// Two GPUs, each behind a PCIe switch with one of the two NICs: GPU 0
/// nearest mlx5_0 (PIX), GPU 1 nearest mlx5_1; across the switches SYS.
fn two_gpus() -> roce_topology::TopologySnapshot {
    use roce_topology::{GpuNicPath, PathClass};
    let path = |gpu, nic: &str, class| GpuNicPath {
        gpu,
        nic: nic.into(),
        class,
        bridges: vec![],
    };
    roce_topology::TopologySnapshot {
        gpus: vec![h100(0, "0000:03:00.0"), h100(1, "0000:13:00.0")],
        paths: vec![
            path(0, "mlx5_0", PathClass::Pix),
            path(0, "mlx5_1", PathClass::Sys),
            path(1, "mlx5_0", PathClass::Sys),
            path(1, "mlx5_1", PathClass::Pix),
        ],
        ..Default::default()
    }
}

#[test]
fn the_miscabled_nic_is_named_with_its_gpu() {
    let mut s = two_nics(
        neighbour("leaf-p1-r1", "swp7", 3, 26, 3),
        neighbour("leaf-p1-r1", "swp8", 3, 26, 3),
    );
    s.topology = Some(two_gpus());
    let f = eval_with(s, &rails("leaf-*-r{rail}"));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(
        f[0].finding
            .contains("mlx5_0 port 1 (ens1np0) (rail 0, the NIC of GPU 0) is cabled to leaf-p1-r1"),
        "{}",
        f[0].finding
    );
}

#[test]
fn a_rail_without_a_nic_here_is_named_by_the_pattern() {
    // One RoCE NIC (rail 0) on rail 3's leaf, and on a switch no rail has.
    let one = |n: Lldpdu| sample(netdev(), lldp_port(Some(n)));
    let f = eval_with(
        one(neighbour("leaf-p1-r3", "swp1", 3, 26, 3)),
        &rails("leaf-*-r{rail}"),
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(f[0].finding.contains("(rail 0) is cabled to leaf-p1-r3 port swp1, the switch of rail 3 by expect.rails (no RoCE NIC of this node has that rail)"), "{}", f[0].finding);
    let f = eval_with(
        one(neighbour("spine-1", "swp1", 3, 26, 3)),
        &rails("leaf-*-r{rail}"),
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(
        f[0].finding
            .contains("is cabled to spine-1 port swp1, a switch of no rail"),
        "{}",
        f[0].finding
    );
}

#[test]
fn two_nics_on_one_switch_port_is_critical() {
    let s = two_nics(
        neighbour("leaf-p1-r0", "swp1", 3, 26, 3),
        neighbour("leaf-p1-r0", "swp1", 3, 26, 3),
    );
    let f = eval_with(s, &rails("leaf-*-r{rail}"));
    assert!(
        f.iter().any(|f| f
            .finding
            .contains("report the same switch port, leaf-p1-r0 port swp1")),
        "{f:#?}"
    );
    assert!(f.iter().all(|f| f.severity == Severity::Critical));
}

/// `lldp.json_file` is read as every file a user names: a FIFO without a
/// writer fails the source at once instead of holding the sample.
#[test]
fn json_file_that_is_a_fifo_fails_without_hanging() {
    let dir = std::env::temp_dir().join(format!("roce-lldp-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("neighbors.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let mut src = LldpSource::with_json_file(fifo.clone());
    let started = std::time::Instant::now();
    let mut errors = vec![];
    let r = src.sample(&input(), &mut errors);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(matches!(r.state, SourceState::Failed(_)), "{:?}", r.state);
    assert_eq!(errors.len(), 1, "{errors:?}");
    // Each cause named: the file type, the size, the device.
    let big = dir.join("big.json");
    std::fs::write(&big, vec![b' '; (4 << 20) + 1]).unwrap();
    for (file, cause) in [
        (fifo, "not a regular file (a FIFO)".to_string()),
        (big.clone(), "larger than".to_string()),
        (
            std::path::PathBuf::from("/dev/zero"),
            "not a regular file (a character device)".to_string(),
        ),
    ] {
        let mut src = LldpSource::with_json_file(file.clone());
        let r = src.sample(&input(), &mut vec![]);
        let SourceState::Failed(why) = &r.state else {
            panic!("{:?}", r.state)
        };
        assert!(
            why.starts_with(&format!("lldp.json_file {}: ", file.display())),
            "{why}"
        );
        assert!(why.contains(&cause), "{why}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
