//! One sample of every selected netdev: sysfs configuration, ethtool
//! statistics with meaning, standard pause statistics and DCB. Each part is
//! optional (turned off on fixture trees) and each netdev is read on its
//! own: a failing netdev or part never hides the others.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use roce_host::{HostError, Priorities};

use crate::dcb::{DcbApp, DcbConfig, DcbError};
use crate::error::NetdevError;
use crate::ethtool::{EthtoolError, EthtoolIo, StatsCache};
use crate::genl::{ReplayError, ReplayFault};
use crate::{DcbOutcome, Netdev, NetdevSnapshot, PauseStats, RdmaPortRef, ReadOutcome};

/// A netdev to read, and the RDMA port it backs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetdevToRead {
    pub name: String,
    pub rdma: Option<RdmaPortRef>,
}

/// Reader settings that do not change between samples.
#[derive(Debug, Clone, Default)]
pub struct ReaderOptions {
    /// `--path.sysfs`.
    pub sysfs: PathBuf,
    /// `netdevs.export_raw_ethtool`.
    pub raw_ethtool: Vec<String>,
    /// `netdevs.qos_interval`: how often the QoS configuration (DCB over
    /// rtnetlink, the DCQCN parameter files, CNP marking, rdma_cm ToS) is
    /// read again. On mlx5 each of those reads is a firmware command, and
    /// the configuration changes rarely; zero reads it every sample.
    pub qos_interval: Duration,
}

/// Reads the DCB configuration of one netdev.
pub trait DcbRead: Send {
    fn read_dcb(&mut self, netdev: &str) -> Result<DcbConfig, DcbError>;
}

/// Reads the standard pause statistics of one netdev; `Ok(None)` when the
/// driver has none.
pub trait PauseRead: Send {
    fn read_pause(&mut self, netdev: &str) -> Result<Option<PauseStats>, NetdevError>;
}

/// Replays recorded DCB settings from `<dir>/<netdev>.dcb`, a small text
/// format written for demo trees (a missing file means no DCB support):
/// ```text
/// pfc: 3            # priorities with PFC on, comma separated ("" = none)
/// trust: dscp       # optional: pcp, dscp (as `dcb apptrust` shows it)
/// app: dscp 26 3    # dscp <value> <priority>; repeatable
/// prio_tc: 0 0 0 3 0 0 6 0          # ETS: traffic class of priorities 0..7
/// tc_tsa: ets ets ets ets ets ets strict ets   # per TC: strict, ets, cbs, vendor
/// tc_bw: 0 0 0 50 0 0 0 50          # per TC, percent
/// prio2buffer: 0 0 0 1 0 0 0 0      # buffer of priorities 0..7
/// buffer_size: 130944 130944 0 0 0 0 0 0   # bytes per buffer
/// buffer_total: 262144
/// dcbx: firmware_ieee               # off, host, host_ieee, host_cee, firmware, firmware_ieee, firmware_cee, static
///                                   # (firmware and host: both version bits, as mlx5 reports them)
/// peer: ieee                        # ieee or cee: the peer information below came through DCBX
/// peer_pfc: 3                       # the switch's PFC priorities, as pfc:
/// peer_app: dscp 26 3               # the switch's APP entries, as app:; repeatable
/// peer_prio_tc: 0 0 0 3 0 0 6 0
/// ```
/// A key that is not there is a part the driver does not report.
#[derive(Debug, Clone)]
pub struct DcbReplay {
    dir: PathBuf,
}

impl DcbReplay {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DcbReplay { dir: dir.into() }
    }
}

/// Parses the replay format of [`DcbReplay`].
pub fn parse_dcb_replay(text: &str) -> Result<DcbConfig, ReplayError> {
    let mut config = DcbConfig::default();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |fault| ReplayError::new(n + 1, fault, line);
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| bad(ReplayFault::KeyValue))?;
        let value = value.trim();
        match key.trim() {
            "pfc" => {
                let mut on = Priorities::NONE;
                for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let p: u8 = p.parse().map_err(|_| bad(ReplayFault::Priority))?;
                    if p > 7 {
                        return Err(bad(ReplayFault::PriorityAbove7));
                    }
                    on = on.with(p);
                }
                config.pfc_cap = Some(8);
                config.pfc_enabled = Some(on);
            }
            "trust" => {
                let order = value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| match s {
                        "dscp" => Ok(crate::dcb::IEEE_8021QAZ_APP_SEL_DSCP),
                        "pcp" => Ok(crate::dcb::DCB_APP_SEL_PCP),
                        _ => Err(bad(ReplayFault::Trust)),
                    })
                    .collect::<Result<Vec<u8>, ReplayError>>()?;
                config.trust_order = Some(order);
            }
            "app" => {
                let parts: Vec<&str> = value.split_whitespace().collect();
                let [sel, dscp, prio] = parts.as_slice() else {
                    return Err(bad(ReplayFault::App));
                };
                if *sel != "dscp" {
                    return Err(bad(ReplayFault::AppSelector));
                }
                let dscp: u16 = dscp.parse().map_err(|_| bad(ReplayFault::Dscp))?;
                let priority: u8 = prio.parse().map_err(|_| bad(ReplayFault::Priority))?;
                if dscp > 63 || priority > 7 {
                    return Err(bad(ReplayFault::AppRange));
                }
                config.apps.push(DcbApp {
                    selector: crate::dcb::IEEE_8021QAZ_APP_SEL_DSCP,
                    priority,
                    protocol: dscp,
                });
            }
            "prio_tc" => {
                ets(&mut config).prio_tc =
                    eight(value, 7).ok_or_else(|| bad(ReplayFault::EightPriorities))?
            }
            "tc_bw" => {
                ets(&mut config).tc_tx_bw =
                    eight(value, 100).ok_or_else(|| bad(ReplayFault::EightPercentages))?
            }
            "tc_tsa" => {
                let mut tsa = [0u8; 8];
                let words: Vec<&str> = value.split_whitespace().collect();
                if words.len() != 8 {
                    return Err(bad(ReplayFault::EightAlgorithms));
                }
                for (slot, w) in tsa.iter_mut().zip(words) {
                    *slot = match w {
                        "strict" => crate::dcb::TSA_STRICT,
                        "cbs" => crate::dcb::TSA_CB_SHAPER,
                        "ets" => crate::dcb::TSA_ETS,
                        "vendor" => crate::dcb::TSA_VENDOR,
                        _ => return Err(bad(ReplayFault::Algorithm)),
                    };
                }
                ets(&mut config).tc_tsa = tsa;
            }
            "prio2buffer" => {
                buffers(&mut config).prio2buffer =
                    eight(value, 7).ok_or_else(|| bad(ReplayFault::EightPriorities))?
            }
            "buffer_size" => {
                let sizes: Vec<u32> = value
                    .split_whitespace()
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad(ReplayFault::Size))?;
                buffers(&mut config).buffer_size =
                    sizes.try_into().map_err(|_| bad(ReplayFault::EightSizes))?;
            }
            "buffer_total" => {
                buffers(&mut config).total_size =
                    value.parse().map_err(|_| bad(ReplayFault::Size))?
            }
            "dcbx" => {
                use crate::dcb::*;
                config.dcbx = Some(match value {
                    "off" => 0,
                    "static" => DCB_CAP_DCBX_STATIC,
                    "host" => DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_CEE | DCB_CAP_DCBX_VER_IEEE,
                    "firmware" => DCB_CAP_DCBX_VER_CEE | DCB_CAP_DCBX_VER_IEEE,
                    "host_ieee" => DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_IEEE,
                    "host_cee" => DCB_CAP_DCBX_HOST | DCB_CAP_DCBX_VER_CEE,
                    "firmware_ieee" => DCB_CAP_DCBX_LLD_MANAGED | DCB_CAP_DCBX_VER_IEEE,
                    "firmware_cee" => DCB_CAP_DCBX_LLD_MANAGED | DCB_CAP_DCBX_VER_CEE,
                    _ => return Err(bad(ReplayFault::DcbxMode)),
                });
            }
            "peer" => {
                config.peer.standard = Some(match value {
                    "ieee" => crate::dcb::PeerStandard::Ieee,
                    "cee" => crate::dcb::PeerStandard::Cee,
                    _ => return Err(bad(ReplayFault::PeerStandard)),
                });
            }
            "peer_pfc" => {
                config.peer.pfc_enabled =
                    Some(priorities(value).ok_or_else(|| bad(ReplayFault::Priority))?)
            }
            "peer_app" => {
                let app = dscp_app(value).ok_or_else(|| bad(ReplayFault::PeerApp))?;
                config.peer.apps.get_or_insert_with(Vec::new).push(app);
            }
            "peer_prio_tc" => {
                config.peer.prio_tc =
                    Some(eight(value, 7).ok_or_else(|| bad(ReplayFault::EightPriorities))?)
            }
            _ => return Err(bad(ReplayFault::UnknownKey)),
        }
    }
    if !config.peer.is_empty() && config.peer.standard.is_none() {
        config.peer.standard = Some(crate::dcb::PeerStandard::Ieee);
    }
    Ok(config)
}

fn ets(config: &mut DcbConfig) -> &mut crate::dcb::Ets {
    config.ets.get_or_insert(crate::dcb::Ets {
        ets_cap: 8,
        ..crate::dcb::Ets::default()
    })
}

fn buffers(config: &mut DcbConfig) -> &mut crate::dcb::Buffers {
    config.buffers.get_or_insert_with(Default::default)
}

/// Eight whitespace-separated numbers, each at most `max`.
fn eight(value: &str, max: u8) -> Option<[u8; 8]> {
    let v: Vec<u8> = value
        .split_whitespace()
        .map(|w| w.parse::<u8>().ok().filter(|n| *n <= max))
        .collect::<Option<_>>()?;
    v.try_into().ok()
}

/// A comma-separated priority list; `None` for a value that is not a
/// priority.
fn priorities(value: &str) -> Option<Priorities> {
    value
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .try_fold(Priorities::NONE, |set, p| {
            let p = p.parse::<u8>().ok().filter(|p| *p <= 7)?;
            Some(set.with(p))
        })
}

/// `dscp <value> <priority>`.
fn dscp_app(value: &str) -> Option<DcbApp> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    let [sel, dscp, prio] = parts.as_slice() else {
        return None;
    };
    let dscp: u16 = dscp.parse().ok().filter(|d| *d <= 63)?;
    let priority: u8 = prio.parse().ok().filter(|p| *p <= 7)?;
    (*sel == "dscp").then_some(DcbApp {
        selector: crate::dcb::IEEE_8021QAZ_APP_SEL_DSCP,
        priority,
        protocol: dscp,
    })
}

impl DcbRead for DcbReplay {
    fn read_dcb(&mut self, netdev: &str) -> Result<DcbConfig, DcbError> {
        if netdev.contains('/') || netdev.starts_with('.') {
            return Err(DcbError::NoDevice);
        }
        let path = self.dir.join(format!("{netdev}.dcb"));
        match roce_host::fs::read_text_capped(&path, roce_host::fs::REPLAY_CAP) {
            Ok(text) => parse_dcb_replay(&text).map_err(|source| DcbError::Replay { path, source }),
            Err(e) if roce_host::errno::is_absent(&e) => Err(DcbError::Unsupported),
            Err(e) => Err(DcbError::File(crate::io_error(&path, &e))),
        }
    }
}

/// Reads netdevs sample after sample, keeping the ethtool name cache.
/// Calls one [`NetdevReader::read`] made to each of its parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    /// `pread`s of sysfs files.
    pub sysfs_reads: u64,
    /// [`EthtoolIo`] calls (each one `SIOCETHTOOL` ioctl on the live one):
    /// two per netdev in a steady sample (`ETHTOOL_GSSET_INFO`,
    /// `ETHTOOL_GSTATS`), one more (`ETHTOOL_GSTRINGS`) when the count
    /// changed.
    pub ethtool: u64,
    /// [`PauseRead`] calls (each one netlink request on the live one).
    pub pause: u64,
    /// [`DcbRead`] calls (each one netlink request on the live one).
    pub dcb: u64,
}

/// An [`EthtoolIo`] that counts the calls made through it.
struct Counted<'a> {
    io: &'a mut dyn EthtoolIo,
    calls: &'a mut u64,
}

impl EthtoolIo for Counted<'_> {
    fn ethtool(
        &mut self,
        netdev: &str,
        buf: &mut crate::ethtool::ReplyBuf,
    ) -> Result<(), EthtoolError> {
        *self.calls += 1;
        self.io.ethtool(netdev, buf)
    }
}

pub struct NetdevReader {
    options: ReaderOptions,
    ethtool: Option<Box<dyn EthtoolIo>>,
    pause: Option<Box<dyn PauseRead>>,
    dcb: Option<Box<dyn DcbRead>>,
    cache: StatsCache,
    files: crate::sysfs::SysfsFiles,
    /// Files read by [`crate::qos::read`] this sample.
    qos_reads: u64,
    /// The last QoS configuration read per netdev, served between reads.
    qos_cache: HashMap<String, QosCache>,
    /// The clock of [`NetdevReader::read`].
    started: Instant,
    calls: Calls,
    /// Whether the QoS configuration is read at all (`--no-collector.qos`
    /// turns it off: no file, no DCB request).
    qos: bool,
}

/// One netdev's QoS configuration as last read, and what the netdev looked
/// like then: a link that came up, a new carrier transition or another
/// driver (the netdev re-created) reads it again at once, since DCBX
/// learns the switch's view on link up and a driver reload resets the
/// NIC's settings.
struct QosCache {
    read_at: Duration,
    identity: QosIdentity,
    qos: crate::qos::RoceQos,
    dcqcn: Vec<crate::qos::DcqcnParam>,
    dcb: DcbOutcome,
    ecn: Option<crate::EcnConfig>,
}

#[derive(PartialEq, Eq)]
struct QosIdentity {
    driver: Option<String>,
    operstate: Option<String>,
    carrier_changes: Option<u64>,
}

impl NetdevReader {
    /// A reader with only the sysfs part; add the kernel parts with the
    /// `with_*` methods.
    pub fn new(options: ReaderOptions) -> Self {
        let cache = StatsCache::new(options.raw_ethtool.clone());
        let files = crate::sysfs::SysfsFiles::new(options.sysfs.clone());
        NetdevReader {
            files,
            qos_reads: 0,
            qos_cache: HashMap::new(),
            started: Instant::now(),
            calls: Calls::default(),
            options,
            ethtool: None,
            pause: None,
            dcb: None,
            cache,
            qos: true,
        }
    }

    /// A reader that never reads the QoS configuration (DCB, DCQCN, CNP
    /// marking, rdma_cm ToS): its parts stay empty and DCB reads as not
    /// read.
    pub fn without_qos(mut self) -> Self {
        self.qos = false;
        self
    }

    pub fn with_ethtool(mut self, io: Box<dyn EthtoolIo>) -> Self {
        self.ethtool = Some(io);
        self
    }

    pub fn with_pause(mut self, pause: Box<dyn PauseRead>) -> Self {
        self.pause = Some(pause);
        self
    }

    pub fn with_dcb(mut self, dcb: Box<dyn DcbRead>) -> Self {
        self.dcb = Some(dcb);
        self
    }

    /// What the last [`NetdevReader::read`] called.
    pub fn last_calls(&self) -> Calls {
        self.calls
    }

    pub fn sysfs(&self) -> &Path {
        &self.options.sysfs
    }

    /// Reads every target. Per-netdev problems are appended to `errors`
    /// and recorded in the netdev's outcome.
    pub fn read(
        &mut self,
        targets: &[NetdevToRead],
        errors: &mut Vec<HostError>,
    ) -> NetdevSnapshot {
        let now = self.started.elapsed();
        self.read_at(targets, now, errors)
    }

    /// [`NetdevReader::read`] at `now`, the sample's monotonic time: the
    /// QoS configuration of a netdev is read again once
    /// [`ReaderOptions::qos_interval`] has passed since its last read.
    pub fn read_at(
        &mut self,
        targets: &[NetdevToRead],
        now: Duration,
        errors: &mut Vec<HostError>,
    ) -> NetdevSnapshot {
        self.calls = Calls::default();
        let mut snapshot = NetdevSnapshot::default();
        for target in targets {
            snapshot.netdevs.push(self.read_one(target, now, errors));
        }
        let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
        self.cache.retain(&names);
        self.files.retain(&names);
        self.qos_cache.retain(|n, _| names.contains(&n.as_str()));
        self.calls.sysfs_reads = self.files.take_reads() + std::mem::take(&mut self.qos_reads);
        snapshot
    }

    fn read_one(
        &mut self,
        target: &NetdevToRead,
        now: Duration,
        errors: &mut Vec<HostError>,
    ) -> Netdev {
        let mut sys_errors = Vec::new();
        // The name of a netdev behind an RDMA port was read from the kernel
        // in this sample (GID attributes, the device's `net/` folder).
        let sys = self
            .files
            .read(&target.name, target.rdma.is_some(), &mut sys_errors);
        errors.extend(sys_errors.into_iter().map(HostError::File));
        let mut netdev = Netdev {
            name: target.name.clone(),
            rdma: target.rdma.clone(),
            mtu: sys.mtu,
            operstate: sys.operstate,
            speed_mbps: sys.speed_mbps,
            driver: sys.driver,
            carrier: sys.carrier,
            ..Netdev::default()
        };
        let identity = QosIdentity {
            driver: netdev.driver.clone(),
            operstate: netdev.operstate.clone(),
            carrier_changes: netdev.carrier.changes,
        };
        let fresh = self.qos_cache.get(&target.name).filter(|c| {
            c.identity == identity && now.saturating_sub(c.read_at) < self.options.qos_interval
        });
        if !self.qos {
            netdev.dcb = DcbOutcome::Disabled;
        } else if let Some(c) = fresh {
            netdev.qos = c.qos;
            netdev.dcqcn = c.dcqcn.clone();
            netdev.dcb = c.dcb.clone();
            netdev.ecn = c.ecn.clone();
            netdev.qos_age = Some(now.saturating_sub(c.read_at));
        } else {
            netdev.qos_age = Some(Duration::ZERO);
            let before = errors.len();
            let mut ecn_errors = Vec::new();
            netdev.ecn = self.files.read_ecn(&target.name, &mut ecn_errors);
            errors.extend(ecn_errors.into_iter().map(HostError::File));
            let clean =
                self.read_qos(target, sys.exists, &mut netdev, errors) && errors.len() == before;
            if clean {
                self.qos_cache.insert(
                    target.name.clone(),
                    QosCache {
                        read_at: now,
                        identity,
                        qos: netdev.qos,
                        dcqcn: netdev.dcqcn.clone(),
                        dcb: netdev.dcb.clone(),
                        ecn: netdev.ecn.clone(),
                    },
                );
            } else {
                // A failed read is tried again next sample, not served for
                // a whole interval.
                self.qos_cache.remove(&target.name);
            }
        }
        if let Some(io) = self.ethtool.as_deref_mut() {
            let mut counted = Counted {
                io,
                calls: &mut self.calls.ethtool,
            };
            netdev.ethtool = match self.cache.sample(&mut counted, &target.name) {
                Ok((stats, raw)) => {
                    netdev.stats = stats;
                    netdev.raw = raw;
                    ReadOutcome::Ok(())
                }
                Err(EthtoolError::Unsupported { .. }) => ReadOutcome::Unsupported,
                Err(e) => {
                    errors.push(HostError::request("ethtool", &e));
                    ReadOutcome::Failed(e.to_string())
                }
            };
        }
        if let Some(pause) = self.pause.as_deref_mut() {
            self.calls.pause += 1;
            match pause.read_pause(&target.name) {
                Ok(p) => netdev.pause = p,
                Err(e) => errors.push(HostError::request(
                    format!("{}: pause statistics", target.name),
                    e,
                )),
            }
        }
        netdev
    }

    /// Reads the QoS configuration of one netdev into `netdev`: whether it
    /// went without errors.
    fn read_qos(
        &mut self,
        target: &NetdevToRead,
        exists: bool,
        netdev: &mut Netdev,
        errors: &mut Vec<HostError>,
    ) -> bool {
        let before = errors.len();
        if exists {
            let mut qos_errors = Vec::new();
            netdev.qos = crate::qos::read(
                &self.options.sysfs,
                target.rdma.as_ref(),
                &mut qos_errors,
                &mut self.qos_reads,
            );
            netdev.dcqcn = crate::qos::read_dcqcn(
                &self.options.sysfs,
                &target.name,
                &mut qos_errors,
                &mut self.qos_reads,
            );
            (netdev.qos.cnp_dscp, netdev.qos.cnp_prio) = crate::qos::cnp_marking(
                &self.options.sysfs,
                &target.name,
                &netdev.dcqcn,
                &mut qos_errors,
            );
            errors.extend(qos_errors.into_iter().map(HostError::File));
        }
        if let Some(dcb) = self.dcb.as_deref_mut() {
            self.calls.dcb += 1;
            netdev.dcb = match dcb.read_dcb(&target.name) {
                Ok(c) => DcbOutcome::Ok(c),
                Err(DcbError::Unsupported) => DcbOutcome::Unsupported,
                Err(e) => {
                    errors.push(HostError::request(format!("{}: DCB", target.name), &e));
                    DcbOutcome::Failed(e.to_string())
                }
            };
        }
        exists && errors.len() == before
    }
}

#[cfg(test)]
mod tests;
