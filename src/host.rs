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
/// can exceed systemd's default soft limit of 1024. Returns the new soft
/// limit, or `None` when it could not be read.
#[allow(unsafe_code)]
pub fn raise_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Some(raised.rlim_cur);
        }
    }
    Some(limit.rlim_cur)
}
