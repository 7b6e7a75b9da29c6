//! The NCCL environment this host needs: for each setting that matters on
//! RDMA hosts, whether NCCL's own default is right here, and if not, the
//! value and why. Pure: one snapshot and the expectations in, a list out;
//! `check` prints it.
//!
//! NCCL's defaults, as its source sets them (src/transport/net_ib*.cc,
//! src/graph/paths.cc):
//! - `NCCL_IB_HCA`: every RDMA device with an active port; the topology
//!   search matches each GPU with its nearest NIC itself.
//! - `NCCL_IB_GID_INDEX`: -1 since NCCL 2.21, `ncclIbGetGidIndex` picks the
//!   GID itself: RoCE v2 (`NCCL_IB_ROCE_VERSION_NUM`, default 2) with an
//!   IPv4 address (`NCCL_IB_ADDR_FAMILY`, default `AF_INET`). Before 2.21
//!   the default was index 0 (a link-local RoCE v1 GID on mlx5).
//! - `NCCL_IB_TC`: 0, so RoCE packets carry DSCP 0 (recent releases
//!   default to -1: the communicator's `trafficClass` when the application
//!   sets one in its `ncclConfig_t`, else `NCCL_IB_TC_DEFAULT` 0).
//! - `NCCL_NET_GDR_LEVEL`: PXB ([`super::topology::NCCL_DEFAULT_GDR_LEVEL`]).
//!
//! `NCCL_IB_SL` is never advised: on InfiniBand the service level that maps
//! to a lossless or prioritised virtual lane is the subnet manager's QoS
//! policy (SL2VL tables), which the host's sysfs does not show.

use roce_host::Priorities;
use roce_rdma::{GidFamily, GidType, LinkLayer};
use roce_topology::PathClass;
use serde::Serialize;

use super::fabric::{dscp_priority, list, roce_dscp, roce_netdevs};
use super::ports::ports;
use super::settings::Expectations;
use super::topology::gdr_per_gpu;
use crate::snapshot::Snapshot;

/// What to do about one NCCL setting on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NcclValue {
    /// NCCL's default would be wrong: export this value.
    Set(String),
    /// NCCL's default is right here: set nothing.
    DefaultIsRight,
    /// NCCL's default is wrong or doubtful, but the right value is a
    /// choice the host cannot make (the text says which).
    Choose(String),
    /// NCCL's default is right and jobs override it (their logs show the
    /// setting): unset it.
    Unset(String),
}

/// One NCCL setting with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NcclAdvice {
    pub name: &'static str,
    pub value: NcclValue,
    pub why: String,
}

/// The advice for this host, in a fixed order; settings the data says
/// nothing about are left out.
pub fn advice(s: &Snapshot, expect: &Expectations) -> Vec<NcclAdvice> {
    [ib_hca(s), gid_index(s), ib_tc(s, expect), gdr_level(s)]
        .into_iter()
        .flatten()
        .collect()
}

/// `NCCL_IB_HCA`: only when some active RDMA port belongs to a NIC nearest
/// to no GPU (a front-end or storage NIC), which NCCL would use too.
fn ib_hca(s: &Snapshot) -> Option<NcclAdvice> {
    let t = s.topology.as_ref()?;
    if t.gpus.is_empty() {
        return None;
    }
    let mut nics: Vec<&str> = Vec::new();
    let mut pairs = Vec::new();
    for gpu in &t.gpus {
        let nearest = t.nearest_nics(gpu.index);
        if let Some(first) = nearest.first() {
            pairs.push(format!(
                "GPU {} -> {} {}",
                gpu.index,
                nearest
                    .iter()
                    .map(|p| p.nic.as_str())
                    .collect::<Vec<_>>()
                    .join("/"),
                first.class.as_str()
            ));
        }
        for p in nearest {
            if !nics.contains(&p.nic.as_str()) {
                nics.push(&p.nic);
            }
        }
    }
    let active: Vec<(String, bool)> = ports(s)
        .filter(|(_, p)| p.is_up())
        .map(|(d, p)| {
            (
                format!("{}:{}", d.name, p.number),
                nics.contains(&d.name.as_str()),
            )
        })
        .collect();
    let near: Vec<&str> = active
        .iter()
        .filter(|(_, n)| *n)
        .map(|(e, _)| e.as_str())
        .collect();
    if near.is_empty() {
        return None;
    }
    let others: Vec<&str> = active
        .iter()
        .filter(|(_, n)| !*n)
        .map(|(e, _)| e.as_str())
        .collect();
    if others.is_empty() {
        let seen = s
            .nccl
            .as_ref()
            .and_then(|n| n.summary.job.setting("NCCL_IB_HCA"));
        if let Some(v) = seen {
            let left_out: Vec<&str> = active
                .iter()
                .filter(|(e, _)| {
                    let (d, p) = e.split_once(':').unwrap_or((e.as_str(), "1"));
                    !super::nccl_seen::transport::hca_admits(v, d, p.parse().unwrap_or(1))
                })
                .map(|(e, _)| e.as_str())
                .collect();
            if !left_out.is_empty() {
                return Some(NcclAdvice {
                    name: "NCCL_IB_HCA",
                    value: NcclValue::Unset(v.to_string()),
                    why: format!(
                        "jobs set NCCL_IB_HCA={v} (their NCCL logs), which leaves out {} of this node's rails; NCCL's default, every active RDMA port, is right here: each is nearest to a GPU and NCCL matches GPUs and NICs itself ({})",
                        left_out.join(", "),
                        pairs.join(", ")
                    ),
                });
            }
        }
        return Some(NcclAdvice {
            name: "NCCL_IB_HCA",
            value: NcclValue::DefaultIsRight,
            why: format!(
                "NCCL uses every active RDMA port, and every one is nearest to a GPU; it matches GPUs and NICs from the PCI topology itself ({})",
                pairs.join(", ")
            ),
        });
    }
    let all: Vec<&str> = ports(s).map(|(d, _)| d.name.as_str()).collect();
    // NCCL matches NCCL_IB_HCA entries as name prefixes unless the list
    // starts with '=' (NCCL's environment variable documentation).
    let prefix_clash = nics
        .iter()
        .any(|n| all.iter().any(|a| a != n && a.starts_with(n)));
    let mut why = format!(
        "NCCL would also use {}, nearest to no GPU (a front-end or storage NIC?); the NICs nearest to each GPU: {}",
        others.join(", "),
        pairs.join(", ")
    );
    if prefix_clash {
        why.push_str("; '=' makes NCCL match the names exactly, not as prefixes");
    }
    Some(NcclAdvice {
        name: "NCCL_IB_HCA",
        value: NcclValue::Set(format!(
            "{}{}",
            if prefix_clash { "=" } else { "" },
            near.join(",")
        )),
        why,
    })
}

/// `NCCL_IB_GID_INDEX` (and `NCCL_IB_ADDR_FAMILY`): NCCL 2.21+ finds the
/// IPv4 RoCE v2 GID itself; only IPv6-only ports need the family changed.
fn gid_index(s: &Snapshot) -> Option<NcclAdvice> {
    let roce: Vec<_> = ports(s)
        .filter(|(_, p)| p.is_up() && matches!(p.link_layer, Some(LinkLayer::Ethernet)))
        .collect();
    if roce.is_empty() {
        return None;
    }
    let v2 = |p: &roce_rdma::Port, family: GidFamily| {
        p.gids
            .iter()
            .find(|g| g.gid_type == GidType::RoceV2 && g.family() == family)
            .map(|g| g.index)
    };
    let ipv4: Vec<Option<u32>> = roce
        .iter()
        .map(|(_, p)| v2(p, GidFamily::Ipv4Mapped))
        .collect();
    if ipv4.iter().all(Option::is_some) {
        let indexes: Vec<u32> = ipv4.into_iter().flatten().collect();
        let same = indexes.iter().all(|i| *i == indexes[0]);
        let old = if same {
            format!(
                "NCCL before 2.21 takes index 0 by default: there, export NCCL_IB_GID_INDEX={}",
                indexes[0]
            )
        } else {
            "NCCL before 2.21 takes index 0 by default, and the index differs between ports here: use NCCL 2.21 or later".into()
        };
        let at = if same {
            format!("index {} on every active RoCE port", indexes[0])
        } else {
            roce.iter()
                .zip(&indexes)
                .map(|((d, p), i)| format!("{}:{} index {i}", d.name, p.number))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let job = s.nccl.as_ref().map(|n| &n.summary);
        let set = job.and_then(|j| j.job.setting("NCCL_IB_GID_INDEX"));
        let old_nccl: Vec<&String> = job
            .map(|j| {
                j.versions
                    .iter()
                    .filter(|v| version_below(v, (2, 21)))
                    .collect()
            })
            .unwrap_or_default();
        // What the jobs' logs show overrides the general answer: a set
        // index that is not the routable one, or a release before 2.21
        // that takes index 0.
        if same {
            let want = indexes[0].to_string();
            if let Some(v) = set.filter(|v| v.trim() != want) {
                return Some(NcclAdvice {
                    name: "NCCL_IB_GID_INDEX",
                    value: NcclValue::Set(want),
                    why: format!(
                        "jobs set NCCL_IB_GID_INDEX={v} (their NCCL logs), not the IPv4 RoCE v2 GID: {at} (nccl_gid_not_rocev2 names what index {v} is)"
                    ),
                });
            }
            if set.is_none() && !old_nccl.is_empty() {
                return Some(NcclAdvice {
                    name: "NCCL_IB_GID_INDEX",
                    value: NcclValue::Set(want),
                    why: format!(
                        "jobs run NCCL {} (their logs), which takes GID index 0 unless told: the IPv4 RoCE v2 GID is {at}; NCCL 2.21 and later find it themselves",
                        old_nccl.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
        return Some(NcclAdvice {
            name: "NCCL_IB_GID_INDEX",
            value: NcclValue::DefaultIsRight,
            why: format!(
                "NCCL 2.21 and later pick the RoCE v2 GID with an IPv4 address themselves (NCCL_IB_ROCE_VERSION_NUM=2, NCCL_IB_ADDR_FAMILY=AF_INET by default): {at}; {old}"
            ),
        });
    }
    let global_only = roce.iter().all(|(_, p)| {
        v2(p, GidFamily::Ipv4Mapped).is_none() && v2(p, GidFamily::Ipv6Global).is_some()
    });
    if global_only {
        return Some(NcclAdvice {
            name: "NCCL_IB_ADDR_FAMILY",
            value: NcclValue::Set("AF_INET6".into()),
            why: format!(
                "no active RoCE port has an IPv4 RoCE v2 GID, only global IPv6 ones ({}); NCCL looks for an IPv4 one by default (AF_INET)",
                roce.iter()
                    .map(|(d, p)| format!("{}:{}", d.name, p.number))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    // Ports without a routable RoCE v2 GID are findings
    // (rocev2_gid_missing, rocev2_gid_link_local_only): no setting helps.
    None
}

/// Whether `version` (`2.20.5`) is below `(major, minor)`.
fn version_below(version: &str, than: (u32, u32)) -> bool {
    let mut it = version.split('.').map(|p| p.parse::<u32>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(a), Some(b)) => (a, b) < than,
        _ => false,
    }
}

/// `NCCL_IB_TC`: NCCL's default 0 puts RoCE on DSCP 0. It is right only
/// where DSCP 0 lands on a PFC priority; otherwise the value is the DSCP
/// the host is configured to use ([`roce_dscp`]), never one picked from
/// the DSCP map (mlx5 with DSCP trust maps all 64 DSCPs, 8 per priority).
fn ib_tc(s: &Snapshot, expect: &Expectations) -> Option<NcclAdvice> {
    // Ports whose priority the DSCP chooses, and that mean to be lossless.
    let judged: Vec<_> = roce_netdevs(s)
        .into_iter()
        .filter_map(|(n, _)| {
            let roce_netdev::DcbOutcome::Ok(dcb) = &n.dcb else {
                return None;
            };
            let pfc = dcb.pfc_enabled?;
            dscp_priority(dcb, 0)?;
            (!pfc.is_empty()).then_some((n, dcb, pfc))
        })
        .collect();
    let (first, _, _) = judged.first()?;
    let lands = |dcb: &roce_netdev::DcbConfig, pfc: Priorities, dscp: u8| {
        dscp_priority(dcb, dscp)
            .map(|(p, _)| p)
            .filter(|p| pfc.contains(*p))
    };
    let names = |f: &dyn Fn(&roce_netdev::DcbConfig, Priorities) -> bool| {
        judged
            .iter()
            .filter(|(_, d, p)| f(d, *p))
            .map(|(n, _, _)| n.name.as_str())
            .collect::<Vec<_>>()
    };
    let default_off = names(&|d, p| lands(d, p, 0).is_none());
    if default_off.is_empty() {
        return Some(NcclAdvice {
            name: "NCCL_IB_TC",
            value: NcclValue::DefaultIsRight,
            why: format!(
                "NCCL's default traffic class 0 (DSCP 0) lands on a PFC priority on every RoCE netdev with DSCP trust ({})",
                names(&|_, _| true).join(", ")
            ),
        });
    }
    let roce = roce_dscp(first, expect.nccl_ib_tc);
    let same = judged
        .iter()
        .all(|(n, _, _)| roce_dscp(n, expect.nccl_ib_tc) == roce);
    let default_why = format!(
        "NCCL's default traffic class 0 puts RoCE on DSCP 0, which lands on a priority without PFC on {}",
        default_off.join(", ")
    );
    if roce.configured() && same {
        let off = names(&|d, p| lands(d, p, roce.dscp).is_none());
        let landing: Priorities = judged
            .iter()
            .filter_map(|(_, d, p)| lands(d, *p, roce.dscp))
            .collect();
        if !landing.is_empty() {
            let caveat = if off.is_empty() {
                String::new()
            } else {
                format!(
                    "; not on {}, where it lands on a priority without PFC (pfc_priority_mismatch)",
                    off.join(", ")
                )
            };
            return Some(NcclAdvice {
                name: "NCCL_IB_TC",
                value: NcclValue::Set(roce.tos.to_string()),
                why: format!(
                    "{default_why}; this host is configured for {}, which lands on PFC priority {}{caveat}",
                    roce.describe(),
                    list(landing)
                ),
            });
        }
    }
    // The DSCPs that reach a PFC priority, as a hint; which one the
    // switches expect is theirs to say.
    let (_, dcb, pfc) = &judged[0];
    let candidates: Vec<String> = (0..64u8)
        .filter(|d| lands(dcb, *pfc, *d).is_some())
        .map(|d| d.to_string())
        .collect();
    Some(NcclAdvice {
        name: "NCCL_IB_TC",
        value: NcclValue::Choose("<DSCP << 2>".into()),
        why: format!(
            "{default_why}; on {} DSCP {} reach PFC priority {}: set the one the switches map to it (commonly 26, NCCL_IB_TC=106), and give it to the exporter as expect.nccl_ib_tc",
            first.name,
            candidates.join(", "),
            list(*pfc)
        ),
    })
}

/// `NCCL_NET_GDR_LEVEL`: NCCL's default PXB is right where every GPU has a
/// NIC within PXB; PHB ones need a measurement, not a guess.
fn gdr_level(s: &Snapshot) -> Option<NcclAdvice> {
    let t = s.topology.as_ref()?;
    let gdr = gdr_per_gpu(t);
    if gdr.is_empty() || gdr.iter().all(|g| g.class.is_none()) {
        return None;
    }
    if t.gpudirect.as_ref().is_some_and(|g| !g.ready()) {
        return None;
    }
    let phb: Vec<String> = gdr
        .iter()
        .filter(|g| g.class == Some(PathClass::Phb))
        .map(|g| format!("GPU {}", g.gpu))
        .collect();
    if gdr.iter().all(|g| g.path_ok()) {
        return Some(NcclAdvice {
            name: "NCCL_NET_GDR_LEVEL",
            value: NcclValue::DefaultIsRight,
            why: "every GPU has an RDMA NIC within PXB, where NCCL uses GPUDirect RDMA by default"
                .into(),
        });
    }
    if phb.is_empty() {
        // NODE and SYS: GPUDirect RDMA across the CPU is rarely faster;
        // gpu_nic_path_far says so.
        return None;
    }
    Some(NcclAdvice {
        name: "NCCL_NET_GDR_LEVEL",
        value: NcclValue::Choose("PHB, if measured faster".into()),
        why: format!(
            "{} reach their nearest NIC only through the CPU's host bridge (PHB), beyond NCCL's default PXB, so NCCL stages their traffic through host memory; whether GPUDirect RDMA through the root complex is faster depends on the CPU: measure with NCCL_NET_GDR_LEVEL=PHB",
            phb.join(", ")
        ),
    })
}
