//! ethtool statistics (`ethtool -S`): the `SIOCETHTOOL` ioctl
//! (`ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS` of
//! `include/uapi/linux/ethtool.h`) behind [`EthtoolIo`], a replay of
//! recorded `ethtool -S` text for fixture trees, and [`StatsCache`], which
//! keeps each netdev's names (re-read when the count changes) and their
//! resolved meanings.
//!
//! Kernels before "ethtool: Avoid overflowing userspace buffer on stats
//! query" (7b07be1ff1cb, December 2025, backported to the stable series)
//! copy as many entries as the driver has at the time of the
//! `ETHTOOL_GSTRINGS`/`ETHTOOL_GSTATS` call, whatever count the request
//! carried (`ethtool_get_stats()` set `stats.n_stats` from
//! `get_sset_count()` and copied that many `u64`s). Kernels with it copy
//! nothing and answer a count of 0 when the request's non-zero count is not
//! the driver's, and still copy everything when the request says 0. A
//! driver's set changes with its configuration (`ethtool -L`: mlx5 has
//! per-channel counters, 16 → 132 channels is about 10,000 statistics), and
//! it can change between any two calls (RTNL is held per call only). So:
//! - the count is asked (`ETHTOOL_GSSET_INFO`) right before every
//!   `ETHTOOL_GSTATS`, the buffers are sized from it and the request
//!   carries it;
//! - every reply buffer is a [`ReplyBuf`]: its own mapping followed by an
//!   inaccessible guard page, so an old kernel that writes more than the
//!   buffer holds (the set grew after the count) reaches the guard page and
//!   fails the call with `EFAULT` (`copy_to_user` stops at the fault)
//!   instead of writing into other memory;
//! - a reply whose count is not the one just asked (the driver's new one on
//!   old kernels, 0 on new ones) or an `EFAULT` means the set changed
//!   between the calls: count, names and values are read again, a bounded
//!   number of times.
//!
//! The ioctl and the guarded buffer are the only `unsafe` in this crate.

//!
//! Layers: `ethtool/stats.rs` reads count, names and values through an
//! [`EthtoolIo`] and keeps each netdev's names with their meanings
//! ([`StatsCache`]); `ethtool/ioctl.rs` is the ioctl and its guarded
//! buffer ([`Ioctl`], [`ReplyBuf`]); `ethtool/layout.rs` the `struct
//! ethtool_*` layouts of requests and replies; `ethtool/replay.rs` the
//! recorded `ethtool -S` text and the model kernel answering from it
//! ([`Replay`], [`answer`]).

use roce_host::{ErrorKind, ReadError};

mod ioctl;
mod layout;
mod replay;
mod stats;

pub use ioctl::{Ioctl, ReplyBuf};
pub use layout::{decode_gstats, decode_gstrings, decode_sset_info, set_u32, u32_at};
pub use replay::{answer, parse_ethtool_s, Replay};
pub use stats::{read_listing, StatsCache};

/// `ETHTOOL_GSTRINGS`: the names of a string set.
pub const ETHTOOL_GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GSTATS`: the statistics' values.
pub const ETHTOOL_GSTATS: u32 = 0x1d;
/// `ETHTOOL_GSSET_INFO`: the sizes of string sets.
pub const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// `ETH_SS_STATS`: the string set of `ethtool -S`.
pub const ETH_SS_STATS: u32 = 1;
/// Bytes per name in an `ETHTOOL_GSTRINGS` reply.
pub const ETH_GSTRING_LEN: usize = 32;
/// Bytes before the first name of `struct ethtool_gstrings` (cmd,
/// string_set, len).
pub const GSTRINGS_HEADER: usize = 12;

/// Errors of one ethtool step on one netdev.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EthtoolError {
    /// The driver has no statistics (EOPNOTSUPP, or a zero count).
    #[error("{netdev}: no ethtool statistics")]
    Unsupported { netdev: String },
    /// No such netdev (ENODEV).
    #[error("{netdev}: no such netdev")]
    NoDevice { netdev: String },
    #[error("{netdev}: {step} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Ioctl {
        netdev: String,
        step: EthtoolStep,
        errno: i32,
    },
    #[error("{netdev}: invalid interface name")]
    BadName { netdev: String },
    /// More statistics than any driver has ([`MAX_STATS`]): a count that
    /// would size buffers of gigabytes is a driver bug, not data.
    #[error("{netdev}: the driver reports {count} ethtool statistics, more than the {max} read")]
    TooMany {
        netdev: String,
        count: usize,
        max: usize,
    },
    /// The set changed between the count and the reply every time it was
    /// read this sample (a driver reconfigured over and over).
    #[error("{netdev}: the ethtool statistics set changed during each of {attempts} reads")]
    Unstable { netdev: String, attempts: usize },
    /// A command other than the three reads, refused before the ioctl.
    #[error("{netdev}: ethtool command {cmd:#x} is not one this reader sends")]
    Command { netdev: String, cmd: u32 },
    /// A replay file that exists and could not be read.
    #[error(transparent)]
    Replay(ReadError),
}

impl EthtoolError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EthtoolError::Unsupported { .. } | EthtoolError::Command { .. } => ErrorKind::Failed,
            EthtoolError::NoDevice { .. } | EthtoolError::BadName { .. } => ErrorKind::Absent,
            EthtoolError::Ioctl { errno, .. } => ErrorKind::of_errno(*errno),
            EthtoolError::TooMany { .. } => ErrorKind::Malformed,
            EthtoolError::Unstable { .. } => ErrorKind::Busy,
            EthtoolError::Replay(e) => e.error_kind(),
        }
    }
}

/// The step of an ethtool statistics read that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EthtoolStep {
    /// `ETHTOOL_GSSET_INFO`: the count.
    #[error("ETHTOOL_GSSET_INFO")]
    SsetInfo,
    /// `ETHTOOL_GSTRINGS`: the names.
    #[error("ETHTOOL_GSTRINGS")]
    Strings,
    /// `ETHTOOL_GSTATS`: the values.
    #[error("ETHTOOL_GSTATS")]
    Stats,
    /// Another `SIOCETHTOOL` command.
    #[error("SIOCETHTOOL")]
    Other,
    /// Mapping the buffer the reply lands in.
    #[error("reply buffer (mmap)")]
    ReplyBuffer,
}

impl EthtoolStep {
    /// The step of an ethtool command.
    pub fn of_command(cmd: u32) -> EthtoolStep {
        match cmd {
            ETHTOOL_GSSET_INFO => EthtoolStep::SsetInfo,
            ETHTOOL_GSTRINGS => EthtoolStep::Strings,
            ETHTOOL_GSTATS => EthtoolStep::Stats,
            _ => EthtoolStep::Other,
        }
    }
}

/// Most ethtool statistics read from one netdev. mlx5 has ~1,500 with
/// every per-priority and per-queue group at 16 channels, ~10,000 at 132;
/// the names of this many take 2 MiB.
pub const MAX_STATS: usize = 1 << 16;

/// Reads of count, names and values per sample before the set is reported
/// as [`EthtoolError::Unstable`]; a set changes only when the driver is
/// reconfigured, so a second read normally sees it settled.
pub const ATTEMPTS: usize = 3;

/// One `SIOCETHTOOL` command on a netdev. Implemented by the ioctl, a replay
/// of recorded text, and test fakes.
pub trait EthtoolIo: Send {
    /// Runs the command whose request `buf` holds (the command's `struct
    /// ethtool_*` of `include/uapi/linux/ethtool.h`, `cmd` first) and leaves
    /// the reply in `buf`. Nothing is written past `buf.words()`: the kernel
    /// cannot (the guard page: `EFAULT` instead), and other implementations
    /// write through the slice and must fail with `EFAULT` where it ends,
    /// as the kernel does.
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError>;
}

#[cfg(test)]
mod tests;
