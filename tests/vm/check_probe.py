#!/usr/bin/env python3
"""Host side of tests/vm/e2e-probe.sh: judges what guest/e2e-probe.sh wrote.

Prints one PASS/FAIL line per check, then the benchmark figures, and ends
with "N passed, M failed"; exit status 1 when anything failed, 2 on usage.
Stdlib only.
"""
import math
import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
from checks import all_of, check, counts, get, guest_dir, parse_prom, read  # noqa: E402  (this folder's shared checker parts)

def parse_stat(text):
    """`rdma statistic show link rxe0/1` -> {counter: value}"""
    words = (text or "").split()
    out = {}
    for k, v in zip(words, words[1:]):
        if v.isdigit():
            out[k] = int(v)
    return out


def parse_res(text):
    """`rdma resource show` -> {device: {pd, cq, qp, mr, ...}}"""
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r'^\d+:\s+(\S+):\s+(.*)$', line.strip())
        if not m:
            continue
        words = m.group(2).split()
        out[m.group(1)] = {k: int(v) for k, v in zip(words[::2], words[1::2]) if v.isdigit()}
    return out


def main():
    d = guest_dir()
    if d is None:
        return 2
    env = dict(l.split("=", 1) for l in (read(d, "env.txt") or "").splitlines() if "=" in l)
    gid = env.get("SR_GID0", "1")
    dev, port = "rxe0", "1"
    lab = dict(device=dev, port=port)

    # ---- good phase
    last = parse_prom(read(d, "good-last.prom"))
    req = get(last, "roce_probe_requests_total", **lab)
    fails = sum(v for _, v in all_of(last, "roce_probe_failures_total", **lab))
    count = get(last, "roce_probe_rtt_seconds_count", device=dev, port=port, gid_index=gid, op="write_send")
    rsum = get(last, "roce_probe_rtt_seconds_sum", device=dev, port=port, gid_index=gid, op="write_send")
    steps = read(d, "steps.txt") or ""
    m = re.search(r'good_seconds=(\d+)', steps)
    secs = int(m.group(1)) if m else 0
    check("probes ran for at least 30 s", secs >= 30, f"{secs} s")
    check("at least 25 probe rounds in the good phase", req is not None and req >= 25, f"requests {req}")
    ok = (req or 0) - fails
    check("probe rounds succeed (>= 90 %)", req and ok >= 0.9 * req,
          f"{ok:.0f} of {req} ok; failures {[(l.get('reason'), v) for l, v in all_of(last, 'roce_probe_failures_total', **lab)]}")
    check("histogram count = successful rounds, labelled with the auto GID index",
          count is not None and count == ok, f"count {count}, gid_index {gid}")
    buckets = sorted(((float(l["le"]) if l["le"] != "+Inf" else math.inf), v)
                     for l, v in all_of(last, "roce_probe_rtt_seconds_bucket", device=dev, port=port))
    mono = all(b[1] <= c[1] for b, c in zip(buckets, buckets[1:]))
    check("histogram buckets 1 us .. 100 ms, cumulative, +Inf = count",
          len(buckets) == 17 and buckets[0][0] == 1e-6 and buckets[-2][0] == 0.1 and mono
          and buckets[-1][1] == count, f"{len(buckets)} buckets")
    mean = (rsum / count) if count else None
    check("mean RTT plausible for Soft-RoCE (2 us .. 100 ms)",
          mean is not None and 2e-6 <= mean <= 0.1, f"mean {mean * 1e6:.1f} us" if mean is not None else "no RTT")
    p50 = next((b for b, v in buckets if count and v >= count / 2), None)
    check("probe success gauge 1 and last success recent",
          get(last, "roce_probe_success", **lab) == 1
          and abs((get(last, "roce_probe_last_success_timestamp_seconds", **lab) or 0)
                  - (get(last, "roce_sample_timestamp_seconds") or 1e18)) < 5)
    s0, s1 = parse_stat(read(d, "stat-0.txt")), parse_stat(read(d, "stat-1.txt"))
    dsends = s1.get("rdma_sends", 0) - s0.get("rdma_sends", 0)
    drecvs = s1.get("rdma_recvs", 0) - s0.get("rdma_recvs", 0)
    dpkts = s1.get("sent_pkts", 0) - s0.get("sent_pkts", 0)
    # one SEND per round; rounds that ran between the last scrape and the
    # exporter's exit are in the kernel's count but not in the scrape
    check("rxe rdma_sends moved by the probes' SENDs (one per round)",
          req is not None and ok <= dsends <= req + 3, f"delta {dsends}, rounds ok {ok:.0f} of {req}")
    check("rxe rdma_recvs moved by the responder's receives",
          req is not None and ok <= drecvs <= req + 3, f"delta {drecvs}")
    check("rxe sent_pkts moved by at least WRITE + SEND per round",
          dpkts >= 2 * ok, f"delta {dpkts} for {ok:.0f} rounds ({dpkts / ok if ok else 0:.2f} per round)")

    # ---- no leak
    base = parse_res(read(d, "res-0.txt")).get(dev)
    early = parse_res(read(d, "res-good-early.txt")).get(dev)
    names = sorted(n for n in os.listdir(d) if re.match(r'res-good-\d+\.txt$', n))
    series = [parse_res(read(d, n)).get(dev) for n in names]
    keys = ("pd", "cq", "qp", "mr")
    pick = lambda r: tuple((r or {}).get(k) for k in keys)
    check("resources held while probing: one PD, CQ, MR and two QPs more than before",
          base and early and pick(early) == tuple(b + i for b, i in zip(pick(base), (1, 1, 2, 1))),
          f"before {pick(base)}, probing {pick(early)} (pd, cq, qp, mr)")
    check(f"QP/MR/CQ/PD counts flat over {len(series)} reads during the good phase",
          len(series) >= 5 and all(pick(s) == pick(early) for s in series),
          " ".join(str(pick(s)) for s in series))
    check("everything freed when the exporter stops",
          pick(parse_res(read(d, "res-good-stopped.txt")).get(dev)) == pick(base))

    # ---- bad GID index
    bad = parse_prom(read(d, "badgid.prom"))
    bad2 = parse_prom(read(d, "badgid-2.prom"))
    bfails = all_of(bad2 or bad, "roce_probe_failures_total", **lab)
    check("a GID index that does not exist: failures with reason gid_index",
          any(l.get("reason") == "gid_index" and v >= 3 for l, v in bfails)
          and get(bad2 or bad, "roce_probe_success", **lab) == 0, f"{[(l.get('reason'), v) for l, v in bfails]}")
    check("bad GID index: no RTT observed",
          get(bad2 or bad, "roce_probe_rtt_seconds_count", device=dev, port=port, gid_index="77", op="write_send") == 0)
    t_a, t_b = get(bad, "roce_sample_timestamp_seconds"), get(bad2, "roce_sample_timestamp_seconds")
    check("bad GID index: sampling continues (rdma collector ok, samples advance)",
          get(bad2, "roce_collector_success", collector="rdma") == 1 and t_a and t_b and t_b > t_a,
          f"sample {t_a} -> {t_b}")

    # ---- unprivileged (docs/security.md)
    un = parse_prom(read(d, "unpriv-node.prom"))
    check("as nobody: RDMA netlink statistics need no privilege (hw counters via netlink, rdma collector ok)",
          get(un, "roce_port_info", device=dev, port=port, hw_counters="netlink") == 1
          and get(un, "roce_collector_success", collector="rdma") == 1)
    check("as nobody: the netdev source (ethtool ioctl) works", get(un, "roce_collector_success", collector="netdev") == 1)
    def failing(run, reason, why, names, pattern):
        """The probe of run `run` failed with `reason`, and its log line
        `names` what (matches `pattern`)."""
        fails = all_of(parse_prom(read(d, f"{run}.prom")), "roce_probe_failures_total", **lab)
        log = read(d, f"{run}.log") or ""
        check(f"as nobody, {why}: failures with reason {reason}",
              any(l.get("reason") == reason and v >= 1 for l, v in fails),
              f"{[(l.get('reason'), v) for l, v in fails]}")
        check(f"{reason} failure names {names}", re.search(pattern, log) is not None,
              next((l[:300] for l in log.splitlines() if "probe failing" in l),
                   "no 'probe failing' line"))

    failing("unpriv-node", "device_open", "uverbs node 0600", "the node and the permission",
            r'probe failing.*/dev/infiniband/uverbs\d.*Permission denied.*need read-write access')
    failing("unpriv-memlock", "memlock", "memlock limit 0", "the limit and its value",
            r'probe failing.*RLIMIT_MEMLOCK.*\(it is 0 KiB for this process\)')

    # ---- port down
    before = parse_prom(read(d, "portdown-before.prom"))
    down = parse_prom(read(d, "portdown-down.prom"))
    up = parse_prom(read(d, "portdown-up.prom"))
    dfails = all_of(down, "roce_probe_failures_total", **lab)
    check("eth0 down: the port really went down", "DOWN" in (read(d, "state-down.txt") or ""),
          (read(d, "state-down.txt") or "").strip())
    check("eth0 down: failures with reason port_down, success gauge 0",
          any(l.get("reason") == "port_down" and v >= 2 for l, v in dfails)
          and get(down, "roce_probe_success", **lab) == 0, f"{[(l.get('reason'), v) for l, v in dfails]}")
    tb, td = get(before, "roce_sample_timestamp_seconds"), get(down, "roce_sample_timestamp_seconds")
    check("eth0 down: sampling continues (rdma collector ok, samples advance, roce_port_up 0)",
          get(down, "roce_collector_success", collector="rdma") == 1 and tb and td and td > tb
          and get(down, "roce_port_up", **lab) == 0, f"sample {tb} -> {td}")
    check("eth0 up again: probes recover", get(up, "roce_probe_success", **lab) == 1,
          f"rtt count {get(up, 'roce_probe_rtt_seconds_count', device=dev, port=port, gid_index=gid, op='write_send')}")
    check("after the failures: resources recreated once, counts as before (no leak)",
          pick(parse_res(read(d, "res-portdown-up.txt")).get(dev)) == pick(early)
          and pick(parse_res(read(d, "res-portdown-stopped.txt")).get(dev)) == pick(base),
          f"up {pick(parse_res(read(d, 'res-portdown-up.txt')).get(dev))}")

    # ---- promtool
    promtool = shutil.which("promtool")
    if promtool and read(d, "good-last.prom"):
        p = subprocess.run([promtool, "check", "metrics"], input=read(d, "good-last.prom"),
                           capture_output=True, text=True)
        check("promtool check metrics (probe families included)", p.returncode == 0,
              (p.stdout + p.stderr).strip()[:300])

    # ---- benchmark figures (reported, not judged: emulated CPU)
    bench = read(d, "bench.txt") or ""
    fig = {}
    for mode, ticks, secs_, rss in re.findall(r'bench\.(\w+) ticks=(\d+) seconds=(\d+) rss_kib=(\d+)', bench):
        hz = int(env.get("CLK_TCK", "100"))
        fig[mode] = (int(ticks) / hz / max(int(secs_), 1), int(rss))
    if "on" in fig and "off" in fig:
        on, off = fig["on"], fig["off"]
        print(f"BENCH cpu share: probes off {off[0] * 100:.2f} %, on {on[0] * 100:.2f} % "
              f"(ratio {on[0] / off[0] if off[0] else float('inf'):.2f}); RSS off {off[1]} KiB, on {on[1]} KiB "
              f"(ratio {on[1] / off[1]:.2f})")
    lat = read(d, "ib_send_lat.txt") or ""
    m = re.search(r'^\s*2\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)', lat, re.M)
    if m:
        print(f"BENCH ib_send_lat 2 B: t_min {m.group(1)} us, t_max {m.group(2)} us, t_typical {m.group(3)} us, t_avg {m.group(4)} us")
    else:
        print("BENCH ib_send_lat: no result" + (f" ({lat.strip().splitlines()[-1][:120]})" if lat.strip() else ""))
    pp = read(d, "pingpong.txt") or ""
    m = re.search(r'([\d.]+) usec/iter', pp)
    print(f"BENCH ibv_rc_pingpong: {m.group(1)} usec/iter (one round trip per iteration)" if m
          else "BENCH ibv_rc_pingpong: no result")
    bon = parse_prom(read(d, "bench-on.prom"))
    bc = get(bon, "roce_probe_rtt_seconds_count", device=dev, port=port, gid_index=gid, op="write_send")
    bs = get(bon, "roce_probe_rtt_seconds_sum", device=dev, port=port, gid_index=gid, op="write_send")
    if mean:
        print(f"BENCH probe RTT (WRITE + SEND, good phase): mean {mean * 1e6:.1f} us over {count:.0f} rounds, "
              f"median bucket <= {p50 and p50 * 1e6:.0f} us" + (f"; bench window mean {bs / bc * 1e6:.1f} us" if bc else ""))

    passed, failed = counts()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
