//! Pluggable module (optics and cables) identity and diagnostics from the
//! module EEPROM, read half a page at a time through ethtool netlink
//! (`ETHTOOL_MSG_MODULE_EEPROM_GET`), and the pure decoders of the three
//! memory maps in use on RDMA NICs:
//! - SFF-8636 (QSFP, QSFP+, QSFP28; identifiers 0x0C, 0x0D, 0x11);
//! - CMIS 4.0/5.x (QSFP-DD 0x18, OSFP 0x19, DSFP 0x1B, QSFP+/QSFP112 with
//!   CMIS 0x1E, SFP-DD 0x1F, SFP+ with CMIS 0x20: the identifiers
//!   ethtool's `is_cmis` check lists);
//! - SFF-8472 (SFP/SFP+/SFP28, identifier 0x03): the A0h identity and the
//!   A2h diagnostics, internally or externally calibrated (the external
//!   constants applied as ethtool applies them).
//!
//! What is decoded: identity (vendor, part number, revision, serial,
//! type), the medium (copper, parallel fibre, other optics), temperature,
//! supply voltage, per-lane Tx bias, Tx power and Rx power, and the
//! module's own alarm and warning thresholds, each only where the module
//! implements the monitor (absent, never 0). Offsets are
//! cited where they are used (specification, page, byte); they agree with
//! ethtool's decoders (`qsfp.h`/`qsfp.c`, `cmis.h`/`cmis.c`, `sfpdiag.c`).
//! Units (all specifications alike): temperature s16 in 1/256 °C, supply
//! u16 in 100 µV, bias u16 in 2 µA, optical power u16 in 0.1 µW; everything
//! leaves this module in base units (°C, V, A, W).
//!
//! Modules are slow I²C devices (a page is 128 bytes at 100-400 kHz, and
//! some modules stretch the clock), so the reader is meant to run on a slow
//! cadence (`netdevs.module_interval`), never every sample.
//!
//! Kernel request rules from `net/ethtool/eeprom.c`
//! (`eeprom_parse_request`): at most 128 bytes per request and never across
//! offset 128; pages other than 0 only in their upper half (offsets
//! 128-255); `I2C_ADDRESS` 0x50 (A0h) or 0x51 (A2h, SFF-8472 diagnostics).
//! Attribute numbers from `include/uapi/linux/ethtool_netlink.h`:
//! `ETHTOOL_MSG_MODULE_EEPROM_GET` 31, `..._GET_REPLY` 32,
//! `ETHTOOL_A_MODULE_EEPROM_{HEADER,OFFSET,LENGTH,PAGE,BANK,I2C_ADDRESS,DATA}`
//! 1..=7 (offset and length u32, page, bank and address u8, data binary).
//!
//! Layers: `module/maps.rs` holds the pure decoders of the three maps,
//! `module/netlink.rs` the `MODULE_EEPROM_GET` request and reply,
//! `module/replay.rs` the recorded EEPROMs of fixture trees; this file the
//! decoded types, the [`EepromRead`] trait and [`read_module`].

use std::collections::BTreeMap;

use crate::error::NetdevError;

mod maps;
mod netlink;
mod replay;

pub use maps::{decode, pages_needed};
pub use netlink::{
    eeprom_errno_is_absent, eeprom_request, parse_eeprom_reply, EthtoolEeprom,
    ETHTOOL_MSG_MODULE_EEPROM_GET, ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY,
};
pub use replay::{parse_eeprom_replay, EepromReplay};

/// `ETH_I2C_ADDRESS_LOW` / `_HIGH` (A0h / A2h in 8-bit notation).
pub const I2C_A0: u8 = 0x50;
pub const I2C_A2: u8 = 0x51;
/// Half a page: what one request may read.
pub const HALF: usize = 128;

/// One half page: the lower half of page 0 (offsets 0-127) or the upper
/// half of a page (offsets 128-255) at an I²C address and bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HalfPage {
    pub i2c: u8,
    pub page: u8,
    pub bank: u8,
    pub upper: bool,
}

impl HalfPage {
    pub const fn lower(i2c: u8) -> HalfPage {
        HalfPage {
            i2c,
            page: 0,
            bank: 0,
            upper: false,
        }
    }

    pub const fn upper(page: u8, bank: u8) -> HalfPage {
        HalfPage {
            i2c: I2C_A0,
            page,
            bank,
            upper: true,
        }
    }

    fn offset(self) -> u32 {
        if self.upper {
            HALF as u32
        } else {
            0
        }
    }
}

/// The half pages read from one module.
pub type Pages = BTreeMap<HalfPage, Vec<u8>>;

/// Which memory map the module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standard {
    Sff8636,
    Cmis,
    Sff8472,
}

impl Standard {
    pub fn as_str(self) -> &'static str {
        match self {
            Standard::Sff8636 => "sff8636",
            Standard::Cmis => "cmis",
            Standard::Sff8472 => "sff8472",
        }
    }

    /// The standard of an identifier (SFF-8024 Table 4-1, byte 0 of every
    /// map); `None` for identifiers this exporter does not decode.
    pub fn of(identifier: u8) -> Option<Standard> {
        match identifier {
            0x03 => Some(Standard::Sff8472),
            0x0C | 0x0D | 0x11 => Some(Standard::Sff8636),
            0x18 | 0x19 | 0x1B | 0x1E | 0x1F | 0x20 => Some(Standard::Cmis),
            _ => None,
        }
    }
}

/// The form factor name of an identifier (SFF-8024 Table 4-1).
pub fn type_name(identifier: u8) -> &'static str {
    match identifier {
        0x03 => "SFP",
        0x0C => "QSFP",
        0x0D => "QSFP+",
        0x11 => "QSFP28",
        0x18 => "QSFP-DD",
        0x19 => "OSFP",
        0x1B => "DSFP",
        0x1E => "QSFP+ (CMIS)",
        0x1F => "SFP-DD",
        0x20 => "SFP+ (CMIS)",
        _ => "unknown",
    }
}

/// Alarm and warning thresholds of one monitor, in base units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    pub high_alarm: f64,
    pub low_alarm: f64,
    pub high_warning: f64,
    pub low_warning: f64,
}

/// The module's own thresholds (absent on flat-memory modules, which have
/// no threshold page).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModuleThresholds {
    pub temperature_celsius: Option<Thresholds>,
    pub supply_volts: Option<Thresholds>,
    pub tx_bias_amperes: Option<Thresholds>,
    pub tx_power_watts: Option<Thresholds>,
    pub rx_power_watts: Option<Thresholds>,
}

/// Diagnostics of one lane (lane 0 is the module's lane 1); a monitor the
/// module does not implement is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lane {
    pub tx_bias_amperes: Option<f64>,
    pub tx_power_watts: Option<f64>,
    pub rx_power_watts: Option<f64>,
}

/// Everything decoded from one module.
#[derive(Debug, Clone, PartialEq)]
pub struct ModuleInfo {
    pub standard: Standard,
    pub identifier: u8,
    pub kind: &'static str,
    pub vendor: String,
    pub part: String,
    pub revision: String,
    pub serial: String,
    pub temperature_celsius: Option<f64>,
    pub supply_volts: Option<f64>,
    pub lanes: Vec<Lane>,
    /// Rx power is average power (`true`) or OMA (`false`).
    pub rx_power_average: Option<bool>,
    pub thresholds: ModuleThresholds,
    /// What the lanes run over, from the module's media codes.
    pub medium: Medium,
}

/// What a module's lanes run over, from its media codes (SFF-8024 rev
/// 4.8a: SFF-8636 extended compliance, Table 4-4; CMIS module media type
/// and media interface codes, Tables 4-5 to 4-7; names as
/// `sonic_xcvr/codes/public/sff8024.py` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    /// Copper cable (SFF-8636 transmitter technology 1010b-1111b, CMIS
    /// module type 03h): no optical lanes.
    Copper,
    /// One fibre per lane (SR4, SR8, SR10, DR4, PSM4): a lane far below
    /// its siblings is one fibre of the bundle.
    ParallelFibre,
    /// Optics whose lanes share a fibre (FR4, LR4, CWDM4, SWDM4, ...) or a
    /// single-lane medium: lanes differ by design.
    Optical,
    /// Nothing the media codes say.
    Unknown,
}

impl Medium {
    pub fn as_str(self) -> &'static str {
        match self {
            Medium::Copper => "copper",
            Medium::ParallelFibre => "parallel_fibre",
            Medium::Optical => "optical",
            Medium::Unknown => "unknown",
        }
    }
}

/// Why a module could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModuleError {
    #[error("module EEPROM: half page {0:?} missing or shorter than 128 bytes")]
    MissingPage(HalfPage),
    #[error("module identifier {0:#04x} is not SFF-8636, CMIS or SFF-8472")]
    UnknownIdentifier(u8),
}

/// Reads half pages of a module's EEPROM. `Ok(None)`: not available (no
/// module support in the driver, no module, or a page the module lacks).
pub trait EepromRead: Send {
    fn read_half(&mut self, netdev: &str, page: HalfPage) -> Result<Option<Vec<u8>>, NetdevError>;
}

/// Reads and decodes one module: lower page 0, then the pages its map
/// needs. `Ok(None)` when the netdev has no readable module.
pub fn read_module(
    io: &mut dyn EepromRead,
    netdev: &str,
) -> Result<Option<ModuleInfo>, NetdevError> {
    let Some(lower) = io.read_half(netdev, HalfPage::lower(I2C_A0))? else {
        return Ok(None);
    };
    let mut pages = Pages::new();
    let needed = pages_needed(&lower);
    pages.insert(HalfPage::lower(I2C_A0), lower);
    for id in needed {
        if let Some(data) = io.read_half(netdev, id)? {
            pages.insert(id, data);
        }
    }
    match decode(&pages) {
        Ok(info) => Ok(Some(info)),
        Err(source) => Err(NetdevError::Module {
            netdev: netdev.to_string(),
            source,
        }),
    }
}
