//! The crate's one error type: socket steps with their errno, kernel
//! replies, and every way a buffer can be malformed.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NlError {
    /// A socket call failed; `op` names it (`socket`, `bind`, `sendto`, ...).
    #[error("netlink {op} failed: errno {errno} ({})", errno_name(*errno))]
    Io { op: &'static str, errno: i32 },
    /// No answer (or no complete answer) within the socket's timeout.
    #[error("netlink request timed out")]
    Timeout,
    /// The kernel answered the request with `NLMSG_ERROR` and this errno
    /// (positive, e.g. `libc::EINVAL`). `message` is the extended-ack text
    /// (`NLMSGERR_ATTR_MSG`) when the kernel gave one.
    #[error("kernel refused the netlink request: errno {errno} ({}){}", errno_name(*errno), fmt_msg(message))]
    Kernel { errno: i32, message: Option<String> },
    /// The kernel dropped messages for this socket (`NLMSG_OVERRUN`, or
    /// `recv` failing with ENOBUFS): the answer is incomplete.
    #[error("netlink receive buffer overrun: answer incomplete")]
    Overrun,
    /// A dump changed while it was being read (`NLM_F_DUMP_INTR`); asking
    /// again gives a consistent one.
    #[error("netlink dump interrupted by a concurrent change")]
    DumpInterrupted,
    /// The answer grew past the socket's byte cap.
    #[error("netlink answer exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// A buffer ended before a header or value it announced.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    /// A length field that cannot be right (below its own header size,
    /// past the end of the buffer, over 64 KiB for an attribute).
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    /// A string attribute that is not UTF-8.
    #[error("attribute {kind} is not UTF-8")]
    NotUtf8 { kind: u16 },
    /// An attribute the message must carry is absent.
    #[error("missing attribute {what}")]
    MissingAttr { what: &'static str },
}

impl NlError {
    /// The errno behind a kernel refusal or a failed socket call.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NlError::Io { errno, .. } | NlError::Kernel { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

fn fmt_msg(m: &Option<String>) -> String {
    match m {
        Some(m) => format!(": {m}"),
        None => String::new(),
    }
}

/// Short names for the errnos netlink callers meet; the number is always
/// printed too.
fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ENOBUFS => "ENOBUFS",
        libc::ECONNREFUSED => "ECONNREFUSED",
        _ => "errno",
    }
}
