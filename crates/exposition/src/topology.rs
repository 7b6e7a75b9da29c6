//! Families of the topology source: GPUs, GPU-NIC path classes (each GPU's
//! nearest NICs marked), PCIe link speed and width (current and maximum,
//! as labels of one info series per function) with the links trained
//! below their bound, ACS P2P request redirect where it is on, GPUDirect
//! RDMA readiness and NVML's availability. What is healthy and fixed for
//! the hardware's life (a link at its bound, a bridge without redirect, a
//! bridge's own link) is listed with the pcie_hops group only: the
//! topology collector's success says it was read.

use roce_topology::acs::AcsState;
use roce_topology::{FunctionRole, PciFunction, TopologySnapshot};

use super::groups::{Group, Groups};
use super::labels::{label_set, NoLabels};
use super::{Fam, Family, FamilySamples, MetricKind, Row, Samples};
use crate::snapshot::Snapshot;

label_set! {
    /// A GPU: its index, PCI address (also as NVML prints it) and identity.
    pub struct GpuInfoLabels { gpu, pci_address, pci_bus_id, name, uuid, numa_node }
}

label_set! {
    /// A GPU, an RDMA device, the path class between them and whether the
    /// device is (one of) the GPU's nearest.
    pub struct GpuPathLabels { gpu, device, path, nearest }
}

label_set! {
    /// An RDMA device and the GPUs it is nearest to.
    pub struct NicGpusLabels { device, gpus }
}

label_set! {
    /// A PCIe function's link: its trained speed and width and what the
    /// function supports.
    pub struct PcieLinkLabels { pci_address, device, speed, width, max_speed, max_width }
}

label_set! {
    /// A PCIe link trained below its bound in one aspect.
    pub struct DowntrainedLabels { pci_address, device, upstream, aspect }
}

label_set! {
    /// A bridge's ACS P2P request redirect state.
    pub struct AcsLabels { pci_address, state }
}

label_set! {
    /// A GPUDirect RDMA mechanism.
    pub struct MechanismLabels { mechanism }
}

label_set! {
    /// A prerequisite of a GPUDirect RDMA mechanism.
    pub struct PrerequisiteLabels { mechanism, prerequisite }
}

pub const GPU_INFO: Fam<GpuInfoLabels> = Fam::new(Row {
    base: "roce_gpu_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "GPU (value 1): gpu is its index in PCI bus order (as nvidia-smi numbers them); pci_bus_id is pci_address as NVML and dcgm-exporter write it (00000000:1B:00.0), to join with dcgm-exporter's series; name and uuid come from NVML and are empty without it; numa_node is empty when unknown.",
    source: "/sys/bus/pci/devices/* (vendor 0x10de/0x1002, class 0x0300/0x0302), numa_node; NVML",
});
pub const GPU_NIC_PATH: Fam<GpuPathLabels> = Fam::new(Row {
    base: "roce_gpu_nic_path_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "PCIe path between a GPU and an RDMA device (value 1), as nvidia-smi topo -m names it: PIX (one switch at most), PXB (several bridges), PHB (through a host bridge), NODE (across host bridges of one NUMA node), SYS (across NUMA nodes); nearest is true for the device(s) with the best path class from the GPU (several when they tie), else false. A SYS pair is listed when it is the GPU's nearest, or with the sys_paths group: without it a pair not listed is SYS.",
    source: "/sys/devices/pci*/... bridge chains, numa_node",
});
pub const NIC_NEAREST_GPUS: Fam<NicGpusLabels> = Fam::new(Row {
    base: "roce_nic_nearest_gpus_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The GPUs whose nearest RDMA device this is (value 1): their indices in PCI bus order, comma-separated in ascending order (2,3 for two GPUs behind one PCIe switch with one NIC; a GPU whose nearest NICs tie is listed with each). One series per RDMA device nearest to a GPU, none for the others: the GPU(s) beside a NIC for a PromQL join (group_left(gpus)), which roce_gpu_nic_path_info{nearest=\"true\"} cannot give when a NIC serves two GPUs.",
    source: "/sys/devices/pci*/... bridge chains, numa_node",
});
pub const LINK_INFO: Fam<PcieLinkLabels> = Fam::new(Row {
    base: "roce_pcie_link_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "PCIe link of a GPU or NIC function (value 1), and with the pcie_hops group of every bridge on its way to the root port: speed and width as trained, max_speed and max_width what the function supports, as the kernel writes them (speed per lane in GT/s: 2.5 GT/s, 5.0 GT/s, 8.0 GT/s, 16.0 GT/s, 32.0 GT/s, 64.0 GT/s; width in lanes), each empty when unread; absent when none of the four is readable. device names the RDMA device of a NIC function, empty otherwise. A link trained below what both of its ends support is roce_pcie_link_downtrained.",
    source: "/sys/bus/pci/devices/<pci_address>/{current,max}_link_{speed,width}",
});
pub const LINK_DOWNTRAINED: Fam<DowntrainedLabels> = Fam::new(Row {
    base: "roce_pcie_link_downtrained",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 for a link above pci_address that runs below what both ends support (aspect=speed or width: current below min(upstream max, pci_address max)); upstream is the port above (empty on a root bus). Listed only where a link trained below its bound; with the pcie_hops group every link of the GPUs' and NICs' paths is, 0 where it trained to its bound.",
    source: "current_link_{speed,width} of the lower end, max_link_{speed,width} of both ends",
});
pub const ACS_REDIRECT: Fam<AcsLabels> = Fam::new(Row {
    base: "roce_pcie_acs_request_redirect",
    kind: MetricKind::Gauge,
    unit: None,
    help: "ACS P2P Request Redirect of a bridge between a GPU and its nearest RDMA device, one series with value 1 where it is enabled (peer-to-peer traffic is sent up through the root complex) or unknown (config space beyond 64 bytes not readable: needs CAP_SYS_ADMIN), its state label saying which; with the pcie_hops group every such bridge is listed, disabled and absent (no ACS capability) too.",
    source: "/sys/bus/pci/devices/<pci_address>/config (extended capability 0x000d, control bit 0x0004)",
});
pub const GPUDIRECT_READY: Fam<MechanismLabels> = Fam::new(Row {
    base: "roce_gpudirect_rdma_ready",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when GPUDirect RDMA can work through the mechanism: nvidia_peermem (module loaded) or dmabuf (kernel >= 5.12, NVIDIA open kernel module or amdgpu, libibverbs with ibv_reg_dmabuf_mr). Only on hosts with a GPU.",
    source: "/proc/modules, /sys/module, /proc/sys/kernel/osrelease, /proc/driver/nvidia/version, libibverbs.so.1.<abi> file name",
});
pub const GPUDIRECT_AVAILABLE: Fam<NoLabels> = Fam::new(Row {
    base: "roce_gpudirect_rdma_available",
    kind: MetricKind::Gauge,
    unit: None,
    help:
        "1 when at least one GPUDirect RDMA mechanism is ready, else 0. Only on hosts with a GPU.",
    source: "roce_gpudirect_rdma_ready",
});
pub const GPUDIRECT_PREREQUISITE: Fam<PrerequisiteLabels> = Fam::new(Row {
    base: "roce_gpudirect_rdma_prerequisite",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when a prerequisite of a GPUDirect RDMA mechanism is met: nvidia_peermem/module_loaded, dmabuf/kernel (>= 5.12), dmabuf/gpu_driver (NVIDIA open kernel module or amdgpu), dmabuf/rdma_core (libibverbs ABI >= 1.12).",
    source: "/proc/modules, /proc/sys/kernel/osrelease, /proc/driver/nvidia/version, library directories",
});
pub const NVML_STATE: Fam<NoLabels> = Fam::new(Row {
    base: "roce_gpu_nvml_available",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when NVML answered in the last sample (GPU names and UUIDs), 0 when it is absent or failed. Only on hosts with an NVIDIA GPU.",
    source: "NVML (libnvidia-ml.so.1, loaded at run time)",
});

pub const FAMILIES: &[Family] = &[
    GPU_INFO.family,
    GPU_NIC_PATH.family,
    NIC_NEAREST_GPUS.family,
    LINK_INFO.family,
    LINK_DOWNTRAINED.family,
    ACS_REDIRECT.family,
    GPUDIRECT_READY.family,
    GPUDIRECT_AVAILABLE.family,
    GPUDIRECT_PREREQUISITE.family,
    NVML_STATE.family,
];

pub fn collect(snapshot: &Snapshot, groups: &Groups, out: &mut Vec<FamilySamples>) {
    let Some(topo) = &snapshot.topology else {
        return;
    };
    collect_topology(
        topo,
        groups.is_on(Group::PcieHops),
        groups.is_on(Group::SysPaths),
        out,
    );
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn collect_topology(
    topo: &TopologySnapshot,
    hops: bool,
    sys_paths: bool,
    out: &mut Vec<FamilySamples>,
) {
    let mut gpu_info = Samples::new(&GPU_INFO);
    for g in &topo.gpus {
        let labels = GpuInfoLabels {
            gpu: &g.index.to_string(),
            pci_address: &g.address.to_string(),
            pci_bus_id: &g.address.nvml_bus_id(),
            name: g.name.as_deref().unwrap_or(""),
            uuid: g.uuid.as_deref().unwrap_or(""),
            numa_node: &opt(g.numa_node),
        };
        gpu_info.push(labels, 1u64);
    }
    out.push(gpu_info.into());

    let mut paths = Samples::new(&GPU_NIC_PATH);
    let mut gpus_of: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for g in &topo.gpus {
        let nearest = topo.nearest_nics(g.index);
        for p in topo.paths.iter().filter(|p| p.gpu == g.index) {
            let is_nearest = nearest.iter().any(|n| std::ptr::eq(*n, p));
            if is_nearest {
                gpus_of.entry(p.nic.as_str()).or_default().push(p.gpu);
            }
            // A SYS pair is one GPUDirect RDMA does not use: on a two-socket
            // node half the matrix, listed with the sys_paths group only,
            // unless it is the best the GPU has.
            if p.class == roce_topology::PathClass::Sys && !sys_paths && !is_nearest {
                continue;
            }
            let labels = GpuPathLabels {
                gpu: &p.gpu.to_string(),
                device: &p.nic,
                path: p.class.as_str(),
                nearest: if is_nearest { "true" } else { "false" },
            };
            paths.push(labels, 1u64);
        }
    }
    out.push(paths.into());

    let mut nic_gpus = Samples::new(&NIC_NEAREST_GPUS);
    for (nic, mut gpus) in gpus_of {
        gpus.sort_unstable();
        gpus.dedup();
        let list = gpus
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let labels = NicGpusLabels {
            device: nic,
            gpus: &list,
        };
        nic_gpus.push(labels, 1u64);
    }
    out.push(nic_gpus.into());

    let mut links = Samples::new(&LINK_INFO);
    // The bridges' links change only with the hardware, and a downtrained
    // one shows in roce_pcie_link_downtrained: theirs only with
    // `pcie_hops`.
    for f in topo
        .functions
        .iter()
        .filter(|f| hops || f.role != FunctionRole::Bridge)
    {
        // Nothing read of the link (a virtual function, a tree without
        // the files): no series, as no value.
        if f.current_speed.is_none()
            && f.current_width.is_none()
            && f.max_speed.is_none()
            && f.max_width.is_none()
        {
            continue;
        }
        let labels = PcieLinkLabels {
            pci_address: &f.address.to_string(),
            device: rdma_name(f),
            speed: &speed_text(f.current_speed),
            width: &opt(f.current_width),
            max_speed: &speed_text(f.max_speed),
            max_width: &opt(f.max_width),
        };
        links.push(labels, 1u64);
    }
    out.push(links.into());

    let mut down = Samples::new(&LINK_DOWNTRAINED);
    for l in &topo.links {
        let addr = l.downstream.to_string();
        let upstream = opt(l.upstream);
        let device = l.rdma_device.as_deref().unwrap_or("");
        for (aspect, v) in [
            ("speed", l.speed_downtrained()),
            ("width", l.width_downtrained()),
        ] {
            // A link at its bound is listed with `pcie_hops` only.
            let Some(v) = v.filter(|down| *down || hops) else {
                continue;
            };
            let labels = DowntrainedLabels {
                pci_address: &addr,
                device,
                upstream: &upstream,
                aspect,
            };
            down.push(labels, v);
        }
    }
    out.push(down.into());

    let mut acs = Samples::new(&ACS_REDIRECT);
    // Redirect off, or no ACS to redirect with, is the healthy state of
    // every bridge: listed with `pcie_hops` only.
    let listed =
        |state: AcsState| hops || matches!(state, AcsState::RedirectEnabled | AcsState::Unknown);
    for b in topo.acs.iter().filter(|b| listed(b.state)) {
        let labels = AcsLabels {
            pci_address: &b.address.to_string(),
            state: b.state.as_str(),
        };
        acs.push(labels, 1u64);
    }
    out.push(acs.into());

    if let Some(gd) = &topo.gpudirect {
        let mut ready = Samples::new(&GPUDIRECT_READY);
        for (mechanism, on) in [
            ("nvidia_peermem", gd.peermem_ready()),
            ("dmabuf", gd.dmabuf_ready()),
        ] {
            ready.push(MechanismLabels { mechanism }, on);
        }
        out.push(ready.into());
        let mut available = Samples::new(&GPUDIRECT_AVAILABLE);
        available.push(NoLabels, gd.ready());
        out.push(available.into());
        let mut prereq = Samples::new(&GPUDIRECT_PREREQUISITE);
        for (mechanism, what, met) in gd.prerequisites() {
            let labels = PrerequisiteLabels {
                mechanism,
                prerequisite: what,
            };
            prereq.push(labels, met);
        }
        out.push(prereq.into());
    }

    use roce_topology::nvml::NvmlState;
    let nvml = match &topo.nvml {
        NvmlState::NotUsed => None,
        NvmlState::Present(_) => Some(true),
        NvmlState::Absent(_) | NvmlState::Failed(_) => Some(false),
    };
    if let Some(v) = nvml {
        let mut s = Samples::new(&NVML_STATE);
        s.push(NoLabels, v);
        out.push(s.into());
    }
}

/// A PCIe link speed per lane as the kernel writes it (`PCIE_SPEED2STR`:
/// "32.0 GT/s"), empty when unknown.
fn speed_text(speed: Option<roce_topology::LinkSpeed>) -> String {
    speed
        .map(|s| format!("{:.1} GT/s", f64::from(s.0) / 1000.0))
        .unwrap_or_default()
}

fn rdma_name(f: &PciFunction) -> &str {
    match f.role {
        FunctionRole::Nic => f.rdma_device.as_deref().unwrap_or(""),
        _ => "",
    }
}
