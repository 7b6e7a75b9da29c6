//! Rules on what LLDP tells about each RoCE port's link partner: a port
//! that hears no neighbour, and a neighbour that changed since start (the
//! cable moved). Also the switch's DCBX view for the QoS rules where the
//! driver offers none ([`effective_peer`]): upstream mlx5 has no DCBX peer
//! callbacks in host mode, so the switch's PFC and APP TLVs heard over
//! LLDP are the host's only view of the switch side.

use std::borrow::Cow;
use std::time::Duration;

use roce_netdev::dcb::{DcbApp, DcbConfig, DcbPeer, PeerStandard};
use roce_netdev::Netdev;
use roce_rdma::PortState;

use super::fabric::roce_netdevs;
use super::ports::find_port;
use super::{Context, Finding, Rule, RuleId, Severity};
use crate::snapshot::Snapshot;
use crate::sources::lldp::LldpPort;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::LldpNeighborMissing,
        checks: "an active RoCE port hears an LLDP neighbour (when the LLDP source runs): none for 3 times its TTL (or 6 minutes when none was ever heard) means the switch sends no LLDP or something on the host takes the frames",
        evaluate: lldp_neighbor_missing,
    },
    Rule {
        id: RuleId::LldpNeighborChanged,
        checks: "the switch port each RoCE port's LLDP neighbour names is the one first heard since the exporter started (not recabled)",
        evaluate: lldp_neighbor_changed,
    },
];

/// A neighbour is missing after this many TTLs without a frame.
const MISSING_TTLS: u32 = 3;
/// The TTL assumed for a port that never heard one: IEEE 802.1AB's
/// default (msgTxInterval 30 s times msgTxHold 4).
const DEFAULT_TTL: Duration = Duration::from_secs(120);

/// The LLDP view of a netdev, when the LLDP source ran.
pub fn lldp_port<'a>(s: &'a Snapshot, netdev: &str) -> Option<&'a LldpPort> {
    s.lldp.as_ref()?.ports.iter().find(|p| p.netdev == netdev)
}

/// The switch port's DCBX settings as the QoS rules compare them: the
/// driver's peer view when it has one, else the DCBX TLVs of the port's
/// LLDP neighbour, then with a phrase naming that neighbour.
pub fn effective_peer<'a>(
    s: &Snapshot,
    n: &Netdev,
    dcb: &'a DcbConfig,
) -> (Cow<'a, DcbPeer>, Option<String>) {
    let driver = || (Cow::Borrowed(&dcb.peer), None);
    if !dcb.peer.is_empty() {
        return driver();
    }
    let Some(pdu) = lldp_port(s, &n.name).and_then(|p| p.neighbour.as_ref()) else {
        return driver();
    };
    let peer = DcbPeer {
        standard: Some(PeerStandard::Ieee),
        pfc_enabled: pdu.pfc.map(|p| p.enable),
        apps: pdu.app.as_ref().map(|apps| {
            apps.iter()
                .map(|a| DcbApp {
                    selector: a.selector,
                    priority: a.priority,
                    protocol: a.protocol,
                })
                .collect()
        }),
        prio_tc: pdu.ets_configuration.map(|e| e.prio_tc),
    };
    if peer.is_empty() {
        return driver();
    }
    let who = neighbour_name(pdu);
    (Cow::Owned(peer), Some(format!("LLDP DCBX TLVs of {who}")))
}

/// "leaf-r3-a swp17" (system name, or chassis ID, and port ID).
pub fn neighbour_name(pdu: &roce_lldp::Lldpdu) -> String {
    format!(
        "{} port {}",
        pdu.system_name.as_deref().unwrap_or(&pdu.chassis_id.value),
        pdu.port_id.value
    )
}

fn identity_name(i: &roce_lldp::Identity) -> String {
    format!(
        "{} port {} (chassis {})",
        i.system_name.as_deref().unwrap_or("?"),
        i.port_id,
        i.chassis_id
    )
}

fn lldp_neighbor_missing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let Some(lldp) = &s.lldp else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let Some(r) = &n.rdma else { continue };
        let Some((_, port)) = find_port(s, &r.device, r.port) else {
            continue;
        };
        if port.state != Some(PortState::Active) {
            continue;
        }
        let Some(p) = lldp_port(s, &n.name) else {
            continue;
        };
        if p.neighbour.is_some() {
            continue;
        }
        let ttl = p
            .last_ttl
            .filter(|t| *t > 0)
            .map(|t| Duration::from_secs(u64::from(t)))
            .unwrap_or(DEFAULT_TTL);
        let limit = ttl * MISSING_TTLS;
        let silent_for = p.heard_age.unwrap_or(p.watched_for).min(p.watched_for);
        if silent_for < limit {
            continue;
        }
        let name = &n.name;
        let heard = match p.heard_age {
            Some(a) => format!(
                "last LLDP heard {}s ago (TTL {}s)",
                a.as_secs(),
                ttl.as_secs()
            ),
            None => format!(
                "no LLDP heard in the {}s the exporter has watched",
                p.watched_for.as_secs()
            ),
        };
        out.push(Finding {
            rule: RuleId::LldpNeighborMissing,
            severity: Severity::Info,
            finding: format!(
                "{}: no LLDP neighbour: which switch port this NIC is cabled to, and that port's PFC/DSCP settings, are unknown here",
                subject.describe()
            ),
            evidence: format!(
                "{heard}; LLDP via {}; expected a frame at least every TTL/4 and none missing for {MISSING_TTLS} x TTL",
                lldp.via
            ),
            fix: format!(
                "Find who drops LLDP: the switch port may not send it (enable LLDP, with DCBX, on it); the NIC's firmware may run its own LLDP agent and consume the frames (ConnectX: mlxconfig -d <pci> q | grep LLDP_NB shows LLDP_NB_RX_MODE_P<n>, LLDP_NB_TX_MODE_P<n>, LLDP_NB_DCBX_P<n>, with firmware DCBX the NIC answers the switch itself; Intel E810: ethtool --show-priv-flags {name} fw-lldp-agent); lldpd may not listen on {name} (lldpcli show interfaces)"
            ),
            verify: match lldp.via {
                "lldpd" => format!("lldpcli show neighbors ports {name} details"),
                _ => format!("tcpdump -i {name} -c 1 -e ether proto 0x88cc"),
            },
            subject,
        });
    }
    out
}

fn lldp_neighbor_changed(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let Some(p) = lldp_port(s, &n.name) else {
            continue;
        };
        let Some((old, new)) = &p.changed else {
            continue;
        };
        let name = &n.name;
        out.push(Finding {
            rule: RuleId::LldpNeighborChanged,
            severity: Severity::Warning,
            finding: format!(
                "{}: the LLDP neighbour changed since the exporter started: was {}, now {} (recabled, or the switch port was renamed or replaced)",
                subject.describe(),
                identity_name(old),
                identity_name(new)
            ),
            evidence: format!(
                "first neighbour heard: chassis {} port {}; current: chassis {} port {}",
                old.chassis_id, old.port_id, new.chassis_id, new.port_id
            ),
            fix: "If the move was not intended, put the cable back in the switch port the cabling plan gives this NIC (its rail's leaf); if it was, restart the exporter to take the new neighbour as the reference".to_string(),
            verify: format!("lldpcli show neighbors ports {name} (or the roce_lldp_neighbor_info series)"),
            subject,
        });
    }
    out
}
