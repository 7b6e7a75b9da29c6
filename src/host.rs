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

/// Raises the soft limit on open files to the hard limit. The RDMA reader
/// keeps counter files open between samples (a `pread` costs a fraction of
/// an open/read/close), and a GPU node with 8 ports and their GID tables
/// can exceed systemd's default soft limit of 1024. Returns the soft limit
/// in force afterwards, `None` when there is none (`RLIM_INFINITY`).
pub fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // `None` in an `Rlimit`: unlimited.
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let current = current?;
    if maximum.is_none_or(|max| current < max) {
        let raised = Rlimit {
            current: maximum,
            maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return maximum;
        }
    }
    Some(current)
}
