#!/usr/bin/env python3
"""Plays the switch: builds an LLDP frame byte by byte (IEEE 802.1AB TLVs,
IEEE 802.1Qaz DCBX TLVs) and sends it on an interface, or writes its hex.

Written apart from the Rust decoder so each checks the other. Only for
interfaces of network namespaces the tests create (veth pairs); it never
runs against a real network.

usage: send_lldp.py [--hex] [--count N] [--interval S] IFACE SYSNAME PORT
                    PFC_PRIO DSCP APP_PRIO [TTL]
"""
import argparse
import socket
import struct
import sys
import time


def tlv(t, value):
    assert len(value) < 512
    return struct.pack("!H", (t << 9) | len(value)) + value


def org(oui, subtype, info):
    return tlv(127, bytes(oui) + bytes([subtype]) + info)


DOT1 = (0x00, 0x80, 0xC2)
DOT3 = (0x00, 0x12, 0x0F)


def frame(sysname, port, pfc_prio, dscp, app_prio, ttl=120):
    chassis_mac = bytes([0x1C, 0x34, 0xDA, 0x5A, 0x01, 0x00])
    pdu = b""
    pdu += tlv(1, b"\x04" + chassis_mac)  # chassis ID, MAC subtype
    pdu += tlv(2, b"\x05" + port.encode())  # port ID, interface name
    pdu += tlv(3, struct.pack("!H", ttl))
    pdu += tlv(4, f"{sysname} {port}".encode())  # port description
    pdu += tlv(5, sysname.encode())
    pdu += tlv(6, b"Cumulus Linux version 5.9.1 running on Nvidia SN5600")
    pdu += tlv(7, struct.pack("!HH", 0x0014, 0x0004))  # bridge+router / bridge
    # management address: len 5 (subtype + 4), IPv4, ifIndex 2, no OID
    pdu += tlv(8, bytes([5, 1, 10, 0, 0, 11, 2]) + struct.pack("!I", 2) + b"\x00")
    pdu += org(DOT1, 1, struct.pack("!H", 1))  # PVID 1
    pdu += org(DOT3, 4, struct.pack("!H", 9216))  # max frame size
    prio_tc = [0] * 8
    prio_tc[pfc_prio] = 1
    pt = bytes([(prio_tc[i] << 4) | prio_tc[i + 1] for i in range(0, 8, 2)])
    bw = bytes([50, 50, 0, 0, 0, 0, 0, 0])
    tsa = bytes([2, 2, 0, 0, 0, 0, 0, 0])
    pdu += org(DOT1, 9, bytes([0x00]) + pt + bw + tsa)  # ETS config, 8 TCs
    pdu += org(DOT1, 10, bytes([0x00]) + pt + bw + tsa)  # ETS recommendation
    pdu += org(DOT1, 11, bytes([0x08, 1 << pfc_prio]))  # PFC: cap 8, enable
    # APP: reserved, then priority<<5 | selector 5 (DSCP), protocol = DSCP
    pdu += org(DOT1, 12, b"\x00" + bytes([(app_prio << 5) | 5]) + struct.pack("!H", dscp))
    pdu += tlv(0, b"")
    eth = bytes([0x01, 0x80, 0xC2, 0x00, 0x00, 0x0E]) + chassis_mac + b"\x88\xcc"
    f = eth + pdu
    return f + b"\x00" * max(0, 60 - len(f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hex", action="store_true")
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--interval", type=float, default=0.0)
    ap.add_argument("iface")
    ap.add_argument("sysname")
    ap.add_argument("port")
    ap.add_argument("pfc_prio", type=int)
    ap.add_argument("dscp", type=int)
    ap.add_argument("app_prio", type=int)
    ap.add_argument("ttl", type=int, nargs="?", default=120)
    a = ap.parse_args()
    f = frame(a.sysname, a.port, a.pfc_prio, a.dscp, a.app_prio, a.ttl)
    if a.hex:
        sys.stdout.write(f.hex() + "\n")
        return
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    for i in range(a.count):
        s.send(f)
        if i + 1 < a.count:
            time.sleep(a.interval)


if __name__ == "__main__":
    main()
