//! Rules on the probes between hosts (`peer_probes:`): they localize a
//! fault by comparing pairs. A local port that reaches none of several
//! peers is the local side; a peer that no local port reaches is that
//! peer; one pair losing probes while the port reaches others is that
//! fabric path; large probes lost while small ones pass is a path MTU
//! below the port's; an RTT far above the port's own baseline is
//! congestion. They judge the prober's last [`Recent::LEN`] outcomes per
//! pair and size (what is happening now), not cumulative counters, so they
//! need no history and clear as soon as the probes pass again. A port that
//! knows no peer on its rail probes nothing: that is said too (info), never
//! silence.

use std::collections::BTreeMap;

use roce_probe::peer::{PairStats, PeerKey, PeerResults, PortStats, Recent};

use super::ports::find_port;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::PeerProbePortIsolated,
        checks: "a local port reaches at least one of the peers on its rail",
        evaluate: port_isolated,
    },
    Rule {
        id: RuleId::PeerProbePeerUnreachable,
        checks: "every peer is reached from at least one local port",
        evaluate: peer_unreachable,
    },
    Rule {
        id: RuleId::PeerProbePathLoss,
        checks: "no pair of ports loses more than 10% of its recent small probes while the rest of them pass",
        evaluate: path_loss,
    },
    Rule {
        id: RuleId::PeerProbePathMtu,
        checks: "MTU-sized probes pass wherever small probes pass",
        evaluate: path_mtu,
    },
    Rule {
        id: RuleId::PeerProbeNoPeerOnRail,
        checks: "every local port with a responder knows at least one peer port on its rail once the peer list was read",
        evaluate: no_peer_on_rail,
    },
    Rule {
        id: RuleId::PeerProbeRttAboveBaseline,
        checks: "the recent peer-probe RTT of a port (median over its last rounds) stays within 10 times its own baseline (a low percentile of its history)",
        evaluate: rtt_above_baseline,
    },
];

/// Outcomes a pair needs before it is judged: fewer say nothing.
pub const MIN_OUTCOMES: u32 = 4;
/// Loss ratio of a pair's recent small probes above which the path is
/// called lossy (with at least two lost: one loss in 16 is noise).
pub const MAX_LOSS_RATIO: f64 = 0.1;
/// RTT factor over the port's baseline
/// ([`roce_probe::peer::BASELINE_PERCENTILE`] of its round medians), and
/// the rounds of history the baseline needs before it is trusted. Recent
/// is the median of the last [`roce_probe::peer::RECENT_ROUNDS`] round
/// medians, so only an elevation held over most of them fires.
pub const RTT_FACTOR: f64 = 10.0;
pub const MIN_RTT_ROUNDS: usize = 30;
/// The RTT must also exceed the baseline by this much (seconds): a 2 µs
/// baseline times ten is still no congestion.
pub const MIN_RTT_EXCESS: f64 = 50e-6;

/// The latest snapshot and its peer-probe results, when there are any.
fn latest_results<'a>(ctx: &'a Context) -> Option<(&'a Snapshot, &'a PeerResults)> {
    let latest = ctx.latest()?;
    Some((latest, latest.peer_probes.as_ref()?))
}

fn subject(s: &Snapshot, device: &str, port: u8) -> Subject {
    let netdev = find_port(s, device, u32::from(port)).and_then(|(_, p)| p.netdev.clone());
    Subject::port(device, u32::from(port), netdev.as_deref())
}

fn judged(r: &Recent) -> bool {
    r.len() >= MIN_OUTCOMES
}

fn all_lost(r: &Recent) -> bool {
    judged(r) && r.answered() == 0
}

/// A port that reaches none of at least two judged peers.
fn isolated(stats: &PortStats) -> bool {
    let judged: Vec<&PairStats> = stats
        .peers
        .values()
        .filter(|p| judged(&p.recent_small))
        .collect();
    judged.len() >= 2 && judged.iter().all(|p| all_lost(&p.recent_small))
}

fn peer_name(k: &PeerKey) -> String {
    format!("{} {} port {}", k.node, k.device, k.port)
}

fn port_isolated(ctx: &Context) -> Vec<Finding> {
    let Some((latest, r)) = latest_results(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (local, stats) in &r.ports {
        if !isolated(stats) {
            continue;
        }
        let subject = subject(latest, &local.device, local.port);
        out.push(Finding {
            rule: RuleId::PeerProbePortIsolated,
            severity: Severity::Critical,
            finding: format!(
                "{}: no peer answers probes from this port: the local NIC, its cable or optic, or its switch port",
                subject.describe()
            ),
            evidence: format!(
                "all of the last probes to each of the {} peer ports probed were lost ({} peer ports on the rail known)",
                stats.peers.values().filter(|p| judged(&p.recent_small)).count(),
                stats.peers_known
            ),
            fix: "Check the port's link and the switch port it is cabled to (optic, FEC, VLAN, the switch's port counters); other local ports reaching the same peers rule out the peers".into(),
            verify: format!(
                "curl -s localhost:9879/metrics | grep 'roce_peer_probe_answered_total{{device=\"{}\",port=\"{}\"'",
                local.device, local.port
            ),
            subject,
        });
    }
    out
}

/// Peer ports no judged local port reaches (isolated local ports excluded:
/// their failures are their own).
fn unreachable_peers(r: &PeerResults) -> BTreeMap<PeerKey, usize> {
    let mut tried: BTreeMap<PeerKey, (usize, usize)> = BTreeMap::new();
    for (_, stats) in &r.ports {
        if isolated(stats) {
            continue;
        }
        for (k, p) in &stats.peers {
            if !judged(&p.recent_small) {
                continue;
            }
            let e = tried.entry(k.clone()).or_default();
            e.0 += 1;
            if all_lost(&p.recent_small) {
                e.1 += 1;
            }
        }
    }
    tried
        .into_iter()
        .filter(|(_, (n, lost))| *n > 0 && n == lost)
        .map(|(k, (n, _))| (k, n))
        .collect()
}

fn peer_unreachable(ctx: &Context) -> Vec<Finding> {
    let Some((_, r)) = latest_results(ctx) else {
        return vec![];
    };
    let peers = unreachable_peers(r);
    if peers.is_empty() {
        return vec![];
    }
    // One finding for all such peers: the finding series stay bounded
    // whatever the fleet does.
    let names: Vec<String> = peers.keys().take(10).map(peer_name).collect();
    vec![Finding {
        rule: RuleId::PeerProbePeerUnreachable,
        severity: Severity::Warning,
        subject: Subject::default(),
        finding: format!(
            "{} peer port(s) answer no probe from any local port: {}{}",
            peers.len(),
            names.join(", "),
            if peers.len() > names.len() { ", …" } else { "" }
        ),
        evidence: format!(
            "all of the last probes from every local port that tried were lost ({} local port(s) tried the first)",
            peers.values().next().copied().unwrap_or(0)
        ),
        fix: "Look at that peer: its exporter and responder (/peer-probe/endpoints), its RDMA port, its link; when many peers fail at once look at the fabric between".into(),
        verify: "curl -s localhost:9879/metrics | grep roce_peer_probe_peer_lost".into(),
    }]
}

fn path_loss(ctx: &Context) -> Vec<Finding> {
    let Some((latest, r)) = latest_results(ctx) else {
        return vec![];
    };
    let unreachable = unreachable_peers(r);
    let mut out = Vec::new();
    for (local, stats) in &r.ports {
        if isolated(stats) {
            continue;
        }
        let lossy: Vec<(&PeerKey, &PairStats)> = stats
            .peers
            .iter()
            .filter(|(k, p)| {
                let s = &p.recent_small;
                judged(s)
                    && s.answered() > 0
                    && !unreachable.contains_key(*k)
                    && s.lost() >= 2
                    && f64::from(s.lost()) / f64::from(s.len()) > MAX_LOSS_RATIO
            })
            .collect();
        if lossy.is_empty() {
            continue;
        }
        let passing = stats
            .peers
            .iter()
            .filter(|(k, p)| {
                judged(&p.recent_small)
                    && p.recent_small.lost() == 0
                    && !lossy.iter().any(|(l, _)| l == k)
            })
            .count();
        let subject = subject(latest, &local.device, local.port);
        let detail: Vec<String> = lossy
            .iter()
            .take(5)
            .map(|(k, p)| {
                format!(
                    "{}: {} of the last {} lost",
                    peer_name(k),
                    p.recent_small.lost(),
                    p.recent_small.len()
                )
            })
            .collect();
        out.push(Finding {
            rule: RuleId::PeerProbePathLoss,
            severity: Severity::Warning,
            finding: format!(
                "{}: part of the probes to {} peer port(s) are lost while the rest are answered{}: the fabric path between",
                subject.describe(),
                lossy.len(),
                if passing > 0 {
                    format!(", and {passing} other peer port(s) lose none")
                } else {
                    String::new()
                }
            ),
            evidence: format!(
                "{}; expected <= {}% loss",
                detail.join("; "),
                MAX_LOSS_RATIO * 100.0
            ),
            fix: "Trace the path between the two ports (the switch ports and links on it: error counters, drops, an ECMP member with a bad link); the peer's other ports and other peers passing exclude both ends".into(),
            verify: "curl -s localhost:9879/metrics | grep roce_peer_probe_peer_lost".into(),
            subject,
        });
    }
    out
}

fn path_mtu(ctx: &Context) -> Vec<Finding> {
    let Some((latest, r)) = latest_results(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (local, stats) in &r.ports {
        let failing: Vec<&PeerKey> = stats
            .peers
            .iter()
            .filter(|(_, p)| {
                all_lost(&p.recent_large)
                    && judged(&p.recent_small)
                    && p.recent_small.answered() * 2 >= p.recent_small.len()
            })
            .map(|(k, _)| k)
            .collect();
        if failing.is_empty() {
            continue;
        }
        let subject = subject(latest, &local.device, local.port);
        let names: Vec<String> = failing.iter().take(5).map(|k| peer_name(k)).collect();
        out.push(Finding {
            rule: RuleId::PeerProbePathMtu,
            severity: Severity::Warning,
            finding: format!(
                "{}: MTU-sized probes to {} peer port(s) are lost while small ones pass: the path MTU is below this port's {} bytes",
                subject.describe(),
                failing.len(),
                local.mtu
            ),
            evidence: format!(
                "{}: every recent {}-byte probe lost, most 64-byte probes answered",
                names.join(", "),
                local.mtu.saturating_sub(roce_probe::peer::GRH_LEN)
            ),
            fix: "Make the MTU equal end to end: the peer's netdev MTU and every switch port on the path must carry the RoCE MTU (e.g. 9000 for a 4096 RoCE MTU)".into(),
            verify: "ip link show  # on both hosts; and the switch ports' MTU".into(),
            subject,
        });
    }
    out
}

fn rtt_above_baseline(ctx: &Context) -> Vec<Finding> {
    let Some((latest, r)) = latest_results(ctx) else {
        return vec![];
    };
    let mut out = Vec::new();
    for (local, stats) in &r.ports {
        let (Some(base), Some(recent)) = (stats.baseline_seconds, stats.recent_seconds) else {
            continue;
        };
        if stats.round_medians.len() < MIN_RTT_ROUNDS
            || recent <= base * RTT_FACTOR
            || recent - base < MIN_RTT_EXCESS
        {
            continue;
        }
        let subject = subject(latest, &local.device, local.port);
        out.push(Finding {
            rule: RuleId::PeerProbeRttAboveBaseline,
            severity: Severity::Warning,
            finding: format!(
                "{}: peer-probe round trips are {:.0} times the port's own baseline: congestion on the path or at the peers",
                subject.describe(),
                recent / base
            ),
            evidence: format!(
                "recent RTT {:.1} µs (median of the last {} rounds' medians), baseline {:.1} µs (25th percentile of the last {} rounds' medians); expected <= {RTT_FACTOR} times",
                recent * 1e6,
                stats.round_medians.len().min(roce_probe::peer::RECENT_ROUNDS),
                base * 1e6,
                stats.round_medians.len()
            ),
            fix: "Look for congestion: PFC pauses, ECN marks and CNPs on this port and its peers, a hot spine; the other findings and roce_peer_probe_peer_lost show whether one path or all are slow".into(),
            verify: "curl -s localhost:9879/metrics | grep roce_peer_probe_rtt_seconds".into(),
            subject,
        });
    }
    out
}

fn no_peer_on_rail(ctx: &Context) -> Vec<Finding> {
    let Some((latest, r)) = latest_results(ctx) else {
        return vec![];
    };
    let Some(d) = latest.peer_discovery.as_ref() else {
        return vec![];
    };
    // Not before the first pass over the peer list (or query) ended and
    // what it started came back: a port just started knows no peer yet.
    if d.passes == 0 || d.in_flight > 0 {
        return vec![];
    }
    let mut out = Vec::new();
    for (local, stats) in &r.ports {
        if stats.peers_known > 0 {
            continue;
        }
        let rail = d
            .rails
            .iter()
            .find(|(dev, port, _)| *dev == local.device && *port == local.port)
            .and_then(|(_, _, rail)| rail.clone());
        let subject = subject(latest, &local.device, local.port);
        let why = match (&rail, d.peers_configured, d.peers_known) {
            (None, _, _) => {
                "this node cannot compute the port's rail (peer_probes.rails)".to_string()
            }
            (Some(_), 0, _) => "no peer is listed".to_string(),
            (Some(rail), _, 0) => format!("no listed peer's endpoints were admitted (rail {rail})"),
            (Some(rail), _, _) => format!("no admitted peer port is on its rail {rail}"),
        };
        let refused: Vec<String> = d
            .refused
            .iter()
            .map(|(reason, n)| format!("{}={n}", reason.as_str()))
            .collect();
        let errors: Vec<String> = d
            .fetch_errors
            .iter()
            .map(|(reason, n)| format!("{}={n}", reason.as_str()))
            .collect();
        out.push(Finding {
            rule: RuleId::PeerProbeNoPeerOnRail,
            severity: Severity::Info,
            finding: format!(
                "{}: probes no peer: {why}; its path to the fabric is not tested",
                subject.describe()
            ),
            evidence: format!(
                "{} peers listed ({} discovery), {} with admitted endpoints, {} peer ports held; refused: [{}]; fetch errors: [{}]",
                d.peers_configured,
                d.mode.as_str(),
                d.peers_known,
                d.endpoints,
                refused.join(", "),
                errors.join(", ")
            ),
            fix: "List the peers on this rail (peer_probes.peers, dns, srv, file or prometheus); on a fabric without a shared subnet (a /31 per NIC) set peer_probes.rails (networks, netdev_pattern or map) so that ports of one rail pair; roce_peer_probe_endpoints_refused_total says why endpoints were refused".into(),
            verify: format!(
                "curl -s localhost:9879/metrics | grep -E 'roce_peer_probe_peers\\{{device=\"{}\",port=\"{}\"|roce_peer_probe_endpoints_refused'",
                local.device, local.port
            ),
            subject,
        });
    }
    out
}
