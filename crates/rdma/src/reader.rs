//! The sysfs reader: walks `<sysfs>/class/infiniband`, keeps counter files
//! open and reads them with `pread`, and classifies every failure as absent
//! or error. (Skeleton: the implementation lands with the fixtures.)

use std::path::PathBuf;

use crate::types::{Counter, RdmaSnapshot};

/// Which devices to read. Names or globs (`*`, `?`). A device that does not
/// pass is never opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFilter {
    /// Empty: every device.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
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
#[derive(Debug)]
pub struct RdmaReader {
    sysfs: PathBuf,
    filter: DeviceFilter,
}

impl RdmaReader {
    /// `sysfs` is the sysfs mount (`/sys`), not `/sys/class/infiniband`.
    pub fn new(sysfs: PathBuf, filter: DeviceFilter) -> Self {
        RdmaReader { sysfs, filter }
    }

    /// Reads every device that passes the filter.
    pub fn read(&mut self, hw: &mut dyn HwCounterSource) -> RdmaSnapshot {
        let _ = (&self.sysfs, &self.filter, hw);
        RdmaSnapshot::default()
    }
}
