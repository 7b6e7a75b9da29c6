//! Netdev configuration from a sysfs fixture (`tests/fixtures/netdev-mlx5`):
//! mlx5's ECN enable files with mixed priorities, MTU, operstate, speed.

use std::path::PathBuf;

use roce_host::{HostError, ReadError, ReadErrorKind};
use roce_netdev::reader::{NetdevToRead, ReaderOptions};
use roce_netdev::{EcnConfig, NetdevReader, RdmaPortRef, ReadOutcome};

fn sysfs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/netdev-mlx5/sys")
}

#[test]
fn ecn_mixed_priorities_mtu_and_state() {
    let mut reader = NetdevReader::new(ReaderOptions {
        sysfs: sysfs(),
        raw_ethtool: vec![],
        qos_interval: std::time::Duration::ZERO,
    });
    let targets = [
        NetdevToRead {
            name: "ens1f0np0".into(),
            rdma: Some(RdmaPortRef {
                device: "mlx5_0".into(),
                port: 1,
            }),
        },
        NetdevToRead {
            name: "eth9".into(),
            rdma: None,
        },
    ];
    let mut errors = Vec::new();
    let snap = reader.read(&targets, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    let mlx = &snap.netdevs[0];
    assert_eq!(mlx.mtu, Some(9000));
    assert_eq!(mlx.operstate.as_deref(), Some("up"));
    assert_eq!(mlx.speed_mbps, Some(400_000));
    let all = |on: &[u8]| (0u8..8).map(|p| (p, on.contains(&p))).collect::<Vec<_>>();
    assert_eq!(
        mlx.ecn,
        Some(EcnConfig {
            np: all(&[3, 5]),
            rp: all(&[3])
        })
    );
    // ethtool and DCB were not asked for: disabled, not failed
    assert_eq!(mlx.ethtool, ReadOutcome::Disabled);

    let plain = &snap.netdevs[1];
    assert_eq!(plain.mtu, Some(1500));
    assert_eq!(plain.operstate.as_deref(), Some("down"));
    assert_eq!(plain.speed_mbps, None); // -1: unknown
    assert_eq!(plain.ecn, None); // no ecn folder: not mlx5, not an error
}

#[test]
fn a_bad_ecn_file_is_reported_and_the_rest_kept() {
    let dir = std::env::temp_dir().join(format!("roce-netdev-ecn-{}", std::process::id()));
    let ecn = dir.join("class/net/x0/ecn/roce_np/enable");
    std::fs::create_dir_all(&ecn).unwrap();
    std::fs::write(dir.join("class/net/x0/mtu"), "4200\n").unwrap();
    std::fs::write(ecn.join("0"), "1\n").unwrap();
    std::fs::write(ecn.join("1"), "yes\n").unwrap();
    let mut reader = NetdevReader::new(ReaderOptions {
        sysfs: dir.clone(),
        raw_ethtool: vec![],
        qos_interval: std::time::Duration::ZERO,
    });
    let mut errors = Vec::new();
    let snap = reader.read(
        &[NetdevToRead {
            name: "x0".into(),
            rdma: None,
        }],
        &mut errors,
    );
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        matches!(&errors[0], HostError::File(ReadError { path, kind: ReadErrorKind::Parse(_) })
            if path.ends_with("ecn/roce_np/enable/1")),
        "{}",
        errors[0]
    );
    assert_eq!(snap.netdevs[0].mtu, Some(4200));
    assert_eq!(
        snap.netdevs[0].ecn,
        Some(EcnConfig {
            np: vec![(0, true)],
            rp: vec![]
        })
    );
}

/// A scratch sysfs root with one netdev folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let root = std::env::temp_dir().join(format!("roce-netdev-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        Scratch(root)
    }
    fn netdev(&self, name: &str, mtu: u32, operstate: &str) {
        let dir = self.0.join("class/net").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mtu"), format!("{mtu}\n")).unwrap();
        std::fs::write(dir.join("operstate"), format!("{operstate}\n")).unwrap();
    }
    fn reader(&self) -> NetdevReader {
        NetdevReader::new(ReaderOptions {
            sysfs: self.0.clone(),
            raw_ethtool: vec![],
            qos_interval: std::time::Duration::ZERO,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn target(name: &str) -> NetdevToRead {
    NetdevToRead {
        name: name.into(),
        rdma: None,
    }
}

#[test]
fn kept_files_see_every_new_value() {
    let s = Scratch::new("kept");
    s.netdev("ens1np0", 1500, "up");
    let mut reader = s.reader();
    let mut errors = Vec::new();
    let first = reader.read(&[target("ens1np0")], &mut errors);
    assert_eq!(first.netdevs[0].mtu, Some(1500));
    s.netdev("ens1np0", 9000, "down");
    let second = reader.read(&[target("ens1np0")], &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(second.netdevs[0].mtu, Some(9000));
    assert_eq!(second.netdevs[0].operstate.as_deref(), Some("down"));
}

#[test]
fn a_renamed_netdev_is_read_under_its_new_name_only() {
    // A kept handle would follow the renamed folder: the old name must read
    // as gone, not as the renamed netdev's values.
    let s = Scratch::new("rename");
    s.netdev("eth0", 9000, "up");
    let mut reader = s.reader();
    let mut errors = Vec::new();
    let first = reader.read(&[target("eth0")], &mut errors);
    assert_eq!(first.netdevs[0].mtu, Some(9000));
    let net = s.0.join("class/net");
    std::fs::rename(net.join("eth0"), net.join("ens1np0")).unwrap();
    let after = reader.read(&[target("eth0"), target("ens1np0")], &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(after.netdevs[0].mtu, None, "eth0 is gone");
    assert_eq!(after.netdevs[1].mtu, Some(9000));
    // And a new netdev under the old name is read afresh.
    s.netdev("eth0", 1500, "down");
    let again = reader.read(&[target("eth0")], &mut errors);
    assert_eq!(again.netdevs[0].mtu, Some(1500));
    assert_eq!(again.netdevs[0].operstate.as_deref(), Some("down"));
}
