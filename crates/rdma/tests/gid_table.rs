//! Tests of the GID table read between full scans: which slots a sample
//! reads, what it sees when the table changes (a GID added in the lowest
//! free slot, one removed, one added far away), what forces a full scan (the
//! interval, a port state change, a known slot changing), and what it costs
//! in file reads on an 8-port mlx5 host. Time is stepped with `read_at`, no
//! sleeps.

mod common;

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{fixture, FaultFs, TempTree};
use roce_rdma::{
    DeviceFilter, Gid, GidType, RdmaReader, RdmaSnapshot, SysfsOnly, DEFAULT_GID_FULL_SCAN_INTERVAL,
};

const PORT: &str = "class/infiniband/mlx5_0/ports/1";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A reader over a writable copy of `name`, through the fault layer, and a
/// second handle on that layer's faults and logs.
fn reader_over(tree: &TempTree) -> (RdmaReader, FaultFs) {
    let fs = FaultFs::for_tree(&tree.root);
    let shared = fs.share();
    let reader = RdmaReader::with_fs(tree.root.clone(), DeviceFilter::default(), Box::new(fs));
    (reader, shared)
}

/// What a reader that reads every slot sees in the same tree now.
fn full_scan_of(tree: &TempTree, fs: &FaultFs) -> RdmaSnapshot {
    let mut reader = RdmaReader::with_fs(
        tree.root.clone(),
        DeviceFilter::default(),
        Box::new(fs.share()),
    );
    reader.set_gid_full_scan_interval(Duration::ZERO);
    let snap = reader.read(&mut SysfsOnly);
    fs.take_reads();
    snap
}

/// Puts a GID in slot `i` of mlx5_0's port as the kernel shows it: the
/// address in `gids/N`, readable attributes.
fn add_gid(tree: &TempTree, fs: &FaultFs, i: u32, text: &str, ty: &str) {
    let port = tree.root.join(PORT);
    std::fs::write(port.join(format!("gids/{i}")), format!("{text}\n")).unwrap();
    std::fs::write(port.join(format!("gid_attrs/types/{i}")), format!("{ty}\n")).unwrap();
    std::fs::write(port.join(format!("gid_attrs/ndevs/{i}")), "ens1f0np0\n").unwrap();
    let mut faults = fs.faults.lock().unwrap();
    faults.remove(&port.join(format!("gid_attrs/types/{i}")));
    faults.remove(&port.join(format!("gid_attrs/ndevs/{i}")));
}

/// Empties slot `i` as the kernel shows it: zeros in `gids/N`, EINVAL from
/// its attributes (`show_port_gid`, `_show_port_gid_attr` in core/sysfs.c).
fn remove_gid(tree: &TempTree, fs: &FaultFs, i: u32) {
    let port = tree.root.join(PORT);
    std::fs::write(
        port.join(format!("gids/{i}")),
        "0000:0000:0000:0000:0000:0000:0000:0000\n",
    )
    .unwrap();
    let mut faults = fs.faults.lock().unwrap();
    faults.insert(port.join(format!("gid_attrs/types/{i}")), libc::EINVAL);
    faults.insert(port.join(format!("gid_attrs/ndevs/{i}")), libc::EINVAL);
}

fn mlx5_0_gids(snap: &RdmaSnapshot) -> Vec<(u32, Ipv6Addr, GidType)> {
    let d = snap.devices.iter().find(|d| d.name == "mlx5_0").unwrap();
    d.ports[0]
        .gids
        .iter()
        .map(|g: &Gid| (g.index, g.gid, g.gid_type.clone()))
        .collect()
}

/// The mlx5_0 GID slots (`gids/N`) among `reads`.
fn slots_read(root: &Path, reads: &[PathBuf]) -> Vec<u32> {
    let gids = root.join(PORT).join("gids");
    let mut out: Vec<u32> = reads
        .iter()
        .filter_map(|p| p.strip_prefix(&gids).ok()?.to_str()?.parse().ok())
        .collect();
    out.sort_unstable();
    out
}

fn ip(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

const GLOBAL: &str = "2001:0db8:0000:0000:0000:0000:0000:0011";

#[test]
fn between_full_scans_only_known_slots_and_the_lowest_empty_ones_are_read() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    let first = reader.read_at(&mut SysfsOnly, t0);
    assert_eq!(first.errors, vec![]);
    let all: Vec<u32> = (0..256).collect();
    assert_eq!(slots_read(&tree.root, &fs.take_reads()), all);

    let snap = reader.read_at(&mut SysfsOnly, t0 + secs(1));
    assert_eq!(snap, first);
    // Slots 0-3 hold GIDs; 4-7 are where the kernel puts the next ones.
    assert_eq!(
        slots_read(&tree.root, &fs.take_reads()),
        [0, 1, 2, 3, 4, 5, 6, 7]
    );
}

#[test]
fn a_gid_added_in_the_lowest_free_slot_is_seen_on_the_next_sample() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    reader.read_at(&mut SysfsOnly, t0);
    fs.take_reads();

    add_gid(&tree, &fs, 4, GLOBAL, "RoCE v2");
    let snap = reader.read_at(&mut SysfsOnly, t0 + secs(1));
    assert_eq!(snap.errors, vec![]);
    let gids = mlx5_0_gids(&snap);
    assert_eq!(gids.len(), 5);
    assert_eq!(gids[4], (4, ip("2001:db8::11"), GidType::RoceV2));
    // No full scan: nothing past the probes was read.
    assert_eq!(
        slots_read(&tree.root, &fs.take_reads()),
        [0, 1, 2, 3, 4, 5, 6, 7]
    );
    assert_eq!(snap, full_scan_of(&tree, &fs));

    // The probes move up past the new entry.
    reader.read_at(&mut SysfsOnly, t0 + secs(2));
    assert_eq!(
        slots_read(&tree.root, &fs.take_reads()),
        [0, 1, 2, 3, 4, 5, 6, 7, 8]
    );
}

#[test]
fn a_removed_gid_disappears_on_the_next_sample() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    reader.read_at(&mut SysfsOnly, t0);

    remove_gid(&tree, &fs, 2);
    let snap = reader.read_at(&mut SysfsOnly, t0 + secs(1));
    assert_eq!(snap.errors, vec![]);
    let indices: Vec<u32> = mlx5_0_gids(&snap).iter().map(|g| g.0).collect();
    assert_eq!(indices, [0, 1, 3]);
    assert_eq!(snap, full_scan_of(&tree, &fs));

    // A known slot changed, so that sample read the whole table; the next
    // one watches the new layout: 0, 1, 3 and the empty 2, 4, 5, 6.
    fs.take_reads();
    let again = reader.read_at(&mut SysfsOnly, t0 + secs(2));
    assert_eq!(again, snap);
    assert_eq!(
        slots_read(&tree.root, &fs.take_reads()),
        [0, 1, 2, 3, 4, 5, 6]
    );
}

#[test]
fn a_gid_added_past_the_probes_is_seen_at_the_next_full_scan() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    let first = reader.read_at(&mut SysfsOnly, t0);

    // Slots 4-99 would be pending deletion on a real kernel; sysfs shows
    // them as zeros.
    add_gid(&tree, &fs, 100, GLOBAL, "RoCE v2");
    let want = full_scan_of(&tree, &fs);
    assert_eq!(mlx5_0_gids(&want).len(), 5);

    for t in [1, 30, 59] {
        let snap = reader.read_at(&mut SysfsOnly, t0 + secs(t));
        assert_eq!(snap, first, "at {t} s");
    }
    let snap = reader.read_at(&mut SysfsOnly, t0 + DEFAULT_GID_FULL_SCAN_INTERVAL);
    assert_eq!(snap, want);
    assert_eq!(
        mlx5_0_gids(&snap)[4],
        (100, ip("2001:db8::11"), GidType::RoceV2)
    );

    // And from then on it is watched.
    fs.take_reads();
    let snap = reader.read_at(&mut SysfsOnly, t0 + secs(61));
    assert_eq!(snap, want);
    assert_eq!(
        slots_read(&tree.root, &fs.take_reads()),
        [0, 1, 2, 3, 4, 5, 6, 7, 100]
    );
}

#[test]
fn the_full_scan_interval_is_a_setting() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    reader.set_gid_full_scan_interval(secs(5));
    let t0 = Instant::now();
    reader.read_at(&mut SysfsOnly, t0);
    add_gid(&tree, &fs, 100, GLOBAL, "RoCE v2");
    assert_eq!(
        mlx5_0_gids(&reader.read_at(&mut SysfsOnly, t0 + secs(4))).len(),
        4
    );
    assert_eq!(
        mlx5_0_gids(&reader.read_at(&mut SysfsOnly, t0 + secs(5))).len(),
        5
    );
}

#[test]
fn a_port_state_change_forces_a_full_scan() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    reader.read_at(&mut SysfsOnly, t0);

    add_gid(&tree, &fs, 100, GLOBAL, "RoCE v2");
    // ib_port_state_to_str in core/sysfs.c via state_show: "N: NAME".
    std::fs::write(tree.root.join(PORT).join("state"), "1: DOWN\n").unwrap();
    let snap = reader.read_at(&mut SysfsOnly, t0 + secs(1));
    assert_eq!(snap, full_scan_of(&tree, &fs));
    assert_eq!(mlx5_0_gids(&snap).len(), 5);
}

#[test]
fn a_known_slot_whose_type_changes_forces_a_full_scan_in_the_same_sample() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let (mut reader, fs) = reader_over(&tree);
    let t0 = Instant::now();
    reader.read_at(&mut SysfsOnly, t0);

    add_gid(&tree, &fs, 100, GLOBAL, "RoCE v2");
    std::fs::write(
        tree.root.join(PORT).join("gid_attrs/types/3"),
        "IB/RoCE v1\n",
    )
    .unwrap();
    let snap = reader.read_at(&mut SysfsOnly, t0 + secs(1));
    assert_eq!(snap.errors, vec![]);
    assert_eq!(snap, full_scan_of(&tree, &fs));
    let gids = mlx5_0_gids(&snap);
    assert_eq!(gids[3].2, GidType::IbRoceV1);
    assert_eq!(gids[4].0, 100);
}

/// Every fixture tree, several samples: the same snapshots (errors included)
/// as a reader that reads every slot every sample.
#[test]
fn between_full_scans_results_equal_a_full_scan_on_every_tree() {
    for name in [
        "sys-mlx5-roce",
        "sys-mlx5-ib",
        "sys-rxe",
        "sys-bnxt_re",
        "sys-broken",
    ] {
        let root = fixture(name);
        let mut watched = RdmaReader::with_fs(
            root.clone(),
            DeviceFilter::default(),
            Box::new(FaultFs::for_tree(&root)),
        );
        let mut full = RdmaReader::with_fs(
            root.clone(),
            DeviceFilter::default(),
            Box::new(FaultFs::for_tree(&root)),
        );
        full.set_gid_full_scan_interval(Duration::ZERO);
        let t0 = Instant::now();
        for t in 0..3 {
            let now = t0 + secs(t);
            assert_eq!(
                watched.read_at(&mut SysfsOnly, now),
                full.read_at(&mut SysfsOnly, now),
                "{name} sample {t}"
            );
        }
        assert!(watched.reads_last_sample() < full.reads_last_sample());
    }
}

/// The demo tree: 8 mlx5 RoCE devices of one port, 256 GID slots each, 4
/// populated.
#[test]
fn steady_state_reads_per_port_on_an_8_port_mlx5_host() {
    let demo = TempTree::demo();
    let root = demo.root.clone();
    let per_port = |interval: Duration| {
        let fs = FaultFs::for_tree(&root);
        let log = fs.share();
        let mut reader = RdmaReader::with_fs(root.clone(), DeviceFilter::default(), Box::new(fs));
        reader.set_gid_full_scan_interval(interval);
        reader.set_static_refresh_interval(interval);
        let t0 = Instant::now();
        let first = reader.read_at(&mut SysfsOnly, t0);
        assert_eq!(first.errors, vec![]);
        assert_eq!(first.devices.len(), 8);
        log.take_reads();
        let snap = reader.read_at(&mut SysfsOnly, t0 + secs(15));
        assert_eq!(snap, first);
        let reads = log.take_reads();
        // The reader's own count is the file layer's.
        assert_eq!(reader.reads_last_sample(), reads.len());
        let gid_reads = reads
            .iter()
            .filter(|p| {
                let s = p.to_string_lossy();
                s.contains("/gids/") || s.contains("/gid_attrs/")
            })
            .count();
        (reads.len() / 8, gid_reads / 8)
    };
    let (before, gids_before) = per_port(Duration::ZERO);
    let (after, gids_after) = per_port(DEFAULT_GID_FULL_SCAN_INTERVAL);
    println!(
        "steady-state reads per mlx5 port: {before} ({gids_before} for GIDs) reading every \
         GID slot each sample, {after} ({gids_after} for GIDs) watching the known slots"
    );
    // 256 gids/N and 4 × 2 attributes of the populated slots, against 4 × 3
    // and 4 empty probes.
    assert_eq!(gids_before, 256 + 4 * 2);
    assert_eq!(gids_after, 4 * 3 + 4);
    // The rest per port, reading everything every sample: 5 port attributes,
    // 21 counters, 31 hw counters and its device's 6 (fw_ver, board_id,
    // hca_type, node_guid, node_type, numa_node). Between static refreshes:
    // state, phys_state and rate (link_layer is fixed, lid is 0 on RoCE),
    // the counters, and nothing of the device.
    assert_eq!(before - gids_before, 5 + 21 + 31 + 6);
    assert_eq!(after - gids_after, 3 + 21 + 31);
    assert!(gids_after < 60, "{gids_after} GID reads per port");
}

#[test]
fn a_table_longer_than_any_driver_makes_is_read_up_to_the_cap_and_the_rest_reported() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let port = tree.root.join(PORT);
    // 1,100 slots, every one populated (a hostile tree or a driver bug;
    // the attack suite's demo run has 10,000), each a distinct GID.
    let listed = 1_100u32;
    for i in 0..listed {
        let text = format!(
            "fe80:0000:0000:0000:0000:0000:{:04x}:{:04x}",
            i >> 16,
            i & 0xffff
        );
        std::fs::write(port.join(format!("gids/{i}")), format!("{text}\n")).unwrap();
        std::fs::write(port.join(format!("gid_attrs/types/{i}")), "RoCE v2\n").unwrap();
        std::fs::write(port.join(format!("gid_attrs/ndevs/{i}")), "ens1f0np0\n").unwrap();
    }
    let (mut reader, fs) = reader_over(&tree);
    // The fixture's EINVAL of empty slots' attributes: every slot is full.
    fs.faults.lock().unwrap().clear();
    for _ in 0..2 {
        let snap = reader.read(&mut SysfsOnly);
        fs.take_reads();
        let dev = snap.devices.iter().find(|d| d.name == "mlx5_0").unwrap();
        assert_eq!(dev.ports[0].gids.len(), roce_rdma::MAX_GID_SLOTS as usize);
        assert!(dev.ports[0]
            .gids
            .iter()
            .all(|g| g.index < roce_rdma::MAX_GID_SLOTS));
        let refused: Vec<String> = snap
            .errors
            .iter()
            .filter(|e| e.error_kind() == roce_host::ErrorKind::Refused)
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            refused,
            [format!(
                "{}: 1100 GID slots listed, more than any driver has: the first 1024 are read, 76 are not",
                port.join("gids").display()
            )]
        );
        // The other device is read whole.
        assert!(snap
            .devices
            .iter()
            .any(|d| d.name == "mlx5_1" && !d.ports[0].gids.is_empty()));
    }
}
