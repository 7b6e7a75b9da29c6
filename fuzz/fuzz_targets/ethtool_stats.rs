//! Fuzz target: ethtool statistics as the ioctl returns them
//! (`crates/netdev` ethtool.rs: the `ETHTOOL_GSSET_INFO` / `ETHTOOL_GSTRINGS`
//! / `ETHTOOL_GSTATS` reply decoding, the per-netdev name cache that asks
//! the count before every read and re-reads names when it changes, replies
//! longer than the caller's buffer cut there with EFAULT), the name→meaning table and its per-set resolution
//! (mapping.rs), and the netdev reader that combines them with pause
//! statistics and DCB replies (reader.rs, decoded by live.rs and dcb.rs).
//! The driver's answers (counts, string sets, value buffers, errors) come
//! from the input, sample after sample; sysfs is the netdev-mlx5 fixture.
#![no_main]

use std::collections::VecDeque;
use std::sync::OnceLock;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use roce_exporter_fuzz::{repo_root, words};
use roce_netdev::dcb::{self, DcbConfig, DcbError};
use roce_netdev::ethtool::{
    decode_gstats, decode_gstrings, decode_sset_info, parse_ethtool_s, set_u32, u32_at,
    EthtoolError, ReplyBuf, ETHTOOL_GSSET_INFO, ETHTOOL_GSTATS, ETHTOOL_GSTRINGS, ETH_SS_STATS,
};
use roce_netdev::mapping::{self, Resolved};
use roce_netdev::reader::{DcbRead, PauseRead, ReaderOptions, NetdevToRead};
use roce_netdev::{EthtoolIo, EthtoolStep, NetdevError, NetdevReader, PauseStats};

const ETH_GSTRING_LEN: usize = 32;

/// Real driver statistic names (the ethtool listings of crates/netdev/tests/fixtures).
fn driver_names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let dir = repo_root().join("crates/netdev/tests/fixtures/ethtool");
        let mut names = Vec::new();
        for f in ["mlx5-cx7.txt", "bnxt_en.txt", "ice.txt", "e1000.txt"] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
            names.extend(parse_ethtool_s(&text).into_iter().map(|(n, _)| n));
        }
        names.sort();
        names.dedup();
        names
    })
}

fn name(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(3, 4)? {
        Ok(u.choose(driver_names())?.clone())
    } else {
        let len = u.int_in_range(0..=40)?;
        Ok(String::from_utf8_lossy(u.bytes(len.min(u.len()))?).into_owned())
    }
}

fn error(u: &mut Unstructured<'_>) -> Result<EthtoolError> {
    let netdev = "fuzz0".to_string();
    Ok(match u.int_in_range(0..=2)? {
        0 => EthtoolError::Unsupported { netdev },
        1 => EthtoolError::NoDevice { netdev },
        _ => EthtoolError::Ioctl {
            netdev,
            step: EthtoolStep::Stats,
            errno: libc::EIO,
        },
    })
}

/// An `ETHTOOL_GSTRINGS` reply buffer: mostly well-formed (a header whose
/// `len` may lie, names padded to 32 bytes), sometimes raw bytes.
fn gstrings(u: &mut Unstructured<'_>) -> Result<Vec<u64>> {
    if u.ratio(1, 4)? {
        let len = u.int_in_range(0..=512)?;
        return Ok(words(u.bytes(len.min(u.len()))?));
    }
    let n = u.int_in_range(0..=24)?;
    let mut names = Vec::new();
    for _ in 0..n {
        names.push(name(u)?);
    }
    let claimed: u32 = if u.ratio(1, 4)? {
        u.arbitrary()?
    } else {
        names.len() as u32
    };
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0x1bu32.to_ne_bytes());
    bytes.extend_from_slice(&1u32.to_ne_bytes());
    bytes.extend_from_slice(&claimed.to_ne_bytes());
    for n in &names {
        let mut slot = [0u8; ETH_GSTRING_LEN];
        let b = n.as_bytes();
        let k = b.len().min(ETH_GSTRING_LEN);
        slot[..k].copy_from_slice(&b[..k]);
        bytes.extend_from_slice(&slot);
    }
    Ok(words(&bytes))
}

/// An `ETHTOOL_GSTATS` reply buffer: cmd, `n_stats` (may lie), values.
fn gstats(u: &mut Unstructured<'_>) -> Result<Vec<u64>> {
    let n = u.int_in_range(0..=32)?;
    let claimed: u32 = if u.ratio(1, 4)? { u.arbitrary()? } else { n };
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0x1du32.to_ne_bytes());
    bytes.extend_from_slice(&claimed.to_ne_bytes());
    for _ in 0..n {
        bytes.extend_from_slice(&u.arbitrary::<u64>()?.to_ne_bytes());
    }
    Ok(words(&bytes))
}

/// The driver, scripted: each call takes the next answer of its kind.
struct ScriptedIo {
    counts: VecDeque<std::result::Result<usize, EthtoolError>>,
    names: VecDeque<std::result::Result<Vec<u64>, EthtoolError>>,
    values: VecDeque<std::result::Result<Vec<u64>, EthtoolError>>,
}

fn out_of_script() -> EthtoolError {
    EthtoolError::Unsupported {
        netdev: "script".into(),
    }
}

/// Copies a scripted reply into the caller's buffer as far as it goes; a
/// longer reply fails with EFAULT there, as the kernel's copy does at the
/// buffer's guard page.
fn copy_reply(reply: &[u64], buf: &mut ReplyBuf) -> std::result::Result<(), EthtoolError> {
    let words = buf.words_mut();
    let n = reply.len().min(words.len());
    words[..n].copy_from_slice(&reply[..n]);
    if n < reply.len() {
        return Err(EthtoolError::Ioctl {
            netdev: "script".into(),
            step: EthtoolStep::Stats,
            errno: libc::EFAULT,
        });
    }
    Ok(())
}

impl EthtoolIo for ScriptedIo {
    fn ethtool(&mut self, _: &str, buf: &mut ReplyBuf) -> std::result::Result<(), EthtoolError> {
        match u32_at(buf.words(), 0) {
            ETHTOOL_GSSET_INFO => {
                let count = self
                    .counts
                    .pop_front()
                    .unwrap_or_else(|| Err(out_of_script()))?;
                let words = buf.words_mut();
                words[1] = 1 << ETH_SS_STATS;
                set_u32(words, 16, count as u32);
                Ok(())
            }
            ETHTOOL_GSTRINGS => match self.names.pop_front() {
                Some(Ok(reply)) => copy_reply(&reply, buf),
                Some(Err(e)) => Err(e),
                None => Err(out_of_script()),
            },
            ETHTOOL_GSTATS => match self.values.pop_front() {
                Some(Ok(reply)) => copy_reply(&reply, buf),
                Some(Err(e)) => Err(e),
                None => Err(out_of_script()),
            },
            cmd => panic!("the reader sent ethtool command {cmd:#x}"),
        }
    }
}

/// Pause statistics and DCB from netlink payloads of the input.
struct Replies {
    pause: VecDeque<Vec<u8>>,
    dcb: VecDeque<Vec<u8>>,
}

struct Pause(Replies);
struct Dcb(Replies);

impl PauseRead for Pause {
    fn read_pause(&mut self, _: &str) -> std::result::Result<Option<PauseStats>, NetdevError> {
        let payload = self.0.pause.pop_front().unwrap_or_default();
        Ok(roce_netdev::live::parse_pause_reply(&payload)?)
    }
}

impl DcbRead for Dcb {
    fn read_dcb(&mut self, _: &str) -> std::result::Result<DcbConfig, DcbError> {
        let datagram = self.0.dcb.pop_front().unwrap_or_default();
        dcb::decode_reply(&datagram)
    }
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mut raw_wanted = Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        raw_wanted.push(name(u)?);
    }

    // The table on its own: a string set resolved once, applied to values
    // of any length.
    let set_names = decode_gstrings(&gstrings(u)?).unwrap_or_default();
    let _ = decode_sset_info(&gstats(u)?);
    for n in &set_names {
        let _ = mapping::lookup(n);
    }
    let resolved = Resolved::new(&set_names, &raw_wanted);
    let stats_reply = gstats(u)?;
    let values = decode_gstats(&stats_reply).unwrap_or_default();
    let (stats, raw) = resolved.apply(&values);
    assert!(raw.len() <= values.len());
    assert!(stats.len() <= set_names.len());

    // The reader, sample after sample, with the driver changing its set.
    let mut io = ScriptedIo {
        counts: VecDeque::new(),
        names: VecDeque::new(),
        values: VecDeque::new(),
    };
    let mut replies = || -> Result<Replies> {
        let mut r = Replies {
            pause: VecDeque::new(),
            dcb: VecDeque::new(),
        };
        for _ in 0..u.int_in_range(0..=2)? {
            let len = u.int_in_range(0..=96)?;
            r.pause.push_back(u.bytes(len.min(u.len()))?.to_vec());
            let len = u.int_in_range(0..=96)?;
            r.dcb.push_back(u.bytes(len.min(u.len()))?.to_vec());
        }
        Ok(r)
    };
    let (pause, dcb) = (replies()?, replies()?);
    for _ in 0..u.int_in_range(0..=12)? {
        io.counts.push_back(if u.ratio(1, 6)? {
            Err(error(u)?)
        } else {
            Ok(u.int_in_range(0..=40)?)
        });
        io.names.push_back(if u.ratio(1, 8)? {
            Err(error(u)?)
        } else {
            Ok(gstrings(u)?)
        });
        for _ in 0..u.int_in_range(1..=3)? {
            io.values.push_back(if u.ratio(1, 8)? {
                Err(error(u)?)
            } else {
                Ok(gstats(u)?)
            });
        }
    }
    let options = ReaderOptions {
        sysfs: repo_root().join("crates/netdev/tests/fixtures/netdev-mlx5/sys"),
        raw_ethtool: raw_wanted,
        // Every sample, or the production cadence (cached between reads).
        qos_interval: std::time::Duration::from_secs(if u.arbitrary::<bool>()? { 0 } else { 300 }),
    };
    let mut reader = NetdevReader::new(options)
        .with_ethtool(Box::new(io))
        .with_pause(Box::new(Pause(pause)))
        .with_dcb(Box::new(Dcb(dcb)));
    let targets = [
        NetdevToRead {
            name: "ens1f0np0".into(),
            rdma: None,
        },
        NetdevToRead {
            name: "eth9".into(),
            rdma: None,
        },
    ];
    for _ in 0..u.int_in_range(1..=6)? {
        let k = u.int_in_range(0..=2)?;
        let mut errors = Vec::new();
        let snapshot = reader.read(&targets[..k], &mut errors);
        assert_eq!(snapshot.netdevs.len(), k);
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
