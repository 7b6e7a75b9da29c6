//! The NCCL reader: what NCCL jobs on this host really did, read from the
//! files they write into two directories (`nccl.log_dir` for
//! `NCCL_DEBUG=INFO` logs and nccl-tests' saved output, which holds NCCL's
//! lines too; `nccl.inspector_dir` for the NCCL Inspector's output).
//!
//! It reads the directories only every `nccl.interval` (its own cadence);
//! in between it hands on what it has. Each read is bounded in bytes and
//! files (see [`crate::tail`]), so a directory of 10,000 files or a log of
//! gigabytes costs one bounded slice per read, never a stall.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use roce_host::{HostError, ReadError};

use crate::aggregate::{Aggregator, AggregatorConfig, NcclSummary};
use crate::inspector::{parse_prom_line, parse_record, ObjectSplitter, Record};
use crate::log::parse_line;
use crate::nccl_tests::TestsParser;
use crate::tail::{PassStats, TailConfig, TailEvent, Tailer};

/// The largest Inspector JSON object assembled (a verbose record with
/// per-channel kernel events stays well below).
const MAX_INSPECTOR_OBJECT: usize = 64 * 1024;

/// The `nccl:` settings the reader works with.
#[derive(Debug, Clone, PartialEq)]
pub struct NcclReaderConfig {
    pub log_dir: Option<PathBuf>,
    pub inspector_dir: Option<PathBuf>,
    /// Time between reads of the directories.
    pub interval: Duration,
    /// How long a transport, version or bandwidth sample stays reported.
    pub window: Duration,
    /// A file not written for this long is forgotten.
    pub idle_expiry: Duration,
    /// Files tracked per directory.
    pub max_files: usize,
    /// Bytes read per directory per read.
    pub max_bytes_per_read: u64,
    /// Collectives smaller than this are not bandwidth samples.
    pub busbw_min_bytes: u64,
    /// Handed on in the part for the rules.
    pub min_line_rate_fraction: f64,
    /// Keep the pid of the NCCL process as a label.
    pub job_labels: bool,
}

/// Why a read of the directories failed as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NcclError {
    #[error("no NCCL directory could be listed")]
    NoDirectoryListed,
}

/// Reads the directories, sample after sample.
pub struct NcclReader {
    interval: Duration,
    logs: Option<Tailer>,
    inspector: Option<Tailer>,
    splitters: HashMap<PathBuf, ObjectSplitter>,
    /// nccl-tests' table state per log file (one per tracked file at most,
    /// made at the first line that can be nccl-tests').
    tests: HashMap<PathBuf, TestsParser>,
    agg: Aggregator,
    last_read: Option<Instant>,
    /// The outcome and errors of the last read, repeated until the next
    /// one (a directory that stays missing is one lasting error).
    failed: Option<NcclError>,
    errors: Vec<HostError>,
    /// Files without a slot, per directory: logged when that starts and
    /// when a whole listing has none again.
    over_cap: [OverCap; 2],
    part: NcclSnapshot,
}

impl NcclReader {
    pub fn new(cfg: &NcclReaderConfig) -> Self {
        let tail = |whole: Option<&str>, max_line: usize| TailConfig {
            max_files: cfg.max_files,
            max_bytes_per_pass: cfg.max_bytes_per_read,
            max_bytes_per_file: (cfg.max_bytes_per_read / 4).max(64 << 10),
            max_line,
            idle_expiry: cfg.idle_expiry,
            catch_up: None,
            whole_file_suffix: whole.map(str::to_string),
            ..TailConfig::default()
        };
        let logs = cfg
            .log_dir
            .as_ref()
            .map(|d| Tailer::new(d, tail(None, crate::log::MAX_LINE)));
        // The Inspector's JSON grows for the job's lifetime and only its
        // recent records matter: a file first seen starts near its end.
        let inspector = cfg.inspector_dir.as_ref().map(|d| {
            let mut t = tail(Some(".prom"), MAX_INSPECTOR_OBJECT);
            t.catch_up = Some((cfg.max_bytes_per_read / 4).max(64 << 10));
            Tailer::new(d, t)
        });
        let agg = Aggregator::new(AggregatorConfig {
            window: cfg.window,
            busbw_min_bytes: cfg.busbw_min_bytes,
            job_labels: cfg.job_labels,
            ..AggregatorConfig::default()
        });
        let part = NcclSnapshot {
            log_dir: cfg.log_dir.clone(),
            inspector_dir: cfg.inspector_dir.clone(),
            window: cfg.window,
            busbw_min_bytes: cfg.busbw_min_bytes,
            min_line_rate_fraction: cfg.min_line_rate_fraction,
            ..NcclSnapshot::default()
        };
        NcclReader {
            interval: cfg.interval,
            logs,
            inspector,
            splitters: HashMap::new(),
            tests: HashMap::new(),
            agg,
            last_read: None,
            failed: None,
            errors: Vec::new(),
            over_cap: [OverCap::default(); 2],
            part,
        }
    }

    /// Whether a directory is set.
    pub fn has_dirs(&self) -> bool {
        self.logs.is_some() || self.inspector.is_some()
    }

    /// The part, after reading the directories when `interval` has passed
    /// since the last read. The errors of the last read go into `errors`;
    /// [`NcclError`] when none of the directories could be listed.
    pub fn sample(&mut self, errors: &mut Vec<HostError>) -> (NcclSnapshot, Option<NcclError>) {
        let due = self.last_read.is_none_or(|t| t.elapsed() >= self.interval);
        if due {
            let dirs = usize::from(self.logs.is_some()) + usize::from(self.inspector.is_some());
            let mut fresh = Vec::new();
            self.failed = (self.read(&mut fresh) == dirs).then_some(NcclError::NoDirectoryListed);
            self.errors = fresh;
        }
        errors.extend(self.errors.iter().cloned());
        self.part.summary = self.agg.summary(Instant::now());
        (self.part.clone(), self.failed)
    }

    /// Reads both directories once (bounded); returns the directories that
    /// could not be listed.
    fn read(&mut self, errors: &mut Vec<HostError>) -> usize {
        let now = Instant::now();
        let wall = SystemTime::now();
        let mut unreadable = 0;
        if let Some(t) = self.logs.as_mut() {
            let agg = &mut self.agg;
            let tests = &mut self.tests;
            let stats = t.poll(wall, &mut |e| match e {
                TailEvent::Line { file, line } => {
                    let text = String::from_utf8_lossy(line);
                    let key = file_key(file);
                    agg.log_line(&key, &parse_line(&text), now);
                    tests_line(tests, agg, file, &key, &text, now);
                }
                TailEvent::Reset { file } | TailEvent::Gone { file } => {
                    tests.remove(file);
                    agg.forget_source(&file_key(file))
                }
            });
            self.part.bytes_read_total += stats.bytes_read;
            self.part.rejected_total += stats.long_lines;
            self.part.log_files = stats.files_tracked;
            self.part.log_skipped.add(&stats);
            unreadable += report(&stats, "nccl.log_dir", t, &mut self.over_cap[0], errors);
        }
        if let Some(t) = self.inspector.as_mut() {
            let agg = &mut self.agg;
            let splitters = &mut self.splitters;
            let mut rejected = 0u64;
            let stats = t.poll(wall, &mut |e| match e {
                TailEvent::Line { file, line } => {
                    if is_prom(file) {
                        if let Some(s) = std::str::from_utf8(line).ok().and_then(parse_prom_line) {
                            agg.prom_sample(&s, now);
                        }
                        return;
                    }
                    let splitter = splitters
                        .entry(file.to_path_buf())
                        .or_insert_with(|| ObjectSplitter::new(MAX_INSPECTOR_OBJECT));
                    let mut feed = |obj: &[u8]| match parse_record(obj) {
                        Ok(Record::Coll(c)) => agg.inspector_record(&c, now),
                        Ok(Record::Other) => {}
                        Err(_) => rejected += 1,
                    };
                    splitter.feed(line, &mut feed);
                    splitter.feed(b"\n", &mut feed);
                }
                TailEvent::Reset { file } | TailEvent::Gone { file } => {
                    splitters.remove(file);
                }
            });
            self.part.bytes_read_total += stats.bytes_read;
            self.part.rejected_total += rejected + stats.long_lines;
            self.part.inspector_files = stats.files_tracked;
            self.part.inspector_skipped.add(&stats);
            unreadable += report(
                &stats,
                "nccl.inspector_dir",
                t,
                &mut self.over_cap[1],
                errors,
            );
        }
        self.last_read = Some(now);
        self.part.last_read = Some(wall);
        unreadable
    }
}

/// Files without a slot over one listing of a directory, and whether that
/// was logged.
#[derive(Debug, Clone, Copy, Default)]
struct OverCap {
    round: usize,
    warned: bool,
}

/// The errors of one directory's pass, and a log line when files start or
/// stop being passed over for lack of a slot. Returns 1 when the directory
/// could not be listed.
fn report(
    stats: &PassStats,
    setting: &'static str,
    tailer: &Tailer,
    over_cap: &mut OverCap,
    errors: &mut Vec<HostError>,
) -> usize {
    for u in &stats.unreadable {
        errors.push(HostError::File(ReadError::io(
            &u.path,
            &std::io::Error::from_raw_os_error(u.errno),
        )));
    }
    // A listing may take several passes: files without a slot are added up
    // over one whole listing before it is said that there are none.
    over_cap.round += stats.over_cap;
    if stats.over_cap > 0 && !over_cap.warned {
        over_cap.warned = true;
        tracing::warn!(
            dir = %tailer.dir().display(),
            files = stats.over_cap,
            tracked = stats.files_tracked,
            "NCCL files written recently find no free slot under nccl.max_files; they are not read (raise nccl.max_files or clear the directory)"
        );
    }
    if stats.listing_complete {
        if over_cap.round == 0 && over_cap.warned {
            over_cap.warned = false;
            tracing::info!(dir = %tailer.dir().display(), "every recently written NCCL file is read again");
        }
        over_cap.round = 0;
    }
    match stats.dir_error {
        Some(errno) => {
            errors.push(HostError::Unlistable {
                setting,
                dir: tailer.dir().to_path_buf(),
                errno,
            });
            1
        }
        None => 0,
    }
}

/// One log line through the file's nccl-tests parser; a run that changed
/// goes to the aggregator. Lines that cannot be nccl-tests' (its header
/// and footer start with `#`, its rows with a size) make no parser.
fn tests_line(
    tests: &mut HashMap<PathBuf, TestsParser>,
    agg: &mut Aggregator,
    file: &Path,
    key: &str,
    text: &str,
    now: Instant,
) {
    let candidate =
        text.starts_with('#') || text.trim_start().starts_with(|c: char| c.is_ascii_digit());
    let parser = match tests.get_mut(file) {
        Some(p) => p,
        None if candidate => tests
            .entry(file.to_path_buf())
            .or_insert_with(|| TestsParser::new(key)),
        None => return,
    };
    if parser.line(text) {
        let run = parser.current();
        if run.rows > 0 || run.complete || run.ranks > 0 {
            agg.tests_run(key, parser.finished, run, now);
        }
    }
}

fn file_key(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn is_prom(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "prom")
}

/// Files a directory's reads passed over, by reason, since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilesSkipped {
    /// Written within `nccl.idle_expiry` but no free slot under
    /// `nccl.max_files` (counted each time the listing meets one).
    pub over_cap: u64,
    /// Could not be opened or read (each failed attempt).
    pub unreadable: u64,
    /// A rewritten (`.prom`) file larger than the source reads whole.
    pub too_large: u64,
    /// A rewritten file changed again before it was read to its end.
    pub cut: u64,
    /// Reads that ended on `nccl.max_bytes_per_read` with more to read
    /// (taken up on the next read, not lost).
    pub budget_exhausted: u64,
}

impl FilesSkipped {
    /// Adds one pass of a directory.
    pub fn add(&mut self, stats: &PassStats) {
        self.over_cap += stats.over_cap as u64;
        self.unreadable += stats.unreadable_count;
        self.too_large += stats.too_large;
        self.cut += stats.whole_file_cut;
        self.budget_exhausted += u64::from(stats.budget_exhausted);
    }
}

/// The NCCL part of a snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NcclSnapshot {
    pub summary: NcclSummary,
    pub log_dir: Option<PathBuf>,
    pub inspector_dir: Option<PathBuf>,
    /// Files tracked now, per directory.
    pub log_files: usize,
    pub inspector_files: usize,
    /// Files passed over, per directory, since start.
    pub log_skipped: FilesSkipped,
    pub inspector_skipped: FilesSkipped,
    /// Bytes read from both directories since start.
    pub bytes_read_total: u64,
    /// Inspector JSON objects that were not valid records, and lines longer
    /// than the tailer keeps, since start.
    pub rejected_total: u64,
    /// When the directories were last read.
    pub last_read: Option<SystemTime>,
    /// The configuration the rules judge with.
    pub window: std::time::Duration,
    pub busbw_min_bytes: u64,
    pub min_line_rate_fraction: f64,
}
