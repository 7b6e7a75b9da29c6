//! The trees the repository keeps or builds: the readers' fixtures, the
//! demo node, the benchmark tree.

pub mod bench;
pub mod demo;
pub mod pci;
pub mod rdma;
