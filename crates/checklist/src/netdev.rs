//! The RoCE netdevs: their lossless-Ethernet configuration, and each
//! lossless priority compared with the switch port's view (DCBX or LLDP)
//! with the port's cabling.

use roce_host::Priorities;
use roce_model::snapshot::Snapshot;
use roce_netdev::DcbOutcome;
use roce_rules::{self as rules, Area, Finding, RuleId, Subject};

use crate::{in_areas, item, status_of, Item, Status};

/// The lossless-Ethernet configuration of each RoCE netdev: MTU, PFC,
/// trust and DSCP map, ECN on the PFC priorities.
pub(crate) fn roce_config(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    use rules::fabric::{list, roce_mtu, roce_netdevs};
    let section = "RoCE netdev configuration";
    let netdevs = roce_netdevs(s);
    if netdevs.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            "no netdev of a RoCE port was read".into(),
        ));
        return;
    }
    for (n, subject) in netdevs {
        let mut parts = Vec::new();
        if let Some(mtu) = n.mtu {
            parts.push(format!("MTU {mtu} (RoCE MTU {})", roce_mtu(mtu)));
        }
        let mut pfc = Priorities::NONE;
        match &n.dcb {
            DcbOutcome::Ok(c) => {
                if let Some(on) = c.pfc_enabled {
                    pfc = on;
                    parts.push(format!("PFC on priority {}", list(pfc)));
                }
                let map = c.dscp_map();
                let trust = c.trust().as_str();
                if map.is_empty() {
                    parts.push(format!("trust {trust}"));
                } else {
                    parts.push(format!(
                        "trust {trust} (DSCP {})",
                        map.iter()
                            .map(|(d, p)| format!("{d}->{p}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            DcbOutcome::Unsupported => parts.push("no DCB support".into()),
            DcbOutcome::Disabled => parts.push("DCB not read".into()),
            DcbOutcome::Failed(why) => parts.push(format!("DCB read failed ({why})")),
        }
        match &n.ecn {
            Some(e) if !pfc.is_empty() => {
                let role =
                    |entries: &[(u8, bool)], p: u8| match entries.iter().find(|(q, _)| *q == p) {
                        Some((_, true)) => "on",
                        Some((_, false)) => "off",
                        None => "absent",
                    };
                parts.push(
                    pfc.iter()
                        .map(|p| {
                            format!(
                                "ECN priority {p} np {} rp {}",
                                role(&e.np, p),
                                role(&e.rp, p)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                );
            }
            Some(_) => {}
            None => parts.push("ECN not readable here (no ecn/ folder)".into()),
        }
        let status = status_of(
            in_areas(findings, &[Area::NetdevConfig])
                .filter(|f| f.subject.device == subject.device && f.subject.port == subject.port),
        );
        // Nothing wrong found is not the same as checked: without DCB the
        // PFC and DSCP settings are unknown.
        let status = status.checked(matches!(n.dcb, DcbOutcome::Ok(_)));
        out.push(item(
            section,
            status,
            format!("{}: {}", subject.describe(), parts.join(", ")),
        ));
    }
}

/// Each lossless (PFC) priority of each RoCE netdev: the NIC's PFC, the
/// switch port's (when DCBX gives it), DCQCN enable and parameters, its
/// traffic class, its buffer, and the DSCPs mapped to it on each side.
pub(crate) fn nic_vs_switch(
    s: &Snapshot,
    findings: &[Finding],
    rails_set: bool,
    out: &mut Vec<Item>,
) {
    use roce_netdev::dcb::{dcbx_mode_name, tsa_name};
    use rules::fabric::roce_netdevs;
    let section = "NIC vs switch";
    for (n, subject) in roce_netdevs(s) {
        cabling(s, n, &subject, findings, rails_set, section, out);
        let DcbOutcome::Ok(c) = &n.dcb else { continue };
        let Some(pfc) = c.pfc_enabled else { continue };
        let here = || {
            on_port(
                findings,
                &subject,
                &[
                    RuleId::SwitchPfcMismatch,
                    RuleId::SwitchDscpMismatch,
                    RuleId::PfcWithoutEcn,
                    RuleId::LosslessBufferNoHeadroom,
                    RuleId::RoceTcShared,
                    RuleId::RoceTcNoBandwidth,
                ],
            )
        };
        if pfc.is_empty() {
            out.push(item(
                section,
                status_of(here().filter(|f| f.rule == RuleId::SwitchPfcMismatch)),
                format!(
                    "{}: no lossless priority (PFC off everywhere)",
                    subject.describe()
                ),
            ));
            continue;
        }
        let (peer, lldp_via) = rules::lldp::effective_peer(s, n, c);
        let dcbx = c.dcbx.map(dcbx_mode_name).unwrap_or("not reported");
        let peer_source = match &lldp_via {
            Some(via) => via.clone(),
            None => format!("DCBX {}", peer.standard.map(|s| s.as_str()).unwrap_or(dcbx)),
        };
        let nic_map = c.dscp_map();
        let peer_map = peer.dscp_map();
        for p in pfc {
            let mut parts = vec!["NIC PFC on".to_string()];
            parts.push(match peer.pfc_enabled {
                Some(sw) if sw.contains(p) => format!("switch PFC on ({peer_source})"),
                Some(_) => format!("switch PFC OFF ({peer_source})"),
                None => format!("switch PFC not visible (DCBX {dcbx})"),
            });
            let role = |entries: &[(u8, bool)]| match entries.iter().find(|(q, _)| *q == p) {
                Some((_, true)) => "on",
                Some((_, false)) => "off",
                None => "absent",
            };
            match &n.ecn {
                Some(e) => parts.push(format!("DCQCN np {} rp {}", role(&e.np), role(&e.rp))),
                None => parts.push("DCQCN not readable".into()),
            }
            if !n.dcqcn.is_empty() {
                parts.push(format!(
                    "{} DCQCN parameters ({})",
                    n.dcqcn.len(),
                    n.dcqcn[0].source.as_str()
                ));
            }
            if let Some(ets) = &c.ets {
                let tc = ets.prio_tc[usize::from(p)];
                let tsa = ets.tc_tsa[usize::from(tc)];
                let share = if tsa == roce_netdev::dcb::TSA_ETS {
                    format!(" {}%", ets.tc_tx_bw[usize::from(tc)])
                } else {
                    String::new()
                };
                parts.push(format!("TC {tc} ({}{share})", tsa_name(tsa)));
            }
            if let Some(b) = &c.buffers {
                let buf = b.prio2buffer[usize::from(p)];
                parts.push(format!(
                    "buffer {buf} ({} bytes)",
                    b.buffer_size[usize::from(buf)]
                ));
            }
            let dscps = |map: &[(u8, u8)]| {
                let d: Vec<String> = map
                    .iter()
                    .filter(|(_, q)| *q == p)
                    .map(|(d, _)| d.to_string())
                    .collect();
                if d.is_empty() {
                    "none".to_string()
                } else {
                    d.join(",")
                }
            };
            parts.push(format!("DSCP NIC {}", dscps(&nic_map)));
            if let Some(m) = &peer_map {
                parts.push(format!("switch {}", dscps(m)));
            }
            let status = status_of(here().filter(|f| f.rule != RuleId::SwitchViewUnavailable));
            // Without the switch's view the comparison is not made.
            let status = status.checked(!peer.is_empty());
            out.push(item(
                section,
                status,
                format!("{} priority {p}: {}", subject.describe(), parts.join(", ")),
            ));
        }
    }
}

/// The port's LLDP neighbour (when the LLDP source runs): the switch and
/// switch port it is cabled to and what the LLDP rules found.
pub(crate) fn cabling(
    s: &Snapshot,
    n: &roce_netdev::Netdev,
    subject: &rules::Subject,
    findings: &[Finding],
    rails_set: bool,
    section: &'static str,
    out: &mut Vec<Item>,
) {
    let Some(lldp) = &s.lldp else { return };
    let Some(p) = rules::lldp::lldp_port(s, &n.name) else {
        return;
    };
    let here = on_port(
        findings,
        subject,
        &[
            RuleId::LldpNeighborMissing,
            RuleId::LldpNeighborChanged,
            RuleId::LldpRailMismatch,
        ],
    );
    let line = match &p.neighbour {
        Some(pdu) => {
            let mut parts = vec![format!(
                "cabled to {} (chassis {}, LLDP via {})",
                rules::lldp::neighbour_name(pdu),
                pdu.chassis_id.value,
                lldp.via
            )];
            if let Some(f) = &pdu.pfc {
                parts.push(format!("switch PFC on {}", rules::fabric::list(f.enable)));
            }
            if let Some(app) = &pdu.app {
                let dscp: Vec<String> = app
                    .iter()
                    .filter(|a| a.selector == roce_lldp::tlv::app_selector::DSCP)
                    .map(|a| format!("{}->{}", a.protocol, a.priority))
                    .collect();
                if !dscp.is_empty() {
                    parts.push(format!("switch DSCP {}", dscp.join(",")));
                }
            }
            let rail_wrong = findings.iter().any(|f| {
                f.rule == RuleId::LldpRailMismatch
                    && f.subject.device == subject.device
                    && f.subject.port == subject.port
            });
            parts.push(
                if rail_wrong {
                    "rail WRONG (lldp_rail_mismatch)"
                } else if rails_set {
                    "rail ok"
                } else {
                    "rail not judged (expect.rails unset)"
                }
                .to_string(),
            );
            parts.join(", ")
        }
        None => format!("no LLDP neighbour heard (LLDP via {})", lldp.via),
    };
    let status = status_of(here);
    let status = status.checked(p.neighbour.is_some());
    out.push(item(
        section,
        status,
        format!("{}: {line}", subject.describe()),
    ));
}

/// The findings of `rules` on the port of `subject`.
fn on_port<'a>(
    findings: &'a [Finding],
    subject: &'a Subject,
    rules: &'a [RuleId],
) -> impl Iterator<Item = &'a Finding> + Clone {
    findings.iter().filter(move |f| {
        f.subject.device == subject.device
            && f.subject.port == subject.port
            && rules.contains(&f.rule)
    })
}
