//! Rules on the lossless-Ethernet configuration of RoCE netdevs: PFC
//! without ECN, PFC on another priority than RoCE uses, and a netdev MTU
//! too small for RoCE MTU 4096. Inputs come from the netdev source (DCB,
//! mlx5's ECN files, sysfs MTU); a netdev without DCB support, without ECN
//! files or without an RDMA port behind it is left alone.

use roce_netdev::{DcbOutcome, Direction, Meaning, Netdev};
use roce_rdma::LinkLayer;

use super::history::{stat_integer, Value};
use super::ports::find_port;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::config::{ROCE_4096_MIN_NETDEV_MTU, ROCE_HEADER_BYTES};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::PfcWithoutEcn,
        checks: "every PFC priority of a RoCE netdev has ECN on for both roles (np, rp)",
        evaluate: pfc_without_ecn,
    },
    Rule {
        id: RuleId::PfcPriorityMismatch,
        checks: "PFC is on the RoCE priority only (expect.pfc_priority), and no pauses arrive on other priorities",
        evaluate: pfc_priority_mismatch,
    },
    Rule {
        id: RuleId::MtuBelowJumbo,
        checks: "RoCE netdevs carry RoCE MTU 4096 (and expect.mtu when set)",
        evaluate: mtu_below_jumbo,
    },
];

/// Netdevs that back an Ethernet (RoCE) RDMA port, with their subject.
/// A netdev whose port is not in the RDMA snapshot, or whose link layer is
/// unknown, is skipped: it may be IPoIB.
pub fn roce_netdevs(s: &Snapshot) -> Vec<(&Netdev, Subject)> {
    let Some(nd) = &s.netdev else { return vec![] };
    nd.netdevs
        .iter()
        .filter_map(|n| {
            let r = n.rdma.as_ref()?;
            let (_, p) = find_port(s, &r.device, r.port)?;
            matches!(p.link_layer, Some(LinkLayer::Ethernet))
                .then(|| (n, Subject::port(&r.device, r.port, Some(&n.name))))
        })
        .collect()
}

/// Every netdev read, with its subject (RDMA port when it backs one).
pub fn all_netdevs(s: &Snapshot) -> Vec<(&Netdev, Subject)> {
    let Some(nd) = &s.netdev else { return vec![] };
    nd.netdevs
        .iter()
        .map(|n| {
            let subject = match &n.rdma {
                Some(r) => Subject::port(&r.device, r.port, Some(&n.name)),
                None => Subject {
                    netdev: Some(n.name.clone()),
                    ..Subject::default()
                },
            };
            (n, subject)
        })
        .collect()
}

/// The same netdev in another snapshot.
pub fn find_netdev<'a>(s: &'a Snapshot, name: &str) -> Option<&'a Netdev> {
    s.netdev.as_ref()?.netdevs.iter().find(|n| n.name == name)
}

/// The value of one meaning as an integer ([`stat_integer`]).
pub fn stat_value(n: &Netdev, meaning: Meaning) -> Option<u64> {
    n.stats
        .iter()
        .find(|s| s.meaning == meaning)
        .map(|s| stat_integer(s.value))
}

/// Priorities with PFC on, from a DCB bitmap.
pub fn pfc_priorities(bits: u8) -> Vec<u8> {
    (0..8u8).filter(|p| bits & (1 << p) != 0).collect()
}

/// "3", "3, 4" or "none".
pub fn list(priorities: &[u8]) -> String {
    if priorities.is_empty() {
        "none".into()
    } else {
        priorities
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// PFC priorities of a netdev whose DCB was read; `None` without DCB or
/// without a PFC attribute.
fn pfc_of(n: &Netdev) -> Option<(u8, Vec<u8>)> {
    let DcbOutcome::Ok(dcb) = &n.dcb else {
        return None;
    };
    let bits = dcb.pfc_enabled?;
    Some((bits, pfc_priorities(bits)))
}

fn pfc_without_ecn(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let (Some((_, pfc)), Some(ecn)) = (pfc_of(n), &n.ecn) else {
            continue;
        };
        let mut gaps = Vec::new();
        let mut evidence = Vec::new();
        let mut bad = Vec::new();
        for &p in &pfc {
            let mut missing = Vec::new();
            for (role, entries) in [("np", &ecn.np), ("rp", &ecn.rp)] {
                // A role without any file says nothing; a role whose folder
                // lists other priorities but not this one is knowably off.
                if entries.is_empty() {
                    continue;
                }
                let state = entries.iter().find(|(q, _)| *q == p).map(|(_, on)| *on);
                let shown = match state {
                    Some(true) => continue,
                    Some(false) => "0",
                    None => "absent",
                };
                missing.push(format!("roce_{role} off"));
                evidence.push(format!("ecn/roce_{role}/enable/{p} {shown}"));
            }
            if !missing.is_empty() {
                gaps.push(format!("priority {p}: {}", missing.join(", ")));
                bad.push(p);
            }
        }
        if bad.is_empty() {
            continue;
        }
        let name = &n.name;
        let enable = bad
            .iter()
            .flat_map(|p| {
                ["np", "rp"]
                    .map(|r| format!("echo 1 > /sys/class/net/{name}/ecn/roce_{r}/enable/{p}"))
            })
            .collect::<Vec<_>>()
            .join("; ");
        let files = bad
            .iter()
            .flat_map(|p| {
                ["np", "rp"].map(|r| format!("/sys/class/net/{name}/ecn/roce_{r}/enable/{p}"))
            })
            .collect::<Vec<_>>()
            .join(" ");
        out.push(Finding {
            rule: RuleId::PfcWithoutEcn,
            severity: Severity::Warning,
            finding: format!(
                "{}: PFC is on without ECN ({}): congestion is handled by pausing alone, which spreads it (head-of-line blocking, pause storms)",
                subject.describe(),
                gaps.join("; ")
            ),
            evidence: format!(
                "PFC on priority {}; {}; expected 1 for roce_np and roce_rp on every PFC priority",
                list(&pfc),
                evidence.join(", ")
            ),
            fix: format!(
                "Turn DCQCN on for the PFC priority, both roles: {enable}; and ECN marking on the switches' RoCE queue, so that senders slow down before PFC has to pause the link"
            ),
            verify: format!("grep -H . {files}  # expect 1"),
            subject,
        });
    }
    out
}

fn pfc_priority_mismatch(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let Some((bits, pfc)) = pfc_of(n) else {
            continue;
        };
        let name = &n.name;
        let (severity, finding, evidence, target) = match ctx.expect.pfc_priority {
            Some(e) if pfc == [e] => continue,
            Some(e) => {
                let (severity, finding) = if pfc.is_empty() {
                    (
                        Severity::Critical,
                        format!(
                            "{}: PFC is off on every priority, but RoCE is expected on priority {e}: RoCE traffic is not lossless",
                            subject.describe()
                        ),
                    )
                } else if !pfc.contains(&e) {
                    (
                        Severity::Critical,
                        format!(
                            "{}: PFC is on priority {} but not on the expected RoCE priority {e}: RoCE traffic is not lossless",
                            subject.describe(),
                            list(&pfc)
                        ),
                    )
                } else {
                    (
                        Severity::Warning,
                        format!(
                            "{}: PFC is on priorities {}, not only on the expected RoCE priority {e}: other traffic can pause the link too",
                            subject.describe(),
                            list(&pfc)
                        ),
                    )
                };
                let evidence = format!(
                    "PFC enabled priorities: {} (pfc_en 0x{bits:02x}); expected {e} only (expect.pfc_priority)",
                    list(&pfc)
                );
                (severity, finding, evidence, e)
            }
            None => {
                // Without an expectation, only a contradiction in the data:
                // pause frames on a priority that has no PFC here mean the
                // link partner uses another PFC priority.
                let mut paused = Vec::new();
                let mut seconds = 0.0f64;
                for p in (0..8u8).filter(|p| !pfc.contains(p)) {
                    let mut total = 0u64;
                    for direction in [Direction::Rx, Direction::Tx] {
                        let meaning = Meaning::PfcPauseFrames {
                            priority: p,
                            direction,
                        };
                        let inc = ctx
                            .history
                            .netdev(name)
                            .increase(Value::Stat(meaning), ctx.rules.pfc_storm.window);
                        if let Some(inc) = inc {
                            total = total.saturating_add(inc.amount);
                            seconds = seconds.max(inc.seconds);
                        }
                    }
                    if total > 0 {
                        paused.push((p, total));
                    }
                }
                let Some(&(first, _)) = paused.first() else {
                    continue;
                };
                let pauses = paused
                    .iter()
                    .map(|(p, c)| format!("priority {p} +{c}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                (
                    Severity::Warning,
                    format!(
                        "{}: pause frames on priority {} where PFC is off here: the link partner uses another PFC priority",
                        subject.describe(),
                        list(&paused.iter().map(|(p, _)| *p).collect::<Vec<_>>())
                    ),
                    format!(
                        "PFC enabled priorities: {}; pause frames {pauses} over {}; expected pauses only on PFC priorities",
                        list(&pfc),
                        super::rates::span(seconds)
                    ),
                    first,
                )
            }
        };
        let mut pfc_vector = [0u8; 8];
        if let Some(slot) = pfc_vector.get_mut(usize::from(target)) {
            *slot = 1;
        }
        let vector = pfc_vector
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(",");
        out.push(Finding {
            rule: RuleId::PfcPriorityMismatch,
            severity,
            finding,
            evidence,
            fix: format!(
                "Put PFC on the RoCE priority only, as on the switch port: dcb pfc set dev {name} prio-pfc all:off {target}:on (or mlnx_qos -i {name} --pfc {vector}), and make the switch's PFC priority the same"
            ),
            verify: format!("dcb pfc show dev {name}; mlnx_qos -i {name}"),
            subject,
        });
    }
    out
}

/// The RoCE path MTU the kernel derives from a netdev MTU
/// (`iboe_get_mtu()`, include/rdma/ib_addr.h); 0 below 256.
pub fn roce_mtu(netdev_mtu: u64) -> u64 {
    let payload = netdev_mtu.saturating_sub(ROCE_HEADER_BYTES);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| payload >= *m)
        .unwrap_or(0)
}

fn mtu_below_jumbo(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let (threshold, source) = match ctx.expect.mtu {
        Some(e) => (u64::from(e), "expect.mtu".to_string()),
        None => (
            ctx.rules.mtu_below_jumbo.min_mtu,
            "rules.mtu_below_jumbo.min_mtu".to_string(),
        ),
    };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let Some(mtu) = n.mtu else { continue };
        if mtu >= threshold {
            continue;
        }
        let roce = roce_mtu(mtu);
        let (severity, finding) = if mtu < ROCE_4096_MIN_NETDEV_MTU {
            (
                Severity::Critical,
                format!(
                    "{}: netdev MTU {mtu} limits RoCE to MTU {roce}, below 4096: every message takes {}x the packets",
                    subject.describe(),
                    4096 / roce.max(1)
                ),
            )
        } else {
            (
                Severity::Warning,
                format!(
                    "{}: netdev MTU {mtu} is below the expected {threshold}",
                    subject.describe()
                ),
            )
        };
        let (device, port) = n
            .rdma
            .as_ref()
            .map(|r| (r.device.as_str(), r.port))
            .unwrap_or(("<device>", 1));
        let target = ctx.expect.mtu.map(u64::from).unwrap_or(9000);
        let name = &n.name;
        out.push(Finding {
            rule: RuleId::MtuBelowJumbo,
            severity,
            finding,
            evidence: format!(
                "mtu {mtu}: RoCE MTU {roce} ({mtu} - {ROCE_HEADER_BYTES} header bytes, rounded down to 4096/2048/1024/...); expected >= {threshold} ({source})"
            ),
            fix: format!(
                "Raise the MTU: ip link set dev {name} mtu {target}, the same on every peer and at least as large on the switch ports; make it persistent in the host's network configuration"
            ),
            verify: format!(
                "ip -d link show {name} | grep -o 'mtu [0-9]*'; ibv_devinfo -d {device} -i {port} | grep active_mtu"
            ),
            subject,
        });
    }
    out
}
