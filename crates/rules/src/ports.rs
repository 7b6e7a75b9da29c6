//! Rules on the state of RDMA ports and their GID tables: port down, link
//! rate below the expected, no usable RoCE v2 GID.

use roce_rdma::{Device, GidFamily, GidType, LinkLayer, PhysState, Port, PortState};

use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::PortDown,
        checks: "every RDMA port is ACTIVE and LinkUp",
        evaluate: port_down,
    },
    Rule {
        id: RuleId::LinkRateBelowExpected,
        checks: "active ports run at expect.link_rate_gbps",
        evaluate: link_rate_below_expected,
    },
    Rule {
        id: RuleId::Rocev2GidMissing,
        checks: "every active RoCE port has a RoCE v2 GID",
        evaluate: rocev2_gid_missing,
    },
    Rule {
        id: RuleId::Rocev2GidLinkLocalOnly,
        checks: "every active RoCE port has a routable (IPv4-mapped or global) RoCE v2 GID",
        evaluate: rocev2_gid_link_local_only,
    },
];

/// Every (device, port) of a snapshot.
pub fn ports(s: &Snapshot) -> impl Iterator<Item = (&Device, &Port)> {
    s.rdma
        .iter()
        .flat_map(|r| r.devices.iter())
        .flat_map(|d| d.ports.iter().map(move |p| (d, p)))
}

/// The same port in another snapshot.
pub fn find_port<'a>(s: &'a Snapshot, device: &str, port: u32) -> Option<(&'a Device, &'a Port)> {
    ports(s).find(|(d, p)| d.name == device && p.number == port)
}

pub fn subject(d: &Device, p: &Port) -> Subject {
    Subject::port(&d.name, p.number, p.netdev.as_deref())
}

fn port_down(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let (Some(state), Some(phys)) = (&p.state, &p.phys_state) else {
            continue;
        };
        if p.is_up() {
            continue;
        }
        let subject = subject(d, p);
        let ib = matches!(p.link_layer, Some(LinkLayer::InfiniBand));
        let no_sm =
            ib && *phys == PhysState::LinkUp && matches!(state, PortState::Init | PortState::Armed);
        let (finding, fix) = if no_sm {
            (
                format!("{} has a physical link but is {}: no subnet manager has configured it", subject.describe(), state.name()),
                "Start a subnet manager on the fabric (opensm, or the switch's SM) and check that it sees this port".to_string(),
            )
        } else if matches!(phys, PhysState::Disabled) {
            (
                format!("{} is administratively disabled", subject.describe()),
                "Enable the port (ip link set <netdev> up on RoCE; ibportstate enable on InfiniBand)".to_string(),
            )
        } else {
            (
                format!("{} is down ({}, {})", subject.describe(), state.name(), phys.name()),
                "Check the cable or transceiver, the switch port and the netdev (ip link set <netdev> up); \
                 Polling means no link partner is seen"
                    .to_string(),
            )
        };
        out.push(Finding {
            rule: RuleId::PortDown,
            severity: Severity::Critical,
            evidence: format!("state {}: {}, phys_state {}: {}; expected 4: ACTIVE, 5: LinkUp", state.id(), state.name(), phys.id(), phys.name()),
            finding,
            fix,
            verify: format!("cat /sys/class/infiniband/{}/ports/{}/state /sys/class/infiniband/{}/ports/{}/phys_state", d.name, p.number, d.name, p.number),
            subject,
        });
    }
    out
}

fn link_rate_below_expected(ctx: &Context) -> Vec<Finding> {
    let (Some(s), Some(expected_gbps)) = (ctx.latest(), ctx.expect.link_rate_gbps) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (d, p) in ports(s) {
        let Some(rate) = p.rate_bytes_per_second else {
            continue;
        };
        if !p.is_up() {
            continue;
        }
        let gbps = rate as f64 * 8.0 / 1e9;
        // Rates are exact multiples in sysfs; a tiny tolerance absorbs the
        // float conversion only.
        if gbps + 1e-6 >= expected_gbps {
            continue;
        }
        let subject = subject(d, p);
        out.push(Finding {
            rule: RuleId::LinkRateBelowExpected,
            severity: Severity::Warning,
            finding: format!("{} runs at {} Gb/s, below the expected {} Gb/s", subject.describe(), fmt_num(gbps), fmt_num(expected_gbps)),
            evidence: format!("rate {} Gb/s; expected {} Gb/s (expect.link_rate_gbps)", fmt_num(gbps), fmt_num(expected_gbps)),
            fix: "Check the cable/transceiver class and the switch port speed; a link that trained down often has a \
                  damaged or wrong-class cable (ethtool <netdev> shows the advertised modes)"
                .into(),
            verify: format!("cat /sys/class/infiniband/{}/ports/{}/rate", d.name, p.number),
            subject,
        });
    }
    out
}

/// Active Ethernet (RoCE) ports: the only ones where RoCE GIDs matter.
fn active_roce_ports(s: &Snapshot) -> impl Iterator<Item = (&Device, &Port)> {
    ports(s).filter(|(_, p)| p.is_up() && matches!(p.link_layer, Some(LinkLayer::Ethernet)))
}

fn rocev2_gid_missing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (d, p) in active_roce_ports(s) {
        if p.gids.iter().any(|g| g.gid_type == GidType::RoceV2) {
            continue;
        }
        let v1 = p
            .gids
            .iter()
            .filter(|g| g.gid_type == GidType::IbRoceV1)
            .count();
        let subject = subject(d, p);
        let netdev = p.netdev.as_deref().unwrap_or("<netdev>");
        let (finding, fix) = if v1 > 0 {
            (
                format!("{} has only RoCE v1 GIDs: RoCEv2 (routable, what NCCL uses) is not possible", subject.describe()),
                format!("Enable RoCE v2 on the device (mlx5: cma_roce_mode / devlink; check the driver's RoCE mode) and give {netdev} an IP address"),
            )
        } else {
            (
                format!("{} has no GID at all: RDMA connections cannot be addressed", subject.describe()),
                format!("Give {netdev} an IPv4 or IPv6 address and bring it up (ip addr add <addr> dev {netdev}; ip link set {netdev} up)"),
            )
        };
        out.push(Finding {
            rule: RuleId::Rocev2GidMissing,
            severity: Severity::Critical,
            finding,
            evidence: format!("{} populated GIDs: {} RoCE v1, 0 RoCE v2; expected at least one RoCE v2 GID", p.gids.len(), v1),
            fix,
            verify: format!("grep -H . /sys/class/infiniband/{}/ports/{}/gid_attrs/types/* 2>/dev/null | grep -v ': $'", d.name, p.number),
            subject,
        });
    }
    out
}

fn rocev2_gid_link_local_only(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (d, p) in active_roce_ports(s) {
        let v2: Vec<_> = p
            .gids
            .iter()
            .filter(|g| g.gid_type == GidType::RoceV2)
            .collect();
        if v2.is_empty() || v2.iter().any(|g| g.family() != GidFamily::Ipv6LinkLocal) {
            continue;
        }
        let subject = subject(d, p);
        let netdev = p.netdev.as_deref().unwrap_or("<netdev>");
        out.push(Finding {
            rule: RuleId::Rocev2GidLinkLocalOnly,
            severity: Severity::Warning,
            finding: format!("{} has only link-local RoCE v2 GIDs: traffic cannot be routed beyond the local subnet", subject.describe()),
            evidence: format!("RoCE v2 GIDs at index {}: all fe80::/10; expected an IPv4-mapped or global GID", v2.iter().map(|g| g.index.to_string()).collect::<Vec<_>>().join(", ")),
            fix: format!("Assign an IPv4 (or global IPv6) address to {netdev}; NCCL then uses its RoCE v2 GID (NCCL_IB_GID_INDEX)"),
            verify: format!("ip -br addr show {netdev}; grep -H . /sys/class/infiniband/{}/ports/{}/gids/* | grep -v ':0000:0000:0000:0000:0000:0000:0000:0000$'", d.name, p.number),
            subject,
        });
    }
    out
}

/// A number without a trailing ".0" (400, 2.5).
pub fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}
