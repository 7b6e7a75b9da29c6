//! devlink health reporters (`devlink health show`): the NIC driver's own
//! view of its firmware, Tx and Rx paths (mlx5 registers `fw`, `fw_fatal`,
//! `tx`, `rx`, `vnic`, ...), each with a state and error and recovery
//! counts, read with one `DEVLINK_CMD_HEALTH_REPORTER_GET` dump over the
//! "devlink" generic netlink family.
//!
//! Numbers from `include/uapi/linux/devlink.h`: `DEVLINK_GENL_NAME`
//! "devlink", `DEVLINK_CMD_HEALTH_REPORTER_GET` 52, `DEVLINK_ATTR_BUS_NAME`
//! 1, `DEVLINK_ATTR_DEV_NAME` 2, `DEVLINK_ATTR_PORT_INDEX` 3,
//! `DEVLINK_ATTR_HEALTH_REPORTER` 114 (nested),
//! `DEVLINK_ATTR_HEALTH_REPORTER_{NAME,STATE,ERR_COUNT,RECOVER_COUNT}`
//! 115..=118, `DEVLINK_ATTR_HEALTH_REPORTER_AUTO_RECOVER` 121, `DEVLINK_HEALTH_REPORTER_STATE_{HEALTHY,ERROR}` 0, 1. Reply
//! layout from `devlink_nl_health_reporter_fill` (`net/devlink/health.c`):
//! the device handle (bus and device name), the port index for port
//! reporters, then the reporter nest (written without `NLA_F_NESTED`) with
//! the name, the state (u8) and the two counts (u64, with `DEVLINK_ATTR_PAD`
//! attributes for alignment, which are skipped; a 4-byte count, as
//! `nla_put_uint` writes small values, is accepted too).

use std::path::PathBuf;
use std::time::Duration;

use roce_host::errno::is_absent;
use roce_host::{HostError, ReadError};
use roce_netlink::msg::NLM_F_DUMP;
use roce_netlink::{Attr, MessageBuilder, NlError};

use crate::genl::{parse_hex_messages, split, GenlClient};

pub const DEVLINK_CMD_HEALTH_REPORTER_GET: u8 = 52;
const DEVLINK_GENL_VERSION: u8 = 1;
const DEVLINK_ATTR_BUS_NAME: u16 = 1;
const DEVLINK_ATTR_DEV_NAME: u16 = 2;
const DEVLINK_ATTR_PORT_INDEX: u16 = 3;
const DEVLINK_ATTR_HEALTH_REPORTER: u16 = 114;
const DEVLINK_ATTR_HEALTH_REPORTER_NAME: u16 = 115;
const DEVLINK_ATTR_HEALTH_REPORTER_STATE: u16 = 116;
const DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT: u16 = 117;
const DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT: u16 = 118;
/// `DEVLINK_ATTR_HEALTH_REPORTER_AUTO_RECOVER` (u8): written by
/// `devlink_nl_health_reporter_fill` only when the reporter has a recover
/// operation (`reporter->ops->recover`).
const DEVLINK_ATTR_HEALTH_REPORTER_AUTO_RECOVER: u16 = 121;

/// The replay file of [`DevlinkReplay`], in the replay folder.
pub const REPLAY_FILE: &str = "devlink-health.hex";

/// `enum devlink_health_reporter_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReporterState {
    Healthy,
    Error,
    Other(u8),
}

impl ReporterState {
    pub fn from_raw(v: u8) -> Self {
        match v {
            0 => ReporterState::Healthy,
            1 => ReporterState::Error,
            other => ReporterState::Other(other),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReporterState::Healthy => "healthy",
            ReporterState::Error => "error",
            ReporterState::Other(_) => "unknown",
        }
    }
}

/// One health reporter of one devlink instance (or port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReporter {
    /// Bus of the devlink handle: "pci" for NICs.
    pub bus: String,
    /// Device of the handle: the PCI address for NICs ("0000:17:00.0").
    pub device: String,
    /// The devlink port index for per-port reporters.
    pub port: Option<u32>,
    pub name: String,
    pub state: ReporterState,
    /// Errors the reporter saw (`error` in `devlink health show`).
    pub errors: u64,
    /// Recoveries the driver ran (`recover`).
    pub recoveries: u64,
    /// `Some(auto_recover)` when the reporter has a recover operation;
    /// `None` when it has none (mlx5's `fw`): such a reporter stays in the
    /// error state until the driver reloads, and `devlink health recover`
    /// answers EOPNOTSUPP.
    pub auto_recover: Option<bool>,
}

fn count(a: &Attr<'_>) -> Result<u64, NlError> {
    match a.payload.len() {
        4 => a.as_u32().map(u64::from),
        _ => a.as_u64(),
    }
}

/// Parses one `DEVLINK_CMD_HEALTH_REPORTER_GET` reply payload (after the
/// `nlmsghdr`).
pub fn parse_reporter(payload: &[u8]) -> Result<HealthReporter, NlError> {
    let (cmd, attrs) = split(payload)?;
    if cmd != DEVLINK_CMD_HEALTH_REPORTER_GET {
        return Err(NlError::Malformed {
            what: "devlink health reporter",
            detail: format!("command {cmd}, expected {DEVLINK_CMD_HEALTH_REPORTER_GET}"),
        });
    }
    let (mut bus, mut device, mut port) = (None, None, None);
    let (mut name, mut state, mut errors, mut recoveries) = (None, None, None, None);
    let mut auto_recover = None;
    for a in attrs {
        let a = a?;
        match a.kind {
            DEVLINK_ATTR_BUS_NAME => bus = Some(a.as_str()?.to_string()),
            DEVLINK_ATTR_DEV_NAME => device = Some(a.as_str()?.to_string()),
            DEVLINK_ATTR_PORT_INDEX => port = Some(a.as_u32()?),
            DEVLINK_ATTR_HEALTH_REPORTER => {
                for r in a.nested() {
                    let r = r?;
                    match r.kind {
                        DEVLINK_ATTR_HEALTH_REPORTER_NAME => name = Some(r.as_str()?.to_string()),
                        DEVLINK_ATTR_HEALTH_REPORTER_STATE => {
                            state = Some(ReporterState::from_raw(r.as_u8()?))
                        }
                        DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT => errors = Some(count(&r)?),
                        DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT => recoveries = Some(count(&r)?),
                        DEVLINK_ATTR_HEALTH_REPORTER_AUTO_RECOVER => {
                            auto_recover = Some(r.as_u8()? != 0)
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let missing = |what: &str| NlError::Malformed {
        what: "devlink health reporter",
        detail: format!("no {what}"),
    };
    Ok(HealthReporter {
        bus: bus.ok_or_else(|| missing("DEVLINK_ATTR_BUS_NAME"))?,
        device: device.ok_or_else(|| missing("DEVLINK_ATTR_DEV_NAME"))?,
        port,
        name: name.ok_or_else(|| missing("DEVLINK_ATTR_HEALTH_REPORTER_NAME"))?,
        state: state.ok_or_else(|| missing("DEVLINK_ATTR_HEALTH_REPORTER_STATE"))?,
        errors: errors.ok_or_else(|| missing("DEVLINK_ATTR_HEALTH_REPORTER_ERR_COUNT"))?,
        recoveries: recoveries
            .ok_or_else(|| missing("DEVLINK_ATTR_HEALTH_REPORTER_RECOVER_COUNT"))?,
        auto_recover,
    })
}

/// Parses every message of a dump; one malformed message is reported in
/// `errors` and the others kept.
pub fn parse_dump(payloads: &[Vec<u8>], errors: &mut Vec<HostError>) -> Vec<HealthReporter> {
    let mut out = Vec::new();
    for p in payloads {
        match parse_reporter(p) {
            Ok(r) => out.push(r),
            Err(e) => errors.push(HostError::request("devlink health reporter", e)),
        }
    }
    out
}

/// The dump request for every reporter of every devlink instance.
pub fn dump_request(family: u16) -> Result<Vec<u8>, NlError> {
    let mut b = MessageBuilder::new(family, NLM_F_DUMP);
    b.header(&[DEVLINK_CMD_HEALTH_REPORTER_GET, DEVLINK_GENL_VERSION, 0, 0]);
    b.finish()
}

/// Reads every health reporter; `Ok(None)` when the kernel has no devlink.
/// Problems with single messages go to `errors`.
pub trait HealthRead: Send {
    fn read_reporters(
        &mut self,
        errors: &mut Vec<HostError>,
    ) -> Result<Option<Vec<HealthReporter>>, HostError>;
}

/// The dump over devlink generic netlink.
pub struct DevlinkHealth {
    client: GenlClient,
}

impl DevlinkHealth {
    pub fn new(timeout: Duration) -> Self {
        DevlinkHealth {
            client: GenlClient::new("devlink", timeout),
        }
    }
}

impl HealthRead for DevlinkHealth {
    fn read_reporters(
        &mut self,
        errors: &mut Vec<HostError>,
    ) -> Result<Option<Vec<HealthReporter>>, HostError> {
        match self.client.request(dump_request) {
            Ok(None) => Ok(None),
            Ok(Some(payloads)) => Ok(Some(parse_dump(&payloads, errors))),
            Err(NlError::Kernel { errno, .. }) if errno == libc::EOPNOTSUPP => Ok(None),
            Err(e) => Err(HostError::request("devlink health", e)),
        }
    }
}

/// Replays a recorded dump from `<dir>/devlink-health.hex`: the payloads
/// (`genlmsghdr` and attributes) as hex, separated by `---` lines. A
/// missing file is a kernel without devlink.
#[derive(Debug, Clone)]
pub struct DevlinkReplay {
    dir: PathBuf,
}

impl DevlinkReplay {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DevlinkReplay { dir: dir.into() }
    }
}

impl HealthRead for DevlinkReplay {
    fn read_reporters(
        &mut self,
        errors: &mut Vec<HostError>,
    ) -> Result<Option<Vec<HealthReporter>>, HostError> {
        let path = self.dir.join(REPLAY_FILE);
        let text = match roce_host::fs::read_text_capped(&path, roce_host::fs::REPLAY_CAP) {
            Ok(t) => t,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(crate::io_error(&path, &e).into()),
        };
        let payloads =
            parse_hex_messages(&text).map_err(|e| ReadError::parse(&path, e.to_string()))?;
        Ok(Some(parse_dump(&payloads, errors)))
    }
}
