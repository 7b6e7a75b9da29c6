#!/usr/bin/env python3
"""The emulated L2 segment of the three-VM test (tests/vm/e2e-fleet.sh): a
learning Ethernet switch on the host between qemu `dgram` netdevs over unix
datagram sockets, with a capture of the segment and an injection point
(python3, stdlib only; no tap device, no host IP traffic).

    hub.py --dir SOCKS --ports a,b,c --pcap wire.pcap [--stats stats.json]

For each port P it binds SOCKS/hub-P; the VM of port P binds SOCKS/P and
sends there (`run.sh --wire SOCKS/P:SOCKS/hub-P`). A frame from a port is
written to the pcap once, as it enters, then sent to the port its
destination MAC was learned on, or to every other port (broadcast,
multicast, unknown). SOCKS/inject takes frames from the host (tests/vm/
forge.py): captured and forwarded like any other, never learned from, so a
forged source MAC moves no entry. SOCKS/own-P takes the frames the switch
itself sends out of port P (its LLDP, tests/vm/lldp_switch.py): captured
and sent to port P only. Frames to the IEEE 802.1Q reserved group
addresses 01:80:c2:00:00:00-0f (LLDP's nearest-bridge address among them)
end at the switch, as a bridge filters them: captured, never forwarded. A
frame a VM cannot take yet (its socket not bound: still booting) is
dropped, as on an unplugged cable.

Runs until SIGTERM or SIGINT, then flushes the pcap and writes the
counters (frames in and out per port, drops, injected) to --stats.
"""

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time

MAX_FRAME = 65536  # a datagram is one Ethernet frame, without FCS
# pcap: magic, version 2.4, UTC offset, accuracy, snaplen, LINKTYPE_ETHERNET
PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, MAX_FRAME, 1)
INJECT = "inject"
OWN = "own-"  # SOCKS/own-<port>: the switch's own frames out of <port>
RESERVED = bytes.fromhex("0180c20000")  # 01:80:c2:00:00:0X, never forwarded


class Hub:
    def __init__(self, folder, ports, pcap):
        self.folder = folder
        self.socks = {}  # port -> socket bound at SOCKS/hub-<port>
        self.peer = {}  # port -> the VM's socket path
        for p in ports:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            path = os.path.join(folder, f"hub-{p}")
            if os.path.exists(path):
                os.unlink(path)
            s.bind(path)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            self.socks[p] = s
            self.peer[p] = os.path.join(folder, p)
        inj = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path = os.path.join(folder, INJECT)
        if os.path.exists(path):
            os.unlink(path)
        inj.bind(path)
        self.socks[INJECT] = inj
        for p in ports:
            own = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            path = os.path.join(folder, OWN + p)
            if os.path.exists(path):
                os.unlink(path)
            own.bind(path)
            self.socks[OWN + p] = own
        self.by_fd = {s.fileno(): p for p, s in self.socks.items()}
        self.mac = {}  # MAC -> port
        self.pcap = open(pcap, "wb")
        self.pcap.write(PCAP_HEADER)
        self.stats = {"in": {p: 0 for p in self.socks}, "out": {p: 0 for p in ports},
                      "dropped": {p: 0 for p in ports}, "flooded": 0, "filtered": 0}

    def capture(self, frame):
        now = time.time()
        sec = int(now)
        self.pcap.write(struct.pack("<IIII", sec, int((now - sec) * 1e6), len(frame),
                                    len(frame)))
        self.pcap.write(frame)

    def send(self, port, frame):
        try:
            self.socks[port].sendto(frame, self.peer[port])
            self.stats["out"][port] += 1
        except OSError:  # the VM has not bound its socket, or its queue is full
            self.stats["dropped"][port] += 1

    def forward(self, src, frame):
        if len(frame) < 14:
            return
        self.capture(frame)
        if src.startswith(OWN):
            self.send(src[len(OWN):], frame)
            return
        dst, smac = frame[0:6], frame[6:12]
        if dst[:5] == RESERVED and dst[5] <= 0x0F:
            self.stats["filtered"] += 1
            return
        if src in self.peer and not smac[0] & 1:
            self.mac[smac] = src
        out = self.mac.get(dst) if not dst[0] & 1 else None
        if out is not None:
            if out != src:
                self.send(out, frame)
            return
        self.stats["flooded"] += 1
        for p in self.peer:
            if p != src:
                self.send(p, frame)

    def run(self, stop):
        poll = select.poll()
        for s in self.socks.values():
            poll.register(s, select.POLLIN)
        while not stop():
            for fd, _ in poll.poll(200):
                src = self.by_fd[fd]
                try:
                    frame = self.socks[src].recv(MAX_FRAME)
                except BlockingIOError:
                    continue
                self.stats["in"][src] += 1
                self.forward(src, frame)
            self.pcap.flush()

    def close(self):
        self.pcap.close()
        for p, s in self.socks.items():
            s.close()
            name = p if p == INJECT or p.startswith(OWN) else f"hub-{p}"
            try:
                os.unlink(os.path.join(self.folder, name))
            except OSError:
                pass


def main(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--dir", required=True, help="folder of the sockets")
    a.add_argument("--ports", required=True, help="comma separated port names (the VMs)")
    a.add_argument("--pcap", required=True)
    a.add_argument("--stats", help="where the counters go at exit (JSON)")
    args = a.parse_args(argv)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    hub = Hub(args.dir, [p for p in args.ports.split(",") if p], args.pcap)
    try:
        hub.run(lambda: bool(stopping))
    finally:
        hub.close()
        if args.stats:
            with open(args.stats, "w") as f:
                json.dump(hub.stats, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
