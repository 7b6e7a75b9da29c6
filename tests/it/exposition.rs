//! Exposition tests: golden expositions of every fixture tree (update with
//! `UPDATE_GOLDEN=1 cargo test --test it exposition::`), `promtool check metrics`
//! on them, the structure of the text and OpenMetrics outputs, the metric
//! reference kept in step with the family tables, and exact values from
//! snapshots built in code (×4 data, rates, port up, GIDs, hardware counter
//! mapping, hostile label values), and the series budget of the demo tree.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{promtool_check, repo};
use roce_exporter::exposition::{
    self, families, groups, hw_counters, BuildInfo, Format, MetricKind,
};
use roce_exporter::meaning;
use roce_exporter::snapshot::{Snapshot, SourceState, SourceStatus};
use roce_rdma::{
    Counter, Device, Gid, GidType, HwCounterPath, LinkLayer, PhysState, Port, PortState,
    RdmaSnapshot,
};

const BIN: &str = env!("CARGO_BIN_EXE_roce_exporter");

/// Every `crates/rdma/tests/fixtures/sys-*` tree, by name.
fn fixture_trees() -> Vec<String> {
    let dir = repo().join("crates/rdma/tests/fixtures");
    let mut trees: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("sys-"))
        .collect();
    trees.sort();
    assert!(
        !trees.is_empty(),
        "no fixture trees under {}",
        dir.display()
    );
    trees
}

/// `roce_exporter once` over a fixture tree. The procfs path points into the
/// tree too, so that nothing of the machine running the tests leaks in.
fn run_once(tree: &str, format: &str) -> String {
    let root = repo().join("crates/rdma/tests/fixtures").join(tree);
    let out = Command::new(BIN)
        .arg("once")
        .arg("--path.sysfs")
        .arg(&root)
        .arg("--path.procfs")
        .arg(root.join("proc"))
        .args(["--format", format, "--log.level", "error"])
        .env_remove("RUST_LOG")
        .output()
        .expect("run roce_exporter once");
    assert!(
        out.status.success(),
        "once over {tree} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("exposition is UTF-8")
}

// ---------------------------------------------------------------------------
// A small parser for the text formats, enough to check structure and values.

#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: String,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct Parsed {
    /// Family name → (HELP count, TYPE lines).
    help: BTreeMap<String, usize>,
    types: Vec<(String, String)>,
    units: Vec<(String, String)>,
    samples: Vec<Sample>,
    eof: bool,
}

impl Parsed {
    fn find<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// The value of the one sample of `name` whose labels include `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<String> {
        let hits: Vec<&Sample> = self
            .find(name)
            .filter(|s| labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .collect();
        assert!(hits.len() <= 1, "{name} {labels:?} matches {hits:?}");
        hits.first().map(|s| s.value.clone())
    }
}

fn parse_labels(s: &str) -> (Vec<(String, String)>, &str) {
    // `s` starts right after '{'.
    let mut labels = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(r) = rest.strip_prefix('}') {
            return (labels, r);
        }
        let eq = rest.find("=\"").expect("label has =\"");
        let key = rest[..eq].to_string();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let end = loop {
            let (i, c) = chars.next().expect("unterminated label value");
            match c {
                '\\' => match chars.next().expect("escape").1 {
                    'n' => value.push('\n'),
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    other => panic!("bad escape \\{other}"),
                },
                '"' => break eq + 2 + i + 1,
                '\n' => panic!("raw newline in label value"),
                c => value.push(c),
            }
        };
        labels.push((key, value));
        rest = &rest[end..];
    }
}

fn parse(text: &str) -> Parsed {
    let mut p = Parsed::default();
    for line in text.lines() {
        assert!(!p.eof, "line after # EOF: {line}");
        if line == "# EOF" {
            p.eof = true;
        } else if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("").to_string();
            *p.help.entry(name).or_default() += 1;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap_or("").to_string();
            let kind = it.next().unwrap_or("").to_string();
            p.types.push((name, kind));
        } else if let Some(rest) = line.strip_prefix("# UNIT ") {
            let mut it = rest.split(' ');
            let name = it.next().unwrap_or("").to_string();
            let unit = it.next().unwrap_or("").to_string();
            p.units.push((name, unit));
        } else if line.starts_with('#') {
            panic!("unexpected comment line: {line}");
        } else {
            let name_end = line.find(['{', ' ']).expect("sample has a value");
            let name = line[..name_end].to_string();
            let (labels, rest) = if line[name_end..].starts_with('{') {
                parse_labels(&line[name_end + 1..])
            } else {
                (Vec::new(), &line[name_end..])
            };
            let value = rest.trim().to_string();
            assert!(
                !value.is_empty() && !value.contains(' '),
                "bad value in {line:?}"
            );
            p.samples.push(Sample {
                name,
                labels,
                value,
            });
        }
    }
    p
}

/// Structure every text 0.0.4 exposition must have: one HELP and one TYPE
/// per family, families contiguous, no duplicate series.
fn check_text_structure(what: &str, text: &str) -> Parsed {
    let p = parse(text);
    assert!(!p.eof, "{what}: text 0.0.4 has no # EOF");
    let mut seen = BTreeSet::new();
    for (name, _) in &p.types {
        assert!(seen.insert(name.clone()), "{what}: family {name} twice");
        assert_eq!(p.help.get(name), Some(&1), "{what}: HELP of {name}");
    }
    assert_eq!(p.help.len(), p.types.len(), "{what}: HELP without TYPE");
    // Each sample belongs to the family declared last before it.
    let mut current: Option<&str> = None;
    let mut type_iter = p.types.iter();
    let mut series = BTreeSet::new();
    let mut lines = text.lines().filter(|l| !l.starts_with("# HELP"));
    for s in &p.samples {
        loop {
            let line = lines.next().expect("sample lines follow their TYPE");
            if line.starts_with("# TYPE") {
                current = type_iter.next().map(|(n, _)| n.as_str());
                continue;
            }
            break;
        }
        let family = current.unwrap_or_else(|| panic!("{what}: sample before any TYPE"));
        assert!(
            s.name == family
                || s.name
                    .strip_prefix(family)
                    .is_some_and(|suffix| ["_bucket", "_sum", "_count"].contains(&suffix)),
            "{what}: sample {} under family {family}",
            s.name
        );
        let mut key = s.labels.clone();
        key.sort();
        assert!(
            series.insert((s.name.clone(), key)),
            "{what}: duplicate series {} {:?}",
            s.name,
            s.labels
        );
    }
    p
}

// ---------------------------------------------------------------------------
// Golden expositions.

/// Replaces what changes from run to run or build to build: collector
/// durations, the sample timestamp, the build labels.
fn mask(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        if line.starts_with("roce_collector_duration_seconds{") {
            let cut = line.rfind(' ').unwrap_or(line.len());
            out.push_str(&line[..cut]);
            out.push_str(" <duration>");
        } else if line.starts_with("roce_sample_timestamp_seconds ") {
            out.push_str("roce_sample_timestamp_seconds <timestamp>");
        } else if line.starts_with("process_") && !line.starts_with('#') {
            let cut = line.rfind(' ').unwrap_or(line.len());
            out.push_str(&line[..cut]);
            out.push_str(" <process>");
        } else if line.starts_with("roce_exporter_build_info{") {
            out.push_str("roce_exporter_build_info{<build>} 1");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

#[test]
fn golden_expositions() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let dir = repo().join("tests/golden");
    let mut stale = Vec::new();
    for tree in fixture_trees() {
        let got = mask(&run_once(&tree, "text"));
        let path = dir.join(format!("{tree}.prom"));
        if update {
            std::fs::create_dir_all(&dir).expect("create tests/golden");
            std::fs::write(&path, &got).expect("write golden");
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == got => {}
            Ok(want) => {
                let first = want
                    .lines()
                    .zip(got.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(want.lines().count().min(got.lines().count()));
                stale.push(format!(
                    "{}: differs from line {}:\n  golden: {:?}\n  now:    {:?}",
                    path.display(),
                    first + 1,
                    want.lines().nth(first),
                    got.lines().nth(first)
                ));
            }
            Err(e) => stale.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "golden expositions out of date (if the change is intended, run \
         `UPDATE_GOLDEN=1 cargo test --test it exposition::golden` and review the diff):\n{}",
        stale.join("\n")
    );
}

#[test]
fn golden_files_match_fixture_trees() {
    let dir = repo().join("tests/golden");
    let entries = std::fs::read_dir(&dir).expect("tests/golden is part of the repository");
    let trees: BTreeSet<String> = fixture_trees().into_iter().collect();
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(tree) = name.strip_suffix(".prom") {
            assert!(
                trees.contains(tree),
                "tests/golden/{name} has no fixture tree: delete it"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// promtool.

#[test]
fn promtool_accepts_every_fixture_tree() {
    for tree in fixture_trees() {
        let text = run_once(&tree, "text");
        let Some(report) = promtool_check(&text) else {
            return;
        };
        assert!(
            report.trim().is_empty(),
            "promtool check metrics on {tree}:\n{report}"
        );
    }
}

// ---------------------------------------------------------------------------
// Structure of both formats, and the reference.

#[test]
fn text_output_is_well_formed() {
    for tree in fixture_trees() {
        check_text_structure(&tree, &run_once(&tree, "text"));
    }
}

#[test]
fn openmetrics_output_is_well_formed() {
    for tree in fixture_trees() {
        let text = run_once(&tree, "openmetrics");
        assert!(text.ends_with("# EOF\n"), "{tree}: no final # EOF");
        assert!(!text.contains("_total_total"), "{tree}: _total doubled");
        let p = parse(&text);
        assert!(p.eof);
        let units: BTreeMap<&str, &str> = p
            .units
            .iter()
            .map(|(n, u)| (n.as_str(), u.as_str()))
            .collect();
        for (name, kind) in &p.types {
            assert!(
                !name.ends_with("_total"),
                "{tree}: OpenMetrics family {name} carries _total"
            );
            let exposed = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.clone()
            };
            let family = families::find(&exposed)
                .unwrap_or_else(|| panic!("{tree}: {exposed} is not in the reference"));
            match family.unit {
                Some(unit) => {
                    assert_eq!(
                        units.get(name.as_str()),
                        Some(&unit.as_str()),
                        "{tree}: # UNIT of {name}"
                    );
                    assert!(name.ends_with(unit.as_str()), "{tree}: {name} vs its unit");
                }
                None => assert!(!units.contains_key(name.as_str()), "{tree}: {name} unit"),
            }
        }
        for s in &p.samples {
            assert!(!s.name.ends_with("_total_total"), "{tree}: {}", s.name);
        }
    }
}

#[test]
fn every_exposed_family_is_in_the_reference_with_its_type() {
    for tree in fixture_trees() {
        let p = parse(&run_once(&tree, "text"));
        for (name, kind) in &p.types {
            let family = families::find(name)
                .unwrap_or_else(|| panic!("{tree}: {name} is not in docs/metrics.md"));
            let want = match family.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            assert_eq!(kind, want, "{tree}: type of {name}");
        }
    }
}

#[test]
fn metric_reference_is_fresh() {
    let path = repo().join("docs/metrics.md");
    let want = families::reference_markdown();
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "docs/metrics.md is stale or missing: regenerate it with \
         `cargo run -- docs metrics > docs/metrics.md`"
    );
}

#[test]
fn docs_subcommand_prints_the_reference() {
    let out = Command::new(BIN)
        .args(["docs", "metrics"])
        .output()
        .expect("run docs metrics");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        families::reference_markdown()
    );
}

#[test]
fn family_table_is_consistent() {
    let name_ok = |n: &str| {
        (n.starts_with("roce_") || n.starts_with("process_"))
            && n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    let mut exposed = BTreeSet::new();
    for (section, table) in families::all() {
        for f in table {
            let name = f.exposed_name();
            assert!(name_ok(f.base), "{section}: bad name {}", f.base);
            assert!(exposed.insert(name.clone()), "{name} declared twice");
            assert!(!f.base.ends_with("_total"), "{name}: base ends in _total");
            if let Some(unit) = f.unit {
                assert!(!f.base.ends_with(unit.as_str()), "{name}: unit doubled");
            }
            if f.base.ends_with("_info") {
                assert_eq!(
                    f.kind,
                    MetricKind::Gauge,
                    "{name}: info families are gauges"
                );
            }
            assert!(!f.help.is_empty() && !f.source.is_empty(), "{name}");
            let help = f.help_line(Duration::from_secs(5));
            assert!(
                !help.contains(['"', '\\', '\n']),
                "{name}: HELP must not need escaping (OpenMetrics HELP is written as is)"
            );
            assert!(help.contains(f.source), "{name}: HELP names the source");
            // promtool's lint rejects a metric's own type in its name.
            let own_type = match f.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            assert!(
                !name.contains(&format!("_{own_type}_"))
                    && !name.ends_with(&format!("_{own_type}")),
                "{name}: names its own type"
            );
            for label in f.labels {
                assert!(
                    !["hostname", "instance", "job"].contains(label),
                    "{name}: label {label}"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Exact values from snapshots built in code.

fn counters(list: &[(&str, u64)]) -> Vec<Counter> {
    list.iter()
        .map(|(n, v)| Counter {
            name: (*n).into(),
            value: *v,
        })
        .collect()
}

fn gid(index: u32, text: &str, gid_type: GidType, netdev: &str) -> Gid {
    Gid {
        index,
        gid: text.parse().expect("gid"),
        gid_type,
        netdev: Some(netdev.to_string()),
    }
}

fn sample_snapshot() -> RdmaSnapshot {
    let mlx5 = Device {
        name: "mlx5_0".into(),
        driver: Some("mlx5_core".into()),
        fw_version: Some("28.39.1002".into()),
        node_guid: Some("b8ce:f603:00a1:b2c4".into()),
        pci_address: Some("0000:17:00.0".into()),
        numa_node: Some(1),
        ports: vec![Port {
            number: 1,
            state: Some(PortState::Active),
            phys_state: Some(PhysState::LinkUp),
            rate_bytes_per_second: Some(50_000_000_000),
            link_layer: Some(LinkLayer::Ethernet),
            lid: Some(0),
            netdev: Some("ens1f0np0".into()),
            counters: counters(&[
                ("port_rcv_data", 250_000_000_100),
                ("port_xmit_data", 7),
                ("port_rcv_packets", 42),
                ("link_downed", 3),
                ("some_future_counter", 9),
            ]),
            hw_counters: counters(&[
                ("np_cnp_sent", 11),
                ("rp_cnp_handled", 12),
                ("out_of_buffer", 13),
                ("rnr_nak_retry_err", 14),
            ]),
            hw_counter_path: HwCounterPath::Netlink,
            gids: vec![
                gid(
                    0,
                    "fe80::bace:f6ff:fea1:b2c4",
                    GidType::IbRoceV1,
                    "ens1f0np0",
                ),
                gid(3, "::ffff:10.0.1.11", GidType::RoceV2, "ens1f0np0"),
            ],
        }],
        ..Device::default()
    };
    let rxe = Device {
        name: "rxe0".into(),
        driver: Some("rxe".into()),
        parent_netdev: Some("eth0".into()),
        ports: vec![Port {
            number: 1,
            state: Some(PortState::Down),
            phys_state: Some(PhysState::Polling),
            rate_bytes_per_second: Some(312_500_000),
            link_layer: Some(LinkLayer::Ethernet),
            netdev: Some("eth0".into()),
            hw_counters: counters(&[
                ("duplicate_request", 1025),
                ("completer_retry_err", 38),
                ("ack_deferred", 1),
                ("sent_pkts", 180_690),
            ]),
            hw_counter_path: HwCounterPath::Sysfs,
            ..Port::default()
        }],
        ..Device::default()
    };
    RdmaSnapshot {
        devices: vec![mlx5, rxe],
        errors: Vec::new(),
    }
}

fn snapshot_of(rdma: RdmaSnapshot) -> Arc<Snapshot> {
    Arc::new(Snapshot {
        sequence: 1,
        taken_at: Some(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        sources: vec![SourceStatus {
            name: "rdma",
            state: SourceState::Ok,
            duration: Duration::from_millis(2),
            errors: Vec::new(),
            errors_total: 0,
            errors_by_kind: Default::default(),
            kernel_requests: None,
        }],
        rdma: Some(rdma),
        ..Snapshot::default()
    })
}

fn build() -> BuildInfo {
    BuildInfo {
        version: "0.0.0-test",
        revision: "abc",
        branch: "main",
        rustversion: "1.0",
        sample_interval: Duration::from_secs(5),
        groups: groups::Groups::default(),
        process_metrics: true,
    }
}

fn encode_text(rdma: RdmaSnapshot) -> String {
    exposition::encode(snapshot_of(rdma), &build(), Format::Text)
}

#[test]
fn exact_values_from_a_snapshot() {
    let text = encode_text(sample_snapshot());
    let p = check_text_structure("sample snapshot", &text);
    let mlx = [("device", "mlx5_0"), ("port", "1")];
    let rxe = [("device", "rxe0"), ("port", "1")];

    // counters/: data × 4, others as read, unknown ones by kernel name.
    assert_eq!(
        p.value("roce_port_data_received_bytes_total", &mlx)
            .as_deref(),
        Some("1000000000400")
    );
    assert_eq!(
        p.value("roce_port_data_transmitted_bytes_total", &mlx)
            .as_deref(),
        Some("28")
    );
    assert_eq!(
        p.value("roce_port_packets_received_total", &mlx).as_deref(),
        Some("42")
    );
    assert_eq!(
        p.value("roce_port_link_downed_total", &mlx).as_deref(),
        Some("3")
    );
    assert_eq!(
        p.value(
            "roce_port_stat_total",
            &[("device", "mlx5_0"), ("stat", "some_future_counter")]
        )
        .as_deref(),
        Some("9")
    );
    // rxe has no counters/: no data series for it.
    assert_eq!(p.value("roce_port_data_received_bytes_total", &rxe), None);

    // Rate and state.
    assert_eq!(
        p.value("roce_port_rate_bytes_per_second", &mlx).as_deref(),
        Some("50000000000")
    );
    assert_eq!(
        p.value("roce_port_rate_bytes_per_second", &rxe).as_deref(),
        Some("312500000")
    );
    assert_eq!(p.value("roce_port_up", &mlx).as_deref(), Some("1"));
    assert_eq!(p.value("roce_port_up", &rxe).as_deref(), Some("0"));
    // The states as the kernel names them (state 1: DOWN, phys_state 2:
    // Polling), labels of the port's one info series.
    assert_eq!(
        p.value(
            "roce_port_info",
            &[
                ("device", "rxe0"),
                ("state", "DOWN"),
                ("phys_state", "Polling")
            ]
        )
        .as_deref(),
        Some("1")
    );

    // Device and port metadata.
    let info: Vec<&Sample> = p.find("roce_device_info").collect();
    assert_eq!(info.len(), 2);
    assert_eq!(info[0].label("driver"), Some("mlx5_core"));
    assert_eq!(info[0].label("numa_node"), Some("1"));
    assert_eq!(info[0].label("pci_address"), Some("0000:17:00.0"));
    assert_eq!(info[1].label("fw_version"), Some(""));
    let port_info: Vec<&Sample> = p.find("roce_port_info").collect();
    assert_eq!(
        port_info[0].labels,
        vec![
            ("device".to_string(), "mlx5_0".to_string()),
            ("port".into(), "1".into()),
            ("link_layer".into(), "Ethernet".into()),
            ("netdev".into(), "ens1f0np0".into()),
            ("pci_address".into(), "0000:17:00.0".into()),
            ("state".into(), "ACTIVE".into()),
            ("phys_state".into(), "LinkUp".into()),
            ("hw_counters".into(), "netlink".into()),
        ]
    );

    // GIDs: populated slots only, kernel text, type as the kernel prints it.
    let gids: Vec<&Sample> = p.find("roce_gid_info").collect();
    assert_eq!(gids.len(), 2);
    assert_eq!(gids[0].label("index"), Some("0"));
    assert_eq!(
        gids[0].label("gid"),
        Some("fe80:0000:0000:0000:bace:f6ff:fea1:b2c4")
    );
    assert_eq!(gids[0].label("type"), Some("IB/RoCE v1"));
    assert_eq!(gids[1].label("index"), Some("3"));
    assert_eq!(
        gids[1].label("gid"),
        Some("0000:0000:0000:0000:0000:ffff:0a00:010b")
    );
    assert_eq!(gids[1].label("type"), Some("RoCE v2"));
    assert_eq!(gids[1].label("netdev"), Some("ens1f0np0"));
    assert_eq!(gids[1].label("family"), Some("ipv4_mapped"));

    // Hardware counters: mapped per driver, the rest by kernel name.
    assert_eq!(p.value("roce_cnp_sent_total", &mlx).as_deref(), Some("11"));
    assert_eq!(
        p.value("roce_cnp_handled_total", &mlx).as_deref(),
        Some("12")
    );
    assert_eq!(
        p.value("roce_out_of_buffer_drops_total", &mlx).as_deref(),
        Some("13")
    );
    assert_eq!(
        p.value("roce_duplicate_requests_total", &rxe).as_deref(),
        Some("1025")
    );
    assert_eq!(
        p.value("roce_retransmissions_total", &rxe).as_deref(),
        Some("38")
    );
    let stat = |dev: &str, name: &str| {
        p.value(
            "roce_port_hw_stat_total",
            &[("device", dev), ("port", "1"), ("stat", name)],
        )
    };
    // Counters without a known meaning are the hw_stat group, off by default.
    assert_eq!(stat("rxe0", "ack_deferred"), None);
    let mut with_hw_stat = build();
    with_hw_stat.groups.set(groups::Group::HwStat, true);
    let text_hw = exposition::encode(snapshot_of(sample_snapshot()), &with_hw_stat, Format::Text);
    let p_hw = check_text_structure("sample snapshot with hw_stat", &text_hw);
    let stat = |dev: &str, name: &str| {
        p_hw.value(
            "roce_port_hw_stat_total",
            &[("device", dev), ("port", "1"), ("stat", name)],
        )
    };
    assert_eq!(stat("rxe0", "ack_deferred").as_deref(), Some("1"));
    assert_eq!(stat("rxe0", "sent_pkts").as_deref(), Some("180690"));
    // mlx5's rnr_nak_retry_err (received RNR NAKs) is its semantic family.
    assert_eq!(stat("mlx5_0", "rnr_nak_retry_err"), None);
    let mlx5 = [("device", "mlx5_0"), ("port", "1")];
    assert_eq!(
        p.value("roce_rnr_naks_received_total", &mlx5).as_deref(),
        Some("14")
    );
    // A mapped counter is not also exported under its kernel name.
    assert_eq!(stat("rxe0", "duplicate_request"), None);
    assert_eq!(stat("mlx5_0", "np_cnp_sent"), None);
    // (Where they were read, netlink, is roce_port_info's hw_counters,
    // asserted above.)

    // Families without samples are left out.
    assert!(!p.types.iter().any(|(n, _)| n == "roce_icrc_errors_total"));
}

#[test]
fn every_mapping_reaches_its_family() {
    for m in meaning::HW_MAPPINGS {
        let driver = match m.provider {
            meaning::Provider::Mlx5 => "mlx5_core",
            meaning::Provider::Rxe => "rxe",
            meaning::Provider::BnxtRe => "bnxt_en",
            meaning::Provider::Irdma => "ice",
            meaning::Provider::Efa => "efa",
            meaning::Provider::Ionic => "ionic",
        };
        let rdma = RdmaSnapshot {
            devices: vec![Device {
                name: "dev0".into(),
                driver: Some(driver.into()),
                ports: vec![Port {
                    number: 1,
                    hw_counters: counters(&[(m.name, 77)]),
                    ..Port::default()
                }],
                ..Device::default()
            }],
            errors: Vec::new(),
        };
        let p = parse(&encode_text(rdma));
        let family = hw_counters::family(m.meaning).exposed_name();
        assert_eq!(
            p.value(&family, &[("device", "dev0"), ("port", "1")])
                .as_deref(),
            Some("77"),
            "{:?} {} → {family}",
            m.provider,
            m.name
        );
    }
}

#[test]
fn hostile_label_values_stay_inside_their_quotes() {
    let hostile = "evil\"} 1\nroce_port_up{device=\"x\\";
    let mut rdma = sample_snapshot();
    rdma.devices[0].name = hostile.to_string();
    rdma.devices[0].fw_version = Some("a\\b\nc".into());
    rdma.devices[0].ports[0].netdev = Some("ens\"1".into());
    for format in [Format::Text, Format::OpenMetrics] {
        let text = exposition::encode(snapshot_of(rdma.clone()), &build(), format);
        let p = parse(&text);
        let info: Vec<&Sample> = p.find("roce_device_info").collect();
        assert_eq!(info.len(), 2, "{format:?}");
        assert_eq!(info[0].label("device"), Some(hostile), "{format:?}");
        assert_eq!(info[0].label("fw_version"), Some("a\\b\nc"), "{format:?}");
        let port_info: Vec<&Sample> = p.find("roce_port_info").collect();
        assert_eq!(port_info[0].label("netdev"), Some("ens\"1"), "{format:?}");
        // The injected text did not become a series of its own.
        assert_eq!(p.find("roce_port_up").count(), 2, "{format:?}");
        if format == Format::Text {
            check_text_structure("hostile", &text);
            if let Some(report) = promtool_check(&text) {
                assert!(report.trim().is_empty(), "promtool: {report}");
            }
        }
    }
}

#[test]
fn empty_snapshot_still_reports_the_exporter() {
    let text = exposition::encode(Arc::new(Snapshot::default()), &build(), Format::Text);
    let p = check_text_structure("empty", &text);
    assert_eq!(
        p.value("roce_exporter_build_info", &[("version", "0.0.0-test")])
            .as_deref(),
        Some("1")
    );
    assert_eq!(
        p.value("roce_sample_interval_seconds", &[]).as_deref(),
        Some("5.0")
    );
    assert!(!p.types.iter().any(|(n, _)| n.starts_with("roce_port_")));
    let om = exposition::encode(Arc::new(Snapshot::default()), &build(), Format::OpenMetrics);
    assert!(om.ends_with("# EOF\n"));
}

#[test]
fn golden_masking_covers_what_varies() {
    let text = "roce_collector_duration_seconds{collector=\"rdma\"} 0.01\n\
                roce_sample_timestamp_seconds 1.7e9\n\
                roce_exporter_build_info{version=\"1\",revision=\"x\",branch=\"b\",rustversion=\"y\"} 1\n";
    assert_eq!(
        mask(text),
        "roce_collector_duration_seconds{collector=\"rdma\"} <duration>\n\
         roce_sample_timestamp_seconds <timestamp>\n\
         roce_exporter_build_info{<build>} 1\n"
    );
}

/// Cost of one encode of a large host (128 ports, every counter); prints,
/// asserts nothing. `cargo test --release --test it exposition:: -- --ignored
/// encode_cost --nocapture`.
#[test]
#[ignore]
fn encode_cost() {
    let template = sample_snapshot();
    let mut devices = Vec::new();
    for d in 0..64 {
        let mut dev = template.devices[0].clone();
        dev.name = format!("mlx5_{d}");
        let mut port = dev.ports[0].clone();
        port.counters = (0..21)
            .map(|i| Counter {
                name: format!("c{i}").into(),
                value: i,
            })
            .collect();
        port.hw_counters = meaning::HW_MAPPINGS
            .iter()
            .filter(|m| m.provider == meaning::Provider::Mlx5)
            .map(|m| Counter {
                name: m.name.into(),
                value: 1,
            })
            .chain((0..20).map(|i| Counter {
                name: format!("h{i}").into(),
                value: i,
            }))
            .collect();
        dev.ports = vec![port.clone(), Port { number: 2, ..port }];
        devices.push(dev);
    }
    let snapshot = snapshot_of(RdmaSnapshot {
        devices,
        errors: Vec::new(),
    });
    let build = build();
    let runs = 200;
    let start = std::time::Instant::now();
    let mut samples = 0;
    for _ in 0..runs {
        samples += exposition::collect(&snapshot, &build)
            .iter()
            .map(|f| f.len())
            .sum::<usize>();
    }
    let collect = start.elapsed() / runs;
    let start = std::time::Instant::now();
    let mut bytes = 0;
    for _ in 0..runs {
        bytes += exposition::encode(snapshot.clone(), &build, Format::Text).len();
    }
    let encode = start.elapsed() / runs;
    eprintln!(
        "128 ports: {} samples, {} bytes; collect {collect:?}, collect+encode {encode:?}",
        samples / runs as usize,
        bytes / runs as usize
    );
}

#[test]
fn qos_configuration_is_one_series_and_absent_parts_stay_empty() {
    use roce_netdev::qos::{CcRole, CcSource, DcqcnParam, RoceQos};
    use roce_netdev::{DcbOutcome, Netdev, NetdevSnapshot, RdmaPortRef};
    let dcb = roce_netdev::reader::parse_dcb_replay(include_str!(
        "../../crates/netdev/tests/fixtures/dcb/ets-buffers-peer.dcb"
    ))
    .unwrap();
    let netdev = |name: &str, dcb: DcbOutcome, dcqcn: Vec<DcqcnParam>| Netdev {
        name: name.into(),
        rdma: Some(RdmaPortRef {
            device: "mlx5_0".into(),
            port: 1,
        }),
        qos: RoceQos {
            rdma_cm_tos: Some(106),
            ..RoceQos::default()
        },
        dcqcn,
        dcb,
        ..Netdev::default()
    };
    let mut s = (*snapshot_of(sample_snapshot())).clone();
    s.netdev = Some(NetdevSnapshot {
        netdevs: vec![
            netdev(
                "ens1np0",
                DcbOutcome::Ok(dcb),
                vec![DcqcnParam {
                    role: CcRole::Rp,
                    name: "rpg_time_reset",
                    value: 300,
                    source: CcSource::Sysfs,
                }],
            ),
            // PFC only: no ETS, buffers, DCBX or peer series for it.
            netdev(
                "ens2np0",
                DcbOutcome::Ok(roce_netdev::reader::parse_dcb_replay("pfc: 3\n").unwrap()),
                vec![],
            ),
            // DCB unanswered: rdma_cm's ToS alone in the QoS series.
            netdev("ens3np0", DcbOutcome::Failed("EIO".into()), vec![]),
        ],
    });
    let s = Arc::new(s);
    let text = exposition::encode(s.clone(), &build(), Format::Text);
    let l = r#"netdev="ens1np0",device="mlx5_0",port="1""#;
    for line in [
        format!(
            r#"roce_qos_info{{{l},trust="dscp",pfc="3",dscp_priority="26=3",prio_tc="0,0,0,3,0,0,6,0",tc_tsa="ets,ets,ets,ets,ets,ets,strict,ets",tc_bw="50,0,0,50,0,0,0,0",prio_buffer="0,0,0,1,0,0,0,0",buffer_size="130944,130944,0,0,0,0,0,0",buffer_total="262144",dcbx="firmware_ieee",rdma_cm_tos="106"}} 1"#
        ),
        format!(r#"roce_qos_peer_info{{{l},standard="ieee",pfc="4",prio_tc=""}} 1"#),
        format!(r#"roce_qos_peer_dscp_priority{{{l},dscp="26"}} 4"#),
        format!(
            r#"roce_dcqcn_parameters_info{{{l},source="sysfs",parameters="rp.rpg_time_reset=300"}} 1"#
        ),
        // PFC only: the parts the driver did not report are empty
        r#"roce_qos_info{netdev="ens2np0",device="mlx5_0",port="1",trust="pcp",pfc="3",dscp_priority="none",prio_tc="",tc_tsa="",tc_bw="",prio_buffer="",buffer_size="",buffer_total="",dcbx="",rdma_cm_tos="106"} 1"#
            .to_string(),
        // DCB unknown: every DCB part empty, the fleet comparisons skip them
        r#"roce_qos_info{netdev="ens3np0",device="mlx5_0",port="1",trust="",pfc="",dscp_priority="",prio_tc="",tc_tsa="",tc_bw="",prio_buffer="",buffer_size="",buffer_total="",dcbx="",rdma_cm_tos="106"} 1"#
            .to_string(),
        r#"roce_pfc_enabled{netdev="ens2np0",device="mlx5_0",port="1",priority="3"} 1"#.to_string(),
    ] {
        assert!(text.contains(&line), "missing {line}\n{text}");
    }
    // the per-parameter gauges are a group's, off by default; PFC enable of
    // a priority with PFC off and no DSCP mapped is an idle priority's
    assert!(!text.contains("roce_dcqcn_parameter{"), "{text}");
    assert!(
        !text.contains(
            r#"roce_pfc_enabled{netdev="ens2np0",device="mlx5_0",port="1",priority="0"}"#
        ),
        "{text}"
    );
    let mut every = build();
    every.groups = groups::Groups::all();
    let all = exposition::encode(s, &every, Format::Text);
    for line in [
        format!(
            r#"roce_dcqcn_parameter{{{l},role="rp",parameter="rpg_time_reset",source="sysfs"}} 300"#
        ),
        r#"roce_pfc_enabled{netdev="ens2np0",device="mlx5_0",port="1",priority="0"} 0"#.into(),
    ] {
        assert!(all.contains(&line), "missing {line}\n{all}");
    }
    for family in ["roce_qos_peer_info", "roce_dcqcn_parameters_info"] {
        assert!(
            !text.contains(&format!("{family}{{netdev=\"ens2np0\"")),
            "{family} for ens2np0\n{text}"
        );
        assert_eq!(
            text.lines()
                .filter(|x| x.starts_with(&format!("{family}{{")))
                .count(),
            1,
            "{family}"
        );
    }
}

/// The demo tree's exposition (`roce_exporter once`), with `flags` added.
fn demo_text(flags: &[String]) -> String {
    let demo = repo().join("examples/demo-gpu-node");
    let out = Command::new(BIN)
        .current_dir(repo())
        .arg("once")
        .arg("--config.file")
        .arg(demo.join("demo.yml"))
        .arg("--path.sysfs")
        .arg(demo.join("sys"))
        .arg("--path.procfs")
        .arg(demo.join("proc"))
        .args(["--log.level", "error"])
        .args(flags)
        .env_remove("RUST_LOG")
        .output()
        .expect("run roce_exporter once");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("exposition is UTF-8")
}

/// Series of the demo tree by budget row, with `flags` added.
fn demo_series(flags: &[String]) -> BTreeMap<&'static str, usize> {
    let text = demo_text(flags);
    let mut rows = std::collections::BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        let family = families::find(name)
            .or_else(|| {
                ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).and_then(families::find))
            })
            .unwrap_or_else(|| panic!("{name} is in no family table"));
        *rows.entry(groups::budget_row(family)).or_insert(0) += 1;
    }
    rows
}

/// The demo tree's exposition stays within the series budget documented in
/// docs/metrics.md (groups::BUDGET), by default and with every group on.
#[test]
fn demo_tree_stays_within_the_series_budget() {
    let all: Vec<String> = groups::Group::ALL
        .iter()
        .map(|g| format!("--{}", g.on_flag()))
        .collect();
    let default = demo_series(&[]);
    let every = demo_series(&all);
    let measured = |rows: &BTreeMap<&str, usize>| {
        rows.iter()
            .map(|(r, n)| format!("{r}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let report = format!(
        "measured default: {}\nmeasured with every group: {}",
        measured(&default),
        measured(&every)
    );
    for row in default.keys().chain(every.keys()) {
        assert!(
            groups::BUDGET.iter().any(|b| b.row == *row),
            "row {row} has no budget\n{report}"
        );
    }
    for b in groups::BUDGET {
        let d = default.get(b.row).copied().unwrap_or(0);
        let a = every.get(b.row).copied().unwrap_or(0);
        assert!(
            d <= b.default,
            "{}: {d} series by default, budget {}\n{report}",
            b.row,
            b.default
        );
        assert!(
            a <= b.all,
            "{}: {a} series with every group, budget {}\n{report}",
            b.row,
            b.all
        );
    }
    // the default is leaner than everything on, and every group can be off
    let total = |rows: &BTreeMap<&str, usize>| rows.values().sum::<usize>();
    assert!(
        total(&default) <= groups::DEMO_SERIES_CEILING,
        "{} series by default\n{report}",
        total(&default)
    );
    assert!(total(&default) < total(&every), "{report}");
    let none: Vec<String> = groups::Group::ALL
        .iter()
        .map(|g| format!("--{}", g.off_flag()))
        .collect();
    let bare = demo_series(&none);
    for g in groups::Group::ALL
        .iter()
        .filter(|g| !g.families().is_empty())
    {
        assert!(
            !bare.contains_key(g.name()),
            "{} still exported: {bare:?}",
            g.name()
        );
    }
}

/// mlx5's rx_corrected_bits_phy is the register FEC_GET reports as
/// corrected bits (en_stats.c, fec_set_corrected_bits_total reads
/// phy_corrected_bits of the PPCNT physical layer statistical group): one
/// series of it by default, the driver's total with the lanes group.
#[test]
fn fec_corrected_bits_are_one_series_unless_lanes_is_on() {
    let l = r#"netdev="ens1np0",device="mlx5_0",port="1""#;
    let fec_get = format!(r#"roce_fec_corrected_bits_total{{{l},lane=""}} "#);
    let driver = format!(r#"roce_phy_errors_total{{{l},kind="fec_corrected_bits",lane=""}} "#);
    let value_of = |text: &str, series: &str| {
        text.lines()
            .find_map(|x| x.strip_prefix(series))
            .map(str::to_string)
    };
    // The pre-FEC bit error rate of the dashboards and rules stays fed.
    let default = demo_text(&[]);
    let bits = value_of(&default, &fec_get);
    assert!(bits.is_some(), "{fec_get}\n{default}");
    assert_eq!(value_of(&default, &driver), None, "{default}");
    let lanes = demo_text(&["--collector.lanes".to_string()]);
    assert_eq!(value_of(&lanes, &driver), bits, "{lanes}");
    assert_eq!(value_of(&lanes, &fec_get), bits, "{lanes}");
}
