//! The sources: each reads one part of the host into its field of the
//! [`Snapshot`]. They know nothing of Prometheus. The sampler runs them in
//! order, times them and records their [`SourceState`]; a source that fails
//! never stops the others.

use crate::snapshot::{KernelRequests, Snapshot, SourceState};

pub mod netdev;
pub mod probe;
pub mod rdma;
pub mod rdma_netlink;
pub mod topology;

/// One part of the host, read once per sample.
pub trait Source: Send {
    /// The `collector` label value.
    fn name(&self) -> &'static str;

    /// Reads the host into `snapshot` (its own field only; it may read what
    /// earlier sources wrote). Single-file problems go into `errors`; the
    /// returned state says whether the source as a whole worked.
    fn sample(&mut self, snapshot: &mut Snapshot, errors: &mut Vec<String>) -> SourceState;

    /// What the last sample asked of the kernel; `None` for sources that
    /// do not count it.
    fn kernel_requests(&self) -> Option<KernelRequests> {
        None
    }
}

/// Every source, in the order they run (later ones may read what earlier
/// ones wrote: the netdev source reads which netdevs back RDMA ports).
pub fn all(config: &crate::config::Config, paths: &crate::host::HostPaths) -> Vec<Box<dyn Source>> {
    vec![
        Box::new(rdma::RdmaSource::new(config, paths)),
        Box::new(netdev::NetdevSource::new(config, paths)),
        Box::new(topology::TopologySource::new(config, paths)),
        Box::new(probe::ProbeSource::new(config, paths)),
    ]
}
