#!/usr/bin/env python3
"""Memory of the NCCL source under hostile and realistic logs.

Runs the exporter binary (release by default) on an empty sysfs (no RDMA
device) with the NCCL source reading a scratch directory, three times in
one invocation:

- baseline: an empty log directory;
- realistic: 8 jobs x 8 ranks (one process per GPU), each logging NCCL's
  device table of 8 RoCE ports, its socket interfaces and 64 channel
  connections;
- hostile: 100 MB of device-table lines of 64 distinct indexes each
  (8 files x 1,024 writers, indexes never repeated), the shape that grew
  the state without bound.

For each it waits until every byte was read (roce_nccl_read_bytes_total),
then reports the peak RSS (VmHWM), the ratio to the baseline's, and the
device-table state the source says it holds (roce_nccl_state_bytes) per
tracked process (roce_nccl_processes). Prints a markdown table.

    cargo build --release && python3 bench/nccl_memory.py [--binary PATH]
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import bench  # noqa: E402

READ_PER_PASS = 16 << 20


def flood(d, total=100 << 20):
    written = 0
    for f in range(8):
        with open(os.path.join(d, f"nccl.flood.{f}.log"), "w") as out:
            n = 0
            while written < total * (f + 1) // 8:
                pid = f * 10000 + n % 1024
                first = (n // 1024) * 64
                line = f"h{f}:{pid}:{pid} [0] NCCL INFO NET/IB : Using"
                line += "".join(f" [{i}]mlx5_{i}:1/RoCE" for i in range(first, first + 64))
                line += " [RO]; OOB eth0:10.0.0.1<0>\n"
                out.write(line)
                written += len(line)
                n += 1
    return written


def realistic(d):
    written = 0
    for job in range(8):
        for rank in range(8):
            pid = 1000 + job * 8 + rank
            p = f"gpu-{job:02d}:{pid}:{pid} [{rank}] NCCL INFO "
            lines = [p + "NCCL version 2.21.5+cuda12.4"]
            lines.append(
                p + "NET/IB : Using " + " ".join(f"[{i}]mlx5_{i}:1/RoCE" for i in range(8))
                + " [RO]; OOB eth0:10.0.0.1<0>"
            )
            lines.append(p + "NET/Socket : Using [0]eth0:10.0.0.1<0>")
            lines.append(p + "Using network IB")
            for ch in range(64):
                lines.append(
                    p + f"Channel {ch:02d}/0 : {rank}[{rank}] -> {rank + 8}[{rank}] [send] via NET/IB/{rank}/GDRDMA"
                )
            text = "\n".join(lines) + "\n"
            with open(os.path.join(d, f"nccl.gpu-{job:02d}.{pid}.log"), "w") as out:
                out.write(text)
            written += len(text)
    return written


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def run(binary, fill):
    work = tempfile.mkdtemp(prefix="roce-nccl-mem-")
    try:
        logs = os.path.join(work, "logs")
        sysfs = os.path.join(work, "sys")
        os.makedirs(logs)
        os.makedirs(os.path.join(sysfs, "class", "infiniband"))
        total = fill(logs) if fill else 0
        cfg = os.path.join(work, "cfg.yml")
        with open(cfg, "w") as f:
            f.write(
                "sample_interval: 1s\nnccl:\n  enabled: true\n"
                f"  log_dir: {logs}\n  interval: 1s\n  max_bytes_per_read: {READ_PER_PASS}\n"
            )
        port = free_port()
        proc = subprocess.Popen(
            [binary, f"--web.listen-address=127.0.0.1:{port}", f"--config.file={cfg}",
             f"--path.sysfs={sysfs}", f"--path.procfs={work}/proc"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 600
            text = ""
            while time.time() < deadline:
                time.sleep(0.5)
                try:
                    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
                except OSError:
                    continue
                read = metric(text, "roce_nccl_read_bytes_total") or 0
                if read >= total and metric(text, "roce_nccl_last_read_timestamp_seconds"):
                    break
            time.sleep(2)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
            return {
                "bytes": total,
                "hwm_kb": vm(proc.pid, "VmHWM:"),
                "rss_kb": vm(proc.pid, "VmRSS:"),
                "state": metric(text, "roce_nccl_state_bytes") or 0,
                "processes": metric(text, "roce_nccl_processes") or 0,
                "dropped": sum(float(v) for v in re.findall(r"^roce_nccl_state_dropped_total\{[^}]*\} (\S+)$", text, re.M)),
            }
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/roce_exporter"))
    ap.add_argument("--out", help="write the Markdown section here instead of stdout")
    args = ap.parse_args()
    rows = [("baseline (empty directory)", run(args.binary, None)),
            ("realistic (8 jobs x 8 ranks)", run(args.binary, realistic)),
            ("hostile (100 MB distinct entries)", run(args.binary, flood))]
    base = rows[0][1]["hwm_kb"]
    out = ["## NCCL source memory", "",
           f"From `python3 bench/nccl_memory.py` (method: its docstring) with "
           f"`{os.path.relpath(args.binary, ROOT)}`, nccl.max_bytes_per_read "
           f"{READ_PER_PASS >> 20} MiB, nccl.interval 1s; the three runs in one invocation.", "",
           "| log directory | bytes read | peak RSS | vs baseline | RSS at end | processes held | state bytes | per process | dropped by caps |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        per = r["state"] / r["processes"] if r["processes"] else 0
        out.append(f"| {name} | {r['bytes']:,} | {r['hwm_kb'] / 1024:.1f} MiB | {r['hwm_kb'] / base:.2f}x | "
                   f"{r['rss_kb'] / 1024:.1f} MiB | {r['processes']:.0f} | {r['state']:,.0f} | {per:,.0f} | {r['dropped']:,.0f} |")
    text = "\n".join(out) + "\n"
    bench.emit(text, args.out)


if __name__ == "__main__":
    main()
