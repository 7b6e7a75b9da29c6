//! Test support: the fixture trees, a file layer that wraps a real tree and
//! injects the errnos only a kernel produces (per path, changeable between
//! samples), records every path the reader touched (opened or listed) and
//! every read of an open file, and a temp-dir copy of a fixture for tests
//! that change the tree.

#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use roce_rdma::{StdFs, SysFile, SysFs};

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// Errno by absolute path; shared so a test can change it between samples.
pub type Faults = Arc<Mutex<HashMap<PathBuf, i32>>>;

/// Every path the reader asked for, in order.
pub type Log = Arc<Mutex<Vec<PathBuf>>>;

/// Paths whose next read fails once with ENODEV (a handle that went stale
/// when the driver re-registered the device); a reopened handle reads.
pub type StaleOnce = Arc<Mutex<std::collections::HashSet<PathBuf>>>;

/// A [`SysFs`] over a real tree. EACCES fails at open (as a permission
/// check does); every other injected errno fails at read, as a sysfs
/// `show` callback does, including on a handle opened before the fault.
pub struct FaultFs {
    pub faults: Faults,
    pub log: Log,
    pub stale_once: StaleOnce,
    /// The path of every `read_at` call, in order (kept handles included).
    pub reads: Log,
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
        }
    }

    /// Another handle on the same faults and logs (the reader owns the
    /// first).
    pub fn share(&self) -> FaultFs {
        FaultFs {
            faults: self.faults.clone(),
            log: self.log.clone(),
            stale_once: self.stale_once.clone(),
            reads: self.reads.clone(),
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
}

impl SysFile for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.reads.lock().unwrap().push(self.path.clone());
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
