//! Fixture-tree tests of the RDMA reader: exact values for every field of
//! each tree under tests/fixtures/sys-*, the absent/error classification,
//! and the sample-to-sample behaviour (vanishing devices, failing files,
//! renamed netdevs, excluded devices, the hw-counter source).

#![allow(clippy::type_complexity)]

mod common;

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use common::{fixture, FaultFs, TempTree};
use roce_rdma::{
    Counter, Device, DeviceFilter, GidFamily, GidType, HwCounterPath, HwCounterSource, LinkLayer,
    PhysState, PortState, RdmaReader, RdmaSnapshot, ReadErrorKind, SysfsOnly,
};

use roce_testkit::kernel::{mlx5, PMA_EXT};

/// `names[i]` = base + i, then overrides; sorted by name as the reader
/// returns them.
fn numbered(names: &[&str], base: u64, overrides: &[(&str, u64)]) -> Vec<Counter> {
    let mut out: Vec<Counter> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Counter {
            name: (*n).into(),
            value: overrides
                .iter()
                .find(|(o, _)| o == n)
                .map(|(_, v)| *v)
                .unwrap_or(base + i as u64),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn read_tree(name: &str) -> (RdmaSnapshot, FaultFs) {
    let root = fixture(name);
    let fs = FaultFs::for_tree(&root);
    let log_fs = fs.share();
    let mut reader = RdmaReader::with_fs(root, DeviceFilter::default(), Box::new(fs));
    (reader.read(&mut SysfsOnly), log_fs)
}

fn ip(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn device<'a>(snap: &'a RdmaSnapshot, name: &str) -> &'a Device {
    snap.devices
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("no device {name}"))
}

#[test]
fn mlx5_roce_every_field() {
    let (snap, fs) = read_tree("sys-mlx5-roce");
    assert_eq!(snap.errors, vec![]);
    let names: Vec<&str> = snap.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);

    let cases = [
        // name, guid, pci, numa, netdev, link-local, ipv4-mapped, counter base, hw base
        (
            "mlx5_0",
            "b8ce:f603:00a1:b2c4",
            "0000:17:00.0",
            0,
            "ens1f0np0",
            "fe80::bace:f6ff:fea1:b2c4",
            "::ffff:10.0.1.11",
            100u64,
            1000u64,
        ),
        (
            "mlx5_1",
            "b8ce:f603:00a1:c3d0",
            "0000:b1:00.0",
            1,
            "ens2f0np0",
            "fe80::bace:f6ff:fea1:c3d0",
            "::ffff:10.0.2.11",
            200,
            2000,
        ),
    ];
    for (name, guid, pci, numa, netdev, ll, v4, cbase, hbase) in cases {
        let d = device(&snap, name);
        assert_eq!(d.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(d.fw_version.as_deref(), Some("28.39.1002"));
        assert_eq!(d.board_id.as_deref(), Some("MT_0000000838"));
        assert_eq!(d.hca_type.as_deref(), Some("MT4129"));
        assert_eq!(d.node_guid.as_deref(), Some(guid));
        assert_eq!(d.node_type.as_deref(), Some("CA"));
        assert_eq!(d.pci_address.as_deref(), Some(pci));
        assert_eq!(d.numa_node, Some(numa));
        assert_eq!(d.parent_netdev, None);
        assert_eq!(d.ports.len(), 1);
        let p = &d.ports[0];
        assert_eq!(p.number, 1);
        assert_eq!(p.state, Some(PortState::Active));
        assert_eq!(p.phys_state, Some(PhysState::LinkUp));
        assert!(p.is_up());
        assert_eq!(p.rate_bytes_per_second, Some(50_000_000_000));
        assert_eq!(p.link_layer, Some(LinkLayer::Ethernet));
        assert_eq!(p.lid, Some(0));
        assert_eq!(p.netdev.as_deref(), Some(netdev));

        let want = numbered(
            PMA_EXT,
            cbase,
            &[
                ("port_rcv_data", 250_000_000_000 + cbase),
                ("port_xmit_data", 240_000_000_000 + cbase),
                ("port_rcv_packets", 900_000_000 + cbase),
                ("port_xmit_packets", 880_000_000 + cbase),
                ("unicast_rcv_packets", 899_000_000 + cbase),
                ("unicast_xmit_packets", 879_000_000 + cbase),
                ("symbol_error", 0),
                ("link_downed", 1),
            ],
        );
        assert_eq!(p.counters, want);
        assert_eq!(p.data_received_bytes(), Some((250_000_000_000 + cbase) * 4));
        assert_eq!(
            p.data_transmitted_bytes(),
            Some((240_000_000_000 + cbase) * 4)
        );

        let mut hw_names: Vec<&str> = mlx5::ib_hw();
        hw_names.extend(mlx5::roce_extra_hw());
        assert_eq!(p.hw_counters, numbered(&hw_names, hbase, &[]));
        assert_eq!(p.hw_counters.len(), 31);
        assert_eq!(p.hw_counter("lifespan"), None);
        assert_eq!(p.hw_counter("np_cnp_sent"), Some(hbase + 29));
        assert_eq!(p.hw_counter_path, HwCounterPath::Sysfs);

        let gids: Vec<(u32, Ipv6Addr, GidType, GidFamily, Option<&str>)> = p
            .gids
            .iter()
            .map(|g| {
                (
                    g.index,
                    g.gid,
                    g.gid_type.clone(),
                    g.family(),
                    g.netdev.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            gids,
            vec![
                (
                    0,
                    ip(ll),
                    GidType::IbRoceV1,
                    GidFamily::Ipv6LinkLocal,
                    Some(netdev)
                ),
                (
                    1,
                    ip(ll),
                    GidType::RoceV2,
                    GidFamily::Ipv6LinkLocal,
                    Some(netdev)
                ),
                (
                    2,
                    ip(v4),
                    GidType::IbRoceV1,
                    GidFamily::Ipv4Mapped,
                    Some(netdev)
                ),
                (
                    3,
                    ip(v4),
                    GidType::RoceV2,
                    GidFamily::Ipv4Mapped,
                    Some(netdev)
                ),
            ]
        );
    }
    assert_eq!(
        device(&snap, "mlx5_0").ports[0].gids[3].kernel_text(),
        "0000:0000:0000:0000:0000:ffff:0a00:010b"
    );

    // Empty slots: gids/N read, their attributes never.
    let log = fs.log.lock().unwrap();
    let opened_empty_attr = log.iter().any(|p| {
        let s = p.to_string_lossy();
        s.contains("gid_attrs/")
            && s.rsplit('/').next().and_then(|n| n.parse::<u32>().ok()) > Some(3)
    });
    assert!(!opened_empty_attr);
    assert!(log
        .iter()
        .any(|p| p.ends_with("class/infiniband/mlx5_0/ports/1/gids/255")));
}

#[test]
fn mlx5_ib_every_field() {
    let (snap, _) = read_tree("sys-mlx5-ib");
    assert_eq!(snap.errors, vec![]);
    let cases = [
        (
            "mlx5_0",
            "28.39.1002",
            "MT_0000000838",
            "MT4129",
            "a088:c203:0045:6a10",
            "0000:17:00.0",
            0,
            50_000_000_000u64,
            0x1a,
            "fe80::a088:c203:45:6a10",
            300u64,
            3000u64,
        ),
        (
            "mlx5_1",
            "20.39.1002",
            "MT_0000000223",
            "MT4123",
            "b8ce:f603:00f2:7e40",
            "0000:b1:00.0",
            1,
            25_000_000_000,
            0x1b,
            "fe80::b8ce:f603:f2:7e40",
            400,
            4000,
        ),
    ];
    for (name, fw, board, hca, guid, pci, numa, rate, lid, gid, cbase, hbase) in cases {
        let d = device(&snap, name);
        assert_eq!(d.driver.as_deref(), Some("mlx5_core"));
        assert_eq!(d.fw_version.as_deref(), Some(fw));
        assert_eq!(d.board_id.as_deref(), Some(board));
        assert_eq!(d.hca_type.as_deref(), Some(hca));
        assert_eq!(d.node_guid.as_deref(), Some(guid));
        assert_eq!(d.node_type.as_deref(), Some("CA"));
        assert_eq!(d.pci_address.as_deref(), Some(pci));
        assert_eq!(d.numa_node, Some(numa));
        let p = &d.ports[0];
        assert_eq!(p.state, Some(PortState::Active));
        assert_eq!(p.phys_state, Some(PhysState::LinkUp));
        assert_eq!(p.rate_bytes_per_second, Some(rate));
        assert_eq!(p.link_layer, Some(LinkLayer::InfiniBand));
        assert_eq!(p.lid, Some(lid));
        assert_eq!(p.netdev, None);
        assert_eq!(
            p.counters,
            numbered(
                PMA_EXT,
                cbase,
                &[
                    ("port_rcv_data", 7_000_000_000 + cbase),
                    ("port_xmit_data", 6_000_000_000 + cbase)
                ]
            )
        );
        assert_eq!(p.hw_counters, numbered(&mlx5::ib_hw(), hbase, &[]));
        assert_eq!(p.gids.len(), 1);
        let g = &p.gids[0];
        assert_eq!(
            (g.index, g.gid, &g.gid_type, g.netdev.as_deref()),
            (0, ip(gid), &GidType::IbRoceV1, None)
        );
        assert_eq!(g.family(), GidFamily::Ipv6LinkLocal);
    }
}

#[test]
fn rxe_matches_the_capture() {
    let (snap, _) = read_tree("sys-rxe");
    assert_eq!(snap.errors, vec![]);
    assert_eq!(snap.devices.len(), 1);
    let d = &snap.devices[0];
    assert_eq!(d.name, "rxe0");
    assert_eq!(d.driver.as_deref(), Some("rxe"));
    assert_eq!(d.fw_version, None);
    assert_eq!(d.board_id, None);
    assert_eq!(d.hca_type, None);
    assert_eq!(d.node_guid.as_deref(), Some("5054:00ff:fe00:0001"));
    assert_eq!(d.node_type.as_deref(), Some("CA"));
    assert_eq!(d.parent_netdev.as_deref(), Some("eth0"));
    // eth0 is virtio0 below the virtio PCI function 0000:00:01.0.
    assert_eq!(d.pci_address.as_deref(), Some("0000:00:01.0"));
    assert_eq!(d.numa_node, None);
    let p = &d.ports[0];
    assert_eq!(p.number, 1);
    assert!(p.is_up());
    assert_eq!(p.rate_bytes_per_second, Some(312_500_000));
    assert_eq!(p.link_layer, Some(LinkLayer::Ethernet));
    assert_eq!(p.lid, Some(0));
    assert_eq!(p.netdev.as_deref(), Some("eth0"));
    assert_eq!(p.counters, vec![]);
    assert_eq!(p.hw_counter_path, HwCounterPath::Sysfs);
    let hw: Vec<(&str, u64)> = p.hw_counters.iter().map(|c| (&*c.name, c.value)).collect();
    assert_eq!(
        hw,
        vec![
            ("ack_deferred", 1),
            ("completer_retry_err", 38),
            ("duplicate_request", 1025),
            ("link_downed", 0),
            ("out_of_seq_request", 0),
            ("rcvd_pkts", 180690),
            ("rcvd_rnr_err", 0),
            ("rcvd_seq_err", 0),
            ("rdma_recvs", 6045),
            ("rdma_sends", 6045),
            ("retry_exceeded_err", 0),
            ("retry_rnr_exceeded_err", 0),
            ("send_err", 0),
            ("send_rnr_err", 0),
            ("sent_pkts", 180690),
        ]
    );
    let gids: Vec<(u32, String, GidType, GidFamily, Option<&str>)> = p
        .gids
        .iter()
        .map(|g| {
            (
                g.index,
                g.kernel_text(),
                g.gid_type.clone(),
                g.family(),
                g.netdev.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        gids,
        vec![
            (
                0,
                "fe80:0000:0000:0000:5054:00ff:fe00:0001".to_string(),
                GidType::RoceV2,
                GidFamily::Ipv6LinkLocal,
                Some("eth0")
            ),
            (
                1,
                "0000:0000:0000:0000:0000:ffff:0a00:020f".to_string(),
                GidType::RoceV2,
                GidFamily::Ipv4Mapped,
                Some("eth0")
            ),
        ]
    );
}

#[test]
fn bnxt_re_every_field() {
    let (snap, _) = read_tree("sys-bnxt_re");
    assert_eq!(snap.errors, vec![]);
    let d = device(&snap, "bnxt_re0");
    assert_eq!(d.driver.as_deref(), Some("bnxt_en"));
    assert_eq!(d.fw_version.as_deref(), Some("226.0.145.0"));
    assert_eq!(d.board_id.as_deref(), Some("BCM957508-P2100G"));
    assert_eq!(d.hca_type.as_deref(), Some("0x1750"));
    assert_eq!(d.node_guid.as_deref(), Some("020a:f7ff:fec1:2230"));
    assert_eq!(d.pci_address.as_deref(), Some("0000:41:00.0"));
    assert_eq!(d.numa_node, Some(0));
    let p = &d.ports[0];
    assert!(p.is_up());
    assert_eq!(p.rate_bytes_per_second, Some(25_000_000_000));
    assert_eq!(p.netdev.as_deref(), Some("ens3f0np0"));
    assert_eq!(p.counters, vec![]);
    assert_eq!(p.hw_counter_path, HwCounterPath::Sysfs);
    assert_eq!(p.hw_counters.len(), 67);
    assert_eq!(p.hw_counter("rx_out_of_buffer"), Some(7));
    assert_eq!(p.hw_counter("to_retransmits"), Some(3));
    assert_eq!(p.hw_counter("active_pds"), Some(500));
    assert_eq!(p.hw_counter("rx_roce_good_bytes"), Some(565));
    assert_eq!(p.hw_counter("lifespan"), None);
    let gids: Vec<(u32, Ipv6Addr, GidType)> = p
        .gids
        .iter()
        .map(|g| (g.index, g.gid, g.gid_type.clone()))
        .collect();
    let ll = ip("fe80::20a:f7ff:fec1:2230");
    let v4 = ip("::ffff:10.0.3.21");
    assert_eq!(
        gids,
        vec![
            (0, ll, GidType::IbRoceV1),
            (1, ll, GidType::RoceV2),
            (2, v4, GidType::IbRoceV1),
            (3, v4, GidType::RoceV2),
        ]
    );
}

#[test]
fn broken_tree_classifies_every_quirk() {
    let root = fixture("sys-broken");
    let (snap, _) = read_tree("sys-broken");
    let names: Vec<&str> = snap.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1", "rxe9"]);

    let d = device(&snap, "mlx5_0");
    assert_eq!(d.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(d.fw_version.as_deref(), Some("28.39.1002"));
    let p = &d.ports[0];
    assert_eq!(p.state, Some(PortState::Active));
    assert_eq!(p.phys_state, None);
    assert_eq!(p.rate_bytes_per_second, None);
    assert_eq!(p.lid, None);
    assert_eq!(p.link_layer, Some(LinkLayer::Ethernet));
    assert!(!p.is_up());
    // N/A (no PMA) and EOPNOTSUPP absent; garbage, EACCES, EIO errors.
    assert_eq!(
        p.counters,
        vec![
            Counter {
                name: "link_downed".into(),
                value: 2
            },
            Counter {
                name: "symbol_error".into(),
                value: 5
            },
        ]
    );
    assert_eq!(p.data_received_bytes(), None);
    assert_eq!(
        p.hw_counters,
        vec![
            Counter {
                name: "local_ack_timeout_err".into(),
                value: 14
            },
            Counter {
                name: "out_of_buffer".into(),
                value: 11
            },
        ]
    );
    // Slot 1's type failed with EINVAL (emptied meanwhile), slot 2 garbage.
    assert_eq!(p.gids.len(), 1);
    assert_eq!(p.gids[0].index, 0);
    assert_eq!(p.netdev.as_deref(), Some("ens1f0np0"));

    let d = device(&snap, "mlx5_1");
    assert_eq!(d.ports, vec![]);
    assert_eq!(d.board_id, None);
    assert_eq!(d.numa_node, None);
    assert_eq!(d.pci_address.as_deref(), Some("0000:b1:00.0"));

    let d = device(&snap, "rxe9");
    assert_eq!(d.driver.as_deref(), Some("rxe"));
    assert_eq!(d.parent_netdev.as_deref(), Some("gone0"));
    assert_eq!(d.pci_address, None);
    let p = &d.ports[0];
    assert_eq!(p.state, Some(PortState::Down));
    assert_eq!(p.phys_state, Some(PhysState::Disabled));
    assert_eq!(p.rate_bytes_per_second, Some(312_500_000));
    assert_eq!(p.hw_counter_path, HwCounterPath::None);
    assert_eq!(p.gids, vec![]);
    assert_eq!(p.netdev.as_deref(), Some("gone0"));

    let port = "class/infiniband/mlx5_0/ports/1/";
    let got: Vec<(PathBuf, Option<i32>)> = snap
        .errors
        .iter()
        .map(|e| {
            let rel = e.path.strip_prefix(&root).unwrap().to_path_buf();
            let errno = match e.kind {
                ReadErrorKind::Io(n) => Some(n),
                _ => None,
            };
            (rel, errno)
        })
        .collect();
    let want: Vec<(PathBuf, Option<i32>)> = [
        ("phys_state", None),
        ("rate", None),
        ("lid", None),
        ("counters/port_rcv_errors", Some(libc::EACCES)),
        ("counters/port_rcv_packets", None),
        ("counters/port_xmit_discards", Some(libc::EIO)),
        ("counters/port_xmit_packets", None),
        ("hw_counters/np_cnp_sent", Some(libc::EIO)),
        ("hw_counters/packet_seq_err", None),
        ("hw_counters/rp_cnp_handled", Some(libc::EINVAL)),
        ("gids/2", None),
    ]
    .iter()
    .map(|(p, e)| (Path::new(port).join(p), *e))
    .collect();
    assert_eq!(got, want);
    for e in &snap.errors {
        // Every error names its file and says why.
        assert!(e.to_string().starts_with(&root.display().to_string()));
    }
}

#[test]
fn excluded_devices_are_never_opened() {
    let root = fixture("sys-mlx5-roce");
    let fs = FaultFs::for_tree(&root);
    let log = fs.log.clone();
    let filter = DeviceFilter {
        include: vec![],
        exclude: vec!["mlx5_?".into()],
    };
    let mut reader = RdmaReader::with_fs(root.clone(), filter, Box::new(fs));
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.devices, vec![]);
    assert_eq!(*log.lock().unwrap(), vec![root.join("class/infiniband")]);

    let fs = FaultFs::for_tree(&root);
    let log = fs.log.clone();
    let filter = DeviceFilter {
        include: vec!["mlx5_*".into()],
        exclude: vec!["mlx5_1".into()],
    };
    let mut reader = RdmaReader::with_fs(root.clone(), filter, Box::new(fs));
    for _ in 0..2 {
        let snap = reader.read(&mut SysfsOnly);
        assert_eq!(snap.devices.len(), 1);
        assert_eq!(snap.devices[0].name, "mlx5_0");
    }
    let touched_excluded =
        log.lock().unwrap().iter().any(|p| {
            p.to_string_lossy().contains("mlx5_1") || p.to_string_lossy().contains("b1:00")
        });
    assert!(!touched_excluded);
}

struct Netlink;

impl HwCounterSource for Netlink {
    fn port_counters(&mut self, device: &str, port: u32) -> Option<Vec<Counter>> {
        (device == "mlx5_0" && port == 1).then(|| {
            vec![
                Counter {
                    name: "rx_write_requests".into(),
                    value: 7,
                },
                Counter {
                    name: "cc_rx_ce_pkts".into(),
                    value: 3,
                },
            ]
        })
    }
}

#[test]
fn hw_counter_source_is_preferred_when_it_answers() {
    let root = fixture("sys-mlx5-roce");
    let fs = FaultFs::for_tree(&root);
    let log = fs.log.clone();
    let mut reader = RdmaReader::with_fs(root, DeviceFilter::default(), Box::new(fs));
    let snap = reader.read(&mut Netlink);
    let p0 = &device(&snap, "mlx5_0").ports[0];
    assert_eq!(p0.hw_counter_path, HwCounterPath::Netlink);
    assert_eq!(
        p0.hw_counters,
        vec![
            Counter {
                name: "cc_rx_ce_pkts".into(),
                value: 3
            },
            Counter {
                name: "rx_write_requests".into(),
                value: 7
            },
        ]
    );
    let p1 = &device(&snap, "mlx5_1").ports[0];
    assert_eq!(p1.hw_counter_path, HwCounterPath::Sysfs);
    assert_eq!(p1.hw_counters.len(), 31);
    // mlx5_0's hw_counters files were not read (each read costs firmware
    // queries on mlx5).
    let read_mlx5_0_hw = log.lock().unwrap().iter().any(|p| {
        let s = p.to_string_lossy();
        s.contains("mlx5_0/ports/1/hw_counters/")
    });
    assert!(!read_mlx5_0_hw);
}

#[test]
fn device_removed_and_readded_between_samples() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let mut reader = RdmaReader::new(tree.root.clone(), DeviceFilter::default());
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.devices.len(), 2);
    let held = reader.open_files();
    assert!(held > 0);

    // Hot-unplug: the class link and the device folder go away.
    let link = tree.root.join("class/infiniband/mlx5_1");
    let target = std::fs::read_link(&link).unwrap();
    let dev_dir = tree
        .root
        .join("devices/pci0000:b0/0000:b0:02.0/0000:b1:00.0/infiniband/mlx5_1");
    let parked = tree.root.join("parked-mlx5_1");
    std::fs::remove_file(&link).unwrap();
    std::fs::rename(&dev_dir, &parked).unwrap();
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    let names: Vec<&str> = snap.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0"]);
    assert!(reader.open_files() < held);

    // Driver reload: it comes back with new values.
    std::fs::rename(&parked, &dev_dir).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::fs::write(dev_dir.join("ports/1/hw_counters/np_cnp_sent"), "5\n").unwrap();
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    assert_eq!(snap.devices.len(), 2);
    let p = &device(&snap, "mlx5_1").ports[0];
    assert_eq!(p.hw_counter("np_cnp_sent"), Some(5));
    assert_eq!(p.counters.len(), 21);
    assert_eq!(p.gids.len(), 4);
}

#[test]
fn a_counter_that_starts_failing_does_not_stop_the_rest() {
    let root = fixture("sys-mlx5-roce");
    let fs = FaultFs::for_tree(&root);
    let faults = fs.faults.clone();
    let mut reader = RdmaReader::with_fs(root.clone(), DeviceFilter::default(), Box::new(fs));
    let first = reader.read(&mut SysfsOnly);
    assert_eq!(first.errors, vec![]);

    let failing = root.join("class/infiniband/mlx5_0/ports/1/counters/port_rcv_data");
    faults.lock().unwrap().insert(failing.clone(), libc::EIO);
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors.len(), 1);
    assert_eq!(snap.errors[0].path, failing);
    assert_eq!(snap.errors[0].kind, ReadErrorKind::Io(libc::EIO));
    let p = &device(&snap, "mlx5_0").ports[0];
    assert_eq!(p.counter("port_rcv_data"), None);
    assert_eq!(p.counters.len(), 20);
    assert_eq!(p.hw_counters.len(), 31);
    assert_eq!(p.gids.len(), 4);
    assert_eq!(device(&snap, "mlx5_1"), device(&first, "mlx5_1"));

    // It recovers on the same handle.
    faults.lock().unwrap().remove(&failing);
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap, first);
}

#[test]
fn stale_handles_are_reopened_and_vanished_files_are_absent() {
    let root = fixture("sys-mlx5-roce");
    let fs = FaultFs::for_tree(&root);
    let faults = fs.faults.clone();
    let stale = fs.stale_once.clone();
    let mut reader = RdmaReader::with_fs(root.clone(), DeviceFilter::default(), Box::new(fs));
    let first = reader.read(&mut SysfsOnly);

    // ENODEV on the kept handle (driver reload): reopened once, read again.
    let counter = root.join("class/infiniband/mlx5_0/ports/1/counters/link_downed");
    stale.lock().unwrap().insert(counter.clone());
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    assert_eq!(snap, first);
    assert!(stale.lock().unwrap().is_empty());

    // Still failing after the reopen: absent, not an error.
    faults.lock().unwrap().insert(counter.clone(), libc::ENODEV);
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    assert_eq!(
        device(&snap, "mlx5_0").ports[0].counter("link_downed"),
        None
    );
    faults.lock().unwrap().remove(&counter);

    // A file that vanished between listing and reading: absent, no error.
    faults.lock().unwrap().insert(counter.clone(), libc::ENOENT);
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    assert_eq!(
        device(&snap, "mlx5_0").ports[0].counter("link_downed"),
        None
    );
    assert_eq!(device(&snap, "mlx5_0").ports[0].counters.len(), 20);

    faults.lock().unwrap().remove(&counter);
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap, first);
}

#[test]
fn netdev_rename_is_picked_up_on_the_next_sample() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let mut reader = RdmaReader::new(tree.root.clone(), DeviceFilter::default());
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(
        device(&snap, "mlx5_0").ports[0].netdev.as_deref(),
        Some("ens1f0np0")
    );

    let port = tree.root.join("class/infiniband/mlx5_0/ports/1");
    for i in 0..4 {
        std::fs::write(port.join(format!("gid_attrs/ndevs/{i}")), "roce0\n").unwrap();
    }
    let snap = reader.read(&mut SysfsOnly);
    let p = &device(&snap, "mlx5_0").ports[0];
    assert_eq!(p.netdev.as_deref(), Some("roce0"));
    assert!(p.gids.iter().all(|g| g.netdev.as_deref() == Some("roce0")));
    assert_eq!(
        device(&snap, "mlx5_1").ports[0].netdev.as_deref(),
        Some("ens2f0np0")
    );
}

/// A port whose GIDs name no netdev takes it from the device's `net/`
/// folder: listed once and again at each refresh of the static attributes
/// (or when the port's state changes), not in every sample.
#[test]
fn netdev_of_the_net_folder_is_listed_at_refresh_only() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let port = tree.root.join("class/infiniband/mlx5_0/ports/1");
    std::fs::remove_dir_all(port.join("gid_attrs/ndevs")).unwrap();
    let mut reader = RdmaReader::new(tree.root.clone(), DeviceFilter::default());
    let netdev = |snap: &RdmaSnapshot| device(snap, "mlx5_0").ports[0].netdev.clone();
    assert_eq!(
        netdev(&reader.read(&mut SysfsOnly)).as_deref(),
        Some("ens1f0np0")
    );

    let net = tree.root.join("class/infiniband/mlx5_0/device/net");
    std::fs::rename(net.join("ens1f0np0"), net.join("roce0")).unwrap();
    assert_eq!(
        netdev(&reader.read(&mut SysfsOnly)).as_deref(),
        Some("ens1f0np0")
    );
    reader.set_static_refresh_interval(std::time::Duration::ZERO);
    assert_eq!(
        netdev(&reader.read(&mut SysfsOnly)).as_deref(),
        Some("roce0")
    );
}

#[test]
fn counters_ext_is_normalised_where_counters_lacks_the_name() {
    let tree = TempTree::copy_of("sys-mlx5-ib");
    let port = tree.root.join("class/infiniband/mlx5_0/ports/1");
    std::fs::remove_file(port.join("counters/port_xmit_data")).unwrap();
    std::fs::create_dir(port.join("counters_ext")).unwrap();
    std::fs::write(
        port.join("counters_ext/port_xmit_data_64"),
        "123456789012\n",
    )
    .unwrap();
    std::fs::write(port.join("counters_ext/port_rcv_data_64"), "99\n").unwrap();
    std::fs::write(port.join("counters_ext/port_unicast_xmit_packets"), "77\n").unwrap();
    std::fs::remove_file(port.join("counters/unicast_xmit_packets")).unwrap();
    let mut reader = RdmaReader::new(tree.root.clone(), DeviceFilter::default());
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    let p = &device(&snap, "mlx5_0").ports[0];
    assert_eq!(p.counter("port_xmit_data"), Some(123_456_789_012));
    assert_eq!(p.data_transmitted_bytes(), Some(493_827_156_048));
    // counters/ wins where it has the name.
    assert_eq!(p.counter("port_rcv_data"), Some(7_000_000_300));
    assert_eq!(p.counter("unicast_xmit_packets"), Some(77));
    assert_eq!(p.counters.len(), 21);
}

#[test]
fn no_infiniband_class_is_no_devices_and_no_error() {
    let tree = TempTree::copy_of("sys-rxe");
    std::fs::remove_dir_all(tree.root.join("class/infiniband")).unwrap();
    let mut reader = RdmaReader::new(tree.root.clone(), DeviceFilter::default());
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap, RdmaSnapshot::default());
}

#[test]
fn demo_gpu_node_tree_reads_cleanly() {
    let demo = TempTree::demo();
    let root = demo.root.clone();
    let mut reader = RdmaReader::new(root, DeviceFilter::default());
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    let got: Vec<(&str, Option<&str>, Option<u32>, Option<&str>)> = snap
        .devices
        .iter()
        .map(|d| {
            (
                d.name.as_str(),
                d.pci_address.as_deref(),
                d.numa_node,
                d.ports[0].netdev.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("mlx5_0", Some("0000:04:00.0"), Some(0), Some("ens1np0")),
            ("mlx5_1", Some("0000:06:00.0"), Some(0), Some("ens2np0")),
            ("mlx5_2", Some("0000:13:00.0"), Some(0), Some("ens3np0")),
            ("mlx5_3", Some("0000:15:00.0"), Some(0), Some("ens4np0")),
            ("mlx5_4", Some("0000:84:00.0"), Some(1), Some("ens5np0")),
            ("mlx5_5", Some("0000:86:00.0"), Some(1), Some("ens6np0")),
            ("mlx5_6", Some("0000:93:00.0"), Some(1), Some("ens7np0")),
            ("mlx5_7", Some("0000:95:00.0"), Some(1), Some("ens8np0")),
        ]
    );
    for d in &snap.devices {
        let p = &d.ports[0];
        assert!(p.is_up());
        assert_eq!(p.rate_bytes_per_second, Some(50_000_000_000));
        assert_eq!(p.counters.len(), 21);
        assert_eq!(p.hw_counters.len(), 31);
        assert_eq!(p.gids.len(), 4);
    }
}

#[test]
fn a_folder_that_cannot_be_listed_is_an_error_every_sample_until_it_can() {
    let root = fixture("sys-mlx5-roce");
    let fs = FaultFs::for_tree(&root);
    let faults = fs.faults.clone();
    let counters = root.join("class/infiniband/mlx5_0/ports/1/counters");
    faults
        .lock()
        .unwrap()
        .insert(counters.clone(), libc::EACCES);
    let mut reader = RdmaReader::with_fs(root.clone(), DeviceFilter::default(), Box::new(fs));
    for _ in 0..2 {
        let snap = reader.read(&mut SysfsOnly);
        assert_eq!(snap.errors.len(), 1);
        assert_eq!(snap.errors[0].path, counters);
        assert_eq!(snap.errors[0].kind, ReadErrorKind::Io(libc::EACCES));
        let p = &device(&snap, "mlx5_0").ports[0];
        assert_eq!(p.counters, vec![]);
        assert_eq!(p.hw_counters.len(), 31);
        assert_eq!(device(&snap, "mlx5_1").ports[0].counters.len(), 21);
    }
    faults.lock().unwrap().remove(&counters);
    let snap = reader.read(&mut SysfsOnly);
    assert_eq!(snap.errors, vec![]);
    assert_eq!(device(&snap, "mlx5_0").ports[0].counters.len(), 21);
}

#[test]
fn an_open_file_budget_caps_kept_handles_without_losing_values() {
    let root = fixture("sys-rxe");
    let mut unbounded = RdmaReader::new(root.clone(), DeviceFilter::default());
    let want = unbounded.read(&mut SysfsOnly);
    // parent; state, phys_state and rate; 15 counters; 2 GIDs × 3 files;
    // 4 empty probe slots. Not the attributes read once a minute (fw_ver,
    // node_guid, node_type, numa_node, link_layer, the RoCE lid), nor the
    // other 1018 empty GID slots, read only by full scans.
    assert_eq!(unbounded.open_files(), 1 + 3 + 15 + 2 * 3 + 4);

    let mut reader = RdmaReader::new(root, DeviceFilter::default());
    reader.set_max_open_files(20);
    for _ in 0..3 {
        assert_eq!(reader.read(&mut SysfsOnly), want);
        assert_eq!(reader.open_files(), 20);
    }
}
