//! The file layer under the reader, from the `roce-host` crate: a small
//! trait over the things the reader does to sysfs (open, `pread`, list a
//! folder, resolve a link), injectable so that tests can fail chosen paths
//! with the errnos only the kernel produces.

pub use roce_host::fs::*;
