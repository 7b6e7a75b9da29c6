#!/usr/bin/env python3
"""Generates an mlx5 RoCE sysfs tree (ConnectX-7-like, N devices x 1 port).

Owns the benchmark's stand-in for /sys: everything roce_exporter and
node_exporter's infiniband collector read, laid out as the kernel lays it out,
with the same file formats. Python 3 standard library only.

Where the names and formats come from:
- port attributes (state, phys_state, rate, lid, ...) and the `counters/`
  group (the extended PMA set, with port_xmit_wait): the kernel's
  drivers/infiniband/core/sysfs.c (`port_default_attrs`, `pma_attrs_ext`,
  `rate_show`, `state_show`, `phys_state_show`, `cap_mask_show`).
- `hw_counters/`: drivers/infiniband/hw/mlx5/counters.c (`basic_q_cnts`,
  `out_of_seq_q_cnts`, `retrans_q_cnts`, `extended_err_cnts`,
  `roce_accl_cnts`, `cong_cnts`, `ext_ppcnt_cnts`; the optional op counters
  are left out), plus the core's `lifespan` file (10 ms default).
- GID table: mlx5 reports gid_tbl_len 255 on Ethernet ports
  (`ibv_devinfo -v`: "gid_tbl_len: 255"), with four populated slots: the
  link-local and the IPv4-mapped address, each as RoCE v1 and RoCE v2.
  The kernel prints GIDs with %pI6 (eight groups of four hex digits) and GID
  types with ib_cache_gid_type_str ("IB/RoCE v1", "RoCE v2").
  Difference from a live kernel: reading gid_attrs/{ndevs,types}/N of an
  empty slot fails with EINVAL there; tmpfs cannot fail a read, so those
  files are not created here (ENOENT).

Layout (relative symlinks, as in /sys):
  class/infiniband/mlx5_K -> ../../devices/pci0000:00/<rp>/<bdf>/infiniband/mlx5_K
  class/net/<ifname>      -> ../../devices/pci0000:00/<rp>/<bdf>/net/<ifname>
  bus/pci/devices/<bdf>    -> ../../../devices/pci0000:00/<rp>/<bdf>
  <bdf>/driver -> ../../../../bus/pci/drivers/mlx5_core, numa_node, net/<ifname>/

Usage: gen_tree.py --ports N --out DIR [--seed S]
       gen_tree.py --bump DIR     (advance every counter once)
"""

import argparse
import os
import shutil
import sys

# drivers/infiniband/core/sysfs.c, pma_attrs_ext (order as the kernel lists it).
PMA_COUNTERS = [
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "VL15_dropped",
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_xmit_wait",
    "port_rcv_packets",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
]

# drivers/infiniband/hw/mlx5/counters.c: the q counters, congestion counters
# and the extended PPCNT counter a ConnectX-7 in RoCE mode exposes.
MLX5_HW_COUNTERS = [
    # basic_q_cnts
    "rx_write_requests",
    "rx_read_requests",
    "rx_atomic_requests",
    "rx_dct_connect",
    "out_of_buffer",
    # out_of_seq_q_cnts
    "out_of_sequence",
    # retrans_q_cnts
    "duplicate_request",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    # extended_err_cnts
    "resp_local_length_error",
    "resp_cqe_error",
    "req_cqe_error",
    "req_remote_invalid_request",
    "req_remote_access_errors",
    "resp_remote_access_errors",
    "resp_cqe_flush_error",
    "req_cqe_flush_error",
    "req_transport_retries_exceeded",
    "req_rnr_retries_exceeded",
    # roce_accl_cnts
    "roce_adp_retrans",
    "roce_adp_retrans_to",
    "roce_slow_restart",
    "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
    # cong_cnts
    "rp_cnp_ignored",
    "rp_cnp_handled",
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
    # ext_ppcnt_cnts
    "rx_icrc_encapsulated",
]

GID_TABLE_LEN = 255
EMPTY_GID = ":".join(["0000"] * 8)


def counter_value(port_index, name_index, bump=0):
    """Deterministic, distinct per port and counter, so that a mix-up shows."""
    base = (port_index + 1) * 1_000_003 + name_index * 7_919
    return base + bump * (name_index + 1)


def big_counter_value(port_index, which, bump=0):
    """Data and packet counters: 64-bit values well above 2^32."""
    return (1 << 36) + (port_index + 1) * 123_456_789 + which * 1_000 + bump * 4096


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def symlink(target, link):
    os.symlink(target, link)


def mac_of(i):
    return [0xB8, 0xCE, 0xF6, 0x00 | (i >> 16) & 0xFF, (i >> 8) & 0xFF, i & 0xFF]


def guid_of(mac):
    # EUI-64 from the MAC, as mlx5 forms the node GUID.
    b = [mac[0], mac[1], mac[2], 0x03, 0x00, mac[3], mac[4], mac[5]]
    return "%02x%02x:%02x%02x:%02x%02x:%02x%02x" % tuple(b)


def link_local_gid(mac):
    # fe80::/64 with the modified EUI-64 (U/L bit flipped, ff:fe inserted).
    b = [0xFE, 0x80, 0, 0, 0, 0, 0, 0, mac[0] ^ 0x02, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]]
    return ":".join("%02x%02x" % (b[k], b[k + 1]) for k in range(0, 16, 2))


def ipv4_mapped_gid(i):
    b = [0] * 10 + [0xFF, 0xFF, 10, 0, (i >> 8) & 0xFF, (i & 0xFF) or 1]
    return ":".join("%02x%02x" % (b[k], b[k + 1]) for k in range(0, 16, 2))


def pci_names(i):
    """Root port and endpoint BDF of device i (one endpoint per root port)."""
    bus = i + 1
    root_port = "0000:00:%02x.%x" % (i // 8 + 1, i % 8)
    bdf = "0000:%02x:00.0" % bus
    return root_port, bdf, bus


def counters_text(i, bump):
    values = {}
    for k, name in enumerate(PMA_COUNTERS):
        if name in ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
                    "unicast_rcv_packets", "unicast_xmit_packets"):
            values[name] = big_counter_value(i, k, bump)
        elif name in ("link_downed", "link_error_recovery", "port_xmit_constraint_errors",
                      "port_rcv_constraint_errors"):
            values[name] = (i + k + bump) % 256  # 8-bit PMA fields
        elif name in ("local_link_integrity_errors", "excessive_buffer_overrun_errors"):
            values[name] = (i + k) % 16  # 4-bit PMA fields
        elif name in ("symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors",
                      "port_rcv_switch_relay_errors", "port_xmit_discards", "VL15_dropped"):
            values[name] = (i * 31 + k + 1 + bump) % 65536  # 16-bit PMA fields
        else:
            values[name] = counter_value(i, k, bump)
    return values


def hw_counters_text(i, bump):
    return {name: counter_value(i, k, bump) for k, name in enumerate(MLX5_HW_COUNTERS)}


def generate(root, ports, seed=0):
    if os.path.lexists(root):
        shutil.rmtree(root)
    os.makedirs(os.path.join(root, "class", "infiniband"))
    os.makedirs(os.path.join(root, "class", "net"))
    drivers = os.path.join(root, "bus", "pci", "drivers", "mlx5_core")
    os.makedirs(drivers)
    bus_devices = os.path.join(root, "bus", "pci", "devices")
    os.makedirs(bus_devices)
    pci_root = os.path.join(root, "devices", "pci0000:00")
    os.makedirs(pci_root)

    for i in range(ports):
        dev_name = "mlx5_%d" % i
        root_port, bdf, bus = pci_names(i)
        ifname = "enp%ds0np0" % bus
        mac = mac_of(i + seed * 4096)
        rp_dir = os.path.join(pci_root, root_port)
        fn_dir = os.path.join(rp_dir, bdf)
        os.makedirs(fn_dir)
        # Root port (a PCIe bridge, class 0x0604) above the NIC function.
        write(os.path.join(rp_dir, "vendor"), "0x1022\n")
        write(os.path.join(rp_dir, "class"), "0x060400\n")
        for attr, value in (("current_link_speed", "32.0 GT/s PCIe"), ("max_link_speed", "32.0 GT/s PCIe"),
                            ("current_link_width", "16"), ("max_link_width", "16")):
            write(os.path.join(rp_dir, attr), value + "\n")
        symlink(os.path.relpath(rp_dir, bus_devices), os.path.join(bus_devices, root_port))
        # PCI function of a ConnectX-7 (vendor 0x15b3, device 0x1021).
        write(os.path.join(fn_dir, "vendor"), "0x15b3\n")
        write(os.path.join(fn_dir, "device"), "0x1021\n")
        write(os.path.join(fn_dir, "class"), "0x020000\n")
        write(os.path.join(fn_dir, "numa_node"), "%d\n" % (0 if i < ports / 2 else 1))
        write(os.path.join(fn_dir, "current_link_speed"), "32.0 GT/s PCIe\n")
        write(os.path.join(fn_dir, "current_link_width"), "16\n")
        write(os.path.join(fn_dir, "max_link_speed"), "32.0 GT/s PCIe\n")
        write(os.path.join(fn_dir, "max_link_width"), "16\n")
        symlink(os.path.relpath(drivers, fn_dir), os.path.join(fn_dir, "driver"))
        symlink(os.path.relpath(fn_dir, drivers), os.path.join(drivers, bdf))
        symlink(os.path.relpath(fn_dir, bus_devices), os.path.join(bus_devices, bdf))

        # Netdev.
        net_dir = os.path.join(fn_dir, "net", ifname)
        os.makedirs(net_dir)
        write(os.path.join(net_dir, "mtu"), "9000\n")
        write(os.path.join(net_dir, "operstate"), "up\n")
        write(os.path.join(net_dir, "address"), ":".join("%02x" % b for b in mac) + "\n")
        write(os.path.join(net_dir, "ifindex"), "%d\n" % (i + 2))
        write(os.path.join(net_dir, "type"), "1\n")
        write(os.path.join(net_dir, "speed"), "400000\n")
        symlink("../../../%s" % bdf, os.path.join(net_dir, "device"))
        symlink(os.path.relpath(net_dir, os.path.join(root, "class", "net")),
                os.path.join(root, "class", "net", ifname))

        # RDMA device.
        ib_dir = os.path.join(fn_dir, "infiniband", dev_name)
        os.makedirs(ib_dir)
        guid = guid_of(mac)
        write(os.path.join(ib_dir, "node_type"), "1: CA\n")
        write(os.path.join(ib_dir, "node_guid"), guid + "\n")
        write(os.path.join(ib_dir, "sys_image_guid"), guid + "\n")
        write(os.path.join(ib_dir, "fw_ver"), "28.39.1002\n")
        write(os.path.join(ib_dir, "hca_type"), "MT4129\n")
        write(os.path.join(ib_dir, "board_id"), "MT_0000000838\n")
        write(os.path.join(ib_dir, "hw_rev"), "0x0\n")
        write(os.path.join(ib_dir, "node_desc"), "bench %s\n" % dev_name)
        symlink("../../../%s" % bdf, os.path.join(ib_dir, "device"))
        symlink(os.path.relpath(ib_dir, os.path.join(root, "class", "infiniband")),
                os.path.join(root, "class", "infiniband", dev_name))

        port_dir = os.path.join(ib_dir, "ports", "1")
        os.makedirs(port_dir)
        write(os.path.join(port_dir, "state"), "4: ACTIVE\n")
        write(os.path.join(port_dir, "phys_state"), "5: LinkUp\n")
        write(os.path.join(port_dir, "rate"), "400 Gb/sec (4X NDR)\n")
        write(os.path.join(port_dir, "lid"), "0x0\n")
        write(os.path.join(port_dir, "lid_mask_count"), "0\n")
        write(os.path.join(port_dir, "sm_lid"), "0x0\n")
        write(os.path.join(port_dir, "sm_sl"), "0\n")
        write(os.path.join(port_dir, "cap_mask"), "0x04010000\n")
        write(os.path.join(port_dir, "link_layer"), "Ethernet\n")
        os.makedirs(os.path.join(port_dir, "pkeys"))
        write(os.path.join(port_dir, "pkeys", "0"), "0xffff\n")

        gids = os.path.join(port_dir, "gids")
        ndevs = os.path.join(port_dir, "gid_attrs", "ndevs")
        types = os.path.join(port_dir, "gid_attrs", "types")
        for d in (gids, ndevs, types):
            os.makedirs(d)
        populated = {
            0: (link_local_gid(mac), "IB/RoCE v1"),
            1: (link_local_gid(mac), "RoCE v2"),
            2: (ipv4_mapped_gid(i + 1), "IB/RoCE v1"),
            3: (ipv4_mapped_gid(i + 1), "RoCE v2"),
        }
        for n in range(GID_TABLE_LEN):
            if n in populated:
                gid, gid_type = populated[n]
                write(os.path.join(gids, str(n)), gid + "\n")
                write(os.path.join(ndevs, str(n)), ifname + "\n")
                write(os.path.join(types, str(n)), gid_type + "\n")
            else:
                write(os.path.join(gids, str(n)), EMPTY_GID + "\n")

        os.makedirs(os.path.join(port_dir, "counters"))
        os.makedirs(os.path.join(port_dir, "hw_counters"))
        write_counters(port_dir, i, 0)
        write(os.path.join(port_dir, "hw_counters", "lifespan"), "10\n")


def write_counters(port_dir, i, bump):
    for name, v in counters_text(i, bump).items():
        write(os.path.join(port_dir, "counters", name), "%d\n" % v)
    for name, v in hw_counters_text(i, bump).items():
        write(os.path.join(port_dir, "hw_counters", name), "%d\n" % v)


def bump(root):
    """Advances every counter of every port by one step (bump count in a file)."""
    state = os.path.join(root, ".bump")
    step = 1
    if os.path.exists(state):
        with open(state) as f:
            step = int(f.read().strip() or "0") + 1
    ib = os.path.join(root, "class", "infiniband")
    for name in sorted(os.listdir(ib)):
        i = int(name.split("_")[1])
        write_counters(os.path.join(ib, name, "ports", "1"), i, step)
    write(state, "%d\n" % step)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ports", type=int, help="number of mlx5 devices (one port each)")
    p.add_argument("--out", help="directory to create (replaced if present); use tmpfs, e.g. /dev/shm")
    p.add_argument("--seed", type=int, default=0, help="varies MACs/GUIDs between trees")
    p.add_argument("--bump", metavar="DIR", help="advance every counter of an existing tree")
    args = p.parse_args(argv)
    if args.bump:
        bump(args.bump)
        return 0
    if not args.ports or not args.out:
        p.error("--ports and --out are required")
    generate(args.out, args.ports, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
