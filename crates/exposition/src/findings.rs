//! `roce_finding`: one series per active finding, so that Alertmanager can
//! route on rule and severity. The text of a finding is at `/findings`.

use super::{Family, FamilySamples, Labeled, MetricKind, Samples};
use crate::snapshot::Snapshot;

pub const FINDING: Labeled<6> = Labeled::positional(Family {
    base: "roce_finding",
    kind: MetricKind::Gauge,
    unit: None,
    labels: &["rule", "severity", "device", "port", "netdev", "gpu"],
    help: "Active finding of the rules (value 1); labels that do not apply are empty. Details at /findings.",
    source: "rules over the sample history",
});

pub const FINDINGS_ACTIVE: Labeled<1> = Labeled::positional(Family {
    base: "roce_findings_active",
    kind: MetricKind::Gauge,
    unit: None,
    labels: &["severity"],
    help: "Number of active findings by severity.",
    source: "rules over the sample history",
});

pub const FAMILIES: &[Family] = &[FINDING.family, FINDINGS_ACTIVE.family];

pub fn collect(snapshot: &Snapshot, out: &mut Vec<FamilySamples>) {
    let mut findings = Samples::new(&FINDING);
    let mut counts = [0u64; 3];
    for f in &snapshot.findings {
        let port = f.subject.port.map(|p| p.to_string()).unwrap_or_default();
        let gpu = f.subject.gpu.map(|g| g.to_string()).unwrap_or_default();
        findings.push(
            [
                f.rule.as_str(),
                f.severity.as_str(),
                f.subject.device.as_deref().unwrap_or(""),
                &port,
                f.subject.netdev.as_deref().unwrap_or(""),
                &gpu,
            ],
            1u64,
        );
        counts[f.severity as usize] += 1;
    }
    out.push(findings.into());
    let mut active = Samples::new(&FINDINGS_ACTIVE);
    for (severity, n) in ["critical", "warning", "info"].iter().zip(counts) {
        active.push([severity], n);
    }
    out.push(active.into());
}
