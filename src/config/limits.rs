//! Every numeric setting's allowed range: the intervals, timeouts, counts
//! and sizes of the configuration, each with a floor and a ceiling, checked
//! where the value is parsed (at start and on every reload, with the range
//! in the error) and listed in docs/limits.md (generated from [`ALL`] by
//! `UPDATE_GOLDEN=1 cargo test --test it config::`).
//!
//! The ceilings keep one setting from taking the process down: a request
//! cap of 2^63 bytes lets one client grow the heap without end, a per-read
//! cap of 2^62 makes a log of hundreds of MB one allocation, an interval of
//! a nanosecond spins a core. Rule thresholds and windows are not limits
//! (windows are bounded by [`crate::values::MAX_DURATION`]).

use std::time::Duration;

use super::Config;
use crate::values::{CountLimit, DurationLimit};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const HOUR: Duration = secs(3600);
const DAY: Duration = secs(24 * 3600);

pub const SAMPLE_INTERVAL: DurationLimit = DurationLimit {
    key: "sample_interval",
    min: ms(100),
    max: HOUR,
    why: "below 100ms the NIC firmware is loaded for nothing a scrape can see; above an hour no rule window holds two samples",
};

pub const WEB_MAX_REQUESTS: CountLimit = CountLimit {
    key: "web.max_requests",
    min: 1,
    max: 4096,
    unit: "",
    why: "each request answered at once holds an encoded exposition",
};

pub const WEB_MAX_CONNECTIONS: CountLimit = CountLimit {
    key: "web.max_connections",
    min: 1,
    max: 65536,
    unit: "",
    why: "each connection holds a file descriptor and a buffer",
};

pub const WEB_HEADER_READ_TIMEOUT: DurationLimit = DurationLimit {
    key: "web.header_read_timeout",
    min: ms(100),
    max: secs(300),
    why: "how long a client that sends nothing holds its connection",
};

pub const WEB_MAX_REQUEST_BYTES: CountLimit = CountLimit {
    key: "web.max_request_bytes",
    min: 1024,
    max: 1 << 20,
    unit: "bytes",
    why: "a scrape request takes a few hundred bytes; the cap is what one unauthenticated client may make the server buffer",
};

pub const WEB_WRITE_STALL_TIMEOUT: DurationLimit = DurationLimit {
    key: "web.write_stall_timeout",
    min: ms(100),
    max: secs(300),
    why: "how long a client that stops reading holds its response",
};

pub const NCCL_INTERVAL: DurationLimit = DurationLimit {
    key: "nccl.interval",
    min: ms(100),
    max: HOUR,
    why: "the directories are read at most once per sample; below 100ms the reads would spin",
};

pub const NCCL_WINDOW: DurationLimit = DurationLimit {
    key: "nccl.window",
    min: secs(1),
    max: DAY,
    why: "how long what was seen stays reported, and kept",
};

pub const NCCL_IDLE_EXPIRY: DurationLimit = DurationLimit {
    key: "nccl.idle_expiry",
    min: secs(1),
    max: secs(7 * 24 * 3600),
    why: "how long a finished job's file and state are kept",
};

pub const NCCL_MAX_FILES: CountLimit = CountLimit {
    key: "nccl.max_files",
    min: 1,
    max: 65536,
    unit: "",
    why: "each tracked file holds its state and is looked at every read",
};

pub const NCCL_MAX_BYTES_PER_READ: CountLimit = CountLimit {
    key: "nccl.max_bytes_per_read",
    min: 64 << 10,
    max: 64 << 20,
    unit: "bytes",
    why: "a quarter of it is read into memory at once",
};

pub const NCCL_BUSBW_MIN_BYTES: CountLimit = CountLimit {
    key: "nccl.busbw_min_bytes",
    min: 1,
    max: 1 << 40,
    unit: "bytes",
    why: "no collective is larger than a TiB",
};

pub const NETDEVS_MODULE_INTERVAL: DurationLimit = DurationLimit {
    key: "netdevs.module_interval",
    min: secs(1),
    max: DAY,
    why: "module EEPROMs are slow I2C devices",
};

pub const NETDEVS_QOS_INTERVAL: DurationLimit = DurationLimit {
    key: "netdevs.qos_interval",
    min: secs(1),
    max: DAY,
    why: "each QoS read is a firmware command on mlx5",
};

pub const NETDEVS_PHYS_INTERVAL: DurationLimit = DurationLimit {
    key: "netdevs.phys_interval",
    min: secs(1),
    max: DAY,
    why: "FEC, AER and devlink reads are netlink requests and firmware commands",
};

pub const NETLINK_TIMEOUT: DurationLimit = DurationLimit {
    key: "sources.netlink_timeout",
    min: ms(10),
    max: secs(30),
    why: "one netlink request holds the source's sample this long at most",
};

pub const PROBES_INTERVAL: DurationLimit = DurationLimit {
    key: "probes.interval",
    min: ms(100),
    max: HOUR,
    why: "each probe round opens verbs resources on every port",
};

/// One limit in [`ALL`].
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    Duration(&'static DurationLimit),
    Count(&'static CountLimit),
}

impl Limit {
    pub fn key(&self) -> &'static str {
        match self {
            Limit::Duration(l) => l.key,
            Limit::Count(l) => l.key,
        }
    }

    pub fn range(&self) -> String {
        match self {
            Limit::Duration(l) => l.range(),
            Limit::Count(l) => l.range(),
        }
    }

    pub fn why(&self) -> &'static str {
        match self {
            Limit::Duration(l) => l.why,
            Limit::Count(l) => l.why,
        }
    }

    /// Whether `config` holds a value inside this limit's range.
    pub fn holds(&self, config: &Config) -> bool {
        match self {
            Limit::Duration(l) => duration_of(config, l.key).is_some_and(|v| l.check(v).is_ok()),
            Limit::Count(l) => count_of(config, l.key).is_some_and(|v| l.holds(v)),
        }
    }
}

/// Every limit of the configuration, in the order of the file's sections.
pub const ALL: &[Limit] = &[
    Limit::Duration(&SAMPLE_INTERVAL),
    Limit::Duration(&NETDEVS_MODULE_INTERVAL),
    Limit::Duration(&NETDEVS_QOS_INTERVAL),
    Limit::Duration(&NETDEVS_PHYS_INTERVAL),
    Limit::Duration(&NETLINK_TIMEOUT),
    Limit::Duration(&PROBES_INTERVAL),
    Limit::Count(&roce_fleet::config::PACKETS_PER_SECOND),
    Limit::Count(&roce_fleet::config::SAMPLE),
    Limit::Count(&roce_fleet::config::FLOW_LABELS),
    Limit::Duration(&roce_fleet::config::TIMEOUT),
    Limit::Duration(&roce_fleet::config::REFRESH),
    Limit::Duration(&roce_fleet::config::FETCH_TIMEOUT),
    Limit::Duration(&roce_fleet::config::QUERY_TIMEOUT),
    Limit::Count(&roce_fleet::config::QUERY_BYTES),
    Limit::Count(&WEB_MAX_REQUESTS),
    Limit::Count(&WEB_MAX_CONNECTIONS),
    Limit::Duration(&WEB_HEADER_READ_TIMEOUT),
    Limit::Count(&WEB_MAX_REQUEST_BYTES),
    Limit::Duration(&WEB_WRITE_STALL_TIMEOUT),
    Limit::Duration(&NCCL_INTERVAL),
    Limit::Duration(&NCCL_WINDOW),
    Limit::Duration(&NCCL_IDLE_EXPIRY),
    Limit::Count(&NCCL_MAX_FILES),
    Limit::Count(&NCCL_MAX_BYTES_PER_READ),
    Limit::Count(&NCCL_BUSBW_MIN_BYTES),
    Limit::Count(&LLDP_MAX_FRAMES_PER_SAMPLE),
];

/// `lldp.max_frames_per_sample`, parsed by roce-lldp (a reader, which
/// takes no model types) with the same range and wording.
pub const LLDP_MAX_FRAMES_PER_SAMPLE: CountLimit = CountLimit {
    key: "lldp.max_frames_per_sample",
    min: 1,
    max: roce_lldp::MAX_FRAMES_PER_SAMPLE as u64,
    unit: "",
    why: roce_lldp::MAX_FRAMES_PER_SAMPLE_WHY,
};

/// The value of a duration limit's key in `config`.
fn duration_of(c: &Config, key: &str) -> Option<Duration> {
    let p = &c.peer_probes;
    Some(match key {
        "sample_interval" => c.sample_interval,
        "netdevs.module_interval" => c.netdevs.module_interval,
        "netdevs.qos_interval" => c.netdevs.qos_interval,
        "netdevs.phys_interval" => c.netdevs.phys_interval,
        "sources.netlink_timeout" => c.sources.netlink_timeout,
        "probes.interval" => c.probes.interval,
        "peer_probes.timeout" => p.timeout,
        "peer_probes.refresh" => p.refresh,
        "peer_probes.fetch_timeout" => p.fetch_timeout,
        "peer_probes.prometheus.timeout" => {
            return Some(
                p.prometheus
                    .as_ref()
                    .map_or(roce_fleet::config::QUERY_TIMEOUT.min, |q| q.timeout),
            )
        }
        "web.header_read_timeout" => c.web.header_read_timeout,
        "web.write_stall_timeout" => c.web.write_stall_timeout,
        "nccl.interval" => c.nccl.interval,
        "nccl.window" => c.nccl.window,
        "nccl.idle_expiry" => c.nccl.idle_expiry,
        _ => return None,
    })
}

/// The value of a count limit's key in `config`.
fn count_of(c: &Config, key: &str) -> Option<u64> {
    let p = &c.peer_probes;
    let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
    Some(match key {
        "peer_probes.packets_per_second" => u64::from(p.packets_per_second),
        "peer_probes.sample" => n(p.sample),
        "peer_probes.flow_labels" => u64::from(p.flow_labels),
        "peer_probes.prometheus.max_bytes" => {
            return Some(
                p.prometheus
                    .as_ref()
                    .map_or(roce_fleet::config::QUERY_BYTES.min, |q| n(q.max_bytes)),
            )
        }
        "web.max_requests" => n(c.web.max_requests),
        "web.max_connections" => n(c.web.max_connections),
        "web.max_request_bytes" => n(c.web.max_request_bytes),
        "nccl.max_files" => n(c.nccl.max_files),
        "nccl.max_bytes_per_read" => c.nccl.max_bytes_per_read,
        "nccl.busbw_min_bytes" => c.nccl.busbw_min_bytes,
        "lldp.max_frames_per_sample" => n(c.lldp.max_frames_per_sample),
        _ => return None,
    })
}

/// Whether every limit holds in `config`: what a parsed configuration
/// always satisfies (the fuzz target checks it), named by the first key
/// that does not.
pub fn check(config: &Config) -> Result<(), &'static str> {
    match ALL.iter().find(|l| !l.holds(config)) {
        Some(l) => Err(l.key()),
        None => Ok(()),
    }
}

/// docs/limits.md: the table of [`ALL`].
pub fn reference() -> String {
    let mut out = String::from(
        "# Configuration limits\n\n\
         Generated from `src/config/limits.rs` (`UPDATE_GOLDEN=1 cargo test --test it config::`); do not edit.\n\n\
         Every interval, timeout, count and size of the configuration file has a floor and a ceiling, \
         checked where the value is parsed, at start and on every reload (`SIGHUP`): a value outside \
         is refused with its line and column, the key and the range, and a reload that holds one keeps \
         the running configuration. Rule windows and thresholds are not listed: windows are at most 365d.\n\n\
         | key | range | why |\n|---|---|---|\n",
    );
    for l in ALL {
        out.push_str(&format!(
            "| `{}` | {} | {} |\n",
            l.key(),
            l.range(),
            l.why()
        ));
    }
    out
}

roce_model::limit_parsers! {
    pub(super) sample_interval: SAMPLE_INTERVAL as Duration,
    pub(super) web_max_requests: WEB_MAX_REQUESTS as usize,
    pub(super) web_max_connections: WEB_MAX_CONNECTIONS as usize,
    pub(super) web_header_read_timeout: WEB_HEADER_READ_TIMEOUT as Duration,
    pub(super) web_max_request_bytes: WEB_MAX_REQUEST_BYTES as usize,
    pub(super) web_write_stall_timeout: WEB_WRITE_STALL_TIMEOUT as Duration,
    pub(super) nccl_interval: NCCL_INTERVAL as Duration,
    pub(super) nccl_window: NCCL_WINDOW as Duration,
    pub(super) nccl_idle_expiry: NCCL_IDLE_EXPIRY as Duration,
    pub(super) nccl_max_files: NCCL_MAX_FILES as usize,
    pub(super) nccl_max_bytes_per_read: NCCL_MAX_BYTES_PER_READ as u64,
    pub(super) nccl_busbw_min_bytes: NCCL_BUSBW_MIN_BYTES as u64,
    pub(super) netdevs_module_interval: NETDEVS_MODULE_INTERVAL as Duration,
    pub(super) netdevs_qos_interval: NETDEVS_QOS_INTERVAL as Duration,
    pub(super) netdevs_phys_interval: NETDEVS_PHYS_INTERVAL as Duration,
    pub(super) netlink_timeout: NETLINK_TIMEOUT as Duration,
    pub(super) probes_interval: PROBES_INTERVAL as Duration,
}
