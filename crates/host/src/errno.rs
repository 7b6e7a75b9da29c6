//! Errno classification, in one place for every reader: whether a failed
//! call means the value is *absent* (the kernel does not provide it here, or
//! the object went away) or an *error* worth reporting.
//!
//! The kernel's ways of saying "not here":
//! - ENOENT: no such attribute (a driver without it, a removed object);
//! - ENOTDIR: a folder on the way is a file (a name from the configuration
//!   that is not a device, as `class/net/<name>` of a bonding file), so
//!   the attribute is not there either;
//! - ENODEV: reading a descriptor whose sysfs node was removed
//!   (fs/kernfs/file.c: `kernfs_seq_start` fails with -ENODEV once the node
//!   is no longer active);
//! - ESTALE: a handle to an object that was replaced;
//! - EOPNOTSUPP: the device does not implement the query behind the file;
//! - EINVAL, only for the files whose caller says so ([`Einval::Absent`]):
//!   the GID attributes of an empty slot (`_show_port_gid_attr` in
//!   drivers/infiniband/core/sysfs.c), a netdev's `speed` while the link is
//!   down (`speed_show` in net/core/net-sysfs.c). Elsewhere EINVAL is an
//!   error;
//! - a call the file layer did not make because an earlier read of the
//!   file is stuck ([`crate::Stuck`]): the stuck read was reported once when
//!   it passed its deadline, and the value stays absent until it returns.

use std::io;

/// How EINVAL is classified for a file (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Einval {
    Absent,
    Error,
}

/// The errno of a failed call; EIO when it carries none.
pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The file or folder does not exist (here, or any more).
pub fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::ENODEV | libc::ENOTDIR)
        )
}

/// A kept handle whose kernel object went away: reopen it once.
pub fn is_stale(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENODEV | libc::ENOENT | libc::ESTALE)
    ) || e.kind() == io::ErrorKind::NotFound
}

/// Whether a failed open or read of an attribute means "no value here"
/// rather than an error.
pub fn means_absent(e: &io::Error, einval: Einval) -> bool {
    let code = errno(e);
    crate::error::Stuck::is(e)
        || is_absent(e)
        || code == libc::ESTALE
        || code == libc::EOPNOTSUPP
        || (code == libc::EINVAL && einval == Einval::Absent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[test]
    fn absent_and_error() {
        for code in [
            libc::ENOENT,
            libc::ENODEV,
            libc::ENOTDIR,
            libc::ESTALE,
            libc::EOPNOTSUPP,
        ] {
            assert!(means_absent(&os(code), Einval::Error), "{code}");
        }
        for code in [libc::EACCES, libc::EIO, libc::EPERM, libc::EBUSY] {
            assert!(!means_absent(&os(code), Einval::Absent), "{code}");
        }
        assert!(means_absent(&os(libc::EINVAL), Einval::Absent));
        assert!(!means_absent(&os(libc::EINVAL), Einval::Error));
    }

    #[test]
    fn stale() {
        for code in [libc::ENOENT, libc::ENODEV, libc::ESTALE] {
            assert!(is_stale(&os(code)), "{code}");
        }
        assert!(!is_stale(&os(libc::EIO)));
        assert!(!is_stale(&os(libc::EINVAL)));
        // An error without an errno counts as EIO.
        assert_eq!(errno(&io::Error::other("x")), libc::EIO);
    }
}
