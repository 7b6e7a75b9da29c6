//! The RDMA source: devices, ports, counters and GIDs from sysfs, with the
//! hardware counters from RDMA netlink when the kernel answers it.

use roce_rdma::{DeviceFilter, RdmaReader, SysfsOnly};

use super::Source;
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::{Snapshot, SourceState};

pub struct RdmaSource {
    reader: RdmaReader,
}

impl RdmaSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let filter = DeviceFilter {
            include: config.devices.include.clone(),
            exclude: config.devices.exclude.clone(),
        };
        RdmaSource {
            reader: RdmaReader::new(paths.sysfs.clone(), filter),
        }
    }
}

impl Source for RdmaSource {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, errors: &mut Vec<String>) -> SourceState {
        let rdma = self.reader.read(&mut SysfsOnly);
        errors.extend(rdma.errors.iter().map(|e| e.to_string()));
        let state = if rdma.devices.is_empty() {
            SourceState::Unavailable("no RDMA device in /sys/class/infiniband".into())
        } else {
            SourceState::Ok
        };
        snapshot.rdma = Some(rdma);
        state
    }
}
