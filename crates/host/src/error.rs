//! The errors readers report: [`ReadError`] for a file that should have been
//! readable and was not (its path, and the errno or the reason its content
//! did not parse), and [`HostError`], any problem a source met that did not
//! stop it: such a file, a failed request to the kernel or a library, or a
//! configured folder that cannot be listed.
//!
//! Two causes carry no errno and are told apart by the payload of the
//! `io::Error` the file layer returns: [`NotRegular`] (a FIFO, a device, a
//! socket where an attribute file should be: refused at open, never read)
//! and [`Stuck`] (a read of this file that has not returned within its
//! per-item deadline: the file is not touched again until it returns).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The payload of an open refused because the file is not a regular file;
/// the type as `named` words it ("a FIFO", "a character device").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotRegular(pub &'static str);

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not a regular file ({}): refused, never read", self.0)
    }
}

impl std::error::Error for NotRegular {}

impl NotRegular {
    /// The error an open returns for a file of this type.
    pub fn error(file_type: &'static str) -> io::Error {
        io::Error::other(NotRegular(file_type))
    }

    /// The type named by `e`, when `e` is such a refusal.
    pub fn of(e: &io::Error) -> Option<&'static str> {
        e.get_ref()
            .and_then(|r| r.downcast_ref::<NotRegular>())
            .map(|n| n.0)
    }
}

/// The payload of a call not made because an earlier read of the same file
/// is still blocked past its deadline, or because the reader it belongs to
/// was left to such a read (`abandoned`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stuck {
    pub abandoned: bool,
}

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.abandoned {
            f.write_str("not read: this reader was left to a stuck read")
        } else {
            f.write_str("not read: an earlier read of this file has not returned")
        }
    }
}

impl std::error::Error for Stuck {}

impl Stuck {
    pub fn error(abandoned: bool) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, Stuck { abandoned })
    }

    /// Whether `e` is such a call not made.
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|r| r.is::<Stuck>())
    }
}

/// A file that should have been readable and was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadError {
    pub path: PathBuf,
    pub kind: ReadErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadErrorKind {
    /// The read failed with this errno (EACCES, EIO, ...).
    Io(i32),
    /// The file was read but its content did not parse.
    Parse(String),
    /// Not a regular file (the type, "a FIFO"): refused at open, never read.
    NotRegular(&'static str),
    /// A read that did not return within its per-item deadline.
    Stuck(Duration),
    /// Not read because of what it is, and why (a name that is not UTF-8,
    /// entries past a per-object cap).
    Refused(String),
}

impl ReadError {
    /// A failed system call on `path`.
    pub fn io(path: &Path, e: &io::Error) -> Self {
        let kind = match NotRegular::of(e) {
            Some(t) => ReadErrorKind::NotRegular(t),
            None => ReadErrorKind::Io(crate::errno::errno(e)),
        };
        ReadError {
            path: path.to_path_buf(),
            kind,
        }
    }

    /// `path` not read, and why.
    pub fn refused(path: &Path, why: impl Into<String>) -> Self {
        ReadError {
            path: path.to_path_buf(),
            kind: ReadErrorKind::Refused(why.into()),
        }
    }

    /// A read of `path` still blocked `after` its start.
    pub fn stuck(path: &Path, after: Duration) -> Self {
        ReadError {
            path: path.to_path_buf(),
            kind: ReadErrorKind::Stuck(after),
        }
    }

    /// Content of `path` that did not parse, and why.
    pub fn parse(path: &Path, msg: impl Into<String>) -> Self {
        ReadError {
            path: path.to_path_buf(),
            kind: ReadErrorKind::Parse(msg.into()),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ReadErrorKind::Io(errno) => {
                write!(
                    f,
                    "{}: {}",
                    self.path.display(),
                    io::Error::from_raw_os_error(*errno)
                )
            }
            ReadErrorKind::Parse(msg) => write!(f, "{}: {}", self.path.display(), msg),
            ReadErrorKind::NotRegular(t) => {
                write!(f, "{}: {}", self.path.display(), NotRegular(t))
            }
            ReadErrorKind::Refused(why) => write!(f, "{}: {why}", self.path.display()),
            ReadErrorKind::Stuck(after) => write!(
                f,
                "{}: read did not return within {after:?}: left to it, its value absent until it returns",
                self.path.display()
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// What kind of problem an error is: the `kind` label of
/// `roce_collector_errors_total`, so that an operator tells a device that
/// went away from a permission the exporter lacks, from data it could not
/// parse, from a kernel that was busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The file or device went away (ENOENT, ENODEV, ENXIO, ESRCH).
    Absent,
    /// Not allowed (EACCES, EPERM).
    Permission,
    /// Read, but its content did not parse.
    Malformed,
    /// The kernel or device asked to try again (EBUSY, EAGAIN, EINTR,
    /// ETIMEDOUT).
    Busy,
    /// Anything else: another errno, a request the kernel or a library
    /// refused.
    Failed,
    /// A read or request that did not return within its per-item deadline:
    /// counted once when it sticks; its value is absent until it returns.
    Timeout,
    /// Not read because of what it is: not a regular file (a FIFO, a
    /// device), a name that is not UTF-8, an entry past a per-object cap.
    Refused,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::Absent,
        ErrorKind::Permission,
        ErrorKind::Malformed,
        ErrorKind::Busy,
        ErrorKind::Failed,
        ErrorKind::Timeout,
        ErrorKind::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Absent => "absent",
            ErrorKind::Permission => "permission",
            ErrorKind::Malformed => "malformed",
            ErrorKind::Busy => "busy",
            ErrorKind::Failed => "failed",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Refused => "refused",
        }
    }

    /// The kind of an I/O error: by its errno where it carries one, else
    /// by its class (a timeout is busy, a bad input malformed).
    pub fn of_io(e: &std::io::Error) -> ErrorKind {
        use std::io::ErrorKind as K;
        if NotRegular::of(e).is_some() {
            return ErrorKind::Refused;
        }
        if Stuck::is(e) {
            return ErrorKind::Timeout;
        }
        if let Some(errno) = e.raw_os_error() {
            return ErrorKind::of_errno(errno);
        }
        match e.kind() {
            K::NotFound => ErrorKind::Absent,
            K::PermissionDenied => ErrorKind::Permission,
            K::InvalidInput | K::InvalidData => ErrorKind::Malformed,
            K::TimedOut | K::WouldBlock | K::ResourceBusy | K::Interrupted => ErrorKind::Busy,
            _ => ErrorKind::Failed,
        }
    }

    /// The kind of a failed system call's errno.
    pub fn of_errno(errno: i32) -> ErrorKind {
        match errno {
            libc::ENOENT | libc::ENODEV | libc::ENXIO | libc::ESRCH => ErrorKind::Absent,
            libc::EACCES | libc::EPERM => ErrorKind::Permission,
            libc::EBUSY | libc::EAGAIN | libc::EINTR | libc::ETIMEDOUT => ErrorKind::Busy,
            _ => ErrorKind::Failed,
        }
    }
}

impl ReadError {
    pub fn error_kind(&self) -> ErrorKind {
        match self.kind {
            ReadErrorKind::Io(errno) => ErrorKind::of_errno(errno),
            ReadErrorKind::Parse(_) => ErrorKind::Malformed,
            ReadErrorKind::NotRegular(_) | ReadErrorKind::Refused(_) => ErrorKind::Refused,
            ReadErrorKind::Stuck(_) => ErrorKind::Timeout,
        }
    }
}

/// A problem a source met that did not stop it: the value concerned is
/// absent, the rest was read. Logged, counted and listed by collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// A file that should have been readable and was not.
    File(ReadError),
    /// A request to the kernel, a library or the network that failed (an
    /// ethtool ioctl, a netlink request, NVML, a DNS lookup): what was
    /// asked, the answer, and its kind.
    Request {
        what: String,
        error: String,
        kind: ErrorKind,
    },
    /// A configured folder (`setting` names it) that cannot be listed.
    Unlistable {
        setting: &'static str,
        dir: PathBuf,
        errno: i32,
    },
}

impl HostError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            HostError::File(e) => e.error_kind(),
            HostError::Request { kind, .. } => *kind,
            HostError::Unlistable { errno, .. } => ErrorKind::of_errno(*errno),
        }
    }

    /// A failed request of no more precise kind.
    pub fn request(what: impl Into<String>, error: impl std::fmt::Display) -> Self {
        HostError::request_of(what, error, ErrorKind::Failed)
    }

    /// A failed request whose kind the caller knows.
    pub fn request_of(
        what: impl Into<String>,
        error: impl std::fmt::Display,
        kind: ErrorKind,
    ) -> Self {
        HostError::Request {
            what: what.into(),
            error: error.to_string(),
            kind,
        }
    }
}

impl From<ReadError> for HostError {
    fn from(e: ReadError) -> Self {
        HostError::File(e)
    }
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::File(e) => e.fmt(f),
            HostError::Request { what, error, .. } => write!(f, "{what}: {error}"),
            HostError::Unlistable {
                setting,
                dir,
                errno,
            } => write!(
                f,
                "{setting} {}: cannot be listed: {}",
                dir.display(),
                io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for HostError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_path_and_strerror() {
        let e = ReadError::io(
            Path::new("/sys/class/net/eth0/mtu"),
            &io::Error::from_raw_os_error(libc::EACCES),
        );
        assert_eq!(
            e.to_string(),
            "/sys/class/net/eth0/mtu: Permission denied (os error 13)"
        );
        let e = ReadError::parse(Path::new("/sys/x"), "not a number: \"x\"");
        assert_eq!(e.to_string(), "/sys/x: not a number: \"x\"");
        assert_eq!(
            HostError::from(e).to_string(),
            "/sys/x: not a number: \"x\""
        );
        let e = HostError::request("ens1np0: DCB", "operation timed out");
        assert_eq!(e.to_string(), "ens1np0: DCB: operation timed out");
        let e = HostError::Unlistable {
            setting: "nccl.log_dir",
            dir: PathBuf::from("/var/log/nccl"),
            errno: libc::ENOENT,
        };
        assert_eq!(
            e.to_string(),
            "nccl.log_dir /var/log/nccl: cannot be listed: No such file or directory (os error 2)"
        );
    }
}
