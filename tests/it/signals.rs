//! The server's signals, against the real binary: a SIGHUP as soon as the
//! process watches it (before it is ready: the first sample is held up by a
//! source that does not answer) is a reload request, not death; a reload
//! that changes `web:` limits names the keys that need a restart; SIGTERM
//! ends the process although a source is still in its call.
//!
//! The source that does not answer is the LLDP source asking an `lldpcli`
//! that never answers (a script that sleeps), killed after 3 s: a file
//! read cannot hold a sample any more (a FIFO is refused by its type, a
//! read stuck in the kernel costs its own value after its per-item
//! deadline; tests/it/faults.rs).

use crate::rdma_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdma_common::TempTree;

const BIN: &str = env!("CARGO_BIN_EXE_roce_exporter");
/// The bound on waiting for anything here: a hang fails the test. Not a
/// timing assertion; the documented bounds are far below it.
const GUARD: Duration = Duration::from_secs(60);

/// A fixture copy and the configuration lines of an `lldpcli` in it that
/// never answers: every LLDP call waits for it until it is killed (3 s).
fn stuck_tree() -> (TempTree, String) {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let lldpcli = tree.root.join("lldpcli");
    std::fs::write(&lldpcli, "#!/bin/sh\nexec sleep 3600\n").unwrap();
    let mut perms = std::fs::metadata(&lldpcli).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&lldpcli, perms).unwrap();
    let yaml = format!("lldp:\n  mode: lldpd\n  lldpcli: {}\n", lldpcli.display());
    (tree, yaml)
}

/// A child killed when the test ends early (a failed assertion).
pub(crate) struct Running(pub(crate) Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The exporter on `tree` with `config`, its log lines on a channel.
fn spawn(tree: &Path, config: &Path) -> (Running, mpsc::Receiver<String>) {
    spawn_with(tree, config, &[])
}

/// [`spawn`] with more arguments.
pub(crate) fn spawn_with(
    tree: &Path,
    config: &Path,
    extra: &[String],
) -> (Running, mpsc::Receiver<String>) {
    let mut args = vec![
        format!("--path.sysfs={}", tree.display()),
        format!("--path.procfs={}", tree.join("proc").display()),
    ];
    args.extend_from_slice(extra);
    spawn_args(config, &args)
}

/// The exporter with `config` and `args` (the host's own paths unless
/// `args` name others), its log lines on a channel.
pub(crate) fn spawn_args(config: &Path, args: &[String]) -> (Running, mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .arg("--web.listen-address=127.0.0.1:0")
        .arg(format!("--config.file={}", config.display()))
        .arg("--log.level=debug")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            eprintln!("exporter: {line}");
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (Running(child), rx)
}

/// Waits for a log line containing `text`; returns it.
pub(crate) fn wait_for(log: &mpsc::Receiver<String>, text: &str) -> String {
    let until = Instant::now() + GUARD;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match log.recv_timeout(left) {
            Ok(line) if line.contains(text) => return line,
            Ok(_) => {}
            Err(e) => panic!("no log line with {text:?}: {e}"),
        }
    }
}

/// Waits for a log line containing each of `texts`, in any order; returns
/// them in the order of `texts`.
fn wait_for_all<const N: usize>(log: &mpsc::Receiver<String>, texts: [&str; N]) -> [String; N] {
    let until = Instant::now() + GUARD;
    let mut found: [Option<String>; N] = std::array::from_fn(|_| None);
    while found.iter().any(Option::is_none) {
        let left = until.saturating_duration_since(Instant::now());
        match log.recv_timeout(left) {
            Ok(line) => {
                if let Some(i) = (0..N).find(|&i| found[i].is_none() && line.contains(texts[i])) {
                    found[i] = Some(line);
                }
            }
            Err(e) => panic!("no log lines with all of {texts:?}: {e}"),
        }
    }
    found.map(Option::unwrap_or_default)
}

/// Whether the process has a handler for `sig` (`SigCgt` in
/// /proc/PID/status, bit signum - 1).
fn catches(pid: u32, sig: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (sig - 1)) != 0)
}

/// Waits until the process handles `sig`.
pub(crate) fn wait_until_caught(child: &mut Child, sig: i32) {
    let until = Instant::now() + GUARD;
    while !catches(child.id(), sig) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before watching signal {sig}"
        );
        assert!(Instant::now() < until, "never watched signal {sig}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub(crate) fn signal(child: &Child, sig: i32) {
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

pub(crate) fn healthz(port: &str) -> String {
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

/// Waits for the child to end; its exit status.
pub(crate) fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let until = Instant::now() + GUARD;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("the process did not end");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_before_ready_reloads_web_changes_are_named_and_sigterm_ends_a_stuck_process() {
    let (tree, lldp) = stuck_tree();
    let config = tree.root.join("roce_exporter.yml");
    std::fs::write(&config, format!("sample_interval: 2s\n{lldp}")).unwrap();
    let (mut running, log) = spawn(&tree.root, &config);
    let child = &mut running.0;

    // As soon as the process watches SIGHUP: long before it is ready, the
    // first sample waiting 2 s on lldpcli.
    wait_until_caught(child, libc::SIGHUP);
    signal(child, libc::SIGHUP);

    wait_for(&log, "msg=\"roce_exporter started\"");
    // The SIGHUP that came before is handled once serving: its reload may
    // be logged before or after the listener's line.
    // The sampler thread logs that it applied the reload independently.
    let [listening, _, _] = wait_for_all(
        &log,
        [
            "msg=listening",
            "msg=\"configuration reloaded\"",
            "msg=\"new configuration applied; sampling now\"",
        ],
    );
    let port = listening.rsplit(':').next().unwrap().trim().to_string();
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP killed it");
    let reply = healthz(&port);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains("collector failed: lldp: timed out"),
        "{reply}"
    );

    // A reload that changes web limits: applied for the rest, the limits
    // named as needing a restart.
    std::fs::write(
        &config,
        format!(
            "sample_interval: 2s\n{lldp}web:\n  max_connections: 8\n  header_read_timeout: 3s\n"
        ),
    )
    .unwrap();
    signal(child, libc::SIGHUP);
    let warn = wait_for(&log, "need a restart");
    assert!(warn.contains("level=warn"), "{warn}");
    assert!(
        warn.contains("keys=web.max_connections,web.header_read_timeout"),
        "{warn}"
    );

    // SIGTERM while the LLDP source waits for lldpcli.
    signal(child, libc::SIGTERM);
    let stopping = Instant::now();
    let status = wait_exit(child);
    eprintln!("ended {:?} after SIGTERM", stopping.elapsed());
    assert!(status.success(), "{status:?}");
}

#[test]
fn sigterm_during_a_first_sample_held_up_by_a_source_ends_the_process() {
    let (tree, lldp) = stuck_tree();
    let config = tree.root.join("roce_exporter.yml");
    // The first sample waits for lldpcli (killed after 3 s) before the
    // server is ready.
    std::fs::write(&config, format!("sample_interval: 1m\n{lldp}")).unwrap();
    let (mut running, log) = spawn(&tree.root, &config);
    let child = &mut running.0;
    wait_until_caught(child, libc::SIGTERM);
    wait_for(&log, "taking the first sample before serving");
    signal(child, libc::SIGTERM);
    // Ends (within the guard: a hang fails), cleanly once the first sample
    // is in, or cut short at the shutdown limit.
    let status = wait_exit(child);
    let lines: Vec<String> = log.iter().collect();
    assert!(
        status.success()
            || lines
                .iter()
                .any(|l| l.contains("msg=\"shutdown did not finish in time; exiting now\"")),
        "{status:?} {lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("SIGTERM received")),
        "{lines:#?}"
    );
}
