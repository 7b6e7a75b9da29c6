//! Reads a directory of files that other processes append to (NCCL debug
//! logs, Inspector JSON) or rewrite (Inspector `.prom` files), a little at a
//! time, with bounded memory and work per pass whatever the files' sizes and
//! number.
//!
//! Per file it keeps the offset read so far and the file's identity
//! (device, inode): a new inode under the same name is a rotation and a
//! size below the offset a truncation; both restart the file from its
//! beginning, and the consumer is told ([`TailEvent::Reset`]) so it drops
//! what it held for the old content. Files not modified for
//! [`TailConfig::idle_expiry`] (the jobs that wrote them ended) are
//! forgotten ([`TailEvent::Gone`]) and not reopened until they change.
//!
//! Bounds: at most [`TailConfig::max_files`] files are tracked (the most
//! recently modified), at most `max_dir_entries` directory entries are
//! looked at, at most `max_bytes_per_pass` bytes are read per pass and
//! `max_bytes_per_file` per file, and a line longer than `max_line` is
//! dropped (counted) without being held. A pass that runs out of budget
//! resumes with the next file on the following pass, so a busy file cannot
//! starve the others. Only files that grew are opened.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone)]
pub struct TailConfig {
    /// Files tracked at once; beyond, the least recently modified wait.
    pub max_files: usize,
    /// Directory entries looked at per pass.
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
    /// The file is no longer tracked (deleted, idle, or over the cap).
    Gone { file: &'a Path },
}

/// Counters of one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassStats {
    pub entries_seen: usize,
    pub files_tracked: usize,
    pub files_read: usize,
    pub bytes_read: u64,
    pub lines: u64,
    pub long_lines: u64,
    pub rotations: u64,
    pub truncations: u64,
    pub aged_out: u64,
    pub over_cap: usize,
    /// The pass stopped on its byte budget; more is waiting.
    pub budget_exhausted: bool,
    pub errors: u64,
}

#[derive(Debug)]
struct FileState {
    dev: u64,
    ino: u64,
    offset: u64,
    partial: Vec<u8>,
    /// Inside a line that is too long, or before the first line boundary
    /// after a catch-up start: drop bytes up to the next newline.
    discarding: bool,
    /// For whole-file mode: (mtime, len) of the content last read.
    signature: Option<(SystemTime, u64)>,
}

pub struct Tailer {
    dir: PathBuf,
    cfg: TailConfig,
    files: HashMap<PathBuf, FileState>,
    /// Where the next pass starts among the candidates (fairness).
    cursor: usize,
    buf: Vec<u8>,
}

struct Candidate {
    path: PathBuf,
    dev: u64,
    ino: u64,
    len: u64,
    mtime: SystemTime,
}

impl Tailer {
    pub fn new(dir: impl Into<PathBuf>, cfg: TailConfig) -> Self {
        Tailer {
            dir: dir.into(),
            cfg,
            files: HashMap::new(),
            cursor: 0,
            buf: Vec::new(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn tracked(&self) -> usize {
        self.files.len()
    }

    /// Bytes held for unfinished lines, all files together.
    pub fn held_bytes(&self) -> usize {
        self.files
            .values()
            .map(|f| f.partial.capacity())
            .sum::<usize>()
            + self.buf.capacity()
    }

    /// One pass over the directory. `now` decides which files are idle.
    pub fn poll(&mut self, now: SystemTime, sink: &mut dyn FnMut(TailEvent<'_>)) -> PassStats {
        let mut stats = PassStats::default();
        let mut candidates = self.list(now, &mut stats, sink);
        if candidates.len() > self.cfg.max_files {
            // The most recently modified are the running jobs.
            candidates.sort_by(|a, b| b.mtime.cmp(&a.mtime).then_with(|| a.path.cmp(&b.path)));
            stats.over_cap = candidates.len() - self.cfg.max_files;
            candidates.truncate(self.cfg.max_files);
        }
        candidates.sort_by(|a, b| a.path.cmp(&b.path));
        // Forget what is no longer listed.
        let listed: std::collections::HashSet<&Path> =
            candidates.iter().map(|c| c.path.as_path()).collect();
        let gone: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| !listed.contains(p.as_path()))
            .cloned()
            .collect();
        for path in gone {
            self.files.remove(&path);
            sink(TailEvent::Gone { file: &path });
        }
        let n = candidates.len();
        let mut budget = self.cfg.max_bytes_per_pass;
        let start = if n == 0 { 0 } else { self.cursor % n };
        for k in 0..n {
            let i = (start + k) % n;
            if budget == 0 {
                stats.budget_exhausted = true;
                self.cursor = i;
                break;
            }
            let used = self.read_one(&candidates[i], budget, &mut stats, sink);
            budget = budget.saturating_sub(used);
        }
        if !stats.budget_exhausted {
            self.cursor = 0;
        }
        stats.files_tracked = self.files.len();
        stats
    }

    fn list(
        &mut self,
        now: SystemTime,
        stats: &mut PassStats,
        sink: &mut dyn FnMut(TailEvent<'_>),
    ) -> Vec<Candidate> {
        let mut out = Vec::new();
        let Ok(entries) = fs::read_dir(&self.dir) else {
            stats.errors += 1;
            return out;
        };
        for entry in entries.take(self.cfg.max_dir_entries) {
            let Ok(entry) = entry else {
                stats.errors += 1;
                continue;
            };
            stats.entries_seen += 1;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || name.ends_with(".gz") {
                continue;
            }
            // Not following links: only what the jobs wrote here.
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.file_type().is_file() {
                continue;
            }
            let path = entry.path();
            let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let idle = now.duration_since(mtime).unwrap_or_default();
            if idle > self.cfg.idle_expiry {
                if self.files.remove(&path).is_some() {
                    stats.aged_out += 1;
                    sink(TailEvent::Gone { file: &path });
                }
                continue;
            }
            out.push(Candidate {
                path,
                dev: meta.dev(),
                ino: meta.ino(),
                len: meta.len(),
                mtime,
            });
        }
        out
    }

    /// Reads what is new in one file; returns the bytes read.
    fn read_one(
        &mut self,
        c: &Candidate,
        budget: u64,
        stats: &mut PassStats,
        sink: &mut dyn FnMut(TailEvent<'_>),
    ) -> u64 {
        let whole = self
            .cfg
            .whole_file_suffix
            .as_deref()
            .is_some_and(|s| c.path.to_str().is_some_and(|p| p.ends_with(s)));
        let state = match self.files.get_mut(&c.path) {
            Some(st) if st.dev == c.dev && st.ino == c.ino => {
                if !whole && c.len < st.offset {
                    stats.truncations += 1;
                    st.offset = 0;
                    st.partial.clear();
                    st.discarding = false;
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
            if state.signature == Some((c.mtime, c.len)) {
                return 0;
            }
            state.signature = Some((c.mtime, c.len));
            state.offset = 0;
            state.partial.clear();
            state.discarding = false;
            sink(TailEvent::Reset { file: &c.path });
        }
        if c.len <= state.offset {
            return 0;
        }
        let want = (c.len - state.offset)
            .min(self.cfg.max_bytes_per_file)
            .min(budget);
        // Not following a link swapped in since the listing, not blocking on
        // a FIFO, and only the file that was listed.
        let opened = File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&c.path);
        let Ok(mut file) = opened else {
            stats.errors += 1;
            return 0;
        };
        match file.metadata() {
            Ok(m) if m.is_file() && m.dev() == c.dev && m.ino() == c.ino => {}
            _ => return 0,
        }
        if file.seek(SeekFrom::Start(state.offset)).is_err() {
            stats.errors += 1;
            return 0;
        }
        self.buf.clear();
        let got = match (&mut file).take(want).read_to_end(&mut self.buf) {
            Ok(n) => n as u64,
            Err(_) => {
                stats.errors += 1;
                return 0;
            }
        };
        stats.files_read += 1;
        stats.bytes_read += got;
        state.offset += got;
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
