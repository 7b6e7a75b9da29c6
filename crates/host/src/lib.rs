//! How the roce_exporter crates read the host's pseudo-filesystems.
//!
//! - [`HostPaths`]: the roots (`--path.sysfs`, `--path.procfs`), injectable
//!   so that every reader runs on fixture trees;
//! - [`fs`]: the file layer ([`SysFs`]), injectable so that tests can fail
//!   chosen paths with the errnos only a kernel produces;
//! - [`kept`]: an attribute file kept open between samples and re-read with
//!   `pread` (one system call a value instead of open, read and close),
//!   within an open-file budget;
//! - [`errno`]: the one place that says which failures mean the value is
//!   *absent* (not provided here, or gone) and which are errors;
//! - [`Reading`]: what one read gave: a value, absent, or a [`ReadError`]
//!   carrying the path and the errno (or the parse failure);
//! - [`HostError`]: what a source reports that did not stop it (a file, a
//!   failed request);
//! - [`named`]: files a user names (configuration, lists, secrets,
//!   certificates), read without blocking, within a cap and a deadline;
//! - [`stall`]: per-item deadlines for a reader's file calls (which file
//!   it is in, which are stuck), kept by the file layer it reads through;
//! - [`Priorities`]: a set of the eight IEEE 802.1p priorities, the one
//!   type in which the readers, the rules and the exposition pass them.

#![deny(unsafe_code)]

pub mod errno;
mod error;
pub mod fs;
pub mod kept;
pub mod named;
mod paths;
pub mod priorities;
mod reading;
pub mod stall;

pub use errno::Einval;
pub use error::{ErrorKind, HostError, NotRegular, ReadError, ReadErrorKind, Stuck};
pub use fs::{default_max_open, KeptDir, StdFs, SysFile, SysFs};
pub use kept::{Io, KeptAttr, ReadBuf};
pub use paths::HostPaths;
pub use priorities::Priorities;
pub use reading::Reading;

/// A name from the kernel as it is shown when it is not UTF-8 (the kernel
/// allows any byte but `/` and NUL in a netdev name): printable ASCII as
/// itself, `\\`, `\'` and `\"` escaped, every other byte as `\xNN`
/// (Rust's `escape_ascii`), so that no byte is lost or mistaken.
pub fn escaped_name(name: &std::ffi::OsStr) -> String {
    name.as_encoded_bytes().escape_ascii().to_string()
}
