//! The GPUs: GPUDirect RDMA readiness and verdicts, and the GPU-NIC
//! placement, ACS, PCIe links and PCIe AER counters of the topology.

use roce_model::snapshot::Snapshot;
use roce_rules::{self as rules, Area, Finding, RuleId};

use crate::{in_areas, item, rule_list, status_of, topology_with_gpus, Item, Status};

pub(crate) fn gpudirect(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    let section = "GPUDirect RDMA";
    let Some(t) = topology_with_gpus(s, section, "GPUDirect RDMA does not apply", out) else {
        return;
    };
    let Some(g) = &t.gpudirect else {
        out.push(item(
            section,
            Status::Unknown,
            "not judged: no GPUDirect evidence was read".into(),
        ));
        return;
    };
    out.push(if g.peermem_ready() {
        item(section, Status::Ok, "nvidia_peermem: loaded".into())
    } else {
        item(
            section,
            Status::Unknown,
            "nvidia_peermem: not loaded".into(),
        )
    });
    let kernel = g
        .kernel
        .map(|(a, b)| format!("kernel {a}.{b}"))
        .unwrap_or_else(|| "kernel unknown".into());
    use roce_topology::gpudirect::NvidiaModule;
    let driver = match (g.nvidia_module, g.amdgpu_loaded) {
        (_, true) => "amdgpu",
        (NvidiaModule::Open, _) => "NVIDIA open kernel module",
        (NvidiaModule::Proprietary, _) => "proprietary NVIDIA kernel module",
        (NvidiaModule::Absent, _) => "no NVIDIA driver",
    };
    let verbs = g
        .libibverbs
        .as_ref()
        .map(|l| l.file.clone())
        .unwrap_or_else(|| "no libibverbs".into());
    let facts = format!("{kernel}, {driver}, {verbs}");
    out.push(if g.dmabuf_ready() {
        item(section, Status::Ok, format!("dma-buf: ready ({facts})"))
    } else {
        let mut unmet = Vec::new();
        if !g.kernel_supports_dmabuf() {
            unmet.push("kernel >= 5.12");
        }
        if !g.driver_exports_dmabuf() {
            unmet.push("the NVIDIA open kernel module or amdgpu");
        }
        if !g.rdma_core_supports_dmabuf() {
            unmet.push("libibverbs ABI >= 1.12 (rdma-core >= 34)");
        }
        item(
            section,
            Status::Unknown,
            format!("dma-buf: not usable ({facts}; needs {})", unmet.join(", ")),
        )
    });
    let mechanisms: Vec<&str> = [
        ("nvidia_peermem", g.peermem_ready()),
        ("dma-buf", g.dmabuf_ready()),
    ]
    .into_iter()
    .filter_map(|(m, ok)| ok.then_some(m))
    .collect();
    let verdicts: Vec<&Finding> = in_areas(findings, &[Area::GpuDirect]).collect();
    // Host-wide verdicts (drivers) first, then one line per GPU: where its
    // nearest NIC is, and the findings about it.
    for f in verdicts.iter().filter(|f| f.subject.gpu.is_none()) {
        out.push(item(
            section,
            status_of(std::iter::once(*f)),
            format!("verdict: {}", f.finding),
        ));
    }
    if mechanisms.is_empty() {
        if verdicts.is_empty() {
            out.push(item(section, Status::Ok, "verdict: no finding".into()));
        }
        return;
    }
    for g in rules::topology::gdr_per_gpu(t) {
        let Some(class) = g.class else {
            out.push(item(
                section,
                Status::Unknown,
                format!("verdict GPU {}: no RDMA NIC with a PCI function", g.gpu),
            ));
            continue;
        };
        let to = format!("GPU {} -> {} {}", g.gpu, g.nics.join("/"), class.as_str());
        let mine: Vec<&Finding> = verdicts
            .iter()
            .copied()
            .filter(|f| f.subject.gpu.and_then(|x| usize::try_from(x).ok()) == Some(g.gpu))
            .collect();
        if mine.is_empty() {
            out.push(item(
                section,
                Status::Ok,
                format!(
                    "verdict {to}: no finding (usable: {})",
                    mechanisms.join(", ")
                ),
            ));
        }
        for f in mine {
            out.push(item(
                section,
                status_of(std::iter::once(f)),
                format!("verdict {to}: {}", f.finding),
            ));
        }
    }
}

pub(crate) fn topology(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    use roce_topology::AcsState;
    let section = "Topology";
    let Some(t) = topology_with_gpus(s, section, "no GPU-NIC placement to check", out) else {
        return;
    };
    for gpu in &t.gpus {
        let nearest = t.nearest_nics(gpu.index);
        let Some(first) = nearest.first() else {
            out.push(item(
                section,
                Status::Unknown,
                format!(
                    "GPU {} ({}): no RDMA NIC with a PCI function",
                    gpu.index, gpu.address
                ),
            ));
            continue;
        };
        let nics = nearest
            .iter()
            .map(|p| p.nic.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let gpu_id = u32::try_from(gpu.index).ok();
        let status = status_of(
            in_areas(findings, &[Area::GpuPlacement, Area::Acs])
                .filter(|f| f.subject.gpu == gpu_id),
        );
        out.push(item(
            section,
            status,
            format!(
                "GPU {} ({}) -> nearest NIC {nics}: {}",
                gpu.index,
                gpu.address,
                first.class.as_str()
            ),
        ));
    }
    if !t.acs.is_empty() {
        let count = |st: AcsState| t.acs.iter().filter(|a| a.state == st).count();
        let (on, off, none, unknown) = (
            count(AcsState::RedirectEnabled),
            count(AcsState::RedirectDisabled),
            count(AcsState::NoAcs),
            count(AcsState::Unknown),
        );
        let text = format!(
            "ACS P2P redirect on the {} bridge(s) between GPUs and their nearest NICs: {on} enabled, {off} disabled, {none} without ACS, {unknown} unknown{}",
            t.acs.len(),
            if unknown > 0 { " (config space beyond 64 bytes needs CAP_SYS_ADMIN)" } else { "" }
        );
        let status = match status_of(in_areas(findings, &[Area::Acs])) {
            Status::Ok if unknown > 0 => Status::Unknown,
            found => found,
        };
        out.push(item(section, status, text));
    }
    if !t.links.is_empty() {
        let downtrained = || {
            findings
                .iter()
                .filter(|f| f.rule == RuleId::PcieDowntrained)
        };
        out.push(item(
            section,
            status_of(downtrained()),
            format!(
                "PCIe links of GPUs and NICs: {} checked, {} below what both ends support",
                t.links.len(),
                downtrained().count()
            ),
        ));
    }
    aer(s, findings, section, out);
}

/// The AER counters read: of the NICs, the GPUs and the bridge ports on
/// their paths, and whether any grew over the window.
fn aer(s: &Snapshot, findings: &[Finding], section: &'static str, out: &mut Vec<Item>) {
    let Some(p) = &s.phys else { return };
    let nics = p.netdevs.iter().filter(|n| !n.aer.is_empty()).count();
    let gpus = p.gpus.iter().filter(|g| !g.aer.is_empty()).count();
    let bridges = p.bridges.iter().filter(|b| !b.aer.is_empty()).count();
    if nics + gpus + bridges == 0 {
        return;
    }
    let grew = || {
        findings
            .iter()
            .filter(|f| matches!(f.rule, RuleId::PcieAerErrors | RuleId::PcieBridgeAerErrors))
    };
    let verdict = if grew().next().is_none() {
        "none grew over the window".to_string()
    } else {
        format!("{} (below)", rule_list(grew()))
    };
    out.push(item(
        section,
        status_of(grew()),
        format!(
            "PCIe AER counters of {nics} NIC(s), {gpus} GPU(s) and {bridges} bridge port(s) on their paths: {verdict}"
        ),
    ));
}
