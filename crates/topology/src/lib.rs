//! GPU-NIC topology from the sysfs PCI tree: the path class of every
//! GPU-NIC pair (as `nvidia-smi topo -m` names them), NUMA nodes, PCIe link
//! speed and width against what both ends of each link support, ACS P2P
//! request redirect on the bridges between a GPU and its nearest NIC,
//! whether GPUDirect RDMA can work, and NVML's name and UUID of each GPU.
//!
//! The crate reads files only (and NVML through [`nvml::GpuLibrary`]); it
//! knows nothing of Prometheus. The RDMA devices come from the caller (the
//! RDMA source ran first and knows their PCI functions).

pub mod acs;
mod attr;
pub mod gpudirect;
pub mod nvml;
pub mod path;
pub mod pci;
mod reader;
mod types;

pub use reader::{list_gpus, TopologyReader, DEFAULT_LIBRARY_DIRS, DEFAULT_RESCAN};
pub use types::*;
