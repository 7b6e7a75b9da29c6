//! The standing attack suite: every input surface of the exporter, the
//! hostile inputs it is fed, and the bound each must hold. New cases of
//! files the user names live here; the surfaces tested elsewhere are listed
//! with their tests, so that this list is the one place to look.
//!
//! | surface | hostile input | bound | tests |
//! |---|---|---|---|
//! | `--config.file` at start | a FIFO, `/dev/zero`, a file growing while read, over 4 MiB | refused in one read (exit 2, the file and why named); a read stuck in the kernel abandoned after 5 s | here; `roce_host::named` |
//! | `--config.file` on SIGHUP | the same swapped in | refused, the running configuration kept, scrapes go on, SIGTERM ends the process within 10 s | here |
//! | `--web.config.file` and the files it names | a FIFO, `/dev/zero` swapped in for the file, certificate or key | refused, the running web configuration kept, read off the server's path, scrapes go on | here; tests/it/tls.rs (rotation, refusals) |
//! | `peer_probes.file`, `password_file`, bearer token, `tls_ca_file`, `resolv.conf` | a FIFO, `/dev/zero`, oversized | refused, a collector error, probing and scrapes go on | here; `roce_fleet::peer_list`, `roce_fleet::peer_http` unit tests |
//! | peer endpoint documents, the Prometheus answer, DNS SRV answers | multicast, `::`, loopback, link-local, off-rail GIDs; QPN 0, 1, 2^32-1; MTU 0; a byte a second; redirects; oversized; malformed | refused and counted by reason, never probed; one absolute deadline per request | `roce_fleet::runner::tests::hostile_documents_are_refused_counted_and_never_probed`, `roce_fleet::peer_http` tests, `fuzz/fuzz_targets/peer_discovery.rs` |
//! | peer-probe datagrams | a forged probe naming a peer, floods from admitted and unknown senders, foreign payloads, stray echoes | one echo, never a loop; 100 answers/s per sender, 5 "not admitted"/s in all | `roce_probe::peer_admit` tests; tests/vm/e2e-fleet.sh (on the wire) |
//! | LLDP frames (`lldp.mode: capture`) | every truncation, lying TLV lengths, missing, repeated or out-of-order mandatory TLVs, oversized text and tables, 20,000 random corruptions, a neighbour flooding one port | the frame rejected and counted (`roce_lldp_frames_rejected_total`), a malformed DCBX TLV dropped alone; text 255 bytes (128 in a label), 64 APP entries, 4 addresses, 4 neighbours per port, 256 ports; per sample `lldp.max_frames_per_sample` frames shared by the netdevs, a 64 KiB socket buffer | crates/lldp/tests/decode.rs, crates/lldp/tests/veth.rs, `fuzz/fuzz_targets/lldp.rs`; tests/vm/e2e-fleet.sh (on the wire) |
//! | lldpd's JSON (`lldpcli` output, `lldp.json_file`) | a FIFO as the file, hostile and oversized documents | the named-file rules (regular files only, 4 MiB, a deadline); lldpcli killed after 3 s, its output cut at 4 MiB; a hostile document refused whole or its bad parts left absent | tests/it/rules_lldp.rs, crates/lldp/tests/decode.rs, `fuzz/fuzz_targets/lldp.rs` |
//! | NCCL log directories | 100 MB of distinct-entry device tables, 60,000 old files beside a live log, 300 fresh files against 100 slots, copytruncate regrown past the offset, a `.prom` file larger than a read, unreadable files, a missing directory | peak RSS under 64 MiB and state freed with its files (here; release figures in bench/nccl_memory.py); a live log found within 4 reads; every skip counted by reason; one lasting error per missing directory, the file and errno for an unreadable one | here; crates/nccl/tests/tail.rs, crates/nccl/tests/aggregate.rs, tests/it/nccl_source.rs |
//! | sysfs and procfs trees | every errno a kernel returns, files vanishing mid-read, a read that never returns | absent or a counted error, the rest of the sample kept; a stuck read times out at one interval | tests/it/faults.rs, tests/it/signals.rs, `crates/*/tests/faults.rs` |
//! | netlink replies, ethtool replays | truncated, oversized, lying lengths | parsed within bounds, errors counted | `roce_netlink` tests, `crates/netdev/tests/faults.rs`, `fuzz/` |
//! | HTTP clients | 10x the connection cap, slowloris, oversized and body-carrying requests | no error for well-behaved scrapers, the rest cut | tests/it/http_pressure.rs, tests/it/http.rs, bench/load.py (CI) |
//! | load-test control (`POST /load-test/session`, `/end`) | no TLS or nobody authenticated, no or wrong credentials, duplicated and unknown keys, overlong numbers, QPN 0/1, a bad MTU or message size, multicast, loopback, broadcast, network, own and off-rail GIDs, over the caps, a second session on a busy port, a loaded port, an unknown session id, a body, a query over 4 KiB | refused with its reason and status and counted (`roce_load_test_responder_refused_total`), nothing opened; one session per port; a session ends on its deadline, byte cap, a silent requester (5 s), a reload or shutdown, releasing its QPs, MR and buffer; the server's task never blocks (10 s at most for an answer) | `roce_fleet::load` tests, tests/it/load_http.rs, tests/vm/e2e-peer.sh (on the wire: busy, 401, over_cap, off_rail, a killed requester) |
//! | `load_test.results_file` | a FIFO, oversized, malformed, another version | the named-file rules; refused, a collector error, scrapes go on | here; `sources::load_test` |
//!
//! The cases here run the real binary (`cargo test` builds it; the same
//! code as the release build).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::rdma_common::TempTree;
use crate::signals::{healthz, signal, spawn_args, spawn_with, wait_exit, wait_for, Running};

const BIN: &str = env!("CARGO_BIN_EXE_roce_exporter");
/// The documented bound on the process's life after SIGTERM.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// The exporter on an ephemeral port with `config` as its configuration
/// file, its standard error piped.
fn spawn_with_config(config: &Path) -> std::process::Child {
    Command::new(BIN)
        .arg("--web.listen-address=127.0.0.1:0")
        .arg(format!("--config.file={}", config.display()))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs the exporter with `config` as its configuration file until it
/// exits on its own (a hang fails: bounded by the signals module's guard).
fn start_with_config(config: &Path) -> (std::process::ExitStatus, String) {
    let mut child = spawn_with_config(config);
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let status = wait_exit(&mut child);
    (status, reader.join().unwrap_or_default())
}

/// Like [`start_with_config`], for a configuration that may be valid when
/// read: `None` (and the process ended) once it serves.
fn start_with_config_or_serving(config: &Path) -> (Option<std::process::ExitStatus>, String) {
    let mut child = spawn_with_config(config);
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        match std::io::BufRead::read_line(&mut err, &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => log.push_str(&line),
        }
        if line.contains("msg=listening") {
            let _ = child.kill();
            let _ = child.wait();
            return (None, log);
        }
    }
    (Some(wait_exit(&mut child)), log)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-attack-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// SIGTERM, then the exit within the documented limit.
fn stop(running: &mut Running) {
    signal(&running.0, libc::SIGTERM);
    let t = Instant::now();
    let status = wait_exit(&mut running.0);
    let took = t.elapsed();
    eprintln!("ended {took:?} after SIGTERM");
    assert!(status.success(), "{status:?}");
    assert!(took <= SHUTDOWN_LIMIT, "alive {took:?} after SIGTERM");
}

#[test]
fn a_config_file_that_is_a_fifo_a_device_or_growing_is_refused_at_start() {
    let d = scratch("start");
    let fifo = d.join("fifo.yml");
    mkfifo(&fifo);
    let (status, err) = start_with_config(&fifo);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not a regular file (a FIFO)"), "{err}");
    assert!(err.contains("fifo.yml"), "{err}");

    let (status, err) = start_with_config(Path::new("/dev/zero"));
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("not a regular file (a character device)"),
        "{err}"
    );

    // A file far over the cap, and one that grows while it is read.
    let big = d.join("big.yml");
    std::fs::write(&big, vec![b'#'; 5 << 20]).unwrap();
    let (status, err) = start_with_config(&big);
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("larger than 4194304 bytes"), "{err}");
    let growing = d.join("growing.yml");
    std::fs::write(&growing, "sample_interval: 5s\n").unwrap();
    let writer = {
        let growing = growing.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut w = std::fs::OpenOptions::new()
                .append(true)
                .open(&growing)
                .unwrap();
            let chunk = vec![b'#'; 1 << 20];
            for _ in 0..64 {
                if w.write_all(&chunk).is_err() {
                    return;
                }
            }
        })
    };
    let (status, err) = start_with_config_or_serving(&growing);
    let _ = writer.join();
    // Read before it passed the cap (a valid file: then it serves) or
    // refused at the cap: never read without end.
    match status {
        Some(status) => assert!(
            status.code() == Some(2) && err.contains("larger than"),
            "{status:?} {err}"
        ),
        None => assert!(err.contains("msg=listening"), "{err}"),
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_fifo_or_device_swapped_in_for_the_config_is_refused_on_sighup_and_serving_goes_on() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let config = tree.root.join("roce_exporter.yml");
    std::fs::write(&config, "sample_interval: 1s\n").unwrap();
    let (mut running, log) = spawn_with(&tree.root, &config, &[]);
    let listening = wait_for(&log, "msg=listening");
    let port = listening.rsplit(':').next().unwrap().trim().to_string();

    mkfifo(&config);
    signal(&running.0, libc::SIGHUP);
    let refused = wait_for(&log, "configuration reload refused");
    assert!(refused.contains("a FIFO"), "{refused}");
    assert!(healthz(&port).starts_with("HTTP/1.1 200"));

    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &config).unwrap();
    signal(&running.0, libc::SIGHUP);
    let refused = wait_for(&log, "configuration reload refused");
    assert!(refused.contains("a character device"), "{refused}");
    assert!(healthz(&port).starts_with("HTTP/1.1 200"));
    stop(&mut running);
}

#[test]
fn a_fifo_swapped_in_for_the_web_config_never_stops_a_scrape() {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let config = tree.root.join("roce_exporter.yml");
    std::fs::write(&config, "sample_interval: 1s\n").unwrap();
    let web = tree.root.join("web.yml");
    std::fs::write(&web, "# plain HTTP\n").unwrap();
    let (mut running, log) = spawn_with(
        &tree.root,
        &config,
        &[format!("--web.config.file={}", web.display())],
    );
    let listening = wait_for(&log, "msg=listening");
    let port = listening.rsplit(':').next().unwrap().trim().to_string();
    mkfifo(&web);
    // The watcher looks at the files every second, off the server's path.
    let refused = wait_for(&log, "web configuration change refused");
    assert!(refused.contains("a FIFO"), "{refused}");
    for _ in 0..20 {
        assert!(healthz(&port).starts_with("HTTP/1.1 200"));
    }
    stop(&mut running);
}

#[test]
fn a_fifo_as_the_peers_file_is_a_collector_error_and_serving_goes_on() {
    // Peer probes run on the host's own /sys only (a fixture tree has no
    // verbs devices behind it): here a host without RDMA ports, where the
    // peer list is still read.
    let d = scratch("peers");
    let peers = d.join("peers");
    mkfifo(&peers);
    let config = d.join("roce_exporter.yml");
    std::fs::write(
        &config,
        format!(
            "sample_interval: 1s\npeer_probes:\n  enabled: true\n  file: {}\n",
            peers.display()
        ),
    )
    .unwrap();
    let (mut running, log) = spawn_args(&config, &[]);
    let listening = wait_for(&log, "msg=listening");
    let port = listening.rsplit(':').next().unwrap().trim().to_string();
    let error = wait_for(&log, "a FIFO");
    assert!(error.contains("peer_probes.file"), "{error}");
    assert!(error.contains("collector=peer_probe"), "{error}");
    assert!(healthz(&port).starts_with("HTTP/1.1 200"));
    stop(&mut running);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_fifo_or_garbage_as_the_load_test_results_is_a_collector_error_and_serving_goes_on() {
    let d = scratch("load-results");
    let results = d.join("results.json");
    mkfifo(&results);
    let config = d.join("roce_exporter.yml");
    std::fs::write(
        &config,
        format!(
            "sample_interval: 1s\nload_test:\n  results_file: {}\n",
            results.display()
        ),
    )
    .unwrap();
    let (mut running, log) = spawn_args(&config, &[]);
    // Said in the first sample, before serving.
    let error = wait_for(&log, "a FIFO");
    assert!(error.contains("collector=load_test"), "{error}");
    let listening = wait_for(&log, "msg=listening");
    let port = listening.rsplit(':').next().unwrap().trim().to_string();
    assert!(healthz(&port).starts_with("HTTP/1.1 200"));
    // Garbage in its place: the parser's error, still serving.
    std::fs::remove_file(&results).unwrap();
    std::fs::write(&results, "{\"version\": 1, \"runs\": [{").unwrap();
    let error = wait_for(&log, "EOF while parsing");
    assert!(error.contains("results.json"), "{error}");
    assert!(healthz(&port).starts_with("HTTP/1.1 200"));
    stop(&mut running);
    let _ = std::fs::remove_dir_all(&d);
}

fn get(port: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// kB from a `/proc/<pid>/status` line.
fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// The documented bound on the exporter's peak RSS with 100 MB of hostile
/// NCCL log (bench/nccl_memory.py measures the release build's figure).
const NCCL_FLOOD_RSS_KB: u64 = 64 << 10;

#[test]
fn a_hundred_megabytes_of_distinct_entry_nccl_lines_keep_rss_bounded() {
    let d = scratch("nccl-flood");
    let logs = d.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    // Lines of 64 distinct device-table entries each, from 8 files of
    // 1,024 writers each, indexes never repeated within a writer.
    let mut total = 0usize;
    for file in 0..8u32 {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(logs.join(format!("nccl.flood.{file}.log"))).unwrap(),
        );
        let mut n = 0u32;
        while total < (100 << 20) * (file as usize + 1) / 8 {
            let pid = file * 10_000 + n % 1024;
            let first = (n / 1024) * 64;
            let mut l = format!("h{file}:{pid}:{pid} [0] NCCL INFO NET/IB : Using");
            for i in first..first + 64 {
                l.push_str(&format!(" [{i}]mlx5_{i}:1/RoCE"));
            }
            l.push_str(" [RO]; OOB eth0:10.0.0.1<0>\n");
            total += l.len();
            std::io::Write::write_all(&mut out, l.as_bytes()).unwrap();
            n += 1;
        }
    }
    let config = d.join("roce_exporter.yml");
    std::fs::write(
        &config,
        format!(
            "sample_interval: 1s\nnccl:\n  enabled: true\n  log_dir: {}\n  interval: 1s\n  max_bytes_per_read: 16777216\n",
            logs.display()
        ),
    )
    .unwrap();
    let (mut running, log) = spawn_args(&config, &[]);
    let listening = wait_for(&log, "msg=listening");
    let port = listening.rsplit(':').next().unwrap().trim().to_string();
    let until = Instant::now() + Duration::from_secs(240);
    let text = loop {
        let text = get(&port, "/metrics");
        let read = metric(&text, "roce_nccl_read_bytes_total").unwrap_or(0.0);
        if read >= total as f64 {
            break text;
        }
        assert!(Instant::now() < until, "read only {read} of {total} bytes");
        std::thread::sleep(Duration::from_millis(500));
    };
    let pid = running.0.id();
    let peak = status_kb(pid, "VmHWM:");
    eprintln!(
        "{total} bytes read; peak RSS {peak} kB; state {:?} bytes in {:?} processes",
        metric(&text, "roce_nccl_state_bytes"),
        metric(&text, "roce_nccl_processes")
    );
    assert!(peak < NCCL_FLOOD_RSS_KB, "peak RSS {peak} kB");
    assert!(metric(&text, "roce_nccl_state_dropped_total{what=\"device\"}").unwrap() > 0.0);
    // Deleting the files frees what came from them.
    std::fs::remove_dir_all(&logs).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let text = get(&port, "/metrics");
        if metric(&text, "roce_nccl_processes") == Some(0.0) {
            assert_eq!(metric(&text, "roce_nccl_state_bytes"), Some(0.0));
            break;
        }
        assert!(Instant::now() < until, "state kept after its files went");
        std::thread::sleep(Duration::from_millis(500));
    }
    stop(&mut running);
    let _ = std::fs::remove_dir_all(&d);
}
