//! What one sample asks of the kernel (`roce_collector_kernel_requests`), on
//! fixture trees through the real sources and sampler: the reads that reach
//! sysfs in a steady sample, counted per kind, and that the first sample
//! (a full scan) costs more than the ones after it.

use std::path::PathBuf;

use roce_exporter::config::Config;
use roce_exporter::host::HostPaths;
use roce_exporter::sampler::Sampler;
use roce_exporter::snapshot::SourceState;
use roce_exporter::snapshot::{KernelRequests, Snapshot};
use roce_exporter::sources::{self, Switch};

fn paths(tree: &str) -> HostPaths {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/rdma/tests/fixtures");
    HostPaths {
        sysfs: root.join(tree),
        procfs: root.join(tree).join("proc"),
    }
}

fn requests(s: &Snapshot, collector: &str) -> Option<KernelRequests> {
    s.source(collector).and_then(|st| st.kernel_requests)
}

#[test]
fn a_steady_mlx5_sample_reads_each_value_once() {
    let config = Config::default();
    let paths = paths("sys-mlx5-roce");
    let mut sampler = Sampler::new(sources::all(&config, &paths), &config);
    let first = sampler.sample();
    let second = sampler.sample();
    let rdma = requests(&second, "rdma").expect("the rdma collector counts");
    // Per port (2 devices x 1 port): state, phys_state and rate; 21
    // counters/ and 31 hw_counters/ files (netlink is off on a fixture
    // tree); 4 populated GID slots x (gids, types, ndevs) and 4 empty
    // probes. Device attributes, link_layer and the RoCE lid wait for the
    // static refresh.
    assert_eq!(rdma.file_reads, 2 * (3 + 21 + 31 + 4 * 3 + 4));
    assert_eq!((rdma.netlink, rdma.ioctls), (0, 0));
    let first_rdma = requests(&first, "rdma").expect("counted");
    assert!(
        first_rdma.file_reads > rdma.file_reads,
        "the first sample scans every GID slot: {} vs {}",
        first_rdma.file_reads,
        rdma.file_reads
    );
    let netdev = requests(&second, "netdev").expect("the netdev collector counts");
    // mtu, operstate and speed of the two netdevs; no ethtool or DCB on a
    // fixture tree without recorded replies.
    assert_eq!(
        netdev,
        KernelRequests {
            file_reads: 2 * 3,
            netlink: 0,
            ioctls: 0
        }
    );
    assert_eq!(requests(&second, "topology"), None, "not counted");
}

#[test]
fn rxe_without_counters_reads_its_hw_counters_and_gids_only() {
    let config = Config::default();
    let paths = paths("sys-rxe");
    let mut sampler = Sampler::new(sources::all(&config, &paths), &config);
    sampler.sample();
    let second = sampler.sample();
    let rdma = requests(&second, "rdma").expect("counted");
    // parent; state, phys_state, rate; no counters/; 15 hw_counters (lifespan
    // is a setting); 2 populated GIDs x 3 files and 4 empty probes.
    assert_eq!(rdma.file_reads, 1 + 3 + 15 + 2 * 3 + 4);
}

/// Every collector that runs on a fixture tree by default, switched off in
/// turn: it has no thread (so it makes no system call), reads nothing and
/// is reported disabled; the others go on, and the one steady sample of the
/// sources that remain reads what it read with every collector on. The
/// physical-layer source, on a tree without AER files, reads nothing in a
/// steady sample (it has learned that there are none, or serves its last
/// reading).
#[test]
fn a_collector_switched_off_makes_no_call_and_says_disabled() {
    let paths = paths("sys-mlx5-roce");
    let steady = |config: &Config| {
        let mut sampler = Sampler::new(sources::all(config, &paths), config);
        sampler.sample();
        (sampler.sample(), sampler.running())
    };
    let mut config_on = Config::default();
    let (all_on, running) = steady(&config_on);
    assert_eq!(
        running,
        ["rdma", "netdev", "topology", "phys"],
        "on a fixture tree"
    );
    let phys = requests(&all_on, "phys").expect("the phys collector counts");
    assert_eq!(
        phys,
        KernelRequests::default(),
        "no AER file: nothing to read"
    );
    for switch in [
        Switch::Rdma,
        Switch::Netdev,
        Switch::Qos,
        Switch::Phys,
        Switch::Topology,
    ] {
        let mut config = config_on.clone();
        config.switch_collectors(&[(switch, false)]);
        let (s, running) = steady(&config);
        assert!(!running.contains(&switch.name()), "{running:?}");
        let status = s.source(switch.name()).expect("listed");
        assert!(
            matches!(&status.state, SourceState::Disabled(why) if why.contains(switch.config_key())),
            "{:?}",
            status.state
        );
        assert!(status.state.success(), "disabled is not failed");
        assert_eq!(status.duration, std::time::Duration::ZERO);
        assert_eq!(status.kernel_requests, None);
        match switch {
            Switch::Rdma => {
                assert!(s.rdma.is_none());
                assert_eq!(requests(&s, "netdev"), Some(KernelRequests::default()));
            }
            Switch::Netdev => assert!(s.netdev.is_none()),
            Switch::Phys => assert!(s.phys.is_none()),
            Switch::Topology => assert!(s.topology.is_none()),
            Switch::Qos => {
                // The netdev source runs, without its QoS reads.
                assert_eq!(
                    requests(&s, "netdev"),
                    requests(&all_on, "netdev"),
                    "QoS is read at start and then every qos_interval"
                );
                let netdev = s.netdev.as_ref().expect("netdev part");
                assert!(netdev.netdevs.iter().all(|n| n.dcqcn.is_empty()));
            }
            _ => unreachable!(),
        }
        if switch != Switch::Rdma {
            assert_eq!(requests(&s, "rdma"), requests(&all_on, "rdma"));
        }
    }
    // The sources whose own sections switch them: off by configuration, or
    // because the tree is not the running kernel's, they have no thread.
    config_on.switch_collectors(&[(Switch::Probe, false), (Switch::Lldp, false)]);
    let (s, running) = steady(&config_on);
    for name in ["probe", "peer_probe", "nccl", "lldp"] {
        assert!(!running.contains(&name));
        let state = &s.source(name).expect("listed").state;
        assert!(
            matches!(state, SourceState::Disabled(_)),
            "{name}: {state:?}"
        );
    }
}

/// docs/performance.md carries the firmware-command count of an mlx5
/// sample (bench/firmware.md, counted from the driver's source and kept
/// by hand) as it stands, not a copy that drifted.
#[test]
fn the_firmware_count_in_the_performance_doc_is_current() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/performance.md")).unwrap();
    let count = std::fs::read_to_string(root.join("bench/firmware.md")).unwrap();
    assert!(
        doc.contains(&count),
        "docs/performance.md lacks bench/firmware.md as it stands: copy it in before \
         \"## Scrape cost\" (bench/performance.py does on its next run)"
    );
}
