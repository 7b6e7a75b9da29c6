//! Congestion and lossless-Ethernet state of the netdevs behind RDMA ports:
//! ethtool statistics mapped to meanings (PFC pause per priority, pause
//! storms, discards, ...), DCB configuration (PFC, trust, APP), ECN enable,
//! MTU and link state. Plain data out, no Prometheus names: the exposition
//! names the families.
//!
//! Layers:
//! - [`ethtool`]: the `SIOCETHTOOL` string-set/statistics ioctl behind the
//!   [`ethtool::EthtoolIo`] trait (a fake and a replay of recorded
//!   `ethtool -S` text implement it too), and the per-netdev name cache.
//! - [`mapping`]: the one table from driver counter names to meanings.
//! - [`dcb`]: rtnetlink DCB (`RTM_GETDCB`/`DCB_CMD_IEEE_GET`) request bytes
//!   and the pure decoder of the reply.
//! - [`sysfs`]: MTU, operstate, speed and mlx5's ECN enable files.
//! - [`qos`]: rdma_cm's default ToS (configfs) and mlx5's CNP DSCP/priority.
//! - [`live`]: DCB and standard pause statistics over netlink
//!   (`roce-netlink`).
//! - [`reader`]: reads one sample of every selected netdev.
//!
//! Physical layer and device health (each reader reports what the driver
//! does not offer as absent, never as 0):
//! - [`fec`]: FEC mode and statistics (ethtool netlink `FEC_GET`), BER.
//! - [`module`]: module EEPROM (ethtool netlink `MODULE_EEPROM_GET`) and
//!   the SFF-8636, CMIS and SFF-8472 decoders.
//! - [`devlink`]: devlink health reporters.
//! - [`aer`]: PCIe AER counters of a PCI function (NICs and GPUs).
//! - [`genl`]: generic netlink family lookup and the hex replay format.
//! - [`phys`]: reads one sample of all of them.

#![deny(unsafe_code)]

pub mod aer;
pub mod dcb;
pub mod devlink;
pub mod error;
pub mod ethtool;
pub mod fec;
pub mod genl;
pub mod live;
pub mod mapping;
pub mod module;
pub mod phys;
pub mod qos;
pub mod reader;
pub mod sysfs;

pub use dcb::{DcbConfig, DcbError, Trust};
pub use error::NetdevError;
pub use ethtool::{EthtoolError, EthtoolIo, EthtoolStep};
pub use mapping::{FrameDirection, Meaning};
pub use reader::{NetdevReader, NetdevToRead, ReaderOptions};
pub use roce_host::HostError;

/// How often what a reader learned of a netdev's layout (its files, which
/// of them exist, its PCI function) is learned again although nothing said
/// it changed: files that appear later (AER once the driver enables it,
/// carrier counts after a kernel upgrade with a netdev kept) are found
/// within this time. A netdev removed or re-created shows sooner, through
/// its kept handles going stale or its PCI function changing.
pub const LAYOUT_REFRESH: std::time::Duration = std::time::Duration::from_secs(300);

/// Everything read about netdevs in one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NetdevSnapshot {
    /// One entry per selected netdev, in selection order.
    pub netdevs: Vec<Netdev>,
}

/// The RDMA port a netdev backs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaPortRef {
    pub device: String,
    pub port: u32,
}

/// One netdev in one sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Netdev {
    pub name: String,
    /// The RDMA port this netdev backs (`None` for `netdevs.extra` ones).
    pub rdma: Option<RdmaPortRef>,
    /// `/sys/class/net/<if>/mtu`.
    pub mtu: Option<u64>,
    /// `/sys/class/net/<if>/operstate` ("up", "down", ...).
    pub operstate: Option<String>,
    /// `/sys/class/net/<if>/speed` in Mb/s; `None` when unknown (-1, EINVAL
    /// on a link that is down).
    pub speed_mbps: Option<u64>,
    /// Kernel driver of the netdev (`device/driver` link), e.g. `mlx5_core`.
    pub driver: Option<String>,
    /// ECN enable per priority from mlx5's `ecn/roce_{np,rp}/enable/N`;
    /// `None` when the netdev has no such folder (every other driver).
    pub ecn: Option<EcnConfig>,
    /// What the host marks RoCE packets and CNPs with, where it says.
    pub qos: qos::RoceQos,
    /// DCQCN parameters the kernel exposes (MLNX_OFED sysfs or upstream
    /// debugfs); empty where neither is there or readable.
    pub dcqcn: Vec<qos::DcqcnParam>,
    /// ethtool statistics with a known meaning, summed per meaning.
    pub stats: Vec<MappedStat>,
    /// Raw ethtool counters named in `netdevs.export_raw_ethtool`.
    pub raw: Vec<RawStat>,
    /// How reading ethtool statistics went.
    pub ethtool: ReadOutcome,
    /// Standard pause statistics (ethtool netlink `ETHTOOL_A_PAUSE_STATS`).
    pub pause: Option<PauseStats>,
    /// DCB configuration (PFC, APP, trust).
    pub dcb: DcbOutcome,
    /// How old the QoS configuration above (`qos`, `dcqcn`, `dcb`) is:
    /// zero when read in this sample, else the time since the read it was
    /// kept from (it is read every `qos_interval`).
    pub qos_age: Option<std::time::Duration>,
    /// Carrier transition counters (sysfs).
    pub carrier: CarrierCounts,
}

/// Carrier transitions of a netdev since it was created: each `None` when
/// the kernel has no such file (`carrier_up_count`/`_down_count` came in
/// 4.16).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CarrierCounts {
    /// `carrier_changes`, read only where the kernel counts no directions:
    /// elsewhere it is `up + down`.
    pub changes: Option<u64>,
    pub up: Option<u64>,
    pub down: Option<u64>,
}

impl CarrierCounts {
    /// Transitions either way: the two directions summed where the kernel
    /// counts them, else `carrier_changes`.
    pub fn transitions(&self) -> Option<u64> {
        match (self.up, self.down) {
            (None, None) => self.changes,
            (up, down) => Some(up.unwrap_or(0).saturating_add(down.unwrap_or(0))),
        }
    }
}

/// The result of one kind of read on one netdev: what it gave (`()` when
/// the values land elsewhere, as the ethtool statistics do), or why not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ReadOutcome<T = ()> {
    /// Read.
    Ok(T),
    /// Not attempted (turned off, or the paths are not the running kernel's).
    #[default]
    Disabled,
    /// The netdev or driver does not offer it (EOPNOTSUPP, ...; for DCB, no
    /// `dcbnl_ops`): not a failure.
    Unsupported,
    /// Failed, with the reason.
    Failed(String),
}

/// DCB read back for one netdev.
pub type DcbOutcome = ReadOutcome<DcbConfig>;

/// One ethtool statistic with a meaning, in base units (seconds for
/// durations).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MappedStat {
    pub meaning: Meaning,
    pub value: StatValue,
}

/// A counter value: integer counts, or seconds converted from µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StatValue {
    Count(u64),
    Seconds(f64),
}

/// A raw ethtool counter exported under its driver name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawStat {
    pub name: String,
    pub value: u64,
}

/// IEEE 802.3 pause frame counts (`struct ethtool_pause_stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PauseStats {
    pub tx_frames: Option<u64>,
    pub rx_frames: Option<u64>,
}

/// ECN enable per priority (0..=7) for the notification point (`roce_np`)
/// and the reaction point (`roce_rp`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EcnConfig {
    /// (priority, enabled) in priority order; only files that exist.
    pub np: Vec<(u8, bool)>,
    pub rp: Vec<(u8, bool)>,
}

/// A failed read of `path`: the errno when the kernel gave one; otherwise
/// (text that is not UTF-8) the reason, as a content error.
pub(crate) fn io_error(path: &std::path::Path, e: &std::io::Error) -> roce_host::ReadError {
    if e.raw_os_error().is_some() {
        roce_host::ReadError::io(path, e)
    } else {
        roce_host::ReadError::parse(path, e.to_string())
    }
}
