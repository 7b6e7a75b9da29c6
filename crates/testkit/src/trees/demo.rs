//! The DEMO sysfs tree of a DGX-H100-like GPU node
//! (examples/demo-gpu-node/sys), for trying roce_exporter without RDMA
//! hardware and for the monitoring end-to-end test, the golden files and
//! the docs. Nothing here was captured from a real machine; the shape
//! follows the kernel's sysfs layout and a DGX H100's PCIe topology:
//!
//! * 2 sockets / NUMA nodes; 2 PCIe Gen5 switches per socket, each behind a
//!   root port: root port -> switch upstream port -> 4 downstream ports;
//! * per switch 2 GPUs (NVIDIA H100 SXM, 10de:2330, class 0x030200) and 2
//!   ConnectX-7 NICs (15b3:1021, class 0x020000, RoCE, mlx5_core), so GPU i
//!   and NIC i (mlx5_i) share a switch;
//! * every PCI function and bridge has vendor, device, class, revision,
//!   numa_node, current/max link speed and width, and a 4096-byte `config`
//!   (power management at 0x40, then a PCI Express capability at 0x60
//!   whose link registers agree with the text files; root and downstream
//!   ports carry an ACS extended capability at 0x100 with every control
//!   bit off, i.e. ACS disabled);
//! * class/infiniband/mlx5_i with the kernel's port attributes, PMA
//!   counters, mlx5 hw_counters and a 256-slot GID table;
//! * class/net/<netdev> for each NIC (mtu 9000, operstate, speed, address,
//!   the mlx5 DCQCN `ecn/` settings), rdma_cm's configfs ToS and MLNX_OFED's
//!   global traffic class.
//!
//! Per-port deviations (what the demo wants a dashboard or rule to show)
//! live in [`nic_tweaks`]: one match arm per NIC index.

use std::io;
use std::path::Path;

use crate::kernel::{self, link_local_gid, mac, mlx5, ROCE_V1, ROCE_V2};
use crate::pci::{
    ConfigSpace, Function, Link, CLASS_BRIDGE, DOWNSTREAM, ENDPOINT, ROOT_PORT, UPSTREAM,
};
use crate::rdma::{
    active_roce_port, attrs, ib_device, netdev, netdev_attrs, Attrs, GidFiles, PortFiles,
};
use crate::tree::Tree;

const GID_SLOTS: usize = 256;

/// One NIC of the demo node as [`nic_tweaks`] may change it before it is
/// written.
pub struct DemoNic {
    /// NIC index: mlx5_<index>, ens<index+1>np0.
    pub index: usize,
    pub ifname: String,
    /// `ports/1/counters/*`.
    pub counters: Attrs,
    /// `ports/1/hw_counters/*` (`lifespan` is added when written).
    pub hw: Attrs,
    /// Files under the net device (mtu, ecn/..., ...), written as `value\n`.
    pub netdev: Attrs,
}

impl DemoNic {
    /// Replaces the value of `name` in `set`, or adds it.
    pub fn set(set: &mut Attrs, name: &str, value: impl ToString) {
        match set.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value.to_string(),
            None => set.push((name.to_string(), value.to_string())),
        }
    }
}

/// The demo's per-NIC deviations from the healthy defaults.
fn nic_tweaks(nic: &mut DemoNic) {
    if nic.index == 5 {
        // A congested receiver: the NIC dropped for lack of receive
        // buffers and timed out acknowledgements.
        DemoNic::set(&mut nic.hw, "out_of_buffer", 2_417);
        DemoNic::set(&mut nic.hw, "local_ack_timeout_err", 9);
    }
}

/// A 4096-byte config space: header, PM at 0x40 -> PCI Express at 0x60,
/// ACS at 0x100 (control 0) where `acs`.
fn config(f: &Function, port_type: u8, link: Link, buses: Option<[u8; 3]>, acs: bool) -> Vec<u8> {
    let header_type = u8::from(f.class == CLASS_BRIDGE);
    let mut c = ConfigSpace::new(
        f.vendor,
        f.device,
        f.class,
        f.revision.unwrap_or(0),
        header_type,
    );
    c.command(if header_type == 0 { 0x0406 } else { 0x0407 });
    c.capability_list(0x40);
    if let (1, Some(b)) = (header_type, buses) {
        c.buses(b);
    }
    c.power_management(0x40, 0x60);
    let slot = port_type == ROOT_PORT || port_type == DOWNSTREAM;
    c.express(0x60, 0x00, port_type, slot);
    let speed = if link.speed == kernel::GEN5 { 5 } else { 4 };
    c.express_link(0x60, speed, link.width as u8);
    if acs {
        // SV, TB, RR, CR, UF, DT supported; control all off.
        c.acs(0x100, 0, 0x005f, 0x0000);
    }
    c.bytes().to_vec()
}

#[allow(clippy::too_many_arguments)]
fn pci(
    t: &Tree,
    chain: &[&str],
    ids: (u16, u16, u32),
    numa: i32,
    driver: &str,
    port_type: u8,
    rev: u8,
    buses: Option<[u8; 3]>,
    acs: bool,
) -> io::Result<String> {
    let rel = format!("devices/{}", chain.join("/"));
    let link = Link::same(kernel::GEN5, 16);
    let mut f = Function::new(ids.0, ids.1, ids.2, numa);
    f.revision = Some(rev);
    f.link = Some(link);
    f.driver = Some(driver);
    if ids.2 == CLASS_BRIDGE {
        f.bus_numbers = buses.map(|b| (b[1], b[2]));
    }
    f.config = Some(config(&f, port_type, link, buses, acs));
    f.write(t, &rel)?;
    Ok(rel)
}

/// The AER counters of a PCI function with the AER capability, as
/// `drivers/pci/pcie/aer.c` (Linux 6.1) prints them: one `NAME COUNT` line
/// per named error bit, then the total; `bad_dllp` correctable BadDLLP
/// errors, nothing else.
fn aer(t: &Tree, rel: &str, bad_dllp: u64) -> io::Result<()> {
    const CORRECTABLE: [&str; 8] = [
        "RxErr",
        "BadTLP",
        "BadDLLP",
        "Rollover",
        "Timeout",
        "NonFatalErr",
        "CorrIntErr",
        "HeaderOF",
    ];
    const UNCORRECTABLE: [&str; 18] = [
        "Undefined",
        "DLP",
        "SDES",
        "TLP",
        "FCP",
        "CmpltTO",
        "CmpltAbrt",
        "UnxCmplt",
        "RxOF",
        "MalfTLP",
        "ECRC",
        "UnsupReq",
        "ACSViol",
        "UncorrIntErr",
        "BlockedTLP",
        "AtomicOpBlocked",
        "TLPBlockedErr",
        "PoisonTLPBlocked",
    ];
    let text = |names: &[&str], total: &str, count: &dyn Fn(&str) -> u64| {
        let mut out = String::new();
        let mut sum = 0;
        for name in names {
            let n = count(name);
            sum += n;
            out.push_str(&format!("{name} {n}\n"));
        }
        out.push_str(&format!("{total} {sum}\n"));
        out
    };
    let cor = text(&CORRECTABLE, "TOTAL_ERR_COR", &|n| {
        if n == "BadDLLP" {
            bad_dllp
        } else {
            0
        }
    });
    t.write(&format!("{rel}/aer_dev_correctable"), cor)?;
    let none = |_: &str| 0;
    t.write(
        &format!("{rel}/aer_dev_nonfatal"),
        text(&UNCORRECTABLE, "TOTAL_ERR_NONFATAL", &none),
    )?;
    t.write(
        &format!("{rel}/aer_dev_fatal"),
        text(&UNCORRECTABLE, "TOTAL_ERR_FATAL", &none),
    )
}

fn rdma_device(t: &mut Tree, fn_: &str, nic: &DemoNic, mac_s: &str) -> io::Result<()> {
    let i = nic.index;
    let name = format!("mlx5_{i}");
    let hex: String = mac_s.replace(':', "");
    let guid = format!("b8ce:f603:00{:02x}:{}", 0xa0 + i, &hex[hex.len() - 4..]);
    let desc = format!("demo-dgx-01 {name}");
    let dev = ib_device(
        t,
        fn_,
        &name,
        &attrs(&[
            ("fw_ver", "28.39.1002"),
            ("board_id", "MT_0000000838"),
            ("hca_type", "MT4129"),
            ("node_guid", &guid),
            ("sys_image_guid", &guid),
            ("node_type", "1: CA"),
            ("node_desc", &desc),
        ]),
        true,
    )?;
    let mut port = PortFiles::new(1, active_roce_port("400 Gb/sec (4X NDR)"));
    port.counters = Some(nic.counters.clone());
    let mut hw = nic.hw.clone();
    hw.push(("lifespan".into(), "10".into()));
    port.hw = Some(hw);
    let ll = link_local_gid(mac(mac_s));
    // 10.0.i.11
    let v4 = format!("0000:0000:0000:0000:0000:ffff:0a00:{i:02x}0b");
    let nd = Some(nic.ifname.as_str());
    port.gids = vec![
        GidFiles::new(0, &ll, ROCE_V1, nd),
        GidFiles::new(1, &ll, ROCE_V2, nd),
        GidFiles::new(2, &v4, ROCE_V1, nd),
        GidFiles::new(3, &v4, ROCE_V2, nd),
    ];
    port.slots = GID_SLOTS;
    // On a kernel the attributes of empty slots fail with EINVAL; the demo
    // keeps no faults.txt.
    port.write(t, &dev)?;
    Ok(())
}

fn nic_defaults(index: usize, ifname: &str, mac_s: &str) -> DemoNic {
    let scale = 1 + index as u64;
    let i = index as u64;
    let mut counters: Attrs = kernel::PMA_EXT
        .iter()
        .map(|n| (n.to_string(), "0".into()))
        .collect();
    for (k, v) in [
        ("port_rcv_data", 21_500_000_000 * scale),
        ("port_xmit_data", 21_400_000_000 * scale),
        ("port_rcv_packets", 21_000_000 * scale),
        ("port_xmit_packets", 20_900_000 * scale),
        ("unicast_rcv_packets", 20_990_000 * scale),
        ("unicast_xmit_packets", 20_890_000 * scale),
        ("multicast_rcv_packets", 10_000 * scale),
        ("multicast_xmit_packets", 10_000 * scale),
        ("link_downed", 1),
    ] {
        DemoNic::set(&mut counters, k, v);
    }
    let mut hw: Attrs = mlx5::roce_hw()
        .iter()
        .map(|n| (n.to_string(), "0".into()))
        .collect();
    for (k, v) in [
        ("rx_write_requests", 3_100_000 * scale),
        ("rx_read_requests", 12_000 * scale),
        ("duplicate_request", 4 * i),
        ("out_of_sequence", 2 * i),
        ("np_cnp_sent", 15_000 * i),
        ("rp_cnp_handled", 14_800 * i),
        ("np_ecn_marked_roce_packets", 15_200 * i),
    ] {
        DemoNic::set(&mut hw, k, v);
    }
    let mut nd = netdev_attrs(mac_s, 9000, 400000);
    // The link came up once after the driver loaded: one down (the initial
    // no-carrier state) and one up.
    nd.push(("carrier_changes".into(), "2".into()));
    nd.push(("carrier_up_count".into(), "1".into()));
    nd.push(("carrier_down_count".into(), "1".into()));
    // NVIDIA's mlx5 driver: DCQCN on for every priority in both roles (its
    // default), CNPs sent with DSCP 48 and 802.1p priority 6 (its default).
    for role in ["roce_np", "roce_rp"] {
        for prio in 0..8 {
            nd.push((format!("ecn/{role}/enable/{prio}"), "1".into()));
        }
    }
    nd.push(("ecn/roce_np/cnp_dscp".into(), "48".into()));
    nd.push(("ecn/roce_np/cnp_802p_prio".into(), "6".into()));
    // Some of MLNX_OFED's DCQCN parameter files (en_sysfs.c names; the values
    // are the demo's): time and byte counters between rate increases, the
    // increase steps in Mb/s, the rate floor, the CNP spacing.
    for (name, value) in [
        ("rpg_time_reset", 300),
        ("rpg_byte_reset", 32767),
        ("rpg_ai_rate", 5),
        ("rpg_hai_rate", 50),
        ("rpg_min_rate", 1),
        ("rate_reduce_monitor_period", 4),
    ] {
        nd.push((format!("ecn/roce_rp/{name}"), value.to_string()));
    }
    nd.push(("ecn/roce_np/min_time_between_cnps".into(), "4".into()));
    DemoNic {
        index,
        ifname: ifname.to_string(),
        counters,
        hw,
        netdev: nd,
    }
}

/// Writes the demo tree at `root` (examples/demo-gpu-node/sys).
pub fn write(root: &Path) -> io::Result<()> {
    let mut t = Tree::create(root)?;
    t.attr("devices/system/node/node0/cpulist", "0-55,112-167")?;
    t.attr("devices/system/node/node1/cpulist", "56-111,168-223")?;
    // (socket/NUMA node, root complex, root port, upstream bus)
    let switches = [
        (0, "0000:00", "0000:00:01.0", 0x01u8),
        (0, "0000:00", "0000:00:03.0", 0x10),
        (1, "0000:80", "0000:80:01.0", 0x81),
        (1, "0000:80", "0000:80:03.0", 0x90),
    ];
    let (mut gpus, mut nics) = (0, 0);
    for (numa, rc, root_port, up_bus) in switches {
        let host = format!("pci{rc}");
        t.mkdir(&format!("devices/{host}"))?;
        let sub = up_bus + 5;
        let rc_bus = u8::from_str_radix(&rc[5..], 16).unwrap_or(0);
        // Intel Sapphire Rapids root port, then a Broadcom PEX890xx Gen5
        // switch; every port has the AER capability, so the kernel keeps
        // its counters: zero but on the first root port, which counted a
        // few bad DLLPs while the links trained at boot and none since (a
        // healthy node: nothing grows).
        let rp = pci(
            &t,
            &[&host, root_port],
            (0x8086, 0x352a, CLASS_BRIDGE),
            numa,
            "pcieport",
            ROOT_PORT,
            0x04,
            Some([rc_bus, up_bus, sub]),
            true,
        )?;
        aer(&t, &rp, if root_port == "0000:00:01.0" { 3 } else { 0 })?;
        let up = format!("0000:{up_bus:02x}:00.0");
        let usp = pci(
            &t,
            &[&host, root_port, &up],
            (0x1000, 0xc030, CLASS_BRIDGE),
            numa,
            "pcieport",
            UPSTREAM,
            0xb0,
            Some([up_bus, up_bus + 1, sub]),
            false,
        )?;
        aer(&t, &usp, 0)?;
        for d in 0..4u8 {
            let down = format!("0000:{:02x}:{d:02x}.0", up_bus + 1);
            let ep_bus = up_bus + 2 + d;
            let dsp = pci(
                &t,
                &[&host, root_port, &up, &down],
                (0x1000, 0xc030, CLASS_BRIDGE),
                numa,
                "pcieport",
                DOWNSTREAM,
                0xb0,
                Some([up_bus + 1, ep_bus, ep_bus]),
                true,
            )?;
            aer(&t, &dsp, 0)?;
            let ep = format!("0000:{ep_bus:02x}:00.0");
            let chain = [host.as_str(), root_port, &up, &down, &ep];
            if d % 2 == 0 {
                pci(
                    &t,
                    &chain,
                    (0x10de, 0x2330, 0x030200),
                    numa,
                    "nvidia",
                    ENDPOINT,
                    0xa1,
                    None,
                    false,
                )?;
                // One GPU link has replayed a few TLPs since boot.
                aer(
                    &t,
                    &format!("devices/{}", chain.join("/")),
                    if gpus == 2 { 3 } else { 0 },
                )?;
                gpus += 1;
            } else {
                let fn_ = pci(
                    &t,
                    &chain,
                    (0x15b3, 0x1021, 0x020000),
                    numa,
                    "mlx5_core",
                    ENDPOINT,
                    0,
                    None,
                    false,
                )?;
                aer(&t, &fn_, 0)?;
                let ifname = format!("ens{}np0", nics + 1);
                let mac_s = format!("b8:ce:f6:{:02x}:{ep_bus:02x}:{:02x}", 0x10 + nics, 0x4a);
                let mut nic = nic_defaults(nics, &ifname, &mac_s);
                nic_tweaks(&mut nic);
                netdev(&t, &fn_, &ifname, &nic.netdev)?;
                rdma_device(&mut t, &fn_, &nic, &mac_s)?;
                // rdma_cm's default ToS, set through configfs (mkdir
                // /sys/kernel/config/rdma_cm/<dev>): DSCP 26, ECT(0).
                let cm = format!("kernel/config/rdma_cm/mlx5_{nics}/ports/1");
                t.attr(&format!("{cm}/default_roce_tos"), 106)?;
                t.attr(&format!("{cm}/default_roce_mode"), "RoCE v2")?;
                // MLNX_OFED's port-wide traffic class (`echo 106 >
                // .../tc/1/traffic_class`), as its `traffic_class_show`
                // prints it: what NCCL's QPs send with on this port.
                t.attr(
                    &format!("class/infiniband/mlx5_{nics}/tc/1/traffic_class"),
                    "Global tclass=106",
                )?;
                nics += 1;
            }
        }
    }
    debug_assert!(gpus == 8 && nics == 8);
    Ok(())
}
