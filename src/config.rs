//! The YAML configuration file (`--config.file`). Every key is optional and
//! zero configuration works; unknown keys are errors, reported with line and
//! column.
//!
//! YAML is parsed with `serde-saphyr`: `serde_yaml` is deprecated and
//! unmaintained, and `serde_yml` carries RUSTSEC-2025-0067/0068; saphyr is
//! pure Rust, maintained, built to never panic on malformed input, and its
//! errors carry line, column and a snippet of the offending text.
//!
//! Each section is a serde struct owned by what reads it: the top-level
//! sections here, `web:` by the server crate (read through `WebLimitsDef`),
//! `rules:` and `expect:` by the rules (`crate::rules::settings`). Values are
//! checked where they are parsed (`crate::values`), so a refused value is
//! reported at its line and column. The rules never import this module.
//!
//! Adding a rule's section (`rules: {my_rule: {window: 1m, per_second: 5}}`):
//! 1. reuse a settings struct of the same shape (`WindowRule`, `RateRule`,
//!    `BerRule`, `TrafficRatioRule`, ...) or declare one next to the rule,
//!    deriving `Debug, Clone, PartialEq, Serialize`, followed by
//!    `section!(MyRule { window: Duration = "crate::values::opt_duration", ... })`
//!    naming each key, its type and its check;
//! 2. add `my_rule: MyRule,` (with a doc comment) to `rules_config!` in
//!    crates/rules/src/settings.rs and its default to `RulesConfig::default`;
//!    windows that need history go into `RulesConfig::longest_window`;
//! 3. document the keys in examples/roce_exporter.yml (a test keeps it in step).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use crate::rules::congestion::PfcStormRule;
pub use crate::rules::fabric::{MtuRule, ROCE_4096_MIN_NETDEV_MTU, ROCE_HEADER_BYTES};
pub use crate::rules::phys::LaneRule;
pub use crate::rules::probes::{ProbeFailureRule, ProbeLatencyRule};
pub use crate::rules::rates::{RateRule, TrafficRatioRule};
pub use crate::rules::settings::{BerRule, Expectations, ExpectedDevices, RulesConfig, WindowRule};
use crate::values::share;

pub mod limits;
pub use crate::values::{ETH_MTU, MAX_DURATION};
pub use roce_web::WebLimits;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Time between samples (`5s`), [`limits::SAMPLE_INTERVAL`].
    #[serde(deserialize_with = "limits::sample_interval")]
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
    #[serde(with = "WebLimitsDef")]
    pub web: WebLimits,
    /// What NCCL jobs on this host really used, from their debug logs and
    /// Inspector output (off by default).
    pub nccl: NcclConfig,
    /// Groups of series exported (read at start; `--collector.<group>` and
    /// `--no-collector.<group>` override them, except for qos, phys and
    /// topology, whose flags are the sources' switches).
    pub metrics: crate::exposition::groups::Groups,
    /// Sources switched on and off (`--collector.<source>` and
    /// `--no-collector.<source>` override them). The probe, peer probe,
    /// NCCL and LLDP sources have theirs in their own sections.
    pub collectors: Collectors,
    /// LLDP neighbours of the RDMA netdevs (`lldp.mode`: auto, off, lldpd,
    /// capture).
    pub lldp: crate::sources::lldp::LldpConfig,
    /// The load test: this node as a responder, and `check --load`'s
    /// defaults (`roce_fleet::load`).
    pub load_test: LoadTestConfig,
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
            collectors: Collectors::default(),
            lldp: crate::sources::lldp::LldpConfig::default(),
            load_test: LoadTestConfig::default(),
        }
    }
}

/// `collectors:`: the sources that are on by default, each `true` or
/// `false`. A source that is off reads nothing and makes no system call;
/// `roce_collector_state` says `disabled`. Turning qos, phys or topology off
/// also turns off the metric group of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Collectors {
    /// RDMA devices, ports, counters, GIDs. The netdev, phys, topology,
    /// probe and LLDP sources read the netdevs and devices it finds: with
    /// it off they have only `netdevs.extra`.
    pub rdma: bool,
    /// MTU, link state, carrier counts, ECN, ethtool and pause statistics.
    pub netdev: bool,
    /// The netdev source's QoS reads: DCB, DCQCN, CNP marking, rdma_cm ToS.
    pub qos: bool,
    /// FEC, modules, PCIe AER, devlink health.
    pub phys: bool,
    /// GPUs, GPU-NIC PCIe paths, links, ACS, GPUDirect.
    pub topology: bool,
}

impl Default for Collectors {
    fn default() -> Self {
        Collectors {
            rdma: true,
            netdev: true,
            qos: true,
            phys: true,
            topology: true,
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
    #[serde(deserialize_with = "limits::nccl_interval")]
    pub interval: Duration,
    /// How long a transport, version or bandwidth sample stays reported.
    #[serde(deserialize_with = "limits::nccl_window")]
    pub window: Duration,
    /// A file not written for this long belongs to a finished job and is
    /// forgotten.
    #[serde(deserialize_with = "limits::nccl_idle_expiry")]
    pub idle_expiry: Duration,
    /// Files tracked per directory (the most recently written).
    #[serde(deserialize_with = "limits::nccl_max_files")]
    pub max_files: usize,
    /// Bytes read per directory per read.
    #[serde(deserialize_with = "limits::nccl_max_bytes_per_read")]
    pub max_bytes_per_read: u64,
    /// Collectives smaller than this are not bandwidth samples.
    #[serde(deserialize_with = "limits::nccl_busbw_min_bytes")]
    pub busbw_min_bytes: u64,
    /// `nccl_busbw_below_line_rate` fires below this share of what the
    /// node's NICs nearest the job's GPUs should give.
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
    #[serde(deserialize_with = "limits::netdevs_module_interval")]
    pub module_interval: Duration,
    /// How often each netdev's QoS configuration (DCB: PFC, APP, ETS,
    /// buffers, the switch's DCBX view; DCQCN parameters; CNP marking) is
    /// read again: on mlx5 each read is a firmware command and the
    /// configuration changes rarely. It is read at once when a netdev
    /// appears, its link changes state or its driver changes.
    #[serde(deserialize_with = "limits::netdevs_qos_interval")]
    pub qos_interval: Duration,
    /// How often the physical-layer source reads FEC, PCIe AER and devlink
    /// health (and looks whether a module is due): error counters judged
    /// over windows of minutes, whose reads are netlink requests and firmware
    /// commands on a live NIC. Read at once when the netdevs or GPUs change
    /// or a link changes state; the last reading is served in between.
    /// The topology source reads the PCIe links' training (current speed
    /// and width) at the same cadence.
    #[serde(deserialize_with = "limits::netdevs_phys_interval")]
    pub phys_interval: Duration,
}

impl Default for NetdevSelection {
    fn default() -> Self {
        NetdevSelection {
            extra: Vec::new(),
            export_raw_ethtool: Vec::new(),
            replay: None,
            module_interval: Duration::from_secs(300),
            qos_interval: Duration::from_secs(300),
            phys_interval: Duration::from_secs(30),
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
    #[serde(deserialize_with = "limits::netlink_timeout")]
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
    #[serde(deserialize_with = "limits::probes_interval")]
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

pub use roce_fleet::config::{
    PeerProbeConfig, PeerPrometheusConfig, RailBy, RailConfig, MAX_FETCH_TIMEOUT,
};
pub use roce_fleet::load::LoadTestConfig;

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

/// `web:`: the server's limits ([`WebLimits`], defined by the server crate;
/// their meaning is documented there), each checked where it is parsed.
#[derive(Deserialize)]
#[serde(
    remote = "WebLimits",
    default = "WebLimits::default",
    deny_unknown_fields
)]
struct WebLimitsDef {
    #[serde(deserialize_with = "limits::web_max_requests")]
    max_requests: usize,
    #[serde(deserialize_with = "limits::web_max_connections")]
    max_connections: usize,
    #[serde(deserialize_with = "limits::web_header_read_timeout")]
    header_read_timeout: Duration,
    #[serde(deserialize_with = "limits::web_max_request_bytes")]
    max_request_bytes: usize,
    #[serde(deserialize_with = "limits::web_write_stall_timeout")]
    write_stall_timeout: Duration,
}

/// A configuration that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read: absent, not a regular file (a FIFO, a
    /// device), over 4 MiB, or not read within 5 s (roce_host::named).
    #[error("cannot read the configuration: {0}")]
    Read(#[from] roce_host::named::NamedFileError),
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// A configuration whose keys parsed but do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("expect.devices must be at least 1 (or a list of device names)")]
    NoDevicesExpected,
    #[error("rules.disabled: unknown rule {rule:?} (known: {known})")]
    UnknownRule { rule: String, known: String },
    #[error("peer_probes: {0}")]
    PeerProbes(roce_fleet::FleetError),
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
        let mut config: Config =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Invalid {
                path: origin.to_string(),
                message: e.to_string(),
            })?;
        config.switch_collectors(&[]);
        config.validate().map_err(|e| ConfigError::Invalid {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        Ok(config)
    }

    /// Applies collector switches (the command line's
    /// `--collector.<source>` / `--no-collector.<source>`, in order) over
    /// the file's keys, then turns off the metric group of each source that
    /// is off (qos, phys, topology): a source that reads nothing exports
    /// nothing, whatever `metrics:` says.
    pub fn switch_collectors(&mut self, switches: &[(crate::sources::Switch, bool)]) {
        for (switch, on) in switches {
            switch.set(self, *on);
        }
        for switch in crate::sources::Switch::ALL {
            if let Some(group) = switch.group() {
                if !switch.is_on(self) {
                    self.metrics.set(group, false);
                }
            }
        }
    }

    /// The configuration with the command line's collector switches
    /// applied ([`Config::switch_collectors`]) and checked again (a switch
    /// can turn on a source whose section is incomplete).
    pub fn with_switches(
        mut self,
        switches: &[(crate::sources::Switch, bool)],
    ) -> Result<Config, ConfigError> {
        if switches.is_empty() {
            return Ok(self);
        }
        self.switch_collectors(switches);
        self.validate().map_err(|e| ConfigError::Invalid {
            path: "command line".to_string(),
            message: e.to_string(),
        })?;
        Ok(self)
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = roce_host::named::read_text(path, roce_host::named::Limits::CONFIG)?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Checks across keys; single values are checked where they are parsed
    /// (with line and column).
    fn validate(&self) -> Result<(), ValidationError> {
        if let Some(ExpectedDevices::Count(0)) = self.expect.devices {
            return Err(ValidationError::NoDevicesExpected);
        }
        let known: Vec<&str> = crate::rules::all().iter().map(|r| r.id.as_str()).collect();
        if let Some(bad) = self
            .rules
            .disabled
            .iter()
            .find(|d| !known.contains(&d.as_str()))
        {
            return Err(ValidationError::UnknownRule {
                rule: bad.to_string(),
                known: known.join(", "),
            });
        }
        self.peer_probes
            .validate()
            .map_err(ValidationError::PeerProbes)?;
        Ok(())
    }
}
