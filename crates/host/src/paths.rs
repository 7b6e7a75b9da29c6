//! Where the host's pseudo-filesystems are. Every source takes its paths from
//! here, never from a literal, so that every source runs on fixture trees.

use std::path::{Path, PathBuf};

/// Roots of the kernel interfaces the sources read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// `--path.sysfs`, default `/sys`.
    pub sysfs: PathBuf,
    /// `--path.procfs`, default `/proc`.
    pub procfs: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            sysfs: PathBuf::from("/sys"),
            procfs: PathBuf::from("/proc"),
        }
    }
}

impl HostPaths {
    /// True when the paths describe the running kernel. Sources that ask the
    /// running kernel directly (netlink, ioctl, verbs) are only right when
    /// the sysfs tree is the running kernel's own: otherwise they would
    /// describe another host than the tree.
    pub fn is_live(&self) -> bool {
        same_file(&self.sysfs, Path::new("/sys"))
    }

    pub fn sys(&self, rel: &str) -> PathBuf {
        self.sysfs.join(rel)
    }

    pub fn proc(&self, rel: &str) -> PathBuf {
        self.procfs.join(rel)
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
