#!/usr/bin/env python3
"""Generates the sysfs fixture trees under tests/fixtures/sys-*/ used by the
roce-rdma tests (and by the exporter's golden tests).

Layout mirrors the kernel: class/infiniband/<dev> is a symlink into
devices/pci0000:XX/.../<bdf>/infiniband/<dev>, <dev>/device links back to the
PCI function, the function's driver link points into bus/pci/drivers/.
Names and formats come from the kernel sources:
  drivers/infiniband/core/sysfs.c          state/phys_state/rate/PMA counters
  drivers/infiniband/hw/mlx5/counters.c    mlx5 hw_counters names
  drivers/infiniband/hw/bnxt_re/hw_counters.c  bnxt_re hw_counters names
and, for rxe, from a capture of a Soft-RoCE VM's sysfs (rxe0 on a
virtio-net interface, after traffic tests: `sysfs-rxe0-after.txt`).

Plain files cannot fail like sysfs does, so each tree carries a faults.txt
("<path relative to the tree> <ERRNO>") that the tests' file layer applies:
the attributes of empty GID slots fail with EINVAL as on a real kernel.

Run from the repository root:  python3 crates/rdma/tests/gen_fixtures.py
"""
import os
import shutil
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
FIX = os.path.normpath(os.path.join(ROOT, "tests", "fixtures"))

# drivers/infiniband/core/sysfs.c pma_attrs_ext (extended-width PMA).
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

# drivers/infiniband/hw/mlx5/counters.c, groups in the order mlx5 fills them.
MLX5_BASIC_Q = ["rx_write_requests", "rx_read_requests", "rx_atomic_requests",
                "rx_dct_connect", "out_of_buffer"]
MLX5_OUT_OF_SEQ = ["out_of_sequence"]
MLX5_RETRANS = ["duplicate_request", "rnr_nak_retry_err", "packet_seq_err",
                "implied_nak_seq_err", "local_ack_timeout_err"]
MLX5_EXT_ERR = ["resp_local_length_error", "resp_cqe_error", "req_cqe_error",
                "req_remote_invalid_request", "req_remote_access_errors",
                "resp_remote_access_errors", "resp_cqe_flush_error",
                "req_cqe_flush_error", "req_transport_retries_exceeded",
                "req_rnr_retries_exceeded"]
MLX5_ROCE_ACCL = ["roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart",
                  "roce_slow_restart_cnps", "roce_slow_restart_trans"]
MLX5_CONG = ["rp_cnp_ignored", "rp_cnp_handled", "np_ecn_marked_roce_packets",
             "np_cnp_sent"]
MLX5_EXT_PPCNT = ["rx_icrc_encapsulated"]
MLX5_ROCE_HW = (MLX5_BASIC_Q + MLX5_OUT_OF_SEQ + MLX5_RETRANS + MLX5_EXT_ERR
                + MLX5_ROCE_ACCL + MLX5_CONG + MLX5_EXT_PPCNT)
MLX5_IB_HW = MLX5_BASIC_Q + MLX5_OUT_OF_SEQ + MLX5_RETRANS + MLX5_EXT_ERR

# drivers/infiniband/hw/bnxt_re/hw_counters.c bnxt_re_stat_descs.
BNXT_RE_HW = [
    "active_pds", "active_ahs", "active_qps", "active_srqs", "active_cqs",
    "active_mrs", "active_mws", "rx_pkts", "rx_bytes", "tx_pkts", "tx_bytes",
    "recoverable_errors", "rx_roce_errors", "rx_roce_discards",
    "to_retransmits", "seq_err_naks_rcvd", "max_retry_exceeded",
    "rnr_naks_rcvd", "missing_resp", "unrecoverable_err", "bad_resp_err",
    "local_qp_op_err", "local_protection_err", "mem_mgmt_op_err",
    "remote_invalid_req_err", "remote_access_err", "remote_op_err", "dup_req",
    "res_exceed_max", "res_length_mismatch", "res_exceeds_wqe",
    "res_opcode_err", "res_rx_invalid_rkey", "res_rx_domain_err",
    "res_rx_no_perm", "res_rx_range_err", "res_tx_invalid_rkey",
    "res_tx_domain_err", "res_tx_no_perm", "res_tx_range_err",
    "res_irrq_oflow", "res_unsup_opcode", "res_unaligned_atomic",
    "res_rem_inv_err", "res_mem_err", "res_srq_err", "res_cmp_err",
    "res_invalid_dup_rkey", "res_wqe_format_err", "res_cq_load_err",
    "res_srq_load_err", "res_tx_pci_err", "res_rx_pci_err", "oos_drop_count",
    "tx_atomic_req", "tx_read_req", "tx_read_resp", "tx_write_req",
    "tx_send_req", "rx_atomic_req", "rx_read_req", "rx_read_resp",
    "rx_write_req", "rx_send_req", "rx_roce_good_pkts", "rx_roce_good_bytes",
    "rx_out_of_buffer",
]

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


class Tree:
    def __init__(self, name):
        self.root = os.path.join(FIX, name)
        if os.path.exists(self.root):
            shutil.rmtree(self.root)
        os.makedirs(self.root)
        self.faults = []

    def p(self, rel):
        return os.path.join(self.root, rel)

    def write(self, rel, content):
        path = self.p(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(content)

    def mkdir(self, rel):
        os.makedirs(self.p(rel), exist_ok=True)

    def link(self, rel, target_rel):
        """Relative symlink at rel pointing to target_rel (both tree-relative)."""
        path = self.p(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(os.path.relpath(self.p(target_rel), os.path.dirname(path)), path)

    def fault(self, rel, errno_name):
        self.faults.append((rel, errno_name))

    def finish(self, note):
        lines = ["# Paths (relative to this tree) that the tests' file layer makes fail",
                 "# with the errno the kernel returns; plain files cannot. " + note]
        lines += ["%s %s" % (p, e) for p, e in self.faults]
        self.write("faults.txt", "\n".join(lines) + "\n")

    def pci_function(self, chain, driver, numa, vendor, device, cls):
        """chain: ["pci0000:16", "0000:16:02.0", "0000:17:00.0"]; returns rel dir."""
        rel = os.path.join("devices", *chain)
        self.write(rel + "/vendor", vendor + "\n")
        self.write(rel + "/device", device + "\n")
        self.write(rel + "/class", cls + "\n")
        self.write(rel + "/numa_node", "%d\n" % numa)
        if driver:
            self.mkdir("bus/pci/drivers/" + driver)
            self.link(rel + "/driver", "bus/pci/drivers/" + driver)
        self.link("bus/pci/devices/" + chain[-1], rel)
        return rel

    def netdev(self, parent_rel, ifname, mac, mtu=9000, speed=400000, operstate="up"):
        rel = parent_rel + "/net/" + ifname
        self.write(rel + "/mtu", "%d\n" % mtu)
        self.write(rel + "/operstate", operstate + "\n")
        self.write(rel + "/speed", "%d\n" % speed)
        self.write(rel + "/address", mac + "\n")
        self.link(rel + "/device", parent_rel)
        self.link("class/net/" + ifname, rel)
        return rel

    def ib_device(self, parent_rel, name, attrs, device_link=True):
        rel = parent_rel + "/infiniband/" + name
        for k, v in attrs.items():
            self.write(rel + "/" + k, v + "\n")
        if device_link:
            self.link(rel + "/device", parent_rel)
        self.link(rel + "/subsystem", "class/infiniband")
        self.link("class/infiniband/" + name, rel)
        return rel

    def port(self, dev_rel, num, attrs, counters=None, hw=None, gids=(), slots=0,
             ndev_einval=False):
        rel = "%s/ports/%d" % (dev_rel, num)
        for k, v in attrs.items():
            self.write(rel + "/" + k, v + "\n")
        if counters is not None:
            for k, v in counters.items():
                self.write(rel + "/counters/" + k, "%s\n" % v)
        if hw is not None:
            for k, v in hw.items():
                self.write(rel + "/hw_counters/" + k, "%s\n" % v)
        by_index = {g[0]: g for g in gids}
        cls = "class/infiniband/" + dev_rel.rsplit("/", 1)[1] + "/ports/%d" % num
        for i in range(slots):
            g = by_index.get(i)
            if g:
                _, gid, gtype, ndev = g
                self.write("%s/gids/%d" % (rel, i), gid + "\n")
                self.write("%s/gid_attrs/types/%d" % (rel, i), gtype + "\n")
                if ndev:
                    self.write("%s/gid_attrs/ndevs/%d" % (rel, i), ndev + "\n")
                else:
                    # IB ports: no netdev, show_port_gid_attr_ndev fails.
                    self.write("%s/gid_attrs/ndevs/%d" % (rel, i), "")
                    self.fault("%s/gid_attrs/ndevs/%d" % (cls, i), "EINVAL")
            else:
                self.write("%s/gids/%d" % (rel, i), ZERO_GID + "\n")
                self.write("%s/gid_attrs/types/%d" % (rel, i), "")
                self.write("%s/gid_attrs/ndevs/%d" % (rel, i), "")
                self.fault("%s/gid_attrs/types/%d" % (cls, i), "EINVAL")
                self.fault("%s/gid_attrs/ndevs/%d" % (cls, i), "EINVAL")
        return rel


def guid_to_gid(guid):
    return "fe80:0000:0000:0000:" + guid


def v4_gid(a, b, c, d):
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, d)


def mac_to_ll_gid(mac):
    b = [int(x, 16) for x in mac.split(":")]
    b[0] ^= 2
    eui = b[:3] + [0xff, 0xfe] + b[3:]
    return "fe80:0000:0000:0000:" + ":".join(
        "%02x%02x" % (eui[i], eui[i + 1]) for i in range(0, 8, 2))


def counters_with(base, overrides):
    out = {n: base + i for i, n in enumerate(PMA_EXT)}
    out.update(overrides)
    return out


def hw_with(names, base, overrides, lifespan=10):
    out = {n: base + i for i, n in enumerate(names)}
    out.update(overrides)
    out["lifespan"] = lifespan
    return out


def mlx5_roce():
    t = Tree("sys-mlx5-roce")
    cards = [
        # name, chain, numa, ifname, mac, node_guid, ipv4, counter base, hw base
        ("mlx5_0", ["pci0000:16", "0000:16:02.0", "0000:17:00.0"], 0, "ens1f0np0",
         "b8:ce:f6:a1:b2:c4", "b8ce:f603:00a1:b2c4", (10, 0, 1, 11), 100, 1000),
        ("mlx5_1", ["pci0000:b0", "0000:b0:02.0", "0000:b1:00.0"], 1, "ens2f0np0",
         "b8:ce:f6:a1:c3:d0", "b8ce:f603:00a1:c3d0", (10, 0, 2, 11), 200, 2000),
    ]
    for name, chain, numa, ifname, mac, guid, ip, cbase, hbase in cards:
        t.pci_function(chain[:-1], None, numa, "0x8086", "0x352a", "0x060400")
        fn = t.pci_function(chain, "mlx5_core", numa, "0x15b3", "0x1021", "0x020000")
        t.netdev(fn, ifname, mac)
        dev = t.ib_device(fn, name, {
            "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "hca_type": "MT4129",
            "node_guid": guid, "sys_image_guid": guid, "node_type": "1: CA",
            "node_desc": "gpu-node-01 " + name,
        })
        ll = mac_to_ll_gid(mac)
        v4 = v4_gid(*ip)
        t.port(dev, 1, {
            "state": "4: ACTIVE", "phys_state": "5: LinkUp",
            "rate": "400 Gb/sec (4X NDR)", "link_layer": "Ethernet", "lid": "0x0",
            "sm_lid": "0x0", "lid_mask_count": "0", "sm_sl": "0",
            "cap_mask": "0x04010000",
        }, counters=counters_with(cbase, {
            "port_rcv_data": 250000000000 + cbase, "port_xmit_data": 240000000000 + cbase,
            "port_rcv_packets": 900000000 + cbase, "port_xmit_packets": 880000000 + cbase,
            "unicast_rcv_packets": 899000000 + cbase, "unicast_xmit_packets": 879000000 + cbase,
            "symbol_error": 0, "link_downed": 1,
        }), hw=hw_with(MLX5_ROCE_HW, hbase, {}), gids=[
            (0, ll, "IB/RoCE v1", ifname), (1, ll, "RoCE v2", ifname),
            (2, v4, "IB/RoCE v1", ifname), (3, v4, "RoCE v2", ifname),
        ], slots=256)
    t.finish("Here: empty GID slots.")


def mlx5_ib():
    t = Tree("sys-mlx5-ib")
    cards = [
        ("mlx5_0", ["pci0000:16", "0000:16:02.0", "0000:17:00.0"], 0, "0x1021",
         "28.39.1002", "MT_0000000838", "MT4129", "a088:c203:0045:6a10",
         "400 Gb/sec (4X NDR)", "0x1a", 300, 3000),
        ("mlx5_1", ["pci0000:b0", "0000:b0:02.0", "0000:b1:00.0"], 1, "0x101b",
         "20.39.1002", "MT_0000000223", "MT4123", "b8ce:f603:00f2:7e40",
         "200 Gb/sec (4X HDR)", "0x1b", 400, 4000),
    ]
    for name, chain, numa, did, fw, board, hca, guid, rate, lid, cbase, hbase in cards:
        t.pci_function(chain[:-1], None, numa, "0x8086", "0x352a", "0x060400")
        fn = t.pci_function(chain, "mlx5_core", numa, "0x15b3", did, "0x020700")
        dev = t.ib_device(fn, name, {
            "fw_ver": fw, "board_id": board, "hca_type": hca, "node_guid": guid,
            "sys_image_guid": guid, "node_type": "1: CA", "node_desc": "ib-node-01 " + name,
        })
        t.port(dev, 1, {
            "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": rate,
            "link_layer": "InfiniBand", "lid": lid, "sm_lid": "0x1",
            "lid_mask_count": "0", "sm_sl": "0", "cap_mask": "0xa659e848",
        }, counters=counters_with(cbase, {"port_rcv_data": 7000000000 + cbase,
                                          "port_xmit_data": 6000000000 + cbase}),
            hw=hw_with(MLX5_IB_HW, hbase, {}),
            gids=[(0, guid_to_gid(guid), "IB/RoCE v1", None)], slots=128)
    t.finish("Here: empty GID slots, and ndevs of IB GIDs (no netdev).")


def rxe():
    # Exact values of sysfs-rxe0-after.txt and topology.txt (virtio-net VM).
    t = Tree("sys-rxe")
    t.pci_function(["pci0000:00", "0000:00:01.0"], "virtio-pci", -1, "0x1af4",
                   "0x1000", "0x020000")
    t.mkdir("devices/pci0000:00/0000:00:01.0/virtio0")
    t.netdev("devices/pci0000:00/0000:00:01.0/virtio0", "eth0", "52:54:00:00:00:01",
             mtu=1500, speed=-1)
    dev = t.ib_device("devices/virtual", "rxe0", {
        "fw_ver": "", "node_desc": "rxe", "node_guid": "5054:00ff:fe00:0001",
        "node_type": "1: CA", "parent": "eth0", "sys_image_guid": "5054:00ff:fe00:0001",
        "uevent": "NAME=rxe0",
    }, device_link=False)
    # rxe's class link goes through devices/virtual/infiniband.
    hw = {
        "ack_deferred": 1, "completer_retry_err": 38, "duplicate_request": 1025,
        "lifespan": 12, "link_downed": 0, "out_of_seq_request": 0, "rcvd_pkts": 180690,
        "rcvd_rnr_err": 0, "rcvd_seq_err": 0, "rdma_recvs": 6045, "rdma_sends": 6045,
        "retry_exceeded_err": 0, "retry_rnr_exceeded_err": 0, "send_err": 0,
        "send_rnr_err": 0, "sent_pkts": 180690,
    }
    rel = t.port(dev, 1, {
        "cap_mask": "0x00010000", "lid": "0x0", "lid_mask_count": "0",
        "link_layer": "Ethernet", "phys_state": "5: LinkUp",
        "rate": "2.5 Gb/sec (1X SDR)", "sm_lid": "0x0", "sm_sl": "0",
        "state": "4: ACTIVE", "pkeys/0": "0xffff",
    }, hw=hw, gids=[
        (0, "fe80:0000:0000:0000:5054:00ff:fe00:0001", "RoCE v2", "eth0"),
        (1, "0000:0000:0000:0000:0000:ffff:0a00:020f", "RoCE v2", "eth0"),
    ], slots=1024)
    cm = {"cm_rx_duplicates": {}, "cm_rx_msgs": {"drep": 1, "dreq": 1, "rep": 1, "req": 1, "rtu": 1},
          "cm_tx_msgs": {"drep": 1, "dreq": 1, "rep": 1, "req": 1, "rtu": 1}, "cm_tx_retries": {}}
    for group, vals in cm.items():
        for k in ["apr", "drep", "dreq", "lap", "mra", "rej", "rep", "req", "rtu",
                  "sidr_rep", "sidr_req"]:
            t.write("%s/%s/%s" % (rel, group, k), "%d\n" % vals.get(k, 0))
    t.finish("Here: empty GID slots (the capture reads them as '!ERR Invalid argument').")


def bnxt_re():
    t = Tree("sys-bnxt_re")
    chain = ["pci0000:40", "0000:40:01.1", "0000:41:00.0"]
    t.pci_function(chain[:-1], "pcieport", 0, "0x1022", "0x1483", "0x060400")
    fn = t.pci_function(chain, "bnxt_en", 0, "0x14e4", "0x1750", "0x020000")
    t.netdev(fn, "ens3f0np0", "00:0a:f7:c1:22:30", speed=200000)
    dev = t.ib_device(fn, "bnxt_re0", {
        "fw_ver": "226.0.145.0", "hca_type": "0x1750", "board_id": "BCM957508-P2100G",
        "node_guid": "020a:f7ff:fec1:2230", "sys_image_guid": "020a:f7ff:fec1:2230",
        "node_type": "1: CA", "node_desc": "storage-01 bnxt_re0",
    })
    ll = mac_to_ll_gid("00:0a:f7:c1:22:30")
    v4 = v4_gid(10, 0, 3, 21)
    t.port(dev, 1, {
        "state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)",
        "link_layer": "Ethernet", "lid": "0x0", "sm_lid": "0x0", "lid_mask_count": "0",
        "sm_sl": "0", "cap_mask": "0x04010000",
    }, hw=hw_with(BNXT_RE_HW, 500, {"rx_out_of_buffer": 7, "to_retransmits": 3}),
        gids=[(0, ll, "IB/RoCE v1", "ens3f0np0"), (1, ll, "RoCE v2", "ens3f0np0"),
              (2, v4, "IB/RoCE v1", "ens3f0np0"), (3, v4, "RoCE v2", "ens3f0np0")],
        slots=256)
    t.finish("Here: empty GID slots.")


def broken():
    t = Tree("sys-broken")
    # mlx5_0: PMA quirk, garbage, missing files, injected errnos.
    chain = ["pci0000:16", "0000:16:02.0", "0000:17:00.0"]
    fn = t.pci_function(chain, "mlx5_core", 0, "0x15b3", "0x1021", "0x020000")
    t.netdev(fn, "ens1f0np0", "b8:ce:f6:a1:b2:c4")
    dev = t.ib_device(fn, "mlx5_0", {
        "fw_ver": "28.39.1002", "board_id": "MT_0000000838", "hca_type": "MT4129",
        "node_guid": "b8ce:f603:00a1:b2c4", "node_type": "1: CA",
    })
    counters = {
        "port_rcv_data": "N/A (no PMA)", "port_xmit_data": "N/A (no PMA)",
        "port_rcv_packets": "12abc", "port_xmit_packets": "", "symbol_error": "5",
        "link_downed": "2", "port_rcv_errors": "7", "port_xmit_discards": "9",
        "VL15_dropped": "0",
    }
    t.port(dev, 1, {
        "state": "4: ACTIVE", "phys_state": "bogus", "rate": "fast",
        "link_layer": "Ethernet", "lid": "0xZZ",
    }, counters=counters, hw={"out_of_buffer": 11, "np_cnp_sent": 12, "rp_cnp_handled": 13,
                              "local_ack_timeout_err": 14, "packet_seq_err": "garbage",
                              "lifespan": 10},
        gids=[(0, mac_to_ll_gid("b8:ce:f6:a1:b2:c4"), "IB/RoCE v1", "ens1f0np0"),
              (1, mac_to_ll_gid("b8:ce:f6:a1:b2:c4"), "RoCE v2", "ens1f0np0"),
              (2, "not-a-gid", "RoCE v2", "ens1f0np0")], slots=8)
    p = "class/infiniband/mlx5_0/ports/1/"
    t.fault(p + "counters/port_rcv_errors", "EACCES")
    t.fault(p + "counters/port_xmit_discards", "EIO")
    t.fault(p + "counters/VL15_dropped", "EOPNOTSUPP")
    t.fault(p + "hw_counters/np_cnp_sent", "EIO")
    t.fault(p + "hw_counters/rp_cnp_handled", "EINVAL")
    t.fault(p + "gid_attrs/types/1", "EINVAL")
    # mlx5_1: no ports folder at all, no board_id/hca_type, numa -1.
    chain = ["pci0000:b0", "0000:b0:02.0", "0000:b1:00.0"]
    fn = t.pci_function(chain, "mlx5_core", -1, "0x15b3", "0x1021", "0x020000")
    t.ib_device(fn, "mlx5_1", {"fw_ver": "28.39.1002", "node_guid": "b8ce:f603:00a1:c3d0",
                               "node_type": "1: CA"})
    # rxe9: parent netdev that does not exist, no hw_counters, no gids folder.
    dev = t.ib_device("devices/virtual", "rxe9", {
        "fw_ver": "", "node_guid": "5054:00ff:fe00:0009", "node_type": "1: CA",
        "parent": "gone0",
    }, device_link=False)
    t.port(dev, 1, {"state": "1: DOWN", "phys_state": "3: Disabled",
                    "rate": "2.5 Gb/sec", "link_layer": "Ethernet", "lid": "0x0"})
    # The fault slots 3..7 (empty) come from port(); slot 2 holds garbage.
    t.finish("Here: EACCES/EIO/EOPNOTSUPP/EINVAL cases and empty GID slots.")


def main():
    for f in (mlx5_roce, mlx5_ib, rxe, bnxt_re, broken):
        f()
    print("wrote fixtures under", FIX, file=sys.stderr)


if __name__ == "__main__":
    main()
