//! What the tailer keeps per file, and how it tells that a file's bytes
//! before its read offset changed: a hash of its first 4 KiB as they were
//! read, and the last bytes before the offset, both checked again on the
//! next read (see the module doc of [`super`]).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::SystemTime;

/// How many bytes just before the offset are checked on the next read.
pub(super) const HEAD: usize = 64;

/// How many of a file's first bytes are checked on every read (by a hash of
/// what was read there): NCCL prints its device tables (`NET/IB : Using`)
/// at init, within the first few lines, so a job restarted under the same
/// name with another table is told apart even when the lengths match.
pub(super) const HEAD_CHECK: usize = 4096;

/// FNV-1a, 64 bits: a hash that goes on from where it was, so the first
/// bytes are hashed as they are read, and hashed again whole to check.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub(super) const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

#[derive(Debug)]
pub(super) struct FileState {
    pub(super) dev: u64,
    pub(super) ino: u64,
    pub(super) offset: u64,
    pub(super) partial: Vec<u8>,
    /// Inside a line that is too long, or before the first line boundary
    /// after a catch-up start: drop bytes up to the next newline.
    pub(super) discarding: bool,
    /// For whole-file mode: (mtime, len) of the content being read.
    pub(super) signature: Option<(SystemTime, u64)>,
    /// The hash of the file's first `head_len` bytes (up to
    /// [`HEAD_CHECK`]) as they were read.
    pub(super) head_hash: u64,
    pub(super) head_len: u16,
    /// The last bytes before `offset`, checked again on the next read.
    pub(super) mark: [u8; HEAD],
    pub(super) mark_len: u8,
    /// The modification time when last read: a file of the same size with
    /// another one was rewritten.
    pub(super) mtime: SystemTime,
    /// The listing in which a parked file was last met.
    pub(super) seen_in: u64,
}

impl FileState {
    /// Back to the beginning of the file, nothing held.
    pub(super) fn restart(&mut self) {
        self.offset = 0;
        self.partial.clear();
        self.discarding = false;
        self.head_len = 0;
        self.head_hash = FNV_START;
        self.mark_len = 0;
    }

    /// Hashes what of `read`, read at `at`, falls in the first
    /// [`HEAD_CHECK`] bytes right after those hashed so far.
    pub(super) fn note_head(&mut self, read: &[u8], at: u64) {
        let len = usize::from(self.head_len);
        if at != len as u64 || len >= HEAD_CHECK {
            return;
        }
        let take = read.len().min(HEAD_CHECK - len);
        self.head_hash = fnv1a(self.head_hash, &read[..take]);
        self.head_len = (len + take) as u16;
    }

    /// Keeps the last bytes before the new offset, `read` being the bytes
    /// that just took it there.
    pub(super) fn note_mark(&mut self, read: &[u8]) {
        if read.len() >= HEAD {
            self.mark.copy_from_slice(&read[read.len() - HEAD..]);
            self.mark_len = HEAD as u8;
            return;
        }
        let keep = (HEAD - read.len()).min(usize::from(self.mark_len));
        let mut next = [0u8; HEAD];
        let from = usize::from(self.mark_len) - keep;
        next[..keep].copy_from_slice(&self.mark[from..usize::from(self.mark_len)]);
        next[keep..keep + read.len()].copy_from_slice(read);
        self.mark = next;
        self.mark_len = (keep + read.len()) as u8;
    }

    /// Whether the bytes just before the offset are those read there last
    /// time. A read that fails here is left to the read that follows.
    pub(super) fn same_mark(&self, file: &File) -> bool {
        let len = usize::from(self.mark_len);
        if len == 0 || self.offset < len as u64 {
            return true;
        }
        let mut now = [0u8; HEAD];
        let start = self.offset - len as u64;
        let mut got = 0;
        while got < len {
            match file.read_at(&mut now[got..len], start + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
        got == len && now[..len] == self.mark[..len]
    }

    /// Whether the file still starts with the bytes read there. A read
    /// that fails here is left to the read that follows.
    pub(super) fn same_head(&mut self, file: &File) -> bool {
        let recording = self.head_len == 0;
        let want = if recording {
            // A file first read past its start (a catch-up start): its
            // first bytes are taken as they are now.
            usize::try_from(self.offset).map_or(HEAD_CHECK, |o| o.min(HEAD_CHECK))
        } else {
            usize::from(self.head_len)
        };
        if want == 0 {
            return true;
        }
        let mut now = [0u8; HEAD_CHECK];
        let mut got = 0;
        while got < want {
            match file.read_at(&mut now[got..want], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
        if recording {
            self.head_hash = fnv1a(FNV_START, &now[..got]);
            self.head_len = got as u16;
            return true;
        }
        got == want && fnv1a(FNV_START, &now[..got]) == self.head_hash
    }
}
