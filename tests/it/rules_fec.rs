//! `fec_ber_high` by FEC code: each code gets its own limit (RS(544,514) on
//! PAM4 lanes, RS(528,514) on 25G NRZ lanes, BASE-R), each with a rate that
//! must fire and a healthy one that must not, 10 s apart as the sampler
//! takes them. The pre-FEC BER counts the bits on the wire at the code's
//! line rate.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::rules::{self, Finding};
use roce_exporter::snapshot::Snapshot;
use roce_netdev::fec::{FecCounter, FecInfo, FecMode};
use roce_netdev::phys::{PhysNetdev, PhysSnapshot};
use roce_netdev::{Netdev, NetdevSnapshot, RdmaPortRef};

/// Sample `i` of ens1np0 (mlx5_0 port 1) at `speed_mbps`, running `mode`,
/// with `corrected_bits` so far.
fn sample(i: u64, speed_mbps: u64, mode: FecMode, corrected_bits: u64) -> Arc<Snapshot> {
    let rdma = Some(RdmaPortRef {
        device: "mlx5_0".into(),
        port: 1,
    });
    let counter = |total| {
        Some(FecCounter {
            total,
            lanes: vec![],
        })
    };
    Arc::new(Snapshot {
        sequence: i + 1,
        taken_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + 10 * i)),
        netdev: Some(NetdevSnapshot {
            netdevs: vec![Netdev {
                name: "ens1np0".into(),
                rdma: rdma.clone(),
                speed_mbps: Some(speed_mbps),
                ..Netdev::default()
            }],
        }),
        phys: Some(PhysSnapshot {
            netdevs: vec![PhysNetdev {
                name: "ens1np0".into(),
                rdma,
                pci: Some("0000:17:00.0".into()),
                fec: Some(FecInfo {
                    active: Some(mode),
                    auto: Some(false),
                    corrected_blocks: counter(corrected_bits / 3),
                    uncorrectable_blocks: counter(0),
                    corrected_bits: counter(corrected_bits),
                }),
                module: None,
                aer: Default::default(),
            }],
            gpus: vec![],
            reporters: None,
        }),
        ..Snapshot::default()
    })
}

/// `fec_ber_high` over three samples 10 s apart, corrected bits growing at
/// `ber` of the link's line rate (`line_rate_bps`).
fn run(speed_mbps: u64, mode: FecMode, line_rate_bps: f64, ber: f64) -> Vec<Finding> {
    let per_sample = (ber * line_rate_bps * 10.0).round() as u64;
    let history: Vec<Arc<Snapshot>> = (0..3)
        .map(|i| sample(i, speed_mbps, mode, 9_000_000 + i * per_sample))
        .collect();
    rules::evaluate(&history, &RulesConfig::default(), &Expectations::default())
        .into_iter()
        .filter(|f| f.rule == "fec_ber_high")
        .collect()
}

const LINE_400G_RS544: f64 = 400e9 * 257.0 / 256.0 * 544.0 / 514.0;
const LINE_100G_RS528: f64 = 100e9 * 66.0 / 64.0;
const LINE_25G_BASE_R: f64 = 25e9 * 66.0 / 64.0;

#[test]
fn rs544_on_pam4_lanes_keeps_its_margin_to_2_4e_4() {
    // A healthy 400G DR4 link corrects a few bits per million.
    assert_eq!(run(400_000, FecMode::Rs, LINE_400G_RS544, 5e-6), vec![]);
    let f = run(400_000, FecMode::Rs, LINE_400G_RS544, 3e-5);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].evidence
            .ends_with("= pre-FEC BER 3.00e-5; expected <= 1e-5 for RS(544,514)"),
        "{}",
        f[0].evidence
    );
}

#[test]
fn rs528_on_nrz_lanes_is_judged_against_its_own_limit() {
    // 5e-6 on a 100G RS(528,514) link is a tenth of the 5e-5 its PMDs are
    // specified to: a failing optic, which the single 1e-5 limit let pass.
    let f = run(100_000, FecMode::Rs, LINE_100G_RS528, 5e-6);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].evidence
            .ends_with("= pre-FEC BER 5.00e-6; expected <= 2e-6 for RS(528,514)"),
        "{}",
        f[0].evidence
    );
    assert!(
        f[0].finding.contains("above 2e-6 for RS(528,514)"),
        "{}",
        f[0].finding
    );
    // A healthy 100G SR4 link.
    assert_eq!(run(100_000, FecMode::Rs, LINE_100G_RS528, 1e-8), vec![]);
}

#[test]
fn base_r_links_are_specified_without_needing_fec() {
    let f = run(25_000, FecMode::BaseR, LINE_25G_BASE_R, 1e-7);
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(
        f[0].evidence.ends_with("expected <= 1e-8 for BASE-R"),
        "{}",
        f[0].evidence
    );
    // A healthy 25G DAC with Firecode: a stray corrected bit now and then.
    assert_eq!(run(25_000, FecMode::BaseR, LINE_25G_BASE_R, 1e-10), vec![]);
}

#[test]
fn each_limit_can_be_set() {
    let config = roce_exporter::config::Config::parse(
        "rules:\n  fec_ber: {max_ber_rs528: 1e-5, max_ber_rs544: 2e-5, max_ber_base_r: 1e-7}\n",
        "test",
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .rules;
    let history: Vec<Arc<Snapshot>> = (0..3)
        .map(|i| sample(i, 100_000, FecMode::Rs, 9_000_000 + i * 5_156_250))
        .collect();
    let f: Vec<Finding> = rules::evaluate(&history, &config, &Expectations::default())
        .into_iter()
        .filter(|f| f.rule == "fec_ber_high")
        .collect();
    assert_eq!(f, vec![], "5e-6 is below a 1e-5 limit set for RS(528,514)");
}
