//! NCCL Inspector output (the profiler plugin in NCCL's
//! `ext-profiler/inspector`): its JSON records and its Prometheus text files.
//!
//! JSON (`inspector.cc`, `inspectorCompletedColl`; README output format
//! `v4.0` .. `v4.3`): one object per completed operation and communicator,
//! ```text
//! {"header":{"id":"0x..","rank":2,"n_ranks":8,"nnodes":1},
//!  "metadata":{"inspector_output_format_version":"v4.0","git_rev":"",
//!              "rec_mechanism":"..","dump_timestamp_us":..,"hostname":"..","pid":..},
//!  "coll_perf":{"coll":"AllReduce","coll_sn":1407,"coll_msg_size_bytes":17179869184,
//!               "coll_exec_time_us":61974,"coll_timing_source":"kernel_gpu",
//!               "coll_algobw_gbs":277.210914,"coll_busbw_gbs":485.119099}}
//! ```
//! Other bodies exist (`p2p_perf`, `dump_stats` in v4.3, verbose
//! `event_trace_*`); they are recognised and skipped. Objects may be written
//! one per line or pretty-printed, so [`ObjectSplitter`] finds object
//! boundaries itself, with a bound on an object's size.
//!
//! Prometheus mode (`NCCL_INSPECTOR_PROM_DUMP=1`, `inspector_prom.cc`): files
//! `nccl_inspector_metrics_<gpu uuid>.prom` rewritten each interval, lines
//! `nccl_bus_bandwidth_gbs{comm_id="..",hostname="..",rank="..",slurm_job="..",
//! slurm_job_id="..",nranks="..",n_nodes="..",gpu_device_id="GPU0",
//! collective="AllReduce",coll_sn="..",timestamp="..",message_size="2.00GB"} 485.119`,
//! where `message_size` is the byte count in 1024-based units with two
//! decimals (`inspectorFormatHumanReadableSize`).

use serde::Deserialize;

/// The largest object [`ObjectSplitter`] assembles; a verbose record with
/// per-channel kernel events stays well below.
pub const MAX_OBJECT: usize = 256 * 1024;

/// One completed collective as the Inspector reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct CollRecord {
    pub comm_id: String,
    pub rank: i64,
    pub n_ranks: u32,
    pub nnodes: u32,
    pub hostname: String,
    pub pid: u32,
    pub format_version: String,
    pub coll: String,
    pub coll_sn: u64,
    pub msg_size_bytes: u64,
    pub exec_time_us: f64,
    pub algobw_gbs: f64,
    pub busbw_gbs: f64,
}

/// What one JSON object is.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Coll(CollRecord),
    /// A `p2p_perf`, `dump_stats` or unknown body: valid, not a collective.
    Other,
}

#[derive(Debug, PartialEq, Eq)]
pub enum RecordError {
    Json,
    MissingHeader,
    BadNumber,
}

#[derive(Deserialize)]
struct RawRecord {
    header: Option<RawHeader>,
    #[serde(default)]
    metadata: Option<RawMetadata>,
    #[serde(default)]
    coll_perf: Option<RawCollPerf>,
}

#[derive(Deserialize)]
struct RawHeader {
    #[serde(default)]
    id: String,
    #[serde(default)]
    rank: i64,
    #[serde(default)]
    n_ranks: u32,
    #[serde(default)]
    nnodes: u32,
}

#[derive(Deserialize, Default)]
struct RawMetadata {
    #[serde(default)]
    inspector_output_format_version: String,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    pid: u32,
}

#[derive(Deserialize)]
struct RawCollPerf {
    coll: String,
    #[serde(default)]
    coll_sn: u64,
    coll_msg_size_bytes: u64,
    // Integer in NCCL's writer (`jsonUint64`), a float in some re-emitters.
    #[serde(default)]
    coll_exec_time_us: f64,
    #[serde(default)]
    coll_algobw_gbs: f64,
    coll_busbw_gbs: f64,
}

/// Parses one JSON object of the Inspector's output.
pub fn parse_record(bytes: &[u8]) -> Result<Record, RecordError> {
    let raw: RawRecord = serde_json::from_slice(bytes).map_err(|_| RecordError::Json)?;
    let header = raw.header.ok_or(RecordError::MissingHeader)?;
    let Some(perf) = raw.coll_perf else {
        return Ok(Record::Other);
    };
    if !perf.coll_busbw_gbs.is_finite() || perf.coll_busbw_gbs < 0.0 {
        return Err(RecordError::BadNumber);
    }
    let meta = raw.metadata.unwrap_or_default();
    Ok(Record::Coll(CollRecord {
        comm_id: bounded(header.id),
        rank: header.rank,
        n_ranks: header.n_ranks,
        nnodes: header.nnodes,
        hostname: bounded(meta.hostname),
        pid: meta.pid,
        format_version: bounded(meta.inspector_output_format_version),
        coll: bounded(perf.coll),
        coll_sn: perf.coll_sn,
        msg_size_bytes: perf.coll_msg_size_bytes,
        exec_time_us: perf.coll_exec_time_us,
        algobw_gbs: if perf.coll_algobw_gbs.is_finite() {
            perf.coll_algobw_gbs
        } else {
            0.0
        },
        busbw_gbs: perf.coll_busbw_gbs,
    }))
}

fn bounded(mut s: String) -> String {
    if s.len() > 128 {
        let mut cut = 128;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Finds top-level JSON objects in a byte stream fed in arbitrary pieces:
/// tracks string/escape state and brace depth, so objects written one per
/// line and pretty-printed ones both come out whole. Bytes outside objects
/// are skipped; an object larger than `max` is dropped (counted) and the
/// splitter resynchronises at the next top-level `{`.
#[derive(Debug)]
pub struct ObjectSplitter {
    buf: Vec<u8>,
    depth: u32,
    in_string: bool,
    escape: bool,
    skipping: bool,
    max: usize,
    pub oversized: u64,
}

impl ObjectSplitter {
    pub fn new(max: usize) -> Self {
        ObjectSplitter {
            buf: Vec::new(),
            depth: 0,
            in_string: false,
            escape: false,
            skipping: false,
            max,
            oversized: 0,
        }
    }

    /// Forgets any partial object (the file was truncated or replaced).
    pub fn reset(&mut self) {
        self.buf.clear();
        self.depth = 0;
        self.in_string = false;
        self.escape = false;
        self.skipping = false;
    }

    /// Bytes held for an unfinished object.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Feeds bytes; calls `out` with each complete object.
    pub fn feed(&mut self, data: &[u8], out: &mut dyn FnMut(&[u8])) {
        for &b in data {
            if self.depth == 0 {
                if b == b'{' {
                    self.depth = 1;
                    self.skipping = false;
                    self.buf.clear();
                    self.buf.push(b);
                }
                continue;
            }
            if !self.skipping {
                if self.buf.len() >= self.max {
                    self.skipping = true;
                    self.oversized += 1;
                    self.buf.clear();
                } else {
                    self.buf.push(b);
                }
            }
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth = self.depth.saturating_add(1),
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        if !self.skipping {
                            out(&self.buf);
                        }
                        self.buf.clear();
                        self.skipping = false;
                    }
                }
                _ => {}
            }
        }
    }
}

/// One sample of the Inspector's Prometheus mode.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSample {
    /// `nccl_bus_bandwidth_gbs`, `nccl_algorithm_bandwidth_gbs` or
    /// `nccl_collective_exec_time_microseconds`.
    pub metric: String,
    pub collective: String,
    pub comm_id: String,
    pub rank: Option<i64>,
    pub coll_sn: Option<u64>,
    pub n_nodes: Option<u32>,
    pub nranks: Option<u32>,
    pub hostname: String,
    /// From `message_size`, which is rounded to two decimals of its unit.
    pub msg_size_bytes: Option<u64>,
    pub value: f64,
}

/// Parses one line of an Inspector `.prom` file; comments, blank lines and
/// other metrics are `None`.
pub fn parse_prom_line(line: &str) -> Option<PromSample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') || line.len() > 4096 {
        return None;
    }
    let open = line.find('{')?;
    let metric = &line[..open];
    if !metric.starts_with("nccl_") {
        return None;
    }
    let close = line.rfind('}')?;
    if close < open {
        return None;
    }
    let labels = parse_labels(&line[open + 1..close])?;
    let value: f64 = line[close + 1..]
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()?;
    if !value.is_finite() {
        return None;
    }
    let get = |k: &str| {
        labels
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.as_str())
    };
    Some(PromSample {
        metric: metric.to_string(),
        collective: bounded(get("collective").unwrap_or("").to_string()),
        comm_id: bounded(get("comm_id").unwrap_or("").to_string()),
        rank: get("rank").and_then(|v| v.parse().ok()),
        coll_sn: get("coll_sn").and_then(|v| v.parse().ok()),
        n_nodes: get("n_nodes").and_then(|v| v.parse().ok()),
        nranks: get("nranks").and_then(|v| v.parse().ok()),
        hostname: bounded(get("hostname").unwrap_or("").to_string()),
        msg_size_bytes: get("message_size").and_then(parse_human_size),
        value,
    })
}

fn parse_labels(s: &str) -> Option<Vec<(&str, String)>> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if rest.is_empty() {
            return Some(out);
        }
        let eq = rest.find('=')?;
        let name = rest[..eq].trim();
        let after = rest[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => return None,
                },
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        let end = end?;
        out.push((name, value));
        if out.len() > 64 {
            return None;
        }
        rest = &after[end + 1..];
    }
}

/// `2.00GB` -> bytes (`inspectorFormatHumanReadableSize`: `%zuB` below 1 KiB,
/// else `%.2f` and `KB`/`MB`/`GB`/`TB`, 1024-based).
pub fn parse_human_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("TB") {
        (n, 1u64 << 40)
    } else if let Some(n) = s.strip_suffix("GB") {
        (n, 1 << 30)
    } else if let Some(n) = s.strip_suffix("MB") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("KB") {
        (n, 1 << 10)
    } else if let Some(n) = s.strip_suffix('B') {
        (n, 1)
    } else {
        return None;
    };
    let v: f64 = num.parse().ok()?;
    if !v.is_finite() || v < 0.0 {
        return None;
    }
    let bytes = v * mult as f64;
    if bytes >= u64::MAX as f64 {
        return None;
    }
    Some(bytes.round() as u64)
}
