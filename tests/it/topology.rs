//! The topology source against the fixture PCI trees of
//! `crates/topology/tests/fixtures/pci-*` (written by roce-testkit, `crates/testkit/src/trees/pci.rs`): the
//! full GPU × NIC matrix as `nvidia-smi topo -m` would print it for each
//! machine shape, downtrained links, ACS, GPUDirect readiness, NVML
//! matching, and the binary on a host without NVML.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_host::{StdFs, SysFile, SysFs};
use roce_topology::nvml::{FakeNvml, GpuLibrary, NoNvml, Nvml, NvmlError, NvmlGpu, NvmlState};
use roce_topology::{
    AcsState, FunctionRole, LinkSpeed, NicRef, PciAddress, PortType, TopologyReader,
    TopologySnapshot, DEFAULT_RESCAN,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/topology/tests/fixtures")
}

/// The NICs of a tree as the RDMA source would hand them over: every
/// `class/infiniband` entry and its PCI function, in name order.
fn nics(sys: &Path) -> Vec<NicRef> {
    let mut out: Vec<NicRef> = std::fs::read_dir(sys.join("class/infiniband"))
        .map(|d| {
            d.flatten()
                .map(|e| {
                    let dev = std::fs::canonicalize(e.path().join("device")).unwrap();
                    NicRef {
                        name: e.file_name().to_string_lossy().into_owned(),
                        pci_address: dev.file_name().unwrap().to_string_lossy().into_owned(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn read_with(tree: &str, gpudirect: &str, nvml: Box<dyn GpuLibrary>) -> TopologySnapshot {
    let sys = fixtures().join(tree).join("sys");
    let gd = fixtures().join("pci-gpudirect").join(gpudirect);
    let mut reader = TopologyReader::new(
        sys.clone(),
        gd.join("proc"),
        vec![gd.join("usr/lib/x86_64-linux-gnu")],
        nvml,
    );
    let snap = reader.read(&nics(&sys));
    assert_eq!(snap.errors, vec![], "read errors in {tree}");
    // The next sample comes from the cache and says the same.
    assert_eq!(reader.read(&nics(&sys)), snap, "cached sample of {tree}");
    assert_eq!(reader.rebuilds(), 1);
    snap
}

fn read(tree: &str) -> TopologySnapshot {
    read_with(tree, "none", Box::new(NoNvml))
}

fn addr(s: &str) -> PciAddress {
    PciAddress::parse(s).unwrap()
}

fn gpu_addresses(snap: &TopologySnapshot) -> Vec<String> {
    snap.gpus.iter().map(|g| g.address.to_string()).collect()
}

#[test]
fn dgx_h100_matrix() {
    let snap = read("pci-dgx-h100");
    assert_eq!(
        gpu_addresses(&snap),
        [
            "0000:18:00.0",
            "0000:1a:00.0",
            "0000:3a:00.0",
            "0000:3c:00.0",
            "0000:9d:00.0",
            "0000:9f:00.0",
            "0000:bd:00.0",
            "0000:bf:00.0"
        ]
    );
    assert_eq!(
        snap.gpus.iter().map(|g| g.numa_node).collect::<Vec<_>>(),
        [0, 0, 0, 0, 1, 1, 1, 1].map(Some)
    );
    assert_eq!(
        snap.matrix(),
        "- mlx5_0 mlx5_1 mlx5_2 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_7\n\
         GPU0 PIX PIX NODE NODE SYS SYS SYS SYS\n\
         GPU1 PIX PIX NODE NODE SYS SYS SYS SYS\n\
         GPU2 NODE NODE PIX PIX SYS SYS SYS SYS\n\
         GPU3 NODE NODE PIX PIX SYS SYS SYS SYS\n\
         GPU4 SYS SYS SYS SYS PIX PIX NODE NODE\n\
         GPU5 SYS SYS SYS SYS PIX PIX NODE NODE\n\
         GPU6 SYS SYS SYS SYS NODE NODE PIX PIX\n\
         GPU7 SYS SYS SYS SYS NODE NODE PIX PIX\n"
    );
    let nearest: Vec<&str> = snap
        .nearest_nics(5)
        .iter()
        .map(|p| p.nic.as_str())
        .collect();
    assert_eq!(nearest, ["mlx5_4", "mlx5_5"]);
    // GPU0 to mlx5_0: down port, up port, down port of one switch.
    let p = snap
        .paths
        .iter()
        .find(|p| p.gpu == 0 && p.nic == "mlx5_0")
        .unwrap();
    assert_eq!(
        p.bridges,
        [
            addr("0000:17:00.0"),
            addr("0000:16:00.0"),
            addr("0000:17:01.0")
        ]
    );
    // Every link trained to what both ends do; ACS on, redirect off.
    assert!(snap
        .links
        .iter()
        .all(|l| l.speed_downtrained() == Some(false) && l.width_downtrained() == Some(false)));
    assert_eq!(snap.acs.len(), 4 * 5);
    for b in &snap.acs {
        // Switch upstream ports carry no ACS capability in this tree.
        let expected = if [0x16, 0x38, 0x9b, 0xbb].contains(&b.address.bus) {
            AcsState::NoAcs
        } else {
            AcsState::RedirectDisabled
        };
        assert_eq!(b.state, expected, "{}", b.address);
    }
    // Link values: GPU0 at 32 GT/s x16.
    let f = snap.function(&addr("0000:18:00.0")).unwrap();
    assert_eq!(
        (f.current_speed, f.max_speed, f.current_width, f.max_width),
        (
            Some(LinkSpeed(32000)),
            Some(LinkSpeed(32000)),
            Some(16),
            Some(16)
        )
    );
    assert_eq!(f.parents.len(), 3);
    // Port types from config space (read as root).
    let types: Vec<Option<PortType>> = f
        .parents
        .iter()
        .map(|p| snap.function(p).unwrap().port_type)
        .collect();
    assert_eq!(
        types,
        [
            Some(PortType::RootPort),
            Some(PortType::SwitchUpstream),
            Some(PortType::SwitchDownstream)
        ]
    );
}

#[test]
fn nic_on_the_other_socket_is_sys() {
    let snap = read("pci-cross-socket");
    assert_eq!(
        snap.matrix(),
        "- mlx5_0 mlx5_1\n\
         GPU0 PHB SYS\n\
         GPU1 PHB SYS\n\
         GPU2 SYS PIX\n\
         GPU3 SYS PIX\n"
    );
    assert_eq!(
        snap.nics.iter().map(|n| n.numa_node).collect::<Vec<_>>(),
        [Some(0), Some(1)]
    );
    // Captured without root: no port types, switch ports told by depth.
    assert!(snap.functions.iter().all(|f| f.port_type.is_none()));
    // A PHB path crosses the host bridge: no switch bridge to check for ACS.
    let p = snap
        .paths
        .iter()
        .find(|p| p.gpu == 0 && p.nic == "mlx5_0")
        .unwrap();
    assert!(p.bridges.is_empty());
}

#[test]
fn downtrained_links() {
    let snap = read("pci-downtrained");
    assert_eq!(snap.matrix(), "- mlx5_0\nGPU0 PXB\nGPU1 PXB\n");
    let link = |a: &str| snap.links.iter().find(|l| l.downstream == addr(a)).unwrap();
    // GPU0: x8 where both ends do x16.
    let l = link("0000:05:00.0");
    assert_eq!(l.upstream, Some(addr("0000:04:00.0")));
    assert_eq!((l.current_width, l.capable_width), (Some(8), Some(16)));
    assert_eq!(
        (l.speed_downtrained(), l.width_downtrained()),
        (Some(false), Some(true))
    );
    // mlx5_0: 8 GT/s where both ends do 16 GT/s.
    let l = link("0000:06:00.0");
    assert_eq!(l.rdma_device.as_deref(), Some("mlx5_0"));
    assert_eq!(
        (l.current_speed, l.capable_speed),
        (Some(LinkSpeed(8000)), Some(LinkSpeed(16000)))
    );
    assert_eq!(
        (l.speed_downtrained(), l.width_downtrained()),
        (Some(true), Some(false))
    );
    // GPU1: x8 below a port that only does x8 — not downtrained.
    let l = link("0000:07:00.0");
    assert_eq!((l.current_width, l.capable_width), (Some(8), Some(8)));
    assert_eq!(l.width_downtrained(), Some(false));
    // The lower ends of links: 3 endpoints and 2 switch upstream ports.
    let mut lower: Vec<String> = snap
        .links
        .iter()
        .map(|l| l.downstream.to_string())
        .collect();
    lower.sort();
    assert_eq!(
        lower,
        [
            "0000:01:00.0",
            "0000:03:00.0",
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:07:00.0"
        ]
    );
    let downtrained: Vec<String> = snap
        .links
        .iter()
        .filter(|l| l.speed_downtrained() == Some(true) || l.width_downtrained() == Some(true))
        .map(|l| l.downstream.to_string())
        .collect();
    assert_eq!(downtrained, ["0000:05:00.0", "0000:06:00.0"]);
}

#[test]
fn acs_on_a_switch() {
    let snap = read("pci-acs");
    assert_eq!(
        snap.matrix(),
        "- mlx5_0 mlx5_1\nGPU0 PIX PHB\nGPU1 PHB PIX\n"
    );
    let states: Vec<(String, AcsState)> = snap
        .acs
        .iter()
        .map(|b| (b.address.to_string(), b.state))
        .collect();
    assert_eq!(
        states,
        [
            ("0000:01:00.0".to_string(), AcsState::NoAcs),
            ("0000:02:00.0".to_string(), AcsState::RedirectEnabled),
            ("0000:02:01.0".to_string(), AcsState::RedirectEnabled),
            ("0000:05:00.0".to_string(), AcsState::NoAcs),
            // 64-byte config space: what a reader without root gets.
            ("0000:06:00.0".to_string(), AcsState::Unknown),
            ("0000:06:01.0".to_string(), AcsState::RedirectDisabled),
        ]
    );
}

#[test]
fn cloud_vm_flat_on_the_root_bus() {
    let snap = read("pci-cloud-vm");
    assert_eq!(snap.matrix(), "- mlx5_0\nGPU0 PHB\nGPU1 PHB\n");
    assert!(snap.gpus.iter().all(|g| g.numa_node.is_none()));
    assert_eq!(snap.nvml, NvmlState::NotUsed);
    assert!(snap.acs.is_empty());
    // "Unknown" speed and width 0 are absent, not errors, and judge nothing.
    let f = snap.function(&addr("0000:00:04.0")).unwrap();
    assert_eq!((f.current_speed, f.current_width), (None, None));
    assert!(f.parents.is_empty());
    assert!(snap
        .links
        .iter()
        .all(|l| l.speed_downtrained().is_none() && l.width_downtrained().is_none()));
}

#[test]
fn gpudirect_peermem_loaded() {
    let gd = read_with("pci-cross-socket", "peermem", Box::new(NoNvml))
        .gpudirect
        .unwrap();
    assert!(gd.peermem_ready());
    assert!(!gd.dmabuf_ready(), "proprietary module: no dma-buf");
    assert!(gd.ready());
    assert_eq!(gd.kernel, Some((5, 15)));
}

#[test]
fn gpudirect_dmabuf_with_the_open_module_on_a_new_kernel() {
    let gd = read_with("pci-cross-socket", "dmabuf", Box::new(NoNvml))
        .gpudirect
        .unwrap();
    assert!(!gd.peermem_ready());
    assert!(gd.dmabuf_ready());
    assert!(gd.ready());
    let lib = gd.libibverbs.as_ref().unwrap();
    assert_eq!((lib.abi_minor, lib.rdma_core), (14, Some(50)));
}

#[test]
fn gpudirect_proprietary_without_peermem_is_not_ready() {
    let gd = read_with("pci-cross-socket", "none", Box::new(NoNvml))
        .gpudirect
        .unwrap();
    assert!(!gd.ready());
    assert_eq!(
        gd.prerequisites(),
        [
            ("nvidia_peermem", "module_loaded", false),
            ("dmabuf", "kernel", true),
            ("dmabuf", "gpu_driver", false),
            ("dmabuf", "rdma_core", true),
        ]
    );
    let gd = read_with("pci-cross-socket", "old", Box::new(NoNvml))
        .gpudirect
        .unwrap();
    assert!(!gd.ready());
    assert_eq!(
        gd.prerequisites().map(|p| p.2),
        [false, false, true, false],
        "open module, but kernel 5.4 and libibverbs 1.11"
    );
}

#[test]
fn no_gpu_no_gpudirect_verdict() {
    // No PCI bus in the tree (a container without /sys/bus/pci): no GPU,
    // no verdict, no error.
    let sys = fixtures().join("pci-cross-socket/sys");
    let mut reader = TopologyReader::new(
        fixtures().join("no-such-tree/sys"),
        fixtures().join("no-such-tree/proc"),
        vec![],
        Box::new(NoNvml),
    );
    let snap = reader.read(&nics(&sys));
    assert!(snap.gpus.is_empty() && snap.gpudirect.is_none() && snap.errors.is_empty());
}

#[test]
fn nvml_names_matched_by_bus_id() {
    let fake = FakeNvml(Ok(vec![
        NvmlGpu {
            // NVML's spelling: 8-digit domain, upper case.
            address: PciAddress::parse("00000000:83:00.0").unwrap(),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            uuid: Some("GPU-5c1b6d2e-1f3a-4b7e-9c2d-0a1b2c3d4e5f".into()),
        },
        NvmlGpu {
            address: PciAddress::parse("00000000:0A:00.0").unwrap(),
            name: Some("not in this tree".into()),
            uuid: None,
        },
    ]));
    let snap = read_with("pci-cross-socket", "none", Box::new(fake));
    assert_eq!(snap.nvml, NvmlState::Present(2));
    let g2 = &snap.gpus[2];
    assert_eq!(g2.address.to_string(), "0000:83:00.0");
    assert_eq!(g2.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert!(snap.gpus.iter().filter(|g| g.name.is_some()).count() == 1);

    let absent = FakeNvml(Err(NvmlError::Absent(
        "libnvidia-ml.so.1: not found".into(),
    )));
    let snap = read_with("pci-cross-socket", "none", Box::new(absent));
    assert_eq!(
        snap.nvml,
        NvmlState::Absent("libnvidia-ml.so.1: not found".into())
    );
    assert_eq!(snap.gpus.len(), 4);
}

#[test]
fn real_nvml_is_absent_without_the_driver() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        return; // a GPU host: NVML may well be there
    }
    let mut nvml = Nvml::new();
    assert!(matches!(nvml.gpus(), Err(NvmlError::Absent(_))));
    // The second call within the retry period does not try again and
    // answers the same.
    assert!(matches!(nvml.gpus(), Err(NvmlError::Absent(_))));
}

/// The real NVML path (nvml-wrapper, dlopen, nvmlInit_v2, the queries,
/// nvmlShutdown, dlclose) over a stand-in library built from
/// `tests/fixtures/nvml/fake_nvml.c`: the reader loads NVML at the first
/// walk and again only when the NVIDIA GPUs of the tree change, and the
/// library is out of the process's mappings between those questions.
#[test]
fn nvml_is_loaded_only_to_learn_the_gpus() {
    let dir = std::env::temp_dir().join(format!("roce-nvml-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("calls");
    let lib = dir.join("libfake-nvml.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvml/fake_nvml.c");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(format!("-DFAKE_NVML_LOG=\"{}\"", log.display()))
        .arg(&source)
        .status()
        .expect("a C compiler (cc) to build the stand-in NVML");
    assert!(built.success());
    // A copy of the tree, so that a GPU can leave it.
    let tree = dir.join("tree");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("pci-cross-socket"))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(copied.success());
    let sys = tree.join("sys");

    let mapped = |lib: &Path| {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .contains(lib.to_str().unwrap())
    };
    let calls = || std::fs::read_to_string(&log).unwrap_or_default();
    let mut reader = TopologyReader::new(
        sys.clone(),
        tree.join("proc"),
        vec![],
        Box::new(Nvml::with_library(&lib)),
    )
    .with_rescan_interval(Duration::ZERO);

    let snap = reader.read(&nics(&sys));
    assert_eq!(snap.nvml, NvmlState::Present(2));
    let named: Vec<_> = snap
        .gpus
        .iter()
        .map(|g| (g.address.to_string(), g.uuid.clone()))
        .collect();
    assert!(named.contains(&(
        "0000:83:00.0".into(),
        Some("GPU-00000000-0000-0000-0000-000000000083".into())
    )));
    assert_eq!(calls(), "init\nshutdown\n");
    assert!(!mapped(&lib), "NVML still mapped after the walk");

    // Walks over the same GPUs name them from the last answer.
    for _ in 0..3 {
        let again = reader.read(&nics(&sys));
        assert_eq!(again.gpus, snap.gpus);
        assert_eq!(again.nvml, NvmlState::Present(2));
    }
    assert!(reader.rebuilds() >= 4);
    assert_eq!(calls(), "init\nshutdown\n");
    assert!(!mapped(&lib));

    // A GPU leaves the tree: NVML is asked once more, and let go again.
    std::fs::remove_file(sys.join("bus/pci/devices/0000:04:00.0")).unwrap();
    let fewer = reader.read(&nics(&sys));
    assert_eq!(fewer.gpus.len(), snap.gpus.len() - 1);
    assert_eq!(calls(), "init\nshutdown\ninit\nshutdown\n");
    assert!(!mapped(&lib));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The binary on this host (no NVIDIA driver), NVML forced on: it runs,
/// reports the GPUs from sysfs with empty name and uuid, and says NVML is
/// unavailable.
#[test]
fn binary_reports_gpus_from_sysfs_without_nvml() {
    if Path::new("/proc/driver/nvidia/version").exists() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("roce-topo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yml");
    std::fs::write(&config, "sources: {nvml: true}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_roce_exporter"))
        .arg("once")
        .arg("--config.file")
        .arg(&config)
        .arg("--path.sysfs")
        .arg(fixtures().join("pci-dgx-h100/sys"))
        .arg("--path.procfs")
        .arg(fixtures().join("pci-gpudirect/none/proc"))
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gpu_info: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("roce_gpu_info{"))
        .collect();
    assert_eq!(gpu_info.len(), 8, "{stdout}");
    assert!(stdout.contains(
        "roce_gpu_info{gpu=\"0\",pci_address=\"0000:18:00.0\",pci_bus_id=\"00000000:18:00.0\",name=\"\",uuid=\"\",numa_node=\"0\"} 1"
    ));
    assert!(stdout.contains(
        "roce_gpu_nic_path_info{gpu=\"0\",device=\"mlx5_0\",path=\"PIX\",nearest=\"true\"} 1"
    ));
    // A SYS pair that is not the GPU's nearest only with the sys_paths group.
    assert!(!stdout.contains("roce_gpu_nic_path_info{gpu=\"7\",device=\"mlx5_0\""));
    // Two GPUs and two NICs behind each PCIe switch: each NIC is the
    // nearest (PIX) of both GPUs there, so no single GPU is its own.
    assert!(stdout.contains("roce_nic_nearest_gpus_info{device=\"mlx5_0\",gpus=\"0,1\"} 1"));
    assert!(stdout.contains("roce_nic_nearest_gpus_info{device=\"mlx5_7\",gpus=\"6,7\"} 1"));
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("roce_nic_nearest_gpus_info{"))
            .count(),
        8,
        "one series per NIC"
    );
    assert!(stdout.contains("roce_gpu_nvml_available 0"));
    assert!(stdout.contains("roce_gpudirect_rdma_ready{mechanism=\"nvidia_peermem\"} 0"));
    assert!(stdout.contains("roce_gpudirect_rdma_available 0"));
    assert!(stdout.contains(
        "roce_pcie_link_info{pci_address=\"0000:19:00.0\",device=\"mlx5_0\",speed=\"32.0 GT/s\",width=\"16\",max_speed=\"32.0 GT/s\",max_width=\"16\"} 1\n"
    ), "{stdout}");
    assert!(stdout.contains("roce_collector_success{collector=\"topology\"} 1"));
    // Said once, not per sample: one line at most about NVML.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.matches("NVML").count() <= 1, "{stderr}");
}

/// Counts the per-sample file calls, and behaves as sysfs does when a node
/// is removed under an open descriptor (ENODEV), which a fixture file on
/// disk does not.
#[derive(Clone, Default)]
struct CountingFiles {
    opens: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
}

impl SysFs for CountingFiles {
    fn open(&self, path: &Path) -> std::io::Result<Box<dyn SysFile>> {
        self.opens.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(CountingFile {
            file: File::open(path)?,
            path: path.to_path_buf(),
            reads: self.reads.clone(),
        }))
    }

    fn read_dir(&self, path: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
        StdFs.read_dir(path)
    }

    fn read_link(&self, path: &Path) -> std::io::Result<PathBuf> {
        StdFs.read_link(path)
    }

    fn canonicalize(&self, path: &Path) -> std::io::Result<PathBuf> {
        StdFs.canonicalize(path)
    }
}

/// A file opened through [`CountingFiles`]: fails with ENODEV once its path
/// is gone, as a sysfs descriptor whose node was removed does.
struct CountingFile {
    file: File,
    path: PathBuf,
    reads: Arc<AtomicUsize>,
}

impl SysFile for CountingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if !self.path.exists() {
            return Err(std::io::Error::from_raw_os_error(libc::ENODEV));
        }
        std::os::unix::fs::FileExt::read_at(&self.file, buf, offset)
    }
}

/// A writable copy of a fixture tree (symbolic links kept), removed on drop.
struct TreeCopy(PathBuf);

impl TreeCopy {
    fn new(tree: &str, test: &str) -> TreeCopy {
        let dir = std::env::temp_dir().join(format!("roce-topo-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let status = Command::new("cp")
            .arg("-a")
            .arg(fixtures().join(tree).join("sys"))
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success());
        TreeCopy(dir)
    }

    fn sys(&self) -> PathBuf {
        self.0.join("sys")
    }

    fn reader(&self, files: &CountingFiles) -> TopologyReader {
        let gd = fixtures().join("pci-gpudirect/none");
        TopologyReader::new(
            self.sys(),
            gd.join("proc"),
            vec![gd.join("usr/lib/x86_64-linux-gnu")],
            Box::new(NoNvml),
        )
        .with_files(Box::new(files.clone()))
    }

    /// The function's directory under `devices/`.
    fn dir(&self, address: &str) -> PathBuf {
        std::fs::canonicalize(self.sys().join("bus/pci/devices").join(address)).unwrap()
    }
}

impl Drop for TreeCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn steady_state_samples_only_pread_the_link_attributes() {
    let tree = TreeCopy::new("pci-dgx-h100", "steady");
    let files = CountingFiles::default();
    let mut reader = tree.reader(&files);
    let nics = nics(&tree.sys());
    let t0 = Instant::now();
    let first = reader.read_at(&nics, t0);
    let functions = first.functions.len();
    assert_eq!(functions, 40);
    // The walk opens both link attributes of every function once.
    assert_eq!(files.opens.load(Ordering::Relaxed), 2 * functions);
    assert_eq!(files.reads.load(Ordering::Relaxed), 0);
    for i in 1..=10 {
        let snap = reader.read_at(&nics, t0 + Duration::from_secs(i));
        assert_eq!(snap, first);
    }
    // Ten samples: two preads per function each, no open, no walk.
    assert_eq!(files.opens.load(Ordering::Relaxed), 2 * functions);
    assert_eq!(files.reads.load(Ordering::Relaxed), 10 * 2 * functions);
    assert_eq!(reader.rebuilds(), 1);
}

#[test]
fn with_a_link_interval_the_links_are_read_at_that_cadence_and_served_in_between() {
    let tree = TreeCopy::new("pci-dgx-h100", "cadence");
    let files = CountingFiles::default();
    let mut reader = tree
        .reader(&files)
        .with_link_interval(Duration::from_secs(30));
    let nics = nics(&tree.sys());
    let t0 = Instant::now();
    let first = reader.read_at(&nics, t0);
    let functions = first.functions.len();
    let nic = addr("0000:19:00.0");
    let dir = tree.dir("0000:19:00.0");
    std::fs::write(dir.join("current_link_speed"), "16.0 GT/s PCIe\n").unwrap();
    // Samples within the interval: the walk's reading, no read at all.
    for i in 1..30 {
        let snap = reader.read_at(&nics, t0 + Duration::from_secs(i));
        assert_eq!(snap, first);
    }
    assert_eq!(files.reads.load(Ordering::Relaxed), 0);
    // At the interval: both attributes of every function read once, and
    // the downtrained link seen.
    let later = reader.read_at(&nics, t0 + Duration::from_secs(30));
    assert_eq!(files.reads.load(Ordering::Relaxed), 2 * functions);
    let link = later.links.iter().find(|l| l.downstream == nic).unwrap();
    assert_eq!(link.speed_downtrained(), Some(true));
    assert_eq!(reader.rebuilds(), 1);
}

#[test]
fn a_link_that_downtrains_is_seen_on_the_next_sample() {
    let tree = TreeCopy::new("pci-dgx-h100", "downtrain");
    let files = CountingFiles::default();
    let mut reader = tree.reader(&files);
    let nics = nics(&tree.sys());
    let t0 = Instant::now();
    let nic = addr("0000:19:00.0");
    let before = reader.read_at(&nics, t0);
    let link = before.links.iter().find(|l| l.downstream == nic).unwrap();
    assert_eq!(link.speed_downtrained(), Some(false));
    // Written in place (same inode), as sysfs changes under a kept
    // descriptor.
    let dir = tree.dir("0000:19:00.0");
    std::fs::write(dir.join("current_link_speed"), "16.0 GT/s PCIe\n").unwrap();
    std::fs::write(dir.join("current_link_width"), "8\n").unwrap();
    let after = reader.read_at(&nics, t0 + Duration::from_secs(1));
    assert_eq!(reader.rebuilds(), 1);
    let link = after.links.iter().find(|l| l.downstream == nic).unwrap();
    assert_eq!(
        (link.current_speed, link.current_width),
        (Some(LinkSpeed(16000)), Some(8))
    );
    assert_eq!(link.capable_speed, Some(LinkSpeed(32000)));
    assert_eq!(link.speed_downtrained(), Some(true));
    assert_eq!(link.width_downtrained(), Some(true));
    let f = after.function(&nic).unwrap();
    assert_eq!(
        (f.current_speed, f.current_width),
        (Some(LinkSpeed(16000)), Some(8))
    );
    assert_eq!(after.errors, vec![]);
    // A value that does not parse is an error of this sample, and the
    // link is unknown, as on a first read.
    std::fs::write(dir.join("current_link_width"), "x8\n").unwrap();
    let bad = reader.read_at(&nics, t0 + Duration::from_secs(2));
    assert_eq!(bad.errors.len(), 1);
    assert_eq!(bad.errors[0].path, dir.join("current_link_width"));
    let link = bad.links.iter().find(|l| l.downstream == nic).unwrap();
    assert_eq!(link.current_width, None);
    assert_eq!(reader.rebuilds(), 1);
}

#[test]
fn a_gpu_added_to_the_tree_is_seen_after_the_rescan_interval() {
    let tree = TreeCopy::new("pci-dgx-h100", "hotadd");
    let files = CountingFiles::default();
    let mut reader = tree.reader(&files);
    let nics = nics(&tree.sys());
    // GPU7 (0000:bf:00.0) is not there when the exporter starts.
    let gpu = tree.dir("0000:bf:00.0");
    let link = tree.sys().join("bus/pci/devices/0000:bf:00.0");
    let target = std::fs::read_link(&link).unwrap();
    let stash = tree.0.join("stash");
    std::fs::rename(&gpu, &stash).unwrap();
    std::fs::remove_file(&link).unwrap();
    let t0 = Instant::now();
    assert_eq!(reader.read_at(&nics, t0).gpus.len(), 7);
    // Hot-added.
    std::fs::rename(&stash, &gpu).unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let soon = reader.read_at(&nics, t0 + DEFAULT_RESCAN - Duration::from_secs(1));
    assert_eq!(soon.gpus.len(), 7);
    assert_eq!(reader.rebuilds(), 1);
    let later = reader.read_at(&nics, t0 + DEFAULT_RESCAN);
    assert_eq!(reader.rebuilds(), 2);
    assert_eq!(later.gpus.len(), 8);
    assert_eq!(later.path(7, "mlx5_7").map(|c| c.as_str()), Some("PIX"));
    assert_eq!(later, read("pci-dgx-h100"));
}

#[test]
fn a_changed_set_of_rdma_devices_rebuilds() {
    let tree = TreeCopy::new("pci-dgx-h100", "nicset");
    let files = CountingFiles::default();
    let mut reader = tree.reader(&files);
    let mut nics = nics(&tree.sys());
    let t0 = Instant::now();
    assert_eq!(reader.read_at(&nics, t0).nics.len(), 8);
    nics.pop();
    let snap = reader.read_at(&nics, t0 + Duration::from_secs(1));
    assert_eq!(reader.rebuilds(), 2);
    assert_eq!(snap.nics.len(), 7);
    assert_eq!(snap.path(0, "mlx5_7"), None);
}

#[test]
fn a_vanished_bridge_rebuilds_without_errors() {
    let tree = TreeCopy::new("pci-dgx-h100", "unplug");
    let files = CountingFiles::default();
    let mut reader = tree.reader(&files);
    let nics = nics(&tree.sys());
    let t0 = Instant::now();
    let before = reader.read_at(&nics, t0);
    assert_eq!(before.gpus.len(), 8);
    // The switch downstream port above GPU7 is removed, and GPU7 with it
    // (a surprise removal takes the whole subtree).
    let gpu = tree.dir("0000:bf:00.0");
    let bridge = gpu.parent().unwrap().to_path_buf();
    assert!(before
        .function(&addr(bridge.file_name().unwrap().to_str().unwrap()))
        .is_some());
    std::fs::remove_dir_all(&bridge).unwrap();
    let after = reader.read_at(&nics, t0 + Duration::from_secs(1));
    assert_eq!(reader.rebuilds(), 2);
    assert_eq!(after.errors, vec![]);
    assert_eq!(after.gpus.len(), 7);
    assert!(after
        .function(&addr(bridge.file_name().unwrap().to_str().unwrap()))
        .is_none());
    // And the rebuilt cache is steady again.
    let next = reader.read_at(&nics, t0 + Duration::from_secs(2));
    assert_eq!(next, after);
    assert_eq!(reader.rebuilds(), 2);
}

fn once_over(tree: &str, flags: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_roce_exporter"))
        .arg("once")
        .arg("--path.sysfs")
        .arg(fixtures().join(tree))
        .arg("--path.procfs")
        .arg(fixtures().join("pci-gpudirect/none/proc"))
        .args(flags)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn pci_addresses(text: &str, prefix: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split("pci_address=\"").nth(1))
        .filter_map(|l| l.split('"').next())
        .map(str::to_string)
        .collect()
}

/// PCIe speed and width of the GPUs and NICs by default, of every bridge on
/// their way to the root port too with `--collector.pcie_hops`; the links
/// trained below their bound by default, every hop (0 where it trained to
/// its bound) with it.
#[test]
fn pcie_hops_only_with_their_switch() {
    let snap = read("pci-dgx-h100");
    let endpoints: BTreeSet<String> = snap
        .functions
        .iter()
        .filter(|f| f.role != FunctionRole::Bridge)
        .map(|f| f.address.to_string())
        .collect();
    let lean = once_over("pci-dgx-h100/sys", &[]);
    let full = once_over("pci-dgx-h100/sys", &["--collector.pcie_hops"]);
    let family = "roce_pcie_link_info{";
    assert_eq!(pci_addresses(&lean, family), endpoints, "{family}");
    let all = pci_addresses(&full, family);
    assert!(
        all.is_superset(&endpoints) && all.len() > endpoints.len(),
        "{family}"
    );
    let down = "roce_pcie_link_downtrained{";
    assert!(pci_addresses(&lean, down).is_subset(&pci_addresses(&full, down)));
    assert!(pci_addresses(&full, down).len() > endpoints.len() / 2);
    assert!(
        lean.lines()
            .filter(|l| l.starts_with(down))
            .all(|l| l.ends_with(" 1")),
        "only the links trained below their bound by default:\n{lean}"
    );
}

/// ACS request redirect: one series per bridge where redirect is on or
/// unknown, its state in the label; every bridge with `pcie_hops`.
#[test]
fn acs_state_is_one_series_per_bridge() {
    let acs_of = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("roce_pcie_acs_request_redirect{"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        acs_of(&once_over("pci-acs/sys", &[])),
        [
            r#"roce_pcie_acs_request_redirect{pci_address="0000:02:00.0",state="enabled"} 1"#,
            r#"roce_pcie_acs_request_redirect{pci_address="0000:02:01.0",state="enabled"} 1"#,
            r#"roce_pcie_acs_request_redirect{pci_address="0000:06:00.0",state="unknown"} 1"#,
        ]
    );
    assert_eq!(
        acs_of(&once_over("pci-acs/sys", &["--collector.pcie_hops"])),
        [
            r#"roce_pcie_acs_request_redirect{pci_address="0000:01:00.0",state="absent"} 1"#,
            r#"roce_pcie_acs_request_redirect{pci_address="0000:02:00.0",state="enabled"} 1"#,
            r#"roce_pcie_acs_request_redirect{pci_address="0000:02:01.0",state="enabled"} 1"#,
            r#"roce_pcie_acs_request_redirect{pci_address="0000:05:00.0",state="absent"} 1"#,
            r#"roce_pcie_acs_request_redirect{pci_address="0000:06:00.0",state="unknown"} 1"#,
            r#"roce_pcie_acs_request_redirect{pci_address="0000:06:01.0",state="disabled"} 1"#,
        ]
    );
}
