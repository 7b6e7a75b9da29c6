//! The RDMA fixture trees (`sys-*`): mlx5 in RoCE and InfiniBand mode,
//! Soft-RoCE (rxe), bnxt_re, and a tree of broken cases. Values are
//! `base + index` per counter so that a mix-up shows; the rxe tree holds
//! the exact values of a Soft-RoCE VM capture (`sysfs-rxe0-after.txt`,
//! rxe0 on virtio-net after traffic tests).

use std::io;
use std::path::Path;

use crate::kernel::{self, guid_gid, link_local_gid, mac, mlx5, v4_gid, ROCE_V1, ROCE_V2};
use crate::pci::Function;
use crate::rdma::{
    active_roce_port, attrs, ib_device, netdev, netdev_attrs, numbered, Attrs, GidFiles, PortFiles,
};
use crate::tree::Tree;

/// Writes every tree under `dir` (tests/fixtures of the rdma crate).
pub fn write_all(dir: &Path) -> io::Result<()> {
    mlx5_roce(&dir.join("sys-mlx5-roce"))?;
    mlx5_ib(&dir.join("sys-mlx5-ib"))?;
    rxe(&dir.join("sys-rxe"))?;
    bnxt_re(&dir.join("sys-bnxt_re"))?;
    broken(&dir.join("sys-broken"))
}

/// A function with the fixture trees' attributes (no link attributes, no
/// config space) below its chain of bridges; returns its path.
fn function(
    t: &Tree,
    chain: &[&str],
    driver: Option<&str>,
    numa: i32,
    ids: (u16, u16, u32),
) -> io::Result<String> {
    let rel = format!("devices/{}", chain.join("/"));
    let mut f = Function::new(ids.0, ids.1, ids.2, numa);
    f.driver = driver;
    f.write(t, &rel)?;
    Ok(rel)
}

const INTEL_RP: (u16, u16, u32) = (0x8086, 0x352a, 0x060400);

fn pma(base: u64, overrides: &[(&str, &str)]) -> Attrs {
    numbered(kernel::PMA_EXT, base, overrides)
}

fn hw(names: &[&str], base: u64, overrides: &[(&str, &str)]) -> Attrs {
    let mut out = numbered(names, base, overrides);
    out.push(("lifespan".into(), "10".into()));
    out
}

fn mlx5_roce(root: &Path) -> io::Result<()> {
    let mut t = Tree::create(root)?;
    let cards = [
        (
            "mlx5_0",
            ["pci0000:16", "0000:16:02.0", "0000:17:00.0"],
            0,
            "ens1f0np0",
            "b8:ce:f6:a1:b2:c4",
            "b8ce:f603:00a1:b2c4",
            [10, 0, 1, 11],
            100,
            1000,
        ),
        (
            "mlx5_1",
            ["pci0000:b0", "0000:b0:02.0", "0000:b1:00.0"],
            1,
            "ens2f0np0",
            "b8:ce:f6:a1:c3:d0",
            "b8ce:f603:00a1:c3d0",
            [10, 0, 2, 11],
            200,
            2000,
        ),
    ];
    for (name, chain, numa, ifname, mac_s, guid, ip, cbase, hbase) in cards {
        function(&t, &chain[..2], None, numa, INTEL_RP)?;
        let fn_ = function(
            &t,
            &chain,
            Some("mlx5_core"),
            numa,
            (0x15b3, 0x1021, 0x020000),
        )?;
        netdev(&t, &fn_, ifname, &netdev_attrs(mac_s, 9000, 400000))?;
        let desc = format!("gpu-node-01 {name}");
        let dev = ib_device(
            &t,
            &fn_,
            name,
            &attrs(&[
                ("fw_ver", "28.39.1002"),
                ("board_id", "MT_0000000838"),
                ("hca_type", "MT4129"),
                ("node_guid", guid),
                ("sys_image_guid", guid),
                ("node_type", "1: CA"),
                ("node_desc", &desc),
            ]),
            true,
        )?;
        let ll = link_local_gid(mac(mac_s));
        let v4 = v4_gid(ip);
        let big = |v: u64| (v + cbase).to_string();
        let mut port = PortFiles::new(1, active_roce_port("400 Gb/sec (4X NDR)"));
        port.counters = Some(pma(
            cbase,
            &[
                ("port_rcv_data", &big(250000000000)),
                ("port_xmit_data", &big(240000000000)),
                ("port_rcv_packets", &big(900000000)),
                ("port_xmit_packets", &big(880000000)),
                ("unicast_rcv_packets", &big(899000000)),
                ("unicast_xmit_packets", &big(879000000)),
                ("symbol_error", "0"),
                ("link_downed", "1"),
            ],
        ));
        port.hw = Some(hw(&mlx5::roce_hw(), hbase, &[]));
        port.gids = vec![
            GidFiles::new(0, &ll, ROCE_V1, Some(ifname)),
            GidFiles::new(1, &ll, ROCE_V2, Some(ifname)),
            GidFiles::new(2, &v4, ROCE_V1, Some(ifname)),
            GidFiles::new(3, &v4, ROCE_V2, Some(ifname)),
        ];
        port.slots = 256;
        port.write(&mut t, &dev)?;
    }
    t.finish("Here: empty GID slots.")
}

fn mlx5_ib(root: &Path) -> io::Result<()> {
    let mut t = Tree::create(root)?;
    let cards = [
        (
            "mlx5_0",
            ["pci0000:16", "0000:16:02.0", "0000:17:00.0"],
            0,
            0x1021,
            "28.39.1002",
            "MT_0000000838",
            "MT4129",
            "a088:c203:0045:6a10",
            "400 Gb/sec (4X NDR)",
            "0x1a",
            300,
            3000,
        ),
        (
            "mlx5_1",
            ["pci0000:b0", "0000:b0:02.0", "0000:b1:00.0"],
            1,
            0x101b,
            "20.39.1002",
            "MT_0000000223",
            "MT4123",
            "b8ce:f603:00f2:7e40",
            "200 Gb/sec (4X HDR)",
            "0x1b",
            400,
            4000,
        ),
    ];
    for (name, chain, numa, did, fw, board, hca, guid, rate, lid, cbase, hbase) in cards {
        function(&t, &chain[..2], None, numa, INTEL_RP)?;
        let fn_ = function(&t, &chain, Some("mlx5_core"), numa, (0x15b3, did, 0x020700))?;
        let desc = format!("ib-node-01 {name}");
        let dev = ib_device(
            &t,
            &fn_,
            name,
            &attrs(&[
                ("fw_ver", fw),
                ("board_id", board),
                ("hca_type", hca),
                ("node_guid", guid),
                ("sys_image_guid", guid),
                ("node_type", "1: CA"),
                ("node_desc", &desc),
            ]),
            true,
        )?;
        let mut port = PortFiles::new(
            1,
            attrs(&[
                ("state", "4: ACTIVE"),
                ("phys_state", "5: LinkUp"),
                ("rate", rate),
                ("link_layer", "InfiniBand"),
                ("lid", lid),
                ("sm_lid", "0x1"),
                ("lid_mask_count", "0"),
                ("sm_sl", "0"),
                ("cap_mask", "0xa659e848"),
            ]),
        );
        port.counters = Some(pma(
            cbase,
            &[
                ("port_rcv_data", &(7000000000 + cbase).to_string()),
                ("port_xmit_data", &(6000000000 + cbase).to_string()),
            ],
        ));
        port.hw = Some(hw(&mlx5::ib_hw(), hbase, &[]));
        port.gids = vec![GidFiles::new(0, &guid_gid(guid), ROCE_V1, None)];
        port.slots = 128;
        port.write(&mut t, &dev)?;
    }
    t.finish("Here: empty GID slots, and ndevs of IB GIDs (no netdev).")
}

fn rxe(root: &Path) -> io::Result<()> {
    let mut t = Tree::create(root)?;
    function(
        &t,
        &["pci0000:00", "0000:00:01.0"],
        Some("virtio-pci"),
        -1,
        (0x1af4, 0x1000, 0x020000),
    )?;
    let virtio = "devices/pci0000:00/0000:00:01.0/virtio0";
    t.mkdir(virtio)?;
    netdev(
        &t,
        virtio,
        "eth0",
        &netdev_attrs("52:54:00:00:00:01", 1500, -1),
    )?;
    // rxe's class link goes through devices/virtual/infiniband.
    let dev = ib_device(
        &t,
        "devices/virtual",
        "rxe0",
        &attrs(&[
            ("fw_ver", ""),
            ("node_desc", "rxe"),
            ("node_guid", "5054:00ff:fe00:0001"),
            ("node_type", "1: CA"),
            ("parent", "eth0"),
            ("sys_image_guid", "5054:00ff:fe00:0001"),
            ("uevent", "NAME=rxe0"),
        ]),
        false,
    )?;
    let mut port = PortFiles::new(
        1,
        attrs(&[
            ("cap_mask", "0x00010000"),
            ("lid", "0x0"),
            ("lid_mask_count", "0"),
            ("link_layer", "Ethernet"),
            ("phys_state", "5: LinkUp"),
            ("rate", "2.5 Gb/sec (1X SDR)"),
            ("sm_lid", "0x0"),
            ("sm_sl", "0"),
            ("state", "4: ACTIVE"),
            ("pkeys/0", "0xffff"),
        ]),
    );
    port.hw = Some(attrs(&[
        ("ack_deferred", "1"),
        ("completer_retry_err", "38"),
        ("duplicate_request", "1025"),
        ("lifespan", "12"),
        ("link_downed", "0"),
        ("out_of_seq_request", "0"),
        ("rcvd_pkts", "180690"),
        ("rcvd_rnr_err", "0"),
        ("rcvd_seq_err", "0"),
        ("rdma_recvs", "6045"),
        ("rdma_sends", "6045"),
        ("retry_exceeded_err", "0"),
        ("retry_rnr_exceeded_err", "0"),
        ("send_err", "0"),
        ("send_rnr_err", "0"),
        ("sent_pkts", "180690"),
    ]));
    port.gids = vec![
        GidFiles::new(
            0,
            "fe80:0000:0000:0000:5054:00ff:fe00:0001",
            ROCE_V2,
            Some("eth0"),
        ),
        GidFiles::new(
            1,
            "0000:0000:0000:0000:0000:ffff:0a00:020f",
            ROCE_V2,
            Some("eth0"),
        ),
    ];
    port.slots = 1024;
    let rel = port.write(&mut t, &dev)?;
    // drivers/infiniband/core/cm.c counter groups; the capture's values.
    let msgs = ["drep", "dreq", "rep", "req", "rtu"];
    for (group, ones) in [
        ("cm_rx_duplicates", &[][..]),
        ("cm_rx_msgs", &msgs[..]),
        ("cm_tx_msgs", &msgs[..]),
        ("cm_tx_retries", &[][..]),
    ] {
        for k in [
            "apr", "drep", "dreq", "lap", "mra", "rej", "rep", "req", "rtu", "sidr_rep", "sidr_req",
        ] {
            t.attr(&format!("{rel}/{group}/{k}"), u8::from(ones.contains(&k)))?;
        }
    }
    t.finish("Here: empty GID slots (the capture reads them as '!ERR Invalid argument').")
}

fn bnxt_re(root: &Path) -> io::Result<()> {
    let mut t = Tree::create(root)?;
    let chain = ["pci0000:40", "0000:40:01.1", "0000:41:00.0"];
    function(
        &t,
        &chain[..2],
        Some("pcieport"),
        0,
        (0x1022, 0x1483, 0x060400),
    )?;
    let fn_ = function(&t, &chain, Some("bnxt_en"), 0, (0x14e4, 0x1750, 0x020000))?;
    netdev(
        &t,
        &fn_,
        "ens3f0np0",
        &netdev_attrs("00:0a:f7:c1:22:30", 9000, 200000),
    )?;
    let dev = ib_device(
        &t,
        &fn_,
        "bnxt_re0",
        &attrs(&[
            ("fw_ver", "226.0.145.0"),
            ("hca_type", "0x1750"),
            ("board_id", "BCM957508-P2100G"),
            ("node_guid", "020a:f7ff:fec1:2230"),
            ("sys_image_guid", "020a:f7ff:fec1:2230"),
            ("node_type", "1: CA"),
            ("node_desc", "storage-01 bnxt_re0"),
        ]),
        true,
    )?;
    let ll = link_local_gid(mac("00:0a:f7:c1:22:30"));
    let v4 = v4_gid([10, 0, 3, 21]);
    let mut port = PortFiles::new(1, active_roce_port("200 Gb/sec (4X HDR)"));
    port.hw = Some(hw(
        kernel::BNXT_RE_HW,
        500,
        &[("rx_out_of_buffer", "7"), ("to_retransmits", "3")],
    ));
    let nd = Some("ens3f0np0");
    port.gids = vec![
        GidFiles::new(0, &ll, ROCE_V1, nd),
        GidFiles::new(1, &ll, ROCE_V2, nd),
        GidFiles::new(2, &v4, ROCE_V1, nd),
        GidFiles::new(3, &v4, ROCE_V2, nd),
    ];
    port.slots = 256;
    port.write(&mut t, &dev)?;
    t.finish("Here: empty GID slots.")
}

fn broken(root: &Path) -> io::Result<()> {
    let mut t = Tree::create(root)?;
    // mlx5_0: PMA quirk, garbage, missing files, injected errnos.
    let chain = ["pci0000:16", "0000:16:02.0", "0000:17:00.0"];
    let fn_ = function(&t, &chain, Some("mlx5_core"), 0, (0x15b3, 0x1021, 0x020000))?;
    netdev(
        &t,
        &fn_,
        "ens1f0np0",
        &netdev_attrs("b8:ce:f6:a1:b2:c4", 9000, 400000),
    )?;
    let dev = ib_device(
        &t,
        &fn_,
        "mlx5_0",
        &attrs(&[
            ("fw_ver", "28.39.1002"),
            ("board_id", "MT_0000000838"),
            ("hca_type", "MT4129"),
            ("node_guid", "b8ce:f603:00a1:b2c4"),
            ("node_type", "1: CA"),
        ]),
        true,
    )?;
    let mut port = PortFiles::new(
        1,
        attrs(&[
            ("state", "4: ACTIVE"),
            ("phys_state", "bogus"),
            ("rate", "fast"),
            ("link_layer", "Ethernet"),
            ("lid", "0xZZ"),
        ]),
    );
    port.counters = Some(attrs(&[
        ("port_rcv_data", kernel::NO_PMA),
        ("port_xmit_data", kernel::NO_PMA),
        ("port_rcv_packets", "12abc"),
        ("port_xmit_packets", ""),
        ("symbol_error", "5"),
        ("link_downed", "2"),
        ("port_rcv_errors", "7"),
        ("port_xmit_discards", "9"),
        ("VL15_dropped", "0"),
    ]));
    port.hw = Some(attrs(&[
        ("out_of_buffer", "11"),
        ("np_cnp_sent", "12"),
        ("rp_cnp_handled", "13"),
        ("local_ack_timeout_err", "14"),
        ("packet_seq_err", "garbage"),
        ("lifespan", "10"),
    ]));
    let ll = link_local_gid(mac("b8:ce:f6:a1:b2:c4"));
    let nd = Some("ens1f0np0");
    port.gids = vec![
        GidFiles::new(0, &ll, ROCE_V1, nd),
        GidFiles::new(1, &ll, ROCE_V2, nd),
        GidFiles::new(2, "not-a-gid", ROCE_V2, nd),
    ];
    port.slots = 8;
    port.write(&mut t, &dev)?;
    let p = "class/infiniband/mlx5_0/ports/1/";
    for (file, errno) in [
        ("counters/port_rcv_errors", "EACCES"),
        ("counters/port_xmit_discards", "EIO"),
        ("counters/VL15_dropped", "EOPNOTSUPP"),
        ("hw_counters/np_cnp_sent", "EIO"),
        ("hw_counters/rp_cnp_handled", "EINVAL"),
        ("gid_attrs/types/1", "EINVAL"),
    ] {
        t.fault(&format!("{p}{file}"), errno);
    }
    // mlx5_1: no ports folder at all, no board_id/hca_type, numa -1.
    let chain = ["pci0000:b0", "0000:b0:02.0", "0000:b1:00.0"];
    let fn_ = function(
        &t,
        &chain,
        Some("mlx5_core"),
        -1,
        (0x15b3, 0x1021, 0x020000),
    )?;
    ib_device(
        &t,
        &fn_,
        "mlx5_1",
        &attrs(&[
            ("fw_ver", "28.39.1002"),
            ("node_guid", "b8ce:f603:00a1:c3d0"),
            ("node_type", "1: CA"),
        ]),
        true,
    )?;
    // rxe9: parent netdev that does not exist, no hw_counters, no gids folder.
    let dev = ib_device(
        &t,
        "devices/virtual",
        "rxe9",
        &attrs(&[
            ("fw_ver", ""),
            ("node_guid", "5054:00ff:fe00:0009"),
            ("node_type", "1: CA"),
            ("parent", "gone0"),
        ]),
        false,
    )?;
    PortFiles::new(
        1,
        attrs(&[
            ("state", "1: DOWN"),
            ("phys_state", "3: Disabled"),
            ("rate", "2.5 Gb/sec"),
            ("link_layer", "Ethernet"),
            ("lid", "0x0"),
        ]),
    )
    .write(&mut t, &dev)?;
    // The fault slots 3..7 (empty) come from the port; slot 2 holds garbage.
    t.finish("Here: EACCES/EIO/EOPNOTSUPP/EINVAL cases and empty GID slots.")
}
