//! Reads a directory of files that other processes append to (NCCL debug
//! logs, Inspector JSON) or rewrite (Inspector `.prom` files), a little at a
//! time, with bounded memory and work per pass whatever the files' sizes and
//! number.
//!
//! Per file it keeps the offset read so far, the file's identity (device,
//! inode), a hash of its first 4 KiB and the last bytes before the offset: a new
//! inode under the same name is a rotation, a size below the offset a
//! truncation, and different first bytes, or different bytes just before
//! the offset, a file rewritten in place that grew past the old offset
//! between two passes (`copytruncate`, or a job restarted with the same
//! name and pid whose log starts alike: the bytes at the old offset are
//! then another point of another log); each restarts the file from its
//! beginning as new content, and the consumer is told
//! ([`TailEvent::Reset`]) so it ends what it held for the old content. The
//! bytes before the offset are checked in the same read as the new bytes
//! (the read starts that much earlier), and a file whose size did not
//! change but whose modification time did is checked too. Files not modified for [`TailConfig::idle_expiry`]
//! (the jobs that wrote them ended) are forgotten ([`TailEvent::Gone`]) and
//! not reopened until they change; so are deleted files.
//!
//! Finding files: the listing goes on from where the last pass left it, up
//! to [`TailConfig::max_dir_entries`] entries per pass, so a directory of
//! 60,000 finished jobs' files is walked in a few passes and a live log
//! among them is always found. Hidden, compressed and non-regular entries
//! are passed over by name and type before anything else (no `stat`), and
//! idle files are passed over before the cap on tracked files applies.
//!
//! Slots: at most [`TailConfig::max_files`] files are tracked (checked
//! every pass). Slots go to the files written last: a tracked file that
//! has not grown since its last read gives its slot to a file that grew
//! since (a parked one written again), or to a file not read yet that was
//! written after it, the tracked file written longest ago first. The file
//! that gives its slot is *parked*: its offset, identity and checks are
//! kept (the consumer's state for it too) and it is looked at again only
//! when the listing meets it; once it has grown it takes a slot back and
//! goes on from its offset. So a live log is read in the pass that finds
//! it, whatever the number of finished logs beside it. A file left without
//! a slot (older than every tracked one, or grown while every slot holds a
//! file that grew too) is counted ([`PassStats::over_cap`]) every time the
//! listing meets it. At most [`MAX_PARKED_PER_SLOT`] times `max_files`
//! files are parked; past that the one written longest ago is forgotten.
//! Files that grew are read before the others, the most recently written
//! first.
//!
//! Bounds: at most [`TailConfig::max_files`] files are tracked, at most
//! `max_bytes_per_pass` bytes are read per pass and `max_bytes_per_file` per
//! file, a line longer than `max_line` is dropped (counted) without being
//! held, and a rewritten file larger than `max_whole_file` is skipped
//! (counted). A pass that runs out of budget resumes with the next file on
//! the following pass, so a busy file cannot starve the others; a rewritten
//! file is read to its end across passes, and one rewritten again before it
//! was finished is counted as cut. Only files that grew are opened.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

mod listing;
mod state;

use listing::Candidate;
use state::{FileState, FNV_START, HEAD};

#[derive(Debug, Clone)]
pub struct TailConfig {
    /// Files tracked at once; beyond, new files wait for a free slot.
    pub max_files: usize,
    /// Directory entries looked at per pass; the listing goes on from there
    /// on the next pass.
    pub max_dir_entries: usize,
    /// Bytes read per pass, all files together.
    pub max_bytes_per_pass: u64,
    /// Bytes read per file per pass.
    pub max_bytes_per_file: u64,
    /// Longest line kept; longer ones are dropped.
    pub max_line: usize,
    /// A file not modified for this long is forgotten.
    pub idle_expiry: Duration,
    /// A file seen for the first time that is larger than this starts this
    /// many bytes before its end (at the next line), instead of at 0.
    pub catch_up: Option<u64>,
    /// File names ending with this are re-read whole whenever they change
    /// (the Inspector's Prometheus files are rewritten, not appended).
    pub whole_file_suffix: Option<String>,
    /// A rewritten file larger than this is not read.
    pub max_whole_file: u64,
}

impl Default for TailConfig {
    fn default() -> Self {
        TailConfig {
            max_files: 1024,
            max_dir_entries: 20_000,
            max_bytes_per_pass: 8 << 20,
            max_bytes_per_file: 1 << 20,
            max_line: 4096,
            idle_expiry: Duration::from_secs(3600),
            catch_up: None,
            whole_file_suffix: None,
            max_whole_file: 16 << 20,
        }
    }
}

/// What the consumer is told, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum TailEvent<'a> {
    /// The file is (re)read from its beginning or from a fresh position:
    /// drop whatever was assembled from it before.
    Reset { file: &'a Path },
    /// One complete line, without its newline.
    Line { file: &'a Path, line: &'a [u8] },
    /// The file is no longer tracked (deleted, idle, or gone from the
    /// directory).
    Gone { file: &'a Path },
}

/// A file that could not be opened or read, and the errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub path: PathBuf,
    pub errno: i32,
}

/// The unreadable files named per pass; more are counted only.
pub const MAX_UNREADABLE_NAMED: usize = 16;

/// Counters of one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassStats {
    /// Directory entries looked at in this pass.
    pub entries_seen: usize,
    /// The listing reached the directory's end in this pass (the next pass
    /// starts a new one).
    pub listing_complete: bool,
    pub files_tracked: usize,
    pub files_read: usize,
    pub bytes_read: u64,
    pub lines: u64,
    pub long_lines: u64,
    pub rotations: u64,
    /// Truncations, in place and shorter, or in place and grown again
    /// (different first bytes).
    pub truncations: u64,
    pub aged_out: u64,
    pub deleted: u64,
    /// Files written within the idle expiry that found no free slot.
    pub over_cap: usize,
    /// Files that could not be opened or read (the first
    /// [`MAX_UNREADABLE_NAMED`] named in `unreadable`).
    pub unreadable_count: u64,
    pub unreadable: Vec<Unreadable>,
    /// Rewritten files over `max_whole_file`, not read.
    pub too_large: u64,
    /// Rewritten files that changed again before they were read to the end:
    /// the part read came from the old content.
    pub whole_file_cut: u64,
    /// The pass stopped on its byte budget; more is waiting.
    pub budget_exhausted: bool,
    /// The directory could not be listed: the errno.
    pub dir_error: Option<i32>,
}

/// Parked files per slot of [`TailConfig::max_files`] (see the module doc).
pub const MAX_PARKED_PER_SLOT: usize = 4;

pub struct Tailer {
    dir: PathBuf,
    cfg: TailConfig,
    files: HashMap<PathBuf, FileState>,
    /// Files that gave up their slot without having grown (see the module
    /// doc), their state kept.
    parked: HashMap<PathBuf, FileState>,
    /// The listing in progress, resumed on the next pass, and its number.
    listing: Option<fs::ReadDir>,
    listing_number: u64,
    buf: Vec<u8>,
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Tailer {
    pub fn new(dir: impl Into<PathBuf>, cfg: TailConfig) -> Self {
        Tailer {
            dir: dir.into(),
            cfg,
            files: HashMap::new(),
            parked: HashMap::new(),
            listing: None,
            listing_number: 0,
            buf: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn tracked(&self) -> usize {
        self.files.len()
    }

    /// Bytes held for tracked files and unfinished lines, all files
    /// together (path names included).
    pub fn held_bytes(&self) -> usize {
        self.files
            .iter()
            .chain(self.parked.iter())
            .map(|(p, f)| {
                f.partial.capacity() + p.as_os_str().len() + std::mem::size_of::<FileState>()
            })
            .sum::<usize>()
            + self.buf.capacity()
    }

    /// Files parked now (see the module doc).
    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// One pass over the directory. `now` decides which files are idle.
    pub fn poll(&mut self, now: SystemTime, sink: &mut dyn FnMut(TailEvent<'_>)) -> PassStats {
        let mut stats = PassStats::default();
        let mut tracked = self.refresh_tracked(now, &mut stats, sink);
        let mut found = self.discover(now, &mut stats, sink);
        // The most recently written first.
        let newest_first =
            |a: &Candidate, b: &Candidate| b.mtime.cmp(&a.mtime).then_with(|| a.path.cmp(&b.path));
        found.sort_by(newest_first);
        // Tracked files that did not grow, the one written longest ago
        // last: their slots go to files written after them.
        let mut still: Vec<usize> = (0..tracked.len()).filter(|&i| !tracked[i].grew).collect();
        still.sort_by(|&a, &b| newest_first(&tracked[a], &tracked[b]));
        let mut free = self.cfg.max_files.saturating_sub(tracked.len());
        let mut parked_now = Vec::new();
        // Grown (parked) files first, then the files not read yet.
        found.sort_by_key(|c| std::cmp::Reverse(c.grew));
        for mut c in found {
            if free > 0 {
                free -= 1;
            } else {
                let oldest = still.last().map(|&i| tracked[i].mtime);
                match oldest {
                    Some(t) if c.grew || c.mtime > t => {
                        parked_now.extend(still.pop());
                    }
                    _ => {
                        stats.over_cap += 1;
                        continue;
                    }
                }
            }
            if let Some(st) = self.parked.remove(&c.path) {
                self.files.insert(c.path.clone(), st);
            }
            // Admitted: it has bytes to read.
            c.grew = true;
            tracked.push(c);
        }
        parked_now.sort_unstable();
        for i in parked_now.into_iter().rev() {
            let c = tracked.swap_remove(i);
            if let Some(mut st) = self.files.remove(&c.path) {
                st.seen_in = self.listing_number;
                st.partial.shrink_to_fit();
                self.parked.insert(c.path, st);
            }
        }
        self.bound_parked(sink);
        // Those that grew first, the most recently written first.
        tracked.sort_by(|a, b| b.grew.cmp(&a.grew).then_with(|| newest_first(a, b)));
        let mut budget = self.cfg.max_bytes_per_pass;
        for c in &tracked {
            if budget == 0 {
                stats.budget_exhausted = true;
                break;
            }
            let used = self.read_one(c, budget, &mut stats, sink);
            budget = budget.saturating_sub(used);
        }
        stats.files_tracked = self.files.len();
        stats
    }

    fn is_whole(&self, path: &Path) -> bool {
        self.cfg
            .whole_file_suffix
            .as_deref()
            .is_some_and(|s| path.to_str().is_some_and(|p| p.ends_with(s)))
    }

    /// Reads what is new in one file; returns the bytes read.
    fn read_one(
        &mut self,
        c: &Candidate,
        budget: u64,
        stats: &mut PassStats,
        sink: &mut dyn FnMut(TailEvent<'_>),
    ) -> u64 {
        let whole = self.is_whole(&c.path);
        let state = match self.files.get_mut(&c.path) {
            Some(st) if st.dev == c.dev && st.ino == c.ino => {
                if !whole && c.len < st.offset {
                    stats.truncations += 1;
                    st.restart();
                    sink(TailEvent::Reset { file: &c.path });
                }
                st
            }
            existing => {
                if existing.is_some() {
                    stats.rotations += 1;
                }
                let (offset, discarding) = match self.cfg.catch_up {
                    Some(window) if !whole && c.len > window => (c.len - window, true),
                    _ => (0, false),
                };
                self.files.insert(
                    c.path.clone(),
                    FileState {
                        dev: c.dev,
                        ino: c.ino,
                        offset,
                        partial: Vec::new(),
                        discarding,
                        signature: None,
                        head_hash: FNV_START,
                        head_len: 0,
                        mark: [0; HEAD],
                        mark_len: 0,
                        mtime: SystemTime::UNIX_EPOCH,
                        seen_in: 0,
                    },
                );
                if !whole {
                    sink(TailEvent::Reset { file: &c.path });
                }
                match self.files.get_mut(&c.path) {
                    Some(st) => st,
                    None => return 0,
                }
            }
        };
        if whole {
            let signature = (c.mtime, c.len);
            if state.signature != Some(signature) {
                if state.signature.is_some_and(|(_, len)| state.offset < len) {
                    stats.whole_file_cut += 1;
                }
                if c.len > self.cfg.max_whole_file {
                    // Marked as read, so that it is counted once per change.
                    state.signature = Some(signature);
                    state.restart();
                    state.offset = c.len;
                    stats.too_large += 1;
                    return 0;
                }
                state.signature = Some(signature);
                state.restart();
                sink(TailEvent::Reset { file: &c.path });
            }
        }
        // The same size at another time: rewritten to that size, or only
        // touched; the bytes before the offset tell.
        let same_size_rewritten =
            !whole && c.len == state.offset && state.offset > 0 && c.mtime != state.mtime;
        if c.len <= state.offset && !same_size_rewritten {
            state.mtime = c.mtime;
            return 0;
        }
        // Not following a link swapped in since the listing, not blocking on
        // a FIFO, and only the file that was listed.
        let opened = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&c.path);
        let mut file = match opened {
            Ok(f) => f,
            Err(e) => {
                note_unreadable(stats, &c.path, errno(&e));
                return 0;
            }
        };
        match file.metadata() {
            Ok(m) if m.is_file() && m.dev() == c.dev && m.ino() == c.ino => {}
            _ => return 0,
        }
        if !whole && (!state.same_head(&file) || !state.same_mark(&file)) {
            // Rewritten in place (truncated and written past the old offset,
            // or a job restarted under the same name) since the last pass:
            // new content from the start.
            stats.truncations += 1;
            state.restart();
            sink(TailEvent::Reset { file: &c.path });
        }
        state.mtime = c.mtime;
        if c.len <= state.offset {
            return 0;
        }
        let want = (c.len - state.offset)
            .min(self.cfg.max_bytes_per_file)
            .min(budget);
        if file.seek(SeekFrom::Start(state.offset)).is_err() {
            note_unreadable(stats, &c.path, libc::EIO);
            return 0;
        }
        self.buf.clear();
        let got = match (&mut file).take(want).read_to_end(&mut self.buf) {
            Ok(n) => n as u64,
            Err(e) => {
                note_unreadable(stats, &c.path, errno(&e));
                return 0;
            }
        };
        stats.files_read += 1;
        stats.bytes_read += got;
        state.note_head(&self.buf, state.offset);
        state.offset += got;
        state.note_mark(&self.buf);
        let max_line = self.cfg.max_line;
        let mut rest: &[u8] = &self.buf;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..nl];
            rest = &rest[nl + 1..];
            if state.discarding {
                state.discarding = false;
                state.partial.clear();
                continue;
            }
            if state.partial.is_empty() {
                if piece.len() > max_line {
                    stats.long_lines += 1;
                    continue;
                }
                stats.lines += 1;
                sink(TailEvent::Line {
                    file: &c.path,
                    line: piece,
                });
            } else {
                if state.partial.len() + piece.len() > max_line {
                    stats.long_lines += 1;
                    state.partial.clear();
                    continue;
                }
                state.partial.extend_from_slice(piece);
                stats.lines += 1;
                sink(TailEvent::Line {
                    file: &c.path,
                    line: &state.partial,
                });
                state.partial.clear();
            }
        }
        if !rest.is_empty() && !state.discarding {
            if state.partial.len() + rest.len() > max_line {
                stats.long_lines += 1;
                state.partial.clear();
                state.discarding = true;
            } else {
                state.partial.extend_from_slice(rest);
            }
        }
        // A rewritten file's last line has no newline to wait for.
        if whole && state.offset >= c.len && !state.partial.is_empty() {
            stats.lines += 1;
            sink(TailEvent::Line {
                file: &c.path,
                line: &state.partial,
            });
            state.partial.clear();
        }
        if state.partial.capacity() > 2 * max_line.max(64) {
            state.partial.shrink_to(max_line);
        }
        if self.buf.capacity() > (self.cfg.max_bytes_per_file as usize).max(4096) {
            self.buf = Vec::new();
        }
        got
    }
}

fn note_unreadable(stats: &mut PassStats, path: &Path, errno: i32) {
    stats.unreadable_count += 1;
    if stats.unreadable.len() < MAX_UNREADABLE_NAMED {
        stats.unreadable.push(Unreadable {
            path: path.to_path_buf(),
            errno,
        });
    }
}
