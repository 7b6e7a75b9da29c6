//! The `check` checklist: from the latest snapshot, its findings and the
//! expectations to the report `roce_exporter check` prints (checklist lines
//! by section, the findings, the NCCL settings this host needs) and its
//! text form. Pure: no I/O and no clock; the binary samples the host and
//! hands the history in. Every verdict is a finding of the rule table
//! (`crates/rules/src/table.rs`), filed under the checklist line of its
//! area and subject; the checklist itself only reports.

use std::sync::Arc;
use std::time::Duration;

use roce_model::snapshot::Snapshot;
use roce_rules::settings::Expectations;
use roce_rules::{Area, Finding, RuleId, Severity};
use serde::Serialize;

mod collectors;
mod gpu;
pub mod load;
mod nccl;
mod netdev;
mod ports;
mod text;

pub use text::render_text;

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
    /// Nothing wrong found is not the same as checked: `Unknown` in place
    /// of `Ok` where what the line states could not be read.
    fn checked(self, readable: bool) -> Status {
        if self == Status::Ok && !readable {
            Status::Unknown
        } else {
            self
        }
    }

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

/// An NCCL environment setting: NCCL's default judged on this host.
#[derive(Debug, Clone, Serialize)]
pub struct NcclSetting {
    pub name: &'static str,
    /// What to export, "default is right", or a hint at what to choose.
    pub value: String,
    /// `export` (the default is wrong here), `default` (it is right) or
    /// `choose` (wrong or doubtful, and the value is the operator's choice).
    pub action: &'static str,
    pub reason: String,
}

/// The whole report; its JSON form is what `--format json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub window_seconds: f64,
    pub checklist: Vec<Item>,
    pub findings: Vec<Finding>,
    pub nccl: Vec<NcclSetting>,
    /// `check --load`: each run, its figures and its lines.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub load: Vec<load::LoadRunReport>,
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

/// The report over a history (first and last sample). Pure: tests build
/// histories in code.
pub fn build_report(
    history: &[Arc<Snapshot>],
    findings: Vec<Finding>,
    window: Duration,
    expect: &Expectations,
) -> Report {
    let mut checklist = Vec::new();
    let latest = history.last().map(|s| s.as_ref());
    if let Some(s) = latest {
        ports::transport(s, &findings, &mut checklist);
        gpu::gpudirect(s, &findings, &mut checklist);
        netdev::roce_config(s, &findings, &mut checklist);
        netdev::nic_vs_switch(s, &findings, expect.rails.is_some(), &mut checklist);
        let window: Vec<&Snapshot> = history.iter().map(|s| s.as_ref()).collect();
        ports::counters(&window, &findings, &mut checklist);
        gpu::topology(s, &findings, &mut checklist);
        nccl::nccl_seen(s, &findings, &mut checklist);
        collectors::collectors(s, &mut checklist);
    }
    let nccl = latest
        .map(|s| nccl::nccl_settings(s, expect))
        .unwrap_or_default();
    Report {
        window_seconds: window.as_secs_f64(),
        checklist,
        findings,
        nccl,
        load: Vec::new(),
    }
}

/// The area of the rule table a finding belongs to.
fn area(f: &Finding) -> Area {
    f.rule.spec().area
}

/// The findings about one port (any area).
fn on_port<'a>(
    findings: &'a [Finding],
    device: &'a str,
    port: u32,
) -> impl Iterator<Item = &'a Finding> + 'a {
    findings.iter().filter(move |f| {
        f.subject.device.as_deref() == Some(device) && f.subject.port == Some(port)
    })
}

/// The findings of the given areas.
fn in_areas<'a>(
    findings: &'a [Finding],
    areas: &'a [Area],
) -> impl Iterator<Item = &'a Finding> + 'a {
    findings.iter().filter(move |f| areas.contains(&area(f)))
}

/// `rule, rule` of some findings, each once.
fn rule_list<'a>(findings: impl Iterator<Item = &'a Finding>) -> String {
    let mut ids: Vec<RuleId> = findings.map(|f| f.rule).collect();
    ids.sort();
    ids.dedup();
    ids.iter()
        .map(|r| r.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn item(section: &'static str, status: Status, text: String) -> Item {
    Item {
        section,
        status,
        text,
    }
}

/// The worst severity of the findings that match, as a checklist status.
fn status_of<'a>(findings: impl Iterator<Item = &'a Finding>) -> Status {
    findings
        .map(|f| match f.severity {
            Severity::Critical => Status::Fail,
            Severity::Warning | Severity::Info => Status::Warn,
        })
        .min_by_key(|s| match s {
            Status::Fail => 0,
            Status::Warn => 1,
            _ => 2,
        })
        .unwrap_or(Status::Ok)
}

/// The topology when its collector ran and found GPUs; otherwise the item
/// that says why the section has nothing to check.
fn topology_with_gpus<'a>(
    s: &'a Snapshot,
    section: &'static str,
    without_gpu: &str,
    out: &mut Vec<Item>,
) -> Option<&'a roce_topology::TopologySnapshot> {
    let Some(t) = &s.topology else {
        out.push(item(
            section,
            Status::Unknown,
            "not checked: the topology collector did not run".into(),
        ));
        return None;
    };
    if t.gpus.is_empty() {
        out.push(item(
            section,
            Status::Unknown,
            format!("no GPU on this host: {without_gpu}"),
        ));
        return None;
    }
    Some(t)
}
