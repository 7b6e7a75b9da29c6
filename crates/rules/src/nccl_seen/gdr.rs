//! `nccl_gdr_not_used`: NET over verbs without GPUDirect RDMA on a NIC,
//! with the cause as NCCL logged it, the job setting behind it where the
//! log shows one, and this host's GPUDirect state (the same facts as
//! `check`'s GPUDirect section, so the two never contradict).
//!
//! Severity follows the prediction for the same cause: critical where the
//! drivers or a job setting keep GPUDirect RDMA off (as
//! `gpudirect_unavailable`), the path's own verdict where NCCL's distance
//! rule does (`gpudirect_not_used` for PHB and `gpu_nic_path_far` for
//! NODE: warning; SYS: critical).
//!
//! NCCL lines read: the `via NET/IB/<n>[/GDRDMA]` connections, `NET/IB :
//! GPU Direct RDMA Disabled for HCA %d '%s'` (src/graph/topo.cc: neither
//! the peer-memory module check nor the dma-buf check passed), `GPU Direct
//! RDMA Disabled for GPU %d / HCA %lx (distance %d > %d)`
//! (src/graph/paths.cc), and the settings `NCCL_NET_GDR_LEVEL`,
//! `NCCL_DMABUF_ENABLE`.

use std::collections::BTreeMap;

use roce_nccl::aggregate::{GdrNote, Transport};
use roce_topology::PathClass;

use super::{opt, window_text};
use crate::ports::ports;
use crate::snapshot::Snapshot;
use crate::topology::{gdr_per_gpu, GpuGdr};
use crate::{Finding, RuleId, Severity, Subject};

struct Cause {
    text: String,
    fix: String,
    severity: Severity,
}

/// This host's GPUDirect state in `check`'s words.
fn host_state(s: &Snapshot) -> Option<(bool, bool, String)> {
    let g = s.topology.as_ref()?.gpudirect.as_ref()?;
    let (peermem, dmabuf) = (g.peermem_ready(), g.dmabuf_ready());
    let text = format!(
        "on this host nvidia_peermem is {} and dma-buf is {}",
        if peermem { "loaded" } else { "not loaded" },
        if dmabuf { "ready" } else { "not usable" }
    );
    Some((peermem, dmabuf, text))
}

fn path_severity(class: Option<PathClass>) -> Severity {
    match class {
        Some(PathClass::Phb | PathClass::Node) => Severity::Warning,
        _ => Severity::Critical,
    }
}

fn causes(s: &Snapshot, members: &[&str], near: &[&GpuGdr]) -> Vec<Cause> {
    let Some(n) = s.nccl.as_ref() else {
        return vec![];
    };
    let sum = &n.summary;
    let job = &sum.job;
    let host = host_state(s);
    let host_text = host.as_ref().map_or(
        "this host's GPUDirect state was not read".to_string(),
        |h| h.2.clone(),
    );
    let mut out = Vec::new();
    let hca_off: Vec<&str> = sum
        .gdr_notes
        .iter()
        .filter_map(|note| match note {
            GdrNote::HcaUnsupported { hca, .. } if members.contains(&hca.as_str()) => {
                Some(hca.as_str())
            }
            _ => None,
        })
        .collect();
    let far: Vec<String> = sum
        .gdr_notes
        .iter()
        .filter_map(|note| match note {
            GdrNote::PathTooFar {
                gpu,
                hca,
                distance,
                threshold,
            } => Some(format!(
                "GPU Direct RDMA Disabled for GPU {gpu} / HCA {hca} (distance {} > {})",
                opt(distance),
                opt(threshold)
            )),
            _ => None,
        })
        .collect();
    let dmabuf_off = job
        .setting("NCCL_DMABUF_ENABLE")
        .filter(|v| v.trim() == "0");
    let level = job.setting("NCCL_NET_GDR_LEVEL");
    if let Some(hca) = hca_off.first() {
        let said = format!("NCCL: GPU Direct RDMA Disabled for HCA {hca}");
        let (text, fix) = match (&host, dmabuf_off) {
            (Some((false, true, _)), Some(_)) => (
                format!("the job set NCCL_DMABUF_ENABLE=0 ({said}), and dma-buf is this host's only ready mechanism: nvidia_peermem is not loaded"),
                "unset NCCL_DMABUF_ENABLE in the job (or load nvidia-peermem: modprobe nvidia-peermem)".to_string(),
            ),
            (Some((false, false, _)), _) => (
                format!("{said}: neither nvidia-peermem nor dma-buf is usable, {host_text} (gpudirect_unavailable)"),
                "load nvidia-peermem (modprobe nvidia-peermem), or make dma-buf usable: kernel >= 5.12, the NVIDIA open kernel module, rdma-core >= 34".to_string(),
            ),
            (Some((true, _, _)), _) => (
                format!("{said} although {host_text}: the job does not see the peer-memory module (NCCL looks for /sys/kernel/mm/memory_peers/nv_mem/version or /sys/module/nvidia_peermem/version)"),
                "let the job's container see the host's /sys (read-only) so that NCCL finds nvidia_peermem, or enable dma-buf for it".to_string(),
            ),
            (Some((false, true, _)), None) => (
                format!("{said} although {host_text}: NCCL's own dma-buf check failed in the job (its libibverbs or CUDA driver, as the container has them, older than dma-buf needs: rdma-core >= 34, CUDA >= 11.7), or NCCL_DMABUF_ENABLE=0 is set where the log does not show it"),
                "use a job image with rdma-core >= 34 and CUDA >= 11.7, check NCCL_DMABUF_ENABLE, or load nvidia-peermem on the host".to_string(),
            ),
            (None, _) => (
                format!("{said} (neither NCCL's peer-memory check nor its dma-buf check passed); {host_text}"),
                "load nvidia-peermem or make dma-buf usable for the job".to_string(),
            ),
        };
        out.push(Cause {
            text,
            fix,
            severity: Severity::Critical,
        });
    }
    if !far.is_empty() || level.is_some() {
        let class = near.iter().filter_map(|g| g.class).min();
        let host_ok = near.iter().any(|g| g.path_ok());
        let (text, fix, severity) = match level {
            Some(v) => (
                format!(
                    "the job set NCCL_NET_GDR_LEVEL={v}: NCCL uses GPUDirect RDMA only up to that distance{}",
                    if far.is_empty() { String::new() } else { format!(" (NCCL: {})", far.join("; ")) }
                ),
                "unset NCCL_NET_GDR_LEVEL (NCCL's default PXB covers GPUs under their NIC's PCIe switch)".to_string(),
                Severity::Critical,
            ),
            None if host_ok => (
                format!(
                    "NCCL: {}, while this host's PCI tree puts the GPU {} from the NIC: NCCL sees another topology (NCCL_TOPO_FILE, or a VM's flattened PCI tree)",
                    far.join("; "),
                    class.map_or("near", |c| c.as_str())
                ),
                "check the job's NCCL_TOPO_FILE and the PCI tree the job sees".to_string(),
                Severity::Critical,
            ),
            None => (
                format!(
                    "NCCL: {}: the GPU-NIC path ({}) is beyond NCCL's default NCCL_NET_GDR_LEVEL PXB",
                    far.join("; "),
                    class.map_or("not read here", |c| c.as_str())
                ),
                "place each GPU under the same PCIe switch as its NIC; or measure with NCCL_NET_GDR_LEVEL=PHB and keep it only if faster".to_string(),
                path_severity(class),
            ),
        };
        out.push(Cause {
            text,
            fix,
            severity,
        });
    }
    if out.is_empty() {
        // NCCL said nothing (its GRAPH and NET lines are off by default):
        // this host's view.
        let class = near.iter().filter_map(|g| g.class).min();
        match &host {
            Some((false, false, _)) => out.push(Cause {
                text: format!("neither nvidia-peermem nor dma-buf is usable: {host_text} (gpudirect_unavailable)"),
                fix: "load nvidia-peermem (modprobe nvidia-peermem), or make dma-buf usable: kernel >= 5.12, the NVIDIA open kernel module, rdma-core >= 34".into(),
                severity: Severity::Critical,
            }),
            _ if class.is_some_and(|c| c > PathClass::Pxb) => out.push(Cause {
                text: format!(
                    "the GPU-NIC path ({}) is beyond NCCL's default NCCL_NET_GDR_LEVEL PXB",
                    class.map_or("?", |c| c.as_str())
                ),
                fix: "place each GPU under the same PCIe switch as its NIC; or measure with NCCL_NET_GDR_LEVEL=PHB and keep it only if faster".into(),
                severity: path_severity(class),
            }),
            Some(_) => out.push(Cause {
                text: format!(
                    "nothing on the host explains it ({host_text}, the GPU-NIC path {}): the job's environment does (NCCL_NET_GDR_LEVEL=LOC, NCCL_DMABUF_ENABLE=0, a container without the peer-memory module, a net plugin without GDR); run with NCCL_DEBUG_SUBSYS=INIT,ENV,NET,GRAPH to see NCCL's reason",
                    class.map_or("not read", |c| c.as_str())
                ),
                fix: "check the job's NCCL environment (unset NCCL_NET_GDR_LEVEL, keep NCCL_DMABUF_ENABLE at its default) and, in containers, that nvidia-peermem or dma-buf is reachable from the job".into(),
                severity: Severity::Critical,
            }),
            None => out.push(Cause {
                text: "NCCL logged no reason and this host's GPUDirect state was not read (topology source)".into(),
                fix: "run the job with NCCL_DEBUG_SUBSYS=INIT,ENV,NET,GRAPH to see NCCL's reason".into(),
                severity: Severity::Critical,
            }),
        }
    }
    out
}

pub fn gdr_not_used(s: &Snapshot) -> Vec<Finding> {
    let Some(n) = s.nccl.as_ref() else {
        return vec![];
    };
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
    let gdr = s.topology.as_ref().map(gdr_per_gpu).unwrap_or_default();
    let mut out = Vec::new();
    for ((device, port), (with, without)) in nics {
        if with > 0 || without == 0 {
            continue;
        }
        let members: Vec<&str> = device.split('+').collect();
        let near: Vec<&GpuGdr> = gdr
            .iter()
            .filter(|g| g.nics.iter().any(|x| members.contains(&x.as_str())))
            .collect();
        let causes = causes(s, &members, &near);
        let severity = if causes.iter().any(|c| c.severity == Severity::Critical) {
            Severity::Critical
        } else {
            Severity::Warning
        };
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
        out.push(Finding {
            rule: RuleId::NcclGdrNotUsed,
            severity,
            subject: Subject {
                device: Some(members.first().copied().unwrap_or(device).to_string()),
                port: Some(u32::from(port)),
                netdev,
                gpu: match gpus.as_slice() {
                    [g] => u32::try_from(*g).ok(),
                    _ => None,
                },
            },
            finding: format!(
                "NCCL jobs use {nic} without GPUDirect RDMA (data is staged through host memory): {}",
                causes[0].text
            ),
            evidence: format!(
                "{without} NET channel connection(s) on {device} port {port} in the last {}, none via .../GDRDMA; {}",
                window_text(n),
                causes.iter().map(|c| c.text.as_str()).collect::<Vec<_>>().join("; ")
            ),
            fix: causes.iter().map(|c| c.fix.as_str()).collect::<Vec<_>>().join("; "),
            verify: "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,NET,GRAPH all_reduce_perf -b 1G -e 1G 2>&1 | grep -E 'GPU Direct RDMA|DMABUF|GDR_LEVEL|via NET/'".into(),
        });
    }
    out
}
