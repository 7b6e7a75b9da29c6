//! The snapshot types of the topology reader. Plain data, no I/O.

pub use crate::acs::{AcsState, PortType};
pub use crate::gpudirect::GpuDirect;
pub use crate::nvml::NvmlState;
pub use crate::path::PathClass;
pub use crate::pci::{LinkSpeed, PciAddress};

/// Everything read about the PCI topology in one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopologySnapshot {
    /// GPUs in PCI bus order; `Gpu::index` is the position in this list.
    pub gpus: Vec<Gpu>,
    /// RDMA devices with a PCI function, in the order the caller gave them.
    pub nics: Vec<Nic>,
    /// One entry per GPU × NIC pair, GPU-major.
    pub paths: Vec<GpuNicPath>,
    /// Every PCI function on the way from a GPU or NIC to its root port
    /// (the GPUs and NICs included), in address order, with its link.
    pub functions: Vec<PciFunction>,
    /// Every physical link on those ways, judged against what both ends
    /// support.
    pub links: Vec<Link>,
    /// ACS on every bridge between a GPU and its nearest NIC(s).
    pub acs: Vec<BridgeAcs>,
    /// GPUDirect RDMA readiness; `None` when there is no GPU.
    pub gpudirect: Option<GpuDirect>,
    /// What NVML said in this sample.
    pub nvml: NvmlState,
    /// Files that should have been readable and were not.
    pub errors: Vec<ReadError>,
}

impl TopologySnapshot {
    /// The path class of one pair.
    pub fn path(&self, gpu: usize, nic: &str) -> Option<PathClass> {
        self.paths
            .iter()
            .find(|p| p.gpu == gpu && p.nic == nic)
            .map(|p| p.class)
    }

    /// The NIC(s) of the best path class for `gpu` (several when they tie).
    pub fn nearest_nics(&self, gpu: usize) -> Vec<&GpuNicPath> {
        let best = self
            .paths
            .iter()
            .filter(|p| p.gpu == gpu)
            .map(|p| p.class)
            .min();
        self.paths
            .iter()
            .filter(|p| p.gpu == gpu && Some(p.class) == best)
            .collect()
    }

    /// The GPUs (by index, in PCI bus order) whose nearest NIC is the RDMA
    /// device `nic` (a GPU whose nearest NICs tie counts for each).
    pub fn gpus_nearest_to(&self, nic: &str) -> Vec<usize> {
        self.gpus
            .iter()
            .map(|g| g.index)
            .filter(|&g| self.nearest_nics(g).iter().any(|p| p.nic == nic))
            .collect()
    }

    /// The GPU × NIC matrix as `nvidia-smi topo -m` prints its NIC columns
    /// (GPU rows `GPU<i>`, NIC columns by RDMA device name), one row per line,
    /// cells separated by single spaces.
    pub fn matrix(&self) -> String {
        let mut out = String::from("-");
        for nic in &self.nics {
            out.push(' ');
            out.push_str(&nic.name);
        }
        out.push('\n');
        for gpu in &self.gpus {
            out.push_str(&format!("GPU{}", gpu.index));
            for nic in &self.nics {
                out.push(' ');
                match self.path(gpu.index, &nic.name) {
                    Some(c) => out.push_str(c.as_str()),
                    None => out.push('?'),
                }
            }
            out.push('\n');
        }
        out
    }

    pub fn function(&self, address: &PciAddress) -> Option<&PciFunction> {
        self.functions.iter().find(|f| &f.address == address)
    }
}

/// GPU vendor, from the PCI `vendor` ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuVendor {
    /// 0x10de
    Nvidia,
    /// 0x1002
    Amd,
}

/// One GPU: a PCI function of an NVIDIA or AMD vendor ID with class VGA
/// (0x0300) or 3D controller (0x0302).
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// Index in PCI bus order (what `nvidia-smi` shows).
    pub index: usize,
    pub address: PciAddress,
    pub vendor: GpuVendor,
    /// PCI device ID (`device` file), e.g. 0x2330.
    pub device_id: Option<u16>,
    /// `numa_node`; `None` when the kernel says -1 or the file is absent.
    pub numa_node: Option<u32>,
    /// From NVML when it is present.
    pub name: Option<String>,
    pub uuid: Option<String>,
}

/// One RDMA device with a PCI function.
#[derive(Debug, Clone, PartialEq)]
pub struct Nic {
    /// RDMA device name (`mlx5_0`).
    pub name: String,
    pub address: PciAddress,
    pub numa_node: Option<u32>,
}

/// A NIC as the caller knows it (from the RDMA source).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicRef {
    pub name: String,
    /// As the RDMA source read it (`0000:17:00.0`).
    pub pci_address: String,
}

/// The path between one GPU and one NIC.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuNicPath {
    pub gpu: usize,
    pub nic: String,
    pub class: PathClass,
    /// Bridges between the two (lowest common ancestor included), from the
    /// GPU's side to the NIC's; empty when the path crosses a host bridge.
    pub bridges: Vec<PciAddress>,
}

/// Kind of a PCI function in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FunctionRole {
    Gpu,
    Nic,
    Bridge,
}

/// One PCI function on a GPU's or NIC's way to the root, with its link as
/// the kernel reports it (`current_link_*`, `max_link_*`).
#[derive(Debug, Clone, PartialEq)]
pub struct PciFunction {
    pub address: PciAddress,
    pub role: FunctionRole,
    /// RDMA device name when the function is a NIC.
    pub rdma_device: Option<String>,
    /// GPU index when the function is a GPU.
    pub gpu: Option<usize>,
    /// `pci0000:00`-style host bridge (root bus) the function sits under.
    pub host_bridge: String,
    /// Bridges from the root port down to (not including) the function.
    pub parents: Vec<PciAddress>,
    pub numa_node: Option<u32>,
    /// PCI Express port type of a bridge, when its config space was
    /// readable (root) and has the PCI Express capability.
    pub port_type: Option<PortType>,
    pub current_speed: Option<LinkSpeed>,
    pub max_speed: Option<LinkSpeed>,
    pub current_width: Option<u32>,
    pub max_width: Option<u32>,
}

/// One physical PCIe link: from a downstream-facing port (root port or
/// switch downstream port) to the device below it.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// The device end (an endpoint or a switch upstream port).
    pub downstream: PciAddress,
    /// The port end; `None` for a function directly on a root bus.
    pub upstream: Option<PciAddress>,
    /// RDMA device name when the device end is a NIC.
    pub rdma_device: Option<String>,
    pub current_speed: Option<LinkSpeed>,
    pub current_width: Option<u32>,
    /// min(upstream max, downstream max): what the link should train to.
    pub capable_speed: Option<LinkSpeed>,
    pub capable_width: Option<u32>,
}

impl Link {
    /// Running below the speed both ends support; `None` when unknown.
    pub fn speed_downtrained(&self) -> Option<bool> {
        match (self.current_speed, self.capable_speed) {
            (Some(c), Some(m)) => Some(c < m),
            _ => None,
        }
    }

    /// Running with fewer lanes than both ends support; `None` when unknown.
    pub fn width_downtrained(&self) -> Option<bool> {
        match (self.current_width, self.capable_width) {
            (Some(c), Some(m)) if c > 0 && m > 0 => Some(c < m),
            _ => None,
        }
    }
}

/// ACS on one bridge between a GPU and its nearest NIC.
#[derive(Debug, Clone, PartialEq)]
pub struct BridgeAcs {
    pub address: PciAddress,
    pub state: AcsState,
}

/// A file that should have been readable and was not: the same type the RDMA
/// reader reports, so the exporter handles read errors of every sysfs source
/// alike.
pub use roce_host::{ReadError, ReadErrorKind};
