//! Rules on the GPU-NIC PCIe topology: a GPU whose nearest NIC is far
//! (NODE, SYS), GPUDirect RDMA unavailable on the host or not used for one
//! GPU (its nearest NIC beyond NCCL's default GDR level), ACS redirect on
//! the way between a GPU and its NIC, and PCIe links trained below what
//! both ends support. All silent without a GPU or without the topology
//! source.

use roce_topology::{AcsState, FunctionRole, Link, LinkSpeed, PathClass, TopologySnapshot};

use super::{Context, Finding, Rule, RuleId, Severity, Subject};

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::GpuNicPathFar,
        checks: "every GPU has an RDMA NIC within PHB (not NODE or SYS)",
        evaluate: gpu_nic_path_far,
    },
    Rule {
        id: RuleId::GpudirectUnavailable,
        checks: "with GPUs and RDMA NICs, nvidia-peermem or dma-buf is usable",
        evaluate: gpudirect_unavailable,
    },
    Rule {
        id: RuleId::GpudirectNotUsed,
        checks: "every GPU's nearest RDMA NIC is within NCCL's default GPUDirect RDMA level, PXB (PHB here; NODE and SYS are gpu_nic_path_far)",
        evaluate: gpudirect_not_used,
    },
    Rule {
        id: RuleId::AcsOnGpuNicPath,
        checks: "no ACS P2P request redirect on a bridge between a GPU and its nearest NIC",
        evaluate: acs_on_gpu_nic_path,
    },
    Rule {
        id: RuleId::PcieDowntrained,
        checks: "PCIe links of GPUs and NICs run at the speed and width both ends support; a NIC's link trained below them is critical where it can no longer carry the NIC's line rate",
        evaluate: pcie_downtrained,
    },
];

fn topology<'a>(ctx: &'a Context) -> Option<&'a TopologySnapshot> {
    ctx.latest()?.topology.as_ref()
}

fn gpu_subject(gpu: usize, nic: Option<&str>) -> Subject {
    Subject {
        device: nic.map(Into::into),
        gpu: u32::try_from(gpu).ok(),
        ..Subject::default()
    }
}

fn gpu_nic_path_far(ctx: &Context) -> Vec<Finding> {
    let Some(t) = topology(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for gpu in &t.gpus {
        let nearest = t.nearest_nics(gpu.index);
        let Some(first) = nearest.first() else {
            continue;
        };
        // NCCL uses GPUDirect RDMA only up to PXB by default (netGdrLevel =
        // PATH_PXB in ncclTopoCheckGdr, src/graph/paths.cc): beyond, data
        // is staged in host memory. SYS also crosses the CPU interconnect
        // on every transfer.
        let (severity, why) = match first.class {
            PathClass::Node => (
                Severity::Warning,
                "traffic crosses host bridges inside the CPU, and NCCL does not use GPUDirect RDMA beyond PXB by default",
            ),
            PathClass::Sys => (
                Severity::Critical,
                "every transfer crosses the CPU interconnect (UPI/xGMI) to the other socket, and NCCL does not use GPUDirect RDMA beyond PXB by default",
            ),
            _ => continue,
        };
        let nics = nearest
            .iter()
            .map(|p| p.nic.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let subject = gpu_subject(gpu.index, Some(&first.nic));
        let nic_address = t
            .nics
            .iter()
            .find(|n| n.name == first.nic)
            .map(|n| format!(" ({})", n.address))
            .unwrap_or_default();
        out.push(Finding {
            rule: RuleId::GpuNicPathFar,
            severity,
            finding: format!(
                "GPU {}'s nearest RDMA NIC ({nics}) is {} away: {why}",
                gpu.index,
                first.class.as_str()
            ),
            evidence: format!(
                "GPU {} ({}) -> {}{nic_address}: {}; expected PIX or PXB (a shared PCIe switch), PHB at worst",
                gpu.index,
                gpu.address,
                first.nic,
                first.class.as_str()
            ),
            fix: "Put a NIC under the same PCIe switch as each GPU (or at least on its socket); where the hardware cannot change, pin each rank to its GPU's socket and nearest NIC (NCCL_IB_HCA), and only force GPUDirect RDMA at this distance (NCCL_NET_GDR_LEVEL) after measuring it".into(),
            verify: "nvidia-smi topo -m".into(),
            subject,
        });
    }
    out
}

fn gpudirect_unavailable(ctx: &Context) -> Vec<Finding> {
    let Some(t) = topology(ctx) else {
        return vec![];
    };
    let Some(g) = &t.gpudirect else { return vec![] };
    if t.gpus.is_empty() || t.nics.is_empty() || g.ready() {
        return vec![];
    }
    let kernel = match g.kernel {
        Some((a, b)) if g.kernel_supports_dmabuf() => format!("kernel {a}.{b} ok"),
        Some((a, b)) => format!("kernel {a}.{b} (needs >= 5.12)"),
        None => "kernel version unknown".into(),
    };
    use roce_topology::gpudirect::NvidiaModule;
    let driver = match (g.nvidia_module, g.amdgpu_loaded) {
        (_, true) => "amdgpu ok".to_string(),
        (NvidiaModule::Open, _) => "NVIDIA open kernel module ok".into(),
        (NvidiaModule::Proprietary, _) => {
            "proprietary NVIDIA kernel module (exports no dma-buf; needs the open module)".into()
        }
        (NvidiaModule::Absent, _) => {
            "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)".into()
        }
    };
    let verbs = match &g.libibverbs {
        Some(l) if g.rdma_core_supports_dmabuf() => format!("{} ok", l.file),
        Some(l) => format!(
            "{} (ABI 1.{}; needs >= 1.12, rdma-core >= 34)",
            l.file, l.abi_minor
        ),
        None => "no libibverbs.so.1.<abi>.<release>.0 found".into(),
    };
    vec![Finding {
        rule: RuleId::GpudirectUnavailable,
        severity: Severity::Critical,
        subject: Subject::default(),
        finding: "GPUDirect RDMA is unavailable: neither nvidia-peermem nor dma-buf is usable, so NCCL stages GPU data through host memory".into(),
        evidence: format!(
            "{} GPU(s), {} RDMA NIC(s); nvidia_peermem not loaded; dma-buf: {kernel}, {driver}, {verbs}; expected one mechanism ready",
            t.gpus.len(),
            t.nics.len()
        ),
        fix: "Load the peer-memory module shipped with the NVIDIA driver (modprobe nvidia-peermem, and list it in /etc/modules-load.d/), \
              or use dma-buf: kernel >= 5.12, the NVIDIA open kernel module and rdma-core >= 34"
            .into(),
        verify: "lsmod | grep -E 'nvidia_peermem|nv_peer_mem'; cat /proc/driver/nvidia/version; uname -r".into(),
    }]
}

/// NCCL's default `NCCL_NET_GDR_LEVEL`: GPUDirect RDMA is used only where
/// the GPU-NIC path is at most PXB. Current NCCL: `int netGdrLevel =
/// PATH_PXB` and "disabled if distance > netGdrLevel" in
/// `ncclTopoCheckGdr` (src/graph/paths.cc). Early NCCL 2.x
/// (src/transport/net.cc): `NCCL_PARAM(NetGdrLevel, "NET_GDR_LEVEL",
/// PATH_PHB)` with "disabled if distance >= netGdrLevel": the same default
/// (PIX and PXB only), but a set level was exclusive there, inclusive now.
/// Later versions refine special cases only: with PXN the intermediate
/// GPU's distance counts, and Grace (C2C) platforms are judged apart.
pub const NCCL_DEFAULT_GDR_LEVEL: PathClass = PathClass::Pxb;

/// GPUDirect RDMA for one GPU, as NCCL decides it by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuGdr {
    pub gpu: usize,
    /// Its nearest RDMA NICs (equally near), and how far they are.
    pub nics: Vec<String>,
    pub class: Option<PathClass>,
    /// peermem or dma-buf is usable (`None`: not read).
    pub drivers: Option<bool>,
}

impl GpuGdr {
    /// The path is within NCCL's default GDR level.
    pub fn path_ok(&self) -> bool {
        self.class.is_some_and(|c| c <= NCCL_DEFAULT_GDR_LEVEL)
    }

    /// NCCL uses GPUDirect RDMA for this GPU: drivers ready and path near.
    pub fn used(&self) -> bool {
        self.drivers == Some(true) && self.path_ok()
    }
}

/// The GPUDirect RDMA verdict of every GPU.
pub fn gdr_per_gpu(t: &TopologySnapshot) -> Vec<GpuGdr> {
    let drivers = t.gpudirect.as_ref().map(|g| g.ready());
    t.gpus
        .iter()
        .map(|gpu| {
            let nearest = t.nearest_nics(gpu.index);
            GpuGdr {
                gpu: gpu.index,
                nics: nearest.iter().map(|p| p.nic.clone()).collect(),
                class: nearest.first().map(|p| p.class),
                drivers,
            }
        })
        .collect()
}

fn gpudirect_not_used(ctx: &Context) -> Vec<Finding> {
    let Some(t) = topology(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for g in gdr_per_gpu(t) {
        // NODE and SYS are gpu_nic_path_far's (placement, with the same
        // consequence named): one finding per condition.
        if g.class != Some(PathClass::Phb) {
            continue;
        }
        let Some(first) = g.nics.first() else {
            continue;
        };
        let address = t
            .gpus
            .iter()
            .find(|x| x.index == g.gpu)
            .map(|x| x.address.to_string())
            .unwrap_or_default();
        let drivers = match g.drivers {
            Some(true) => "GPUDirect RDMA drivers ready",
            Some(false) => "GPUDirect RDMA drivers not ready either (gpudirect_unavailable)",
            None => "GPUDirect RDMA drivers not read",
        };
        out.push(Finding {
            rule: RuleId::GpudirectNotUsed,
            severity: Severity::Warning,
            finding: format!(
                "GPU {} runs without GPUDirect RDMA: its nearest RDMA NIC ({}) is PHB away (through the CPU's host bridge), beyond NCCL's default NCCL_NET_GDR_LEVEL PXB, so its network traffic is staged through host memory",
                g.gpu,
                g.nics.join(", ")
            ),
            evidence: format!(
                "GPU {} ({address}) -> {first}: PHB; NCCL uses GPUDirect RDMA up to PXB by default; {drivers}",
                g.gpu
            ),
            fix: "Put a NIC under the same PCIe switch as the GPU; where the hardware cannot change, measure with NCCL_NET_GDR_LEVEL=PHB (nccl-tests, NCCL_DEBUG=INFO shows \"GPU Direct RDMA Enabled\") and set it for the jobs only if it is faster on this CPU".into(),
            verify: "nvidia-smi topo -m; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET,GRAPH all_reduce_perf -g 1 2>&1 | grep 'GPU Direct RDMA'".into(),
            subject: gpu_subject(g.gpu, Some(first)),
        });
    }
    out
}

fn acs_on_gpu_nic_path(ctx: &Context) -> Vec<Finding> {
    let Some(t) = topology(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for gpu in &t.gpus {
        let mut bridges = Vec::new();
        let mut nic = None;
        for path in t.nearest_nics(gpu.index) {
            for b in &path.bridges {
                let enabled = t
                    .acs
                    .iter()
                    .any(|a| a.address == *b && a.state == AcsState::RedirectEnabled);
                if enabled && !bridges.contains(b) {
                    bridges.push(*b);
                    nic.get_or_insert(path.nic.as_str());
                }
            }
        }
        let Some(nic) = nic else { continue };
        let list = bridges.iter().map(ToString::to_string).collect::<Vec<_>>();
        let setpci = list
            .iter()
            .map(|b| format!("setpci -s {b} ECAP_ACS+0x6.w=0000"))
            .collect::<Vec<_>>()
            .join("; ");
        out.push(Finding {
            rule: RuleId::AcsOnGpuNicPath,
            severity: Severity::Critical,
            finding: format!(
                "ACS redirects peer-to-peer traffic between GPU {} and {nic} up to the root complex: GPUDirect RDMA loses bandwidth or hangs",
                gpu.index
            ),
            evidence: format!(
                "ACS P2P Request Redirect enabled on {} (between GPU {} {} and {nic}); expected disabled",
                list.join(", "),
                gpu.index,
                gpu.address
            ),
            fix: format!(
                "Turn ACS redirect off on bare metal: {setpci} (until reboot); for good, turn ACS off in the BIOS or boot with pci=disable_acs_redir={} (not on hosts that pass devices through to VMs, which need ACS for IOMMU isolation)",
                list.join(";")
            ),
            verify: list
                .iter()
                .map(|b| format!("lspci -vvv -s {b} | grep ACSCtl"))
                .collect::<Vec<_>>()
                .join("; ")
                + "  # ReqRedir- expected",
            subject: gpu_subject(gpu.index, Some(nic)),
        });
    }
    out
}

fn gts(s: LinkSpeed) -> String {
    format!("{:.1} GT/s", f64::from(s.0) / 1000.0)
}

fn opt_speed(s: Option<LinkSpeed>) -> String {
    s.map(gts).unwrap_or_else(|| "? GT/s".into())
}

fn opt_width(w: Option<u32>) -> String {
    w.map(|w| format!("x{w}")).unwrap_or_else(|| "x?".into())
}

/// Who a link serves: (subject, words).
fn link_owner(t: &TopologySnapshot, link: &Link) -> Option<(Subject, String)> {
    let f = t.function(&link.downstream)?;
    match f.role {
        FunctionRole::Nic => {
            let nic = f.rdma_device.as_deref().or(link.rdma_device.as_deref())?;
            Some((
                Subject {
                    device: Some(nic.into()),
                    ..Subject::default()
                },
                format!("{nic}'s PCIe link"),
            ))
        }
        FunctionRole::Gpu => {
            let gpu = f.gpu?;
            Some((gpu_subject(gpu, None), format!("GPU {gpu}'s PCIe link")))
        }
        FunctionRole::Bridge => {
            let below = || {
                t.functions
                    .iter()
                    .filter(|g| g.parents.contains(&link.downstream))
            };
            let gpu = below().find_map(|g| g.gpu);
            let nic = below().find_map(|g| g.rdma_device.clone());
            if gpu.is_none() && nic.is_none() {
                return None;
            }
            let serves = [gpu.map(|g| format!("GPU {g}")), nic.clone()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ");
            Some((
                Subject {
                    device: nic,
                    gpu: gpu.and_then(|g| u32::try_from(g).ok()),
                    ..Subject::default()
                },
                format!(
                    "The PCIe link to switch {} (above {serves})",
                    link.downstream
                ),
            ))
        }
    }
}

/// Data bits per second a PCIe link carries after line encoding: 8b/10b
/// up to 5 GT/s (Gen1, Gen2), 128b/130b at 8 to 32 GT/s (Gen3 to Gen5),
/// 242/256 FLIT at 64 GT/s (Gen6, PAM4).
pub fn pcie_data_bits(speed: LinkSpeed, width: u32) -> f64 {
    let encoding = match speed.0 {
        0..=5000 => 8.0 / 10.0,
        5001..=32000 => 128.0 / 130.0,
        _ => 242.0 / 256.0,
    };
    speed.transfers_per_second() * f64::from(width) * encoding
}

/// What TLP and DLLP overhead leaves of a link's data rate for payload
/// with the usual 256-byte maximum payload (about 85%).
pub const PCIE_PAYLOAD_SHARE: f64 = 0.85;

fn pcie_arithmetic(link: &Link) -> String {
    match (link.current_speed, link.current_width) {
        (Some(sp), Some(w)) => format!(
            "{} x{w} carries {:.0} Gb/s after line encoding, about {:.0} Gb/s of payload ({:.0}% TLP efficiency)",
            gts(sp),
            pcie_data_bits(sp, w) / 1e9,
            pcie_data_bits(sp, w) * PCIE_PAYLOAD_SHARE / 1e9,
            PCIE_PAYLOAD_SHARE * 100.0
        ),
        _ => "current speed or width unknown".into(),
    }
}

/// Whether the trained link can still carry the line rate of the NIC it
/// serves (its ports' summed rate), with the words for the finding; `None`
/// for a GPU's own link or without rates.
fn feeds_line_rate(ctx: &Context, link: &Link, nic: Option<&str>) -> Option<(bool, String)> {
    let s = ctx.latest()?;
    let nic = nic?;
    let line: u64 = crate::ports::ports(s)
        .filter(|(d, _)| d.name == nic)
        .filter_map(|(_, p)| p.rate_bytes_per_second)
        .sum();
    if line == 0 {
        return None;
    }
    let (sp, w) = (link.current_speed?, link.current_width?);
    let line_bits = line as f64 * 8.0;
    let payload = pcie_data_bits(sp, w) * PCIE_PAYLOAD_SHARE;
    let gbps = crate::ports::fmt_num(line_bits / 1e9);
    Some(if payload >= line_bits {
        (
            true,
            format!(
                "{} x{w} still carries {nic}'s {gbps} Gb/s line rate",
                gts(sp)
            ),
        )
    } else {
        (
            false,
            format!(
                "{} x{w} cannot feed {nic}'s {gbps} Gb/s line rate: about {:.0} Gb/s of payload, {:.0}% of it",
                gts(sp),
                payload / 1e9,
                payload / line_bits * 100.0
            ),
        )
    })
}

fn pcie_downtrained(ctx: &Context) -> Vec<Finding> {
    let Some(t) = topology(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for link in &t.links {
        let is_gpu = t
            .function(&link.downstream)
            .is_some_and(|f| f.role == FunctionRole::Gpu);
        // GPUs lower their link speed when idle to save power (nvidia-smi
        // shows "PCIe Generation Current" below "Max" at rest), so a GPU's
        // own link speed says nothing at rest; its width does.
        let speed = link.speed_downtrained() == Some(true) && !is_gpu;
        let width = link.width_downtrained() == Some(true);
        if !speed && !width {
            continue;
        }
        let Some((subject, what)) = link_owner(t, link) else {
            continue;
        };
        let mut below = Vec::new();
        if speed {
            below.push("speed");
        }
        if width {
            below.push("width");
        }
        let current = format!(
            "{} {}",
            opt_speed(link.current_speed),
            opt_width(link.current_width)
        );
        let capable = format!(
            "{} {}",
            opt_speed(link.capable_speed),
            opt_width(link.capable_width)
        );
        let feeds = feeds_line_rate(ctx, link, subject.device.as_deref());
        let (severity, verdict) = match &feeds {
            Some((false, text)) => (Severity::Critical, format!("; {text}")),
            Some((true, text)) => (Severity::Warning, format!("; {text}")),
            None => (Severity::Warning, String::new()),
        };
        out.push(Finding {
            rule: RuleId::PcieDowntrained,
            severity,
            finding: format!("{what} runs at {current}, below the {capable} both ends support ({}){verdict}", below.join(" and ")),
            evidence: format!(
                "{}: current {current}; capable {capable} (the lower of both ends' max_link_speed/max_link_width){}",
                link.downstream,
                feeds.as_ref().map_or(String::new(), |(_, _)| format!("; {}", pcie_arithmetic(link)))
            ),
            fix: "Reseat the card and check the slot, riser or retimer; check the BIOS PCIe settings (a forced lower generation, bifurcation). \
                  A link that trains down after a reset often has a signal-integrity fault"
                .into(),
            verify: format!("lspci -vvv -s {} | grep -E 'LnkCap|LnkSta'", link.downstream),
            subject,
        });
    }
    out
}
