//! Errno classification: whether a failed read means the value is *absent*
//! (the kernel does not provide it here, or the object went away) or an
//! *error* worth reporting, and recording the latter with its path.

use std::io;
use std::path::Path;

use crate::types::{ReadError, ReadErrorKind};

use super::attr::Got;

/// How EINVAL is classified for a file: the GID attributes of an empty slot
/// fail with EINVAL (`_show_port_gid_attr` in core/sysfs.c), which means
/// "no value", elsewhere it is an error.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Einval {
    Absent,
    Error,
}

pub(super) fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The file or folder does not exist (here, or any more).
pub(super) fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        || matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV))
}

/// A kept handle whose kernel object went away.
pub(super) fn is_stale(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENODEV | libc::ENOENT | libc::ESTALE)
    ) || e.kind() == io::ErrorKind::NotFound
}

pub(super) fn classify(
    errors: &mut Vec<ReadError>,
    path: &Path,
    e: &io::Error,
    einval: Einval,
) -> Got {
    let code = errno(e);
    let absent = is_absent(e)
        || code == libc::ESTALE
        || code == libc::EOPNOTSUPP
        || (code == libc::EINVAL && einval == Einval::Absent);
    if absent {
        Got::Absent
    } else {
        push_io(errors, path, e);
        Got::Failed
    }
}

pub(super) fn push_io(errors: &mut Vec<ReadError>, path: &Path, e: &io::Error) {
    errors.push(ReadError {
        path: path.to_path_buf(),
        kind: ReadErrorKind::Io(errno(e)),
    });
}

pub(super) fn push_parse(errors: &mut Vec<ReadError>, path: &Path, msg: String) {
    errors.push(ReadError {
        path: path.to_path_buf(),
        kind: ReadErrorKind::Parse(msg),
    });
}
