//! The rules that judge congestion, loss and error counters of real mlx5
//! fleets: saturated PMA counters and the 64-bit counters that replace
//! them, ACK timeouts, DCQCN per role against the traffic and its
//! misconfiguration, PFC pauses apart from storms, and discards on the
//! lossless priority apart from the rest. Each rule fires on a snapshot
//! sequence with exact texts, and healthy 400 GbE patterns (idle, line rate,
//! incast under normal DCQCN, a port shared with TCP) give no warning and
//! no critical finding.
//!
//! Rates are realistic for 400 GbE with RoCE MTU 4096: about 4200 bytes on
//! the wire per packet, so line rate is about 11.9 million packets per
//! second, 119 million per 10 s sample.

use std::sync::Arc;

use roce_exporter::config::{Config, Expectations, RulesConfig};
use roce_exporter::rules::{self, Finding, Severity};
use roce_exporter::snapshot::Snapshot;
use roce_netdev::{FrameDirection, Meaning, Netdev, StatValue};
use roce_rdma::{Counter, GidType, Port};
use roce_testkit::snapshot::{
    self as testkit, gid, lossless, roce_port, NetdevBuilder, SnapshotBuilder,
};

/// Packets per 10 s sample at 400 GbE line rate with 4096-byte RoCE MTU.
const LINE_RATE_PER_10S: u64 = 119_000_000;

/// Counters of one sample: the port's (sysfs `counters/` and
/// `hw_counters/`) and its netdev's mapped ethtool statistics.
#[derive(Clone, Default)]
struct Sample {
    counters: Vec<(&'static str, u64)>,
    hw: Vec<(&'static str, u64)>,
    stats: Vec<(Meaning, StatValue)>,
}

impl Sample {
    fn counter(mut self, name: &'static str, v: u64) -> Self {
        self.counters.push((name, v));
        self
    }
    fn hw(mut self, name: &'static str, v: u64) -> Self {
        self.hw.push((name, v));
        self
    }
    fn stat(mut self, meaning: Meaning, v: u64) -> Self {
        self.stats.push((meaning, StatValue::Count(v)));
        self
    }
    fn paused(mut self, priority: u8, direction: FrameDirection, seconds: f64) -> Self {
        self.stats.push((
            Meaning::PfcPauseDuration {
                priority,
                direction,
            },
            StatValue::Seconds(seconds),
        ));
        self
    }
}

/// The healthy 400 GbE port with its RoCE v2 GID at index 3 and the
/// sample's counters.
fn port(sample: &Sample) -> Port {
    Port {
        gids: vec![gid(3, "::ffff:10.0.0.1", GidType::RoceV2)],
        counters: sample
            .counters
            .iter()
            .map(|(n, v)| Counter::new(*n, *v))
            .collect(),
        hw_counters: sample
            .hw
            .iter()
            .map(|(n, v)| Counter::new(*n, *v))
            .collect(),
        ..roce_port(1)
    }
}

/// The mlx5 RoCE netdev of a healthy lossless setup: MTU 9000, PFC on
/// priority 3, ECN on for priority 3 in both roles, firmware DCBX with a
/// switch port that agrees.
fn netdev(sample: &Sample) -> Netdev {
    let healthy = NetdevBuilder::mlx5("ens1np0", "mlx5_0", 1)
        .up()
        .ecn(&[3])
        .dcb(lossless(&[3]));
    sample
        .stats
        .iter()
        .fold(healthy, |n, (meaning, value)| {
            n.stat_value(*meaning, *value)
        })
        .build()
}

/// Snapshots 10 s apart, one per sample.
fn history(samples: &[Sample]) -> Vec<Arc<Snapshot>> {
    testkit::history(samples.iter().map(|sample| {
        SnapshotBuilder::new()
            .with_port("mlx5_0", port(sample))
            .netdev(netdev(sample))
    }))
}

/// `n` samples, the i-th made by `f(i)`.
fn series(n: u64, f: impl Fn(u64) -> Sample) -> Vec<Arc<Snapshot>> {
    history(&(0..n).map(f).collect::<Vec<_>>())
}

fn run(h: &[Arc<Snapshot>]) -> Vec<Finding> {
    rules::evaluate(h, &RulesConfig::default(), &Expectations::default())
}

fn only(h: &[Arc<Snapshot>], rule: &str) -> Vec<Finding> {
    run(h).into_iter().filter(|f| f.rule == rule).collect()
}

/// Findings that would page or warn.
fn alarming(h: &[Arc<Snapshot>]) -> Vec<Finding> {
    run(h)
        .into_iter()
        .filter(|f| f.severity != Severity::Info)
        .collect()
}

fn prio_discards(reason: &'static str, priority: u8) -> Meaning {
    Meaning::Discards {
        reason,
        priority: Some(priority),
    }
}

fn port_discards(reason: &'static str) -> Meaning {
    Meaning::Discards {
        reason,
        priority: None,
    }
}

// ---------------------------------------------------------------------------
// Healthy patterns: no warning, no critical.

/// Every counter of the patterns below, at sample `i`.
fn traffic(i: u64, rx_per_10s: u64, tx_per_10s: u64) -> Sample {
    Sample::default()
        .counter("symbol_error", 0)
        .counter("link_downed", 1)
        .counter("port_rcv_packets", 5_000_000_000 + i * rx_per_10s)
        .counter("port_xmit_packets", 7_000_000_000 + i * tx_per_10s)
        .stat(Meaning::PhySymbolErrors, 0)
        .stat(Meaning::LinkDownEvents, 1)
}

#[test]
fn idle_400g_port_is_silent() {
    let h = series(7, |_| {
        traffic(0, 0, 0)
            .hw("np_ecn_marked_roce_packets", 10_000)
            .hw("np_cnp_sent", 9_000)
            .hw("rp_cnp_handled", 9_000)
            .hw("rp_cnp_ignored", 0)
            .hw("local_ack_timeout_err", 0)
            .paused(3, FrameDirection::Rx, 12.0)
            .paused(3, FrameDirection::Tx, 3.0)
    });
    assert_eq!(run(&h), vec![]);
}

#[test]
fn line_rate_400g_traffic_is_silent() {
    // Both directions at line rate; a little PFC from the switch (0.5 %).
    let h = series(7, |i| {
        traffic(i, LINE_RATE_PER_10S, LINE_RATE_PER_10S)
            .hw("np_ecn_marked_roce_packets", 10_000)
            .hw("np_cnp_sent", 9_000)
            .hw("rp_cnp_handled", 9_000)
            .hw("rp_cnp_ignored", 0)
            .hw("local_ack_timeout_err", 0)
            .paused(3, FrameDirection::Rx, i as f64 * 0.05)
            .paused(3, FrameDirection::Tx, 0.0)
    });
    assert_eq!(alarming(&h), vec![]);
}

#[test]
fn incast_under_normal_dcqcn_is_silent() {
    // This host receives at line rate from eight senders and sends at
    // 50 Gb/s itself. Switches mark 5 % of what arrives (595,000/s); it
    // answers with 13,500 CNPs/s and handles 13,500/s for its own sending
    // (0.9 % of its packets). PFC still steps in now and then: paused 3 %
    // by the switch, pausing 2 %. The old absolute limits (10,000/s CNPs,
    // 10,000/s marks, 20 % paused) called this congestion trouble.
    let h = series(7, |i| {
        traffic(i, LINE_RATE_PER_10S, LINE_RATE_PER_10S / 8)
            .hw("np_ecn_marked_roce_packets", 1_000_000 + i * 5_950_000)
            .hw("np_cnp_sent", 500_000 + i * 135_000)
            .hw("rp_cnp_handled", 700_000 + i * 135_000)
            .hw("rp_cnp_ignored", 12)
            .hw("local_ack_timeout_err", 3)
            .paused(3, FrameDirection::Rx, i as f64 * 0.3)
            .paused(3, FrameDirection::Tx, i as f64 * 0.2)
    });
    assert_eq!(alarming(&h), vec![]);
    assert_eq!(run(&h), vec![], "not even info");
}

#[test]
fn port_shared_with_tcp_is_not_alarming() {
    // RoCE on priority 3 (PFC), TCP and storage on lossy priority 0: TCP
    // drops 300 packets/s under its own congestion (rx_discards_phy counts
    // them, and rx_prio0_discards again), and the kernel's rings overflow
    // 500 times a second (rx_out_of_buffer). None of it touches RoCE.
    let h = series(7, |i| {
        traffic(i, LINE_RATE_PER_10S / 2, LINE_RATE_PER_10S / 2)
            .hw("np_ecn_marked_roce_packets", 10_000)
            .hw("np_cnp_sent", 9_000)
            .hw("rp_cnp_handled", 9_000)
            .hw("rp_cnp_ignored", 0)
            .hw("local_ack_timeout_err", 0)
            .stat(port_discards("rx_port"), 40_000 + i * 3_000)
            .stat(prio_discards("rx_port", 0), 40_000 + i * 3_000)
            .stat(prio_discards("rx_port", 3), 0)
            .stat(port_discards("rx_out_of_buffer"), 90_000 + i * 5_000)
            .paused(3, FrameDirection::Rx, 0.0)
    });
    assert_eq!(alarming(&h), vec![]);
    let info: Vec<&str> = run(&h).iter().map(|f| f.rule.as_str()).collect();
    assert_eq!(info, vec!["discards_growing", "host_ring_drops"]);
    let f = only(&h, "discards_growing");
    assert_eq!(
        f[0].evidence,
        "rx_port +18000 over 1m = 300/s; expected <= 100/s (rules.discards_growing.per_second); drops on a lossless priority are lossless_discards",
        "the port-wide counter, not it plus its per-priority part"
    );
    let f = only(&h, "host_ring_drops");
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): the host's receive rings drop packets at 500/s (rx_out_of_buffer): the kernel network stack does not keep up (not the fabric, not RDMA)"
    );
}

// ---------------------------------------------------------------------------
// Item 3: saturated PMA counters, and the 64-bit counters instead.

#[test]
fn a_saturated_symbol_error_counter_is_a_finding() {
    let stuck = || Sample::default().counter("symbol_error", 65_535);
    let f = only(&history(&[stuck(), stuck()]), "counter_saturated");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): symbol_error stuck at the maximum: the counter no longer counts, and rules on it see no growth"
    );
    assert_eq!(
        f[0].evidence,
        "symbol_error = 65535 (16-bit); IB PortCounters stop at their maximum until reset"
    );
    assert!(
        f[0].fix.contains("perfquery -R -C mlx5_0 -P 1"),
        "{}",
        f[0].fix
    );
    assert_eq!(
        f[0].verify,
        "grep -H . /sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error  # below the maximum after the reset"
    );
    // One below the maximum still counts.
    let near = Sample::default().counter("symbol_error", 65_534);
    assert_eq!(
        only(&history(&[near.clone(), near]), "counter_saturated"),
        vec![]
    );
}

#[test]
fn saturated_8_bit_counters_with_a_64_bit_replacement_are_info() {
    // link_downed and link_error_recovery are 8-bit; link_downed has the
    // driver's link_down_events_phy, link_error_recovery has none.
    let s = Sample::default()
        .counter("link_downed", 255)
        .stat(Meaning::LinkDownEvents, 1_204);
    let f = only(&history(&[s.clone(), s.clone()]), "counter_saturated");
    assert_eq!(f[0].severity, Severity::Info);
    assert_eq!(
        f[0].evidence,
        "link_downed = 255 (8-bit); IB PortCounters stop at their maximum until reset; rate rules read the driver's 64-bit counter instead: link_downed -> link_down_events_phy"
    );
    let s = s
        .counter("link_error_recovery", 255)
        .counter("port_rcv_errors", 65_535);
    let f = only(&history(&[s.clone(), s]), "counter_saturated");
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].verify,
        "grep -H . /sys/class/infiniband/mlx5_0/ports/1/counters/{link_error_recovery,link_downed,port_rcv_errors}  # below the maximum after the reset"
    );
}

#[test]
fn symbol_errors_come_from_the_64_bit_counter_when_the_pma_one_is_stuck() {
    // symbol_error is pinned at 65535; rx_symbol_err_phy grew by 100 in 10 s
    // at 400 Gb/s: BER 2.5e-11.
    let s = |v| {
        Sample::default()
            .counter("symbol_error", 65_535)
            .stat(Meaning::PhySymbolErrors, v)
    };
    let f = only(&history(&[s(752_694), s(752_794)]), "symbol_errors");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].evidence,
        "rx_symbol_err_phy (ethtool) +100 over 10s at 400 Gb/s = BER 2.50e-11; expected <= 1e-12"
    );
    assert_eq!(
        f[0].verify,
        "ethtool -S ens1np0 | grep rx_symbol_err_phy  # must stop increasing"
    );
    assert_eq!(
        only(&history(&[s(752_694), s(752_694)]), "symbol_errors"),
        vec![]
    );
}

#[test]
fn link_flaps_come_from_the_64_bit_counter_when_the_pma_one_is_stuck() {
    let s = |v| {
        Sample::default()
            .counter("link_downed", 255)
            .stat(Meaning::LinkDownEvents, v)
    };
    let f = only(&history(&[s(1_204), s(1_206)]), "link_flap");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].evidence,
        "link_down_events_phy (ethtool) +2 over 10s; expected 0"
    );
    assert_eq!(only(&history(&[s(1_204), s(1_204)]), "link_flap"), vec![]);
}

// ---------------------------------------------------------------------------
// Item 4: ACK timeouts.

#[test]
fn one_ack_timeout_is_a_warning() {
    let s = |v| Sample::default().hw("local_ack_timeout_err", v);
    let f = only(&history(&[s(7), s(8)]), "ack_timeouts");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): 1 ACK timeout(s) in the last 10s: each stalled a QP for the whole transport timeout (about 4.3 s at NCCL_IB_TIMEOUT=20)"
    );
    assert_eq!(
        f[0].evidence,
        "local_ack_timeout_err +1 over 10s = 0.1/s (+0 in the older half of the window, +1 in the newer); expected 0 (any is a warning), critical above 0.1/s in both halves (rules.ack_timeouts.per_second)"
    );
    assert_eq!(only(&history(&[s(8), s(8)]), "ack_timeouts"), vec![]);
    assert_eq!(
        only(&history(&[s(900), s(0)]), "ack_timeouts"),
        vec![],
        "a driver reload"
    );
}

#[test]
fn sustained_ack_timeouts_are_critical() {
    // Two every 10 s for five minutes: 0.2/s.
    let h = series(31, |i| Sample::default().hw("local_ack_timeout_err", 2 * i));
    let f = only(&h, "ack_timeouts");
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): ACK timeouts at 0.2/s, above 0.1/s: QPs keep stalling for the whole transport timeout (about 4.3 s each at NCCL_IB_TIMEOUT=20)"
    );
    assert_eq!(
        f[0].evidence,
        "local_ack_timeout_err +60 over 5m = 0.2/s (+30 in the older half of the window, +30 in the newer); expected 0 (any is a warning), critical above 0.1/s in both halves (rules.ack_timeouts.per_second)"
    );
}

#[test]
fn one_burst_of_ack_timeouts_stays_a_warning() {
    // A link flap times out 200 QPs at once, then nothing for five minutes:
    // above the rate over the window, but not sustained.
    let h = series(31, |i| {
        Sample::default().hw("local_ack_timeout_err", if i < 2 { 0 } else { 200 })
    });
    let f = only(&h, "ack_timeouts");
    assert_eq!(f[0].severity, Severity::Warning);
    // Right after the exporter starts, the same burst is no more than that.
    let h = series(3, |i| {
        Sample::default().hw("local_ack_timeout_err", if i < 1 { 0 } else { 200 })
    });
    assert_eq!(only(&h, "ack_timeouts")[0].severity, Severity::Warning);
}

// ---------------------------------------------------------------------------
// Item 5: DCQCN per role, against the traffic; and misconfiguration.

#[test]
fn receiver_congested_when_most_received_packets_are_marked() {
    // Half of the line-rate traffic into this host arrives marked.
    let h = series(7, |i| {
        traffic(i, LINE_RATE_PER_10S, 0)
            .hw("np_ecn_marked_roce_packets", i * LINE_RATE_PER_10S / 2)
            .hw("np_cnp_sent", i * 135_000)
    });
    let f = only(&h, "receiver_congested");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): 50% of the RoCE packets received carry an ECN congestion mark: the path into this host stays congested (notification point role)"
    );
    assert_eq!(
        f[0].evidence,
        "np_ecn_marked_roce_packets +357000000 of port_rcv_packets +714000000 over 1m = 50%; expected <= 30% (rules.receiver_congested.max_ratio)"
    );
    // The same share on a nearly idle port (60 packets/s) says nothing.
    let h = series(7, |i| {
        traffic(i, 600, 0)
            .hw("np_ecn_marked_roce_packets", i * 300)
            .hw("np_cnp_sent", i * 100)
    });
    assert_eq!(only(&h, "receiver_congested"), vec![]);
}

#[test]
fn sender_throttled_when_cnps_rival_the_packets_sent() {
    // 10 CNPs handled per 100 packets sent.
    let h = series(7, |i| {
        traffic(i, 0, 10_000_000)
            .hw("rp_cnp_handled", i * 1_000_000)
            .hw("rp_cnp_ignored", 0)
    });
    let f = only(&h, "sender_throttled");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].evidence,
        "rp_cnp_handled +6000000 per port_xmit_packets +60000000 over 1m = 10%; expected <= 5% (rules.sender_throttled.max_ratio)"
    );
}

#[test]
fn marks_without_cnps_mean_the_notification_point_is_off() {
    let h = series(4, |i| {
        traffic(i, LINE_RATE_PER_10S, 0)
            .hw("np_ecn_marked_roce_packets", i * 1_000_000)
            .hw("np_cnp_sent", 42)
    });
    let f = only(&h, "cnp_not_sent");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].evidence,
        "np_ecn_marked_roce_packets +3000000 (100000/s), np_cnp_sent +0 over 30s; expected CNPs when marks arrive above 10/s (rules.cnp_not_sent.per_second)"
    );
    assert!(f[0]
        .fix
        .starts_with("Turn the notification point on for the RoCE priority: echo 1 > /sys/class/net/ens1np0/ecn/roce_np/enable/<priority>"));
}

#[test]
fn cnps_ignored_mean_the_reaction_point_is_off() {
    let h = series(4, |i| {
        traffic(i, 0, LINE_RATE_PER_10S)
            .hw("rp_cnp_handled", 5)
            .hw("rp_cnp_ignored", i * 50_000)
    });
    let f = only(&h, "cnp_ignored");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): 100% of the CNPs received are ignored: the reaction point is off, this host does not slow down when told to"
    );
    assert_eq!(
        f[0].evidence,
        "rp_cnp_ignored +150000, rp_cnp_handled +0 over 30s = 100% ignored; expected <= 10% (rules.cnp_ignored.max_ratio)"
    );
    // A few ignored among many handled: normal.
    let h = series(4, |i| {
        traffic(i, 0, LINE_RATE_PER_10S)
            .hw("rp_cnp_handled", i * 135_000)
            .hw("rp_cnp_ignored", i)
    });
    assert_eq!(only(&h, "cnp_ignored"), vec![]);
}

// ---------------------------------------------------------------------------
// Item 7: discards on the lossless priority apart from the rest.

#[test]
fn discards_on_the_lossless_priority_are_critical() {
    let s = |v| {
        Sample::default()
            .stat(port_discards("rx_port"), 1_000 + v)
            .stat(prio_discards("rx_port", 0), 1_000)
            .stat(prio_discards("rx_port", 3), v)
            .stat(prio_discards("rx_no_buffer", 3), 0)
    };
    let f = only(&history(&[s(0), s(5)]), "lossless_discards");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): the NIC drops packets on lossless priority 3 (0.5/s): RoCE on it loses packets (retransmissions, ACK timeouts)"
    );
    assert_eq!(
        f[0].evidence,
        "rx_port priority 3 +5 over 10s = 0.5/s on PFC priorities 3; expected <= 0/s (rules.lossless_discards.per_second)"
    );
    assert_eq!(
        f[0].verify,
        "ethtool -S ens1np0 | grep -E 'rx_prio(3)_(discards|buf_discard|cong_discard)'  # twice, a few seconds apart"
    );
    // The same drops on lossy priority 0 are not lossless_discards.
    let lossy = |v| {
        Sample::default()
            .stat(port_discards("rx_port"), v)
            .stat(prio_discards("rx_port", 0), v)
            .stat(prio_discards("rx_port", 3), 0)
    };
    assert_eq!(
        only(&history(&[lossy(0), lossy(5_000)]), "lossless_discards"),
        vec![]
    );
}

// ---------------------------------------------------------------------------
// Item 9: storms apart from pauses received and sent.

#[test]
fn pauses_received_are_a_congested_neighbour_not_a_storm() {
    // 24 s of 60 s paused by the switch: 40 %.
    let h = series(7, |i| {
        Sample::default().paused(3, FrameDirection::Rx, i as f64 * 4.0)
    });
    assert_eq!(only(&h, "pfc_storm"), vec![]);
    let f = only(&h, "pfc_pause_received");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): the link partner paused priority 3 for 40% of the last 1m: congestion downstream of this port"
    );
    assert_eq!(
        f[0].evidence,
        "rx priority 3 paused 24s of 1m (40%); expected <= 20% paused (rules.pfc_pause_received.pause_ratio) and no storm events"
    );
    assert_eq!(only(&h, "pfc_pause_sent"), vec![]);
}

#[test]
fn pauses_sent_mean_this_nics_buffer_is_full() {
    // 6 s of 60 s pausing the switch: 10 %.
    let h = series(7, |i| {
        Sample::default().paused(3, FrameDirection::Tx, i as f64)
    });
    let f = only(&h, "pfc_pause_sent");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): this NIC paused priority 3 of its link partner for 10% of the last 1m: its receive buffer keeps filling"
    );
    assert_eq!(only(&h, "pfc_pause_received"), vec![]);
    assert_eq!(only(&h, "pfc_storm"), vec![]);
    // The storm detector's warning (pausing for a long time) is this too.
    let w = |v| {
        Sample::default().stat(
            Meaning::PauseStormEvents {
                severity: "warning",
            },
            v,
        )
    };
    let f = only(&history(&[w(0), w(1)]), "pfc_pause_sent");
    assert_eq!(
        f[0].evidence,
        "pause storm events warning +1 over 10s; expected <= 5% paused (rules.pfc_pause_sent.pause_ratio) and no storm events"
    );
    assert_eq!(only(&history(&[w(0), w(1)]), "pfc_storm"), vec![]);
    assert_eq!(only(&history(&[w(0), w(1)]), "pfc_pause_received"), vec![]);
}

#[test]
fn bnxt_continuous_pause_is_pause_received() {
    // bnxt_en counts continuous_pause_events among its receive statistics.
    let c = |v| {
        Sample::default().stat(
            Meaning::PauseStormEvents {
                severity: "continuous_roce",
            },
            v,
        )
    };
    let f = only(&history(&[c(4), c(6)]), "pfc_pause_received");
    assert_eq!(
        f[0].finding,
        "mlx5_0 port 1 (ens1np0): the NIC saw pause frames arrive without a break (continuous_roce +2)"
    );
    assert_eq!(only(&history(&[c(4), c(6)]), "pfc_pause_sent"), vec![]);
    assert_eq!(only(&history(&[c(4), c(6)]), "pfc_storm"), vec![]);
}

#[test]
fn a_storm_is_critical_and_not_reported_twice() {
    // 29 s of 30 s paused by the switch: the priority is blocked.
    let h = series(4, |i| {
        Sample::default().paused(3, FrameDirection::Rx, i as f64 * 29.0 / 3.0)
    });
    let f = only(&h, "pfc_storm");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(only(&h, "pfc_pause_received"), vec![]);
}

// ---------------------------------------------------------------------------
// Configuration of the new rules.

#[test]
fn the_new_thresholds_come_from_the_config() {
    let c = Config::parse(
        "rules: {ack_timeouts: {per_second: 1}, receiver_congested: {max_ratio: 0.6}, \
         pfc_pause_sent: {pause_ratio: 0.5}, discards_growing: {per_second: 1000}}\n",
        "t",
    )
    .unwrap();
    let d = RulesConfig::default();
    assert_eq!(c.rules.ack_timeouts.per_second, 1.0);
    assert_eq!(c.rules.ack_timeouts.window, d.ack_timeouts.window);
    assert_eq!(c.rules.receiver_congested.max_ratio, 0.6);
    assert_eq!(
        c.rules.receiver_congested.min_packets_per_second,
        d.receiver_congested.min_packets_per_second
    );
    assert_eq!(c.rules.pfc_pause_sent.pause_ratio, 0.5);
    assert_eq!(c.rules.discards_growing.per_second, 1000.0);
    let e = Config::parse("rules: {cnp_ignored: {per_second: 3}}\n", "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rules.cnp_ignored.per_second is not a setting of this rule (it takes: window, max_ratio, min_packets_per_second)"),
        "{e}"
    );
    assert!(Config::parse("rules: {sender_throttled: {max_ratio: 2}}\n", "t").is_err());
    // The configured threshold is used: 50 % marked passes at 0.6.
    let h = series(7, |i| {
        traffic(i, LINE_RATE_PER_10S, 0)
            .hw("np_ecn_marked_roce_packets", i * LINE_RATE_PER_10S / 2)
            .hw("np_cnp_sent", i * 135_000)
    });
    assert_eq!(
        rules::evaluate(&h, &c.rules, &Expectations::default())
            .iter()
            .filter(|f| f.rule == "receiver_congested")
            .count(),
        0
    );
}
