//! `roce_exporter check`: one-shot fabric checklist. Samples twice over a
//! window with the server's sources, runs the rules, and hands the history
//! and findings to the checklist (crates/checklist), which builds the report
//! and its text form.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub use roce_checklist::{build_report, render_text, Item, NcclSetting, Report, Status};

use crate::config::Config;
use crate::host::HostPaths;
use crate::rules;
use crate::sampler::Sampler;
use crate::snapshot::SourceState;
use crate::sources;

/// Why `check` could not judge the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// Without the RDMA devices there is nothing to judge.
    #[error("the rdma collector failed: {0}")]
    RdmaFailed(String),
}

/// Takes two samples `window` apart and builds the report. `progress`
/// shows a countdown on stderr while waiting (only on a terminal).
pub fn run(
    config: &Config,
    paths: &HostPaths,
    window: Duration,
    progress: bool,
) -> Result<Report, CheckError> {
    run_keeping(config, paths, window, progress).map(|(report, _)| report)
}

/// [`run`], handing back the sampler too (`check --load` samples on).
pub fn run_keeping(
    config: &Config,
    paths: &HostPaths,
    window: Duration,
    progress: bool,
) -> Result<(Report, Sampler), CheckError> {
    // The last load test's results are the server's to export; a check
    // judges what it samples itself (and `--load` what it measures).
    let sources = sources::all(config, paths)
        .into_iter()
        .filter(|s| s.name() != "load_test")
        .collect();
    let mut sampler = Sampler::new(sources, config);
    let first = sampler.sample();
    if let Some(failed) = first
        .source("rdma")
        .filter(|s| matches!(s.state, SourceState::Failed(_)))
    {
        return Err(CheckError::RdmaFailed(
            failed.state.detail().unwrap_or("").to_string(),
        ));
    }
    wait(window, progress && std::io::stderr().is_terminal());
    let second = sampler.sample();
    let history = vec![first, second.clone()];
    let findings = rules::evaluate(&history, &config.rules, &config.expect);
    Ok((
        build_report(&history, findings, window, &config.expect),
        sampler,
    ))
}

fn wait(window: Duration, show: bool) {
    let start = Instant::now();
    let mut err = std::io::stderr();
    while start.elapsed() < window {
        if show {
            let left = window.saturating_sub(start.elapsed());
            let _ = write!(
                err,
                "\rsampling counters: {:>4.1}s left ",
                left.as_secs_f64()
            );
            let _ = err.flush();
        }
        std::thread::sleep(Duration::from_millis(100).min(window.saturating_sub(start.elapsed())));
    }
    if show {
        let _ = write!(err, "\r{:40}\r", "");
        let _ = err.flush();
    }
}
