//! Families of the verbs probes: round-trip histogram, rounds, failures by
//! reason, whether the last round worked, and when one last did.

use super::labels::{label_set, PortLabels, PortReasonLabels};
use super::{Fam, Family, FamilySamples, FamilyUnit, HistogramValue, MetricKind, Row, Samples};
use crate::snapshot::Snapshot;

label_set! {
    /// A probe of an RDMA port: the GID it is sent through and its
    /// operation.
    pub struct ProbeOpLabels { device, port, gid_index, op }
}

const SOURCE: &str = "ibverbs loopback probe: RDMA WRITE + SEND between two RC QPs of the port at its active MTU and the RoCE DSCP's traffic class, on the probe's own schedule (probes.interval, jittered); loopback never leaves the NIC (not the cable, switch or fabric)";

pub const RTT: Fam<ProbeOpLabels> = Fam::new(Row {
    base: "roce_probe_rtt",
    kind: MetricKind::Histogram,
    unit: Some(FamilyUnit::Seconds),
    help: "Round trip of a probe (op=write_send: from posting an RDMA WRITE and a SEND to the SEND's completion, acknowledged by the responder QP), successful rounds only.",
    source: SOURCE,
});
pub const REQUESTS: Fam<PortLabels> = Fam::new(Row {
    base: "roce_probe_requests",
    kind: MetricKind::Counter,
    unit: None,
    help: "Probe rounds attempted on the port since the exporter started (successful or not).",
    source: SOURCE,
});
pub const FAILURES: Fam<PortReasonLabels> = Fam::new(Row {
    base: "roce_probe_failures",
    kind: MetricKind::Counter,
    unit: None,
    help: "Failed probe rounds by reason: the step that failed (device_open, port_down, gid_index, alloc_pd, reg_mr, memlock, create_cq, create_qp, qp_init, qp_rtr, qp_rts, post_recv, post_send, poll_cq), a work completion error (wc_<ibv_wc_status>, e.g. wc_retry_exc_err), timeout or payload_mismatch.",
    source: SOURCE,
});
pub const SUCCESS: Fam<PortLabels> = Fam::new(Row {
    base: "roce_probe_success",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when the port's last probe round succeeded, 0 when it failed (the reason is the failure counter that moved).",
    source: SOURCE,
});
pub const LAST_SUCCESS: Fam<PortLabels> = Fam::new(Row {
    base: "roce_probe_last_success_timestamp",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Unix time of the port's last successful probe round (absent before the first one).",
    source: SOURCE,
});

pub const FAMILIES: &[Family] = &[
    RTT.family,
    REQUESTS.family,
    FAILURES.family,
    SUCCESS.family,
    LAST_SUCCESS.family,
];

pub fn collect(snapshot: &Snapshot, out: &mut Vec<FamilySamples>) {
    let Some(probes) = &snapshot.probes else {
        return;
    };
    let mut rtt = Samples::new(&RTT);
    let mut requests = Samples::new(&REQUESTS);
    let mut failures = Samples::new(&FAILURES);
    let mut success = Samples::new(&SUCCESS);
    let mut last = Samples::new(&LAST_SUCCESS);
    for (target, stats) in &probes.targets {
        let port = target.port.to_string();
        let labels = PortLabels {
            device: &target.device,
            port: &port,
        };
        let op = ProbeOpLabels {
            device: &target.device,
            port: &port,
            gid_index: &target.gid_index.to_string(),
            op: target.op(),
        };
        rtt.push_histogram(
            op,
            HistogramValue {
                sum: stats.rtt.sum_seconds,
                count: stats.rtt.count,
                // prometheus-client's encoder accumulates the buckets itself
                buckets: stats.rtt.per_bucket(),
            },
        );
        requests.push(labels, stats.requests);
        for (reason, n) in &stats.failures {
            let labels = PortReasonLabels {
                device: &target.device,
                port: &port,
                reason,
            };
            failures.push(labels, *n);
        }
        if let Some(ok) = stats.last_ok {
            success.push(labels, ok);
        }
        if let Some(t) = stats
            .last_success
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        {
            last.push(labels, t.as_secs_f64());
        }
    }
    out.extend([
        rtt.into(),
        requests.into(),
        failures.into(),
        success.into(),
        last.into(),
    ]);
}
