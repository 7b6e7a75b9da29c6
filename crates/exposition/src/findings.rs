//! `roce_finding`: one series per active finding, so that Alertmanager can
//! route on rule and severity. The text of a finding is at `/findings`.

use super::labels::label_set;
use super::{Fam, Family, FamilySamples, MetricKind, Row, Samples};
use crate::snapshot::Snapshot;

label_set! {
    /// A finding: its rule and severity and what it is about (each part
    /// empty where the finding is not about one).
    pub struct FindingLabels { rule, severity, device, port, netdev, gpu }
}

label_set! {
    /// A severity of findings.
    pub struct SeverityLabels { severity }
}

pub const FINDING: Fam<FindingLabels> = Fam::new(Row {
    base: "roce_finding",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Active finding of the rules (value 1); labels that do not apply are empty. Details at /findings.",
    source: "rules over the sample history",
});

pub const FINDINGS_ACTIVE: Fam<SeverityLabels> = Fam::new(Row {
    base: "roce_findings_active",
    kind: MetricKind::Gauge,
    unit: None,
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
        let labels = FindingLabels {
            rule: f.rule.as_str(),
            severity: f.severity.as_str(),
            device: f.subject.device.as_deref().unwrap_or(""),
            port: &port,
            netdev: f.subject.netdev.as_deref().unwrap_or(""),
            gpu: &gpu,
        };
        findings.push(labels, 1u64);
        counts[f.severity as usize] += 1;
    }
    out.push(findings.into());
    let mut active = Samples::new(&FINDINGS_ACTIVE);
    for (severity, n) in ["critical", "warning", "info"].iter().zip(counts) {
        active.push(SeverityLabels { severity }, n);
    }
    out.push(active.into());
}
