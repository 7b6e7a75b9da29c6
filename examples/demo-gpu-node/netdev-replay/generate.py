#!/usr/bin/env python3
"""Recorded ethtool statistics and DCB settings for the demo node's eight
ConnectX-7 netdevs (ens1np0..ens8np0), replayed by roce_exporter when the
config points `netdevs.replay` here (the demo tree is not the running
kernel, so the ethtool ioctl and DCB netlink are off; see
crates/netdev/src/reader.rs `DcbReplay` and `ethtool::Replay`).

Not captured from a real host: the counter names and order are mlx5's
(crates/netdev/tests/fixtures/ethtool/generate.py, from en_stats.c), the values are made
up so that the demo shows every family: ens6np0 receives a pause storm on
priority 3, ens8np0 has PFC on priority 4 instead of 3 (a misconfiguration
the rules flag) and runs no DCBX, so the host cannot see its switch port;
ens4np0's switch port advertises (through firmware DCBX) PFC on priority 4
and DSCP 26 -> priority 4 while the NIC uses 3 (a NIC/switch mismatch);
the others are healthy and agree with their switch. Regenerate:
    python3 examples/demo-gpu-node/netdev-replay/generate.py
"""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "gen", os.path.join(HERE, "../../../crates/netdev/tests/fixtures/ethtool/generate.py"))
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)

for i in range(8):
    name = f"ens{i + 1}np0"
    pfc = 4 if i == 7 else 3
    pairs = []
    for k, v in gen.mlx5():
        if k.startswith(("rx_prio", "tx_prio")) and ("_pause" in k):
            prio = int(k[7])
            if prio != pfc:
                continue  # mlx5 lists PFC counters only for PFC-enabled priorities
            if k.endswith("_pause"):
                v = 1200 * (i + 1) * (40 if i == 5 and k.startswith("rx") else 1)
            elif k.endswith("_pause_duration"):
                v = 800 * (i + 1) * (5000 if i == 5 and k.startswith("rx") else 1)
            else:
                v = 30 * (i + 1)
        elif k in ("tx_pause_storm_warning_events", "tx_pause_storm_error_events"):
            v = 3 if i == 5 and "warning" in k else 0
        elif k.startswith("rx_prio") and k.endswith(("_buf_discard", "_cong_discard")):
            v = 0
        elif k == "rx_discards_phy":
            v = 17 * i
        elif k == "rx_out_of_buffer":
            v = 4242 if i == 5 else 0
        pairs.append((k, v))
    with open(os.path.join(HERE, f"{name}.txt"), "w") as f:
        f.write("NIC statistics:\n")
        for k, v in pairs:
            f.write(f"     {k}: {v}\n")
    with open(os.path.join(HERE, f"{name}.dcb"), "w") as f:
        f.write(f"# recorded DCB settings of {name} (demo)\n")
        f.write(f"pfc: {pfc}\ntrust: dscp\napp: dscp 26 3\napp: dscp 48 6\n")
        # RoCE priority alone in its traffic class with half the link, CNPs
        # (priority 6) strict, the lossless priority on its own buffer.
        prio_tc = ["0"] * 8
        prio_tc[pfc] = str(pfc)
        prio_tc[6] = "6"
        bw = ["0"] * 8
        bw[0] = bw[pfc] = "50"
        p2b = ["0"] * 8
        p2b[pfc] = "1"
        f.write(f"prio_tc: {' '.join(prio_tc)}\n"
                "tc_tsa: ets ets ets ets ets ets strict ets\n"
                f"tc_bw: {' '.join(bw)}\n"
                f"prio2buffer: {' '.join(p2b)}\n"
                "buffer_size: 130944 130944 0 0 0 0 0 0\n"
                "buffer_total: 262144\n")
        if i == 7:
            f.write("dcbx: off\n")
        else:
            sw = 4 if i == 3 else 3
            f.write("dcbx: firmware_ieee\npeer: ieee\n"
                    f"peer_pfc: {sw}\npeer_app: dscp 26 {sw}\npeer_app: dscp 48 6\n"
                    f"peer_prio_tc: {' '.join(prio_tc)}\n")
