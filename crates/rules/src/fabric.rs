//! Rules on the lossless-Ethernet configuration of RoCE netdevs: PFC
//! without ECN, PFC on another priority than RoCE uses (from
//! `expect.pfc_priority`, or from the DSCP the host's RoCE traffic carries
//! and the port's trust mode), PCP trust under DSCP-marked RoCE, CNPs on
//! the best-effort priority, and a netdev MTU too small for RoCE MTU 4096.
//! Inputs come from the netdev source (DCB, mlx5's ECN and CNP files, the
//! rdma_cm default ToS, sysfs MTU); a netdev without DCB support, without
//! ECN files or without an RDMA port behind it is left alone.

use serde::Serialize;

use roce_host::Priorities;
use roce_netdev::{DcbConfig, DcbOutcome, FrameDirection, Meaning, Netdev, Trust};
use roce_rdma::LinkLayer;

use super::history::{stat_integer, FollowedCounter};
use super::ports::find_port;
use super::settings::section;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::Snapshot;

mod pfc;
use pfc::{pfc_priority_mismatch, pfc_without_ecn};

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::PfcWithoutEcn,
        checks: "every PFC priority of a RoCE netdev has ECN on for both roles (np, rp)",
        evaluate: pfc_without_ecn,
    },
    Rule {
        id: RuleId::PfcPriorityMismatch,
        checks: "PFC is on the RoCE priority only (expect.pfc_priority), the DSCP of the host's RoCE traffic maps to a PFC priority, and no pauses arrive on other priorities",
        evaluate: pfc_priority_mismatch,
    },
    Rule {
        id: RuleId::RoceTrustPcp,
        checks: "a port whose RoCE traffic is DSCP-marked trusts DSCP, not PCP",
        evaluate: roce_trust_pcp,
    },
    Rule {
        id: RuleId::CnpPriorityBestEffort,
        checks: "the CNPs a RoCE port sends (mlx5 ecn/roce_np/cnp_dscp) land, under DSCP trust, neither on priority 0 nor on another priority than their 802.1p priority (cnp_802p_prio) or than the switch maps their DSCP to (DCBX peer APP)",
        evaluate: cnp_priority_best_effort,
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

/// Whether the netdev is driven by mlx5 (ConnectX), whose DCB support
/// differs: no DCBX peer callbacks, no apptrust callback.
pub fn is_mlx5(n: &Netdev) -> bool {
    n.driver.as_deref() == Some("mlx5_core")
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

/// Priorities in the order given as findings print them: "3", "3, 4" or
/// "none".
pub fn list(priorities: impl IntoIterator<Item = u8>) -> String {
    let listed: Vec<String> = priorities.into_iter().map(|p| p.to_string()).collect();
    if listed.is_empty() {
        "none".into()
    } else {
        listed.join(", ")
    }
}

/// PFC priorities of a netdev whose DCB was read; `None` without DCB or
/// without a PFC attribute.
fn pfc_of(n: &Netdev) -> Option<Priorities> {
    let DcbOutcome::Ok(dcb) = &n.dcb else {
        return None;
    };
    dcb.pfc_enabled
}

/// Where the DSCP of a port's RoCE traffic was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DscpSource {
    /// `expect.nccl_ib_tc`: the `NCCL_IB_TC` the jobs set.
    Config,
    /// MLNX_OFED's port-wide traffic class
    /// (`/sys/class/infiniband/<dev>/tc/<port>/traffic_class`), which
    /// overrides the one NCCL's QPs ask for.
    OfedTrafficClass,
    /// Nothing configured: NCCL's default `NCCL_IB_TC` 0, an assumption.
    NcclDefault,
}

/// The DSCP this host's RoCE traffic uses on one port, and where that
/// was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceDscp {
    pub dscp: u8,
    pub source: DscpSource,
    /// The traffic class byte it came from (DSCP << 2 | ECN bits).
    pub tos: u8,
}

impl RoceDscp {
    /// Whether the host is known to mark its RoCE traffic (not an
    /// assumption of NCCL's default).
    pub fn configured(&self) -> bool {
        self.source != DscpSource::NcclDefault
    }

    /// "DSCP 26 (expect.nccl_ib_tc 106)", for finding texts.
    pub fn describe(&self) -> String {
        let from = match self.source {
            DscpSource::Config => format!("expect.nccl_ib_tc {}", self.tos),
            DscpSource::OfedTrafficClass => {
                format!("MLNX_OFED tc traffic_class Global tclass={}", self.tos)
            }
            DscpSource::NcclDefault => {
                "assumed: NCCL's default NCCL_IB_TC 0; expect.nccl_ib_tc unset, no MLNX_OFED global traffic class"
                    .to_string()
            }
        };
        format!("DSCP {} ({from})", self.dscp)
    }
}

/// The DSCP of the RoCE traffic on netdev `n`: the configured
/// `NCCL_IB_TC` (`expect.nccl_ib_tc`) first, then MLNX_OFED's port-wide
/// traffic class of its port where sysfs shows one, else NCCL's default
/// traffic class 0. rdma_cm's default ToS does not count: NCCL does not
/// use rdma_cm. The one answer used by the priority rules, the probes'
/// traffic class and the NCCL advice.
pub fn roce_dscp(n: &Netdev, nccl_ib_tc: Option<u8>) -> RoceDscp {
    let (tos, source) = match (nccl_ib_tc, n.qos.ofed_tclass) {
        (Some(tc), _) => (tc, DscpSource::Config),
        (None, Some(tos)) => (tos, DscpSource::OfedTrafficClass),
        (None, None) => (0, DscpSource::NcclDefault),
    };
    RoceDscp {
        dscp: tos >> 2,
        source,
        tos,
    }
}

/// The IP traffic class (ToS byte) for probe packets on an RDMA port: the
/// one the port's RoCE traffic carries ([`roce_dscp`]), unchanged, ECN bits
/// included (`NCCL_IB_TC=106` is 0x6a on the wire, so a probe is marked,
/// not dropped, where an ECN-marking switch marks NCCL's traffic); on a
/// RoCE port whose netdev was not read, the configured `NCCL_IB_TC`; 0 on
/// InfiniBand.
pub fn port_traffic_class(s: &Snapshot, device: &str, port: u32, nccl_ib_tc: Option<u8>) -> u8 {
    let netdev = s.netdev.iter().flat_map(|n| n.netdevs.iter()).find(|n| {
        n.rdma
            .as_ref()
            .is_some_and(|r| r.device == device && r.port == port)
    });
    match (netdev, find_port(s, device, port)) {
        (_, Some((_, p))) if matches!(p.link_layer, Some(LinkLayer::InfiniBand)) => 0,
        (Some(n), _) => roce_dscp(n, nccl_ib_tc).tos,
        (None, _) => nccl_ib_tc.unwrap_or(0),
    }
}

/// The priority a received packet with `dscp` gets on a port that trusts
/// DSCP: its APP table entry, else the default 3-bit mapping DSCP >> 3
/// (mlx5's dscp2prio before any is set). `None` when the port does not
/// trust DSCP, so the DSCP does not choose the priority.
pub fn dscp_priority(dcb: &DcbConfig, dscp: u8) -> Option<(u8, &'static str)> {
    if dcb.trust() != Trust::Dscp {
        return None;
    }
    match dcb.dscp_map().iter().find(|(d, _)| *d == dscp) {
        Some((_, p)) => Some((*p, "DSCP APP table")),
        None => Some((dscp >> 3, "default DSCP >> 3 mapping")),
    }
}

fn dcb_of(n: &Netdev) -> Option<&DcbConfig> {
    match &n.dcb {
        DcbOutcome::Ok(dcb) => Some(dcb),
        _ => None,
    }
}

fn roce_trust_pcp(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let (Some(dcb), Some(pfc)) = (dcb_of(n), pfc_of(n)) else {
            continue;
        };
        let roce = roce_dscp(n, ctx.expect.nccl_ib_tc);
        // Unmarked traffic (DSCP 0) loses nothing by PCP trust; a port
        // without PFC is not meant to be lossless.
        let Some(first) = pfc.first() else { continue };
        if dcb.trust() != Trust::Pcp || !roce.configured() || roce.dscp == 0 {
            continue;
        }
        let name = &n.name;
        let reported = if dcb.trust_reported() {
            "trust order reported by the kernel: pcp"
        } else {
            "no DSCP APP entry, so the port trusts PCP"
        };
        out.push(Finding {
            rule: RuleId::RoceTrustPcp,
            severity: Severity::Warning,
            finding: format!(
                "{}: RoCE traffic is DSCP-marked ({}) but the port trusts PCP: untagged RoCE packets are classified to priority 0, not the PFC priority {}",
                subject.describe(),
                roce.describe(),
                list(pfc)
            ),
            evidence: format!(
                "{reported}; PFC enabled priorities: {}; expected trust dscp for DSCP-marked RoCE",
                list(pfc)
            ),
            fix: if is_mlx5(n) {
                // mlx5 has no apptrust callback (`mlx5e_dcbnl_ops`): it
                // switches to DSCP trust when the first DSCP APP entry is
                // added (`mlx5e_dcbnl_ieee_setapp`).
                format!(
                    "Map the RoCE DSCP to the PFC priority, which makes mlx5 trust DSCP: dcb app add dev {name} dscp-prio {}:{} (or mlnx_qos -i {name} --trust dscp --dscp2prio set,{},{}), as on the switch ports; keep PCP trust only where RoCE runs on a VLAN whose PCP carries the priority",
                    roce.dscp, first, roce.dscp, first
                )
            } else {
                format!(
                    "Trust DSCP on the port: dcb apptrust set dev {name} order dscp (or mlnx_qos -i {name} --trust dscp), as on the switch ports; keep PCP trust only where RoCE runs on a VLAN whose PCP carries the priority"
                )
            },
            verify: if is_mlx5(n) {
                format!("dcb app show dev {name} dscp-prio; mlnx_qos -i {name} | grep -i trust")
            } else {
                format!("dcb apptrust show dev {name}; mlnx_qos -i {name} | grep -i trust")
            },
            subject,
        });
    }
    out
}

fn cnp_priority_best_effort(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for (n, subject) in roce_netdevs(s) {
        let (Some(dcb), Some(pfc), Some(cnp)) = (dcb_of(n), pfc_of(n), n.qos.cnp_dscp) else {
            continue;
        };
        if pfc.is_empty() {
            continue;
        }
        let Some((p, how)) = dscp_priority(dcb, cnp) else {
            continue;
        };
        let name = &n.name;
        // CNPs need not be lossless (NVIDIA's defaults send them with DSCP
        // 48, priority 6, a strict-priority queue without PFC), but every
        // hop must put them in the same queue, and not in the best-effort
        // one: there they wait behind bulk traffic exactly when the sender
        // should slow down.
        let mut why = Vec::new();
        let mut evidence = vec![
            format!("ecn/roce_np/cnp_dscp {cnp}"),
            format!("trust dscp; DSCP {cnp} -> priority {p} ({how})"),
        ];
        if p == 0 && !pfc.contains(0) {
            why.push(
                "they land on priority 0, the best-effort queue: congestion notifications wait behind bulk traffic and DCQCN reacts late"
                    .to_string(),
            );
        }
        if let Some(sp) = dcb
            .peer
            .dscp_map()
            .and_then(|m| m.iter().find(|(d, _)| *d == cnp).map(|(_, sp)| *sp))
        {
            evidence.push(format!("switch (DCBX peer) DSCP {cnp} -> priority {sp}"));
            if sp != p {
                why.push(format!(
                    "the switch maps their DSCP {cnp} to priority {sp}, this port to {p}: they take another queue across the switch than here"
                ));
            }
        }
        if let Some(cp) = n.qos.cnp_prio {
            evidence.push(format!("ecn/roce_np/cnp_802p_prio {cp}"));
            if cp != p {
                why.push(format!(
                    "they carry 802.1p priority {cp} (cnp_802p_prio) but their DSCP maps to priority {p}: hops that trust PCP and hops that trust DSCP queue them differently"
                ));
            }
        }
        if why.is_empty() {
            continue;
        }
        evidence.push(format!(
            "PFC enabled priorities: {}; expected CNPs on one priority of their own at every hop (commonly DSCP 48, priority 6, strict priority)",
            list(pfc)
        ));
        out.push(Finding {
            rule: RuleId::CnpPriorityBestEffort,
            severity: Severity::Warning,
            finding: format!(
                "{}: the CNPs this port sends (DSCP {cnp}) are misclassified: {}",
                subject.describe(),
                why.join("; ")
            ),
            evidence: evidence.join("; "),
            fix: format!(
                "Send CNPs with a DSCP and 802.1p priority that map to one high priority everywhere: echo 48 > /sys/class/net/{name}/ecn/roce_np/cnp_dscp; echo 6 > /sys/class/net/{name}/ecn/roce_np/cnp_802p_prio (priority 6 with the default mapping), the same DSCP -> priority entry on the switches, and strict priority for it there"
            ),
            verify: format!(
                "cat /sys/class/net/{name}/ecn/roce_np/cnp_dscp /sys/class/net/{name}/ecn/roce_np/cnp_802p_prio; dcb app show dev {name}"
            ),
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
        let active_mtu = match n.rdma.as_ref() {
            Some(r) => format!(
                "; ibv_devinfo -d {} -i {} | grep active_mtu",
                r.device, r.port
            ),
            None => String::new(),
        };
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
            verify: format!("ip -d link show {name} | grep -o 'mtu [0-9]*'{active_mtu}"),
            subject,
        });
    }
    out
}

/// The smallest netdev MTU whose RoCE path MTU is 4096: the kernel derives
/// the RoCE MTU from the netdev MTU minus 96 header bytes (`iboe_get_mtu()`
/// in include/rdma/ib_addr.h: GRH 40 + UDP 8 + BTH 12 + XRC 4 +
/// AtomicETH 28 + ICRC 4, sizes from include/rdma/ib_pack.h), then rounds
/// down to 4096, 2048, 1024, ... So 4096 + 96 = 4192; the usual 1500 gives
/// RoCE MTU 1024.
pub const ROCE_4096_MIN_NETDEV_MTU: u64 = 4192;

/// Header bytes the kernel takes off the netdev MTU for RoCE
/// (`iboe_get_mtu()`, see [`ROCE_4096_MIN_NETDEV_MTU`]).
pub const ROCE_HEADER_BYTES: u64 = 96;

/// `mtu_below_jumbo`'s section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MtuRule {
    /// Netdev MTU below which the rule fires (4192: RoCE MTU 4096).
    pub min_mtu: u64,
}

section!(MtuRule {
    min_mtu: u64 = "crate::values::opt_min_mtu",
});
