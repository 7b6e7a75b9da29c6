//! The sources: each reads one part of the host and hands it back as its
//! [`Part`]. They know nothing of Prometheus. The sampler runs each on its
//! own worker thread under a deadline, times it, records its
//! [`SourceState`] and assembles the [`Snapshot`](crate::snapshot::Snapshot)
//! from the parts; a source that fails, panics or hangs never stops the
//! others.
//!
//! The contract is explicit: a source reads only what it is handed in
//! [`Input`] (the RDMA source's part, for the sources that say
//! [`Source::needs_rdma`]) and writes only its own [`Part`]. Nothing is
//! shared between sources while they run.

use std::sync::Arc;

pub use roce_host::HostError;

use crate::snapshot::{KernelRequests, SourceState};

pub mod lldp;
pub mod nccl;
pub mod netdev;
pub mod peer_probe;
/// Peer discovery and the peer-probe runtime (crates/fleet), under the
/// names the tests and the fuzz targets use.
pub use roce_fleet::{peer_dns, peer_endpoints, peer_http, peer_list, peer_rails};
pub mod phys;
pub mod probe;
pub mod rdma;
pub use roce_rdma::netlink as rdma_netlink;
pub mod topology;

/// What the sampler hands a source for one sample.
#[derive(Debug, Clone, Default)]
pub struct Input {
    /// The RDMA source's part: this sample's when it returned in time,
    /// else the last one it returned (`None` before any). Given only to
    /// sources that [`Source::needs_rdma`].
    pub rdma: Option<Arc<roce_rdma::RdmaSnapshot>>,
    /// The snapshot published by the previous sample (`None` before the
    /// first): for sources that judge by what other sources read last time
    /// (the probe takes the RoCE DSCP of each port from the netdev part).
    pub previous: Option<Arc<crate::snapshot::Snapshot>>,
}

/// One source's part of a snapshot.
#[derive(Debug, Clone)]
pub enum Part {
    Rdma(roce_rdma::RdmaSnapshot),
    Netdev(roce_netdev::NetdevSnapshot),
    /// Boxed: by far the largest part.
    Topology(Box<roce_topology::TopologySnapshot>),
    Probes(roce_probe::ProbeResults),
    /// The probes between hosts (boxed: per-port statistics).
    PeerProbes(Box<peer_probe::PeerProbePart>),
    /// What NCCL jobs used, from their logs and Inspector output.
    Nccl(Box<nccl::NcclSnapshot>),
    Phys(roce_netdev::phys::PhysSnapshot),
    /// LLDP neighbours of the RDMA netdevs (boxed: per-port TLVs).
    Lldp(Box<lldp::LldpSnapshot>),
}

/// What one call of [`Source::sample`] returns.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// Whether the source as a whole worked.
    pub state: SourceState,
    /// What it read; `None` when it had nothing to hand over.
    pub part: Option<Part>,
}

impl Sampled {
    pub fn new(state: SourceState, part: Part) -> Self {
        Sampled {
            state,
            part: Some(part),
        }
    }

    /// A state and no part (disabled, or nothing read).
    pub fn bare(state: SourceState) -> Self {
        Sampled { state, part: None }
    }
}

/// One part of the host, read once per sample. Runs on a thread of its own:
/// a call may block (a firmware read that stalls), the sampler then reports
/// it timed out and does not call it again until the call has returned.
pub trait Source: Send {
    /// The `collector` label value.
    fn name(&self) -> &'static str;

    /// Whether this source reads the RDMA source's part ([`Input::rdma`]):
    /// such sources run after the RDMA source has returned or missed its
    /// deadline.
    fn needs_rdma(&self) -> bool {
        false
    }

    /// Reads the host. Problems that did not stop it (a file, a request)
    /// go into `errors`; the returned state says whether the source as a
    /// whole worked.
    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled;

    /// What the last sample asked of the kernel; `None` for sources that
    /// do not count it.
    fn kernel_requests(&self) -> Option<KernelRequests> {
        None
    }
}

/// Every source, in the order they are listed (the RDMA source first: the
/// others read which netdevs and devices it found).
pub fn all(config: &crate::config::Config, paths: &crate::host::HostPaths) -> Vec<Box<dyn Source>> {
    vec![
        Box::new(rdma::RdmaSource::new(config, paths)),
        Box::new(netdev::NetdevSource::new(config, paths)),
        Box::new(topology::TopologySource::new(config, paths)),
        Box::new(probe::ProbeSource::new(config, paths)),
        Box::new(peer_probe::PeerProbeSource::new(config, paths)),
        Box::new(nccl::NcclSource::new(config)),
        Box::new(phys::PhysSource::new(config, paths)),
        Box::new(lldp::LldpSource::new(config, paths)),
    ]
}
