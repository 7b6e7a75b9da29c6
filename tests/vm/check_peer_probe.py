#!/usr/bin/env python3
"""Host side of tests/vm/e2e-peer-probe.sh: judges what
guest/e2e-peer-probe.sh wrote (three exporters on the VM's one rxe port:
A and B peers of each other, C a stranger to A; B stopped and restarted).

Prints one PASS/FAIL line per check, then the figures, and ends with
"N passed, M failed"; exit status 1 when anything failed, 2 on usage.
Stdlib only.
"""
import json
import sys

sys.dont_write_bytecode = True
from checks import check, counts, guest_dir, read  # noqa: E402
from check_probe import all_of, get, parse_prom  # noqa: E402

LAB = dict(device="rxe0", port="1")


def endpoints(d, name):
    try:
        return json.loads(read(d, name) or "").get("endpoints", [])
    except ValueError:
        return []


def port_counts(s):
    return {size: (get(s, "roce_peer_probe_sent_total", size=size, **LAB) or 0,
                   get(s, "roce_peer_probe_answered_total", size=size, **LAB) or 0)
            for size in ("small", "large")}


def main():
    d = guest_dir()
    if d is None:
        return 2

    ea, eb, eb2 = (endpoints(d, f) for f in
                   ("A-run.endpoints.json", "B-run.endpoints.json", "B-restarted.endpoints.json"))
    # the restarted exporter's responder may open after its first document
    # was read (an empty list): the later one then says its QPN
    eb2 = eb2 or endpoints(d, "B-recovered.endpoints.json")
    ok = len(ea) == 1 and len(eb) == 1 and ea[0]["device"] == "rxe0" and ea[0]["qkey"] == 0x52504d31
    check("each exporter publishes one UD responder on rxe0 with the probes' Q_Key", ok, f"{ea} {eb}")
    if ok:
        check("A and B have their own QPN on the same GID", ea[0]["qpn"] != eb[0]["qpn"]
              and ea[0]["gid"] == eb[0]["gid"] and ea[0]["gid"].startswith("::ffff:"),
              f"A {ea[0]['gid']} qpn {ea[0]['qpn']}, B qpn {eb[0]['qpn']}")
        check("the endpoint carries the port's IPv4 subnet (rail key)", bool(ea[0].get("subnet")),
              f"subnet {ea[0].get('subnet')}, mtu {ea[0]['mtu']}")
    check("B restarted has a new QPN", len(eb2) == 1 and eb and eb2[0]["qpn"] != eb[0]["qpn"],
          f"{eb and eb[0]['qpn']} -> {eb2 and eb2[0]['qpn']}")

    run_a, run_b, run_c = (parse_prom(read(d, f)) for f in ("A-run.prom", "B-run.prom", "C-run.prom"))
    for name, s in (("A", run_a), ("B", run_b)):
        c = port_counts(s)
        for size in ("small", "large"):
            sent, ans = c[size]
            check(f"{name} -> peer: {size} probes answered through rxe (>= 90 %, >= 20 sent)",
                  sent >= 20 and ans >= 0.9 * sent, f"{ans:.0f} of {sent:.0f}")
        n = get(s, "roce_peer_probe_rtt_seconds_count", **LAB) or 0
        tot = get(s, "roce_peer_probe_rtt_seconds_sum", **LAB) or 0
        mean = tot / n if n else None
        check(f"{name}: RTT plausible (1 us .. 100 ms mean)", mean is not None and 1e-6 <= mean <= 0.1,
              f"{n:.0f} answers, mean {mean * 1e6:.0f} us" if mean else "no answer")
        check(f"{name}: its responder answered the peer's probes",
              (get(s, "roce_peer_probe_responder_answered_total", **LAB) or 0) >= 20,
              f"{get(s, 'roce_peer_probe_responder_answered_total', **LAB)}")
    c = port_counts(run_c)
    # A does not list C: it never answers C (not even to say so: nothing
    # goes to an address outside its admitted set) and counts C's probes
    # as not admitted; C's probes are lost (or pending while A's document
    # says it is still learning its peers).
    check("C (not A's peer): its probes to A are never answered",
          c["small"][0] >= 10 and c["small"][1] == 0,
          f"{c['small'][1]:.0f} answered of {c['small'][0]:.0f} judged")
    refused = get(run_a, "roce_peer_probe_responder_refused_total", reason="not_admitted", **LAB) or 0
    challenged = get(run_a, "roce_peer_probe_responder_challenged_total", **LAB) or 0
    check("A counts C's probes as not admitted and answers none of them",
          refused >= 10, f"{refused:.0f} not admitted; {challenged:.0f} challenges in all (B's first probes)")

    down, rec = parse_prom(read(d, "A-bdown.prom")), parse_prom(read(d, "A-recovered.prom"))
    cr, cd, cc = port_counts(run_a), port_counts(down), port_counts(rec)
    lost_down = (cd["small"][0] - cd["small"][1]) - (cr["small"][0] - cr["small"][1])
    check("B stopped: A loses its small probes", lost_down >= 5, f"{lost_down:.0f} more lost")
    lost_rec = (cc["small"][0] - cc["small"][1]) - (cd["small"][0] - cd["small"][1])
    ans_rec = cc["small"][1] - cd["small"][1]
    check("B restarted with a new QPN: A answered again without a restart", ans_rec >= 20,
          f"{ans_rec:.0f} answered, {lost_rec:.0f} lost since")
    check("no endpoint fetch refused by status or parse", not any(
        l.get("reason") in ("status", "parse", "tls", "unsupported") and v > 0
        for l, v in all_of(rec, "roce_peer_probe_endpoint_fetch_errors_total")), "")

    import re
    for name, s in (("A", run_a), ("B", run_b)):
        buckets = [(float(l["le"]), v) for l, v in all_of(s, "roce_peer_probe_rtt_seconds_bucket", **LAB)
                   if l.get("le") != "+Inf"]
        n = get(s, "roce_peer_probe_rtt_seconds_count", **LAB) or 0
        median = next((le for le, v in sorted(buckets) if n and v >= n / 2), None)
        base = get(s, "roce_peer_probe_baseline_rtt_seconds", **LAB)
        print(f"FIGURE {name}: {n:.0f} answers, median bucket <= {median} s, baseline {base} s")
    pp = read(d, "ud-pingpong.txt") or ""
    m = re.search(r'([\d.]+) usec/iter', pp)
    print(f"FIGURE ibv_ud_pingpong 64 B: {m.group(1)} usec/iter" if m
          else "FIGURE ibv_ud_pingpong: no result")

    passed, failed = counts()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
