//! Name mapping from realistic full `ethtool -S` listings (mlx5 ConnectX-7
//! with PFC on all 8 priorities, bnxt_en, ice, and a real e1000 capture),
//! replayed through the same cache and table the ioctl path uses: exact
//! family, labels and unit conversion, and nothing exported for unknown
//! names.

use std::path::PathBuf;

use roce_netdev::ethtool::{Replay, StatsCache};
use roce_netdev::FrameDirection::{Rx, Tx};
use roce_netdev::{FrameDirection, MappedStat, Meaning, RawStat, StatValue};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ethtool")
}

fn sample(listing: &str, raw: &[&str]) -> (Vec<MappedStat>, Vec<RawStat>) {
    let mut replay = Replay::new(fixtures());
    let mut cache = StatsCache::new(raw.iter().map(|s| s.to_string()).collect());
    cache.sample(&mut replay, listing).expect(listing)
}

fn count(stats: &[MappedStat], m: Meaning) -> u64 {
    let hits: Vec<_> = stats.iter().filter(|s| s.meaning == m).collect();
    assert_eq!(hits.len(), 1, "{m:?} once");
    match hits[0].value {
        StatValue::Count(v) => v,
        StatValue::Seconds(s) => panic!("{m:?} is seconds ({s})"),
    }
}

fn seconds(stats: &[MappedStat], m: Meaning) -> f64 {
    let hits: Vec<_> = stats.iter().filter(|s| s.meaning == m).collect();
    assert_eq!(hits.len(), 1, "{m:?} once");
    match hits[0].value {
        StatValue::Seconds(s) => s,
        StatValue::Count(v) => panic!("{m:?} is a count ({v})"),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1.0)
}

/// PFC pause frames of priority `p` in direction `d`.
fn frames(p: u8, d: FrameDirection) -> Meaning {
    Meaning::PfcPauseFrames {
        priority: p,
        direction: d,
    }
}

/// Time priority `p` spent paused in direction `d`.
fn duration(p: u8, d: FrameDirection) -> Meaning {
    Meaning::PfcPauseDuration {
        priority: p,
        direction: d,
    }
}

/// Transitions of priority `p` between paused and not, direction `d`.
fn transitions(p: u8, d: FrameDirection) -> Meaning {
    Meaning::PfcPauseTransitions {
        priority: p,
        direction: d,
    }
}

#[test]
fn mlx5_connectx7_all_priorities() {
    let (stats, raw) = sample("mlx5-cx7", &[]);
    assert!(raw.is_empty());
    for p in 0..8u8 {
        let pu = u64::from(p);
        assert_eq!(count(&stats, frames(p, Rx)), 1000 + pu);
        assert_eq!(count(&stats, frames(p, Tx)), 2000 + pu);
        // rx_prioN_pause_duration = 1_500_000 * (N + 1) µs
        let rx = seconds(&stats, duration(p, Rx));
        assert!(close(rx, 1.5 * f64::from(p + 1)), "{rx}");
        let tx = seconds(&stats, duration(p, Tx));
        assert!(close(tx, 250e-6 * f64::from(p)), "{tx}");
        assert_eq!(count(&stats, transitions(p, Rx)), 300 + pu);
        assert!(!stats.iter().any(|s| s.meaning == transitions(p, Tx)));
        let d = |reason| Meaning::Discards {
            reason,
            priority: Some(p),
        };
        assert_eq!(count(&stats, d("rx_no_buffer")), 40 + pu);
        assert_eq!(count(&stats, d("rx_congestion")), 50 + pu);
        assert_eq!(count(&stats, d("rx_port")), 90 + pu);
        assert_eq!(
            count(&stats, Meaning::EcnMarked { priority: p }),
            60000 + pu
        );
    }
    assert_eq!(
        count(&stats, Meaning::LinkPauseFrames { direction: Rx }),
        11
    );
    assert_eq!(
        count(&stats, Meaning::LinkPauseFrames { direction: Tx }),
        12
    );
    assert_eq!(
        count(
            &stats,
            Meaning::PauseStormEvents {
                severity: "warning"
            }
        ),
        2
    );
    assert_eq!(
        count(&stats, Meaning::PauseStormEvents { severity: "error" }),
        1
    );
    let port = |reason| Meaning::Discards {
        reason,
        priority: None,
    };
    assert_eq!(count(&stats, port("rx_port")), 77);
    assert_eq!(count(&stats, port("tx_port")), 5);
    assert_eq!(count(&stats, port("rx_out_of_buffer")), 4242);
    // The 64-bit physical counters that stand in for the IB PMA's 16-bit
    // symbol_error and 8-bit link_downed.
    assert_eq!(count(&stats, Meaning::PhySymbolErrors), 752694);
    assert_eq!(count(&stats, Meaning::LinkDownEvents), 164242);
    // The physical-layer and PCIe groups (en_stats.c
    // pport_phy_statistical_*, pcie_perf_stats_desc*).
    let phy = |kind, lane| Meaning::PhyErrors { kind, lane };
    assert_eq!(count(&stats, phy("fec_corrected_bits", None)), 19837);
    assert_eq!(count(&stats, phy("fec_corrected_bits", Some(3))), 731030);
    assert_eq!(count(&stats, phy("pcs_symbol_errors", None)), 592041);
    let pcie = |kind| Meaning::PcieErrors { kind };
    assert_eq!(count(&stats, pcie("rx_signal_integrity")), 586625);
    assert_eq!(count(&stats, pcie("tx_signal_integrity")), 14421);
    assert_eq!(count(&stats, pcie("outbound_buffer_overflow")), 442220);
    // 8 × (pause rx/tx, duration rx/tx, transition rx, 3 per-TC, per-prio
    // discards) + link rx/tx + 2 storm + 3 port discards + symbol errors and
    // link down events + 6 phy (corrected bits total and 4 lanes, PCS symbol
    // errors) + 3 PCIe; the other ~1,380 counters of the listing have no
    // meaning and are not exported.
    assert_eq!(stats.len(), 8 * 9 + 2 + 2 + 3 + 2 + 6 + 3);
}

#[test]
fn raw_counters_only_when_listed() {
    let (_, raw) = sample(
        "mlx5-cx7",
        &["rx_vport_rdma_unicast_packets", "no_such_counter"],
    );
    assert_eq!(raw.len(), 1);
    assert_eq!(raw[0].name, "rx_vport_rdma_unicast_packets");
}

#[test]
fn bnxt_en() {
    let (stats, _) = sample("bnxt_en", &[]);
    for p in 0..8u8 {
        let pu = u64::from(p);
        assert_eq!(count(&stats, frames(p, Rx)), 500 + pu);
        assert_eq!(count(&stats, frames(p, Tx)), 600 + pu);
        let rx = seconds(&stats, duration(p, Rx));
        assert!(close(rx, 1e-3 * f64::from(p + 1)), "{rx}");
        let tx = seconds(&stats, duration(p, Tx));
        assert!(close(tx, 10e-6 * f64::from(p)), "{tx}");
        assert_eq!(count(&stats, transitions(p, Rx)), 70 + pu);
        assert_eq!(count(&stats, transitions(p, Tx)), 80 + pu);
    }
    assert_eq!(count(&stats, Meaning::LinkPauseFrames { direction: Rx }), 3);
    assert_eq!(count(&stats, Meaning::LinkPauseFrames { direction: Tx }), 4);
    assert_eq!(
        count(
            &stats,
            Meaning::PauseStormEvents {
                severity: "continuous"
            }
        ),
        1
    );
    assert_eq!(
        count(
            &stats,
            Meaning::PauseStormEvents {
                severity: "continuous_roce"
            }
        ),
        2
    );
    let port = |reason| Meaning::Discards {
        reason,
        priority: None,
    };
    assert_eq!(count(&stats, port("rx_port")), 17);
    assert_eq!(count(&stats, port("tx_port")), 18);
    assert_eq!(count(&stats, port("rx_ring")), 19);
    assert_eq!(count(&stats, port("tx_ring")), 20);
    assert_eq!(stats.len(), 8 * 6 + 2 + 2 + 4);
}

#[test]
fn ice_sums_xon_and_xoff() {
    let (stats, _) = sample("ice", &[]);
    for p in 0..8u8 {
        let pu = u64::from(p);
        // rx_priority_N_xon.nic = 100 + N, rx_priority_N_xoff.nic = 200 + N
        assert_eq!(count(&stats, frames(p, Rx)), 300 + 2 * pu);
        assert_eq!(count(&stats, frames(p, Tx)), 30 * pu);
    }
    assert_eq!(
        count(&stats, Meaning::LinkPauseFrames { direction: Rx }),
        1 + 2
    );
    assert_eq!(
        count(&stats, Meaning::LinkPauseFrames { direction: Tx }),
        3 + 4
    );
    assert_eq!(
        count(
            &stats,
            Meaning::Discards {
                reason: "rx_port",
                priority: None
            }
        ),
        33
    );
    assert_eq!(
        count(
            &stats,
            Meaning::Discards {
                reason: "tx_link_down",
                priority: None
            }
        ),
        0
    );
    // the VSI's own "rx_dropped" (999) is not the port's and stays unmapped
    assert_eq!(stats.len(), 16 + 2 + 2);
}

#[test]
fn e1000_capture_from_the_softroce_vm() {
    let (stats, _) = sample("e1000", &[]);
    assert_eq!(count(&stats, Meaning::LinkPauseFrames { direction: Rx }), 0);
    assert_eq!(count(&stats, Meaning::LinkPauseFrames { direction: Tx }), 0);
    assert_eq!(
        count(
            &stats,
            Meaning::Discards {
                reason: "rx_no_buffer",
                priority: None
            }
        ),
        0
    );
    assert_eq!(
        count(
            &stats,
            Meaning::Discards {
                reason: "rx_missed",
                priority: None
            }
        ),
        0
    );
    assert_eq!(stats.len(), 4);
}

#[test]
fn missing_listing_is_unsupported_not_an_error() {
    let mut replay = Replay::new(fixtures());
    let mut cache = StatsCache::new(vec![]);
    let err = cache.sample(&mut replay, "no-such-netdev").unwrap_err();
    assert!(
        matches!(err, roce_netdev::EthtoolError::Unsupported { .. }),
        "{err}"
    );
}
