//! [`NetdevError`], the error of this crate's kernel readers (FEC, pause
//! statistics, module EEPROM, live and replayed): the netdev or replay file
//! concerned, the failed request or the content that did not parse, and
//! [`ErrorKind`] (roce_host's), what kind of failure that is. The decoders' own errors
//! ([`NlError`], [`ReplayError`], [`ModuleError`]) are its sources.
//!
//! The sources collect these as [`roce_host::HostError::Request`], named by
//! the netdev and the part (`"ens1np0: FEC"`); the text is the error's.

use std::path::PathBuf;

use roce_host::{ErrorKind, ReadError};
use roce_netlink::NlError;

use crate::genl::ReplayError;
use crate::module::{HalfPage, ModuleError};

/// A failed read of one netdev's FEC, pause statistics or module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetdevError {
    /// A netlink request or its reply; the collecting source names the
    /// netdev and the part.
    #[error(transparent)]
    Netlink(#[from] NlError),
    /// A half page of module EEPROM that the kernel did not give.
    #[error("{netdev}: module EEPROM {page:?}: {source}")]
    Eeprom {
        netdev: String,
        page: HalfPage,
        source: NlError,
    },
    /// A module whose pages do not decode.
    #[error("{netdev}: {source}")]
    Module { netdev: String, source: ModuleError },
    /// A replay file that exists and could not be read.
    #[error(transparent)]
    File(#[from] ReadError),
    /// A replay file whose text does not parse.
    #[error("{}: {source}", path.display())]
    Replay { path: PathBuf, source: ReplayError },
    /// A replayed reply that does not decode.
    #[error("{}: {source}", path.display())]
    ReplayReply { path: PathBuf, source: NlError },
}

/// The kind of a netlink request's failure: by the kernel's errno, a
/// timeout or an interrupted dump is busy, a reply that does not decode
/// malformed.
pub(crate) fn netlink_kind(e: &NlError) -> ErrorKind {
    match e {
        NlError::Io { errno, .. } | NlError::Kernel { errno, .. } => ErrorKind::of_errno(*errno),
        NlError::Timeout | NlError::DumpInterrupted => ErrorKind::Busy,
        NlError::Truncated { .. }
        | NlError::Malformed { .. }
        | NlError::NotUtf8 { .. }
        | NlError::MissingAttr { .. } => ErrorKind::Malformed,
        _ => ErrorKind::Failed,
    }
}

impl NetdevError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            NetdevError::Netlink(e) | NetdevError::Eeprom { source: e, .. } => netlink_kind(e),
            NetdevError::File(e) => e.error_kind(),
            NetdevError::Module { .. }
            | NetdevError::Replay { .. }
            | NetdevError::ReplayReply { .. } => ErrorKind::Malformed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::genl::ReplayFault;
    use std::path::Path;

    #[test]
    fn texts_name_the_netdev_or_the_file_and_kinds_follow_the_errno() {
        let kernel = |errno| NlError::Kernel {
            errno,
            message: None,
        };
        let e = NetdevError::from(kernel(libc::EBUSY));
        assert_eq!(e.to_string(), kernel(libc::EBUSY).to_string());
        assert_eq!(e.kind(), ErrorKind::Busy);
        let e = NetdevError::Eeprom {
            netdev: "ens1np0".into(),
            page: HalfPage::lower(0x50),
            source: kernel(libc::EPERM),
        };
        assert!(
            e.to_string()
                .starts_with("ens1np0: module EEPROM HalfPage {"),
            "{e}"
        );
        assert_eq!(e.kind(), ErrorKind::Permission);
        let path = Path::new("/r/ens1np0.fec");
        let e = NetdevError::from(ReadError::io(
            path,
            &std::io::Error::from_raw_os_error(libc::EACCES),
        ));
        assert_eq!(
            e.to_string(),
            "/r/ens1np0.fec: Permission denied (os error 13)"
        );
        assert_eq!(e.kind(), ErrorKind::Permission);
        let e = NetdevError::Replay {
            path: path.into(),
            source: ReplayError::new(3, ReplayFault::HexByte, "zz"),
        };
        assert_eq!(
            e.to_string(),
            "/r/ens1np0.fec: line 3: not a hex byte: \"zz\""
        );
        assert_eq!(e.kind(), ErrorKind::Malformed);
    }
}
