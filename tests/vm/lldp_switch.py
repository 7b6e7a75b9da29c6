#!/usr/bin/env python3
"""The switch's side of LLDP for tests/vm/e2e-fleet.sh (stdlib only): the
host end of one VM's wire sends the LLDP frames a switch port of a lossless
RoCE fabric sends (tests/vm/lldp_wire.py, byte by byte), through the hub's
SOCKS/own-<port> (tests/vm/hub.py: out of that port only, as a switch
sends its own LLDP), one frame every --interval seconds, until SIGTERM.

The guest moves it on through files in --ctl, each set in turn:
  switch  from the start: leaf-p1-r0 (chassis 1c:34:da:5a:01:00) port swp1,
          PFC on priority 4, DSCP 26 -> priority 4;
  moved   on ctl/want-lldp-moved: the same switch, port ID swp2 (the port
          the cable now sits in);
  rails   on ctl/want-lldp-rails: leaf-p1-r1 (chassis 1c:34:da:5a:02:00,
          rail 1's leaf by the name pattern leaf-*-r{rail}) port swp1.
When a set starts it writes ctl/lldp-<set> (the time). At exit --out
(JSON) lists per set its fields, its frame (hex), how many were sent and
when the first and last left.

    lldp_switch.py --inject SOCKS/own-a --ctl share/ctl --out lldp-sent.json
"""

import argparse
import json
import os
import signal
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lldp_wire  # noqa: E402  (this folder)

# (set, control file that starts it, the switch port's fields)
SETS = [
    ("switch", None, dict(chassis_mac="1c:34:da:5a:01:00", port_id="swp1",
                          system_name="leaf-p1-r0", pfc_priority=4, dscp=26, app_priority=4)),
    ("moved", "want-lldp-moved", dict(chassis_mac="1c:34:da:5a:01:00", port_id="swp2",
                                      system_name="leaf-p1-r0", pfc_priority=4, dscp=26,
                                      app_priority=4)),
    ("rails", "want-lldp-rails", dict(chassis_mac="1c:34:da:5a:02:00", port_id="swp1",
                                      system_name="leaf-p1-r1", pfc_priority=4, dscp=26,
                                      app_priority=4)),
]


def main(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--inject", required=True, help="the hub's SOCKS/own-<port>")
    a.add_argument("--ctl", required=True, help="the control folder the guest writes")
    a.add_argument("--interval", type=float, default=1.0)
    a.add_argument("--out", required=True)
    args = a.parse_args(argv)
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))
    log = {name: dict(fields, frame=lldp_wire.switch_frame(**fields).hex(), sent=0,
                      first=None, last=None, errors=0)
           for name, _, fields in SETS}
    current, started = 0, set()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        while not stopping:
            while current + 1 < len(SETS) and os.path.exists(
                    os.path.join(args.ctl, SETS[current + 1][1])):
                current += 1
            name = SETS[current][0]
            entry = log[name]
            if name not in started:
                started.add(name)
                with open(os.path.join(args.ctl, f"lldp-{name}"), "w") as f:
                    f.write(f"{time.time():.3f}\n")
            try:
                s.sendto(bytes.fromhex(entry["frame"]), args.inject)
            except OSError:  # the hub has gone, or its queue is full
                entry["errors"] += 1
            else:
                now = time.time()
                entry["sent"] += 1
                entry["first"] = entry["first"] or now
                entry["last"] = now
            # the wait, cut short by a set's control file or a stop
            end = time.monotonic() + args.interval
            while not stopping and time.monotonic() < end:
                nxt = SETS[current + 1][1] if current + 1 < len(SETS) else None
                if nxt and os.path.exists(os.path.join(args.ctl, nxt)):
                    break
                time.sleep(0.1)
    finally:
        s.close()
        with open(args.out, "w") as f:
            json.dump(log, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
