//! Runs N topology samples on a sysfs tree and prints the time per sample,
//! to measure the steady-state cost (e.g. under `strace -c -f`).
//!
//! `cargo run --release -p roce-topology --example samples -- <sysfs> [N] [--walk]`
//! (`--walk`: rescan every sample, as before the cache).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use roce_topology::nvml::NoNvml;
use roce_topology::{NicRef, TopologyReader};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(sys) = args.first().map(PathBuf::from) else {
        eprintln!("usage: samples <sysfs> [N] [--walk]");
        std::process::exit(2);
    };
    let n: u32 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let walk = args.iter().any(|a| a == "--walk");
    let mut nics: Vec<NicRef> = std::fs::read_dir(sys.join("class/infiniband"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let dev = std::fs::canonicalize(e.path().join("device")).ok()?;
                    Some(NicRef {
                        name: e.file_name().to_string_lossy().into_owned(),
                        pci_address: dev.file_name()?.to_string_lossy().into_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    nics.sort_by(|a, b| a.name.cmp(&b.name));
    let mut reader = TopologyReader::new(sys, PathBuf::from("/proc"), Vec::new(), Box::new(NoNvml));
    if walk {
        reader = reader.with_rescan_interval(Duration::ZERO);
    }
    // The first sample walks the tree in both modes.
    let first = reader.read(&nics);
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(reader.read(&nics));
    }
    let per = start.elapsed() / n.max(1);
    println!(
        "{} functions, {} links, {} samples, {:?} per sample, {} walks",
        first.functions.len(),
        first.links.len(),
        n,
        per,
        reader.rebuilds()
    );
}
