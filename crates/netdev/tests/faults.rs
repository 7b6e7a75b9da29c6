//! A netdev with 10,000 ethtool statistics: an mlx5 listing grown to 132
//! channels (the ConnectX-7 fixture's per-channel `ch0_`/`rx0_`/`tx0_`
//! blocks repeated, as en_stats.c names them per channel) behind a fake
//! `EthtoolIo` that answers the three ioctl steps as the kernel does. The
//! names are fetched once and the values every sample, the meanings are the
//! same as on the 16-channel listing (per-channel counters have none), a raw
//! counter deep in the set is exported, a set that grows is re-read, and the
//! netdev beside it reads on.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use roce_netdev::ethtool::{parse_ethtool_s, StatsCache};
use roce_netdev::reader::{ReaderOptions, Target};
use roce_netdev::{EthtoolError, EthtoolIo, NetdevReader, Outcome, RdmaPortRef};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The 16-channel ConnectX-7 listing, (name, value) in driver order.
fn cx7() -> Vec<(String, u64)> {
    let text = std::fs::read_to_string(repo().join("tests/fixtures/ethtool/mlx5-cx7.txt")).unwrap();
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

/// The ioctl steps over fixed listings per netdev: GSSET_INFO gives the
/// count, GSTRINGS the names, GSTATS as many values as the driver has
/// (whatever count was asked, as pre-7b07be1ff1cb kernels do).
struct Fake {
    listings: Listings,
    calls: Calls,
}

impl Fake {
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
    fn note(&self, netdev: &str, step: &'static str) {
        self.calls.lock().unwrap().push((netdev.into(), step));
    }
}

impl EthtoolIo for Fake {
    fn stat_count(&mut self, netdev: &str) -> Result<usize, EthtoolError> {
        self.note(netdev, "ETHTOOL_GSSET_INFO");
        Ok(self.listing(netdev)?.len())
    }
    fn stat_names(&mut self, netdev: &str, _count: usize) -> Result<Vec<String>, EthtoolError> {
        self.note(netdev, "ETHTOOL_GSTRINGS");
        Ok(self.listing(netdev)?.into_iter().map(|(n, _)| n).collect())
    }
    fn stat_values(&mut self, netdev: &str, _count: usize) -> Result<Vec<u64>, EthtoolError> {
        self.note(netdev, "ETHTOOL_GSTATS");
        Ok(self.listing(netdev)?.into_iter().map(|(_, v)| v).collect())
    }
}

fn target(name: &str, device: &str) -> Target {
    Target {
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
    let fake = Fake {
        listings: listings.clone(),
        calls: calls.clone(),
    };
    let raw = vec![deep.0.clone(), "tx_pause_storm_error_events".to_string()];
    let mut reader = NetdevReader::new(ReaderOptions {
        sysfs: repo().join("tests/fixtures/netdev-mlx5/sys"),
        raw_ethtool: raw.clone(),
    })
    .with_ethtool(Box::new(fake));
    let targets = [target("ens1f0np0", "mlx5_0"), target("eth9", "mlx5_1")];

    // The meanings the 16-channel listing has, through the same cache.
    let (want, _) = StatsCache::new(vec![])
        .sample(
            &mut Fake {
                listings: Arc::new(Mutex::new(vec![("x".into(), small.clone())])),
                calls: Arc::default(),
            },
            "x",
        )
        .unwrap();
    assert!(!want.is_empty());

    for sample in 0..3 {
        let mut errors = Vec::new();
        let snap = reader.read(&targets, &mut errors);
        assert_eq!(errors, Vec::<String>::new());
        let n = &snap.netdevs[0];
        assert_eq!(n.ethtool, Outcome::Ok);
        assert_eq!(
            n.stats, want,
            "sample {sample}: the extra channels add no meaning"
        );
        assert_eq!(n.raw.len(), 2);
        let far = n.raw.iter().find(|r| r.name == deep.0).map(|r| r.value);
        assert_eq!(far, Some(deep.1), "a raw counter at index 9,990");
        assert_eq!(n.mtu, Some(9000), "sysfs part unaffected");
        assert_eq!(snap.netdevs[1].ethtool, Outcome::Ok);
        assert_eq!(snap.netdevs[1].stats, want);
        // Names once (count + strings), then one GSTATS per netdev per
        // sample, 10,000 statistics or not.
        let steps: Vec<(String, &str)> = calls.lock().unwrap().drain(..).collect();
        if sample == 0 {
            assert_eq!(steps.len(), 6, "{steps:?}");
        } else {
            assert_eq!(
                steps,
                vec![
                    ("ens1f0np0".to_string(), "ETHTOOL_GSTATS"),
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
    assert_eq!(errors, Vec::<String>::new());
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
        ["ETHTOOL_GSTATS", "ETHTOOL_GSSET_INFO", "ETHTOOL_GSTRINGS"]
    );
}
