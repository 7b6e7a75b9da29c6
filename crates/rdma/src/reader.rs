//! The sysfs reader: walks `<sysfs>/class/infiniband`, keeps attribute files
//! open between samples and reads them with `pread`, and classifies every
//! failure as absent (the kernel does not provide the value here) or error
//! (it should be there and could not be read).
//!
//! Listings (ports, counter names, GID slot counts) are taken once per device
//! appearance and kept; the device list itself is re-read every sample, so a
//! device that vanishes (driver reload, hot-unplug) loses its handles and one
//! that (re)appears is scanned afresh. That listing goes through a kept
//! handle of `class/infiniband` (a seek and a `getdents64`:
//! [`crate::fs::KeptDir`]), reopened every
//! [`DEFAULT_STATIC_REFRESH_INTERVAL`], after a device vanished, and at once
//! when it fails or lists nothing (a removed folder lists empty). A kept
//! handle that fails with ENODEV/ENOENT/ESTALE is reopened once and the
//! device is rescanned on the next sample.
//!
//! # GID tables: a full scan now and then, the known slots every sample
//!
//! A port's GID table has 256 slots on mlx5 (1024 on rxe), nearly all empty,
//! and reading every `gids/N` each sample would be most of the reader's cost
//! (node_exporter's infiniband collector reads no GIDs at all). The kernel's
//! GID cache keeps tables compact (`drivers/infiniband/core/cache.c`):
//! `__ib_cache_gid_add` asks `find_gid` for a free slot, and `find_gid`
//! returns the *lowest* free slot (`is_gid_entry_free`) outside the slots
//! reserved for default GIDs (`gid_table_reserve_default` reserves the first
//! one per supported GID type; only default GIDs go there). `del_gid` frees a
//! slot in place, nothing moves; an entry still referenced stays
//! `GID_TABLE_ENTRY_PENDING_DEL` (not free) until its last user drops it,
//! while sysfs already shows it as zeros (`show_port_gid` in core/sysfs.c
//! prints the zero GID when `rdma_get_gid_attr` fails, and its attributes
//! fail with EINVAL). So a new GID lands in the lowest slot that looks empty,
//! or a few past it when some of those are reserved or pending deletion.
//!
//! Hence, per port, between full scans the reader reads only the slots that
//! were populated (or unreadable) when last read, plus the lowest
//! [`GID_EMPTY_PROBES`] slots that looked empty: 4 populated slots on an mlx5
//! RoCE port cost 4×3 + 4 = 16 reads instead of 256 + 4×2. It reads the whole
//! table on the port's first sample, every `gid_full_scan_interval`
//! ([`RdmaReader::set_gid_full_scan_interval`], default 60 s, measured on the
//! monotonic clock passed to [`RdmaReader::read_at`]), when the port's state
//! changed since the last sample (link flaps add and remove GIDs), and at once
//! in the same sample when a known slot reads differently (emptied, another
//! GID or type: the table is churning, entries may have landed anywhere). A
//! netdev rename changes only `gid_attrs/ndevs/N`, which is read for every
//! populated slot anyway. What a partial pass can miss is a GID added past
//! the probes (a slot beyond several pending deletions); the next full scan
//! finds it. InfiniBand ports differ only in where slots come from:
//! `config_non_roce_gid_cache` copies the HCA's own table index for index
//! (usually slot 0 alone), and `del_gid` frees a non-RoCE slot at once; the
//! same watch list and full scans cover them.
//!
//! # Attributes that do not change
//!
//! `fw_ver`, `board_id`, `hca_type`, `node_guid`, `node_type`, the PCI
//! function's NUMA node and each port's `link_layer` belong to the device as
//! registered: a firmware update, a port type change or a driver reload
//! unregisters the device and registers it again, which the reader sees as a
//! vanished device or as stale handles, and scans afresh. They are read at
//! the scan and every [`DEFAULT_STATIC_REFRESH_INTERVAL`] (a safety net),
//! not every sample; so is `lid` on Ethernet ports (RoCE has no LIDs). An
//! error on one of them has them read again next sample, so the error keeps
//! being reported.
//!
//! Handles of empty slots outside the probes are closed after each pass, so
//! an 8-port host's 2048 empty slots do not eat the open-file budget that the
//! counters read every sample need.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::net::Ipv6Addr;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fs::{KeptDir, StdFs, SysFile, SysFs};
use crate::parse::{self, CounterText};
use crate::types::{
    Counter, CounterNames, Device, Gid, GidType, HwCounterPath, LinkLayer, Port, PortState,
    RdmaSnapshot, ReadError, ReadErrorKind,
};

/// How often a port's whole GID table is read even when nothing hints at a
/// change.
pub const DEFAULT_GID_FULL_SCAN_INTERVAL: Duration = Duration::from_secs(60);

/// How often attributes that do not change while a device exists are read
/// again even when nothing hints at a change.
pub const DEFAULT_STATIC_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// Empty GID slots read every sample besides the populated ones, lowest
/// first: where the kernel puts the next GID. More than one because the
/// lowest empty-looking slots can be reserved for default GIDs (one per GID
/// type, two on RoCE) or pending deletion (see the module doc).
pub const GID_EMPTY_PROBES: usize = 4;

/// Which devices to read. Names or globs (`*`, `?`). A device that does not
/// pass is never opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFilter {
    /// Empty: every device.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl DeviceFilter {
    /// Whether the device named `name` is read.
    pub fn allows(&self, name: &str) -> bool {
        let included =
            self.include.is_empty() || self.include.iter().any(|p| parse::glob_match(p, name));
        included && !self.exclude.iter().any(|p| parse::glob_match(p, name))
    }
}

/// Hardware counters from somewhere other than sysfs (RDMA netlink). The
/// reader asks it first, per port, and reads `hw_counters/` only when it
/// answers `None`.
pub trait HwCounterSource {
    fn port_counters(&mut self, device: &str, port: u32) -> Option<Vec<Counter>>;
}

/// A [`HwCounterSource`] that never answers: sysfs only.
pub struct SysfsOnly;

impl HwCounterSource for SysfsOnly {
    fn port_counters(&mut self, _device: &str, _port: u32) -> Option<Vec<Counter>> {
        None
    }
}

/// Reads RDMA devices below a sysfs root, keeping file handles between
/// samples.
pub struct RdmaReader {
    sysfs: PathBuf,
    filter: DeviceFilter,
    fs: Box<dyn SysFs>,
    devices: BTreeMap<String, DeviceState>,
    max_open: usize,
    /// Handles held now: kept up to date as handles are opened and closed
    /// (summing them per sample would walk every GID slot of every port).
    open: usize,
    gid_full_scan_interval: Duration,
    static_refresh_interval: Duration,
    reads_last_sample: usize,
    /// Where attribute values are read to, reused by every sample.
    buf: ReadBuf,
    names: CounterNames,
    /// `class/infiniband`, listed every sample through a kept handle.
    class: PathBuf,
    class_dir: KeptDir,
    /// When `class_dir` was opened: it is reopened on the static cadence.
    class_opened: Option<Instant>,
    listed: Vec<OsString>,
}

impl std::fmt::Debug for RdmaReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaReader")
            .field("sysfs", &self.sysfs)
            .field("filter", &self.filter)
            .field("devices", &self.devices.keys().collect::<Vec<_>>())
            .field("open_files", &self.open_files())
            .field("max_open", &self.max_open)
            .field("gid_full_scan_interval", &self.gid_full_scan_interval)
            .field("static_refresh_interval", &self.static_refresh_interval)
            .field("reads_last_sample", &self.reads_last_sample)
            .finish()
    }
}

impl RdmaReader {
    /// `sysfs` is the sysfs mount (`/sys`), not `/sys/class/infiniband`.
    pub fn new(sysfs: PathBuf, filter: DeviceFilter) -> Self {
        Self::with_fs(sysfs, filter, Box::new(StdFs))
    }

    /// Like [`RdmaReader::new`] over another file layer (tests inject
    /// errnos through it).
    pub fn with_fs(sysfs: PathBuf, filter: DeviceFilter, fs: Box<dyn SysFs>) -> Self {
        RdmaReader {
            filter,
            fs,
            devices: BTreeMap::new(),
            max_open: crate::fs::default_max_open(),
            open: 0,
            gid_full_scan_interval: DEFAULT_GID_FULL_SCAN_INTERVAL,
            static_refresh_interval: DEFAULT_STATIC_REFRESH_INTERVAL,
            reads_last_sample: 0,
            buf: ReadBuf::new(),
            names: CounterNames::new(),
            class: sysfs.join("class/infiniband"),
            class_dir: KeptDir::default(),
            class_opened: None,
            listed: Vec::new(),
            sysfs,
        }
    }

    /// How often each port's whole GID table is read; in between, only its
    /// populated slots and the lowest few empty ones are (see the module
    /// doc). Zero reads every slot every sample. Default
    /// [`DEFAULT_GID_FULL_SCAN_INTERVAL`].
    pub fn set_gid_full_scan_interval(&mut self, interval: Duration) {
        self.gid_full_scan_interval = interval;
    }

    /// How often the attributes that do not change while a device exists
    /// (`fw_ver`, `board_id`, `hca_type`, `node_guid`, `node_type`, the
    /// NUMA node, a port's `link_layer`, and `lid` on Ethernet ports, where
    /// it is always 0) are read again; in between, the values read at the
    /// device's scan are reused (see the module doc). Zero reads them every
    /// sample. Default [`DEFAULT_STATIC_REFRESH_INTERVAL`].
    pub fn set_static_refresh_interval(&mut self, interval: Duration) {
        self.static_refresh_interval = interval;
    }

    /// Attribute reads (`pread` calls, including failed ones) the last sample
    /// made; listings and link lookups are not counted. For benchmarks.
    pub fn reads_last_sample(&self) -> usize {
        self.reads_last_sample
    }

    /// Caps the handles kept open between samples; files beyond it are
    /// opened, read and closed each sample. The default is half the soft
    /// `RLIMIT_NOFILE` (systemd's default soft limit is 1024; a full GID
    /// scan alone opens 256–1024 files per port, though only the watched
    /// slots' handles are kept after it).
    pub fn set_max_open_files(&mut self, max: usize) {
        self.max_open = max;
    }

    /// Number of files held open between samples.
    pub fn open_files(&self) -> usize {
        self.devices.values().map(DeviceState::open_files).sum()
    }

    /// Lists `class/infiniband` into `self.listed` through the kept handle,
    /// opened afresh on the static cadence, and at once again when the kept
    /// one fails or shows nothing (the folder it holds may be a removed one).
    fn list_class(&mut self, now: Instant) -> std::io::Result<()> {
        let due = self
            .class_opened
            .is_none_or(|at| now.saturating_duration_since(at) >= self.static_refresh_interval);
        if due {
            self.class_dir.forget();
        }
        let was_open = self.class_dir.is_open();
        if !was_open {
            self.class_opened = Some(now);
        }
        let listed = self
            .fs
            .list_kept(&self.class, &mut self.class_dir, &mut self.listed);
        if was_open && (listed.is_err() || self.listed.is_empty()) {
            self.class_dir.forget();
            self.class_opened = Some(now);
            return self
                .fs
                .list_kept(&self.class, &mut self.class_dir, &mut self.listed);
        }
        listed
    }

    /// Reads every device that passes the filter.
    pub fn read(&mut self, hw: &mut dyn HwCounterSource) -> RdmaSnapshot {
        self.read_at(hw, Instant::now())
    }

    /// [`RdmaReader::read`] with the monotonic time of the sample given:
    /// the GID full-scan interval is measured on it, so tests can step time
    /// without sleeping.
    pub fn read_at(&mut self, hw: &mut dyn HwCounterSource, now: Instant) -> RdmaSnapshot {
        self.reads_last_sample = 0;
        let mut snap = RdmaSnapshot::default();
        if let Err(e) = self.list_class(now) {
            if !is_absent(&e) {
                push_io(&mut snap.errors, &self.class, &e);
            }
            // No RDMA stack loaded: nothing to keep.
            self.devices.clear();
            self.open = 0;
            return snap;
        }
        let class = &self.class;
        let mut present: Vec<String> = self
            .listed
            .iter()
            .filter_map(|n| n.to_str())
            .filter(|n| self.filter.allows(n))
            .map(str::to_owned)
            .collect();
        present.sort();
        present.dedup();
        let mut released = 0;
        self.devices.retain(|name, state| {
            let keep = present.binary_search(name).is_ok();
            if !keep {
                released += state.open_files();
            }
            keep
        });

        let mut ctx = Ctx {
            fs: self.fs.as_ref(),
            sysfs: &self.sysfs,
            errors: &mut snap.errors,
            buf: &mut self.buf,
            names: &mut self.names,
            open: self.open.saturating_sub(released),
            max_open: self.max_open,
            now,
            gid_full_scan_interval: self.gid_full_scan_interval,
            static_refresh_interval: self.static_refresh_interval,
            reads: 0,
        };
        let mut vanished = false;
        for name in present {
            let state = match self.devices.get_mut(&name) {
                Some(state) => state,
                None => self
                    .devices
                    .entry(name.clone())
                    .or_insert_with(|| DeviceState::new(class.join(&name))),
            };
            match state.read(&name, &mut ctx, hw) {
                Some(device) => snap.devices.push(device),
                None => vanished = true,
            }
        }
        // A device that went away may be the first sign of a removed and
        // re-created class folder: list it afresh next time.
        if vanished || released > 0 {
            self.class_dir.forget();
        }
        self.reads_last_sample = ctx.reads;
        self.open = ctx.open;
        if released > 0 {
            self.names.prune();
        }
        debug_assert_eq!(self.open, self.open_files(), "open-file count drifted");
        snap
    }
}

/// What one sample needs besides the device's own state.
struct Ctx<'a> {
    fs: &'a dyn SysFs,
    sysfs: &'a Path,
    errors: &'a mut Vec<ReadError>,
    buf: &'a mut ReadBuf,
    names: &'a mut CounterNames,
    /// Handles held now, and the cap.
    open: usize,
    max_open: usize,
    /// When this sample is taken, and how often GID tables are read whole.
    now: Instant,
    gid_full_scan_interval: Duration,
    /// How often attributes that do not change are read again.
    static_refresh_interval: Duration,
    /// `pread` calls so far this sample.
    reads: usize,
}

/// One attribute file and, while the budget allows, its open handle.
struct Attr {
    path: PathBuf,
    file: Option<Box<dyn SysFile>>,
}

impl Attr {
    fn new(path: PathBuf) -> Self {
        Attr { path, file: None }
    }
}

/// Per-device state kept between samples.
struct DeviceState {
    dir: PathBuf,
    layout: Option<Layout>,
    /// A kept handle went stale or a listing failed: take the listings
    /// again next sample.
    rescan: bool,
}

/// What a device looked like when it was scanned, with its handles.
struct Layout {
    fw_ver: Attr,
    board_id: Attr,
    hca_type: Attr,
    node_guid: Attr,
    node_type: Attr,
    /// Software devices (rxe) name their netdev here.
    parent: Attr,
    /// The `parent` content the backing below was resolved for.
    parent_seen: Option<String>,
    backing: Backing,
    ports: Vec<PortLayout>,
    /// The attributes that do not change while the device exists, as last
    /// read, and when; `None` until read, and again when one of them failed
    /// (so that its error keeps being reported) or the backing changed.
    statics: Option<(Instant, DeviceStatics)>,
}

/// Device attributes read at the scan and every static refresh interval.
#[derive(Clone, Default)]
struct DeviceStatics {
    fw_version: Option<String>,
    board_id: Option<String>,
    hca_type: Option<String>,
    node_guid: Option<String>,
    node_type: Option<String>,
    numa_node: Option<u32>,
}

/// Resolved once per scan: a PCI device's driver and function do not change
/// while the RDMA device exists (unbinding removes it).
#[derive(Default)]
struct Backing {
    /// Whether the device has a `device` link (hardware).
    hardware: bool,
    driver: Option<String>,
    pci_address: Option<String>,
    numa: Option<Attr>,
}

struct PortLayout {
    number: u32,
    state: Attr,
    phys_state: Attr,
    rate: Attr,
    link_layer: Attr,
    lid: Attr,
    /// (reported name, file), sorted by name. The name is shared with
    /// every `Counter` read from the file.
    counters: Vec<(Arc<str>, Attr)>,
    hw_counters: Vec<(Arc<str>, Attr)>,
    gids: GidTable,
    /// When the whole GID table was last read; `None` before the first
    /// sample.
    gids_scanned_at: Option<Instant>,
    /// The port state read in the previous sample (a change triggers a full
    /// GID scan).
    state_seen: Option<Option<PortState>>,
    /// `link_layer` and `lid` as last read (on Ethernet ports both are
    /// read with the device's static attributes only).
    link_layer_seen: Option<LinkLayer>,
    lid_seen: Option<u32>,
}

/// A port's GID table. Only the slots a watched pass reads are kept (with
/// their paths and handles): those not seen empty, and the lowest
/// [`GID_EMPTY_PROBES`] seen empty. Every other slot is empty as last read
/// and costs nothing until the next full pass, which builds its paths on
/// the fly: 255 slots × 3 paths per port would otherwise be most of the
/// reader's memory on a host with many ports.
struct GidTable {
    /// `ports/N`.
    dir: PathBuf,
    /// Number of slots (`gids/` entries).
    len: u32,
    /// The kept slots, by index.
    kept: BTreeMap<u32, GidSlot>,
}

impl GidTable {
    fn new(dir: PathBuf, len: u32) -> Self {
        GidTable {
            dir,
            len,
            kept: BTreeMap::new(),
        }
    }

    fn slot(&self, index: u32) -> GidSlot {
        GidSlot {
            gid: Attr::new(self.dir.join(format!("gids/{index}"))),
            types: Attr::new(self.dir.join(format!("gid_attrs/types/{index}"))),
            ndevs: Attr::new(self.dir.join(format!("gid_attrs/ndevs/{index}"))),
            seen: Seen::Empty,
        }
    }
}

struct GidSlot {
    gid: Attr,
    types: Attr,
    ndevs: Attr,
    /// What the slot held when last read.
    seen: Seen,
}

/// What a GID slot held when last read. A partial pass compares the slots it
/// knows to be non-empty against this; the netdev is not compared (a rename
/// moves no entry, and `ndevs/N` is read for every populated slot anyway).
#[derive(Clone, Default, PartialEq, Eq)]
enum Seen {
    /// Zeros, or absent: where a new GID can land.
    #[default]
    Empty,
    Entry(Ipv6Addr, GidType),
    /// Not empty but not usable (read error, garbage, attributes failing):
    /// still read every sample so its error keeps being reported.
    Unusable,
}

/// Which GID slots a pass reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GidPass {
    /// Every slot.
    Full,
    /// Slots not seen empty, and the lowest [`GID_EMPTY_PROBES`] seen empty.
    Watched,
}

/// Result of reading one attribute file into a buffer.
enum Got {
    /// This many bytes.
    Len(usize),
    /// Not provided here; not an error.
    Absent,
    /// Recorded in the errors.
    Failed,
}

/// How EINVAL is classified for a file: the GID attributes of an empty slot
/// fail with EINVAL (`_show_port_gid_attr` in core/sysfs.c), which means
/// "no value", elsewhere it is an error.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Einval {
    Absent,
    Error,
}

/// First read size: counters, states and GIDs are a few dozen bytes, so
/// nearly every attribute fits and no page-sized buffer is touched.
const SHORT_READ: usize = 256;
/// sysfs attributes are at most a page (`sysfs_emit`).
const LONG_READ: usize = 4096;

/// The read buffer, kept by the reader across samples: a short one for
/// nearly every file, and a page, allocated on first need, for the rare
/// value that fills the short one.
struct ReadBuf {
    short: [u8; SHORT_READ],
    long: Vec<u8>,
    /// Whether the last read went to `long`.
    in_long: bool,
}

impl ReadBuf {
    fn new() -> Self {
        ReadBuf {
            short: [0; SHORT_READ],
            long: Vec::new(),
            in_long: false,
        }
    }

    /// One `pread` at offset 0 (sysfs hands out the whole value at once),
    /// and a second, page-sized one when the value filled the short buffer.
    fn read(&mut self, file: &dyn SysFile, reads: &mut usize) -> io::Result<usize> {
        self.in_long = false;
        *reads += 1;
        let n = file.read_at(&mut self.short, 0)?;
        if n < SHORT_READ {
            return Ok(n);
        }
        if self.long.len() < LONG_READ {
            self.long.resize(LONG_READ, 0);
        }
        *reads += 1;
        let n = file.read_at(&mut self.long, 0)?;
        self.in_long = true;
        Ok(n)
    }

    /// The first `n` bytes of the last read.
    fn bytes(&self, n: usize) -> &[u8] {
        let data: &[u8] = if self.in_long {
            &self.long
        } else {
            &self.short
        };
        data.get(..n).unwrap_or(data)
    }

    fn text(&self, n: usize) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.bytes(n))
    }
}

/// The text of a kernel GID slot that holds nothing (`%pI6` of zeros).
const ZERO_GID_TEXT: &[u8] = b"0000:0000:0000:0000:0000:0000:0000:0000";

impl DeviceState {
    fn new(dir: PathBuf) -> Self {
        DeviceState {
            dir,
            layout: None,
            rescan: false,
        }
    }

    fn open_files(&self) -> usize {
        self.layout.as_ref().map_or(0, Layout::open_files)
    }

    fn read(
        &mut self,
        name: &str,
        ctx: &mut Ctx<'_>,
        hw: &mut dyn HwCounterSource,
    ) -> Option<Device> {
        if self.rescan || self.layout.is_none() {
            ctx.open = ctx.open.saturating_sub(self.open_files());
            self.layout = None;
            let before = ctx.errors.len();
            self.layout = Some(scan(&self.dir, ctx)?);
            // A listing that failed (EACCES on `counters/`, say) is retried
            // next sample rather than reported once and then forgotten. So
            // is a device without ports: every RDMA device has one, and
            // none listed means the sample fell between the device folder
            // and its port kobjects (`ib_register_device` adds them after
            // `device_add`; unregistration removes them first). Kept, that
            // empty layout hid the ports for the device's whole life.
            self.rescan = ctx.errors.len() > before
                || self.layout.as_ref().is_some_and(|l| l.ports.is_empty());
        }
        let layout = self.layout.as_mut()?;
        let mut stale = false;
        let device = read_device(name, layout, ctx, hw, &mut stale);
        if stale {
            self.rescan = true;
            // If the whole device went away since it was listed, it is not
            // reported half-empty.
            if let Err(e) = ctx.fs.read_dir(&self.dir) {
                if is_absent(&e) {
                    return None;
                }
            }
        }
        Some(device)
    }
}

impl Layout {
    fn open_files(&self) -> usize {
        let one = |a: &Attr| usize::from(a.file.is_some());
        let mut n = one(&self.fw_ver)
            + one(&self.board_id)
            + one(&self.hca_type)
            + one(&self.node_guid)
            + one(&self.node_type)
            + one(&self.parent)
            + self.backing.numa.as_ref().map_or(0, one);
        for p in &self.ports {
            n += one(&p.state) + one(&p.phys_state) + one(&p.rate) + one(&p.link_layer);
            n += one(&p.lid);
            n += p.counters.iter().map(|(_, a)| one(a)).sum::<usize>();
            n += p.hw_counters.iter().map(|(_, a)| one(a)).sum::<usize>();
            n += p
                .gids
                .kept
                .values()
                .map(|g| one(&g.gid) + one(&g.types) + one(&g.ndevs))
                .sum::<usize>();
        }
        n
    }
}

/// Takes the listings. `None` when the device vanished since it was listed.
fn scan(dir: &Path, ctx: &mut Ctx<'_>) -> Option<Layout> {
    let fs = ctx.fs;
    // The device folder itself: gone means gone, not an error.
    if let Err(e) = fs.read_dir(dir) {
        if !is_absent(&e) {
            push_io(ctx.errors, dir, &e);
        }
        return None;
    }
    let backing = resolve_backing(dir, ctx);
    let ports_dir = dir.join("ports");
    let mut numbers: Vec<u32> = list(fs, &ports_dir, ctx.errors)
        .iter()
        .filter_map(|n| n.to_str()?.parse().ok())
        .collect();
    numbers.sort_unstable();
    let ports = numbers
        .into_iter()
        .map(|number| scan_port(fs, ports_dir.join(number.to_string()), number, ctx))
        .collect();
    Some(Layout {
        fw_ver: Attr::new(dir.join("fw_ver")),
        board_id: Attr::new(dir.join("board_id")),
        hca_type: Attr::new(dir.join("hca_type")),
        node_guid: Attr::new(dir.join("node_guid")),
        node_type: Attr::new(dir.join("node_type")),
        parent: Attr::new(dir.join("parent")),
        parent_seen: None,
        backing,
        ports,
        statics: None,
    })
}

/// Driver, PCI function and NUMA node of a device with a `device` link.
fn resolve_backing(dir: &Path, ctx: &mut Ctx<'_>) -> Backing {
    let link = dir.join("device");
    let real = match ctx.fs.canonicalize(&link) {
        Ok(p) => p,
        Err(e) => {
            if !is_absent(&e) {
                push_io(ctx.errors, &link, &e);
            }
            return Backing::default();
        }
    };
    let driver_link = link.join("driver");
    let driver = match ctx.fs.read_link(&driver_link) {
        Ok(target) => base_name(&target),
        Err(e) => {
            if !is_absent(&e) {
                push_io(ctx.errors, &driver_link, &e);
            }
            None
        }
    };
    let (pci_address, pci_dir) = pci_function_of(&real);
    Backing {
        hardware: true,
        driver,
        pci_address,
        numa: pci_dir.map(|d| Attr::new(d.join("numa_node"))),
    }
}

/// The PCI function (and its NUMA node file) of a software device's parent
/// netdev: `<sysfs>/class/net/<parent>/device`.
fn resolve_parent(parent: &str, ctx: &mut Ctx<'_>) -> Backing {
    let link = ctx.sysfs.join("class/net").join(parent).join("device");
    match ctx.fs.canonicalize(&link) {
        Ok(real) => {
            let (pci_address, pci_dir) = pci_function_of(&real);
            Backing {
                hardware: false,
                driver: None,
                pci_address,
                numa: pci_dir.map(|d| Attr::new(d.join("numa_node"))),
            }
        }
        Err(e) => {
            if !is_absent(&e) {
                push_io(ctx.errors, &link, &e);
            }
            Backing::default()
        }
    }
}

fn read_device(
    name: &str,
    layout: &mut Layout,
    ctx: &mut Ctx<'_>,
    hw: &mut dyn HwCounterSource,
    stale: &mut bool,
) -> Device {
    let mut dev = Device {
        name: name.to_string(),
        ..Device::default()
    };
    if !layout.backing.hardware {
        // Software devices: rxe names its netdev in `parent`
        // (drivers/infiniband/sw/rxe/rxe_verbs.c `parent_show`); the netdev
        // (and so its PCI function) can change while the device lives.
        dev.parent_netdev = text_attr(&mut layout.parent, ctx, stale);
        if dev.parent_netdev != layout.parent_seen {
            ctx.open = ctx.open.saturating_sub(
                layout
                    .backing
                    .numa
                    .as_ref()
                    .map_or(0, |a| usize::from(a.file.is_some())),
            );
            layout.backing = match &dev.parent_netdev {
                Some(parent) => resolve_parent(parent, ctx),
                None => Backing::default(),
            };
            layout.parent_seen = dev.parent_netdev.clone();
            // Another PCI function: another NUMA node.
            layout.statics = None;
        }
        dev.driver = if dev.parent_netdev.is_some() {
            Some("rxe".to_string())
        } else if name.starts_with("siw") {
            Some("siw".to_string())
        } else {
            None
        };
    } else {
        dev.driver = layout.backing.driver.clone();
    }
    dev.pci_address = layout.backing.pci_address.clone();

    let refresh = layout.statics.as_ref().is_none_or(|(at, _)| {
        ctx.now.saturating_duration_since(*at) >= ctx.static_refresh_interval
    });
    let errors_before = ctx.errors.len();
    if refresh {
        let statics = DeviceStatics {
            fw_version: text_attr(&mut layout.fw_ver, ctx, stale),
            board_id: text_attr(&mut layout.board_id, ctx, stale),
            hca_type: text_attr(&mut layout.hca_type, ctx, stale),
            node_guid: text_attr(&mut layout.node_guid, ctx, stale),
            node_type: parsed_attr(&mut layout.node_type, ctx, stale, parse::node_type),
            numa_node: layout
                .backing
                .numa
                .as_mut()
                .and_then(|numa| parsed_attr(numa, ctx, stale, parse::numa_node).flatten()),
        };
        layout.statics = Some((ctx.now, statics));
        // Read once a minute: their handles would only take budget from the
        // files read every sample.
        for attr in [
            &mut layout.fw_ver,
            &mut layout.board_id,
            &mut layout.hca_type,
            &mut layout.node_guid,
            &mut layout.node_type,
        ] {
            close_attr(attr, ctx);
        }
        if let Some(numa) = layout.backing.numa.as_mut() {
            close_attr(numa, ctx);
        }
    }
    if let Some((_, st)) = &layout.statics {
        dev.fw_version = st.fw_version.clone();
        dev.board_id = st.board_id.clone();
        dev.hca_type = st.hca_type.clone();
        dev.node_guid = st.node_guid.clone();
        dev.node_type = st.node_type.clone();
        dev.numa_node = st.numa_node;
    }

    let mut static_failed = ctx.errors.len() > errors_before;
    for pl in &mut layout.ports {
        let port = read_port(&dev, pl, refresh, &mut static_failed, ctx, hw, stale);
        dev.ports.push(port);
    }
    if static_failed {
        // An attribute that should be there failed: read the static ones
        // again next sample rather than reporting the error once.
        layout.statics = None;
    }
    dev
}

/// `refresh`: the static attributes are read this sample (a failure among
/// them sets `static_failed`).
fn read_port(
    dev: &Device,
    pl: &mut PortLayout,
    refresh: bool,
    static_failed: &mut bool,
    ctx: &mut Ctx<'_>,
    hw: &mut dyn HwCounterSource,
    stale: &mut bool,
) -> Port {
    let mut port = Port {
        number: pl.number,
        state: parsed_attr(&mut pl.state, ctx, stale, parse::port_state),
        phys_state: parsed_attr(&mut pl.phys_state, ctx, stale, parse::phys_state),
        rate_bytes_per_second: parsed_attr(&mut pl.rate, ctx, stale, parse::rate_bytes_per_second),
        ..Port::default()
    };
    // A port's link layer is fixed while the device exists (changing a
    // ConnectX port between IB and Ethernet re-creates the device). LIDs
    // are InfiniBand addresses the subnet manager assigns, and can change;
    // RoCE has none and the file reads 0x0 (as rxe's in the VM captures).
    let errors_before = ctx.errors.len();
    if refresh {
        pl.link_layer_seen =
            parsed_attr(&mut pl.link_layer, ctx, stale, |t| Ok(parse::link_layer(t)));
    }
    let lid_static = matches!(pl.link_layer_seen, Some(LinkLayer::Ethernet));
    if refresh || !lid_static {
        pl.lid_seen = parsed_attr(&mut pl.lid, ctx, stale, parse::hex_u32);
    }
    if refresh {
        close_attr(&mut pl.link_layer, ctx);
        if lid_static {
            close_attr(&mut pl.lid, ctx);
        }
    }
    if refresh && ctx.errors.len() > errors_before {
        *static_failed = true;
    }
    port.link_layer = pl.link_layer_seen.clone();
    port.lid = pl.lid_seen;

    port.counters = read_counters(&mut pl.counters, ctx, stale);
    match hw.port_counters(&dev.name, pl.number) {
        Some(mut counters) => {
            counters.retain(|c| &*c.name != "lifespan");
            counters.sort_by(|a, b| a.name.cmp(&b.name));
            port.hw_counters = counters;
            port.hw_counter_path = HwCounterPath::Netlink;
        }
        None if !pl.hw_counters.is_empty() => {
            port.hw_counters = read_counters(&mut pl.hw_counters, ctx, stale);
            port.hw_counter_path = HwCounterPath::Sysfs;
        }
        None => {}
    }

    port.gids = read_gid_table(pl, &port.state, ctx, stale);
    port.netdev = port.gids.iter().find_map(|g| g.netdev.clone());
    if port.netdev.is_none() {
        port.netdev = device_netdev(&pl.state.path, ctx);
    }
    if port.netdev.is_none() {
        port.netdev = dev.parent_netdev.clone();
    }
    port
}

fn read_counters(
    files: &mut [(Arc<str>, Attr)],
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Vec<Counter> {
    let mut out = Vec::with_capacity(files.len());
    for (name, attr) in files.iter_mut() {
        let Got::Len(n) = read_attr(attr, Einval::Error, ctx, stale) else {
            continue;
        };
        match parse::counter_bytes(ctx.buf.bytes(n)) {
            Ok(CounterText::Value(value)) => out.push(Counter {
                name: Arc::clone(name),
                value,
            }),
            Ok(CounterText::NotAvailable) => {}
            Err(msg) => push_parse(ctx.errors, &attr.path, msg),
        }
    }
    out
}

/// The port's GIDs: a watched pass when nothing calls for a full scan, and a
/// full pass (in the same sample) when one is due or the watched pass found a
/// known slot changed. Afterwards, handles of slots the next watched pass
/// will not read are closed.
fn read_gid_table(
    pl: &mut PortLayout,
    state: &Option<PortState>,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Vec<Gid> {
    let due = pl
        .gids_scanned_at
        .is_none_or(|at| ctx.now.saturating_duration_since(at) >= ctx.gid_full_scan_interval);
    let state_changed = pl.state_seen.as_ref() != Some(state);
    pl.state_seen = Some(state.clone());
    let mut pass = if due || state_changed {
        GidPass::Full
    } else {
        GidPass::Watched
    };
    let mark = ctx.errors.len();
    let gids = loop {
        match read_gids(&mut pl.gids, pass, ctx, stale) {
            Some(gids) => break gids,
            None => {
                // A known slot changed: the table is churning. Start over
                // with every slot; errors of the abandoned pass would repeat.
                ctx.errors.truncate(mark);
                pass = GidPass::Full;
            }
        }
    };
    if pass == GidPass::Full {
        pl.gids_scanned_at = Some(ctx.now);
    }
    release_unwatched(&mut pl.gids, ctx);
    gids
}

/// Reads the slots `pass` selects, in index order. Populated slots only are
/// returned: a slot whose GID is all zeros is empty and its attributes are
/// not read at all. `None` when a watched pass found a slot that was not
/// empty reading differently.
fn read_gids(
    table: &mut GidTable,
    pass: GidPass,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> Option<Vec<Gid>> {
    let mut out = Vec::new();
    match pass {
        GidPass::Watched => {
            // The kept slots are exactly the watched ones.
            for (&index, slot) in table.kept.iter_mut() {
                let (seen, gid) = read_gid_slot(index, slot, ctx, stale);
                if slot.seen != Seen::Empty && seen != slot.seen {
                    return None;
                }
                slot.seen = seen;
                out.extend(gid);
            }
        }
        GidPass::Full => {
            // Empty slots kept so far in this pass: in index order, so the
            // lowest ones, which the watched passes probe.
            let mut probes = 0;
            for index in 0..table.len {
                let mut slot = match table.kept.remove(&index) {
                    Some(slot) => slot,
                    None => table.slot(index),
                };
                let (seen, gid) = read_gid_slot(index, &mut slot, ctx, stale);
                slot.seen = seen;
                out.extend(gid);
                if slot.seen == Seen::Empty {
                    if probes == GID_EMPTY_PROBES {
                        // Most slots: empty, past the probes. Closed at
                        // once, so a full pass holds no more handles than a
                        // watched one.
                        close_slot(&mut slot, ctx);
                        continue;
                    }
                    probes += 1;
                }
                table.kept.insert(index, slot);
            }
        }
    }
    Some(out)
}

fn close_slot(slot: &mut GidSlot, ctx: &mut Ctx<'_>) {
    for a in [&mut slot.gid, &mut slot.types, &mut slot.ndevs] {
        close_attr(a, ctx);
    }
}

/// Drops an attribute's kept handle, if it has one.
fn close_attr(attr: &mut Attr, ctx: &mut Ctx<'_>) {
    if attr.file.take().is_some() {
        ctx.open = ctx.open.saturating_sub(1);
    }
}

/// One slot: what it holds, and the GID when it is usable.
fn read_gid_slot(
    index: u32,
    slot: &mut GidSlot,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
) -> (Seen, Option<Gid>) {
    let n = match read_attr(&mut slot.gid, Einval::Absent, ctx, stale) {
        Got::Len(n) => n,
        Got::Absent => return (Seen::Empty, None),
        Got::Failed => return (Seen::Unusable, None),
    };
    let raw = ctx.buf.bytes(n);
    if raw.trim_ascii() == ZERO_GID_TEXT {
        return (Seen::Empty, None);
    }
    let gid = match parse::gid_bytes(ctx.buf.bytes(n)) {
        Ok(g) => g,
        Err(msg) => {
            push_parse(ctx.errors, &slot.gid.path, msg);
            return (Seen::Unusable, None);
        }
    };
    if gid == Ipv6Addr::UNSPECIFIED {
        return (Seen::Empty, None);
    }
    let gid_type = match read_attr(&mut slot.types, Einval::Absent, ctx, stale) {
        Got::Len(n) => parse::gid_type(&ctx.buf.text(n)),
        // The slot emptied between the two reads.
        Got::Absent | Got::Failed => return (Seen::Unusable, None),
    };
    let netdev = match read_attr(&mut slot.ndevs, Einval::Absent, ctx, stale) {
        Got::Len(n) => parse::text(&ctx.buf.text(n)),
        Got::Absent | Got::Failed => None,
    };
    let seen = Seen::Entry(gid, gid_type.clone());
    let gid = Gid {
        index,
        gid,
        gid_type,
        netdev,
    };
    (seen, Some(gid))
}

/// After a pass: keeps the slots the next watched pass reads (those not
/// seen empty, and the lowest [`GID_EMPTY_PROBES`] seen empty, which are
/// added when a probe filled up) and drops the others with their handles.
/// Of the kept empty slots only `gids/N` stays open: their attributes fail
/// (EINVAL) until a GID lands there.
fn release_unwatched(table: &mut GidTable, ctx: &mut Ctx<'_>) {
    let mut probes = 0;
    let mut index = 0;
    while index < table.len && probes < GID_EMPTY_PROBES {
        let empty = table.kept.get(&index).is_none_or(|s| s.seen == Seen::Empty);
        if empty {
            probes += 1;
            if !table.kept.contains_key(&index) {
                let slot = table.slot(index);
                table.kept.insert(index, slot);
            }
        }
        index += 1;
    }
    // `index` is now past the last probe: empty slots from there on go.
    let beyond: Vec<u32> = table
        .kept
        .range(index..)
        .filter(|(_, s)| s.seen == Seen::Empty)
        .map(|(&i, _)| i)
        .collect();
    for i in beyond {
        if let Some(mut slot) = table.kept.remove(&i) {
            close_slot(&mut slot, ctx);
        }
    }
    for slot in table.kept.values_mut().filter(|s| s.seen == Seen::Empty) {
        close_attr(&mut slot.types, ctx);
        close_attr(&mut slot.ndevs, ctx);
    }
}

/// The first netdev in the backing function's `net/` folder. Listed every
/// time it is needed: a rename changes the folder's entries. `state_path` is
/// `<dev>/ports/N/state`.
fn device_netdev(state_path: &Path, ctx: &mut Ctx<'_>) -> Option<String> {
    let dev_dir = state_path.parent()?.parent()?.parent()?;
    let net = dev_dir.join("device/net");
    let mut names: Vec<String> = match ctx.fs.read_dir(&net) {
        Ok(n) => n.into_iter().filter_map(|n| n.into_string().ok()).collect(),
        Err(e) => {
            if !is_absent(&e) {
                push_io(ctx.errors, &net, &e);
            }
            return None;
        }
    };
    names.sort();
    names.into_iter().next()
}

fn text_attr(attr: &mut Attr, ctx: &mut Ctx<'_>, stale: &mut bool) -> Option<String> {
    match read_attr(attr, Einval::Error, ctx, stale) {
        Got::Len(n) => parse::text(&ctx.buf.text(n)),
        Got::Absent | Got::Failed => None,
    }
}

fn parsed_attr<T>(
    attr: &mut Attr,
    ctx: &mut Ctx<'_>,
    stale: &mut bool,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<T> {
    let Got::Len(n) = read_attr(attr, Einval::Error, ctx, stale) else {
        return None;
    };
    match parse(&ctx.buf.text(n)) {
        Ok(v) => Some(v),
        Err(msg) => {
            push_parse(ctx.errors, &attr.path, msg);
            None
        }
    }
}

/// Reads one attribute (one `pread` at offset 0: sysfs hands out the whole
/// value at once) through its kept handle, reopening once when the handle
/// went stale. Handles are kept while the open-file budget allows.
fn read_attr(attr: &mut Attr, einval: Einval, ctx: &mut Ctx<'_>, stale: &mut bool) -> Got {
    let mut reopened = false;
    if let Some(file) = attr.file.as_deref() {
        match ctx.buf.read(file, &mut ctx.reads) {
            Ok(n) => return Got::Len(n),
            Err(e) if is_stale(&e) => {
                attr.file = None;
                ctx.open = ctx.open.saturating_sub(1);
                *stale = true;
                reopened = true;
            }
            Err(e) => return classify(ctx.errors, &attr.path, &e, einval),
        }
    }
    let file = match ctx.fs.open(&attr.path) {
        Ok(f) => f,
        Err(e) => {
            if reopened && is_stale(&e) {
                return Got::Absent;
            }
            return classify(ctx.errors, &attr.path, &e, einval);
        }
    };
    let result = ctx.buf.read(file.as_ref(), &mut ctx.reads);
    // Keep the handle (also when this read failed with EIO or similar: the
    // value may come back), unless it is stale or over the budget.
    let keep = match &result {
        Ok(_) => true,
        Err(e) => !is_stale(e),
    };
    if keep && ctx.open < ctx.max_open {
        attr.file = Some(file);
        ctx.open += 1;
    }
    match result {
        Ok(n) => Got::Len(n),
        Err(e) => classify(ctx.errors, &attr.path, &e, einval),
    }
}

fn scan_port(fs: &dyn SysFs, dir: PathBuf, number: u32, ctx: &mut Ctx<'_>) -> PortLayout {
    let mut counters = counter_files(fs, &dir.join("counters"), ctx.errors, ctx.names, |n| {
        Some(n.to_string())
    });
    // Old kernels (and some OFED builds) put the 64-bit PMA counters in
    // `counters_ext/` under other names; current kernels have them in
    // `counters/` (pma_attrs_ext in drivers/infiniband/core/sysfs.c). Use
    // them under the standard name where `counters/` lacks it.
    let ext = counter_files(
        fs,
        &dir.join("counters_ext"),
        ctx.errors,
        ctx.names,
        ext_standard_name,
    );
    for (name, attr) in ext {
        if !counters.iter().any(|(n, _)| *n == name) {
            counters.push((name, attr));
        }
    }
    counters.sort_by(|a, b| a.0.cmp(&b.0));
    // `lifespan` is the cache setting of the hw_counters group
    // (set_stats_lifespan in core/sysfs.c), not a counter.
    let hw_counters = counter_files(fs, &dir.join("hw_counters"), ctx.errors, ctx.names, |n| {
        (n != "lifespan").then(|| n.to_string())
    });
    let gid_slots = list(fs, &dir.join("gids"), ctx.errors)
        .iter()
        .filter_map(|n| n.to_str()?.parse::<u32>().ok())
        .map(|i| i.saturating_add(1))
        .max()
        .unwrap_or(0);
    let gids = GidTable::new(dir.clone(), gid_slots);
    PortLayout {
        number,
        state: Attr::new(dir.join("state")),
        phys_state: Attr::new(dir.join("phys_state")),
        rate: Attr::new(dir.join("rate")),
        link_layer: Attr::new(dir.join("link_layer")),
        lid: Attr::new(dir.join("lid")),
        counters,
        hw_counters,
        gids,
        gids_scanned_at: None,
        state_seen: None,
        link_layer_seen: None,
        lid_seen: None,
    }
}

/// `counters_ext/` names to the `counters/` names of current kernels.
fn ext_standard_name(name: &str) -> Option<String> {
    let n = name.strip_suffix("_64").unwrap_or(name);
    let n = match n.strip_prefix("port_") {
        Some(rest) if rest.starts_with("unicast_") || rest.starts_with("multicast_") => rest,
        _ => n,
    };
    Some(n.to_string())
}

fn counter_files(
    fs: &dyn SysFs,
    dir: &Path,
    errors: &mut Vec<ReadError>,
    names: &mut CounterNames,
    rename: impl Fn(&str) -> Option<String>,
) -> Vec<(Arc<str>, Attr)> {
    let mut out: Vec<(Arc<str>, Attr)> = list(fs, dir, errors)
        .into_iter()
        .filter_map(|n| {
            let s = n.to_str()?;
            Some((names.get(&rename(s)?), Attr::new(dir.join(s))))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Entries of a folder; a missing folder (rxe and bnxt_re have no
/// `counters/`) is empty, not an error.
fn list(fs: &dyn SysFs, dir: &Path, errors: &mut Vec<ReadError>) -> Vec<OsString> {
    match fs.read_dir(dir) {
        Ok(n) => n,
        Err(e) => {
            if !is_absent(&e) {
                push_io(errors, dir, &e);
            }
            Vec::new()
        }
    }
}

/// The last PCI-function component of a resolved device path, and the folder
/// it names. Walking up handles functions' children (`virtio0` under the
/// virtio PCI function, mlx5 sub-functions on the auxiliary bus).
fn pci_function_of(real: &Path) -> (Option<String>, Option<PathBuf>) {
    let mut dir = real.to_path_buf();
    loop {
        if let Some(name) = dir.file_name().and_then(|n| n.to_str()) {
            if parse::is_pci_address(name) {
                return (Some(name.to_string()), Some(dir));
            }
        }
        if !dir.pop() || dir.components().next_back() == Some(Component::RootDir) {
            return (None, None);
        }
    }
}

fn base_name(p: &Path) -> Option<String> {
    p.file_name().and_then(|n| n.to_str()).map(str::to_string)
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The file or folder does not exist (here, or any more).
fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV))
}

/// A kept handle whose kernel object went away.
fn is_stale(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENODEV | libc::ENOENT | libc::ESTALE)
    ) || e.kind() == io::ErrorKind::NotFound
}

fn classify(errors: &mut Vec<ReadError>, path: &Path, e: &io::Error, einval: Einval) -> Got {
    let code = errno(e);
    let absent = is_absent(e)
        || code == libc::ESTALE
        || code == libc::EOPNOTSUPP
        || (code == libc::EINVAL && einval == Einval::Absent);
    if absent {
        Got::Absent
    } else {
        push_io(errors, path, e);
        Got::Failed
    }
}

fn push_io(errors: &mut Vec<ReadError>, path: &Path, e: &io::Error) {
    errors.push(ReadError {
        path: path.to_path_buf(),
        kind: ReadErrorKind::Io(errno(e)),
    });
}

fn push_parse(errors: &mut Vec<ReadError>, path: &Path, msg: String) {
    errors.push(ReadError {
        path: path.to_path_buf(),
        kind: ReadErrorKind::Parse(msg),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext_names() {
        for (ext, std) in [
            ("port_xmit_data_64", "port_xmit_data"),
            ("port_rcv_data_64", "port_rcv_data"),
            ("port_xmit_packets_64", "port_xmit_packets"),
            ("port_rcv_packets_64", "port_rcv_packets"),
            ("port_unicast_xmit_packets", "unicast_xmit_packets"),
            ("port_unicast_rcv_packets", "unicast_rcv_packets"),
            ("port_multicast_xmit_packets", "multicast_xmit_packets"),
            ("port_multicast_rcv_packets", "multicast_rcv_packets"),
        ] {
            assert_eq!(ext_standard_name(ext).as_deref(), Some(std));
        }
    }

    #[test]
    fn pci_function_walks_up() {
        let (a, d) = pci_function_of(Path::new("/sys/devices/pci0000:00/0000:00:01.0/virtio0"));
        assert_eq!(a.as_deref(), Some("0000:00:01.0"));
        assert_eq!(
            d,
            Some(PathBuf::from("/sys/devices/pci0000:00/0000:00:01.0"))
        );
        assert_eq!(
            pci_function_of(Path::new("/sys/devices/virtual/net/lo")),
            (None, None)
        );
    }

    #[test]
    fn filter() {
        let f = DeviceFilter {
            include: vec!["mlx5_*".into()],
            exclude: vec!["mlx5_1".into()],
        };
        assert!(f.allows("mlx5_0"));
        assert!(!f.allows("mlx5_1"));
        assert!(!f.allows("rxe0"));
        assert!(DeviceFilter::default().allows("rxe0"));
    }
}
