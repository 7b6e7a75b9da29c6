//! GPUDirect RDMA readiness: can an RDMA NIC read and write GPU memory on
//! this host? Two mechanisms, judged from what the host shows:
//!
//! - `nvidia_peermem`: the NVIDIA peer-memory module is loaded (a line in
//!   `/proc/modules`, or `/sys/module/nvidia_peermem`). Mellanox's older
//!   out-of-tree `nv_peer_mem` module does the same job and counts too.
//! - `dmabuf`: the kernel exports GPU memory as dma-buf to the RDMA stack.
//!   Needs a kernel ≥ 5.12 (RDMA dma-buf memory regions,
//!   `ib_umem_dmabuf_get()`), a GPU driver that exports dma-buf (the NVIDIA
//!   *open* kernel module, "Open Kernel Module" in
//!   `/proc/driver/nvidia/version`, or amdgpu), and an rdma-core whose
//!   libibverbs has `ibv_reg_dmabuf_mr`.
//!
//! rdma-core is judged from libibverbs' file name: rdma-core names it
//! `libibverbs.so.1.<abi>.<rdma-core version>.0` (libibverbs/CMakeLists.txt,
//! Documentation/versioning.md), and `ibv_reg_dmabuf_mr` arrived with the
//! `IBVERBS_1.12` symbol version (libibverbs/libibverbs.map.in), when the
//! file became `libibverbs.so.1.12.34.0` (rdma-core 34). So a file with
//! ABI minor ≥ 12 has it. Reading the name costs nothing and loads no code
//! into the exporter.

/// The minimum kernel for dma-buf memory regions (major, minor).
pub const DMABUF_MIN_KERNEL: (u32, u32) = (5, 12);
/// The first libibverbs ABI minor with `ibv_reg_dmabuf_mr`.
pub const DMABUF_MIN_IBVERBS_ABI: u32 = 12;

/// Which NVIDIA kernel module is loaded, from `/proc/driver/nvidia/version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NvidiaModule {
    /// No `/proc/driver/nvidia/version`.
    Absent,
    /// "NVIDIA UNIX x86_64 Kernel Module".
    Proprietary,
    /// "NVIDIA UNIX Open Kernel Module for x86_64".
    Open,
}

/// The libibverbs library found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Libibverbs {
    /// The file name (`libibverbs.so.1.14.44.0`).
    pub file: String,
    /// ABI minor (14 above).
    pub abi_minor: u32,
    /// rdma-core release (44 above), when the name carries it.
    pub rdma_core: Option<u32>,
}

/// What the host shows, read by the reader.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// `/proc/modules`, when readable.
    pub modules: Option<String>,
    /// `/sys/module/nvidia_peermem` (or `nv_peer_mem`) exists.
    pub peermem_sysfs: bool,
    /// `/proc/sys/kernel/osrelease`.
    pub osrelease: Option<String>,
    /// `/proc/driver/nvidia/version`.
    pub nvidia_version: Option<String>,
    /// File names found in the library directories.
    pub library_files: Vec<String>,
}

/// The verdict, with the facts behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDirect {
    pub peermem_loaded: bool,
    /// (major, minor) of the running kernel.
    pub kernel: Option<(u32, u32)>,
    pub nvidia_module: NvidiaModule,
    pub amdgpu_loaded: bool,
    pub libibverbs: Option<Libibverbs>,
}

impl GpuDirect {
    pub fn assess(e: &Evidence) -> GpuDirect {
        let loaded = |name: &str| {
            e.modules
                .as_deref()
                .is_some_and(|m| m.lines().any(|l| l.split_whitespace().next() == Some(name)))
        };
        let nvidia_module = match &e.nvidia_version {
            None => NvidiaModule::Absent,
            Some(v) if v.contains("Open Kernel Module") => NvidiaModule::Open,
            Some(_) => NvidiaModule::Proprietary,
        };
        GpuDirect {
            peermem_loaded: e.peermem_sysfs || loaded("nvidia_peermem") || loaded("nv_peer_mem"),
            kernel: e.osrelease.as_deref().and_then(parse_kernel),
            nvidia_module,
            amdgpu_loaded: loaded("amdgpu"),
            libibverbs: e
                .library_files
                .iter()
                .filter_map(|f| parse_libibverbs(f))
                .max_by_key(|l| (l.abi_minor, l.rdma_core)),
        }
    }

    pub fn kernel_supports_dmabuf(&self) -> bool {
        self.kernel.is_some_and(|k| k >= DMABUF_MIN_KERNEL)
    }

    pub fn driver_exports_dmabuf(&self) -> bool {
        self.nvidia_module == NvidiaModule::Open || self.amdgpu_loaded
    }

    pub fn rdma_core_supports_dmabuf(&self) -> bool {
        self.libibverbs
            .as_ref()
            .is_some_and(|l| l.abi_minor >= DMABUF_MIN_IBVERBS_ABI)
    }

    /// `nvidia_peermem` mechanism usable.
    pub fn peermem_ready(&self) -> bool {
        self.peermem_loaded
    }

    /// dma-buf mechanism usable.
    pub fn dmabuf_ready(&self) -> bool {
        self.kernel_supports_dmabuf()
            && self.driver_exports_dmabuf()
            && self.rdma_core_supports_dmabuf()
    }

    /// At least one mechanism usable.
    pub fn ready(&self) -> bool {
        self.peermem_ready() || self.dmabuf_ready()
    }

    /// Every prerequisite as (mechanism, prerequisite, met).
    pub fn prerequisites(&self) -> [(&'static str, &'static str, bool); 4] {
        [
            ("nvidia_peermem", "module_loaded", self.peermem_loaded),
            ("dmabuf", "kernel", self.kernel_supports_dmabuf()),
            ("dmabuf", "gpu_driver", self.driver_exports_dmabuf()),
            ("dmabuf", "rdma_core", self.rdma_core_supports_dmabuf()),
        ]
    }
}

/// (major, minor) from `osrelease` ("6.8.0-45-generic", "5.15.0").
pub fn parse_kernel(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor_text: String = parts
        .next()?
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    Some((major, minor_text.parse().ok()?))
}

/// `libibverbs.so.1.<abi>.<release>.0`; `None` for other names and for the
/// bare `libibverbs.so.1` link.
pub fn parse_libibverbs(file: &str) -> Option<Libibverbs> {
    let rest = file.strip_prefix("libibverbs.so.1.")?;
    let mut parts = rest.split('.');
    let abi_minor = parts.next()?.parse().ok()?;
    let rdma_core = parts.next().and_then(|p| p.parse().ok());
    Some(Libibverbs {
        file: file.to_string(),
        abi_minor,
        rdma_core,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(parse_kernel("6.8.0-45-generic\n"), Some((6, 8)));
        assert_eq!(parse_kernel("5.4.0"), Some((5, 4)));
        assert_eq!(parse_kernel("5.12-rc1"), Some((5, 12)));
        assert_eq!(parse_kernel("junk"), None);
        let l = parse_libibverbs("libibverbs.so.1.14.44.0").unwrap();
        assert_eq!((l.abi_minor, l.rdma_core), (14, Some(44)));
        assert_eq!(parse_libibverbs("libibverbs.so.1"), None);
        assert_eq!(parse_libibverbs("libmlx5.so.1.24.44.0"), None);
    }
}
