//! The one table from driver ethtool counter names to meanings (PFC pause
//! per priority and direction, link pause, pause storms, discards, packets
//! the NIC ECN-marked, the 64-bit physical symbol error and link-down
//! counters), with unit conversion. Names not in the table have no meaning
//! here and are only exported when the config lists them as raw counters.
//!
//! Every name comes from the driver's source, cited per block:
//! - mlx5: `drivers/net/ethernet/mellanox/mlx5/core/en_stats.c`
//!   (`pport_per_prio_pfc_stats_desc` "rx_%s_pause"... with "prio%d",
//!   `pport_802_3_stats_desc`, `pport_2863_stats_desc`,
//!   `pport_per_tc_prio_stats_desc`, `pport_per_tc_congest_prio_stats_desc`,
//!   `pport_pfc_stall_stats_desc`, `q_stats_desc`,
//!   `pport_per_prio_traffic_stats_desc`; the physical layer groups
//!   `pport_phy_statistical_stats_desc` "rx_pcs_symbol_err_phy",
//!   "rx_corrected_bits_phy", `pport_phy_statistical_err_lanes_stats_desc`
//!   "rx_err_lane_%d_phy" (corrected bits per lane), and the PCIe groups
//!   `pcie_perf_stats_desc` "rx_pci_signal_integrity",
//!   "tx_pci_signal_integrity", `pcie_perf_stats_desc64`
//!   "outbound_pci_buffer_overflow"; meanings from
//!   `Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst`).
//! - bnxt_en: `drivers/net/ethernet/broadcom/bnxt/bnxt_ethtool.c`
//!   (`bnxt_port_stats_arr`, `bnxt_port_stats_ext_arr`,
//!   `BNXT_RX_STATS_EXT_PFC_ENTRY`, `bnxt_sw_func_stats`).
//! - ice: `drivers/net/ethernet/intel/ice/ice_ethtool.c`
//!   (`ice_gstrings_pf_stats`, "rx_priority_%u_xon.nic" in
//!   `__ice_get_strings`).
//! - 802.3x flow-control names of e1000/igb/ixgbe:
//!   `drivers/net/ethernet/intel/e1000/e1000_ethtool.c` (as captured from a
//!   real e1000 in `shared/softroce-vm/captures/e1000/ethtool-eth0.txt`),
//!   `drivers/net/ethernet/intel/ixgbe/ixgbe_ethtool.c` (`IXGBE_STAT`
//!   "rx_flow_control_xon"..., "tx_pb_%u_pxon" per packet buffer).
//!
//! DESIGN.md: pause frames count XOFF and XON alike, so ice's and the
//! 802.3x drivers' separate xon/xoff counters are summed into one series.
//! A name listed twice by a driver counts once, at its first occurrence.

/// Direction of a frame relative to this netdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameDirection {
    Rx,
    Tx,
}

impl FrameDirection {
    pub fn as_str(self) -> &'static str {
        match self {
            FrameDirection::Rx => "rx",
            FrameDirection::Tx => "tx",
        }
    }
}

/// What one (or several summed) ethtool counters mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Meaning {
    /// PFC pause frames of one priority (XON and XOFF).
    PfcPauseFrames {
        priority: u8,
        direction: FrameDirection,
    },
    /// Time one priority spent paused (value in seconds).
    PfcPauseDuration {
        priority: u8,
        direction: FrameDirection,
    },
    /// Transitions of one priority between paused and not paused.
    PfcPauseTransitions {
        priority: u8,
        direction: FrameDirection,
    },
    /// 802.3x global (link-level) pause frames.
    LinkPauseFrames { direction: FrameDirection },
    /// Pause storm detections (the NIC stopped honouring or sending pause).
    PauseStormEvents { severity: &'static str },
    /// Packets dropped by the NIC, by reason (and priority where per-priority).
    Discards {
        reason: &'static str,
        priority: Option<u8>,
    },
    /// Received packets of one priority that the NIC itself ECN-marked
    /// because of congestion in its own per-host receive buffers (mlx5
    /// `rx_prio%d_marked`, "The number of packets ecn marked by device due
    /// to per host congestion", Documentation/networking/device_drivers/
    /// ethernet/mellanox/mlx5/counters.rst). Not the CE marks switches set
    /// on the path: those are the RDMA `np_ecn_marked_roce_packets`.
    EcnMarked { priority: u8 },
    /// Received packets dropped for physical coding (symbol) errors: a
    /// 64-bit counter, where the IB PMA `symbol_error` is 16-bit and sticks
    /// at 65535.
    PhySymbolErrors,
    /// Times the link went down: a 64-bit counter, where the IB PMA
    /// `link_downed` is 8-bit and sticks at 255.
    LinkDownEvents,
    /// Physical layer error counts below the MAC: `kind` is
    /// "fec_corrected_bits" (bits the FEC corrected, per lane when `lane`
    /// is set) or "pcs_symbol_errors" (error bits FEC did not correct, or
    /// every error where no FEC runs: mlx5's `phy_symbol_errors`).
    PhyErrors {
        kind: &'static str,
        lane: Option<u8>,
    },
    /// The NIC's own view of its PCIe link: "rx_signal_integrity" (link
    /// recoveries after framing/CRC errors it saw), "tx_signal_integrity"
    /// (recoveries the other end started), "outbound_buffer_overflow"
    /// (packets dropped because the PCIe buffer overflowed).
    PcieErrors { kind: &'static str },
}

/// Which kind of meaning a table row gives (the priority, if any, comes from
/// the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    PfcPauseFrames(FrameDirection),
    PfcPauseDuration(FrameDirection),
    PfcPauseTransitions(FrameDirection),
    LinkPauseFrames(FrameDirection),
    PauseStormEvents(&'static str),
    Discards(&'static str),
    EcnMarked,
    PhySymbolErrors,
    LinkDownEvents,
    /// `{p}` in the pattern is a lane, not a priority.
    PhyErrors(&'static str),
    PcieErrors(&'static str),
}

/// Unit of the driver's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// A count, exported as is.
    Count,
    /// Microseconds, exported as seconds.
    Micros,
}

/// One row of the table. `pattern` is the driver's name with `{p}` where
/// the driver prints the priority (one digit, 0..=7).
#[derive(Debug, Clone, Copy)]
pub struct CounterPattern {
    pub driver: &'static str,
    pub pattern: &'static str,
    pub kind: Kind,
    pub scale: Scale,
}

use FrameDirection::{Rx, Tx};
use Kind::*;
use Scale::{Count, Micros};

const fn r(
    driver: &'static str,
    pattern: &'static str,
    kind: Kind,
    scale: Scale,
) -> CounterPattern {
    CounterPattern {
        driver,
        pattern,
        kind,
        scale,
    }
}

/// The mapping table. Order is the order of the metric reference.
pub const RULES: &[CounterPattern] = &[
    // mlx5 (en_stats.c): per-priority PFC, present for priorities with PFC
    // enabled ("prio%d" in pport_per_prio_pfc_stats_desc). There is no
    // tx_..._pause_transition in the driver.
    r("mlx5", "rx_prio{p}_pause", PfcPauseFrames(Rx), Count),
    r("mlx5", "tx_prio{p}_pause", PfcPauseFrames(Tx), Count),
    r(
        "mlx5",
        "rx_prio{p}_pause_duration",
        PfcPauseDuration(Rx),
        Micros,
    ),
    r(
        "mlx5",
        "tx_prio{p}_pause_duration",
        PfcPauseDuration(Tx),
        Micros,
    ),
    r(
        "mlx5",
        "rx_prio{p}_pause_transition",
        PfcPauseTransitions(Rx),
        Count,
    ),
    // mlx5 802.3 group: a_pause_mac_ctrl_frames_{received,transmitted}. The
    // "rx_global_pause*" names count the same frames and stay unmapped so
    // the link series is not doubled.
    r("mlx5", "rx_pause_ctrl_phy", LinkPauseFrames(Rx), Count),
    r("mlx5", "tx_pause_ctrl_phy", LinkPauseFrames(Tx), Count),
    // mlx5 pport_pfc_stall_stats_desc (device_stall_{minor,critical}_watermark_cnt).
    r(
        "mlx5",
        "tx_pause_storm_warning_events",
        PauseStormEvents("warning"),
        Count,
    ),
    r(
        "mlx5",
        "tx_pause_storm_error_events",
        PauseStormEvents("error"),
        Count,
    ),
    // mlx5 RFC 2863 group (if_in_discards, if_out_discards).
    r("mlx5", "rx_discards_phy", Discards("rx_port"), Count),
    r("mlx5", "tx_discards_phy", Discards("tx_port"), Count),
    // mlx5 per-priority traffic group (rx_discards of one priority).
    r("mlx5", "rx_prio{p}_discards", Discards("rx_port"), Count),
    // mlx5 per-TC groups: no_buffer_discard_uc, wred_discard, ecn_marked_tc
    // (the NIC's own marks under per-host buffer congestion).
    r(
        "mlx5",
        "rx_prio{p}_buf_discard",
        Discards("rx_no_buffer"),
        Count,
    ),
    r(
        "mlx5",
        "rx_prio{p}_cong_discard",
        Discards("rx_congestion"),
        Count,
    ),
    r("mlx5", "rx_prio{p}_marked", EcnMarked, Count),
    // mlx5 physical port counters (pport_phy_statistical / 802.3 groups):
    // 64-bit, unlike the IB PMA symbol_error (16-bit) and link_downed
    // (8-bit) under /sys/class/infiniband that stick at their maximum.
    r("mlx5", "rx_symbol_err_phy", PhySymbolErrors, Count),
    r("mlx5", "link_down_events_phy", LinkDownEvents, Count),
    // mlx5 physical layer statistical group (PPCNT) and its per-lane group.
    r(
        "mlx5",
        "rx_corrected_bits_phy",
        PhyErrors("fec_corrected_bits"),
        Count,
    ),
    r(
        "mlx5",
        "rx_err_lane_{p}_phy",
        PhyErrors("fec_corrected_bits"),
        Count,
    ),
    r(
        "mlx5",
        "rx_pcs_symbol_err_phy",
        PhyErrors("pcs_symbol_errors"),
        Count,
    ),
    // mlx5 PCIe performance groups (MPCNT).
    r(
        "mlx5",
        "rx_pci_signal_integrity",
        PcieErrors("rx_signal_integrity"),
        Count,
    ),
    r(
        "mlx5",
        "tx_pci_signal_integrity",
        PcieErrors("tx_signal_integrity"),
        Count,
    ),
    r(
        "mlx5",
        "outbound_pci_buffer_overflow",
        PcieErrors("outbound_buffer_overflow"),
        Count,
    ),
    // mlx5 q counter: out_of_buffer of the Ethernet receive queues.
    r(
        "mlx5",
        "rx_out_of_buffer",
        Discards("rx_out_of_buffer"),
        Count,
    ),
    // bnxt_en (bnxt_ethtool.c) port stats.
    r(
        "bnxt_en",
        "rx_pfc_ena_frames_pri{p}",
        PfcPauseFrames(Rx),
        Count,
    ),
    r(
        "bnxt_en",
        "tx_pfc_ena_frames_pri{p}",
        PfcPauseFrames(Tx),
        Count,
    ),
    r(
        "bnxt_en",
        "pfc_pri{p}_rx_duration_us",
        PfcPauseDuration(Rx),
        Micros,
    ),
    r(
        "bnxt_en",
        "pfc_pri{p}_tx_duration_us",
        PfcPauseDuration(Tx),
        Micros,
    ),
    r(
        "bnxt_en",
        "pfc_pri{p}_rx_transitions",
        PfcPauseTransitions(Rx),
        Count,
    ),
    r(
        "bnxt_en",
        "pfc_pri{p}_tx_transitions",
        PfcPauseTransitions(Tx),
        Count,
    ),
    r("bnxt_en", "rx_pause_frames", LinkPauseFrames(Rx), Count),
    r("bnxt_en", "tx_pause_frames", LinkPauseFrames(Tx), Count),
    r(
        "bnxt_en",
        "continuous_pause_events",
        PauseStormEvents("continuous"),
        Count,
    ),
    r(
        "bnxt_en",
        "continuous_roce_pause_events",
        PauseStormEvents("continuous_roce"),
        Count,
    ),
    r("bnxt_en", "rx_stat_discard", Discards("rx_port"), Count),
    r("bnxt_en", "tx_stat_discard", Discards("tx_port"), Count),
    r(
        "bnxt_en",
        "rx_total_discard_pkts",
        Discards("rx_ring"),
        Count,
    ),
    r(
        "bnxt_en",
        "tx_total_discard_pkts",
        Discards("tx_ring"),
        Count,
    ),
    // ice (ice_ethtool.c): per-priority xon/xoff, summed per priority.
    r("ice", "rx_priority_{p}_xon.nic", PfcPauseFrames(Rx), Count),
    r("ice", "rx_priority_{p}_xoff.nic", PfcPauseFrames(Rx), Count),
    r("ice", "tx_priority_{p}_xon.nic", PfcPauseFrames(Tx), Count),
    r("ice", "tx_priority_{p}_xoff.nic", PfcPauseFrames(Tx), Count),
    r("ice", "link_xon_rx.nic", LinkPauseFrames(Rx), Count),
    r("ice", "link_xoff_rx.nic", LinkPauseFrames(Rx), Count),
    r("ice", "link_xon_tx.nic", LinkPauseFrames(Tx), Count),
    r("ice", "link_xoff_tx.nic", LinkPauseFrames(Tx), Count),
    r("ice", "rx_dropped.nic", Discards("rx_port"), Count),
    r(
        "ice",
        "tx_dropped_link_down.nic",
        Discards("tx_link_down"),
        Count,
    ),
    // 802.3x flow control (e1000, igb, ixgbe share these names).
    r(
        "e1000/igb/ixgbe",
        "rx_flow_control_xon",
        LinkPauseFrames(Rx),
        Count,
    ),
    r(
        "e1000/igb/ixgbe",
        "rx_flow_control_xoff",
        LinkPauseFrames(Rx),
        Count,
    ),
    r(
        "e1000/igb/ixgbe",
        "tx_flow_control_xon",
        LinkPauseFrames(Tx),
        Count,
    ),
    r(
        "e1000/igb/ixgbe",
        "tx_flow_control_xoff",
        LinkPauseFrames(Tx),
        Count,
    ),
    r(
        "e1000/igb/ixgbe",
        "rx_no_buffer_count",
        Discards("rx_no_buffer"),
        Count,
    ),
    r(
        "e1000/igb/ixgbe",
        "rx_missed_errors",
        Discards("rx_missed"),
        Count,
    ),
    // ixgbe per packet buffer PFC (its PXON/PXOFF registers are indexed by
    // user priority, IXGBE_MAX_PACKET_BUFFERS = 8).
    r("ixgbe", "rx_pb_{p}_pxon", PfcPauseFrames(Rx), Count),
    r("ixgbe", "rx_pb_{p}_pxoff", PfcPauseFrames(Rx), Count),
    r("ixgbe", "tx_pb_{p}_pxon", PfcPauseFrames(Tx), Count),
    r("ixgbe", "tx_pb_{p}_pxoff", PfcPauseFrames(Tx), Count),
];

/// Matches `name` against one pattern; returns the priority for `{p}`
/// patterns (or `Some(None)` for literal ones).
fn match_pattern(pattern: &str, name: &str) -> Option<Option<u8>> {
    match pattern.split_once("{p}") {
        None => (pattern == name).then_some(None),
        Some((prefix, suffix)) => {
            let middle = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
            let digit = match middle.as_bytes() {
                [d @ b'0'..=b'7'] => d - b'0',
                _ => return None,
            };
            Some(Some(digit))
        }
    }
}

/// The meaning and scale of one driver counter name, if the table has it.
pub fn lookup(name: &str) -> Option<(Meaning, Scale)> {
    RULES.iter().find_map(|rule| {
        let priority = match_pattern(rule.pattern, name)?;
        let meaning = match (rule.kind, priority) {
            (PfcPauseFrames(direction), Some(priority)) => Meaning::PfcPauseFrames {
                priority,
                direction,
            },
            (PfcPauseDuration(direction), Some(priority)) => Meaning::PfcPauseDuration {
                priority,
                direction,
            },
            (PfcPauseTransitions(direction), Some(priority)) => Meaning::PfcPauseTransitions {
                priority,
                direction,
            },
            (LinkPauseFrames(direction), None) => Meaning::LinkPauseFrames { direction },
            (PauseStormEvents(severity), None) => Meaning::PauseStormEvents { severity },
            (Discards(reason), priority) => Meaning::Discards { reason, priority },
            (EcnMarked, Some(priority)) => Meaning::EcnMarked { priority },
            (PhySymbolErrors, None) => Meaning::PhySymbolErrors,
            (LinkDownEvents, None) => Meaning::LinkDownEvents,
            (PhyErrors(kind), lane) => Meaning::PhyErrors { kind, lane },
            (PcieErrors(kind), None) => Meaning::PcieErrors { kind },
            // A per-priority kind without {p} (or the reverse) is a table
            // bug; the test over RULES catches it.
            _ => return None,
        };
        Some((meaning, rule.scale))
    })
}

/// The meanings of one string set, resolved once per set (names change only
/// when the driver's count changes) so that a sample only adds numbers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resolved {
    /// (stat index, slot, scale) for every mapped name.
    mapped: Vec<(usize, usize, Scale)>,
    /// Meaning of each slot, in first-seen order.
    slots: Vec<(Meaning, Scale)>,
    /// (stat index, name) of raw counters chosen by the config.
    raw: Vec<(usize, String)>,
}

impl Resolved {
    /// Resolves `names`; `raw_wanted` are the names to export raw. A name
    /// the driver lists more than once (the kernel does not forbid it) is
    /// taken at its first occurrence only: later ones would add a second,
    /// identical series of a raw counter (which Prometheus drops as a
    /// duplicate) and count a mapped counter twice in its meaning's sum.
    pub fn new(names: &[String], raw_wanted: &[String]) -> Resolved {
        let mut out = Resolved::default();
        let mut seen = std::collections::HashSet::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if !seen.insert(name.as_str()) {
                continue;
            }
            if let Some((meaning, scale)) = lookup(name) {
                let slot = match out.slots.iter().position(|(m, _)| *m == meaning) {
                    Some(s) => s,
                    None => {
                        out.slots.push((meaning, scale));
                        out.slots.len() - 1
                    }
                };
                out.mapped.push((i, slot, scale));
            }
            if raw_wanted.iter().any(|w| w == name) {
                out.raw.push((i, name.clone()));
            }
        }
        out
    }

    /// Mapped statistics for one sample of `values` (indexed like the names).
    /// Values past the end (a shorter reply) are skipped.
    pub fn apply(&self, values: &[u64]) -> (Vec<crate::MappedStat>, Vec<crate::RawStat>) {
        let mut acc = vec![0u64; self.slots.len()];
        let mut seen = vec![false; self.slots.len()];
        for &(i, slot, _) in &self.mapped {
            if let (Some(v), Some(a), Some(s)) =
                (values.get(i), acc.get_mut(slot), seen.get_mut(slot))
            {
                *a = a.wrapping_add(*v);
                *s = true;
            }
        }
        let stats = self
            .slots
            .iter()
            .zip(acc.iter().zip(&seen))
            .filter(|(_, (_, seen))| **seen)
            .map(|(&(meaning, scale), (&v, _))| crate::MappedStat {
                meaning,
                value: match scale {
                    Scale::Count => crate::StatValue::Count(v),
                    Scale::Micros => crate::StatValue::Seconds(v as f64 / 1e6),
                },
            })
            .collect();
        let raw = self
            .raw
            .iter()
            .filter_map(|(i, name)| {
                values.get(*i).map(|v| crate::RawStat {
                    name: name.clone(),
                    value: *v,
                })
            })
            .collect();
        (stats, raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver listing `rx_prio3_pause` (or any counter) twice must not
    /// give two identical `roce_netdev_ethtool_stat_total` series nor a
    /// pause count of both added up: the first occurrence is kept.
    #[test]
    fn a_name_listed_twice_is_taken_once_at_its_first_occurrence() {
        let names: Vec<String> = [
            "rx_prio3_pause",
            "rx_vport_rdma_unicast_packets",
            "tx_prio3_pause",
            "rx_prio3_pause",
            "rx_vport_rdma_unicast_packets",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let raw = vec!["rx_vport_rdma_unicast_packets".to_string()];
        let r = Resolved::new(&names, &raw);
        let (stats, raw) = r.apply(&[100, 5_000, 40, 7, 9]);
        assert_eq!(
            raw,
            vec![crate::RawStat {
                name: "rx_vport_rdma_unicast_packets".into(),
                value: 5_000
            }]
        );
        let rx3 = Meaning::PfcPauseFrames {
            priority: 3,
            direction: FrameDirection::Rx,
        };
        let rx: Vec<_> = stats.iter().filter(|s| s.meaning == rx3).collect();
        assert_eq!(rx.len(), 1);
        assert_eq!(rx[0].value, crate::StatValue::Count(100));
        assert_eq!(stats.len(), 2, "rx and tx of priority 3: {stats:?}");
    }

    #[test]
    fn every_rule_is_consistent() {
        for rule in RULES {
            let per_priority = matches!(
                rule.kind,
                PfcPauseFrames(_) | PfcPauseDuration(_) | PfcPauseTransitions(_) | EcnMarked
            );
            let has_p = rule.pattern.contains("{p}");
            if per_priority {
                assert!(has_p, "{} lacks {{p}}", rule.pattern);
            }
            if matches!(
                rule.kind,
                LinkPauseFrames(_)
                    | PauseStormEvents(_)
                    | PhySymbolErrors
                    | LinkDownEvents
                    | PcieErrors(_)
            ) {
                assert!(!has_p, "{} has {{p}}", rule.pattern);
            }
            let sample = rule.pattern.replace("{p}", "3");
            assert!(lookup(&sample).is_some(), "{sample}");
        }
    }

    /// mlx5's physical-layer and PCIe names (en_stats.c, counters.rst)
    /// have meanings; the lane of `rx_err_lane_N_phy` is kept apart from
    /// the total of `rx_corrected_bits_phy`.
    #[test]
    fn mlx5_phy_and_pcie_names() {
        let names: Vec<String> = [
            "rx_corrected_bits_phy",
            "rx_err_lane_0_phy",
            "rx_err_lane_3_phy",
            "rx_pcs_symbol_err_phy",
            "rx_pci_signal_integrity",
            "tx_pci_signal_integrity",
            "outbound_pci_buffer_overflow",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (stats, _) = Resolved::new(&names, &[]).apply(&[100, 30, 70, 5, 1, 1471, 9]);
        let get = |m: Meaning| {
            stats
                .iter()
                .find(|s| s.meaning == m)
                .map(|s| s.value)
                .unwrap()
        };
        use crate::StatValue::Count as C;
        let phy = |kind, lane| Meaning::PhyErrors { kind, lane };
        assert_eq!(get(phy("fec_corrected_bits", None)), C(100));
        assert_eq!(get(phy("fec_corrected_bits", Some(0))), C(30));
        assert_eq!(get(phy("fec_corrected_bits", Some(3))), C(70));
        assert_eq!(get(phy("pcs_symbol_errors", None)), C(5));
        let pcie = |kind| Meaning::PcieErrors { kind };
        assert_eq!(get(pcie("rx_signal_integrity")), C(1));
        assert_eq!(get(pcie("tx_signal_integrity")), C(1471));
        assert_eq!(get(pcie("outbound_buffer_overflow")), C(9));
        assert_eq!(stats.len(), 7);
    }

    #[test]
    fn no_name_matches_two_rules() {
        for a in RULES {
            let name = a.pattern.replace("{p}", "5");
            let hits = RULES
                .iter()
                .filter(|b| match_pattern(b.pattern, &name).is_some())
                .count();
            assert_eq!(hits, 1, "{name}");
        }
    }

    #[test]
    fn priority_is_one_digit_0_to_7() {
        assert_eq!(match_pattern("rx_prio{p}_pause", "rx_prio8_pause"), None);
        assert_eq!(match_pattern("rx_prio{p}_pause", "rx_prio10_pause"), None);
        assert_eq!(match_pattern("rx_prio{p}_pause", "rx_prio_pause"), None);
        assert_eq!(
            match_pattern("rx_prio{p}_pause", "rx_prio7_pause"),
            Some(Some(7))
        );
        assert_eq!(lookup("rx_global_pause"), None);
    }
}
