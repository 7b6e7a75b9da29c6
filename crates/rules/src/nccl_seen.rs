//! Rules on what NCCL jobs really did on this host (the NCCL source's part:
//! their debug logs and Inspector output), judged against the RDMA ports
//! and the GPU-NIC topology the exporter reads itself:
//! - `nccl_socket_transport`: a job used NET/Socket while RDMA ports are up;
//! - `nccl_gdr_not_used`: NET over verbs without GPUDirect RDMA on a NIC,
//!   either although path and driver would allow it, or with the reason
//!   (NCCL's own GDR lines, the driver state, the GPU-NIC path);
//! - `nccl_busbw_below_line_rate`: the bus bandwidth of large multi-node
//!   collectives below a configured share of the collective's target on
//!   the NICs the jobs used ([`expected_busbw`]).
//!
//! All are silent without NCCL data (the source is off by default).

use std::collections::{BTreeMap, BTreeSet};

use roce_nccl::aggregate::{GdrNote, NcclSummary, Transport};
use roce_rdma::PortState;

use super::ports::ports;
use super::table::RuleId;
use super::topology::gdr_per_gpu;
use super::{Context, Finding, Rule, Severity, Subject};
use crate::snapshot::Snapshot;
use roce_model::nccl::NcclSnapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::NcclSocketTransport,
        checks: "no NCCL job used NET/Socket in the window while an RDMA port is ACTIVE",
        evaluate: |ctx: &Context| ctx.latest().map(socket_transport).unwrap_or_default(),
    },
    Rule {
        id: RuleId::NcclGdrNotUsed,
        checks: "every NIC NCCL ran NET over verbs on in the window had a connection via GPUDirect RDMA",
        evaluate: |ctx: &Context| ctx.latest().map(gdr_not_used).unwrap_or_default(),
    },
    Rule {
        id: RuleId::NcclBusbwBelowLineRate,
        checks: "bus bandwidth of large multi-node NCCL collectives is at least nccl.min_line_rate_fraction of the line rate of the NICs used",
        evaluate: |ctx: &Context| ctx.latest().map(busbw_below_line_rate).unwrap_or_default(),
    },
];

fn nccl(s: &Snapshot) -> Option<&NcclSnapshot> {
    s.nccl.as_ref()
}

/// `mlx5_0 port 1` of every RDMA port in state ACTIVE.
fn active_ports(s: &Snapshot) -> Vec<String> {
    ports(s)
        .filter(|(_, p)| p.state == Some(PortState::Active))
        .map(|(d, p)| format!("{} port {}", d.name, p.number))
        .collect()
}

pub fn socket_transport(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = nccl(s) else { return vec![] };
    let sum = &n.summary;
    let ifaces: BTreeSet<&str> = sum
        .connections
        .iter()
        .filter(|r| r.key.transport == Transport::Socket)
        .map(|r| r.key.device.as_str())
        .collect();
    let chose_socket = sum.networks.iter().any(|n| n == "Socket");
    if ifaces.is_empty() && !chose_socket {
        return vec![];
    }
    let active = active_ports(s);
    if active.is_empty() {
        return vec![];
    }
    let lines: u64 = sum
        .connections
        .iter()
        .filter(|r| r.key.transport == Transport::Socket)
        .map(|r| r.lines)
        .sum();
    let over = if ifaces.is_empty() {
        "NCCL chose its Socket network (Using network Socket)".to_string()
    } else {
        format!(
            "{lines} channel connection(s) via NET/Socket over {}",
            ifaces.iter().copied().collect::<Vec<_>>().join(", ")
        )
    };
    vec![Finding {
        rule: RuleId::NcclSocketTransport,
        severity: Severity::Critical,
        subject: Subject {
            netdev: ifaces.iter().next().map(|i| i.to_string()),
            ..Subject::default()
        },
        finding: "An NCCL job on this host used NET/Socket (TCP) while RDMA ports are up: its inter-node traffic bypassed RDMA".into(),
        evidence: format!(
            "{over} in the last {}; RDMA ports ACTIVE: {}; NCCL versions: {}",
            humantime::format_duration(window_of(n)),
            active.join(", "),
            list_or_unknown(&sum.versions)
        ),
        fix: "Make the RDMA devices visible and usable to the job: in containers pass /dev/infiniband and the IPC_LOCK capability (memlock unlimited), \
              do not set NCCL_IB_DISABLE=1 or NCCL_NET=Socket, name existing devices in NCCL_IB_HCA, and check that libibverbs and the provider \
              library are installed where the job runs"
            .into(),
        verify: "NCCL_DEBUG=INFO all_reduce_perf -b 1G -e 1G 2>&1 | grep -E 'NET/IB : Using|Using network|via NET/'".into(),
    }]
}

pub fn gdr_not_used(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = nccl(s) else { return vec![] };
    let sum = &n.summary;
    // Per NIC: connection lines with and without GDRDMA.
    let mut nics: BTreeMap<(&str, u16), (u64, u64)> = BTreeMap::new();
    for r in &sum.connections {
        if !matches!(r.key.transport, Transport::Ib | Transport::Roce) {
            continue;
        }
        let e = nics.entry((&r.key.device, r.key.port)).or_default();
        if r.key.gdr {
            e.0 += r.lines;
        } else {
            e.1 += r.lines;
        }
    }
    let topo = s.topology.as_ref();
    let drivers = topo.and_then(|t| t.gpudirect.as_ref()).map(|g| g.ready());
    let gdr = topo.map(gdr_per_gpu).unwrap_or_default();
    let mut out = Vec::new();
    for ((device, port), (with, without)) in nics {
        if with > 0 || without == 0 {
            continue;
        }
        let members: Vec<&str> = device.split('+').collect();
        // NCCL's own reasons, then the exporter's view of driver and path.
        let mut reasons = Vec::new();
        for note in &sum.gdr_notes {
            match note {
                GdrNote::HcaUnsupported { hca, .. } if members.contains(&hca.as_str()) => reasons.push(format!(
                    "NCCL: GPU Direct RDMA Disabled for HCA {hca} (neither nvidia-peermem nor DMA-BUF usable for it)"
                )),
                GdrNote::PathTooFar { gpu, hca, distance, threshold } => reasons.push(format!(
                    "NCCL: GPU Direct RDMA Disabled for GPU {gpu} / HCA {hca} (distance {} > {}, NCCL_NET_GDR_LEVEL)",
                    opt(distance),
                    opt(threshold)
                )),
                _ => {}
            }
        }
        match drivers {
            Some(false) => reasons.push("driver: GPUDirect RDMA not ready on this host (gpudirect_unavailable: no nvidia-peermem, no usable dma-buf)".into()),
            Some(true) => {}
            None => reasons.push("driver: GPUDirect readiness not read (topology source)".into()),
        }
        let near: Vec<&super::topology::GpuGdr> = gdr
            .iter()
            .filter(|g| g.nics.iter().any(|x| members.contains(&x.as_str())))
            .collect();
        let far: Vec<String> = near
            .iter()
            .filter(|g| !g.path_ok())
            .map(|g| {
                format!(
                    "GPU {} -> {device}: {}",
                    g.gpu,
                    g.class.map_or("unknown", |c| c.as_str())
                )
            })
            .collect();
        if !far.is_empty() {
            reasons.push(format!(
                "path beyond NCCL's default PXB: {}",
                far.join(", ")
            ));
        }
        let allowed = reasons.is_empty() && drivers == Some(true) && near.iter().any(|g| g.used());
        // The NIC's netdev and the GPUs it is nearest to, where known.
        let netdev = members.first().and_then(|m| {
            ports(s)
                .find(|(d, p)| d.name == *m && p.number == u32::from(port))
                .and_then(|(_, p)| p.netdev.clone())
        });
        let gpus: Vec<usize> = near.iter().map(|g| g.gpu).collect();
        let mut nic = format!("{device} port {port}");
        if let Some(nd) = &netdev {
            nic.push_str(&format!(" ({nd})"));
        }
        if !gpus.is_empty() {
            let g = gpus
                .iter()
                .map(|g| format!("GPU {g}"))
                .collect::<Vec<_>>()
                .join(", ");
            nic.push_str(&format!(", nearest to {g},"));
        }
        let finding = if allowed {
            format!(
                "NCCL jobs use {nic} without GPUDirect RDMA although the driver is ready and the GPU-NIC path allows it: data is staged through host memory"
            )
        } else {
            format!(
                "NCCL jobs use {nic} without GPUDirect RDMA: data is staged through host memory"
            )
        };
        let why = if allowed {
            "nothing on the host explains it: the job's environment does (NCCL_NET_GDR_LEVEL=LOC, NCCL_DMABUF_ENABLE=0, a container without the peer-memory device, or an NCCL net plugin without GDR)".to_string()
        } else if reasons.is_empty() {
            "the GPU-NIC path of this NIC is not known (topology source)".to_string()
        } else {
            reasons.join("; ")
        };
        out.push(Finding {
            rule: RuleId::NcclGdrNotUsed,
            severity: Severity::Warning,
            subject: Subject {
                device: Some(members.first().copied().unwrap_or(device).to_string()),
                port: Some(u32::from(port)),
                netdev,
                gpu: match gpus.as_slice() {
                    [g] => u32::try_from(*g).ok(),
                    _ => None,
                },
            },
            finding,
            evidence: format!(
                "{without} NET channel connection(s) on {device} port {port} in the last {}, none via .../GDRDMA; {why}",
                humantime::format_duration(window_of(n))
            ),
            fix: if allowed {
                "Check the job's NCCL environment (unset NCCL_NET_GDR_LEVEL / NCCL_NET_GDR_READ overrides, keep DMA-BUF on) and, in containers, that nvidia-peermem or dma-buf is reachable from the job".into()
            } else {
                "Remove the cause named in the evidence: load nvidia-peermem (or use dma-buf: kernel >= 5.12, NVIDIA open kernel module, rdma-core >= 34), or place each GPU under the same PCIe switch as its NIC".into()
            },
            verify: "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH all_reduce_perf -b 1G -e 1G 2>&1 | grep -E 'GPU Direct RDMA|via NET/'".into(),
        });
    }
    out
}

pub fn busbw_below_line_rate(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = nccl(s) else { return vec![] };
    let sum: &NcclSummary = &n.summary;
    if sum.busbw.is_empty() {
        return vec![];
    }
    let Some(line) = line_rate(s, sum) else {
        return vec![];
    };
    let mut out = Vec::new();
    for b in &sum.busbw {
        let Some(expected) = expected_busbw(&b.collective, &line) else {
            continue;
        };
        let floor = n.min_line_rate_fraction * expected.bytes_per_second;
        // NVLS and CollNet (SHARP) results above the NIC sum are above
        // any floor here: quiet by construction.
        let mean = b.mean_gbs * 1e9;
        if mean >= floor {
            continue;
        }
        out.push(Finding {
            rule: RuleId::NcclBusbwBelowLineRate,
            severity: Severity::Warning,
            subject: Subject::default(),
            finding: format!(
                "NCCL {} bus bandwidth of large multi-node collectives is {:.1} GB/s, below {:.0}% of the {:.1} GB/s expected of {} on these NICs",
                b.collective,
                b.mean_gbs,
                n.min_line_rate_fraction * 100.0,
                expected.bytes_per_second / 1e9,
                b.collective
            ),
            evidence: format!(
                "{} {} collective(s) of at least {} bytes over up to {} nodes in the last {}: busbw mean {:.1} GB/s, min {:.1}, max {:.1}; expected at least {:.1} GB/s ({} x {:.1} GB/s: {})",
                b.samples,
                b.collective,
                n.busbw_min_bytes,
                b.largest_nnodes,
                humantime::format_duration(window_of(n)),
                b.mean_gbs,
                b.min_gbs,
                b.max_gbs,
                floor / 1e9,
                n.min_line_rate_fraction,
                expected.bytes_per_second / 1e9,
                expected.basis
            ),
            fix: "Find what slows the fabric for these jobs: the congestion and port findings of this host and its peers (PFC storms, ECN/CNP spikes, retransmissions, link errors), the transport and GPUDirect RDMA findings above, and a GPU-NIC placement where each rank uses its nearest NIC".into(),
            verify: "all_reduce_perf -b 1G -e 8G -f 2 across two nodes (alltoall_perf for AllToAll): busbw for large sizes near the expected figure".into(),
        });
    }
    out
}

/// NCCL's maintainers' cross-node target for ring and tree collectives:
/// about 24 GB/s of bus bandwidth per 200 Gb/s (25 GB/s) NIC, summed over
/// the NICs a node's ranks use (nccl-tests#119, nccl#495).
pub const RING_TREE_PER_LINE_RATE: f64 = 24.0 / 25.0;

/// What one collective's bus bandwidth should reach on this node, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedBusbw {
    pub bytes_per_second: f64,
    /// How the figure was made, for evidence and `check`.
    pub basis: String,
}

/// The expected bus bandwidth of `collective` on the NICs of `line`:
/// ring/tree collectives (AllReduce, AllGather, ReduceScatter, Broadcast,
/// Reduce) aggregate the node's NICs; AllToAll cannot (each rank sends
/// over its own NIC; nccl-tests#267 puts its busbw at N/(N-1) x one NIC's
/// bandwidth), so one NIC's. `None` for a collective NCCL does not name
/// (`other`): no target to judge it against.
pub fn expected_busbw(collective: &str, line: &LineRate) -> Option<ExpectedBusbw> {
    let nics = line
        .nics
        .iter()
        .map(|(k, v)| format!("{k} {:.1} GB/s", *v as f64 / 1e9))
        .collect::<Vec<_>>()
        .join(", ");
    match collective {
        "AllToAll" => Some(ExpectedBusbw {
            bytes_per_second: RING_TREE_PER_LINE_RATE * line.rate as f64,
            basis: format!(
                "AllToAll: one NIC's, about 24 GB/s per 200 Gb/s, of the slowest of the {}: {nics}",
                line.basis
            ),
        }),
        "AllReduce" | "AllGather" | "ReduceScatter" | "Broadcast" | "Reduce" => {
            let total: u64 = line.nics.values().sum();
            Some(ExpectedBusbw {
                bytes_per_second: RING_TREE_PER_LINE_RATE * total as f64,
                basis: format!(
                    "ring/tree across nodes: about 24 GB/s per 200 Gb/s NIC, summed over the {}: {nics}",
                    line.basis
                ),
            })
        }
        _ => None,
    }
}

/// The NICs NCCL's bus bandwidth is judged on.
pub struct LineRate {
    /// Bytes per second: the slowest of `nics` (one NIC's, for AllToAll).
    pub rate: u64,
    /// Which NICs: those NCCL used, or every ACTIVE port.
    pub basis: &'static str,
    /// `mlx5_0 port 1` and its rate (a merged device: its members' sum).
    pub nics: BTreeMap<String, u64>,
}

/// The line rate of the NICs NCCL used in the window (connection lines over
/// verbs), else of every ACTIVE RDMA port; `None` without rates.
pub fn line_rate(s: &Snapshot, sum: &NcclSummary) -> Option<LineRate> {
    let rate = |device: &str, port: u16| -> Option<u64> {
        ports(s)
            .find(|(d, p)| d.name == device && p.number == u32::from(port))
            .and_then(|(_, p)| p.rate_bytes_per_second)
    };
    let mut nics: BTreeMap<String, u64> = BTreeMap::new();
    for r in &sum.connections {
        if !matches!(r.key.transport, Transport::Ib | Transport::Roce) {
            continue;
        }
        let total: Option<u64> = r.key.device.split('+').map(|m| rate(m, r.key.port)).sum();
        if let Some(t) = total {
            nics.insert(format!("{} port {}", r.key.device, r.key.port), t);
        }
    }
    let mut basis = "NICs NCCL used";
    if nics.is_empty() {
        basis = "ACTIVE RDMA ports (no NCCL connection lines seen)";
        for (d, p) in ports(s) {
            if p.state == Some(PortState::Active) {
                if let Some(r) = p.rate_bytes_per_second {
                    nics.insert(format!("{} port {}", d.name, p.number), r);
                }
            }
        }
    }
    let rate = nics.values().copied().min()?;
    Some(LineRate { rate, basis, nics })
}

fn window_of(n: &NcclSnapshot) -> std::time::Duration {
    n.window
}

fn opt(v: &Option<u32>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

fn list_or_unknown(v: &[String]) -> String {
    if v.is_empty() {
        "not logged".into()
    } else {
        v.join(", ")
    }
}
