//! The topology source: GPU-NIC PCIe placement, link training, ACS and
//! GPUDirect readiness (`roce-topology`), for the RDMA devices in the RDMA
//! source's part (handed over by the sampler). NVML is asked only when
//! `sources.nvml` allows it (`auto`: when `--path.sysfs` is this host's);
//! its absence is logged once per change of state, never per sample.
//! The reader caches the PCI tree and re-reads only the links' training,
//! every `netdevs.phys_interval` like the other physical-layer reads; the
//! GPUDirect evidence is asked again at each rebuild (RDMA device set
//! changed, a cached path vanished, or every 5 minutes). NVML is loaded
//! only when a rebuild finds NVIDIA GPUs other than those it last named,
//! and unloaded before the rebuild ends (`roce_topology::nvml::Nvml`).

use std::path::PathBuf;

use roce_topology::nvml::{GpuLibrary, NoNvml, Nvml, NvmlState};
use roce_topology::{NicRef, TopologyReader, DEFAULT_LIBRARY_DIRS};

use super::{HostError, Input, Part, Sampled, Source};
use crate::config::Config;
use crate::host::HostPaths;
use crate::snapshot::SourceState;

pub struct TopologySource {
    reader: TopologyReader,
    /// The NVML state last logged (its label), to log changes only.
    nvml_logged: Option<&'static str>,
}

impl TopologySource {
    pub fn new(config: &Config, paths: &HostPaths) -> Self {
        let live = paths.is_live();
        let nvml: Box<dyn GpuLibrary> = if config.sources.nvml.enabled(live) {
            Box::new(Nvml::new())
        } else {
            Box::new(NoNvml)
        };
        TopologySource {
            reader: TopologyReader::new(
                paths.sysfs.clone(),
                paths.procfs.clone(),
                library_dirs(paths, live),
                nvml,
            )
            .with_link_interval(config.netdevs.phys_interval),
            nvml_logged: None,
        }
    }

    /// A source over a reader made by the caller (another NVML, injected
    /// attribute files), for tests.
    pub fn with_reader(reader: TopologyReader) -> Self {
        TopologySource {
            reader,
            nvml_logged: None,
        }
    }
}

/// Where libibverbs is looked for: the host's library directories, or, for
/// a tree of another host (`--path.sysfs` not `/sys`), the same directories
/// under the tree's root (the parent of its `sys`), so that a recorded tree
/// carries its own rdma-core.
fn library_dirs(paths: &HostPaths, live: bool) -> Vec<PathBuf> {
    let root = if live {
        PathBuf::from("/")
    } else {
        match paths.sysfs.parent() {
            Some(p) => p.to_path_buf(),
            None => return Vec::new(),
        }
    };
    DEFAULT_LIBRARY_DIRS
        .iter()
        .map(|d| root.join(d.trim_start_matches('/')))
        .collect()
}

impl Source for TopologySource {
    fn name(&self) -> &'static str {
        "topology"
    }

    fn needs_rdma(&self) -> bool {
        true
    }

    fn sample(&mut self, input: &Input, errors: &mut Vec<HostError>) -> Sampled {
        let nics: Vec<NicRef> = input
            .rdma
            .iter()
            .flat_map(|r| r.devices.iter())
            .filter_map(|d| {
                Some(NicRef {
                    name: d.name.clone(),
                    pci_address: d.pci_address.clone()?,
                })
            })
            .collect();
        let topo = self.reader.read(&nics);
        errors.extend(topo.errors.iter().cloned().map(HostError::File));
        // NVML loaded but failing is a failed read like a file's (the GPUs
        // lose their names and UUIDs), counted every sample it lasts, as
        // the reader repeats its cached file errors; only its absence (no
        // driver) is a host property and no error.
        if let NvmlState::Failed(why) = &topo.nvml {
            errors.push(HostError::request("NVML", why));
        }
        let label = topo.nvml.as_str();
        if self.nvml_logged != Some(label) {
            match &topo.nvml {
                NvmlState::Absent(why) => {
                    tracing::info!(reason = %why, "NVML absent: GPUs are reported from sysfs only")
                }
                NvmlState::Failed(why) => tracing::warn!(error = %why, "NVML query failed"),
                NvmlState::Present(n) => tracing::info!(gpus = n, "NVML present"),
                NvmlState::NotUsed => {}
            }
            self.nvml_logged = Some(label);
        }
        let state = if topo.gpus.is_empty() && topo.nics.is_empty() {
            SourceState::Unavailable("no GPU and no RDMA device in the PCI tree".into())
        } else {
            SourceState::Ok
        };
        Sampled::new(state, Part::Topology(Box::new(topo)))
    }
}
