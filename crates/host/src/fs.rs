//! The file layer under every reader: a small trait over the things the
//! readers do to sysfs (open, `pread`, list a folder, resolve a link), with
//! the real `std` implementation.
//!
//! It exists so that tests can wrap a real fixture tree and make chosen paths
//! fail with the errnos only the kernel produces (EINVAL from an empty GID
//! slot's attributes, EIO from a failing firmware command, EACCES that root
//! never sees, ENODEV from a descriptor whose node was removed), and can
//! record every path a reader touched.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
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
    /// Entry names of a folder listed again and again (the class folder,
    /// every sample), into `names`, through a handle `kept` holds between
    /// calls. The default lists afresh, like `read_dir`.
    fn list_kept(
        &self,
        path: &Path,
        kept: &mut KeptDir,
        names: &mut Vec<OsString>,
    ) -> io::Result<()> {
        let _ = kept;
        *names = self.read_dir(path)?;
        Ok(())
    }
}

/// A folder handle kept open for [`SysFs::list_kept`], with the buffer the
/// entries are read into. Listing through it is a seek and a `getdents64`
/// or two; `std::fs::read_dir` adds an open, a stat, a close and a fresh
/// 32 KiB buffer each time, a fifth of a one-port sample.
///
/// A kept handle can outlive its folder (an unloaded `ib_core` removes
/// `class/infiniband`, and a reloaded one makes a new folder the old handle
/// never shows), so its owner [`forget`](Self::forget)s it whenever the
/// listing looks changed or on a slow cadence.
#[derive(Default)]
pub struct KeptDir {
    fd: Option<std::os::fd::OwnedFd>,
    /// Where `getdents64` writes the entries; allocated on first use.
    buf: Vec<MaybeUninit<u8>>,
}

/// Bytes of the listing buffer: a `linux_dirent64` record takes 24 bytes
/// plus the name, so a class folder's few devices fit in one call.
const LIST_BUF: usize = 4096;

impl KeptDir {
    /// Closes the handle: the next listing opens the folder afresh.
    pub fn forget(&mut self) {
        self.fd = None;
    }

    /// Whether a handle is held.
    pub fn is_open(&self) -> bool {
        self.fd.is_some()
    }
}

impl fmt::Debug for KeptDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeptDir")
            .field("open", &self.fd.is_some())
            .finish()
    }
}

/// Lists the folder `kept` holds (opening `path` first when it holds none)
/// from its start: a seek to 0 and `getdents64` into the kept buffer.
fn list_with_getdents(
    path: &Path,
    kept: &mut KeptDir,
    names: &mut Vec<OsString>,
) -> io::Result<()> {
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;

    use rustix::fs::{RawDir, SeekFrom};

    names.clear();
    let fd = match &kept.fd {
        Some(fd) => fd,
        None => {
            let dir = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY)
                .open(path)?;
            kept.fd.insert(OwnedFd::from(dir))
        }
    };
    if kept.buf.is_empty() {
        kept.buf = vec![MaybeUninit::uninit(); LIST_BUF];
    }
    rustix::fs::seek(fd, SeekFrom::Start(0))?;
    let mut dir = RawDir::new(fd, &mut kept.buf);
    while let Some(entry) = dir.next() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." && !name.is_empty() {
            names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
        }
    }
    Ok(())
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

/// Opens `path` for reading without blocking on it: `O_NONBLOCK`, so that
/// a FIFO with no writer does not hold the open, then refused unless
/// `fstat` says it is a regular file (sysfs and procfs attributes are): a
/// FIFO, a device or a socket in their place is never read, and the error
/// names its type ([`crate::NotRegular`]). `O_NONBLOCK` changes nothing for
/// a regular file's reads.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let t = file.metadata()?.file_type();
    if !t.is_file() {
        return Err(crate::NotRegular::error(crate::named::file_type_name(&t)));
    }
    Ok(file)
}

/// At most `cap` bytes of `path`, opened by [`open_regular`] (a FIFO or a
/// device is refused by its type, never read). For the small files read
/// whole once in a while (AER counts, config space, recorded replies).
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    open_regular(path)?.take(cap).read_to_end(&mut out)?;
    Ok(out)
}

/// [`read_capped`] as UTF-8 text (`InvalidData` when it is not).
pub fn read_text_capped(path: &Path, cap: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, cap)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// The cap on a recorded reply read whole (`netdevs.replay`).
pub const REPLAY_CAP: u64 = 4 << 20;

impl SysFs for StdFs {
    fn open(&self, path: &Path) -> io::Result<Box<dyn SysFile>> {
        Ok(Box::new(StdFile(open_regular(path)?)))
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

    fn list_kept(
        &self,
        path: &Path,
        kept: &mut KeptDir,
        names: &mut Vec<OsString>,
    ) -> io::Result<()> {
        list_with_getdents(path, kept, names)
    }
}

/// How many handles the reader may keep open: half the soft
/// `RLIMIT_NOFILE`, at least 64.
pub fn default_max_open() -> usize {
    use rustix::process::{getrlimit, Resource};
    // `None`: no limit.
    let soft = getrlimit(Resource::Nofile)
        .current
        .map_or(usize::MAX, |c| usize::try_from(c).unwrap_or(usize::MAX));
    (soft / 2).max(64)
}

impl fmt::Debug for dyn SysFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SysFs")
    }
}
