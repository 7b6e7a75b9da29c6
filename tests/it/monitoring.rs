//! The alerts and dashboards against the real Prometheus tools, through
//! `tests/monitoring/run.py` (python3, stdlib only, and Debian's `jsonnet`,
//! which renders the monitoring mixin of `mixin/`): `static` (the shipped
//! files are the mixin's rendering, `promtool check rules`, `promtool test
//! rules` at 15 s, 20 s, 30 s and 60 s scrape intervals, `amtool
//! check-config` with the inhibit rules, one alert per rule of
//! docs/rules.json taking the finding's severity, rate ranges at least 4x the
//! scrape interval, dashboard structure with job and cluster variables, every
//! dashboard query parses, every metric named exists in docs/metrics.md, a
//! runbook section per alert and rule, every runbook link one the exporter
//! serves) and `mixin` (the jsonnet CLI renders the shipped files byte for
//! byte; the mixin vendored alone as a library splits alerts from records; a
//! custom _config with a 20 s scrape interval reaches every rule and
//! dashboard and passes `promtool check rules`) and `e2e` (this build of the
//! exporter on a copy of the demo tree, Debian's prometheus and
//! prometheus-alertmanager with the inhibit rules on loopback, a simulated
//! PFC storm that must reach a webhook receiver with a runbook_url the
//! exporter serves, a flap on a down port that must be inhibited; bounded to
//! 150 s) and `fleet` (a synthetic 1,000-node TSDB with one storming port
//! and four peer-probe faults built by `promtool tsdb create-blocks-from
//! openmetrics`, Prometheus with the rendered recording rules and fleet
//! alerts, every query of the fleet dashboard must find its culprit and the
//! peer-probe alerts name exactly the faults; bounded to 150 s). Without
//! the tools the tests are skipped, except under CI where `.ci/run`
//! installs them. `mixin` is part of the quick test; `static`, `e2e` and
//! `fleet` belong to the full suite (`full_suite` below).

use std::path::Path;
use std::process::Command;

use crate::support::output_of;

/// Exit status of run.py when a required tool is missing.
const MISSING_TOOL: i32 = 3;

fn run_py(args: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let Some(out) = output_of(
        Command::new("python3")
            .arg(root.join("tests/monitoring/run.py"))
            .args(args)
            .current_dir(root),
    ) else {
        return;
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.code() == Some(MISSING_TOOL) {
        assert!(
            std::env::var_os("CI").is_none(),
            "monitoring tools missing under CI (install Debian's prometheus and prometheus-alertmanager):\n{text}"
        );
        eprintln!("skipping:\n{text}");
        return;
    }
    assert!(
        out.status.success(),
        "tests/monitoring/run.py {args:?} failed:\n{text}"
    );
    eprintln!("{text}");
}

/// The jsonnet mixin renders (Debian's jsonnet) to the shipped alerts and
/// dashboards, and follows its _config (job, cluster label, 20 s scrape
/// interval, runbook base, uid prefix).
#[test]
fn mixin_renders_the_shipped_alerts_and_dashboards() {
    run_py(&["mixin"]);
}

/// The runs of Prometheus' own tools and of the whole stack, minutes of CPU
/// between them: .ci/run's full suite runs them (`cargo test --workspace
/// --tests -- --ignored full_suite::`), the quick `cargo test --workspace`
/// does not.
mod full_suite {
    use super::run_py;

    #[test]
    #[ignore = "full suite (.ci/run): promtool test rules at four scrape intervals"]
    fn rules_and_dashboards_check_with_promtool() {
        run_py(&["static"]);
    }

    #[test]
    #[ignore = "full suite (.ci/run): the exporter, Prometheus and Alertmanager end to end"]
    fn pfc_storm_reaches_alertmanager_and_dashboards_have_data() {
        run_py(&["e2e", "--exporter", env!("CARGO_BIN_EXE_roce_exporter")]);
    }

    #[test]
    #[ignore = "full suite (.ci/run): Prometheus over a 1,000-node TSDB"]
    fn fleet_dashboard_finds_the_storming_port_among_1000_nodes() {
        run_py(&["fleet"]);
    }
}
