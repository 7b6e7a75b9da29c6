//! The crate graph, asserted from `cargo metadata`: data flows one way
//! (readers -> model -> rules -> exposition -> binary), so an edge the wrong
//! way fails here even where it would compile. docs/architecture.md states
//! the same invariants in prose.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// `cargo metadata` of the workspace's own packages.
fn metadata() -> serde_json::Value {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Each workspace crate and the workspace crates and selected external
/// crates it depends on (normal dependencies only).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let meta = metadata();
    let mut g = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null())
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect();
        g.insert(p["name"].as_str().expect("name").to_string(), deps);
    }
    g
}

/// The crates that read the host, each into its own typed part.
const READERS: &[&str] = &[
    "roce-host",
    "roce-netlink",
    "roce-rdma",
    "roce-netdev",
    "roce-topology",
    "roce-probe",
    "roce-nccl",
    "roce-lldp",
];

/// What only the binary and the exposition may depend on: serving and
/// naming metrics.
const SERVING: &[&str] = &["roce-web", "tokio", "hyper", "prometheus-client"];

fn assert_none(g: &BTreeMap<String, BTreeSet<String>>, krate: &str, forbidden: &[&str]) {
    let deps = g.get(krate).unwrap_or_else(|| panic!("no crate {krate}"));
    for f in forbidden {
        assert!(!deps.contains(*f), "{krate} must not depend on {f}");
    }
}

#[test]
fn readers_know_nothing_of_the_model_rules_or_metrics() {
    let g = graph();
    for r in READERS {
        assert_none(
            &g,
            r,
            &[
                "roce-model",
                "roce-rules",
                "roce-exposition",
                "roce_exporter",
                "roce-web",
                "prometheus-client",
                "tokio",
            ],
        );
    }
}

#[test]
fn the_model_is_plain_data_over_the_readers_parts() {
    let g = graph();
    assert_none(
        &g,
        "roce-model",
        &["roce-rules", "roce-exposition", "roce_exporter"],
    );
    assert_none(&g, "roce-model", SERVING);
    let workspace: Vec<&String> = g["roce-model"]
        .iter()
        .filter(|d| d.starts_with("roce"))
        .collect();
    for d in workspace {
        assert!(READERS.contains(&d.as_str()), "roce-model depends on {d}");
    }
}

#[test]
fn rules_read_the_model_and_name_no_metric() {
    let g = graph();
    assert!(g["roce-rules"].contains("roce-model"));
    assert_none(&g, "roce-rules", &["roce-exposition", "roce_exporter"]);
    assert_none(&g, "roce-rules", SERVING);
}

#[test]
fn the_checklist_reports_findings_and_names_no_metric() {
    let g = graph();
    assert!(g["roce-checklist"].contains("roce-rules"));
    assert_none(&g, "roce-checklist", &["roce-exposition", "roce_exporter"]);
    assert_none(&g, "roce-checklist", SERVING);
}

#[test]
fn only_the_exposition_names_metrics_and_it_does_not_serve() {
    let g = graph();
    for (krate, deps) in &g {
        if krate != "roce-exposition" {
            assert!(
                !deps.contains("prometheus-client"),
                "{krate} depends on prometheus-client: metrics are named in roce-exposition only"
            );
        }
    }
    assert_none(
        &g,
        "roce-exposition",
        &["roce_exporter", "roce-web", "tokio", "hyper"],
    );
}

/// The features `krate` enables on its normal dependency `dep`.
fn features(krate: &str, dep: &str) -> BTreeSet<String> {
    let meta = metadata();
    let package = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == krate)
        .unwrap_or_else(|| panic!("no crate {krate}"));
    let d = package["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .find(|d| d["name"] == dep && d["kind"].is_null())
        .unwrap_or_else(|| panic!("{krate} does not depend on {dep}"));
    d["features"]
        .as_array()
        .expect("features")
        .iter()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

/// Peer discovery fetches (hyper's HTTP/1.1 client, the SRV lookups of
/// hickory-resolver, each on a current-thread tokio runtime of the calling
/// thread) and serves nothing: no server crate, no server side of hyper,
/// no runtime of its own threads.
#[test]
fn peer_discovery_fills_the_model_names_no_metric_and_serves_nothing() {
    let g = graph();
    assert_none(
        &g,
        "roce-fleet",
        &["roce-rules", "roce-exposition", "roce_exporter", "roce-web"],
    );
    assert_none(&g, "roce-fleet", &["prometheus-client"]);
    let hyper = features("roce-fleet", "hyper");
    assert!(!hyper.contains("server"), "roce-fleet: hyper {hyper:?}");
    assert!(hyper.contains("client"), "roce-fleet: hyper {hyper:?}");
    let tokio = features("roce-fleet", "tokio");
    for serving in ["rt-multi-thread", "signal", "macros"] {
        assert!(!tokio.contains(serving), "roce-fleet: tokio {tokio:?}");
    }
}

#[test]
fn the_server_knows_no_rules_or_metrics() {
    let g = graph();
    assert_none(
        &g,
        "roce-web",
        &[
            "roce-model",
            "roce-rules",
            "roce-exposition",
            "roce_exporter",
        ],
    );
}

#[test]
fn the_testkit_is_for_tests_only() {
    let g = graph();
    // It builds the model's snapshots for the tests, so it sits above the
    // model; no crate depends on it outside its tests and benchmarks.
    let users: Vec<&String> = g
        .iter()
        .filter(|(_, deps)| deps.contains("roce-testkit"))
        .map(|(krate, _)| krate)
        .collect();
    assert!(users.is_empty(), "roce-testkit outside tests: {users:?}");
    assert_none(
        &g,
        "roce-testkit",
        &["roce-rules", "roce-exposition", "roce_exporter", "roce-web"],
    );
}
