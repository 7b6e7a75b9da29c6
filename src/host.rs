//! Where the host's pseudo-filesystems are ([`HostPaths`], from the
//! `roce-host` crate: every source takes its paths from there, never from a
//! literal, so that every source runs on fixture trees), and the process's
//! open-file limit the kept handles need.

pub use roce_host::HostPaths;

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
