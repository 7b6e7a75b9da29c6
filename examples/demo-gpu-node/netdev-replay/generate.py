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
the rules flag) and runs no DCBX; the others run the firmware's DCBX as
mlx5 reports it (mode 0x0c, CEE and IEEE bits: "firmware") with no peer
view, since mlx5 has none. The switches' side comes from LLDP instead:
../lldp-neighbors.json, as `lldpcli -f json0 show neighbors details`
prints it (lldpd passes the 802.1Qaz TLVs on as unknown-tlvs), one leaf of
rail i per NIC i; ens4np0's switch port advertises PFC on priority 4 and
DSCP 26 -> priority 4 while the NIC uses 3 (a NIC/switch mismatch), the
others agree with their NIC. Regenerate:
    python3 examples/demo-gpu-node/netdev-replay/generate.py
"""
import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "gen", os.path.join(HERE, "../../../crates/netdev/tests/fixtures/ethtool/generate.py"))
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
spec = importlib.util.spec_from_file_location(
    "phys", os.path.join(HERE, "../../../crates/netdev/tests/fixtures/phys/generate.py"))
phys = importlib.util.module_from_spec(spec)
spec.loader.exec_module(phys)


def optic(i):
    """A healthy CMIS 5.0 OSFP 400GBASE-DR4 (4 lanes of 100G PAM4 over
    single-mode parallel fibre), the module a ConnectX-7 400G port takes,
    with every monitor and threshold page 01h advertises."""
    lower, upper0, page1, page2, page11 = (bytearray(128) for _ in range(5))
    lower[0] = 0x19                       # identifier: OSFP (SFF-8024 Table 4-1)
    lower[1] = 0x50                       # CMIS 5.0
    lower[3] = 0x03 << 1                  # ModuleState ModuleReady, paged memory
    phys.be16(lower, 14, (46 + i) * 256, 0)   # temperature 46..53 C
    phys.be16(lower, 16, 32950, 0)        # Vcc 3.295 V
    lower[85] = 0x02                      # module media type: SMF
    lower[87] = 0x1C                      # media interface 400GBASE-DR4 (Table 4-7)
    lower[88] = 0x44                      # host lane count 4, media lane count 4
    upper0[0] = 0x19
    phys.ascii_field(upper0, 129, 16, "NVIDIA", 128)
    phys.ascii_field(upper0, 148, 16, "MMS4X00-NS400", 128)
    phys.ascii_field(upper0, 164, 2, "A1", 128)
    phys.ascii_field(upper0, 166, 16, "MT2412FT%05d" % (1100 + i), 128)
    page1[159 - 128] = 0x03               # temperature and supply voltage monitors
    page1[160 - 128] = 0x07               # Tx bias, Tx power, Rx power; bias x1
    phys.thresholds(page2, 128, [
        (128, [0x4B00, 0xFB00, 0x4600, 0x0000]),     # temperature 75, -5, 70, 0 C
        (136, [34650, 31350, 34000, 32000]),         # Vcc 3.465, 3.135, 3.4, 3.2 V
        (176, [40000, 2000, 32000, 3200]),           # Tx power 4, 0.2, 3.2, 0.32 mW
        (184, [7500, 1000, 6500, 1500]),             # Tx bias 15, 2, 13, 3 mA
        (192, [40000, 1000, 32000, 2000]),           # Rx power 4, 0.1, 3.2, 0.2 mW
    ])
    for lane in range(4):
        phys.be16(page11, 154 + 2 * lane, 15800 + 150 * lane, 128)       # Tx power ~1.6 mW
        phys.be16(page11, 170 + 2 * lane, 3700 + 40 * lane, 128)         # Tx bias ~7.5 mA
        phys.be16(page11, 186 + 2 * lane, 12600 + 300 * ((lane + i) % 3), 128)  # Rx power ~1.3 mW
    return [((0x50, 0, False), lower), ((0x50, 0, True), upper0), ((0x50, 1, True), page1),
            ((0x50, 2, True), page2), ((0x50, 0x11, True), page11)]


def dac(i):
    """A CMIS passive copper cable (flat memory: lower page and upper page
    00h only, no monitors)."""
    lower, upper0 = bytearray(128), bytearray(128)
    lower[0] = 0x19
    lower[1] = 0x50
    lower[2] = 0x80                       # MemoryModel 1: flat memory
    lower[3] = 0x03 << 1
    lower[85] = 0x03                      # module media type: passive copper
    lower[88] = 0x44
    upper0[0] = 0x19
    phys.ascii_field(upper0, 129, 16, "NVIDIA", 128)
    phys.ascii_field(upper0, 148, 16, "MCP4Y10-N002", 128)
    phys.ascii_field(upper0, 164, 2, "A2", 128)
    phys.ascii_field(upper0, 166, 16, "MT2405VS%05d" % (2200 + i), 128)
    return [((0x50, 0, False), lower), ((0x50, 0, True), upper0)]


def corrected_bits(i):
    """Bits FEC corrected on ens<i+1>np0 since link-up, as FEC_GET and
    rx_corrected_bits_phy give them."""
    return 3_100_000 * (i + 1)


def lane_bits(i):
    """corrected_bits(i) over the four lanes, within a few per cent."""
    total = corrected_bits(i)
    shares = [0.26, 0.24, 0.255, 0.245]
    lanes = [int(total * sh) for sh in shares[:3]]
    return lanes + [total - sum(lanes)]


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
        elif k.startswith("rx_prio") and k.endswith("_marked"):
            # the NIC marks only the lossless RoCE priority under host congestion
            v = 1500 * (i + 1) if int(k[7]) == pfc else 0
        elif k.startswith("rx_prio") and k.endswith("_discards"):
            # TCP on priority 0 drops a few at the port; RoCE nothing
            v = 12 * i if k[7] == "0" else 0
        elif k == "rx_discards_phy":
            v = 17 * i
        elif k == "rx_out_of_buffer":
            v = 4242 if i == 5 else 0
        elif k in ("rx_symbol_err_phy", "rx_pcs_symbol_err_phy"):
            v = 0  # nothing got past FEC on a healthy link
        elif k == "rx_corrected_bits_phy":
            v = corrected_bits(i)
        elif k.startswith("rx_err_lane_"):
            # the same corrected bits per lane: a healthy 400G link corrects
            # on every lane at similar rates
            v = lane_bits(i)[int(k[len("rx_err_lane_")])]
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
        f.write("dcbx: off\n" if i == 7 else "dcbx: firmware\n")
    # ens1np0..ens6np0 take optics, ens7np0 and ens8np0 passive copper; mlx5
    # reports RS-FEC statistics as totals only (no lanes).
    if i < 6:
        phys.write_eeprom(f"{name}.eeprom", f"{name}: CMIS 5.0 OSFP 400GBASE-DR4, healthy",
                          optic(i), directory=HERE)
    else:
        phys.write_eeprom(f"{name}.eeprom", f"{name}: CMIS 5.0 OSFP passive copper 2 m",
                          dac(i), directory=HERE)
    reply = phys.fec_reply(10 + i, name, 50, [2_400_000 * (i + 1)], [0], [corrected_bits(i)])
    phys.write_msgs(f"{name}.fec", f"FEC_GET reply of {name}: RS-FEC, mlx5 totals", [reply],
                    directory=HERE)


def hexbytes(values):
    """Bytes as lldpcli prints an unknown TLV's value: "00,1A"."""
    return ",".join(f"{v:02X}" for v in values)


def switch_port(i):
    """The switch port NIC i reaches, as lldpcli json0 lists a neighbour:
    leaf-p1-r<i> (rail i), port swp<i+1>, with the 802.1Qaz TLVs of a
    lossless RoCE setup: ETS (priority 3 alone in its class with half the
    link, CNPs' priority 6 strict), PFC on priority 3 (4 on ens4np0's), and
    the APP table DSCP 26 -> that priority, DSCP 48 -> 6."""
    lossless = 4 if i == 3 else 3
    prio_tc = [0] * 8
    prio_tc[3], prio_tc[6] = 3, 6
    prio_bytes = [(prio_tc[p] << 4) | prio_tc[p + 1] for p in range(0, 8, 2)]
    bw = [50, 0, 0, 50, 0, 0, 0, 0]
    tsa = [2, 2, 2, 2, 2, 2, 0, 2]          # ETS, but class 6 strict (0)
    ets = [0x00] + prio_bytes + bw + tsa
    pfc = [0x08, 1 << lossless]             # PFC capability 8, enable bitmap
    app = [0x00,
           (lossless << 5) | 5, 0x00, 26,   # priority, selector 5 (DSCP), DSCP 26
           (6 << 5) | 5, 0x00, 48]
    tlv = lambda sub, value: {"oui": "00,80,C2", "subtype": str(sub),  # noqa: E731
                              "len": str(len(value)), "value": hexbytes(value)}
    leaf = f"leaf-p1-r{i}"
    return {
        "name": f"ens{i + 1}np0",
        "via": "LLDP",
        "rid": str(i + 1),
        "age": "0 day, 00:00:12",
        "chassis": [{
            "id": [{"type": "mac", "value": f"1c:34:da:5a:0{i}:00"}],
            "name": [{"value": leaf}],
            "descr": [{"value": "Cumulus Linux version 5.9.1 running on Nvidia SN5600"}],
            "mgmt-ip": [{"value": f"10.0.0.{11 + i}"}],
            "mgmt-iface": [{"value": "2"}],
            "capability": [{"type": "Bridge", "enabled": True},
                           {"type": "Router", "enabled": False}],
        }],
        "port": [{
            "id": [{"type": "ifname", "value": f"swp{i + 1}"}],
            "descr": [{"value": f"{leaf} swp{i + 1}"}],
            "ttl": [{"value": "120"}],
            "mfs": [{"value": "9216"}],
        }],
        "vlan": [{"vlan-id": "1", "pvid": True}],
        "unknown-tlvs": [{"unknown-tlv": [tlv(9, ets), tlv(10, ets), tlv(11, pfc),
                                          tlv(12, app)]}],
    }


with open(os.path.join(HERE, "..", "lldp-neighbors.json"), "w") as f:
    json.dump({"lldp": [{"interface": [switch_port(i) for i in range(8)]}]}, f, indent=2)
    f.write("\n")
