//! The physical-layer source: FEC (ethtool netlink `FEC_GET`), pluggable
//! modules (ethtool netlink `MODULE_EEPROM_GET`, every
//! `netdevs.module_interval`), PCIe AER of the NICs' and the GPUs' PCI
//! functions and of the bridge ports on their paths (sysfs `aer_dev_*`)
//! and devlink health reporters, through
//! `roce-netdev`'s phys reader, for the netdevs behind RDMA ports plus
//! `netdevs.extra`. The kernel parts follow `sources.fec`,
//! `sources.module_eeprom` and `sources.devlink` (on by default when the
//! paths are the running kernel's); on a fixture tree the recorded replies
//! under `netdevs.replay` stand in for the kernel. The GPUs are those the
//! topology source found in the previous sample.
//!
//! It reads on its own cadence, `netdevs.phys_interval`, and serves its
//! last reading (with that reading's errors) in between: at once when the
//! netdevs or GPUs to read change or a netdev's link changed state (its
//! carrier transitions in the previous sample's netdev part).

use roce_netdev::devlink::{DevlinkHealth, DevlinkReplay};
use roce_netdev::fec::{EthtoolFec, FecReplay};
use roce_netdev::module::{EepromReplay, EthtoolEeprom};
use std::time::Duration;

use roce_netdev::phys::{PhysOptions, PhysReader, PhysSnapshot};
use roce_netdev::NetdevToRead;

use super::netdev::{live, requests};
use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::{KernelRequests, SourceState};

pub struct PhysSource {
    reader: PhysReader,
    extra: Vec<String>,
    live_fec: bool,
    live_eeprom: bool,
    live_devlink: bool,
    read_last_sample: bool,
    interval: Duration,
    last: Option<Last>,
    sysfs: std::path::PathBuf,
    /// The GPUs this source listed itself, once, for the samples that have
    /// no topology from the sample before (the first, `once`, `check`, or
    /// the topology collector off).
    listed_gpus: Option<Vec<String>>,
}

/// The last reading, what it was read for, and when.
struct Last {
    at: Duration,
    key: Key,
    part: PhysSnapshot,
    errors: Vec<HostError>,
}

/// What makes a served reading out of date at once.
#[derive(PartialEq)]
struct Key {
    targets: Vec<NetdevToRead>,
    gpus: Vec<String>,
    /// Carrier transitions of each target in the previous sample.
    carrier: Vec<Option<u64>>,
}

impl PhysSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let live = paths.is_live();
        let timeout = config.sources.netlink_timeout;
        let replay = config.netdevs.replay.clone();
        let mut reader = PhysReader::new(PhysOptions {
            sysfs: paths.sysfs.clone(),
            module_interval: config.netdevs.module_interval,
        });
        let (fec, eeprom, devlink) = (
            config.sources.fec.enabled(live),
            config.sources.module_eeprom.enabled(live),
            config.sources.devlink.enabled(live),
        );
        if fec {
            reader = reader.with_fec(Box::new(EthtoolFec::new(timeout)));
        } else if let Some(dir) = &replay {
            reader = reader.with_fec(Box::new(FecReplay::new(dir.clone())));
        }
        if eeprom {
            reader = reader.with_eeprom(Box::new(EthtoolEeprom::new(timeout)));
        } else if let Some(dir) = &replay {
            reader = reader.with_eeprom(Box::new(EepromReplay::new(dir.clone())));
        }
        if devlink {
            reader = reader.with_health(Box::new(DevlinkHealth::new(timeout)));
        } else if let Some(dir) = &replay {
            reader = reader.with_health(Box::new(DevlinkReplay::new(dir.clone())));
        }
        PhysSource {
            reader,
            extra: config.netdevs.extra.clone(),
            live_fec: fec,
            live_eeprom: eeprom,
            live_devlink: devlink,
            read_last_sample: false,
            interval: config.netdevs.phys_interval,
            last: None,
            sysfs: paths.sysfs.clone(),
            listed_gpus: None,
        }
    }
}

impl Source for PhysSource {
    fn name(&self) -> &'static str {
        "phys"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        let targets = super::netdev::targets(input.rdma.as_deref(), &self.extra);
        let gpus: Vec<String> = match input.previous.as_ref().and_then(|p| p.topology.as_ref()) {
            Some(t) => t.gpus.iter().map(|g| g.address.to_string()).collect(),
            None => {
                let sysfs = &self.sysfs;
                self.listed_gpus
                    .get_or_insert_with(|| {
                        let mut read_errors = Vec::new();
                        let gpus = roce_topology::list_gpus(sysfs, &mut read_errors);
                        errors.extend(read_errors.into_iter().map(HostError::from));
                        gpus.iter().map(|a| a.to_string()).collect()
                    })
                    .clone()
            }
        };
        self.read_last_sample = false;
        if targets.is_empty() && gpus.is_empty() {
            self.last = None;
            return Sampled::new(
                SourceState::Unavailable("no netdev behind an RDMA port and no GPU".into()),
                Part::Phys(Default::default()),
            );
        }
        let carrier = targets
            .iter()
            .map(|t| {
                let netdevs = input.previous.as_ref()?.netdev.as_ref()?;
                let n = netdevs.netdevs.iter().find(|n| n.name == t.name)?;
                n.carrier.transitions()
            })
            .collect();
        let key = Key {
            targets,
            gpus,
            carrier,
        };
        let now = crate::snapshot::monotonic_now();
        if let Some(last) = &self.last {
            if last.key == key && now.saturating_sub(last.at) < self.interval {
                errors.extend(last.errors.iter().cloned());
                return Sampled::new(SourceState::Ok, Part::Phys(last.part.clone()));
            }
        }
        self.read_last_sample = true;
        let before = errors.len();
        let snapshot = self.reader.read(&key.targets, &key.gpus, now, errors);
        self.last = Some(Last {
            at: now,
            key,
            part: snapshot.clone(),
            errors: errors[before..].to_vec(),
        });
        Sampled::new(SourceState::Ok, Part::Phys(snapshot))
    }

    fn kernel_requests(&self) -> Option<KernelRequests> {
        requests(self.read_last_sample, || {
            let calls = self.reader.last_calls();
            KernelRequests {
                file_reads: calls.aer_files,
                netlink: live(self.live_fec, calls.fec)
                    + live(self.live_eeprom, calls.eeprom)
                    + live(self.live_devlink, calls.devlink),
                ioctls: 0,
            }
        })
    }
}
