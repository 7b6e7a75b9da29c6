//! The kernel parts that go over netlink (`roce-netlink`): DCB through
//! rtnetlink (`RTM_GETDCB` IEEE get, plus the CEE get for the peer's view
//! when the DCBX engine runs CEE; see [`crate::dcb`]) and the standard pause
//! statistics through ethtool generic netlink (`ETHTOOL_MSG_PAUSE_GET` with
//! `ETHTOOL_FLAG_STATS`). Sockets open lazily and are reopened by
//! `roce-netlink` after a broken exchange.
//!
//! The ethtool family is resolved by [`crate::genl::GenlClient`]. Numbers
//! from `include/uapi/linux/ethtool_netlink.h` (`ETHTOOL_GENL_NAME` "ethtool",
//! `ETHTOOL_GENL_VERSION` 1, `ETHTOOL_MSG_PAUSE_GET` 21,
//! `ETHTOOL_A_PAUSE_HEADER` 1, `ETHTOOL_A_PAUSE_STATS` 5,
//! `ETHTOOL_A_HEADER_DEV_NAME` 2, `ETHTOOL_A_HEADER_FLAGS` 3,
//! `ETHTOOL_FLAG_STATS` 1 << 2, `ETHTOOL_A_PAUSE_STAT_{TX,RX}_FRAMES` 2, 3).

use std::time::Duration;

use roce_netlink::{attrs, MessageBuilder, NlError, Protocol, Socket};

use crate::dcb::{DcbConfig, DcbError, DcbFault, RTM_GETDCB};
use crate::error::NetdevError;
use crate::genl::{GenlClient, GENL_HDRLEN};
use crate::reader::{DcbRead, PauseRead};
use crate::PauseStats;

const ETHTOOL_GENL_VERSION: u8 = 1;
const ETHTOOL_MSG_PAUSE_GET: u8 = 21;
const ETHTOOL_A_PAUSE_HEADER: u16 = 1;
const ETHTOOL_A_PAUSE_STATS: u16 = 5;
const ETHTOOL_A_HEADER_DEV_NAME: u16 = 2;
const ETHTOOL_A_HEADER_FLAGS: u16 = 3;
const ETHTOOL_FLAG_STATS: u32 = 1 << 2;
const ETHTOOL_A_PAUSE_STAT_TX_FRAMES: u16 = 2;
const ETHTOOL_A_PAUSE_STAT_RX_FRAMES: u16 = 3;

fn open(
    slot: &mut Option<Socket>,
    protocol: Protocol,
    timeout: Duration,
) -> Result<&mut Socket, NlError> {
    if slot.is_none() {
        *slot = Some(Socket::open(protocol, timeout)?);
    }
    slot.as_mut().ok_or(NlError::Timeout)
}

/// DCB over a `NETLINK_ROUTE` socket.
pub struct NetlinkDcb {
    socket: Option<Socket>,
    timeout: Duration,
}

impl NetlinkDcb {
    pub fn new(timeout: Duration) -> Self {
        NetlinkDcb {
            socket: None,
            timeout,
        }
    }
}

fn dcb_error(e: NlError) -> DcbError {
    match e {
        NlError::Kernel { errno, .. } => DcbError::from_errno(errno),
        other => DcbError::Netlink(other),
    }
}

impl DcbRead for NetlinkDcb {
    fn read_dcb(&mut self, netdev: &str) -> Result<DcbConfig, DcbError> {
        let socket = open(&mut self.socket, Protocol::Route, self.timeout).map_err(dcb_error)?;
        let replies = socket
            .request(crate::dcb::request(netdev, 0))
            .map_err(dcb_error)?;
        let reply = replies
            .iter()
            .find(|m| m.kind == RTM_GETDCB)
            .ok_or(DcbError::Malformed(DcbFault::NoReply))?;
        let mut config = crate::dcb::decode_payload(&reply.payload)?;
        // A CEE DCBX engine keeps the peer's view in the CEE attributes:
        // ask for them only when CEE is the version in operation (one more
        // request; on mlx5, which sets both version bits, it would cost
        // about 200 firmware register reads for no data).
        if config.peer.is_empty() && config.dcbx.is_some_and(crate::dcb::cee_is_operating) {
            let request = crate::dcb::request_cmd(netdev, 0, crate::dcb::DCB_CMD_CEE_GET);
            if let Ok(replies) = socket.request(request) {
                if let Some(r) = replies.iter().find(|m| m.kind == RTM_GETDCB) {
                    if let Ok(cee) = crate::dcb::decode_cee_payload(&r.payload) {
                        config.peer = cee.peer;
                    }
                }
            }
        }
        Ok(config)
    }
}

/// Standard pause statistics over ethtool generic netlink (a kernel
/// before 5.6 has no ethtool family: asked once).
pub struct EthtoolPause {
    client: GenlClient,
}

impl EthtoolPause {
    pub fn new(timeout: Duration) -> Self {
        EthtoolPause {
            client: GenlClient::new("ethtool", timeout),
        }
    }
}

/// Parses an `ETHTOOL_MSG_PAUSE_GET_REPLY` payload (after the `nlmsghdr`):
/// `Ok(None)` when the driver reports no pause statistics (the kernel
/// leaves out counters the driver did not set).
pub fn parse_pause_reply(payload: &[u8]) -> Result<Option<PauseStats>, NlError> {
    let Some(body) = payload.get(GENL_HDRLEN..) else {
        return Err(NlError::Truncated {
            what: "genlmsghdr",
            need: GENL_HDRLEN,
            have: payload.len(),
        });
    };
    let Some(stats) = attrs(body).find(ETHTOOL_A_PAUSE_STATS)? else {
        return Ok(None);
    };
    let mut out = PauseStats::default();
    for a in stats.nested() {
        let a = a?;
        match a.kind {
            ETHTOOL_A_PAUSE_STAT_TX_FRAMES => out.tx_frames = Some(a.as_u64()?),
            ETHTOOL_A_PAUSE_STAT_RX_FRAMES => out.rx_frames = Some(a.as_u64()?),
            _ => {}
        }
    }
    Ok((out.tx_frames.is_some() || out.rx_frames.is_some()).then_some(out))
}

impl PauseRead for EthtoolPause {
    fn read_pause(&mut self, netdev: &str) -> Result<Option<PauseStats>, NetdevError> {
        let replies = self.client.request(|family| {
            let mut b = MessageBuilder::new(family, 0);
            b.header(&[ETHTOOL_MSG_PAUSE_GET, ETHTOOL_GENL_VERSION, 0, 0]);
            let nest = b.nest_begin(ETHTOOL_A_PAUSE_HEADER);
            b.attr_str(ETHTOOL_A_HEADER_DEV_NAME, netdev)
                .attr_u32(ETHTOOL_A_HEADER_FLAGS, ETHTOOL_FLAG_STATS);
            b.nest_end(nest);
            b.finish()
        });
        match replies {
            Ok(replies) => match replies.as_deref().and_then(<[_]>::first) {
                Some(payload) => Ok(parse_pause_reply(payload)?),
                None => Ok(None),
            },
            // A driver without pause support answers EOPNOTSUPP.
            Err(NlError::Kernel { errno, .. }) if errno == libc::EOPNOTSUPP => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}
