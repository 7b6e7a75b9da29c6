#!/usr/bin/env python3
"""A forged peer probe for tests/vm/e2e-fleet.sh (stdlib only): one RoCE v2
UD datagram, built byte by byte (tests/vm/roce_wire.py), sent to the
responder of one exporter (--to: its /peer-probe/endpoints document) in
the name of another's responder (--as: GID and QPN from its document), with
a nonce neither owns, and injected into the hub's segment (tests/vm/hub.py,
SOCKS/inject). A responder that answers echoes, or answers without a bound,
starts a loop between the two; one that tells a probe from an echo and
bounds its answers sends at most one echo.

    forge.py --inject SOCKS/inject --to share/a/own-endpoints-1.json \\
        --to-mac 52:54:00:00:00:01 --as share/b/own-endpoints-1.json --out forged.json

Writes --out (JSON): the marker (the payload's nonce and sequence, hex: an echo keeps them), the time
of injection and the frame's fields, for check_fleet.py to count the
datagrams that carry the marker in the capture. Exit status 0 when sent, 2
when an endpoint document is unusable.
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
# wire version 1, kind 1 (probe), two zero bytes, nonce, sequence,
# incarnation, hold time 0, four zero bytes (big-endian), then zero padding
# to the small size. A valid probe, so that the responder admits it as one.
SMALL = 64
SEQ = 0x0BADF00D


def probe_payload(nonce, seq, incarnation, size=SMALL):
    head = b"RPRB" + struct.pack("!BBHIIQII", 1, 1, 0, nonce, seq, incarnation, 0, 0)
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
    a.add_argument("--as", dest="as_", required=True,
                   help="endpoints document of the responder the probe claims to come from")
    a.add_argument("--tos", type=int, default=0x6A)
    a.add_argument("--out", required=True)
    args = a.parse_args(argv)
    try:
        dst_ip, dst_qpn, qkey = endpoint(args.to)
        src_ip, src_qpn, _ = endpoint(args.as_)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print(f"forge.py: {e}", file=sys.stderr)
        return 2
    nonce = int.from_bytes(os.urandom(4), "big")
    payload = probe_payload(nonce, SEQ, int.from_bytes(os.urandom(8), "big"))
    frame = roce_wire.ud_send(src_mac=FORGER_MAC, dst_mac=args.to_mac, src_ip=src_ip,
                              dst_ip=dst_ip, tos=args.tos, dest_qpn=dst_qpn, src_qpn=src_qpn,
                              qkey=qkey, payload=payload)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(frame, args.inject)
    sent = time.time()
    with open(args.out, "w") as f:
        json.dump({"time": sent, "marker": marker_of(payload).hex(), "frame": frame.hex(),
                   "src_ip": src_ip, "src_qpn": src_qpn, "dst_ip": dst_ip, "dst_qpn": dst_qpn,
                   "qkey": qkey, "tos": args.tos, "forger_mac": FORGER_MAC}, f, indent=1)
    print(f"forged probe injected: {src_ip} QPN {src_qpn} -> {dst_ip} QPN {dst_qpn}, "
          f"marker {marker_of(payload).hex()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
