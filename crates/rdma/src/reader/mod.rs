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
//! The parts, in the order a sample meets them:
//! - `device`: reading one device per sample, and which of its attributes
//!   are read only now and then;
//! - `layout`: the scan taken when a device appears (ports, counter
//!   files, GID slot counts, the PCI function behind it);
//! - `gid`: GID tables, of which a sample reads only the slots that matter;
//! - `attr`: one attribute file and its kept handle, within the open-file
//!   budget ([`roce_host::KeptAttr`]), its failures recorded;
//! - `errno`: recording failures with their path (which are *absent* and
//!   which are errors is [`roce_host::errno`]'s to say).

mod attr;
mod device;
mod errno;
mod gid;
mod layout;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use roce_host::{Io, ReadBuf};

use crate::fs::{KeptDir, StdFs, SysFs};
use crate::parse;
use crate::types::{Counter, CounterNames, RdmaSnapshot, ReadError};

use device::DeviceState;
use errno::{is_absent, push_io};

pub use gid::{GID_EMPTY_PROBES, MAX_GID_SLOTS};

/// How often a port's whole GID table is read even when nothing hints at a
/// change.
pub const DEFAULT_GID_FULL_SCAN_INTERVAL: Duration = Duration::from_secs(60);

/// How often attributes that do not change while a device exists are read
/// again even when nothing hints at a change.
pub const DEFAULT_STATIC_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

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
        for name in self.listed.iter().filter(|n| n.to_str().is_none()) {
            snap.errors
                .push(not_utf8(&class.join(name), "device", name));
        }
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
            io: Io {
                fs: self.fs.as_ref(),
                buf: &mut self.buf,
                open: self.open.saturating_sub(released),
                max_open: self.max_open,
                reads: 0,
            },
            sysfs: &self.sysfs,
            errors: &mut snap.errors,
            names: &mut self.names,
            now,
            gid_full_scan_interval: self.gid_full_scan_interval,
            static_refresh_interval: self.static_refresh_interval,
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
        self.reads_last_sample = ctx.io.reads;
        self.open = ctx.io.open;
        if released > 0 {
            self.names.prune();
        }
        debug_assert_eq!(self.open, self.open_files(), "open-file count drifted");
        snap
    }
}

/// A device or netdev name that is not UTF-8, refused: the labels and the
/// sources that take the name as text could only mangle it (and a mangled
/// netdev name reads as a netdev without DCB, a false verdict). `at` is the
/// file or folder that gave it.
fn not_utf8(at: &Path, what: &str, name: &std::ffi::OsStr) -> ReadError {
    ReadError::refused(
        at,
        format!(
            "{what} name {} is not UTF-8 (bytes escaped): not read",
            roce_host::escaped_name(name)
        ),
    )
}

/// What one sample needs besides the device's own state.
struct Ctx<'a> {
    /// The file layer, the read buffer, the handles held now and their cap,
    /// and the `pread` calls so far this sample.
    io: Io<'a>,
    sysfs: &'a Path,
    errors: &'a mut Vec<ReadError>,
    names: &'a mut CounterNames,
    /// When this sample is taken, and how often GID tables are read whole.
    now: Instant,
    gid_full_scan_interval: Duration,
    /// How often attributes that do not change are read again.
    static_refresh_interval: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

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
