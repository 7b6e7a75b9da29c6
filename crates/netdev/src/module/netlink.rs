//! The module EEPROM over ethtool generic netlink: the
//! `MODULE_EEPROM_GET` request for one half page, its reply, and which
//! errnos mean a page or module that is not there.

use std::time::Duration;

use roce_netlink::{MessageBuilder, NlError};

use super::{EepromRead, HalfPage, HALF};
use crate::error::NetdevError;
use crate::fec::{ETHTOOL_A_HEADER_DEV_NAME, ETHTOOL_A_HEADER_FLAGS};
use crate::genl::{split, GenlClient};

pub const ETHTOOL_MSG_MODULE_EEPROM_GET: u8 = 31;
pub const ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY: u8 = 32;
const ETHTOOL_A_MODULE_EEPROM_HEADER: u16 = 1;
const ETHTOOL_A_MODULE_EEPROM_OFFSET: u16 = 2;
const ETHTOOL_A_MODULE_EEPROM_LENGTH: u16 = 3;
const ETHTOOL_A_MODULE_EEPROM_PAGE: u16 = 4;
const ETHTOOL_A_MODULE_EEPROM_BANK: u16 = 5;
const ETHTOOL_A_MODULE_EEPROM_I2C_ADDRESS: u16 = 6;
const ETHTOOL_A_MODULE_EEPROM_DATA: u16 = 7;

/// The `MODULE_EEPROM_GET` request for one half page.
pub fn eeprom_request(family: u16, netdev: &str, page: HalfPage) -> Result<Vec<u8>, NlError> {
    let mut b = MessageBuilder::new(family, 0);
    b.header(&[ETHTOOL_MSG_MODULE_EEPROM_GET, 1, 0, 0]);
    let nest = b.nest_begin(ETHTOOL_A_MODULE_EEPROM_HEADER);
    b.attr_str(ETHTOOL_A_HEADER_DEV_NAME, netdev)
        .attr_u32(ETHTOOL_A_HEADER_FLAGS, 0);
    b.nest_end(nest);
    b.attr_u32(ETHTOOL_A_MODULE_EEPROM_OFFSET, page.offset())
        .attr_u32(ETHTOOL_A_MODULE_EEPROM_LENGTH, HALF as u32)
        .attr_u8(ETHTOOL_A_MODULE_EEPROM_PAGE, page.page)
        .attr_u8(ETHTOOL_A_MODULE_EEPROM_BANK, page.bank)
        .attr_u8(ETHTOOL_A_MODULE_EEPROM_I2C_ADDRESS, page.i2c);
    b.finish()
}

/// Parses a `MODULE_EEPROM_GET_REPLY` payload: the bytes read.
pub fn parse_eeprom_reply(payload: &[u8]) -> Result<Vec<u8>, NlError> {
    let (cmd, attrs) = split(payload)?;
    if cmd != ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY {
        return Err(NlError::Malformed {
            what: "module EEPROM reply",
            detail: format!("command {cmd}, expected {ETHTOOL_MSG_MODULE_EEPROM_GET_REPLY}"),
        });
    }
    match attrs.find(ETHTOOL_A_MODULE_EEPROM_DATA)? {
        Some(a) => Ok(a.payload.to_vec()),
        None => Err(NlError::Malformed {
            what: "module EEPROM reply",
            detail: "no ETHTOOL_A_MODULE_EEPROM_DATA".into(),
        }),
    }
}

/// `MODULE_EEPROM_GET` over ethtool generic netlink.
pub struct EthtoolEeprom {
    client: GenlClient,
}

impl EthtoolEeprom {
    pub fn new(timeout: Duration) -> Self {
        EthtoolEeprom {
            client: GenlClient::new("ethtool", timeout),
        }
    }
}

impl EepromRead for EthtoolEeprom {
    fn read_half(&mut self, netdev: &str, page: HalfPage) -> Result<Option<Vec<u8>>, NetdevError> {
        match self
            .client
            .request(|family| eeprom_request(family, netdev, page))
        {
            Ok(None) => Ok(None),
            Ok(Some(replies)) => match replies.first() {
                Some(p) => Ok(Some(parse_eeprom_reply(p)?)),
                None => Ok(None),
            },
            Err(NlError::Kernel { errno, .. }) if eeprom_errno_is_absent(errno, page) => Ok(None),
            // The kernel answers MODULE_EEPROM_GET only with CAP_NET_ADMIN
            // (module pages are slow I2C reads): without it the optics are
            // absent, as on a driver without modules, not an error every
            // read (docs/security.md says which privilege shows them).
            Err(NlError::Kernel { errno, .. }) if errno == libc::EPERM || errno == libc::EACCES => {
                Ok(None)
            }
            Err(source) => Err(NetdevError::Eeprom {
                netdev: netdev.to_string(),
                page,
                source,
            }),
        }
    }
}

/// Whether an errno from `MODULE_EEPROM_GET` means "not there" rather than
/// a failure: no module support in the driver (EOPNOTSUPP); a page the
/// module does not have (EINVAL from the kernel's or driver's page check);
/// an empty cage or a page the module does not answer, which mlx5 reports
/// as EIO (`mlx5_query_mcia` turns a non-zero MCIA status into -EIO,
/// `drivers/net/ethernet/mellanox/mlx5/core/port.c`).
pub fn eeprom_errno_is_absent(errno: i32, page: HalfPage) -> bool {
    errno == libc::EOPNOTSUPP || errno == libc::EIO || (errno == libc::EINVAL && page.page != 0)
}
