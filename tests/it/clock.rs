//! Rate rules across wall-clock steps: windows and rates are measured on
//! the monotonic clock ([`Snapshot::monotonic`]), so an NTP correction or a
//! `date -s` between samples neither silences a rate rule nor invents one.
//! The wall-clock time (`taken_at`) stays what is shown and exported.

use std::time::{Duration, SystemTime};

use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::rules::{Engine, Finding};
use roce_exporter::snapshot::Snapshot;
use roce_rdma::{Counter, Device, LinkLayer, PhysState, Port, PortState, RdmaSnapshot};

/// An active mlx5 RoCE port at 400 Gb/s whose `hw_counters/out_of_buffer`
/// reads `out_of_buffer`.
fn port(out_of_buffer: u64) -> Port {
    Port {
        number: 1,
        state: Some(PortState::Active),
        phys_state: Some(PhysState::LinkUp),
        rate_bytes_per_second: Some(50_000_000_000),
        link_layer: Some(LinkLayer::Ethernet),
        netdev: Some("ens1f0np0".into()),
        hw_counters: vec![Counter::new("out_of_buffer", out_of_buffer)],
        ..Port::default()
    }
}

/// Samples 5 s apart on the monotonic clock; the wall clock reads `wall[i]`
/// seconds after a fixed time.
fn samples(out_of_buffer: &[u64], wall: &[i64]) -> Vec<Snapshot> {
    let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    out_of_buffer
        .iter()
        .zip(wall)
        .enumerate()
        .map(|(i, (&v, &w))| Snapshot {
            sequence: i as u64 + 1,
            taken_at: Some(if w >= 0 {
                base + Duration::from_secs(w as u64)
            } else {
                base - Duration::from_secs(w.unsigned_abs())
            }),
            monotonic: Some(Duration::from_secs(100 + 5 * i as u64)),
            interval: Duration::from_secs(5),
            rdma: Some(RdmaSnapshot {
                devices: vec![Device {
                    name: "mlx5_0".into(),
                    driver: Some("mlx5_core".into()),
                    ports: vec![port(v)],
                    ..Device::default()
                }],
                errors: vec![],
            }),
            ..Snapshot::default()
        })
        .collect()
}

/// The `out_of_buffer` findings after each sample, through the engine the
/// sampler runs (default rules: above 1/s over a minute).
fn out_of_buffer_after_each(snapshots: &[Snapshot]) -> Vec<Vec<Finding>> {
    let rules = RulesConfig::default();
    let mut engine = Engine::with_retention(rules.longest_window() + Duration::from_secs(5));
    snapshots
        .iter()
        .map(|s| {
            engine
                .evaluate(s, &rules, &Expectations::default())
                .into_iter()
                .filter(|f| f.rule == "out_of_buffer")
                .collect()
        })
        .collect()
}

/// 20 drops per 5 s sample: 4/s, above the 1/s limit.
const GROWING: [u64; 5] = [0, 20, 40, 60, 80];

#[test]
fn a_wall_clock_stepping_back_does_not_silence_a_rate_rule() {
    // An NTP correction of one hour back between the second and third
    // sample.
    let wall = [0, 5, 10 - 3600, 15 - 3600, 20 - 3600];
    let after = out_of_buffer_after_each(&samples(&GROWING, &wall));
    assert_eq!(after[0], vec![], "first sample: no rate yet");
    for (i, findings) in after.iter().enumerate().skip(1) {
        assert_eq!(findings.len(), 1, "sample {}: {findings:?}", i + 1);
        assert_eq!(
            findings[0].evidence,
            format!(
                "+{} over {}s = 4/s; expected <= 1/s (rules.out_of_buffer.per_second)",
                GROWING[i],
                5 * i
            ),
            "sample {}",
            i + 1
        );
    }
}

#[test]
fn a_wall_clock_jumping_forward_does_not_silence_a_rate_rule() {
    let wall = [0, 5, 10 + 3600, 15 + 3600, 20 + 3600];
    let after = out_of_buffer_after_each(&samples(&GROWING, &wall));
    for (i, findings) in after.iter().enumerate().skip(1) {
        assert_eq!(findings.len(), 1, "sample {}: {findings:?}", i + 1);
        assert!(
            findings[0].evidence.contains("= 4/s"),
            "{}",
            findings[0].evidence
        );
    }
}

#[test]
fn a_quiet_counter_across_a_wall_clock_step_raises_nothing() {
    let wall = [0, 5, 10 - 3600, 15 - 3600, 20 - 3600];
    let after = out_of_buffer_after_each(&samples(&[7, 7, 7, 8, 8], &wall));
    assert!(after.iter().all(Vec::is_empty), "{after:?}");
}
