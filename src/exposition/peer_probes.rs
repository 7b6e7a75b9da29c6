//! Families of the probes between hosts (`peer_probes:`): RTT histogram and
//! probe counters per local port and size class, per-peer losses for a
//! bounded set of peers only (the current sample and the top failing
//! ones), unknown senders dropped, endpoint fetches.

use super::{Family, FamilySamples, FamilyUnit, HistogramValue, Kind, Labeled, Samples};
use crate::snapshot::Snapshot;

const SOURCE: &str = "UD probes between hosts (peer_probes): small and MTU-sized datagrams from each local port to a rotating, bounded sample of the configured peers' responders on the same rail, echoed by the peer's responder";
const PORT: &[&str] = &["device", "port"];
const PORT_SIZE: &[&str] = &["device", "port", "size"];

pub const RTT: Labeled<2> = Labeled::new(Family {
    base: "roce_peer_probe_rtt",
    kind: Kind::Histogram,
    unit: Some(FamilyUnit::Seconds),
    labels: PORT,
    help: "Round trip of answered peer probes from this local port (all peers and sizes together: per port, not per peer).",
    source: SOURCE,
});
pub const SENT: Labeled<3> = Labeled::new(Family {
    base: "roce_peer_probe_sent",
    kind: Kind::Counter,
    unit: None,
    labels: PORT_SIZE,
    help: "Peer probes sent from this local port, by size (small: 64-byte payload; large: the port's MTU less the 40-byte GRH).",
    source: SOURCE,
});
pub const ANSWERED: Labeled<3> = Labeled::new(Family {
    base: "roce_peer_probe_answered",
    kind: Kind::Counter,
    unit: None,
    labels: PORT_SIZE,
    help: "Peer probes from this local port answered within the timeout, by size; sent minus answered is the loss.",
    source: SOURCE,
});
pub const PEER_LOST: Labeled<5> = Labeled::new(Family {
    base: "roce_peer_probe_peer_lost",
    kind: Kind::Gauge,
    unit: None,
    labels: &["device", "port", "peer", "peer_device", "size"],
    help: "Of the last 16 probes of a size to a peer port, how many were lost; only for the peers sampled now and the top failing others (at most 24 peers per local port), so the series do not grow with the fleet.",
    source: SOURCE,
});
pub const PEERS: Labeled<2> = Labeled::new(Family {
    base: "roce_peer_probe_peers",
    kind: Kind::Gauge,
    unit: None,
    labels: PORT,
    help: "Peer ports on this local port's rail (or all of them with peer_probes.all_to_all) whose endpoints are known now.",
    source: SOURCE,
});
pub const BASELINE: Labeled<2> = Labeled::new(Family {
    base: "roce_peer_probe_baseline_rtt",
    kind: Kind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    labels: PORT,
    help: "The port's own RTT baseline: the 25th percentile of the median small-probe RTTs of its last 600 rounds.",
    source: SOURCE,
});
pub const UNKNOWN: Labeled<2> = Labeled::new(Family {
    base: "roce_peer_probe_unknown_dropped",
    kind: Kind::Counter,
    unit: None,
    labels: PORT,
    help: "Datagrams received by this port's responder from senders that are no configured peer (GID and QPN) or that are no answer to a probe sent: dropped, not answered.",
    source: SOURCE,
});
pub const ANSWERED_FOR_PEERS: Labeled<2> = Labeled::new(Family {
    base: "roce_peer_probe_responder_answered",
    kind: Kind::Counter,
    unit: None,
    labels: PORT,
    help: "Probes from configured peers this port's responder echoed.",
    source: SOURCE,
});
pub const FETCH_ERRORS: Labeled<1> = Labeled::new(Family {
    base: "roce_peer_probe_endpoint_fetch_errors",
    kind: Kind::Counter,
    unit: None,
    labels: &["reason"],
    help: "Failed fetches of peers' endpoint documents, by reason (resolve, connect, timeout, status, parse, unsupported: an https:// peer, which the fetcher cannot reach yet).",
    source: SOURCE,
});
pub const CONFIGURED: Labeled<0> = Labeled::new(Family {
    base: "roce_peer_probe_peers_configured",
    kind: Kind::Gauge,
    unit: None,
    labels: &[],
    help: "Peer exporters configured (static list, DNS records or file), before fetching their endpoints.",
    source: SOURCE,
});

pub const FAMILIES: &[Family] = &[
    RTT.family,
    SENT.family,
    ANSWERED.family,
    PEER_LOST.family,
    PEERS.family,
    BASELINE.family,
    UNKNOWN.family,
    ANSWERED_FOR_PEERS.family,
    FETCH_ERRORS.family,
    CONFIGURED.family,
];

pub fn collect(snapshot: &Snapshot, out: &mut Vec<FamilySamples>) {
    let Some(r) = &snapshot.peer_probes else {
        return;
    };
    let mut rtt = Samples::new(&RTT);
    let mut sent = Samples::new(&SENT);
    let mut answered = Samples::new(&ANSWERED);
    let mut lost = Samples::new(&PEER_LOST);
    let mut peers = Samples::new(&PEERS);
    let mut baseline = Samples::new(&BASELINE);
    let mut unknown = Samples::new(&UNKNOWN);
    let mut served = Samples::new(&ANSWERED_FOR_PEERS);
    let mut fetch = Samples::new(&FETCH_ERRORS);
    let mut configured = Samples::new(&CONFIGURED);
    for (local, stats) in &r.ports {
        let port = local.port.to_string();
        let labels = [local.device.as_str(), port.as_str()];
        rtt.push_histogram(
            labels,
            HistogramValue {
                sum: stats.rtt.sum_seconds,
                count: stats.rtt.count,
                buckets: stats.rtt.per_bucket(),
            },
        );
        for (size, s) in [("small", stats.small), ("large", stats.large)] {
            sent.push([&local.device, &port, size], s.sent);
            answered.push([&local.device, &port, size], s.answered);
        }
        for (key, pair) in &stats.peers {
            let peer_device = format!("{}/{}", key.device, key.port);
            for (size, recent) in [("small", pair.recent_small), ("large", pair.recent_large)] {
                if !recent.is_empty() {
                    lost.push(
                        [&local.device, &port, &key.node, &peer_device, size],
                        u64::from(recent.lost()),
                    );
                }
            }
        }
        peers.push(labels, stats.peers_known as u64);
        if let Some(b) = stats.baseline_seconds {
            baseline.push(labels, b);
        }
        unknown.push(labels, stats.served.unknown_dropped);
        served.push(labels, stats.served.answered);
    }
    for (reason, n) in &r.fetch_errors {
        fetch.push([reason], *n);
    }
    configured.push([], r.peers_configured as u64);
    out.extend([
        rtt.into(),
        sent.into(),
        answered.into(),
        lost.into(),
        peers.into(),
        baseline.into(),
        unknown.into(),
        served.into(),
        fetch.into(),
        configured.into(),
    ]);
}
