//! nccl-tests' own output (`all_reduce_perf` and its siblings, the field's
//! standard validation of a fabric) into typed runs: the header (nccl-tests
//! and NCCL versions, the program, `nThread`, `nGpus`, the ranks with
//! their hosts and GPUs), the result table (size, count, type, redop,
//! root, then time, algbw, busbw and `#wrong` out of place and in place)
//! and the footer (`Out of bounds values`, `Avg bus bandwidth`).
//!
//! Formats, from nccl-tests' source (NVIDIA/nccl-tests, src/common.cu up
//! to v2.16, src/util.cu from v2.17; rank 0 prints everything, `PRINT` in
//! src/common.h):
//! - `"# nccl-tests version %s nccl-headers=%d nccl-library=%d"` (v2.17+)
//!   and `"# Collective test starting: %s"` (v2.16+, the program's name);
//! - `"# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup
//!   iters: %d iters: %d agg iters: %d validation: %d graph: %d[ unalign:
//!   %d]"`;
//! - one `"#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x]
//!   %s"` per rank (`[0x%02x]`, the bus only, before v2.14);
//! - the column header `"# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s
//!   ..."` naming `size count type redop root`, then `time` (`cputime`
//!   with `-C 1`) `algbw busbw #wrong` twice, with the per-iteration
//!   columns `i_min i_max i_p99 i_cv%` after each with `-I 1` (v2.19) and
//!   `timestamp` last with `-S 1`: columns are found by name;
//! - each row, `"%12li  %12li  %8s  %6s  %6s"` then per placement
//!   `"  %7s  %6s  %6s  %6g"` (`%6.2f` for the bandwidths and `%5g` for
//!   `#wrong` before v2.17; `N/A` without validation);
//! - `"# Out of bounds values : %d %s"` and `"# Avg bus bandwidth    : %g
//!   %s"` (`"# %-20s : ..."` from v2.17), `"# Collective test concluded:
//!   %s"`.
//!
//! NCCL's own INFO lines may be interleaved (the same stdout): they are not
//! rows (their first word is no number) and are left to [`crate::log`].
//! Everything kept is bounded: hosts and devices per run, the row kept
//! (the largest size only), the text of names.

/// Hosts kept per run (distinct names).
pub const MAX_HOSTS: usize = 64;
/// Rank devices kept per run.
pub const MAX_DEVICES: usize = 64;

/// One placement's measurement in a row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub time_us: f64,
    /// GB/s (10^9 bytes per second), as nccl-tests prints it.
    pub algbw: f64,
    pub busbw: f64,
    /// `None` where nccl-tests printed `N/A` (validation off).
    pub wrong: Option<u64>,
}

/// One row of the result table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub size: u64,
    pub count: u64,
    pub dtype: String,
    pub redop: String,
    pub root: i64,
    pub out_of_place: Option<Cell>,
    pub in_place: Option<Cell>,
}

impl Row {
    /// The bus bandwidth of the row: the mean of its placements.
    pub fn busbw(&self) -> Option<f64> {
        let v: Vec<f64> = [self.out_of_place, self.in_place]
            .iter()
            .flatten()
            .map(|c| c.busbw)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    fn wrong(&self) -> u64 {
        [self.out_of_place, self.in_place]
            .iter()
            .flatten()
            .filter_map(|c| c.wrong)
            .fold(0u64, u64::saturating_add)
    }
}

/// One rank as the header lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankDevice {
    pub host: String,
    /// `0000:18:00` (domain:bus:device), or `18` before nccl-tests v2.14.
    pub pci: String,
}

/// One run of a test program, as far as it was read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestsRun {
    /// The program (`all_reduce_perf`), from its header or the file name.
    pub program: Option<String>,
    /// NCCL's name of the collective it times (`AllReduce`), when the
    /// program is one of nccl-tests' collectives.
    pub collective: Option<&'static str>,
    /// `nccl-library=22809`: the NCCL it ran with, as `2.28.9`.
    pub nccl_version: Option<String>,
    pub n_threads: Option<u32>,
    pub n_gpus: Option<u32>,
    pub validation: Option<bool>,
    /// `#  Rank` lines read.
    pub ranks: u32,
    /// Distinct hosts of the ranks (at most [`MAX_HOSTS`]).
    pub hosts: Vec<String>,
    /// The ranks' hosts and GPUs (at most [`MAX_DEVICES`]).
    pub devices: Vec<RankDevice>,
    /// Rows read.
    pub rows: u32,
    /// The rows of the largest size read (every type and op of it, at
    /// most 16).
    pub largest: Vec<Row>,
    /// Wrong elements over every row and placement.
    pub wrong: u64,
    /// Rows with wrong elements, and the first of them.
    pub wrong_rows: u32,
    pub first_wrong: Option<Row>,
    /// The footer's `Out of bounds values` and `Avg bus bandwidth`.
    pub out_of_bounds: Option<u64>,
    pub avg_busbw: Option<f64>,
    /// The footer was read.
    pub complete: bool,
}

impl TestsRun {
    /// The size of the largest rows.
    pub fn largest_size(&self) -> Option<u64> {
        self.largest.first().map(|r| r.size)
    }

    /// The bus bandwidth at the largest size (mean over its rows).
    pub fn largest_busbw(&self) -> Option<f64> {
        let v: Vec<f64> = self.largest.iter().filter_map(Row::busbw).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Hosts the ranks ran on (`None`: no rank line read).
    pub fn nnodes(&self) -> Option<u32> {
        (!self.hosts.is_empty()).then(|| u32::try_from(self.hosts.len()).unwrap_or(u32::MAX))
    }

    fn started(&self) -> bool {
        self.rows > 0 || self.complete
    }
}

/// NCCL's collective of an nccl-tests program (`all_reduce_perf`,
/// `all_reduce_perf_mpi` with a `NAME_SUFFIX`), `None` for the others
/// (sendrecv, gather, scatter, hypercube, alltoallv).
pub fn collective_of(program: &str) -> Option<&'static str> {
    const PROGRAMS: [(&str, &str); 6] = [
        ("all_reduce_perf", "AllReduce"),
        ("all_gather_perf", "AllGather"),
        ("reduce_scatter_perf", "ReduceScatter"),
        ("alltoall_perf", "AllToAll"),
        ("broadcast_perf", "Broadcast"),
        ("reduce_perf", "Reduce"),
    ];
    let base = program.rsplit('/').next().unwrap_or(program);
    PROGRAMS
        .iter()
        .find(|(p, _)| base.starts_with(p) || base.contains(&format!(".{p}")))
        .map(|(_, c)| *c)
}

/// The default columns, where the header was not read.
const DEFAULT_COLUMNS: [&str; 13] = [
    "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
    "busbw", "#wrong",
];

/// Reads one file's lines, run after run.
#[derive(Debug, Clone)]
pub struct TestsParser {
    /// The program named by the file, used until a header names one.
    hint: Option<String>,
    columns: Vec<String>,
    run: TestsRun,
    /// Runs finished before the current one in this file.
    pub finished: u32,
}

impl TestsParser {
    /// A parser for one file; `file_name` may name the program
    /// (`all_reduce_perf.out`).
    pub fn new(file_name: &str) -> Self {
        let hint = collective_of(file_name).and_then(|_| {
            let base = file_name.rsplit('/').next().unwrap_or(file_name);
            base.split(['.', '-'])
                .find(|p| collective_of(p).is_some())
                .map(|p| p.chars().take(64).collect())
        });
        let mut p = TestsParser {
            hint,
            columns: DEFAULT_COLUMNS.iter().map(|s| s.to_string()).collect(),
            run: TestsRun::default(),
            finished: 0,
        };
        p.name_run(None);
        p
    }

    /// The run read so far (empty before the first header or row).
    pub fn current(&self) -> &TestsRun {
        &self.run
    }

    /// One line (without its newline). Returns true when it changed the
    /// current run.
    pub fn line(&mut self, line: &str) -> bool {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.len() > 4096 {
            return false;
        }
        match line.strip_prefix('#') {
            Some(rest) => self.comment(rest.trim()),
            None => self.row(line),
        }
    }

    fn new_run_if_started(&mut self) {
        if self.run.started() {
            self.run = TestsRun::default();
            self.finished = self.finished.saturating_add(1);
            self.name_run(None);
        }
    }

    fn name_run(&mut self, program: Option<&str>) {
        let program = program.map(str::to_string).or_else(|| self.hint.clone());
        self.run.collective = program.as_deref().and_then(collective_of);
        self.run.program = program;
    }

    fn comment(&mut self, rest: &str) -> bool {
        if let Some(v) = rest.strip_prefix("nccl-tests version ") {
            self.new_run_if_started();
            self.run.nccl_version = v
                .split_ascii_whitespace()
                .find_map(|w| w.strip_prefix("nccl-library="))
                .and_then(|c| c.parse::<u32>().ok())
                .map(version_of_code);
            return true;
        }
        if let Some(p) = rest.strip_prefix("Collective test starting:") {
            self.new_run_if_started();
            let p = p.trim();
            if !p.is_empty() && p.len() <= 64 && !p.chars().any(char::is_control) {
                self.name_run(Some(p));
            }
            return true;
        }
        if rest.starts_with("Collective test concluded") {
            self.run.complete = true;
            return true;
        }
        if let Some(r) = rest.strip_prefix("nThread ") {
            self.new_run_if_started();
            let mut words = std::iter::once("nThread").chain(r.split_ascii_whitespace());
            while let Some(w) = words.next() {
                match w {
                    "nThread" => self.run.n_threads = words.next().and_then(|v| v.parse().ok()),
                    "nGpus" => self.run.n_gpus = words.next().and_then(|v| v.parse().ok()),
                    "validation:" => {
                        self.run.validation = words
                            .next()
                            .and_then(|v| v.parse::<u8>().ok())
                            .map(|v| v != 0)
                    }
                    _ => {}
                }
            }
            return true;
        }
        if let Some(r) = rest.strip_prefix("Rank ") {
            return self.rank(r);
        }
        if let Some(r) = rest.strip_prefix("Out of bounds values") {
            self.run.out_of_bounds = footer_value(r).and_then(|v| v.parse().ok());
            self.run.complete = true;
            return true;
        }
        if let Some(r) = rest.strip_prefix("Avg bus bandwidth") {
            self.run.avg_busbw = footer_value(r)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0);
            self.run.complete = true;
            return true;
        }
        let words: Vec<&str> = rest.split_ascii_whitespace().collect();
        if words.len() >= 9
            && words[..2] == ["size", "count"]
            && words.contains(&"busbw")
            && words.len() <= 32
        {
            self.columns = words.iter().map(|w| w.to_string()).collect();
            return true;
        }
        false
    }

    /// `Rank  0 Group  0 Pid  41235 on gpu-a-01 device  0 [0000:18:00] NVIDIA H100 80GB HBM3`.
    fn rank(&mut self, r: &str) -> bool {
        let mut words = r.split_ascii_whitespace();
        if words.next().and_then(|w| w.parse::<u32>().ok()).is_none() {
            return false;
        }
        let mut host = None;
        let mut pci = None;
        while let Some(w) = words.next() {
            match w {
                "on" => host = words.next(),
                "device" => {
                    let _ = words.next();
                    pci = words
                        .next()
                        .and_then(|b| b.strip_prefix('[')?.strip_suffix(']'))
                        .map(|b| b.trim_start_matches("0x"));
                }
                _ => {}
            }
        }
        let Some(host) = host.filter(|h| h.len() <= 64 && !h.chars().any(char::is_control)) else {
            return false;
        };
        self.run.ranks = self.run.ranks.saturating_add(1);
        if !self.run.hosts.iter().any(|h| h == host) && self.run.hosts.len() < MAX_HOSTS {
            self.run.hosts.push(host.to_string());
        }
        if let Some(pci) =
            pci.filter(|p| p.len() <= 16 && p.chars().all(|c| c.is_ascii_hexdigit() || c == ':'))
        {
            if self.run.devices.len() < MAX_DEVICES {
                self.run.devices.push(RankDevice {
                    host: host.to_string(),
                    pci: pci.to_ascii_lowercase(),
                });
            }
        }
        true
    }

    fn row(&mut self, line: &str) -> bool {
        let words: Vec<&str> = line.split_ascii_whitespace().take(40).collect();
        let col = |name: &str, nth: usize| -> Option<&str> {
            let at = self
                .columns
                .iter()
                .enumerate()
                .filter(|(_, c)| c.as_str() == name || (name == "time" && c.as_str() == "cputime"))
                .nth(nth)?
                .0;
            words.get(at).copied()
        };
        let (Some(size), Some(count)) = (
            col("size", 0).and_then(|v| v.parse::<u64>().ok()),
            col("count", 0).and_then(|v| v.parse::<u64>().ok()),
        ) else {
            return false;
        };
        // A row of the layout read (a timestamp adds its own columns at the
        // end); hypercube prints an empty redop, which shifts every column:
        // not a row this parser can place.
        let needed = self
            .columns
            .iter()
            .filter(|c| c.as_str() != "timestamp")
            .count();
        if words.len() < needed {
            return false;
        }
        let cell = |nth: usize| -> Option<Cell> {
            let num = |name: &str| {
                col(name, nth)
                    .and_then(|v| v.parse::<f64>().ok())
                    .filter(|v| v.is_finite() && *v >= 0.0)
            };
            Some(Cell {
                time_us: num("time")?,
                algbw: num("algbw")?,
                busbw: num("busbw")?,
                wrong: col("#wrong", nth)
                    .and_then(|v| v.parse::<f64>().ok())
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(|v| v as u64),
            })
        };
        let text = |name: &str| {
            col(name, 0)
                .map(|v| v.chars().take(16).collect::<String>())
                .unwrap_or_default()
        };
        let row = Row {
            size,
            count,
            dtype: text("type"),
            redop: text("redop"),
            root: col("root", 0).and_then(|v| v.parse().ok()).unwrap_or(-1),
            out_of_place: cell(0),
            in_place: cell(1),
        };
        if row.out_of_place.is_none() && row.in_place.is_none() {
            return false;
        }
        let r = &mut self.run;
        r.rows = r.rows.saturating_add(1);
        let wrong = row.wrong();
        if wrong > 0 {
            r.wrong = r.wrong.saturating_add(wrong);
            r.wrong_rows = r.wrong_rows.saturating_add(1);
            if r.first_wrong.is_none() {
                r.first_wrong = Some(row.clone());
            }
        }
        match r.largest_size() {
            Some(s) if s > row.size => {}
            Some(s) if s == row.size => {
                if r.largest.len() < 16 {
                    r.largest.push(row);
                }
            }
            _ => r.largest = vec![row],
        }
        true
    }
}

/// `: 0 OK`, `    : 189.3 ` -> the number.
fn footer_value(r: &str) -> Option<&str> {
    r.trim_start()
        .strip_prefix(':')?
        .split_ascii_whitespace()
        .next()
}

/// NCCL_VERSION_CODE (`22809`) as `2.28.9` (codes from 2.9 on: X*10000 +
/// Y*100 + Z).
fn version_of_code(code: u32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code / 100) % 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code / 100) % 10, code % 100)
    }
}
