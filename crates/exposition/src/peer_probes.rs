//! Families of the probes between hosts (`peer_probes:`): RTT histogram and
//! probe counters per local port and size class, per-peer losses for a
//! bounded set of peers only (the current sample and the top failing
//! ones), what the responder answered and refused, this node's own
//! endpoints (what the
//! Prometheus discovery mode of other exporters reads), and the discovery
//! side: requests made, failed and refused.

use super::labels::{label_set, NoLabels, PortLabels, PortReasonLabels, ReasonLabels};
use super::{Fam, Family, FamilySamples, FamilyUnit, HistogramValue, MetricKind, Row, Samples};
use crate::snapshot::Snapshot;
use roce_model::peer::{FetchReason, Refusal, RequestKind};

label_set! {
    /// A local port's probes of one size class (small, large).
    pub struct SizeLabels { device, port, size }
}

label_set! {
    /// A local port and a peer's port (`peer_device` is device/port).
    pub struct PeerLabels { device, port, peer, peer_device }
}

label_set! {
    /// A local port and a peer's port, in one size class.
    pub struct PeerSizeLabels { device, port, peer, peer_device, size }
}

label_set! {
    /// A local port and the clock its round trips are timed with.
    pub struct ClockLabels { device, port, clock }
}

label_set! {
    /// A kind of discovery request.
    pub struct RequestKindLabels { kind }
}

label_set! {
    /// A node name two peer addresses claim: the one holding it (probed)
    /// and the one refused, each with what proves its claim.
    pub struct ConflictLabels { node, holder, holder_proof, claimant, claimant_proof }
}

label_set! {
    /// This node's responder on one local port, as other nodes address it.
    pub struct EndpointLabels {
        node, device, port, device_index, gid, gid_index, qpn, mtu, subnet, rail, incarnation, wire,
    }
}

const SOURCE: &str = "UD probes between hosts (peer_probes): small and MTU-sized datagrams from each local port to a rotating, bounded sample of the configured peers' responders on the same rail, echoed by the peer's responder";

pub const RTT: Fam<PortLabels> = Fam::new(Row {
    base: "roce_peer_probe_rtt",
    kind: MetricKind::Histogram,
    unit: Some(FamilyUnit::Seconds),
    help: "Round trip of answered peer probes from this local port (all peers and sizes together: per port, not per peer).",
    source: SOURCE,
});
pub const SENT: Fam<SizeLabels> = Fam::new(Row {
    base: "roce_peer_probe_sent",
    kind: MetricKind::Counter,
    unit: None,
    help: "Peer probes sent from this local port and judged (answered or lost), by size (small: 64-byte payload; large: the port's active MTU; no large probe follows a lost small one). Probes pending on a peer still learning its peers are counted in roce_peer_probe_pending_total instead.",
    source: SOURCE,
});
pub const ANSWERED: Fam<SizeLabels> = Fam::new(Row {
    base: "roce_peer_probe_answered",
    kind: MetricKind::Counter,
    unit: None,
    help: "Peer probes from this local port answered within the timeout, by size; sent minus answered is the loss.",
    source: SOURCE,
});
pub const PEER_LOST: Fam<PeerSizeLabels> = Fam::new(Row {
    base: "roce_peer_probe_peer_lost",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Of the last 16 probes of a size to a peer port, how many were lost; only for the peers sampled now and the top failing others (at most 24 peers per local port), so the series do not grow with the fleet.",
    source: SOURCE,
});
pub const PEERS: Fam<PortLabels> = Fam::new(Row {
    base: "roce_peer_probe_peers",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Peer ports on this local port's rail (or all of them with peer_probes.all_to_all) whose endpoints are known now.",
    source: SOURCE,
});
pub const BASELINE: Fam<PortLabels> = Fam::new(Row {
    base: "roce_peer_probe_baseline_rtt",
    kind: MetricKind::Gauge,
    unit: Some(FamilyUnit::Seconds),
    help: "The port's own RTT baseline: the 25th percentile of the median small-probe RTTs of its last 600 rounds.",
    source: SOURCE,
});
pub const PEER_PENDING: Fam<PeerLabels> = Fam::new(Row {
    base: "roce_peer_probe_peer_pending",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 when the latest small probe to this peer port was pending: unanswered while the peer's endpoints document says it has not read every listed peer's endpoints yet (its first walk) and it has not answered this port since it started, so it may not know this node: neither answered nor lost. For the same bounded set of peers as roce_peer_probe_peer_lost.",
    source: SOURCE,
});
pub const PENDING: Fam<PortLabels> = Fam::new(Row {
    base: "roce_peer_probe_pending",
    kind: MetricKind::Counter,
    unit: None,
    help: "Probes from this local port left unanswered by a peer still learning its peers (see roce_peer_probe_peer_pending): neither answered nor lost.",
    source: SOURCE,
});
pub const RESPONDER_REFUSED: Fam<PortReasonLabels> = Fam::new(Row {
    base: "roce_peer_probe_responder_refused",
    kind: MetricKind::Counter,
    unit: None,
    help: "Datagrams this port's responder left unanswered, by reason: foreign (not a peer-probe message), wire_version (a peer-probe message of another wire version: an exporter of another release), stray_answer (an echo or challenge answering no probe in flight: answers are never answered), not_admitted (a probe from a sender that is not one of this port's peers: never answered), unproven (a peer's probe without its valid cookie once the 10 challenges/s of the responder are spent), rate_limited (a proven sender above 100 echoes/s), total_budget (above the responder's 500 echoes/s or 1 MiB/s in all), answer_failed (no address handle for the sender, or the post failed).",
    source: SOURCE,
});
pub const CHALLENGED: Fam<PortLabels> = Fam::new(Row {
    base: "roce_peer_probe_responder_challenged",
    kind: MetricKind::Counter,
    unit: None,
    help: "Probes from this port's peers without a valid cookie that its responder answered with a challenge (the cookie to probe with: the 40-byte header, at most 10 per second in all): a prober's first probe, one after this exporter restarted, or probes forged in a peer's name.",
    source: SOURCE,
});
pub const CLOCK: Fam<ClockLabels> = Fam::new(Row {
    base: "roce_peer_probe_rtt_clock_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "The clock this local port's round trips are measured with (value 1): device (the device's completion timestamps of the probe's send and the echo's receive, where the device keeps a clock: mlx5) or host (the monotonic clock around the post and the answer's receive completion: includes this host's completion handling); both less the responder's hold time.",
    source: SOURCE,
});
pub const ANSWERED_FOR_PEERS: Fam<PortLabels> = Fam::new(Row {
    base: "roce_peer_probe_responder_answered",
    kind: MetricKind::Counter,
    unit: None,
    help:
        "Proven probes from this port's peers (with their valid cookie) that its responder echoed.",
    source: SOURCE,
});
const DISCOVERY: &str = "The peer-probe coordinator (roce_fleet::runner): the peer list, endpoint documents or the Prometheus query, and their admission (roce_fleet::peer_endpoints)";

pub const FETCH_ERRORS: Fam<ReasonLabels> = Fam::new(Row {
    base: "roce_peer_probe_endpoint_fetch_errors",
    kind: MetricKind::Counter,
    unit: None,
    help: "Failed requests for peer endpoints (documents or the Prometheus query), by reason: resolve, connect, timeout (the absolute fetch deadline), tls, status (not 200), redirect (never followed), too_large, parse, unsupported (https without a CA file), plain_http_credentials (credentials never sent over http).",
    source: DISCOVERY,
});
pub const REFUSED: Fam<ReasonLabels> = Fam::new(Row {
    base: "roce_peer_probe_endpoints_refused",
    kind: MetricKind::Counter,
    unit: None,
    help: "Peer endpoints refused before any probe was aimed at them, by reason: node_mismatch (another node than the peer it came from), node_claimed (a node another peer address holds, whose claim this one proves nothing more than: see roce_peer_probe_node_conflict_info); the GID not a unicast host of this node's fabric: unspecified, loopback, multicast, broadcast (255.255.255.255 or a port subnet's), network (a port subnet's network address), link_local (without peer_probes.allow_link_local), reserved (0/8, 240/4, ::/8, 100::/64, fec0::/10), documentation (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20), off_fabric (in none of the ports' subnets nor peer_probes.fabric_networks or the rail networks); qpn (outside 2..0xFFFFFF), qkey, mtu, name (not label-safe), off_rail (outside the rail networks, or a subnet claim its own GID is not in), wire_version (a responder of another peer-probe wire version: an exporter of another release), too_many (more than 64 endpoints in one document: all refused; past 100,000 in one Prometheus answer), malformed (a Prometheus series that is no endpoint).",
    source: DISCOVERY,
});
pub const REQUESTS: Fam<RequestKindLabels> = Fam::new(Row {
    base: "roce_peer_probe_discovery_requests",
    kind: MetricKind::Counter,
    unit: None,
    help: "Requests this node made to find peer endpoints, by kind: document (a peer's /peer-probe/endpoints), prometheus (one instant query), dns (A/AAAA or SRV lookups of the peer list).",
    source: DISCOVERY,
});
pub const CONFIGURED: Fam<NoLabels> = Fam::new(Row {
    base: "roce_peer_probe_peers_configured",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Peers listed: exporter addresses of the peer list (static, DNS, SRV, file), or instances in the Prometheus answer.",
    source: DISCOVERY,
});
pub const KNOWN: Fam<NoLabels> = Fam::new(Row {
    base: "roce_peer_probe_peers_admitted",
    kind: MetricKind::Gauge,
    unit: None,
    help: "Listed peers whose endpoints are held now, after admission (documents are fetched as the walk reaches each peer, so this grows to the listed count over the first walk).",
    source: DISCOVERY,
});
pub const CONFLICTS: Fam<ConflictLabels> = Fam::new(Row {
    base: "roce_peer_probe_node_conflict_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "A node name claimed by two peer addresses (value 1; at most 16 series): holder is the address whose endpoints are probed under that name, claimant the one refused (node_claimed); proofs: name (the peer is addressed by that name: TLS certificate or DNS), target_label (the Prometheus target's own node label), dns (the name resolves to the address), none. A later claim takes a node over only when it proves what the holder's does not.",
    source: DISCOVERY,
});
pub const LEARNING: Fam<NoLabels> = Fam::new(Row {
    base: "roce_peer_probe_learning",
    kind: MetricKind::Gauge,
    unit: None,
    help: "1 while this node has not yet tried every listed peer's endpoints document once (its first walk, paced at 3 new documents/s while the peers are starting too, 50/s otherwise): its endpoints document says so, and peers it does not know yet call their unanswered probes pending.",
    source: DISCOVERY,
});
pub const ENDPOINT_INFO: Fam<EndpointLabels> = Fam::new(Row {
    base: "roce_peer_probe_endpoint_info",
    kind: MetricKind::Gauge,
    unit: None,
    help: "This node's own peer-probe responder per local port (value 1), the endpoint other exporters probe: what peer_probes.prometheus reads back from the fleet's Prometheus. One series per open RDMA port; present only while peer probes are on.",
    source: SOURCE,
});

pub const FAMILIES: &[Family] = &[
    RTT.family,
    SENT.family,
    ANSWERED.family,
    PEER_LOST.family,
    PEERS.family,
    BASELINE.family,
    PEER_PENDING.family,
    PENDING.family,
    RESPONDER_REFUSED.family,
    CHALLENGED.family,
    CLOCK.family,
    ANSWERED_FOR_PEERS.family,
    FETCH_ERRORS.family,
    REFUSED.family,
    REQUESTS.family,
    CONFIGURED.family,
    KNOWN.family,
    CONFLICTS.family,
    LEARNING.family,
    ENDPOINT_INFO.family,
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
    let mut peer_pending = Samples::new(&PEER_PENDING);
    let mut pending = Samples::new(&PENDING);
    let mut responder_refused = Samples::new(&RESPONDER_REFUSED);
    let mut challenged = Samples::new(&CHALLENGED);
    let mut clock = Samples::new(&CLOCK);
    let mut served = Samples::new(&ANSWERED_FOR_PEERS);
    let mut fetch = Samples::new(&FETCH_ERRORS);
    let mut refused = Samples::new(&REFUSED);
    let mut requests = Samples::new(&REQUESTS);
    let mut configured = Samples::new(&CONFIGURED);
    let mut known = Samples::new(&KNOWN);
    let mut conflicts = Samples::new(&CONFLICTS);
    let mut learning = Samples::new(&LEARNING);
    let mut info = Samples::new(&ENDPOINT_INFO);
    for (local, stats) in &r.ports {
        let port = local.port.to_string();
        let device = local.device.as_str();
        let port_labels = PortLabels {
            device,
            port: &port,
        };
        rtt.push_histogram(
            port_labels,
            HistogramValue {
                sum: stats.rtt.sum_seconds,
                count: stats.rtt.count,
                buckets: stats.rtt.per_bucket(),
            },
        );
        for (size, s) in [("small", stats.small), ("large", stats.large)] {
            let labels = SizeLabels {
                device,
                port: &port,
                size,
            };
            sent.push(labels, s.sent);
            answered.push(labels, s.answered);
        }
        for (key, pair) in &stats.peers {
            let peer_device = format!("{}/{}", key.device, key.port);
            for (size, recent) in [("small", pair.recent_small), ("large", pair.recent_large)] {
                if !recent.is_empty() {
                    let labels = PeerSizeLabels {
                        device,
                        port: &port,
                        peer: &key.node,
                        peer_device: &peer_device,
                        size,
                    };
                    lost.push(labels, u64::from(recent.lost()));
                }
            }
            if pair.pending > 0 {
                let labels = PeerLabels {
                    device,
                    port: &port,
                    peer: &key.node,
                    peer_device: &peer_device,
                };
                peer_pending.push(labels, u64::from(pair.last_pending));
            }
        }
        peers.push(port_labels, stats.peers_known as u64);
        if let Some(b) = stats.baseline_seconds {
            baseline.push(port_labels, b);
        }
        pending.push(port_labels, stats.pending);
        for reason in roce_probe::peer::DatagramRefusal::ALL {
            let labels = PortReasonLabels {
                device,
                port: &port,
                reason: reason.as_str(),
            };
            responder_refused.push(labels, stats.served.refused(reason));
        }
        challenged.push(port_labels, stats.served.challenged);
        let labels = ClockLabels {
            device,
            port: &port,
            clock: stats.clock.as_str(),
        };
        clock.push(labels, 1u64);
        served.push(port_labels, stats.served.answered);
    }
    for e in &r.endpoints {
        let (port, index, gid_index, qpn, mtu, gid, incarnation, wire) = (
            e.port.to_string(),
            e.device_index.to_string(),
            e.gid_index.to_string(),
            e.qpn.to_string(),
            e.mtu.to_string(),
            e.gid.to_string(),
            e.incarnation.to_string(),
            e.wire.to_string(),
        );
        let labels = EndpointLabels {
            node: &e.node,
            device: &e.device,
            port: &port,
            device_index: &index,
            gid: &gid,
            gid_index: &gid_index,
            qpn: &qpn,
            mtu: &mtu,
            subnet: e.subnet.as_deref().unwrap_or(""),
            rail: e.rail.as_deref().unwrap_or(""),
            incarnation: &incarnation,
            wire: &wire,
        };
        info.push(labels, 1u64);
    }
    if let Some(d) = &snapshot.peer_discovery {
        // Every reason from the start (0 until it happens), so that
        // increase() sees the first one.
        for reason in FetchReason::ALL {
            let n = d.fetch_errors.get(&reason).copied().unwrap_or(0);
            fetch.push(
                ReasonLabels {
                    reason: reason.as_str(),
                },
                n,
            );
        }
        for reason in Refusal::ALL {
            let n = d.refused.get(&reason).copied().unwrap_or(0);
            refused.push(
                ReasonLabels {
                    reason: reason.as_str(),
                },
                n,
            );
        }
        for kind in RequestKind::ALL {
            let n = d.requests.get(&kind).copied().unwrap_or(0);
            requests.push(
                RequestKindLabels {
                    kind: kind.as_str(),
                },
                n,
            );
        }
        configured.push(NoLabels, d.peers_configured as u64);
        known.push(NoLabels, d.peers_known as u64);
        for c in &d.conflicts {
            conflicts.push(
                ConflictLabels {
                    node: &c.node,
                    holder: &c.holder,
                    holder_proof: c.holder_proof,
                    claimant: &c.claimant,
                    claimant_proof: c.claimant_proof,
                },
                1u64,
            );
        }
        learning.push(NoLabels, u64::from(d.learning));
    }
    out.extend([
        rtt.into(),
        sent.into(),
        answered.into(),
        lost.into(),
        peers.into(),
        baseline.into(),
        peer_pending.into(),
        pending.into(),
        responder_refused.into(),
        challenged.into(),
        clock.into(),
        served.into(),
        fetch.into(),
        refused.into(),
        requests.into(),
        configured.into(),
        known.into(),
        conflicts.into(),
        learning.into(),
        info.into(),
    ]);
}
