//! GPU-NIC topology from the sysfs PCI tree: the path class of every
//! GPU-NIC pair, NUMA nodes, PCIe link speed and width against their maximum,
//! ACS on the path, and whether GPUDirect RDMA can work. (Skeleton: the
//! readers land with issue 4.)

/// Everything read about the PCI topology in one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopologySnapshot {}
