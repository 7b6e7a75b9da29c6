//! The NCCL part of a snapshot: the summary of what NCCL jobs did and the
//! source's own reading of its directories.

use std::path::PathBuf;
use std::time::SystemTime;

use roce_nccl::aggregate::NcclSummary;
use roce_nccl::tail::PassStats;

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
