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
        let up = match &p.netdev {
            Some(n) => format!("ip link set {n} up"),
            None => format!(
                "ip link set <the netdev of {} port {}> up",
                d.name, p.number
            ),
        };
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
                if ib {
                    "Enable the port from the fabric's side (ibportstate ... enable on the switch port, or the subnet manager's configuration)".to_string()
                } else {
                    format!("Enable the port: {up}")
                },
            )
        } else {
            (
                format!("{} is down ({}, {})", subject.describe(), state.name(), phys.name()),
                format!(
                    "Check the cable or transceiver, the switch port and the netdev ({up}); Polling means no link partner is seen"
                ),
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
            fix: format!(
                "Check the cable/transceiver class and the switch port speed; a link that trained down often has a damaged or wrong-class cable ({} shows the advertised modes)",
                p.netdev.as_deref().map_or_else(|| format!("ibstat {} {}", d.name, p.number), |n| format!("ethtool {n}"))
            ),
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
        let (finding, fix) = if v1 > 0 {
            (
                format!("{} has only RoCE v1 GIDs: RoCEv2 (routable, what NCCL uses) is not possible", subject.describe()),
                format!(
                    "The kernel adds a RoCE v2 GID beside each RoCE v1 one when the device supports RoCE v2, so {} does not: its driver or firmware runs RoCE v1 only (mlx4 on ConnectX-3; ConnectX-4 and later, mlx5, have RoCE v2). Use a RoCE v2 capable NIC and driver; rdma_cm's default RoCE mode (configfs default_roce_mode, cma_roce_mode) only chooses among existing GIDs and adds none",
                    d.name
                ),
            )
        } else if let Some(netdev) = p.netdev.as_deref() {
            (
                format!("{} has no GID at all: RDMA connections cannot be addressed", subject.describe()),
                format!("Give {netdev} an IPv4 or IPv6 address and bring it up (ip addr add <address>/<prefix> dev {netdev}; ip link set {netdev} up): the kernel then adds its RoCE v1 and v2 GIDs"),
            )
        } else {
            (
                format!("{} has no GID at all: RDMA connections cannot be addressed", subject.describe()),
                format!(
                    "Find the netdev of {} port {} (rdma link show {}/{}, or ls /sys/class/infiniband/{}/device/net/), give it an IPv4 or IPv6 address and bring it up: the kernel then adds its RoCE v1 and v2 GIDs",
                    d.name, p.number, d.name, p.number, d.name
                ),
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
        let netdev = p
            .netdev
            .clone()
            .unwrap_or_else(|| format!("the netdev of {} port {}", d.name, p.number));
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

/// Below this share of a port's line rate, what moved in a window does not
/// carry the counter verdicts that need traffic (retransmissions, CNPs,
/// pauses, discards): their "nothing grew" says nothing. 0.1%: 50 MB/s on
/// 400 GbE, well above LLDP, ARP and monitoring, well below any job.
pub const LOAD_MIN_SHARE: f64 = 0.001;

/// What a port moved over a window of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Bytes received and transmitted (`port_rcv_data` and
    /// `port_xmit_data`, each x 4), resets adding nothing.
    pub bytes: u64,
    pub seconds: f64,
    /// The port's line rate, bytes per second.
    pub rate: Option<u64>,
}

impl Load {
    pub fn per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// Enough traffic for the counter verdicts to mean something: above
    /// [`LOAD_MIN_SHARE`] of the line rate (any byte when the rate is
    /// unknown).
    pub fn loaded(&self) -> bool {
        match self.rate {
            Some(r) if r > 0 => self.per_second() >= LOAD_MIN_SHARE * r as f64,
            _ => self.bytes > 0,
        }
    }
}

/// The bytes `device` port `port` moved over `history` (oldest first);
/// `None` with fewer than two samples holding its data counters.
pub fn load(history: &[&Snapshot], device: &str, port: u32) -> Option<Load> {
    let series = |f: fn(&Port) -> Option<u64>| {
        history
            .iter()
            .filter_map(|s| {
                let (_, p) = find_port(s, device, port)?;
                Some((s.clock()?, f(p)?))
            })
            .collect::<Vec<_>>()
    };
    let rx = crate::window::increase_over(series(Port::data_received_bytes))?;
    let tx = crate::window::increase_over(series(Port::data_transmitted_bytes))?;
    let rate = history
        .last()
        .and_then(|s| find_port(s, device, port))
        .and_then(|(_, p)| p.rate_bytes_per_second);
    Some(Load {
        bytes: rx.amount.saturating_add(tx.amount),
        seconds: rx.seconds.max(tx.seconds),
        rate,
    })
}
