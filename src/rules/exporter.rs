//! Rules about the exporter itself: a collector that fails.

use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::SourceState;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::RdmaDeviceMissing,
        checks: "the host has at least one RDMA device",
        evaluate: rdma_device_missing,
    },
    Rule {
        id: RuleId::CollectorFailing,
        checks: "every collector runs (a failing one hides its part of the fabric)",
        evaluate: collector_failing,
    },
];

fn rdma_device_missing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    // Only when the RDMA source ran and found nothing: a failed source is
    // collector_failing's business, a disabled one says nothing.
    let ran_empty = matches!(
        s.source("rdma").map(|x| &x.state),
        Some(SourceState::Unavailable(_))
    ) && s.rdma.as_ref().is_none_or(|r| r.devices.is_empty());
    if !ran_empty {
        return vec![];
    }
    vec![Finding {
        rule: RuleId::RdmaDeviceMissing,
        severity: Severity::Critical,
        subject: Subject::default(),
        finding: "No RDMA device on this host: NCCL falls back to NET/Socket (TCP)".into(),
        evidence: "/sys/class/infiniband is empty or absent; expected at least one device".into(),
        fix: "Load the NIC's RDMA driver (mlx5_ib, bnxt_re, irdma, ...) and check dmesg for firmware or driver errors".into(),
        verify: "ls /sys/class/infiniband; ibv_devinfo -l".into(),
    }]
}

fn collector_failing(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    s.sources
        .iter()
        .filter_map(|src| match &src.state {
            SourceState::Failed(why) => Some(Finding {
                rule: RuleId::CollectorFailing,
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
