//! Rules on how a RoCE port's lossless priorities are scheduled, buffered
//! and agreed with the switch: ETS (the traffic class a lossless priority
//! sits in and its bandwidth), the receive buffer behind it, and what the
//! switch port advertised through DCBX (its PFC priorities and DSCP
//! mapping), plus whether the host can see the switch at all.
//!
//! "Lossless priority" is a priority with PFC on in the NIC's
//! `DCB_ATTR_IEEE_PFC`; that is where RoCE is meant to run. A netdev whose
//! DCB was not read, or that has no lossless priority, is left alone: it
//! is not configured for lossless RoCE, which `pfc_priority_mismatch`
//! judges. Each rule reads only what the driver reported; a part it lacks
//! (no ETS, no buffers, no peer view) silences the rule, never fires it,
//! except `switch_view_unavailable`, which says exactly that (Info only,
//! and once per host for mlx5: its driver has no DCBX peer callbacks in
//! any mode, upstream or MLNX_OFED, so the peer rules never fire there).

use roce_host::Priorities;
use roce_netdev::dcb::{dcbx_mode_name, tsa_name, DcbConfig, TSA_ETS, TSA_STRICT};
use roce_netdev::{DcbOutcome, Netdev, Trust};

use super::fabric::{dscp_priority, is_mlx5, list, roce_netdevs};
use super::switch_side::{dscp_fix, pfc_fix};
use super::{Context, Finding, Rule, RuleId, Severity, Subject};

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::RoceTcShared,
        checks: "each lossless (PFC) priority has an ETS traffic class without lossy priorities that carry this host's traffic (priority 0, the DSCP APP table's, CNPs', rdma_cm ToS's)",
        evaluate: roce_tc_shared,
    },
    Rule {
        id: RuleId::RoceTcNoBandwidth,
        checks: "the ETS traffic class of each lossless priority has a bandwidth guarantee: not ETS 0%, not ETS below a strict class that holds priority 0",
        evaluate: roce_tc_no_bandwidth,
    },
    Rule {
        id: RuleId::LosslessBufferNoHeadroom,
        checks: "each lossless priority lands on a receive buffer with a size (mlx5 DCB buffers; a driver reporting no buffer sizes at all is not judged)",
        evaluate: lossless_buffer_no_headroom,
    },
    Rule {
        id: RuleId::SwitchPfcMismatch,
        checks: "the switch port's PFC priorities (DCBX peer, else its LLDP DCBX TLVs) include the NIC's, and the switch pauses no other priority this host's traffic uses; where the NIC's PFC cannot be read (no DCB netlink), they include expect.pfc_priority",
        evaluate: switch_pfc_mismatch,
    },
    Rule {
        id: RuleId::SwitchDscpMismatch,
        checks: "each DSCP the host uses (its APP table, rdma_cm ToS) that the switch port's APP table (DCBX peer) lists maps to the same priority on both",
        evaluate: switch_dscp_mismatch,
    },
    Rule {
        id: RuleId::SwitchViewUnavailable,
        checks: "a port with lossless priorities runs DCBX and the switch advertised its settings, so NIC and switch can be compared (mlx5, which reports no DCBX peer view in any mode: said once per host)",
        evaluate: switch_view_unavailable,
    },
];

/// The DCB configuration and the lossless priorities (non-empty) of a RoCE
/// netdev.
fn lossless(n: &Netdev) -> Option<(&DcbConfig, Priorities)> {
    let DcbOutcome::Ok(dcb) = &n.dcb else {
        return None;
    };
    let pfc = dcb.pfc_enabled?;
    (!pfc.is_empty()).then_some((dcb, pfc))
}

/// A RoCE netdev with PFC on some priorities, as the lossless-QoS rules
/// judge it.
struct Lossless<'a> {
    netdev: &'a Netdev,
    subject: Subject,
    dcb: &'a DcbConfig,
    /// The priorities with PFC on, never empty.
    pfc: Priorities,
}

/// The RoCE netdevs of the latest sample that have lossless priorities.
fn lossless_netdevs<'a>(ctx: &'a Context) -> Vec<Lossless<'a>> {
    let Some(s) = ctx.latest() else { return vec![] };
    roce_netdevs(s)
        .into_iter()
        .filter_map(|(netdev, subject)| {
            let (dcb, pfc) = lossless(netdev)?;
            Some(Lossless {
                netdev,
                subject,
                dcb,
                pfc,
            })
        })
        .collect()
}

/// The priorities this host's traffic can use on the port, as far as its
/// configuration tells: 0 (unmarked traffic, TCP), each priority the NIC's
/// DSCP APP table maps to, the CNPs' priority and the priority of rdma_cm's
/// default ToS. A priority outside them carries none of this host's
/// traffic, so sharing its class or its pause setting costs nothing. With
/// trust pcp the priority is whatever the VLAN tag says, which the port's
/// configuration does not tell: every priority counts.
fn used_priorities(n: &Netdev, dcb: &DcbConfig) -> Priorities {
    if dcb.trust() != Trust::Dscp {
        return Priorities::ALL;
    }
    let cm = n
        .qos
        .rdma_cm_tos
        .and_then(|tos| dscp_priority(dcb, tos >> 2))
        .map(|(p, _)| p);
    std::iter::once(0)
        .chain(dcb.dscp_map().iter().map(|(_, p)| *p))
        .chain(n.qos.cnp_prio)
        .chain(cm)
        .collect()
}

/// The DSCPs this host marks or classifies on purpose: the NIC's DSCP APP
/// entries and rdma_cm's default ToS. Others fall to the default DSCP >> 3
/// mapping and carry nothing the host sends.
fn used_dscps(n: &Netdev, dcb: &DcbConfig) -> Vec<u8> {
    let mut used: Vec<u8> = dcb.dscp_map().iter().map(|(d, _)| *d).collect();
    used.extend(n.qos.rdma_cm_tos.map(|t| t >> 2));
    used.sort_unstable();
    used.dedup();
    used
}

fn joined(values: &[u8]) -> String {
    values
        .iter()
        .map(u8::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn roce_tc_shared(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in lossless_netdevs(ctx) {
        let (n, subject, dcb, pfc) = (l.netdev, l.subject, l.dcb, l.pfc);
        let Some(ets) = dcb.ets else { continue };
        // A lossy priority in the lossless priority's traffic class: the
        // same transmit queue and scheduler share, so bulk TCP (priority 0
        // is where unmarked traffic lands) queues in front of RoCE, and a
        // pause of the class stops the lossy traffic too. A lossy priority
        // no traffic of this host uses (nothing maps to it) costs nothing:
        // switch-style maps often group unused priorities with RoCE's.
        let used = used_priorities(n, dcb);
        let mut shared = Vec::new();
        for p in pfc {
            let tc = ets.prio_tc[usize::from(p)];
            let lossy: Priorities = used
                .difference(pfc)
                .iter()
                .filter(|q| ets.prio_tc[usize::from(*q)] == tc)
                .collect();
            if !lossy.is_empty() {
                shared.push((p, tc, lossy));
            }
        }
        if shared.is_empty() {
            continue;
        }
        let name = &n.name;
        let what = shared
            .iter()
            .map(|(p, tc, q)| format!("priority {p} shares TC {tc} with priority {}", list(*q)))
            .collect::<Vec<_>>()
            .join("; ");
        let mut fixed = ets.prio_tc;
        for p in pfc {
            fixed[usize::from(p)] = p;
        }
        for q in 0..8u8 {
            if !pfc.contains(q) && pfc.contains(fixed[usize::from(q)]) {
                fixed[usize::from(q)] = if pfc.contains(0) { 1 } else { 0 };
            }
        }
        let prio_tc = fixed
            .iter()
            .enumerate()
            .map(|(p, tc)| format!("{p}:{tc}"))
            .collect::<Vec<_>>()
            .join(" ");
        out.push(Finding {
            rule: RuleId::RoceTcShared,
            severity: Severity::Warning,
            finding: format!(
                "{}: a lossless RoCE priority shares its ETS traffic class with lossy traffic ({what}): TCP and other lossy traffic queue in front of RoCE and are paused with it",
                subject.describe()
            ),
            evidence: format!(
                "PFC enabled priorities: {}; prio_tc {}; priorities this host's traffic uses (priority 0, the DSCP APP table, CNPs, rdma_cm ToS): {}; expected every lossless priority in a traffic class without used lossy priorities",
                list(pfc),
                joined(&ets.prio_tc),
                list(used)
            ),
            fix: format!(
                "Give the RoCE priority its own traffic class, as on the switch port: dcb ets set dev {name} prio-tc {prio_tc} (or mlnx_qos -i {name} --prio_tc {})",
                joined(&fixed)
            ),
            verify: format!("dcb ets show dev {name} prio-tc"),
            subject,
        });
    }
    out
}

fn roce_tc_no_bandwidth(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in lossless_netdevs(ctx) {
        let (n, subject, dcb, pfc) = (l.netdev, l.subject, l.dcb, l.pfc);
        let Some(ets) = dcb.ets else { continue };
        let tc0 = ets.prio_tc[0];
        let mut why = Vec::new();
        let mut tcs = Vec::new();
        for p in pfc {
            let tc = ets.prio_tc[usize::from(p)];
            if tcs.contains(&tc) {
                continue;
            }
            let tsa = ets.tc_tsa[usize::from(tc)];
            let bw = ets.tc_tx_bw[usize::from(tc)];
            if tsa == TSA_ETS && bw == 0 {
                why.push(format!(
                    "priority {p}: TC {tc} is ets with 0% bandwidth, it only gets what other classes leave"
                ));
                tcs.push(tc);
            } else if tsa == TSA_ETS
                && tc0 != tc
                && !pfc.contains(0)
                && ets.tc_tsa[usize::from(tc0)] == TSA_STRICT
            {
                // Strict classes are served before every ETS class; with
                // priority 0 (unmarked, bulk traffic) strict, RoCE gets
                // what is left of it.
                why.push(format!(
                    "priority {p}: TC {tc} is ets ({bw}%) but TC {tc0}, which holds priority 0, is strict and is served first"
                ));
                tcs.push(tc);
            }
        }
        if why.is_empty() {
            continue;
        }
        let name = &n.name;
        let tsa: Vec<&str> = ets.tc_tsa.iter().map(|t| tsa_name(*t)).collect();
        let tc = tcs[0];
        out.push(Finding {
            rule: RuleId::RoceTcNoBandwidth,
            severity: Severity::Warning,
            finding: format!(
                "{}: the traffic class of a lossless RoCE priority has no bandwidth guarantee ({}): under load RoCE is starved and PFC pauses pile up",
                subject.describe(),
                why.join("; ")
            ),
            evidence: format!(
                "PFC enabled priorities: {}; prio_tc {}; tc_tsa {}; tc_bw {}; expected the RoCE class ets with a share (commonly 50% or more) and priority 0 not strict",
                list(pfc),
                joined(&ets.prio_tc),
                tsa.join(","),
                joined(&ets.tc_tx_bw)
            ),
            fix: format!(
                "Give the RoCE traffic class a bandwidth share, as on the switch port, and keep bulk traffic out of strict priority: e.g. dcb ets set dev {name} tc-tsa all:ets tc-bw {tc}:50 (the shares of the ets classes add up to 100; or mlnx_qos -i {name} --tsa ... --tcbw ...)"
            ),
            verify: format!("dcb ets show dev {name}"),
            subject,
        });
    }
    out
}

fn lossless_buffer_no_headroom(ctx: &Context) -> Vec<Finding> {
    let mut out = Vec::new();
    for l in lossless_netdevs(ctx) {
        let (n, subject, dcb, pfc) = (l.netdev, l.subject, l.dcb, l.pfc);
        let Some(b) = dcb.buffers else { continue };
        // A driver that reports no size for any buffer (all 0: a shared
        // pool, or sizes the firmware does not give back) says nothing
        // about headroom.
        if b.buffer_size.iter().all(|s| *s == 0) {
            continue;
        }
        // A lossless priority needs room to absorb what is in flight while
        // its pause travels to the sender; a buffer of size 0 has none, so
        // PFC cannot keep it lossless.
        let bad: Vec<(u8, u8)> = pfc
            .iter()
            .filter(|p| b.size_for(*p) == Some(0))
            .map(|p| (p, b.prio2buffer[usize::from(p)]))
            .collect();
        if bad.is_empty() {
            continue;
        }
        let name = &n.name;
        let what = bad
            .iter()
            .map(|(p, buf)| format!("priority {p} on buffer {buf} of 0 bytes"))
            .collect::<Vec<_>>()
            .join("; ");
        let sized = (0..8u8)
            .find(|i| b.buffer_size[usize::from(*i)] > 0)
            .map(|i| format!(" (buffer {i} has {} bytes)", b.buffer_size[usize::from(i)]))
            .unwrap_or_default();
        out.push(Finding {
            rule: RuleId::LosslessBufferNoHeadroom,
            severity: Severity::Warning,
            finding: format!(
                "{}: a lossless priority lands on a receive buffer without room ({what}): packets in flight when it pauses are dropped",
                subject.describe()
            ),
            evidence: format!(
                "PFC enabled priorities: {}; prio2buffer {}; buffer_size {}; total {}; expected every lossless priority on a buffer with a size{sized}",
                list(pfc),
                joined(&b.prio2buffer),
                b.buffer_size
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                b.total_size
            ),
            fix: format!(
                "Map the lossless priority to a sized buffer and let the driver compute its headroom from the cable length: dcb buffer set dev {name} prio-buffer <prio>:<buffer with a size> (or mlnx_qos -i {name} --prio2buffer ... --buffer_size ...); mlnx_qos -i {name} --cable_len <m>"
            ),
            verify: format!("dcb buffer show dev {name}"),
            subject,
        });
    }
    out
}

fn switch_pfc_mismatch(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let dcb = match &n.dcb {
            DcbOutcome::Ok(dcb) if dcb.pfc_enabled.is_some() => dcb,
            unread => {
                out.extend(switch_pfc_against_expected(ctx, s, n, unread, subject));
                continue;
            }
        };
        let (peer, lldp) = super::lldp::effective_peer(s, n, dcb);
        let via = lldp.unwrap_or_else(|| {
            let standard = peer.standard.map(|s| s.as_str()).unwrap_or("ieee");
            format!("DCBX {standard} peer")
        });
        let (Some(nic), Some(sw)) = (dcb.pfc_enabled, peer.pfc_enabled) else {
            continue;
        };
        if nic == sw {
            continue;
        }
        let nic_only = nic.difference(sw);
        // The switch pausing a priority that none of this host's traffic
        // uses (fabric-wide lossless classes, e.g. 3 and 4) is harmless.
        let used = used_priorities(n, dcb);
        let sw_only: Priorities = sw
            .difference(nic)
            .iter()
            .filter(|p| used.contains(*p))
            .collect();
        if nic_only.is_empty() && sw_only.is_empty() {
            continue;
        }
        let (severity, what) = if !nic_only.is_empty() {
            (
                Severity::Critical,
                format!(
                    "PFC is on priority {} here but not on the switch port: the switch ignores this port's pauses and drops that traffic when congested, so RoCE is not lossless",
                    list(nic_only)
                ),
            )
        } else {
            (
                Severity::Warning,
                format!(
                    "the switch port pauses priority {} where PFC is off here: its traffic is lossy on this side while the switch treats it as lossless",
                    list(sw_only)
                ),
            )
        };
        let name = &n.name;
        let (side, fix) = pfc_fix(ctx, s, name, &via, nic, sw);
        out.push(Finding {
            rule: RuleId::SwitchPfcMismatch,
            severity,
            finding: format!("{}: NIC and switch disagree on PFC: {what}", subject.describe()),
            evidence: format!(
                "NIC PFC enabled priorities: {} (pfc_en 0x{nic:02x}); switch port ({via}): {} (0x{sw:02x}); {side}",
                list(nic),
                list(sw)
            ),
            fix,
            verify: format!("dcb pfc show dev {name}; the switch port's PFC configuration (e.g. show interfaces ... priority-flow-control)"),
            subject,
        });
    }
    out
}

/// Where the NIC's own PFC cannot be read (a driver without DCB netlink,
/// DCB not read or failed), the switch port's PFC as its LLDP DCBX TLVs
/// give it against the RoCE priority this host expects
/// (`expect.pfc_priority`): a switch port that does not pause that
/// priority drops RoCE traffic when congested, whatever the NIC does.
/// Priorities the switch pauses beyond it are not judged (fabric-wide
/// lossless classes are common, and harmless to traffic not on them).
fn switch_pfc_against_expected(
    ctx: &Context,
    s: &crate::snapshot::Snapshot,
    n: &Netdev,
    dcb: &DcbOutcome,
    subject: Subject,
) -> Option<Finding> {
    let e = ctx.expect.pfc_priority?;
    let (peer, via) = super::lldp::lldp_peer(s, &n.name)?;
    let sw = peer.pfc_enabled?;
    if sw.contains(e & 7) {
        return None;
    }
    let unknown = match dcb {
        DcbOutcome::Unsupported => "its driver offers no DCB netlink".to_string(),
        DcbOutcome::Disabled => "DCB not read".to_string(),
        DcbOutcome::Failed(why) => format!("reading DCB failed: {why}"),
        DcbOutcome::Ok(_) => "the driver reports no PFC configuration".to_string(),
    };
    let on = sw;
    let name = &n.name;
    Some(Finding {
        rule: RuleId::SwitchPfcMismatch,
        severity: Severity::Critical,
        finding: format!(
            "{}: the switch port does not run PFC on priority {e}, this host's RoCE priority: it drops that traffic when congested instead of pausing it, so RoCE is not lossless",
            subject.describe()
        ),
        evidence: format!(
            "switch port ({via}): PFC enabled priorities {} (0x{sw:02x}); expected RoCE priority {e} (expect.pfc_priority); NIC PFC unknown ({unknown})",
            list(on)
        ),
        fix: format!(
            "Enable PFC on priority {e} on the switch port, as the fabric's RoCE priority; or, if the fabric's RoCE priority is {} (as the switch port says), put this host's RoCE traffic and PFC there and set expect.pfc_priority to it",
            on.first().map_or_else(|| "another".to_string(), |p| p.to_string())
        ),
        verify: format!(
            "roce_lldp_switch_qos_info{{netdev=\"{name}\"}} (the switch port's PFC as it advertises it, label pfc); the switch port's PFC configuration (e.g. show interfaces ... priority-flow-control)"
        ),
        subject,
    })
}

fn switch_dscp_mismatch(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let DcbOutcome::Ok(dcb) = &n.dcb else {
            continue;
        };
        // A switch that advertises no DSCP entries says nothing about its
        // map; a port that trusts PCP does not classify by DSCP at all
        // (roce_trust_pcp).
        let (peer, lldp) = super::lldp::effective_peer(s, n, dcb);
        let via = lldp.unwrap_or_else(|| "DCBX peer".to_string());
        let Some(peer) = peer.dscp_map().filter(|m| !m.is_empty()) else {
            continue;
        };
        if dcb.trust() != Trust::Dscp {
            continue;
        }
        let mut diff = Vec::new();
        // Only the DSCPs this host uses count: switches commonly advertise
        // their whole map, and a DSCP nobody marks is harmless wherever it
        // lands. The CNPs' DSCP is judged with the rest of their
        // classification by cnp_priority_best_effort: one verdict.
        let used = used_dscps(n, dcb);
        for &(d, sp) in peer
            .iter()
            .filter(|(d, _)| Some(*d) != n.qos.cnp_dscp && used.contains(d))
        {
            if let Some((np, how)) = dscp_priority(dcb, d) {
                if np != sp {
                    diff.push((d, sp, np, how));
                }
            }
        }
        if diff.is_empty() {
            continue;
        }
        let name = &n.name;
        let pfc = dcb.pfc_enabled.unwrap_or_default();
        // A difference on a lossless priority, either side, loses RoCE
        // traffic; elsewhere it only misplaces it.
        let lossless = diff
            .iter()
            .any(|(_, sp, np, _)| pfc.contains(*sp) || pfc.contains(*np));
        let severity = if lossless {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let what = diff
            .iter()
            .map(|(d, sp, np, how)| {
                format!("DSCP {d}: switch priority {sp}, NIC priority {np} ({how})")
            })
            .collect::<Vec<_>>()
            .join("; ");
        let (side, fix) = dscp_fix(ctx, s, n, &via, &diff);
        out.push(Finding {
            rule: RuleId::SwitchDscpMismatch,
            severity,
            finding: format!(
                "{}: NIC and switch map DSCP to different priorities ({what}): traffic marked so is classified differently at each end of the link",
                subject.describe()
            ),
            evidence: format!(
                "switch APP table ({via}): {}; NIC trust dscp; PFC enabled priorities: {}; {side}",
                peer.iter()
                    .map(|(d, p)| format!("{d}->{p}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                list(pfc)
            ),
            fix,
            verify: format!("dcb app show dev {name} dscp-prio"),
            subject,
        });
    }
    out
}

fn switch_view_unavailable(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    // mlx5 ports with lossless priorities and no peer view: one finding for
    // the host, since the driver (upstream and MLNX_OFED) has no DCBX peer
    // callbacks and no setting on the host changes that.
    let mut mlx5: Vec<(&Netdev, &DcbConfig, Priorities)> = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let Some((dcb, pfc)) = lossless(n) else {
            continue;
        };
        if !super::lldp::effective_peer(s, n, dcb).0.is_empty() {
            continue;
        }
        if is_mlx5(n) {
            mlx5.push((n, dcb, pfc));
            continue;
        }
        let mode = dcb.dcbx.map(dcbx_mode_name);
        let why = match mode {
            None => "the driver reports no DCBX mode".to_string(),
            Some(m @ ("off" | "static")) => format!("DCBX is {m}"),
            Some(m) => format!(
                "DCBX is {m} but the switch advertised nothing (LLDP/DCBX off on the switch port, or a driver without peer callbacks in this mode)"
            ),
        };
        let name = &n.name;
        out.push(Finding {
            rule: RuleId::SwitchViewUnavailable,
            severity: Severity::Info,
            finding: format!(
                "{}: the host cannot see the switch port's PFC and DSCP settings ({why}): a NIC/switch mismatch on the lossless priority {} is invisible here",
                subject.describe(),
                list(pfc)
            ),
            evidence: format!(
                "DCBX mode {}; no DCB_ATTR_IEEE_PEER_* / CEE peer attributes; PFC enabled priorities: {}",
                mode.unwrap_or("not reported"),
                list(pfc)
            ),
            fix: format!(
                "To compare from the host, run DCBX: in the NIC firmware (dcb dcbx set dev {name} lld-managed ieee) or with an LLDP agent (lldpad), or let the exporter read the switch's DCBX TLVs (lldp.mode: lldpd with lldpd running, or capture); and enable DCBX on the switch port; otherwise compare with the switch's configuration by hand"
            ),
            verify: format!("dcb dcbx show dev {name}; dcb pfc show dev {name}"),
            subject,
        });
    }
    if let Some((first, _, _)) = mlx5.first() {
        let first = first.name.clone();
        let names: Vec<&str> = mlx5.iter().map(|(n, _, _)| n.name.as_str()).collect();
        let modes: Vec<String> = mlx5
            .iter()
            .map(|(n, dcb, pfc)| {
                format!(
                    "{} DCBX {} PFC {}",
                    n.name,
                    dcb.dcbx.map(dcbx_mode_name).unwrap_or("not reported"),
                    list(*pfc)
                )
            })
            .collect();
        out.push(Finding {
            rule: RuleId::SwitchViewUnavailable,
            severity: Severity::Info,
            finding: format!(
                "this host: the mlx5 driver gives no DCBX peer view, so the switch ports' PFC and DSCP settings cannot be read through DCB netlink on {} and a NIC/switch mismatch is not judged from the host; nothing on the host is wrong",
                names.join(", ")
            ),
            evidence: format!(
                "driver mlx5_core (mlx5e_dcbnl_ops has no ieee_peer_getets, ieee_peer_getpfc or peer_getapptable); no DCB_ATTR_IEEE_PEER_* attributes; {}",
                modes.join("; ")
            ),
            fix: "No change on the host makes mlx5 report the switch's view: compare the switch ports' PFC priorities and DSCP map with this host's by hand, or let the exporter read the switch's DCBX TLVs from LLDP (lldp.mode: lldpd with lldpd running, or capture; docs/lldp.md), which switch_pfc_mismatch and switch_dscp_mismatch then use. Firmware DCBX (mlxconfig -d <pci> set LLDP_NB_DCBX_P1=TRUE LLDP_NB_RX_MODE_P1=ALL LLDP_NB_TX_MODE_P1=ALL) lets the NIC adopt a willing switch's settings, but still reports none of them to the host".to_string(),
            verify: format!(
                "dcb dcbx show dev {first}; dcb pfc show dev {first}; dcb app show dev {first} dscp-prio"
            ),
            subject: Subject::default(),
        });
    }
    out
}
