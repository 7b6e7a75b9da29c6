#!/usr/bin/env python3
"""Benchmark of roce_exporter against Debian's prometheus-node-exporter.

Owns the performance figures the README quotes: for generated mlx5 RoCE sysfs
trees (roce-testkit's bench tree, on tmpfs) of several sizes it runs both exporters
side by side, in the same run, on the same tree, and measures

  - scrape latency, client side over loopback on a kept-alive connection
    (median and p90);
  - CPU time per scrape: the exporter's CPU clock over the scrape loop,
    divided by the number of scrapes; for roce_exporter the background
    sampling done meanwhile is taken out (idle rate x loop time);
  - roce_exporter's CPU per sample: its CPU clock over an idle window of
    M sample intervals, divided by the samples taken;
  - resident memory (VmRSS, and the peak VmHWM) at the end;

and prints the ratios ours/theirs. Before measuring it checks that both
exporters report the same values for a few counters of the tree, so that the
comparison is like for like.

CPU time comes from the process CPU clock (clock_gettime on the clock id of
the pid, nanosecond resolution, threads that exited included); the /proc
utime+stime ticks (10 ms resolution) are kept as a cross-check.

Python 3 standard library only. Linux only. Run from anywhere:
    python3 bench/bench.py                  # build, 8 and 128 ports, write bench/results.md
    python3 bench/bench.py --no-build --ports 8 --scrapes 100
"""

import argparse
import datetime
import gzip
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the work tree

NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
ACCEPT_TEXT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# Counters compared between the two exporters (and the tree): (node_exporter
# family, roce_exporter family, counters/ file, factor from file to value).
# port_{rcv,xmit}_data count octets divided by 4 (IB spec: PortXmitData and PortRcvData
# count 32-bit words).
COMPARED = [
    ("node_infiniband_port_data_received_bytes_total", "roce_port_data_received_bytes_total",
     "port_rcv_data", 4),
    ("node_infiniband_port_data_transmitted_bytes_total", "roce_port_data_transmitted_bytes_total",
     "port_xmit_data", 4),
    ("node_infiniband_port_packets_received_total", "roce_port_packets_received_total",
     "port_rcv_packets", 1),
    ("node_infiniband_symbol_error_total", "roce_port_symbol_errors_total", "symbol_error", 1),
    ("node_infiniband_link_downed_total", "roce_port_link_downed_total", "link_downed", 1),
]


# --------------------------------------------------------------------------
# Processes and their CPU clocks


def cpu_clock_seconds(pid):
    """Process CPU time in seconds, ns resolution (CPUCLOCK_SCHED of the pid)."""
    return time.clock_gettime(((~pid) << 3) | 2)


def cpu_ticks_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After "pid (comm)": state is fields[0]; utime is stat field 14 -> [11].
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


SAMPLER_THREAD = "roce-sampler"
# The sources are called in turn on the reader thread (a new one replaces
# a reader left to a stuck call): sampling work too.
SOURCE_THREAD = "roce-sources"


def thread_cpu_seconds(pid, comm):
    """CPU time of the threads of pid named comm (schedstat, ns resolution),
    and for SAMPLER_THREAD of the source threads as well; None when there is
    no such thread."""
    import syscalls
    total, found = 0, False
    for tid, name in syscalls.thread_names(pid).items():
        if name != comm and not (comm == SAMPLER_THREAD and name == SOURCE_THREAD):
            continue
        try:
            with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
                found = True
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9 if found else None


def memory_kib(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0])
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


def open_fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return -1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Exporter:
    def __init__(self, name, argv, port, logdir, nofile=None):
        self.name = name
        self.port = port
        self.log_path = os.path.join(logdir, "%s-%d.log" % (name, port))
        self.log = open(self.log_path, "wb")

        def limits():
            if nofile:
                hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=limits)
        self.client = None

    @property
    def pid(self):
        return self.proc.pid

    def wait_ready(self, timeout=20.0, needle=None):
        """Waits until /metrics answers (and, with needle, until its text
        holds needle: the first sample may land after the server starts).
        Returns whether needle was seen."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s:\n%s" % (self.name, self.proc.returncode,
                                                               self.log_tail()))
            try:
                if self.client is None:
                    self.client = HttpClient("127.0.0.1", self.port)
                _, headers, body = self.client.get("/metrics")
                if needle is None or needle in text_of(headers, body):
                    return True
                last = "no %r in /metrics yet" % needle
                time.sleep(0.1)
            except OSError as e:
                self.client = None
                last = e
                time.sleep(0.05)
        if needle is not None and self.client is not None:
            return False
        raise RuntimeError("%s not ready after %.0fs (%s):\n%s" % (self.name, timeout, last,
                                                                   self.log_tail()))

    def log_tail(self, n=20):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")

    def stop(self):
        if self.client:
            self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --------------------------------------------------------------------------
# A minimal HTTP/1.1 keep-alive client: http.client costs tens of µs per
# request in Python, which would blur a sub-millisecond exporter.


class HttpClient:
    def __init__(self, host, port, accept_encoding=None):
        self.addr = (host, port)
        self.accept_encoding = accept_encoding
        self.sock = None

    def connect(self):
        self.sock = socket.create_connection(self.addr, timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None

    def request_bytes(self, path, accept_encoding):
        lines = ["GET %s HTTP/1.1" % path, "Host: %s:%d" % self.addr, "Accept: " + ACCEPT_TEXT,
                 "User-Agent: roce-bench"]
        if accept_encoding:
            lines.append("Accept-Encoding: " + accept_encoding)
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("connection closed by the server")
        self.buf += chunk

    def _read_line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def get(self, path, accept_encoding=None, _retry=True):
        """Returns (status, headers, body as sent on the wire)."""
        if self.sock is None:
            self.connect()
        try:
            self.sock.sendall(self.request_bytes(path, accept_encoding))
            while b"\r\n\r\n" not in self.buf:
                self._fill()
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        except (ConnectionError, BrokenPipeError):
            self.close()
            if _retry:
                return self.get(path, accept_encoding, False)
            raise
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            body = self._read_exact(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self._read_line().split(b";")[0], 16)
                if size == 0:
                    while self._read_line():
                        pass
                    break
                parts.append(self._read_exact(size))
                self._read_exact(2)
            body = b"".join(parts)
        else:
            # Body delimited by the end of the connection.
            while True:
                try:
                    self._fill()
                except ConnectionError:
                    break
            body, self.buf = self.buf, b""
            self.close()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body


def text_of(headers, body):
    if headers.get("content-encoding", "").lower() == "gzip":
        body = gzip.decompress(body)
    return body.decode("utf-8", "replace")


# --------------------------------------------------------------------------
# Exposition parsing (enough for the checks)

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    series = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            continue
        labels = tuple(sorted(LABEL_RE.findall(m.group(2) or "")))
        try:
            series[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return series


def lookup(series, family, **labels):
    want = set(labels.items())
    for (name, lbls), value in series.items():
        if name == family and want.issubset(set(lbls)):
            return value
    return None


def read_counter(tree, device, port, name):
    with open(os.path.join(tree, "class", "infiniband", device, "ports", str(port),
                           "counters", name)) as f:
        return int(f.read().strip())


def compare_values(tree, ne_text, ours_text, devices):
    ne = parse_exposition(ne_text)
    ours = parse_exposition(ours_text)
    rows = []
    for dev in devices:
        for ne_family, our_family, fname, factor in COMPARED:
            expected = read_counter(tree, dev, 1, fname) * factor
            a = lookup(ne, ne_family, device=dev, port="1")
            b = lookup(ours, our_family, device=dev, port="1")
            if b is None:
                verdict = "ours missing"
            elif a is None:
                verdict = "node_exporter missing"
            elif a == b == expected:
                verdict = "same"
            else:
                verdict = "DIFFERENT"
            rows.append((dev, fname, expected, a, b, verdict))
    return rows


# --------------------------------------------------------------------------
# Measurements


def percentile(values, q):
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


TIMESTAMP_RE = re.compile(r"^roce_sample_timestamp_seconds (\S+)", re.M)


def body_timestamp(headers, body):
    m = TIMESTAMP_RE.search(text_of(headers, body))
    return float(m.group(1)) if m else None


def scrape_block(exp, n, accept_encoding):
    """n scrapes; returns (latencies s, cpu s, cpu ticks s, wall s, bytes,
    sample timestamps of the first and last answer)."""
    client = exp.client
    lat = []
    size = 0
    first = last = None
    cpu0, tick0 = cpu_clock_seconds(exp.pid), cpu_ticks_seconds(exp.pid)
    sampler0 = thread_cpu_seconds(exp.pid, SAMPLER_THREAD)
    w0 = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        status, headers, body = client.get("/metrics", accept_encoding)
        lat.append(time.perf_counter() - t0)
        if status != 200:
            raise RuntimeError("%s answered %d" % (exp.name, status))
        size = len(body)
        if i == 0:
            first = (headers, body)
        last = (headers, body)
    wall = time.perf_counter() - w0
    cpu1, tick1 = cpu_clock_seconds(exp.pid), cpu_ticks_seconds(exp.pid)
    sampler1 = thread_cpu_seconds(exp.pid, SAMPLER_THREAD)
    ts = (body_timestamp(*first), body_timestamp(*last)) if first else (None, None)
    sampler = sampler1 - sampler0 if sampler0 is not None and sampler1 is not None else None
    return lat, cpu1 - cpu0, tick1 - tick0, wall, size, ts, sampler


def sample_timestamp(exp):
    _, headers, body = exp.client.get("/metrics")
    return lookup(parse_exposition(text_of(headers, body)), "roce_sample_timestamp_seconds")


def read_floor(tree, repeats=50):
    """Python os.pread of every counters/ and hw_counters/ file on kept
    descriptors: an upper bound of the cost of reading the tree's values."""
    fds = []
    ib = os.path.join(tree, "class", "infiniband")
    for dev in sorted(os.listdir(ib)):
        for group in ("counters", "hw_counters"):
            d = os.path.join(ib, dev, "ports", "1", group)
            if not os.path.isdir(d):
                continue  # hw_counters/ of an equal-work tree
            for name in sorted(os.listdir(d)):
                fds.append(os.open(os.path.join(d, name), os.O_RDONLY))
    try:
        t0 = time.perf_counter()
        for _ in range(repeats):
            for fd in fds:
                int(os.pread(fd, 64, 0))
        return (time.perf_counter() - t0) / repeats, len(fds)
    finally:
        for fd in fds:
            os.close(fd)


def generate_tree(tree, ports, equal_work=False):
    """Writes the benchmark's mlx5 tree of `ports` devices at `tree`
    (roce-testkit: crates/testkit/src/trees/bench.rs). With equal_work, the
    ports' `hw_counters/` and GID tables (`gids/`, `gid_attrs/`) go: what is
    left is what node_exporter's infiniband collector reads too (`counters/`
    and the port attributes), so both exporters do the same work."""
    subprocess.run(["cargo", "run", "-q", "--release", "-p", "roce-testkit", "--",
                    "bench-tree", "--ports", str(ports), "--out", tree], cwd=REPO, check=True)
    if equal_work:
        for dirpath, dirnames, _ in os.walk(tree):
            if os.path.basename(os.path.dirname(dirpath)) != "ports":
                continue
            for name in ("hw_counters", "gids", "gid_attrs"):
                if name in dirnames:
                    shutil.rmtree(os.path.join(dirpath, name))


def threads_cpu(pid):
    """CPU seconds of each of pid's threads by name (schedstat, ns
    resolution); threads of one name are added up."""
    import syscalls
    out = {}
    for tid, name in syscalls.thread_names(pid).items():
        try:
            with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
                out[name] = out.get(name, 0.0) + int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return out


def measure(args, ports, binary, workdir):
    tree = os.path.join(args.tree_dir, "roce-bench-%d-%d" % (ports, os.getpid()))
    t0 = time.perf_counter()
    generate_tree(tree, ports, args.equal_work)
    gen_s = time.perf_counter() - t0
    config = os.path.join(workdir, "config-%d.yml" % ports)
    with open(config, "w") as f:
        f.write("sample_interval: %gms\n" % (args.interval * 1000))

    ne_port, our_port = free_port(), free_port()
    ne = Exporter("node_exporter", [args.node_exporter, "--collector.disable-defaults",
                                    "--collector.infiniband", "--path.sysfs=" + tree,
                                    "--web.listen-address=127.0.0.1:%d" % ne_port,
                                    "--log.level=warn"], ne_port, workdir, args.nofile)
    ours = Exporter("roce_exporter", [binary, "--config.file=" + config, "--path.sysfs=" + tree,
                                      "--web.listen-address=127.0.0.1:%d" % our_port,
                                      "--log.level=warn"], our_port, workdir, args.nofile)
    result = {"ports": ports, "tree": tree, "gen_s": gen_s}
    try:
        ne.wait_ready()
        result["our_first_sample"] = ours.wait_ready(timeout=60.0, needle="roce_port_")
        result["nofile"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0] if not args.nofile \
            else args.nofile

        # Like for like: same values from both, and from the tree.
        _, h1, b1 = ne.client.get("/metrics")
        _, h2, b2 = ours.client.get("/metrics")
        ne_text, our_text = text_of(h1, b1), text_of(h2, b2)
        devices = ["mlx5_0", "mlx5_%d" % (ports - 1)]
        result["compare"] = compare_values(tree, ne_text, our_text, devices)
        result["ne_series"] = len(parse_exposition(ne_text))
        result["our_series"] = len(parse_exposition(our_text))
        our_series = parse_exposition(our_text)
        result["our_rdma_series"] = sum(1 for (name, _) in our_series
                                        if name.startswith("roce_port_"))
        result["our_collectors"] = sorted(
            (dict(lbls).get("collector", "?"), v) for (name, lbls), v in our_series.items()
            if name == "roce_collector_success")

        for _ in range(args.warmup):
            ne.client.get("/metrics")
            ours.client.get("/metrics")

        # Idle window: only the sampler runs. Both exporters idle together.
        ts0 = sample_timestamp(ours)
        n_idle = max(1, round(args.idle / args.interval))
        c_ours0, c_ne0 = cpu_clock_seconds(ours.pid), cpu_clock_seconds(ne.pid)
        k_ours0 = cpu_ticks_seconds(ours.pid)
        s_ours0 = thread_cpu_seconds(ours.pid, SAMPLER_THREAD)
        t_ours0 = threads_cpu(ours.pid)
        rss0 = memory_kib(ours.pid)[0]
        w0 = time.perf_counter()
        time.sleep(n_idle * args.interval)
        idle_wall = time.perf_counter() - w0
        c_ours1, c_ne1 = cpu_clock_seconds(ours.pid), cpu_clock_seconds(ne.pid)
        k_ours1 = cpu_ticks_seconds(ours.pid)
        s_ours1 = thread_cpu_seconds(ours.pid, SAMPLER_THREAD)
        t_ours1 = threads_cpu(ours.pid)
        rss1 = memory_kib(ours.pid)[0]
        _, h_idle, b_idle = ours.client.get("/metrics")
        idle_series = parse_exposition(text_of(h_idle, b_idle))
        ts1 = lookup(idle_series, "roce_sample_timestamp_seconds")
        result["our_durations"] = sorted(
            (dict(lbls).get("collector", "?"), v) for (name, lbls), v in idle_series.items()
            if name == "roce_collector_duration_seconds")
        # What each source asked of the kernel in the last sample, by its own
        # count: the split of the reader thread's system calls by source.
        requests = {}
        for (name, lbls), v in idle_series.items():
            if name == "roce_collector_kernel_requests":
                d = dict(lbls)
                requests.setdefault(d.get("collector", "?"), {})[d.get("kind", "?")] = v
        result["our_kernel_requests"] = requests
        samples = n_idle
        if ts0 is not None and ts1 is not None and ts1 > ts0:
            # The timestamps of the first and last sample seen bracket the
            # window to within one interval; trust them when they agree.
            by_ts = round((ts1 - ts0) / args.interval)
            if abs(by_ts - n_idle) <= 1:
                samples = by_ts
        result["samples_in_idle"] = samples
        result["idle_wall"] = idle_wall
        result["our_idle_cpu"] = c_ours1 - c_ours0
        result["our_idle_ticks"] = k_ours1 - k_ours0
        result["ne_idle_cpu"] = c_ne1 - c_ne0
        our_idle_rate = (c_ours1 - c_ours0) / idle_wall
        ne_idle_rate = (c_ne1 - c_ne0) / idle_wall
        result["our_cpu_per_sample"] = (c_ours1 - c_ours0) / samples
        # The sampler keeps a history of snapshots for the rules' windows, so
        # RSS grows with every sample until the history is full.
        result["rss_growth_per_sample"] = (rss1 - rss0) / samples
        result["sampler_thread_per_sample"] = (s_ours1 - s_ours0) / samples \
            if s_ours0 is not None and s_ours1 is not None else None
        # CPU per sample of each source's thread and of the sampler (the
        # rules, the snapshot) over the idle window.
        result["thread_cpu_per_sample"] = {
            name: (t_ours1[name] - t_ours0.get(name, 0.0)) / samples
            for name in t_ours1
            if name in (SOURCE_THREAD, SAMPLER_THREAD)}

        # With equal work, node_exporter is also scraped at our sample
        # interval, so that its reads start with caches as cold as our
        # sampler's do (its back-to-back loop below keeps them hot).
        if args.equal_work:
            n_paced = max(1, round(args.idle / args.interval))
            c0 = cpu_clock_seconds(ne.pid)
            next_at = time.monotonic()
            for _ in range(n_paced):
                ne.client.get("/metrics")
                next_at += args.interval
                time.sleep(max(0.0, next_at - time.monotonic()))
            # Its idle CPU over the same wall time is taken out.
            result["ne_paced_cpu_per_scrape"] = max(
                0.0, cpu_clock_seconds(ne.pid) - c0 - ne_idle_rate * n_paced * args.interval
            ) / n_paced
            result["ne_paced_scrapes"] = n_paced

        # Scrape loops, interleaved in rounds so that drift on a shared
        # machine hits both alike.
        for enc in args.encodings:
            accept = "gzip" if enc == "gzip" else None
            acc = {}
            for exp in (ne, ours):
                acc[exp.name] = {"lat": [], "cpu": 0.0, "ticks": 0.0, "wall": 0.0, "bytes": 0,
                                 "samples": 0, "samples_known": True, "sampler_cpu": 0.0,
                                 "sampler_known": True}
            per_round = max(1, args.scrapes // args.rounds)
            for _ in range(args.rounds):
                for exp in (ne, ours):
                    lat, cpu, ticks, wall, size, (ts_a, ts_b), sampler = scrape_block(
                        exp, per_round, accept)
                    a = acc[exp.name]
                    a["lat"] += lat
                    a["cpu"] += cpu
                    a["ticks"] += ticks
                    a["wall"] += wall
                    a["bytes"] = size
                    if sampler is None:
                        a["sampler_known"] = False
                    else:
                        a["sampler_cpu"] += sampler
                    if ts_a is not None and ts_b is not None:
                        a["samples"] += round((ts_b - ts_a) / args.interval)
                    else:
                        a["samples_known"] = False
            for exp, idle_rate in ((ne, ne_idle_rate), (ours, our_idle_rate)):
                a = acc[exp.name]
                n = len(a["lat"])
                a["n"] = n
                a["cpu_per_scrape_gross"] = a["cpu"] / n
                a["method"] = "idle rate"
                if exp is ours and a["sampler_known"]:
                    # The sampler thread's own CPU clock during the loop.
                    background = a["sampler_cpu"]
                    a["method"] = "sampler thread's CPU taken out"
                elif exp is ours and a["samples_known"]:
                    # The samples taken during the loop, counted from the
                    # answers' sample timestamps, at the idle cost per sample.
                    background = a["samples"] * result["our_cpu_per_sample"]
                    a["method"] = "samples taken out at the idle cost"
                else:
                    background = idle_rate * a["wall"]
                    a["samples"] = None
                a["cpu_per_scrape"] = max(0.0, a["cpu"] - background) / n
                a["ticks_per_scrape"] = a["ticks"] / n
                a["median"] = statistics.median(a["lat"])
                a["p90"] = percentile(a["lat"], 0.9)
                a["p99"] = percentile(a["lat"], 0.99)
            result[enc] = acc

        result["ne_rss"], result["ne_hwm"] = memory_kib(ne.pid)
        result["our_rss"], result["our_hwm"] = memory_kib(ours.pid)
        retained = (time.monotonic() - ours.started) / args.interval
        result["our_rss_projected"] = result["our_rss"] + \
            result["rss_growth_per_sample"] * (args.history - retained)
        result["ne_fds"], result["our_fds"] = open_fds(ne.pid), open_fds(ours.pid)
        result["floor_s"], result["floor_files"] = read_floor(tree)
        # Last: strace slows the exporter down while it is attached.
        result["syscalls"] = None
        if args.syscalls and shutil.which("strace"):
            import syscalls
            result["syscalls"] = syscalls.measure(ours.pid, ours.client, args.syscall_window,
                                                  workdir)
    finally:
        ne.stop()
        result["our_log"] = ours.log_tail(5)
        ours.stop()
        if not args.keep_trees:
            shutil.rmtree(tree, ignore_errors=True)
    return result


# --------------------------------------------------------------------------
# Reporting


def ms(s):
    return "%.3f ms" % (s * 1e3)


def us(s):
    return "%.1f µs" % (s * 1e6)


def mib(kib):
    return "%.1f MiB" % (kib / 1024)


def ratio(a, b):
    return "%.3g" % (a / b) if b else "n/a"


def render(results, args, meta):
    out = []
    out.append("## Figures\n")
    out.append("| ports | encoding | exporter | median scrape | p90 scrape | CPU per scrape | "
               "CPU per sample | RSS (peak) | body |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for enc in args.encodings:
            for name in ("node_exporter", "roce_exporter"):
                a = r[enc][name]
                per_sample = us(r["our_cpu_per_sample"]) if name == "roce_exporter" else "—"
                rss, hwm = (r["our_rss"], r["our_hwm"]) if name == "roce_exporter" else \
                    (r["ne_rss"], r["ne_hwm"])
                out.append("| %d | %s | %s | %s | %s | %s | %s | %s (%s) | %d B |" % (
                    r["ports"], enc, name, ms(a["median"]), ms(a["p90"]),
                    us(a["cpu_per_scrape"]), per_sample, mib(rss), mib(hwm), a["bytes"]))
    out.append("")
    out.append("## Ratios (roce_exporter / node_exporter; lower is better)\n")
    out.append("| ports | encoding | CPU: (sample + scrape) / scrape | median latency | "
               "p90 latency | RSS |")
    out.append("|---|---|---|---|---|---|")
    for r in results:
        for enc in args.encodings:
            ne, ours = r[enc]["node_exporter"], r[enc]["roce_exporter"]
            out.append("| %d | %s | %s | %s | %s | %s |" % (
                r["ports"], enc,
                ratio(r["our_cpu_per_sample"] + ours["cpu_per_scrape"], ne["cpu_per_scrape"]),
                ratio(ours["median"], ne["median"]), ratio(ours["p90"], ne["p90"]),
                ratio(r["our_rss"], r["ne_rss"])))
    out.append("")
    out.append("RSS with a full sample history (an estimate): roce_exporter keeps the last "
               "%d snapshots by default (longest rule window 600 s / sample interval 5 s, + 2); "
               "the run above grows RSS by the amount below per sample taken, so with a full "
               "history:\n" % args.history)
    out.append("| ports | RSS growth per sample | projected RSS, %d snapshots kept | "
               "node_exporter RSS |" % args.history)
    out.append("|---|---|---|---|")
    for r in results:
        out.append("| %d | %.1f KiB | %s | %s |" % (
            r["ports"], r["rss_growth_per_sample"], mib(r["our_rss_projected"]),
            mib(r["ne_rss"])))
    out.append("")
    eight = [r for r in results if r["ports"] == 8]
    if eight:
        r = eight[0]
        enc = args.encodings[0]
        ne, ours = r[enc]["node_exporter"], r[enc]["roce_exporter"]
        checks = []
        if args.equal_work:
            checks.append(
                ("equal work: CPU per sample + scrape <= 0.12 of node_exporter's CPU per scrape "
                 "(measured %s)" % ratio(r["our_cpu_per_sample"] + ours["cpu_per_scrape"],
                                         ne["cpu_per_scrape"]),
                 r["our_cpu_per_sample"] + ours["cpu_per_scrape"] <= 0.12 * ne["cpu_per_scrape"]))
            paced = r.get("ne_paced_cpu_per_scrape")
            if paced:
                checks.append(
                    ("equal work, both cold (node_exporter scraped once per sample interval, "
                     "%d scrapes, %s each): CPU per sample + scrape <= 0.12 of its CPU per scrape "
                     "(measured %s)" % (r["ne_paced_scrapes"], us(paced), ratio(
                         r["our_cpu_per_sample"] + ours["cpu_per_scrape"], paced)),
                     r["our_cpu_per_sample"] + ours["cpu_per_scrape"] <= 0.12 * paced))
        checks += [
            ("CPU per sample + scrape <= 1/5 of node_exporter's CPU per scrape (mixed cadences: "
             "our samples paced, its scrapes back to back; docs/performance.md compares "
             "them at equal cadence)",
             r["our_cpu_per_sample"] + ours["cpu_per_scrape"] <= ne["cpu_per_scrape"] / 5),
            ("median scrape latency <= 1/5 of node_exporter's",
             ours["median"] <= ne["median"] / 5),
            ("RSS <= 10 MiB at the end of the run", r["our_rss"] <= 10 * 1024),
            ("RSS <= 10 MiB with a full history (projected)",
             r["our_rss_projected"] <= 10 * 1024),
        ]
        out.append("## Targets at 8 ports (%s)\n" % enc)
        for text, ok in checks:
            out.append("- %s: **%s**" % (text, "met" if ok else "NOT met"))
        out.append("")
    out.append("## Cost of one sample per source\n")
    out.append("CPU per sample of the reader thread (`%s`: every source, called in turn) and "
               "of the sampler thread (the rules, the snapshot) over the idle window; system "
               "calls per idle sample from `strace -f` on the running exporter (bench/syscalls.py; "
               "none counted when strace is missing). Then each source: the wall time of its "
               "call in the last sample (`roce_collector_duration_seconds`) and what it asked of "
               "the kernel by its own count (`roce_collector_kernel_requests`), which splits the "
               "reader's system calls by source.\n" % SOURCE_THREAD)
    for r in results:
        calls = r.get("syscalls")
        per, samples = calls if calls else ({}, 0)
        out.append("%d ports:\n" % r["ports"])
        out.append("| thread | CPU per sample | syscalls per sample | failed | by call |")
        out.append("|---|---|---|---|---|")
        for name, cpu in sorted(r["thread_cpu_per_sample"].items()):
            who = "(sources)" if name == SOURCE_THREAD else "(sampler)"
            c = per.get(who, {})
            total = sum(n for n, _ in c.values())
            failed = sum(f for _, f in c.values())
            by = ", ".join("%s %.1f" % (k, n) for k, (n, _) in
                           sorted(c.items(), key=lambda kv: -kv[1][0]))
            out.append("| %s | %s | %s | %s | %s |" % (
                name, us(cpu), "%.1f" % total if calls else "—",
                "%.1f" % failed if calls else "—", by or "—"))
        out.append("")
        out.append("| source | wall time of its call | kernel requests per sample |")
        out.append("|---|---|---|")
        requests = r.get("our_kernel_requests", {})
        for who, seconds in r.get("our_durations", []):
            if seconds <= 0 and not requests.get(who):
                continue
            asked = ", ".join("%s %d" % (k, v) for k, v in sorted(requests.get(who, {}).items())
                              if v) or "none"
            out.append("| %s | %s | %s |" % (who, us(seconds), asked))
        if calls:
            out.append("")
            out.append("strace window: %d samples." % samples)
        out.append("")
    out.append("## Details\n")
    for r in results:
        out.append("- %d ports: tree of %d counter files generated in %.2f s; "
                   "node_exporter %d series, roce_exporter %d series (%d `roce_port_*`); "
                   "%d samples in the idle window of %.1f s (our CPU %.2f ms there, "
                   "/proc ticks %.2f ms, sampler thread %s per sample; node_exporter idle CPU "
                   "%.2f ms); "
                   "read floor (Python os.pread of every counters/ and hw_counters/ file, "
                   "kept descriptors) %s; open descriptors: node_exporter %d, roce_exporter %d; "
                   "roce_collector_success: %s; RLIMIT_NOFILE (soft) %d%s." % (
                       r["ports"], r["floor_files"], r["gen_s"], r["ne_series"], r["our_series"],
                       r["our_rdma_series"], r["samples_in_idle"], r["idle_wall"],
                       r["our_idle_cpu"] * 1e3, r["our_idle_ticks"] * 1e3,
                       "?" if r["sampler_thread_per_sample"] is None else
                       us(r["sampler_thread_per_sample"]),
                       r["ne_idle_cpu"] * 1e3, ms(r["floor_s"]), r["ne_fds"], r["our_fds"],
                       ", ".join("%s=%g" % cv for cv in r["our_collectors"]) or "none",
                       r["nofile"], "" if r["our_first_sample"] else
                       "; **roce_exporter never served `roce_port_*` series before measuring**"))
        out.append("  - roce_exporter's last sample (wall time per collector, "
                   "`roce_collector_duration_seconds`): %s" % (", ".join(
                       "%s %s" % (c, ms(v)) for c, v in r["our_durations"]) or "none"))
        if r["our_log"].strip():
            out.append("  - roce_exporter's last log lines: `%s`" % " / ".join(
                line.strip() for line in r["our_log"].splitlines()[-3:]).replace("`", "'"))
        for enc in args.encodings:
            for name in ("node_exporter", "roce_exporter"):
                a = r[enc][name]
                out.append("  - %s, %s: %d scrapes, CPU per scrape %s gross (background "
                           "not taken out), %s by /proc ticks; p99 %s%s" % (
                               name, enc, a["n"], us(a["cpu_per_scrape_gross"]),
                               us(a["ticks_per_scrape"]), ms(a["p99"]),
                               "" if a["samples"] is None else
                               "; %d samples taken during the loop" % a["samples"]))
                if name == "roce_exporter":
                    out.append("    (background: %s)" % a["method"])
    out.append("")
    out.append("## Same values through both exporters\n")
    out.append("| ports | device | counters/ file | expected | node_exporter | roce_exporter | |")
    out.append("|---|---|---|---|---|---|---|")
    for r in results:
        for dev, fname, expected, a, b, verdict in r["compare"]:
            out.append("| %d | %s | %s | %d | %s | %s | %s |" % (
                r["ports"], dev, fname, expected, "—" if a is None else "%.0f" % a,
                "—" if b is None else "%.0f" % b, verdict))
    out.append("")
    return "\n".join(out)


def cpu_model(unknown="?"):
    """The CPU's model name from /proc/cpuinfo, or `unknown`."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                        unknown)
    except OSError:
        return unknown


def emit(text, out):
    """Writes `text` to the file `out`, or prints it when there is none."""
    if out:
        with open(out, "w") as f:
            f.write(text)
    else:
        print(text)


def machine_meta(args, binary):
    cpu = cpu_model("unknown")
    def run(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=10,
                                  cwd=REPO).stdout.strip()
        except OSError:
            return "?"
    ne_version = (run([args.node_exporter, "--version"]).splitlines() or ["?"])[0]
    our_version = (run([binary, "--version"]).splitlines() or ["?"])[0]
    rev = run(["git", "rev-parse", "--short", "HEAD"]) or "?"
    dirty = " (uncommitted changes)" if run(["git", "status", "--porcelain"]) else ""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "load": "%.1f %.1f %.1f" % os.getloadavg(),
        "ne": ne_version,
        "ours": "%s, git %s%s" % (our_version, rev, dirty),
        "command": " ".join(["python3", "bench/bench.py"] + sys.argv[1:]),
    }


def header(meta, args):
    return "\n".join([
        "# Benchmark: roce_exporter against node_exporter",
        "",
        "Generated by `bench/bench.py`; rerun it to refresh. Both exporters read the same "
        "generated mlx5 RoCE sysfs tree (`cargo run -p roce-testkit -- bench-tree`: N devices x 1 port, "
        "ConnectX-7-like, 21 `counters/`, 31 `hw_counters/`, 255 GID slots, on tmpfs) in the "
        "same run, one after the other in interleaved rounds. node_exporter runs with only "
        "its infiniband collector; it does not read `hw_counters/` (Debian's 1.5.0), "
        "roce_exporter does. roce_exporter samples every %g s; sources that ask the running "
        "kernel (netlink, ioctl) are off because the tree is not `/sys`." % args.interval
        + (" **Equal work** (`--equal-work`): the ports' `hw_counters/` and GID tables are "
           "removed from the trees, so both exporters read the same `counters/` and port "
           "files." if args.equal_work else ""),
        "",
        "- date: %s" % meta["date"],
        "- machine: %s CPUs, %s, kernel %s, load average at the start %s (on a shared "
        "machine absolute times vary between runs, the ratios less)" % (
            meta["nproc"], meta["cpu"], meta["kernel"], meta["load"]),
        "- node_exporter: %s" % meta["ne"],
        "- roce_exporter: %s" % meta["ours"],
        "- command: `%s`" % meta["command"],
        "- method: latency is client side over loopback on a kept-alive connection, "
        "`Accept: text/plain;version=0.0.4`; CPU from the exporters' process CPU clocks; "
        "roce_exporter's CPU per scrape has its background sampling taken out, and its CPU per "
        "sample is measured over an idle window with no scrapes; RSS is VmRSS at the end.",
        "",
    ])


def build(args):
    cmd = ["cargo", "build", "--release", "--bin", "roce_exporter"]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=REPO, check=True)
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
    return os.path.join(target, "release", "roce_exporter")


def main(argv):
    p = argparse.ArgumentParser(description="roce_exporter against node_exporter")
    p.add_argument("--ports", default="8,128", help="comma-separated tree sizes (default 8,128)")
    p.add_argument("--scrapes", type=int, default=200, help="measured scrapes per exporter")
    p.add_argument("--rounds", type=int, default=4, help="interleaved rounds the scrapes split into")
    p.add_argument("--warmup", type=int, default=20, help="scrapes before measuring")
    p.add_argument("--interval", type=float, default=0.5,
                   help="roce_exporter sample_interval in seconds (default 0.5)")
    p.add_argument("--idle", type=float, default=10.0,
                   help="idle window for CPU per sample, seconds (default 10)")
    p.add_argument("--encodings", default="identity",
                   help="identity, gzip or both: identity,gzip (default identity)")
    p.add_argument("--no-build", action="store_true", help="use the binary as it is")
    p.add_argument("--binary", help="roce_exporter binary (implies --no-build)")
    p.add_argument("--node-exporter", default=NODE_EXPORTER)
    p.add_argument("--tree-dir", default="/dev/shm", help="where trees go (tmpfs)")
    p.add_argument("--keep-trees", action="store_true")
    p.add_argument("--history", type=int, default=122,
                   help="snapshots roce_exporter keeps with its default configuration, for the "
                        "projected RSS (default 122 = 600 s / 5 s + 2)")
    p.add_argument("--nofile", type=int,
                   help="soft RLIMIT_NOFILE for both exporters (systemd's default for services "
                        "is 1024; default: inherited)")
    p.add_argument("--equal-work", action="store_true",
                   help="remove hw_counters/ and the GID tables from the trees: both exporters "
                        "read the same counters/ and port files (the issue's budget: <= 0.12)")
    p.add_argument("--no-syscalls", dest="syscalls", action="store_false",
                   help="do not count system calls per source with strace")
    p.add_argument("--syscall-window", type=float, default=5.0,
                   help="strace window for the system calls per sample, seconds (default 5)")
    p.add_argument("--out", default=os.path.join(HERE, "results.md"),
                   help="markdown report (default bench/results.md; '-' for none)")
    args = p.parse_args(argv)
    args.encodings = [e.strip() for e in args.encodings.split(",") if e.strip()]
    for e in args.encodings:
        if e not in ("identity", "gzip"):
            p.error("unknown encoding %r" % e)
    sizes = [int(x) for x in args.ports.split(",") if x.strip()]

    if not os.access(args.node_exporter, os.X_OK):
        p.error("%s not found (Debian: apt-get install prometheus-node-exporter)"
                % args.node_exporter)
    if args.binary:
        binary = args.binary
    elif args.no_build:
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO, "target")
        binary = os.path.join(target, "release", "roce_exporter")
    else:
        binary = build(args)
    if not os.access(binary, os.X_OK):
        p.error("%s not found: build with cargo build --release" % binary)

    meta = machine_meta(args, binary)
    results = []
    with tempfile.TemporaryDirectory(prefix="roce-bench-") as workdir:
        for n in sizes:
            print("… %d ports" % n, file=sys.stderr, flush=True)
            results.append(measure(args, n, binary, workdir))
    text = header(meta, args) + "\n" + render(results, args, meta)
    print(text)
    if args.out != "-":
        with open(args.out, "w") as f:
            f.write(text)
        print("wrote %s" % os.path.relpath(args.out), file=sys.stderr)
    bad = [row for r in results for row in r["compare"] if row[5] != "same"]
    if bad:
        print("values differ or are missing: %d of %d checks" % (
            len(bad), sum(len(r["compare"]) for r in results)), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
