//! `roce_exporter check`: one-shot fabric checklist. Samples twice over a
//! window, runs the rules, and prints what is right, what is wrong with Fix
//! and Verify lines, and the NCCL settings this host needs (only those it
//! can justify from what it read). Same sources and rules as the server.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_rdma::{GidFamily, GidType, LinkLayer};
use serde::Serialize;

use crate::config::Config;
use crate::host::HostPaths;
use crate::rules::{self, Finding, Severity};
use crate::sampler::Sampler;
use crate::snapshot::{Snapshot, SourceState};
use crate::sources;

/// Result of one check item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Fail,
    Warn,
    Unknown,
}

impl Status {
    fn mark(self) -> &'static str {
        match self {
            Status::Ok => "[ok]  ",
            Status::Fail => "[FAIL]",
            Status::Warn => "[warn]",
            Status::Unknown => "[ -- ]",
        }
    }
}

/// One line of the checklist.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub section: &'static str,
    pub status: Status,
    pub text: String,
}

/// An NCCL environment setting with the reason it is justified.
#[derive(Debug, Clone, Serialize)]
pub struct NcclSetting {
    pub name: &'static str,
    pub value: String,
    pub reason: String,
}

/// The whole report; its JSON form is what `--format json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub window_seconds: f64,
    pub checklist: Vec<Item>,
    pub findings: Vec<Finding>,
    pub nccl: Vec<NcclSetting>,
}

impl Report {
    /// 1 when any finding is critical, else 0.
    pub fn exit_code(&self) -> u8 {
        u8::from(
            self.findings
                .iter()
                .any(|f| f.severity == Severity::Critical),
        )
    }
}

/// Takes two samples `window` apart and builds the report. `progress`
/// shows a countdown on stderr while waiting (only on a terminal).
pub fn run(
    config: &Config,
    paths: &HostPaths,
    window: Duration,
    progress: bool,
) -> Result<Report, String> {
    let mut sampler = Sampler::new(sources::all(config, paths), config);
    let first = sampler.sample();
    if let Some(failed) = first
        .source("rdma")
        .filter(|s| matches!(s.state, SourceState::Failed(_)))
    {
        return Err(format!(
            "the rdma collector failed: {}",
            failed.state.detail().unwrap_or("")
        ));
    }
    wait(window, progress && std::io::stderr().is_terminal());
    let second = sampler.sample();
    let history = vec![first, second.clone()];
    let findings = rules::evaluate(&history, &config.rules, &config.expect);
    Ok(build_report(&history, findings, window))
}

fn wait(window: Duration, show: bool) {
    let start = Instant::now();
    let mut err = std::io::stderr();
    while start.elapsed() < window {
        if show {
            let left = window.saturating_sub(start.elapsed());
            let _ = write!(
                err,
                "\rsampling counters: {:>4.1}s left ",
                left.as_secs_f64()
            );
            let _ = err.flush();
        }
        std::thread::sleep(Duration::from_millis(100).min(window.saturating_sub(start.elapsed())));
    }
    if show {
        let _ = write!(err, "\r{:40}\r", "");
        let _ = err.flush();
    }
}

/// The report over a history (first and last sample). Pure: tests build
/// histories in code.
pub fn build_report(history: &[Arc<Snapshot>], findings: Vec<Finding>, window: Duration) -> Report {
    let mut checklist = Vec::new();
    let latest = history.last().map(|s| s.as_ref());
    if let Some(s) = latest {
        transport(s, &findings, &mut checklist);
        collectors(s, &mut checklist);
    }
    let nccl = latest.map(nccl_settings).unwrap_or_default();
    Report {
        window_seconds: window.as_secs_f64(),
        checklist,
        findings,
        nccl,
    }
}

fn transport(s: &Snapshot, findings: &[Finding], out: &mut Vec<Item>) {
    let section = "Transport";
    let ports: Vec<_> = rules::ports::ports(s).collect();
    if ports.is_empty() {
        out.push(Item {
            section,
            status: Status::Fail,
            text: "no RDMA device: NCCL will fall back to NET/Socket (TCP)".into(),
        });
        return;
    }
    for (d, p) in ports {
        let kind = match p.link_layer {
            Some(LinkLayer::Ethernet) => "RoCE",
            Some(LinkLayer::InfiniBand) => "InfiniBand",
            _ => "unknown link layer",
        };
        let rate = p
            .rate_bytes_per_second
            .map(|r| format!(", {} Gb/s", rules::ports::fmt_num(r as f64 * 8.0 / 1e9)))
            .unwrap_or_default();
        let netdev = p
            .netdev
            .as_deref()
            .map(|n| format!(", netdev {n}"))
            .unwrap_or_default();
        let state = format!(
            "{}/{}",
            p.state.as_ref().map(|x| x.name()).unwrap_or("?"),
            p.phys_state.as_ref().map(|x| x.name()).unwrap_or("?")
        );
        let has_finding = findings.iter().any(|f| {
            f.subject.device.as_deref() == Some(d.name.as_str()) && f.subject.port == Some(p.number)
        });
        let mut text = format!(
            "{} port {}: {state}, {kind}{rate}{netdev}",
            d.name, p.number
        );
        if matches!(p.link_layer, Some(LinkLayer::Ethernet)) {
            match nccl_gid(p) {
                Some(g) => text.push_str(&format!(", RoCE v2 GID {} ({})", g.index, g.gid)),
                None => text.push_str(", no routable RoCE v2 GID"),
            }
        }
        let status = if !p.is_up() {
            Status::Fail
        } else if has_finding {
            Status::Warn
        } else {
            Status::Ok
        };
        out.push(Item {
            section,
            status,
            text,
        });
    }
}

fn collectors(s: &Snapshot, out: &mut Vec<Item>) {
    for src in &s.sources {
        let (status, text) = match &src.state {
            SourceState::Ok if src.errors.is_empty() => (Status::Ok, format!("{}: read", src.name)),
            SourceState::Ok => (
                Status::Warn,
                format!(
                    "{}: read with {} error(s), first: {}",
                    src.name,
                    src.errors.len(),
                    src.errors[0]
                ),
            ),
            SourceState::Unavailable(why) => (
                Status::Unknown,
                format!("{}: nothing to read ({why})", src.name),
            ),
            SourceState::Disabled(why) => (Status::Unknown, format!("{}: off ({why})", src.name)),
            SourceState::Failed(why) => (Status::Fail, format!("{}: failed ({why})", src.name)),
        };
        out.push(Item {
            section: "Collectors",
            status,
            text,
        });
    }
}

/// The GID NCCL should use on a RoCE port: RoCE v2, IPv4-mapped first, then
/// a global IPv6 one (NCCL's own default order).
fn nccl_gid(p: &roce_rdma::Port) -> Option<&roce_rdma::Gid> {
    let v2 = || p.gids.iter().filter(|g| g.gid_type == GidType::RoceV2);
    v2().find(|g| g.family() == GidFamily::Ipv4Mapped)
        .or_else(|| v2().find(|g| g.family() == GidFamily::Ipv6Global))
}

fn nccl_settings(s: &Snapshot) -> Vec<NcclSetting> {
    let mut out = Vec::new();
    let roce: Vec<_> = rules::ports::ports(s)
        .filter(|(_, p)| p.is_up() && matches!(p.link_layer, Some(LinkLayer::Ethernet)))
        .collect();
    let indexes: Vec<(String, u32)> = roce
        .iter()
        .filter_map(|(d, p)| nccl_gid(p).map(|g| (format!("{}:{}", d.name, p.number), g.index)))
        .collect();
    if !indexes.is_empty() && indexes.len() == roce.len() {
        let first = indexes[0].1;
        if indexes.iter().all(|(_, i)| *i == first) {
            out.push(NcclSetting {
                name: "NCCL_IB_GID_INDEX",
                value: first.to_string(),
                reason: format!(
                    "the routable RoCE v2 GID is at index {first} on every active RoCE port ({})",
                    indexes
                        .iter()
                        .map(|(p, _)| p.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    out
}

/// The human-readable checklist.
pub fn render_text(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "roce_exporter check: two samples {}s apart\n",
        rules::ports::fmt_num(report.window_seconds)
    ));
    let mut section = "";
    for item in &report.checklist {
        if item.section != section {
            section = item.section;
            out.push_str(&format!("\n{section}\n"));
        }
        out.push_str(&format!("  {} {}\n", item.status.mark(), item.text));
    }
    let critical = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Critical)
        .count();
    let warning = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    out.push_str(&format!(
        "\nFindings: {critical} critical, {warning} warning, {} info\n",
        report.findings.len() - critical - warning
    ));
    for f in &report.findings {
        out.push_str(&format!(
            "  [{}] {}: {}\n",
            f.severity.as_str(),
            f.rule,
            f.finding
        ));
        out.push_str(&format!("      Measured: {}\n", f.evidence));
        out.push_str(&format!("      Fix:      {}\n", f.fix));
        out.push_str(&format!("      Verify:   {}\n", f.verify));
    }
    out.push_str("\nNCCL settings this host needs\n");
    if report.nccl.is_empty() {
        out.push_str("  none that the data read here can justify (NCCL's defaults apply)\n");
    }
    for n in &report.nccl {
        out.push_str(&format!(
            "  export {}={}    # {}\n",
            n.name, n.value, n.reason
        ));
    }
    out
}
