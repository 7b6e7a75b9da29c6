//! The read buffer every attribute is read into: sized for the few dozen
//! bytes nearly every sysfs value has, with a page for the rare long one.

use std::io;

use crate::fs::SysFile;

/// First read size: counters, states and GIDs are a few dozen bytes, so
/// nearly every attribute fits and no page-sized buffer is touched.
pub(super) const SHORT_READ: usize = 256;
/// sysfs attributes are at most a page (`sysfs_emit`).
pub(super) const LONG_READ: usize = 4096;

/// The read buffer, kept by the reader across samples: a short one for
/// nearly every file, and a page, allocated on first need, for the rare
/// value that fills the short one.
pub(super) struct ReadBuf {
    pub(super) short: [u8; SHORT_READ],
    pub(super) long: Vec<u8>,
    /// Whether the last read went to `long`.
    pub(super) in_long: bool,
}

impl ReadBuf {
    pub(super) fn new() -> Self {
        ReadBuf {
            short: [0; SHORT_READ],
            long: Vec::new(),
            in_long: false,
        }
    }

    /// One `pread` at offset 0 (sysfs hands out the whole value at once),
    /// and a second, page-sized one when the value filled the short buffer.
    pub(super) fn read(&mut self, file: &dyn SysFile, reads: &mut usize) -> io::Result<usize> {
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
    pub(super) fn bytes(&self, n: usize) -> &[u8] {
        let data: &[u8] = if self.in_long {
            &self.long
        } else {
            &self.short
        };
        data.get(..n).unwrap_or(data)
    }

    pub(super) fn text(&self, n: usize) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.bytes(n))
    }
}
