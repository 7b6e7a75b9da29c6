//! The NCCL source: what NCCL jobs on this host really did, read from the
//! files they write into the directories the configuration names
//! (`nccl.log_dir` for `NCCL_DEBUG=INFO` logs, `nccl.inspector_dir` for the
//! NCCL Inspector's output), through `roce-nccl`.
//!
//! It runs like every source, on the sampler's reader thread under its
//! deadline, but reads the directories only every `nccl.interval` (its own
//! cadence); in between it hands on what it has. Each read is bounded in
//! bytes and files (see `roce_nccl::tail`), so a directory of 10,000 files
//! or a log of gigabytes costs one bounded slice per read, never a stall.
//! Nothing here runs NCCL or needs a GPU.

pub use roce_model::nccl::{FilesSkipped, NcclSnapshot};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use roce_nccl::aggregate::{Aggregator, AggregatorConfig};
use roce_nccl::inspector::{parse_prom_line, parse_record, ObjectSplitter, Record};
use roce_nccl::log::parse_line;
use roce_nccl::tail::{PassStats, TailConfig, TailEvent, Tailer};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::{Config, NcclConfig};
use crate::snapshot::SourceState;
use roce_host::ReadError;

/// The largest Inspector JSON object assembled (a verbose record with
/// per-channel kernel events stays well below).
const MAX_INSPECTOR_OBJECT: usize = 64 * 1024;

pub struct NcclSource {
    cfg: NcclConfig,
    logs: Option<Tailer>,
    inspector: Option<Tailer>,
    splitters: HashMap<PathBuf, ObjectSplitter>,
    agg: Aggregator,
    last_read: Option<Instant>,
    /// The state and errors of the last read, repeated until the next one
    /// (a directory that stays missing is one lasting error).
    state: SourceState,
    errors: Vec<HostError>,
    /// Files without a slot, per directory: logged when that starts and
    /// when a whole listing has none again.
    over_cap: [OverCap; 2],
    part: NcclSnapshot,
}

impl NcclSource {
    pub fn new(config: &Config) -> Self {
        let cfg = config.nccl.clone();
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
            .map(|d| Tailer::new(d, tail(None, roce_nccl::log::MAX_LINE)));
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
        NcclSource {
            cfg,
            logs,
            inspector,
            splitters: HashMap::new(),
            agg,
            last_read: None,
            state: SourceState::Ok,
            errors: Vec::new(),
            over_cap: [OverCap::default(); 2],
            part,
        }
    }

    /// Reads both directories once (bounded); returns the directories that
    /// could not be listed.
    fn read(&mut self, errors: &mut Vec<HostError>) -> usize {
        let now = Instant::now();
        let wall = SystemTime::now();
        let mut unreadable = 0;
        if let Some(t) = self.logs.as_mut() {
            let agg = &mut self.agg;
            let stats = t.poll(wall, &mut |e| match e {
                TailEvent::Line { file, line } => {
                    let text = String::from_utf8_lossy(line);
                    agg.log_line(&file_key(file), &parse_line(&text), now);
                }
                TailEvent::Reset { file } | TailEvent::Gone { file } => {
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

fn file_key(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn is_prom(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "prom")
}

impl Source for NcclSource {
    fn name(&self) -> &'static str {
        "nccl"
    }

    fn disabled(&self) -> Option<String> {
        if !self.cfg.enabled {
            return Some("nccl.enabled is false".into());
        }
        if self.logs.is_none() && self.inspector.is_none() {
            return Some("neither nccl.log_dir nor nccl.inspector_dir is set".into());
        }
        None
    }

    fn sample(&mut self, _input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        if !self.cfg.enabled {
            return Sampled::bare(SourceState::Disabled("nccl.enabled is false".into()));
        }
        if self.logs.is_none() && self.inspector.is_none() {
            return Sampled::bare(SourceState::Disabled(
                "neither nccl.log_dir nor nccl.inspector_dir is set".into(),
            ));
        }
        let due = self
            .last_read
            .is_none_or(|t| t.elapsed() >= self.cfg.interval);
        if due {
            let dirs = usize::from(self.logs.is_some()) + usize::from(self.inspector.is_some());
            let mut fresh = Vec::new();
            self.state = if self.read(&mut fresh) == dirs {
                SourceState::Failed("no NCCL directory could be listed".into())
            } else {
                SourceState::Ok
            };
            self.errors = fresh;
        }
        errors.extend(self.errors.iter().cloned());
        self.part.summary = self.agg.summary(Instant::now());
        Sampled::new(self.state.clone(), Part::Nccl(Box::new(self.part.clone())))
    }
}
