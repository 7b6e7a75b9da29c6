//! Rules on the verbs probes' results: probe rounds failing, and round-trip
//! times well above their own earlier average. Both read the probe
//! statistics (cumulative since the probe thread started) over a window,
//! reset-aware, and stay silent without probe results or history.

use std::time::Duration;

use serde::Serialize;

use roce_probe::ProbeResults;

use super::history::FollowedCounter;
use super::ports::{find_port, fmt_num};
use super::rates::span;
use super::settings::section;
use super::{Context, Finding, Rule, RuleId, Severity, Subject};
use crate::snapshot::Snapshot;

pub const RULES: &[Rule] = &[
    Rule {
        id: RuleId::ProbeFailures,
        checks: "probe rounds fail less than rules.probe_failures.max_ratio of the time",
        evaluate: probe_failures,
    },
    Rule {
        id: RuleId::ProbeLatencyRegression,
        checks: "probe round-trip times stay within rules.probe_latency_regression.factor of their earlier average",
        evaluate: probe_latency_regression,
    },
];

/// Rounds of history before the window needed for a latency baseline: a
/// few rounds are too noisy to call anything a regression.
pub const MIN_BASELINE_ROUNDS: u64 = 30;

fn results(s: &Snapshot) -> Option<&ProbeResults> {
    s.probes.as_ref()
}

fn subject(s: &Snapshot, device: &str, port: u8) -> Subject {
    let netdev = find_port(s, device, u32::from(port)).and_then(|(_, p)| p.netdev.clone());
    Subject::port(device, u32::from(port), netdev.as_deref())
}

fn probe_failures(ctx: &Context) -> Vec<Finding> {
    let Some(latest) = ctx.latest() else {
        return vec![];
    };
    let Some(r) = results(latest) else {
        return vec![];
    };
    let cfg = &ctx.rules.probe_failures;
    let mut out = Vec::new();
    for (t, last) in &r.targets {
        let series = ctx.history.probe(&t.device, t.port, t.gid_index);
        let read = |value| series.increase(value, cfg.window);
        let (Some(requests), Some(failures), Some(successes)) = (
            read(FollowedCounter::ProbeRequests),
            read(FollowedCounter::ProbeFailures),
            read(FollowedCounter::ProbeSuccesses),
        ) else {
            continue;
        };
        if requests.amount == 0 || failures.amount == 0 {
            continue;
        }
        let ratio = failures.amount as f64 / requests.amount as f64;
        if ratio <= cfg.max_ratio {
            continue;
        }
        let down = successes.amount == 0 && last.last_ok == Some(false);
        let subject = subject(latest, &t.device, t.port);
        let last_error = last
            .last_failure
            .as_ref()
            .map(|f| format!("; last failure {}: {}", f.reason.as_str(), f.message))
            .unwrap_or_default();
        out.push(Finding {
            rule: RuleId::ProbeFailures,
            severity: if down { Severity::Critical } else { Severity::Warning },
            finding: if down {
                format!(
                    "{}: every RDMA probe in the last {} failed: the port cannot complete RDMA operations",
                    subject.describe(),
                    span(requests.seconds)
                )
            } else {
                format!(
                    "{}: {}% of RDMA probes failed in the last {}",
                    subject.describe(),
                    fmt_num((ratio * 100.0).round()),
                    span(requests.seconds)
                )
            },
            evidence: format!(
                "{} of {} probe rounds failed (GID index {}){last_error}; expected <= {}% (rules.probe_failures.max_ratio)",
                failures.amount,
                requests.amount,
                t.gid_index,
                fmt_num(cfg.max_ratio * 100.0)
            ),
            fix: "Read the failure reason: a port or GID problem shows in the other findings; QP or memory registration errors point at the driver or resource limits (ulimit -l, dmesg)".into(),
            verify: format!(
                "ibv_rc_pingpong -d {} -i {} -g {}  # and a second shell: ibv_rc_pingpong -d {} -i {} -g {} localhost",
                t.device, t.port, t.gid_index, t.device, t.port, t.gid_index
            ),
            subject,
        });
    }
    out
}

fn probe_latency_regression(ctx: &Context) -> Vec<Finding> {
    let Some(latest) = ctx.latest() else {
        return vec![];
    };
    let Some(r) = results(latest) else {
        return vec![];
    };
    let cfg = &ctx.rules.probe_latency_regression;
    let mut out = Vec::new();
    for (t, _) in &r.targets {
        let series = ctx.history.probe(&t.device, t.port, t.gid_index);
        let count = series.increase(FollowedCounter::ProbeRttCount, cfg.window);
        // Nanoseconds, so that the integer window arithmetic applies.
        let sum = series.increase(FollowedCounter::ProbeRttSumNanos, cfg.window);
        let (Some(count), Some(sum)) = (count, sum) else {
            continue;
        };
        // A restarted probe thread starts its statistics over: no baseline.
        if count.resets > 0 || sum.resets > 0 || count.amount == 0 {
            continue;
        }
        // The baseline: the probe's cumulative mean at the window's start.
        let (Some(first_count), Some(first_sum)) = (
            series.first_within(FollowedCounter::ProbeRttCount, cfg.window),
            series.first_within(FollowedCounter::ProbeRttSumNanos, cfg.window),
        ) else {
            continue;
        };
        if first_count < MIN_BASELINE_ROUNDS {
            continue;
        }
        let baseline = first_sum as f64 / 1e9 / first_count as f64;
        let recent = sum.amount as f64 / 1e9 / count.amount as f64;
        if baseline <= 0.0 || recent <= baseline * cfg.factor {
            continue;
        }
        let subject = subject(latest, &t.device, t.port);
        out.push(Finding {
            rule: RuleId::ProbeLatencyRegression,
            severity: Severity::Warning,
            finding: format!(
                "{}: RDMA probe round trips take {}x their earlier average",
                subject.describe(),
                fmt_num((recent / baseline * 10.0).round() / 10.0)
            ),
            evidence: format!(
                "mean RTT {} us over the last {} ({} rounds) vs {} us before ({} rounds); expected <= {}x (rules.probe_latency_regression.factor)",
                fmt_num((recent * 1e7).round() / 10.0),
                span(count.seconds),
                count.amount,
                fmt_num((baseline * 1e7).round() / 10.0),
                first_count,
                fmt_num(cfg.factor)
            ),
            fix: "Look for congestion on the port (PFC pauses, CNPs, ECN marks in the other findings), a downtrained PCIe link, or CPU/interrupt load on the host".into(),
            verify: format!(
                "ib_send_lat -d {} -i {} -x {}  # against a peer, compare with the fabric's usual latency",
                t.device, t.port, t.gid_index
            ),
            subject,
        });
    }
    out
}

/// `probe_failures`' section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeFailureRule {
    pub window: Duration,
    /// Share of probe rounds (0..1) that may fail within the window.
    pub max_ratio: f64,
}

section!(ProbeFailureRule {
    window: Duration = "crate::values::opt_duration",
    max_ratio: f64 = "crate::values::opt_share",
});

/// `probe_latency_regression`'s section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeLatencyRule {
    pub window: Duration,
    /// How many times the earlier mean RTT the window's mean may reach.
    pub factor: f64,
}

section!(ProbeLatencyRule {
    window: Duration = "crate::values::opt_duration",
    factor: f64 = "crate::values::opt_factor",
});
