//! The RDMA source: devices, ports, counters and GIDs from sysfs, with the
//! hardware counters from RDMA netlink when the kernel answers it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use roce_host::stall::{StallWatch, WatchedFs};
use roce_host::{StdFs, SysFs};
use roce_rdma::{DeviceFilter, RdmaReader, SysfsOnly};

use super::{HostError, Input, Part, Respawn, Sampled, Source};
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::{KernelRequests, SourceState};
use roce_rdma::netlink::{KernelNldev, NetlinkHwCounters, Nldev};

/// Makes the file layer a reader reads through (the real one, or a test's
/// that injects faults).
pub type FsMaker = Arc<dyn Fn() -> Box<dyn SysFs> + Send + Sync>;

/// What an RDMA source is made of, to make its siblings alike.
struct Recipe {
    sysfs: PathBuf,
    filter: DeviceFilter,
    /// The netlink deadline, when hardware counters are asked of netlink.
    netlink: Option<Duration>,
    fs: FsMaker,
}

/// `N`: how RDMA netlink is asked (the running kernel; tests pass a kernel
/// that misbehaves).
pub struct RdmaSource<N: Nldev = KernelNldev> {
    reader: RdmaReader,
    /// `None`: sysfs `hw_counters/` only (`sources.rdma_netlink` off, or
    /// the paths are not the running kernel's).
    netlink: Option<NetlinkHwCounters<N>>,
    /// The per-item watch over the reader's file calls, and how siblings
    /// are made (`None` for a source made of given parts).
    stall: Option<(Arc<StallWatch>, Arc<Recipe>)>,
}

impl<N: Nldev> RdmaSource<N> {
    /// A source over a reader and netlink made by the caller (a reader over
    /// an injected file layer, a scripted kernel), for tests of how the
    /// whole pipeline takes host faults. Its file calls have no per-item
    /// deadline.
    pub fn with_parts(reader: RdmaReader, netlink: Option<NetlinkHwCounters<N>>) -> Self {
        RdmaSource {
            reader,
            netlink,
            stall: None,
        }
    }

    /// Netlink requests made during the last sample (0 when netlink is
    /// off): one per port once the device list is cached.
    pub fn netlink_requests(&self) -> u64 {
        self.netlink.as_ref().map_or(0, |n| n.requests)
    }
}

impl RdmaSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        Self::over(config, paths, Arc::new(|| Box::new(StdFs)))
    }

    /// [`RdmaSource::new`] reading through the file layers `fs` makes (one
    /// per sibling), each watched per item.
    pub fn over(config: &Config, paths: &HostPaths, fs: FsMaker) -> Self {
        let recipe = Recipe {
            sysfs: paths.sysfs.clone(),
            filter: DeviceFilter {
                include: config.devices.include.clone(),
                exclude: config.devices.exclude.clone(),
            },
            netlink: config
                .sources
                .rdma_netlink
                .enabled(paths.is_live())
                .then_some(config.sources.netlink_timeout),
            fs,
        };
        Self::from_recipe(Arc::new(recipe), StallWatch::new())
    }

    fn from_recipe(recipe: Arc<Recipe>, watch: Arc<StallWatch>) -> Self {
        let fs = WatchedFs::new((recipe.fs)(), watch.clone());
        RdmaSource {
            reader: RdmaReader::with_fs(recipe.sysfs.clone(), recipe.filter.clone(), Box::new(fs)),
            netlink: recipe.netlink.map(NetlinkHwCounters::new),
            stall: Some((watch, recipe)),
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

    fn stall_watch(&self) -> Option<Arc<StallWatch>> {
        self.stall.as_ref().map(|(w, _)| w.clone())
    }

    fn respawner(&self) -> Option<Respawn> {
        let (watch, recipe) = self.stall.clone()?;
        Some(Box::new(move || {
            Box::new(RdmaSource::from_recipe(recipe.clone(), watch.clone()))
        }))
    }

    fn kernel_requests(&self) -> Option<KernelRequests> {
        Some(KernelRequests {
            file_reads: self.reader.reads_last_sample() as u64,
            netlink: self.netlink_requests(),
            ioctls: 0,
        })
    }
}
