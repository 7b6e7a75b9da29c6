#!/usr/bin/env python3
"""System calls of one idle sample of roce_exporter, per source.

The sources are called in turn on the reader thread `roce-sources`; the
sampler thread (the rules, the snapshot) is `roce-sampler`. The exporter's
own `roce_collector_kernel_requests` splits the reader's calls by source.
`strace -f` on the running exporter over a window of whole sample
intervals, no scrapes, counts every system call per thread and whether it
failed; the counts are divided by the samples taken in the window
(`roce_samples_total` before and after, read over HTTP outside the window's
count: the HTTP thread is not a source).

    python3 bench/syscalls.py --binary target/release/roce_exporter \\
        --sysfs examples/demo-gpu-node/sys --procfs examples/demo-gpu-node/proc \\
        --config examples/demo-gpu-node/demo.yml

bench.py calls `measure` on its trees. Standard library only; needs strace.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

# "[pid 123] name(args) = ret" or "123 name(...) = ret" (strace -f -o).
LINE_RE = re.compile(r'^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+|\?|0x[0-9a-f]+)(?:\s+(\w+))?')
RESUMED_RE = re.compile(r'^(\d+)\s+<\.\.\. (\w+) resumed>.*\)\s+=\s+(-?\d+|\?)(?:\s+(\w+))?')


def thread_names(pid):
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                out[int(tid)] = f.read().strip()
        except OSError:
            continue
    return out


def samples_total(client):
    import bench
    _, h, b = client.get("/metrics")
    series = bench.parse_exposition(bench.text_of(h, b))
    return bench.lookup(series, "roce_samples_total")


def collector_of(thread):
    if thread == "roce-sources":
        return "(sources)"
    if thread == "roce-sampler":
        return "(sampler)"
    return None


def parse(log, names):
    """{collector: {syscall: [calls, failed]}} from an strace -f log, only
    the sampler's and the sources' threads."""
    out = {}
    pending = {}
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.endswith("<unfinished ...>"):
                m = re.match(r'^(\d+)\s+(\w+)\(', line)
                if m:
                    pending[int(m.group(1))] = m.group(2)
                continue
            m = LINE_RE.match(line)
            if m:
                tid, name, ret = int(m.group(1)), m.group(2), m.group(4)
            else:
                m = RESUMED_RE.match(line)
                if not m:
                    continue
                tid, name, ret = int(m.group(1)), m.group(2), m.group(3)
                pending.pop(tid, None)
            who = collector_of(names.get(tid, ""))
            if who is None:
                continue
            row = out.setdefault(who, {}).setdefault(name, [0, 0])
            row[0] += 1
            if ret.startswith("-1"):
                row[1] += 1
    return out


def measure(pid, client, window_s, workdir):
    """Per-source system calls per sample over an idle window of about
    window_s: ({collector: {syscall: (calls, failed)}} per sample, samples)."""
    log = os.path.join(workdir, "strace-%d.txt" % pid)
    names = thread_names(pid)
    n0 = samples_total(client)
    p = subprocess.Popen(["strace", "-f", "-qq", "-o", log, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(window_s)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=10)
    n1 = samples_total(client)
    names.update(thread_names(pid))
    # The two /metrics requests are the HTTP threads', left out by name.
    samples = max(1, round(n1 - n0))
    counts = parse(log, names)
    per = {who: {s: (c / samples, f / samples) for s, (c, f) in calls.items()}
           for who, calls in counts.items()}
    return per, samples


def render(per, samples):
    """Markdown rows: collector, syscalls per sample (total, failed), and the
    calls by name."""
    lines = ["| collector | syscalls per sample | failed | by call |", "|---|---|---|---|"]
    for who in sorted(per):
        calls = per[who]
        total = sum(c for c, _ in calls.values())
        failed = sum(f for _, f in calls.values())
        by = ", ".join("%s %.1f%s" % (s, c, " (%.1f failed)" % f if f else "")
                       for s, (c, f) in sorted(calls.items(), key=lambda kv: -kv[1][0]))
        lines.append("| %s | %.1f | %.1f | %s |" % (who, total, failed, by))
    lines.append("")
    lines.append("Over %d samples." % samples)
    return "\n".join(lines)


def main(argv):
    import bench
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--sysfs", required=True)
    p.add_argument("--procfs")
    p.add_argument("--config", help="configuration to start from (sample_interval is set here)")
    p.add_argument("--interval", type=float, default=0.5, help="sample_interval, seconds")
    p.add_argument("--window", type=float, default=10.0, help="strace window, seconds")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    p.add_argument("--flag", action="append", default=[], help="extra flag for the exporter")
    args = p.parse_args(argv)
    if not shutil.which("strace"):
        sys.exit("strace not found (apt-get install strace)")
    with tempfile.TemporaryDirectory(prefix="roce-syscalls-") as workdir:
        config = os.path.join(workdir, "config.yml")
        text = ""
        if args.config:
            with open(args.config) as f:
                text = "".join(l for l in f if not l.startswith("sample_interval"))
        with open(config, "w") as f:
            f.write("sample_interval: %gms\n" % (args.interval * 1000) + text)
        port = bench.free_port()
        argv_ = [args.binary, "--config.file=" + config, "--path.sysfs=" + args.sysfs,
                 "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"]
        if args.procfs:
            argv_.append("--path.procfs=" + args.procfs)
        exp = bench.Exporter("roce_exporter", argv_ + args.flag, port, workdir)
        try:
            exp.wait_ready(timeout=60.0, needle="roce_samples_total")
            time.sleep(args.warmup)
            per, samples = measure(exp.pid, exp.client, args.window, workdir)
        finally:
            exp.stop()
    print(render(per, samples))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
