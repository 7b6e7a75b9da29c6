//! Generated packaging inputs stay current: the committed man page
//! (docs/roce_exporter.1, shipped by the deb and the rpm) equals what the
//! clap definition renders, and the generated kustomize components
//! (packaging/kubernetes/components/{prometheusrule,grafana-dashboards})
//! equal what their generator makes of alerts/ and dashboards/. The packages, the unit, the
//! image and the manifests themselves are checked by .ci/packaging.sh.

use crate::support::{assert_success, output_of, repo};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_roce_exporter");

#[test]
fn man_page_is_fresh() {
    let want = roce_exporter::manpage::render().expect("render the man page");
    let got = std::fs::read_to_string(repo().join("docs/roce_exporter.1")).unwrap_or_default();
    assert!(
        got == want,
        "docs/roce_exporter.1 is stale or missing: regenerate it with \
         `cargo run -- docs man > docs/roce_exporter.1`"
    );
}

#[test]
fn docs_subcommand_prints_the_man_page() {
    let out = Command::new(BIN)
        .args(["docs", "man"])
        .output()
        .expect("run docs man");
    assert!(out.status.success());
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH roce_exporter 1"), "{page}");
    assert_eq!(page, roce_exporter::manpage::render().unwrap());
}

/// `--version` in node_exporter's layout: version, branch and revision on
/// the first line, then build user, build date, rustc version, platform;
/// /metrics' roce_exporter_build_info carries the same version, revision,
/// branch and rustc version.
#[test]
fn version_names_the_build_like_node_exporter() {
    let out = Command::new(BIN)
        .arg("--version")
        .output()
        .expect("run --version");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let version = env!("CARGO_PKG_VERSION");
    let prefix = format!("roce_exporter version {version} (branch: ");
    assert!(first.starts_with(&prefix), "{text}");
    let (branch, revision) = first[prefix.len()..]
        .trim_end_matches(')')
        .split_once(", revision: ")
        .unwrap_or_else(|| panic!("no revision in {first}"));
    assert!(!branch.is_empty() && !revision.is_empty(), "{text}");
    let fields: Vec<(&str, &str)> = lines
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let keys: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        keys,
        ["build user", "build date", "rust version", "platform"],
        "{text}"
    );
    let date = fields[1].1;
    // YYYYMMDD-hh:mm:ss, as node_exporter prints it
    assert!(
        date.len() == 17
            && date.as_bytes()[8] == b'-'
            && date[..8].bytes().all(|b| b.is_ascii_digit()),
        "{date}"
    );
    let rust = fields[2].1;
    assert!(rust.split('.').count() == 3, "{rust}");

    let once = Command::new(BIN)
        .args([
            "once",
            "--path.sysfs",
            "/nonexistent",
            "--path.procfs",
            "/nonexistent",
        ])
        .output()
        .expect("run once");
    let metrics = String::from_utf8_lossy(&once.stdout);
    let want = format!(
        "roce_exporter_build_info{{version=\"{version}\",revision=\"{revision}\",\
         branch=\"{branch}\",rustversion=\"{rust}\"}} 1"
    );
    assert!(
        metrics.lines().any(|l| l == want),
        "{want} not in {metrics}"
    );
}

#[test]
fn kubernetes_prometheus_rule_is_generated_from_the_alerts() {
    let Some(out) = output_of(
        Command::new("python3")
            .arg(repo().join("packaging/kubernetes/generate.py"))
            .arg("--check"),
    ) else {
        return;
    };
    assert_success(&out);
}
