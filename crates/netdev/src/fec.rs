//! Forward error correction: the FEC mode in use and the FEC statistics of
//! a netdev through ethtool netlink (`ETHTOOL_MSG_FEC_GET` with
//! `ETHTOOL_FLAG_STATS`), and the pre- and post-FEC bit error ratios derived
//! from two readings and the link rate.
//!
//! Numbers from `include/uapi/linux/ethtool_netlink.h` (and its generated
//! successor `ethtool_netlink_generated.h`, same values):
//! `ETHTOOL_MSG_FEC_GET` 29, `ETHTOOL_MSG_FEC_GET_REPLY` 30,
//! `ETHTOOL_A_FEC_{HEADER,MODES,AUTO,ACTIVE,STATS}` 1..=5,
//! `ETHTOOL_A_FEC_STAT_{PAD,CORRECTED,UNCORR,CORR_BITS}` 1..=4,
//! `ETHTOOL_A_HEADER_{DEV_NAME,FLAGS}` 2, 3, `ETHTOOL_FLAG_COMPACT_BITSETS`
//! 1 << 0, `ETHTOOL_FLAG_STATS` 1 << 2; link mode bits from
//! `include/uapi/linux/ethtool.h` (`ETHTOOL_LINK_MODE_FEC_NONE_BIT` 49,
//! `_RS_BIT` 50, `_BASER_BIT` 51, `_LLRS_BIT` 74).
//!
//! Reply layout from `net/ethtool/fec.c` (`fec_put_stats`,
//! `fec_stats_recalc`): each statistic is one attribute holding an array of
//! u64 in host order, the total first and then one entry per lane when the
//! driver gives lanes (the total is then their sum). A statistic the driver
//! did not set (`ETHTOOL_STAT_NOT_SET`) is sent with no entries at all: a
//! zero-length attribute, which is "not available", never 0. Drivers
//! without `get_fecparam` answer EOPNOTSUPP; the `ACTIVE` attribute is left
//! out when the driver reports no mode.

use std::path::PathBuf;
use std::time::Duration;

use roce_netlink::{MessageBuilder, NlError};

use crate::error::NetdevError;
use crate::genl::{parse_hex_messages, replay_path, split, GenlClient};

pub const ETHTOOL_MSG_FEC_GET: u8 = 29;
pub const ETHTOOL_MSG_FEC_GET_REPLY: u8 = 30;
const ETHTOOL_GENL_VERSION: u8 = 1;
const ETHTOOL_A_FEC_HEADER: u16 = 1;
const ETHTOOL_A_FEC_AUTO: u16 = 3;
const ETHTOOL_A_FEC_ACTIVE: u16 = 4;
const ETHTOOL_A_FEC_STATS: u16 = 5;
const ETHTOOL_A_FEC_STAT_CORRECTED: u16 = 2;
const ETHTOOL_A_FEC_STAT_UNCORR: u16 = 3;
const ETHTOOL_A_FEC_STAT_CORR_BITS: u16 = 4;
pub(crate) const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
pub(crate) const ETHTOOL_A_HEADER_FLAGS: u16 = 3;
const ETHTOOL_FLAG_COMPACT_BITSETS: u32 = 1;
const ETHTOOL_FLAG_STATS: u32 = 1 << 2;
const LINK_MODE_FEC_NONE: u32 = 49;
const LINK_MODE_FEC_RS: u32 = 50;
const LINK_MODE_FEC_BASER: u32 = 51;
const LINK_MODE_FEC_LLRS: u32 = 74;
/// `ETHTOOL_MAX_LANES` in `include/uapi/linux/ethtool.h`.
const ETHTOOL_MAX_LANES: usize = 8;

/// The FEC encoding in use on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FecMode {
    /// No FEC (`ethtool --show-fec`: "None"/"off").
    Off,
    /// Reed-Solomon (Clause 91/134, RS(528,514) or RS(544,514)).
    Rs,
    /// BASE-R "Firecode" (Clause 74).
    BaseR,
    /// Low-latency Reed-Solomon (Clause 161).
    Llrs,
    /// A link mode bit this exporter does not know.
    Other(u32),
}

impl FecMode {
    pub fn from_link_mode(bit: u32) -> FecMode {
        match bit {
            LINK_MODE_FEC_NONE => FecMode::Off,
            LINK_MODE_FEC_RS => FecMode::Rs,
            LINK_MODE_FEC_BASER => FecMode::BaseR,
            LINK_MODE_FEC_LLRS => FecMode::Llrs,
            other => FecMode::Other(other),
        }
    }

    /// The name `ethtool --show-fec` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            FecMode::Off => "off",
            FecMode::Rs => "rs",
            FecMode::BaseR => "baser",
            FecMode::Llrs => "llrs",
            FecMode::Other(_) => "other",
        }
    }
}

/// One FEC statistic: the total and, when the driver counts per lane, each
/// lane (lane 0 first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FecCounter {
    pub total: u64,
    pub lanes: Vec<u64>,
}

/// What one `FEC_GET` said. Every part is `None` when the driver does not
/// report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FecInfo {
    pub active: Option<FecMode>,
    /// FEC chosen by autonegotiation (`ETHTOOL_A_FEC_AUTO`).
    pub auto: Option<bool>,
    /// Codewords (blocks) with errors that FEC corrected.
    pub corrected_blocks: Option<FecCounter>,
    /// Codewords FEC could not correct (frames lost to the link).
    pub uncorrectable_blocks: Option<FecCounter>,
    /// Bits FEC corrected.
    pub corrected_bits: Option<FecCounter>,
}

fn counter(payload: &[u8]) -> Result<Option<FecCounter>, NlError> {
    if payload.is_empty() {
        return Ok(None);
    }
    if !payload.len().is_multiple_of(8) || payload.len() > 8 * (1 + ETHTOOL_MAX_LANES) {
        return Err(NlError::Malformed {
            what: "FEC statistic",
            detail: format!("{} bytes is not 1 to 9 u64 values", payload.len()),
        });
    }
    let mut values = payload.chunks_exact(8).map(|c| {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        u64::from_ne_bytes(b)
    });
    let total = values.next().unwrap_or(0);
    Ok(Some(FecCounter {
        total,
        lanes: values.collect(),
    }))
}

/// Parses an `ETHTOOL_MSG_FEC_GET_REPLY` payload (after the `nlmsghdr`).
pub fn parse_fec_reply(payload: &[u8]) -> Result<FecInfo, NlError> {
    let (cmd, attrs) = split(payload)?;
    if cmd != ETHTOOL_MSG_FEC_GET_REPLY {
        return Err(NlError::Malformed {
            what: "FEC reply",
            detail: format!("command {cmd}, expected {ETHTOOL_MSG_FEC_GET_REPLY}"),
        });
    }
    let mut out = FecInfo::default();
    for a in attrs {
        let a = a?;
        match a.kind {
            ETHTOOL_A_FEC_AUTO => out.auto = Some(a.as_u8()? != 0),
            ETHTOOL_A_FEC_ACTIVE => out.active = Some(FecMode::from_link_mode(a.as_u32()?)),
            ETHTOOL_A_FEC_STATS => {
                for s in a.nested() {
                    let s = s?;
                    match s.kind {
                        ETHTOOL_A_FEC_STAT_CORRECTED => out.corrected_blocks = counter(s.payload)?,
                        ETHTOOL_A_FEC_STAT_UNCORR => out.uncorrectable_blocks = counter(s.payload)?,
                        ETHTOOL_A_FEC_STAT_CORR_BITS => out.corrected_bits = counter(s.payload)?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The `ETHTOOL_MSG_FEC_GET` request for one netdev, with statistics.
pub fn fec_request(family: u16, netdev: &str) -> Result<Vec<u8>, NlError> {
    let mut b = MessageBuilder::new(family, 0);
    b.header(&[ETHTOOL_MSG_FEC_GET, ETHTOOL_GENL_VERSION, 0, 0]);
    let nest = b.nest_begin(ETHTOOL_A_FEC_HEADER);
    b.attr_str(ETHTOOL_A_HEADER_DEV_NAME, netdev).attr_u32(
        ETHTOOL_A_HEADER_FLAGS,
        ETHTOOL_FLAG_STATS | ETHTOOL_FLAG_COMPACT_BITSETS,
    );
    b.nest_end(nest);
    b.finish()
}

/// Bit error ratio over an interval: `errors` bit errors while
/// `bits_per_second` flowed for `seconds`. `None` when no time passed or the
/// rate is unknown.
pub fn ber(errors: u64, seconds: f64, bits_per_second: f64) -> Option<f64> {
    let bits = seconds * bits_per_second;
    (seconds > 0.0 && bits_per_second > 0.0 && bits.is_finite()).then(|| errors as f64 / bits)
}

/// Bit error ratios of one interval between two [`FecInfo`] readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FecBer {
    /// Pre-FEC (raw) BER: corrected bits over the bits received. `None`
    /// without a corrected-bits counter: corrected blocks do not say how
    /// many bits each held.
    pub pre_fec: Option<f64>,
    /// Pre-FEC BER of each lane, at the link rate divided by the lanes.
    pub pre_fec_lanes: Vec<f64>,
    /// Post-FEC BER, a lower bound: each uncorrectable codeword holds at
    /// least one bit error that reached the MAC (`mlxlink` "effective BER"
    /// counts the same way).
    pub post_fec: Option<f64>,
}

fn delta(prev: Option<&FecCounter>, cur: Option<&FecCounter>) -> Option<(u64, Vec<u64>)> {
    let (p, c) = (prev?, cur?);
    // A smaller value is a reset (driver reload): no rate this interval.
    let total = c.total.checked_sub(p.total)?;
    let lanes = if p.lanes.len() == c.lanes.len() {
        c.lanes
            .iter()
            .zip(&p.lanes)
            .map(|(c, p)| c.checked_sub(*p))
            .collect::<Option<Vec<u64>>>()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    Some((total, lanes))
}

/// The code a link's corrected bits are counted under, as [`line_rate`]
/// tells it from the FEC mode, the speed and the lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FecCode {
    /// RS(544,514) "KP4": PAM4 lanes of 50 Gb/s and more.
    Rs544,
    /// RS(528,514) "KR4": NRZ lanes below 50 Gb/s.
    Rs528,
    /// BASE-R "Firecode" (Clause 74).
    BaseR,
    /// No FEC, or a mode this exporter does not know: the MAC rate.
    MacRate,
}

impl FecCode {
    pub fn as_str(self) -> &'static str {
        match self {
            FecCode::Rs544 => "RS(544,514)",
            FecCode::Rs528 => "RS(528,514)",
            FecCode::BaseR => "BASE-R",
            FecCode::MacRate => "MAC rate",
        }
    }
}

impl std::fmt::Display for FecCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The bit rate on the wire that FEC corrects bits of, for a link of
/// `speed_mbps` (the MAC rate, sysfs `speed`) under FEC `mode`, and the
/// code's name. RS-FEC transcodes 64b/66b to 256b/257b and adds parity:
/// RS(528,514) ("KR4", NRZ lanes below 50 Gb/s) runs at 66/64 of the MAC
/// rate (103.125 Gb/s for 100G), RS(544,514) ("KP4", PAM4 lanes of 50 Gb/s
/// and more) at 257/256 x 544/514 = 1.0625 (425 Gb/s for 400G); BASE-R
/// FEC keeps 64b/66b (66/64). Which RS code: by the per-lane rate when the
/// driver counts lanes (`lanes` > 0), else RS(544,514) from 200 Gb/s up.
/// Without FEC, or a mode this exporter does not know, the MAC rate.
pub fn line_rate(mode: Option<FecMode>, speed_mbps: u64, lanes: usize) -> (f64, FecCode) {
    let speed = speed_mbps as f64 * 1e6;
    match mode {
        Some(FecMode::Rs) => {
            let pam4 = if lanes > 0 {
                speed_mbps / lanes as u64 >= 50_000
            } else {
                speed_mbps >= 200_000
            };
            if pam4 {
                (speed * 257.0 / 256.0 * 544.0 / 514.0, FecCode::Rs544)
            } else {
                (speed * 66.0 / 64.0, FecCode::Rs528)
            }
        }
        Some(FecMode::BaseR) => (speed * 66.0 / 64.0, FecCode::BaseR),
        _ => (speed, FecCode::MacRate),
    }
}

/// The BERs between two readings `seconds` apart on a link of
/// `speed_mbps` (sysfs `speed`), at the line rate of the active FEC
/// mode ([`line_rate`]).
pub fn fec_ber(prev: &FecInfo, cur: &FecInfo, seconds: f64, speed_mbps: u64) -> FecBer {
    let lanes = cur.corrected_bits.as_ref().map_or(0, |c| c.lanes.len());
    let (rate, _) = line_rate(cur.active, speed_mbps, lanes);
    let mut out = FecBer::default();
    if let Some((total, lanes)) = delta(prev.corrected_bits.as_ref(), cur.corrected_bits.as_ref()) {
        out.pre_fec = ber(total, seconds, rate);
        if !lanes.is_empty() {
            let lane_rate = rate / lanes.len() as f64;
            out.pre_fec_lanes = lanes
                .iter()
                .filter_map(|&e| ber(e, seconds, lane_rate))
                .collect();
        }
    }
    if let Some((total, _)) = delta(
        prev.uncorrectable_blocks.as_ref(),
        cur.uncorrectable_blocks.as_ref(),
    ) {
        out.post_fec = ber(total, seconds, rate);
    }
    out
}

/// Reads the FEC state of one netdev; `Ok(None)` when the driver or kernel
/// has none (not a failure).
pub trait FecRead: Send {
    fn read_fec(&mut self, netdev: &str) -> Result<Option<FecInfo>, NetdevError>;
}

/// `FEC_GET` over ethtool generic netlink.
pub struct EthtoolFec {
    client: GenlClient,
}

impl EthtoolFec {
    pub fn new(timeout: Duration) -> Self {
        EthtoolFec {
            client: GenlClient::new("ethtool", timeout),
        }
    }
}

impl FecRead for EthtoolFec {
    fn read_fec(&mut self, netdev: &str) -> Result<Option<FecInfo>, NetdevError> {
        match self.client.request(|family| fec_request(family, netdev)) {
            Ok(None) => Ok(None),
            Ok(Some(replies)) => match replies.first() {
                Some(p) => Ok(Some(parse_fec_reply(p)?)),
                None => Ok(None),
            },
            Err(NlError::Kernel { errno, .. }) if errno == libc::EOPNOTSUPP => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// Replays a recorded `FEC_GET` reply payload (`genlmsghdr` and
/// attributes, as hex text, see [`parse_hex_messages`]) from
/// `<dir>/<netdev>.fec`; a missing file is a driver without FEC.
#[derive(Debug, Clone)]
pub struct FecReplay {
    dir: PathBuf,
}

impl FecReplay {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FecReplay { dir: dir.into() }
    }
}

impl FecRead for FecReplay {
    fn read_fec(&mut self, netdev: &str) -> Result<Option<FecInfo>, NetdevError> {
        let Some(path) = replay_path(&self.dir, netdev, "fec") else {
            return Ok(None);
        };
        let text = match roce_host::fs::read_text_capped(&path, roce_host::fs::REPLAY_CAP) {
            Ok(t) => t,
            Err(e) if roce_host::errno::is_absent(&e) => return Ok(None),
            Err(e) => return Err(crate::io_error(&path, &e).into()),
        };
        let msgs = match parse_hex_messages(&text) {
            Ok(m) => m,
            Err(source) => return Err(NetdevError::Replay { path, source }),
        };
        let payload = msgs.first().map(Vec::as_slice).unwrap_or(&[]);
        match parse_fec_reply(payload) {
            Ok(f) => Ok(Some(f)),
            Err(source) => Err(NetdevError::ReplayReply { path, source }),
        }
    }
}
