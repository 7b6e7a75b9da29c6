//! Recorded `ethtool -S` text for trees that are not the running kernel
//! ([`Replay`], `<dir>/<netdev>.txt`), and [`answer`], the model of
//! `net/ethtool/ioctl.c` that answers the three commands from a listing.

use std::path::{Path, PathBuf};

use super::{
    set_u32, u32_at, EthtoolError, EthtoolIo, EthtoolStep, ReplyBuf, ETHTOOL_GSSET_INFO,
    ETHTOOL_GSTATS, ETHTOOL_GSTRINGS, ETH_GSTRING_LEN, ETH_SS_STATS, GSTRINGS_HEADER,
};

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
        step: EthtoolStep::of_command(cmd),
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
                    step: EthtoolStep::of_command(cmd),
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
        match roce_host::fs::read_text_capped(&path, roce_host::fs::REPLAY_CAP) {
            Ok(text) => Ok(parse_ethtool_s(&text)),
            Err(e) if roce_host::errno::is_absent(&e) => Err(EthtoolError::Unsupported {
                netdev: netdev.to_string(),
            }),
            Err(e) => Err(EthtoolError::Replay(crate::io_error(&path, &e))),
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
