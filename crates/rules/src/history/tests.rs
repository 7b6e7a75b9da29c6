use super::*;
use roce_rdma::{Counter, Device, RdmaSnapshot};

fn port(symbol_error: u64) -> Port {
    Port {
        number: 1,
        counters: vec![Counter::new("symbol_error", symbol_error)],
        ..Port::default()
    }
}

fn snapshot(t: u64, ports: Vec<Port>) -> Snapshot {
    Snapshot {
        monotonic: Some(Duration::from_secs(1_000_000 + t)),
        rdma: Some(RdmaSnapshot {
            devices: vec![Device {
                name: "mlx5_0".into(),
                driver: Some("mlx5_core".into()),
                ports,
                ..Device::default()
            }],
            errors: vec![],
        }),
        ..Snapshot::default()
    }
}

#[test]
fn retention_keeps_the_window_and_no_more() {
    let mut h = History::new(Duration::from_secs(30), HISTORY_MAX);
    for t in (0..=100).step_by(5) {
        h.push(&snapshot(t, vec![port(t)]));
    }
    assert_eq!(h.len(), 7, "70..=100 s");
    let inc = h
        .port("mlx5_0", 1)
        .increase(FollowedCounter::SymbolErrors, Duration::from_secs(3600))
        .unwrap();
    assert_eq!((inc.amount, inc.seconds), (30, 30.0));
}

#[test]
fn a_long_window_is_thinned_evenly_to_the_cap() {
    // 1 s samples, a 600 s window: 601 samples would be needed.
    let mut h = History::new(Duration::from_secs(601), 64);
    for t in 0..=2000 {
        h.push(&snapshot(t, vec![port(t)]));
    }
    assert_eq!(h.len(), 64);
    let times: Vec<u64> = h.times.iter().map(|t| t.as_secs() - 1_000_000).collect();
    assert_eq!(times.last(), Some(&2000));
    assert!(
        (1399..=1420).contains(&times[0]),
        "reaches back about the window: {}",
        times[0]
    );
    let widest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    assert!(
        widest <= 32,
        "evenly spread: widest gap {widest} s in {times:?}"
    );
    // Thinning keeps the increase whole: one per second.
    let inc = h
        .port("mlx5_0", 1)
        .increase(FollowedCounter::SymbolErrors, Duration::from_secs(600))
        .unwrap();
    assert_eq!(inc.amount as f64, inc.seconds);
}

#[test]
fn a_vanished_port_loses_its_columns_once_out_of_the_window() {
    let mut h = History::new(Duration::from_secs(10), HISTORY_MAX);
    h.push(&snapshot(0, vec![port(1)]));
    h.push(&snapshot(5, vec![]));
    assert_eq!(h.columns(), 1, "still within the window");
    assert_eq!(
        h.port("mlx5_0", 1)
            .increase(FollowedCounter::SymbolErrors, Duration::from_secs(60)),
        None,
        "one sample carries it"
    );
    for t in [10, 15, 20] {
        h.push(&snapshot(t, vec![]));
    }
    assert_eq!(h.columns(), 0);
}

#[test]
fn gaps_are_skipped_and_a_reappearing_port_continues() {
    let h = History::of(
        [
            snapshot(0, vec![port(1)]),
            snapshot(5, vec![]),
            snapshot(10, vec![port(4)]),
        ]
        .iter(),
    );
    let inc = h
        .port("mlx5_0", 1)
        .increase(FollowedCounter::SymbolErrors, Duration::from_secs(60))
        .unwrap();
    assert_eq!((inc.amount, inc.seconds), (3, 10.0));
}

#[test]
fn hardware_meanings_are_summed_per_sample() {
    let hw = |oos: u64, seq: u64| Port {
        number: 1,
        hw_counters: vec![
            Counter::new("out_of_sequence", oos),
            Counter::new("packet_seq_err", seq),
        ],
        ..Port::default()
    };
    let h = History::of([snapshot(0, vec![hw(0, 10)]), snapshot(10, vec![hw(5, 12)])].iter());
    let series = h.port("mlx5_0", 1);
    let both = [
        FollowedCounter::Hw(HwMeaning::OutOfSequence),
        FollowedCounter::Hw(HwMeaning::PacketSeqErr),
    ];
    assert_eq!(
        series
            .increase_of_sum(&both, Duration::from_secs(60))
            .map(|i| i.amount),
        Some(7)
    );
    assert_eq!(
        series.increase(
            FollowedCounter::Hw(HwMeaning::Retransmissions),
            Duration::from_secs(60)
        ),
        None,
        "mlx5 has no counter of that meaning"
    );
    assert_eq!(
        series.first_within(
            FollowedCounter::Hw(HwMeaning::PacketSeqErr),
            Duration::from_secs(60)
        ),
        Some(10)
    );
}

#[test]
fn a_summed_value_missing_from_one_sample_is_a_gap_not_a_drop() {
    let hw = |handled: Option<u64>| Port {
        number: 1,
        hw_counters: [
            Some(("np_cnp_sent", 1_000_000)),
            handled.map(|v| ("rp_cnp_handled", v)),
        ]
        .into_iter()
        .flatten()
        .map(|(n, v)| Counter::new(n, v))
        .collect(),
        ..Port::default()
    };
    // rp_cnp_handled failed to read in the middle sample.
    let h = History::of(
        [
            snapshot(0, vec![hw(Some(9_000_000))]),
            snapshot(5, vec![hw(None)]),
            snapshot(10, vec![hw(Some(9_000_004))]),
        ]
        .iter(),
    );
    let both = [
        FollowedCounter::Hw(HwMeaning::CnpSent),
        FollowedCounter::Hw(HwMeaning::CnpHandled),
    ];
    let inc = h
        .port("mlx5_0", 1)
        .increase_of_sum(&both, Duration::from_secs(60))
        .unwrap();
    assert_eq!((inc.amount, inc.seconds, inc.resets), (4, 10.0, 0));
}

#[test]
fn snapshots_without_a_time_are_not_kept() {
    let mut s = snapshot(0, vec![port(1)]);
    s.monotonic = None;
    let h = History::of([s].iter());
    assert!(h.is_empty());
}
