//! The reader: walks `<sysfs>/bus/pci/devices` for GPUs, places every GPU
//! and NIC in the tree through its `<sysfs>/devices/pci*/...` path, reads
//! the link attributes and config space on the way, and asks `<procfs>`,
//! the library directories and NVML about GPUDirect and GPU names.
//!
//! The walk (a rebuild) is cached: between rebuilds a sample re-reads only
//! `current_link_speed` and `current_link_width` of the cached functions,
//! through kept descriptors ([`crate::attr`]). A rebuild happens when the
//! set of RDMA devices changes, when a cached attribute vanishes
//! (hot-unplug), and every rescan interval ([`DEFAULT_RESCAN`]): a
//! hot-added GPU or NIC, a changed NUMA node, ACS setting, a module loaded
//! for GPUDirect (`nvidia_peermem`) or a driver started for NVML is seen
//! at most one rescan interval late.
//!
//! ENOENT is absence (a function without link attributes, no NVIDIA driver);
//! any other failure is a [`ReadError`] in the snapshot and the rest is
//! still read.
//!
//! Parts: `reader/walk.rs` finds the GPUs and places every function in
//! the tree; `reader/links.rs` derives the GPU-NIC paths, the links and
//! the ACS of the bridges between; `reader/evidence.rs` gathers the
//! GPUDirect evidence and NVML's names; `reader/cache.rs` keeps a walk
//! and re-reads its link attributes; `reader/files.rs` reads one file
//! with its failure recorded.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use roce_host::errno::is_absent;
use roce_host::{ReadBuf, StdFs, SysFs};

use crate::acs::PortType;
use crate::gpudirect::GpuDirect;
use crate::nvml::{GpuLibrary, NvmlGpu};
use crate::pci::PciAddress;
use crate::types::*;

mod cache;
mod evidence;
mod files;
mod links;
mod walk;

use cache::{unbudgeted, Cache};
use files::io_error;
use links::{bridge_acs, gpu_nic_paths, links};
use walk::gpu_functions;
pub use walk::list_gpus;

/// Where libibverbs is looked for on a live host (Debian/Ubuntu multiarch,
/// Fedora/RHEL lib64, plain lib).
pub const DEFAULT_LIBRARY_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib64",
];

/// How often the tree is walked again when nothing forced it earlier.
pub const DEFAULT_RESCAN: Duration = Duration::from_secs(300);

/// How often the links' training (current speed and width) is read again
/// between walks unless the reader is told otherwise: every read.
pub const DEFAULT_LINK_INTERVAL: Duration = Duration::ZERO;

/// What NVML said of a set of GPUs (their PCI addresses, in order).
struct NvmlAnswer {
    asked_for: Vec<PciAddress>,
    gpus: Vec<NvmlGpu>,
}

/// Reads the topology of one host.
pub struct TopologyReader {
    sysfs: PathBuf,
    procfs: PathBuf,
    library_dirs: Vec<PathBuf>,
    nvml: Box<dyn GpuLibrary>,
    /// NVML's last answer and the NVIDIA GPUs of the PCI tree it was for:
    /// NVML is asked again only when that set changes.
    named: Option<NvmlAnswer>,
    /// Port type per bridge: fixed for the life of the device, so config
    /// space is read for it once, not per sample.
    port_types: HashMap<PciAddress, Option<PortType>>,
    files: Box<dyn SysFs>,
    /// Where the kept attributes are read to.
    buf: ReadBuf,
    rescan: Duration,
    link_interval: Duration,
    cache: Option<Cache>,
    rebuilds: u64,
}

impl std::fmt::Debug for TopologyReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopologyReader")
            .field("sysfs", &self.sysfs)
            .field("procfs", &self.procfs)
            .field("library_dirs", &self.library_dirs)
            .finish()
    }
}

impl TopologyReader {
    /// `library_dirs`: where libibverbs is looked for; `nvml`: the GPU
    /// library ([`crate::nvml::Nvml`] on a live host, [`crate::nvml::NoNvml`]
    /// for a tree of another host).
    pub fn new(
        sysfs: PathBuf,
        procfs: PathBuf,
        library_dirs: Vec<PathBuf>,
        nvml: Box<dyn GpuLibrary>,
    ) -> TopologyReader {
        TopologyReader {
            sysfs,
            procfs,
            library_dirs,
            nvml,
            named: None,
            port_types: HashMap::new(),
            files: Box::new(StdFs),
            buf: ReadBuf::new(),
            rescan: DEFAULT_RESCAN,
            link_interval: DEFAULT_LINK_INTERVAL,
            cache: None,
            rebuilds: 0,
        }
    }

    /// The file layer for the per-sample reads (tests count them).
    pub fn with_files(mut self, files: Box<dyn SysFs>) -> TopologyReader {
        self.files = files;
        self.cache = None;
        self
    }

    /// How often the tree is walked again ([`DEFAULT_RESCAN`]).
    pub fn with_rescan_interval(mut self, rescan: Duration) -> TopologyReader {
        self.rescan = rescan;
        self
    }

    /// How often the links' training is read again between walks
    /// ([`DEFAULT_LINK_INTERVAL`]): a link trains at boot, after a reset or
    /// when it degrades, and its reads are the only per-read system calls
    /// of a steady tree.
    pub fn with_link_interval(mut self, interval: Duration) -> TopologyReader {
        self.link_interval = interval;
        self
    }

    /// How many times the tree was walked.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    /// Reads the topology now; `nics` are the RDMA devices and their PCI
    /// functions.
    pub fn read(&mut self, nics: &[NicRef]) -> TopologySnapshot {
        self.read_at(nics, Instant::now())
    }

    /// [`TopologyReader::read`] with the clock given, for tests.
    pub fn read_at(&mut self, nics: &[NicRef], now: Instant) -> TopologySnapshot {
        if let Some(cache) = &mut self.cache {
            let due = cache.nics.as_slice() != nics
                || now.saturating_duration_since(cache.built) >= self.rescan;
            if !due {
                if now.saturating_duration_since(cache.links_read) < self.link_interval {
                    return cache.snap.clone();
                }
                let mut io = unbudgeted(self.files.as_ref(), &mut self.buf);
                if let Some(snap) = cache.refresh(&mut io) {
                    cache.links_read = now;
                    return snap;
                }
            }
        }
        self.rebuild(nics, now)
    }

    /// Walks the tree; also gives the directory of every function found.
    fn walk(&mut self, nics: &[NicRef]) -> (TopologySnapshot, BTreeMap<PciAddress, PathBuf>) {
        let mut snap = TopologySnapshot::default();
        let mut errors = Vec::new();
        let bus = self.sysfs.join("bus/pci/devices");
        let entries = match std::fs::read_dir(&bus) {
            Ok(e) => e,
            Err(e) if is_absent(&e) => return (snap, BTreeMap::new()),
            Err(e) => {
                snap.errors.push(io_error(&bus, &e));
                return (snap, BTreeMap::new());
            }
        };
        let devices_root = std::fs::canonicalize(self.sysfs.join("devices")).ok();
        let devices_root = devices_root.as_deref();

        let gpus = gpu_functions(entries, &mut errors);
        let mut functions: BTreeMap<PciAddress, PciFunction> = BTreeMap::new();
        let mut dirs: BTreeMap<PciAddress, PathBuf> = BTreeMap::new();
        snap.gpus = self.place_gpus(&gpus, devices_root, &mut functions, &mut dirs, &mut errors);
        snap.nics = self.place_nics(nics, devices_root, &mut functions, &mut dirs, &mut errors);
        snap.paths = gpu_nic_paths(&snap.gpus, &snap.nics, &functions);
        snap.links = links(&functions);
        snap.acs = bridge_acs(&snap, &dirs, &mut errors);

        if !snap.gpus.is_empty() {
            snap.gpudirect = Some(GpuDirect::assess(&self.evidence(&mut errors)));
        }
        if self.nvml.in_use() && snap.gpus.iter().any(|g| g.vendor == GpuVendor::Nvidia) {
            snap.nvml = self.name_gpus(&mut snap.gpus);
        }
        snap.functions = functions.into_values().collect();
        snap.errors = errors;
        (snap, dirs)
    }
}
