//! Which RoCE GID NCCL used on each NIC, and whether that is routable RoCE
//! v2: observed where NCCL logged its queue pairs (`NET/IB: ... GID %ld
//! (%lX/%lX)`, NCCL_DEBUG_SUBSYS=NET), else from the job's
//! `NCCL_IB_GID_INDEX`, else from NCCL's default (index 0 before 2.21;
//! from 2.21 its own search, `ncclIbGetGidIndex` in net_ib.cc: the first
//! GID of `NCCL_IB_ROCE_VERSION_NUM` (2) in `NCCL_IB_ADDR_FAMILY`
//! (AF_INET), else index 0). The type of the index (RoCE v1 or v2) is this
//! host's GID table's (`gid_attrs/types/<index>`), which NCCL reads too.
//!
//! `nccl_gid_not_rocev2`: RoCE v1 (critical: not routable over IP, and the
//! peer must use v1 as well) or a link-local RoCE v2 GID (warning: cannot
//! leave the subnet) in use.

use std::net::Ipv6Addr;

use roce_nccl::aggregate::{NcclSummary, Transport};
use roce_rdma::{GidFamily, GidType, Port};

use crate::ports::find_port;
use crate::snapshot::Snapshot;
use crate::{Finding, RuleId, Severity, Subject};

/// How the GID index of a NIC was learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidBasis {
    /// NCCL's queue pair lines.
    Logged,
    /// The job's `NCCL_IB_GID_INDEX`.
    Setting,
    /// NCCL's default for its version.
    Default(String),
}

/// The GID NCCL used (or uses by its rules) on one RoCE port.
#[derive(Debug, Clone, PartialEq)]
pub struct RoceGid {
    pub device: String,
    pub port: u32,
    pub netdev: Option<String>,
    pub index: Option<i64>,
    /// The GID (the logged one, else this host's table's at the index).
    pub gid: Option<Ipv6Addr>,
    /// The type of the index in this host's GID table.
    pub gid_type: Option<GidType>,
    pub basis: GidBasis,
}

impl RoceGid {
    pub fn family(&self) -> Option<GidFamily> {
        self.gid.as_ref().map(GidFamily::of)
    }

    /// `RoCEv2`, `RoCE v1`, `RoCEv2 on a link-local GID`, `RoCE (GID not
    /// known)`: the transport name `check` prints.
    pub fn transport_name(&self) -> &'static str {
        match (&self.gid_type, self.family()) {
            (Some(GidType::IbRoceV1), _) => "RoCE v1",
            (Some(GidType::RoceV2), Some(GidFamily::Ipv6LinkLocal)) => "RoCEv2 on a link-local GID",
            (Some(GidType::RoceV2), _) => "RoCEv2",
            _ => "RoCE (GID not known)",
        }
    }

    /// How it is known, for texts: `GID 3 in NCCL's queue pair lines`.
    pub fn basis_text(&self) -> String {
        self.basis_of(match self.index {
            Some(i) => format!("GID {i}"),
            None => "GID unknown".to_string(),
        })
    }

    /// [`Self::basis_text`] with the GID's address.
    pub fn basis_with_address(&self) -> String {
        self.basis_of(match (self.index, &self.gid) {
            (Some(i), Some(g)) => format!("GID {i} ({g})"),
            (Some(i), None) => format!("GID {i}"),
            _ => "GID unknown".to_string(),
        })
    }

    fn basis_of(&self, at: String) -> String {
        match &self.basis {
            GidBasis::Logged => format!("{at} in NCCL's queue pair lines"),
            GidBasis::Setting => format!("{at}: the job's NCCL_IB_GID_INDEX"),
            GidBasis::Default(why) => format!("{at}: {why}"),
        }
    }
}

pub(super) fn version_tuple(v: &str) -> Option<(u32, u32)> {
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// NCCL 2.21+'s own choice on `port` (the first GID of the wanted RoCE
/// version in the wanted family, else 0), or index 0 before.
fn default_index(sum: &NcclSummary, port: &Port) -> Option<(i64, String)> {
    let versions: Vec<(u32, u32)> = sum
        .versions
        .iter()
        .filter_map(|v| version_tuple(v))
        .collect();
    if versions.is_empty() {
        return None;
    }
    let new = |v: &(u32, u32)| *v >= (2, 21);
    if versions.iter().all(|v| !new(v)) {
        return Some((
            0,
            format!(
                "NCCL {} uses GID index 0 unless NCCL_IB_GID_INDEX is set (releases before 2.21)",
                sum.versions.join(", ")
            ),
        ));
    }
    if !versions.iter().all(new) {
        return None;
    }
    let want_v1 = sum
        .job
        .setting("NCCL_IB_ROCE_VERSION_NUM")
        .is_some_and(|v| v.trim() == "1");
    let want_v6 = sum
        .job
        .setting("NCCL_IB_ADDR_FAMILY")
        .is_some_and(|v| v.trim() == "AF_INET6");
    let want_type = if want_v1 {
        GidType::IbRoceV1
    } else {
        GidType::RoceV2
    };
    let want_family = if want_v6 {
        GidFamily::Ipv6Global
    } else {
        GidFamily::Ipv4Mapped
    };
    let index = port
        .gids
        .iter()
        .find(|g| g.gid_type == want_type && g.family() == want_family)
        .map_or(0, |g| i64::from(g.index));
    Some((
        index,
        format!(
            "NCCL {} picks it itself (RoCE v{}, {}; not logged)",
            sum.versions.join(", "),
            if want_v1 { 1 } else { 2 },
            if want_v6 { "AF_INET6" } else { "AF_INET" }
        ),
    ))
}

/// The GID of every RoCE port NCCL used in the window.
pub fn roce_gids(s: &Snapshot) -> Vec<RoceGid> {
    let Some(n) = s.nccl.as_ref() else {
        return vec![];
    };
    let sum = &n.summary;
    let mut used: Vec<(String, u32)> = Vec::new();
    for r in &sum.connections {
        if r.key.transport != Transport::Roce {
            continue;
        }
        for m in r.key.device.split('+') {
            let key = (m.to_string(), u32::from(r.key.port));
            if !used.contains(&key) {
                used.push(key);
            }
        }
    }
    for g in &sum.job.gids {
        let key = (g.device.clone(), u32::from(g.port));
        if g.device != "unknown" && !used.contains(&key) {
            used.push(key);
        }
    }
    used.sort();
    let mut out = Vec::new();
    for (device, port) in used {
        let found = find_port(s, &device, port).map(|(_, p)| p);
        let type_at = |i: i64| {
            found.and_then(|p| {
                p.gids
                    .iter()
                    .find(|g| i64::from(g.index) == i)
                    .map(|g| (g.gid_type.clone(), g.gid))
            })
        };
        let netdev = found.and_then(|p| p.netdev.clone());
        let logged: Vec<_> = sum
            .job
            .gids
            .iter()
            .filter(|g| g.device == device && u32::from(g.port) == port)
            .collect();
        if !logged.is_empty() {
            for g in logged {
                out.push(RoceGid {
                    device: device.clone(),
                    port,
                    netdev: netdev.clone(),
                    index: Some(g.gid_index),
                    gid: Some(Ipv6Addr::from(g.gid)),
                    gid_type: type_at(g.gid_index).map(|t| t.0),
                    basis: GidBasis::Logged,
                });
            }
            continue;
        }
        let (index, basis) = match sum
            .job
            .setting("NCCL_IB_GID_INDEX")
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|i| *i >= 0)
        {
            Some(i) => (Some(i), GidBasis::Setting),
            None => match found.and_then(|p| default_index(sum, p)) {
                Some((i, why)) => (Some(i), GidBasis::Default(why)),
                None => (None, GidBasis::Default("no NCCL version logged".into())),
            },
        };
        let at = index.and_then(type_at);
        out.push(RoceGid {
            device,
            port,
            netdev,
            index,
            gid: at.as_ref().map(|t| t.1),
            gid_type: at.map(|t| t.0),
            basis,
        });
    }
    out
}

pub fn gid_not_rocev2(s: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in roce_gids(s) {
        let (severity, what) = match (&g.gid_type, g.family()) {
            (Some(GidType::IbRoceV1), _) => (
                Severity::Critical,
                "RoCE v1: Ethernet frames without an IP header, which no router forwards, and a peer on RoCE v2 does not connect to",
            ),
            (Some(GidType::RoceV2), Some(GidFamily::Ipv6LinkLocal)) => (
                Severity::Warning,
                "a link-local RoCE v2 GID (fe80::/10): its packets cannot leave the subnet",
            ),
            _ => continue,
        };
        // NCCL 2.21+'s own search (a guess from its rules, not logged)
        // that lands on v1 only when the port has no v2 GID: that is
        // rocev2_gid_missing's.
        if matches!(&g.basis, GidBasis::Default(w) if w.contains("picks it itself")) {
            continue;
        }
        let subject = Subject::port(&g.device, g.port, g.netdev.as_deref());
        let port = find_port(s, &g.device, g.port).map(|(_, p)| p);
        let v2 = port.and_then(|p| p.routable_roce_v2_gid());
        let fix = match v2 {
            Some(v2) => format!(
                "Set NCCL_IB_GID_INDEX={} for the jobs (the routable RoCE v2 GID {} of {}), or leave it unset with NCCL 2.21 or later, which picks that GID itself",
                v2.index,
                v2.gid,
                subject.describe()
            ),
            None => format!(
                "{} has no routable RoCE v2 GID (rocev2_gid_missing, rocev2_gid_link_local_only): give {} an IPv4 address; then set NCCL_IB_GID_INDEX to its RoCE v2 GID or use NCCL 2.21 or later",
                subject.describe(),
                g.netdev.as_deref().unwrap_or(&g.device)
            ),
        };
        out.push(Finding {
            rule: RuleId::NcclGidNotRocev2,
            severity,
            finding: format!(
                "NCCL runs RoCE on {} over {what}",
                subject.describe()
            ),
            evidence: format!(
                "{}; this host's GID table: index {} is {}; expected a RoCE v2 GID with an IPv4 or global IPv6 address",
                g.basis_with_address(),
                g.index.map_or("?".into(), |i| i.to_string()),
                g.gid_type.as_ref().map_or("not populated", |t| t.as_str())
            ),
            fix,
            verify: format!(
                "cat /sys/class/infiniband/{}/ports/{}/gid_attrs/types/{}; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET all_reduce_perf -b 1G -e 1G 2>&1 | grep -E 'NET/IB: .*GID'",
                g.device,
                g.port,
                g.index.unwrap_or(0)
            ),
            subject,
        });
    }
    out
}
