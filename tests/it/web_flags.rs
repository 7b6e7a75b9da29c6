//! node_exporter's web flags against the real binary:
//! `--web.telemetry-path` moves the exposition (the old path is 404, the
//! landing page links to the new one), `--web.disable-exporter-metrics`
//! leaves out `process_*` and keeps the rest, and `--web.systemd-socket`
//! serves on a listening socket passed as systemd does (descriptor 3,
//! LISTEN_PID, LISTEN_FDS) and refuses, with exit status 2, what systemd
//! would not pass: no variables, another process's LISTEN_PID, a
//! descriptor that is a file, a UDP socket or a TCP socket that does not
//! listen.

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

use crate::attack::get;
use crate::rdma_common::TempTree;
use crate::signals::{spawn_args, wait_exit, wait_for, Running};

const BIN: &str = env!("CARGO_BIN_EXE_roce_exporter");

fn tree_and_config() -> (TempTree, std::path::PathBuf) {
    let tree = TempTree::copy_of("sys-mlx5-roce");
    let config = tree.root.join("roce_exporter.yml");
    std::fs::write(&config, "sample_interval: 1s\n").unwrap();
    (tree, config)
}

fn port_of(listening: &str) -> String {
    listening.rsplit(':').next().unwrap().trim().to_string()
}

#[test]
fn the_telemetry_path_moves_the_exposition_and_exporter_metrics_can_be_left_out() {
    let (tree, config) = tree_and_config();
    let sysfs = format!("--path.sysfs={}", tree.root.display());
    let (plain, log) = spawn_args(&config, std::slice::from_ref(&sysfs));
    let port = port_of(&wait_for(&log, "msg=listening"));
    let metrics = get(&port, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("\nprocess_start_time_seconds "),
        "{metrics}"
    );
    drop(plain);

    let args = [
        sysfs,
        "--web.telemetry-path=/prom/metrics".to_string(),
        "--web.disable-exporter-metrics".to_string(),
    ];
    let (_running, log) = spawn_args(&config, &args);
    let port = port_of(&wait_for(&log, "msg=listening"));
    let moved = get(&port, "/prom/metrics");
    assert!(moved.starts_with("HTTP/1.1 200"), "{moved}");
    assert!(
        moved.contains("\nroce_port_up{device=\"mlx5_0\",port=\"1\"} 1"),
        "{moved}"
    );
    assert!(moved.contains("\nroce_exporter_build_info{"), "{moved}");
    assert!(moved.contains("\nroce_collector_success{"), "{moved}");
    assert!(!moved.contains("\nprocess_"), "process_* left in: {moved}");
    assert!(get(&port, "/metrics").starts_with("HTTP/1.1 404"));
    let landing = get(&port, "/");
    assert!(landing.contains("<a href=\"/prom/metrics\">"), "{landing}");
    assert!(!landing.contains("href=\"/metrics\""), "{landing}");
}

/// The exporter started as systemd starts a socket-activated service:
/// `stdin` becomes descriptor 3, LISTEN_PID is the exporter's own pid
/// (`$$` of the shell that execs it) unless `pid` names another.
fn activated(stdin: OwnedFd, pid: Option<&str>, config: &std::path::Path, sysfs: &str) -> Running {
    let pid = pid.unwrap_or("$$");
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "export LISTEN_PID={pid} LISTEN_FDS=1; exec \"$0\" \"$@\" 3<&0 0</dev/null"
        ))
        .arg(BIN)
        .arg("--web.systemd-socket")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--path.sysfs={sysfs}"))
        .arg("--log.level=debug")
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Running(child)
}

fn refused(mut running: Running) -> String {
    let status = wait_exit(&mut running.0);
    let mut err = String::new();
    if let Some(mut e) = running.0.stderr.take() {
        use std::io::Read;
        e.read_to_string(&mut err).unwrap();
    }
    assert_eq!(status.code(), Some(2), "{err}");
    err
}

#[test]
fn a_socket_systemd_passes_is_served() {
    let (tree, config) = tree_and_config();
    let sysfs = tree.root.display().to_string();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut running = activated(OwnedFd::from(listener), None, &config, &sysfs);
    let stderr = running.0.stderr.take().unwrap();
    let (tx, log) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let listening = wait_for(&log, "msg=listening");
    assert!(
        listening.ends_with(&format!("address=127.0.0.1:{port}")),
        "{listening}"
    );
    let metrics = get(&port, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains("\nroce_port_up{device=\"mlx5_0\",port=\"1\"} 1"),
        "{metrics}"
    );
}

#[test]
fn what_systemd_would_not_pass_is_refused() {
    let (tree, config) = tree_and_config();
    let sysfs = tree.root.display().to_string();

    // no socket unit at all
    let out = Command::new(BIN)
        .args([
            "--web.systemd-socket",
            &format!("--config.file={}", config.display()),
        ])
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("LISTEN_PID is not set"));

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let err = refused(activated(
        OwnedFd::from(listener),
        Some("1"),
        &config,
        &sysfs,
    ));
    assert!(err.contains("is not this process"), "{err}");

    let file = std::fs::File::open(&config).unwrap();
    let err = refused(activated(OwnedFd::from(file), None, &config, &sysfs));
    assert!(
        err.contains("descriptor 3") && err.contains("not a socket"),
        "{err}"
    );

    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let err = refused(activated(OwnedFd::from(udp), None, &config, &sysfs));
    assert!(
        err.contains("descriptor 3") && err.contains("tcp socket"),
        "{err}"
    );

    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let connected = TcpStream::connect(server.local_addr().unwrap()).unwrap();
    let err = refused(activated(OwnedFd::from(connected), None, &config, &sysfs));
    assert!(err.contains("does not listen"), "{err}");
}
