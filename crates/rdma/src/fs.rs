//! The file layer under the reader: a small trait over the four things the
//! reader does to sysfs (open, `pread`, list a folder, resolve a link), with
//! the real `std` implementation.
//!
//! It exists so that tests can wrap a real fixture tree and make chosen paths
//! fail with the errnos only the kernel produces (EINVAL from an empty GID
//! slot's attributes, EIO from a failing firmware command, EACCES that root
//! never sees), and can record every path the reader touched.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// An open sysfs attribute. sysfs regenerates the content on every read at
/// offset 0, so a kept handle read with `pread` returns fresh values.
pub trait SysFile: Send {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

/// The operations the reader needs from a sysfs tree.
pub trait SysFs: Send {
    fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>>;
    /// Entry names of a folder, in no particular order.
    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>>;
    fn read_link(&self, path: &Path) -> io::Result<PathBuf>;
    /// The path with every symlink resolved (`realpath`).
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf>;
}

/// The real file system through `std`.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

struct StdFile(File);

impl SysFile for StdFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
}

impl SysFs for StdFs {
    fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>> {
        Ok(Box::new(StdFile(File::open(path)?)))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            names.push(entry?.file_name());
        }
        Ok(names)
    }

    fn read_link(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::read_link(path)
    }

    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::canonicalize(path)
    }
}

/// How many handles the reader may keep open: half the soft
/// `RLIMIT_NOFILE`, at least 64 (256 when the limit cannot be read).
pub fn default_max_open() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into the struct it is given, which lives
    // for the whole call.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if rc != 0 {
        return 256;
    }
    let soft = usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX);
    (soft / 2).max(64)
}

impl fmt::Debug for dyn SysFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SysFs")
    }
}
