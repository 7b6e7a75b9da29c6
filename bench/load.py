#!/usr/bin/env python3
"""Load and abuse test of the exporter's HTTP server on loopback.

Runs the real binary on a sysfs tree (the demo GPU node by default), then,
in one run, rounds of --slice seconds per phase until each phase has had
DURATION s (so that other work on the machine weighs on all alike):
  baseline: SCRAPERS concurrent scrapers (keep-alive connections, as
     Prometheus keeps them) scrape /metrics back to back;
  one attack phase per kind of abusive client, ABUSERS of them (1,000 by
  default, at least 10x web.max_requests) beside the same scrapers:
       slow_headers  send a request line, then one header byte every 0.5 s,
                     never finishing the headers;
       reconnect     the same, but close after 0.5 to 2 s and reconnect at
                     once (a flood of new connections);
       slow_body     send a whole /metrics request on a socket with a tiny
                     receive buffer and read the answer 16 bytes a second;
       no_read       send a whole /metrics request and never read;
       oversized     requests whose headers exceed web.max_request_bytes
                     (expects 431) and requests with a body (expects 413),
                     one after the other, every 0.5 s;
  mixed: all of these at once, ABUSERS in all.
For each phase it reports the scrapers' latency (p50/p99/max), throughput and
errors (any non-200 answer, timeout, reset or refused connection), and for
each abusive kind how long the server let it hold its connection before it
cut it (for a client that does not read, the server's end of its connection
is looked up in /proc/net/tcp: the server's FIN waits behind the unread
answer, so the client itself cannot see the cut). The exporter's RSS is sampled all along
(start, peak, after the phases, and after the mixed attack run once more: a
leak grows from one flood to the next).

Exit status: 0 when the scrapers saw no error in any phase, their p99 under
attack stayed under --max-p99-ms, every abusive connection was cut within
its bound and RSS stayed under the limits;
1 otherwise; 2 on setup errors. Python 3 standard library only; every
connection goes to 127.0.0.1; every loop is bounded by the phase deadline.

Usage: python3 bench/load.py [--duration 30] [--scrapers 200] [--abusers 1000] [--slice 15]
           [--no-build] [--out bench/load-results.md] [--binary target/release/roce_exporter]
"""

import argparse
import asyncio
import multiprocessing
import os
import platform
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
import bench  # noqa: E402  (the CPU model)
HOST = "127.0.0.1"

# The server's limits: the timeouts are written into the exporter's config
# (the defaults of the `web` section in src/config.rs, spelled out so that
# the bounds below follow them); max_requests and max_connections are left
# to the binary's defaults (so that an older binary, without max_requests,
# runs the same test), named here for the report and the 10x check; the
# connection age is fixed (ServeOptions in crates/web/src/connection.rs).
MAX_REQUESTS = 40
MAX_CONNECTIONS = 1024
HEADER_READ_TIMEOUT = 10.0
MAX_REQUEST_BYTES = 16 * 1024
MAX_CONNECTION_AGE = 60.0
CLOSE_GRACE = 5.0
# Scheduling slack on top of a timeout before a cut counts as late.
SLACK = 3.0
# A scrape that takes longer than this is an error (Prometheus's default
# scrape_timeout).
SCRAPE_TIMEOUT = 10.0

# The attack phases, in order; "mixed" runs every kind at once.
ATTACKS = ["slow_headers", "reconnect", "slow_body", "no_read", "oversized", "mixed"]
# Shares of the abusive clients in the mixed phase.
MIX = {"slow_headers": 0.25, "reconnect": 0.25, "slow_body": 0.2, "no_read": 0.2,
       "oversized": 0.1}

REQUEST = (
    b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Accept: text/plain;version=0.0.4\r\nUser-Agent: roce-load\r\n\r\n"
)


def log(msg):
    print(f"[load {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# The exporter


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def start_exporter(binary, tree, port, workdir):
    config = os.path.join(workdir, "load.yml")
    replay = os.path.join(tree, "netdev-replay")
    with open(config, "w") as f:
        f.write("sample_interval: 1s\n")
        if os.path.isdir(replay):
            f.write(f"netdevs: {{replay: {replay}}}\n")
        f.write(
            f"web: {{header_read_timeout: {int(HEADER_READ_TIMEOUT)}s, "
            f"max_request_bytes: {MAX_REQUEST_BYTES}}}\n"
        )
    logf = open(os.path.join(workdir, "exporter.log"), "w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--web.listen-address={HOST}:{port}",
            f"--path.sysfs={os.path.join(tree, 'sys')}",
            f"--path.procfs={os.path.join(tree, 'proc')}",
            "--log.level=warn",
        ],
        stdout=logf,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exporter exited with {proc.returncode}")
        try:
            status, body = get_once(port, "/metrics")
            if status == 200 and b"roce_port_up" in body:
                return proc, len(body)
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("exporter did not answer /metrics within 30 s")


def get_once(port, path):
    with socket.create_connection((HOST, port), timeout=5) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return status, body


# ---------------------------------------------------------------------------
# Scrapers: worker processes, each an asyncio loop of keep-alive clients.


async def read_response(reader):
    """Status, whether the server closes after it, body length."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise ValueError(f"bad status line {lines[0]!r}")
    status = int(parts[1])
    length = None
    close = False
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        value = value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection" and "close" in value:
            close = True
        elif name == "transfer-encoding" and "chunked" in value:
            chunked = True
    if chunked:
        total = 0
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            await reader.readexactly(size + 2)
            total += size
            if size == 0:
                break
        return status, close, total
    if length is None:
        raise ValueError("response without Content-Length")
    await reader.readexactly(length)
    return status, close, length


async def scraper(port, stop_at, lat, errs):
    reader = writer = None
    reused = False
    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        retried = False
        while True:
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(HOST, port), SCRAPE_TIMEOUT
                    )
                    reused = False
                writer.write(REQUEST)
                left = SCRAPE_TIMEOUT - (time.monotonic() - t0)
                status, close, _ = await asyncio.wait_for(read_response(reader), max(left, 0.001))
                break
            except (asyncio.IncompleteReadError, ConnectionError) as e:
                # A kept-alive connection the server closed between two
                # requests (idle or age limit): HTTP clients retry once on a
                # fresh connection (as Go's net/http does for GET).
                if writer is not None:
                    writer.close()
                writer = None
                if reused and not retried:
                    retried = True
                    continue
                status, close = f"{type(e).__name__}", True
                break
            except asyncio.TimeoutError:
                if writer is not None:
                    writer.close()
                writer = None
                status, close = "timeout", True
                break
            except (OSError, ValueError) as e:
                if writer is not None:
                    writer.close()
                writer = None
                status, close = f"{type(e).__name__}", True
                break
        took = time.monotonic() - t0
        if status == 200:
            lat.append(took)
        else:
            errs[str(status)] = errs.get(str(status), 0) + 1
        if close and writer is not None:
            writer.close()
            writer = None
        reused = writer is not None
    if writer is not None:
        writer.close()


def scraper_process(port, count, start_at, stop_at, out):
    async def main():
        while time.monotonic() < start_at:
            await asyncio.sleep(min(0.05, start_at - time.monotonic()))
        lat, errs = [], {}
        await asyncio.gather(*(scraper(port, stop_at, lat, errs) for _ in range(count)))
        return lat, errs

    out.put(asyncio.run(main()))


def run_scrapers(port, total, duration, processes):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    start_at = time.monotonic() + 0.5
    stop_at = start_at + duration
    counts = [total // processes + (1 if i < total % processes else 0) for i in range(processes)]
    procs = [
        ctx.Process(target=scraper_process, args=(port, c, start_at, stop_at, queue))
        for c in counts
        if c
    ]
    for p in procs:
        p.start()
    return procs, queue, start_at, stop_at


def collect_scrapers(procs, queue, stop_at):
    lat, errs = [], {}
    for _ in procs:
        got = queue.get(timeout=max(stop_at - time.monotonic(), 0) + SCRAPE_TIMEOUT + 30)
        lat.extend(got[0])
        for k, v in got[1].items():
            errs[k] = errs.get(k, 0) + v
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    return lat, errs


# ---------------------------------------------------------------------------
# Abusive clients: threads with blocking sockets.


class TcpWatch:
    """(local port, remote port) -> state of the host's TCP sockets that
    have the server's port at one end, read from /proc/net/tcp{,6} once a
    second by one thread for every abusive client (with hundreds of
    thousands of TIME_WAIT entries after a load phase, a read per client
    would take the exporter's CPU)."""

    def __init__(self, server_port, until):
        self.needle = f":{server_port:04X} "
        self.states = {}
        self.lock = threading.Lock()
        self.until = until
        self.refresh()
        threading.Thread(target=self.run, daemon=True).start()

    def refresh(self):
        states = {}
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    next(f)
                    for line in f:
                        if self.needle not in line:
                            continue
                        fields = line.split()
                        local = int(fields[1].rsplit(":", 1)[1], 16)
                        remote = int(fields[2].rsplit(":", 1)[1], 16)
                        states[(local, remote)] = fields[3]
            except (OSError, StopIteration, IndexError, ValueError):
                continue
        with self.lock:
            self.states = states

    def run(self):
        while time.monotonic() < self.until:
            time.sleep(1.0)
            self.refresh()

    def state(self, local, remote):
        with self.lock:
            return self.states.get((local, remote))


ESTABLISHED, CLOSE_WAIT = "01", "08"


class Abuse:
    def __init__(self):
        self.lock = threading.Lock()
        # kind -> list of seconds each connection was held before the cut
        self.cuts = {}
        # kind -> ages of the connections still open when the phase ended
        self.held = {}
        self.statuses = {}
        self.errors = {}

    def cut(self, kind, held):
        with self.lock:
            self.cuts.setdefault(kind, []).append(held)

    def still_open(self, kind, age):
        with self.lock:
            self.held.setdefault(kind, []).append(age)

    def status(self, kind, status):
        with self.lock:
            key = (kind, status)
            self.statuses[key] = self.statuses.get(key, 0) + 1

    def error(self, kind, what):
        with self.lock:
            key = (kind, what)
            self.errors[key] = self.errors.get(key, 0) + 1


def server_closed(sock, server_port, watch, opened_at):
    """True once the server has closed its end of `sock`'s connection.
    A client that does not read cannot see that by reading: the server's
    FIN waits behind the unread answer in the server's send queue. So the
    server's own socket is looked up: once the exporter closed it, it is no
    longer ESTABLISHED (FIN_WAIT1 with data still queued, then gone)."""
    try:
        port = sock.getsockname()[1]
    except OSError:
        return True
    if time.monotonic() - opened_at < 1.0:
        return False  # not in the watch's table yet
    ours = watch.state(port, server_port)
    server = watch.state(server_port, port)
    if ours is None or ours == CLOSE_WAIT:
        return True
    return server not in (ESTABLISHED, CLOSE_WAIT)


def slow_headers(port, stop_at, abuse, kind="slow_headers"):
    """Half a request header, then a byte every 0.5 s; "reconnect" gives up
    after 0.5 to 2 s and reconnects at once."""
    rng = random.Random()
    while time.monotonic() < stop_at:
        try:
            s = socket.create_connection((HOST, port), timeout=SCRAPE_TIMEOUT)
        except OSError as e:
            abuse.error(kind, type(e).__name__)
            time.sleep(0.5)
            continue
        t0 = time.monotonic()
        give_up = t0 + rng.uniform(0.5, 2.0) if kind == "reconnect" else stop_at
        s.settimeout(0.5)
        try:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            while time.monotonic() < min(stop_at, give_up):
                try:
                    if s.recv(4096) == b"":
                        abuse.cut(kind, time.monotonic() - t0)
                        break
                except socket.timeout:
                    pass
                s.sendall(b"a")
            else:
                if time.monotonic() >= stop_at:
                    abuse.still_open(kind, time.monotonic() - t0)
        except OSError:
            abuse.cut(kind, time.monotonic() - t0)
        finally:
            s.close()


def slow_reader(port, stop_at, hold_until, abuse, kind, per_second, watch):
    while time.monotonic() < stop_at:
        s = socket.socket()
        # A tiny receive window: the answer stays in the server's buffers.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.settimeout(SCRAPE_TIMEOUT)
        try:
            s.connect((HOST, port))
        except OSError as e:
            abuse.error(kind, type(e).__name__)
            s.close()
            time.sleep(0.5)
            continue
        t0 = time.monotonic()
        try:
            s.sendall(REQUEST)
            s.settimeout(0.0)
            while time.monotonic() < hold_until:
                if server_closed(s, port, watch, t0):
                    abuse.cut(kind, time.monotonic() - t0)
                    break
                if per_second:
                    try:
                        if s.recv(per_second) == b"" and server_closed(s, port, watch, t0):
                            abuse.cut(kind, time.monotonic() - t0)
                            break
                    except BlockingIOError:
                        pass
                time.sleep(1.0)
            else:
                abuse.still_open(kind, time.monotonic() - t0)
        except OSError:
            abuse.cut(kind, time.monotonic() - t0)
        finally:
            s.close()


def oversized(port, stop_at, abuse):
    big = b"X-Big: " + b"a" * (2 * MAX_REQUEST_BYTES) + b"\r\n"
    requests = [
        ("headers_too_large", b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n", 431),
        (
            "body",
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n" + b"b" * 65536,
            413,
        ),
    ]
    i = 0
    while time.monotonic() < stop_at:
        what, req, want = requests[i % len(requests)]
        i += 1
        try:
            with socket.create_connection((HOST, port), timeout=SCRAPE_TIMEOUT) as s:
                t0 = time.monotonic()
                try:
                    s.sendall(req)
                except OSError:
                    pass  # the server may answer and close before all is sent
                data = b""
                while True:
                    try:
                        chunk = s.recv(65536)
                    except ConnectionResetError:
                        break
                    if not chunk:
                        break
                    data += chunk
                held = time.monotonic() - t0
                status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
                # Closed without an answer: shed for newer connections
                # before its headers were whole, which is allowed too.
                abuse.status(what, status or "closed")
                if status and status != want:
                    abuse.error(what, f"status {status}, expected {want}")
                abuse.cut(what, held)
        except OSError as e:
            abuse.error(what, type(e).__name__)
        time.sleep(0.5)


def attack_counts(attack, total):
    """Clients of each kind in one attack phase."""
    if attack != "mixed":
        return {attack: total}
    return {kind: max(1, int(round(total * share))) for kind, share in MIX.items()}


def start_abuse(port, attack, total, stop_at, readers_until, abuse):
    """The attack's clients until `stop_at`; the slow readers keep their
    connection (without opening new ones after `stop_at`) until it is cut
    or `readers_until`."""
    threads = []
    watch = TcpWatch(port, readers_until + 1)
    for kind, n in attack_counts(attack, total).items():
        for _ in range(n):
            if kind in ("slow_headers", "reconnect"):
                t = threading.Thread(target=slow_headers, args=(port, stop_at, abuse, kind))
            elif kind in ("slow_body", "no_read"):
                per_second = 16 if kind == "slow_body" else 0
                t = threading.Thread(
                    target=slow_reader,
                    args=(port, stop_at, readers_until, abuse, kind, per_second, watch))
            else:
                t = threading.Thread(target=oversized, args=(port, stop_at, abuse))
            threads.append(t)
    for t in threads:
        t.daemon = True
        t.start()
    return threads


# ---------------------------------------------------------------------------
# Reporting


def pct(sorted_values, q):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


def phase_summary(name, lat, errs, duration):
    lat = sorted(lat)
    return {
        "phase": name,
        "scrapes": len(lat),
        "per_second": len(lat) / duration if duration else 0,
        "p50": pct(lat, 0.50) * 1e3,
        "p99": pct(lat, 0.99) * 1e3,
        "max": (lat[-1] * 1e3) if lat else float("nan"),
        "errors": sum(errs.values()),
        "error_kinds": errs,
    }


# Longest a connection of each kind may be held before the server cuts it:
# headers not finished: the header read timeout; an answer not read: it sits
# in the socket buffers, so the server is done writing and the idle
# keep-alive connection is cut at the same timeout. When the answer is
# larger than the buffers, a client that takes nothing is cut at
# web.write_stall_timeout (tests/it/http.rs), one that keeps reading slowly at
# the connection age plus the close grace: the bound kept here for both.
def bound(kind):
    if kind in ("slow_headers", "reconnect"):
        return HEADER_READ_TIMEOUT + SLACK
    if kind in ("slow_body", "no_read"):
        return MAX_CONNECTION_AGE + CLOSE_GRACE + SLACK
    return SLACK


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=30.0, help="seconds per phase (default 30)")
    p.add_argument("--scrapers", type=int, default=200, help="concurrent scrapers (default 200)")
    p.add_argument("--abusers", type=int, default=1000,
                   help=f"abusive clients per attack phase (default 1000; at least 10 x "
                        f"max_requests = {10 * MAX_REQUESTS})")
    p.add_argument("--max-p99-ms", type=float, default=1000.0,
                   help="fail when the scrapers' p99 in a phase is above this (default 1000)")
    p.add_argument("--slice", type=float, default=15.0,
                   help="length of the alternating quiet and attack slices (default 15 s)")
    p.add_argument("--processes", type=int, default=2, help="scraper processes (default 2)")
    p.add_argument("--tree", default=os.path.join(ROOT, "examples/demo-gpu-node"),
                   help="folder with sys/ and proc/ (and netdev-replay/)")
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/roce_exporter"))
    p.add_argument("--no-build", action="store_true", help="do not run cargo build --release")
    p.add_argument("--out", default=os.path.join(ROOT, "bench/load-results.md"),
                   help="Markdown report to write ('-': none)")
    p.add_argument("--no-wait-cuts", action="store_true",
                   help="stop watching the slow readers when the attack phase ends, even when "
                        "the server has not cut them yet (its bound is the connection age)")
    # At rest the exporter takes ~20 MiB; each open connection costs hyper's
    # two 8 KiB buffers, its task and the allocator's share, ~32 KiB, and up
    # to max_connections (1024) are open under attack: ~32 MiB more.
    p.add_argument("--max-rss-mib", type=float, default=96.0,
                   help="fail when the exporter's RSS peaks above this (default 96)")
    # The allocator keeps what the connections of a flood freed for the next
    # one, so RSS after a flood stays near its peak; a leak shows as growth
    # from one flood to the next. The mixed attack runs once more at the end
    # for that.
    p.add_argument("--max-growth-mib", type=float, default=16.0,
                   help="fail when RSS after the mixed attack run again exceeds RSS after the "
                        "phases by more (default 16)")
    args = p.parse_args(argv)

    if args.abusers < 10 * MAX_REQUESTS:
        log(f"--abusers must be at least 10 x max_requests ({10 * MAX_REQUESTS})")
        return 2
    # One descriptor per abusive connection, and threads with small stacks.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    threading.stack_size(256 * 1024)
    if not args.no_build:
        log("cargo build --release")
        rc = subprocess.call(["cargo", "build", "--release", "--quiet", "--bin", "roce_exporter"],
                             cwd=ROOT)
        if rc != 0:
            return 2
    if not os.access(args.binary, os.X_OK):
        log(f"no binary at {args.binary}")
        return 2

    load_before = loadavg()
    workdir = tempfile.mkdtemp(prefix="roce-load-")
    port = free_port()
    started = time.monotonic()
    try:
        proc, body_len = start_exporter(args.binary, args.tree, port, workdir)
    except RuntimeError as e:
        log(str(e))
        return 2
    rss = []  # (t, KiB)
    fd_peak = [0]
    stop_sampling = threading.Event()

    def sample():
        while not stop_sampling.is_set():
            v = rss_kib(proc.pid)
            if v is not None:
                rss.append((time.monotonic(), v))
            n = fds(proc.pid)
            if n is not None:
                fd_peak[0] = max(fd_peak[0], n)
            stop_sampling.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rss_start = rss_kib(proc.pid)
    fd_start = fds(proc.pid)
    phases = []
    abuse = Abuse()
    try:
        # Rounds of every phase, so that whatever else the machine does
        # meanwhile weighs on all alike.
        slices = max(1, int(round(args.duration / args.slice)))
        span = args.duration / slices
        names = ["baseline"] + ATTACKS
        got = {name: ([], {}) for name in names}
        log(f"{slices} x ({span:g} s of each of {', '.join(names)}) with {args.scrapers} "
            f"scrapers and {args.abusers} abusive clients per attack")
        for i in range(slices):
            for name in names:
                procs, queue, start_at, stop_at = run_scrapers(
                    port, args.scrapers, span, args.processes)
                threads = []
                abuse_until = stop_at
                if name != "baseline":
                    while time.monotonic() < start_at:
                        time.sleep(0.01)
                    # The slow readers may hold their connection up to the
                    # connection age and grace: after the last phase, unless
                    # told not to wait, they are watched until then.
                    if i == slices - 1 and name == names[-1] and not args.no_wait_cuts:
                        abuse_until = max(stop_at, start_at + bound("no_read"))
                    threads = start_abuse(port, name, args.abusers, stop_at, abuse_until, abuse)
                lat, errs = collect_scrapers(procs, queue, stop_at)
                if abuse_until > stop_at:
                    log(f"scrapers done; watching the slow readers until they are cut "
                        f"(at most {abuse_until - time.monotonic():.0f} s more)")
                deadline = max(abuse_until, time.monotonic()) + SCRAPE_TIMEOUT + 5
                for t in threads:
                    t.join(timeout=max(deadline - time.monotonic(), 0))
                stuck = sum(1 for t in threads if t.is_alive())
                if stuck:
                    log(f"{name}: {stuck} abusive clients still blocked; going on")
                got[name][0].extend(lat)
                for k, v in errs.items():
                    got[name][1][k] = got[name][1].get(k, 0) + v
                log(f"{name}: {len(lat)} scrapes, errors {errs or 0}")
        for name in names:
            phases.append(phase_summary(name, got[name][0], got[name][1], args.duration))
        # Let the server close what the phase left open.
        time.sleep(1.0)
        rss_settled = rss_kib(proc.pid)
        log(f"mixed attack again for {span:g} s: does RSS grow from one flood to the next?")
        procs, queue, start_at, stop_at = run_scrapers(port, args.scrapers, span, args.processes)
        while time.monotonic() < start_at:
            time.sleep(0.01)
        threads = start_abuse(port, "mixed", args.abusers, stop_at, stop_at, Abuse())
        collect_scrapers(procs, queue, stop_at)
        deadline = time.monotonic() + SCRAPE_TIMEOUT + 5
        for t in threads:
            t.join(timeout=max(deadline - time.monotonic(), 0))
        time.sleep(1.0)
        rss_end = rss_kib(proc.pid)
        fd_end = fds(proc.pid)
    finally:
        stop_sampling.set()
        sampler.join()
        alive = proc.poll() is None
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    elapsed = time.monotonic() - started
    args.loadavg = (load_before, loadavg())
    exit_ok = proc.returncode == 0
    rss_peak = max(v for _, v in rss) if rss else None

    failures = []
    for ph in phases:
        if ph["errors"]:
            failures.append(f"{ph['phase']}: {ph['errors']} scraper errors {ph['error_kinds']}")
        if ph["scrapes"] == 0:
            failures.append(f"{ph['phase']}: no successful scrape")
        elif ph["p99"] > args.max_p99_ms:
            failures.append(f"{ph['phase']}: scrapers' p99 {ph['p99']:.0f} ms "
                            f"(limit {args.max_p99_ms:g})")
    # A wrong answer to an abusive client fails the run; its failures to
    # connect or send are the server shedding it, reported only.
    for (kind, what), n in sorted(abuse.errors.items()):
        if what.startswith("status "):
            failures.append(f"{kind}: {n} x {what}")
    for kind, cuts in sorted(abuse.cuts.items()):
        late = [c for c in cuts if c > bound(kind)]
        if late:
            failures.append(f"{kind}: {len(late)} connections held longer than {bound(kind):g} s")
    for kind, ages in sorted(abuse.held.items()):
        old = [a for a in ages if a > bound(kind)]
        if old:
            failures.append(f"{kind}: {len(old)} connections still open after {bound(kind):g} s")
    if not alive:
        failures.append("the exporter died during the run")
    if not exit_ok:
        failures.append(f"the exporter exited with {proc.returncode} on SIGTERM")
    mib = lambda k: k / 1024.0  # noqa: E731
    if rss_peak is not None and mib(rss_peak) > args.max_rss_mib:
        failures.append(f"RSS peaked at {mib(rss_peak):.1f} MiB (limit {args.max_rss_mib:g})")
    if rss_settled and rss_end and mib(rss_end - rss_settled) > args.max_growth_mib:
        failures.append(
            f"RSS grew {mib(rss_end - rss_settled):.1f} MiB from one mixed attack to the next "
            f"(limit {args.max_growth_mib:g})")

    report = render(args, phases, abuse, body_len, rss_start, rss_peak, rss_settled, rss_end,
                    fd_start, fd_peak[0], fd_end, elapsed, failures)
    print(report)
    if args.out != "-":
        with open(args.out, "w") as f:
            f.write(report)
        log(f"wrote {args.out}")
    shutil.rmtree(workdir, ignore_errors=True)
    for f in failures:
        log("FAIL " + f)
    return 1 if failures else 0


def render(args, phases, abuse, body_len, rss_start, rss_peak, rss_settled, rss_end,
           fd_start, fd_peak, fd_end, elapsed, failures):
    mib = lambda k: f"{k / 1024.0:.1f}" if k is not None else "?"  # noqa: E731
    cpu = bench.cpu_model("")
    tree = os.path.relpath(args.tree, ROOT) if args.tree.startswith(ROOT) else args.tree
    binary = os.path.relpath(args.binary, ROOT) if args.binary.startswith(ROOT) else args.binary
    slices = max(1, int(round(args.duration / args.slice)))
    out = []
    out.append("# Load test: concurrent scrapers beside floods of abusive clients\n")
    out.append("Generated by `bench/load.py`; do not edit by hand.\n")
    out.append(f"- command: `python3 bench/load.py --duration {args.duration:g} "
               f"--scrapers {args.scrapers} --abusers {args.abusers}`; binary `{binary}`")
    out.append(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: "
               f"{os.cpu_count()} CPUs ({cpu or platform.machine()}), Linux {platform.release()}, "
               f"exporter and clients on the same machine, loopback")
    out.append(f"- tree: `{tree}` (exposition {body_len / 1024:.0f} KiB), sample_interval 1 s; "
               f"web limits: the binary's max_requests and max_connections (today "
               f"{MAX_REQUESTS} and {MAX_CONNECTIONS}), header_read_timeout "
               f"{HEADER_READ_TIMEOUT:g} s, max_request_bytes {MAX_REQUEST_BYTES}; connection age "
               f"{MAX_CONNECTION_AGE:g} s + {CLOSE_GRACE:g} s grace")
    out.append(f"- scrapers: {args.scrapers} keep-alive clients in {args.processes} processes, "
               f"back to back, {SCRAPE_TIMEOUT:g} s timeout; an error is any answer but 200, a "
               f"timeout, a reset or a refused connection (a kept-alive connection closed by "
               f"the server is retried once on a new one, as HTTP clients do); each phase "
               f"{args.duration:g} s, in {slices} rounds of {args.duration / slices:g} s")
    out.append(f"- attacks: {args.abusers} abusive clients each ({args.abusers / MAX_REQUESTS:g} x "
               f"max_requests); mixed: " + ", ".join(
                   f"{n} {k}" for k, n in attack_counts("mixed", args.abusers).items()))
    out.append(f"- whole run: {elapsed:.0f} s; host load average (1 min) before / after: "
               f"{args.loadavg[0]} / {args.loadavg[1]} (other work on the machine shares "
               f"its {os.cpu_count()} CPUs with the exporter and the clients)\n")
    out.append("## Scrapers, per phase\n")
    out.append("| phase | scrapes | scrapes/s | p50 ms | p99 ms | max ms | errors |")
    out.append("|---|---|---|---|---|---|---|")
    for ph in phases:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(ph["error_kinds"].items()))
        out.append(f"| {ph['phase']} | {ph['scrapes']} | {ph['per_second']:.0f} | {ph['p50']:.2f} "
                   f"| {ph['p99']:.2f} | {ph['max']:.1f} | {ph['errors']}"
                   + (f" ({kinds})" if kinds else "") + " |")
    out.append("\n## Abusive clients (all attack phases)\n")
    out.append("| kind | connections cut | held before the cut (median / max s) "
               "| open when a phase ended | bound s | answers | client errors |")
    out.append("|---|---|---|---|---|---|---|")
    kinds = ["slow_headers", "reconnect", "slow_body", "no_read", "headers_too_large", "body"]
    for kind in kinds:
        cuts = sorted(abuse.cuts.get(kind, []))
        med = f"{statistics.median(cuts):.1f} / {cuts[-1]:.1f}" if cuts else "-"
        answers = ", ".join(f"{s}: {n}" for (k, s), n in
                            sorted(abuse.statuses.items(), key=lambda kv: str(kv[0])) if k == kind)
        errors = ", ".join(f"{w}: {n}" for (k, w), n in sorted(abuse.errors.items()) if k == kind)
        out.append(f"| {kind} | {len(cuts)} | {med} | {len(abuse.held.get(kind, []))} "
                   f"| {bound(kind):g} | {answers or '-'} | {errors or '-'} |")
    out.append("\nHeld: from connect (backlog wait included) to the server's close. A connection "
               "that has not sent a whole request is closed for a newer one once "
               "max_connections are open (the one waiting longest first), else at the header "
               "timeout. A slow or non-reading client's answer (135 KiB here) fits in the socket "
               "buffers, so the server is done with it at once and the idle connection is "
               "closed like any other. For answers larger than the buffers, a client that takes "
               "no byte is cut at `web.write_stall_timeout` (10 s) and one that keeps reading "
               "slowly at the connection age plus grace, the bound used here. Oversized requests "
               "are refused as soon as the limit is crossed.")
    out.append("\n## Exporter\n")
    out.append("| | start | peak | after the phases | after the mixed attack again (end) |")
    out.append("|---|---|---|---|---|")
    out.append(f"| RSS MiB | {mib(rss_start)} | {mib(rss_peak)} | {mib(rss_settled)} "
               f"| {mib(rss_end)} |")
    out.append(f"| open files | {fd_start} | {fd_peak} | - | {fd_end} |")
    out.append(f"\nLimits checked: no scraper error, scrapers' p99 ≤ {args.max_p99_ms:g} ms in "
               f"every phase, every abusive connection cut within its bound, RSS peak ≤ "
               f"{args.max_rss_mib:g} MiB and growth from one mixed attack to the next ≤ "
               f"{args.max_growth_mib:g} MiB.")
    out.append("\nResult: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
