//! Test support: the fixture trees, a file layer that wraps a real tree and
//! injects the errnos only a kernel produces (per path, changeable between
//! samples), records every path the reader touched (opened or listed) and
//! every read of an open file, a temp-dir copy of a fixture for tests that
//! change the tree, and generated trees of many mlx5 devices built from the
//! fixture's. Also included by the root crate's integration tests (`#[path]`), so
//! the fixture folder is found from either crate.

#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use roce_rdma::{StdFs, SysFile, SysFs};

/// A fixture tree of this crate (`tests/fixtures/<name>`), from this crate's
/// tests or from the root crate's, which include this file.
pub fn fixture(name: &str) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let own = here.join("tests/fixtures/sys-mlx5-roce");
    let dir = if own.is_dir() {
        here.join("tests/fixtures")
    } else {
        here.join("crates/rdma/tests/fixtures")
    };
    dir.join(name)
}

/// Errno by absolute path; shared so a test can change it between samples.
pub type Faults = Arc<Mutex<HashMap<PathBuf, i32>>>;

/// Every path the reader asked for, in order.
pub type Log = Arc<Mutex<Vec<PathBuf>>>;

/// Paths whose next read fails once with ENODEV (a handle that went stale
/// when the driver re-registered the device); a reopened handle reads.
pub type StaleOnce = Arc<Mutex<std::collections::HashSet<PathBuf>>>;

/// Paths whose reads block until the path is taken out of the set (a
/// read stuck in a driver), and the condition variable that wakes them.
pub type Stalls = Arc<(
    Mutex<std::collections::HashSet<PathBuf>>,
    std::sync::Condvar,
)>;

/// A [`SysFs`] over a real tree. EACCES fails at open (as a permission
/// check does); every other injected errno fails at read, as a sysfs
/// `show` callback does, including on a handle opened before the fault.
pub struct FaultFs {
    pub faults: Faults,
    pub log: Log,
    pub stale_once: StaleOnce,
    /// The path of every `read_at` call, in order (kept handles included).
    pub reads: Log,
    pub stalls: Stalls,
}

impl FaultFs {
    /// Loads `<root>/faults.txt` ("<relative path> <ERRNO>" lines).
    pub fn for_tree(root: &Path) -> FaultFs {
        let mut map = HashMap::new();
        if let Ok(text) = std::fs::read_to_string(root.join("faults.txt")) {
            for line in text.lines() {
                if line.starts_with('#') || line.trim().is_empty() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let (Some(path), Some(name)) = (parts.next(), parts.next()) else {
                    panic!("bad faults.txt line: {line}");
                };
                map.insert(root.join(path), errno_by_name(name));
            }
        }
        FaultFs {
            faults: Arc::new(Mutex::new(map)),
            log: Arc::new(Mutex::new(Vec::new())),
            stale_once: Arc::new(Mutex::new(Default::default())),
            reads: Arc::new(Mutex::new(Vec::new())),
            stalls: Default::default(),
        }
    }

    /// Makes every read of `path` block until [`FaultFs::release`].
    pub fn stall(&self, path: &Path) {
        self.stalls.0.lock().unwrap().insert(path.to_path_buf());
    }

    /// Lets the reads of `path` return.
    pub fn release(&self, path: &Path) {
        self.stalls.0.lock().unwrap().remove(path);
        self.stalls.1.notify_all();
    }

    /// Another handle on the same faults and logs (the reader owns the
    /// first).
    pub fn share(&self) -> FaultFs {
        FaultFs {
            faults: self.faults.clone(),
            log: self.log.clone(),
            stale_once: self.stale_once.clone(),
            reads: self.reads.clone(),
            stalls: self.stalls.clone(),
        }
    }

    /// Takes the reads logged so far, leaving the log empty.
    pub fn take_reads(&self) -> Vec<PathBuf> {
        std::mem::take(&mut *self.reads.lock().unwrap())
    }

    fn fault(&self, path: &Path) -> Option<i32> {
        self.faults.lock().unwrap().get(path).copied()
    }

    fn note(&self, path: &Path) {
        self.log.lock().unwrap().push(path.to_path_buf());
    }
}

pub fn errno_by_name(name: &str) -> i32 {
    match name {
        "EINVAL" => libc::EINVAL,
        "EIO" => libc::EIO,
        "EACCES" => libc::EACCES,
        "EOPNOTSUPP" => libc::EOPNOTSUPP,
        "ENOENT" => libc::ENOENT,
        "ENODEV" => libc::ENODEV,
        other => panic!("unknown errno {other}"),
    }
}

struct FaultFile {
    inner: Box<dyn SysFile>,
    path: PathBuf,
    faults: Faults,
    stale_once: StaleOnce,
    reads: Log,
    stalls: Stalls,
}

impl SysFile for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.reads.lock().unwrap().push(self.path.clone());
        {
            let (set, wake) = &*self.stalls;
            let mut set = set.lock().unwrap();
            while set.contains(&self.path) {
                set = wake.wait(set).unwrap();
            }
        }
        if self.stale_once.lock().unwrap().remove(&self.path) {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        if let Some(e) = self.faults.lock().unwrap().get(&self.path) {
            if *e != libc::EACCES {
                // ENOENT here: the file vanished after it was opened.
                return Err(io::Error::from_raw_os_error(*e));
            }
        }
        self.inner.read_at(buf, offset)
    }
}

impl SysFs for FaultFs {
    fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>> {
        self.note(path);
        // Permission checks and vanished files fail at open; the rest fail
        // in the attribute's show callback, at read.
        if let Some(e @ (libc::EACCES | libc::ENOENT)) = self.fault(path) {
            return Err(io::Error::from_raw_os_error(e));
        }
        let inner = StdFs.open(path)?;
        Ok(Box::new(FaultFile {
            inner,
            path: path.to_path_buf(),
            faults: self.faults.clone(),
            stale_once: self.stale_once.clone(),
            reads: self.reads.clone(),
            stalls: self.stalls.clone(),
        }))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        self.note(path);
        if let Some(e) = self.fault(path) {
            return Err(io::Error::from_raw_os_error(e));
        }
        StdFs.read_dir(path)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        self.note(path);
        StdFs.read_link(path)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        self.note(path);
        StdFs.canonicalize(path)
    }
}

/// A copy of a fixture tree (symlinks kept) in a fresh temp folder, removed
/// on drop.
pub struct TempTree {
    pub root: PathBuf,
}

impl TempTree {
    pub fn copy_of(name: &str) -> TempTree {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!(
            "roce-rdma-test-{}-{}-{}",
            std::process::id(),
            n,
            name
        ));
        let _ = std::fs::remove_dir_all(&root);
        copy_tree(&fixture(name), &root).unwrap();
        TempTree { root }
    }
}

impl TempTree {
    /// The demo node's tree (8 mlx5 RoCE devices of one port, 256 GID
    /// slots each, 4 populated), as roce-testkit writes it for
    /// examples/demo-gpu-node/sys.
    pub fn demo() -> TempTree {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let root = std::env::temp_dir().join(format!("roce-rdma-demo-{}-{n}", std::process::id()));
        roce_testkit::trees::demo::write(&root).unwrap();
        TempTree { root }
    }

    /// A tree of `devices` mlx5 RoCE devices of one port each, every one a
    /// copy of `mlx5_0` of the `sys-mlx5-roce` fixture (its files as the
    /// kernel writes them) behind its own PCI function and netdev
    /// `ens<K>np0`, with the first `gid_slots` slots of its GID table (the
    /// four populated ones first) instead of 256, so that 1,000 devices
    /// take seconds to write. Device K differs in `counters/port_rcv_data`
    /// (1000 + K) and `hw_counters/out_of_buffer` (K). On tmpfs when the
    /// host has `/dev/shm`.
    pub fn generated_mlx5(devices: usize, gid_slots: usize) -> TempTree {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let root = base.join(format!(
            "roce-rdma-gen-{}-{}-{devices}",
            std::process::id(),
            n
        ));
        let _ = std::fs::remove_dir_all(&root);
        let tree = TempTree { root };
        let src = fixture("sys-mlx5-roce").join("devices/pci0000:16/0000:16:02.0/0000:17:00.0");
        let bridge = "devices/pci0000:00/0000:00:01.0";
        for k in 0..devices {
            let bdf = format!("0000:{:02x}:{:02x}.0", 0x10 + k / 32, k % 32);
            let (dev, netdev) = (format!("mlx5_{k}"), format!("ens{k}np0"));
            let func = tree.root.join(bridge).join(&bdf);
            copy_filtered(&src, &func, &|rel: &Path| {
                // GID slots past the first `gid_slots`: left out.
                let mut parts = rel.iter().rev();
                let last = parts.next().and_then(|s| s.to_str());
                let parent = parts.next().and_then(|s| s.to_str());
                !matches!(
                    (parent, last.and_then(|l| l.parse::<usize>().ok())),
                    (Some("gids" | "types" | "ndevs"), Some(i)) if i >= gid_slots
                )
            })
            .unwrap();
            let ib = func.join("infiniband");
            std::fs::rename(ib.join("mlx5_0"), ib.join(&dev)).unwrap();
            let net = func.join("net");
            std::fs::rename(net.join("ens1f0np0"), net.join(&netdev)).unwrap();
            let port = ib.join(&dev).join("ports/1");
            for i in 0..gid_slots.min(4) {
                std::fs::write(
                    port.join(format!("gid_attrs/ndevs/{i}")),
                    format!("{netdev}\n"),
                )
                .unwrap();
            }
            std::fs::write(
                port.join("counters/port_rcv_data"),
                format!("{}\n", 1000 + k),
            )
            .unwrap();
            std::fs::write(port.join("hw_counters/out_of_buffer"), format!("{k}\n")).unwrap();
            let link = |target: String, at: PathBuf| {
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::os::unix::fs::symlink(target, at).unwrap();
            };
            link(
                format!("../../{bridge}/{bdf}/infiniband/{dev}"),
                tree.root.join("class/infiniband").join(&dev),
            );
            link(
                format!("../../{bridge}/{bdf}/net/{netdev}"),
                tree.root.join("class/net").join(&netdev),
            );
            link(
                format!("../../../{bridge}/{bdf}"),
                tree.root.join("bus/pci/devices").join(&bdf),
            );
        }
        tree
    }
}

/// Copies `from` to `to` (symlinks kept), leaving out the paths, relative
/// to `from`, that `keep` refuses.
fn copy_filtered(from: &Path, to: &Path, keep: &dyn Fn(&Path) -> bool) -> io::Result<()> {
    fn walk(base: &Path, from: &Path, to: &Path, keep: &dyn Fn(&Path) -> bool) -> io::Result<()> {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let path = entry.path();
            let rel = path.strip_prefix(base).unwrap_or(&path);
            if !keep(rel) {
                continue;
            }
            let ty = entry.file_type()?;
            let dst = to.join(entry.file_name());
            if ty.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&path)?, &dst)?;
            } else if ty.is_dir() {
                walk(base, &path, &dst, keep)?;
            } else {
                std::fs::copy(&path, &dst)?;
            }
        }
        Ok(())
    }
    walk(from, from, to, keep)
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let dst = to.join(entry.file_name());
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dst)?;
        } else if ty.is_dir() {
            copy_tree(&entry.path(), &dst)?;
        } else {
            std::fs::copy(entry.path(), &dst)?;
        }
    }
    Ok(())
}
