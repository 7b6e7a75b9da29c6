//! NIC against switch: which side of a link differs from what the
//! configuration expects (`expect.*`), so that a fix moves that side
//! toward it and never copies the other side's mistake (a switch reached
//! through a cable on the wrong rail says nothing about what this NIC
//! should be); without an expectation, both fixes. The PFC and DSCP
//! comparisons of `switch_pfc_mismatch` and `switch_dscp_mismatch` use it.
//!
//! `switch_frame_below_mtu`: the switch port's maximum frame size, from its
//! LLDP IEEE 802.3 TLV, against what this host sends: the frames of RoCE
//! at the port's RoCE MTU (critical: RDMA messages are dropped), or of the
//! netdev MTU (warning: jumbo TCP is dropped, RoCE fits).

use roce_host::Priorities;
use roce_netdev::Netdev;

use super::fabric::{list, roce_mtu, roce_netdevs, ROCE_HEADER_BYTES};
use super::{Context, Finding, Rule, RuleId, Severity};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[Rule {
    id: RuleId::SwitchFrameBelowMtu,
    checks: "the switch port's maximum frame size (LLDP 802.3 TLV) carries the RoCE MTU and the netdev MTU of each RoCE netdev",
    evaluate: switch_frame_below_mtu,
}];

/// Which side differs from the expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Differs {
    /// The NIC differs; the switch is as expected.
    Nic,
    /// The switch differs; the NIC is as expected.
    Switch,
    /// Both differ from it.
    Both,
    /// Both match it where it speaks, and differ elsewhere.
    Neither,
    /// No expectation to judge by.
    Unknown,
}

/// For PFC: which side lacks `expect.pfc_priority`.
pub fn pfc_differs(nic: Priorities, sw: Priorities, expect: Option<u8>) -> Differs {
    let Some(e) = expect.map(|e| e & 7) else {
        return Differs::Unknown;
    };
    match (nic.contains(e), sw.contains(e)) {
        (true, true) => Differs::Neither,
        (true, false) => Differs::Switch,
        (false, true) => Differs::Nic,
        (false, false) => Differs::Both,
    }
}

/// For a DSCP the two map differently: which side's priority is not the
/// expected RoCE priority, when the DSCP is the RoCE one.
pub fn dscp_differs(nic_prio: u8, sw_prio: u8, expect: Option<u8>) -> Differs {
    let Some(e) = expect.map(|e| e & 7) else {
        return Differs::Unknown;
    };
    match (nic_prio == e, sw_prio == e) {
        (true, false) => Differs::Switch,
        (false, true) => Differs::Nic,
        (false, false) => Differs::Both,
        (true, true) => Differs::Neither,
    }
}

/// `dcb pfc set dev <name> prio-pfc all:off 3:on`.
fn dcb_pfc(name: &str, on: Priorities) -> String {
    format!(
        "dcb pfc set dev {name} prio-pfc all:off{}",
        on.iter().map(|p| format!(" {p}:on")).collect::<String>()
    )
}

/// Which side differs from `expect.pfc_priority` (evidence) and the fix
/// that moves that side toward it; both fixes without the expectation;
/// none that copies the switch's settings when the cable is on another
/// rail's switch.
pub fn pfc_fix(
    ctx: &Context,
    s: &Snapshot,
    name: &str,
    via: &str,
    nic: Priorities,
    sw: Priorities,
) -> (String, String) {
    if let Some(want) = super::lldp::off_rail(ctx, s, name) {
        return (
            format!("the switch is not this port's rail switch ({want}, expect.rails)"),
            format!("Move {name}'s cable to its rail's switch ({want}, lldp_rail_mismatch) first; the switch it reaches now is not the one to match, so do not copy its PFC into this port"),
        );
    }
    let e = ctx.expect.pfc_priority.map(|e| e & 7);
    let want = e.map(|e| Priorities::from_iter([e])).unwrap_or_default();
    let e_text = e.map_or(String::new(), |e| e.to_string());
    let side = match pfc_differs(nic, sw, e) {
        Differs::Switch => format!("expect.pfc_priority {e_text}: the switch differs"),
        Differs::Nic => format!("expect.pfc_priority {e_text}: this port differs"),
        Differs::Both => format!("expect.pfc_priority {e_text}: both differ"),
        Differs::Neither => {
            format!("expect.pfc_priority {e_text}: both have it, and differ on other priorities")
        }
        Differs::Unknown => "no expect.pfc_priority says which side is right".to_string(),
    };
    let fix = match pfc_differs(nic, sw, e) {
        Differs::Switch => format!(
            "The switch port differs from the fabric's RoCE priority {e_text} (expect.pfc_priority): enable PFC on priority {e_text} on the switch port ({via}); this port's PFC ({}) is as expected",
            list(nic)
        ),
        Differs::Nic => format!(
            "This port differs from the fabric's RoCE priority {e_text} (expect.pfc_priority): {} (or mlnx_qos -i {name} --pfc {})",
            dcb_pfc(name, want),
            (0..8u8).map(|p| if p == e.unwrap_or(8) { "1" } else { "0" }).collect::<Vec<_>>().join(",")
        ),
        Differs::Both => format!(
            "Neither side runs PFC on the fabric's RoCE priority {e_text} (expect.pfc_priority): on this port {}; and enable PFC on priority {e_text} on the switch port ({via})",
            dcb_pfc(name, want)
        ),
        Differs::Neither => {
            let nic_only = nic.difference(sw);
            if nic_only.is_empty() {
                format!(
                    "The switch port ({via}) pauses priority {} besides the RoCE priority {e_text}: turn that off on the switch port, or, if the fabric keeps it lossless, on this port too: {}",
                    list(sw.difference(nic)),
                    dcb_pfc(name, nic.union(sw))
                )
            } else {
                format!(
                    "Priority {} is not the fabric's RoCE priority {e_text}: turn its PFC off on this port ({}), or, if the fabric keeps it lossless, enable it on the switch port ({via})",
                    list(nic_only),
                    dcb_pfc(name, nic.difference(nic_only))
                )
            }
        }
        Differs::Unknown => format!(
            "NIC and switch disagree and no expect.pfc_priority says which is right: either enable PFC on priority {} on the switch port ({via}), or set this port as the switch port has it: {}; then set expect.pfc_priority to the fabric's RoCE priority",
            list(nic),
            dcb_pfc(name, sw)
        ),
    };
    (side, fix)
}

/// Which side maps the RoCE DSCP off `expect.pfc_priority` and the fix
/// of that side, per differing DSCP; both fixes where nothing says which
/// is right; none that copies an off-rail switch's map.
pub fn dscp_fix(
    ctx: &Context,
    s: &Snapshot,
    n: &Netdev,
    via: &str,
    diff: &[(u8, u8, u8, &str)],
) -> (String, String) {
    let name = &n.name;
    if let Some(want) = super::lldp::off_rail(ctx, s, name) {
        return (
            format!("the switch is not this port's rail switch ({want}, expect.rails)"),
            format!("Move {name}'s cable to its rail's switch ({want}, lldp_rail_mismatch) first; the switch it reaches now is not the one to match, so do not copy its DSCP map into this port"),
        );
    }
    let roce = super::fabric::roce_dscp(n, ctx.expect.nccl_ib_tc);
    let e = ctx.expect.pfc_priority.map(|e| e & 7);
    let mut sides = Vec::new();
    let mut fixes = Vec::new();
    for &(d, sp, np, _) in diff {
        let judged = if d == roce.dscp && roce.configured() {
            e
        } else {
            None
        };
        let dscp = if judged.is_some() {
            format!("the RoCE {}", roce.describe())
        } else {
            format!("DSCP {d}")
        };
        let want = judged.unwrap_or(8);
        match dscp_differs(np, sp, judged) {
            Differs::Switch => {
                sides.push(format!(
                    "{dscp}: the switch differs from expect.pfc_priority {want}"
                ));
                fixes.push(format!(
                    "map {dscp} to priority {want} on the switch port ({via}), as this port does"
                ));
            }
            Differs::Nic => {
                sides.push(format!(
                    "{dscp}: this port differs from expect.pfc_priority {want}"
                ));
                fixes.push(format!("on this port dcb app replace dev {name} dscp-prio {d}:{want} (or mlnx_qos -i {name} --dscp2prio set,{d},{want})"));
            }
            Differs::Both | Differs::Neither => {
                sides.push(format!(
                    "{dscp}: both differ from expect.pfc_priority {want}"
                ));
                fixes.push(format!("map {dscp} to priority {want} on both: dcb app replace dev {name} dscp-prio {d}:{want}, and on the switch port ({via})"));
            }
            Differs::Unknown => {
                sides.push(format!("{dscp}: nothing expected says which side is right"));
                fixes.push(format!("either on this port dcb app replace dev {name} dscp-prio {d}:{sp}, or on the switch port ({via}) map DSCP {d} to priority {np}; expect.pfc_priority with expect.nccl_ib_tc says which"));
            }
        }
    }
    (
        sides.join("; "),
        format!(
            "Use the fabric's DSCP map on both sides: {}",
            fixes.join("; ")
        ),
    )
}

fn switch_frame_below_mtu(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let Some(mtu) = n.mtu else { continue };
        let Some(pdu) = super::lldp::lldp_port(s, &n.name).and_then(|p| p.neighbour.as_ref())
        else {
            continue;
        };
        let Some(mfs) = pdu.max_frame_size.map(u64::from) else {
            continue;
        };
        // The 802.3 TLV gives the largest frame, Ethernet header and FCS
        // included; some switches put their IP MTU in it. Judged as if it
        // were the IP MTU (the generous reading), so that neither reading
        // raises a false alarm: RoCE at the port's RoCE MTU needs that MTU
        // plus the kernel's 96 RoCE header bytes (iboe_get_mtu), TCP the
        // netdev MTU.
        let roce = roce_mtu(mtu);
        let roce_needs = roce + ROCE_HEADER_BYTES;
        let (severity, what) = if mfs < roce_needs {
            (
                Severity::Critical,
                format!("RoCE packets at the port's RoCE MTU {roce} need {roce_needs} bytes and are dropped by the switch: RDMA messages larger than its frames never arrive"),
            )
        } else if mfs < mtu {
            (
                Severity::Warning,
                format!("frames of the netdev MTU {mtu} are dropped by the switch (RoCE at MTU {roce} fits)"),
            )
        } else {
            continue;
        };
        let who = super::lldp::neighbour_name(pdu);
        let name = &n.name;
        // The expected MTU says which side is off.
        let fix = match ctx.expect.mtu.map(u64::from) {
            Some(e) if mfs < e => format!(
                "Raise the switch port's MTU ({who}) to the fabric's: at least {e} (expect.mtu), commonly 9216 on data-center switches; this port's MTU {mtu} is {}",
                if mtu == e { "as expected" } else { "mtu_below_jumbo's to judge" }
            ),
            Some(e) => format!(
                "Lower {name}'s MTU to the expected {e} (ip link set dev {name} mtu {e}; expect.mtu), which the switch port's {mfs} carries"
            ),
            None => format!(
                "Make the MTU the same end to end: raise the switch port's MTU ({who}) to at least {mtu} (9216 is common), or lower {name}'s to what the switch carries (ip link set dev {name} mtu {}); set expect.mtu to say which is intended",
                mfs.saturating_sub(18).max(1280)
            ),
        };
        out.push(Finding {
            rule: RuleId::SwitchFrameBelowMtu,
            severity,
            finding: format!(
                "{}: the switch port's maximum frame size {mfs} is below what this port sends: {what}",
                subject.describe()
            ),
            evidence: format!(
                "netdev MTU {mtu} (RoCE MTU {roce}); switch port {who}: maximum frame size {mfs} (LLDP IEEE 802.3 TLV){}; expected at least {} for RoCE and {mtu} for the netdev MTU",
                ctx.expect.mtu.map_or(String::new(), |e| format!("; expect.mtu {e}")),
                roce_needs
            ),
            fix,
            verify: format!("lldpcli show neighbors ports {name} details | grep -i mfs; ip link show {name}"),
            subject,
        });
    }
    out
}
