"""RoCE v2 frames on the emulated wire of tests/vm/e2e-fleet.sh, byte by
byte (stdlib only): reading the hub's pcap, taking a UD datagram apart, and
building one, ICRC included, the way the kernel's rxe checks it.

Layout of a RoCE v2 UD SEND over IPv4 (IBTA Annex A17; opcode 0x64, "UD
SEND Only"): Ethernet (14) | IPv4 (20) | UDP to 4791 (8) | BTH (12: opcode,
flags, P_Key, resv8a, destination QP, A, PSN) | DETH (8: Q_Key, reserved,
source QP) | payload | ICRC (4).

The ICRC (rxe_icrc.c): CRC-32 (zlib's polynomial and reflection, stored
little-endian) over eight 0xff bytes (the LRH that RoCE v2 has not) and
the packet from the IPv4 header to the end of the payload, with the fields
a router may change masked to all ones: IPv4 TOS, TTL and header checksum,
the UDP checksum, and BTH byte 4 (resv8a).
"""

import struct
import zlib

ROCE_PORT = 4791
UD_SEND_ONLY = 0x64
ETH_IPV4 = 0x0800
HEADERS = 14 + 20 + 8 + 12 + 8  # Ethernet to DETH
ICRC_LEN = 4


def read_pcap(path):
    """[(time, frame)] of a pcap file (microsecond, little-endian, as
    tests/vm/hub.py writes it); a truncated last record is left out."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24 or struct.unpack_from("<I", data)[0] != 0xA1B2C3D4:
        raise ValueError(f"{path}: not a little-endian microsecond pcap")
    pos = 24
    while pos + 16 <= len(data):
        sec, usec, incl, _ = struct.unpack_from("<IIII", data, pos)
        pos += 16
        if pos + incl > len(data):
            break
        out.append((sec + usec / 1e6, data[pos:pos + incl]))
        pos += incl
    return out


def ip4_checksum(header):
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def icrc(ip_to_payload):
    """The ICRC of a RoCE v2 IPv4 packet, given its bytes from the IPv4
    header to the end of the payload (ICRC excluded)."""
    b = bytearray(ip_to_payload)
    b[1] = 0xFF  # TOS
    b[8] = 0xFF  # TTL
    b[10:12] = b"\xff\xff"  # header checksum
    ihl = (b[0] & 0x0F) * 4
    b[ihl + 6:ihl + 8] = b"\xff\xff"  # UDP checksum
    b[ihl + 8 + 4] = 0xFF  # BTH resv8a
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF)


def mac(text):
    return bytes(int(x, 16) for x in text.split(":"))


def ipv4(text):
    return bytes(int(x) for x in text.split("."))


def ud_send(*, src_mac, dst_mac, src_ip, dst_ip, tos, dest_qpn, src_qpn, qkey, payload,
            udp_sport=0xC000, psn=0, pkey=0xFFFF, ttl=64):
    """One RoCE v2 UD SEND Only frame, ICRC included."""
    pad = (-len(payload)) % 4
    body = payload + b"\0" * pad
    bth = struct.pack("!BBHI", UD_SEND_ONLY, pad << 4, pkey, dest_qpn & 0xFFFFFF) \
        + struct.pack("!I", psn & 0xFFFFFF)
    deth = struct.pack("!II", qkey, src_qpn & 0xFFFFFF)
    udp_len = 8 + len(bth) + len(deth) + len(body) + ICRC_LEN
    udp = struct.pack("!HHHH", udp_sport, ROCE_PORT, udp_len, 0)
    total = 20 + udp_len
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, tos, total, 0, 0x4000, ttl, 17, 0,
                               ipv4(src_ip), ipv4(dst_ip)))
    ip[10:12] = struct.pack("!H", ip4_checksum(bytes(ip)))
    packet = bytes(ip) + udp + bth + deth + body
    eth = mac(dst_mac) + mac(src_mac) + struct.pack("!H", ETH_IPV4)
    return eth + packet + icrc(packet)


def parse(frame):
    """The fields of a RoCE v2 datagram over IPv4 (dict), or None for any
    other frame: src/dst MAC and IP, tos, opcode, dest_qpn, and for UD
    SENDs src_qpn, qkey and payload (padding removed); icrc_ok says whether
    the frame's ICRC is the one icrc() computes."""
    if len(frame) < 14 + 20 + 8 + 12 + ICRC_LEN:
        return None
    if struct.unpack_from("!H", frame, 12)[0] != ETH_IPV4 or frame[14] >> 4 != 4:
        return None
    ihl = (frame[14] & 0x0F) * 4
    if frame[14 + 9] != 17:
        return None
    total = struct.unpack_from("!H", frame, 16)[0]
    udp = 14 + ihl
    if struct.unpack_from("!H", frame, udp + 2)[0] != ROCE_PORT or 14 + total > len(frame):
        return None
    bth = udp + 8
    opcode, flags, _, dqpn = struct.unpack_from("!BBHI", frame, bth)
    end = 14 + total - ICRC_LEN
    out = {
        "src_mac": frame[6:12].hex(":"), "dst_mac": frame[0:6].hex(":"),
        "src_ip": ".".join(map(str, frame[26:30])), "dst_ip": ".".join(map(str, frame[30:34])),
        "tos": frame[15], "opcode": opcode, "dest_qpn": dqpn & 0xFFFFFF,
        "icrc_ok": icrc(frame[14:end]) == frame[end:end + ICRC_LEN],
    }
    if opcode == UD_SEND_ONLY and end >= bth + 20:
        qkey, sqpn = struct.unpack_from("!II", frame, bth + 12)
        pad = (flags >> 4) & 3
        out.update(qkey=qkey, src_qpn=sqpn & 0xFFFFFF, payload=frame[bth + 20:end - pad])
    return out
