//! [`DcbError`], why DCB could not be read: the kernel's answer, the part
//! of a reply that was cut short or does not fit its layout, the netlink
//! exchange below DCB, or the replay file.

use std::path::PathBuf;

use roce_host::{ErrorKind, ReadError};
use roce_netlink::NlError;

use crate::genl::ReplayError;

/// Why DCB could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DcbError {
    /// The netdev has no DCB support (EOPNOTSUPP): not a failure.
    #[error("DCB not supported")]
    Unsupported,
    #[error("no such netdev")]
    NoDevice,
    #[error("kernel error: {}", std::io::Error::from_raw_os_error(*errno))]
    Errno { errno: i32 },
    #[error("truncated reply: {0}")]
    Truncated(DcbPart),
    #[error("malformed reply: {0}")]
    Malformed(DcbFault),
    /// The request or its reply, below DCB.
    #[error("netlink: {0}")]
    Netlink(NlError),
    /// A replay file that exists and could not be read.
    #[error(transparent)]
    File(ReadError),
    /// A replay file whose text does not parse.
    #[error("{}: {source}", path.display())]
    Replay { path: PathBuf, source: ReplayError },
}

impl DcbError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            DcbError::Unsupported => ErrorKind::Failed,
            DcbError::NoDevice => ErrorKind::Absent,
            DcbError::Errno { errno } => ErrorKind::of_errno(*errno),
            DcbError::Truncated(_) | DcbError::Malformed(_) | DcbError::Replay { .. } => {
                ErrorKind::Malformed
            }
            DcbError::Netlink(e) => crate::error::netlink_kind(e),
            DcbError::File(e) => e.error_kind(),
        }
    }
}

/// The part of a DCB reply that was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DcbPart {
    #[error("netlink header")]
    NetlinkHeader,
    #[error("netlink message")]
    NetlinkMessage,
    #[error("netlink error code")]
    NetlinkErrorCode,
    #[error("attribute header")]
    AttributeHeader,
    #[error("attribute payload")]
    AttributePayload,
    #[error("dcbmsg")]
    Dcbmsg,
    #[error("ieee_pfc")]
    IeeePfc,
    #[error("peer ieee_pfc")]
    PeerIeeePfc,
    #[error("trust selector")]
    TrustSelector,
    #[error("dcb_app")]
    DcbApp,
    #[error("ieee_ets")]
    IeeeEts,
    #[error("dcbnl_buffer")]
    DcbnlBuffer,
    #[error("DCB_ATTR_DCBX")]
    DcbxMode,
    #[error("cee_pg")]
    CeePg,
    #[error("cee_pfc")]
    CeePfc,
}

/// What in a DCB reply does not fit its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DcbFault {
    #[error("no RTM_GETDCB reply")]
    NoReply,
    #[error("attribute length below its header")]
    AttributeLength,
    #[error("netlink length below its header")]
    NetlinkLength,
    #[error("acknowledgement instead of a DCB reply")]
    Acknowledgement,
    #[error("unexpected message type")]
    MessageType,
    #[error("reply to another DCB command")]
    OtherCommand,
    #[error("no DCB_ATTR_IEEE")]
    NoIeee,
    #[error("ieee_ets prio_tc above 7")]
    PrioTcAbove7,
    #[error("dcbnl_buffer prio2buffer above 7")]
    Prio2BufferAbove7,
    #[error("cee_pg prio_pg above 7")]
    PrioPgAbove7,
}

impl DcbError {
    /// Classifies a netlink error code (positive errno).
    pub fn from_errno(errno: i32) -> DcbError {
        match errno {
            libc::EOPNOTSUPP => DcbError::Unsupported,
            libc::ENODEV => DcbError::NoDevice,
            errno => DcbError::Errno { errno },
        }
    }
}
