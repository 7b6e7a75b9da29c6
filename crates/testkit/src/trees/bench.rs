//! The benchmarks' stand-in for /sys: N ConnectX-7-like mlx5 RoCE devices
//! with one port each, everything roce_exporter and node_exporter's
//! infiniband collector read, laid out as the kernel lays it out.
//!
//! * port attributes and the `counters/` group (the extended PMA set) as
//!   in drivers/infiniband/core/sysfs.c; `hw_counters/` the mlx5 RoCE
//!   list ([`crate::kernel::mlx5::roce_hw`]) plus the core's `lifespan`;
//! * GID table: mlx5 reports gid_tbl_len 255 on Ethernet ports
//!   (`ibv_devinfo -v`), with four populated slots: the link-local and the
//!   IPv4-mapped address, each as RoCE v1 and RoCE v2. On a live kernel
//!   reading gid_attrs/{ndevs,types}/N of an empty slot fails with EINVAL;
//!   tmpfs cannot fail a read, so those files are not created (ENOENT);
//! * each device below its own root port of pci0000:00, with the driver's
//!   bus/pci/drivers/mlx5_core/<bdf> link, and its net device.
//!
//! Counter values are distinct per port and counter, so that a mix-up
//! shows; [`bump`] advances every counter once.

use std::io;
use std::path::Path;

use crate::kernel::{self, link_local_gid, mac_text, mlx5, ROCE_V1, ROCE_V2};
use crate::rdma::{active_roce_port, attrs, EmptySlots, GidFiles, PortFiles};
use crate::tree::Tree;

const GID_TABLE_LEN: usize = 255;

fn counter_value(port: u64, name: u64, bump: u64) -> u64 {
    (port + 1) * 1_000_003 + name * 7_919 + bump * (name + 1)
}

/// Data and packet counters: 64-bit values well above 2^32.
fn big_counter_value(port: u64, which: u64, bump: u64) -> u64 {
    (1 << 36) + (port + 1) * 123_456_789 + which * 1_000 + bump * 4096
}

fn pma_values(i: u64, bump: u64) -> Vec<(&'static str, u64)> {
    kernel::PMA_EXT
        .iter()
        .enumerate()
        .map(|(k, &name)| {
            let k = k as u64;
            let v = match name {
                "port_xmit_data"
                | "port_rcv_data"
                | "port_xmit_packets"
                | "port_rcv_packets"
                | "unicast_rcv_packets"
                | "unicast_xmit_packets" => big_counter_value(i, k, bump),
                // 8-bit PMA fields
                "link_downed"
                | "link_error_recovery"
                | "port_xmit_constraint_errors"
                | "port_rcv_constraint_errors" => (i + k + bump) % 256,
                // 4-bit PMA fields
                "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => (i + k) % 16,
                // 16-bit PMA fields
                "symbol_error"
                | "port_rcv_errors"
                | "port_rcv_remote_physical_errors"
                | "port_rcv_switch_relay_errors"
                | "port_xmit_discards"
                | "VL15_dropped" => (i * 31 + k + 1 + bump) % 65536,
                _ => counter_value(i, k, bump),
            };
            (name, v)
        })
        .collect()
}

fn write_counters(t: &Tree, port: &str, i: u64, bump: u64) -> io::Result<()> {
    for (name, v) in pma_values(i, bump) {
        t.attr(&format!("{port}/counters/{name}"), v)?;
    }
    for (k, name) in mlx5::roce_hw().into_iter().enumerate() {
        t.attr(
            &format!("{port}/hw_counters/{name}"),
            counter_value(i, k as u64, bump),
        )?;
    }
    Ok(())
}

fn ipv4_mapped_gid(i: usize) -> String {
    let last = match i & 0xff {
        0 => 1,
        b => b,
    };
    kernel::v4_gid([10, 0, ((i >> 8) & 0xff) as u8, last as u8])
}

/// Writes a tree of `ports` devices at `root`; `seed` varies MACs and GUIDs
/// between trees.
pub fn write(root: &Path, ports: usize, seed: usize) -> io::Result<()> {
    let mut t = Tree::create(root)?;
    for d in [
        "class/infiniband",
        "class/net",
        "bus/pci/drivers/mlx5_core",
        "bus/pci/devices",
        "devices/pci0000:00",
    ] {
        t.mkdir(d)?;
    }
    for i in 0..ports {
        let dev = format!("mlx5_{i}");
        let bus = i + 1;
        let root_port = format!("0000:00:{:02x}.{:x}", i / 8 + 1, i % 8);
        let bdf = format!("0000:{bus:02x}:00.0");
        let ifname = format!("enp{bus}s0np0");
        let m = i + seed * 4096;
        let mac = [
            0xb8,
            0xce,
            0xf6,
            ((m >> 16) & 0xff) as u8,
            ((m >> 8) & 0xff) as u8,
            (m & 0xff) as u8,
        ];
        let rp = format!("devices/pci0000:00/{root_port}");
        let fn_ = format!("{rp}/{bdf}");
        // Root port (a PCIe bridge, class 0x0604) above the NIC function.
        let link = [
            ("current_link_speed", kernel::GEN5),
            ("max_link_speed", kernel::GEN5),
            ("current_link_width", "16"),
            ("max_link_width", "16"),
        ];
        t.attr(&format!("{rp}/vendor"), "0x1022")?;
        t.attr(&format!("{rp}/class"), "0x060400")?;
        for (k, v) in link {
            t.attr(&format!("{rp}/{k}"), v)?;
        }
        t.link(&format!("bus/pci/devices/{root_port}"), &rp)?;
        // PCI function of a ConnectX-7 (vendor 0x15b3, device 0x1021).
        t.attr(&format!("{fn_}/vendor"), "0x15b3")?;
        t.attr(&format!("{fn_}/device"), "0x1021")?;
        t.attr(&format!("{fn_}/class"), "0x020000")?;
        t.attr(&format!("{fn_}/numa_node"), u8::from(2 * i >= ports))?;
        for (k, v) in link {
            t.attr(&format!("{fn_}/{k}"), v)?;
        }
        t.link(&format!("{fn_}/driver"), "bus/pci/drivers/mlx5_core")?;
        t.link(&format!("bus/pci/drivers/mlx5_core/{bdf}"), &fn_)?;
        t.link(&format!("bus/pci/devices/{bdf}"), &fn_)?;

        let net = format!("{fn_}/net/{ifname}");
        for (k, v) in [
            ("mtu", "9000".to_string()),
            ("operstate", "up".into()),
            ("address", mac_text(mac)),
            ("ifindex", (i + 2).to_string()),
            ("type", "1".into()),
            ("speed", "400000".into()),
        ] {
            t.attr(&format!("{net}/{k}"), v)?;
        }
        t.link_raw(&format!("{net}/device"), &format!("../../../{bdf}"))?;
        t.link(&format!("class/net/{ifname}"), &net)?;

        // EUI-64 from the MAC, as mlx5 forms the node GUID.
        let guid = format!(
            "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
            mac[0], mac[1], mac[2], 0x03, 0x00, mac[3], mac[4], mac[5]
        );
        let ib = format!("{fn_}/infiniband/{dev}");
        let desc = format!("bench {dev}");
        for (k, v) in [
            ("node_type", "1: CA"),
            ("node_guid", &guid),
            ("sys_image_guid", &guid),
            ("fw_ver", "28.39.1002"),
            ("hca_type", "MT4129"),
            ("board_id", "MT_0000000838"),
            ("hw_rev", "0x0"),
            ("node_desc", &desc),
        ] {
            t.attr(&format!("{ib}/{k}"), v)?;
        }
        t.link_raw(&format!("{ib}/device"), &format!("../../../{bdf}"))?;
        t.link(&format!("class/infiniband/{dev}"), &ib)?;

        let mut port = PortFiles::new(
            1,
            [
                active_roce_port("400 Gb/sec (4X NDR)"),
                attrs(&[("pkeys/0", "0xffff")]),
            ]
            .concat(),
        );
        let ll = link_local_gid(mac);
        let v4 = ipv4_mapped_gid(i + 1);
        let nd = Some(ifname.as_str());
        port.gids = vec![
            GidFiles::new(0, &ll, ROCE_V1, nd),
            GidFiles::new(1, &ll, ROCE_V2, nd),
            GidFiles::new(2, &v4, ROCE_V1, nd),
            GidFiles::new(3, &v4, ROCE_V2, nd),
        ];
        port.slots = GID_TABLE_LEN;
        port.empty = EmptySlots::Absent;
        let port_dir = port.write(&mut t, &ib)?;
        write_counters(&t, &port_dir, i as u64, 0)?;
        t.attr(&format!("{port_dir}/hw_counters/lifespan"), 10)?;
    }
    Ok(())
}

/// Advances every counter of every port of a tree [`write`] made by one
/// step (the step count is kept in `<root>/.bump`).
pub fn bump(root: &Path) -> io::Result<()> {
    let t = Tree::open(root);
    let step = std::fs::read_to_string(root.join(".bump"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(1, |s| s + 1);
    let mut names: Vec<String> = std::fs::read_dir(root.join("class/infiniband"))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    for name in names {
        let Some(i) = name.split('_').nth(1).and_then(|n| n.parse::<u64>().ok()) else {
            continue;
        };
        write_counters(&t, &format!("class/infiniband/{name}/ports/1"), i, step)?;
    }
    t.attr(".bump", step)
}
