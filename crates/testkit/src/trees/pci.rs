//! The PCI topology fixture trees (`pci-*/sys`): a DGX H100's switches,
//! GPUs across sockets, downtrained links, ACS settings, a cloud VM's flat
//! bus; and the GPUDirect procfs cases (`pci-gpudirect/<case>/`: proc/ and
//! the libibverbs directory).

use std::io;
use std::path::Path;

use crate::kernel::{GEN3, GEN4, GEN5};
use crate::pci::{
    ConfigSpace, Function, Link, ACS_CR, ACS_RR, ACS_SV, ACS_UF, CLASS_BRIDGE, DOWNSTREAM,
    ENDPOINT, ROOT_PORT, UPSTREAM,
};
use crate::tree::Tree;

/// Writes every tree under `dir` (tests/fixtures of the topology crate).
pub fn write_all(dir: &Path) -> io::Result<()> {
    dgx_h100(dir)?;
    cross_socket(dir)?;
    downtrained(dir)?;
    acs(dir)?;
    cloud_vm(dir)?;
    gpudirect(dir)
}

const NVIDIA: u16 = 0x10de;
const MELLANOX: u16 = 0x15b3;
const BROADCOM_PLX: u16 = 0x1000;
const INTEL: u16 = 0x8086;
const H100_SXM: u16 = 0x2330;
const CX7: u16 = 0x1021;
const PEX89104: u16 = 0xc030;
const SPR_RP: u16 = 0x352a;
const NVSWITCH: u16 = 0x22a3;
const CLASS_3D: u32 = 0x030200;
const CLASS_ETH: u32 = 0x020000;
const CLASS_NVSWITCH: u32 = 0x068000;
const CLASS_NVME: u32 = 0x010802;

const G5X16: Option<Link> = Some(Link::same(GEN5, 16));

/// Header (revision 1); with `port`, a PCI Express capability at 0x40;
/// AER at 0x100 and, with `acs_ctrl`, ACS at 0x148.
fn config(
    vendor: u16,
    device: u16,
    class: u32,
    port: Option<u8>,
    acs_ctrl: Option<u16>,
) -> ConfigSpace {
    let mut c = ConfigSpace::new(vendor, device, class, 0x01, u8::from(class == CLASS_BRIDGE));
    if let Some(port) = port {
        c.capability_list(0x40).express(0x40, 0, port, false);
    }
    c.aer(0x100, if acs_ctrl.is_some() { 0x148 } else { 0 });
    if let Some(ctrl) = acs_ctrl {
        c.acs(0x148, 0, ACS_SV | ACS_RR | ACS_CR | ACS_UF, ctrl);
    }
    c
}

struct PciTree {
    t: Tree,
    /// Every `config` holds the 64 bytes a reader without CAP_SYS_ADMIN gets.
    unprivileged: bool,
}

#[derive(Default)]
struct Opts {
    acs_ctrl: Option<u16>,
    short_config: bool,
    driver: Option<&'static str>,
    port: Option<u8>,
}

impl PciTree {
    fn create(dir: &Path, name: &str, unprivileged: bool) -> io::Result<PciTree> {
        let base = dir.join(name);
        if base.exists() {
            std::fs::remove_dir_all(&base)?;
        }
        let t = Tree::create(&base.join("sys"))?;
        for d in [
            "bus/pci/devices",
            "bus/pci/drivers/mlx5_core",
            "bus/pci/drivers/nvidia",
        ] {
            t.mkdir(d)?;
        }
        Ok(PciTree { t, unprivileged })
    }

    fn host_bridge(&self, domain: u16, bus: u8) -> io::Result<String> {
        let rel = format!("devices/pci{domain:04x}:{bus:02x}");
        self.t.mkdir(&rel)?;
        Ok(rel)
    }

    #[allow(clippy::too_many_arguments)]
    fn func(
        &self,
        parent: &str,
        addr: &str,
        vendor: u16,
        device: u16,
        class: u32,
        numa: i32,
        link: Option<Link>,
        o: Opts,
    ) -> io::Result<String> {
        let rel = format!("{parent}/{addr}");
        let c = config(vendor, device, class, o.port, o.acs_ctrl);
        let mut f = Function::new(vendor, device, class, numa);
        f.link = link;
        f.driver = o.driver;
        f.config = Some(if o.short_config || self.unprivileged {
            c.unprivileged().to_vec()
        } else {
            c.bytes().to_vec()
        });
        f.write(&self.t, &rel)?;
        Ok(rel)
    }

    fn root_port(&self, hb: &str, addr: &str, numa: i32, link: Link) -> io::Result<String> {
        self.func(
            hb,
            addr,
            INTEL,
            SPR_RP,
            CLASS_BRIDGE,
            numa,
            Some(link),
            Opts {
                port: Some(ROOT_PORT),
                ..Opts::default()
            },
        )
    }

    /// A switch upstream port.
    fn up(&self, parent: &str, addr: &str, numa: i32, link: Link) -> io::Result<String> {
        let opts = Opts {
            port: Some(UPSTREAM),
            ..Opts::default()
        };
        self.switch_port(parent, addr, numa, link, opts)
    }

    /// A port of the Broadcom PEX89104 switch.
    fn switch_port(
        &self,
        parent: &str,
        addr: &str,
        numa: i32,
        link: Link,
        opts: Opts,
    ) -> io::Result<String> {
        self.func(
            parent,
            addr,
            BROADCOM_PLX,
            PEX89104,
            CLASS_BRIDGE,
            numa,
            Some(link),
            opts,
        )
    }

    /// A switch downstream port.
    fn down(
        &self,
        parent: &str,
        addr: &str,
        numa: i32,
        link: Link,
        acs_ctrl: Option<u16>,
        short_config: bool,
    ) -> io::Result<String> {
        let opts = Opts {
            port: Some(DOWNSTREAM),
            acs_ctrl,
            short_config,
            ..Opts::default()
        };
        self.switch_port(parent, addr, numa, link, opts)
    }

    fn gpu(
        &self,
        parent: &str,
        addr: &str,
        numa: i32,
        link: Option<Link>,
        port: Option<u8>,
    ) -> io::Result<String> {
        self.func(
            parent,
            addr,
            NVIDIA,
            H100_SXM,
            CLASS_3D,
            numa,
            link,
            Opts {
                driver: Some("nvidia"),
                port,
                ..Opts::default()
            },
        )
    }

    fn nic(
        &self,
        parent: &str,
        addr: &str,
        numa: i32,
        link: Option<Link>,
        name: &str,
        port: Option<u8>,
    ) -> io::Result<String> {
        let path = self.func(
            parent,
            addr,
            MELLANOX,
            CX7,
            CLASS_ETH,
            numa,
            link,
            Opts {
                driver: Some("mlx5_core"),
                port,
                ..Opts::default()
            },
        )?;
        self.rdma(&path, name)?;
        Ok(path)
    }

    /// An RDMA device on a PCI function, with one active port.
    fn rdma(&self, fn_: &str, name: &str) -> io::Result<()> {
        let t = &self.t;
        let dev = format!("{fn_}/infiniband/{name}");
        t.mkdir(&format!("{dev}/ports/1"))?;
        let addr = fn_.rsplit('/').next().unwrap_or(fn_);
        t.link_raw(&format!("{dev}/device"), &format!("../../../{addr}"))?;
        for (k, v) in [
            ("node_type", "1: CA"),
            ("fw_ver", "28.39.1002"),
            ("board_id", "MT_0000000838"),
            ("hca_type", "MT4129"),
            ("node_guid", "b8ce:f603:00a1:b2c4"),
        ] {
            t.attr(&format!("{dev}/{k}"), v)?;
        }
        for (k, v) in [
            ("state", "4: ACTIVE"),
            ("phys_state", "5: LinkUp"),
            ("rate", "400 Gb/sec (4X NDR)"),
            ("link_layer", "Ethernet"),
        ] {
            t.attr(&format!("{dev}/ports/1/{k}"), v)?;
        }
        t.link(&format!("class/infiniband/{name}"), &dev)
    }
}

/// 2 sockets; 4 PCIe switches, each on its own root bus (host bridge), two
/// per socket; switch s holds GPUs 2s, 2s+1 and ConnectX-7 mlx5_2s,
/// mlx5_2s+1 on four downstream ports (ACS on, P2P redirect off, as
/// GPUDirect wants). Plus an NVSwitch and an NVMe drive that are not GPUs.
fn dgx_h100(dir: &Path) -> io::Result<()> {
    let t = PciTree::create(dir, "pci-dgx-h100", false)?;
    let g5 = Link::same(GEN5, 16);
    for (s, bus) in [0x15u8, 0x37, 0x9a, 0xba].into_iter().enumerate() {
        let numa = (s / 2) as i32;
        let hb = t.host_bridge(0, bus)?;
        let rp = t.root_port(&hb, &format!("0000:{bus:02x}:01.0"), numa, g5)?;
        let usp = t.up(&rp, &format!("0000:{:02x}:00.0", bus + 1), numa, g5)?;
        for port in 0..4u8 {
            let dsp = t.down(
                &usp,
                &format!("0000:{:02x}:{port:02x}.0", bus + 2),
                numa,
                g5,
                Some(ACS_SV | ACS_CR | ACS_UF),
                false,
            )?;
            let ep = format!("0000:{:02x}:00.0", bus + 3 + port);
            if port % 2 == 0 {
                t.gpu(&dsp, &ep, numa, G5X16, Some(ENDPOINT))?;
            } else {
                let name = format!("mlx5_{}", 2 * s + usize::from(port / 2));
                t.nic(&dsp, &ep, numa, G5X16, &name, Some(ENDPOINT))?;
            }
        }
    }
    let hb = t.host_bridge(0, 0x00)?;
    t.func(
        &hb,
        "0000:00:05.0",
        NVIDIA,
        NVSWITCH,
        CLASS_NVSWITCH,
        0,
        Some(Link::same(GEN4, 2)),
        Opts::default(),
    )?;
    let rp = t.root_port(&hb, "0000:00:06.0", 0, Link::same(GEN4, 4))?;
    t.func(
        &rp,
        "0000:01:00.0",
        0x144d,
        0xa80a,
        CLASS_NVME,
        0,
        Some(Link::same(GEN4, 4)),
        Opts::default(),
    )?;
    Ok(())
}

/// GPUs 0, 1 behind a switch on socket 0 with mlx5_0 on another root port
/// of the same host bridge (PHB); GPUs 2, 3 and mlx5_1 behind a switch on
/// socket 1 (PIX there, SYS across). Read as an unprivileged exporter sees
/// it: 64-byte config spaces, so switch ports are told apart by depth alone.
fn cross_socket(dir: &Path) -> io::Result<()> {
    let t = PciTree::create(dir, "pci-cross-socket", true)?;
    let g5 = Link::same(GEN5, 16);
    let hb = t.host_bridge(0, 0x00)?;
    let rp = t.root_port(&hb, "0000:00:01.0", 0, g5)?;
    let usp = t.up(&rp, "0000:01:00.0", 0, g5)?;
    for port in 0..2u8 {
        let dsp = t.down(&usp, &format!("0000:02:{port:02x}.0"), 0, g5, None, false)?;
        t.gpu(
            &dsp,
            &format!("0000:{:02x}:00.0", 3 + port),
            0,
            G5X16,
            Some(ENDPOINT),
        )?;
    }
    let rp = t.root_port(&hb, "0000:00:03.0", 0, g5)?;
    t.nic(&rp, "0000:05:00.0", 0, G5X16, "mlx5_0", Some(ENDPOINT))?;
    let hb = t.host_bridge(0, 0x80)?;
    let rp = t.root_port(&hb, "0000:80:01.0", 1, g5)?;
    let usp = t.up(&rp, "0000:81:00.0", 1, g5)?;
    for port in 0..3u8 {
        let dsp = t.down(&usp, &format!("0000:82:{port:02x}.0"), 1, g5, None, false)?;
        let ep = format!("0000:{:02x}:00.0", 0x83 + port);
        if port < 2 {
            t.gpu(&dsp, &ep, 1, G5X16, Some(ENDPOINT))?;
        } else {
            t.nic(&dsp, &ep, 1, G5X16, "mlx5_1", Some(ENDPOINT))?;
        }
    }
    Ok(())
}

/// Two switch levels (PXB). GPU0 trained at x8 where both ends do x16
/// (downtrained); mlx5_0 at 8 GT/s where both ends do 16 GT/s
/// (downtrained); GPU1 at x8 below a port that only does x8 (not
/// downtrained: x8 is what the link can be).
fn downtrained(dir: &Path) -> io::Result<()> {
    let t = PciTree::create(dir, "pci-downtrained", false)?;
    let g4 = Link::same(GEN4, 16);
    let x8_of_16 = Link {
        speed: GEN4,
        width: 8,
        max_speed: GEN4,
        max_width: 16,
    };
    let gen3_of_4 = Link {
        speed: GEN3,
        width: 16,
        max_speed: GEN4,
        max_width: 16,
    };
    let hb = t.host_bridge(0, 0x00)?;
    let rp = t.root_port(&hb, "0000:00:01.0", 0, g4)?;
    let usp_a = t.up(&rp, "0000:01:00.0", 0, g4)?;
    let dsp_a0 = t.down(&usp_a, "0000:02:00.0", 0, g4, None, false)?;
    let dsp_a1 = t.down(&usp_a, "0000:02:01.0", 0, gen3_of_4, None, false)?;
    let usp_b = t.up(&dsp_a0, "0000:03:00.0", 0, g4)?;
    let dsp_b0 = t.down(&usp_b, "0000:04:00.0", 0, x8_of_16, None, false)?;
    let dsp_b1 = t.down(&usp_b, "0000:04:01.0", 0, Link::same(GEN4, 8), None, false)?;
    t.gpu(&dsp_b0, "0000:05:00.0", 0, Some(x8_of_16), Some(ENDPOINT))?;
    t.nic(
        &dsp_a1,
        "0000:06:00.0",
        0,
        Some(gen3_of_4),
        "mlx5_0",
        Some(ENDPOINT),
    )?;
    t.gpu(&dsp_b1, "0000:07:00.0", 0, Some(x8_of_16), Some(ENDPOINT))?;
    Ok(())
}

/// Two switches on one host bridge. Switch A: both downstream ports
/// redirect P2P requests (ACS RR on), upstream port without ACS. Switch B:
/// one downstream port whose config space reads short (64 bytes: not
/// root), one with ACS but RR off.
fn acs(dir: &Path) -> io::Result<()> {
    let t = PciTree::create(dir, "pci-acs", false)?;
    let g5 = Link::same(GEN5, 16);
    let on = ACS_SV | ACS_RR | ACS_CR | ACS_UF;
    let hb = t.host_bridge(0, 0x00)?;
    let rp = t.root_port(&hb, "0000:00:01.0", 0, g5)?;
    let usp = t.up(&rp, "0000:01:00.0", 0, g5)?;
    let d0 = t.down(&usp, "0000:02:00.0", 0, g5, Some(on), false)?;
    let d1 = t.down(&usp, "0000:02:01.0", 0, g5, Some(on), false)?;
    t.gpu(&d0, "0000:03:00.0", 0, G5X16, Some(ENDPOINT))?;
    t.nic(&d1, "0000:04:00.0", 0, G5X16, "mlx5_0", Some(ENDPOINT))?;
    let rp = t.root_port(&hb, "0000:00:02.0", 0, g5)?;
    let usp = t.up(&rp, "0000:05:00.0", 0, g5)?;
    let d0 = t.down(&usp, "0000:06:00.0", 0, g5, None, true)?;
    let d1 = t.down(&usp, "0000:06:01.0", 0, g5, Some(ACS_SV), false)?;
    t.gpu(&d0, "0000:07:00.0", 0, G5X16, Some(ENDPOINT))?;
    t.nic(&d1, "0000:08:00.0", 0, G5X16, "mlx5_1", Some(ENDPOINT))?;
    Ok(())
}

/// A VM: two GPUs and a NIC function passed through flat on the root bus,
/// no NUMA information (-1). The first GPU is a PCIe root-complex endpoint
/// whose link status reads as unknown; the others have no link attributes
/// at all (conventional PCI on the emulated bus).
fn cloud_vm(dir: &Path) -> io::Result<()> {
    let t = PciTree::create(dir, "pci-cloud-vm", false)?;
    let hb = t.host_bridge(0, 0x00)?;
    // An ISA bridge.
    t.func(
        &hb,
        "0000:00:01.0",
        INTEL,
        0x7000,
        0x060100,
        -1,
        None,
        Opts::default(),
    )?;
    let unknown = Link {
        speed: "Unknown",
        width: 0,
        max_speed: "Unknown",
        max_width: 0,
    };
    t.gpu(&hb, "0000:00:04.0", -1, Some(unknown), Some(ENDPOINT))?;
    t.gpu(&hb, "0000:00:05.0", -1, None, None)?;
    t.nic(&hb, "0000:00:06.0", -1, None, "mlx5_0", None)?;
    Ok(())
}

/// procfs and libibverbs for the GPUDirect readiness cases.
fn gpudirect(dir: &Path) -> io::Result<()> {
    let base = dir.join("pci-gpudirect");
    if base.exists() {
        std::fs::remove_dir_all(&base)?;
    }
    let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  \
        Thu Oct 19 18:56:32 UTC 2023\nGCC version:  gcc version 11.4.0 \
        (Ubuntu 11.4.0-1ubuntu1~22.04)\n";
    let open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  \
        Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n\
        GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n";
    // /proc/modules: name size refcount deps state offset (kernel/module/procfs.c).
    let nvidia = "nvidia_uvm 1691648 0 - Live 0x0000000000000000 (POE)\n\
        nvidia 62324736 2 nvidia_uvm, Live 0x0000000000000000 (POE)\n";
    let peermem = "nvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)\n";
    let mlx = "mlx5_ib 479232 0 - Live 0x0000000000000000\n\
        ib_uverbs 184320 2 nvidia_peermem,mlx5_ib, Live 0x0000000000000000\n";
    let cases = [
        // peermem loaded, proprietary module, Ubuntu 22.04 kernel and rdma-core 39.
        (
            "peermem",
            format!("{peermem}{nvidia}{mlx}"),
            "5.15.0-91-generic",
            proprietary,
            "libibverbs.so.1.14.39.0",
        ),
        // open kernel module on a 6.8 kernel, rdma-core 50: dma-buf.
        (
            "dmabuf",
            format!("{nvidia}{mlx}"),
            "6.8.0-45-generic",
            open_module,
            "libibverbs.so.1.14.50.0",
        ),
        // proprietary module without peermem: not ready.
        (
            "none",
            format!("{nvidia}{mlx}"),
            "6.8.0-45-generic",
            proprietary,
            "libibverbs.so.1.14.50.0",
        ),
        // open module but an old kernel and an rdma-core before dma-buf.
        (
            "old",
            format!("{nvidia}{mlx}"),
            "5.4.0-150-generic",
            open_module,
            "libibverbs.so.1.11.32.0",
        ),
    ];
    for (name, modules, release, version, lib) in cases {
        let t = Tree::create(&base.join(name))?;
        t.write("proc/modules", modules)?;
        t.attr("proc/sys/kernel/osrelease", release)?;
        t.write("proc/driver/nvidia/version", version)?;
        let libdir = "usr/lib/x86_64-linux-gnu";
        t.write(&format!("{libdir}/{lib}"), "")?;
        t.link_raw(&format!("{libdir}/libibverbs.so.1"), lib)?;
    }
    Ok(())
}
