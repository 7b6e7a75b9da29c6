//! `nccl_socket_transport`: a job whose inter-node traffic went over
//! NET/Socket (TCP), on any host, with the reason its log and this host
//! give: the job disabled IB (`NCCL_IB_DISABLE=1`) or named another net
//! (`NCCL_NET`), NCCL's IB transport found no device (and why: no RDMA
//! device here, every port down, `NCCL_IB_HCA` matching no ACTIVE port,
//! or ports ACTIVE that the job cannot see), or a net plugin failed.
//!
//! NCCL lines read: `Using network %s`, the `via NET/Socket/<n>`
//! connections, `NET/Socket : Using`, `NET/IB : Using` (the device table),
//! `NET/IB : No device found.`, the `NET/Plugin` and `Failed to initialize
//! NET plugin` lines, and the settings `NCCL_IB_DISABLE`, `NCCL_NET`,
//! `NCCL_IB_HCA`, `NCCL_NET_PLUGIN`.

use std::collections::BTreeSet;

use roce_nccl::aggregate::{NcclSummary, NetNote, Transport};
use roce_rdma::PortState;

use super::{list_or_unknown, window_text};
use crate::ports::ports;
use crate::snapshot::Snapshot;
use crate::{Finding, RuleId, Severity, Subject};

/// Whether the summary shows a job on Socket: its connections, its choice
/// of network, or a setting that forces it.
pub fn on_socket(sum: &NcclSummary) -> bool {
    sum.connections
        .iter()
        .any(|r| r.key.transport == Transport::Socket)
        || sum.networks.iter().any(|n| n == "Socket")
        || sum
            .job
            .setting("NCCL_IB_DISABLE")
            .is_some_and(|v| v.trim() != "0")
        || sum
            .job
            .setting("NCCL_NET")
            .is_some_and(|v| v.eq_ignore_ascii_case("Socket"))
}

/// NCCL_IB_HCA's entries (`^` excludes, `=` exact, `dev[:port]`).
struct HcaFilter {
    exclude: bool,
    exact: bool,
    entries: Vec<(String, Option<u32>)>,
}

impl HcaFilter {
    fn parse(v: &str) -> HcaFilter {
        let v = v.trim();
        let (exclude, v) = match v.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, v),
        };
        let (exact, v) = match v.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, v),
        };
        let entries = v
            .split(',')
            .filter(|e| !e.is_empty())
            .map(|e| match e.split_once(':') {
                Some((d, p)) => (d.to_string(), p.parse().ok()),
                None => (e.to_string(), None),
            })
            .collect();
        HcaFilter {
            exclude,
            exact,
            entries,
        }
    }

    /// NCCL's `matchIfList` (net_ib.cc): a prefix match unless exact,
    /// the port when given; `^` inverts.
    pub fn admits(&self, device: &str, port: u32) -> bool {
        let hit = self.entries.iter().any(|(d, p)| {
            let name = if self.exact {
                device == d
            } else {
                device.starts_with(d.as_str())
            };
            name && p.is_none_or(|p| p == port)
        });
        hit != self.exclude
    }
}

/// Whether `NCCL_IB_HCA=value` admits `device` port `port`.
pub fn hca_admits(value: &str, device: &str, port: u32) -> bool {
    HcaFilter::parse(value).admits(device, port)
}

/// A reason, and the fix for it.
struct Why {
    reason: String,
    fix: String,
}

fn reasons(s: &Snapshot, sum: &NcclSummary) -> Vec<Why> {
    let job = &sum.job;
    let mut out = Vec::new();
    if let Some(v) = job.setting("NCCL_IB_DISABLE").filter(|v| v.trim() != "0") {
        out.push(Why {
            reason: format!("the job set NCCL_IB_DISABLE={v} (NCCL_IB_DISABLE set by environment to {v})"),
            fix: "unset NCCL_IB_DISABLE in the job's environment (and in /etc/nccl.conf or ~/.nccl.conf)".into(),
        });
    }
    if let Some(v) = job
        .setting("NCCL_NET")
        .filter(|v| !v.eq_ignore_ascii_case("IB"))
    {
        out.push(Why {
            reason: format!("the job set NCCL_NET={v} (Comm config netName reset to NCCL_NET={v})"),
            fix: "unset NCCL_NET (NCCL then picks IB over Socket)".into(),
        });
    }
    let no_device = job
        .net_notes
        .iter()
        .any(|n| matches!(n, NetNote::NoDevice { net } if net == "IB" || net.starts_with("IBext")));
    let found: Vec<String> = job
        .ib_ports
        .iter()
        .map(|p| format!("{}:{}", p.device, p.port))
        .collect();
    if !found.is_empty() && out.is_empty() && !no_device {
        out.push(Why {
            reason: format!(
                "NCCL's IB transport found {} (NET/IB : Using ...) and the job still used Socket: NCCL_NET (or the communicator's netName) names Socket",
                found.join(", ")
            ),
            fix: "unset NCCL_NET and the application's ncclConfig_t netName".into(),
        });
    }
    // From 2.27 NCCL initializes only the net the communicator names: a
    // job on Socket whose log shows no IB attempt at all (no device table,
    // no "No device found", no failed IB plugin) was told to use Socket.
    let ib_tried = job.net_notes.iter().any(|n| {
        matches!(n, NetNote::PluginInitFailed { name } if name == "IB" || name.starts_with("IBext"))
    });
    let recent = !sum.versions.is_empty()
        && sum
            .versions
            .iter()
            .all(|v| super::gid::version_tuple(v).is_some_and(|t| t >= (2, 27)));
    if out.is_empty() && found.is_empty() && !no_device && !ib_tried && recent {
        out.push(Why {
            reason: format!(
                "NCCL {} did not try its IB transport at all (no device table, no failure): NCCL_NET (or the communicator's netName) names Socket",
                sum.versions.join(", ")
            ),
            fix: "unset NCCL_NET and the application's ncclConfig_t netName".into(),
        });
    }
    if no_device {
        out.push(no_device_why(s, sum));
    }
    for n in &job.net_notes {
        match n {
            NetNote::PluginLoadFailed { detail } => out.push(Why {
                reason: format!("a net plugin failed to load: {detail}"),
                fix: "install the plugin's dependencies in the job's image (or unset NCCL_NET_PLUGIN to use NCCL's own IB transport)".into(),
            }),
            NetNote::PluginInitFailed { name } if name != "IB" && name != "Socket" => out.push(Why {
                reason: format!("the net plugin {name} failed to initialize (Failed to initialize NET plugin {name})"),
                fix: format!("check what {name} needs (its devices, its libraries) in the job's environment"),
            }),
            _ => {}
        }
    }
    if out.is_empty() {
        out.push(Why {
            reason: "NCCL logged no reason in the window (NCCL_DEBUG_SUBSYS=INIT,ENV,NET shows the device table and the settings)".into(),
            fix: "run the job with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET and read why NET/IB was not used".into(),
        });
    }
    out
}

/// `NET/IB : No device found.`, explained by this host's ports.
fn no_device_why(s: &Snapshot, sum: &NcclSummary) -> Why {
    let all: Vec<(String, u32, bool)> = ports(s)
        .map(|(d, p)| (d.name.clone(), p.number, p.state == Some(PortState::Active)))
        .collect();
    let name = |(d, p, _): &(String, u32, bool)| format!("{d}:{p}");
    if s.rdma.is_none() {
        return Why {
            reason: "NCCL's IB transport found no device (NET/IB : No device found.); this host's RDMA devices were not read (rdma collector)".into(),
            fix: "see the rdma collector's state; then as for a host without RDMA device".into(),
        };
    }
    if all.is_empty() {
        return Why {
            reason: "NCCL's IB transport found no device (NET/IB : No device found.) and this host has no RDMA device (/sys/class/infiniband is empty)".into(),
            fix: "load the NIC's RDMA driver (mlx5_ib for ConnectX) or give the host an RDMA NIC; a VM needs the NIC passed through".into(),
        };
    }
    let active: Vec<&(String, u32, bool)> = all.iter().filter(|p| p.2).collect();
    if active.is_empty() {
        return Why {
            reason: format!(
                "NCCL's IB transport found no device (NET/IB : No device found.): NCCL uses only ACTIVE ports, and every RDMA port here is down ({})",
                all.iter().map(name).collect::<Vec<_>>().join(", ")
            ),
            fix: "bring the RDMA ports up (port_down names each)".into(),
        };
    }
    if let Some(hca) = sum.job.setting("NCCL_IB_HCA") {
        if !active.iter().any(|(d, p, _)| hca_admits(hca, d, *p)) {
            return Why {
                reason: format!(
                    "NCCL's IB transport found no device (NET/IB : No device found.): the job's NCCL_IB_HCA={hca} matches none of the ACTIVE ports ({})",
                    active.iter().map(|p| name(p)).collect::<Vec<_>>().join(", ")
                ),
                fix: format!(
                    "set NCCL_IB_HCA to this node's RDMA devices ({}) or unset it",
                    active.iter().map(|p| p.0.as_str()).collect::<BTreeSet<_>>().into_iter().collect::<Vec<_>>().join(",")
                ),
            };
        }
    }
    Why {
        reason: format!(
            "NCCL's IB transport found no device (NET/IB : No device found.) although {} RDMA port(s) are ACTIVE here ({}): the job does not see them",
            active.len(),
            active.iter().map(|p| name(p)).collect::<Vec<_>>().join(", ")
        ),
        fix: "give the job the RDMA devices: in containers pass /dev/infiniband (the RDMA device plugin or --device) with the IPC_LOCK capability and an unlimited memlock, and install libibverbs with the NIC's provider (libmlx5) in the image".into(),
    }
}

pub fn socket_transport(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = s.nccl.as_ref() else {
        return vec![];
    };
    let sum = &n.summary;
    if !on_socket(sum) {
        return vec![];
    }
    let ifaces: BTreeSet<&str> = sum
        .connections
        .iter()
        .filter(|r| r.key.transport == Transport::Socket)
        .map(|r| r.key.device.as_str())
        .collect();
    let lines: u64 = sum
        .connections
        .iter()
        .filter(|r| r.key.transport == Transport::Socket)
        .map(|r| r.lines)
        .sum();
    let over = if ifaces.is_empty() {
        "no NET/Socket connection line yet; NCCL chose Socket or was told to".to_string()
    } else {
        format!(
            "{lines} channel connection(s) via NET/Socket over {}",
            ifaces.iter().copied().collect::<Vec<_>>().join(", ")
        )
    };
    let why = reasons(s, sum);
    let active: Vec<String> = ports(s)
        .filter(|(_, p)| p.state == Some(PortState::Active))
        .map(|(d, p)| format!("{} port {}", d.name, p.number))
        .collect();
    let ports_text = if active.is_empty() {
        "none".to_string()
    } else {
        active.join(", ")
    };
    vec![Finding {
        rule: RuleId::NcclSocketTransport,
        severity: Severity::Critical,
        subject: Subject {
            netdev: ifaces.iter().next().map(|i| i.to_string()),
            ..Subject::default()
        },
        finding: format!(
            "An NCCL job on this host used NET/Socket (TCP) for its inter-node traffic, not RDMA: {}",
            why[0].reason
        ),
        evidence: format!(
            "{over} in the last {}; why: {}; RDMA ports ACTIVE here: {ports_text}; NCCL versions: {}",
            window_text(n),
            why.iter().map(|w| w.reason.as_str()).collect::<Vec<_>>().join("; "),
            list_or_unknown(&sum.versions)
        ),
        fix: format!(
            "{} (Socket carries a fraction of RDMA's bandwidth and loads the CPUs)",
            why.iter().map(|w| w.fix.as_str()).collect::<Vec<_>>().join("; ")
        ),
        verify: "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET all_reduce_perf -b 1G -e 1G 2>&1 | grep -E 'NET/IB|Using network|via NET/'".into(),
    }]
}
