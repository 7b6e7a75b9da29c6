//! The physical-layer rules: for each, a sequence of snapshots that fires it
//! (severity and evidence) and a healthy one that must not, with realistic
//! values: the modules are the recorded SFF-8636 and CMIS EEPROMs of
//! `crates/netdev/tests/fixtures/phys` decoded by the real decoder, FEC and
//! AER counts grow at rates seen on real links, snapshots are 10 s apart.

use std::path::PathBuf;

use crate::support::h100;
use roce_exporter::config::{Expectations, RulesConfig};
use roce_exporter::rules::{self, Finding, Severity};
use roce_netdev::aer::{AerCounts, PciAer};
use roce_netdev::devlink::{HealthReporter, ReporterState};
use roce_netdev::fec::{FecCounter, FecInfo, FecMode};
use roce_netdev::module::{read_module, EepromReplay, ModuleInfo};
use roce_netdev::phys::{BridgeHealth, NicReporter, PciHealth, PhysNetdev, PhysSnapshot};
use roce_netdev::{CarrierCounts, Netdev, RdmaPortRef};
use roce_testkit::snapshot::{history, SnapshotBuilder};

fn module(netdev: &str) -> ModuleInfo {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/netdev/tests/fixtures/phys");
    read_module(&mut EepromReplay::new(dir), netdev)
        .unwrap()
        .unwrap()
}

/// One sample's host state for `ens1np0` behind mlx5_0 port 1.
#[derive(Clone, Default)]
struct State {
    link_downed: Option<u64>,
    carrier_down: Option<u64>,
    module: Option<ModuleInfo>,
    fec: Option<FecInfo>,
    nic_aer: PciAer,
    gpu_aer: PciAer,
    bridges: Vec<BridgeHealth>,
    /// GPU 2 at 0000:18:00.0, nearest NIC mlx5_0, from the topology source.
    topology: bool,
    reporters: Option<Vec<HealthReporter>>,
}

/// A 100 GbE port of mlx5_0 behind `ens1np0`, in the state `st`.
fn sample(st: &State) -> SnapshotBuilder {
    let rdma = Some(RdmaPortRef {
        device: "mlx5_0".into(),
        port: 1,
    });
    let mut s = SnapshotBuilder::new().port("mlx5_0", 1).rate_gbps(100);
    if let Some(v) = st.link_downed {
        s = s.counter("link_downed", v);
    }
    s.netdev(Netdev {
        name: "ens1np0".into(),
        rdma: rdma.clone(),
        speed_mbps: Some(100_000),
        carrier: CarrierCounts {
            changes: st.carrier_down.map(|d| 2 * d + 1),
            up: st.carrier_down.map(|d| d + 1),
            down: st.carrier_down,
        },
        ..Netdev::default()
    })
    .phys(PhysSnapshot {
        netdevs: vec![PhysNetdev {
            name: "ens1np0".into(),
            rdma,
            pci: Some("0000:17:00.0".into()),
            fec: st.fec.clone(),
            module: st.module.clone(),
            aer: st.nic_aer.clone(),
        }],
        gpus: vec![PciHealth {
            pci: "0000:18:00.0".into(),
            aer: st.gpu_aer.clone(),
        }],
        bridges: st.bridges.clone(),
        reporters: st.reporters.clone().map(|rs| {
            rs.into_iter()
                .map(|reporter| NicReporter {
                    netdev: "ens1np0".into(),
                    reporter,
                })
                .collect()
        }),
    })
}

fn run(states: &[State], rule: &str) -> Vec<Finding> {
    let h = history(states.iter().map(|st| {
        let s = sample(st);
        if st.topology {
            s.topology(gpu_2_near_mlx5_0())
        } else {
            s
        }
    }));
    rules::evaluate(&h, &RulesConfig::default(), &Expectations::default())
        .into_iter()
        .filter(|f| f.rule == rule)
        .collect()
}

fn with_module(m: ModuleInfo) -> State {
    State {
        module: Some(m),
        ..State::default()
    }
}

#[test]
fn module_rx_power_low_fires_below_the_modules_own_thresholds() {
    // The recorded QSFP28: lane 4 receives 0.04 mW, below the module's low
    // alarm (0.05 mW): critical.
    let f = run(&[with_module(module("ens1np0"))], "module_rx_power_low");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].evidence.starts_with("lane 4 0.040 mW (-14.0 dBm); module's low warning 0.100 mW (-10.0 dBm), low alarm 0.050 mW (-13.0 dBm)"),
        "{}",
        f[0].evidence
    );
    // Between the alarm and the warning: a warning.
    let mut m = module("ens1np0");
    m.lanes[3].rx_power_watts = Some(0.07e-3);
    let f = run(&[with_module(m)], "module_rx_power_low");
    assert_eq!(f[0].severity, Severity::Warning);
    // Healthy: every lane near 0.8 mW (-1 dBm), as an SR4 link should be.
    let mut m = module("ens1np0");
    m.lanes[3].rx_power_watts = Some(0.78e-3);
    assert_eq!(run(&[with_module(m)], "module_rx_power_low"), vec![]);
}

#[test]
fn module_temperature_high_against_its_own_thresholds() {
    // The QSFP28's thresholds: high warning 70 °C, high alarm 75 °C.
    let mut m = module("ens1np0");
    m.temperature_celsius = Some(72.0);
    let f = run(&[with_module(m.clone())], "module_temperature_high");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(f[0]
        .evidence
        .starts_with("temperature 72.0 °C; module's high warning 70.0 °C, high alarm 75.0 °C"));
    m.temperature_celsius = Some(78.5);
    assert_eq!(
        run(&[with_module(m.clone())], "module_temperature_high")[0].severity,
        Severity::Critical
    );
    // Healthy: the recorded 35.5 °C.
    assert_eq!(
        run(&[with_module(module("ens1np0"))], "module_temperature_high"),
        vec![]
    );
    // A module that programmed no thresholds (all zero) is not judged.
    m.thresholds.temperature_celsius = Some(roce_netdev::module::Thresholds {
        high_alarm: 0.0,
        low_alarm: 0.0,
        high_warning: 0.0,
        low_warning: 0.0,
    });
    assert_eq!(run(&[with_module(m)], "module_temperature_high"), vec![]);
}

#[test]
fn module_lane_imbalance_finds_the_weak_lane() {
    // The recorded OSFP: lane 6 receives 0.5 mW, its 7 siblings 1.5 mW
    // (4.8 dB apart), every lane above the module's low warning (0.2 mW).
    let f = run(&[with_module(module("ens2np0"))], "module_lane_imbalance");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(
        f[0].evidence
            .starts_with("lane 6 0.500 mW vs siblings' median 1.500 mW (4.8 dB below)"),
        "{}",
        f[0].evidence
    );
    // Healthy: lanes within 1.5 dB of each other (1.0 to 1.4 mW).
    let mut m = module("ens2np0");
    for (i, l) in m.lanes.iter_mut().enumerate() {
        l.rx_power_watts = Some((1.0 + 0.05 * i as f64) * 1e-3);
    }
    assert_eq!(run(&[with_module(m)], "module_lane_imbalance"), vec![]);
    // The QSFP28's lane 4 is below its low warning: that is
    // module_rx_power_low's finding, not this one's.
    assert_eq!(
        run(&[with_module(module("ens1np0"))], "module_lane_imbalance"),
        vec![]
    );
}

fn fec(corrected_bits: u64, uncorrectable: u64) -> State {
    State {
        fec: Some(FecInfo {
            active: Some(FecMode::Rs),
            auto: Some(false),
            corrected_blocks: Some(FecCounter {
                total: corrected_bits / 3,
                lanes: vec![],
            }),
            uncorrectable_blocks: Some(FecCounter {
                total: uncorrectable,
                lanes: vec![],
            }),
            corrected_bits: Some(FecCounter {
                total: corrected_bits,
                lanes: vec![],
            }),
        }),
        ..State::default()
    }
}

#[test]
fn fec_ber_high_from_corrected_bits_and_the_link_rate() {
    // 100 Gb/s with RS-FEC, RS(528,514) (no per-lane counts: below 200G
    // that code): corrected bits count at its 103.125 Gb/s line rate, 10 s
    // apart. +2e7 corrected bits each time is a pre-FEC BER of 1.94e-5,
    // above that code's 2e-6.
    let f = run(
        &[
            fec(5_000_000_000, 0),
            fec(5_020_000_000, 0),
            fec(5_040_000_000, 0),
        ],
        "fec_ber_high",
    );
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].evidence,
        "FEC corrected bits +40000000 over 20s at 103.125 Gb/s (RS(528,514) line rate of a 100 Gb/s link) = pre-FEC BER 1.94e-5; expected <= 2e-6 for RS(528,514)"
    );
    // Healthy: +1e6 a sample is 1e-6, what a good 100G link with RS-FEC
    // shows; and the first sample alone is never judged.
    assert_eq!(
        run(
            &[
                fec(5_000_000_000, 0),
                fec(5_001_000_000, 0),
                fec(5_002_000_000, 0)
            ],
            "fec_ber_high"
        ),
        vec![]
    );
    assert_eq!(run(&[fec(5_000_000_000, 0)], "fec_ber_high"), vec![]);
    // A driver without corrected bits: nothing to judge.
    let mut no_bits = fec(0, 0);
    no_bits.fec.as_mut().unwrap().corrected_bits = None;
    assert_eq!(run(&[no_bits.clone(), no_bits], "fec_ber_high"), vec![]);
}

#[test]
fn fec_uncorrectable_codewords_growing() {
    let f = run(&[fec(1_000, 42), fec(2_000, 45)], "fec_uncorrectable");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].evidence,
        "FEC uncorrectable blocks +3 over 10s; expected 0"
    );
    // Healthy: corrected bits grow, uncorrectable stays.
    assert_eq!(
        run(&[fec(1_000, 42), fec(2_000, 42)], "fec_uncorrectable"),
        vec![]
    );
    // Driver reload (counts back to 0): not growth.
    assert_eq!(
        run(
            &[fec(1_000, 42), fec(0, 0), fec(10, 0)],
            "fec_uncorrectable"
        ),
        vec![]
    );
}

fn aer(cor: u64, nonfatal: u64, fatal: u64) -> PciAer {
    let c = |total| {
        Some(AerCounts {
            total: Some(total),
            kinds: vec![],
        })
    };
    PciAer {
        correctable: c(cor),
        nonfatal: c(nonfatal),
        fatal: c(fatal),
    }
}

#[test]
fn pcie_aer_errors_on_nic_and_gpu_links() {
    let nic = |cor| State {
        nic_aer: aer(cor, 0, 0),
        gpu_aer: aer(0, 0, 0),
        ..State::default()
    };
    let f = run(&[nic(4), nic(4), nic(6)], "pcie_aer_errors");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(f[0].subject.netdev.as_deref(), Some("ens1np0"));
    assert_eq!(f[0].evidence, "AER correctable +2 over 20s; expected none");
    // A GPU's fatal error is critical.
    let gpu = |fatal| State {
        nic_aer: aer(4, 0, 0),
        gpu_aer: aer(0, 0, fatal),
        ..State::default()
    };
    let f = run(&[gpu(0), gpu(1)], "pcie_aer_errors");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding.contains("GPU 0000:18:00.0"),
        "{}",
        f[0].finding
    );
    // Healthy: counts that do not move, whatever their size.
    assert_eq!(run(&[nic(4), nic(4), nic(4)], "pcie_aer_errors"), vec![]);
    // No AER capability: absent, never judged.
    let none = State::default();
    assert_eq!(run(&[none.clone(), none], "pcie_aer_errors"), vec![]);
}

fn reporter(name: &str, state: ReporterState, errors: u64, recoveries: u64) -> HealthReporter {
    HealthReporter {
        bus: "pci".into(),
        device: "0000:17:00.0".into(),
        port: Some(65535),
        name: name.into(),
        state,
        errors,
        recoveries,
        auto_recover: Some(true),
    }
}

/// mlx5's `fw` reporter: no recover operation (`mlx5_fw_reporter_ops` in
/// drivers/net/ethernet/mellanox/mlx5/core/health.c has diagnose and dump
/// only), so devlink sends no AUTO_RECOVER attribute for it.
fn fw_reporter(state: ReporterState, errors: u64) -> HealthReporter {
    HealthReporter {
        port: None,
        auto_recover: None,
        ..reporter("fw", state, errors, 0)
    }
}

#[test]
fn devlink_reporter_without_recover_is_judged_by_error_growth() {
    let st = |fw: HealthReporter| State {
        reporters: Some(vec![fw]),
        ..State::default()
    };
    // In error since one syndrome long ago, no new errors: nothing.
    assert_eq!(
        run(
            &[
                st(fw_reporter(ReporterState::Error, 1)),
                st(fw_reporter(ReporterState::Error, 1))
            ],
            "devlink_reporter_error"
        ),
        vec![]
    );
    // Its error count grows: a warning, and no `devlink health recover`.
    let f = run(
        &[
            st(fw_reporter(ReporterState::Error, 1)),
            st(fw_reporter(ReporterState::Error, 3)),
        ],
        "devlink_reporter_error",
    );
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(!f[0].fix.contains("recover it"), "{}", f[0].fix);
    assert!(!f[0].fix.contains("devlink health recover"), "{}", f[0].fix);
    assert!(
        f[0].evidence.contains("no recover operation"),
        "{}",
        f[0].evidence
    );
}

#[test]
fn devlink_reporter_in_error_or_counting_errors() {
    let st = |tx: HealthReporter| State {
        reporters: Some(vec![reporter("fw", ReporterState::Healthy, 0, 0), tx]),
        ..State::default()
    };
    // In error: critical, even on the first sample.
    let f = run(
        &[st(reporter("tx", ReporterState::Error, 3, 2))],
        "devlink_reporter_error",
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Critical);
    assert_eq!(
        f[0].evidence,
        "devlink pci/0000:17:00.0 reporter tx state error, no new errors in the window, error count 3, recoveries 2"
    );
    // Recovered, but the count grew: a warning.
    let f = run(
        &[
            st(reporter("tx", ReporterState::Healthy, 2, 2)),
            st(reporter("tx", ReporterState::Healthy, 3, 3)),
        ],
        "devlink_reporter_error",
    );
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].severity, Severity::Warning);
    // Healthy: old errors that do not grow.
    let ok = st(reporter("tx", ReporterState::Healthy, 3, 3));
    assert_eq!(run(&[ok.clone(), ok], "devlink_reporter_error"), vec![]);
}

#[test]
fn link_flap_reads_carrier_down_count_past_the_8_bit_pma_counter() {
    // link_downed is stuck at 255 (IBTA's 8-bit LinkDownedCounter
    // saturates); the netdev's carrier_down_count keeps counting.
    let st = |down| State {
        link_downed: Some(255),
        carrier_down: Some(down),
        ..State::default()
    };
    let f = run(&[st(300), st(300), st(302)], "link_flap");
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].evidence, "carrier_down_count +2 over 20s; expected 0");
    assert_eq!(
        f[0].verify,
        "cat /sys/class/net/ens1np0/carrier_down_count  # must stop increasing"
    );
    // Healthy: no carrier transitions.
    assert_eq!(run(&[st(300), st(300), st(300)], "link_flap"), vec![]);
    // A kernel without carrier_down_count: the PMA counter still serves.
    let pma = |v| State {
        link_downed: Some(v),
        ..State::default()
    };
    assert_eq!(
        run(&[pma(3), pma(4)], "link_flap")[0].evidence,
        "link_downed +1 over 10s; expected 0"
    );
}

/// The recorded EEPROM of `netdev` with bytes changed, decoded by the real
/// decoder: (page, upper half, offset in the page, value).
fn module_with(netdev: &str, changes: &[(u8, bool, usize, u8)]) -> ModuleInfo {
    use roce_netdev::module::{decode, parse_eeprom_replay, HalfPage, I2C_A0};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/netdev/tests/fixtures/phys");
    let text = std::fs::read_to_string(dir.join(format!("{netdev}.eeprom"))).unwrap();
    let mut pages = parse_eeprom_replay(&text).unwrap();
    for &(page, upper, offset, value) in changes {
        let id = if upper {
            HalfPage::upper(page, 0)
        } else {
            HalfPage::lower(I2C_A0)
        };
        pages.get_mut(&id).unwrap()[offset % 128] = value;
    }
    decode(&pages).unwrap()
}

#[test]
fn module_lane_imbalance_judges_parallel_fibre_only() {
    // The same OSFP readings (lane 6 4.8 dB below its siblings) as
    // 400G-FR4 (CMIS module type 02h SMF, media code 1Dh): four
    // wavelengths on one fibre differ by design, nothing to say.
    let wdm = module_with("ens2np0", &[(0, false, 85, 0x02), (0, false, 87, 0x1D)]);
    assert_eq!(run(&[with_module(wdm)], "module_lane_imbalance"), vec![]);
    // As 400GBASE-DR4 (1Ch), four parallel single-mode fibres: judged.
    let dr4 = module_with("ens2np0", &[(0, false, 85, 0x02), (0, false, 87, 0x1C)]);
    let f = run(&[with_module(dr4)], "module_lane_imbalance");
    assert_eq!(f.len(), 1);
    assert!(f[0].finding.contains("one fiber of the bundle"));
    // An SFF-8636 100G CWDM4 (byte 192 06h) with a weak lane above its
    // low warning: not judged either.
    let cwdm4 = module_with(
        "ens1np0",
        &[
            (0, true, 192, 0x06),
            (0, false, 40, 0x0f),
            (0, false, 41, 0xa0),
        ],
    );
    assert_eq!(run(&[with_module(cwdm4)], "module_lane_imbalance"), vec![]);
}

#[test]
fn copper_cables_get_no_optical_verdict() {
    // SFF-8636 active copper cable (byte 147 1100b) with programmed Rx
    // power thresholds on page 03h and the Rx power bytes at 0: no "no
    // light" finding, no lane verdict, no temperature finding from a
    // monitor it lacks.
    let acc = module_with(
        "ens1np0",
        &[
            (0, true, 147, 0xC0),
            (0, true, 192, 0x08),
            (0, true, 220, 0x30),
            (0, false, 34, 0),
            (0, false, 35, 0),
            (0, false, 40, 0),
            (0, false, 41, 0),
        ],
    );
    // A passive DAC: flat memory, copper unequalized, nothing monitored.
    let dac = module_with(
        "ens1np0",
        &[
            (0, false, 2, 0x04),
            (0, true, 147, 0xA0),
            (0, true, 192, 0x0B),
            (0, true, 220, 0x00),
        ],
    );
    for m in [acc, dac] {
        for rule in [
            "module_rx_power_low",
            "module_lane_imbalance",
            "module_temperature_high",
        ] {
            assert_eq!(run(&[with_module(m.clone())], rule), vec![], "{rule}");
        }
    }
}

/// GPU 2 (0000:18:00.0) behind the same PCIe switch as mlx5_0 (PIX), its
/// nearest NIC.
fn gpu_2_near_mlx5_0() -> roce_topology::TopologySnapshot {
    use roce_topology::{GpuNicPath, PathClass};
    roce_topology::TopologySnapshot {
        gpus: vec![h100(2, "0000:18:00.0")],
        paths: vec![GpuNicPath {
            gpu: 2,
            nic: "mlx5_0".into(),
            class: PathClass::Pix,
            bridges: vec![],
        }],
        ..Default::default()
    }
}

/// The bridge ports of a DGX-like branch as the phys reader reports them:
/// root port 0000:14:01.0 and switch upstream port 0000:15:00.0 above both,
/// downstream port 0000:16:00.0 above the NIC of ens1np0 (0000:17:00.0; the
/// port is its upstream port), 0000:16:01.0 above the GPU 0000:18:00.0. Each port's correctable
/// file counts `rx_err[i]` RxErr (as aer.c prints it: kinds, then the
/// total), its nonfatal file `nonfatal[i]` completion timeouts.
fn branch(rx_err: [u64; 4], nonfatal: [u64; 4]) -> Vec<BridgeHealth> {
    let ports = [
        ("0000:14:01.0", true, true, false),
        ("0000:15:00.0", true, true, false),
        ("0000:16:00.0", true, false, true),
        ("0000:16:01.0", false, true, true),
    ];
    ports
        .iter()
        .enumerate()
        .map(|(i, &(pci, nic, gpu, endpoint_link))| {
            let counts = |kind: &str, v: u64| AerCounts {
                total: Some(v),
                kinds: vec![(kind.to_string(), v)],
            };
            BridgeHealth {
                pci: pci.into(),
                netdevs: if nic { vec!["ens1np0".into()] } else { vec![] },
                gpus: if gpu {
                    vec!["0000:18:00.0".into()]
                } else {
                    vec![]
                },
                endpoint_link,
                aer: PciAer {
                    correctable: Some(counts("RxErr", rx_err[i])),
                    nonfatal: Some(counts("CmpltTO", nonfatal[i])),
                    fatal: Some(counts("DLP", 0)),
                },
            }
        })
        .collect()
}

fn bridges(rx_err: [u64; 4], nonfatal: [u64; 4]) -> State {
    State {
        bridges: branch(rx_err, nonfatal),
        topology: true,
        ..State::default()
    }
}

#[test]
fn errors_on_the_nics_upstream_port_name_the_nic_and_its_gpu() {
    // The NIC's writes (GPUDirect RDMA into GPU 2) arrive with receiver
    // errors at the switch port above it; the NIC's own AER files stay 0.
    let f = run(
        &[
            bridges([0, 0, 2, 0], [0; 4]),
            bridges([0, 0, 9, 0], [0; 4]),
            bridges([0, 0, 19, 0], [0; 4]),
        ],
        "pcie_bridge_aer_errors",
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Warning);
    assert_eq!(f[0].subject.device.as_deref(), Some("mlx5_0"));
    assert_eq!(f[0].subject.netdev.as_deref(), Some("ens1np0"));
    assert_eq!(f[0].subject.gpu, Some(2));
    assert_eq!(
        f[0].finding,
        "GPU 2 mlx5_0 port 1 (ens1np0): correctable PCIe errors (the link replays packets: it is marginal) on the bridge port(s) of its PCIe path, 0000:16:00.0 (the upstream port of ens1np0's NIC): the port counts the errors of what the NIC sends, its DMA writes into GPU 2's memory (GPUDirect RDMA) among them, which the NIC's own counters do not show"
    );
    assert_eq!(
        f[0].evidence,
        "0000:16:00.0: AER correctable +17 over 20s (by kind, since boot: RxErr 19); expected none"
    );
    assert!(
        f[0].verify.starts_with(
            "cat /sys/bus/pci/devices/0000:16:00.0/aer_dev_{correctable,nonfatal,fatal}"
        ),
        "{}",
        f[0].verify
    );
    // The NIC's own rule sees nothing: its files did not move.
    assert_eq!(
        run(
            &[
                bridges([0, 0, 2, 0], [0; 4]),
                bridges([0, 0, 19, 0], [0; 4])
            ],
            "pcie_aer_errors"
        ),
        vec![]
    );
}

#[test]
fn bridge_ports_whose_counts_hold_still_are_healthy() {
    // Counts since boot (a bring-up replay, an old incident) that do not
    // grow, and ports without the AER capability, are no finding.
    let still = bridges([3, 0, 7, 1], [0, 1, 0, 0]);
    assert_eq!(
        run(
            &[still.clone(), still.clone(), still],
            "pcie_bridge_aer_errors"
        ),
        vec![]
    );
    let mut bare = bridges([0; 4], [0; 4]);
    for b in &mut bare.bridges {
        b.aer = PciAer::default();
    }
    assert_eq!(run(&[bare.clone(), bare], "pcie_bridge_aer_errors"), vec![]);
    // The first sample alone judges no growth.
    assert_eq!(
        run(&[bridges([0, 0, 19, 0], [0; 4])], "pcie_bridge_aer_errors"),
        vec![]
    );
}

#[test]
fn a_shared_port_is_one_finding_with_every_port_of_the_path() {
    // The root port above NIC and GPU loses a completion (nonfatal) while
    // the NIC's upstream port replays: critical, one finding for the NIC
    // and GPU 2 naming both ports.
    let f = run(
        &[
            bridges([0, 0, 5, 0], [0; 4]),
            bridges([0, 0, 8, 0], [1, 0, 0, 0]),
        ],
        "pcie_bridge_aer_errors",
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Critical);
    assert!(
        f[0].finding.contains(
            "uncorrectable PCIe errors (transactions lost, or a reset) on the bridge port(s) of its PCIe path, 0000:14:01.0 (a port above ens1np0, GPU 2); 0000:16:00.0 (the upstream port of ens1np0's NIC)"
        ),
        "{}",
        f[0].finding
    );
    assert_eq!(
        f[0].evidence,
        "0000:14:01.0: AER nonfatal +1 over 10s (by kind, since boot: CmpltTO 1); 0000:16:00.0: AER correctable +3 over 10s (by kind, since boot: RxErr 8); expected none"
    );
}

#[test]
fn a_gpu_only_port_is_filed_under_the_gpu() {
    let f = run(
        &[bridges([0; 4], [0; 4]), bridges([0, 0, 0, 4], [0; 4])],
        "pcie_bridge_aer_errors",
    );
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].subject.gpu, Some(2));
    assert_eq!(f[0].subject.device, None);
    assert!(
        f[0].finding
            .starts_with("GPU 2: correctable PCIe errors (the link replays packets: it is marginal) on the bridge port(s) of its PCIe path, 0000:16:01.0 (the upstream port of GPU 2)"),
        "{}",
        f[0].finding
    );
    // Without the topology source the GPU is named by its address.
    let mut no_topology = [bridges([0; 4], [0; 4]), bridges([0, 0, 0, 4], [0; 4])];
    for st in &mut no_topology {
        st.topology = false;
    }
    let f = run(&no_topology, "pcie_bridge_aer_errors");
    assert_eq!(f[0].subject.gpu, None);
    assert!(
        f[0].finding
            .contains("0000:16:01.0 (the upstream port of GPU 0000:18:00.0)"),
        "{}",
        f[0].finding
    );
}
