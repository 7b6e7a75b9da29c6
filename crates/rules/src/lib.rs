//! Rules: pure functions from the snapshot history to findings. Each rule
//! reads only snapshots and the configuration (no clock, no I/O), stays
//! silent when its inputs are absent on this host, and says what is wrong,
//! the evidence, the fix and a command that verifies it.
//!
//! The [`Engine`] is the only stateful part: it keeps the [`History`] of
//! followed counters, and a finding active until its condition has stayed
//! false for the hold time, so findings do not flap.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use history::History;
use roce_model::{meaning, snapshot, values};
use settings::{Expectations, RulesConfig};
use snapshot::Snapshot;

pub mod aer;
pub mod completions;
pub mod congestion;
pub mod exporter;
pub mod fabric;
pub mod fec;
pub mod history;
pub mod lldp;
pub mod load_test;
pub mod measured;
pub mod nccl_advice;
pub mod nccl_seen;
pub mod peer_probes;
pub mod phys;
pub mod ports;
pub mod probes;
pub mod qos;
pub mod rates;
pub mod reads;
pub mod settings;
pub mod switch_side;
pub mod table;
pub mod topology;
pub mod window;

pub use roce_model::finding::{Finding, Severity, Subject};
pub use table::{Area, RuleId};

/// The text of a panic payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// What a rule reads.
pub struct Context<'a> {
    /// The sample being evaluated.
    pub latest: Option<&'a Snapshot>,
    /// The followed counters of the samples before it, and of it, last.
    pub history: &'a History,
    pub rules: &'a RulesConfig,
    pub expect: &'a Expectations,
}

impl Context<'_> {
    pub fn latest(&self) -> Option<&Snapshot> {
        self.latest
    }
}

/// A rule: its id (its row in [`table`]), what it checks, and the pure
/// function.
pub struct Rule {
    pub id: RuleId,
    pub checks: &'static str,
    pub evaluate: fn(&Context) -> Vec<Finding>,
}

/// Every rule, in the order findings are listed.
pub fn all() -> Vec<&'static Rule> {
    let mut rules: Vec<&'static Rule> = Vec::new();
    rules.extend(ports::RULES);
    rules.extend(fabric::RULES);
    rules.extend(qos::RULES);
    rules.extend(lldp::RULES);
    rules.extend(switch_side::RULES);
    rules.extend(rates::RULES);
    rules.extend(completions::RULES);
    rules.extend(congestion::RULES);
    rules.extend(topology::RULES);
    rules.extend(phys::RULES);
    rules.extend(fec::RULES);
    rules.extend(aer::RULES);
    rules.extend(probes::RULES);
    rules.extend(peer_probes::RULES);
    rules.extend(nccl_seen::RULES);
    rules.extend(load_test::RULES);
    rules.extend(exporter::RULES);
    rules
}

/// Runs every enabled rule once over `history` (oldest first; no hold
/// time): for one-shot evaluations.
pub fn evaluate(
    history: &[Arc<Snapshot>],
    rules: &RulesConfig,
    expect: &Expectations,
) -> Vec<Finding> {
    let followed = History::of(history.iter().map(|s| s.as_ref()));
    evaluate_with(
        history.last().map(|s| s.as_ref()),
        &followed,
        rules,
        expect,
        &mut Vec::new(),
    )
}

/// Runs every enabled rule once on `latest`, with `history` already holding
/// it last; the ids of rules that panicked go to `panicked`.
fn evaluate_with(
    latest: Option<&Snapshot>,
    history: &History,
    rules: &RulesConfig,
    expect: &Expectations,
    panicked: &mut Vec<RuleId>,
) -> Vec<Finding> {
    let ctx = Context {
        latest,
        history,
        rules,
        expect,
    };
    let mut out = Vec::new();
    for rule in all() {
        if rules.disabled.iter().any(|d| rule.id == d.as_str()) {
            continue;
        }
        match run_rule(rule, &ctx) {
            Ok(found) => {
                // The table declares what a rule reports: alerts route on it.
                debug_assert!(
                    found.iter().all(|f| f.rule == rule.id
                        && rule.id.spec().severities.contains(&f.severity)),
                    "{}: a finding with another id or a severity the table does not declare: {found:?}",
                    rule.id
                );
                out.extend(found)
            }
            Err(_) => panicked.push(rule.id),
        }
    }
    sort(&mut out);
    out
}

/// A rule that did not run to its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The rule panicked (a bug meeting input it did not expect): its
    /// findings for this sample are lost; `message` is the panic's.
    #[error("rule {rule} panicked: {message}")]
    Panicked { rule: RuleId, message: String },
}

/// Runs one rule, isolated: a rule that panics (a bug meeting input it did
/// not expect) loses its own findings for this sample, not the others' nor
/// the sampler. The panic is logged here; the caller counts it.
pub fn run_rule(rule: &Rule, ctx: &Context) -> Result<Vec<Finding>, RuleError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (rule.evaluate)(ctx))).map_err(
        |panic| {
            let message = panic_message(panic.as_ref());
            tracing::error!(rule = rule.id.as_str(), error = %message, "rule panicked; its findings are lost for this sample");
            RuleError::Panicked {
                rule: rule.id,
                message,
            }
        },
    )
}

fn sort(findings: &mut [Finding]) {
    findings
        .sort_by(|a, b| (a.severity, &a.subject, a.rule).cmp(&(b.severity, &b.subject, b.rule)));
}

/// Keeps the history of followed counters, and findings active for the
/// hold time after their condition cleared.
#[derive(Debug, Default)]
pub struct Engine {
    history: History,
    active: BTreeMap<(RuleId, Subject), Held>,
    /// Panics per rule since start.
    panics: BTreeMap<RuleId, u64>,
}

#[derive(Debug)]
struct Held {
    finding: Finding,
    /// On the monotonic clock ([`Snapshot::clock`]).
    last_true: Duration,
}

impl Engine {
    /// An engine that keeps every sample it is given (up to
    /// [`history::HISTORY_MAX`]).
    pub fn new() -> Self {
        Engine::default()
    }

    /// An engine that keeps the samples within `retention` of the latest.
    pub fn with_retention(retention: Duration) -> Self {
        Engine {
            history: History::new(retention, history::HISTORY_MAX),
            active: BTreeMap::new(),
            panics: BTreeMap::new(),
        }
    }

    /// Changes how far back the history reaches (a reloaded configuration).
    pub fn set_retention(&mut self, retention: Duration) {
        self.history.set_retention(retention);
    }

    /// Forgets the RDMA devices and ports seen so far: after a reload that
    /// changed the device selection, a device now excluded is not gone.
    pub fn forget_devices(&mut self) {
        self.history.forget_seen();
    }

    /// The followed counters kept.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// How many times each rule that ever panicked has panicked.
    pub fn rule_panics(&self) -> &BTreeMap<RuleId, u64> {
        &self.panics
    }

    /// Adds `latest` to the history, evaluates the rules on it and returns
    /// the active findings: those true now, and those true within `hold`
    /// before it (with the evidence they last had).
    pub fn evaluate(
        &mut self,
        latest: &Snapshot,
        rules: &RulesConfig,
        expect: &Expectations,
    ) -> Vec<Finding> {
        self.history.push(latest);
        let now = latest.clock().unwrap_or(Duration::ZERO);
        let mut panicked = Vec::new();
        let findings = evaluate_with(Some(latest), &self.history, rules, expect, &mut panicked);
        for id in panicked {
            *self.panics.entry(id).or_insert(0) += 1;
        }
        for finding in findings {
            let key = (finding.rule, finding.subject.clone());
            self.active.insert(
                key,
                Held {
                    finding,
                    last_true: now,
                },
            );
        }
        let hold = rules.hold;
        self.active
            .retain(|_, held| now.saturating_sub(held.last_true) < hold || held.last_true == now);
        let mut out: Vec<Finding> = self.active.values().map(|h| h.finding.clone()).collect();
        sort(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_descriptions() {
        assert_eq!(
            Subject::port("mlx5_0", 1, Some("ens1np0")).describe(),
            "mlx5_0 port 1 (ens1np0)"
        );
        assert_eq!(
            Subject {
                netdev: Some("eth0".into()),
                ..Subject::default()
            }
            .describe(),
            "eth0"
        );
        assert_eq!(Subject::default().describe(), "this host");
    }

    #[test]
    fn a_panicking_rule_loses_its_findings_only() {
        fn panics(_: &Context) -> Vec<Finding> {
            panic!("index out of bounds: the len is 0 but the index is 0")
        }
        fn finds(_: &Context) -> Vec<Finding> {
            vec![Finding {
                rule: RuleId::CollectorFailing,
                severity: Severity::Warning,
                subject: Subject::default(),
                finding: "x".into(),
                evidence: String::new(),
                fix: String::new(),
                verify: String::new(),
            }]
        }
        let bad = Rule {
            id: RuleId::PortDown,
            checks: "",
            evaluate: panics,
        };
        let good = Rule {
            id: RuleId::CollectorFailing,
            checks: "",
            evaluate: finds,
        };
        let history = History::default();
        let config = RulesConfig::default();
        let expect = Expectations::default();
        let ctx = Context {
            latest: None,
            history: &history,
            rules: &config,
            expect: &expect,
        };
        let err = run_rule(&bad, &ctx).unwrap_err();
        let RuleError::Panicked { rule, message } = &err;
        assert_eq!(*rule, RuleId::PortDown, "{err}");
        assert!(message.contains("index out of bounds"), "{err}");
        assert_eq!(run_rule(&good, &ctx).map(|f| f.len()), Ok(1));
    }
}
