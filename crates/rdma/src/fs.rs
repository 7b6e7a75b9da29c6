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
    /// u64 words: `linux_dirent64` records are 8-byte aligned.
    buf: Vec<u64>,
}

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
/// from its start, with `getdents64`.
fn list_with_getdents(
    path: &Path,
    kept: &mut KeptDir,
    names: &mut Vec<OsString>,
) -> io::Result<()> {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;

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
        kept.buf = vec![0; 512];
    }
    let raw = fd.as_raw_fd();
    // SAFETY: lseek on a descriptor this struct owns.
    #[allow(unsafe_code)]
    if unsafe { libc::lseek(raw, 0, libc::SEEK_SET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let cap = kept.buf.len() * 8;
    loop {
        // SAFETY: the kernel writes at most `cap` bytes into the buffer,
        // which is `cap` bytes long and lives for the whole call.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                raw,
                kept.buf.as_mut_ptr().cast::<u8>(),
                cap,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = usize::try_from(n).unwrap_or(0).min(cap);
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the first `n` bytes of the u64 buffer were written by the
        // kernel; u8 has no alignment or validity requirement.
        #[allow(unsafe_code)]
        let bytes = unsafe { std::slice::from_raw_parts(kept.buf.as_ptr().cast::<u8>(), n) };
        let mut at = 0;
        // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen;
        // u8 d_type; char d_name[]; }: the name is NUL-terminated within
        // the record.
        while at + 19 <= n {
            let reclen = usize::from(u16::from_ne_bytes([bytes[at + 16], bytes[at + 17]]));
            if reclen < 20 || at + reclen > n {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "getdents64 returned a malformed record",
                ));
            }
            let record = &bytes[at + 19..at + reclen];
            let name = record.split(|&b| b == 0).next().unwrap_or_default();
            if name != b"." && name != b".." && !name.is_empty() {
                names.push(std::ffi::OsStr::from_bytes(name).to_os_string());
            }
            at += reclen;
        }
    }
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
