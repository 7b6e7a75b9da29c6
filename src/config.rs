//! The YAML configuration file (`--config.file`). Every key is optional and
//! zero configuration works; unknown keys are errors, reported with line and
//! column.
//!
//! YAML is parsed with `serde-saphyr`: `serde_yaml` is deprecated and
//! unmaintained, and `serde_yml` carries RUSTSEC-2025-0067/0068; saphyr is
//! pure Rust, maintained, built to never panic on malformed input, and its
//! errors carry line, column and a snippet of the offending text.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Time between samples (`5s`), at least [`MIN_SAMPLE_INTERVAL`].
    #[serde(deserialize_with = "sample_interval")]
    pub sample_interval: Duration,
    /// Which RDMA devices to read; an excluded device is never opened.
    pub devices: DeviceSelection,
    /// Netdevs read beside those that back an RDMA port, and raw ethtool
    /// counters to export.
    pub netdevs: NetdevSelection,
    /// Sources that ask the running kernel (netlink, ioctl). `auto` turns
    /// them on only when `--path.sysfs` is the running kernel's `/sys`.
    pub sources: SourceToggles,
    /// Active verbs probes.
    pub probes: ProbeConfig,
    /// Probes between hosts (off by default).
    pub peer_probes: PeerProbeConfig,
    /// Facts about the intended fabric, used by the rules.
    pub expect: Expectations,
    /// Rule thresholds and windows.
    pub rules: RulesConfig,
    /// HTTP server limits.
    pub web: WebLimits,
    /// What NCCL jobs on this host really used, from their debug logs and
    /// Inspector output (off by default).
    pub nccl: NcclConfig,
    /// Groups of series exported (read at start; `--collector.<group>` and
    /// `--no-collector.<group>` override them).
    pub metrics: crate::exposition::groups::Groups,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sample_interval: Duration::from_secs(5),
            devices: DeviceSelection::default(),
            netdevs: NetdevSelection::default(),
            sources: SourceToggles::default(),
            probes: ProbeConfig::default(),
            peer_probes: PeerProbeConfig::default(),
            expect: Expectations::default(),
            rules: RulesConfig::default(),
            web: WebLimits::default(),
            nccl: NcclConfig::default(),
            metrics: crate::exposition::groups::Groups::default(),
        }
    }
}

/// The NCCL source: directories NCCL jobs write into, read incrementally.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NcclConfig {
    pub enabled: bool,
    /// Where jobs write `NCCL_DEBUG=INFO` logs (`NCCL_DEBUG_FILE=<dir>/nccl.%h.%p.log`).
    pub log_dir: Option<std::path::PathBuf>,
    /// Where the NCCL Inspector writes (`NCCL_INSPECTOR_DUMP_DIR`), JSON or
    /// its Prometheus-mode `.prom` files.
    pub inspector_dir: Option<std::path::PathBuf>,
    /// Time between reads of the directories (the source's own cadence;
    /// between reads it hands on what it has).
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
    /// How long a transport, version or bandwidth sample stays reported.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// A file not written for this long belongs to a finished job and is
    /// forgotten.
    #[serde(deserialize_with = "duration")]
    pub idle_expiry: Duration,
    /// Files tracked per directory (the most recently written).
    #[serde(deserialize_with = "at_least_one")]
    pub max_files: usize,
    /// Bytes read per directory per read.
    #[serde(deserialize_with = "at_least_one_u64")]
    pub max_bytes_per_read: u64,
    /// Collectives smaller than this are not bandwidth samples.
    #[serde(deserialize_with = "at_least_one_u64")]
    pub busbw_min_bytes: u64,
    /// `nccl_busbw_below_line_rate` fires below this share of the line rate
    /// of the NICs NCCL used.
    #[serde(deserialize_with = "share")]
    pub min_line_rate_fraction: f64,
    /// Keep the pid of the NCCL process as a label (one series per job).
    pub job_labels: bool,
}

impl Default for NcclConfig {
    fn default() -> Self {
        NcclConfig {
            enabled: false,
            log_dir: None,
            inspector_dir: None,
            interval: Duration::from_secs(30),
            window: Duration::from_secs(15 * 60),
            idle_expiry: Duration::from_secs(3600),
            max_files: 1024,
            max_bytes_per_read: 8 << 20,
            busbw_min_bytes: roce_nccl::aggregate::DEFAULT_BUSBW_MIN_BYTES,
            min_line_rate_fraction: 0.7,
            job_labels: false,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeviceSelection {
    /// Device names or globs (`mlx5_*`); empty means every device.
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetdevSelection {
    /// Netdevs to read although no RDMA port uses them.
    pub extra: Vec<String>,
    /// Raw ethtool counter names exported as
    /// `roce_netdev_ethtool_stat_total{netdev,stat}`.
    pub export_raw_ethtool: Vec<String>,
    /// Folder of recorded `ethtool -S` output (`<netdev>.txt`) and DCB
    /// settings (`<netdev>.dcb`), replayed when the ethtool or DCB source is
    /// off because the paths are not the running kernel's (demo trees).
    /// The physical-layer sources replay from it too: `<netdev>.fec`,
    /// `<netdev>.eeprom`, `devlink-health.hex`.
    pub replay: Option<std::path::PathBuf>,
    /// How often each netdev's pluggable module EEPROM is read: modules are
    /// slow I2C devices (128 bytes a request at 100-400 kHz, some stretch
    /// the clock), and their readings change slowly.
    #[serde(deserialize_with = "duration")]
    pub module_interval: Duration,
}

impl Default for NetdevSelection {
    fn default() -> Self {
        NetdevSelection {
            extra: Vec::new(),
            export_raw_ethtool: Vec::new(),
            replay: None,
            module_interval: Duration::from_secs(300),
        }
    }
}

/// `auto`, `true` or `false`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Toggle {
    #[default]
    Auto,
    On,
    Off,
}

impl Toggle {
    /// Resolves `auto` against whether the paths are the running kernel's.
    pub fn enabled(self, live: bool) -> bool {
        match self {
            Toggle::Auto => live,
            Toggle::On => true,
            Toggle::Off => false,
        }
    }
}

impl<'de> Deserialize<'de> for Toggle {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(true) => Ok(Toggle::On),
            Raw::Bool(false) => Ok(Toggle::Off),
            Raw::Text(s) if s == "auto" => Ok(Toggle::Auto),
            Raw::Text(s) => Err(serde::de::Error::custom(format!(
                "expected auto, true or false, found {s:?}"
            ))),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceToggles {
    /// Hardware counters through RDMA netlink (`RDMA_NLDEV_CMD_STAT_GET`);
    /// when off or failing, `hw_counters/` in sysfs is read instead.
    pub rdma_netlink: Toggle,
    /// ethtool statistics through `SIOCETHTOOL` and ethtool netlink.
    pub ethtool: Toggle,
    /// PFC and APP configuration through rtnetlink DCB.
    pub dcb: Toggle,
    /// FEC mode and statistics through ethtool netlink (`FEC_GET`).
    pub fec: Toggle,
    /// Pluggable module EEPROM through ethtool netlink
    /// (`MODULE_EEPROM_GET`), every `netdevs.module_interval`.
    pub module_eeprom: Toggle,
    /// devlink health reporters of the NICs (devlink generic netlink).
    pub devlink: Toggle,
    /// GPU names and UUIDs from NVML (`libnvidia-ml.so.1`, loaded at run
    /// time); GPUs and their placement come from sysfs either way.
    pub nvml: Toggle,
    /// Limit for one netlink request.
    #[serde(deserialize_with = "duration")]
    pub netlink_timeout: Duration,
}

impl Default for SourceToggles {
    fn default() -> Self {
        SourceToggles {
            rdma_netlink: Toggle::Auto,
            ethtool: Toggle::Auto,
            dcb: Toggle::Auto,
            fec: Toggle::Auto,
            module_eeprom: Toggle::Auto,
            devlink: Toggle::Auto,
            nvml: Toggle::Auto,
            netlink_timeout: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbeConfig {
    pub enabled: Toggle,
    #[serde(deserialize_with = "duration")]
    pub interval: Duration,
    /// `auto` or a GID index.
    pub gid_index: GidIndex,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            enabled: Toggle::Auto,
            interval: Duration::from_secs(10),
            gid_index: GidIndex::Auto,
        }
    }
}

/// `peer_probes:`: UD probes to other exporters' responders
/// (`roce_probe::peer`; design in docs/peer-probes.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeerProbeConfig {
    /// Off by default: on, each active port keeps a responder and
    /// `/peer-probe/endpoints` publishes it.
    pub enabled: bool,
    /// Peer exporters: `host:port` or `http(s)://host:port`.
    pub peers: Vec<String>,
    /// A DNS name whose A/AAAA records are the peers (`name:port`).
    pub dns: Option<String>,
    /// A file of peer addresses, one per line (`#` comments), re-read when
    /// its modification time changes.
    pub file: Option<std::path::PathBuf>,
    /// Probe every peer port, not only those on the same rail.
    pub all_to_all: bool,
    /// Probe packets per second per local port (capped at 50).
    pub packets_per_second: u32,
    /// Peers probed per round and port (capped at 16).
    pub sample: usize,
    /// How long a probe waits for its echo.
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// How often peers' endpoints are fetched again (and at once after a
    /// peer's probes start failing).
    #[serde(deserialize_with = "duration")]
    pub refresh: Duration,
}

impl Default for PeerProbeConfig {
    fn default() -> Self {
        PeerProbeConfig {
            enabled: false,
            peers: Vec::new(),
            dns: None,
            file: None,
            all_to_all: false,
            packets_per_second: 5,
            sample: 8,
            timeout: Duration::from_millis(500),
            refresh: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GidIndex {
    /// The RoCE v2 GID NCCL would use: IPv4-mapped first.
    #[default]
    Auto,
    Index(u32),
}

impl<'de> Deserialize<'de> for GidIndex {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Index(u32),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Index(i) => Ok(GidIndex::Index(i)),
            Raw::Text(s) if s == "auto" => Ok(GidIndex::Auto),
            Raw::Text(s) => Err(serde::de::Error::custom(format!(
                "expected auto or a GID index, found {s:?}"
            ))),
        }
    }
}

/// What the operator intends the fabric to be. Unset facts are not checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Expectations {
    /// Netdev MTU of every RoCE netdev (e.g. 9000).
    #[serde(deserialize_with = "opt_mtu")]
    pub mtu: Option<u32>,
    /// The priority RoCE traffic uses, with PFC on it (e.g. 3).
    #[serde(deserialize_with = "opt_priority")]
    pub pfc_priority: Option<u8>,
    /// Link rate of every active port, in Gb/s (e.g. 400).
    #[serde(deserialize_with = "opt_link_rate")]
    pub link_rate_gbps: Option<f64>,
    /// The `NCCL_IB_TC` the jobs on this host set (the whole IP traffic
    /// class byte, DSCP << 2, e.g. 106): the DSCP of their RoCE traffic.
    /// Unset: the rdma_cm default ToS where configfs shows one, else
    /// NCCL's default 0.
    pub nccl_ib_tc: Option<u8>,
    /// The RDMA devices this host should have: a count (`8`) or the names
    /// (`[mlx5_0, mlx5_1]`). Devices seen since start are expected anyway.
    pub devices: Option<ExpectedDevices>,
}

/// `expect.devices`: how many RDMA devices, or which.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ExpectedDevices {
    Count(usize),
    Names(Vec<String>),
}

/// Thresholds of the rules. Every rule has a default; a window is how much
/// history a rate rule looks at. Any key may be given alone: `rules:
/// {retransmissions: {per_second: 50}}` keeps that rule's default window.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(try_from = "RawRules")]
pub struct RulesConfig {
    /// A finding clears only after its condition stayed false this long.
    #[serde(deserialize_with = "duration")]
    pub hold: Duration,
    /// Rule ids to turn off.
    pub disabled: Vec<String>,
    /// `link_downed` increments within the window.
    pub link_flap: WindowRule,
    /// Symbol errors above this bit error rate over the window.
    pub symbol_errors: BerRule,
    /// Retransmissions per second (ACK timeouts are `ack_timeouts`).
    pub retransmissions: RateRule,
    /// ACK timeouts: any within the window is a warning (each one stalls a
    /// QP for the whole timeout, about 4 s at NCCL's default
    /// NCCL_IB_TIMEOUT=20); above `per_second` over the window and in both
    /// of its halves, critical.
    pub ack_timeouts: RateRule,
    /// Out-of-sequence and sequence-error NAKs per second.
    pub sequence_errors: RateRule,
    /// Receive drops for lack of buffers or WQEs per second.
    pub out_of_buffer: RateRule,
    /// Notification point role: ECN-marked RoCE packets per RoCE packet
    /// received.
    pub receiver_congested: TrafficRatioRule,
    /// Reaction point role: CNPs handled per RoCE packet sent.
    pub sender_throttled: TrafficRatioRule,
    /// ECN-marked RoCE packets arriving (above `per_second`) while no CNP is
    /// sent: the notification point is off.
    pub cnp_not_sent: RateRule,
    /// Share of the CNPs received that the reaction point ignored.
    pub cnp_ignored: TrafficRatioRule,
    /// Smallest netdev MTU of a RoCE netdev when `expect.mtu` is not set.
    pub mtu_below_jumbo: MtuRule,
    /// A storm: a priority paused for nearly the whole window, or the NIC's
    /// storm detector stopping its pause frames.
    pub pfc_storm: PfcStormRule,
    /// Share of the window a priority may be paused by the link partner.
    pub pfc_pause_received: PfcStormRule,
    /// Share of the window this NIC may pause a priority of its partner.
    pub pfc_pause_sent: PfcStormRule,
    /// Discards on a PFC-enabled (lossless) priority per second.
    pub lossless_discards: RateRule,
    /// Other NIC discards (port-wide, lossy traffic) per second.
    pub discards_growing: RateRule,
    /// Drops in the host's receive rings (rx_out_of_buffer, rx_ring) per
    /// second.
    pub host_ring_drops: RateRule,
    /// Share of failed probe rounds over the window.
    pub probe_failures: ProbeFailureRule,
    /// Mean probe RTT over the window against the mean before it.
    pub probe_latency_regression: ProbeLatencyRule,
    /// Pre-FEC bit error rate (FEC corrected bits over the bits the link
    /// carried) above `max_ber` over the window.
    pub fec_ber: BerRule,
    /// Uncorrectable FEC codewords within the window.
    pub fec_uncorrectable: WindowRule,
    /// AER errors on a NIC's or GPU's PCIe link within the window.
    pub pcie_aer: WindowRule,
    /// devlink health reporter errors within the window.
    pub devlink_health: WindowRule,
    /// A module lane whose Rx power is below its siblings' median divided
    /// by `factor` (2 = 3 dB).
    pub module_lane_imbalance: LaneRule,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaneRule {
    pub factor: f64,
}

impl Default for RulesConfig {
    fn default() -> Self {
        let minute = Duration::from_secs(60);
        RulesConfig {
            hold: Duration::from_secs(60),
            disabled: Vec::new(),
            link_flap: WindowRule {
                window: Duration::from_secs(600),
            },
            symbol_errors: BerRule {
                window: Duration::from_secs(300),
                max_ber: 1e-12,
            },
            retransmissions: RateRule {
                window: minute,
                per_second: 10.0,
            },
            ack_timeouts: RateRule {
                window: Duration::from_secs(300),
                per_second: 0.1,
            },
            sequence_errors: RateRule {
                window: minute,
                per_second: 10.0,
            },
            out_of_buffer: RateRule {
                window: minute,
                per_second: 1.0,
            },
            // Switches mark with a probability that reaches its maximum (often
            // 10-20 %) at the queue's upper threshold: a third of the traffic
            // marked over a minute means the queue stays above it, DCQCN
            // does not bring the senders down to the drain rate.
            receiver_congested: TrafficRatioRule {
                window: minute,
                max_ratio: 0.3,
                min_packets_per_second: 1000.0,
            },
            // The notification point sends at most one CNP per QP per CNP
            // interval (mlx5 ecn/roce_np/min_time_between_cnps): healthy
            // incast stays around 1 % of the packets sent.
            sender_throttled: TrafficRatioRule {
                window: minute,
                max_ratio: 0.05,
                min_packets_per_second: 1000.0,
            },
            cnp_not_sent: RateRule {
                window: minute,
                per_second: 10.0,
            },
            cnp_ignored: TrafficRatioRule {
                window: minute,
                max_ratio: 0.1,
                min_packets_per_second: 1.0,
            },
            mtu_below_jumbo: MtuRule {
                min_mtu: ROCE_4096_MIN_NETDEV_MTU,
            },
            pfc_storm: PfcStormRule {
                window: Duration::from_secs(30),
                pause_ratio: 0.9,
            },
            pfc_pause_received: PfcStormRule {
                window: minute,
                pause_ratio: 0.2,
            },
            pfc_pause_sent: PfcStormRule {
                window: minute,
                pause_ratio: 0.05,
            },
            lossless_discards: RateRule {
                window: minute,
                per_second: 0.0,
            },
            fec_ber: BerRule {
                window: Duration::from_secs(300),
                max_ber: 1e-5,
            },
            fec_uncorrectable: WindowRule {
                window: Duration::from_secs(600),
            },
            pcie_aer: WindowRule {
                window: Duration::from_secs(600),
            },
            devlink_health: WindowRule {
                window: Duration::from_secs(600),
            },
            module_lane_imbalance: LaneRule { factor: 2.0 },
            discards_growing: RateRule {
                window: minute,
                per_second: 100.0,
            },
            host_ring_drops: RateRule {
                window: minute,
                per_second: 100.0,
            },
            probe_failures: ProbeFailureRule {
                window: minute,
                max_ratio: 0.2,
            },
            probe_latency_regression: ProbeLatencyRule {
                window: Duration::from_secs(300),
                factor: 3.0,
            },
        }
    }
}

/// The smallest netdev MTU whose RoCE path MTU is 4096: the kernel derives
/// the RoCE MTU from the netdev MTU minus 96 header bytes (`iboe_get_mtu()`
/// in include/rdma/ib_addr.h: GRH 40 + UDP 8 + BTH 12 + XRC 4 +
/// AtomicETH 28 + ICRC 4, sizes from include/rdma/ib_pack.h), then rounds
/// down to 4096, 2048, 1024, ... So 4096 + 96 = 4192; the usual 1500 gives
/// RoCE MTU 1024.
pub const ROCE_4096_MIN_NETDEV_MTU: u64 = 4192;

/// Header bytes the kernel takes off the netdev MTU for RoCE
/// (`iboe_get_mtu()`, see [`ROCE_4096_MIN_NETDEV_MTU`]).
pub const ROCE_HEADER_BYTES: u64 = 96;

impl RulesConfig {
    /// The longest window any rule looks at: how much history to keep.
    pub fn longest_window(&self) -> Duration {
        [
            self.link_flap.window,
            self.symbol_errors.window,
            self.retransmissions.window,
            self.ack_timeouts.window,
            self.sequence_errors.window,
            self.out_of_buffer.window,
            self.receiver_congested.window,
            self.sender_throttled.window,
            self.cnp_not_sent.window,
            self.cnp_ignored.window,
            self.pfc_storm.window,
            self.pfc_pause_received.window,
            self.pfc_pause_sent.window,
            self.lossless_discards.window,
            self.discards_growing.window,
            self.host_ring_drops.window,
            self.probe_failures.window,
            // The latency baseline is the probe's own cumulative mean, so
            // its window needs no more history than itself.
            self.probe_latency_regression.window,
            self.hold,
        ]
        .into_iter()
        .max()
        .unwrap_or(Duration::from_secs(60))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowRule {
    pub window: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateRule {
    pub window: Duration,
    /// Events per second above which the rule fires.
    pub per_second: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrafficRatioRule {
    pub window: Duration,
    /// Events per packet (0..1) above which the rule fires.
    pub max_ratio: f64,
    /// Below this many packets per second (the denominator) the ratio says
    /// nothing and the rule stays silent: an idle port.
    pub min_packets_per_second: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MtuRule {
    /// Netdev MTU below which the rule fires (4192: RoCE MTU 4096).
    pub min_mtu: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PfcStormRule {
    pub window: Duration,
    /// Share of the window (0..1) one priority may be paused in one
    /// direction before the rule fires.
    pub pause_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeFailureRule {
    pub window: Duration,
    /// Share of probe rounds (0..1) that may fail within the window.
    pub max_ratio: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeLatencyRule {
    pub window: Duration,
    /// How many times the earlier mean RTT the window's mean may reach.
    pub factor: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BerRule {
    pub window: Duration,
    /// Bit error rate above which the rule fires (1e-12: IBTA's floor).
    pub max_ber: f64,
}

/// `rules:` as written: every key optional, merged over the defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawRules {
    #[serde(deserialize_with = "opt_duration")]
    hold: Option<Duration>,
    disabled: Option<Vec<String>>,
    link_flap: Option<RawRule>,
    symbol_errors: Option<RawRule>,
    retransmissions: Option<RawRule>,
    ack_timeouts: Option<RawRule>,
    sequence_errors: Option<RawRule>,
    out_of_buffer: Option<RawRule>,
    receiver_congested: Option<RawRule>,
    sender_throttled: Option<RawRule>,
    cnp_not_sent: Option<RawRule>,
    cnp_ignored: Option<RawRule>,
    mtu_below_jumbo: Option<RawRule>,
    pfc_storm: Option<RawRule>,
    pfc_pause_received: Option<RawRule>,
    pfc_pause_sent: Option<RawRule>,
    lossless_discards: Option<RawRule>,
    discards_growing: Option<RawRule>,
    host_ring_drops: Option<RawRule>,
    probe_failures: Option<RawRule>,
    probe_latency_regression: Option<RawRule>,
    fec_ber: Option<RawRule>,
    fec_uncorrectable: Option<RawRule>,
    pcie_aer: Option<RawRule>,
    devlink_health: Option<RawRule>,
    module_lane_imbalance: Option<RawRule>,
}

/// One rule's overrides. Which keys a rule takes is checked when merging.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawRule {
    #[serde(deserialize_with = "opt_duration")]
    window: Option<Duration>,
    #[serde(deserialize_with = "opt_per_second")]
    per_second: Option<f64>,
    #[serde(deserialize_with = "opt_ber")]
    max_ber: Option<f64>,
    #[serde(deserialize_with = "opt_min_mtu")]
    min_mtu: Option<u64>,
    #[serde(deserialize_with = "opt_share")]
    pause_ratio: Option<f64>,
    #[serde(deserialize_with = "opt_share")]
    max_ratio: Option<f64>,
    #[serde(deserialize_with = "opt_per_second")]
    min_packets_per_second: Option<f64>,
    #[serde(deserialize_with = "opt_factor")]
    factor: Option<f64>,
}

impl RawRule {
    /// The keys given, by name.
    fn given(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.window.is_some() {
            keys.push("window");
        }
        if self.per_second.is_some() {
            keys.push("per_second");
        }
        if self.max_ber.is_some() {
            keys.push("max_ber");
        }
        if self.min_mtu.is_some() {
            keys.push("min_mtu");
        }
        if self.pause_ratio.is_some() {
            keys.push("pause_ratio");
        }
        if self.max_ratio.is_some() {
            keys.push("max_ratio");
        }
        if self.min_packets_per_second.is_some() {
            keys.push("min_packets_per_second");
        }
        if self.factor.is_some() {
            keys.push("factor");
        }
        keys
    }
}

impl TryFrom<RawRules> for RulesConfig {
    type Error = String;

    fn try_from(raw: RawRules) -> Result<Self, String> {
        let mut c = RulesConfig::default();
        if let Some(h) = raw.hold {
            c.hold = h;
        }
        if let Some(d) = raw.disabled {
            c.disabled = d;
        }
        let window = |rule: &Option<RawRule>, into: &mut Duration| {
            if let Some(w) = rule.as_ref().and_then(|r| r.window) {
                *into = w;
            }
        };
        window(&raw.link_flap, &mut c.link_flap.window);
        window(&raw.symbol_errors, &mut c.symbol_errors.window);
        if let Some(b) = raw.symbol_errors.as_ref().and_then(|r| r.max_ber) {
            c.symbol_errors.max_ber = b;
        }
        for (rule, into) in [
            (&raw.retransmissions, &mut c.retransmissions),
            (&raw.ack_timeouts, &mut c.ack_timeouts),
            (&raw.sequence_errors, &mut c.sequence_errors),
            (&raw.out_of_buffer, &mut c.out_of_buffer),
            (&raw.cnp_not_sent, &mut c.cnp_not_sent),
            (&raw.lossless_discards, &mut c.lossless_discards),
            (&raw.discards_growing, &mut c.discards_growing),
            (&raw.host_ring_drops, &mut c.host_ring_drops),
        ] {
            window(rule, &mut into.window);
            if let Some(p) = rule.as_ref().and_then(|r| r.per_second) {
                into.per_second = p;
            }
        }
        for (rule, into) in [
            (&raw.receiver_congested, &mut c.receiver_congested),
            (&raw.sender_throttled, &mut c.sender_throttled),
            (&raw.cnp_ignored, &mut c.cnp_ignored),
        ] {
            window(rule, &mut into.window);
            if let Some(r) = rule.as_ref().and_then(|r| r.max_ratio) {
                into.max_ratio = r;
            }
            if let Some(m) = rule.as_ref().and_then(|r| r.min_packets_per_second) {
                into.min_packets_per_second = m;
            }
        }
        for (rule, into) in [
            (&raw.pfc_storm, &mut c.pfc_storm),
            (&raw.pfc_pause_received, &mut c.pfc_pause_received),
            (&raw.pfc_pause_sent, &mut c.pfc_pause_sent),
        ] {
            window(rule, &mut into.window);
            if let Some(r) = rule.as_ref().and_then(|r| r.pause_ratio) {
                into.pause_ratio = r;
            }
        }
        window(&raw.probe_failures, &mut c.probe_failures.window);
        if let Some(r) = raw.probe_failures.as_ref().and_then(|r| r.max_ratio) {
            c.probe_failures.max_ratio = r;
        }
        window(
            &raw.probe_latency_regression,
            &mut c.probe_latency_regression.window,
        );
        if let Some(f) = raw.probe_latency_regression.as_ref().and_then(|r| r.factor) {
            c.probe_latency_regression.factor = f;
        }
        window(&raw.fec_ber, &mut c.fec_ber.window);
        if let Some(b) = raw.fec_ber.as_ref().and_then(|r| r.max_ber) {
            c.fec_ber.max_ber = b;
        }
        window(&raw.fec_uncorrectable, &mut c.fec_uncorrectable.window);
        window(&raw.pcie_aer, &mut c.pcie_aer.window);
        window(&raw.devlink_health, &mut c.devlink_health.window);
        if let Some(f) = raw.module_lane_imbalance.as_ref().and_then(|r| r.factor) {
            c.module_lane_imbalance.factor = f;
        }
        if let Some(m) = raw.mtu_below_jumbo.as_ref().and_then(|r| r.min_mtu) {
            c.mtu_below_jumbo.min_mtu = m;
        }
        // A key a rule does not take is an error, not silently ignored.
        let rate: &[&str] = &["window", "per_second"];
        let ratio: &[&str] = &["window", "max_ratio", "min_packets_per_second"];
        let pause: &[&str] = &["window", "pause_ratio"];
        let misplaced = [
            ("link_flap", &raw.link_flap, &["window"][..]),
            (
                "symbol_errors",
                &raw.symbol_errors,
                &["window", "max_ber"][..],
            ),
            ("retransmissions", &raw.retransmissions, rate),
            ("ack_timeouts", &raw.ack_timeouts, rate),
            ("sequence_errors", &raw.sequence_errors, rate),
            ("out_of_buffer", &raw.out_of_buffer, rate),
            ("receiver_congested", &raw.receiver_congested, ratio),
            ("sender_throttled", &raw.sender_throttled, ratio),
            ("cnp_not_sent", &raw.cnp_not_sent, rate),
            ("cnp_ignored", &raw.cnp_ignored, ratio),
            ("mtu_below_jumbo", &raw.mtu_below_jumbo, &["min_mtu"][..]),
            ("pfc_storm", &raw.pfc_storm, pause),
            ("pfc_pause_received", &raw.pfc_pause_received, pause),
            ("pfc_pause_sent", &raw.pfc_pause_sent, pause),
            ("lossless_discards", &raw.lossless_discards, rate),
            ("discards_growing", &raw.discards_growing, rate),
            ("host_ring_drops", &raw.host_ring_drops, rate),
            (
                "probe_failures",
                &raw.probe_failures,
                &["window", "max_ratio"][..],
            ),
            (
                "probe_latency_regression",
                &raw.probe_latency_regression,
                &["window", "factor"][..],
            ),
            ("fec_ber", &raw.fec_ber, &["window", "max_ber"][..]),
            ("fec_uncorrectable", &raw.fec_uncorrectable, &["window"][..]),
            ("pcie_aer", &raw.pcie_aer, &["window"][..]),
            ("devlink_health", &raw.devlink_health, &["window"][..]),
            (
                "module_lane_imbalance",
                &raw.module_lane_imbalance,
                &["factor"][..],
            ),
        ]
        .into_iter()
        .find_map(|(name, rule, takes)| {
            let bad = rule
                .as_ref()?
                .given()
                .into_iter()
                .find(|k| !takes.contains(k))?;
            Some(format!(
                "rules.{name}.{bad} is not a setting of this rule (it takes: {})",
                takes.join(", ")
            ))
        });
        match misplaced {
            Some(e) => Err(e),
            None => Ok(c),
        }
    }
}

fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebLimits {
    /// Most requests answered at once; one more is answered 503 at once.
    #[serde(deserialize_with = "at_least_one")]
    pub max_requests: usize,
    /// Most connections open at once; at the cap a new connection closes
    /// the open one that has waited longest for a request.
    #[serde(deserialize_with = "at_least_one")]
    pub max_connections: usize,
    /// A client must send its request headers within this time.
    #[serde(deserialize_with = "duration")]
    pub header_read_timeout: Duration,
    /// Largest request (headers) accepted, at least
    /// [`MIN_REQUEST_BYTES`].
    #[serde(deserialize_with = "request_bytes")]
    pub max_request_bytes: usize,
    /// Longest a response may go without the client taking a byte of it
    /// (its receive window and the socket buffers full); then the
    /// connection is cut. A slow but reading client is not affected.
    #[serde(deserialize_with = "duration")]
    pub write_stall_timeout: Duration,
}

impl Default for WebLimits {
    fn default() -> Self {
        WebLimits {
            max_requests: 40,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            max_request_bytes: 16 * 1024,
            write_stall_timeout: Duration::from_secs(10),
        }
    }
}

/// The longest duration any setting takes. humantime accepts up to
/// `u64::MAX` seconds, and the exporter adds its durations to each other and
/// to the monotonic clock (the sampler's next tick and history retention,
/// the probe schedule, hyper's header deadline, the netlink deadline): far
/// beyond this such a sum overflows, which panics. No interval, window or
/// timeout of the exporter has a use beyond a year.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// `5s`, `500ms`, `1m30s`; above zero and at most [`MAX_DURATION`].
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    let parsed = humantime::parse_duration(s.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration {s:?} ({e}); write e.g. 5s, 500ms, 1m"
        ))
    })?;
    if parsed.is_zero() {
        return Err(serde::de::Error::custom("duration must be above zero"));
    }
    if parsed > MAX_DURATION {
        return Err(serde::de::Error::custom(format!(
            "duration {s:?} is above the longest supported, 365d"
        )));
    }
    Ok(parsed)
}

/// Shortest `sample_interval`: below it the exporter would load the NIC
/// firmware (each hardware counter read is a firmware command on mlx5) for
/// nothing a scrape can see.
pub const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

/// Smallest `web.max_request_bytes`. A scrape request (request line, Host,
/// User-Agent, Accept with Prometheus' list of formats, Accept-Encoding,
/// X-Prometheus-Scrape-Timeout-Seconds, Authorization) takes a few hundred
/// bytes; with less every request gets 431.
pub const MIN_REQUEST_BYTES: usize = 1024;

/// The MTU range of an Ethernet netdev (`ETH_MIN_MTU`, `ETH_MAX_MTU` in
/// include/uapi/linux/if_ether.h).
pub const ETH_MTU: std::ops::RangeInclusive<u64> = 68..=65535;

fn sample_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = duration(d)?;
    if v < MIN_SAMPLE_INTERVAL {
        return Err(serde::de::Error::custom(
            "sample_interval below 100ms would load the NIC firmware for nothing",
        ));
    }
    Ok(v)
}

/// Numbers are checked where they are parsed, so that a refused value is
/// reported with its line and column: `ok` or the error "expected
/// `expected`, found `value`". An absent or null value is `None`.
fn opt_number<'de, D, T>(d: D, ok: fn(&T) -> bool, expected: &str) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + std::fmt::Display,
{
    match Option::<T>::deserialize(d)? {
        Some(v) if !ok(&v) => Err(serde::de::Error::custom(format!(
            "expected {expected}, found {v}"
        ))),
        v => Ok(v),
    }
}

fn number<'de, D, T>(d: D, ok: fn(&T) -> bool, expected: &str) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + std::fmt::Display,
{
    let v = T::deserialize(d)?;
    if !ok(&v) {
        return Err(serde::de::Error::custom(format!(
            "expected {expected}, found {v}"
        )));
    }
    Ok(v)
}

fn opt_link_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && *v > 0.0,
        "a link rate in Gb/s above 0 (e.g. 400)",
    )
}

fn opt_mtu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    opt_number(
        d,
        |v: &u32| ETH_MTU.contains(&u64::from(*v)),
        "an Ethernet MTU, 68 to 65535 (e.g. 9000)",
    )
}

fn opt_min_mtu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    opt_number(
        d,
        |v: &u64| ETH_MTU.contains(v),
        "an Ethernet MTU, 68 to 65535 (to turn the rule off, list it in rules.disabled)",
    )
}

fn opt_priority<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u8>, D::Error> {
    opt_number(d, |v: &u8| *v <= 7, "a priority 0 to 7")
}

fn opt_per_second<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && *v >= 0.0,
        "a rate per second, a number >= 0",
    )
}

fn opt_ber<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && (0.0..=1.0).contains(v),
        "a bit error rate between 0 and 1 (e.g. 1e-12)",
    )
}

fn opt_share<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && (0.0..=1.0).contains(v),
        "a share between 0 and 1 (e.g. 0.2)",
    )
}

fn opt_factor<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    opt_number(
        d,
        |v: &f64| v.is_finite() && *v >= 1.0,
        "a factor, a number >= 1",
    )
}

fn at_least_one<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    number(d, |v: &usize| *v >= 1, "at least 1")
}

fn at_least_one_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    number(d, |v: &u64| *v >= 1, "at least 1")
}

fn share<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    number(
        d,
        |v: &f64| v.is_finite() && *v > 0.0 && *v <= 1.0,
        "a share above 0 and at most 1 (e.g. 0.7)",
    )
}

fn request_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    number(
        d,
        |v: &usize| *v >= MIN_REQUEST_BYTES,
        "at least 1024 bytes (a scrape request takes a few hundred; below that every request gets 431)",
    )
}

/// A configuration that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

impl Config {
    /// Parses YAML text. An empty document (or only comments) is the default
    /// configuration.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let meaningful = text.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && t != "---"
        });
        if !meaningful {
            return Ok(Config::default());
        }
        let config: Config = serde_saphyr::from_str(text).map_err(|e| ConfigError::Invalid {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        config.validate().map_err(|message| ConfigError::Invalid {
            path: origin.to_string(),
            message,
        })?;
        Ok(config)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Checks across keys; single values are checked where they are parsed
    /// (with line and column).
    fn validate(&self) -> Result<(), String> {
        if let Some(ExpectedDevices::Count(0)) = self.expect.devices {
            return Err("expect.devices must be at least 1 (or a list of device names)".into());
        }
        let known: Vec<&str> = crate::rules::all().iter().map(|r| r.id.as_str()).collect();
        if let Some(bad) = self
            .rules
            .disabled
            .iter()
            .find(|d| !known.contains(&d.as_str()))
        {
            return Err(format!(
                "rules.disabled: unknown rule {bad:?} (known: {})",
                known.join(", ")
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_comment_only_files_are_the_default() {
        assert_eq!(Config::parse("", "t").unwrap(), Config::default());
        assert_eq!(
            Config::parse("# nothing\n\n", "t").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn design_skeleton_parses() {
        let c = Config::parse(
            "sample_interval: 2s\ndevices: {include: [mlx5_*], exclude: [mlx5_1]}\n\
             netdevs: {extra: [bond0], export_raw_ethtool: [rx_vport_rdma_unicast_packets]}\n\
             probes: {enabled: true, interval: 10s, gid_index: auto}\n\
             expect: {mtu: 9000, pfc_priority: 3, link_rate_gbps: 400}\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.sample_interval, Duration::from_secs(2));
        assert_eq!(c.devices.exclude, vec!["mlx5_1"]);
        assert_eq!(c.probes.enabled, Toggle::On);
        assert_eq!(c.expect.pfc_priority, Some(3));
        assert_eq!(c.expect.link_rate_gbps, Some(400.0));
    }

    #[test]
    fn unknown_key_is_refused_with_line_and_column() {
        let e =
            Config::parse("sample_interval: 5s\ndevices:\n  inclde: [x]\n", "cfg.yml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("line 3 column 3"), "{msg}");
        assert!(msg.contains("inclde"), "{msg}");
        assert!(msg.starts_with("cfg.yml:"), "{msg}");
    }

    #[test]
    fn bad_values_are_refused() {
        for bad in [
            "sample_interval: five\n",
            "sample_interval: 0s\n",
            "sample_interval: 10ms\n",
            "expect: {pfc_priority: 9}\n",
            "probes: {gid_index: first}\n",
            "sources: {ethtool: maybe}\n",
            "web: {max_connections: 0}\n",
            "- a\n- b\n",
            "devices: {include: [\n",
        ] {
            assert!(Config::parse(bad, "t").is_err(), "accepted {bad:?}");
        }
    }

    /// Issue 14: `web.max_request_bytes: 0` was accepted and then every
    /// request got 431; `expect.link_rate_gbps` took `.nan`, `-400` and
    /// `.inf`. Every numeric key refuses what has no meaning for it, at the
    /// value's line and column.
    #[test]
    fn meaningless_numbers_are_refused_at_their_line_and_column() {
        let top = |section: &str, key: &str, value: &str| {
            (
                format!("# from issue 14\n{section}:\n  {key}: {value}\n"),
                3,
                key.len() + 5,
            )
        };
        let rule = |name: &str, key: &str, value: &str| {
            (
                format!("# from issue 14\nrules:\n  {name}:\n    {key}: {value}\n"),
                4,
                key.len() + 7,
            )
        };
        let mut cases = Vec::new();
        for v in [".nan", "-400", ".inf", "-.inf", "0"] {
            cases.push(top("expect", "link_rate_gbps", v));
        }
        for v in ["0", "67", "65536"] {
            cases.push(top("expect", "mtu", v));
        }
        cases.push(top("expect", "pfc_priority", "8"));
        for v in ["0", "1", "1023"] {
            cases.push(top("web", "max_request_bytes", v));
        }
        cases.push(top("web", "max_connections", "0"));
        for name in [
            "retransmissions",
            "sequence_errors",
            "out_of_buffer",
            "ack_timeouts",
            "cnp_not_sent",
            "discards_growing",
        ] {
            for v in [".nan", "-1", ".inf"] {
                cases.push(rule(name, "per_second", v));
            }
        }
        for v in [".nan", "-1e-12", "2", ".inf"] {
            cases.push(rule("symbol_errors", "max_ber", v));
        }
        for (name, key) in [
            ("pfc_storm", "pause_ratio"),
            ("probe_failures", "max_ratio"),
        ] {
            for v in [".nan", "-0.1", "1.5", ".inf"] {
                cases.push(rule(name, key, v));
            }
        }
        for v in [".nan", "0.5", "0", "-3", ".inf"] {
            cases.push(rule("probe_latency_regression", "factor", v));
        }
        for v in ["0", "67", "65536"] {
            cases.push(rule("mtu_below_jumbo", "min_mtu", v));
        }
        for (yaml, line, column) in cases {
            let e = Config::parse(&yaml, "cfg.yml")
                .expect_err(&yaml)
                .to_string();
            assert!(
                e.starts_with(&format!(
                    "cfg.yml: error: line {line} column {column}: expected "
                )),
                "{yaml:?}: {e}"
            );
        }
        let e = Config::parse("\nsample_interval: 10ms\n", "cfg.yml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2 column 18"), "{e}");

        // The edges that mean something are kept.
        let c = Config::parse(
            "expect: {link_rate_gbps: 2.5, mtu: 68, pfc_priority: 0}\n\
             web: {max_request_bytes: 1024, max_connections: 1}\n\
             rules: {retransmissions: {per_second: 0}, symbol_errors: {max_ber: 0},\n\
             \x20 pfc_storm: {pause_ratio: 1}, probe_failures: {max_ratio: 0},\n\
             \x20 probe_latency_regression: {factor: 1}, mtu_below_jumbo: {min_mtu: 65535}}\n\
             sample_interval: 100ms\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.expect.link_rate_gbps, Some(2.5));
        assert_eq!(c.web.max_request_bytes, 1024);
        assert_eq!(c.rules.pfc_storm.pause_ratio, 1.0);
        assert_eq!(c.rules.mtu_below_jumbo.min_mtu, 65535);
        let c = Config::parse("expect: {link_rate_gbps: ~, mtu: null}\n", "t").unwrap();
        assert_eq!((c.expect.link_rate_gbps, c.expect.mtu), (None, None));
    }

    /// Found by fuzz/fuzz_targets/config_yaml.rs: these were accepted and
    /// then panicked on the first tick ("overflow when adding durations" in
    /// the sampler's history retention, "overflow when adding duration to
    /// instant" in its schedule, in the probe schedule and in hyper's header
    /// deadline); `netlink_timeout` is added to the clock the same way by
    /// every netlink request.
    #[test]
    fn durations_too_long_to_add_to_the_clock_are_refused() {
        for crash in [
            "sample_interval: 18446744073709551615s\n",
            "sample_interval: 500000000000y\n",
            "probes: {interval: 500000000000y}\n",
            "web: {header_read_timeout: 500000000000y}\n",
            "sources: {netlink_timeout: 500000000000y}\n",
            "rules: {hold: 18446744073709551615s}\n",
            "rules: {link_flap: {window: 18446744073709551615s}}\n",
        ] {
            let e = Config::parse(crash, "t").expect_err(crash).to_string();
            assert!(e.contains("longest supported"), "{crash:?}: {e}");
        }
        // The longest accepted everywhere at once still runs.
        let year = "365d";
        let c = Config::parse(
            &format!(
                "sample_interval: {year}\nprobes: {{interval: {year}}}\n\
                 web: {{header_read_timeout: {year}}}\nrules: {{hold: {year}, link_flap: {{window: {year}}}}}\n"
            ),
            "t",
        )
        .unwrap();
        let sampler = crate::sampler::Sampler::new(Vec::new(), &c);
        let (tx, rx) = std::sync::mpsc::channel();
        drop(tx);
        sampler.run(c.sample_interval, rx, |_, _| {});
    }

    #[test]
    fn a_rule_key_given_alone_keeps_the_other_defaults() {
        let c = Config::parse(
            "rules: {retransmissions: {per_second: 50}, link_flap: {window: 1m}}\n",
            "t",
        )
        .unwrap();
        let d = RulesConfig::default();
        assert_eq!(c.rules.retransmissions.per_second, 50.0);
        assert_eq!(c.rules.retransmissions.window, d.retransmissions.window);
        assert_eq!(c.rules.link_flap.window, Duration::from_secs(60));
        assert_eq!(c.rules.symbol_errors, d.symbol_errors);
        let c = Config::parse("rules: {symbol_errors: {max_ber: 1e-10}}\n", "t").unwrap();
        assert_eq!(c.rules.symbol_errors.max_ber, 1e-10);
        assert_eq!(c.rules.symbol_errors.window, d.symbol_errors.window);
        let e = Config::parse("rules: {link_flap: {per_second: 3}}\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rules.link_flap.per_second is not a setting"),
            "{e}"
        );
        let e = Config::parse("rules:\n  retransmissions: {windw: 1m}\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("windw"), "{e}");
        let e = Config::parse("rules:\n  hold: soon\n", "t")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("invalid duration"),
            "{e}"
        );
    }

    #[test]
    fn toggles_and_gid_index() {
        let c = Config::parse(
            "sources: {rdma_netlink: false, dcb: true}\nprobes: {gid_index: 3}\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.sources.rdma_netlink, Toggle::Off);
        assert_eq!(c.sources.dcb, Toggle::On);
        assert_eq!(c.sources.ethtool, Toggle::Auto);
        assert_eq!(c.probes.gid_index, GidIndex::Index(3));
        assert!(Toggle::Auto.enabled(true) && !Toggle::Auto.enabled(false));
    }
}

#[cfg(test)]
mod example_file {
    use super::*;

    #[test]
    fn peer_probes_are_off_by_default_and_take_their_keys() {
        assert!(!Config::default().peer_probes.enabled);
        let c = Config::parse(
            "peer_probes:\n  enabled: true\n  peers: [node-b:9879, https://node-c:9879]\n  \
             dns: exporters.example:9879\n  file: /etc/peers.txt\n  all_to_all: true\n  \
             packets_per_second: 10\n  sample: 4\n  timeout: 200ms\n  refresh: 30s\n",
            "test",
        )
        .unwrap();
        let p = &c.peer_probes;
        assert!(p.enabled && p.all_to_all);
        assert_eq!(p.peers, ["node-b:9879", "https://node-c:9879"]);
        assert_eq!(p.dns.as_deref(), Some("exporters.example:9879"));
        assert_eq!((p.packets_per_second, p.sample), (10, 4));
        assert_eq!(p.timeout, Duration::from_millis(200));
        assert!(Config::parse("peer_probes: {bogus: 1}\n", "test").is_err());
    }

    /// The documented example must stay valid and describe the defaults.
    #[test]
    fn example_config_parses_and_shows_the_defaults() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/roce_exporter.yml");
        let c = Config::load(Path::new(path)).unwrap();
        let d = Config::default();
        assert_eq!(c.sample_interval, d.sample_interval);
        assert_eq!(c.devices, d.devices);
        assert_eq!(c.sources, d.sources);
        assert_eq!(c.probes, d.probes);
        assert_eq!(c.peer_probes, d.peer_probes);
        assert_eq!(c.web, d.web);
        assert_eq!(c.rules, d.rules);
        assert_eq!(c.metrics, d.metrics);
        assert_eq!(c.expect.mtu, Some(9000));
        assert_eq!(
            c.nccl,
            NcclConfig {
                log_dir: Some("/var/log/nccl".into()),
                inspector_dir: Some("/var/lib/nccl-inspector".into()),
                ..d.nccl
            }
        );
    }
}
