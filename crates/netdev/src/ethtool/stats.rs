//! One netdev's statistics read through an [`EthtoolIo`]: the count, the
//! names when the count changed, the values, again while the set changes
//! under the reads; and [`StatsCache`], each netdev's names kept with their
//! resolved meanings between samples.

use std::collections::HashMap;

use super::{
    decode_gstats, decode_gstrings, decode_sset_info, set_u32, EthtoolError, EthtoolIo,
    EthtoolStep, ReplyBuf, ATTEMPTS, ETHTOOL_GSSET_INFO, ETHTOOL_GSTATS, ETHTOOL_GSTRINGS,
    ETH_GSTRING_LEN, ETH_SS_STATS, GSTRINGS_HEADER, MAX_STATS,
};
use crate::mapping::Resolved;

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
        step: EthtoolStep::ReplyBuffer,
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
pub(super) fn overran(e: &EthtoolError) -> bool {
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
