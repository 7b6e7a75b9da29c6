//! Helpers the test modules share: the repository root, loopback
//! connections with a safety-net timeout, skipping (a failure under CI)
//! when a tool or privilege is missing, `promtool check metrics`, and the
//! comparison with a golden file.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The repository root (the root crate's folder).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A test whose tool, privilege or kernel feature is missing here is
/// skipped, with the reason; under CI (`CI` set), which provides all of
/// them, that is a failure instead, so that nothing passes untested.
pub fn skip_unless_ci(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: CI must provide it, not skip the test"
    );
    eprintln!("skipped: {why}");
}

/// A connection to `addr` whose connect, reads and writes give up after
/// `timeout`, so that a server that never answers fails the test instead
/// of hanging it.
pub fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    Ok(s)
}

/// `promtool check metrics` on `text`: `None` when promtool is missing
/// (fails under CI, where it must be installed), else its complaints
/// (empty: it accepts the text).
pub fn promtool_check(text: &str) -> Option<String> {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "promtool not runnable under CI ({e}): install Debian's `prometheus` package"
            );
            eprintln!("skipping promtool checks: promtool not runnable ({e})");
            return None;
        }
    };
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(text.as_bytes()).expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool runs");
    let mut report = String::from_utf8_lossy(&out.stdout).into_owned();
    report.push_str(&String::from_utf8_lossy(&out.stderr));
    if !out.status.success() && report.trim().is_empty() {
        report = format!("promtool exited with {}", out.status);
    }
    Some(report)
}

/// Compares `actual` with tests/golden/`name`; `UPDATE_GOLDEN=1` rewrites
/// the file instead.
pub fn golden(name: &str, actual: &str) {
    let path = repo().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {} (UPDATE_GOLDEN=1 rewrites it):\n--- expected\n{}\n--- actual\n{}",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or("<end>"),
            actual.lines().nth(first).unwrap_or("<end>")
        );
    }
}

/// A source's errors as the log and the status page word them.
pub fn texts(errors: &[roce_host::HostError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// Runs `cmd` to its end; `None` when its program cannot start here
/// (skipped, with the reason; a failure under CI, which provides it).
pub fn output_of(cmd: &mut Command) -> Option<Output> {
    match cmd.output() {
        Ok(out) => Some(out),
        Err(e) => {
            skip_unless_ci(&format!("{:?} not runnable ({e})", cmd.get_program()));
            None
        }
    }
}

/// Fails with the command's stdout and stderr unless it exited 0.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `roce_exporter check` from the repository root (the demo config
/// names its replay folder relative to it), with a 1 s window.
pub fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce_exporter"))
        .current_dir(repo())
        .arg("check")
        .args(["--window", "1s", "--log.level", "error"])
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run roce_exporter check")
}

/// `check` on the demo node's tree with the configuration file `config`
/// (relative to the repository root, or absolute) and `extra` arguments.
pub fn check_demo_tree(config: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "--config.file",
        config,
        "--path.sysfs",
        "examples/demo-gpu-node/sys",
        "--path.procfs",
        "examples/demo-gpu-node/proc",
    ];
    args.extend_from_slice(extra);
    check(&args)
}

/// A PCI address the test spells right.
pub fn pci(s: &str) -> roce_topology::PciAddress {
    roce_topology::PciAddress::parse(s).unwrap()
}

/// A host where GPUDirect RDMA works: nvidia-peermem loaded on kernel 6.8
/// with the proprietary module, and rdma-core 50's libibverbs.
pub fn gpudirect_ready() -> roce_topology::GpuDirect {
    use roce_topology::gpudirect::{Libibverbs, NvidiaModule};
    roce_topology::GpuDirect {
        peermem_loaded: true,
        kernel: Some((6, 8)),
        nvidia_module: NvidiaModule::Proprietary,
        amdgpu_loaded: false,
        libibverbs: Some(Libibverbs {
            file: "libibverbs.so.1.14.50.0".into(),
            abi_minor: 14,
            rdma_core: Some(50),
        }),
    }
}

/// GPU `index`, an NVIDIA H100 SXM (device 0x2330) at `address` on NUMA
/// node 0.
pub fn h100(index: usize, address: &str) -> roce_topology::Gpu {
    roce_topology::Gpu {
        index,
        address: pci(address),
        vendor: roce_topology::GpuVendor::Nvidia,
        device_id: Some(0x2330),
        numa_node: Some(0),
        name: None,
        uuid: None,
    }
}
