//! What one sample asks of the kernel (`roce_collector_kernel_requests`), on
//! fixture trees through the real sources and sampler: the reads that reach
//! sysfs in a steady sample, counted per kind, and that the first sample
//! (a full scan) costs more than the ones after it.

use std::path::PathBuf;

use roce_exporter::config::Config;
use roce_exporter::host::HostPaths;
use roce_exporter::sampler::Sampler;
use roce_exporter::snapshot::{KernelRequests, Snapshot};
use roce_exporter::sources;

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
