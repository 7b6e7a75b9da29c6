//! What the reader asks besides the PCI tree: the GPUDirect RDMA evidence
//! (`<procfs>` modules, kernel and NVIDIA driver versions, the peermem
//! module in sysfs, libibverbs in the library directories) and NVML's
//! names and UUIDs of the GPUs.

use super::files::read_text;
use super::{NvmlAnswer, TopologyReader};
use crate::gpudirect::Evidence;
use crate::nvml::{NvmlError, NvmlState};
use crate::pci::PciAddress;
use crate::types::*;

impl TopologyReader {
    /// Names the GPUs NVML knows (by PCI address), and says what NVML
    /// answered. NVML is asked only when the NVIDIA GPUs of the tree are
    /// not the ones of its last answer (the first walk, a GPU added, gone
    /// or rebound), or when it has not answered yet; otherwise the last
    /// answer names them again, and the library stays unloaded.
    pub(super) fn name_gpus(&mut self, gpus: &mut [Gpu]) -> NvmlState {
        let mut nvidia: Vec<PciAddress> = gpus
            .iter()
            .filter(|g| g.vendor == GpuVendor::Nvidia)
            .map(|g| g.address)
            .collect();
        nvidia.sort_unstable();
        if self.named.as_ref().is_none_or(|a| a.asked_for != nvidia) {
            match self.nvml.gpus() {
                Ok(list) => {
                    self.named = Some(NvmlAnswer {
                        asked_for: nvidia,
                        gpus: list,
                    })
                }
                Err(NvmlError::Absent(why)) => return NvmlState::Absent(why),
                Err(NvmlError::Query(why)) => return NvmlState::Failed(why),
            }
        }
        let Some(answer) = &self.named else {
            return NvmlState::Failed("no answer kept".into());
        };
        for g in gpus {
            if let Some(n) = answer.gpus.iter().find(|n| n.address == g.address) {
                g.name = n.name.clone();
                g.uuid = n.uuid.clone();
            }
        }
        NvmlState::Present(answer.gpus.len())
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
