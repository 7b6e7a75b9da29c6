#!/usr/bin/env python3
"""Forged peer probes for tests/vm/e2e-fleet.sh (stdlib only): RoCE v2 UD
datagrams, built byte by byte (tests/vm/roce_wire.py), sent to the
responder of one exporter (--to: its /peer-probe/endpoints document) in
the name of another's responder (--as: GID and QPN from its document; or
--as-ip/--as-qpn: any address, a third party that never asked), with a
nonce neither owns, injected into the hub's segment (tests/vm/hub.py,
SOCKS/inject).

One probe (the default): a responder that answers echoes, or answers
without a bound, starts a loop between the two; one that tells a probe
from an answer sends at most one answer. A flood (--count N --rate R): N
probes at R a second, each with its own sequence number and no cookie or a
made-up one (a forger off the path never sees a cookie); the responder
must echo none, challenge the named peer within its small budget, and keep
answering that peer's own (proven) probes.

    forge.py --inject SOCKS/inject --to share/a/own-endpoints-1.json \\
        --to-mac 52:54:00:00:00:01 --as share/b/own-endpoints-1.json --out forged.json
    forge.py ... --count 10000 --rate 1000 --out flood.json
    forge.py ... --as-ip 10.0.2.99 --as-qpn 4242 --count 300 --rate 100 --out third.json

Writes --out (JSON): the marker (the payload's nonce and sequence, hex: an
answer keeps them; for a flood, the nonce all its probes share), the time
of the first and last injection, the count, and the frame's fields, for
check_fleet.py to count the datagrams that carry the marker in the
capture. Exit status 0 when sent, 2 when an endpoint document is unusable.
"""

import argparse
import ipaddress
import json
import os
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import roce_wire  # noqa: E402  (this folder)

# The forger's own MAC: locally administered, no VM's, so the injected
# frame and the answers it draws are told apart on the wire.
FORGER_MAC = "02:00:00:00:00:66"
# The payload of a probe (crates/probe/src/peer_wire.rs): magic "RPRB",
# wire version 2, kind 1 (probe), two zero bytes, nonce, sequence,
# incarnation, hold time 0, four zero bytes, the cookie (big-endian), then
# zero padding to the small size. A well-formed probe, so that the
# responder judges it as one.
SMALL = 64
SEQ = 0x0BADF00D
WIRE_VERSION = 2


def probe_payload(nonce, seq, incarnation, size=SMALL, cookie=0):
    head = b"RPRB" + struct.pack("!BBHIIQIIQ", WIRE_VERSION, 1, 0, nonce, seq, incarnation, 0, 0,
                                 cookie)
    return head + b"\0" * (size - len(head))


def marker_of(payload):
    """What every datagram of this exchange carries unchanged: the nonce and
    sequence (an echo rewrites the kind, incarnation and hold time)."""
    return payload[8:16]


def endpoint(path):
    """The first endpoint of a /peer-probe/endpoints document: (IPv4 of its
    GID, QPN, Q_Key)."""
    with open(path) as f:
        doc = json.load(f)
    e = doc["endpoints"][0]
    gid = ipaddress.IPv6Address(e["gid"])
    v4 = gid.ipv4_mapped
    if v4 is None:
        raise ValueError(f"{path}: GID {gid} is not IPv4-mapped")
    return str(v4), int(e["qpn"]), int(e["qkey"])


def main(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--inject", required=True, help="the hub's injection socket")
    a.add_argument("--to", required=True, help="endpoints document of the responder probed")
    a.add_argument("--to-mac", required=True, help="its MAC")
    a.add_argument("--as", dest="as_",
                   help="endpoints document of the responder the probe claims to come from")
    a.add_argument("--as-ip", help="the sender's IPv4 address instead (a third party)")
    a.add_argument("--as-qpn", type=int, default=4242)
    a.add_argument("--count", type=int, default=1, help="probes to send")
    a.add_argument("--rate", type=float, default=1000.0, help="probes a second")
    a.add_argument("--tos", type=int, default=0x6A)
    a.add_argument("--out", required=True)
    args = a.parse_args(argv)
    try:
        dst_ip, dst_qpn, qkey = endpoint(args.to)
        if args.as_ip:
            src_ip, src_qpn = str(ipaddress.IPv4Address(args.as_ip)), args.as_qpn
        else:
            src_ip, src_qpn, _ = endpoint(args.as_)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print(f"forge.py: {e}", file=sys.stderr)
        return 2
    nonce = int.from_bytes(os.urandom(4), "big")
    incarnation = int.from_bytes(os.urandom(8), "big")
    first = last = None
    frame = b""
    payload = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        start = time.monotonic()
        for i in range(args.count):
            # on schedule: probe i leaves at start + i / rate
            wait = start + i / args.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            seq = SEQ if args.count == 1 else i
            # no cookie, or a made-up one
            cookie = (0, int.from_bytes(os.urandom(8), "big"), i * 0x9E3779B97F4A7C15)[i % 3]
            payload = probe_payload(nonce, seq, incarnation, cookie=cookie & (2 ** 64 - 1))
            frame = roce_wire.ud_send(src_mac=FORGER_MAC, dst_mac=args.to_mac, src_ip=src_ip,
                                      dst_ip=dst_ip, tos=args.tos, dest_qpn=dst_qpn,
                                      src_qpn=src_qpn, qkey=qkey, payload=payload)
            try:
                s.sendto(frame, args.inject)
            except OSError as e:  # the hub's queue full: try once more
                time.sleep(0.001)
                try:
                    s.sendto(frame, args.inject)
                except OSError:
                    print(f"forge.py: probe {i} not injected: {e}", file=sys.stderr)
                    continue
            now = time.time()
            first = first or now
            last = now
    marker = marker_of(payload) if args.count == 1 else nonce.to_bytes(4, "big")
    with open(args.out, "w") as f:
        json.dump({"time": first, "end": last, "count": args.count, "rate": args.rate,
                   "marker": marker.hex(), "nonce": f"{nonce:08x}", "frame": frame.hex(),
                   "src_ip": src_ip, "src_qpn": src_qpn, "dst_ip": dst_ip, "dst_qpn": dst_qpn,
                   "qkey": qkey, "tos": args.tos, "forger_mac": FORGER_MAC}, f, indent=1)
    print(f"{args.count} forged probe(s) injected at {args.rate:g}/s: {src_ip} QPN {src_qpn} -> "
          f"{dst_ip} QPN {dst_qpn}, marker {marker.hex()}, "
          f"{(last or 0) - (first or 0):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
