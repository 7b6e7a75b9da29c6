//! The RDMA source: devices, ports, counters and GIDs from sysfs, with the
//! hardware counters from RDMA netlink when the kernel answers it.

use roce_rdma::{DeviceFilter, RdmaReader, SysfsOnly};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::{KernelRequests, SourceState};
use roce_rdma::netlink::{KernelNldev, NetlinkHwCounters, Nldev};

/// `N`: how RDMA netlink is asked (the running kernel; tests pass a kernel
/// that misbehaves).
pub struct RdmaSource<N: Nldev = KernelNldev> {
    reader: RdmaReader,
    /// `None`: sysfs `hw_counters/` only (`sources.rdma_netlink` off, or
    /// the paths are not the running kernel's).
    netlink: Option<NetlinkHwCounters<N>>,
}

impl<N: Nldev> RdmaSource<N> {
    /// A source over a reader and netlink made by the caller (a reader over
    /// an injected file layer, a scripted kernel), for tests of how the
    /// whole pipeline takes host faults.
    pub fn with_parts(reader: RdmaReader, netlink: Option<NetlinkHwCounters<N>>) -> Self {
        RdmaSource { reader, netlink }
    }

    /// Netlink requests made during the last sample (0 when netlink is
    /// off): one per port once the device list is cached.
    pub fn netlink_requests(&self) -> u64 {
        self.netlink.as_ref().map_or(0, |n| n.requests)
    }
}

impl RdmaSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let filter = DeviceFilter {
            include: config.devices.include.clone(),
            exclude: config.devices.exclude.clone(),
        };
        let netlink = config
            .sources
            .rdma_netlink
            .enabled(paths.is_live())
            .then(|| NetlinkHwCounters::new(config.sources.netlink_timeout));
        RdmaSource {
            reader: RdmaReader::new(paths.sysfs.clone(), filter),
            netlink,
        }
    }
}

impl<N: Nldev> Source for RdmaSource<N> {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn sample(&mut self, _input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        let rdma = match &mut self.netlink {
            Some(netlink) => {
                netlink.begin_sample();
                let rdma = self.reader.read(netlink);
                errors.extend(netlink.take_errors());
                rdma
            }
            None => self.reader.read(&mut SysfsOnly),
        };
        errors.extend(rdma.errors.iter().cloned().map(HostError::File));
        let state = if rdma.devices.is_empty() {
            SourceState::Unavailable("no RDMA device in /sys/class/infiniband".into())
        } else {
            SourceState::Ok
        };
        Sampled::new(state, Part::Rdma(rdma))
    }

    fn kernel_requests(&self) -> Option<KernelRequests> {
        Some(KernelRequests {
            file_reads: self.reader.reads_last_sample() as u64,
            netlink: self.netlink_requests(),
            ioctls: 0,
        })
    }
}
