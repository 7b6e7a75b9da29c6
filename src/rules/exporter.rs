//! Rules about the exporter itself: a collector that fails.

use super::{Context, Finding, Rule, Severity, Subject};
use crate::snapshot::SourceState;

pub const RULES: &[Rule] = &[Rule {
    id: "collector_failing",
    checks: "every collector runs (a failing one hides its part of the fabric)",
    evaluate: collector_failing,
}];

fn collector_failing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    s.sources
        .iter()
        .filter_map(|src| match &src.state {
            SourceState::Failed(why) => Some(Finding {
                rule: "collector_failing",
                severity: Severity::Warning,
                subject: Subject::default(),
                finding: format!("The {} collector failed: its metrics are missing", src.name),
                evidence: format!("roce_collector_success{{collector=\"{}\"}} 0: {why}", src.name),
                fix: "Read the exporter's log for the collector's error; a permission problem names the file or capability it needs".into(),
                verify: format!("curl -s localhost:9879/metrics | grep 'roce_collector_success{{collector=\"{}\"}}'", src.name),
            }),
            _ => None,
        })
        .collect()
}
