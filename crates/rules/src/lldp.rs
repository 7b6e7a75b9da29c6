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
use roce_model::lldp::LldpPort;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::LldpNeighborMissing,
        checks: "an active RoCE port hears an LLDP neighbour (when the LLDP source runs): none for 3 times its TTL (or 6 minutes when none was ever heard) means the switch sends no LLDP or something on the host takes the frames",
        evaluate: lldp_neighbor_missing,
    },
    Rule {
        id: RuleId::LldpRailMismatch,
        checks: "with expect.rails, each RoCE NIC's LLDP neighbour is its rail's switch (the system name pattern with the NIC's rail index, or the map), and no two NICs of the node report the same switch port",
        evaluate: lldp_rail_mismatch,
    },
    Rule {
        id: RuleId::LldpNeighborChanged,
        checks: "the switch port each RoCE port's LLDP neighbour names is the one first heard since the exporter started (not recabled)",
        evaluate: lldp_neighbor_changed,
    },
];

/// `expect.rails`: the switch each RoCE NIC must reach. A NIC's rail index
/// is its RDMA device's position among the devices with a RoCE port,
/// sorted by name with numbers compared as numbers (mlx5_2 before
/// mlx5_10).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExpectedRails {
    /// The neighbour's system name, with `{rail}` for the rail index and
    /// `*` for any text (`leaf-*-r{rail}`).
    pub switch_pattern: Option<String>,
    /// RDMA device or netdev name to the neighbour's system name; wins
    /// over the pattern.
    pub map: std::collections::BTreeMap<String, String>,
}

/// The rail indices tried when naming the rail a switch belongs to by the
/// pattern alone.
const MAX_RAILS: usize = 64;

/// Whether `text` matches `pattern`, `*` standing for any text.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let Some((first, rest)) = parts.split_first() else {
        return text.is_empty();
    };
    let Some(mut left) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return left.is_empty();
    };
    for part in middle {
        match left.find(part) {
            Some(i) => left = &left[i + part.len()..],
            None => return false,
        }
    }
    left.len() >= last.len() && left.ends_with(last)
}

/// Names sorted with digit runs compared as numbers.
fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut n = u64::from(c.to_digit(10).unwrap_or(0));
            while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                n = n.saturating_mul(10).saturating_add(u64::from(d));
                chars.next();
            }
            out.push((std::mem::take(&mut text), n));
        } else {
            text.push(c);
        }
    }
    out.push((text, u64::MAX));
    out
}

/// The rule of one rail index: the expected system name, or the pattern.
fn rail_matches(
    rails: &ExpectedRails,
    rail: usize,
    device: &str,
    netdev: &str,
    system_name: &str,
) -> Option<(bool, String)> {
    if let Some(want) = rails.map.get(device).or_else(|| rails.map.get(netdev)) {
        return Some((want == system_name, want.clone()));
    }
    let pattern = rails
        .switch_pattern
        .as_ref()?
        .replace("{rail}", &rail.to_string());
    Some((glob(&pattern, system_name), pattern))
}

/// The RDMA devices of the RoCE netdevs in rail order: by name, numbers
/// compared as numbers; a device's rail index is its position.
fn rail_order<'a>(ports: &'a [(&'a Netdev, super::Subject)]) -> Vec<&'a str> {
    let mut devices: Vec<&str> = ports
        .iter()
        .filter_map(|(n, _)| n.rdma.as_ref().map(|r| r.device.as_str()))
        .collect();
    devices.sort_by_key(|d| natural_key(d));
    devices.dedup();
    devices
}

fn lldp_rail_mismatch(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let Some(rails) = &ctx.expect.rails else {
        return vec![];
    };
    let ports = roce_netdevs(s);
    let devices = rail_order(&ports);
    let mut out = Vec::new();
    let mut seen: Vec<(&str, &roce_lldp::Lldpdu, &super::Subject)> = Vec::new();
    for (n, subject) in &ports {
        let Some(r) = &n.rdma else { continue };
        let Some(pdu) = lldp_port(s, &n.name).and_then(|p| p.neighbour.as_ref()) else {
            continue;
        };
        let Some(rail) = devices.iter().position(|d| *d == r.device) else {
            continue;
        };
        if let Some(other) = seen
            .iter()
            .find(|(_, o, _)| o.chassis_id == pdu.chassis_id && o.port_id == pdu.port_id)
        {
            out.push(Finding {
                rule: RuleId::LldpRailMismatch,
                severity: Severity::Critical,
                finding: format!(
                    "{} and {} report the same switch port, {}: two NICs on one link (a splitter, or one cabled to the other's port)",
                    subject.describe(),
                    other.2.describe(),
                    neighbour_name(pdu)
                ),
                evidence: format!(
                    "both LLDP neighbours: chassis {} port {}; expected one switch port per NIC",
                    pdu.chassis_id.value, pdu.port_id.value
                ),
                fix: "Trace both cables and put each in its rail's switch port".to_string(),
                verify: format!("lldpcli show neighbors ports {},{}", n.name, other.0),
                subject: subject.clone(),
            });
        }
        seen.push((n.name.as_str(), pdu, subject));
        let Some(system_name) = pdu.system_name.as_deref() else {
            continue;
        };
        let Some((ok, want)) = rail_matches(rails, rail, &r.device, &n.name, system_name) else {
            continue;
        };
        if ok {
            continue;
        }
        // Whose rail the switch is: another NIC's rule it matches.
        let owner = devices.iter().enumerate().find_map(|(i, d)| {
            let netdev = ports
                .iter()
                .find(|(m, _)| m.rdma.as_ref().is_some_and(|x| x.device == *d))
                .map(|(m, _)| m.name.as_str())
                .unwrap_or("");
            (i != rail && rail_matches(rails, i, d, netdev, system_name).is_some_and(|(m, _)| m))
                .then(|| format!("rail {i} ({d})"))
        });
        // Else the rail index the pattern gives that name, when this node
        // has no NIC of that rail (a node with fewer NICs than rails).
        let by_pattern = || {
            let pattern = rails.switch_pattern.as_ref()?;
            (0..MAX_RAILS)
                .filter(|i| *i != rail)
                .find(|i| glob(&pattern.replace("{rail}", &i.to_string()), system_name))
                .map(|i| format!("the switch of rail {i} by expect.rails (no RoCE NIC of this node has that rail)"))
        };
        let whose = match owner {
            Some(o) => format!("the switch of {o}"),
            None => by_pattern().unwrap_or_else(|| "a switch of no rail".to_string()),
        };
        out.push(Finding {
            rule: RuleId::LldpRailMismatch,
            severity: Severity::Critical,
            finding: format!(
                "{} (rail {rail}{}) is cabled to {}, {whose}: its traffic to rail {rail} of the other nodes crosses the spine",
                subject.describe(),
                gpus_of(s, &r.device),
                neighbour_name(pdu)
            ),
            evidence: format!(
                "LLDP neighbour system name {system_name} (chassis {}, port {}); expected {want} (expect.rails)",
                pdu.chassis_id.value, pdu.port_id.value
            ),
            fix: format!("Move the cable of {} to its rail's switch ({want}), or correct expect.rails if the plan changed", n.name),
            verify: format!("lldpcli show neighbors ports {}", n.name),
            subject: subject.clone(),
        });
    }
    out
}

/// The switch `netdev` should reach by `expect.rails` when its LLDP
/// neighbour is another one (what `lldp_rail_mismatch` judges): a fix
/// must not copy that switch's settings into the NIC.
pub fn off_rail(ctx: &Context, s: &Snapshot, netdev: &str) -> Option<String> {
    let rails = ctx.expect.rails.as_ref()?;
    let ports = roce_netdevs(s);
    let devices = rail_order(&ports);
    let r = ports
        .iter()
        .find(|(n, _)| n.name == netdev)?
        .0
        .rdma
        .as_ref()?;
    let pdu = lldp_port(s, netdev)?.neighbour.as_ref()?;
    let rail = devices.iter().position(|d| *d == r.device)?;
    let (ok, want) = rail_matches(rails, rail, &r.device, netdev, pdu.system_name.as_deref()?)?;
    (!ok).then_some(want)
}

/// ", the NIC of GPU 2" (or "of GPUs 2 and 3"): the GPUs whose nearest NIC
/// `device` is, by the topology source's PCIe paths; empty without them.
fn gpus_of(s: &Snapshot, device: &str) -> String {
    let Some(t) = &s.topology else {
        return String::new();
    };
    let gpus: Vec<String> = t
        .gpus_nearest_to(device)
        .iter()
        .map(usize::to_string)
        .collect();
    match gpus.as_slice() {
        [] => String::new(),
        [one] => format!(", the NIC of GPU {one}"),
        [first @ .., last] => format!(", the NIC of GPUs {} and {last}", first.join(", ")),
    }
}

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
    if dcb.peer.is_empty() {
        if let Some((peer, who)) = lldp_peer(s, &n.name) {
            return (Cow::Owned(peer), Some(who));
        }
    }
    (Cow::Borrowed(&dcb.peer), None)
}

/// The DCBX settings the LLDP neighbour of `netdev` advertised (PFC, APP,
/// ETS priority map), with "LLDP DCBX TLVs of <switch> port <port>"; none
/// without a neighbour or when it advertised none of them.
pub fn lldp_peer(s: &Snapshot, netdev: &str) -> Option<(DcbPeer, String)> {
    let pdu = lldp_port(s, netdev)?.neighbour.as_ref()?;
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
        return None;
    }
    Some((peer, format!("LLDP DCBX TLVs of {}", neighbour_name(pdu))))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_and_natural_order() {
        assert!(glob("leaf-*-r3", "leaf-pod1-r3"));
        assert!(!glob("leaf-*-r3", "leaf-pod1-r13"));
        assert!(glob("leaf-r3", "leaf-r3"));
        assert!(!glob("leaf-r3", "leaf-r3x"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b*c", "aXc"));
        let mut d = vec!["mlx5_10", "mlx5_2", "mlx5_0"];
        d.sort_by_key(|x| natural_key(x));
        assert_eq!(d, ["mlx5_0", "mlx5_2", "mlx5_10"]);
    }
}
