//! Families of the verbs probes: round-trip histogram, rounds, failures by
//! reason, whether the last round worked, and when one last did.

use super::{Family, FamilySamples, FamilyUnit, HistogramValue, Labeled, MetricKind, Samples};
use crate::snapshot::Snapshot;

const SOURCE: &str = "ibverbs loopback probe: RDMA WRITE + SEND between two RC QPs of the port at its active MTU and the RoCE DSCP's traffic class, on the probe's own schedule (probes.interval, jittered); loopback never leaves the NIC (not the cable, switch or fabric)";
const PORT: &[&str] = &["device", "port"];

pub const RTT: Labeled<4> = Labeled::positional(Family {
    base: "roce_probe_rtt",
    kind: MetricKind::Histogram,
    unit: Some(FamilyUnit::Seconds),
    labels: &["device", "port", "gid_index", "op"],
    help: "Round trip of a probe (op=write_send: from posting an RDMA WRITE and a SEND to the SEND's completion, acknowledged by the responder QP), successful rounds only.",
    source: SOURCE,
});
pub const REQUESTS: Labeled<2> = Labeled::positional(Family {
    base: "roce_probe_requests",
    kind: MetricKind::Counter,
    unit: None,
    labels: PORT,
    help: "Probe rounds attempted on the port since the exporter started (successful or not).",
    source: SOURCE,
});
pub const FAILURES: Labeled<3> = Labeled::positional(Family {
    base: "roce_probe_failures",
    kind: MetricKind::Counter,
    unit: None,
    labels: &["device", "port", "reason"],
    help: "Failed probe rounds by reason: the step that failed (device_open, port_down, gid_index, alloc_pd, reg_mr, memlock, create_cq, create_qp, qp_init, qp_rtr, qp_rts, post_recv, post_send, poll_cq), a work completion error (wc_<ibv_wc_status>, e.g. wc_retry_exc_err), timeout or payload_mismatch.",
    source: SOURCE,
});
pub const SUCCESS: Labeled<2> = Labeled::positional(Family {
    base: "roce_probe_success",
    kind: MetricKind::Gauge,
    unit: None,
    labels: PORT,
    help: "1 when the port's last probe round succeeded, 0 when it failed (the reason is the failure counter that moved).",
    source: SOURCE,
});
pub const LAST_SUCCESS: Labeled<2> = Labeled::positional(Family {
    base: "roce_probe_last_success_timestamp",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    labels: PORT,
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
        let labels = [target.device.as_str(), port.as_str()];
        rtt.push_histogram(
            [
                &target.device,
                &port,
                &target.gid_index.to_string(),
                target.op(),
            ],
            HistogramValue {
                sum: stats.rtt.sum_seconds,
                count: stats.rtt.count,
                // prometheus-client's encoder accumulates the buckets itself
                buckets: stats.rtt.per_bucket(),
            },
        );
        requests.push(labels, stats.requests);
        for (reason, n) in &stats.failures {
            failures.push([&target.device, &port, reason], *n);
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
