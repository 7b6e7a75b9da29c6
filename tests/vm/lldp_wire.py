"""LLDP frames on the emulated wire of tests/vm/e2e-fleet.sh, byte by byte
(stdlib only): what a switch port sends (IEEE 802.1AB LLDPDUs with the
IEEE 802.1Qaz DCBX TLVs of a lossless RoCE fabric), built here and taken
apart again to check the hub's capture. Written apart from the exporter's
decoder (crates/lldp) so that each checks the other.

A frame: destination 01:80:c2:00:00:0e (nearest bridge, which no bridge
forwards), the sender's MAC, ethertype 0x88cc, then TLVs, each a 16-bit
header (type in the top 7 bits, length of the value in the low 9) and the
value; the chassis ID (type 1), port ID (2) and TTL (3) first, the End TLV
(type 0, length 0) last (IEEE 802.1AB-2016, 8.4-8.5). Chassis ID subtype 4
is a MAC address, port ID subtype 5 an interface name; a management
address (type 8) is: string length (address subtype + address), address
subtype (1: IPv4), the address, interface numbering subtype (2: ifIndex),
the interface number (4 octets), OID string length (0).

Organizationally specific TLVs (type 127): OUI (3 octets), subtype, then
the information string. IEEE 802.1 (00-80-c2) subtypes as IEEE 802.1Q
Annex D gives them and Wireshark's packet-lldp.c dissects them:
  1   port VLAN ID: 2 octets;
  9   ETS configuration: flags (willing 0x80, CBS 0x40, max TCs 0x07, 0
      meaning 8), priority assignment table (4 octets: priority 0 in the
      high nibble of the first), TC bandwidth table (8 octets, percent),
      TSA assignment table (8 octets: 0 strict, 1 CBS, 2 ETS, 255 vendor);
  10  ETS recommendation: a reserved octet, then the same three tables;
  11  PFC configuration: flags (willing 0x80, MBC 0x40, PFC cap 0x0f), the
      enable bitmap (bit n: priority n);
  12  application priority: a reserved octet, then 3-octet entries:
      priority (top 3 bits) and selector (low 3 bits; 5 is DSCP, as the
      kernel's IEEE_8021QAZ_APP_SEL_DSCP), the protocol (2 octets: the DSCP).
IEEE 802.3 (00-12-0f) subtype 4: maximum frame size, 2 octets.
"""

import struct

LLDP_MULTICAST = bytes.fromhex("0180c200000e")
ETH_P_LLDP = 0x88CC
DOT1 = bytes.fromhex("0080c2")
DOT3 = bytes.fromhex("00120f")
SEL_DSCP = 5
TSA_ETS = 2


def tlv(kind, value):
    if not 0 <= kind < 128 or len(value) > 511:
        raise ValueError(f"TLV type {kind} with {len(value)} bytes")
    return struct.pack("!H", (kind << 9) | len(value)) + value


def org(oui, subtype, info):
    return tlv(127, oui + bytes([subtype]) + info)


def mac_bytes(mac):
    b = bytes(int(x, 16) for x in mac.split(":"))
    if len(b) != 6:
        raise ValueError(f"not a MAC address: {mac}")
    return b


def switch_frame(chassis_mac, port_id, system_name, pfc_priority, dscp, app_priority,
                 ttl=120, mgmt_ipv4="10.0.0.11"):
    """The LLDP frame of a switch port of a lossless RoCE fabric: chassis,
    port (interface name), TTL, port description, system name and
    description, capabilities (bridge, router; bridge enabled), an IPv4
    management address, PVID 1, maximum frame size 9216, ETS
    configuration and recommendation (priority `pfc_priority` alone in TC 1,
    the rest in TC 0, 50 % each, ETS), PFC on `pfc_priority` (willing off,
    8 TCs capable) and one APP entry, DSCP `dscp` to `app_priority`."""
    mac = mac_bytes(chassis_mac)
    pdu = tlv(1, b"\x04" + mac)
    pdu += tlv(2, b"\x05" + port_id.encode())
    pdu += tlv(3, struct.pack("!H", ttl))
    pdu += tlv(4, f"{system_name} {port_id}".encode())
    pdu += tlv(5, system_name.encode())
    pdu += tlv(6, b"Cumulus Linux version 5.9.1 running on Nvidia SN5600")
    pdu += tlv(7, struct.pack("!HH", 0x0014, 0x0004))
    addr = bytes(int(x) for x in mgmt_ipv4.split("."))
    pdu += tlv(8, bytes([1 + len(addr), 1]) + addr + b"\x02" + struct.pack("!I", 2) + b"\x00")
    pdu += org(DOT1, 1, struct.pack("!H", 1))
    pdu += org(DOT3, 4, struct.pack("!H", 9216))
    prio_tc = [1 if p == pfc_priority else 0 for p in range(8)]
    table = bytes((prio_tc[i] << 4) | prio_tc[i + 1] for i in range(0, 8, 2))
    bw = bytes([50, 50, 0, 0, 0, 0, 0, 0])
    tsa = bytes([TSA_ETS, TSA_ETS, 0, 0, 0, 0, 0, 0])
    pdu += org(DOT1, 9, b"\x00" + table + bw + tsa)  # max TCs 0: 8
    pdu += org(DOT1, 10, b"\x00" + table + bw + tsa)
    pdu += org(DOT1, 11, bytes([0x08, 1 << pfc_priority]))
    pdu += org(DOT1, 12, b"\x00" + bytes([(app_priority << 5) | SEL_DSCP])
               + struct.pack("!H", dscp))
    pdu += tlv(0, b"")
    frame = LLDP_MULTICAST + mac + struct.pack("!H", ETH_P_LLDP) + pdu
    return frame + b"\x00" * max(0, 60 - len(frame))


def _text(b):
    return b.decode("utf-8", "replace")


def parse(frame):
    """The fields of an LLDP frame as a dict (None when it is not one, or
    when it breaks the TLV rules): src_mac, chassis_id, port_id, ttl,
    system_name, port_description, management_address, pfc_enabled,
    pfc_willing, app [(selector, protocol, priority)], ets_prio_tc,
    ets_bandwidth, ets_tsa."""
    if len(frame) < 14 or struct.unpack_from("!H", frame, 12)[0] != ETH_P_LLDP:
        return None
    out = {"dst_mac": frame[0:6].hex(":"), "src_mac": frame[6:12].hex(":"), "app": []}
    pos, order = 14, []
    while pos + 2 <= len(frame):
        head = struct.unpack_from("!H", frame, pos)[0]
        kind, length = head >> 9, head & 0x1FF
        value = frame[pos + 2:pos + 2 + length]
        if len(value) != length:
            return None
        pos += 2 + length
        order.append(kind)
        if kind == 0:
            break
        if kind == 1 and length >= 2:
            out["chassis_id"] = value[1:].hex(":") if value[0] == 4 else _text(value[1:])
        elif kind == 2 and length >= 2:
            out["port_id"] = value[1:].hex(":") if value[0] == 3 else _text(value[1:])
        elif kind == 3 and length == 2:
            out["ttl"] = struct.unpack("!H", value)[0]
        elif kind == 4:
            out["port_description"] = _text(value)
        elif kind == 5:
            out["system_name"] = _text(value)
        elif kind == 8 and length >= 2 and value[1] == 1 and value[0] == 5:
            out.setdefault("management_address", ".".join(str(x) for x in value[2:6]))
        elif kind == 127 and length >= 4 and value[:3] == DOT1:
            sub, info = value[3], value[4:]
            if sub == 9 and len(info) == 21:
                out["ets_prio_tc"] = [n for b in info[1:5] for n in (b >> 4, b & 0x0F)]
                out["ets_bandwidth"] = list(info[5:13])
                out["ets_tsa"] = list(info[13:21])
            elif sub == 11 and len(info) == 2:
                out["pfc_willing"] = bool(info[0] & 0x80)
                out["pfc_enabled"] = info[1]
            elif sub == 12 and len(info) >= 1 and (len(info) - 1) % 3 == 0:
                for i in range(1, len(info), 3):
                    out["app"].append((info[i] & 0x07, struct.unpack_from("!H", info, i + 1)[0],
                                       info[i] >> 5))
    if order[:3] != [1, 2, 3] or not order or order[-1] != 0:
        return None
    return out
