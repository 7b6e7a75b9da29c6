//! Generated packaging inputs stay current: the committed man page
//! (docs/roce_exporter.1, shipped by the deb and the rpm) equals what the
//! clap definition renders, and the generated kustomize components
//! (packaging/kubernetes/components/{prometheusrule,grafana-dashboards})
//! equal what their generator makes of alerts/ and dashboards/. The packages, the unit, the
//! image and the manifests themselves are checked by .ci/packaging.sh.

use crate::support::repo;
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

#[test]
fn kubernetes_prometheus_rule_is_generated_from_the_alerts() {
    let out = Command::new("python3")
        .arg(repo().join("packaging/kubernetes/generate.py"))
        .arg("--check")
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "python3 not runnable under CI: {e}"
            );
            eprintln!("skipping: python3 not runnable ({e})");
            return;
        }
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
