//! Tests of the attributes read at a device's scan and every static refresh
//! interval rather than every sample (`fw_ver`, `board_id`, `hca_type`,
//! `node_guid`, `node_type`, the NUMA node, `link_layer`, and `lid` on
//! Ethernet ports): when a new value shows, what keeps an error reported,
//! and that InfiniBand LIDs are still read every sample. Time is stepped
//! with `read_at`.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{FaultFs, TempTree};
use roce_rdma::{
    DeviceFilter, RdmaReader, RdmaSnapshot, ReadErrorKind, SysfsOnly,
    DEFAULT_STATIC_REFRESH_INTERVAL,
};

fn reader_over(tree: &TempTree) -> (RdmaReader, FaultFs) {
    let fs = FaultFs::for_tree(&tree.root);
    let shared = fs.share();
    let reader = RdmaReader::with_fs(tree.root.clone(), DeviceFilter::default(), Box::new(fs));
    (reader, shared)
}

fn device<'a>(snap: &'a RdmaSnapshot, name: &str) -> &'a roce_rdma::Device {
    snap.devices
        .iter()
        .find(|d| d.name == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", snap.devices))
}

fn count_reads(reads: &[PathBuf], file: &str) -> usize {
    reads.iter().filter(|p| p.ends_with(file)).count()
}

#[test]
fn firmware_version_is_read_at_the_scan_and_again_after_the_refresh_interval() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    let first = reader.read_at(&mut SysfsOnly, t0);
    assert_eq!(
        device(&first, "mlx5_0").fw_version.as_deref(),
        Some("28.39.1002")
    );
    assert_eq!(count_reads(&fs.take_reads(), "fw_ver"), 2, "both devices");

    let fw = tree.root.join("class/infiniband/mlx5_0/fw_ver");
    std::fs::write(&fw, "28.40.1000\n").unwrap();
    let soon = reader.read_at(&mut SysfsOnly, t0 + Duration::from_secs(5));
    assert_eq!(
        device(&soon, "mlx5_0").fw_version.as_deref(),
        Some("28.39.1002"),
        "not read between refreshes"
    );
    let reads = fs.take_reads();
    for file in [
        "fw_ver",
        "board_id",
        "hca_type",
        "node_guid",
        "node_type",
        "link_layer",
    ] {
        assert_eq!(
            count_reads(&reads, file),
            0,
            "{file} read between refreshes"
        );
    }
    assert_eq!(count_reads(&reads, "state"), 2, "the port state still is");

    let later = reader.read_at(&mut SysfsOnly, t0 + DEFAULT_STATIC_REFRESH_INTERVAL);
    assert_eq!(
        device(&later, "mlx5_0").fw_version.as_deref(),
        Some("28.40.1000")
    );
}

#[test]
fn a_device_registered_again_is_scanned_afresh_at_once() {
    // A firmware update or a driver reload unregisters the device: its kept
    // handles go stale (ENODEV), and the next sample scans it again.
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    reader.read_at(&mut SysfsOnly, t0);
    let dev = tree.root.join("class/infiniband/mlx5_0");
    std::fs::write(dev.join("fw_ver"), "28.40.1000\n").unwrap();
    fs.stale_once
        .lock()
        .unwrap()
        .insert(dev.join("ports/1/state"));
    reader.read_at(&mut SysfsOnly, t0 + Duration::from_secs(5));
    let snap = reader.read_at(&mut SysfsOnly, t0 + Duration::from_secs(10));
    assert_eq!(snap.errors, vec![]);
    assert_eq!(
        device(&snap, "mlx5_0").fw_version.as_deref(),
        Some("28.40.1000")
    );
}

#[test]
fn a_failing_static_attribute_is_reported_every_sample_until_it_reads() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let board = tree.root.join("class/infiniband/mlx5_0/board_id");
    fs.faults.lock().unwrap().insert(board.clone(), libc::EIO);
    let t0 = Instant::now();
    for i in 0..3 {
        let snap = reader.read_at(&mut SysfsOnly, t0 + Duration::from_secs(5 * i));
        assert_eq!(snap.errors.len(), 1, "sample {i}: {:?}", snap.errors);
        assert_eq!(snap.errors[0].path, board);
        assert_eq!(snap.errors[0].kind, ReadErrorKind::Io(libc::EIO));
        assert_eq!(device(&snap, "mlx5_0").board_id, None);
        assert_eq!(
            device(&snap, "mlx5_0").fw_version.as_deref(),
            Some("28.39.1002")
        );
    }
    fs.faults.lock().unwrap().remove(&board);
    let snap = reader.read_at(&mut SysfsOnly, t0 + Duration::from_secs(15));
    assert_eq!(snap.errors, vec![]);
    assert_eq!(
        device(&snap, "mlx5_0").board_id.as_deref(),
        Some("MT_0000000838")
    );
    fs.take_reads();
    reader.read_at(&mut SysfsOnly, t0 + Duration::from_secs(20));
    assert_eq!(
        count_reads(&fs.take_reads(), "board_id"),
        0,
        "read again only while failing"
    );
}

#[test]
fn infiniband_lids_are_read_every_sample() {
    // The subnet manager assigns LIDs and may change them; RoCE has none.
    let tree = TempTree::copy_of("sys-mlx5-ib");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    let first = reader.read_at(&mut SysfsOnly, t0);
    let before = device(&first, "mlx5_0").ports[0].lid;
    assert!(before.is_some_and(|lid| lid != 0), "{before:?}");
    fs.take_reads();
    std::fs::write(
        tree.root.join("class/infiniband/mlx5_0/ports/1/lid"),
        "0x77\n",
    )
    .unwrap();
    let snap = reader.read_at(&mut SysfsOnly, t0 + Duration::from_secs(5));
    assert_eq!(device(&snap, "mlx5_0").ports[0].lid, Some(0x77));
    let reads = fs.take_reads();
    assert_eq!(count_reads(&reads, "lid"), 2, "both IB ports");
    assert_eq!(count_reads(&reads, "link_layer"), 0);
}
