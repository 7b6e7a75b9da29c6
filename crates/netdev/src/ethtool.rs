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

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::mapping::Resolved;

pub use sys::ReplyBuf;

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
        step: &'static str,
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
    #[error("{path}: {msg}")]
    Replay { path: PathBuf, msg: String },
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

/// The name of an ethtool command for errors.
pub fn step_name(cmd: u32) -> &'static str {
    match cmd {
        ETHTOOL_GSSET_INFO => "ETHTOOL_GSSET_INFO",
        ETHTOOL_GSTRINGS => "ETHTOOL_GSTRINGS",
        ETHTOOL_GSTATS => "ETHTOOL_GSTATS",
        _ => "SIOCETHTOOL",
    }
}

/// Names and meanings of one netdev's statistics.
#[derive(Debug, Clone)]
struct Entry {
    count: usize,
    resolved: Resolved,
}

/// Per-netdev cache of string sets and their meanings.
#[derive(Debug, Default)]
pub struct StatsCache {
    entries: HashMap<String, Entry>,
    /// Raw counters to export (`netdevs.export_raw_ethtool`).
    raw_wanted: Vec<String>,
    /// How many times names were (re)read, for tests and logs.
    pub name_reads: u64,
    /// The buffer of `ETHTOOL_GSSET_INFO` and `ETHTOOL_GSTATS`, kept
    /// between samples and netdevs, replaced by a larger one when a count
    /// needs it.
    buf: Option<ReplyBuf>,
}

impl StatsCache {
    pub fn new(raw_wanted: Vec<String>) -> StatsCache {
        StatsCache {
            entries: HashMap::new(),
            raw_wanted,
            name_reads: 0,
            buf: None,
        }
    }

    /// One sample of `netdev`: the count, the names when the count is not
    /// the cached one (a driver that grew or shrank its set: `ethtool -L`,
    /// mlx5 when PFC is turned on for a priority), then the values, sized
    /// from the count just asked.
    pub fn sample(
        &mut self,
        io: &mut dyn EthtoolIo,
        netdev: &str,
    ) -> Result<(Vec<crate::MappedStat>, Vec<crate::RawStat>), EthtoolError> {
        for _ in 0..ATTEMPTS {
            let count = read_count(io, netdev, &mut self.buf)?;
            if self.entries.get(netdev).map(|e| e.count) != Some(count) {
                self.entries.remove(netdev);
                let Some(names) = read_names(io, netdev, count)? else {
                    continue;
                };
                self.name_reads += 1;
                let resolved = Resolved::new(&names, &self.raw_wanted);
                self.entries
                    .insert(netdev.to_string(), Entry { count, resolved });
            }
            let Some(values) = read_values(io, netdev, count, &mut self.buf)? else {
                continue;
            };
            if let Some(e) = self.entries.get(netdev) {
                return Ok(e.resolved.apply(values));
            }
        }
        Err(EthtoolError::Unstable {
            netdev: netdev.to_string(),
            attempts: ATTEMPTS,
        })
    }

    /// Forgets netdevs not in `keep` (removed interfaces).
    pub fn retain(&mut self, keep: &[&str]) {
        self.entries.retain(|k, _| keep.contains(&k.as_str()));
    }
}

/// Names and values of `netdev` read together (count, names, values; again
/// while the set changes under the reads), uncached: for tests and tools.
pub fn read_listing(
    io: &mut dyn EthtoolIo,
    netdev: &str,
) -> Result<(Vec<String>, Vec<u64>), EthtoolError> {
    let mut buf = None;
    for _ in 0..ATTEMPTS {
        let count = read_count(io, netdev, &mut buf)?;
        let Some(names) = read_names(io, netdev, count)? else {
            continue;
        };
        let Some(values) = read_values(io, netdev, count, &mut buf)? else {
            continue;
        };
        return Ok((names, values.to_vec()));
    }
    Err(EthtoolError::Unstable {
        netdev: netdev.to_string(),
        attempts: ATTEMPTS,
    })
}

/// `buf`, replaced by a fresh [`ReplyBuf`] when it holds fewer than `words`.
fn sized<'a>(
    buf: &'a mut Option<ReplyBuf>,
    words: usize,
    netdev: &str,
) -> Result<&'a mut ReplyBuf, EthtoolError> {
    let err = |errno| EthtoolError::Ioctl {
        netdev: netdev.to_string(),
        step: "reply buffer (mmap)",
        errno,
    };
    if buf.as_ref().is_none_or(|b| b.len() < words) {
        // The old mapping goes before the new one is made.
        *buf = None;
        let fresh =
            ReplyBuf::new(words).map_err(|e| err(e.raw_os_error().unwrap_or(libc::ENOMEM)))?;
        *buf = Some(fresh);
    }
    buf.as_mut().ok_or_else(|| err(libc::ENOMEM))
}

/// Whether `e` is the kernel's answer to a reply longer than the buffer
/// (`copy_to_user` reached the guard page): the set grew since the count.
fn overran(e: &EthtoolError) -> bool {
    matches!(e, EthtoolError::Ioctl { errno, .. } if *errno == libc::EFAULT)
}

/// `ETHTOOL_GSSET_INFO` for `ETH_SS_STATS`: the driver's current count,
/// refused when zero ([`EthtoolError::Unsupported`]) or absurd.
fn read_count(
    io: &mut dyn EthtoolIo,
    netdev: &str,
    buf: &mut Option<ReplyBuf>,
) -> Result<usize, EthtoolError> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }
    let buf = sized(buf, 3, netdev)?;
    let words = buf.words_mut();
    words[..3].fill(0);
    set_u32(words, 0, ETHTOOL_GSSET_INFO);
    words[1] = 1u64 << ETH_SS_STATS;
    io.ethtool(netdev, buf)?;
    let count = decode_sset_info(buf.words());
    if count == 0 {
        return Err(EthtoolError::Unsupported {
            netdev: netdev.to_string(),
        });
    }
    if count > MAX_STATS {
        return Err(EthtoolError::TooMany {
            netdev: netdev.to_string(),
            count,
            max: MAX_STATS,
        });
    }
    Ok(count)
}

/// The request's count field: the count just asked, so that a kernel with
/// 7b07be1ff1cb answers 0 (and copies nothing) when the set changed since.
fn claim(count: usize) -> u32 {
    // read_count() keeps counts at or below MAX_STATS.
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// `ETHTOOL_GSTRINGS` for a set of `count` names; `None` when the reply
/// has another count (the set changed since the count). The buffer is
/// fresh and dropped afterwards: names are read rarely and are 32 bytes
/// each.
fn read_names(
    io: &mut dyn EthtoolIo,
    netdev: &str,
    count: usize,
) -> Result<Option<Vec<String>>, EthtoolError> {
    let bytes = GSTRINGS_HEADER + count * ETH_GSTRING_LEN;
    let mut slot = None;
    let buf = sized(&mut slot, bytes.div_ceil(8), netdev)?;
    let words = buf.words_mut();
    set_u32(words, 0, ETHTOOL_GSTRINGS);
    set_u32(words, 4, ETH_SS_STATS);
    set_u32(words, 8, claim(count));
    match io.ethtool(netdev, buf) {
        Ok(()) => {}
        Err(e) if overran(&e) => return Ok(None),
        Err(e) => return Err(e),
    }
    Ok(decode_gstrings(buf.words()).filter(|names| names.len() == count))
}

/// `ETHTOOL_GSTATS` for a set of `count` values, left in `buf`; `None`
/// when the reply has another count (the set changed since the count).
fn read_values<'a>(
    io: &mut dyn EthtoolIo,
    netdev: &str,
    count: usize,
    buf: &'a mut Option<ReplyBuf>,
) -> Result<Option<&'a [u64]>, EthtoolError> {
    // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
    let buf = sized(buf, count + 1, netdev)?;
    let words = buf.words_mut();
    set_u32(words, 0, ETHTOOL_GSTATS);
    set_u32(words, 4, claim(count));
    match io.ethtool(netdev, buf) {
        Ok(()) => {}
        Err(e) if overran(&e) => return Ok(None),
        Err(e) => return Err(e),
    }
    Ok(decode_gstats(buf.words()).filter(|values| values.len() == count))
}

/// Parses `ethtool -S` output ("NIC statistics:" then "     name: value"
/// lines). Lines that are not `name: u64` are skipped; names keep their
/// inner spaces and brackets (bnxt prints "[0]: rx_ucast_packets").
pub fn parse_ethtool_s(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some((name, value)) = line.rsplit_once(':') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            continue;
        };
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        out.push((name.to_string(), value));
    }
    out
}

/// Answers one command from a driver's listing the way `net/ethtool/ioctl.c`
/// does before 7b07be1ff1cb (the worst case for the caller's buffer): `ETHTOOL_GSSET_INFO` gives the listing's
/// length; `ETHTOOL_GSTRINGS` and `ETHTOOL_GSTATS` write a header carrying
/// that length and then every entry, whatever the request claimed, and fail
/// with `EFAULT` where `buf` ends (what `copy_to_user` does at the guard
/// page), with the entries that fitted written. For [`Replay`] and
/// in-memory listings.
pub fn answer(
    netdev: &str,
    buf: &mut ReplyBuf,
    listing: &[(String, u64)],
) -> Result<(), EthtoolError> {
    let words = buf.words_mut();
    let cmd = u32_at(words, 0);
    let fault = || EthtoolError::Ioctl {
        netdev: netdev.to_string(),
        step: step_name(cmd),
        errno: libc::EFAULT,
    };
    let n = u32::try_from(listing.len()).unwrap_or(u32::MAX);
    match cmd {
        ETHTOOL_GSSET_INFO => {
            let asked = words.get(1).copied().unwrap_or(0);
            let mask = asked & (1 << ETH_SS_STATS);
            if words.len() < 3 {
                return Err(fault());
            }
            words[1] = mask;
            if mask != 0 {
                set_u32(words, 16, n);
            }
            Ok(())
        }
        ETHTOOL_GSTRINGS => {
            if u32_at(words, 4) != ETH_SS_STATS {
                return Err(EthtoolError::Ioctl {
                    netdev: netdev.to_string(),
                    step: step_name(cmd),
                    errno: libc::EOPNOTSUPP,
                });
            }
            set_u32(words, 8, n);
            for (i, (name, _)) in listing.iter().enumerate() {
                let mut slot = [0u8; ETH_GSTRING_LEN];
                let b = name.as_bytes();
                let k = b.len().min(ETH_GSTRING_LEN);
                slot[..k].copy_from_slice(&b[..k]);
                let at = GSTRINGS_HEADER + i * ETH_GSTRING_LEN;
                for (j, chunk) in slot.chunks(4).enumerate() {
                    let mut v = [0u8; 4];
                    v.copy_from_slice(chunk);
                    if !set_u32(words, at + j * 4, u32::from_ne_bytes(v)) {
                        return Err(fault());
                    }
                }
            }
            Ok(())
        }
        ETHTOOL_GSTATS => {
            set_u32(words, 4, n);
            for (i, (_, v)) in listing.iter().enumerate() {
                let Some(w) = words.get_mut(1 + i) else {
                    return Err(fault());
                };
                *w = *v;
            }
            Ok(())
        }
        cmd => Err(EthtoolError::Command {
            netdev: netdev.to_string(),
            cmd,
        }),
    }
}

/// Replays recorded `ethtool -S <netdev>` text from `<dir>/<netdev>.txt`,
/// read anew for each command so that a recording can be changed while the
/// exporter runs. A missing file means the netdev has no statistics
/// (node_exporter's fixture convention).
#[derive(Debug, Clone)]
pub struct Replay {
    dir: PathBuf,
}

impl Replay {
    pub fn new(dir: impl Into<PathBuf>) -> Replay {
        Replay { dir: dir.into() }
    }

    fn read(&self, netdev: &str) -> Result<Vec<(String, u64)>, EthtoolError> {
        if netdev.contains('/') || netdev.starts_with('.') {
            return Err(EthtoolError::BadName {
                netdev: netdev.to_string(),
            });
        }
        let path = self.dir.join(format!("{netdev}.txt"));
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(parse_ethtool_s(&text)),
            Err(e) if roce_host::errno::is_absent(&e) => Err(EthtoolError::Unsupported {
                netdev: netdev.to_string(),
            }),
            Err(e) => Err(EthtoolError::Replay {
                path,
                msg: e.to_string(),
            }),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl EthtoolIo for Replay {
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
        let listing = self.read(netdev)?;
        answer(netdev, buf, &listing)
    }
}

/// The `SIOCETHTOOL` ioctl on an `AF_INET` datagram socket of the caller's
/// network namespace (the socket stays in the namespace it was opened in).
/// Sends only the three read commands.
#[derive(Debug)]
pub struct Ioctl {
    fd: std::os::fd::OwnedFd,
}

#[allow(unsafe_code)]
mod sys {
    //! The raw ioctl and the guarded reply buffer. Layouts from
    //! `include/uapi/linux/ethtool.h` and `include/uapi/linux/if.h`
    //! (`struct ifreq`).
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::ptr::NonNull;

    pub const SIOCETHTOOL: libc::c_ulong = 0x8946;
    pub const IFNAMSIZ: usize = 16;

    #[repr(C)]
    struct IfReq {
        name: [u8; IFNAMSIZ],
        data: *mut libc::c_void,
        _pad: [u8; 16],
    }

    /// A request/reply buffer of `u64` words (aligned for `struct
    /// ethtool_stats`) that is a private anonymous mapping of whole pages,
    /// followed by one page mapped `PROT_NONE`. [`ReplyBuf::words`] is the
    /// whole readable and writable part: whatever writes past its end,
    /// the kernel included, reaches the guard page, where `copy_to_user`
    /// faults and the ioctl fails with `EFAULT`; no other memory of the
    /// process lies in between.
    #[derive(Debug)]
    pub struct ReplyBuf {
        ptr: NonNull<u64>,
        words: usize,
        map_len: usize,
    }

    // SAFETY: the mapping is owned by this value alone (no aliases escape
    // but through borrows of it), so moving it to another thread is sound.
    unsafe impl Send for ReplyBuf {}

    fn page_size() -> usize {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(p).ok().filter(|p| *p >= 8).unwrap_or(4096)
    }

    impl ReplyBuf {
        /// A buffer of at least `words` words (rounded up to whole pages),
        /// zeroed.
        pub fn new(words: usize) -> std::io::Result<ReplyBuf> {
            let page = page_size();
            let too_big = || std::io::Error::from_raw_os_error(libc::ENOMEM);
            let data = words
                .max(1)
                .checked_mul(8)
                .ok_or_else(too_big)?
                .checked_next_multiple_of(page)
                .ok_or_else(too_big)?;
            let map_len = data.checked_add(page).ok_or_else(too_big)?;
            // SAFETY: a fresh anonymous mapping at an address the kernel
            // picks; nothing else refers to it.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: [p, p + data) lies within the mapping just made; the
            // last page stays PROT_NONE.
            let rc = unsafe { libc::mprotect(p, data, libc::PROT_READ | libc::PROT_WRITE) };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                // SAFETY: unmaps exactly the mapping made above.
                unsafe { libc::munmap(p, map_len) };
                return Err(e);
            }
            let ptr = NonNull::new(p.cast::<u64>()).ok_or_else(too_big)?;
            Ok(ReplyBuf {
                ptr,
                words: data / 8,
                map_len,
            })
        }

        /// Words in the buffer (its readable and writable part).
        pub fn len(&self) -> usize {
            self.words
        }

        /// Never true: a buffer has at least one page.
        pub fn is_empty(&self) -> bool {
            self.words == 0
        }

        pub fn words(&self) -> &[u64] {
            // SAFETY: ptr is page aligned and the first `words` words are
            // mapped readable and writable for the life of self; anonymous
            // pages start zeroed, so every u64 is initialised.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.words) }
        }

        pub fn words_mut(&mut self) -> &mut [u64] {
            // SAFETY: as in `words`, and `&mut self` makes this the only
            // reference.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.words) }
        }
    }

    impl Drop for ReplyBuf {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping `new` made; no borrow of
            // it outlives self.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_len) };
        }
    }

    pub fn socket() -> std::io::Result<OwnedFd> {
        // SAFETY: plain socket(2); the descriptor is owned right away.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh, valid descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Runs one ethtool command whose request/reply buffer is `buf`.
    /// Returns the errno on failure.
    pub fn ethtool(fd: &OwnedFd, name: &[u8; IFNAMSIZ], buf: &mut ReplyBuf) -> Result<(), i32> {
        let mut req = IfReq {
            name: *name,
            data: buf.words_mut().as_mut_ptr().cast(),
            _pad: [0; 16],
        };
        // SAFETY: req is a valid ifreq whose data points to `buf`, which is
        // mutably borrowed for the call. The kernel writes the reply there;
        // a reply longer than `buf` (kernels before 7b07be1ff1cb copy the
        // driver's current count whatever the request says) reaches the
        // PROT_NONE page right after it and fails with EFAULT, so nothing
        // outside `buf` is written. The callers send only GSSET_INFO,
        // GSTRINGS and GSTATS, whose replies go to `data` alone.
        let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL as _, &mut req as *mut IfReq) };
        if rc < 0 {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        } else {
            Ok(())
        }
    }
}

impl Ioctl {
    /// Opens the socket in the calling thread's network namespace.
    pub fn open() -> std::io::Result<Ioctl> {
        Ok(Ioctl { fd: sys::socket()? })
    }

    fn ifname(netdev: &str) -> Result<[u8; sys::IFNAMSIZ], EthtoolError> {
        let bytes = netdev.as_bytes();
        if bytes.is_empty() || bytes.len() >= sys::IFNAMSIZ || bytes.contains(&0) {
            return Err(EthtoolError::BadName {
                netdev: netdev.to_string(),
            });
        }
        let mut name = [0u8; sys::IFNAMSIZ];
        name[..bytes.len()].copy_from_slice(bytes);
        Ok(name)
    }
}

impl EthtoolIo for Ioctl {
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
        let cmd = u32_at(buf.words(), 0);
        if ![ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS].contains(&cmd) {
            return Err(EthtoolError::Command {
                netdev: netdev.to_string(),
                cmd,
            });
        }
        let name = Self::ifname(netdev)?;
        sys::ethtool(&self.fd, &name, buf).map_err(|errno| match errno {
            libc::EOPNOTSUPP => EthtoolError::Unsupported {
                netdev: netdev.to_string(),
            },
            libc::ENODEV => EthtoolError::NoDevice {
                netdev: netdev.to_string(),
            },
            errno => EthtoolError::Ioctl {
                netdev: netdev.to_string(),
                step: step_name(cmd),
                errno,
            },
        })
    }
}

/// The native-endian `u32` at byte offset `byte` of `buf` (0 past its end),
/// for reading the `struct ethtool_*` headers.
pub fn u32_at(buf: &[u64], byte: usize) -> u32 {
    let Some(word) = buf.get(byte / 8) else {
        return 0;
    };
    let bytes = word.to_ne_bytes();
    let i = byte % 8;
    let mut b = [0u8; 4];
    match bytes.get(i..i + 4) {
        Some(s) => b.copy_from_slice(s),
        None => return 0,
    }
    u32::from_ne_bytes(b)
}

/// Writes the native-endian `u32` at byte offset `byte` (4-aligned) of
/// `buf`; false, writing nothing, past its end.
pub fn set_u32(buf: &mut [u64], byte: usize, v: u32) -> bool {
    let i = byte % 8;
    let Some(word) = buf.get_mut(byte / 8) else {
        return false;
    };
    let mut bytes = word.to_ne_bytes();
    let Some(s) = bytes.get_mut(i..i + 4) else {
        return false;
    };
    s.copy_from_slice(&v.to_ne_bytes());
    *word = u64::from_ne_bytes(bytes);
    true
}

/// The `ETH_SS_STATS` count in an `ETHTOOL_GSSET_INFO` reply (`struct
/// ethtool_sset_info`: cmd, reserved, sset_mask, then one u32 per set
/// present); 0 when the set is absent from the mask.
pub fn decode_sset_info(buf: &[u64]) -> usize {
    if buf.get(1).copied().unwrap_or(0) & (1u64 << ETH_SS_STATS) == 0 {
        return 0;
    }
    u32_at(buf, 16) as usize
}

/// The names in an `ETHTOOL_GSTRINGS` reply buffer (`struct
/// ethtool_gstrings`: cmd, string_set, len, then `len` NUL-padded 32-byte
/// names); `None` when `len` claims more names than the buffer holds (the
/// kernel's copy ran into the end of the buffer). A name without its NUL
/// keeps all 32 bytes. Pure, for the ioctl above and for fuzzing.
pub fn decode_gstrings(buf: &[u64]) -> Option<Vec<String>> {
    let len = u32_at(buf, 8) as usize;
    let end = len
        .checked_mul(ETH_GSTRING_LEN)?
        .checked_add(GSTRINGS_HEADER)?;
    if end > buf.len().checked_mul(8)? {
        return None;
    }
    let bytes: Vec<u8> = buf[..end.div_ceil(8)]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let mut names = Vec::with_capacity(len);
    for raw in bytes.get(GSTRINGS_HEADER..end)?.chunks(ETH_GSTRING_LEN) {
        let stop = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        names.push(String::from_utf8_lossy(&raw[..stop]).into_owned());
    }
    Some(names)
}

/// The values in an `ETHTOOL_GSTATS` reply buffer (`struct ethtool_stats`:
/// cmd, n_stats, then `n_stats` u64s); `None` when `n_stats` claims more
/// values than the buffer holds.
pub fn decode_gstats(buf: &[u64]) -> Option<&[u64]> {
    let n = u32_at(buf, 4) as usize;
    buf.get(1..n.checked_add(1)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ethtool_s_text() {
        let text = "NIC statistics:\n     rx_packets: 12\n     [0]: rx_ucast_packets: 7\n     bad line\n     tx_x: -1\n";
        assert_eq!(
            parse_ethtool_s(text),
            vec![
                ("rx_packets".to_string(), 12),
                ("[0]: rx_ucast_packets".to_string(), 7)
            ]
        );
    }

    #[test]
    fn reply_decoders_trust_the_kernels_counts_only_as_far_as_the_buffer() {
        // GSTRINGS: header (cmd, string_set, len = 2), two names, the second
        // without its NUL.
        let mut bytes = Vec::new();
        for v in [0x1bu32, 1, 2] {
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        let mut a = [0u8; 32];
        a[..10].copy_from_slice(b"rx_packets");
        bytes.extend_from_slice(&a);
        bytes.extend_from_slice(&[b'x'; 32]);
        bytes.resize(bytes.len().div_ceil(8) * 8, 0);
        let words: Vec<u64> = bytes
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            decode_gstrings(&words),
            Some(vec!["rx_packets".to_string(), "x".repeat(32)])
        );
        // A len of 3 or u32::MAX: more names than the buffer holds, none
        // taken.
        let mut more = words.clone();
        set_u32(&mut more, 8, 3);
        assert_eq!(decode_gstrings(&more), None);
        set_u32(&mut more, 8, u32::MAX);
        assert_eq!(decode_gstrings(&more), None);
        assert_eq!(decode_gstrings(&[]), None, "no room for the header");
        // GSTATS: n_stats 2 of a 3-word buffer; n_stats past the buffer
        // gives nothing.
        let mut stats = vec![0u64, 7, 9];
        set_u32(&mut stats, 4, 2);
        assert_eq!(decode_gstats(&stats), Some(&[7, 9][..]));
        set_u32(&mut stats, 4, 3);
        assert_eq!(decode_gstats(&stats), None);
        set_u32(&mut stats, 4, u32::MAX);
        assert_eq!(decode_gstats(&stats), None);
        assert_eq!(decode_gstats(&[]), None);
        // GSSET_INFO: the count only when the set is in the mask.
        let mut info = vec![0u64; 3];
        set_u32(&mut info, 16, 42);
        assert_eq!(decode_sset_info(&info), 0);
        info[1] = 1 << ETH_SS_STATS;
        assert_eq!(decode_sset_info(&info), 42);
    }

    /// A driver's listing answered through [`answer`], with the commands
    /// seen.
    struct Fake {
        listing: Vec<(String, u64)>,
        cmds: Vec<u32>,
    }

    impl EthtoolIo for Fake {
        fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
            self.cmds.push(u32_at(buf.words(), 0));
            answer(netdev, buf, &self.listing)
        }
    }

    #[test]
    fn the_count_is_asked_before_every_read_and_names_reread_when_it_changes() {
        let mut fake = Fake {
            listing: vec![("rx_prio3_pause".into(), 5)],
            cmds: vec![],
        };
        let mut cache = StatsCache::new(vec![]);
        cache.sample(&mut fake, "eth0").unwrap();
        cache.sample(&mut fake, "eth0").unwrap();
        assert_eq!(cache.name_reads, 1);
        assert_eq!(
            fake.cmds,
            [
                ETHTOOL_GSSET_INFO,
                ETHTOOL_GSTRINGS,
                ETHTOOL_GSTATS,
                ETHTOOL_GSSET_INFO,
                ETHTOOL_GSTATS
            ]
        );
        fake.listing.push(("tx_prio3_pause".into(), 6));
        fake.cmds.clear();
        let (stats, _) = cache.sample(&mut fake, "eth0").unwrap();
        assert_eq!(cache.name_reads, 2);
        assert_eq!(stats.len(), 2);
        assert_eq!(
            fake.cmds,
            [ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS]
        );
    }

    #[test]
    fn an_absurd_statistics_count_is_refused_before_any_buffer_is_sized() {
        struct Absurd;
        impl EthtoolIo for Absurd {
            fn ethtool(&mut self, _: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
                let words = buf.words_mut();
                assert_eq!(u32_at(words, 0), ETHTOOL_GSSET_INFO, "only the count");
                set_u32(words, 16, u32::MAX);
                Ok(())
            }
        }
        let mut cache = StatsCache::new(vec![]);
        let err = cache.sample(&mut Absurd, "eth0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "eth0: the driver reports 4294967295 ethtool statistics, more than the 65536 read"
        );
    }

    #[test]
    fn a_set_changing_on_every_read_is_an_error_after_a_bounded_number_of_tries() {
        /// Grows by one statistic after every count.
        struct Growing(Vec<(String, u64)>);
        impl EthtoolIo for Growing {
            fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
                let r = answer(netdev, buf, &self.0);
                if u32_at(buf.words(), 0) == ETHTOOL_GSSET_INFO {
                    let n = self.0.len();
                    self.0.push((format!("ch{n}_events"), 1));
                }
                r
            }
        }
        let mut cache = StatsCache::new(vec![]);
        let mut io = Growing(vec![("rx_packets".into(), 1)]);
        let err = cache.sample(&mut io, "eth0").unwrap_err();
        assert_eq!(
            err,
            EthtoolError::Unstable {
                netdev: "eth0".into(),
                attempts: ATTEMPTS
            }
        );
        assert_eq!(io.0.len(), 1 + ATTEMPTS);
    }

    /// A kernel with 7b07be1ff1cb: a non-zero request count that is not
    /// the driver's gets a count of 0 and nothing copied; `grow` replaces
    /// the listing right after the next count.
    struct Fixed {
        listing: Vec<(String, u64)>,
        grow: Option<Vec<(String, u64)>>,
        cmds: Vec<u32>,
    }

    impl EthtoolIo for Fixed {
        fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
            let words = buf.words_mut();
            let cmd = u32_at(words, 0);
            self.cmds.push(cmd);
            let count_at = match cmd {
                ETHTOOL_GSTRINGS => Some(8),
                ETHTOOL_GSTATS => Some(4),
                _ => None,
            };
            if let Some(at) = count_at {
                let asked = u32_at(words, at) as usize;
                if asked != 0 && asked != self.listing.len() {
                    set_u32(words, at, 0);
                    return Ok(());
                }
            }
            let r = answer(netdev, buf, &self.listing);
            if cmd == ETHTOOL_GSSET_INFO {
                if let Some(grown) = self.grow.take() {
                    self.listing = grown;
                }
            }
            r
        }
    }

    #[test]
    fn a_fixed_kernels_empty_answer_to_a_stale_count_is_read_again() {
        let mut io = Fixed {
            listing: vec![("rx_prio3_pause".into(), 5)],
            grow: None,
            cmds: vec![],
        };
        let mut cache = StatsCache::new(vec!["tx_prio3_pause".into()]);
        cache.sample(&mut io, "eth0").unwrap();
        io.cmds.clear();
        io.grow = Some(vec![
            ("rx_prio3_pause".into(), 5),
            ("tx_prio3_pause".into(), 6),
        ]);
        let (stats, raw) = cache.sample(&mut io, "eth0").unwrap();
        assert_eq!(stats.len(), 2);
        assert_eq!(raw.len(), 1);
        assert_eq!(raw[0].value, 6);
        assert_eq!(
            io.cmds,
            [
                ETHTOOL_GSSET_INFO,
                ETHTOOL_GSTATS,
                ETHTOOL_GSSET_INFO,
                ETHTOOL_GSTRINGS,
                ETHTOOL_GSTATS
            ]
        );
    }

    /// The guard page stops the kernel: a pipe holding more than the
    /// buffer is read into it with a length past its end; the kernel's copy
    /// ends at the buffer's last byte (the rest stays in the pipe) and
    /// nothing lands after it.
    #[test]
    #[allow(unsafe_code)]
    fn the_kernel_cannot_write_past_a_reply_buffer() {
        let mut buf = ReplyBuf::new(1).unwrap();
        let len = buf.len() * 8;
        assert!(len >= 4096 && len.is_multiple_of(4096), "{len}");
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two descriptors it is given.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let data = vec![0xa5u8; len + 100];
        // SAFETY: writes from a live Vec of that length.
        let wrote = unsafe { libc::write(fds[1], data.as_ptr().cast(), data.len()) };
        assert_eq!(wrote, data.len() as isize);
        // SAFETY: deliberately asks for 100 bytes past the buffer: the
        // kernel must stop at the PROT_NONE page. Without it this would
        // write over whatever follows.
        let read = unsafe { libc::read(fds[0], buf.words_mut().as_mut_ptr().cast(), len + 100) };
        assert_eq!(read, len as isize, "the copy stops at the guard page");
        assert!(buf
            .words()
            .iter()
            .all(|w| *w == u64::from_ne_bytes([0xa5; 8])));
        let mut rest = [0u8; 200];
        // SAFETY: reads into a live local array of that length.
        let left = unsafe { libc::read(fds[0], rest.as_mut_ptr().cast(), rest.len()) };
        assert_eq!(left, 100, "what did not fit is still in the pipe");
        // SAFETY: closes the two descriptors made above.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn the_model_kernel_answers_as_ioctl_c_and_faults_where_the_buffer_ends() {
        let listing: Vec<(String, u64)> = (0..600).map(|i| (format!("s{i}"), i)).collect();
        let mut buf = ReplyBuf::new(1).unwrap();
        // 600 values do not fit one page: the header says 600, the values
        // that fit are written, EFAULT.
        set_u32(buf.words_mut(), 0, ETHTOOL_GSTATS);
        set_u32(buf.words_mut(), 4, 2);
        let err = answer("eth0", &mut buf, &listing).unwrap_err();
        assert!(overran(&err), "{err}");
        assert_eq!(u32_at(buf.words(), 4), 600);
        assert_eq!(decode_gstats(buf.words()), None);
        let mut big = ReplyBuf::new(601).unwrap();
        set_u32(big.words_mut(), 0, ETHTOOL_GSTATS);
        answer("eth0", &mut big, &listing).unwrap();
        assert_eq!(
            decode_gstats(big.words()),
            Some(&(0..600).collect::<Vec<u64>>()[..])
        );
        set_u32(big.words_mut(), 0, ETHTOOL_GSTRINGS);
        set_u32(big.words_mut(), 4, ETH_SS_STATS);
        let err = answer("eth0", &mut big, &listing).unwrap_err();
        assert!(overran(&err), "600 names need 19,212 bytes: {err}");
        let mut names = ReplyBuf::new((12 + 600 * 32) / 8 + 1).unwrap();
        set_u32(names.words_mut(), 0, ETHTOOL_GSTRINGS);
        set_u32(names.words_mut(), 4, ETH_SS_STATS);
        answer("eth0", &mut names, &listing).unwrap();
        let got = decode_gstrings(names.words()).unwrap();
        assert_eq!(got.len(), 600);
        assert_eq!(got[599], "s599");
    }
}
