//! Rules on the load test's results (`check --load`, or the last results
//! the exporter reads): a port, or the node, that moved less than
//! `rules.load_test.min_fraction` of its line rate at the largest message
//! size, with the cause the data points at; a stream that stopped early or
//! never ran. Also the figures the rules and the load test share: a port's
//! line rate after its encoding, and what its counters moved over a run.
//!
//! The counters under load (pauses, ECN marks, CNPs, discards, sequence
//! errors, retransmissions, link drops) are judged by the counter rules
//! themselves over the run's two samples: `check --load` runs the whole
//! table over them.

use std::time::Duration;

use serde::Serialize;

use roce_model::load::{LoadRun, Outcome, PortLoad, RunCounters, RunScope};
use roce_netdev::{FrameDirection, Meaning};
use roce_rdma::{LinkLayer, Port};
use roce_topology::PathClass;

use super::history::{FollowedCounter, History};
use super::ports::{find_port, fmt_num};
use super::settings::section;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::meaning::HwMeaning;
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::LoadTestBelowLineRate,
        checks: "a port's RDMA WRITE bandwidth at the largest message size of the load test reaches rules.load_test.min_fraction of its line rate",
        evaluate: below_line_rate,
    },
    Rule {
        id: RuleId::LoadTestNodeBelowLineRate,
        checks: "with every port loaded at once, the node's bandwidth reaches rules.load_test.min_fraction of the sum of its ports' line rates",
        evaluate: node_below_line_rate,
    },
    Rule {
        id: RuleId::LoadTestAborted,
        checks: "every port's load-test stream ran to its end",
        evaluate: aborted,
    },
];

/// `rules.load_test`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadTestRule {
    /// Below this share of the line rate at the largest size: a warning.
    pub min_fraction: f64,
    /// Below this share: critical (the port carries a fraction of what
    /// it should: a lane down, a PCIe link at x1, a storm).
    pub critical_fraction: f64,
}

impl Default for LoadTestRule {
    fn default() -> Self {
        LoadTestRule {
            min_fraction: 0.9,
            critical_fraction: 0.5,
        }
    }
}

section!(LoadTestRule {
    min_fraction: f64 = "crate::values::opt_share",
    critical_fraction: f64 = "crate::values::opt_share",
});

/// A port's line rate after its line encoding, bytes per second: on
/// Ethernet the `rate` is the MAC's data rate already (mlx5 maps the
/// ethtool speed); on InfiniBand SDR, DDR and QDR lanes carry 8b/10b (80 %
/// of the signalling rate the kernel prints), FDR 64b/66b, and EDR and
/// later print their data rate. A 10 or 40 Gb/s InfiniBand rate is taken
/// as QDR/SDR (FDR10 prints the same figure and carries 25 % more): the
/// lower expectation, never a false alarm.
pub fn line_rate(port: &Port) -> Option<f64> {
    let r = port.rate_bytes_per_second? as f64;
    if r <= 0.0 {
        return None;
    }
    if port.link_layer != Some(LinkLayer::InfiniBand) {
        return Some(r);
    }
    let gbps = r * 8.0 / 1e9;
    let is = |set: &[f64]| set.iter().any(|v| (gbps - v).abs() < 0.01);
    Some(
        if is(&[2.5, 5.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0, 120.0]) {
            r * 0.8
        } else if is(&[14.0, 28.0, 56.0, 112.0, 168.0]) {
            r * 64.0 / 66.0
        } else {
            r
        },
    )
}

/// Bytes per second as the operator reads it, in GB/s (10^9 bytes): one
/// decimal from 10 GB/s, two from 1, three significant digits below
/// (`48.7 GB/s`, `3.12 GB/s`, `0.00462 GB/s`).
pub fn gb_per_s(bytes_per_second: f64) -> String {
    let g = bytes_per_second / 1e9;
    if g >= 10.0 {
        format!("{g:.1} GB/s")
    } else if g >= 1.0 || g <= 0.0 {
        format!("{g:.2} GB/s")
    } else {
        let decimals = (2.0 - g.log10().floor()).clamp(2.0, 12.0) as usize;
        format!("{g:.decimals$} GB/s")
    }
}

/// A message size: `64 KiB`, `8 MiB`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// What a port's counters moved between two samples (see [`RunCounters`]).
pub fn run_counters(before: &Snapshot, after: &Snapshot, device: &str, port: u32) -> RunCounters {
    let history = History::of([before, after]);
    let all = Duration::MAX;
    let ps = history.port(device, port);
    let hw = |m: &[HwMeaning]| {
        let v: Vec<FollowedCounter> = m.iter().map(|m| FollowedCounter::Hw(*m)).collect();
        ps.increase_of_sum(&v, all).map(|i| i.amount)
    };
    let delta = |name: &str, hw_name: Option<&str>, scale: u64| {
        let read = |s: &Snapshot| {
            find_port(s, device, port).and_then(|(_, p)| {
                p.counter(name)
                    .map(|v| v.saturating_mul(scale))
                    .or_else(|| hw_name.and_then(|h| p.hw_counter(h)))
            })
        };
        match (read(before), read(after)) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        }
    };
    let seconds = match (before.clock(), after.clock()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64(),
        _ => 0.0,
    };
    let netdev = find_port(after, device, port).and_then(|(_, p)| p.netdev.clone());
    let mut c = RunCounters {
        seconds,
        // `port_xmit_data` counts octets divided by four.
        tx_bytes: delta("port_xmit_data", None, 4),
        rx_bytes: delta("port_rcv_data", None, 4),
        tx_packets: delta("port_xmit_packets", Some("sent_pkts"), 1),
        rx_packets: delta("port_rcv_packets", Some("rcvd_pkts"), 1),
        ecn_marked: hw(&[HwMeaning::EcnMarked]),
        cnp_sent: hw(&[HwMeaning::CnpSent]),
        cnp_handled: hw(&[HwMeaning::CnpHandled]),
        retransmissions: hw(&[HwMeaning::Retransmissions]),
        sequence_errors: hw(&[
            HwMeaning::OutOfSequence,
            HwMeaning::PacketSeqErr,
            HwMeaning::ImpliedNakSeqErr,
        ]),
        ack_timeouts: hw(&[HwMeaning::LocalAckTimeout]),
        link_downed: ps
            .increase(FollowedCounter::LinkDowned, all)
            .map(|i| i.amount),
        ..RunCounters::default()
    };
    let Some(n) = netdev else { return c };
    let ns = history.netdev(&n);
    let sum = |f: &dyn Fn(u8) -> Meaning| {
        let v: Vec<FollowedCounter> = (0..8u8).map(|p| FollowedCounter::Stat(f(p))).collect();
        ns.increase_of_sum(&v, all).map(|i| i.amount)
    };
    use FrameDirection::{Rx, Tx};
    // Pause durations are followed in microseconds (`stat_integer`).
    let us = |v: Option<u64>| v.map(|u| u as f64 / 1e6);
    c.pause_rx_seconds = us(sum(&|priority| Meaning::PfcPauseDuration {
        priority,
        direction: Rx,
    }));
    c.pause_tx_seconds = us(sum(&|priority| Meaning::PfcPauseDuration {
        priority,
        direction: Tx,
    }));
    c.pause_rx_frames = sum(&|priority| Meaning::PfcPauseFrames {
        priority,
        direction: Rx,
    });
    c.pause_tx_frames = sum(&|priority| Meaning::PfcPauseFrames {
        priority,
        direction: Tx,
    });
    let reasons: Vec<FollowedCounter> = after
        .netdev
        .iter()
        .flat_map(|nd| nd.netdevs.iter())
        .filter(|d| d.name == n)
        .flat_map(|d| d.stats.iter())
        .filter_map(|s| match s.meaning {
            Meaning::Discards { reason, .. } => Some(FollowedCounter::Discards(reason)),
            _ => None,
        })
        .fold(Vec::new(), |mut v, r| {
            if !v.contains(&r) {
                v.push(r);
            }
            v
        });
    if !reasons.is_empty() {
        c.discards = ns.increase_of_sum(&reasons, all).map(|i| i.amount);
    }
    c
}

/// What a port carried between two samples, bytes per second, the larger
/// direction: from its byte counters, or, where it counts only packets
/// (Soft-RoCE), packets × 4096 (the largest RoCE MTU: an upper bound).
pub fn carried_bytes_per_second(
    before: &Snapshot,
    after: &Snapshot,
    device: &str,
    port: u32,
) -> Option<f64> {
    let c = run_counters(before, after, device, port);
    if c.seconds <= 0.0 {
        return None;
    }
    let bytes = match (c.tx_bytes, c.rx_bytes) {
        (Some(t), Some(r)) => Some(t.max(r)),
        _ => None,
    }
    .or_else(|| {
        let p = c.tx_packets?.max(c.rx_packets?);
        Some(p.saturating_mul(4096))
    })?;
    Some(bytes as f64 / c.seconds)
}

fn runs<'a>(s: &'a Snapshot) -> impl Iterator<Item = &'a LoadRun> + 'a {
    s.load_test
        .iter()
        .filter_map(|l| l.results.as_deref())
        .flat_map(|r| r.runs.iter())
}

fn scope_text(scope: RunScope) -> &'static str {
    match scope {
        RunScope::All => "with every port loaded at once",
        RunScope::Alone => "loaded alone",
    }
}

fn port_subject(p: &PortLoad) -> Subject {
    Subject::port(&p.device, p.port, p.netdev.as_deref())
}

/// What the data says about a port that fell short, most likely first:
/// (cause, fix, verify).
fn causes(s: &Snapshot, p: &PortLoad) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let dev = &p.device;
    if let Some(t) = &s.topology {
        for l in t
            .links
            .iter()
            .filter(|l| l.rdma_device.as_deref() == Some(dev))
        {
            if l.speed_downtrained() == Some(true) || l.width_downtrained() == Some(true) {
                out.push((
                    format!(
                        "{dev}'s PCIe link trained at {}, below the {} both ends support",
                        link_text(l.current_speed, l.current_width),
                        link_text(l.capable_speed, l.capable_width)
                    ),
                    "Reseat the NIC and check its slot, riser or retimer and the BIOS PCIe settings: a downtrained link cannot feed the port".into(),
                    format!("lspci -vvv -s {} | grep -E 'LnkCap|LnkSta'", l.downstream),
                ));
            }
        }
        if p.memory == "gpu" {
            let far = t
                .paths
                .iter()
                .filter(|g| g.nic == *dev && matches!(g.class, PathClass::Sys | PathClass::Node))
                .map(|g| format!("GPU {} ({:?})", g.gpu, g.class))
                .collect::<Vec<_>>();
            if !far.is_empty() {
                out.push((
                    format!(
                        "the GPU memory used crosses the CPU interconnect to {dev}: {}",
                        far.join(", ")
                    ),
                    format!(
                        "Use a GPU under the same PCIe switch as {dev} (PIX/PXB), or move the NIC"
                    ),
                    "nvidia-smi topo -m".into(),
                ));
            }
        }
    }
    let netdev_mtu = p.netdev.as_ref().and_then(|n| {
        s.netdev
            .iter()
            .flat_map(|nd| nd.netdevs.iter())
            .find(|d| &d.name == n)
            .and_then(|d| d.mtu)
    });
    if let (Some(mtu), Some(n)) = (netdev_mtu, &p.netdev) {
        if mtu < crate::fabric::ROCE_4096_MIN_NETDEV_MTU {
            out.push((
                format!(
                    "{n}'s MTU is {mtu}: RoCE runs below its 4096-byte MTU, more headers per byte"
                ),
                format!("ip link set {n} mtu 9000 (and the same on the switch ports)"),
                format!("ip link show {n}; ibv_devinfo -d {dev} | grep active_mtu"),
            ));
        }
    }
    if let Some(c) = &p.counters {
        let share = |sec: Option<f64>| sec.filter(|_| c.seconds > 0.0).map(|v| v / c.seconds);
        if let Some(f) = share(c.pause_rx_seconds).filter(|f| *f > 0.01) {
            out.push((
                format!("the switch paused the port {:.0}% of the run (PFC pause received)", f * 100.0),
                "Find the congested switch queue behind the pauses (the receiver's side, an oversubscribed uplink); see the PFC findings under load".into(),
                format!("ethtool -S {} | grep -E 'prio[0-7]_pause'", p.netdev.as_deref().unwrap_or("<netdev>")),
            ));
        }
        let marks = c.ecn_marked.unwrap_or(0) + c.cnp_handled.unwrap_or(0);
        if marks > 0 {
            out.push((
                format!(
                    "congestion on the path: {} ECN-marked packets received and {} CNPs handled during the run",
                    c.ecn_marked.unwrap_or(0),
                    c.cnp_handled.unwrap_or(0)
                ),
                "The flow was slowed by DCQCN: look for a congested switch port on the path (other traffic, an ECMP collision, a slower link)".into(),
                format!("rdma statistic show link {dev}/{} | grep -E 'ecn|cnp'", p.port),
            ));
        }
        let lost = c.retransmissions.unwrap_or(0) + c.sequence_errors.unwrap_or(0);
        if lost > 0 {
            out.push((
                format!("packets were lost on the path: {lost} retransmissions and sequence errors during the run"),
                "Find the dropping hop: the link's FEC and symbol errors, the switch's discards on the lossless priority, PFC not enabled end to end".into(),
                format!("rdma statistic show link {dev}/{}", p.port),
            ));
        }
    }
    out
}

/// `16 GT/s x8` (what `lspci` calls LnkSta).
fn link_text(speed: Option<roce_topology::LinkSpeed>, width: Option<u32>) -> String {
    let speed = speed.map_or("? GT/s".to_string(), |s| {
        format!("{} GT/s", fmt_num(f64::from(s.0) / 1000.0))
    });
    let width = width.map_or("x?".to_string(), |w| format!("x{w}"));
    format!("{speed} {width}")
}

/// The severity of a fraction of the line rate, `None` when it is fine.
fn verdict(fraction: f64, cfg: &LoadTestRule) -> Option<Severity> {
    if fraction >= cfg.min_fraction {
        return None;
    }
    Some(if fraction < cfg.critical_fraction {
        Severity::Critical
    } else {
        Severity::Warning
    })
}

fn below_line_rate(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.load_test;
    let mut out = Vec::new();
    for run in runs(s) {
        for p in &run.ports {
            let (Some((size, measured)), Some(expected)) =
                (p.at_largest(), p.expected_bytes_per_second)
            else {
                continue;
            };
            if expected <= 0.0 {
                continue;
            }
            let fraction = measured / expected;
            let Some(severity) = verdict(fraction, cfg) else {
                continue;
            };
            let subject = port_subject(p);
            let causes = causes(s, p);
            let (cause_text, fix, verify) = match causes.first() {
                Some((_, f, v)) => (
                    causes.iter().map(|c| c.0.clone()).collect::<Vec<_>>().join("; "),
                    f.clone(),
                    v.clone(),
                ),
                None => (
                    "nothing read on this node explains it (PCIe link, MTU, pauses, ECN marks and losses over the run are clean)".into(),
                    format!("Run the test from the peer's side and with another peer: a shortfall that follows {} is this port or its cable; one that follows the peer is the peer's", subject.describe()),
                    format!("ib_write_bw -d {} -x <gid index> -s {} -D 5 --report_gbits <peer>", p.device, size),
                ),
            };
            out.push(Finding {
                rule: RuleId::LoadTestBelowLineRate,
                severity,
                finding: format!(
                    "{} moved {} of its line rate {} ({} messages)",
                    subject.describe(),
                    pct(fraction),
                    scope_text(run.scope),
                    size_text(size)
                ),
                evidence: format!(
                    "{} vs expected {} ({}, {} RDMA WRITE to {}); the data points at: {cause_text}; expected >= {} (rules.load_test.min_fraction)",
                    gb_per_s(measured),
                    gb_per_s(expected),
                    pct(fraction),
                    size_text(size),
                    p.peer_node.as_deref().or(p.peer.as_deref()).unwrap_or("the peer"),
                    pct(cfg.min_fraction)
                ),
                fix,
                verify,
                subject,
            });
        }
    }
    out
}

fn pct(f: f64) -> String {
    format!("{}%", fmt_num((f * 1000.0).round() / 10.0))
}

fn node_below_line_rate(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let cfg = &ctx.rules.load_test;
    let mut out = Vec::new();
    for run in runs(s).filter(|r| r.scope == RunScope::All && r.ports.len() > 1) {
        let (Some(measured), Some(expected)) = (run.node_bytes_per_second(), run.node_expected())
        else {
            continue;
        };
        if expected <= 0.0 {
            continue;
        }
        let fraction = measured / expected;
        let Some(severity) = verdict(fraction, cfg) else {
            continue;
        };
        // Each port alone at its rate but short together: something they
        // share (the CPU's PCIe root complex, memory bandwidth, a switch
        // uplink).
        let alone_ok = runs(s).filter(|r| r.scope == RunScope::Alone).all(|r| {
            r.ports
                .iter()
                .all(|p| match (p.at_largest(), p.expected_bytes_per_second) {
                    (Some((_, m)), Some(e)) if e > 0.0 => m / e >= cfg.min_fraction,
                    _ => true,
                })
        });
        let per_port = run
            .ports
            .iter()
            .map(|p| {
                format!(
                    "{}/{} {}",
                    p.device,
                    p.port,
                    p.at_largest()
                        .map(|(_, b)| gb_per_s(b))
                        .unwrap_or_else(|| "none".into())
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        out.push(Finding {
            rule: RuleId::LoadTestNodeBelowLineRate,
            severity,
            subject: Subject::default(),
            finding: format!(
                "the node moved {} of its {} ports' line rate with every port loaded at once",
                pct(fraction),
                run.ports.len()
            ),
            evidence: format!(
                "{} vs expected {} ({}); per port: {per_port}; expected >= {} (rules.load_test.min_fraction)",
                gb_per_s(measured),
                gb_per_s(expected),
                pct(fraction),
                pct(cfg.min_fraction)
            ),
            fix: if alone_ok {
                "Each port reaches its rate alone but not together: a resource they share limits them (the ports' PCIe root complex or switch, the CPU socket's memory bandwidth, IRQ or core placement, a switch uplink): place the NICs across root ports and sockets as the GPUs are".into()
            } else {
                "Fix the ports below their rate first (their own findings); then run the test again".into()
            },
            verify: "roce_exporter check --load".into(),
        });
    }
    out
}

fn aborted(ctx: &Context) -> Vec<Finding> {
    let Some(s) = ctx.latest() else { return vec![] };
    let mut out = Vec::new();
    for run in runs(s) {
        for p in &run.ports {
            let subject = port_subject(p);
            let (severity, finding, evidence, fix) = match &p.outcome {
                Outcome::Completed => continue,
                Outcome::Aborted { reason, message } => (
                    Severity::Critical,
                    format!("{}'s load-test stream stopped early {} ({reason})", subject.describe(), scope_text(run.scope)),
                    format!("{message}; {} written before it stopped", fmt_num(p.bytes as f64)),
                    "A write that fails or stalls under load is the path failing: check the link (flaps, FEC errors), the switch's drops on the RoCE priority and PFC end to end; the counter findings under load say which".to_string(),
                ),
                Outcome::NotRun { message } => (
                    Severity::Warning,
                    format!("{} was not load-tested {}", subject.describe(), scope_text(run.scope)),
                    message.clone(),
                    "Start a responder on a peer on this port's rail (load_test.responder: true behind TLS and basic auth) and name it (--peer HOST:PORT or peer_probes.peers)".to_string(),
                ),
            };
            out.push(Finding {
                rule: RuleId::LoadTestAborted,
                severity,
                finding,
                evidence,
                fix,
                verify: "roce_exporter check --load".into(),
                subject,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_reads_in_gb_per_second_with_the_digits_it_needs() {
        assert_eq!(gb_per_s(48.7e9), "48.7 GB/s");
        assert_eq!(gb_per_s(3.123e9), "3.12 GB/s");
        assert_eq!(gb_per_s(4.62e6), "0.00462 GB/s");
        assert_eq!(gb_per_s(0.3125e9), "0.312 GB/s");
        assert_eq!(gb_per_s(0.0), "0.00 GB/s");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size_text(65536), "64 KiB");
        assert_eq!(size_text(8 << 20), "8 MiB");
        assert_eq!(size_text(1000), "1000 B");
    }
}
