//! The netdev source: the netdevs behind RDMA ports (from the RDMA source's
//! part, handed over by the sampler) plus `netdevs.extra`, through `roce-netdev`:
//! sysfs configuration always; ethtool statistics (`SIOCETHTOOL`) and DCB
//! (rtnetlink) only when `sources.ethtool` / `sources.dcb` resolve to on
//! (by default: the paths are the running kernel's). On a fixture tree the
//! recorded data under `netdevs.replay` stands in for the kernel.

use roce_netdev::ethtool::{Ioctl, Replay};
use roce_netdev::live::{EthtoolPause, NetlinkDcb};
use roce_netdev::reader::{DcbReplay, ReaderOptions};
use roce_netdev::{NetdevReader, NetdevToRead, RdmaPortRef};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::{KernelRequests, SourceState};

pub struct NetdevSource {
    reader: NetdevReader,
    /// Whether the ethtool and DCB parts ask the running kernel (not
    /// recorded replies): only then are their calls kernel requests. Pause
    /// statistics are only ever read live.
    live_ethtool: bool,
    live_dcb: bool,
    /// Whether the last sample ran the reader at all.
    read_last_sample: bool,
    extra: Vec<String>,
    /// Set when a kernel interface could not be opened at start.
    open_error: Option<HostError>,
}

impl NetdevSource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let live = paths.is_live();
        let options = ReaderOptions {
            sysfs: paths.sysfs.clone(),
            raw_ethtool: config.netdevs.export_raw_ethtool.clone(),
            qos_interval: config.netdevs.qos_interval,
        };
        let mut reader = NetdevReader::new(options);
        if !config.collectors.qos {
            reader = reader.without_qos();
        }
        let mut open_error = None;
        let replay = config.netdevs.replay.clone();
        if config.sources.ethtool.enabled(live) {
            match Ioctl::open() {
                Ok(io) => reader = reader.with_ethtool(Box::new(io)),
                Err(e) => open_error = Some(HostError::request("ethtool socket", e)),
            }
            if let Some(pause) = live_pause(config) {
                reader = reader.with_pause(pause);
            }
        } else if let Some(dir) = &replay {
            reader = reader.with_ethtool(Box::new(Replay::new(dir.clone())));
        }
        if config.sources.dcb.enabled(live) {
            if let Some(dcb) = live_dcb(config) {
                reader = reader.with_dcb(dcb);
            }
        } else if let Some(dir) = &replay {
            reader = reader.with_dcb(Box::new(DcbReplay::new(dir.clone())));
        }
        NetdevSource {
            reader,
            live_ethtool: config.sources.ethtool.enabled(live),
            live_dcb: config.sources.dcb.enabled(live),
            read_last_sample: false,
            extra: config.netdevs.extra.clone(),
            open_error,
        }
    }
}

/// Standard pause statistics over ethtool generic netlink.
fn live_pause(config: &Config) -> Option<Box<dyn roce_netdev::reader::PauseRead>> {
    Some(Box::new(EthtoolPause::new(config.sources.netlink_timeout)))
}

/// DCB over rtnetlink.
fn live_dcb(config: &Config) -> Option<Box<dyn roce_netdev::reader::DcbRead>> {
    Some(Box::new(NetlinkDcb::new(config.sources.netlink_timeout)))
}

/// The netdevs to read: one per netdev behind an RDMA port (the first port
/// names it), then the extra ones not already listed.
pub fn targets(rdma: Option<&roce_rdma::RdmaSnapshot>, extra: &[String]) -> Vec<NetdevToRead> {
    let mut out: Vec<NetdevToRead> = Vec::new();
    if let Some(rdma) = rdma {
        for device in &rdma.devices {
            for port in &device.ports {
                let Some(netdev) = &port.netdev else { continue };
                if out.iter().any(|t| &t.name == netdev) {
                    continue;
                }
                out.push(NetdevToRead {
                    name: netdev.clone(),
                    rdma: Some(RdmaPortRef {
                        device: device.name.clone(),
                        port: port.number,
                    }),
                });
            }
        }
    }
    for name in extra {
        if !out.iter().any(|t| &t.name == name) {
            out.push(NetdevToRead {
                name: name.clone(),
                rdma: None,
            });
        }
    }
    out
}

impl Source for NetdevSource {
    fn name(&self) -> &'static str {
        "netdev"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        if let Some(e) = &self.open_error {
            errors.push(e.clone());
        }
        let targets = targets(input.rdma.as_deref(), &self.extra);
        self.read_last_sample = !targets.is_empty();
        if targets.is_empty() {
            return Sampled::new(
                SourceState::Unavailable("no netdev behind an RDMA port".into()),
                Part::Netdev(Default::default()),
            );
        }
        let netdevs = self
            .reader
            .read_at(&targets, crate::snapshot::monotonic_now(), errors);
        Sampled::new(SourceState::Ok, Part::Netdev(netdevs))
    }

    fn kernel_requests(&self) -> Option<KernelRequests> {
        requests(self.read_last_sample, || {
            let calls = self.reader.last_calls();
            KernelRequests {
                file_reads: calls.sysfs_reads,
                netlink: calls.pause + live(self.live_dcb, calls.dcb),
                ioctls: live(self.live_ethtool, calls.ethtool),
            }
        })
    }
}

/// What a source asked of the kernel in its last sample: nothing when it
/// did not read, else what `count` says.
pub(super) fn requests(
    read: bool,
    count: impl FnOnce() -> KernelRequests,
) -> Option<KernelRequests> {
    Some(if read {
        count()
    } else {
        KernelRequests::default()
    })
}

/// `n` calls when they went to the kernel, none when a replay answered.
pub(super) fn live(on: bool, n: u64) -> u64 {
    if on {
        n
    } else {
        0
    }
}
