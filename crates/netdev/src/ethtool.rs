//! ethtool statistics (`ethtool -S`): the `SIOCETHTOOL` ioctl
//! (`ETHTOOL_GSSET_INFO`, `ETHTOOL_GSTRINGS`, `ETHTOOL_GSTATS` of
//! `include/uapi/linux/ethtool.h`) behind [`EthtoolIo`], a replay of
//! recorded `ethtool -S` text for fixture trees, and [`StatsCache`], which
//! keeps each netdev's names (read once, re-read when the count changes) and
//! their resolved meanings.
//!
//! The ioctl is the only `unsafe` in this crate.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::mapping::Resolved;

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
    #[error("{path}: {msg}")]
    Replay { path: PathBuf, msg: String },
}

/// Most ethtool statistics read from one netdev. mlx5 has ~1,500 with
/// every per-priority and per-queue group; the names of this many take 2 MiB.
pub const MAX_STATS: usize = 1 << 16;

/// The three ethtool statistics steps. Implemented by the ioctl, a replay
/// of recorded text, and test fakes.
pub trait EthtoolIo: Send {
    /// Number of `ETH_SS_STATS` strings (`ETHTOOL_GSSET_INFO`).
    fn stat_count(&mut self, netdev: &str) -> Result<usize, EthtoolError>;
    /// The statistic names (`ETHTOOL_GSTRINGS`); `count` is the last count.
    fn stat_names(&mut self, netdev: &str, count: usize) -> Result<Vec<String>, EthtoolError>;
    /// The values (`ETHTOOL_GSTATS`), as many as the driver returned.
    fn stat_values(&mut self, netdev: &str, count: usize) -> Result<Vec<u64>, EthtoolError>;
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
}

impl StatsCache {
    pub fn new(raw_wanted: Vec<String>) -> StatsCache {
        StatsCache {
            entries: HashMap::new(),
            raw_wanted,
            name_reads: 0,
        }
    }

    /// One sample of `netdev`: values through `io`, names from the cache.
    /// The names are re-read when the driver returns another count than the
    /// cached one (a driver that grew or shrank its set, e.g. mlx5 when PFC
    /// is turned on for a priority).
    pub fn sample(
        &mut self,
        io: &mut dyn EthtoolIo,
        netdev: &str,
    ) -> Result<(Vec<crate::MappedStat>, Vec<crate::RawStat>), EthtoolError> {
        let cached = self.entries.get(netdev).map(|e| e.count);
        let count = match cached {
            Some(c) => c,
            None => self.refresh(io, netdev)?,
        };
        let mut values = io.stat_values(netdev, count)?;
        if values.len() != count {
            let fresh = self.refresh(io, netdev)?;
            if values.len() != fresh {
                values = io.stat_values(netdev, fresh)?;
            }
        }
        match self.entries.get(netdev) {
            Some(e) => Ok(e.resolved.apply(&values)),
            None => Ok((Vec::new(), Vec::new())),
        }
    }

    fn refresh(&mut self, io: &mut dyn EthtoolIo, netdev: &str) -> Result<usize, EthtoolError> {
        self.entries.remove(netdev);
        let count = io.stat_count(netdev)?;
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
        let names = io.stat_names(netdev, count)?;
        self.name_reads += 1;
        let count = names.len();
        let resolved = Resolved::new(&names, &self.raw_wanted);
        self.entries
            .insert(netdev.to_string(), Entry { count, resolved });
        Ok(count)
    }

    /// Forgets netdevs not in `keep` (removed interfaces).
    pub fn retain(&mut self, keep: &[&str]) {
        self.entries.retain(|k, _| keep.contains(&k.as_str()));
    }
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

/// Replays recorded `ethtool -S <netdev>` text from `<dir>/<netdev>.txt`,
/// read anew each sample so that a recording can be changed while the
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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(EthtoolError::Unsupported {
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
    fn stat_count(&mut self, netdev: &str) -> Result<usize, EthtoolError> {
        Ok(self.read(netdev)?.len())
    }
    fn stat_names(&mut self, netdev: &str, _count: usize) -> Result<Vec<String>, EthtoolError> {
        Ok(self.read(netdev)?.into_iter().map(|(n, _)| n).collect())
    }
    fn stat_values(&mut self, netdev: &str, _count: usize) -> Result<Vec<u64>, EthtoolError> {
        Ok(self.read(netdev)?.into_iter().map(|(_, v)| v).collect())
    }
}

/// The `SIOCETHTOOL` ioctl on an `AF_INET` datagram socket of the caller's
/// network namespace (the socket stays in the namespace it was opened in).
#[derive(Debug)]
pub struct Ioctl {
    fd: std::os::fd::OwnedFd,
}

#[allow(unsafe_code)]
mod sys {
    //! The raw ioctl. Layouts from `include/uapi/linux/ethtool.h`
    //! (`struct ethtool_sset_info`, `ethtool_gstrings`, `ethtool_stats`) and
    //! `include/uapi/linux/if.h` (`struct ifreq`).
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    pub const SIOCETHTOOL: libc::c_ulong = 0x8946;
    pub const ETHTOOL_GSTRINGS: u32 = 0x1b;
    pub const ETHTOOL_GSTATS: u32 = 0x1d;
    pub const ETHTOOL_GSSET_INFO: u32 = 0x37;
    pub const ETH_SS_STATS: u32 = 1;
    pub const ETH_GSTRING_LEN: usize = 32;
    pub const IFNAMSIZ: usize = 16;

    #[repr(C)]
    struct IfReq {
        name: [u8; IFNAMSIZ],
        data: *mut libc::c_void,
        _pad: [u8; 16],
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

    /// Runs one ethtool command whose request/reply buffer is `buf` (u64s
    /// for alignment). Returns the errno on failure.
    pub fn ethtool(fd: &OwnedFd, name: &[u8; IFNAMSIZ], buf: &mut [u64]) -> Result<(), i32> {
        let mut req = IfReq {
            name: *name,
            data: buf.as_mut_ptr().cast(),
            _pad: [0; 16],
        };
        // SAFETY: req is a valid ifreq whose data points to `buf`, which
        // outlives the call; the callers size `buf` for the reply (see the
        // headroom note in `Ioctl`).
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

    fn call(&self, netdev: &str, step: &'static str, buf: &mut [u64]) -> Result<(), EthtoolError> {
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
                step,
                errno,
            },
        })
    }

    /// Kernels before "ethtool: Avoid overflowing userspace buffer on stats
    /// query" (7b07be1ff1cb) write as many entries as the driver has *now*,
    /// whatever count the request carried; the headroom keeps a set that
    /// grew between two calls inside the buffer, and a reply longer than the
    /// request is treated as a changed set.
    fn headroom(count: usize) -> usize {
        // Saturating: the decoders below take any count.
        count.saturating_add(count / 4).saturating_add(64)
    }
}

fn u32_at(buf: &[u64], byte: usize) -> u32 {
    let word = buf.get(byte / 8).copied().unwrap_or(0).to_ne_bytes();
    let i = byte % 8;
    let mut b = [0u8; 4];
    b.copy_from_slice(&word[i..i + 4]);
    u32::from_ne_bytes(b)
}

fn set_u32(buf: &mut [u64], byte: usize, v: u32) {
    if let Some(word) = buf.get_mut(byte / 8) {
        let mut bytes = word.to_ne_bytes();
        let i = byte % 8;
        bytes[i..i + 4].copy_from_slice(&v.to_ne_bytes());
        *word = u64::from_ne_bytes(bytes);
    }
}

impl EthtoolIo for Ioctl {
    fn stat_count(&mut self, netdev: &str) -> Result<usize, EthtoolError> {
        // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }
        let mut buf = [0u64; 3];
        set_u32(&mut buf, 0, sys::ETHTOOL_GSSET_INFO);
        buf[1] = 1u64 << sys::ETH_SS_STATS;
        self.call(netdev, "ETHTOOL_GSSET_INFO", &mut buf)?;
        if buf[1] & (1u64 << sys::ETH_SS_STATS) == 0 {
            return Ok(0);
        }
        Ok(u32_at(&buf, 16) as usize)
    }

    fn stat_names(&mut self, netdev: &str, count: usize) -> Result<Vec<String>, EthtoolError> {
        // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
        let room = Self::headroom(count);
        let words = (12 + room * sys::ETH_GSTRING_LEN).div_ceil(8);
        let mut buf = vec![0u64; words];
        set_u32(&mut buf, 0, sys::ETHTOOL_GSTRINGS);
        set_u32(&mut buf, 4, sys::ETH_SS_STATS);
        set_u32(&mut buf, 8, count as u32);
        self.call(netdev, "ETHTOOL_GSTRINGS", &mut buf)?;
        Ok(decode_gstrings(&buf, count))
    }

    fn stat_values(&mut self, netdev: &str, count: usize) -> Result<Vec<u64>, EthtoolError> {
        // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
        let room = Self::headroom(count);
        let mut buf = vec![0u64; 1 + room];
        set_u32(&mut buf, 0, sys::ETHTOOL_GSTATS);
        set_u32(&mut buf, 4, count as u32);
        self.call(netdev, "ETHTOOL_GSTATS", &mut buf)?;
        Ok(decode_gstats(&buf, count))
    }
}

/// The names in an `ETHTOOL_GSTRINGS` reply buffer (`struct
/// ethtool_gstrings`: cmd, string_set, len, then `len` NUL-padded 32-byte
/// names) for a request of `count` names. The kernel's `len` is trusted only
/// up to the request's headroom and the buffer's end; a name without its
/// NUL keeps all 32 bytes. Pure, for the ioctl above and for fuzzing.
pub fn decode_gstrings(buf: &[u64], count: usize) -> Vec<String> {
    let room = Ioctl::headroom(count);
    let len = (u32_at(buf, 8) as usize).min(room);
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let mut names = Vec::with_capacity(len.min(bytes.len() / sys::ETH_GSTRING_LEN));
    for i in 0..len {
        let start = 12 + i * sys::ETH_GSTRING_LEN;
        let Some(raw) = bytes.get(start..start + sys::ETH_GSTRING_LEN) else {
            break;
        };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        names.push(String::from_utf8_lossy(&raw[..end]).into_owned());
    }
    names
}

/// The values in an `ETHTOOL_GSTATS` reply buffer (`struct ethtool_stats`:
/// cmd, n_stats, then `n_stats` u64s) for a request of `count` values; as
/// with [`decode_gstrings`], `n_stats` is bounded by the headroom; a reply
/// claiming more values than the buffer holds gives none.
pub fn decode_gstats(buf: &[u64], count: usize) -> Vec<u64> {
    let room = Ioctl::headroom(count);
    let n = (u32_at(buf, 4) as usize).min(room);
    buf.get(1..1 + n).map(<[u64]>::to_vec).unwrap_or_default()
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
        // GSTRINGS: header (cmd, string_set, len = 3), two names, the second
        // without its NUL.
        let mut bytes = Vec::new();
        for v in [0x1bu32, 1, 3] {
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
            decode_gstrings(&words, 2),
            vec!["rx_packets".to_string(), "x".repeat(32)]
        );
        // A len of u32::MAX, an absurd request count: bounded by the buffer.
        let mut huge = words.clone();
        set_u32(&mut huge, 8, u32::MAX);
        assert_eq!(decode_gstrings(&huge, usize::MAX).len(), 2);
        // GSTATS: n_stats 2 of a 3-word buffer; n_stats past the buffer
        // gives nothing.
        let mut stats = vec![0u64, 7, 9];
        set_u32(&mut stats, 4, 2);
        assert_eq!(decode_gstats(&stats, 2), vec![7, 9]);
        set_u32(&mut stats, 4, 5);
        assert_eq!(decode_gstats(&stats, usize::MAX), Vec::<u64>::new());
        assert_eq!(decode_gstats(&[], 0), Vec::<u64>::new());
    }

    struct Fake {
        names: Vec<String>,
        values: Vec<u64>,
    }

    impl EthtoolIo for Fake {
        fn stat_count(&mut self, _: &str) -> Result<usize, EthtoolError> {
            Ok(self.names.len())
        }
        fn stat_names(&mut self, _: &str, _: usize) -> Result<Vec<String>, EthtoolError> {
            Ok(self.names.clone())
        }
        fn stat_values(&mut self, _: &str, _: usize) -> Result<Vec<u64>, EthtoolError> {
            Ok(self.values.clone())
        }
    }

    #[test]
    fn names_are_cached_and_reread_when_the_count_changes() {
        let mut fake = Fake {
            names: vec!["rx_prio3_pause".into()],
            values: vec![5],
        };
        let mut cache = StatsCache::new(vec![]);
        cache.sample(&mut fake, "eth0").unwrap();
        cache.sample(&mut fake, "eth0").unwrap();
        assert_eq!(cache.name_reads, 1);
        fake.names = vec!["rx_prio3_pause".into(), "tx_prio3_pause".into()];
        fake.values = vec![5, 6];
        let (stats, _) = cache.sample(&mut fake, "eth0").unwrap();
        assert_eq!(cache.name_reads, 2);
        assert_eq!(stats.len(), 2);
    }

    #[test]
    fn an_absurd_statistics_count_is_refused_before_any_buffer_is_sized() {
        struct Absurd;
        impl EthtoolIo for Absurd {
            fn stat_count(&mut self, _: &str) -> Result<usize, EthtoolError> {
                Ok(u32::MAX as usize)
            }
            fn stat_names(&mut self, _: &str, _: usize) -> Result<Vec<String>, EthtoolError> {
                panic!("names asked for after an absurd count")
            }
            fn stat_values(&mut self, _: &str, _: usize) -> Result<Vec<u64>, EthtoolError> {
                panic!("values asked for after an absurd count")
            }
        }
        let mut cache = StatsCache::new(vec![]);
        let err = cache.sample(&mut Absurd, "eth0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "eth0: the driver reports 4294967295 ethtool statistics, more than the 65536 read"
        );
    }
}
