#!/usr/bin/env python3
"""Cost of LLDP capture (`lldp.mode: capture`): CPU and memory of the
exporter capturing LLDP on every RDMA netdev, against the same exporter
with LLDP off (the baseline), measured in the same run, and the series it
adds per port.

The exporter reads roce-testkit's bench tree (N mlx5 RoCE ports, on
tmpfs) whose netdevs are made real: a network namespace the script creates
holds one veth pair per netdev, the tree's name (enp..s0np0) on one end and
swK on the other, where this script plays the switches: every port gets
the LLDP frame of a switch port of a lossless fabric (tests/vm/lldp_wire.py:
PFC, APP, ETS, management address; 227 bytes), from its own switch port.
The exporter, this script and its raw sockets all run in that namespace
(the script enters it with setns), so nothing touches the host's network.

Configurations, run one after the other in each round (rounds interleave
them, so that drift on a shared machine hits all alike):
  off     lldp.mode off: the baseline;
  slow    capture, one frame per --slow seconds per port (30: a switch's
          default LLDP transmit interval), staggered across the ports;
  fast    capture, --fast frames per second per port (100: a flooding or
          misbehaving neighbour), to show the bound: the exporter decodes at
          most lldp.max_frames_per_sample (256) frames per sample and the
          kernel drops what does not fit the socket buffer (64 KiB asked).

Per run, over a window of --seconds after --settle (default sample interval,
5 s): the process CPU (clock of the pid, ns), the time of the LLDP source's
call in the last sample (roce_collector_duration_seconds), VmRSS and VmHWM at
the end, series on /metrics (roce_lldp_* apart, and per port), frames sent
and accepted (roce_lldp_frames_total) per port. Writes a Markdown section
(--out, default stdout): the median of the rounds per configuration and
its ratio to the baseline's median.

Needs root (network namespaces, raw sockets) and ip (iproute2).

    python3 bench/lldp_cost.py                      # target/release, else debug
    python3 bench/lldp_cost.py --ports 8,32 --seconds 60 --rounds 3 --out /tmp/lldp.md
"""

import argparse
import ctypes
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "vm"))
sys.dont_write_bytecode = True
import bench  # noqa: E402
import lldp_wire  # noqa: E402

CLONE_NEWNET = 0x40000000
CONFIGS = ("off", "slow", "fast")


def setns(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def ip(*argv):
    subprocess.run(["ip", *argv], check=True, stdout=subprocess.DEVNULL)


def netdevs_of(tree):
    return sorted(os.listdir(os.path.join(tree, "class", "net")))


class Switches:
    """One raw socket per switch port (swK), each with its own frame."""

    def __init__(self, count):
        self.socks, self.frames = [], []
        for k in range(count):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((f"sw{k}", 0))
            self.socks.append(s)
            mac = f"1c:34:da:5a:{k >> 8:02x}:{k & 0xff:02x}"
            self.frames.append(lldp_wire.switch_frame(
                mac, f"swp{k + 1}", f"leaf-p1-r{k}", 3, 26, 3))
        self.sent = [0] * count

    def send(self, k):
        try:
            self.socks[k].send(self.frames[k])
            self.sent[k] += 1
        except OSError:
            pass

    def run(self, until, per_port_interval):
        """Sends each port's frame every per_port_interval seconds, the ports
        staggered over the interval, until the monotonic time `until`."""
        n = len(self.socks)
        start = time.monotonic()
        step = per_port_interval / n
        i = 0
        while True:
            due = start + i * step
            now = time.monotonic()
            if due >= until:
                break
            if due > now:
                time.sleep(min(due - now, until - now))
                continue
            self.send(i % n)
            i += 1
        return i

    def close(self):
        for s in self.socks:
            s.close()


def scrape(exp):
    _, headers, body = exp.client.get("/metrics")
    return bench.parse_exposition(bench.text_of(headers, body))


def frames_by_port(series):
    return {dict(l).get("netdev"): v for (name, l), v in series.items()
            if name == "roce_lldp_frames_total"}


def run_one(args, tree, workdir, config, ports):
    cfg = os.path.join(workdir, f"lldp-{config}.yml")
    with open(cfg, "w") as f:
        f.write("lldp: {mode: %s}\n" % ("off" if config == "off" else "capture"))
    port = bench.free_port()
    exp = bench.Exporter("roce_exporter", [args.binary, "--config.file=" + cfg,
                                           "--path.sysfs=" + tree,
                                           "--web.listen-address=127.0.0.1:%d" % port,
                                           "--log.level=warn"], port, workdir)
    switches = Switches(ports)
    interval = {"off": args.slow, "slow": args.slow, "fast": 1.0 / args.fast}[config]
    try:
        exp.wait_ready(timeout=60.0, needle="roce_port_")
        # Every switch heard once, then frames through the settle time too:
        # the neighbours are known before the window, as on a running host.
        for k in range(ports):
            switches.send(k)
        switches.run(time.monotonic() + args.settle, interval)
        before = scrape(exp)
        f0 = frames_by_port(before)
        ts0 = bench.lookup(before, "roce_sample_timestamp_seconds")
        sent0 = sum(switches.sent)
        cpu0 = bench.cpu_clock_seconds(exp.pid)
        t0 = time.monotonic()
        switches.run(t0 + args.seconds, interval)
        wall = time.monotonic() - t0
        cpu = bench.cpu_clock_seconds(exp.pid) - cpu0
        rss, hwm = bench.memory_kib(exp.pid)
        after = scrape(exp)
        ts1 = bench.lookup(after, "roce_sample_timestamp_seconds")
        f1 = frames_by_port(after)
        samples = max(1, round((ts1 - ts0) / 5.0)) if ts0 and ts1 else max(1, round(wall / 5))
        accepted = {k: f1.get(k, 0) - f0.get(k, 0) for k in f1}
        lldp_series = sum(1 for (name, _) in after if name.startswith("roce_lldp_"))
        return {
            "config": config, "cpu_pct": 100 * cpu / wall, "cpu_per_sample_us": 1e6 * cpu / samples,
            "lldp_call_us": 1e6 * call if (call := bench.lookup(
                after, "roce_collector_duration_seconds", collector="lldp")) is not None else None,
            "rss": rss, "hwm": hwm, "series": len(after), "lldp_series": lldp_series,
            "sent": sum(switches.sent) - sent0, "accepted": sum(accepted.values()),
            "accepted_min": min(accepted.values()) if accepted else 0,
            "accepted_max": max(accepted.values()) if accepted else 0,
            "neighbours": sum(v for (name, _), v in after.items()
                              if name == "roce_lldp_neighbors"),
            "samples": samples, "wall": wall,
        }
    finally:
        switches.close()
        exp.stop()


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v, digits=2):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}" if isinstance(v, float) else f"{v:,}"


def ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.3f}"


def render(results, args):
    out = ["## LLDP capture", "",
           f"From `python3 bench/lldp_cost.py` (method: its docstring). `{os.path.relpath(args.binary, bench.REPO)}`, "
           f"roce-testkit's bench tree with its netdevs as veth pairs in a network namespace, "
           f"default `sample_interval` (5 s), {args.seconds:g} s window after {args.settle:g} s "
           f"to settle, {args.rounds} rounds of the three configurations interleaved, medians; "
           f"the baseline (`lldp.mode: off`) in the same run. slow: one frame per "
           f"{args.slow:g} s per port; fast: {args.fast:g} frames/s per port.", ""]
    for ports, runs in results.items():
        by = {c: [r for r in runs if r["config"] == c] for c in CONFIGS}
        base = {k: med(by["off"], k) for k in ("cpu_pct", "cpu_per_sample_us", "rss", "hwm",
                                               "series")}
        out.append(f"**{ports} ports**")
        out.append("")
        out.append("| figure | off (baseline) | slow | ratio | fast | ratio |")
        out.append("|---|---|---|---|---|---|")
        rows = [("process CPU (% of one core)", "cpu_pct", 3),
                ("process CPU per sample (µs)", "cpu_per_sample_us", 0),
                ("LLDP source's call in the last sample (µs)", "lldp_call_us", 1),
                ("VmRSS at the end (KiB)", "rss", 0), ("VmHWM (KiB)", "hwm", 0),
                ("series on /metrics", "series", 0)]
        for label, key, digits in rows:
            b = base.get(key)
            s, f = med(by["slow"], key), med(by["fast"], key)
            out.append(f"| {label} | {fmt(b, digits) if key != 'lldp_call_us' else '-'} | "
                       f"{fmt(s, digits)} | {ratio(s, b)} | {fmt(f, digits)} | {ratio(f, b)} |")
        spread = {c: (min(r["cpu_pct"] for r in by[c]), max(r["cpu_pct"] for r in by[c]))
                  for c in CONFIGS if by[c]}
        out.append("")
        lldp = med(by["slow"], "lldp_series")
        out.append(
            f"Process CPU range over the rounds (% of one core): " + ", ".join(
                f"{c} {lo:.3f}-{hi:.3f}" for c, (lo, hi) in spread.items()) + ". "
            f"Series: `roce_lldp_*` {fmt(lldp, 0)} with capture on ({lldp / ports:.1f} per "
            f"port; one APP entry per switch). Frames in the window: slow "
            f"{fmt(med(by['slow'], 'sent'), 0)} sent, {fmt(med(by['slow'], 'accepted'), 0)} "
            f"accepted; fast {fmt(med(by['fast'], 'sent'), 0)} sent, "
            f"{fmt(med(by['fast'], 'accepted'), 0)} accepted "
            f"({fmt(med(by['fast'], 'accepted') / med(by['fast'], 'samples'), 1)} per sample; "
            f"per port {fmt(med(by['fast'], 'accepted_min'), 0)} to "
            f"{fmt(med(by['fast'], 'accepted_max'), 0)}), neighbours known at the end: slow "
            f"{fmt(med(by['slow'], 'neighbours'), 0)}, fast {fmt(med(by['fast'], 'neighbours'), 0)} "
            f"of {ports}.")
        out.append("")
    return "\n".join(out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    release = os.path.join(bench.REPO, "target/release/roce_exporter")
    debug = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(bench.REPO, "target")),
                         "debug/roce_exporter")
    p.add_argument("--binary", default=release if os.path.exists(release) else debug)
    p.add_argument("--ports", default="8", help="comma-separated tree sizes")
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--settle", type=float, default=15.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--slow", type=float, default=30.0, help="seconds between frames per port")
    p.add_argument("--fast", type=float, default=100.0, help="frames per second per port")
    p.add_argument("--tree-dir", default="/dev/shm" if os.path.isdir("/dev/shm")
                   else tempfile.gettempdir())
    p.add_argument("--out", help="write the Markdown section here (default: stdout)")
    args = p.parse_args(argv)
    args.binary = os.path.abspath(args.binary)
    if os.geteuid() != 0:
        sys.exit("lldp_cost.py needs root (network namespaces, raw sockets)")
    results = {}
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    workdir = tempfile.mkdtemp(prefix="roce-lldp-bench-")
    for ports in [int(x) for x in args.ports.split(",") if x]:
        tree = os.path.join(args.tree_dir, f"roce-lldp-bench-{ports}-{os.getpid()}")
        bench.generate_tree(tree, ports)
        ns = f"roce-lldp-bench-{os.getpid()}"
        ip("netns", "add", ns)
        try:
            ip("-n", ns, "link", "set", "lo", "up")
            for k, nd in enumerate(netdevs_of(tree)):
                ip("-n", ns, "link", "add", nd, "type", "veth", "peer", "name", f"sw{k}")
                ip("-n", ns, "link", "set", nd, "up")
                ip("-n", ns, "link", "set", f"sw{k}", "up")
            setns(f"/run/netns/{ns}")
            try:
                runs = []
                for r in range(args.rounds):
                    for config in CONFIGS:
                        res = run_one(args, tree, workdir, config, len(netdevs_of(tree)))
                        print(f"{ports} ports, round {r + 1}, {config}: " + ", ".join(
                            f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in res.items() if k != "config"), flush=True)
                        runs.append(res)
                results[ports] = runs
            finally:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.setns(home, CLONE_NEWNET)
        finally:
            subprocess.run(["ip", "netns", "del", ns], check=False)
            subprocess.run(["rm", "-rf", tree], check=False)
    text = render(results, args)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
