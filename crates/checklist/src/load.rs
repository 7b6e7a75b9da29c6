//! The load test's part of the report (`check --load`): per run (every
//! port at once, then each port alone) the operator's line per port and
//! for the node (`Measured: X GB/s vs expected Y GB/s`, the fraction, the
//! message size, the bytes moved, whether GPUDirect RDMA was exercised),
//! then the counter rules judged over the run, labelled "under load",
//! with the bytes each port moved beside its verdict. Every status is a
//! finding of the rule table made over the run's two samples; the
//! checklist only reports.

use roce_model::load::{LoadRun, Outcome, PortLoad, RunCounters, RunScope};
use roce_rules::load_test::{gb_per_s, size_text};
use roce_rules::{Area, Finding, RuleId};
use serde::Serialize;

use crate::{area, item, rule_list, status_of, Item, Report, Status};

/// One run in the report's JSON form.
#[derive(Debug, Clone, Serialize)]
pub struct LoadRunReport {
    pub run: LoadRun,
    /// The run's checklist lines (also in the report's checklist).
    pub checklist: Vec<Item>,
}

const COUNTER_AREAS: [Area; 3] = [Area::LinkErrors, Area::Transport, Area::Congestion];

fn scope_title(run: &LoadRun) -> String {
    match (run.scope, run.ports.first()) {
        (RunScope::Alone, Some(p)) => format!("{} port {} alone", p.device, p.port),
        _ => "every port at once".into(),
    }
}

/// Adds one run, with the findings the rule table made over its two
/// samples, to the report: its lines, and its findings (the counter ones
/// labelled "under load").
pub fn add_run(report: &mut Report, run: LoadRun, findings: Vec<Finding>) {
    let title = scope_title(&run);
    let (section, counters_section) = match run.scope {
        RunScope::All => (
            "Load test: every port at once",
            "Counter rules under load: every port at once",
        ),
        RunScope::Alone => (
            "Load test: each port alone",
            "Counter rules under load: each port alone",
        ),
    };
    let mut lines = Vec::new();
    let on = |p: &PortLoad, areas: &'static [Area]| {
        findings
            .iter()
            .filter(move |f| {
                f.subject.device.as_deref() == Some(p.device.as_str())
                    && f.subject.port == Some(p.port)
                    && areas.contains(&area(f))
            })
            .collect::<Vec<_>>()
    };
    for p in &run.ports {
        let found = on(p, &[Area::LoadTest]);
        // A finding decides; without one only a completed, measured stream
        // against a known line rate is ok, anything else was not judged.
        let judged = p.outcome == Outcome::Completed
            && p.at_largest().is_some()
            && p.expected_bytes_per_second.is_some();
        let status = if found.is_empty() {
            Status::Ok.checked(judged)
        } else {
            status_of(found.iter().copied())
        };
        lines.push(item(section, status, port_line(p)));
    }
    if run.scope == RunScope::All {
        let node = findings
            .iter()
            .filter(|f| f.rule == RuleId::LoadTestNodeBelowLineRate);
        let text = match (run.node_bytes_per_second(), run.node_expected()) {
            (Some(m), Some(e)) if e > 0.0 => format!(
                "node ({} ports): Measured: {} vs expected {} ({:.1}%) at their largest message size",
                run.ports.len(),
                gb_per_s(m),
                gb_per_s(e),
                100.0 * m / e
            ),
            _ => "node: not measured (no port reached a sample window)".into(),
        };
        let judged = run.node_bytes_per_second().is_some() && run.node_expected().is_some();
        lines.push(item(section, status_of(node).checked(judged), text));
    }
    for p in &run.ports {
        let found = on(p, &COUNTER_AREAS);
        let moved = moved(p.counters.as_ref(), p.bytes);
        let loaded = p.bytes > 0;
        let (status, text) = if !loaded {
            (
                Status::Unknown,
                format!("{}: no load in the window ({moved})", port_name(p)),
            )
        } else if found.is_empty() {
            match &p.counters {
                Some(_) => (
                    Status::Ok,
                    format!("{}: no finding under load, {moved}", port_name(p)),
                ),
                None => (
                    Status::Unknown,
                    format!(
                        "{}: counters not read around the run, {moved}",
                        port_name(p)
                    ),
                ),
            }
        } else {
            (
                status_of(found.iter().copied()),
                format!(
                    "{}: {} under load (below), {moved}",
                    port_name(p),
                    rule_list(found.iter().copied())
                ),
            )
        };
        lines.push(item(counters_section, status, text));
    }
    report.checklist.extend(lines.iter().cloned());
    for mut f in findings {
        if COUNTER_AREAS.contains(&area(&f)) {
            f.finding = format!("under load ({title}): {}", f.finding);
        }
        if !report
            .findings
            .iter()
            .any(|g| g.rule == f.rule && g.subject == f.subject && g.finding == f.finding)
        {
            report.findings.push(f);
        }
    }
    report.load.push(LoadRunReport {
        run,
        checklist: lines,
    });
}

fn port_name(p: &PortLoad) -> String {
    match &p.netdev {
        Some(n) => format!("{} port {} ({n})", p.device, p.port),
        None => format!("{} port {}", p.device, p.port),
    }
}

/// `195.2 GB moved (port counters: 196.1 GB sent)`.
fn moved(c: Option<&RunCounters>, written: u64) -> String {
    let gb = |b: u64| format!("{:.2} GB", b as f64 / 1e9);
    let counters = match c {
        Some(RunCounters {
            tx_bytes: Some(t),
            rx_bytes: Some(r),
            ..
        }) => format!("port counters: {} sent, {} received", gb(*t), gb(*r)),
        Some(RunCounters {
            tx_packets: Some(t),
            rx_packets: Some(r),
            ..
        }) => format!("port counters: {t} packets sent, {r} received (no byte counter)"),
        _ => "no port counter read".into(),
    };
    format!("{} written ({counters})", gb(written))
}

fn port_line(p: &PortLoad) -> String {
    let peer = match (&p.peer_node, &p.peer_device, p.peer_port) {
        (Some(n), Some(d), Some(port)) => format!(" -> {n} {d} port {port}"),
        _ => p
            .peer
            .as_deref()
            .map(|x| format!(" -> {x}"))
            .unwrap_or_default(),
    };
    let head = format!("{}{peer}", port_name(p));
    let gdr = if p.gdr_exercised() {
        "GDR: exercised (GPU memory through dma-buf)".to_string()
    } else {
        match (&p.memory_note, p.memory.as_str()) {
            (Some(why), _) => format!("GDR: not exercised (host memory: {why})"),
            (None, "gpu") => "GDR: not exercised (the stream did not complete)".into(),
            _ => "GDR: not exercised (host memory)".into(),
        }
    };
    match &p.outcome {
        Outcome::NotRun { message } => format!("{head}: not run: {message}"),
        outcome => {
            let figure = match (p.at_largest(), p.expected_bytes_per_second) {
                (Some((size, m)), Some(e)) if e > 0.0 => format!(
                    "Measured: {} vs expected {} ({:.1}%) at {}",
                    gb_per_s(m),
                    gb_per_s(e),
                    100.0 * m / e,
                    size_text(size)
                ),
                (Some((size, m)), _) => format!(
                    "Measured: {} at {} (no line rate to compare with)",
                    gb_per_s(m),
                    size_text(size)
                ),
                (None, _) => "Measured: nothing (no size reached its sample window)".into(),
            };
            let sizes = p
                .sizes
                .iter()
                .map(|s| match s.bytes_per_second {
                    Some(b) => format!("{} {}", size_text(s.size), gb_per_s(b)),
                    None => format!("{} not measured", size_text(s.size)),
                })
                .collect::<Vec<_>>()
                .join(", ");
            let stopped = match outcome {
                Outcome::Aborted { reason, .. } => format!("; stopped early ({reason})"),
                _ => String::new(),
            };
            let responder = p
                .responder_bytes
                .map(|b| format!(", responder counted {:.2} GB", b as f64 / 1e9))
                .unwrap_or_default();
            format!(
                "{head}: {figure}; per size: {sizes}{stopped}; {:.2} GB written{responder}; {gdr}",
                p.bytes as f64 / 1e9
            )
        }
    }
}

/// The line for a test that could not start at all.
pub fn not_run(report: &mut Report, why: &str) {
    report.checklist.push(item(
        "Load test",
        Status::Unknown,
        format!("not run: {why}"),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_model::load::SizeLoad;
    use roce_rules::{Severity, Subject};

    fn port(device: &str, gb: f64, bytes: u64) -> PortLoad {
        PortLoad {
            device: device.into(),
            port: 1,
            netdev: Some("ens1np0".into()),
            peer: Some("node-b:9879".into()),
            peer_node: Some("node-b".into()),
            peer_device: Some(device.into()),
            peer_port: Some(1),
            expected_bytes_per_second: Some(50e9),
            sizes: vec![SizeLoad {
                size: 8 << 20,
                bytes_per_second: Some(gb * 1e9),
                sample_seconds: 2.5,
                bytes,
            }],
            bytes,
            responder_bytes: Some(bytes),
            counters: Some(RunCounters {
                seconds: 7.0,
                tx_bytes: Some(bytes),
                rx_bytes: Some(1_000_000),
                ..RunCounters::default()
            }),
            outcome: Outcome::Completed,
            memory: "gpu".into(),
            memory_note: None,
        }
    }

    fn report() -> Report {
        crate::build_report(
            &[],
            vec![],
            std::time::Duration::from_secs(10),
            &roce_rules::settings::Expectations::default(),
        )
    }

    #[test]
    fn a_run_prints_the_operators_lines_and_labels_its_counter_findings_under_load() {
        let mut r = report();
        let pause = Finding {
            rule: RuleId::PfcPauseReceived,
            severity: Severity::Warning,
            subject: Subject::port("mlx5_1", 1, Some("ens1np0")),
            finding: "mlx5_1 port 1 (ens1np0) paused 30% of the window".into(),
            evidence: String::new(),
            fix: String::new(),
            verify: String::new(),
        };
        let run = LoadRun {
            scope: RunScope::All,
            started_at: 0.0,
            seconds: 7.0,
            ports: vec![
                port("mlx5_0", 48.9, 342_000_000_000),
                port("mlx5_1", 0.0, 0),
            ],
        };
        add_run(&mut r, run, vec![pause]);
        let text = crate::render_text(&r);
        assert!(text.contains("Load test: every port at once\n  [ok]   mlx5_0 port 1 (ens1np0) -> node-b mlx5_0 port 1: Measured: 48.9 GB/s vs expected 50.0 GB/s (97.8%) at 8 MiB"), "{text}");
        assert!(
            text.contains("GDR: exercised (GPU memory through dma-buf)"),
            "{text}"
        );
        assert!(
            text.contains("node (2 ports): Measured: 48.9 GB/s vs expected 100.0 GB/s (48.9%)"),
            "{text}"
        );
        assert!(text.contains("Counter rules under load: every port at once\n  [ok]   mlx5_0 port 1 (ens1np0): no finding under load, 342.00 GB written (port counters: 342.00 GB sent, 0.00 GB received)"), "{text}");
        // A port the run did not load is not judged "ok".
        assert!(
            text.contains("[ -- ] mlx5_1 port 1 (ens1np0): no load in the window"),
            "{text}"
        );
        assert!(
            text.contains("under load (every port at once): mlx5_1 port 1 (ens1np0) paused 30%"),
            "{text}"
        );
        assert_eq!(r.load.len(), 1);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["load"][0]["run"]["scope"], "all");
        assert_eq!(
            json["load"][0]["checklist"].as_array().map(Vec::len),
            Some(5)
        );
    }

    #[test]
    fn a_port_not_run_says_why_and_gdr_only_counts_when_exercised() {
        let mut r = report();
        let mut p = port("mlx5_0", 0.0, 0);
        p.sizes.clear();
        p.outcome = Outcome::NotRun {
            message: "node-b:9879: refused (busy): a load test already runs on mlx5_0 port 1"
                .into(),
        };
        add_run(
            &mut r,
            LoadRun {
                scope: RunScope::Alone,
                started_at: 0.0,
                seconds: 0.0,
                ports: vec![p],
            },
            vec![],
        );
        let text = crate::render_text(&r);
        assert!(text.contains("Load test: each port alone\n  [ -- ] mlx5_0 port 1 (ens1np0) -> node-b mlx5_0 port 1: not run: node-b:9879: refused (busy)"), "{text}");
        let mut host = port("mlx5_0", 40.0, 1);
        host.memory = "host".into();
        host.memory_note = Some("CUDA: cannot load libcuda.so.1".into());
        assert!(port_line(&host)
            .contains("GDR: not exercised (host memory: CUDA: cannot load libcuda.so.1)"));
    }
}
