#!/usr/bin/env python3
"""Cost of peer probes (`peer_probes:`) with 1,000 configured peers.

Runs the exporter twice on this host's /sys (peer probes need the live
/sys: a generated tree turns them off), in the same run:
without peer probes (the baseline), then with peer probes on and 1,000
peers in a peer file, served by a local fake: one threaded HTTP server
answering every 127.1.x.y address with that node's endpoint document
(8 ports, one per rail), and 10 % of the peers "silent" (a listening socket
that never accepts: each fetch of such a peer waits out its timeouts, the
worst case for the fetcher). Reports, per run: process CPU over the
window, RSS and VmHWM at the end, threads, series on /metrics
(`roce_peer_probe_*` apart), the endpoint documents served; and the
ratios of the two runs. Then runs the in-process figures: the prober (one
port, 1,000 peers on its rail, fake fabric: CPU per round and series) from
the test `peer_probes::a_thousand_peers_keep_the_series_bounded`, and the
coordinator (`roce-fleet` `runner::bench::coordinator_cost`, release: the
real runner over 1,000 and 10,000 peers of 8 ports, documents answered at
once; its thread's CPU once the first walk is done, and the runtime's RSS
growth, one size per process).

On a host without an RDMA port (the development VM) no port opens, so the
exporter run fetches no document (documents are admitted against the open
ports' subnets) and measures the idle runtime only: the coordinator's
figures come from the in-process bench, the prober's CPU with every probe
lost from the VM test (tests/vm/e2e-peer.sh, phase "B stopped":
tests/vm/check_peer.py prints it).

    python3 bench/peer_probes.py                          # target/release, else debug
    python3 bench/peer_probes.py --binary target/debug/roce_exporter --seconds 60
"""

import argparse
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import bench  # noqa: E402

PORTS_PER_NODE = 8


def address(i):
    return "127.1.%d.%d" % (i // 250, i % 250 + 1)


def document(node_ip):
    a, b = node_ip.split(".")[2:4]
    eps = []
    for rail in range(PORTS_PER_NODE):
        eps.append({
            "node": "node-%s-%s" % (a, b), "device": "mlx5_%d" % rail, "device_index": rail,
            "port": 1, "gid": "::ffff:10.%d.%s.%s" % (rail, a, b), "gid_index": 3,
            "qpn": 1000 + rail, "qkey": 0x52504D31, "mtu": 4096,
            "subnet": "10.%d.0.0/16" % rail, "wire": 2,
        })
    return json.dumps({"version": 3, "endpoints": eps}).encode()


class Served:
    count = 0
    lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        host = self.headers.get("Host", "127.1.0.1").rsplit(":", 1)[0]
        body = document(host)
        with Served.lock:
            Served.count += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def series(exp):
    _, headers, body = exp.client.get("/metrics")
    lines = [l for l in bench.text_of(headers, body).splitlines() if l and not l.startswith("#")]
    return len(lines), sum(1 for l in lines if l.startswith("roce_peer_probe_"))


def threads(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def run(args, workdir, peer_cfg):
    config = os.path.join(workdir, "cfg-%s.yml" % ("peer" if peer_cfg else "base"))
    with open(config, "w") as f:
        f.write("sample_interval: 5s\n")
        if peer_cfg:
            f.write(peer_cfg)
    port = bench.free_port()
    exp = bench.Exporter("roce_exporter", [args.binary, "--config.file=" + config,
                                           "--web.listen-address=127.0.0.1:%d" % port,
                                           "--log.level=error"], port, workdir, 20000)
    try:
        exp.wait_ready(timeout=60.0, needle="# TYPE")
        # Settle (the first fetch pass), then measure a window.
        time.sleep(args.settle)
        served0 = Served.count
        cpu0 = bench.cpu_clock_seconds(exp.pid)
        t0 = time.monotonic()
        time.sleep(args.seconds)
        cpu = bench.cpu_clock_seconds(exp.pid) - cpu0
        wall = time.monotonic() - t0
        rss, hwm = bench.memory_kib(exp.pid)
        total, peer = series(exp)
        return {"cpu_s": cpu, "wall_s": wall, "cpu_pct": 100 * cpu / wall, "rss": rss,
                "hwm": hwm, "threads": threads(exp.pid), "series": total, "peer_series": peer,
                "docs": Served.count - served0}
    finally:
        exp.stop()


def in_process(args):
    out = subprocess.run(["cargo", "test", "-q", "--test", "it",
                          "peer_probes::a_thousand_peers_keep_the_series_bounded",
                          "--", "--nocapture"], cwd=bench.REPO, capture_output=True, text=True)
    m = re.search(r"1000 peers, one port: .*", out.stdout)
    return m.group(0) if m else "(not found: %s)" % out.stderr[-300:]


def coordinator(seconds):
    """BENCH lines of runner::bench::coordinator_cost, one size per process."""
    rows = []
    for nodes in (1000, 10000):
        env = dict(os.environ, ROCE_BENCH_NODES=str(nodes), ROCE_BENCH_SECONDS=str(int(seconds)))
        out = subprocess.run(["cargo", "test", "--release", "-q", "-p", "roce-fleet", "--lib",
                              "runner::bench::coordinator_cost", "--", "--ignored", "--nocapture",
                              "--exact"], cwd=bench.REPO, capture_output=True, text=True, env=env)
        for line in out.stdout.splitlines():
            f = line.split()
            if len(f) == 7 and f[:2] == ["BENCH", "coordinator"] and f[2].isdigit():
                rows.append((int(f[2]), int(f[3]), float(f[4]), float(f[5]), int(f[6])))
    return rows


def main():
    p = argparse.ArgumentParser()
    release = os.path.join(bench.REPO, "target/release/roce_exporter")
    debug = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(bench.REPO, "target")),
                         "debug/roce_exporter")
    p.add_argument("--binary", default=release if os.path.exists(release) else debug)
    p.add_argument("--peers", type=int, default=1000)
    p.add_argument("--silent", type=float, default=0.1, help="share of peers that never answer")
    p.add_argument("--refresh", default="10s", help="peer_probes.refresh (default 60s)")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--settle", type=float, default=15.0)
    p.add_argument("--out", help="write the Markdown section here (default: stdout)")
    args = p.parse_args()

    workdir = tempfile.mkdtemp(prefix="roce-peer-bench-")
    srv = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    http_port = srv.server_address[1]
    silent = socket.socket()
    silent.bind(("0.0.0.0", 0))
    silent.listen(4096)
    silent_port = silent.getsockname()[1]
    n_silent = int(args.peers * args.silent)
    peers_file = os.path.join(workdir, "peers.txt")
    with open(peers_file, "w") as f:
        for i in range(args.peers):
            port = silent_port if i < n_silent else http_port
            f.write("http://%s:%d\n" % (address(i), port))
    peer_cfg = ("peer_probes:\n  enabled: true\n  file: %s\n  refresh: %s\n"
                % (peers_file, args.refresh))
    try:
        base = run(args, workdir, None)
        peer = run(args, workdir, peer_cfg)
    finally:
        srv.shutdown()
        silent.close()
        shutil.rmtree(workdir, ignore_errors=True)

    lines = [
        "## Peer probes with 1,000 peers",
        "",
        "From `python3 bench/peer_probes.py` (method: its docstring). `%s` on this host's /sys, "
        "%d peers in a peer file (%d silent: listening, never accepting), %d endpoints each "
        "(8,000 peer ports), `refresh: %s` (6 × the default 60 s: an upper bound), "
        "%.0f s window after %.0f s to settle; both runs in the same invocation."
        % (os.path.relpath(args.binary, bench.REPO), args.peers, n_silent,
           PORTS_PER_NODE, args.refresh, args.seconds, args.settle),
        "",
        "| figure | without peer probes | with 1,000 peers | ratio |",
        "|---|---|---|---|",
    ]
    rows = [("CPU (% of one core)", "cpu_pct", "%.2f"), ("RSS (KiB)", "rss", "%d"),
            ("VmHWM (KiB)", "hwm", "%d"), ("threads", "threads", "%d"),
            ("series on /metrics", "series", "%d"),
            ("`roce_peer_probe_*` series", "peer_series", "%d"),
            ("endpoint documents served in the window", "docs", "%d")]
    for name, key, fmt in rows:
        a, b = base[key], peer[key]
        r = ("%.2f" % (b / a)) if a else "-"
        lines.append("| %s | %s | %s | %s |" % (name, fmt % a, fmt % b, r))
    lines += ["", "In process (`cargo test --test it peer_probes::a_thousand_peers_keep_the_series_"
              "bounded -- --nocapture`: one port, 1,000 peers on its rail, fake fabric, debug "
              "build, 500 rounds without pauses): " + in_process(args), ""]
    lines += ["Coordinator (`runner::bench::coordinator_cost`, release: the real runner, documents "
              "answered at once, the list read again every 10 s; CPU of its thread over %.0f s once "
              "the first walk is done; the runtime's RSS growth):" % args.seconds, "",
              "| peers | endpoints | first walk (s, at the bench's pace) | coordinator CPU (% of a core) | RSS growth (MiB) |",
              "|---|---|---|---|---|"]
    for nodes, eps, walk, cpu, rss in coordinator(args.seconds):
        lines.append("| %s | %s | %.0f | %.2f | %.1f |" % (f"{nodes:,}", f"{eps:,}", walk, cpu,
                                                           rss / 1024))
    lines.append("")
    text = "\n".join(lines)
    bench.emit(text, args.out)


if __name__ == "__main__":
    main()
