//! Least privilege (docs/security.md), tested with the built binary run as
//! an unprivileged user (uid/gid 65534 through `setpriv`, when the tests
//! run as root; as the test's own user otherwise):
//! - every fixture tree and the demo GPU node read the same as nobody as
//!   they do as root: sysfs, the replayed ethtool/DCB data and the PCI tree
//!   need no privilege;
//! - a file the user cannot read is reported with its path and the errno
//!   (EACCES: "Permission denied"), its values are absent, the rest stays;
//! - the running kernel really hides PCI config space beyond 64 bytes from
//!   an unprivileged reader (what makes ACS "unknown" without CAP_SYS_ADMIN),
//!   and the exporter then reports ACS unknown and says it needs CAP_SYS_ADMIN.
//!
//! The live sources under the hardened systemd unit (ethtool ioctl, netlink)
//! run in .ci/packaging.sh; the probes' device-open and memlock refusals as
//! nobody against a real kernel in tests/vm/e2e-probe.sh (phase unpriv).

use crate::support::{repo, skip_unless_ci};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const BIN: &str = env!("CARGO_BIN_EXE_roce_exporter");
const NOBODY: &str = "65534";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A scratch folder every user can traverse (the checkout may be under a
/// home folder nobody cannot enter), removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "roce-priv-{what}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.join("roce_exporter");
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        Scratch(dir)
    }

    fn bin(&self) -> PathBuf {
        self.0.join("roce_exporter")
    }

    /// Copies `src` (symlinks kept: sysfs trees are made of them) to `name`,
    /// readable by everyone.
    fn copy_tree(&self, src: &Path, name: &str) -> PathBuf {
        let dst = self.0.join(name);
        let st = Command::new("cp")
            .arg("-a")
            .arg(src)
            .arg(&dst)
            .status()
            .unwrap();
        assert!(st.success(), "cp -a {}", src.display());
        let st = Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&dst)
            .status()
            .unwrap();
        assert!(st.success());
        dst
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the exporter as nobody (root) or as ourselves (already
/// unprivileged). `None` when root cannot drop privileges here (no
/// setpriv), which CI does not accept.
fn run_unprivileged(bin: &Path, args: &[&str]) -> Option<Output> {
    let mut cmd = if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ])
        .arg(bin);
        c
    } else {
        Command::new(bin)
    };
    match cmd.args(args).output() {
        Ok(out) => Some(out),
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "setpriv not runnable under CI: {e}"
            );
            eprintln!("skipping: setpriv not runnable ({e})");
            None
        }
    }
}

fn run_privileged(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin).args(args).output().unwrap()
}

/// The exposition without the lines that differ from run to run.
fn stable(text: &[u8]) -> String {
    String::from_utf8_lossy(text)
        .lines()
        .filter(|l| {
            !l.starts_with("roce_collector_duration_seconds")
                && !l.starts_with("roce_sample_timestamp_seconds")
                // about the exporter process itself, not the host it reads
                && !l.starts_with("process_")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn success_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("roce_collector_success{"))
        .collect()
}

#[test]
fn every_source_reads_the_same_unprivileged() {
    let s = Scratch::new("trees");
    let fixtures = repo().join("crates/rdma/tests/fixtures");
    let mut runs: Vec<(String, Vec<String>)> = Vec::new();
    for tree in ["sys-mlx5-roce", "sys-mlx5-ib", "sys-rxe", "sys-bnxt_re"] {
        let root = s.copy_tree(&fixtures.join(tree), tree);
        runs.push((
            tree.into(),
            vec![
                "once".into(),
                format!("--path.sysfs={}", root.display()),
                format!("--path.procfs={}", root.join("proc").display()),
            ],
        ));
    }
    // The demo GPU node: RDMA, replayed ethtool and DCB, PCI topology with
    // GPUs, ACS from config space, GPUDirect evidence from its proc tree.
    let demo = s.copy_tree(&repo().join("examples/demo-gpu-node"), "demo");
    runs.push((
        "demo-gpu-node".into(),
        vec![
            "once".into(),
            format!("--config.file={}", demo.join("demo.yml").display()),
            format!("--path.sysfs={}", demo.join("sys").display()),
            format!("--path.procfs={}", demo.join("proc").display()),
        ],
    ));
    for (name, args) in runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(unpriv) = run_unprivileged(&s.bin(), &args) else {
            return;
        };
        assert!(
            unpriv.status.success(),
            "{name} as nobody: {}",
            String::from_utf8_lossy(&unpriv.stderr)
        );
        let text = stable(&unpriv.stdout);
        let success = success_lines(&text);
        assert!(!success.is_empty(), "{name}: no roce_collector_success");
        for line in &success {
            assert!(line.ends_with(" 1"), "{name} as nobody: {line}");
        }
        assert!(
            !text.contains("roce_collector_errors_total{collector=\"rdma\",kind=\"permission\"} 1"),
            "{name}: read errors as nobody"
        );
        let privileged = run_privileged(&s.bin(), &args);
        assert!(privileged.status.success());
        assert_eq!(
            text,
            stable(&privileged.stdout),
            "{name}: nobody reads something else than the privileged user"
        );
        if name == "demo-gpu-node" {
            for family in [
                "roce_pfc_pause_frames_total{",
                "roce_pfc_enabled{",
                "roce_gpu_nic_path_info{",
                "roce_pcie_link_info{",
            ] {
                assert!(
                    text.lines().any(|l| l.starts_with(family)),
                    "demo as nobody lacks {family}"
                );
            }
        }
    }
}

#[test]
fn an_unreadable_file_is_named_with_its_errno() {
    if !is_root() {
        // The test makes the file as this user, and only root can hand it
        // to another user who then cannot read it.
        skip_unless_ci("needs root to make a file another user cannot read");
        return;
    }
    let s = Scratch::new("eacces");
    let root = s.copy_tree(
        &repo().join("crates/rdma/tests/fixtures/sys-mlx5-roce"),
        "sys",
    );
    let file = root.join("class/infiniband/mlx5_0/ports/1/counters/port_rcv_data");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    let sysfs = format!("--path.sysfs={}", root.display());
    let Some(out) = run_unprivileged(&s.bin(), &["once", &sysfs]) else {
        return;
    };
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    // which file and which permission: the path and EACCES by name
    assert!(
        log.contains(&format!(
            "{}: Permission denied (os error 13)",
            file.display()
        )),
        "{log}"
    );
    assert!(text.contains("roce_collector_errors_total{collector=\"rdma\",kind=\"permission\"} 1"));
    assert!(text.contains("roce_collector_success{collector=\"rdma\"} 1"));
    // the value concerned is absent, the port's other counters are not
    assert!(!text.contains("roce_port_data_received_bytes_total{device=\"mlx5_0\",port=\"1\"}"));
    assert!(text.contains("roce_port_data_transmitted_bytes_total{device=\"mlx5_0\",port=\"1\"}"));
}

#[test]
fn pci_config_space_beyond_64_bytes_needs_cap_sys_admin() {
    // The kernel side, on the running kernel: pci_read_config()
    // (drivers/pci/pci-sysfs.c) gives an unprivileged reader 64 bytes.
    let mut seen = 0;
    if let Ok(dir) = std::fs::read_dir("/sys/bus/pci/devices") {
        for dev in dir.flatten().take(8) {
            let config = dev.path().join("config");
            let cmd = format!("head -c 4096 {} | wc -c", config.display());
            let privileged = Command::new("sh").args(["-c", &cmd]).output().unwrap();
            let full: usize = String::from_utf8_lossy(&privileged.stdout)
                .trim()
                .parse()
                .unwrap_or(0);
            if !is_root() || full <= 64 {
                continue;
            }
            let unpriv = Command::new("setpriv")
                .args([
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "sh",
                    "-c",
                    &cmd,
                ])
                .output();
            let Ok(unpriv) = unpriv else { break };
            let short: usize = String::from_utf8_lossy(&unpriv.stdout)
                .trim()
                .parse()
                .unwrap_or(0);
            assert_eq!(short, 64, "{}: {full} bytes as root", config.display());
            seen += 1;
        }
    }
    eprintln!("{seen} PCI function(s) of this host checked");

    // The exporter side: a PCI tree as nobody reads it (every config file
    // cut to 64 bytes) gives ACS "unknown" on the GPU-NIC bridges, and
    // `check` says what it needs.
    let s = Scratch::new("acs");
    let root = s.copy_tree(
        &repo().join("crates/topology/tests/fixtures/pci-acs"),
        "pci",
    );
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "find -L {} -name config -type f | while read -r f; do head -c 64 \"$f\" > \"$f.64\" && mv \"$f.64\" \"$f\"; done",
            root.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    let sysfs = format!("--path.sysfs={}", root.join("sys").display());
    let Some(out) = run_unprivileged(&s.bin(), &["once", &sysfs]) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let acs: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("roce_pcie_acs_request_redirect{") && l.ends_with(" 1"))
        .collect();
    assert!(!acs.is_empty(), "no ACS state exported:\n{text}");
    for line in acs {
        assert!(line.contains("state=\"unknown\""), "{line}");
    }
    let Some(out) = run_unprivileged(&s.bin(), &["check", "--window=0s", &sysfs]) else {
        return;
    };
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("unknown (config space beyond 64 bytes needs CAP_SYS_ADMIN)"),
        "{report}"
    );
}
