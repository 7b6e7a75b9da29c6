//! Attribute files kept open between samples and re-read with `pread` at
//! offset 0: sysfs runs the attribute's `show()` again on every read from
//! offset 0 (a read from offset 0 resets the seq_file, fs/seq_file.c
//! `seq_read_iter`), so the value is fresh without an open and a close.
//!
//! Handles are kept while an open-file budget allows ([`Io::max_open`]);
//! files beyond it are opened, read and closed each sample. A kept handle
//! that fails with ENODEV/ENOENT/ESTALE (its kernel object went away: a
//! driver reload, a removed netdev) is dropped and the file reopened once;
//! the caller is told (`stale`) so that it can list the object afresh.
//!
//! A file that a driver or kernel may simply not have (AER files, carrier
//! counts, vendor attributes) is made with [`KeptAttr::optional`]: once its
//! open fails with ENOENT it is remembered absent and not opened again;
//! the owner probes it anew by listing the object again (a new handle), on
//! its own refresh, so that a steady sample makes no failing open.

use std::borrow::Cow;
use std::io;
use std::path::PathBuf;

use crate::errno::{is_stale, Einval};
use crate::fs::{SysFile, SysFs};
use crate::reading::Reading;

/// First read size: counters, states and GIDs are a few dozen bytes, so
/// nearly every attribute fits and no page-sized buffer is touched.
pub const SHORT_READ: usize = 256;
/// sysfs attributes are at most a page (`sysfs_emit`).
pub const LONG_READ: usize = 4096;

/// The read buffer, kept by a reader across samples: a short one for
/// nearly every file, and a page, allocated on first need, for the rare
/// value that fills the short one.
pub struct ReadBuf {
    short: [u8; SHORT_READ],
    long: Vec<u8>,
    /// Whether the last read went to `long`.
    in_long: bool,
}

impl Default for ReadBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ReadBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBuf")
            .field("long", &self.long.len())
            .finish()
    }
}

impl ReadBuf {
    pub fn new() -> Self {
        ReadBuf {
            short: [0; SHORT_READ],
            long: Vec::new(),
            in_long: false,
        }
    }

    /// One `pread` at offset 0 (sysfs hands out the whole value at once),
    /// and a second, page-sized one when the value filled the short buffer.
    /// `reads` counts the calls.
    pub fn read(&mut self, file: &dyn SysFile, reads: &mut usize) -> io::Result<usize> {
        self.in_long = false;
        *reads += 1;
        let n = file.read_at(&mut self.short, 0)?;
        if n < SHORT_READ {
            return Ok(n);
        }
        if self.long.len() < LONG_READ {
            self.long.resize(LONG_READ, 0);
        }
        *reads += 1;
        let n = file.read_at(&mut self.long, 0)?;
        self.in_long = true;
        Ok(n)
    }

    /// The first `n` bytes of the last read.
    pub fn bytes(&self, n: usize) -> &[u8] {
        let data: &[u8] = if self.in_long {
            &self.long
        } else {
            &self.short
        };
        data.get(..n).unwrap_or(data)
    }

    /// The first `n` bytes of the last read as text (invalid UTF-8
    /// replaced).
    pub fn text(&self, n: usize) -> Cow<'_, str> {
        String::from_utf8_lossy(self.bytes(n))
    }
}

/// What reading kept files needs, lent by the reader for one sample: the
/// file layer, the buffer, and the open-file budget.
pub struct Io<'a> {
    pub fs: &'a dyn SysFs,
    pub buf: &'a mut ReadBuf,
    /// Handles held now: kept up to date as handles are opened and closed.
    pub open: usize,
    /// The most handles to keep; `usize::MAX`: no cap.
    pub max_open: usize,
    /// `pread` calls so far.
    pub reads: usize,
}

impl<'a> Io<'a> {
    /// No handle held and no read made yet, keeping at most `max_open`.
    pub fn new(fs: &'a dyn SysFs, buf: &'a mut ReadBuf, max_open: usize) -> Self {
        Io {
            fs,
            buf,
            open: 0,
            max_open,
            reads: 0,
        }
    }
}

/// One attribute file and, while the budget allows, its open handle.
pub struct KeptAttr {
    pub path: PathBuf,
    file: Option<Box<dyn SysFile>>,
    /// Made with [`KeptAttr::optional`].
    optional: bool,
    /// An optional file whose open failed with ENOENT: read as absent
    /// without a system call.
    absent: bool,
}

impl std::fmt::Debug for KeptAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptAttr")
            .field("path", &self.path)
            .field("open", &self.file.is_some())
            .field("absent", &self.absent)
            .finish()
    }
}

impl KeptAttr {
    /// Opens nothing yet: the first read does.
    pub fn new(path: PathBuf) -> Self {
        KeptAttr {
            path,
            file: None,
            optional: false,
            absent: false,
        }
    }

    /// A file that may not exist: once an open fails with ENOENT, every
    /// later read is absent without a system call (see the module doc).
    pub fn optional(path: PathBuf) -> Self {
        KeptAttr {
            optional: true,
            ..KeptAttr::new(path)
        }
    }

    /// Whether the file was found absent and is no longer opened.
    pub fn known_absent(&self) -> bool {
        self.absent
    }

    /// Whether a handle is kept.
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// Drops the kept handle, if any, and gives its place in the budget back.
    pub fn close(&mut self, io: &mut Io<'_>) {
        if self.file.take().is_some() {
            io.open = io.open.saturating_sub(1);
        }
    }

    /// Opens the file now, unless a handle is kept, and keeps the handle
    /// within the budget: for a reader that tells a file absent when it
    /// listed it from one that went away since. A failure is classified as
    /// a read's would be.
    pub fn open(&mut self, io: &mut Io<'_>, einval: Einval) -> Reading<()> {
        if self.file.is_some() {
            return Reading::Value(());
        }
        match io.fs.open(&self.path) {
            Ok(file) => {
                if io.open < io.max_open {
                    self.file = Some(file);
                    io.open += 1;
                }
                Reading::Value(())
            }
            Err(e) => Reading::failed(&self.path, &e, einval),
        }
    }

    /// Reads the attribute into `io.buf` (one `pread` at offset 0) through
    /// the kept handle, reopening once when the handle went stale (then
    /// `stale` is set). The value is the length read; a failure is
    /// classified by [`crate::errno`], with `einval` saying what EINVAL
    /// means for this file. A handle is kept (also when this read failed
    /// with EIO or similar: the value may come back) unless it is stale or
    /// over the budget.
    pub fn read(&mut self, io: &mut Io<'_>, einval: Einval, stale: &mut bool) -> Reading<usize> {
        if self.absent {
            return Reading::Absent;
        }
        let mut reopened = false;
        if let Some(file) = self.file.as_deref() {
            match io.buf.read(file, &mut io.reads) {
                Ok(n) => return Reading::Value(n),
                Err(e) if is_stale(&e) => {
                    self.file = None;
                    io.open = io.open.saturating_sub(1);
                    *stale = true;
                    reopened = true;
                }
                Err(e) => return Reading::failed(&self.path, &e, einval),
            }
        }
        let file = match io.fs.open(&self.path) {
            Ok(f) => f,
            Err(e) => {
                if self.optional && e.raw_os_error() == Some(libc::ENOENT) {
                    self.absent = true;
                }
                if reopened && is_stale(&e) {
                    return Reading::Absent;
                }
                return Reading::failed(&self.path, &e, einval);
            }
        };
        let result = io.buf.read(file.as_ref(), &mut io.reads);
        let keep = match &result {
            Ok(_) => true,
            Err(e) => !is_stale(e),
        };
        if keep && io.open < io.max_open {
            self.file = Some(file);
            io.open += 1;
        }
        match result {
            Ok(n) => Reading::Value(n),
            Err(e) => Reading::failed(&self.path, &e, einval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::StdFs;
    use crate::ReadError;

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("roce-host-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn keeps_rereads_and_follows_replacement() {
        let dir = tmp("kept");
        let path = dir.join("mtu");
        std::fs::write(&path, "1500\n").unwrap();
        let mut buf = ReadBuf::new();
        let mut io = Io::new(&StdFs, &mut buf, usize::MAX);
        let mut attr = KeptAttr::new(path.clone());
        let mut stale = false;
        let Reading::Value(n) = attr.read(&mut io, Einval::Error, &mut stale) else {
            panic!("no value");
        };
        assert_eq!(io.buf.text(n), "1500\n");
        assert!(attr.is_open());
        assert_eq!(io.open, 1);
        // Rewritten in place: the kept handle sees the new content.
        std::fs::write(&path, "9000\n").unwrap();
        let Reading::Value(n) = attr.read(&mut io, Einval::Error, &mut stale) else {
            panic!("no value");
        };
        assert_eq!(io.buf.text(n), "9000\n");
        assert_eq!(io.reads, 2);
        assert!(!stale);
        attr.close(&mut io);
        assert_eq!(io.open, 0);
        // Removed: absent, not an error.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            attr.read(&mut io, Einval::Error, &mut stale),
            Reading::Absent
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Counts the opens made through it.
    struct CountingFs(std::sync::atomic::AtomicUsize);

    impl SysFs for CountingFs {
        fn open(&self, path: &std::path::Path) -> io::Result<Box<dyn SysFile>> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            StdFs.open(path)
        }
        fn read_dir(&self, path: &std::path::Path) -> io::Result<Vec<std::ffi::OsString>> {
            StdFs.read_dir(path)
        }
        fn read_link(&self, path: &std::path::Path) -> io::Result<PathBuf> {
            StdFs.read_link(path)
        }
        fn canonicalize(&self, path: &std::path::Path) -> io::Result<PathBuf> {
            StdFs.canonicalize(path)
        }
    }

    #[test]
    fn an_optional_file_found_absent_is_not_opened_again() {
        let dir = tmp("optional");
        let fs = CountingFs(Default::default());
        let mut buf = ReadBuf::new();
        let mut io = Io::new(&fs, &mut buf, usize::MAX);
        let opens = || fs.0.load(std::sync::atomic::Ordering::SeqCst);
        let mut stale = false;
        let mut aer = KeptAttr::optional(dir.join("aer_dev_fatal"));
        assert_eq!(
            aer.read(&mut io, Einval::Error, &mut stale),
            Reading::Absent
        );
        assert!(aer.known_absent());
        // Created since: still absent until the owner lists the device
        // again (a new handle), and no open is tried meanwhile.
        std::fs::write(dir.join("aer_dev_fatal"), "TOTAL_ERR_FATAL 0\n").unwrap();
        assert_eq!(
            aer.read(&mut io, Einval::Error, &mut stale),
            Reading::Absent
        );
        assert_eq!(opens(), 1);
        let mut listed_again = KeptAttr::optional(dir.join("aer_dev_fatal"));
        assert!(matches!(
            listed_again.read(&mut io, Einval::Error, &mut stale),
            Reading::Value(_)
        ));
        // A plain handle tries again every read.
        let mut plain = KeptAttr::new(dir.join("missing"));
        for _ in 0..2 {
            assert_eq!(
                plain.read(&mut io, Einval::Error, &mut stale),
                Reading::Absent
            );
        }
        assert_eq!(opens(), 4);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn open_tells_absent_from_present() {
        let dir = tmp("open");
        std::fs::write(dir.join("current_link_width"), "16\n").unwrap();
        let mut buf = ReadBuf::new();
        let mut io = Io::new(&StdFs, &mut buf, usize::MAX);
        let mut there = KeptAttr::new(dir.join("current_link_width"));
        assert_eq!(there.open(&mut io, Einval::Error), Reading::Value(()));
        assert!(there.is_open());
        let mut missing = KeptAttr::new(dir.join("current_link_speed"));
        assert_eq!(missing.open(&mut io, Einval::Error), Reading::Absent);
        assert!(!missing.is_open());
        assert_eq!((io.open, io.reads), (1, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn budget_caps_kept_handles() {
        let dir = tmp("budget");
        let mut buf = ReadBuf::new();
        let mut io = Io::new(&StdFs, &mut buf, 1);
        let mut attrs: Vec<KeptAttr> = (0..3)
            .map(|i| {
                let p = dir.join(i.to_string());
                std::fs::write(&p, "1").unwrap();
                KeptAttr::new(p)
            })
            .collect();
        let mut stale = false;
        for a in &mut attrs {
            assert_eq!(
                a.read(&mut io, Einval::Error, &mut stale),
                Reading::Value(1)
            );
        }
        assert_eq!(io.open, 1);
        assert_eq!(attrs.iter().filter(|a| a.is_open()).count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn long_values_are_read_whole() {
        let dir = tmp("long");
        let path = dir.join("long");
        let text = "x".repeat(SHORT_READ + 10);
        std::fs::write(&path, &text).unwrap();
        let mut buf = ReadBuf::new();
        let mut io = Io::new(&StdFs, &mut buf, 0);
        let mut attr = KeptAttr::new(path);
        let mut stale = false;
        let Reading::Value(n) = attr.read(&mut io, Einval::Error, &mut stale) else {
            panic!("no value");
        };
        assert_eq!(io.buf.text(n), text);
        assert_eq!(io.reads, 2);
        assert!(!attr.is_open());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_a_fifo_or_a_device_is_refused_at_open_with_its_type() {
        let dir = tmp("eisdir");
        let fifo = dir.join("port_rcv_data");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let mut buf = ReadBuf::new();
        let mut io = Io::new(&StdFs, &mut buf, usize::MAX);
        let mut stale = false;
        // A FIFO with no writer would hold a blocking open for ever: this
        // returns (the test would hang otherwise), refused by its type.
        for (path, kind) in [
            (dir.clone(), "a directory"),
            (fifo, "a FIFO"),
            (PathBuf::from("/dev/zero"), "a character device"),
        ] {
            let mut attr = KeptAttr::new(path.clone());
            let got = attr.read(&mut io, Einval::Error, &mut stale);
            assert_eq!(
                got,
                Reading::Error(ReadError {
                    path: path.clone(),
                    kind: crate::ReadErrorKind::NotRegular(kind),
                })
            );
            let Reading::Error(e) = got else {
                unreachable!()
            };
            assert_eq!(e.error_kind(), crate::ErrorKind::Refused);
            assert!(
                e.to_string()
                    .ends_with(&format!("not a regular file ({kind}): refused, never read")),
                "{e}"
            );
            assert!(!attr.is_open());
        }
        assert_eq!(io.reads, 0, "nothing was read");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
