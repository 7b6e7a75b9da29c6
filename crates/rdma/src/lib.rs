//! Reads the RDMA devices of a host from sysfs (`/sys/class/infiniband`) into
//! plain typed snapshots.
//!
//! This crate knows nothing of Prometheus or of rules: it turns kernel files
//! into [`RdmaSnapshot`] values and says, for every file it could not use,
//! whether the value is *absent* (the kernel does not provide it here) or an
//! *error* (it should be there and could not be read). The root and the file
//! layer ([`fs::SysFs`]) are injectable so that every code path runs on
//! fixture trees, including the errnos only a kernel produces.

#![deny(unsafe_code)]

pub mod fs;
pub mod netlink;
pub mod parse;
pub mod reader;
pub mod types;

pub use fs::{KeptDir, StdFs, SysFile, SysFs};
pub use reader::{
    DeviceFilter, HwCounterSource, RdmaReader, SysfsOnly, DEFAULT_GID_FULL_SCAN_INTERVAL,
    DEFAULT_STATIC_REFRESH_INTERVAL, GID_EMPTY_PROBES, MAX_GID_SLOTS,
};
pub use types::*;
