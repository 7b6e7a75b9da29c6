//! `roce_exporter check` on the demo node (examples/demo-gpu-node: 8 H100,
//! 8 x 400 GbE ConnectX-7) with the NCCL source reading a log directory of
//! one job each (tests/fixtures/nccl/demo, laid out from NCCL's and
//! nccl-tests' format strings): the answer an operator reads first,
//! `Transport seen / GDR` and `Measured vs expected`, must be right in each
//! case, and so must the counters' "no load in the window" without traffic.

use std::path::PathBuf;

use crate::support::{check_demo_tree, golden, repo};

/// A scratch log directory holding the fixture case `case` (fresh copies:
/// their modification time is now, so the source does not take them for
/// finished jobs' logs) and a demo configuration reading it.
struct Case {
    dir: PathBuf,
}

impl Case {
    fn new(case: &str) -> Case {
        let dir =
            std::env::temp_dir().join(format!("roce-check-nccl-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let logs = dir.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let fixtures = repo().join("tests/fixtures/nccl/demo").join(case);
        for e in std::fs::read_dir(fixtures).unwrap() {
            let e = e.unwrap();
            std::fs::write(logs.join(e.file_name()), std::fs::read(e.path()).unwrap()).unwrap();
        }
        let demo = std::fs::read_to_string(repo().join("examples/demo-gpu-node/demo.yml")).unwrap();
        std::fs::write(
            dir.join("demo.yml"),
            format!(
                "{demo}nccl:\n  enabled: true\n  log_dir: {}\n",
                logs.display()
            ),
        )
        .unwrap();
        Case { dir }
    }

    fn check(&self) -> (Option<i32>, String) {
        let out = check_demo_tree(self.dir.join("demo.yml").to_str().unwrap(), &[]);
        let text = String::from_utf8(out.stdout).unwrap();
        (out.status.code(), text)
    }
}

impl Drop for Case {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The lines of the NCCL section.
fn nccl_section(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| *l != "NCCL (what jobs used)")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect()
}

#[test]
fn socket_job_fails_its_transport_line_with_the_reason() {
    let (code, text) = Case::new("socket").check();
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(
        nccl_section(&text)[0],
        "  [FAIL] Transport seen: Socket GDR: off (ens1np0; NCCL 2.28.9)",
        "{text}"
    );
    assert!(
        text.contains("[critical] nccl_socket_transport: An NCCL job on this host used NET/Socket (TCP) for its inter-node traffic, not RDMA: NCCL's IB transport found no device (NET/IB : No device found.) although 8 RDMA port(s) are ACTIVE here"),
        "{text}"
    );
}

#[test]
fn nccl_ib_hca_subset_is_measured_against_the_node_and_named() {
    let (code, text) = Case::new("ib-hca-subset").check();
    assert_eq!(code, Some(1), "{text}");
    golden("check-demo-nccl-ib-hca-subset.txt", &text);
    let section = nccl_section(&text);
    assert!(
        section.iter().any(|l| l.starts_with("  [warn] Measured: 92.1 GB/s vs expected 384.0 GB/s (nccl-tests AllReduce busbw: all_reduce_perf at 8 GiB over 16 rank(s) on 2 node(s)")),
        "{text}"
    );
    assert!(
        section.contains(&"  [warn] Rails in NCCL's device table: 2 of the 8 rails of the job's GPUs (mlx5_0, mlx5_1; NCCL_IB_HCA=mlx5_0,mlx5_1)"),
        "{text}"
    );
    assert!(
        text.contains("[warning] nccl_rails_unused: NCCL jobs use 2 of the 8 rails"),
        "{text}"
    );
    assert!(
        text.contains("  unset NCCL_IB_HCA    # jobs set NCCL_IB_HCA=mlx5_0,mlx5_1"),
        "{text}"
    );
    assert!(!text.contains("NCCL_IB_HCA: default is right"), "{text}");
}

#[test]
fn gid0_job_is_roce_v1_not_rocev2() {
    let (code, text) = Case::new("gid0").check();
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(
        nccl_section(&text)[0],
        "  [FAIL] Transport seen: RoCE v1 GDR: on (mlx5_0 port 1, mlx5_1 port 1; GID 0 in NCCL's queue pair lines; NCCL 2.20.5)",
        "{text}"
    );
    assert!(
        text.contains("[critical] nccl_gid_not_rocev2: NCCL runs RoCE on mlx5_0 port 1 (ens1np0) over RoCE v1"),
        "{text}"
    );
    assert!(
        text.contains("  export NCCL_IB_GID_INDEX=3    # jobs run NCCL 2.20.5 (their logs)"),
        "{text}"
    );
}

#[test]
fn nccl_tests_output_gives_measured_and_healthy_lines() {
    let (_, text) = Case::new("nccl-tests").check();
    let section = nccl_section(&text);
    assert_eq!(
        section[0],
        "  [ok]   Transport seen: RoCEv2 GDR: on (mlx5_0 port 1, mlx5_1 port 1; GID 3 in NCCL's queue pair lines; NCCL 2.28.9)",
        "{text}"
    );
    assert!(
        section.iter().any(|l| l.starts_with("  [ok]   Measured: 367.2 GB/s vs expected 384.0 GB/s (nccl-tests AllReduce busbw: all_reduce_perf at 8 GiB over 16 rank(s) on 2 node(s), all_reduce_perf.out")),
        "{text}"
    );
    assert!(
        section.contains(&"  [ok]   Results of all_reduce_perf (all_reduce_perf.out, run 1): #wrong 0 in 4 row(s), Out of bounds values 0"),
        "{text}"
    );
    // A healthy job adds no finding to the demo's known ones.
    assert!(!text.contains("] nccl_"), "{text}");
    assert!(
        text.contains("Findings: 4 critical, 0 warning, 0 info"),
        "{text}"
    );
}

/// The demo's counters do not move between the two samples: every counter
/// verdict says so instead of `[ok]`.
#[test]
fn no_traffic_says_no_load_in_the_window() {
    let out = check_demo_tree("examples/demo-gpu-node/demo.yml", &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    let counters: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Counter rules over the window")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(counters.len(), 8, "{text}");
    for l in counters {
        assert!(
            l.starts_with("  [ -- ] mlx5_") && l.contains(": no load in the window (0 B moved)"),
            "{l}"
        );
    }
}

/// Two samples 10 s apart of a 400 GbE port (mlx5 counters: octets / 4).
fn loaded_port(rx_words: u64, tx_words: u64) -> String {
    use roce_exporter::config::{Expectations, RulesConfig};
    use roce_testkit::snapshot::SnapshotBuilder;
    let sample = |i: u64, rx: u64, tx: u64| {
        SnapshotBuilder::new()
            .sample(i)
            .port("mlx5_0", 1)
            .rate_gbps(400)
            .counter("port_rcv_data", rx)
            .counter("port_xmit_data", tx)
            .counter("symbol_error", 0)
            .arc()
    };
    let history = vec![
        sample(0, 1_000, 1_000),
        sample(1, 1_000 + rx_words, 1_000 + tx_words),
    ];
    let findings =
        roce_exporter::rules::evaluate(&history, &RulesConfig::default(), &Expectations::default());
    let report = roce_exporter::check::build_report(
        &history,
        findings,
        std::time::Duration::from_secs(10),
        &Expectations::default(),
    );
    roce_exporter::check::render_text(&report)
}

/// With traffic the counter line is a verdict, with the load it stood on;
/// a trickle (LLDP, ARP: below 0.1% of the line rate) is no load.
#[test]
fn load_in_the_window_makes_the_counter_line_a_verdict() {
    // 250e9 bytes in 10 s each way: 50 GB/s, the line rate of 400 GbE.
    let text = loaded_port(62_500_000_000, 62_500_000_000);
    assert!(
        text.contains(
            "  [ok]   mlx5_0 port 1 (ens1np0): no finding; load 500.0 GB moved, 50.0 GB/s"
        ),
        "{text}"
    );
    // 40 kB in 10 s: no load.
    let text = loaded_port(5_000, 5_000);
    assert!(
        text.contains(
            "  [ -- ] mlx5_0 port 1 (ens1np0): no load in the window (40.0 kB moved, 4.0 kB/s)"
        ),
        "{text}"
    );
}
