//! What the reader asks besides the PCI tree: the GPUDirect RDMA evidence
//! (`<procfs>` modules, kernel and NVIDIA driver versions, the peermem
//! module in sysfs, libibverbs in the library directories) and NVML's
//! names and UUIDs of the GPUs.

use super::files::read_text;
use super::TopologyReader;
use crate::gpudirect::Evidence;
use crate::nvml::{NvmlError, NvmlState};
use crate::types::*;

impl TopologyReader {
    /// Names the GPUs NVML knows (by PCI address), and says what NVML
    /// answered.
    pub(super) fn name_gpus(&mut self, gpus: &mut [Gpu]) -> NvmlState {
        match self.nvml.gpus() {
            Ok(list) => {
                for g in gpus {
                    if let Some(n) = list.iter().find(|n| n.address == g.address) {
                        g.name = n.name.clone();
                        g.uuid = n.uuid.clone();
                    }
                }
                NvmlState::Present(list.len())
            }
            Err(NvmlError::Absent(why)) => NvmlState::Absent(why),
            Err(NvmlError::Query(why)) => NvmlState::Failed(why),
        }
    }

    pub(super) fn evidence(&self, errors: &mut Vec<ReadError>) -> Evidence {
        let peermem_sysfs = ["nvidia_peermem", "nv_peer_mem"]
            .iter()
            .any(|m| self.sysfs.join("module").join(m).is_dir());
        let mut library_files = Vec::new();
        for dir in &self.library_dirs {
            // Library directories that do not exist are normal (only one of
            // the multiarch paths does on a given host).
            if let Ok(entries) = std::fs::read_dir(dir) {
                library_files.extend(
                    entries
                        .flatten()
                        .filter_map(|e| e.file_name().to_str().map(str::to_string))
                        .filter(|n| n.starts_with("libibverbs.so.")),
                );
            }
        }
        Evidence {
            modules: read_text(&self.procfs.join("modules"), errors),
            peermem_sysfs,
            osrelease: read_text(&self.procfs.join("sys/kernel/osrelease"), errors),
            nvidia_version: read_text(&self.procfs.join("driver/nvidia/version"), errors),
            library_files,
        }
    }
}
