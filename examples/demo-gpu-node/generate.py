#!/usr/bin/env python3
"""Generates examples/demo-gpu-node/sys: a DEMO sysfs tree of a DGX-H100-like
GPU node, for trying roce_exporter without RDMA hardware:

    roce_exporter once --path.sysfs=examples/demo-gpu-node/sys

Nothing here was captured from a real machine. The shape follows the kernel's
sysfs layout and a DGX H100's PCIe topology:
  * 2 sockets / NUMA nodes; 2 PCIe Gen5 switches per socket, each behind a
    root port: root port -> switch upstream port -> 4 downstream ports;
  * per switch 2 GPUs (NVIDIA H100 SXM, 10de:2330, class 0x030200) and 2
    ConnectX-7 NICs (15b3:1021, class 0x020000, RoCE, mlx5_core), so GPU i and
    NIC i (mlx5_i) share a switch;
  * every PCI function and bridge has vendor, device, class, revision,
    numa_node, current/max link speed and width, and a 4096-byte `config`
    (type 0/1 header, capability list with a PCI Express capability whose
    link registers agree with the text files; bridges carry an ACS extended
    capability at 0x100 with every control bit off, i.e. ACS disabled);
  * class/infiniband/mlx5_i as in tests/fixtures/sys-mlx5-roce (names from
    drivers/infiniband/core/sysfs.c and drivers/infiniband/hw/mlx5/counters.c);
  * class/net/<netdev> for each NIC (mtu 9000, operstate, speed, address).

python3 stdlib only. Run from anywhere; it rewrites ./sys next to itself.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "sys")

GEN5 = "32.0 GT/s PCIe"
SPEED_CODE = {"32.0 GT/s PCIe": 5, "16.0 GT/s PCIe": 4}

# PCIe capability "device/port type" (PCI Express Capabilities register).
ENDPOINT, ROOT_PORT, UPSTREAM, DOWNSTREAM = 0x0, 0x4, 0x5, 0x6
PCI_EXP_CAP_ID = 0x10
ACS_EXT_CAP_ID = 0x000D

PMA_EXT = [
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_discards", "port_xmit_constraint_errors",
    "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "VL15_dropped", "port_xmit_data",
    "port_rcv_data", "port_xmit_packets", "port_xmit_wait", "port_rcv_packets",
    "unicast_rcv_packets", "unicast_xmit_packets", "multicast_rcv_packets",
    "multicast_xmit_packets",
]
MLX5_HW = [
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests",
    "rx_dct_connect", "out_of_buffer", "out_of_sequence", "duplicate_request",
    "rnr_nak_retry_err", "packet_seq_err", "implied_nak_seq_err",
    "local_ack_timeout_err", "resp_local_length_error", "resp_cqe_error",
    "req_cqe_error", "req_remote_invalid_request", "req_remote_access_errors",
    "resp_remote_access_errors", "resp_cqe_flush_error", "req_cqe_flush_error",
    "req_transport_retries_exceeded", "req_rnr_retries_exceeded",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart",
    "roce_slow_restart_cnps", "roce_slow_restart_trans", "rp_cnp_ignored",
    "rp_cnp_handled", "np_ecn_marked_roce_packets", "np_cnp_sent",
    "rx_icrc_encapsulated",
]
GID_SLOTS = 256
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def p(rel):
    return os.path.join(OUT, rel)


def write(rel, content, mode="w"):
    path = p(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(content)


def link(rel, target_rel):
    path = p(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(os.path.relpath(p(target_rel), os.path.dirname(path)), path)


def config_space(vendor, device, cls, rev, header_type, port_type, speed, width,
                 buses=None, acs=False):
    """A 4096-byte PCI config space: header, PCIe capability at 0x40 (behind
    power management at 0x60 ... kept simple: PM at 0x40 -> PCIe at 0x60),
    ACS extended capability at 0x100 on bridges (control register 0)."""
    c = bytearray(4096)
    struct.pack_into("<HH", c, 0x00, vendor, device)
    struct.pack_into("<H", c, 0x04, 0x0406 if header_type == 0 else 0x0407)  # command
    struct.pack_into("<H", c, 0x06, 0x0010)  # status: capabilities list
    c[0x08] = rev
    c[0x09] = cls & 0xFF
    c[0x0A] = (cls >> 8) & 0xFF
    c[0x0B] = (cls >> 16) & 0xFF
    c[0x0E] = header_type
    if header_type == 1 and buses:
        c[0x18], c[0x19], c[0x1A] = buses
    c[0x34] = 0x40
    # Power management capability (ID 0x01), next -> 0x60.
    c[0x40], c[0x41] = 0x01, 0x60
    struct.pack_into("<H", c, 0x42, 0x0003)
    # PCI Express capability (ID 0x10), version 2, end of list.
    base = 0x60
    c[base], c[base + 1] = PCI_EXP_CAP_ID, 0x00
    struct.pack_into("<H", c, base + 0x02, 0x0002 | (port_type << 4)
                     | (0x0100 if port_type in (ROOT_PORT, DOWNSTREAM) else 0))
    code = SPEED_CODE[speed]
    struct.pack_into("<I", c, base + 0x0C, code | (width << 4))   # Link Capabilities
    struct.pack_into("<H", c, base + 0x12, code | (width << 4))   # Link Status
    struct.pack_into("<I", c, base + 0x2C, 0x3E)                  # Link Capabilities 2
    if acs:
        # Extended capability header: ID, version 1, next 0.
        struct.pack_into("<I", c, 0x100, ACS_EXT_CAP_ID | (1 << 16))
        # ACS Capability: SV, TB, RR, CR, UF, DT supported; Control: all off.
        struct.pack_into("<HH", c, 0x104, 0x005F, 0x0000)
    return bytes(c)


def pci(chain, vendor, device, cls, numa, driver, port_type, rev=0,
        buses=None, acs=False, width=16):
    rel = os.path.join("devices", *chain)
    header_type = 1 if cls == 0x060400 else 0
    write(rel + "/vendor", "0x%04x\n" % vendor)
    write(rel + "/device", "0x%04x\n" % device)
    write(rel + "/class", "0x%06x\n" % cls)
    write(rel + "/revision", "0x%02x\n" % rev)
    write(rel + "/numa_node", "%d\n" % numa)
    write(rel + "/current_link_speed", GEN5 + "\n")
    write(rel + "/current_link_width", "%d\n" % width)
    write(rel + "/max_link_speed", GEN5 + "\n")
    write(rel + "/max_link_width", "%d\n" % width)
    if header_type == 1 and buses:
        write(rel + "/secondary_bus_number", "%d\n" % buses[1])
        write(rel + "/subordinate_bus_number", "%d\n" % buses[2])
    write(rel + "/config", config_space(vendor, device, cls, rev, header_type, port_type,
                                        GEN5, width, buses, acs), "wb")
    os.makedirs(p("bus/pci/drivers/" + driver), exist_ok=True)
    link(rel + "/driver", "bus/pci/drivers/" + driver)
    link("bus/pci/devices/" + chain[-1], rel)
    return rel


def mac_to_ll_gid(mac):
    b = [int(x, 16) for x in mac.split(":")]
    b[0] ^= 2
    eui = b[:3] + [0xFF, 0xFE] + b[3:]
    return "fe80:0000:0000:0000:" + ":".join(
        "%02x%02x" % (eui[i], eui[i + 1]) for i in range(0, 8, 2))


def rdma_device(fn_rel, i, ifname, mac):
    name = "mlx5_%d" % i
    guid = "b8ce:f603:00%02x:%s" % (0xA0 + i, mac.replace(":", "")[-4:])
    rel = fn_rel + "/infiniband/" + name
    for k, v in {
        "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "hca_type": "MT4129",
        "node_guid": guid, "sys_image_guid": guid, "node_type": "1: CA",
        "node_desc": "demo-dgx-01 " + name,
    }.items():
        write(rel + "/" + k, v + "\n")
    link(rel + "/device", fn_rel)
    link(rel + "/subsystem", "class/infiniband")
    link("class/infiniband/" + name, rel)
    port = rel + "/ports/1"
    for k, v in {
        "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "400 Gb/sec (4X NDR)",
        "link_layer": "Ethernet", "lid": "0x0", "sm_lid": "0x0", "lid_mask_count": "0",
        "sm_sl": "0", "cap_mask": "0x04010000",
    }.items():
        write(port + "/" + k, v + "\n")
    scale = 1 + i
    counters = {n: 0 for n in PMA_EXT}
    counters.update({
        "port_rcv_data": 21_500_000_000 * scale, "port_xmit_data": 21_400_000_000 * scale,
        "port_rcv_packets": 21_000_000 * scale, "port_xmit_packets": 20_900_000 * scale,
        "unicast_rcv_packets": 20_990_000 * scale, "unicast_xmit_packets": 20_890_000 * scale,
        "multicast_rcv_packets": 10_000 * scale, "multicast_xmit_packets": 10_000 * scale,
        "link_downed": 1,
    })
    for k, v in counters.items():
        write(port + "/counters/" + k, "%d\n" % v)
    hw = {n: 0 for n in MLX5_HW}
    hw.update({
        "rx_write_requests": 3_100_000 * scale, "rx_read_requests": 12_000 * scale,
        "duplicate_request": 4 * i, "out_of_sequence": 2 * i,
        "np_cnp_sent": 15_000 * i, "rp_cnp_handled": 14_800 * i,
        "np_ecn_marked_roce_packets": 15_200 * i, "out_of_buffer": 0 if i != 5 else 2_417,
        "local_ack_timeout_err": 0 if i != 5 else 9,
    })
    for k, v in hw.items():
        write(port + "/hw_counters/" + k, "%d\n" % v)
    write(port + "/hw_counters/lifespan", "10\n")
    ll = mac_to_ll_gid(mac)
    v4 = "0000:0000:0000:0000:0000:ffff:0a00:%02x0b" % i  # 10.0.i.11
    gids = {0: (ll, "IB/RoCE v1"), 1: (ll, "RoCE v2"), 2: (v4, "IB/RoCE v1"),
            3: (v4, "RoCE v2")}
    for s in range(GID_SLOTS):
        if s in gids:
            gid, gtype = gids[s]
            write("%s/gids/%d" % (port, s), gid + "\n")
            write("%s/gid_attrs/types/%d" % (port, s), gtype + "\n")
            write("%s/gid_attrs/ndevs/%d" % (port, s), ifname + "\n")
        else:
            # On a kernel the attributes of empty slots fail with EINVAL.
            write("%s/gids/%d" % (port, s), ZERO_GID + "\n")
            write("%s/gid_attrs/types/%d" % (port, s), "")
            write("%s/gid_attrs/ndevs/%d" % (port, s), "")


def netdev(fn_rel, ifname, mac):
    rel = fn_rel + "/net/" + ifname
    write(rel + "/mtu", "9000\n")
    write(rel + "/operstate", "up\n")
    write(rel + "/speed", "400000\n")
    write(rel + "/address", mac + "\n")
    # NVIDIA's mlx5 driver: DCQCN on for every priority in both roles (its
    # default), CNPs sent with DSCP 48 and 802.1p priority 6 (its default).
    for role in ("roce_np", "roce_rp"):
        for prio in range(8):
            write("%s/ecn/%s/enable/%d" % (rel, role, prio), "1\n")
    write(rel + "/ecn/roce_np/cnp_dscp", "48\n")
    write(rel + "/ecn/roce_np/cnp_802p_prio", "6\n")
    # Some of MLNX_OFED's DCQCN parameter files (en_sysfs.c names; the
    # values are the demo's): time and byte counters between rate
    # increases, increase steps in Mb/s, the rate floor, the CNP spacing.
    for name, value in (("rpg_time_reset", 300), ("rpg_byte_reset", 32767),
                        ("rpg_ai_rate", 5), ("rpg_hai_rate", 50), ("rpg_min_rate", 1),
                        ("rate_reduce_monitor_period", 4)):
        write("%s/ecn/roce_rp/%s" % (rel, name), "%d\n" % value)
    write(rel + "/ecn/roce_np/min_time_between_cnps", "4\n")
    link(rel + "/device", fn_rel)
    link("class/net/" + ifname, rel)


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    write("devices/system/node/node0/cpulist", "0-55,112-167\n")
    write("devices/system/node/node1/cpulist", "56-111,168-223\n")
    # (socket/NUMA node, root complex, root port, upstream bus)
    switches = [(0, "0000:00", "0000:00:01.0", 0x01), (0, "0000:00", "0000:00:03.0", 0x10),
                (1, "0000:80", "0000:80:01.0", 0x81), (1, "0000:80", "0000:80:03.0", 0x90)]
    gpu = nic = 0
    for numa, rc, root_port, up_bus in switches:
        host = "pci" + rc
        os.makedirs(p("devices/" + host), exist_ok=True)
        sub = up_bus + 5
        # Intel Sapphire Rapids root port, then a Broadcom PEX890xx Gen5 switch.
        pci([host, root_port], 0x8086, 0x352A, 0x060400, numa, "pcieport", ROOT_PORT,
            rev=0x04, buses=(int(rc[5:], 16), up_bus, sub), acs=True)
        up = "0000:%02x:00.0" % up_bus
        pci([host, root_port, up], 0x1000, 0xC030, 0x060400, numa, "pcieport", UPSTREAM,
            rev=0xB0, buses=(up_bus, up_bus + 1, sub))
        for d in range(4):
            down = "0000:%02x:%02x.0" % (up_bus + 1, d)
            ep_bus = up_bus + 2 + d
            pci([host, root_port, up, down], 0x1000, 0xC030, 0x060400, numa, "pcieport",
                DOWNSTREAM, rev=0xB0, buses=(up_bus + 1, ep_bus, ep_bus), acs=True)
            ep = "0000:%02x:00.0" % ep_bus
            chain = [host, root_port, up, down, ep]
            if d % 2 == 0:
                pci(chain, 0x10DE, 0x2330, 0x030200, numa, "nvidia", ENDPOINT, rev=0xA1)
                gpu += 1
            else:
                fn = pci(chain, 0x15B3, 0x1021, 0x020000, numa, "mlx5_core", ENDPOINT)
                ifname = "ens%dnp0" % (nic + 1)
                mac = "b8:ce:f6:%02x:%02x:%02x" % (0x10 + nic, ep_bus, 0x4A)
                netdev(fn, ifname, mac)
                rdma_device(fn, nic, ifname, mac)
                # rdma_cm's default ToS, set through configfs (mkdir
                # /sys/kernel/config/rdma_cm/<dev>): DSCP 26, ECT(0).
                write("kernel/config/rdma_cm/mlx5_%d/ports/1/default_roce_tos" % nic, "106\n")
                write("kernel/config/rdma_cm/mlx5_%d/ports/1/default_roce_mode" % nic, "RoCE v2\n")
                nic += 1
    assert gpu == 8 and nic == 8


if __name__ == "__main__":
    main()
