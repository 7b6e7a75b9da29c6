//! A netdev with 10,000 ethtool statistics: an mlx5 listing grown to 132
//! channels (the ConnectX-7 fixture's per-channel `ch0_`/`rx0_`/`tx0_`
//! blocks repeated, as en_stats.c names them per channel) behind a fake
//! `EthtoolIo` that answers the three ioctl steps as the kernel does. The
//! names are fetched once and the values every sample, the meanings are the
//! same as on the 16-channel listing (per-channel counters have none), a raw
//! counter deep in the set is exported, a set that grows is re-read, and the
//! netdev beside it reads on. The fake answers as kernels before
//! 7b07be1ff1cb do (the driver's current count, whatever the request says)
//! into the caller's own buffer and never past it: a set that grew after
//! start, or between the count and the values, is read whole.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use roce_netdev::ethtool::{
    parse_ethtool_s, set_u32, u32_at, ReplyBuf, StatsCache, ETHTOOL_GSSET_INFO, ETHTOOL_GSTATS,
    ETHTOOL_GSTRINGS, ETH_GSTRING_LEN, ETH_SS_STATS,
};
use roce_netdev::reader::{NetdevToRead, ReaderOptions};
use roce_netdev::{
    EthtoolError, EthtoolIo, EthtoolStep, HostError, NetdevReader, NetdevSnapshot, RdmaPortRef,
    ReadOutcome,
};

/// This crate's folder (its fixtures are under tests/fixtures).
fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The 16-channel ConnectX-7 listing, (name, value) in driver order.
fn cx7() -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(here().join("tests/fixtures/ethtool/mlx5-cx7.txt")).unwrap();
    parse_ethtool_s(&text)
}

/// The listing with channels 16..`channels` added after the others, each a
/// copy of channel 0's counters under its own number.
fn grown(channels: usize) -> Vec<(String, u64)> {
    let base = cx7();
    let per_channel: Vec<(&str, &str)> = base
        .iter()
        .filter_map(|(n, _)| {
            ["ch0_", "rx0_", "tx0_"]
                .iter()
                .find(|p| n.starts_with(**p))
                .map(|p| (&p[..2], &n[p.len()..]))
        })
        .collect();
    let mut out = base.clone();
    for c in 16..channels {
        for (i, (kind, rest)) in per_channel.iter().enumerate() {
            out.push((format!("{kind}{c}_{rest}"), (c * 1000 + i) as u64));
        }
    }
    out
}

/// What each call of the fake saw, in order.
type Calls = Arc<Mutex<Vec<(String, &'static str)>>>;

/// (netdev, its listing), changeable while the reader holds the fake.
type Listings = Arc<Mutex<Vec<(String, Vec<(String, u64)>)>>>;

/// The ioctl as `net/ethtool/ioctl.c` answers it before 7b07be1ff1cb
/// (`ethtool_get_sset_info`, `ethtool_get_strings`, `ethtool_get_stats`):
/// the count, then for GSTRINGS and GSTATS a header carrying the driver's
/// *current* count and that many entries, whatever the request claimed.
/// The caller's buffer is the very `ReplyBuf` the ioctl hands the kernel:
/// its words are all the memory before the guard page. The fake writes
/// through the bounds-checked slice, as `copy_to_user` writes until the
/// guard page: the entries that fit, then EFAULT. `cut` counts the replies
/// that did not fit (each one a heap overflow with the old plain buffers);
/// `grow_after_count` changes a listing right after a GSSET_INFO answer, as
/// `ethtool -L` racing a sample does.
struct Fake {
    listings: Listings,
    calls: Calls,
    cut: Cut,
    grow_after_count: Grow,
}

/// (step, entries the driver had, entries the buffer held) per reply that
/// did not fit.
type Cut = Arc<Mutex<Vec<(&'static str, usize, usize)>>>;

/// A listing to install right after the next GSSET_INFO answer.
type Grow = Arc<Mutex<Option<(String, Vec<(String, u64)>)>>>;

impl Fake {
    fn new(listings: Listings, calls: Calls) -> Fake {
        Fake {
            listings,
            calls,
            cut: Arc::default(),
            grow_after_count: Arc::default(),
        }
    }
    fn listing(&self, netdev: &str) -> Result<Vec<(String, u64)>, EthtoolError> {
        self.listings
            .lock()
            .unwrap()
            .iter()
            .find(|(n, _)| n == netdev)
            .map(|(_, l)| l.clone())
            .ok_or(EthtoolError::NoDevice {
                netdev: netdev.into(),
            })
    }
}

fn efault(netdev: &str, cmd: u32) -> EthtoolError {
    EthtoolError::Ioctl {
        netdev: netdev.into(),
        step: EthtoolStep::of_command(cmd),
        errno: libc::EFAULT,
    }
}

impl EthtoolIo for Fake {
    fn ethtool(&mut self, netdev: &str, buf: &mut ReplyBuf) -> Result<(), EthtoolError> {
        let listing = self.listing(netdev)?;
        let n = listing.len();
        let words = buf.words_mut();
        let cmd = u32_at(words, 0);
        let step = match cmd {
            ETHTOOL_GSSET_INFO => "ETHTOOL_GSSET_INFO",
            ETHTOOL_GSTRINGS => "ETHTOOL_GSTRINGS",
            ETHTOOL_GSTATS => "ETHTOOL_GSTATS",
            other => panic!("command {other:#x} sent"),
        };
        self.calls.lock().unwrap().push((netdev.into(), step));
        match cmd {
            ETHTOOL_GSSET_INFO => {
                assert_eq!(words[1], 1 << ETH_SS_STATS, "asks for ETH_SS_STATS only");
                set_u32(words, 16, n as u32);
                let mut grow = self.grow_after_count.lock().unwrap();
                if grow.as_ref().is_some_and(|(dev, _)| dev == netdev) {
                    if let Some((dev, grown)) = grow.take() {
                        let mut all = self.listings.lock().unwrap();
                        if let Some(slot) = all.iter_mut().find(|(d, _)| *d == dev) {
                            slot.1 = grown;
                        }
                    }
                }
                Ok(())
            }
            ETHTOOL_GSTRINGS => {
                assert_eq!(u32_at(words, 4), ETH_SS_STATS);
                set_u32(words, 8, n as u32);
                let room = (words.len() * 8 - 12) / ETH_GSTRING_LEN;
                for (i, (name, _)) in listing.iter().enumerate() {
                    if i >= room {
                        self.cut.lock().unwrap().push((step, n, room));
                        return Err(efault(netdev, cmd));
                    }
                    let mut slot = [0u8; 32];
                    slot[..name.len().min(31)]
                        .copy_from_slice(&name.as_bytes()[..name.len().min(31)]);
                    for (j, c) in slot.chunks(4).enumerate() {
                        let wrote = set_u32(
                            words,
                            12 + i * ETH_GSTRING_LEN + 4 * j,
                            u32::from_ne_bytes(c.try_into().unwrap()),
                        );
                        assert!(wrote, "a name written past the buffer");
                    }
                }
                Ok(())
            }
            _ => {
                set_u32(words, 4, n as u32);
                let room = words.len() - 1;
                for (i, (_, v)) in listing.iter().enumerate() {
                    match words.get_mut(1 + i) {
                        Some(w) => *w = *v,
                        None => {
                            self.cut.lock().unwrap().push((step, n, room));
                            return Err(efault(netdev, cmd));
                        }
                    }
                }
                Ok(())
            }
        }
    }
}

fn target(name: &str, device: &str) -> NetdevToRead {
    NetdevToRead {
        name: name.into(),
        rdma: Some(RdmaPortRef {
            device: device.into(),
            port: 1,
        }),
    }
}

#[test]
fn ten_thousand_ethtool_counters_are_read_as_cheaply_as_a_hundred() {
    let big = grown(132);
    assert!(big.len() >= 10_000, "{} statistics", big.len());
    let deep = big[9_990].clone();
    let small = cx7();
    let listings = Arc::new(Mutex::new(vec![
        ("ens1f0np0".to_string(), big.clone()),
        ("eth9".to_string(), small.clone()),
    ]));
    let calls: Calls = Arc::default();
    let fake = Fake::new(listings.clone(), calls.clone());
    let cut = fake.cut.clone();
    let raw = vec![deep.0.clone(), "tx_pause_storm_error_events".to_string()];
    let mut reader = NetdevReader::new(ReaderOptions {
        sysfs: here().join("tests/fixtures/netdev-mlx5/sys"),
        raw_ethtool: raw.clone(),
        qos_interval: std::time::Duration::ZERO,
    })
    .with_ethtool(Box::new(fake));
    let targets = [target("ens1f0np0", "mlx5_0"), target("eth9", "mlx5_1")];

    // The meanings the 16-channel listing has, through the same cache.
    let (want, _) = StatsCache::new(vec![])
        .sample(
            &mut Fake::new(
                Arc::new(Mutex::new(vec![("x".into(), small.clone())])),
                Arc::default(),
            ),
            "x",
        )
        .unwrap();
    assert!(!want.is_empty());

    for sample in 0..3 {
        let mut errors = Vec::new();
        let snap = reader.read(&targets, &mut errors);
        assert_eq!(errors, Vec::<HostError>::new());
        let n = &snap.netdevs[0];
        assert_eq!(n.ethtool, ReadOutcome::Ok(()));
        assert_eq!(
            n.stats, want,
            "sample {sample}: the extra channels add no meaning"
        );
        assert_eq!(n.raw.len(), 2);
        let far = n.raw.iter().find(|r| r.name == deep.0).map(|r| r.value);
        assert_eq!(far, Some(deep.1), "a raw counter at index 9,990");
        assert_eq!(n.mtu, Some(9000), "sysfs part unaffected");
        assert_eq!(snap.netdevs[1].ethtool, ReadOutcome::Ok(()));
        assert_eq!(snap.netdevs[1].stats, want);
        // Names once (count, strings, values), then the count and the
        // values per netdev per sample, 10,000 statistics or not.
        let steps: Vec<(String, &str)> = calls.lock().unwrap().drain(..).collect();
        if sample == 0 {
            assert_eq!(steps.len(), 6, "{steps:?}");
        } else {
            assert_eq!(
                steps,
                vec![
                    ("ens1f0np0".to_string(), "ETHTOOL_GSSET_INFO"),
                    ("ens1f0np0".to_string(), "ETHTOOL_GSTATS"),
                    ("eth9".to_string(), "ETHTOOL_GSSET_INFO"),
                    ("eth9".to_string(), "ETHTOOL_GSTATS")
                ]
            );
        }
        assert_eq!(reader.last_calls().ethtool, steps.len() as u64);
    }

    // The driver adds a channel: the count changes and the names are read
    // again, once.
    listings.lock().unwrap()[0].1 = grown(133);
    let mut errors = Vec::new();
    let snap = reader.read(&targets, &mut errors);
    assert_eq!(errors, Vec::<HostError>::new());
    assert_eq!(snap.netdevs[0].stats, want);
    let steps: Vec<&str> = calls
        .lock()
        .unwrap()
        .drain(..)
        .filter(|(n, _)| n == "ens1f0np0")
        .map(|(_, s)| s)
        .collect();
    assert_eq!(
        steps,
        ["ETHTOOL_GSSET_INFO", "ETHTOOL_GSTRINGS", "ETHTOOL_GSTATS"]
    );
    assert_eq!(
        *cut.lock().unwrap(),
        vec![],
        "no reply longer than its buffer"
    );
}

/// The reader of `ens1f0np0` (listing `start`) beside `eth9` (16 channels),
/// exporting the raw counter `raw`.
fn reader_with(start: Vec<(String, u64)>, raw: &str) -> (NetdevReader, Listings, Calls, Cut, Grow) {
    let listings = Arc::new(Mutex::new(vec![
        ("ens1f0np0".to_string(), start),
        ("eth9".to_string(), cx7()),
    ]));
    let calls: Calls = Arc::default();
    let fake = Fake::new(listings.clone(), calls.clone());
    let (cut, grow) = (fake.cut.clone(), fake.grow_after_count.clone());
    let reader = NetdevReader::new(ReaderOptions {
        sysfs: here().join("tests/fixtures/netdev-mlx5/sys"),
        raw_ethtool: vec![raw.to_string()],
        qos_interval: std::time::Duration::ZERO,
    })
    .with_ethtool(Box::new(fake));
    (reader, listings, calls, cut, grow)
}

/// One read of `targets` without errors, whose first netdev's ethtool set
/// was read whole and gave `raw` as its only raw counter.
fn assert_reads_only(
    reader: &mut NetdevReader,
    targets: &[NetdevToRead],
    errors: &mut Vec<HostError>,
    raw: (String, u64),
) -> NetdevSnapshot {
    let snap = reader.read(targets, errors);
    assert_eq!(*errors, Vec::<HostError>::new());
    assert_eq!(snap.netdevs[0].ethtool, ReadOutcome::Ok(()));
    let got: Vec<(String, u64)> = snap.netdevs[0]
        .raw
        .iter()
        .map(|r| (r.name.clone(), r.value))
        .collect();
    assert_eq!(got, vec![raw]);
    snap
}

fn steps_of(calls: &Calls, netdev: &str) -> Vec<&'static str> {
    calls
        .lock()
        .unwrap()
        .drain(..)
        .filter(|(n, _)| n == netdev)
        .map(|(_, s)| s)
        .collect()
}

/// 16 → 132 channels after start: a count cached from the first read would
/// size the values buffer for ~1,900 entries while a kernel without
/// 7b07be1ff1cb writes ~10,000 into it. The count is asked before every
/// read and the buffer sized from it: every reply fits, and
/// the new channels' counters are read under their own names.
#[test]
fn a_set_grown_after_start_is_sized_from_the_count_asked_before_the_read() {
    let big = grown(132);
    let deep = big[9_990].clone();
    let (mut reader, listings, calls, cut, _) = reader_with(cx7(), &deep.0);
    let targets = [target("ens1f0np0", "mlx5_0"), target("eth9", "mlx5_1")];
    for _ in 0..2 {
        let mut errors = Vec::new();
        let snap = reader.read(&targets, &mut errors);
        assert_eq!(errors, Vec::<HostError>::new());
        assert_eq!(snap.netdevs[0].raw, vec![], "not in the 16-channel set");
    }
    calls.lock().unwrap().clear();

    listings.lock().unwrap()[0].1 = big;
    let mut errors = Vec::new();
    assert_reads_only(&mut reader, &targets, &mut errors, deep);
    assert_eq!(
        steps_of(&calls, "ens1f0np0"),
        ["ETHTOOL_GSSET_INFO", "ETHTOOL_GSTRINGS", "ETHTOOL_GSTATS"]
    );
    assert_eq!(
        *cut.lock().unwrap(),
        vec![],
        "no reply longer than its buffer"
    );
}

/// `ethtool -L` between the count and the values of one sample: no count
/// asked beforehand can size that reply. The old kernel writes 10,000
/// values into a buffer sized for the 16-channel set; the buffer ends at
/// the guard page, so the copy is cut there with EFAULT (the fake does what
/// `copy_to_user` does), and the reader asks again: count, names, values,
/// all of the grown set, in the same sample.
#[test]
fn a_set_grown_between_the_count_and_the_values_is_cut_at_the_buffer_end_and_read_again() {
    let big = grown(132);
    let deep = big[9_990].clone();
    let (mut reader, _listings, calls, cut, grow) = reader_with(cx7(), &deep.0);
    let targets = [target("ens1f0np0", "mlx5_0"), target("eth9", "mlx5_1")];
    let mut errors = Vec::new();
    reader.read(&targets, &mut errors);
    assert_eq!(errors, Vec::<HostError>::new());
    calls.lock().unwrap().clear();

    let n = big.len();
    *grow.lock().unwrap() = Some(("ens1f0np0".to_string(), big));
    let snap = assert_reads_only(&mut reader, &targets, &mut errors, deep);
    assert_eq!(
        steps_of(&calls, "ens1f0np0"),
        [
            "ETHTOOL_GSSET_INFO",
            "ETHTOOL_GSTATS",
            "ETHTOOL_GSSET_INFO",
            "ETHTOOL_GSTRINGS",
            "ETHTOOL_GSTATS"
        ]
    );
    let cut = cut.lock().unwrap().clone();
    assert_eq!(cut.len(), 1, "{cut:?}");
    let (step, had, held) = cut[0];
    assert_eq!((step, had), ("ETHTOOL_GSTATS", n));
    assert!(
        held > cx7().len() && held < n,
        "sized from the 16-channel count: {held}"
    );
    assert_eq!(
        snap.netdevs[1].ethtool,
        ReadOutcome::Ok(()),
        "eth9 unaffected"
    );
}
