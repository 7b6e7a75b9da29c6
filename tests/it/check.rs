//! `roce_exporter check` end to end: the binary over fixture trees, its
//! text output against golden files (`UPDATE_GOLDEN=1` rewrites them), its
//! JSON output against the `/findings` schema, and its exit status
//! (0 clean, 1 critical findings, 2 could not run).

use crate::support::{check, check_demo_tree, golden, repo};
use std::path::{Path, PathBuf};
use std::process::Output;

fn demo(extra: &[&str]) -> Output {
    check_demo_tree("examples/demo-gpu-node/demo.yml", extra)
}

fn fixture(tree: &str, extra: &[&str]) -> Output {
    let root = format!("crates/rdma/tests/fixtures/{tree}");
    let proc = format!("{root}/proc");
    let mut args = vec![
        "--path.sysfs",
        root.as_str(),
        "--path.procfs",
        proc.as_str(),
    ];
    args.extend_from_slice(extra);
    check(&args)
}

fn stdout(out: &Output) -> String {
    // Paths in error texts are the checkout's; the golden files say <repo>.
    String::from_utf8(out.stdout.clone())
        .expect("UTF-8 output")
        .replace(&repo().display().to_string(), "<repo>")
}

#[test]
fn demo_gpu_node_text_matches_golden_and_exits_1() {
    let out = demo(&[]);
    let text = stdout(&out);
    golden("check-demo-gpu-node.txt", &text);
    // ens8np0 has PFC on priority 4 while the config expects 3: critical.
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("[critical] pfc_priority_mismatch: mlx5_7 port 1 (ens8np0)"),
        "{text}"
    );
    // NCCL 2.21+ finds the IPv4 RoCE v2 GID, and every NIC is nearest to a
    // GPU: NCCL's defaults are right; its traffic class 0 is not, and the
    // DSCP is the one the host is configured for (expect.nccl_ib_tc).
    assert!(
        text.contains("NCCL_IB_GID_INDEX: default is right"),
        "{text}"
    );
    assert!(text.contains("export NCCL_IB_TC=106"), "{text}");
    assert!(text.contains("NCCL_IB_HCA: default is right"), "{text}");
    assert!(
        !text.contains("NCCL_IB_SL"),
        "no InfiniBand: no service level"
    );
}

#[test]
fn mlx5_roce_fixture_text_matches_golden() {
    let out = fixture("sys-mlx5-roce", &[]);
    let text = stdout(&out);
    golden("check-sys-mlx5-roce.txt", &text);
    let critical = text.contains("[critical]");
    assert_eq!(out.status.code(), Some(i32::from(critical)), "{text}");
    // No GPU in this tree: the GPU sections say so and nothing is guessed.
    assert!(text.contains("no GPU on this host"), "{text}");
    assert!(!text.contains("NCCL_IB_HCA"), "{text}");
}

/// PCI topology trees (crates/topology/tests/fixtures/pci-*, written by roce-testkit): the
/// topology rules end to end. Both have criticals (no GID, no GPUDirect,
/// ACS redirect on the GPU-NIC path).
#[test]
fn pci_topology_fixtures_text_matches_golden() {
    for (tree, rules) in [
        (
            "pci-acs",
            &["acs_on_gpu_nic_path", "gpudirect_unavailable"][..],
        ),
        ("pci-downtrained", &["pcie_downtrained"][..]),
    ] {
        let root = format!("crates/topology/tests/fixtures/{tree}");
        let sys = format!("{root}/sys");
        let proc = format!("{root}/proc");
        let out = check(&["--path.sysfs", sys.as_str(), "--path.procfs", proc.as_str()]);
        let text = stdout(&out);
        golden(&format!("check-{tree}.txt"), &text);
        assert_eq!(out.status.code(), Some(1), "{text}");
        for rule in rules {
            assert!(
                text.contains(&format!("] {rule}: ")),
                "{tree}: {rule} missing:\n{text}"
            );
        }
    }
}

#[test]
fn json_output_validates_against_the_findings_schema() {
    let out = demo(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("check --format json is JSON");
    let schema_text =
        std::fs::read_to_string(repo().join("docs/findings.schema.json")).expect("schema file");
    let schema: serde_json::Value = serde_json::from_str(&schema_text).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let findings = &report["findings"];
    let errors: Vec<String> = validator
        .iter_errors(findings)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(findings.as_array().is_some_and(|f| !f.is_empty()));
    assert_eq!(report["window_seconds"], 1.0);
    let sections: Vec<&str> = report["checklist"]
        .as_array()
        .expect("checklist")
        .iter()
        .filter_map(|i| i["section"].as_str())
        .collect();
    for s in [
        "Transport",
        "GPUDirect RDMA",
        "Counter rules over the window",
        "Topology",
        "Collectors",
    ] {
        assert!(sections.contains(&s), "{s} missing: {sections:?}");
    }
    let nccl: Vec<&str> = report["nccl"]
        .as_array()
        .expect("nccl")
        .iter()
        .filter_map(|n| n["name"].as_str())
        .collect();
    assert_eq!(
        nccl,
        [
            "NCCL_IB_HCA",
            "NCCL_IB_GID_INDEX",
            "NCCL_IB_TC",
            "NCCL_NET_GDR_LEVEL"
        ]
    );
}

#[test]
fn exit_status_0_without_critical_findings() {
    // The mlx5 RoCE fixture: healthy ports, no GPU. (The demo without its
    // expectations is no longer clean: its rdma_cm default ToS puts RoCE
    // on DSCP 26, priority 3, where ens8np0 has no PFC; check_host.rs.)
    let out = fixture("sys-mlx5-roce", &[]);
    let text = stdout(&out);
    assert!(!text.contains("[critical]"), "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
}

#[test]
fn exit_status_2_when_it_cannot_run() {
    let dir = tempdir();
    let config = dir.join("bad.yml");
    std::fs::write(&config, "rules: {mtu_below_jumbo: {window: 1m}}\n").unwrap();
    let out = check(&["--config.file", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rules.mtu_below_jumbo.window is not a setting"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "roce-check-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::create_dir_all(&dir);
    assert!(Path::new(&dir).is_dir());
    dir
}

/// `check` judges nothing itself: a rule turned off in `rules.disabled`
/// takes its verdict out of the checklist too (the checklist used to judge
/// GPUDirect readiness and ACS on its own).
#[test]
fn checklist_verdicts_come_from_the_rules() {
    let tree = [
        "--path.sysfs",
        "crates/topology/tests/fixtures/pci-acs/sys",
        "--path.procfs",
        "crates/topology/tests/fixtures/pci-acs/proc",
    ];
    let text = stdout(&check(&tree));
    assert!(
        text.contains("[FAIL] verdict: GPUDirect RDMA is unavailable"),
        "{text}"
    );
    assert!(text.contains("[FAIL] ACS P2P redirect"), "{text}");

    let dir = tempdir();
    let config = dir.join("off.yml");
    std::fs::write(
        &config,
        "rules: {disabled: [gpudirect_unavailable, acs_on_gpu_nic_path, rocev2_gid_missing]}\n",
    )
    .unwrap();
    let mut args = tree.to_vec();
    args.extend(["--config.file", config.to_str().unwrap()]);
    let out = check(&args);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("[ok]   verdict: no finding"), "{text}");
    assert!(!text.contains("[FAIL]"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// README's `check` excerpt is what the demo prints: each line of it is a
/// line of the golden output, in order (`...` elides lines), and it shows the
/// exit status the demo gives.
#[test]
fn readme_check_excerpt_matches_the_demo_output() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let golden = std::fs::read_to_string(repo().join("tests/golden/check-demo-gpu-node.txt"))
        .expect("golden check output");
    let start = readme
        .find("`roce_exporter check` on the same tree")
        .expect("README: the check excerpt");
    let block = readme[start..]
        .split("```")
        .nth(1)
        .expect("README: the check excerpt's code block");
    let mut golden_lines = golden.lines();
    let mut shown = 0;
    for line in block
        .lines()
        .filter(|l| !l.trim().is_empty() && l.trim() != "...")
    {
        assert!(
            golden_lines.any(|g| g == line),
            "README's check excerpt line is not in tests/golden/check-demo-gpu-node.txt (in order):\n{line}"
        );
        shown += 1;
    }
    assert!(shown >= 3, "README's check excerpt is empty");
    let findings = golden
        .lines()
        .find(|l| l.starts_with("Findings: "))
        .expect("Findings line");
    assert!(block.contains(findings), "README must show `{findings}`");
    let out = demo(&[]);
    let code = out.status.code().expect("exit status");
    assert!(
        readme[start..].contains(&format!("exits with status {code}")),
        "README must say the demo's check exits with status {code}"
    );
}

/// With `expect.rails`, the port's cabling line carries the verdict: the
/// map names leaf-r3-a for mlx5_7 (ok), or the pattern makes it rail 3's
/// switch while mlx5_7 is rail 7 (WRONG, with the finding naming the GPUs
/// whose nearest NIC mlx5_7 is).
#[test]
fn lldp_rail_verdict_in_nic_vs_switch() {
    let dir = tempdir();
    let json_path = ens8np0_neighbours(&dir);
    let demo = demo_without_lldp();
    assert!(
        demo.contains("\nexpect:\n"),
        "demo.yml has an expect section"
    );
    let run = |rails: &str| {
        let config = dir.join("demo-rails.yml");
        let text = demo.replace("\nexpect:\n", &format!("\nexpect:\n  rails: {rails}\n"));
        std::fs::write(
            &config,
            format!("{text}\nlldp:\n  json_file: {}\n", json_path.display()),
        )
        .unwrap();
        stdout(&check_demo_tree(config.to_str().unwrap(), &[]))
    };
    let ok = run("{map: {mlx5_7: leaf-r3-a}}");
    let wrong = run("{switch_pattern: \"leaf-r{rail}-*\"}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        ok.contains("cabled to leaf-r3-a port swp17 (chassis 1c:34:da:5a:01:00, LLDP via lldpd), switch PFC on 4, switch DSCP 26->4, rail ok"),
        "{ok}"
    );
    assert!(!ok.contains("lldp_rail_mismatch"), "{ok}");
    assert!(
        wrong.contains("switch DSCP 26->4, rail WRONG (lldp_rail_mismatch)"),
        "{wrong}"
    );
    assert!(
        wrong.contains("mlx5_7 port 1 (ens8np0) (rail 7, the NIC of GPUs 6 and 7) is cabled to leaf-r3-a port swp17, the switch of rail 3 (mlx5_3)"),
        "{wrong}"
    );
}

/// lldpd's real json0 output of one neighbour (a leaf-r3-a port with PFC
/// and APP on priority 4), heard on the demo's ens8np0, written into `dir`.
fn ens8np0_neighbours(dir: &std::path::Path) -> std::path::PathBuf {
    let fixture = repo().join("crates/lldp/tests/fixtures/lldpcli-json0-neighbors-dcbx.json");
    let json = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("lv-host", "ens8np0");
    let path = dir.join("neighbors.json");
    std::fs::write(&path, json).unwrap();
    path
}

/// The demo's configuration without its LLDP neighbours and rails, for a
/// test that gives its own.
fn demo_without_lldp() -> String {
    let demo = std::fs::read_to_string(repo().join("examples/demo-gpu-node/demo.yml")).unwrap();
    // the LLDP section ends the file; rails is expect's last key
    let head = demo.split("# The switches' side").next().unwrap_or("");
    let mut out = String::new();
    let mut in_rails = false;
    for line in head.lines() {
        in_rails = line.starts_with("  rails:") || (in_rails && line.starts_with("    "));
        if !in_rails {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(!out.contains("lldp:") && !out.contains("rails:"), "{out}");
    out
}

/// With lldpd's neighbour list (its real json0 output, heard on the demo's
/// ens8np0), `check` shows where the port is cabled and the switch's
/// PFC/APP from LLDP, and the switch view is no longer missing for it.
#[test]
fn lldp_neighbour_shows_in_nic_vs_switch() {
    let dir = tempdir();
    let json_path = ens8np0_neighbours(&dir);
    let demo = demo_without_lldp();
    let config = dir.join("demo-lldp.yml");
    std::fs::write(
        &config,
        format!("{demo}\nlldp:\n  json_file: {}\n", json_path.display()),
    )
    .unwrap();
    let out = check_demo_tree(config.to_str().unwrap(), &[]);
    let text = stdout(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        text.contains("mlx5_7 port 1 (ens8np0): cabled to leaf-r3-a port swp17 (chassis 1c:34:da:5a:01:00, LLDP via lldpd), switch PFC on 4, switch DSCP 26->4, rail not judged (expect.rails unset)"),
        "{text}"
    );
    assert!(
        text.contains("[ok]   lldp: read") || text.contains("lldp: read"),
        "{text}"
    );
    assert!(
        !text.contains("switch_view_unavailable: mlx5_7 port 1"),
        "{text}"
    );
}

/// The FEC verdicts on counters since link-up need no window: one `check`
/// pass over the demo node whose ens1np0 carries the physical layer
/// counters of a real ConnectX 100 GbE dump (lane 3 with 99.8 % of the
/// corrected bits, 386 bits past FEC) reports both, for that netdev only.
#[test]
fn check_judges_fec_counters_since_link_up_in_one_pass() {
    let dir = tempdir().join("fec-dump");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let demo = repo().join("examples/demo-gpu-node/netdev-replay");
    for entry in std::fs::read_dir(&demo).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e != "py") {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let dump = std::fs::read_to_string(
        repo().join("crates/netdev/tests/fixtures/ethtool/mlx5-100g-phy.txt"),
    )
    .unwrap();
    let from_dump: Vec<(&str, &str)> = dump
        .lines()
        .filter_map(|l| l.trim().split_once(": "))
        .collect();
    let listing = std::fs::read_to_string(dir.join("ens1np0.txt")).unwrap();
    let patched: String = listing
        .lines()
        .map(|l| {
            let name = l.trim().split_once(": ").map(|(n, _)| n);
            match from_dump.iter().find(|(n, _)| Some(*n) == name) {
                Some((n, v)) => format!("     {n}: {v}\n"),
                None => format!("{l}\n"),
            }
        })
        .collect();
    std::fs::write(dir.join("ens1np0.txt"), patched).unwrap();
    let config = dir.join("demo.yml");
    let demo_config =
        std::fs::read_to_string(repo().join("examples/demo-gpu-node/demo.yml")).unwrap();
    std::fs::write(
        &config,
        demo_config.replace(
            "replay: examples/demo-gpu-node/netdev-replay",
            &format!("replay: {}", dir.display()),
        ),
    )
    .unwrap();
    let out = check_demo_tree(config.to_str().unwrap(), &[]);
    let text = stdout(&out);
    assert!(
        text.contains("[warning] fec_lane_skew: mlx5_0 port 1 (ens1np0)"),
        "{text}"
    );
    assert!(
        text.contains(
            "lane 3 carries 99.8 % of the 17750739 bits FEC corrected since the link last came up"
        ),
        "{text}"
    );
    assert!(
        text.contains("[warning] post_fec_errors: mlx5_0 port 1 (ens1np0)"),
        "{text}"
    );
    assert!(
        text.contains("386 error(s) got past FEC since the link last came up"),
        "{text}"
    );
    // The other seven netdevs' links correct alike and lose nothing.
    assert_eq!(text.matches("] fec_lane_skew:").count(), 1, "{text}");
    assert_eq!(text.matches("] post_fec_errors:").count(), 1, "{text}");
    let _ = std::fs::remove_dir_all(dir);
}
