#!/usr/bin/env python3
"""Host side of the LLDP walk of tests/vm/e2e-fleet.sh: the host played the
switch on A's wire (tests/vm/lldp_switch.py, frames from lldp_wire.py) and
A's exporter captured it (lldp.mode capture, as root in the guest). Judges
what the guests wrote (DIR/share/{a,b,c}: the scrapes and /findings of
each LLDP state, lldp-<state>.prom and lldp-<state>-findings.json, and the
phase scrapes of B and C), the frames the sender logged
(DIR/lldp-sent.json) and the hub's capture (DIR/wire.pcap):

  the wire      every LLDP frame on the segment is one the host sent, to the
                nearest-bridge address, decoding (lldp_wire.parse) to the
                fields of its set; each set was on the wire;
  switch        A reports the neighbour (chassis, port, system name, port
                description, management address) of the first set, the
                switch's PFC bitmap (priority 4) and APP (DSCP 26 -> 4) and
                ETS as the frame carries them, no rejected frame, and
                switch_pfc_mismatch (critical: A expects priority 3, its NIC
                has no DCB netlink) naming the switch port; not yet
                lldp_neighbor_changed, and no lldp_rail_mismatch (leaf-p1-r0
                is rail 0's leaf by expect.rails, and rxe0 is rail 0);
  moved         after the port ID changed: the neighbour swp2 and
                lldp_neighbor_changed (warning) naming swp1 and swp2; still
                no lldp_rail_mismatch;
  rails         after a switch of rail 1 answered: lldp_rail_mismatch
                (critical) naming rxe0, leaf-p1-r1 (rail 1's by the pattern)
                and the expected pattern;
  B and C       capture and hear no neighbour (the switch's LLDP leaves A's
                port only, and a bridge forwards no LLDP).

Run by check_fleet.py with its own checks (one tally); alone:

    check_lldp.py --dir target/vm-e2e-fleet

prints one PASS/FAIL line per check and "N passed, M failed"; exit status
1 when anything failed.
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from checks import all_of, check, counts, findings, get, load_json, parse_prom, read  # noqa: E402
import lldp_wire  # noqa: E402
import roce_wire  # noqa: E402

DEV, PORT, NETDEV = "rxe0", "1", "eth0"
STATES = ("switch", "moved", "rails")
EXPECTED_PRIORITY = 3  # expect.pfc_priority in guest/e2e-fleet.sh
PATTERN = "leaf-*-r{rail}"  # expect.rails.switch_pattern there


def of_rule(fs, rule):
    return [f for f in fs if f.get("rule") == rule]


def on_rxe0(f):
    s = f.get("subject") or {}
    return s.get("device") == DEV and str(s.get("port")) == PORT and s.get("netdev") == NETDEV


def brief(fs):
    return "; ".join(f"{f.get('rule')} ({f.get('severity')}): {f.get('finding')} | "
                     f"{f.get('evidence')}" for f in fs) or "none"


def check_wire(out, sent):
    try:
        frames = roce_wire.read_pcap(os.path.join(out, "wire.pcap"))
    except (OSError, ValueError) as e:
        check("lldp wire: the hub's wire.pcap", False, str(e))
        return
    lldp = [(t, f) for t, f in frames if len(f) >= 14 and f[12:14] == b"\x88\xcc"]
    by_frame = {bytes.fromhex(v["frame"]): k for k, v in sent.items() if v.get("frame")}
    foreign = [f for _, f in lldp if f not in by_frame]
    check("lldp wire: every LLDP frame on the segment is one the host's switch sent",
          lldp and not foreign, f"{len(lldp)} LLDP frames, {len(foreign)} others")
    for name, entry in sent.items():
        frame = bytes.fromhex(entry.get("frame", ""))
        seen = sum(1 for _, f in lldp if f == frame)
        p = lldp_wire.parse(frame) or {}
        want = {"dst_mac": "01:80:c2:00:00:0e", "chassis_id": entry.get("chassis_mac"),
                "port_id": entry.get("port_id"), "system_name": entry.get("system_name"),
                "ttl": 120, "pfc_enabled": 1 << entry.get("pfc_priority", 0),
                "app": [(lldp_wire.SEL_DSCP, entry.get("dscp"), entry.get("app_priority"))]}
        got = {k: p.get(k) for k in want}
        check(f"lldp wire: set {name} on the wire ({seen} of {entry.get('sent')} sent), "
              f"decoding to its fields", seen >= 1 and got == want,
              f"decoded {got}" + ("" if got == want else f", expected {want}"))


def check_switch(share, sent):
    s = parse_prom(read(os.path.join(share, "a"), "lldp-switch.prom"))
    fs = findings(share, "a", "lldp-switch")
    first = sent.get("switch", {})
    port = dict(device=DEV, port=PORT, netdev=NETDEV)
    info = all_of(s, "roce_lldp_neighbor_info", **port)
    want = {"chassis_id": first.get("chassis_mac"), "port_id": "swp1",
            "system_name": "leaf-p1-r0", "port_description": "leaf-p1-r0 swp1",
            "management_address": "10.0.0.11"}
    got = {k: info[0][0].get(k) for k in want} if len(info) == 1 else None
    check("switch: a's exporter reports the neighbour of eth0 (rxe0 port 1) as the frame "
          "names it", got == want and info[0][1] == 1, f"{info}")
    check("switch: the lldp collector runs (capture as root) and took frames, none rejected",
          get(s, "roce_collector_success", collector="lldp") == 1
          and (get(s, "roce_lldp_frames_total", **port) or 0) >= 1
          and get(s, "roce_lldp_frames_rejected_total", **port) == 0
          and get(s, "roce_lldp_neighbors", **port) == 1
          and len(info) == 1 and info[0][0].get("ttl_seconds") == "120",
          f"success {get(s, 'roce_collector_success', collector='lldp')}, frames "
          f"{get(s, 'roce_lldp_frames_total', **port)}, rejected "
          f"{get(s, 'roce_lldp_frames_rejected_total', **port)}, neighbours "
          f"{get(s, 'roce_lldp_neighbors', **port)}, TTL "
          f"{info[0][0].get('ttl_seconds') if len(info) == 1 else info}")
    qos = [l for l, _ in all_of(s, "roce_lldp_switch_qos_info", **port)]
    want = {"pfc": "4", "pfc_willing": "0", "dscp_priority": "26=4",
            "prio_tc": "0,0,0,0,1,0,0,0", "tc_bw": "50,50,0,0,0,0,0,0"}
    check("switch: the switch's PFC (priority 4, not willing), APP (DSCP 26 -> 4) "
          "and ETS (priority 4 alone in TC 1, 50/50 ETS) as its TLVs carry them",
          len(qos) == 1 and all(qos[0].get(k) == v for k, v in want.items())
          and qos[0].get("tc_tsa", "").startswith("ets,ets,"),
          f"roce_lldp_switch_qos_info {qos}")
    m = of_rule(fs, "switch_pfc_mismatch")
    check("switch: switch_pfc_mismatch (critical) on rxe0: the switch pauses 4, the host "
          f"expects {EXPECTED_PRIORITY}, seen through the switch port's LLDP TLVs",
          len(m) == 1 and m[0].get("severity") == "critical" and on_rxe0(m[0])
          and "LLDP DCBX TLVs of leaf-p1-r0 port swp1" in m[0].get("evidence", "")
          and "PFC enabled priorities 4 (0x10)" in m[0].get("evidence", "")
          and f"expected RoCE priority {EXPECTED_PRIORITY}" in m[0].get("evidence", ""),
          brief(m))
    others = of_rule(fs, "lldp_neighbor_changed") + of_rule(fs, "lldp_rail_mismatch")
    check("switch: no lldp_neighbor_changed yet, and no lldp_rail_mismatch (leaf-p1-r0 is "
          "rail 0's leaf, rxe0 rail 0)", not others, brief(others))


def check_moved(share):
    s = parse_prom(read(os.path.join(share, "a"), "lldp-moved.prom"))
    fs = findings(share, "a", "lldp-moved")
    info = all_of(s, "roce_lldp_neighbor_info", device=DEV, port=PORT, netdev=NETDEV)
    check("moved: the current neighbour is the new port ID, swp2, of the same switch",
          len(info) == 1 and info[0][0].get("port_id") == "swp2"
          and info[0][0].get("system_name") == "leaf-p1-r0", f"{info}")
    m = of_rule(fs, "lldp_neighbor_changed")
    text = " ".join(m[0].get(k, "") for k in ("finding", "evidence")) if m else ""
    check("moved: lldp_neighbor_changed (warning) on rxe0 naming the old and the new port",
          len(m) == 1 and m[0].get("severity") == "warning" and on_rxe0(m[0])
          and "was leaf-p1-r0 port swp1" in text and "now leaf-p1-r0 port swp2" in text,
          brief(m))
    r = of_rule(fs, "lldp_rail_mismatch")
    check("moved: still no lldp_rail_mismatch (the same rail's leaf)", not r, brief(r))


def check_rails(share):
    s = parse_prom(read(os.path.join(share, "a"), "lldp-rails.prom"))
    fs = findings(share, "a", "lldp-rails")
    info = all_of(s, "roce_lldp_neighbor_info", device=DEV, port=PORT, netdev=NETDEV)
    check("rails: the current neighbour is leaf-p1-r1 (rail 1's leaf)",
          len(info) == 1 and info[0][0].get("system_name") == "leaf-p1-r1", f"{info}")
    m = of_rule(fs, "lldp_rail_mismatch")
    check("rails: lldp_rail_mismatch (critical) on rxe0 naming the switch, its rail by the "
          "pattern and the expected pattern",
          len(m) == 1 and m[0].get("severity") == "critical" and on_rxe0(m[0])
          and "(rail 0) is cabled to leaf-p1-r1 port swp1, the switch of rail 1 by "
          "expect.rails" in m[0].get("finding", "")
          and "expected leaf-*-r0 (expect.rails)" in m[0].get("evidence", ""),
          brief(m))


def check_others(share):
    for r in ("b", "c"):
        s = parse_prom(read(os.path.join(share, r), "up.prom"))
        n = get(s, "roce_lldp_neighbors", device=DEV, port=PORT, netdev=NETDEV)
        info = all_of(s, "roce_lldp_neighbor_info")
        check(f"{r}: captures (lldp collector success) and hears no neighbour",
              get(s, "roce_collector_success", collector="lldp") == 1 and n == 0 and not info,
              f"success {get(s, 'roce_collector_success', collector='lldp')}, neighbours {n}, "
              f"info {info}")


def check_lldp(out):
    share = os.path.join(out, "share")
    sent = load_json(os.path.join(out, "lldp-sent.json"))
    if not isinstance(sent, dict):
        check("lldp: the host's switch logged what it sent (lldp-sent.json)", False)
        return
    steps = read(os.path.join(share, "a"), "steps.txt") or ""
    for state in STATES:
        check(f"lldp {state}: a saw the state and scraped it",
              f"lldp {state}: seen" in steps, f"{sent.get(state, {}).get('sent')} frames sent")
    check_wire(out, sent)
    check_switch(share, sent)
    check_moved(share)
    check_rails(share)
    check_others(share)


def main(argv):
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--dir", required=True, help="E2E_OUT of e2e-fleet.sh")
    args = a.parse_args(argv)
    check_lldp(args.dir)
    passed, failed = counts()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
