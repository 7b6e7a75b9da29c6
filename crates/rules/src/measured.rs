//! "Measured vs expected": the bus bandwidth this node's collectives
//! reached, from every source that measures it, against what the node's
//! NICs should give. One place for `nccl_busbw_below_line_rate` and for
//! `check`'s `Measured:` lines, so that a new source (a load test the
//! exporter runs) is one more [`Source`] here and both follow.
//!
//! Sources: the NCCL Inspector (the mean bus bandwidth of large multi-node
//! collectives of running jobs) and nccl-tests' own output (the bus
//! bandwidth at the largest size of its last run per collective).
//!
//! Expected: NCCL's maintainers' cross-node target for ring and tree
//! collectives, about 24 GB/s of bus bandwidth per 200 Gb/s NIC summed
//! over the node's NICs (nccl-tests#119, nccl#495), taken over the rails
//! of the job's GPUs ([`crate::nccl_seen::rails`]): the node's NICs, not
//! the subset a job used. AllToAll cannot aggregate NICs (nccl-tests#267):
//! one NIC's.

use roce_model::nccl::NcclSnapshot;

use crate::nccl_seen::rails::{rails, Rails};
use crate::snapshot::Snapshot;

/// NCCL's maintainers' cross-node target for ring and tree collectives:
/// about 24 GB/s of bus bandwidth per 200 Gb/s (25 GB/s) NIC.
pub const RING_TREE_PER_LINE_RATE: f64 = 24.0 / 25.0;

/// Where a measurement comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// The NCCL Inspector profiler plugin of running jobs.
    Inspector,
    /// nccl-tests' saved output.
    NcclTests,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Inspector => "NCCL Inspector",
            Source::NcclTests => "nccl-tests",
        }
    }
}

/// One measured bus bandwidth.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub source: Source,
    /// NCCL's collective (`AllReduce`), or the program when it times no
    /// collective of NCCL's (`sendrecv_perf`).
    pub collective: String,
    /// GB/s (10^9 bytes per second).
    pub gbs: f64,
    /// What was measured, for texts.
    pub what: String,
    /// Why it says nothing about this node's fabric, when it does not (one
    /// node, sizes too small, no target for the collective).
    pub not_judged: Option<String>,
}

impl Measurement {
    /// How a finding about it begins, so that `check` files it under its
    /// `Measured:` line.
    pub fn finding_prefix(&self) -> String {
        format!("{} {} bus bandwidth", self.source.as_str(), self.collective)
    }
}

/// What one collective's bus bandwidth should reach on this node, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedBusbw {
    pub bytes_per_second: f64,
    /// How the figure was made, for evidence and `check`.
    pub basis: String,
}

/// The expected bus bandwidth of `collective` over `rails`; `None` for a
/// collective NCCL does not name, or rails without a rate.
pub fn expected_busbw(collective: &str, rails: &Rails) -> Option<ExpectedBusbw> {
    let gbs = |r: u64| crate::ports::fmt_num(r as f64 * 8.0 / 1e9);
    let mut speeds: Vec<(u64, usize)> = Vec::new();
    for r in rails.ports.iter().filter_map(|p| p.rate) {
        match speeds.iter_mut().find(|(s, _)| *s == r) {
            Some(e) => e.1 += 1,
            None => speeds.push((r, 1)),
        }
    }
    let nics = speeds
        .iter()
        .map(|(r, n)| format!("{n} x {} Gb/s", gbs(*r)))
        .collect::<Vec<_>>()
        .join(" + ");
    let of = format!("{} ({nics}: {})", rails.basis, rails.devices().join(", "));
    match collective {
        "AllToAll" => Some(ExpectedBusbw {
            bytes_per_second: RING_TREE_PER_LINE_RATE * rails.min_rate()? as f64,
            basis: format!(
                "AllToAll: one NIC's, about 24 GB/s per 200 Gb/s, of the slowest of {of}"
            ),
        }),
        "AllReduce" | "AllGather" | "ReduceScatter" | "Broadcast" | "Reduce" => {
            let total = rails.total_rate();
            (total > 0).then(|| ExpectedBusbw {
                bytes_per_second: RING_TREE_PER_LINE_RATE * total as f64,
                basis: format!(
                    "ring/tree across nodes: about 24 GB/s per 200 Gb/s NIC, summed over {of}"
                ),
            })
        }
        _ => None,
    }
}

/// Every measurement of the window, Inspector first, then nccl-tests' runs
/// (the most recently read run of each collective).
pub fn measurements(n: &NcclSnapshot) -> Vec<Measurement> {
    let sum = &n.summary;
    let mib = n.busbw_min_bytes >> 20;
    let mut out: Vec<Measurement> = sum
        .busbw
        .iter()
        .map(|b| Measurement {
            source: Source::Inspector,
            collective: b.collective.clone(),
            gbs: b.mean_gbs,
            what: format!(
                "mean of {} {} collective(s) of at least {mib} MiB over up to {} nodes (min {:.1}, max {:.1})",
                b.samples, b.collective, b.largest_nnodes, b.min_gbs, b.max_gbs
            ),
            not_judged: None,
        })
        .collect();
    let mut seen: Vec<String> = Vec::new();
    for t in sum.job.tests.iter().rev() {
        let r = &t.run;
        let (Some(size), Some(gbs)) = (r.largest_size(), r.largest_busbw()) else {
            continue;
        };
        let name = r
            .collective
            .map(str::to_string)
            .or_else(|| r.program.clone())
            .unwrap_or_else(|| "unknown".into());
        if seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        let nodes = r.nnodes();
        let not_judged = if nodes.is_some_and(|n| n < 2) {
            Some("one node: its bandwidth is NVLink's and PCIe's, not the fabric's".to_string())
        } else if nodes.is_none() {
            Some("its hosts were not read (no `#  Rank` lines)".to_string())
        } else if size < n.busbw_min_bytes {
            Some(format!(
                "its largest size, {} MiB, is below nccl.busbw_min_bytes ({mib} MiB), where bus bandwidth has not reached its plateau",
                size >> 20
            ))
        } else if r.collective.is_none() {
            Some("no target for this test".to_string())
        } else {
            None
        };
        out.push(Measurement {
            source: Source::NcclTests,
            collective: name,
            gbs,
            what: format!(
                "{} at {} over {} rank(s) on {} node(s), {}{}",
                r.program.as_deref().unwrap_or("nccl-tests"),
                size_text(size),
                r.ranks,
                nodes.map_or("?".to_string(), |n| n.to_string()),
                t.file,
                if r.complete {
                    ""
                } else {
                    " (run not finished)"
                }
            ),
            not_judged,
        });
    }
    out
}

/// The expected figure for a measurement on this node.
pub fn expected_for(s: &Snapshot, m: &Measurement) -> Option<ExpectedBusbw> {
    let sum = &s.nccl.as_ref()?.summary;
    expected_busbw(&m.collective, &rails(s, sum)?)
}

/// `8 GiB`, `256 MiB`, `4096 B`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} B")
    }
}
