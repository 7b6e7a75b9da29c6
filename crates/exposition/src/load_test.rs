//! Families of the load test: the last `check --load`'s bandwidth per port,
//! message size and run scope (every port at once, or each alone), the
//! node's aggregate, the line rates they are measured against, when it
//! ran, how each stream ended, and this node's responder (sessions served,
//! bytes received, requests refused by reason).

use super::labels::{label_set, NoLabels, ReasonLabels};
use super::{Fam, Family, FamilySamples, FamilyUnit, MetricKind, Row, Samples};
use crate::load::{LoadRefusal, SESSION_ENDS};
use crate::snapshot::Snapshot;

label_set! {
    /// A port's stream in one run of a load test.
    pub struct RunPortLabels { device, port, scope }
}

label_set! {
    /// One message size of a port's stream.
    pub struct RunPortSizeLabels { device, port, scope, size }
}

label_set! {
    /// How a port's stream ended, against whom, from which memory.
    pub struct RunOutcomeLabels { device, port, scope, outcome, peer, memory }
}

label_set! {
    /// How a responder session ended.
    pub struct EndedLabels { ended }
}

const SOURCE: &str = "load test: the results file `roce_exporter check --load` writes (load_test.results_file): RDMA WRITE-with-immediate streams over RC QPs to a peer's responder, bytes completed in perftest's sample window (a quarter of each size's time cut at each end)";
const RESPONDER: &str =
    "load-test responder (load_test.responder): sessions other nodes started on this node's ports";

pub const BANDWIDTH: Fam<RunPortSizeLabels> = Fam::new(Row {
    base: "roce_load_test_bandwidth_bytes_per_second",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Bandwidth of the port's RDMA WRITE stream at one message size (bytes, base 10), scope all: every port loaded at once, alone: the port alone; from the last load test.",
    source: SOURCE,
});
pub const EXPECTED: Fam<RunPortLabels> = Fam::new(Row {
    base: "roce_load_test_expected_bytes_per_second",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The port's line rate after its line encoding, the bandwidth was measured against.",
    source: SOURCE,
});
pub const MESSAGE_SIZE: Fam<RunPortLabels> = Fam::new(Row {
    base: "roce_load_test_message_size_bytes",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The largest message size that gave a bandwidth figure (the one the verdict reads).",
    source: SOURCE,
});
pub const BYTES: Fam<RunPortLabels> = Fam::new(Row {
    base: "roce_load_test_written_bytes",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Bytes the port's stream wrote (completed) in the run.",
    source: SOURCE,
});
pub const OUTCOME: Fam<RunOutcomeLabels> = Fam::new(Row {
    base: "roce_load_test_outcome_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 per port and run of the last load test: outcome completed, aborted (the stream stopped early) or not_run (no responder granted a session); peer the responder node; memory host or gpu (GPU memory through dma-buf).",
    source: SOURCE,
});
pub const NODE: Fam<NoLabels> = Fam::new(Row {
    base: "roce_load_test_node_bandwidth_bytes_per_second",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The node's bandwidth with every port loaded at once: the sum of the ports' figures at their largest message size.",
    source: SOURCE,
});
pub const NODE_EXPECTED: Fam<NoLabels> = Fam::new(Row {
    base: "roce_load_test_node_expected_bytes_per_second",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The sum of the loaded ports' line rates after encoding.",
    source: SOURCE,
});
pub const TIMESTAMP: Fam<NoLabels> = Fam::new(Row {
    base: "roce_load_test_timestamp",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Unix time at which the last load test ended.",
    source: SOURCE,
});
pub const DURATION: Fam<NoLabels> = Fam::new(Row {
    base: "roce_load_test_duration",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "Time the last load test's streams ran, every run together.",
    source: SOURCE,
});
pub const SESSIONS: Fam<EndedLabels> = Fam::new(Row {
    base: "roce_load_test_responder_sessions",
    kind: MetricKind::Counter,
    unit: None,
    help: "Load-test sessions this node's responder served, by how they ended: stopped (the requester's end request, a reload), idle (the requester went silent or died), deadline, byte_cap, failed.",
    source: RESPONDER,
});
pub const RECEIVED: Fam<NoLabels> = Fam::new(Row {
    base: "roce_load_test_responder_received_bytes",
    kind: MetricKind::Counter,
    unit: None,
    help: "Bytes other nodes' load tests wrote into this node, counted by the responder (one receive completion per message).",
    source: RESPONDER,
});
pub const REFUSED: Fam<ReasonLabels> = Fam::new(Row {
    base: "roce_load_test_responder_refused",
    kind: MetricKind::Counter,
    unit: None,
    help: "Load-test requests the responder refused, by reason: disabled, unauthenticated (not TLS with authentication), malformed, gid (not a unicast host address), off_rail (in no subnet of this node's ports), busy (a test already runs on the port), port_loaded (the port carries more than load_test.max_busy_share of its line rate), over_cap, setup_failed, unknown_session.",
    source: RESPONDER,
});
pub const ACTIVE: Fam<NoLabels> = Fam::new(Row {
    base: "roce_load_test_responder_active_sessions",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Load-test sessions running on this node's responder now (at most one per port).",
    source: RESPONDER,
});

pub const FAMILIES: &[Family] = &[
    BANDWIDTH.family,
    EXPECTED.family,
    MESSAGE_SIZE.family,
    BYTES.family,
    OUTCOME.family,
    NODE.family,
    NODE_EXPECTED.family,
    TIMESTAMP.family,
    DURATION.family,
    SESSIONS.family,
    RECEIVED.family,
    REFUSED.family,
    ACTIVE.family,
];

pub fn collect(snapshot: &Snapshot, out: &mut Vec<FamilySamples>) {
    let Some(load) = &snapshot.load_test else {
        return;
    };
    if let Some(r) = load.results.as_deref() {
        let mut bandwidth = Samples::new(&BANDWIDTH);
        let mut expected = Samples::new(&EXPECTED);
        let mut size = Samples::new(&MESSAGE_SIZE);
        let mut bytes = Samples::new(&BYTES);
        let mut outcome = Samples::new(&OUTCOME);
        let mut node = Samples::new(&NODE);
        let mut node_expected = Samples::new(&NODE_EXPECTED);
        let mut timestamp = Samples::new(&TIMESTAMP);
        let mut duration = Samples::new(&DURATION);
        for run in &r.runs {
            let scope = run.scope.as_str();
            for p in &run.ports {
                let port = p.port.to_string();
                let labels = RunPortLabels {
                    device: &p.device,
                    port: &port,
                    scope,
                };
                for s in &p.sizes {
                    if let Some(b) = s.bytes_per_second {
                        let size = s.size.to_string();
                        bandwidth.push(
                            RunPortSizeLabels {
                                device: &p.device,
                                port: &port,
                                scope,
                                size: &size,
                            },
                            b,
                        );
                    }
                }
                if let Some(e) = p.expected_bytes_per_second {
                    expected.push(labels, e);
                }
                if let Some((s, _)) = p.at_largest() {
                    size.push(labels, s);
                }
                bytes.push(labels, p.bytes);
                outcome.push(
                    RunOutcomeLabels {
                        device: &p.device,
                        port: &port,
                        scope,
                        outcome: p.outcome.as_str(),
                        peer: p.peer_node.as_deref().unwrap_or(""),
                        memory: &p.memory,
                    },
                    1u64,
                );
            }
            if run.scope == crate::load::RunScope::All {
                if let Some(n) = run.node_bytes_per_second() {
                    node.push(NoLabels, n);
                }
                if let Some(e) = run.node_expected() {
                    node_expected.push(NoLabels, e);
                }
            }
        }
        timestamp.push(NoLabels, r.finished_at);
        duration.push(NoLabels, r.runs.iter().map(|x| x.seconds).sum::<f64>());
        out.extend([
            bandwidth.into(),
            expected.into(),
            size.into(),
            bytes.into(),
            outcome.into(),
            node.into(),
            node_expected.into(),
            timestamp.into(),
            duration.into(),
        ]);
    }
    if let Some(resp) = &load.responder {
        let mut sessions = Samples::new(&SESSIONS);
        let mut received = Samples::new(&RECEIVED);
        let mut refused = Samples::new(&REFUSED);
        let mut active = Samples::new(&ACTIVE);
        for ended in SESSION_ENDS {
            sessions.push(
                EndedLabels { ended },
                resp.sessions.get(ended).copied().unwrap_or(0),
            );
        }
        received.push(NoLabels, resp.bytes);
        for reason in LoadRefusal::ALL {
            refused.push(
                ReasonLabels {
                    reason: reason.as_str(),
                },
                resp.refused.get(&reason).copied().unwrap_or(0),
            );
        }
        active.push(NoLabels, resp.active.len() as u64);
        out.extend([
            sessions.into(),
            received.into(),
            refused.into(),
            active.into(),
        ]);
    }
}
