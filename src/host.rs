//! Where the host's pseudo-filesystems are ([`HostPaths`], from the
//! `roce-host` crate: every source takes its paths from there, never from a
//! literal, so that every source runs on fixture trees), and the process's
//! open-file limit the kept handles need.

pub use roce_host::HostPaths;

/// The open files limit is the server's concern first (its connection cap);
/// the sampler and the benches raise it the same way.
pub use roce_web::raise_open_file_limit;
