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

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::acs::{acs_state, port_type, AcsState, PortType};
use roce_host::errno::is_absent;
use roce_host::{Io, ReadBuf, StdFs, SysFs};

use crate::attr::{Fresh, KeptAttr};
use crate::gpudirect::{Evidence, GpuDirect};
use crate::nvml::{GpuLibrary, NvmlError, NvmlState};
use crate::path::{classify, Placement};
use crate::pci::{self, PciAddress, SpeedText};
use crate::types::*;

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

/// Reads the topology of one host.
pub struct TopologyReader {
    sysfs: PathBuf,
    procfs: PathBuf,
    library_dirs: Vec<PathBuf>,
    nvml: Box<dyn GpuLibrary>,
    /// Port type per bridge: fixed for the life of the device, so config
    /// space is read for it once, not per sample.
    port_types: HashMap<PciAddress, Option<PortType>>,
    files: Box<dyn SysFs>,
    /// Where the kept attributes are read to.
    buf: ReadBuf,
    rescan: Duration,
    cache: Option<Cache>,
    rebuilds: u64,
}

/// The last walk and what a sample re-reads of it.
struct Cache {
    /// The RDMA devices it was built for.
    nics: Vec<NicRef>,
    built: Instant,
    snap: TopologySnapshot,
    /// The walk's errors except those of the re-read files: they stay true
    /// until the next walk, so every sample repeats them (as each walk
    /// did before the cache).
    static_errors: Vec<ReadError>,
    kept: Vec<KeptLink>,
    /// For each of `snap.links`, its lower end's index in `snap.functions`.
    link_functions: Vec<Option<usize>>,
}

/// The run-time link attributes of one function.
struct KeptLink {
    function: usize,
    speed: KeptAttr,
    width: KeptAttr,
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

/// Where a function sits, read from its sysfs path.
struct Located {
    dir: PathBuf,
    host_bridge: String,
    parents: Vec<PciAddress>,
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
            port_types: HashMap::new(),
            files: Box::new(StdFs),
            buf: ReadBuf::new(),
            rescan: DEFAULT_RESCAN,
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
                let mut io = unbudgeted(self.files.as_ref(), &mut self.buf);
                if let Some(snap) = cache.refresh(&mut io) {
                    return snap;
                }
            }
        }
        self.rebuild(nics, now)
    }

    fn rebuild(&mut self, nics: &[NicRef], now: Instant) -> TopologySnapshot {
        self.cache = None;
        self.rebuilds += 1;
        let (snap, dirs) = self.walk(nics);
        let mut kept = Vec::new();
        for (function, f) in snap.functions.iter().enumerate() {
            let Some(dir) = dirs.get(&f.address) else {
                continue;
            };
            let mut io = unbudgeted(self.files.as_ref(), &mut self.buf);
            kept.push(KeptLink {
                function,
                speed: KeptAttr::open(&mut io, dir.join("current_link_speed")),
                width: KeptAttr::open(&mut io, dir.join("current_link_width")),
            });
        }
        let static_errors = snap
            .errors
            .iter()
            .filter(|e| {
                !kept
                    .iter()
                    .any(|k| k.speed.path() == e.path || k.width.path() == e.path)
            })
            .cloned()
            .collect();
        let link_functions = snap
            .links
            .iter()
            .map(|l| {
                snap.functions
                    .iter()
                    .position(|f| f.address == l.downstream)
            })
            .collect();
        self.cache = Some(Cache {
            nics: nics.to_vec(),
            built: now,
            snap: snap.clone(),
            static_errors,
            kept,
            link_functions,
        });
        snap
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

    /// Locates each GPU found (index order is address order) and adds it,
    /// and the bridges above it, to `functions` and `dirs`.
    fn place_gpus(
        &mut self,
        gpus: &[(PciAddress, GpuVendor, Option<u16>)],
        devices_root: Option<&Path>,
        functions: &mut BTreeMap<PciAddress, PciFunction>,
        dirs: &mut BTreeMap<PciAddress, PathBuf>,
        errors: &mut Vec<ReadError>,
    ) -> Vec<Gpu> {
        let mut placed = Vec::new();
        for (index, (address, vendor, device_id)) in gpus.iter().enumerate() {
            let Some(loc) = self.locate(*address, devices_root, errors) else {
                continue;
            };
            let f = self.function(*address, &loc, FunctionRole::Gpu, errors);
            placed.push(Gpu {
                index,
                address: *address,
                vendor: *vendor,
                device_id: *device_id,
                numa_node: f.numa_node,
                name: None,
                uuid: None,
            });
            self.add_parents(&loc, functions, dirs, errors);
            functions.insert(
                *address,
                PciFunction {
                    gpu: Some(index),
                    ..f
                },
            );
            dirs.insert(*address, loc.dir);
        }
        placed
    }

    /// Locates the PCI function of each RDMA device and adds it, and the
    /// bridges above it, to `functions` and `dirs`.
    fn place_nics(
        &mut self,
        nics: &[NicRef],
        devices_root: Option<&Path>,
        functions: &mut BTreeMap<PciAddress, PciFunction>,
        dirs: &mut BTreeMap<PciAddress, PathBuf>,
        errors: &mut Vec<ReadError>,
    ) -> Vec<Nic> {
        let mut placed = Vec::new();
        for nic in nics {
            let Some(address) = PciAddress::parse(&nic.pci_address) else {
                continue;
            };
            // An RDMA device whose PCI function is gone (hot unplug between
            // the two sources) is left out, not an error.
            let Some(loc) = self.locate(address, devices_root, errors) else {
                continue;
            };
            let f = self.function(address, &loc, FunctionRole::Nic, errors);
            placed.push(Nic {
                name: nic.name.clone(),
                address,
                numa_node: f.numa_node,
            });
            self.add_parents(&loc, functions, dirs, errors);
            let entry = functions.entry(address).or_insert(PciFunction {
                rdma_device: None,
                ..f
            });
            entry.role = FunctionRole::Nic;
            // Two RDMA devices on one function (rare): name the first.
            if entry.rdma_device.is_none() {
                entry.rdma_device = Some(nic.name.clone());
            }
            dirs.insert(address, loc.dir);
        }
        placed
    }

    /// Names the GPUs NVML knows (by PCI address), and says what NVML
    /// answered.
    fn name_gpus(&mut self, gpus: &mut [Gpu]) -> NvmlState {
        match self.nvml.gpus() {
            Ok(list) => {
                for g in gpus {
                    if let Some(n) = list.iter().find(|n| n.address == g.address) {
                        g.name = n.name.clone();
                        g.uuid = n.uuid.clone();
                    }
                }
                NvmlState::Present(list.len())
            }
            Err(NvmlError::Absent(why)) => NvmlState::Absent(why),
            Err(NvmlError::Query(why)) => NvmlState::Failed(why),
        }
    }

    /// The function's directory under `devices/`, its host bridge and the
    /// bridges above it.
    fn locate(
        &self,
        address: PciAddress,
        devices_root: Option<&Path>,
        errors: &mut Vec<ReadError>,
    ) -> Option<Located> {
        let link = self.sysfs.join("bus/pci/devices").join(address.to_string());
        let dir = match std::fs::canonicalize(&link) {
            Ok(d) => d,
            Err(e) if is_absent(&e) => return None,
            Err(e) => {
                errors.push(io_error(&link, &e));
                return None;
            }
        };
        let rel = devices_root.and_then(|root| dir.strip_prefix(root).ok());
        let Some(rel) = rel else {
            errors.push(ReadError {
                path: link,
                kind: ReadErrorKind::Parse(format!("{} is not under devices/", dir.display())),
            });
            return None;
        };
        let mut components = rel
            .components()
            .filter_map(|c| c.as_os_str().to_str().map(str::to_string));
        let host_bridge = components.next()?;
        // Every PCI address between the root bus and the function; other
        // directories on the way (a VMD domain's `pci10000:e0`) are not
        // bridges of this hierarchy.
        let mut parents: Vec<PciAddress> =
            components.filter_map(|c| PciAddress::parse(&c)).collect();
        if parents.pop() != Some(address) {
            errors.push(ReadError {
                path: link,
                kind: ReadErrorKind::Parse(format!("{} does not end in {address}", dir.display())),
            });
            return None;
        }
        Some(Located {
            dir,
            host_bridge,
            parents,
        })
    }

    fn function(
        &self,
        address: PciAddress,
        loc: &Located,
        role: FunctionRole,
        errors: &mut Vec<ReadError>,
    ) -> PciFunction {
        let d = &loc.dir;
        PciFunction {
            address,
            role,
            rdma_device: None,
            gpu: None,
            host_bridge: loc.host_bridge.clone(),
            parents: loc.parents.clone(),
            numa_node: read_parsed(&d.join("numa_node"), pci::parse_numa_node, errors).flatten(),
            port_type: None,
            current_speed: read_speed(&d.join("current_link_speed"), errors),
            max_speed: read_speed(&d.join("max_link_speed"), errors),
            current_width: read_parsed(
                &d.join("current_link_width"),
                pci::parse_link_width,
                errors,
            )
            .flatten(),
            max_width: read_parsed(&d.join("max_link_width"), pci::parse_link_width, errors)
                .flatten(),
        }
    }

    /// Adds the bridges above a located function (each at most once).
    fn add_parents(
        &mut self,
        loc: &Located,
        functions: &mut BTreeMap<PciAddress, PciFunction>,
        dirs: &mut BTreeMap<PciAddress, PathBuf>,
        errors: &mut Vec<ReadError>,
    ) {
        let mut dir = loc.dir.clone();
        // Walk up from the function: each parent directory is the bridge
        // above, deepest first.
        for (depth, bridge) in loc.parents.iter().enumerate().rev() {
            loop {
                if !dir.pop() {
                    return;
                }
                if dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(PciAddress::parse)
                    == Some(*bridge)
                {
                    break;
                }
            }
            if functions.contains_key(bridge) {
                continue;
            }
            let bloc = Located {
                dir: dir.clone(),
                host_bridge: loc.host_bridge.clone(),
                parents: loc.parents.get(..depth).unwrap_or_default().to_vec(),
            };
            let mut f = self.function(*bridge, &bloc, FunctionRole::Bridge, errors);
            f.port_type = match self.port_types.get(bridge) {
                Some(t) => *t,
                None => {
                    let t = read_port_type(&bloc.dir.join("config"), errors);
                    self.port_types.insert(*bridge, t);
                    t
                }
            };
            functions.insert(*bridge, f);
            dirs.insert(*bridge, bloc.dir);
        }
    }

    fn evidence(&self, errors: &mut Vec<ReadError>) -> Evidence {
        let peermem_sysfs = ["nvidia_peermem", "nv_peer_mem"]
            .iter()
            .any(|m| self.sysfs.join("module").join(m).is_dir());
        let mut library_files = Vec::new();
        for dir in &self.library_dirs {
            // Library directories that do not exist are normal (only one of
            // the multiarch paths does on a given host).
            if let Ok(entries) = std::fs::read_dir(dir) {
                library_files.extend(
                    entries
                        .flatten()
                        .filter_map(|e| e.file_name().to_str().map(str::to_string))
                        .filter(|n| n.starts_with("libibverbs.so.")),
                );
            }
        }
        Evidence {
            modules: read_text(&self.procfs.join("modules"), errors),
            peermem_sysfs,
            osrelease: read_text(&self.procfs.join("sys/kernel/osrelease"), errors),
            nvidia_version: read_text(&self.procfs.join("driver/nvidia/version"), errors),
            library_files,
        }
    }
}

impl Cache {
    /// The cached snapshot with the link attributes read now; `None` when
    /// one of them vanished (the tree changed: walk again).
    fn refresh(&mut self, io: &mut Io<'_>) -> Option<TopologySnapshot> {
        let mut errors = self.static_errors.clone();
        for k in &mut self.kept {
            let speed = match k.speed.read(io) {
                Fresh::Vanished => return None,
                fresh => fresh_parsed(
                    fresh,
                    io,
                    k.speed.path(),
                    pci::parse_link_speed,
                    &mut errors,
                ),
            };
            let width = match k.width.read(io) {
                Fresh::Vanished => return None,
                fresh => fresh_parsed(
                    fresh,
                    io,
                    k.width.path(),
                    pci::parse_link_width,
                    &mut errors,
                ),
            };
            if let Some(f) = self.snap.functions.get_mut(k.function) {
                f.current_speed = match speed {
                    Some(SpeedText::Speed(s)) => Some(s),
                    Some(SpeedText::Unknown) | None => None,
                };
                f.current_width = width.flatten();
            }
        }
        for (link, index) in self.snap.links.iter_mut().zip(&self.link_functions) {
            if let Some(f) = index.and_then(|i| self.snap.functions.get(i)) {
                link.current_speed = f.current_speed;
                link.current_width = f.current_width;
            }
        }
        let mut snap = self.snap.clone();
        snap.errors = errors;
        Some(snap)
    }
}

/// A re-read attribute's value, with the same errors as a first read.
fn fresh_parsed<T, E: std::fmt::Display>(
    fresh: Fresh,
    io: &Io<'_>,
    path: &Path,
    parse: impl Fn(&str) -> Result<T, E>,
    errors: &mut Vec<ReadError>,
) -> Option<T> {
    match fresh {
        Fresh::Len(n) => match parse(&io.buf.text(n)) {
            Ok(v) => Some(v),
            Err(msg) => {
                errors.push(ReadError::parse(path, msg.to_string()));
                None
            }
        },
        Fresh::Absent | Fresh::Vanished => None,
        Fresh::Error(e) => {
            errors.push(e);
            None
        }
    }
}

/// The kept link attributes: two per function, all kept (no budget).
fn unbudgeted<'a>(fs: &'a dyn SysFs, buf: &'a mut ReadBuf) -> Io<'a> {
    Io {
        fs,
        buf,
        open: 0,
        max_open: usize::MAX,
        reads: 0,
    }
}

/// The PCI addresses of the GPUs under `sysfs`/bus/pci/devices, as the
/// topology reader finds them (NVIDIA's and AMD's display and 3D
/// controllers), for a reader that needs them before the topology has been
/// read once. A bus that cannot be listed has no GPUs; absent is not an
/// error.
pub fn list_gpus(sysfs: &Path, errors: &mut Vec<ReadError>) -> Vec<PciAddress> {
    let bus = sysfs.join("bus/pci/devices");
    match std::fs::read_dir(&bus) {
        Ok(entries) => gpu_functions(entries, errors)
            .into_iter()
            .map(|(address, _, _)| address)
            .collect(),
        Err(e) if is_absent(&e) => Vec::new(),
        Err(e) => {
            errors.push(io_error(&bus, &e));
            Vec::new()
        }
    }
}

/// The GPUs among the PCI functions listed: vendor and class of every
/// function, sorted by address.
fn gpu_functions(
    entries: std::fs::ReadDir,
    errors: &mut Vec<ReadError>,
) -> Vec<(PciAddress, GpuVendor, Option<u16>)> {
    let mut gpus = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(address) = name.to_str().and_then(PciAddress::parse) else {
            continue;
        };
        let dir = entry.path();
        // Vendor first: most functions are not a GPU maker's, and their
        // class need not be read.
        let vendor = match read_hex(&dir.join("vendor"), errors) {
            Some(pci::VENDOR_NVIDIA) => GpuVendor::Nvidia,
            Some(pci::VENDOR_AMD) => GpuVendor::Amd,
            _ => continue,
        };
        if read_hex(&dir.join("class"), errors).is_some_and(pci::is_gpu_class) {
            let device_id =
                read_hex(&dir.join("device"), errors).and_then(|d| u16::try_from(d).ok());
            gpus.push((address, vendor, device_id));
        }
    }
    gpus.sort_by_key(|g| g.0);
    gpus
}

/// The path class and bridges between every GPU and every NIC.
fn gpu_nic_paths(
    gpus: &[Gpu],
    nics: &[Nic],
    functions: &BTreeMap<PciAddress, PciFunction>,
) -> Vec<GpuNicPath> {
    let mut paths = Vec::new();
    for gpu in gpus {
        let Some(gf) = functions.get(&gpu.address) else {
            continue;
        };
        for nic in nics {
            let Some(nf) = functions.get(&nic.address) else {
                continue;
            };
            let (gp, np) = (ports(gf, functions), ports(nf, functions));
            let (class, bridges) = classify(&placement(gf, &gp), &placement(nf, &np));
            paths.push(GpuNicPath {
                gpu: gpu.index,
                nic: nic.name.clone(),
                class,
                bridges,
            });
        }
    }
    paths
}

/// The PCIe links: each endpoint and each switch upstream port is the lower
/// end of one physical link, whose capability is the lesser of its two ends.
fn links(functions: &BTreeMap<PciAddress, PciFunction>) -> Vec<Link> {
    let mut links = Vec::new();
    for f in functions.values() {
        let lower_end = match (f.role, f.port_type) {
            (FunctionRole::Gpu | FunctionRole::Nic, _) => true,
            (_, Some(PortType::RootPort | PortType::SwitchDownstream)) => false,
            (_, Some(_)) => true,
            (_, None) => f.parents.len() % 2 == 1,
        };
        if !lower_end {
            continue;
        }
        let upstream = f.parents.last().and_then(|p| functions.get(p));
        let capable_speed = match upstream {
            Some(u) => min_opt(f.max_speed, u.max_speed),
            None => f.max_speed,
        };
        let capable_width = match upstream {
            Some(u) => min_opt(f.max_width, u.max_width),
            None => f.max_width,
        };
        links.push(Link {
            downstream: f.address,
            upstream: upstream.map(|u| u.address),
            rdma_device: f.rdma_device.clone(),
            current_speed: f.current_speed,
            current_width: f.current_width,
            capable_speed,
            capable_width,
        });
    }
    links
}

/// ACS on the bridges between each GPU and its nearest NIC(s), each bridge
/// read once.
fn bridge_acs(
    snap: &TopologySnapshot,
    dirs: &BTreeMap<PciAddress, PathBuf>,
    errors: &mut Vec<ReadError>,
) -> Vec<BridgeAcs> {
    let mut acs: BTreeMap<PciAddress, AcsState> = BTreeMap::new();
    for gpu in &snap.gpus {
        for path in snap.nearest_nics(gpu.index) {
            for bridge in &path.bridges {
                if acs.contains_key(bridge) {
                    continue;
                }
                let state = match dirs.get(bridge) {
                    Some(dir) => read_acs(&dir.join("config"), errors),
                    None => AcsState::Unknown,
                };
                acs.insert(*bridge, state);
            }
        }
    }
    acs.into_iter()
        .map(|(address, state)| BridgeAcs { address, state })
        .collect()
}

fn placement<'a>(f: &'a PciFunction, ports: &'a [Option<PortType>]) -> Placement<'a> {
    Placement {
        host_bridge: &f.host_bridge,
        parents: &f.parents,
        ports,
        numa_node: f.numa_node,
    }
}

/// Port types of a function's parents, in chain order.
fn ports(f: &PciFunction, functions: &BTreeMap<PciAddress, PciFunction>) -> Vec<Option<PortType>> {
    f.parents
        .iter()
        .map(|p| functions.get(p).and_then(|b| b.port_type))
        .collect()
}

/// The port type from the first 256 bytes of config space; unreadable or
/// short (64 bytes without root) is `None`, and only EACCES/ENOENT are
/// quiet.
fn read_port_type(path: &Path, errors: &mut Vec<ReadError>) -> Option<PortType> {
    let mut bytes = Vec::with_capacity(256);
    let result = std::fs::File::open(path).and_then(|f| f.take(256).read_to_end(&mut bytes));
    match result {
        Ok(_) => port_type(&bytes),
        Err(e) if is_absent(&e) || e.kind() == std::io::ErrorKind::PermissionDenied => None,
        Err(e) => {
            errors.push(io_error(path, &e));
            None
        }
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

fn io_error(path: &Path, e: &std::io::Error) -> ReadError {
    ReadError::io(path, e)
}

/// The file's text; `None` when absent (see [`roce_host::errno`]) or
/// unreadable (recorded).
fn read_text(path: &Path, errors: &mut Vec<ReadError>) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) if is_absent(&e) => None,
        Err(e) => {
            errors.push(io_error(path, &e));
            None
        }
    }
}

fn read_parsed<T, E: std::fmt::Display>(
    path: &Path,
    parse: impl Fn(&str) -> Result<T, E>,
    errors: &mut Vec<ReadError>,
) -> Option<T> {
    let text = read_text(path, errors)?;
    match parse(&text) {
        Ok(v) => Some(v),
        Err(msg) => {
            errors.push(ReadError::parse(path, msg.to_string()));
            None
        }
    }
}

fn read_hex(path: &Path, errors: &mut Vec<ReadError>) -> Option<u32> {
    read_parsed(path, pci::parse_hex, errors)
}

fn read_speed(path: &Path, errors: &mut Vec<ReadError>) -> Option<LinkSpeed> {
    match read_parsed(path, pci::parse_link_speed, errors)? {
        SpeedText::Speed(s) => Some(s),
        SpeedText::Unknown => None,
    }
}

/// Reads at most 4 KiB of config space. EACCES/EPERM (a locked-down
/// kernel) is "unknown", like the 64-byte read of an unprivileged reader.
fn read_acs(path: &Path, errors: &mut Vec<ReadError>) -> AcsState {
    let mut bytes = Vec::with_capacity(4096);
    let result = std::fs::File::open(path).and_then(|f| f.take(4096).read_to_end(&mut bytes));
    match result {
        Ok(_) => acs_state(&bytes),
        Err(e) if is_absent(&e) || e.kind() == std::io::ErrorKind::PermissionDenied => {
            AcsState::Unknown
        }
        Err(e) => {
            errors.push(io_error(path, &e));
            AcsState::Unknown
        }
    }
}
