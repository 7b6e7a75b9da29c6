//! Tests of the class folder listing the reader does every sample through a
//! kept folder handle (`SysFs::list_kept`): it sees devices come and go
//! through the same handle, lists folders larger than one `getdents64`
//! buffer, and a class folder removed and made again (an `ib_core` reload)
//! is found in the same sample.

mod common;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use common::TempTree;
use roce_rdma::{DeviceFilter, KeptDir, RdmaReader, StdFs, SysFs, SysfsOnly};

fn listed(dir: &Path, kept: &mut KeptDir) -> BTreeSet<String> {
    let mut names: Vec<OsString> = Vec::new();
    StdFs.list_kept(dir, kept, &mut names).unwrap();
    names
        .into_iter()
        .map(|n| n.into_string().unwrap())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("roce-list-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_kept_handle_shows_entries_added_and_removed_since_it_was_opened() {
    let dir = scratch("changes");
    std::fs::write(dir.join("mlx5_0"), "").unwrap();
    std::fs::write(dir.join("mlx5_1"), "").unwrap();
    let mut kept = KeptDir::default();
    assert_eq!(listed(&dir, &mut kept), set(&["mlx5_0", "mlx5_1"]));
    assert!(kept.is_open());

    std::fs::write(dir.join("mlx5_2"), "").unwrap();
    std::fs::remove_file(dir.join("mlx5_0")).unwrap();
    assert_eq!(listed(&dir, &mut kept), set(&["mlx5_1", "mlx5_2"]));
    assert!(kept.is_open(), "listed again through the same handle");

    std::fs::remove_file(dir.join("mlx5_1")).unwrap();
    std::fs::remove_file(dir.join("mlx5_2")).unwrap();
    assert_eq!(listed(&dir, &mut kept), set(&[]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_folder_larger_than_one_getdents_buffer_is_listed_whole() {
    let dir = scratch("large");
    // 1,000 names of 20+ bytes take ~40 KiB of dirent records: ten or more
    // getdents64 calls into the 4 KiB buffer.
    let expected: BTreeSet<String> = (0..1000)
        .map(|i| format!("device_with_a_long_name_{i:04}"))
        .collect();
    for name in &expected {
        std::fs::write(dir.join(name), "").unwrap();
    }
    let mut kept = KeptDir::default();
    assert_eq!(listed(&dir, &mut kept), expected);
    assert_eq!(
        listed(&dir, &mut kept),
        expected,
        "second listing, same handle"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_folder_is_an_absent_error_and_nothing_is_kept() {
    let dir = scratch("missing").join("class/infiniband");
    let mut kept = KeptDir::default();
    let mut names = vec![OsString::from("stale")];
    let err = StdFs.list_kept(&dir, &mut kept, &mut names).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    assert!(!kept.is_open());
    assert!(names.is_empty(), "no stale names left behind: {names:?}");
}

fn device_names(reader: &mut RdmaReader) -> Vec<String> {
    let snap = reader.read(&mut SysfsOnly);
    snap.devices.into_iter().map(|d| d.name).collect()
}

#[test]
fn the_reader_follows_devices_through_its_kept_class_handle() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let class = tree.root.join("class/infiniband");
    let mut reader = RdmaReader::new(tree.root.clone(), DeviceFilter::default());
    assert_eq!(device_names(&mut reader), ["mlx5_0", "mlx5_1"]);

    // hot-unplug of mlx5_1, then its return
    let target = std::fs::read_link(class.join("mlx5_1")).unwrap();
    std::fs::remove_file(class.join("mlx5_1")).unwrap();
    assert_eq!(device_names(&mut reader), ["mlx5_0"]);
    std::os::unix::fs::symlink(&target, class.join("mlx5_1")).unwrap();
    assert_eq!(device_names(&mut reader), ["mlx5_0", "mlx5_1"]);
}

#[test]
fn a_class_folder_removed_and_made_again_is_listed_in_the_same_sample() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let class = tree.root.join("class/infiniband");
    let mut reader = RdmaReader::new(tree.root.clone(), DeviceFilter::default());
    assert_eq!(device_names(&mut reader), ["mlx5_0", "mlx5_1"]);

    // ib_core unloaded and loaded again between two samples: the folder the
    // reader's handle holds is gone (it lists as empty), a new one is there.
    let links: Vec<_> = ["mlx5_0", "mlx5_1"]
        .iter()
        .map(|n| (n, std::fs::read_link(class.join(n)).unwrap()))
        .collect();
    std::fs::remove_dir_all(&class).unwrap();
    std::fs::create_dir(&class).unwrap();
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, class.join(name)).unwrap();
    }
    assert_eq!(device_names(&mut reader), ["mlx5_0", "mlx5_1"]);

    // and with the stack gone for good, nothing is reported and no error
    std::fs::remove_dir_all(&class).unwrap();
    let snap = reader.read(&mut SysfsOnly);
    assert!(snap.devices.is_empty());
    assert!(snap.errors.is_empty(), "{:?}", snap.errors);
}
